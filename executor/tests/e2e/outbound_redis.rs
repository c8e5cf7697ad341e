//! Outbound Redis end to end: `spin:redis@3.0.0` from the Spin app
//! (actions/spin, `spin-sdk` 7's `redis` module) against a real
//! `redis-server` that asks for a password, under `luge serve --spin` and
//! on a luge.toml route; and what a hostile function tries (an ungranted
//! server, a flood of connections, a reply larger than its memory), with
//! the password printed nowhere.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use luge_testkit::redis::RedisServer;

use crate::common::*;
use crate::databases::*;
use crate::spin::text;

const PASSWORD: &str = "hunter2-never-logged";

/// A client of `port` that sends `commands` (after `AUTH`), one RESP
/// array each, and reads one reply line per command.
fn raw(port: u16, commands: &[&[&[u8]]]) -> (TcpStream, BufReader<TcpStream>) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let auth: &[&[u8]] = &[b"AUTH", PASSWORD.as_bytes()];
    for command in std::iter::once(auth).chain(commands.iter().copied()) {
        let mut bytes = format!("*{}\r\n", command.len()).into_bytes();
        for part in command {
            bytes.extend_from_slice(format!("${}\r\n", part.len()).as_bytes());
            bytes.extend_from_slice(part);
            bytes.extend_from_slice(b"\r\n");
        }
        stream.write_all(&bytes).unwrap();
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        assert!(!line.starts_with('-'), "{line}");
    }
    (stream, reader)
}

#[test]
fn a_spin_app_reaches_its_granted_redis_and_nothing_else() {
    wasmtime_only!();
    let redis = RedisServer::with_password(PASSWORD).unwrap();
    let host = format!("127.0.0.1:{}", redis.port);
    let db = Db {
        name: "redis",
        address: format!("redis://:{PASSWORD}@{host}"),
        host,
    };
    let state_dir = tempfile::tempdir().unwrap();
    let luge = db.serve_app(state_dir.path(), &[]);
    let call = |method: &str, path: &str, body: &str| text(&luge, method, path, body.as_bytes());

    // A subscriber sees what the function publishes.
    let (_subscriber, mut messages) = raw(redis.port, &[&[b"SUBSCRIBE", b"news"]]);
    // The rest of the subscription's confirmation.
    for _ in 0..5 {
        messages.read_line(&mut String::new()).unwrap();
    }
    assert_eq!(
        call("POST", "/redis/publish/news", "extra!"),
        (200, String::new())
    );
    let mut lines = Vec::new();
    for _ in 0..7 {
        let mut line = String::new();
        messages.read_line(&mut line).unwrap();
        lines.push(line.trim().to_owned());
    }
    assert_eq!(
        lines,
        ["*3", "$7", "message", "$4", "news", "$6", "extra!"],
        "{lines:?}"
    );

    assert_eq!(
        call("POST", "/redis/set/greeting", "hello"),
        (200, String::new())
    );
    assert_eq!(
        call("GET", "/redis/get/greeting", ""),
        (200, "hello".into())
    );
    assert_eq!(call("GET", "/redis/get/missing", ""), (200, "(nil)".into()));
    assert_eq!(call("POST", "/redis/incr/hits", ""), (200, "1".into()));
    assert_eq!(call("POST", "/redis/incr/hits", ""), (200, "2".into()));
    assert_eq!(call("POST", "/redis/sadd/set", "b a c"), (200, "3".into()));
    assert_eq!(call("POST", "/redis/srem/set", "c"), (200, "1".into()));
    assert_eq!(call("GET", "/redis/smembers/set", ""), (200, "a\nb".into()));
    assert_eq!(call("POST", "/redis/del/greeting", ""), (200, "1".into()));
    assert_eq!(
        call("POST", "/redis/execute/MSET", "x 7 y why"),
        (200, "status:OK".into())
    );
    assert_eq!(
        call("POST", "/redis/execute/MGET", "x y z"),
        (200, "bin:7\nbin:why\nnil".into())
    );
    // A server error comes back as one.
    let (status, body) = call("POST", "/redis/incr/set", "");
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("WRONGTYPE"), "{body}");

    // The backend component has no redis:// grant.
    let (status, body) = call("POST", "/backend/redis/incr/hits", "");
    assert_eq!(status, 500, "{body}");
    // In Spin's words: `invalid-address` (the reason is in the log).
    assert!(body.contains("InvalidAddress"), "{body}");

    // Thousands of connections from one function: 32 at once, then
    // `too-many-connections`; the server saw no more.
    let (status, body) = call("POST", "/redis/flood/2000", "");
    assert_eq!(
        (status, body.as_str()),
        (200, "32 Error::TooManyConnections"),
        "{body}"
    );
    // Given back when the request ended.
    assert_eq!(call("POST", "/redis/incr/hits", ""), (200, "3".into()));

    // The password is in no log line.
    let log = format!("{}{}", luge.stderr(), luge.stdout());
    assert!(!log.contains(PASSWORD), "{log}");
}

#[test]
fn a_luge_toml_route_reaches_redis_with_its_reply_bounded() {
    wasmtime_only!();
    let redis = RedisServer::with_password(PASSWORD).unwrap();
    let port = redis.port;
    // A value larger than the route's memory limit, put there directly.
    let big = vec![b'x'; 9 << 20];
    let _ = raw(port, &[&[b"SET", b"big", &big]]);
    let routes = format!(
        "[[routes]]\npath = \"/r/...\"\nmodule = \"spin-app.wasm\"\n\
         allowed_outbound_hosts = [\"redis://127.0.0.1:{port}\"]\n\
         variables = {{ redis_address = \"redis://:{PASSWORD}@127.0.0.1:{port}\" }}\n\
         limits = {{ memory_mb = 8 }}\n\
         [[routes]]\npath = \"/elsewhere/...\"\nmodule = \"spin-app.wasm\"\n\
         allowed_outbound_hosts = [\"redis://127.0.0.1:1\"]\n\
         variables = {{ redis_address = \"redis://:{PASSWORD}@127.0.0.1:{port}\" }}\n"
    );
    let site = Site::new(&["spin-app"], &routes);
    let luge = site.start(&[]);
    let call = |method: &str, path: &str| text(&luge, method, path, b"");
    assert_eq!(call("POST", "/r/redis/incr/n"), (200, "1".into()));
    let (status, body) = call("GET", "/r/redis/get/big");
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("larger than"), "{body}");
    assert_eq!(call("POST", "/r/redis/incr/n"), (200, "2".into()));
    let (status, body) = call("POST", "/elsewhere/redis/incr/n");
    assert_eq!(status, 500, "{body}");
    // In Spin's words: `invalid-address` (the reason is in the log).
    assert!(body.contains("InvalidAddress"), "{body}");
    let log = format!("{}{}", luge.stderr(), luge.stdout());
    assert!(!log.contains(PASSWORD), "{log}");
}
