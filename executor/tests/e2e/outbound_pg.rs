//! Outbound PostgreSQL end to end: `spin:postgres@4.2.0` from the Spin
//! app (actions/spin, `spin-sdk` 7's `pg` module) against a real
//! PostgreSQL (a fresh cluster on a free loopback port, a SCRAM
//! password), under `luge serve --spin` and on a luge.toml route; and
//! what a hostile function tries (an ungranted server, a huge result set,
//! a query past its deadline, a wrong password), the password printed
//! nowhere.

use std::time::{Duration, Instant};

use luge_testkit::postgres::PostgresServer;

use crate::common::*;
use crate::databases::*;
use crate::spin::text;

/// How many statements sleep on the server now.
const SLEEPING: &str = "SELECT count(*)::int4 AS n FROM pg_stat_activity \
                        WHERE query LIKE 'SELECT pg_sleep%' AND state = 'active'";

/// Waits (10 s at most) until `sleeping` (a query of [`SLEEPING`])
/// answers that none sleeps.
#[track_caller]
fn until_none_sleeps(sleeping: impl Fn() -> (u16, String)) {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = sleeping();
        if status == 200 && body.ends_with("DbValue::Int32(0)") {
            return;
        }
        assert!(
            Instant::now() < until,
            "still running on the server: {status} {body}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_spin_app_queries_its_granted_postgres() {
    wasmtime_only!();
    let pg = PostgresServer::start().unwrap();
    let db = Db {
        name: "pg",
        host: format!("127.0.0.1:{}", pg.port),
        address: pg.url(),
    };
    let state_dir = tempfile::tempdir().unwrap();
    let luge = db.serve_app(state_dir.path(), &[]);
    let post = |path: &str, body: &str| text(&luge, "POST", path, body.as_bytes());
    assert_eq!(
        post(
            "/pg/execute",
            "CREATE TABLE notes (id serial PRIMARY KEY, text text NOT NULL, at date DEFAULT '2026-11-27')"
        ),
        (200, "0".into())
    );
    assert_eq!(post("/pg/insert/hello", ""), (200, "1".into()));
    assert_eq!(post("/pg/insert/it's", ""), (200, "1".into()));
    let (status, body) = post(
        "/pg/query",
        "SELECT id, text, at, NULL::int AS z FROM notes ORDER BY id",
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        "id:DbDataType::Int32|text:DbDataType::Str|at:DbDataType::Date|z:DbDataType::Int32\n\
         DbValue::Int32(1)|DbValue::Str(\"hello\")|DbValue::Date((2026, 11, 27))|DbValue::DbNull\n\
         DbValue::Int32(2)|DbValue::Str(\"it's\")|DbValue::Date((2026, 11, 27))|DbValue::DbNull"
    );
    // Ranges and intervals, as Spin 4 carries them.
    let (status, body) = post(
        "/pg/query",
        "SELECT '[1,5)'::int4range AS r, '1 mon 2 days 00:00:03'::interval AS i",
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        "r:DbDataType::RangeInt32|i:DbDataType::Interval\n\
         DbValue::RangeInt32((Some((1, RangeBoundKind::Inclusive)), Some((5, RangeBoundKind::Exclusive))))|\
         DbValue::Interval(Interval { micros: 3000000, days: 2, months: 1 })"
    );
    // The server's own error, typed.
    let (status, body) = post("/pg/query", "SELECT * FROM missing");
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("DbError") && body.contains("42P01"), "{body}");
    let huge = "SELECT repeat('x', 10000) FROM generate_series(1, 100000)";
    assert_bounded_and_granted(&luge, &db, huge, pg.password);
}

#[test]
fn a_luge_toml_route_queries_postgres_within_its_deadline() {
    wasmtime_only!();
    let pg = PostgresServer::start().unwrap();
    let wrong = pg.url().replace(pg.password, "not-the-password");
    let routes = toml_routes("postgres", "pg_address", pg.port, &pg.url(), &wrong);
    let site = Site::new(&["spin-app"], &routes);
    let luge = site.start(&[]);
    let post = |path: &str, body: &str| text(&luge, "POST", path, body.as_bytes());
    assert_eq!(
        post("/db/pg/query", "SELECT 41 + 1 AS answer"),
        (200, "answer:DbDataType::Int32\nDbValue::Int32(42)".into())
    );
    assert_ends_by_deadline(&luge, "pg", "SELECT pg_sleep(30)");
    // Nor on the server: 24 of them at once (more than the function's 16
    // connections), each cancelled there at its deadline; none is left
    // running, and the function's connections are free again.
    let sleeping = || post("/db/pg/query", SLEEPING);
    std::thread::scope(|scope| {
        for _ in 0..24 {
            scope.spawn(|| post("/db/pg/query", "SELECT pg_sleep(120)"));
        }
    });
    until_none_sleeps(sleeping);
    assert_wrong_password_refused(&luge, "pg");
}

/// `sslmode=require` from the Spin app: TLS to a PostgreSQL that offers
/// it, trusted through the operator's `--ca-file`; without that CA, the
/// certificate is refused.
#[test]
fn sslmode_require_is_tls_trusted_through_the_operators_ca() {
    wasmtime_only!();
    let ca = luge_testkit::tls::PrivateCa::new();
    let (cert, key) = ca.server_pem("localhost");
    let pg = PostgresServer::start_tls(&cert, &key).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &ca.pem).unwrap();
    let db = Db {
        name: "pg",
        host: format!("localhost:{}", pg.port),
        address: format!(
            "postgres://{}:{}@localhost:{}/{}?sslmode=require",
            pg.user, pg.password, pg.port, pg.user
        ),
    };
    let start = |extra: &[&str]| db.serve_app(dir.path(), extra);
    let query = "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()";
    let luge = start(&["--ca-file", path_str(&ca_file)]);
    let (status, body) = text(&luge, "POST", "/pg/query", query.as_bytes());
    assert_eq!(status, 200, "{body}");
    assert!(body.ends_with("DbValue::Boolean(true)"), "{body}");
    drop(luge);
    let luge = start(&[]);
    let (status, body) = text(&luge, "POST", "/pg/query", query.as_bytes());
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("certificate"), "{body}");
    let log = format!("{}{}", luge.stderr(), luge.stdout());
    assert!(!log.contains(pg.password), "{log}");
}

/// `spin:postgres@3.0.0`, what spin-sdk 3 and 4 components import (a
/// command built on it, on a luge.toml route): queries and executes under
/// the same grant; a type 3.0 lacks comes back `unsupported`, its column
/// `other`.
#[test]
fn older_sdks_postgres_interface_is_served() {
    wasmtime_only!();
    let pg = PostgresServer::start().unwrap();
    let port = pg.port;
    let routes = format!(
        "[[routes]]\npath = \"/pg3\"\nmodule = \"spin-pg3.wasm\"\n\
         allowed_outbound_hosts = [\"postgres://127.0.0.1:{port}\"]\n\
         env = {{ PG_ADDRESS = \"{url}\" }}\n\
         [[routes]]\npath = \"/ungranted\"\nmodule = \"spin-pg3.wasm\"\n\
         env = {{ PG_ADDRESS = \"{url}\" }}\n\
         [[routes]]\npath = \"/timed\"\nmodule = \"spin-pg3.wasm\"\n\
         allowed_outbound_hosts = [\"postgres://127.0.0.1:{port}\"]\n\
         env = {{ PG_ADDRESS = \"{url}\" }}\n\
         limits = {{ timeout_ms = 1500 }}\n",
        url = pg.url()
    );
    let site = Site::new(&["spin-pg3"], &routes);
    let luge = site.start(&[]);
    let post = |path: &str, body: &str| {
        let (status, body) = luge.request("POST", path, body.as_bytes());
        (status, String::from_utf8_lossy(&body).into_owned())
    };
    assert_eq!(
        post("/pg3", "CREATE TABLE t3 (id int, name text, u uuid)"),
        (200, "0".into())
    );
    assert_eq!(
        post(
            "/pg3",
            "INSERT INTO t3 VALUES (1, 'x', '67e55044-10b1-426f-9247-bb680e5fe0c8')"
        ),
        (200, "1".into())
    );
    assert_eq!(
        post("/pg3", "SELECT id, name, u FROM t3"),
        (
            200,
            "id:DbDataType::Int32|name:DbDataType::Str|u:DbDataType::Other\n\
             DbValue::Int32(1)|DbValue::Str(\"x\")|DbValue::Unsupported"
                .into()
        )
    );
    let (status, body) = post("/ungranted", "SELECT 1");
    assert_eq!(status, 500, "{body}");
    assert!(luge.stderr_shows("not granted"), "{}", luge.stderr());
    // The attacks on 4.2 hold on 3.0 (one binding's code): a gigabyte
    // selected is an error, not the host's memory...
    let (status, body) = post(
        "/pg3",
        "SELECT repeat('x', 10000) FROM generate_series(1, 100000)",
    );
    assert_eq!(status, 500, "{body}");
    assert!(luge.stderr_shows("larger than"), "{}", luge.stderr());
    // ...and 24 queries at once past their deadline (more than the
    // function's 16 connections) are cancelled on the server: none left
    // running, the function's connections free again.
    std::thread::scope(|scope| {
        for _ in 0..24 {
            scope.spawn(|| post("/timed", "SELECT pg_sleep(120)"));
        }
    });
    until_none_sleeps(|| post("/pg3", SLEEPING));
    assert_eq!(post("/timed", "SELECT 2 AS two").0, 200);
}

/// Spin 2's `fermyon:spin/postgres@2.0.0` and `mysql@2.0.0`, from an app
/// as spin-sdk 3 builds it (a `wasm32-wasip1` module): the same grants as
/// Spin 4's interfaces, and the same servers.
#[test]
fn spin_2s_postgres_and_mysql_are_served() {
    wasmtime_only!();
    let pg = PostgresServer::start().unwrap();
    let my = luge_testkit::mariadb::MariaDbServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.wasm"), wasm("spin-sdk3")).unwrap();
    let manifest = dir.path().join("spin.toml");
    let write = |grants: &str| {
        std::fs::write(
            &manifest,
            format!(
                r#"
                spin_manifest_version = 2
                [application]
                name = "sdk3-rdbms"
                [[trigger.http]]
                route = "/..."
                component = "app"
                [component.app]
                source = "app.wasm"
                allowed_outbound_hosts = [{grants}]
                [component.app.variables]
                pg_address = "{}"
                mysql_address = "{}"
                "#,
                pg.url(),
                my.url()
            ),
        )
        .unwrap()
    };
    write(&format!(
        "\"postgres://127.0.0.1:{}\", \"mysql://127.0.0.1:{}\"",
        pg.port, my.port
    ));
    let state = tempfile::tempdir().unwrap();
    let luge = serve_spin(&manifest, state.path(), &[], &[]);
    let post = |path: &str, body: &str| text(&luge, "POST", path, body.as_bytes());
    assert_eq!(
        post(
            "/pg",
            "SELECT 41 + 1 AS answer, 'x'::text AS s, NULL::int AS z, now() AS t"
        ),
        (200, "answer|s|z|t\n42|x|null|unsupported".into())
    );
    assert_eq!(
        post("/mysql", "SELECT 41 + 1 AS answer, 'x' AS s, NULL AS z"),
        (200, "answer|s|z\n42|x|null".into())
    );
    drop(luge);
    // Without the grants: refused, as Spin 4's interfaces are.
    write("");
    let luge = serve_spin(&manifest, state.path(), &[], &[]);
    for path in ["/pg", "/mysql"] {
        let (status, body) = text(&luge, "POST", path, b"SELECT 1");
        assert_eq!(status, 500, "{path}: {body}");
        assert!(body.contains("ConnectionFailed"), "{path}: {body}");
    }
}
