//! TLS to MariaDB (`require_ssl=true`), in a process of its own: the
//! operator's outgoing settings (here, a private CA as `--ca-file` gives
//! it) are installed once per process, before any connection.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use luge_outbound::Caller;
use luge_outbound_mysql::{MysqlError, open};
use luge_testkit::mariadb::MariaDbServer;
use luge_testkit::{grants, later};

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
        Caller::new("t1", &granted, later(), 1 << 20),
        &url("localhost", "require_ssl=true"),
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
    let error = open(
        Caller::new("t1", &granted, later(), 1 << 20),
        &url("localhost", ""),
    )
    .await
    .unwrap_err();
    assert!(matches!(error, MysqlError::ConnectionFailed(_)), "{error}");
    // A name the certificate does not hold: refused, naming the
    // certificate, the password nowhere.
    let error = open(
        Caller::new("t1", &granted, later(), 1 << 20),
        &url("127.0.0.1", "require_ssl=true"),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(error.to_lowercase().contains("certificate"), "{error}");
    assert!(!error.contains("luge-pw"), "{error}");
    // Asking not to verify: refused before any connection.
    for insecure in ["verify_ca=false", "verify_identity=false"] {
        let error = open(
            Caller::new("t1", &granted, later(), 1 << 20),
            &url("localhost", &format!("require_ssl=true&{insecure}")),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(error, MysqlError::InsecureTls),
            "{insecure}: {error}"
        );
    }
}
