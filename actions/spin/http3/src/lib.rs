//! A WASI 0.3 `wasi:http` service with nothing but WASI's own imports:
//!
//! - `GET` anything: `hello from a wasi:http@0.3 component`, written by a
//!   task the component spawns, after `handle` has returned the response
//!   (the body is a stream the host reads as the guest writes it);
//! - `POST`: the request body streamed back as the response body (both
//!   ways streamed, neither held whole by the guest);
//! - `GET .../trap`: traps after answering the head.

use wasip3::http::types::{ErrorCode, Fields, Method, Request, Response};
use wasip3::{wit_bindgen, wit_future, wit_stream};

wasip3::http::service::export!(Service);

struct Service;

/// What the hello path answers.
const HELLO: &[u8] = b"hello from a wasi:http@0.3 component\n";

impl wasip3::exports::http::handler::Guest for Service {
    async fn handle(request: Request) -> Result<Response, ErrorCode> {
        if matches!(request.get_method(), Method::Post) {
            let (result_tx, result_rx) = wit_future::new(|| Ok(()));
            let (body, trailers) = Request::consume_body(request, result_rx);
            let (response, _sent) = Response::new(Fields::new(), Some(body), trailers);
            drop(result_tx);
            return Ok(response);
        }
        let trap = request
            .get_path_with_query()
            .is_some_and(|path| path.ends_with("/trap"));
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
