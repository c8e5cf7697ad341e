//! A `wasi:http` handler of WASI's 0.2.0-rc-2023-11-10 candidate (the
//! `incoming-handler` of `wasi:http@0.2.0-rc-2023-11-10`, and its
//! `outgoing-handler`, `wasi:io` streams and pollables), written on the raw
//! bindings as the tools of late 2023 generated them. It answers
//! `rc-2023-11-10 METHOD PATH BODY`, the request's body read through the
//! candidate's input stream; with an `x-fetch: URL` header it first sends a
//! `GET` there through the candidate's outgoing handler (a 1 s connect
//! timeout, given in the candidate's milliseconds) and appends ` | STATUS
//! UPSTREAM-BODY`, or ` | error CODE`.

mod bindings {
    spin_sdk::wit_bindgen::generate!({
        world: "luge:worlds/handler-rc-2023-11-10",
        path: "../../../wit",
        runtime_path: "::spin_sdk::wit_bindgen::rt",
        generate_all,
    });
}

use bindings::exports::wasi::http0_2_0_rc_2023_11_10::incoming_handler::Guest;
use bindings::wasi::http0_2_0_rc_2023_11_10::outgoing_handler;
use bindings::wasi::http0_2_0_rc_2023_11_10::types::{
    Fields, IncomingBody, IncomingRequest, Method, OutgoingBody, OutgoingRequest,
    OutgoingResponse, RequestOptions, ResponseOutparam, Scheme,
};
use bindings::wasi::io0_2_0_rc_2023_11_10::streams::{InputStream, StreamError};

struct Handler;

bindings::export!(Handler with_types_in bindings);

/// Everything `stream` gives until it closes.
fn read_all(stream: &InputStream) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        match stream.blocking_read(64 * 1024) {
            Ok(chunk) => out.extend_from_slice(&chunk),
            Err(StreamError::Closed) => return out,
            Err(StreamError::LastOperationFailed(_)) => return out,
        }
    }
}

/// A body's bytes, its stream dropped before the body is finished.
fn body_of(body: IncomingBody) -> Vec<u8> {
    let bytes = match body.stream() {
        Ok(stream) => read_all(&stream),
        Err(()) => Vec::new(),
    };
    let _ = IncomingBody::finish(body);
    bytes
}

/// `GET url`: ` | STATUS BODY`, or ` | error WHY`.
fn fetch(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some(("https", rest)) => (Scheme::Https, rest),
        Some((_, rest)) => (Scheme::Http, rest),
        None => return " | error not a URL".to_owned(),
    };
    let (authority, path) = match rest.find('/') {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, "/"),
    };
    let request = OutgoingRequest::new(Fields::new());
    let _ = request.set_method(&Method::Get);
    let _ = request.set_scheme(Some(&scheme));
    let _ = request.set_authority(Some(authority));
    let _ = request.set_path_with_query(Some(path));
    if let Ok(body) = request.body() {
        let _ = OutgoingBody::finish(body, None);
    }
    let options = RequestOptions::new();
    let _ = options.set_connect_timeout_ms(Some(1_000));
    let future = match outgoing_handler::handle(request, Some(options)) {
        Ok(future) => future,
        Err(code) => return format!(" | error {code:?}"),
    };
    let response = loop {
        match future.get() {
            Some(result) => break result,
            None => future.subscribe().block(),
        }
    };
    match response {
        Ok(Ok(response)) => {
            let status = response.status();
            let body = response.consume().map(body_of).unwrap_or_default();
            format!(" | {status} {}", String::from_utf8_lossy(&body))
        }
        Ok(Err(code)) => format!(" | error {code:?}"),
        Err(()) => " | error taken twice".to_owned(),
    }
}

impl Guest for Handler {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let method = match request.method() {
            Method::Get => "GET".to_owned(),
            Method::Post => "POST".to_owned(),
            Method::Put => "PUT".to_owned(),
            other => format!("{other:?}"),
        };
        let path = request.path_with_query().unwrap_or_default();
        let fetch_url = request
            .headers()
            .get(&"x-fetch".to_owned())
            .first()
            .map(|v| String::from_utf8_lossy(v).into_owned());
        let body = request.consume().map(body_of).unwrap_or_default();
        let mut text = format!(
            "rc-2023-11-10 {method} {path} {}",
            String::from_utf8_lossy(&body)
        );
        if let Some(url) = fetch_url {
            text.push_str(&fetch(&url));
        }
        let headers = Fields::new();
        let _ = headers.set(&"content-type".to_owned(), &[b"text/plain".to_vec()]);
        let response = OutgoingResponse::new(headers);
        let _ = response.set_status_code(200);
        let body = response.body().expect("a new response's body");
        ResponseOutparam::set(out, Ok(response));
        if let Ok(stream) = body.write() {
            let _ = stream.blocking_write_and_flush(text.as_bytes());
        }
        let _ = OutgoingBody::finish(body, None);
    }
}
