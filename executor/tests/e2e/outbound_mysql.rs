//! Outbound MySQL end to end: `spin:mysql@3.0.0` from the Spin app
//! (actions/spin, `spin-sdk` 7's `mysql` module) against a real MariaDB
//! (a fresh data directory on a free loopback port, a password), under
//! `luge serve --spin` and on a luge.toml route; and what a hostile
//! function tries (an ungranted server, a huge result set, a statement
//! past its deadline, a wrong password, a host file by `LOAD DATA
//! LOCAL`), the password printed nowhere.

use std::time::{Duration, Instant};

use luge_testkit::mariadb::MariaDbServer;

use crate::common::*;
use crate::spin::{manifest, text, upstream};

fn on_wasmtime() -> bool {
    engine() == "wasmtime"
}

#[test]
fn a_spin_app_queries_its_granted_mysql() {
    if !on_wasmtime() {
        return;
    }
    let db = MariaDbServer::start().unwrap();
    let host = format!("127.0.0.1:{}", db.port);
    let address = db.url();
    let upstream = upstream();
    let state_dir = tempfile::tempdir().unwrap();
    let manifest = manifest();
    let luge = Luge::start_with_env(
        "serve",
        &[
            "--spin",
            path_str(&manifest),
            "--state-dir",
            path_str(state_dir.path()),
        ],
        &[
            ("SPIN_VARIABLE_UPSTREAM", upstream.as_str()),
            ("SPIN_VARIABLE_MYSQL_HOST", host.as_str()),
            ("SPIN_VARIABLE_MYSQL_ADDRESS", address.as_str()),
        ],
    );
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
    // A gigabyte selected: an error, not the host's memory.
    let (status, body) = post(
        "/mysql/query",
        "SELECT REPEAT('x', 10000) FROM information_schema.columns a, information_schema.columns b",
    );
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("larger than"), "{body}");
    // The backend component has no mysql:// grant.
    let (status, body) = post("/backend/mysql/query", "SELECT 1");
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("not granted"), "{body}");
    let log = format!("{}{}", luge.stderr(), luge.stdout());
    assert!(!log.contains(db.password), "{log}");
}

#[test]
fn a_luge_toml_route_queries_mysql_within_its_deadline() {
    if !on_wasmtime() {
        return;
    }
    let db = MariaDbServer::start().unwrap();
    let port = db.port;
    let wrong = db.url().replace(db.password, "not-the-password");
    let routes = format!(
        "[[routes]]\npath = \"/m/...\"\nmodule = \"spin-app.wasm\"\n\
         allowed_outbound_hosts = [\"mysql://127.0.0.1:{port}\"]\n\
         variables = {{ mysql_address = \"{}\" }}\n\
         limits = {{ timeout_ms = 1500 }}\n\
         [[routes]]\npath = \"/wrong/...\"\nmodule = \"spin-app.wasm\"\n\
         allowed_outbound_hosts = [\"mysql://127.0.0.1:{port}\"]\n\
         variables = {{ mysql_address = \"{wrong}\" }}\n",
        db.url()
    );
    let site = Site::new(&["spin-app"], &routes);
    let luge = site.start(&[]);
    let post = |path: &str, body: &str| text(&luge, "POST", path, body.as_bytes());
    assert_eq!(
        post("/m/mysql/query", "SELECT CAST(41 + 1 AS SIGNED) AS answer"),
        (200, "answer:DbDataType::Int32\nDbValue::Int32(42)".into())
    );
    let started = Instant::now();
    let (status, body) = post("/m/mysql/query", "SELECT SLEEP(30)");
    assert_ne!(status, 200, "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let (status, body) = post("/wrong/mysql/query", "SELECT 1");
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("ConnectionFailed"), "{body}");
    assert!(!body.contains("not-the-password"), "{body}");
    assert_eq!(
        post("/m/mysql/query", "SELECT 'still' AS here"),
        (200, "here:DbDataType::Str\nDbValue::Str(\"still\")".into())
    );
}

/// `require_ssl=true` from the Spin app: TLS to a MariaDB that requires
/// it, trusted through the operator's `--ca-file`; without that CA, the
/// certificate is refused; asking not to verify is refused whatever the
/// CA; the password is printed nowhere.
#[test]
fn require_ssl_is_tls_trusted_through_the_operators_ca() {
    if !on_wasmtime() {
        return;
    }
    let ca = luge_testkit::tls::PrivateCa::new();
    let (cert, key) = ca.server_pem("localhost");
    let db = MariaDbServer::start_tls(&cert, &key).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &ca.pem).unwrap();
    let host = format!("localhost:{}", db.port);
    let address = |params: &str| {
        format!(
            "mysql://{}:{}@localhost:{}/{}?{params}",
            db.user, db.password, db.port, db.user
        )
    };
    let upstream = upstream();
    let manifest = manifest();
    let start = |params: &str, extra: &[&str]| {
        let mut args = vec![
            "--spin",
            path_str(&manifest),
            "--state-dir",
            path_str(dir.path()),
        ];
        args.extend_from_slice(extra);
        let address = address(params);
        Luge::start_with_env(
            "serve",
            &args,
            &[
                ("SPIN_VARIABLE_UPSTREAM", upstream.as_str()),
                ("SPIN_VARIABLE_MYSQL_HOST", host.as_str()),
                ("SPIN_VARIABLE_MYSQL_ADDRESS", address.as_str()),
            ],
        )
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
