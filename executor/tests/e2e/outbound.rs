//! Functions reaching the world: a wasi:http handler's outgoing HTTPS
//! against real TLS servers on 127.0.0.1 with a private CA made here, and
//! what `allowed_outbound_hosts` refuses (Spin's grammar; wildcards reach
//! public addresses only; other encodings of an address are names).

use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common;
use crate::components::serve_handler;

use common::*;
use luge_testkit::tls::{self, PrivateCa};

/// An HTTPS server on 127.0.0.1 with `config`, answering every request
/// with its protocol version (`secure over HTTP/2.0`).
fn https_server(config: Arc<rustls::ServerConfig>) -> u16 {
    tls::serve(Some(config), |version| format!("secure over {version:?}"))
}

/// A server config for `name` offering HTTP/2 and HTTP/1.1.
fn leaf(ca: &PrivateCa, name: &str, expired: bool) -> Arc<rustls::ServerConfig> {
    ca.server(name, expired, false, &[b"h2", b"http/1.1"])
}

/// Outgoing HTTPS from a component: the private CA trusted through
/// `--ca-file`, HTTP/2 by ALPN; without the CA, for another name, or
/// expired, the certificate is refused and the function hears
/// `TlsCertificateError`; a server that never completes the handshake
/// costs the request its own time limit, no more.
#[test]
fn outgoing_https_trusts_the_operators_ca_and_refuses_bad_certificates() {
    wasmtime_only!();
    let ca = PrivateCa::new();
    let good = https_server(leaf(&ca, "localhost", false));
    let other_name = https_server(leaf(&ca, "other.test", false));
    let expired = https_server(leaf(&ca, "localhost", true));
    let stall = TcpListener::bind("127.0.0.1:0").unwrap();
    let stalled = stall.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &ca.pem).unwrap();

    let grant = format!(
        "allowed_outbound_hosts = [\"https://localhost:{good}\", \"https://localhost:{other_name}\", \"https://localhost:{expired}\", \"https://localhost:{stalled}\"]\nlimits = {{ timeout_ms = 1500 }}"
    );
    let routes = [("/out/fetch", grant.as_str())];
    let (_site, luge) = serve_handler(&routes, &["--ca-file", path_str(&ca_file)]);
    let fetch = |port: u16| {
        let url = format!("https://localhost:{port}/page");
        let reply = luge.send("GET", "/out/fetch", &[("x-fetch", &url)], b"");
        (
            reply.status,
            String::from_utf8_lossy(&reply.body).to_string(),
        )
    };
    assert_eq!(fetch(good), (200, "secure over HTTP/2.0".to_owned()));
    for bad in [other_name, expired] {
        let (status, body) = fetch(bad);
        assert_eq!(status, 502, "{body}");
        assert!(body.contains("TlsCertificateError"), "{body}");
    }
    let started = Instant::now();
    let (status, body) = fetch(stalled);
    assert!(status >= 500, "{status} {body}");
    assert!(started.elapsed() < Duration::from_secs(5), "{body}");
    // Requests in a row from one invocation, on a kept-alive connection.
    let url = format!("https://localhost:{good}/page");
    let reply = luge.send("GET", "/out/fetch?3", &[("x-fetch", &url)], b"");
    assert_eq!(reply.status, 200);
    drop(stall);

    // Without the operator's CA, the same server is an unknown issuer.
    let (_site, plain) = serve_handler(&routes, &[]);
    let url = format!("https://localhost:{good}/page");
    let reply = plain.send("GET", "/out/fetch", &[("x-fetch", &url)], b"");
    let body = String::from_utf8_lossy(&reply.body).to_string();
    assert_eq!(reply.status, 502, "{body}");
    assert!(body.contains("TlsCertificateError"), "{body}");
}

/// A bad `--ca-file` stops the start with the reason, by name.
#[test]
fn a_ca_file_that_holds_no_certificate_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ca.pem");
    std::fs::write(&file, "not a certificate\n").unwrap();
    let site = Site::new(&[], "");
    let refused = site
        .try_start(&["--ca-file", path_str(&file)])
        .err()
        .unwrap();
    assert!(
        refused.contains("--ca-file") && refused.contains("no certificate"),
        "{refused}"
    );
}

/// The files an operator's configuration names are read only when they
/// are regular files, within a bound, and an error names the file and the
/// line, never what the file holds: a `/dev/zero` CA bundle, a FIFO, a
/// directory or a dotenv file that is some other file (`/etc/shadow`)
/// stop the start at once with the reason.
#[test]
fn operator_files_are_bounded_regular_and_never_echoed() {
    let dir = tempfile::tempdir().unwrap();
    let rc = dir.path().join("rc.toml");
    let site = Site::new(&[], "");
    let start = |rc: &std::path::Path| {
        site.try_start(&["--runtime-config-file", path_str(rc)])
            .err()
            .expect("refused")
    };
    for (what, file) in [
        ("a device", "/dev/zero".to_owned()),
        ("a directory", path_str(dir.path()).to_owned()),
    ] {
        std::fs::write(
            &rc,
            format!(
                "[[client_tls]]\ncomponent_ids = [\"x\"]\nhosts = [\"localhost\"]\nca_roots_file = \"{file}\"\n"
            ),
        )
        .unwrap();
        let refused = start(&rc);
        assert!(
            refused.contains(&format!("{file}: not a regular file")),
            "{what}: {refused}"
        );
    }
    for file in ["/dev/zero", path_str(dir.path())] {
        let refused = site.try_start(&["--ca-file", file]).err().expect("refused");
        assert!(refused.contains("not a regular file"), "{file}: {refused}");
    }
    // A runtime config that is not TOML: its line, never its text.
    std::fs::write(&rc, "a = 1\nroot:$6$s3cr3t-hash:19000:0:99999:7:::\n").unwrap();
    let refused = start(&rc);
    assert!(refused.contains("line 2"), "{refused}");
    assert!(!refused.contains("s3cr3t"), "{refused}");
    // A dotenv file that is not one, for a Spin app's variables.
    if on_wasmtime() {
        std::fs::write(dir.path().join("app.wasm"), wasm("spin-sdk3")).unwrap();
        let manifest = catch_all_app(dir.path(), "app.wasm", "");
        std::fs::write(
            dir.path().join("secret.env"),
            "GOOD=1\nroot:$6$s3cr3t-hash:19000:0:99999:7:::\n",
        )
        .unwrap();
        std::fs::write(
            &rc,
            "[[variables_provider]]\ntype = \"env\"\ndotenv_path = \"secret.env\"\n",
        )
        .unwrap();
        let state = tempfile::tempdir().unwrap();
        let refused = Luge::try_start(
            "serve",
            &[
                "--spin",
                path_str(&manifest),
                "--runtime-config-file",
                path_str(&rc),
                "--state-dir",
                path_str(state.path()),
            ],
        )
        .err()
        .expect("refused");
        assert!(
            refused.contains("secret.env") && refused.contains("line 2"),
            "{refused}"
        );
        assert!(!refused.contains("s3cr3t"), "{refused}");
    }
}

/// `allowed_outbound_hosts` as Spin writes it, enforced on each request:
/// a wildcard host reaches public addresses only (127.0.0.1 is not, so it
/// is denied even though `*` matches it); a grant naming 127.0.0.1 does
/// not admit `127.1` or `2130706433`, other encodings of it; a scheme or
/// port not granted is denied; a port range admits its ports.
#[test]
fn outbound_grants_follow_spins_grammar_and_the_address_rule() {
    wasmtime_only!();
    let port = tcp_peer(UPSTREAM);
    let wildcard = "allowed_outbound_hosts = [\"*://*:*\"]".to_owned();
    let range = format!(
        "allowed_outbound_hosts = [\"http://127.0.0.1:{}..{}\"]",
        port,
        u32::from(port) + 1
    );
    let (_site, luge) = serve_handler(
        &[
            ("/any/fetch", wildcard.as_str()),
            ("/range/fetch", range.as_str()),
        ],
        &[],
    );
    let fetch = |route: &str, url: &str| {
        let reply = luge.send("GET", route, &[("x-fetch", url)], b"");
        (
            reply.status,
            String::from_utf8_lossy(&reply.body).to_string(),
        )
    };
    let direct = format!("http://127.0.0.1:{port}/");
    assert_eq!(
        fetch("/range/fetch", &direct),
        (200, "upstream!".to_owned())
    );
    for (route, url) in [
        ("/any/fetch", direct.clone()),
        ("/any/fetch", format!("http://localhost:{port}/")),
        ("/range/fetch", format!("http://127.1:{port}/")),
        ("/range/fetch", format!("http://2130706433:{port}/")),
        ("/range/fetch", format!("https://127.0.0.1:{port}/")),
        (
            "/range/fetch",
            format!("http://127.0.0.1:{}/", port.wrapping_add(1)),
        ),
    ] {
        let (status, body) = fetch(route, &url);
        assert_eq!(status, 502, "{route} {url}: {body}");
        assert!(body.contains("HttpRequestDenied"), "{route} {url}: {body}");
    }
}

/// Spin's runtime config (`--runtime-config-file`): a `[[client_tls]]`
/// entry gives the function it names (a route's `name`, as a Spin
/// component's id) its own roots and a client certificate for a server
/// that requires one (mTLS, HTTP/1.1 by ALPN); another function with the
/// same grant gets neither, and hears `TlsCertificateError`. `[outbound_networking]
/// block_networks` refuses a network whatever a grant says.
#[test]
fn spins_client_tls_and_blocked_networks_shape_outgoing_connections() {
    wasmtime_only!();
    let ca = PrivateCa::new();
    let port = https_server(ca.server("localhost", false, true, &[b"http/1.1"]));
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = ca.client("a client");
    std::fs::write(dir.path().join("ca.pem"), &ca.pem).unwrap();
    std::fs::write(dir.path().join("client.pem"), cert).unwrap();
    std::fs::write(dir.path().join("client.key"), key).unwrap();
    let rc = dir.path().join("rc.toml");
    std::fs::write(
        &rc,
        format!(
            "[[client_tls]]\ncomponent_ids = [\"mtls\"]\nhosts = [\"localhost:{port}\"]\n\
             ca_roots_file = \"ca.pem\"\nclient_cert_file = \"client.pem\"\n\
             client_private_key_file = \"client.key\"\n"
        ),
    )
    .unwrap();
    let grant = format!("allowed_outbound_hosts = [\"https://localhost:{port}\"]");
    let mtls = format!("name = \"mtls\"\n{grant}");
    let other = format!("name = \"other\"\n{grant}");
    let routes = [
        ("/mtls/fetch", mtls.as_str()),
        ("/other/fetch", other.as_str()),
    ];
    let (_site, luge) = serve_handler(&routes, &["--runtime-config-file", path_str(&rc)]);
    let url = format!("https://localhost:{port}/page");
    let fetch = |route: &str| {
        let reply = luge.send("GET", route, &[("x-fetch", &url)], b"");
        (
            reply.status,
            String::from_utf8_lossy(&reply.body).to_string(),
        )
    };
    assert_eq!(
        fetch("/mtls/fetch"),
        (200, "secure over HTTP/1.1".to_owned())
    );
    let (status, body) = fetch("/other/fetch");
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("TlsCertificateError"), "{body}");
    drop(luge);

    // A blocked network: the grant names 127.0.0.1, the operator's block
    // wins; and whatever this host is spelt as: the unspecified addresses
    // (`0.0.0.0`, `[::]`, `[::ffff:0.0.0.0]`) reach it too, and are
    // blocked with it.
    std::fs::write(
        &rc,
        "[outbound_networking]\nblock_networks = [\"127.0.0.0/8\", \"::1/128\"]\n",
    )
    .unwrap();
    let spellings = ["0.0.0.0", "[::]", "[::ffff:0.0.0.0]"];
    let zero = format!(
        "name = \"zero\"\nallowed_outbound_hosts = [{}]",
        spellings
            .iter()
            .map(|host| format!("\"https://{host}:{port}\""))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let blocked_routes = [
        ("/mtls/fetch", mtls.as_str()),
        ("/zero/fetch", zero.as_str()),
    ];
    let (_site, luge) = serve_handler(&blocked_routes, &["--runtime-config-file", path_str(&rc)]);
    let reply = luge.send("GET", "/mtls/fetch", &[("x-fetch", &url)], b"");
    let body = String::from_utf8_lossy(&reply.body).to_string();
    assert_eq!(reply.status, 502, "{body}");
    assert!(body.contains("HttpRequestDenied"), "{body}");
    for host in spellings {
        let url = format!("https://{host}:{port}/page");
        let reply = luge.send("GET", "/zero/fetch", &[("x-fetch", &url)], b"");
        let body = String::from_utf8_lossy(&reply.body).to_string();
        assert_eq!(reply.status, 502, "{host}: {body}");
        assert!(body.contains("HttpRequestDenied"), "{host}: {body}");
    }

    // Sections Luge does not serve stop the start, by name.
    std::fs::write(&rc, "[llm_compute]\ntype = \"spin\"\n").unwrap();
    let refused = Site::new(&[], "")
        .try_start(&["--runtime-config-file", path_str(&rc)])
        .err()
        .unwrap();
    assert!(refused.contains("[llm_compute] is not served"), "{refused}");
}

/// `wasi:sockets` under grants, from a WASI 0.2 command (Rust's std
/// `TcpStream`): a `tcp://` grant of an address admits connections to
/// it; another port, or a wildcard grant (public addresses only), is
/// refused; at most 64 sockets per invocation.
#[test]
fn sockets_reach_only_granted_addresses() {
    wasmtime_only!();
    let port = tcp_peer(b"pong\n");
    let site = Site::new(
        &["p2-tcp"],
        &format!(
            "[[routes]]\npath = \"/tcp\"\nmodule = \"p2-tcp.wasm\"\nallowed_outbound_hosts = [\"tcp://127.0.0.1:{port}\"]\n\n\
             [[routes]]\npath = \"/any\"\nmodule = \"p2-tcp.wasm\"\nallowed_outbound_hosts = [\"tcp://*:*\"]\n\n\
             [[routes]]\npath = \"/none\"\nmodule = \"p2-tcp.wasm\"\n"
        ),
    );
    let luge = site.start(&[]);
    let call = |route: &str, body: String| {
        let reply = luge.send("POST", route, &[], body.as_bytes());
        String::from_utf8_lossy(&reply.body).to_string()
    };
    let granted = format!("{{\"addr\": \"127.0.0.1:{port}\"}}");
    assert!(
        call("/tcp", granted.clone()).contains("pong"),
        "{}",
        call("/tcp", granted.clone())
    );
    for (route, body) in [
        (
            "/tcp",
            format!("{{\"addr\": \"127.0.0.1:{}\"}}", port.wrapping_add(1)),
        ),
        ("/any", granted.clone()),
        ("/none", granted.clone()),
    ] {
        let answer = call(route, body.clone());
        assert!(
            answer.contains("error") && !answer.contains("pong"),
            "{route} {body}: {answer}"
        );
    }
    let held = call(
        "/tcp",
        format!("{{\"addr\": \"127.0.0.1:{port}\", \"hold\": 70}}"),
    );
    assert!(
        held.contains("\"held\":64") && held.contains("error"),
        "{held}"
    );
}
