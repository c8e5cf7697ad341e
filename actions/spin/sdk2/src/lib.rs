//! A Spin app built with `spin-sdk` 2 for `wasm32-wasip1`, as Spin 2 users
//! built theirs; Luge runs the module unchanged. spin-sdk 2 speaks WASI's
//! 0.2.0-rc-2023-10-18 candidate: its handler exports that candidate's
//! `wasi:http/incoming-handler` and reads and writes bodies through the
//! candidate's `wasi:io` streams. Its paths are read
//! from `spin-path-info` (the component's route is a wildcard):
//!
//! - `GET /hello`: `hello from spin-sdk 2, NAME` (the `name` variable,
//!   `spin_sdk::variables`);
//! - `GET|PUT /kv/KEY`: the `default` key-value store
//!   (`fermyon:spin/key-value@2.0.0`), 404 for a missing key; `GET /kv`:
//!   its keys, sorted, one per line;
//! - `POST /sql`: the body as one statement on the `default` SQLite
//!   database (`fermyon:spin/sqlite@2.0.0`): each row's values joined by
//!   `|`, one row per line;
//! - `POST /fetch`: a `GET` of the URL in the body, sent with
//!   `spin_sdk::http::send` (the candidate's `wasi:http/outgoing-handler`):
//!   the answer's status, a space, and its body;
//! - `GET /log`: writes a line to stderr (WASI preview 1's `fd_write`,
//!   served through the adapter) and answers `logged`.
//!
//! Spin 2's PostgreSQL and MySQL are `actions/spin/sdk3`'s (the same
//! `fermyon:spin@2.0.0` interfaces).
//!
//! Any error is a 500 with the error's `Debug` form as its body.

use spin_sdk::http::{IntoResponse, Method, Request, Response};
use spin_sdk::http_component;
use spin_sdk::key_value::Store;
use spin_sdk::sqlite::{Connection, Value};

fn respond(status: u16, body: impl Into<String>) -> Response {
    Response::new(status, body.into())
}

#[http_component]
fn handle(request: Request) -> anyhow::Result<impl IntoResponse> {
    let path = request
        .header("spin-path-info")
        .and_then(|v| v.as_str())
        .unwrap_or("/")
        .to_owned();
    let segments: Vec<&str> = path.trim_start_matches('/').splitn(2, '/').collect();
    Ok(match (request.method(), segments.as_slice()) {
        (Method::Get, ["hello"]) => match spin_sdk::variables::get("name") {
            Ok(name) => respond(200, format!("hello from spin-sdk 2, {name}\n")),
            Err(e) => respond(500, format!("{e:?}")),
        },
        (Method::Get, ["kv"]) => match Store::open_default().and_then(|s| s.get_keys()) {
            Ok(mut keys) => {
                keys.sort();
                respond(200, keys.join("\n"))
            }
            Err(e) => respond(500, format!("{e:?}")),
        },
        (Method::Get, ["kv", key]) => match Store::open_default().and_then(|s| s.get(key)) {
            Ok(Some(value)) => respond(200, String::from_utf8_lossy(&value)),
            Ok(None) => respond(404, "no such key"),
            Err(e) => respond(500, format!("{e:?}")),
        },
        (Method::Put, ["kv", key]) => {
            match Store::open_default().and_then(|s| s.set(key, request.body())) {
                Ok(()) => respond(200, "stored"),
                Err(e) => respond(500, format!("{e:?}")),
            }
        }
        (Method::Post, ["sql"]) => {
            let statement = String::from_utf8_lossy(request.body()).into_owned();
            match Connection::open_default().and_then(|c| c.execute(&statement, &[])) {
                Ok(result) => {
                    let rows: Vec<String> = result
                        .rows
                        .iter()
                        .map(|row| {
                            row.values
                                .iter()
                                .map(|value| match value {
                                    Value::Integer(i) => i.to_string(),
                                    Value::Real(r) => r.to_string(),
                                    Value::Text(t) => t.clone(),
                                    Value::Blob(b) => format!("{} bytes", b.len()),
                                    Value::Null => "null".to_owned(),
                                })
                                .collect::<Vec<_>>()
                                .join("|")
                        })
                        .collect();
                    respond(200, rows.join("\n"))
                }
                Err(e) => respond(500, format!("{e:?}")),
            }
        }
        (Method::Post, ["fetch"]) => {
            let url = String::from_utf8_lossy(request.body()).trim().to_owned();
            let sent: Result<Response, _> =
                spin_sdk::http::run(spin_sdk::http::send(Request::get(url)));
            match sent {
                Ok(answer) => respond(
                    200,
                    format!(
                        "{} {}",
                        answer.status(),
                        String::from_utf8_lossy(answer.body())
                    ),
                ),
                Err(e) => respond(500, format!("{e:?}")),
            }
        }
        (Method::Get, ["log"]) => {
            eprintln!("a line from spin-sdk 2");
            respond(200, "logged")
        }
        _ => respond(404, format!("no route for {path}")),
    })
}
