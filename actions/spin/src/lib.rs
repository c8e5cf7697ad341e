//! A Spin app as users write them for Spin 4, built with `spin-sdk` 7 from
//! crates.io; Luge runs it unchanged. One component, route `/...`:
//!
//! - `GET /hello`: a greeting from the `greeting` variable;
//! - `GET /var/NAME`: any variable (`spin:variables`), 404 if undefined;
//! - `GET /config/NAME`: the same variables through
//!   `wasi:config/store@0.2.0-draft-2024-09-27`, 404 if undefined; `GET
//!   /config`: the names it holds, sorted, one per line;
//! - `GET|PUT|DELETE /kv/KEY[?store=LABEL]`: a key-value store
//!   (`spin:key-value`), `default` unless named; `GET /kv[?store=LABEL]`:
//!   its keys (`get-keys`), sorted, one per line;
//! - `GET /sleep/MS`: answers after waiting MS milliseconds (at most
//!   10,000) on `wasi:clocks`, a request that holds its place without
//!   using the CPU (the load deploy/kubernetes/autoscaling scales on);
//! - `POST /log`: writes the body to stderr, where the host's log (and
//!   `kubectl logs`) shows it, and answers how many bytes it wrote;
//! - `POST /count`: adds one to `hits` with `wasi:keyvalue` atomics and
//!   answers the new count;
//! - `POST /double`: doubles `doubled` (1 at first) by compare-and-swap,
//!   retrying when another request won the race;
//! - `GET /file/NAME`: the file NAME of the `static` directory its
//!   manifest's `files` grants (read-only, at `/static`);
//! - `GET /fetch`: the body of `GET {upstream}/` (the `upstream` variable,
//!   an origin in `allowed_outbound_hosts`), or the error a denied request
//!   gets;
//! - `GET /chain`: `GET http://backend.spin.internal/hello`, service
//!   chaining to the `backend` component (the same code on its own route),
//!   which its manifest allows the `app` component and not `backend`;
//! - `GET /relative`: `GET /hello` with no authority, which no host may
//!   resolve against the incoming request's (Spin's CVE-2024-32980);
//! - `POST /sql[?db=LABEL]`: the body run as one statement on the SQLite
//!   database LABEL (`default` unless named, `spin:sqlite`): the columns
//!   on the first line, then each row, values joined by `|`;
//! - `POST /sql/insert/TEXT`: inserts TEXT as a parameter into `notes` (made
//!   if missing) and answers the new rowid and the changed rows;
//! - `/redis/OP/ARG` (`spin:redis`, to the `redis_address` variable):
//!   `POST set/KEY` (the body), `GET get/KEY`, `POST incr/KEY`, `POST
//!   del/KEY`, `POST publish/CHANNEL` (the body), `POST sadd/KEY` and
//!   `srem/KEY` (the body's words), `GET smembers/KEY` (sorted, one per
//!   line), `POST execute/COMMAND` (the body's words as arguments, a
//!   number as an integer; the replies one per line), `POST flood/N`:
//!   opens up to N connections at once and answers how many opened
//!   before the first error, and that error;
//! - `POST /pg/query` and `POST /pg/execute` (`spin:postgres`, to the
//!   `pg_address` variable): the body as one statement; a query answers
//!   its columns (`name:type`) on the first line and each row's values
//!   after, `|`-joined, an execute the rows it changed; `POST
//!   /pg/insert/TEXT` inserts TEXT as a parameter into `notes`;
//! - `POST /mqtt/publish/TOPIC`: the body published on TOPIC at QoS 1
//!   (`spin:mqtt`, to the `mqtt_address` variable);
//! - `POST /mysql/query`, `POST /mysql/execute` and `POST
//!   /mysql/insert/TEXT`: the same with `spin:mysql` (to the
//!   `mysql_address` variable; an execute answers nothing).

use http_body_util::BodyExt;
use spin_sdk::experimental::wasi::config::store as config;
use spin_sdk::experimental::wasi::keyvalue::{atomics, store};
use spin_sdk::http::{EmptyBody, IntoResponse, Method, Request, StatusCode};
use spin_sdk::{http_service, key_value, mqtt, mysql, pg, redis, sqlite, variables};

/// The route of this request below the component's (`spin-path-info`).
fn path_info(request: &Request) -> String {
    request
        .headers()
        .get("spin-path-info")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| request.uri().path())
        .to_owned()
}

fn answer(status: StatusCode, body: impl Into<String>) -> (StatusCode, String) {
    (status, body.into())
}

#[http_service]
async fn handle(request: Request) -> impl IntoResponse {
    let path = path_info(&request);
    let method = request.method().clone();
    let segments: Vec<&str> = path.trim_start_matches('/').splitn(2, '/').collect();
    match (method, segments.as_slice()) {
        (Method::GET, ["hello"]) => match variables::get("greeting").await {
            Ok(greeting) => answer(StatusCode::OK, format!("{greeting}, Spin app\n")),
            Err(e) => answer(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:?}")),
        },
        (Method::GET, ["var", name]) => match variables::get(*name).await {
            Ok(value) => answer(StatusCode::OK, value),
            Err(e @ variables::Error::Undefined(_)) => {
                answer(StatusCode::NOT_FOUND, format!("{e:?}"))
            }
            Err(e) => answer(StatusCode::BAD_REQUEST, format!("{e:?}")),
        },
        (Method::GET, ["config", name]) => match config::get(name) {
            Ok(Some(value)) => answer(StatusCode::OK, value),
            Ok(None) => answer(StatusCode::NOT_FOUND, format!("{name} is not set\n")),
            Err(e) => answer(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:?}")),
        },
        (Method::GET, ["config"]) => match config::get_all() {
            Ok(all) => {
                let mut names: Vec<String> = all.into_iter().map(|(name, _)| name).collect();
                names.sort();
                answer(StatusCode::OK, names.join("\n"))
            }
            Err(e) => answer(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:?}")),
        },
        // Waits MS milliseconds (at most 10 s) on the host's clock, holding
        // its place as a function waiting on I/O does: the load the
        // Kubernetes autoscaling check scales on.
        (Method::GET, ["sleep", ms]) => match ms.parse::<u64>() {
            Ok(ms) if ms <= 10_000 => {
                spin_sdk::wasip3::clocks::monotonic_clock::wait_for(ms * 1_000_000).await;
                answer(StatusCode::OK, format!("slept {ms} ms\n"))
            }
            _ => answer(
                StatusCode::BAD_REQUEST,
                format!("{ms} is not a number of milliseconds up to 10000\n"),
            ),
        },
        (Method::GET, ["kv"]) => keys(&request).await,
        (method, ["kv", key]) => kv(method, key, request).await,
        (Method::POST, ["log"]) => {
            let body = match request.into_body().collect().await {
                Ok(body) => body.to_bytes(),
                Err(e) => return answer(StatusCode::BAD_REQUEST, format!("{e:?}")),
            };
            let text = String::from_utf8_lossy(&body);
            eprintln!("{}", text.trim_end());
            answer(StatusCode::OK, format!("logged {} bytes\n", body.len()))
        }
        (Method::POST, ["count"]) => match count() {
            Ok(n) => answer(StatusCode::OK, n.to_string()),
            Err(e) => answer(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:?}")),
        },
        (Method::POST, ["double"]) => match double() {
            Ok(n) => answer(StatusCode::OK, n.to_string()),
            Err(e) => answer(StatusCode::INTERNAL_SERVER_ERROR, e),
        },
        (Method::GET, ["file", name]) => match std::fs::read_to_string(format!("/static/{name}")) {
            Ok(text) => answer(StatusCode::OK, text),
            Err(e) => answer(StatusCode::NOT_FOUND, e.to_string()),
        },
        (Method::GET, ["fetch"]) => fetch(None).await,
        (Method::GET, ["chain"]) => fetch(Some("http://backend.spin.internal/hello")).await,
        (Method::GET, ["relative"]) => fetch(Some("/hello")).await,
        (Method::POST, ["sql"]) => {
            let database = request
                .uri()
                .query()
                .and_then(|q| q.strip_prefix("db="))
                .unwrap_or("default")
                .to_owned();
            match request.into_body().collect().await {
                Ok(body) => sql(&database, &String::from_utf8_lossy(&body.to_bytes())).await,
                Err(e) => answer(StatusCode::BAD_REQUEST, format!("{e:?}")),
            }
        }
        (Method::POST, ["mqtt", rest]) => match rest.strip_prefix("publish/") {
            Some(topic) => {
                let topic = topic.to_owned();
                match request.into_body().collect().await {
                    Ok(body) => mqtt_publish(&topic, body.to_bytes().to_vec()).await,
                    Err(e) => answer(StatusCode::BAD_REQUEST, format!("{e:?}")),
                }
            }
            None => answer(StatusCode::NOT_FOUND, format!("no route for {path}\n")),
        },
        (method, ["redis", rest]) => {
            let (op, arg) = rest.split_once('/').unwrap_or((rest, ""));
            let (op, arg) = (op.to_owned(), arg.to_owned());
            match request.into_body().collect().await {
                Ok(body) => {
                    let body = body.to_bytes().to_vec();
                    redis_op(method, &op, &arg, body).await
                }
                Err(e) => answer(StatusCode::BAD_REQUEST, format!("{e:?}")),
            }
        }
        (Method::POST, ["pg", rest]) => {
            let rest = rest.to_owned();
            match request.into_body().collect().await {
                Ok(body) => postgres(&rest, &String::from_utf8_lossy(&body.to_bytes())).await,
                Err(e) => answer(StatusCode::BAD_REQUEST, format!("{e:?}")),
            }
        }
        (Method::POST, ["mysql", rest]) => {
            let rest = rest.to_owned();
            match request.into_body().collect().await {
                Ok(body) => mysql_op(&rest, &String::from_utf8_lossy(&body.to_bytes())).await,
                Err(e) => answer(StatusCode::BAD_REQUEST, format!("{e:?}")),
            }
        }
        (Method::POST, ["sql", rest]) => match rest.strip_prefix("insert/") {
            Some(text) => insert(text).await,
            None => answer(StatusCode::NOT_FOUND, format!("no route for {path}\n")),
        },
        _ => answer(StatusCode::NOT_FOUND, format!("no route for {path}\n")),
    }
}

/// The store `?store=LABEL` names (`default` unless named).
fn label(request: &Request) -> String {
    request
        .uri()
        .query()
        .and_then(|q| q.strip_prefix("store="))
        .unwrap_or("default")
        .to_owned()
}

async fn keys(request: &Request) -> (StatusCode, String) {
    let store = match key_value::Store::open(&label(request)).await {
        Ok(store) => store,
        Err(e) => return answer(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:?}")),
    };
    match store.get_keys().await.collect().await {
        Ok(mut keys) => {
            keys.sort();
            answer(StatusCode::OK, keys.join("\n"))
        }
        Err(e) => answer(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:?}")),
    }
}

async fn kv(method: Method, key: &str, request: Request) -> (StatusCode, String) {
    let label = label(&request);
    let key = key.split('?').next().unwrap_or(key);
    let store = match key_value::Store::open(&label).await {
        Ok(store) => store,
        Err(e) => return answer(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:?}")),
    };
    let result = match method {
        Method::GET => match store.get(key).await {
            Ok(Some(value)) => Ok(answer(
                StatusCode::OK,
                String::from_utf8_lossy(&value).into_owned(),
            )),
            Ok(None) => Ok(answer(StatusCode::NOT_FOUND, "")),
            Err(e) => Err(e),
        },
        Method::PUT => {
            let body = match request.into_body().collect().await {
                Ok(body) => body.to_bytes(),
                Err(e) => return answer(StatusCode::BAD_REQUEST, format!("{e:?}")),
            };
            store
                .set(key, &body)
                .await
                .map(|()| answer(StatusCode::OK, ""))
        }
        Method::DELETE => store.delete(key).await.map(|()| answer(StatusCode::OK, "")),
        _ => Ok(answer(StatusCode::METHOD_NOT_ALLOWED, "")),
    };
    result.unwrap_or_else(|e| answer(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:?}")))
}

fn count() -> Result<i64, store::Error> {
    let bucket = store::open("default")?;
    atomics::increment(&bucket, "hits", 1)
}

/// Doubles `doubled` by compare-and-swap: read, compute, swap if unchanged.
fn double() -> Result<u64, String> {
    let bucket = store::open("default").map_err(|e| format!("{e:?}"))?;
    for _ in 0..1000 {
        let cas = atomics::Cas::new(&bucket, "doubled").map_err(|e| format!("{e:?}"))?;
        let current = match cas.current().map_err(|e| format!("{e:?}"))? {
            Some(bytes) => String::from_utf8_lossy(&bytes)
                .parse::<u64>()
                .map_err(|e| e.to_string())?,
            None => 1,
        };
        let next = current.checked_mul(2).ok_or("overflow")?;
        match atomics::swap(cas, next.to_string().as_bytes()) {
            Ok(()) => return Ok(next),
            Err(atomics::CasError::CasFailed(_)) => continue,
            Err(atomics::CasError::StoreError(e)) => return Err(format!("{e:?}")),
        }
    }
    Err("lost the race 1000 times".into())
}

/// The body of `GET url`, or `{upstream}/` when none is given.
async fn fetch(url: Option<&str>) -> (StatusCode, String) {
    let url = match url {
        Some(url) => url.to_owned(),
        None => match variables::get("upstream").await {
            Ok(upstream) => format!("{upstream}/"),
            Err(e) => return answer(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:?}")),
        },
    };
    let request = spin_sdk::http::Request::get(url)
        .body(EmptyBody::new())
        .expect("a GET request");
    match spin_sdk::http::send(request).await {
        Ok(response) => {
            let status = response.status();
            match response.into_body().collect().await {
                Ok(body) => answer(
                    status,
                    String::from_utf8_lossy(&body.to_bytes()).into_owned(),
                ),
                Err(e) => answer(StatusCode::BAD_GATEWAY, format!("{e:?}")),
            }
        }
        Err(e) => answer(StatusCode::BAD_GATEWAY, format!("{e:?}")),
    }
}

/// One statement on `database`: columns, then rows, `|`-joined.
async fn sql(database: &str, statement: &str) -> (StatusCode, String) {
    let run = async {
        let connection = sqlite::Connection::open(database).await?;
        let result = connection.execute(statement, []).await?;
        let mut lines = vec![result.columns().join("|")];
        for row in result.collect().await? {
            let values: Vec<String> = row
                .values
                .iter()
                .map(|value| match value {
                    sqlite::Value::Integer(i) => i.to_string(),
                    sqlite::Value::Real(r) => r.to_string(),
                    sqlite::Value::Text(t) => t.clone(),
                    sqlite::Value::Blob(b) => format!("<{} bytes>", b.len()),
                    sqlite::Value::Null => "NULL".to_owned(),
                })
                .collect();
            lines.push(values.join("|"));
        }
        Ok::<_, sqlite::Error>(lines.join("\n"))
    };
    match run.await {
        Ok(text) => answer(StatusCode::OK, text),
        Err(e) => answer(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:?}")),
    }
}

/// Inserts `text` into `notes` with a parameter: the rowid and changes.
async fn insert(text: &str) -> (StatusCode, String) {
    let run = async {
        let connection = sqlite::Connection::open_default().await?;
        connection
            .execute(
                "CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)",
                [],
            )
            .await?;
        connection
            .execute(
                "INSERT INTO notes (text) VALUES (?)",
                [sqlite::Value::Text(text.to_owned())],
            )
            .await?;
        Ok::<_, sqlite::Error>(format!(
            "{} {}",
            connection.last_insert_rowid().await,
            connection.changes().await
        ))
    };
    match run.await {
        Ok(text) => answer(StatusCode::OK, text),
        Err(e) => answer(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:?}")),
    }
}

/// Publishes `payload` on `topic` (QoS 1, `spin:mqtt`) to the broker at
/// the `mqtt_address` variable.
async fn mqtt_publish(topic: &str, payload: Vec<u8>) -> (StatusCode, String) {
    let run = async {
        let address = variables::get("mqtt_address")
            .await
            .map_err(|e| mqtt::Error::Other(format!("{e:?}")))?;
        let connection = mqtt::Connection::open(address, "", "", 30).await?;
        connection
            .publish(topic, payload, mqtt::Qos::AtLeastOnce)
            .await
    };
    match run.await {
        Ok(()) => answer(StatusCode::OK, "published\n"),
        Err(e) => answer(StatusCode::BAD_REQUEST, format!("{e:?}")),
    }
}

/// One `spin:redis` operation on the server at the `redis_address` variable.
async fn redis_op(method: Method, op: &str, arg: &str, body: Vec<u8>) -> (StatusCode, String) {
    let run = async {
        let address = variables::get("redis_address")
            .await
            .map_err(|e| redis::Error::Other(format!("{e:?}")))?;
        if op == "flood" {
            let mut held = Vec::new();
            let wanted: usize = arg.parse().unwrap_or(0);
            while held.len() < wanted {
                match redis::Connection::open(address.clone()).await {
                    Ok(connection) => held.push(connection),
                    Err(e) => return Ok(format!("{} {e:?}", held.len())),
                }
            }
            return Ok(held.len().to_string());
        }
        let connection = redis::Connection::open(address).await?;
        let words: Vec<String> = String::from_utf8_lossy(&body)
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        Ok::<_, redis::Error>(match (method, op) {
            (Method::POST, "set") => {
                connection.set(arg, &body).await?;
                String::new()
            }
            (Method::GET, "get") => match connection.get(arg).await? {
                Some(value) => String::from_utf8_lossy(&value).into_owned(),
                None => "(nil)".to_owned(),
            },
            (Method::POST, "incr") => connection.incr(arg).await?.to_string(),
            (Method::POST, "del") => connection.del([arg]).await?.to_string(),
            (Method::POST, "publish") => {
                connection.publish(arg, &body).await?;
                String::new()
            }
            (Method::POST, "sadd") => connection.sadd(arg, &words).await?.to_string(),
            (Method::POST, "srem") => connection.srem(arg, &words).await?.to_string(),
            (Method::GET, "smembers") => {
                let mut members = connection.smembers(arg).await?;
                members.sort();
                members.join("\n")
            }
            (Method::POST, "execute") => {
                let arguments = words.iter().map(|word| match word.parse::<i64>() {
                    Ok(n) => redis::RedisParameter::Int64(n),
                    Err(_) => redis::RedisParameter::Binary(word.as_bytes().to_vec()),
                });
                let replies = connection.execute(arg, arguments).await?;
                replies
                    .iter()
                    .map(|reply| match reply {
                        redis::RedisResult::Nil => "nil".to_owned(),
                        redis::RedisResult::Status(s) => format!("status:{s}"),
                        redis::RedisResult::Int64(i) => format!("int:{i}"),
                        redis::RedisResult::Binary(b) => {
                            format!("bin:{}", String::from_utf8_lossy(b))
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            }
            _ => return Ok(format!("no redis operation {op}")),
        })
    };
    match run.await {
        Ok(text) if text.starts_with("no redis operation") => answer(StatusCode::NOT_FOUND, text),
        Ok(text) => answer(StatusCode::OK, text),
        Err(e) => answer(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:?}")),
    }
}

/// One `spin:postgres` call on the server at the `pg_address` variable.
async fn postgres(op: &str, body: &str) -> (StatusCode, String) {
    let run = async {
        let address = variables::get("pg_address")
            .await
            .map_err(|e| format!("{e:?}"))?;
        let connection = pg::Connection::open(address)
            .await
            .map_err(|e| format!("{e:?}"))?;
        if let Some(text) = op.strip_prefix("insert/") {
            return connection
                .execute(
                    "INSERT INTO notes (text) VALUES ($1)",
                    [pg::ParameterValue::Str(text.to_owned())],
                )
                .await
                .map(|n| n.to_string())
                .map_err(|e| format!("{e:?}"));
        }
        match op {
            "execute" => connection
                .execute(body, [])
                .await
                .map(|n| n.to_string())
                .map_err(|e| format!("{e:?}")),
            "query" => {
                let result = connection
                    .query(body, [])
                    .await
                    .map_err(|e| format!("{e:?}"))?;
                let (columns, rows, ended) = result.into_inner();
                let rows: Vec<Vec<pg::DbValue>> = rows.collect().await;
                ended.await.map_err(|e| format!("{e:?}"))?;
                let header = columns
                    .iter()
                    .map(|c| format!("{}:{:?}", c.name, c.data_type));
                Ok(table(header, &rows))
            }
            other => Err(format!("no pg operation {other}")),
        }
    };
    match run.await {
        Ok(text) => answer(StatusCode::OK, text),
        Err(e) => answer(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

/// One `spin:mysql` call on the server at the `mysql_address` variable.
async fn mysql_op(op: &str, body: &str) -> (StatusCode, String) {
    let run = async {
        let address = variables::get("mysql_address")
            .await
            .map_err(|e| format!("{e:?}"))?;
        let connection = mysql::Connection::open(address)
            .await
            .map_err(|e| format!("{e:?}"))?;
        if let Some(text) = op.strip_prefix("insert/") {
            return connection
                .execute(
                    "INSERT INTO notes (text) VALUES (?)",
                    [mysql::ParameterValue::Str(text.to_owned())],
                )
                .await
                .map(|()| String::new())
                .map_err(|e| format!("{e:?}"));
        }
        match op {
            "execute" => connection
                .execute(body, [])
                .await
                .map(|()| String::new())
                .map_err(|e| format!("{e:?}")),
            "query" => {
                let result = connection
                    .query(body, [])
                    .await
                    .map_err(|e| format!("{e:?}"))?;
                let (columns, rows, ended) = result.into_inner();
                let rows: Vec<Vec<mysql::DbValue>> = rows.collect().await;
                ended.await.map_err(|e| format!("{e:?}"))?;
                let header = columns
                    .iter()
                    .map(|c| format!("{}:{:?}", c.name, c.data_type));
                Ok(table(header, &rows))
            }
            other => Err(format!("no mysql operation {other}")),
        }
    };
    match run.await {
        Ok(text) => answer(StatusCode::OK, text),
        Err(e) => answer(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

/// A query's answer as text: `header` on the first line, then each row's
/// values (`Debug`), `|`-joined.
fn table<V: std::fmt::Debug>(header: impl Iterator<Item = String>, rows: &[Vec<V>]) -> String {
    let mut lines = vec![header.collect::<Vec<_>>().join("|")];
    for row in rows {
        lines.push(
            row.iter()
                .map(|v| format!("{v:?}"))
                .collect::<Vec<_>>()
                .join("|"),
        );
    }
    lines.join("\n")
}
