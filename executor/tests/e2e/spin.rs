//! A Spin app (actions/spin: `spin-sdk` 7 from crates.io, a WASI 0.3
//! `wasi:http` service) served unchanged: `luge serve --spin` with the
//! very `spin.toml` that `spin up` takes. Routing, `spin:variables`,
//! `spin:key-value`, `wasi:keyvalue` draft2 atomics (increments and
//! compare-and-swap), `wasi:config`, outgoing HTTP to a granted origin,
//! service chaining, and the default store: the app's, shared by the
//! components that list it, and kept across a restart.

use std::path::PathBuf;

use crate::common::*;

/// The app's manifest, in the repository.
pub(crate) fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../actions/spin/spin.toml")
}

/// `luge serve --spin` of the app, its state under `state`, its
/// `upstream` variable (the granted origin) set as Spin sets variables.
pub(crate) fn serve_app(state: &std::path::Path, upstream: &str) -> Luge {
    let manifest = manifest();
    serve_spin(
        &manifest,
        state,
        &[],
        &[("SPIN_VARIABLE_UPSTREAM", upstream)],
    )
}

/// The example Spin app reaching a one-page upstream, its state in a
/// fresh directory: the server, the directory and the upstream's origin
/// (to start it again on the same state). `None` on an engine that serves
/// no components.
pub(crate) fn fresh_app() -> Option<(Luge, tempfile::TempDir, String)> {
    if !on_wasmtime() {
        return None;
    }
    let upstream = upstream();
    let state_dir = tempfile::tempdir().unwrap();
    let luge = serve_app(state_dir.path(), &upstream);
    Some((luge, state_dir, upstream))
}

/// A one-page HTTP server on 127.0.0.1: its origin.
pub(crate) fn upstream() -> String {
    let port = tcp_peer(UPSTREAM);
    format!("http://127.0.0.1:{port}")
}

/// Asserts that `GET path` answers 200 with `body`.
#[track_caller]
fn assert_get(luge: &Luge, path: &str, body: &str) {
    assert_eq!(
        text(luge, "GET", path, b""),
        (200, body.to_owned()),
        "GET {path}"
    );
}

pub(crate) fn text(luge: &Luge, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    let reply = luge.send(method, path, &[], body);
    (
        reply.status,
        String::from_utf8_lossy(&reply.body).into_owned(),
    )
}

#[test]
fn a_spin_app_runs_unchanged() {
    let Some((luge, state_dir, upstream)) = fresh_app() else {
        return;
    };

    // Routing below the wildcard route, and variables (a default, and one
    // given by the environment).
    assert_get(&luge, "/hello", "Hello, Spin app\n");
    assert_get(&luge, "/var/upstream", &upstream);
    let (status, body) = text(&luge, "GET", "/var/nope", b"");
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("Undefined"), "{body}");
    let (status, body) = text(&luge, "GET", "/var/Bad", b"");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("InvalidName"), "{body}");
    assert_eq!(text(&luge, "GET", "/nowhere", b"").0, 404);

    // The same variables through wasi:config/store at spin-sdk's version
    // (0.2.0-draft-2024-09-27): the component's own, no others.
    assert_get(&luge, "/config/upstream", &upstream);
    assert_get(&luge, "/config/greeting", "Hello");
    assert_eq!(text(&luge, "GET", "/config/nope", b"").0, 404);
    assert_get(
        &luge,
        "/config",
        "greeting\nmysql_address\npg_address\nredis_address\nupstream",
    );

    // What the component writes to stderr reaches Luge's log, a line per
    // line, named by the component (what `kubectl logs` shows in a pod).
    assert_eq!(
        text(&luge, "POST", "/log", b"a line from the app"),
        (200, "logged 19 bytes\n".to_owned())
    );
    assert!(
        luge.stderr_shows("a line from the app"),
        "{}",
        luge.stderr()
    );

    // spin:key-value.
    assert_eq!(text(&luge, "PUT", "/kv/colour", b"blue").0, 200);
    assert_get(&luge, "/kv/colour", "blue");
    assert_eq!(text(&luge, "DELETE", "/kv/colour", b"").0, 200);
    assert_eq!(text(&luge, "GET", "/kv/colour", b"").0, 404);
    assert_eq!(text(&luge, "PUT", "/kv/kept", b"across restarts").0, 200);
    assert_eq!(text(&luge, "PUT", "/kv/also", b"listed").0, 200);
    // get-keys: the store's keys (the deleted one gone).
    assert_get(&luge, "/kv", "also\nkept");

    // wasi:keyvalue atomics: 32 concurrent increments land exactly.
    assert_eq!(text(&luge, "POST", "/count", b""), (200, "1".to_owned()));
    std::thread::scope(|scope| {
        for _ in 0..32 {
            scope.spawn(|| assert_eq!(text(&luge, "POST", "/count", b"").0, 200));
        }
    });
    assert_eq!(text(&luge, "POST", "/count", b""), (200, "34".to_owned()));

    // Compare-and-swap: 10 concurrent doublings from 1 each see a value no
    // other saw, and end at 2^10.
    let mut seen: Vec<u64> = std::thread::scope(|scope| {
        let doublings: Vec<_> = (0..10)
            .map(|_| scope.spawn(|| text(&luge, "POST", "/double", b"")))
            .collect();
        doublings
            .into_iter()
            .map(|d| {
                let (status, body) = d.join().unwrap();
                assert_eq!(status, 200, "{body}");
                body.parse().unwrap()
            })
            .collect()
    });
    seen.sort_unstable();
    assert_eq!(seen, (1..=10).map(|i| 1u64 << i).collect::<Vec<_>>());

    // Outgoing HTTP to the origin the manifest allows.
    assert_get(&luge, "/fetch", "upstream!");

    // Service chaining: `app` reaches the `backend` component at
    // http://backend.spin.internal, which its manifest allows.
    assert_get(&luge, "/chain", "Chained, Spin app\n");
    // `backend` is not granted its own internal origin: its chaining
    // request is denied, whatever else it may reach (Spin PR 3016).
    let (status, body) = text(&luge, "GET", "/backend/chain", b"");
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("HttpRequestDenied"), "{body}");
    // Nothing resolves against the incoming request (Spin's
    // CVE-2024-32980): a URL without an authority goes nowhere, and a
    // client's Host header naming an internal function routes nothing.
    let (status, body) = text(&luge, "GET", "/relative", b"");
    assert_eq!(status, 502, "{body}");
    assert!(
        !body.contains("Chained") && !body.contains("Hello"),
        "{body}"
    );
    let reply = luge.send("GET", "/hello", &[("host", "backend.spin.internal")], b"");
    assert_eq!(
        (
            reply.status,
            String::from_utf8_lossy(&reply.body).into_owned()
        ),
        (200, "Hello, Spin app\n".to_owned())
    );

    // The default store is the app's: `backend`, which lists it too, reads
    // what `app` wrote (as on Spin), through its own route, and through
    // its second trigger's.
    assert_get(&luge, "/backend/kv/kept", "across restarts");
    assert_get(&luge, "/v2/backend/kv/kept", "across restarts");
    assert_get(&luge, "/v2/backend/hello", "Chained, Spin app\n");

    // The default store persists across a restart, as `spin up`'s does.
    drop(luge);
    let luge = serve_app(state_dir.path(), &upstream);
    assert_get(&luge, "/kv/kept", "across restarts");
    assert_get(&luge, "/backend/kv/kept", "across restarts");
    assert_eq!(text(&luge, "POST", "/count", b""), (200, "35".to_owned()));
}

/// SIGTERM drains: the request in progress (here waiting on a slow
/// upstream) is finished and answered, new connections are refused, and
/// luge then exits 0, well within Kubernetes' grace period.
#[test]
fn sigterm_finishes_the_requests_in_progress() {
    wasmtime_only!();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let upstream = format!("http://{}", listener.local_addr().unwrap());
    let (reached, arrived) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        if let Ok((mut stream, _)) = listener.accept() {
            let mut buf = [0; 4096];
            let _ = stream.read(&mut buf);
            let _ = reached.send(());
            std::thread::sleep(std::time::Duration::from_millis(1500));
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-length: 13\r\nconnection: close\r\n\r\nslow upstream",
            );
        }
    });
    let state_dir = tempfile::tempdir().unwrap();
    let mut luge = serve_app(state_dir.path(), &upstream);
    let base = luge.base.clone();
    let in_flight = std::thread::spawn(move || {
        let reply = ureq::get(&format!("{base}/fetch")).call();
        reply.map(|r| r.into_body().read_to_string().unwrap_or_default())
    });
    // The request is in progress: the function waits on the upstream.
    arrived
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the function reached the upstream");
    luge.terminate();
    let body = in_flight
        .join()
        .unwrap()
        .expect("the request in progress was answered");
    assert_eq!(body, "slow upstream");
    let status = luge
        .exited_within(std::time::Duration::from_secs(10))
        .expect("luge exits once drained");
    assert!(status.success(), "{status:?}: {}", luge.stderr());
}

/// The manifest's grants are all the app gets: an origin it does not list
/// is denied, a required variable must be given, and what Luge cannot
/// grant or serve is refused at start, by name.
#[test]
fn a_spin_app_gets_what_its_manifest_grants() {
    wasmtime_only!();
    let manifest = manifest();
    // Required and not given.
    let error = Luge::try_start("serve", &["--spin", path_str(&manifest)])
        .err()
        .unwrap();
    assert!(error.contains("SPIN_VARIABLE_UPSTREAM"), "{error}");

    // The same app, its outbound grant taken away: the request is denied.
    let dir = tempfile::tempdir().unwrap();
    let source = manifest
        .parent()
        .unwrap()
        .join("target/wasm32-wasip2/release/luge_spin_app.wasm");
    let text_of = std::fs::read_to_string(&manifest).unwrap();
    let ungranted = text_of
        .replace(
            "allowed_outbound_hosts = [\"{{ upstream }}\", \"http://backend.spin.internal\", \"redis://{{ redis_host }}\", \"postgres://{{ pg_host }}\", \"mysql://{{ mysql_host }}\"]",
            "allowed_outbound_hosts = []",
        )
        .replace(
            "source = \"target/wasm32-wasip2/release/luge_spin_app.wasm\"",
            &format!("source = {:?}", path_str(&source)),
        );
    assert_ne!(ungranted, text_of);
    let copy = dir.path().join("spin.toml");
    std::fs::write(&copy, &ungranted).unwrap();
    let upstream = upstream();
    let luge = Luge::start_with_env(
        "serve",
        &["--spin", path_str(&copy)],
        &[("SPIN_VARIABLE_UPSTREAM", upstream.as_str())],
    );
    for path in ["/fetch", "/chain"] {
        let (status, body) = text(&luge, "GET", path, b"");
        assert_eq!(status, 502, "{path}: {body}");
        assert!(body.contains("HttpRequestDenied"), "{path}: {body}");
    }
    drop(luge);

    // A component that does not list `default` never reaches the app's
    // store: opening it is access denied, as on Spin.
    let unlisted = ungranted.replace(
        "key_value_stores = [\"default\"]\n\n[component.backend.variables]",
        "\n[component.backend.variables]",
    );
    assert_ne!(unlisted, ungranted);
    std::fs::write(&copy, &unlisted).unwrap();
    let luge = Luge::start_with_env(
        "serve",
        &["--spin", path_str(&copy)],
        &[("SPIN_VARIABLE_UPSTREAM", upstream.as_str())],
    );
    assert_eq!(text(&luge, "PUT", "/kv/secret", b"the app's").0, 200);
    assert_get(&luge, "/kv/secret", "the app's");
    for method in ["GET", "PUT"] {
        let (status, body) = text(&luge, method, "/backend/kv/secret", b"its own");
        assert_eq!(status, 500, "{method}: {body}");
        assert!(body.contains("AccessDenied"), "{method}: {body}");
    }
    assert_get(&luge, "/kv/secret", "the app's");
    drop(luge);

    // `files`: a directory under --fs-root, read-only at the same path.
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir(root.path().join("static")).unwrap();
    std::fs::write(root.path().join("static/note.txt"), "from a files grant").unwrap();
    let in_root = root.path().join("spin.toml");
    std::fs::write(
        &in_root,
        ungranted.replace(
            "key_value_stores = [\"default\"]",
            "key_value_stores = [\"default\"]\nfiles = [\"static\"]",
        ),
    )
    .unwrap();
    let luge = Luge::start_with_env(
        "serve",
        &[
            "--spin",
            path_str(&in_root),
            "--fs-root",
            path_str(root.path()),
        ],
        &[("SPIN_VARIABLE_UPSTREAM", upstream.as_str())],
    );
    assert_get(&luge, "/file/note.txt", "from a files grant");
    drop(luge);

    // A grant with a path (Spin refuses it too), globs and directories outside
    // --fs-root are refused.
    for (from, to, expect) in [
        (
            "allowed_outbound_hosts = []",
            "allowed_outbound_hosts = [\"https://example.com/a/path\"]",
            "allowed_outbound_hosts[0]",
        ),
        (
            "key_value_stores = [\"default\"]",
            "key_value_stores = [\"default\"]\nfiles = [\"static/**\"]",
            "a glob",
        ),
        (
            "key_value_stores = [\"default\"]",
            "key_value_stores = [\"default\"]\nfiles = [\"static\"]",
            "fs-root",
        ),
    ] {
        std::fs::write(&copy, ungranted.replace(from, to)).unwrap();
        let error = Luge::try_start_with_env(
            "serve",
            &["--spin", path_str(&copy)],
            &[("SPIN_VARIABLE_UPSTREAM", upstream.as_str())],
        )
        .err()
        .unwrap();
        assert!(error.contains(expect), "{to}: {error}");
    }
}

/// A component importing interfaces Luge does not serve (here Spin's
/// LLM and a made-up package) is refused when the app starts, each import named:
/// never a trap at request time.
#[test]
fn unserved_imports_are_refused_at_start_by_name() {
    wasmtime_only!();
    let dir = tempfile::tempdir().unwrap();
    let manifest = catch_all_app(dir.path(), "app.wasm", "");
    // The app's component importing `imports` (WAT): why it is refused.
    let refused = |imports: &str| {
        let component = wat::parse_str(format!("(component {imports})")).unwrap();
        std::fs::write(dir.path().join("app.wasm"), component).unwrap();
        Luge::try_start("serve", &["--spin", path_str(&manifest)])
            .err()
            .unwrap()
    };
    let error = refused(
        r#"(import "wasi:cli/environment@0.2.0" (instance
                (export "get-arguments" (func (result (list string))))))
            (import "acme:made-up/thing@1.0.0" (instance (export "open" (func))))
            (import "fermyon:spin/llm@2.0.0" (instance (export "infer" (func))))"#,
    );
    assert!(
        error.contains("does not serve: acme:made-up/thing@1.0.0, fermyon:spin/llm@2.0.0;"),
        "{error}"
    );
    // A later candidate of WASI's, and the interfaces of the candidates
    // Luge serves that it does not, named likewise.
    let error = refused(
        r#"(import "wasi:io/poll@0.2.0-rc-2023-10-18" (instance))
            (import "wasi:clocks/timezone@0.2.0-rc-2023-10-18" (instance (export "utc-offset" (func))))
            (import "wasi:http/types@0.2.0-rc-2023-12-05" (instance (export "x" (func))))"#,
    );
    assert!(
        error.contains(
            "does not serve: wasi:clocks/timezone@0.2.0-rc-2023-10-18, wasi:http/types@0.2.0-rc-2023-12-05;"
        ),
        "{error}"
    );
    // A Spin 1 component: refused with the reason, not as unknown.
    let error = refused(
        r#"(import "fermyon:spin/key-value" (instance (export "open" (func))))
            (import "fermyon:spin/config" (instance (export "get-config" (func))))"#,
    );
    assert!(
        error.contains(
            "imports Spin 1's unversioned interfaces (fermyon:spin/key-value, fermyon:spin/config)"
        ) && error.contains("rebuild it with spin-sdk 2 or later"),
        "{error}"
    );
}

/// Every route form Spin has, each request given the `spin-*` headers
/// Spin computes (the conformance suite's `request-shape`, byte for
/// byte), and no header Luge adds unasked: Spin sends no `x-request-id`.
#[test]
fn every_spin_route_form_and_its_headers() {
    wasmtime_only!();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("h.wasm"), wasm("http-handler")).unwrap();
    let manifest = dir.path().join("spin.toml");
    std::fs::write(
        &manifest,
        r#"
        spin_manifest_version = 2
        [application]
        name = "routes"
        [application.trigger.http]
        base = "/app"

        [[trigger.http]]
        route = "/"
        component = "root"
        [[trigger.http]]
        route = "/base/:path_segment/:path_end/..."
        component = "shape"
        [[trigger.http]]
        route = "/users/:id"
        component = "user"
        [[trigger.http]]
        route = { private = true }
        component = "hidden"

        [component.root]
        source = "h.wasm"
        [component.shape]
        source = "h.wasm"
        [component.user]
        source = "h.wasm"
        [component.hidden]
        source = "h.wasm"
        "#,
    )
    .unwrap();
    let state = tempfile::tempdir().unwrap();
    let luge = serve_spin(&manifest, state.path(), &[], &[]);
    // The root under the app's base.
    let reply = luge.send("GET", "/app", &[], b"");
    reply.expect(200);
    assert!(reply.headers.get("x-request-id").is_none());
    // `request-shape`: parameters and a wildcard, every header as Spin's.
    let reply = luge.send(
        "GET",
        "/app/base/path/end/rest/echo?key=value",
        &[("spin-path-match-path-end", "forged")],
        b"",
    );
    assert_eq!(reply.status, 200);
    assert!(reply.headers.get("x-request-id").is_none());
    let base = luge.base.clone();
    for (name, value) in [
        ("spin-path-info", "/rest/echo"),
        (
            "spin-matched-route",
            "/app/base/:path_segment/:path_end/...",
        ),
        (
            "spin-raw-component-route",
            "/base/:path_segment/:path_end/...",
        ),
        ("spin-component-route", "/base/:path_segment/:path_end"),
        ("spin-path-match-path-segment", "path"),
        ("spin-path-match-path-end", "end"),
        ("spin-base-path", "/"),
    ] {
        assert_eq!(reply.header(name), value, "{name}");
    }
    let authority = base.trim_start_matches("http://");
    assert_eq!(
        reply.header("spin-full-url"),
        format!("http://{authority}/app/base/path/end/rest/echo?key=value")
    );
    let client: std::net::SocketAddr = reply.header("spin-client-addr").parse().unwrap();
    assert!(client.ip().is_loopback());
    // A parameter alone; a trailing slash is the same route, as Spin's
    // router takes it.
    let reply = luge.send("GET", "/app/users/echo", &[], b"");
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("spin-path-match-id"), "echo");
    assert_eq!(reply.header("spin-path-info"), "");
    assert_eq!(luge.send("GET", "/app/users/42/", &[], b"").status, 200);
    // A private component has no route; nothing outside the base is
    // served; the executor's own endpoints stay its own.
    for path in ["/app/hidden", "/", "/base/a/b/echo", "/app/users/a/b"] {
        assert_eq!(luge.send("GET", path, &[], b"").status, 404, "{path}");
    }
    assert_eq!(luge.send("GET", "/healthz", &[], b"").status, 200);
    drop(luge);
    // Asked for, the request id comes back.
    let luge = serve_spin(&manifest, state.path(), &["--request-id-header"], &[]);
    let reply = luge.send("GET", "/app", &[], b"");
    assert!(!reply.header("x-request-id").is_empty());
}

/// An app as spin-sdk 3 builds it: a `wasm32-wasip1` module importing Spin
/// 2's `fermyon:spin@2.0.0`, made a component at load (the WASI preview 1
/// adapter serves its `fd_write`), with the same grants as a Spin 4 app's:
/// its manifest's stores and databases, and nothing else.
#[test]
fn a_spin_sdk_3_module_runs_unchanged() {
    if on_wasmtime() {
        spin_sdk_module_runs_unchanged("spin-sdk3", "3", "");
    }
}

/// An app as spin-sdk 2 builds it: the same, and its handler exported and
/// its bodies streamed through WASI's 0.2.0-rc-2023-10-18 candidate, which
/// Luge serves on WASI 0.2's resources; its outgoing requests through the
/// candidate's outgoing handler, on the same grants as a 0.2 component's.
#[test]
fn a_spin_sdk_2_module_runs_unchanged() {
    wasmtime_only!();
    // A one-page HTTP server on 127.0.0.1.
    let port = tcp_peer(UPSTREAM);
    let (luge, _dir, _state) = spin_sdk_module_runs_unchanged(
        "spin-sdk2",
        "2",
        &format!("allowed_outbound_hosts = [\"http://127.0.0.1:{port}\"]"),
    );
    let url = format!("http://127.0.0.1:{port}/page");
    assert_eq!(
        text(&luge, "POST", "/fetch", url.as_bytes()),
        (200, "200 upstream!".into())
    );
    // Granted the origin: another port is refused, as for a 0.2 component.
    let other = format!("http://127.0.0.1:{}/page", port.wrapping_add(1));
    let (status, body) = text(&luge, "POST", "/fetch", other.as_bytes());
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("HttpRequestDenied"), "{body}");
}

/// Runs the spin-sdk `version` app `wasm` (actions/spin/sdk2, sdk3) under a
/// manifest granting its store and database and `grants` besides, checks
/// each of its routes, then checks that without grants its store and
/// database are refused as Spin refuses them; returns a server of the
/// granted app, and the folders of its manifest and state, which it needs.
fn spin_sdk_module_runs_unchanged(
    wasm_name: &str,
    version: &str,
    grants: &str,
) -> (Luge, tempfile::TempDir, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.wasm"), wasm(wasm_name)).unwrap();
    let manifest = |grants: &str| {
        format!(
            r#"
            spin_manifest_version = 2
            [application]
            name = "sdk"
            [variables]
            name = {{ default = "Luge" }}
            [[trigger.http]]
            route = "/..."
            component = "app"
            [component.app]
            source = "app.wasm"
            {grants}
            [component.app.variables]
            name = "{{{{ name }}}}"
            "#
        )
    };
    let file = dir.path().join("spin.toml");
    let state = tempfile::tempdir().unwrap();
    let args = [
        "--spin",
        path_str(&file),
        "--state-dir",
        path_str(state.path()),
    ];
    // Without grants: Spin's answers, the store and database refused.
    std::fs::write(&file, manifest("")).unwrap();
    let luge = Luge::start("serve", &args);
    let (status, body) = text(&luge, "GET", "/kv/k", b"");
    assert_eq!((status, body.as_str()), (500, "Error::AccessDenied"));
    let (status, body) = text(&luge, "POST", "/sql", b"select 1");
    assert_eq!((status, body.as_str()), (500, "Error::AccessDenied"));
    drop(luge);
    std::fs::write(
        &file,
        manifest(&format!(
            "key_value_stores = [\"default\"]\nsqlite_databases = [\"default\"]\n{grants}"
        )),
    )
    .unwrap();
    let luge = Luge::start("serve", &args);
    assert_get(
        &luge,
        "/hello",
        &format!("hello from spin-sdk {version}, Luge\n"),
    );
    assert_eq!(
        text(&luge, "GET", "/kv/k", b""),
        (404, "no such key".into())
    );
    assert_eq!(text(&luge, "PUT", "/kv/k", b"v"), (200, "stored".into()));
    assert_get(&luge, "/kv/k", "v");
    assert_get(&luge, "/kv", "k");
    assert_eq!(
        text(&luge, "POST", "/sql", b"select 1, 'x', 2.5, null"),
        (200, "1|x|2.5|null".into())
    );
    assert_get(&luge, "/log", "logged");
    (luge, dir, state)
}

/// `luge up` in a Spin app's directory does what `spin up` does: finds its
/// spin.toml, serves it on 127.0.0.1:3000, or on a free port when that one
/// is taken (said on stderr), prints the address and each route on stdout,
/// and keeps the app's state in `.spin` beside it; a runtime-config.toml
/// beside the manifest is read (one with a section Luge does not serve is
/// refused, naming it); a directory without an app is a one-line error.
/// Spin's selective deployment (`--component-id`, what SpinKube's
/// `components` become in a pod): the kept component serves, the other's
/// route is gone with it; all kept, both serve; a name the app lacks and
/// a kept component chaining to one left out are refused at start.
#[test]
fn a_selection_of_components_serves_only_those_kept() {
    wasmtime_only!();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.wasm"), wasm("spin-app")).unwrap();
    let write = |app_extra: &str| {
        let manifest = dir.path().join("spin.toml");
        std::fs::write(
            &manifest,
            format!(
                "spin_manifest_version = 2\n[application]\nname = \"two\"\n\
                 [[trigger.http]]\nroute = \"/...\"\ncomponent = \"app\"\n\
                 [[trigger.http]]\nroute = \"/other/...\"\ncomponent = \"other\"\n\
                 [component.app]\nsource = \"app.wasm\"\n{app_extra}\n\
                 [component.app.variables]\ngreeting = \"App\"\n\
                 [component.other]\nsource = \"app.wasm\"\n\
                 [component.other.variables]\ngreeting = \"Other\"\n"
            ),
        )
        .unwrap();
        manifest
    };
    let manifest = write("");
    let state = tempfile::tempdir().unwrap();
    let both = serve_spin(&manifest, state.path(), &[], &[]);
    assert_get(&both, "/hello", "App, Spin app\n");
    assert_get(&both, "/other/hello", "Other, Spin app\n");
    drop(both);
    let app = serve_spin(&manifest, state.path(), &["--component-id", "app"], &[]);
    assert_get(&app, "/hello", "App, Spin app\n");
    // The route the Kubernetes autoscaling check loads: a bounded wait.
    assert_get(&app, "/sleep/5", "slept 5 ms\n");
    assert_eq!(text(&app, "GET", "/sleep/10001", b"").0, 400);
    // `other`'s route went with it: the path falls to `app`'s `/...`.
    assert_eq!(text(&app, "GET", "/other/hello", b"").0, 404);
    drop(app);
    let other = serve_spin(&manifest, state.path(), &["--component-id", "other"], &[]);
    assert_get(&other, "/other/hello", "Other, Spin app\n");
    assert_eq!(text(&other, "GET", "/hello", b"").0, 404);
    drop(other);
    let refused = |manifest: &std::path::Path, kept: &str| {
        Luge::try_start(
            "serve",
            &[
                "--spin",
                path_str(manifest),
                "--state-dir",
                path_str(state.path()),
                "--component-id",
                kept,
            ],
        )
        .err()
        .unwrap_or_else(|| panic!("started keeping {kept}"))
    };
    let error = refused(&manifest, "nonesuch");
    assert!(error.contains("no component \"nonesuch\""), "{error}");
    let chaining = write("allowed_outbound_hosts = [\"http://other.spin.internal\"]");
    let error = refused(&chaining, "app");
    assert!(
        error.contains("other.spin.internal, which is left out"),
        "{error}"
    );
}

#[test]
fn luge_up_serves_the_app_in_its_directory_as_spin_up_does() {
    use std::io::BufRead as _;
    wasmtime_only!();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.wasm"), wasm("spin-sdk3")).unwrap();
    catch_all_app(dir.path(), "app.wasm", "key_value_stores = [\"default\"]\n");
    let cache = tempfile::tempdir().unwrap();
    let up = |cwd: &std::path::Path, args: &[&str]| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_luge"));
        command
            .arg("up")
            .args(args)
            .args(["--cache-dir", path_str(cache.path())])
            .current_dir(cwd)
            .env("LUGE_KEY", TEST_KEY)
            .env_remove("LUGE_LOG")
            .env_remove("RUST_BACKTRACE")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        command
    };
    // Port 3000 held here (or by another process already): taken either way.
    let held = std::net::TcpListener::bind("127.0.0.1:3000");
    let mut child = up(dir.path(), &[]).spawn().unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let child = Kill(child);
    let mut lines = std::io::BufReader::new(stdout).lines();
    let serving = lines.next().unwrap().unwrap();
    let base = serving
        .strip_prefix("Serving ")
        .unwrap_or_else(|| panic!("{serving}"));
    assert_ne!(base, "http://127.0.0.1:3000", "port 3000 is taken");
    assert_eq!(lines.next().unwrap().unwrap(), "Available Routes:");
    assert_eq!(
        lines.next().unwrap().unwrap(),
        format!("  app: {base} (wildcard)")
    );
    let agent = luge_testkit::http_agent();
    let put = agent.put(format!("{base}/kv/k")).send("v").unwrap();
    assert_eq!(put.status(), 200);
    let (status, body) =
        luge_testkit::status_and_body(agent.get(format!("{base}/kv/k")).call().unwrap());
    assert_eq!((status, body.as_slice()), (200, b"v".as_slice()));
    drop(child);
    drop(held);
    let mut said = String::new();
    std::io::Read::read_to_string(&mut std::io::BufReader::new(stderr), &mut said).unwrap();
    assert!(
        said.contains("port 3000 is taken; serving on port"),
        "{said}"
    );
    assert!(
        dir.path().join(".spin").is_dir(),
        "the state beside the app"
    );

    // A runtime config beside the manifest is the app's.
    std::fs::write(dir.path().join("runtime-config.toml"), "[nonesuch]\n").unwrap();
    let refused = up(dir.path(), &["--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        said.contains("runtime-config.toml") && said.contains("[nonesuch]"),
        "{said}"
    );
    // No app here: one line that says what to do.
    let empty = tempfile::tempdir().unwrap();
    let refused = up(empty.path(), &[]).output().unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(said.contains("no Spin app at ./spin.toml"), "{said}");
    assert_eq!(said.lines().count(), 1, "{said}");
    // An app not built yet: one line that says to build it, and how.
    let unbuilt = tempfile::tempdir().unwrap();
    catch_all_app(unbuilt.path(), "target/wasm32-wasip2/release/app.wasm", "");
    let refused = up(unbuilt.path(), &["--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        said.contains("app.wasm does not exist: build it first")
            && said.contains("rustup target add wasm32-wasip2"),
        "{said}"
    );
    assert_eq!(said.lines().count(), 1, "{said}");
}

/// Spin's reserved `/.well-known/spin/health` answers before the app's
/// `/...` route takes it, as in Spin (what SpinKube's probes ask), and
/// the other paths there are not found; Kubernetes' `/livez` and
/// `/readyz` answer beside them.
#[test]
fn probes_answer_before_the_apps_catch_all_route() {
    let Some((luge, _dir, _upstream)) = fresh_app() else {
        return;
    };
    for path in ["/.well-known/spin/health", "/livez", "/readyz"] {
        assert_get(&luge, path, "OK");
    }
    assert_eq!(text(&luge, "GET", "/.well-known/spin/info", b"").0, 404);
    assert_eq!(text(&luge, "POST", "/.well-known/spin/health", b"").0, 404);
}
