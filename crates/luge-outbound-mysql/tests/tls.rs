//! TLS to MariaDB (`require_ssl=true`), in a process of its own: the
//! operator's outgoing settings (here, a private CA as `--ca-file` gives
//! it) are installed once per process, before any connection.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::time::{Duration, Instant};

use luge_outbound_mysql::{MysqlError, open};
use luge_testkit::grants;
use luge_testkit::mariadb::MariaDbServer;

fn later() -> Instant {
    Instant::now() + Duration::from_secs(20)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_ssl_speaks_tls_verified_by_chain_and_name() {
    let ca = luge_testkit::tls::PrivateCa::new();
    luge_outbound::install(luge_outbound::Config::new(Some(ca.pem.as_bytes())).unwrap()).unwrap();
    let (cert, key) = ca.server_pem("localhost");
    let server = MariaDbServer::start_tls(&cert, &key).unwrap();
    let port = server.port;
    let granted = grants(&[
        &format!("mysql://localhost:{port}"),
        &format!("mysql://127.0.0.1:{port}"),
    ]);
    let url =
        |host: &str, params: &str| format!("mysql://luge:luge-pw@{host}:{port}/luge?{params}");
    // Trusting the server's CA, by its name: a TLS session.
    let c = open(
        "t1",
        &granted,
        &url("localhost", "require_ssl=true"),
        later(),
        1 << 20,
    )
    .await
    .unwrap();
    let cipher = c
        .query("SHOW SESSION STATUS LIKE 'Ssl_version'", vec![], later())
        .await
        .unwrap();
    let shown = format!("{:?}", cipher.rows);
    assert!(shown.contains("TLS"), "{shown}");
    // Plain TCP to a server that requires TLS: refused by the server.
    let error = open("t1", &granted, &url("localhost", ""), later(), 1 << 20)
        .await
        .unwrap_err();
    assert!(matches!(error, MysqlError::ConnectionFailed(_)), "{error}");
    // A name the certificate does not hold: refused, naming the
    // certificate, the password nowhere.
    let error = open(
        "t1",
        &granted,
        &url("127.0.0.1", "require_ssl=true"),
        later(),
        1 << 20,
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(error.to_lowercase().contains("certificate"), "{error}");
    assert!(!error.contains("luge-pw"), "{error}");
    // Asking not to verify: refused before any connection.
    for insecure in ["verify_ca=false", "verify_identity=false"] {
        let error = open(
            "t1",
            &granted,
            &url("localhost", &format!("require_ssl=true&{insecure}")),
            later(),
            1 << 20,
        )
        .await
        .unwrap_err();
        assert!(
            matches!(error, MysqlError::InsecureTls),
            "{insecure}: {error}"
        );
    }
}
