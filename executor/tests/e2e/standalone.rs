//! The standalone function host end to end: routes from a TOML config and
//! from a Sledge spec, the upload API with its durable store, operator auth,
//! overload, and bad input; the real `luge serve` on 127.0.0.1.
use crate::common;

use std::path::Path;

use common::{Luge, Site, assert_error, path_str, ping_peer, wasm};
use serde_json::json;

pub(crate) const TOKEN: &str = "operator-token-for-tests-0123456789";

/// Bytes 0..=255 three times over: every byte value, NUL and 0xFF included.
fn binary_body() -> Vec<u8> {
    (0..768u32).map(|i| (i % 256) as u8).collect()
}

fn write_module(dir: &Path, name: &str) {
    std::fs::write(dir.join(format!("{name}.wasm")), wasm(name)).unwrap();
}

fn auth() -> [(&'static str, String); 1] {
    [("authorization", format!("Bearer {TOKEN}"))]
}

/// A `luge serve` with a token file and a store directory.
pub(crate) struct Host {
    dir: tempfile::TempDir,
}

impl Host {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
        std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        Self { dir }
    }

    fn store(&self) -> std::path::PathBuf {
        self.dir.path().join("store")
    }

    /// `luge serve` with the token and the store, `extra` besides.
    pub(crate) fn start(&self, extra: &[&str]) -> Luge {
        let token = self.dir.path().join("token");
        let store = self.store();
        let mut args = vec![
            "--token-file",
            path_str(&token),
            "--store",
            path_str(&store),
        ];
        args.extend_from_slice(extra);
        Luge::start("serve", &args)
    }
}

fn put(luge: &Luge, name: &str, body: &[u8]) -> common::Reply {
    let [(k, v)] = auth();
    luge.send("PUT", &format!("/v1/functions/{name}"), &[(k, &v)], body)
}

fn manage(luge: &Luge, method: &str, path: &str) -> common::Reply {
    let [(k, v)] = auth();
    luge.send(method, path, &[(k, &v)], b"")
}

#[test]
fn config_routes_serve_rust_and_c_functions_binary_safe() {
    let site = Site::new(
        &["cat", "c-echo", "c-hello"],
        include_str!("sites/standalone-routes.toml"),
    );
    let luge = site.start(&[]);

    let body = binary_body();
    for (path, content_type) in [
        ("/cat", "application/octet-stream"),
        ("/c/echo", "image/png"),
    ] {
        let reply = luge.send("POST", path, &[], &body);
        assert_eq!(reply.status, 200, "{path}");
        assert_eq!(reply.body, body, "{path}: byte for byte");
        assert_eq!(reply.header("content-type"), content_type);
        assert!(!reply.header("x-request-id").is_empty());
    }
    // A megabyte through the C function, as Sledge's echo benchmark sends.
    let big: Vec<u8> = (0..(1 << 20))
        .map(|i: u32| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    let reply = luge.send("POST", "/c/echo", &[], &big);
    assert_eq!((reply.status, reply.body.len()), (200, big.len()));
    assert!(reply.body == big);

    // GET: the query string is the input.
    let reply = luge.send("GET", "/cat?x=1&y=two", &[], b"");
    assert_eq!(
        (reply.status, reply.body.as_slice()),
        (200, b"x=1&y=two".as_slice())
    );

    let reply = luge.send("POST", "/hello", &[], b"12345");
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), "application/json");
    let text = String::from_utf8(reply.body).unwrap();
    assert!(text.contains("\"input_bytes\":5"), "{text}");

    let health = luge.get("/healthz").1;
    assert_eq!(health["routes"], 3, "{health}");
    assert_eq!(
        health["scheduler"]["workers"], 2,
        "config's workers applied: {health}"
    );

    // Unknown routes and methods are clear errors.
    let reply = luge.send("POST", "/nope", &[], b"");
    assert_eq!(reply.status, 404);
    assert_error(&reply.json(), "No route");
    let reply = luge.send("DELETE", "/cat", &[], b"");
    assert_eq!(reply.status, 405);
}

#[test]
fn chains_pipe_each_stdout_to_the_next_stdin_and_name_the_failing_stage() {
    let site = Site::new(
        &["c-append", "cat", "env", "fail", "spin"],
        include_str!("sites/standalone-chains.toml"),
    );
    let luge = site.start(&[]);
    assert_eq!(luge.get("/healthz").1["chains"], 5);

    // Stages run in order, each on the previous one's output; the last
    // stage's content type is the chain's.
    let reply = luge.send("POST", "/aba", &[], b"x");
    assert_eq!(
        (reply.status, reply.body.as_slice()),
        (200, b"xaba".as_slice())
    );
    assert_eq!(reply.header("content-type"), "text/plain");
    // A GET's query string is the first stage's input.
    let reply = luge.send("GET", "/ab?q=1", &[], b"");
    assert_eq!(
        (reply.status, reply.body.as_slice()),
        (200, b"q=1ab".as_slice())
    );
    assert_eq!(reply.header("content-type"), "text/x-b");
    // Binary-safe from end to end, through Rust and C stages.
    let body = binary_body();
    let reply = luge.send("POST", "/ab", &[], &body);
    let mut expected = body.clone();
    expected.extend_from_slice(b"ab");
    assert_eq!(reply.status, 200);
    assert!(reply.body == expected, "byte for byte");

    // Each stage learns its number.
    let reply = luge.send("POST", "/staged", &[], b"{}");
    assert_eq!(reply.status, 200);
    let env = &reply.json()["env"];
    assert_eq!(env["LUGE_CHAIN_STAGE"], "2", "{env}");
    assert_eq!(env["REQUEST_METHOD"], "POST", "{env}");

    // The first failing stage ends the chain, and the answer names it.
    let reply = luge.send("POST", "/broken", &[], br#"{"mode":"exit"}"#);
    assert_eq!(reply.status, 500);
    assert_eq!(reply.header("x-luge-chain-stage"), "2");
    assert_eq!(
        reply.json()["error"],
        "Stage 2 of 3 (/fail): The function exited with status 3."
    );
    let reply = luge.send("POST", "/slow", &[], b"{}");
    assert_eq!(reply.status, 504);
    assert_eq!(reply.header("x-luge-chain-stage"), "2");
    assert!(
        reply.json()["error"]
            .as_str()
            .unwrap()
            .starts_with("Stage 2 of 2 (/spin): The function exceeded its time limit of 300 ms"),
        "{:?}",
        reply.json()
    );

    // Bad requests are refused before any stage runs.
    let reply = luge.send("POST", "/aba", &[("x-luge-deadline-ms", "soon")], b"x");
    assert_eq!(reply.status, 400);
    let reply = luge.send("DELETE", "/aba", &[], b"");
    assert_eq!(reply.status, 405);

    // The stages' runs are counted as their functions' invocations: /a ran
    // twice in /aba and once in each /ab (it never ran in /broken).
    let metrics = luge.get_text("/metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l == "luge_invocations_total{function=\"a\",outcome=\"success\"} 4"),
        "{metrics}"
    );

    // A chain naming a route that does not exist stops the start.
    let bad = site.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[[routes]]\npath = \"/a\"\nmodule = \"cat.wasm\"\n[[chains]]\npath = \"/c\"\nstages = [\"/a\", \"/nope\"]\n",
    )
    .unwrap();
    let stderr = match Luge::try_start("serve", &["--config", path_str(&bad)]) {
        Ok(_) => panic!("a chain with an unknown stage started"),
        Err(stderr) => stderr,
    };
    assert!(
        stderr.contains("bad.toml") && stderr.contains("chains[0].stages[1]"),
        "{stderr}"
    );
}

#[test]
fn sledge_spec_serves_each_tenant_on_its_port() {
    let dir = tempfile::tempdir().unwrap();
    write_module(dir.path(), "c-echo");
    write_module(dir.path(), "cat");
    // Sledge names aWsm builds `x.wasm.so`; the .wasm beside it is used.
    let spec = dir.path().join("spec.json");
    std::fs::write(
        &spec,
        r#"[
          { "name": "gwu", "port": 0, "replenishment-period-us": 0, "max-budget-us": 0,
            "routes": [
              { "route": "/echo", "path": "c-echo.wasm.so", "admissions-percentile": 70,
                "expected-execution-us": 100, "relative-deadline-us": 10000,
                "http-resp-content-type": "application/octet-stream" } ] },
          { "name": "other", "port": 0,
            "routes": [
              { "route": "/echo", "path": "cat.wasm", "expected-execution-us": 100,
                "relative-deadline-us": 10000, "http-resp-content-type": "text/plain" } ] }
        ]"#,
    )
    .unwrap();
    let luge = Luge::start("serve", &["--sledge-spec", path_str(&spec)]);
    let body = binary_body();
    for (tenant, content_type) in [("gwu", "application/octet-stream"), ("other", "text/plain")] {
        let base = luge.tenant(tenant);
        let reply = luge.send("POST", &format!("{base}/echo"), &[], &body);
        assert_eq!(reply.status, 200, "{tenant}");
        assert_eq!(reply.body, body, "{tenant}");
        assert_eq!(reply.header("content-type"), content_type, "{tenant}");
        // A tenant's port serves only its routes.
        assert_eq!(
            luge.send("POST", &format!("{base}/v1/functions"), &[], b"")
                .status,
            404
        );
    }
    // The main listener does not serve tenant routes.
    assert_eq!(luge.send("POST", "/echo", &[], b"").status, 404);
    let metrics = luge.get_text("/metrics");
    assert!(
        metrics.contains("luge_invocations_total{function=\"gwu/echo\",outcome=\"success\"} 1"),
        "{metrics}"
    );
}

#[test]
fn upload_invoke_list_replace_delete() {
    let host = Host::new();
    let luge = host.start(&[]);

    let reply = put(&luge, "echo", &wasm("cat"));
    assert_eq!(reply.status, 201, "{}", reply.json());
    assert_eq!(reply.json()["routes"], json!(["/fn/echo"]));
    let reply = luge.send("POST", "/fn/echo", &[], b"round trip");
    assert_eq!(
        (reply.status, reply.body.as_slice()),
        (200, b"round trip".as_slice())
    );

    // Replace it, with metadata, through the JSON form.
    let upload = json!({
        "code": luge_testkit::b64(&wasm("c-hello")),
        "metadata": { "path": "/hello", "content_type": "application/json",
                      "relative_deadline_us": 20000, "limits": { "memory_mb": 16 } }
    });
    let reply = put(&luge, "echo", upload.to_string().as_bytes());
    assert_eq!(reply.status, 200, "replaced: {}", reply.json());
    assert_eq!(reply.json()["routes"], json!(["/fn/echo", "/hello"]));
    for path in ["/fn/echo", "/hello"] {
        let reply = luge.send("POST", path, &[], b"abc");
        assert_eq!(reply.status, 200);
        assert_eq!(reply.header("content-type"), "application/json");
        assert!(String::from_utf8_lossy(&reply.body).contains("\"input_bytes\":3"));
    }

    assert_eq!(put(&luge, "other", &wasm("noop")).status, 201);
    let list = manage(&luge, "GET", "/v1/functions").json();
    let names: Vec<_> = list["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].clone())
        .collect();
    assert_eq!(names, [json!("echo"), json!("other")]);
    let one = manage(&luge, "GET", "/v1/functions/echo").json();
    assert_eq!(one["metadata"]["relative_deadline_us"], 20000, "{one}");
    assert!(one["code_bytes"].as_u64().unwrap() > 0);

    let reply = manage(&luge, "DELETE", "/v1/functions/echo");
    assert_eq!(reply.status, 200);
    assert_eq!(luge.send("POST", "/fn/echo", &[], b"").status, 404);
    assert_eq!(luge.send("POST", "/hello", &[], b"").status, 404);
    assert_eq!(manage(&luge, "DELETE", "/v1/functions/echo").status, 404);
    assert_eq!(manage(&luge, "GET", "/v1/functions/echo").status, 404);
    assert!(!host.store().join("echo.fn").exists());
    assert!(host.store().join("other.fn").exists());

    // Code as `base64` writes it by default (lines of 76, CRLF here) and
    // without its padding: decoded like /init's.
    let text = luge_testkit::b64(&wasm("cat"));
    let wrapped = text
        .trim_end_matches('=')
        .as_bytes()
        .chunks(76)
        .map(|line| std::str::from_utf8(line).unwrap())
        .collect::<Vec<_>>()
        .join("\r\n");
    assert!(wrapped.len() > 76 && !wrapped.ends_with('='));
    let reply = put(
        &luge,
        "wrapped",
        json!({ "code": wrapped }).to_string().as_bytes(),
    );
    assert_eq!(reply.status, 201, "{}", reply.json());
    let reply = luge.send("POST", "/fn/wrapped", &[], b"decoded");
    assert_eq!(
        (reply.status, reply.body.as_slice()),
        (200, b"decoded".as_slice())
    );
}

#[test]
fn restart_serves_stored_functions_without_compiling_and_survives_a_crash_mid_upload() {
    let host = Host::new();
    {
        let luge = host.start(&[]);
        assert_eq!(put(&luge, "echo", &wasm("cat")).status, 201);
        assert_eq!(luge.get("/healthz").1["compiles"], 1);
        // Dropping kills the process (SIGKILL): no orderly shutdown.
    }
    // A crash in the middle of the next upload leaves a partial temp file.
    let whole = std::fs::read(host.store().join("echo.fn")).unwrap();
    let partial = host.store().join(".echo.fn.4242.0.tmp");
    std::fs::write(&partial, &whole[..whole.len() / 3]).unwrap();

    let luge = host.start(&[]);
    let reply = luge.send("POST", "/fn/echo", &[], b"after restart");
    assert_eq!(
        (reply.status, reply.body.as_slice()),
        (200, b"after restart".as_slice())
    );
    let health = luge.get("/healthz").1;
    assert_eq!(
        health["compiles"], 0,
        "served from the stored artifact: {health}"
    );
    assert_eq!(health["uploaded_functions"], 1);
    assert!(!partial.exists(), "the interrupted upload was cleaned up");
    let metrics = luge.get_text("/metrics");
    assert!(metrics.contains("luge_compiles_total 0"), "{metrics}");
}

#[test]
fn concurrent_uploads_of_one_name_leave_one_complete_version() {
    let host = Host::new();
    let luge = host.start(&[]);
    let versions = [wasm("cat"), wasm("c-hello")];
    for _round in 0..3 {
        std::thread::scope(|s| {
            for version in &versions {
                let luge = &luge;
                s.spawn(move || {
                    let status = put(luge, "racy", version).status;
                    assert!(status == 200 || status == 201, "{status}");
                });
            }
        });
        let reply = luge.send("POST", "/fn/racy", &[], b"xyz");
        assert_eq!(reply.status, 200);
        let text = String::from_utf8_lossy(&reply.body).into_owned();
        assert!(
            text == "xyz" || text.contains("\"input_bytes\":3"),
            "{text}"
        );
    }
    let files: Vec<_> = std::fs::read_dir(host.store())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(files, ["racy.fn"], "one version, no temp files");
    // What is served is what is stored: a restart serves the same version.
    let before = luge.send("POST", "/fn/racy", &[], b"xyz").body;
    drop(luge);
    let luge = host.start(&[]);
    assert_eq!(luge.send("POST", "/fn/racy", &[], b"xyz").body, before);
}

#[test]
fn management_needs_the_operator_token_and_leaks_nothing() {
    let host = Host::new();
    let luge = host.start(&[]);
    assert_eq!(put(&luge, "secret", &wasm("cat")).status, 201);
    let cases: [&[(&str, &str)]; 4] = [
        &[],
        &[("authorization", "Bearer wrong-token-wrong-token-wrong")],
        &[("authorization", TOKEN)],
        &[("authorization", "Basic b3BlcmF0b3I6dG9rZW4=")],
    ];
    for headers in cases {
        for (method, path) in [
            ("GET", "/v1/functions"),
            ("GET", "/v1/functions/secret"),
            ("GET", "/v1/functions/unknown"),
            ("DELETE", "/v1/functions/secret"),
        ] {
            let reply = luge.send(method, path, headers, b"");
            assert_eq!(reply.status, 401, "{method} {path} {headers:?}");
            assert_eq!(reply.header("www-authenticate"), "Bearer");
            let text = String::from_utf8_lossy(&reply.body).into_owned();
            assert!(
                !text.contains("secret") && !text.contains("unknown"),
                "{text}"
            );
        }
        let reply = luge.send("PUT", "/v1/functions/intruder", headers, &wasm("cat"));
        assert_eq!(reply.status, 401);
    }
    assert_eq!(luge.send("POST", "/fn/intruder", &[], b"").status, 404);
    // Public routes need no token.
    assert_eq!(luge.send("POST", "/fn/secret", &[], b"hi").status, 200);

    // Without a token configured, the management API is off altogether.
    let plain = Luge::start("serve", &[]);
    let [(k, v)] = auth();
    let reply = plain.send("GET", "/v1/functions", &[(k, &v)], b"");
    assert_eq!(reply.status, 403);
    assert_error(&reply.json(), "token");
}

#[test]
fn bad_uploads_and_requests_are_refused_and_the_host_keeps_serving() {
    let host = Host::new();
    let luge = host.start(&["--max-body-mb", "1"]);
    assert_eq!(put(&luge, "ok", &wasm("cat")).status, 201);

    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        ("bad-wasm", b"\0asm\x01\0\0\0garbage".to_vec(), 400, "refused"),
        ("not-wasm", b"hello".to_vec(), 400, "refused"),
        ("bad-b64", br#"{"code": "***"}"#.to_vec(), 400, "base64"),
        ("bad-json", br#"{"code": "#.to_vec(), 400, "JSON"),
        (
            "bad-meta",
            json!({"code": luge_testkit::b64(&wasm("cat")), "metadata": {"deadline": 1}}).to_string().into_bytes(),
            400,
            "unknown field `deadline`",
        ),
        (
            "taken",
            json!({"code": luge_testkit::b64(&wasm("cat")), "metadata": {"path": "/fn/ok"}}).to_string().into_bytes(),
            400,
            "reserved",
        ),
        (
            "too-much",
            json!({"code": luge_testkit::b64(&wasm("cat")), "metadata": {"limits": {"memory_mb": 100000}}}).to_string().into_bytes(),
            403,
            "exceeds the operator maximum",
        ),
        ("../escape", wasm("cat"), 404, "No route"),
        ("bad.name", wasm("cat"), 400, "function names"),
    ];
    for (name, body, status, message) in cases {
        let reply = put(&luge, name, &body);
        let text = String::from_utf8_lossy(&reply.body).into_owned();
        assert_eq!(reply.status, status, "{name}: {text}");
        assert!(text.contains(message), "{name}: {text}");
    }
    // Another function's route is a conflict.
    let upload = json!({"code": luge_testkit::b64(&wasm("cat")), "metadata": {"path": "/shared"}});
    assert_eq!(
        put(&luge, "first", upload.to_string().as_bytes()).status,
        201
    );
    let reply = put(&luge, "second", upload.to_string().as_bytes());
    assert_eq!(reply.status, 409, "{}", reply.json());

    let reply = luge.send("POST", "/fn/ok", &[("x-luge-deadline-ms", "soon")], b"");
    assert_eq!(reply.status, 400);
    // Oversized bodies, announced or streamed, on an upload and on a route.
    for (method, path) in [("PUT", "/v1/functions/big"), ("POST", "/fn/ok")] {
        let (status, body) = common::announce_oversized(&luge, method, path, 2 << 20);
        assert_eq!(status, 413, "{method} {path}: {body}");
        assert_error(&body, "exceeds the limit");
    }
    assert_eq!(common::raw_chunked(&luge, "/fn/ok", 2 << 20).0, 413);

    let reply = luge.send(
        "POST",
        "/fn/ok",
        &[("x-luge-deadline-ms", "5")],
        b"still here",
    );
    assert_eq!(
        (reply.status, reply.body.as_slice()),
        (200, b"still here".as_slice())
    );
    let files = std::fs::read_dir(host.store()).unwrap().count();
    assert_eq!(
        files, 2,
        "ok.fn and first.fn; the refused uploads left nothing"
    );
}

#[test]
fn failures_map_to_statuses_and_overload_is_503_with_retry_after() {
    let host = Host::new();
    let luge = host.start(&["--workers", "1", "--max-pending", "1"]);
    let spin = json!({"code": luge_testkit::b64(&wasm("spin")), "metadata": {"limits": {"timeout_ms": 300}}});
    assert_eq!(put(&luge, "spin", spin.to_string().as_bytes()).status, 201);
    assert_eq!(put(&luge, "fail", &wasm("fail")).status, 201);
    assert_eq!(put(&luge, "sleep", &wasm("sleep")).status, 201);

    let reply = luge.send("POST", "/fn/spin", &[], b"{}");
    assert_eq!(reply.status, 504);
    assert_error(&reply.json(), "time limit of 300 ms");
    let reply = luge.send("POST", "/fn/fail", &[], br#"{"mode":"exit"}"#);
    assert_eq!(reply.status, 500);
    assert_error(&reply.json(), "exited with status 3");
    // The function's stderr is logged under the request's id, which the
    // response names.
    let id = format!("id={}", reply.header("x-request-id"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let logged = loop {
        let stderr = luge.stderr();
        let line = stderr
            .lines()
            .find(|l| l.contains("giving up with status 3") && l.contains(&id))
            .map(str::to_owned);
        if line.is_some() || std::time::Instant::now() > deadline {
            break line;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let logged = logged.unwrap_or_else(|| panic!("no log line with {id}: {}", luge.stderr()));
    assert!(logged.contains("function=\"fail\""), "{logged}");
    let reply = luge.send("POST", "/fn/fail", &[], br#"{"mode":"trap"}"#);
    assert_eq!(reply.status, 500);
    assert_error(&reply.json(), "trapped");

    // One slot: while a sleep holds it, the next request is refused at once.
    std::thread::scope(|s| {
        let sleeper = s.spawn(|| luge.send("POST", "/fn/sleep", &[], br#"{"ms": 1500}"#));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while luge.get("/healthz").1["pending"] != 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "the sleep never started"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let refused = luge.send("POST", "/fn/fail", &[], b"{}");
        assert_eq!(refused.status, 503);
        assert_eq!(refused.header("retry-after"), "1");
        assert_eq!(sleeper.join().unwrap().status, 200);
    });
    let metrics = luge.get_text("/metrics");
    for expected in [
        "luge_invocations_total{function=\"fail\",outcome=\"overloaded\"} 1",
        "luge_invocations_total{function=\"spin\",outcome=\"timeout\"} 1",
        "luge_invocations_total{function=\"sleep\",outcome=\"success\"} 1",
        "luge_queue_delay_seconds_count{function=\"sleep\"} 1",
    ] {
        assert!(metrics.contains(expected), "{expected} in\n{metrics}");
    }
    // Freed again.
    assert_eq!(
        luge.send("POST", "/fn/sleep", &[], br#"{"ms": 1}"#).status,
        200
    );
}

#[test]
fn config_errors_name_the_file_and_key_and_nothing_starts() {
    let dir = tempfile::tempdir().unwrap();
    write_module(dir.path(), "cat");
    std::fs::write(dir.path().join("junk.wasm"), b"not wasm").unwrap();
    let cases = [
        (
            "[server]\nthreads = 4\n",
            "line 2",
            "unknown field `threads`",
        ),
        (
            "[server]\npolicy = \"lifo\"\n",
            "line 2",
            "unknown variant `lifo`",
        ),
        (
            "[[routes]]\npath = \"/a\"\nmodule = \"missing.wasm\"\n",
            "route \"/a\"",
            "missing.wasm",
        ),
        (
            "[[routes]]\npath = \"/a\"\nmodule = \"junk.wasm\"\n",
            "route \"/a\"",
            "refused",
        ),
        (
            "[[routes]]\npath = \"/a\"\nmodule = \"cat.wasm\"\nlimits = { memory_mb = 99999 }\n",
            "route \"/a\"",
            "exceeds the operator maximum",
        ),
        (
            "[[routes]]\npath = \"/a\"\nmodule = \"cat.wasm\"\ncolour = 1\n",
            "line 4",
            "unknown field `colour`",
        ),
    ];
    for (i, (text, location, message)) in cases.into_iter().enumerate() {
        let file = dir.path().join(format!("bad{i}.toml"));
        std::fs::write(&file, text).unwrap();
        let stderr = match Luge::try_start("serve", &["--config", path_str(&file)]) {
            Ok(_) => panic!("{text:?} started"),
            Err(stderr) => stderr,
        };
        assert!(
            stderr.contains(&format!("bad{i}.toml")),
            "{text:?}: {stderr}"
        );
        assert!(stderr.contains(location), "{text:?}: {stderr}");
        assert!(stderr.contains(message), "{text:?}: {stderr}");
    }
}

/// Function routes and the container API cannot shadow each other: a
/// configured route, a chain or an upload at a container path is refused
/// where it is declared, naming both; containers and routes then serve
/// side by side, and a wrong method on an API path is a 405.
#[test]
fn routes_cannot_shadow_the_container_api() {
    let dir = tempfile::tempdir().unwrap();
    write_module(dir.path(), "cat");
    let config = dir.path().join("luge.toml");
    for (toml, path) in [
        (
            "[[routes]]\npath = \"/c1/run\"\nmodule = \"cat.wasm\"\n",
            "/c1/run",
        ),
        (
            "[[routes]]\npath = \"/cat\"\nmodule = \"cat.wasm\"\n\n[[chains]]\npath = \"/x/logs\"\nstages = [\"/cat\"]\n",
            "/x/logs",
        ),
        (
            "[[routes]]\npath = \"/containers\"\nmodule = \"cat.wasm\"\n",
            "/containers",
        ),
    ] {
        std::fs::write(&config, toml).unwrap();
        let refused = Luge::try_start("serve", &["--config", path_str(&config)])
            .err()
            .unwrap();
        assert!(refused.contains(path), "{refused}");
        assert!(
            refused.contains("would shadow the executor's endpoint"),
            "{refused}"
        );
    }

    std::fs::write(
        &config,
        "[[routes]]\npath = \"/cat\"\nmodule = \"cat.wasm\"\n",
    )
    .unwrap();
    let host = Host::new();
    let luge = host.start(&["--config", path_str(&config)]);
    // An upload named `run` would be served at /fn/run: container `fn`'s.
    let reply = put(&luge, "run", &wasm("cat"));
    assert_eq!(reply.status, 409, "{}", reply.json());
    let error = reply.json()["error"].as_str().unwrap().to_owned();
    assert!(
        error.contains("/fn/run") && error.contains("/{id}/run"),
        "{error}"
    );
    let upload = json!({
        "code": luge_testkit::b64(&wasm("cat")),
        "metadata": { "path": "/c2/init" }
    });
    let reply = put(&luge, "fine", upload.to_string().as_bytes());
    assert_eq!(reply.status, 409, "{}", reply.json());
    assert_error(&reply.json(), "/{id}/init");
    // Both kinds serve.
    assert_eq!(
        luge.post(
            "/c1/init",
            &luge_testkit::init_body(&wasm("echo"), "main", json!({}))
        )
        .0,
        200
    );
    assert_eq!(luge.post("/c1/run", &json!({"value": {"a": 1}})).0, 200);
    let reply = luge.send("POST", "/cat", &[], b"meow");
    assert_eq!((reply.status, reply.body.as_slice()), (200, &b"meow"[..]));
    let reply = luge.send("GET", "/c1/run", &[], b"");
    assert_eq!(reply.status, 405);
    assert_error(&reply.json(), "/{id}/run");
}

/// Prefix routes (`/api/...`, Spin's syntax): the longest prefix serves
/// what no exact route, chain or executor endpoint does; a function learns
/// the route's base and the rest of the path (`SCRIPT_NAME`, `PATH_INFO`;
/// Spin's `spin-*` headers for HTTP handlers, a client's own dropped).
#[test]
fn prefix_routes_take_the_rest_of_the_path() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["env", "c-hello"] {
        write_module(dir.path(), name);
    }
    let handler = common::engine() == "wasmtime";
    if handler {
        write_module(dir.path(), "http-handler");
    }
    let config = dir.path().join("luge.toml");
    let mut text = r#"
        [[routes]]
        path = "/api/..."
        module = "env.wasm"
        name = "api"

        [[routes]]
        path = "/api/exact"
        module = "env.wasm"
        name = "exact"

        [[routes]]
        path = "/api/deeper/..."
        module = "env.wasm"
        name = "deeper"

        [[routes]]
        path = "/..."
        module = "c-hello.wasm"
        name = "everything"
        "#
    .to_owned();
    if handler {
        text.push_str(
            r#"
        [[routes]]
        path = "/h/..."
        module = "http-handler.wasm"
        name = "handler"
        "#,
        );
    }
    std::fs::write(&config, text).unwrap();
    let luge = Luge::start("serve", &["--config", path_str(&config)]);

    let env_of = |path: &str| {
        let reply = luge.send("POST", path, &[], b"{}");
        assert_eq!(
            reply.status,
            200,
            "{path}: {}",
            String::from_utf8_lossy(&reply.body)
        );
        let env = reply.json()["env"].clone();
        (
            env["SCRIPT_NAME"].as_str().unwrap_or("?").to_owned(),
            env["PATH_INFO"].as_str().unwrap_or("?").to_owned(),
        )
    };
    assert_eq!(env_of("/api/x/y"), ("/api".into(), "/x/y".into()));
    assert_eq!(env_of("/api"), ("/api".into(), "".into()));
    assert_eq!(env_of("/api/"), ("/api".into(), "/".into()));
    assert_eq!(env_of("/api/exact"), ("/api/exact".into(), "".into()));
    assert_eq!(
        env_of("/api/exact/more"),
        ("/api".into(), "/exact/more".into())
    );
    assert_eq!(env_of("/api/deeper/z"), ("/api/deeper".into(), "/z".into()));
    // Not under /api (a segment boundary counts): the catch-all.
    for path in ["/apix", "/", "/other/path"] {
        let reply = luge.send("POST", path, &[], b"{}");
        assert_eq!(reply.status, 200, "{path}");
        assert!(
            String::from_utf8_lossy(&reply.body).contains("hello"),
            "{path}"
        );
    }
    // The executor's own endpoints are never taken by a prefix.
    let reply = luge.send("GET", "/healthz", &[], b"");
    assert_eq!(reply.json()["status"], "ok");
    // A path far longer than any route is looked up in bounded time.
    let long = format!("/api{}", "/a".repeat(4000));
    assert_eq!(env_of(&long).1.len(), long.len() - 4);

    if handler {
        let reply = luge.send(
            "POST",
            "/h/a/b/echo?q=1",
            &[
                ("spin-path-info", "/forged"),
                ("spin-component-route", "/x"),
            ],
            b"",
        );
        assert_eq!(reply.status, 200);
        assert_eq!(reply.header("spin-path-info"), "/a/b/echo");
        assert_eq!(reply.header("spin-matched-route"), "/h/...");
        assert_eq!(reply.header("spin-component-route"), "/h");
        assert_eq!(reply.header("spin-base-path"), "/");
        assert!(reply.header("spin-full-url").ends_with("/h/a/b/echo?q=1"));
        // The handler sees the whole path, as under Spin.
        assert_eq!(reply.header("x-path"), "/h/a/b/echo?q=1");
    }
}

/// Prefixes that would cover the executor's paths, and prefix chains,
/// are refused where they are declared.
#[test]
fn prefix_routes_are_checked_where_declared() {
    let dir = tempfile::tempdir().unwrap();
    write_module(dir.path(), "env");
    for (routes, says) in [
        (
            r#"[[routes]]
            path = "/v1/..."
            module = "env.wasm""#,
            "cannot cover the executor's paths",
        ),
        (
            r#"[[routes]]
            path = "/healthz/..."
            module = "env.wasm""#,
            "reserved",
        ),
        (
            r#"[[routes]]
            path = "/a"
            module = "env.wasm"
            [[chains]]
            path = "/c/..."
            stages = ["/a"]"#,
            "segments are not allowed",
        ),
    ] {
        let config = dir.path().join("luge.toml");
        std::fs::write(&config, routes).unwrap();
        let err = Luge::try_start("serve", &["--config", path_str(&config)])
            .err()
            .unwrap();
        assert!(err.contains(says), "{routes}: {err}");
    }
}

/// A socket grant given in an upload's metadata reaches its own address
/// and no other, as the same grant through an annotation does
/// (`capabilities::a_socket_grant_through_an_annotation_reaches_its_address_only`):
/// the refused uploads connect to a server that listens, so only the
/// grant refuses them.
#[test]
fn a_socket_grant_in_upload_metadata_reaches_its_address_only() {
    if common::engine() != "wasmtime" {
        return;
    }
    let target = format!("127.0.0.1:{}", ping_peer(b"pong"));
    let host = Host::new();
    let luge = host.start(&[]);
    let upload = |name: &str, grants: serde_json::Value| {
        let upload = json!({
            "code": luge_testkit::b64(&wasm("sockets3")),
            "metadata": { "args": ["connect", target], "allowed_outbound_hosts": grants }
        });
        let reply = put(&luge, name, upload.to_string().as_bytes());
        assert_eq!(reply.status, 201, "{}", reply.json());
        let reply = luge.send("POST", &format!("/fn/{name}"), &[], b"");
        (
            reply.status,
            String::from_utf8_lossy(&reply.body).into_owned(),
        )
    };
    assert_eq!(
        upload("granted", json!([format!("tcp://{target}")])),
        (200, "pong".into())
    );
    for (name, grants) in [
        ("none", json!([])),
        ("udp", json!([format!("udp://{target}")])),
        ("wildcard", json!(["tcp://*:*"])),
    ] {
        let (status, body) = upload(name, grants);
        assert_eq!(status, 500, "{name}: {body}");
        assert!(body.contains("exited with status 1"), "{name}: {body}");
        // Its own words (its stderr line, which may reach luge's log just
        // after the response): no socket at all without a grant of its
        // kind (`create`), none to this address otherwise (`connect`).
        assert!(
            luge.stderr_shows(&format!(": access-denied function=\"{name}\"")),
            "{name}: {}",
            luge.stderr()
        );
    }
}

/// The built-in demo (scripts/demo.sh) runs from this build, every step
/// doing what it shows, and its steps are the ones the book's Getting
/// started lists: neither drifts from the other. It starts its own Redis,
/// HTTPS server and trace collector on free loopback ports.
#[test]
fn the_demo_runs_every_step_the_book_lists() {
    if common::engine() != "wasmtime" {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let work = tempfile::tempdir().unwrap();
    // The interpreters' compiled code, shared with the suite's other tests
    // of them (common::sharing_compiles), signed with the suite's key.
    let cache = work.path().join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let shared = Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-compiled/wasmtime");
    std::fs::create_dir_all(&shared).unwrap();
    std::os::unix::fs::symlink(&shared, cache.join("modules")).unwrap();
    let port = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let out = std::process::Command::new("bash")
        .arg("scripts/demo.sh")
        .current_dir(&root)
        .env("LUGE", env!("CARGO_BIN_EXE_luge"))
        .env("LUGE_KEY", common::TEST_KEY)
        .env("LUGE_DEMO_EXIT", "1")
        .env("LUGE_DEMO_ADDR", format!("127.0.0.1:{}", port()))
        .env("LUGE_DEMO_SPIN_ADDR", format!("127.0.0.1:{}", port()))
        .env("LUGE_DEMO_REDIS_PORT", port().to_string())
        .env("LUGE_DEMO_TLS_PORT", port().to_string())
        .env("LUGE_DEMO_OTLP_PORT", port().to_string())
        .env("LUGE_DEMO_CACHE", &cache)
        .env("LUGE_DEMO_LOGS", work.path().join("logs"))
        .env("XDG_DATA_HOME", work.path())
        .output()
        .expect("bash runs the demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let logs = std::fs::read_to_string(work.path().join("logs/luge.log")).unwrap_or_default();
    assert!(
        out.status.success(),
        "the demo failed:\n{stdout}\n{}\nluge's log:\n{logs}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Its table's first column, and the book's.
    let column = |table: &str| -> Vec<String> {
        table
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .filter(|l| !l.starts_with("| step ") && !l.starts_with("|---"))
            .map(|l| {
                l.trim_start_matches("| ")
                    .split(" |")
                    .next()
                    .unwrap()
                    .trim()
                    .to_owned()
            })
            .collect()
    };
    let shown = column(stdout.split("== what the demo showed").nth(1).unwrap_or(""));
    let book = std::fs::read_to_string(root.join("docs/book/src/getting-started.md")).unwrap();
    let listed = column(book.split("What the demo shows").nth(1).unwrap_or(""));
    assert!(shown.len() >= 20, "{stdout}");
    assert_eq!(
        shown, listed,
        "the demo's steps and docs/book/src/getting-started.md's table differ"
    );
}
