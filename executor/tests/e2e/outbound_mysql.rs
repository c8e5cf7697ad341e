//! Outbound MySQL end to end: `spin:mysql@3.0.0` from the Spin app
//! (actions/spin, `spin-sdk` 7's `mysql` module) against a real MariaDB
//! (a fresh data directory on a free loopback port, a password), under
//! `luge serve --spin` and on a luge.toml route; and what a hostile
//! function tries (an ungranted server, a huge result set, a statement
//! past its deadline, a wrong password, a host file by `LOAD DATA
//! LOCAL`), the password printed nowhere.

use luge_testkit::mariadb::MariaDbServer;

use crate::common::*;
use crate::databases::*;
use crate::spin::text;

#[test]
fn a_spin_app_queries_its_granted_mysql() {
    wasmtime_only!();
    let server = MariaDbServer::start().unwrap();
    let db = Db {
        name: "mysql",
        host: format!("127.0.0.1:{}", server.port),
        address: server.url(),
    };
    let state_dir = tempfile::tempdir().unwrap();
    let luge = db.serve_app(state_dir.path(), &[]);
    let post = |path: &str, body: &str| text(&luge, "POST", path, body.as_bytes());
    assert_eq!(
        post(
            "/mysql/execute",
            "CREATE TABLE notes (id INT AUTO_INCREMENT PRIMARY KEY, text VARCHAR(100) NOT NULL)"
        ),
        (200, String::new())
    );
    assert_eq!(post("/mysql/insert/hello", ""), (200, String::new()));
    assert_eq!(post("/mysql/insert/it's", ""), (200, String::new()));
    let (status, body) = post(
        "/mysql/query",
        "SELECT id, text, NULL AS z FROM notes ORDER BY id",
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        "id:DbDataType::Int32|text:DbDataType::Str|z:DbDataType::Other\n\
         DbValue::Int32(1)|DbValue::Str(\"hello\")|DbValue::DbNull\n\
         DbValue::Int32(2)|DbValue::Str(\"it's\")|DbValue::DbNull"
    );
    let (status, body) = post("/mysql/query", "SELECT * FROM missing");
    assert_eq!(status, 500, "{body}");
    assert!(
        body.contains("QueryFailed") && body.contains("1146"),
        "{body}"
    );
    // No host file: LOAD DATA LOCAL finds no handler.
    let (status, body) = post(
        "/mysql/execute",
        "LOAD DATA LOCAL INFILE '/etc/passwd' INTO TABLE notes",
    );
    assert_eq!(status, 500, "{body}");
    let huge = "SELECT REPEAT('x', 10000) \
                FROM information_schema.columns a, information_schema.columns b";
    assert_bounded_and_granted(&luge, &db, huge, server.password);
}

#[test]
fn a_luge_toml_route_queries_mysql_within_its_deadline() {
    wasmtime_only!();
    let db = MariaDbServer::start().unwrap();
    let wrong = db.url().replace(db.password, "not-the-password");
    let routes = toml_routes("mysql", "mysql_address", db.port, &db.url(), &wrong);
    let site = Site::new(&["spin-app"], &routes);
    let luge = site.start(&[]);
    assert_eq!(
        text(
            &luge,
            "POST",
            "/db/mysql/query",
            b"SELECT CAST(41 + 1 AS SIGNED) AS answer"
        ),
        (200, "answer:DbDataType::Int32\nDbValue::Int32(42)".into())
    );
    assert_ends_by_deadline(&luge, "mysql", "SELECT SLEEP(30)");
    assert_wrong_password_refused(&luge, "mysql");
}

/// `require_ssl=true` from the Spin app: TLS to a MariaDB that requires
/// it, trusted through the operator's `--ca-file`; without that CA, the
/// certificate is refused; asking not to verify is refused whatever the
/// CA; the password is printed nowhere.
#[test]
fn require_ssl_is_tls_trusted_through_the_operators_ca() {
    wasmtime_only!();
    let ca = luge_testkit::tls::PrivateCa::new();
    let (cert, key) = ca.server_pem("localhost");
    let db = MariaDbServer::start_tls(&cert, &key).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &ca.pem).unwrap();
    let start = |params: &str, extra: &[&str]| {
        let app = Db {
            name: "mysql",
            host: format!("localhost:{}", db.port),
            address: format!(
                "mysql://{}:{}@localhost:{}/{}?{params}",
                db.user, db.password, db.port, db.user
            ),
        };
        app.serve_app(dir.path(), extra)
    };
    let query = "SHOW SESSION STATUS LIKE 'Ssl_version'";
    let luge = start("require_ssl=true", &["--ca-file", path_str(&ca_file)]);
    let (status, body) = text(&luge, "POST", "/mysql/query", query.as_bytes());
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("TLSv1."), "{body}");
    drop(luge);
    let luge = start("require_ssl=true", &[]);
    let (status, body) = text(&luge, "POST", "/mysql/query", query.as_bytes());
    assert_eq!(status, 500, "{body}");
    assert!(body.to_lowercase().contains("certificate"), "{body}");
    drop(luge);
    let luge = start(
        "require_ssl=true&verify_ca=false",
        &["--ca-file", path_str(&ca_file)],
    );
    let (status, body) = text(&luge, "POST", "/mysql/query", query.as_bytes());
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("always verifies"), "{body}");
    let log = format!("{}{}", luge.stderr(), luge.stdout());
    assert!(!log.contains(db.password), "{log}");
}
