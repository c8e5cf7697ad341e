//! The Spin app reaching the world at once, configured as on Spin: `luge
//! serve --spin spin.toml --runtime-config-file rc.toml`, the runtime
//! config giving an HTTPS upstream's private CA (`[[client_tls]]`), a
//! named SQLite database (`[sqlite_database.NAME]`), the app's key-value
//! store on Redis (`[key_value_store.default]`) and the servers' addresses
//! and passwords (`[[variables_provider]]`, `static`), with PostgreSQL,
//! MariaDB and Redis on loopback.

use luge_testkit::mariadb::MariaDbServer;
use luge_testkit::postgres::PostgresServer;
use luge_testkit::redis::RedisServer;
use luge_testkit::tls::{self, PrivateCa};

use crate::common::*;
use crate::spin::{manifest, text};

#[test]
fn a_spin_app_reaches_https_sqlite_postgres_mysql_and_redis_under_its_runtime_config() {
    wasmtime_only!();
    let ca = PrivateCa::new();
    let https = tls::serve(
        Some(ca.server("localhost", false, false, &[b"h2", b"http/1.1"])),
        |version| format!("secure over {version:?}"),
    );
    let pg = PostgresServer::start().unwrap();
    let db = MariaDbServer::start().unwrap();
    let redis = RedisServer::with_password("rc-redis-secret").unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.pem"), &ca.pem).unwrap();
    let rc = dir.path().join("rc.toml");
    std::fs::write(
        &rc,
        format!(
            "[[client_tls]]\ncomponent_ids = [\"app\"]\nhosts = [\"localhost:{https}\"]\n\
             ca_roots_file = \"ca.pem\"\n\
             [sqlite_database.archive]\ntype = \"spin\"\npath = \"archive.db\"\n\
             [key_value_store.default]\ntype = \"redis\"\n\
             url = \"redis://:rc-redis-secret@127.0.0.1:{redis_port}\"\n\
             [[variables_provider]]\ntype = \"static\"\n\
             [variables_provider.values]\n\
             upstream = \"https://localhost:{https}\"\n\
             pg_host = \"127.0.0.1:{pg_port}\"\npg_address = \"{pg_url}\"\n\
             mysql_host = \"127.0.0.1:{db_port}\"\nmysql_address = \"{db_url}\"\n\
             redis_host = \"127.0.0.1:{redis_port}\"\n\
             redis_address = \"redis://:rc-redis-secret@127.0.0.1:{redis_port}\"\n",
            pg_port = pg.port,
            pg_url = pg.url(),
            db_port = db.port,
            db_url = db.url(),
            redis_port = redis.port,
        ),
    )
    .unwrap();
    // The manifest unchanged but for the archive database, which Spin too
    // would need listed.
    let manifest_text = std::fs::read_to_string(manifest())
        .unwrap()
        .replace(
            "sqlite_databases = [\"default\"]",
            "sqlite_databases = [\"default\", \"archive\"]",
        )
        .replace(
            "source = \"target/",
            &format!(
                "source = \"{}/target/",
                manifest().parent().unwrap().display()
            ),
        );
    let copy = dir.path().join("spin.toml");
    std::fs::write(&copy, manifest_text).unwrap();
    let start = || {
        let state_dir = tempfile::tempdir().unwrap();
        let luge = Luge::start(
            "serve",
            &[
                "--spin",
                path_str(&copy),
                "--runtime-config-file",
                path_str(&rc),
                "--state-dir",
                path_str(state_dir.path()),
            ],
        );
        (luge, state_dir)
    };
    let (luge, _state) = start();
    let call = |method: &str, path: &str, body: &str| text(&luge, method, path, body.as_bytes());

    // HTTPS to a server whose CA only the runtime config names.
    assert_eq!(
        call("GET", "/fetch", ""),
        (200, "secure over HTTP/2.0".into())
    );
    // SQLite: the app's own database and the runtime config's.
    assert_eq!(call("POST", "/sql/insert/kept", ""), (200, "1 1".into()));
    assert_eq!(
        call("POST", "/sql?db=archive", "CREATE TABLE a (x)"),
        (200, String::new())
    );
    assert!(dir.path().join("archive.db").exists());
    // PostgreSQL, MySQL and Redis, their addresses and passwords from the
    // runtime config.
    assert_eq!(
        call("POST", "/pg/query", "SELECT 'pg' AS who"),
        (200, "who:DbDataType::Str\nDbValue::Str(\"pg\")".into())
    );
    assert_eq!(
        call("POST", "/mysql/query", "SELECT 'my' AS who"),
        (200, "who:DbDataType::Str\nDbValue::Str(\"my\")".into())
    );
    assert_eq!(call("POST", "/redis/incr/n", ""), (200, "1".into()));
    // The app's `default` store lives in Redis: another Luge, with a state
    // directory of its own, reads what this one wrote.
    assert_eq!(call("PUT", "/kv/shared", "on redis"), (200, String::new()));
    let log = format!("{}{}", luge.stderr(), luge.stdout());
    for secret in [pg.password, db.password, "rc-redis-secret"] {
        assert!(!log.contains(secret), "{secret} in {log}");
    }
    drop(luge);
    let (other, _other_state) = start();
    assert_eq!(
        text(&other, "GET", "/kv/shared", b""),
        (200, "on redis".into())
    );
}
