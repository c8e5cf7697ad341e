//! A WASI 0.3 `wasi:http` service with nothing but WASI's own imports:
//!
//! - `GET` anything: `hello from a wasi:http@0.3 component`, written by a
//!   task the component spawns, after `handle` has returned the response
//!   (the body is a stream the host reads as the guest writes it);
//! - `POST`: the request body streamed back as the response body (both
//!   ways streamed, neither held whole by the guest);
//! - `GET .../trap`: traps after answering the head;
//! - `GET .../count`: `count N`, N the requests this instance has been
//!   handed, this one included (1 in a fresh instance per request; more
//!   where a route opts into instance reuse);
//! - `GET .../wait`: the same, after waiting 300 ms on `wasi:clocks`
//!   (requests served at once by one instance overlap there);
//! - `GET .../spin`: never answers, burning CPU (a time limit's test).

use std::sync::atomic::{AtomicU32, Ordering};
use wasip3::http::types::{ErrorCode, Fields, Method, Request, Response};

use wasip3::{wit_bindgen, wit_future, wit_stream};

wasip3::http::service::export!(Service);

struct Service;

/// Requests this instance has been handed.
static HANDED: AtomicU32 = AtomicU32::new(0);

/// What the hello path answers.
const HELLO: &[u8] = b"hello from a wasi:http@0.3 component\n";

impl wasip3::exports::http::handler::Guest for Service {
    async fn handle(request: Request) -> Result<Response, ErrorCode> {
        let handed = HANDED.fetch_add(1, Ordering::Relaxed) + 1;
        let path = request.get_path_with_query().unwrap_or_default();
        if path.ends_with("/spin") {
            let mut spins = 0u64;
            loop {
                spins = std::hint::black_box(spins.wrapping_add(1));
            }
        }
        if path.ends_with("/count") || path.ends_with("/wait") {
            if path.ends_with("/wait") {
                wasip3::clocks::monotonic_clock::wait_for(300_000_000).await;
            }
            return Ok(text(format!("count {handed}\n").into_bytes()));
        }
        if matches!(request.get_method(), Method::Post) {
            let (result_tx, result_rx) = wit_future::new(|| Ok(()));
            let (body, trailers) = Request::consume_body(request, result_rx);
            let (response, _sent) = Response::new(Fields::new(), Some(body), trailers);
            drop(result_tx);
            return Ok(response);
        }
        let trap = path.ends_with("/trap");
        let (mut body_tx, body_rx) = wit_stream::new();
        let (trailers_tx, trailers_rx) = wit_future::new(|| Ok(None));
        let (response, _sent) = Response::new(Fields::new(), Some(body_rx), trailers_rx);
        wit_bindgen::spawn(async move {
            if trap {
                body_tx.write_all(b"partial".to_vec()).await;
                unreachable!("the guest traps mid-body");
            }
            let remaining = body_tx.write_all(HELLO.to_vec()).await;
            assert!(remaining.is_empty());
            drop(body_tx);
            // The body is whole: no trailers, no error.
            drop(trailers_tx);
        });
        Ok(response)
    }
}

/// A response whose body is `bytes`, written by a task as the host reads.
fn text(bytes: Vec<u8>) -> Response {
    let (mut body_tx, body_rx) = wit_stream::new();
    let (trailers_tx, trailers_rx) = wit_future::new(|| Ok(None));
    let (response, _sent) = Response::new(Fields::new(), Some(body_rx), trailers_rx);
    wit_bindgen::spawn(async move {
        let remaining = body_tx.write_all(bytes).await;
        assert!(remaining.is_empty());
        drop(body_tx);
        drop(trailers_tx);
    });
    response
}
