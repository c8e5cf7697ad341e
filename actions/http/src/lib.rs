//! One `wasi:http/proxy` handler with a few behaviours, chosen by the last
//! segment of the request path (so one component serves several routes):
//!
//! - `.../echo`: answers 200 with the request's body streamed back chunk
//!   by chunk, and headers `x-method`, `x-path` (path and query),
//!   `x-echo` (the request's `x-luge-test`) and every `spin-*` header the
//!   request had (the route information a Spin host gives);
//! - `.../stream?N`: answers N chunks of 64 KiB (default 16) of `a`;
//! - `.../trap`: traps before answering;
//! - `.../spin`: computes until its time limit (or preemption) stops it;
//! - `.../fetch`: sends a GET to the URL in the request's `x-fetch` header
//!   and answers its status and body, or 502 with the error; `fetch?N`
//!   sends N in turn and answers the last one's (or the first error,
//!   prefixed by how many succeeded); an `x-fetch-traceparent` header is
//!   sent on as the request's `traceparent`;
//! - `.../hoard?N`: creates N header-field sets of 1 KiB each and keeps
//!   them all (default: until the host refuses one, which traps), then
//!   answers `held N`;
//! - `.../fresh`: answers how many requests this instance has served
//!   (1 in a fresh instance) and the `LUGE_REQUEST_ID` it was given, as
//!   `1 17`;
//! - anything else: `hello from a wasi:http component` (the benchmark's
//!   hello).

use std::io::{Read as _, Write as _};

use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    Fields, IncomingRequest, Method, OutgoingBody, OutgoingRequest, OutgoingResponse,
    ResponseOutparam, Scheme,
};

wasip2::http::proxy::export!(Handler);

struct Handler;

impl wasip2::exports::http::incoming_handler::Guest for Handler {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let path = request.path_with_query().unwrap_or_default();
        let route = path.split('?').next().unwrap_or("");
        let query = path.split_once('?').map(|(_, q)| q).unwrap_or("");
        match route.rsplit('/').next().unwrap_or("") {
            "echo" => echo(request, out, &path),
            "stream" => stream(out, query.parse().unwrap_or(16)),
            "trap" => panic!("the handler traps on purpose"),
            "spin" => spin(),
            "fetch" => fetch(request, out, query.parse().unwrap_or(1)),
            "hoard" => hoard(out, query.parse().unwrap_or(usize::MAX)),
            "fresh" => fresh(out),
            _ => respond(out, 200, &[], b"hello from a wasi:http component\n"),
        }
    }
}

/// Requests this instance has served.
static SERVED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

fn fresh(out: ResponseOutparam) {
    let served = SERVED.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    let id = std::env::var("LUGE_REQUEST_ID").unwrap_or_default();
    respond(out, 200, &[], format!("{served} {id}").as_bytes());
}

/// Answers `status` with `headers` and `body` in one write.
fn respond(out: ResponseOutparam, status: u16, headers: &[(&str, &[u8])], body: &[u8]) {
    let fields = Fields::new();
    for (name, value) in headers {
        let _ = fields.append(name, value);
    }
    let response = OutgoingResponse::new(fields);
    let _ = response.set_status_code(status);
    let outgoing = response.body().expect("a new response has a body");
    ResponseOutparam::set(out, Ok(response));
    {
        let mut stream = outgoing.write().expect("a new body has a stream");
        let _ = stream.write_all(body);
        let _ = stream.flush();
    }
    let _ = OutgoingBody::finish(outgoing, None);
}

fn echo(request: IncomingRequest, out: ResponseOutparam, path: &str) {
    let method = match request.method() {
        Method::Get => "GET".to_owned(),
        Method::Post => "POST".to_owned(),
        Method::Put => "PUT".to_owned(),
        Method::Delete => "DELETE".to_owned(),
        Method::Other(other) => other,
        other => format!("{other:?}").to_uppercase(),
    };
    let test = request
        .headers()
        .get("x-luge-test")
        .into_iter()
        .next()
        .unwrap_or_default();
    let fields = Fields::new();
    let _ = fields.append("x-method", method.as_bytes());
    let _ = fields.append("x-path", path.as_bytes());
    let _ = fields.append("x-echo", &test);
    for (name, value) in request.headers().entries() {
        if name.starts_with("spin-") {
            let _ = fields.append(&name, &value);
        }
    }
    let response = OutgoingResponse::new(fields);
    let outgoing = response.body().expect("a new response has a body");
    // The head goes out first; the body follows as it is read.
    ResponseOutparam::set(out, Ok(response));
    let incoming = request.consume().expect("the body is consumed once");
    {
        let mut input = incoming.stream().expect("a body has a stream");
        let mut output = outgoing.write().expect("a new body has a stream");
        let mut chunk = vec![0; 64 * 1024];
        loop {
            match std::io::Read::read(&mut input, &mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if output.write_all(&chunk[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = output.flush();
    }
    let _ = OutgoingBody::finish(outgoing, None);
}

fn stream(out: ResponseOutparam, chunks: usize) {
    let response = OutgoingResponse::new(Fields::new());
    let outgoing = response.body().expect("a new response has a body");
    ResponseOutparam::set(out, Ok(response));
    {
        let mut output = outgoing.write().expect("a new body has a stream");
        let chunk = vec![b'a'; 64 * 1024];
        for _ in 0..chunks {
            if output.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = output.flush();
    }
    let _ = OutgoingBody::finish(outgoing, None);
}

/// Holds `most` header-field sets of 1 KiB (host objects), then answers
/// how many.
fn hoard(out: ResponseOutparam, most: usize) {
    let value = vec![b'v'; 1024];
    let mut held = Vec::new();
    while held.len() < most {
        let fields = Fields::new();
        let _ = fields.append("x-hoard", &value);
        held.push(fields);
    }
    respond(out, 200, &[], format!("held {}\n", held.len()).as_bytes());
}

fn spin() {
    let mut x: u64 = 1;
    loop {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

fn fetch(request: IncomingRequest, out: ResponseOutparam, times: usize) {
    let url = request.headers().get("x-fetch").into_iter().next();
    let url = String::from_utf8(url.unwrap_or_default()).unwrap_or_default();
    // A trace context the function sets on its request itself (the host
    // replaces it with its own when the invocation is traced).
    let traceparent = request
        .headers()
        .get("x-fetch-traceparent")
        .into_iter()
        .next();
    let mut last = Err(String::from("no request sent"));
    for done in 0..times.max(1) {
        last = get(&url, traceparent.as_deref()).map_err(|error| format!("after {done}: {error}"));
        if last.is_err() {
            break;
        }
    }
    match last {
        Ok((status, body)) => respond(out, status, &[], &body),
        Err(error) => respond(out, 502, &[], error.as_bytes()),
    }
}

/// GETs `url` (`http://authority/path` or `https://...`) through
/// wasi:http's outgoing handler: its status and body, or the error in
/// words.
fn get(url: &str, traceparent: Option<&[u8]>) -> Result<(u16, Vec<u8>), String> {
    let (scheme, rest) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
        (Some(rest), _) => (Scheme::Http, rest),
        (_, Some(rest)) => (Scheme::Https, rest),
        _ => return Err("x-fetch: expected http://... or https://...".into()),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let headers = Fields::new();
    if let Some(value) = traceparent {
        let _ = headers.append("traceparent", &value.to_vec());
    }
    let request = OutgoingRequest::new(headers);
    let _ = request.set_scheme(Some(&scheme));
    let _ = request.set_authority(Some(authority));
    let _ = request.set_path_with_query(Some(path));
    let pending = outgoing_handler::handle(request, None).map_err(|e| format!("{e:?}"))?;
    pending.subscribe().block();
    let response = pending
        .get()
        .ok_or("no response")?
        .map_err(|()| "response taken twice")?
        .map_err(|e| format!("{e:?}"))?;
    let status = response.status();
    let body = response.consume().map_err(|()| "no body")?;
    let mut bytes = Vec::new();
    {
        let mut input = body.stream().map_err(|()| "no stream")?;
        let _ = input.read_to_end(&mut bytes);
    }
    Ok((status, bytes))
}
