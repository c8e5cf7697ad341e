//! WebAssembly components (WASI 0.2 `wasi:cli/command`, built by Rust's
//! wasm32-wasip2 target from the same example sources as the modules) run
//! as functions on Wasmtime, under both OpenWhisk protocols and the
//! standalone host; `wasi:http/proxy` components (actions/http) serve
//! routes as HTTP handlers. Wasmer and WAMR refuse components, naming the
//! engine.

use crate::common;

use common::*;
use serde_json::{Value, json};

const SENTINEL: &str = "XXX_THE_END_OF_A_WHISK_ACTIVATION_XXX";

/// The runner scenarios a module passes, with the component of the same
/// source: arguments and logs, unicode, the init `env`, a result that is
/// not a dictionary, and a failing action.
#[test]
fn a_command_component_passes_the_runner_scenarios() {
    wasmtime_only!();
    on_both_front_ends(&[], |c| {
        c.init_example("p2-echo");
        for args in [json!({"string": "hello"}), json!({"numbers": [42, 1]})] {
            assert_eq!(c.run(&json!({"value": args})), (200, args.clone()));
        }
        let (out, err) = c.logs(2);
        assert!(out.contains("hello stdout"), "{out}");
        assert!(err.contains("hello stderr"), "{err}");
        assert_eq!(out.matches(SENTINEL).count(), 2);
        let big = "x".repeat(1 << 20);
        let (status, body) = c.run(&json!({"value": {"big": big}}));
        assert_eq!(status, 200);
        assert_eq!(body["big"].as_str().unwrap().len(), 1 << 20);
    });
    on_both_front_ends(&[], |c| {
        c.init_example("p2-unicode");
        let (status, body) = c.run(&json!({"value": {"delimiter": "❄"}}));
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["winter"], "❄ ☃ ❄");
    });
    on_both_front_ends(&[], |c| {
        let init = init_body(
            &wasm("p2-envvars"),
            "main",
            json!({"env": {"SOME_VAR": "xyz", "ANOTHER_VAR": "zyx"}}),
        );
        c.init_ok(&init);
        let (status, body) = c.run(&json!({"value": {}}));
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["SOME_VAR"], "xyz");
        assert_eq!(body["ANOTHER_VAR"], "zyx");
    });
    on_both_front_ends(&[], |c| c.refuses_a_result_not_a_dictionary("p2-notdict"));
    on_both_front_ends(&[], |c| {
        c.init_example("p2-fail");
        // WASI 0.2's `exit` carries success or failure only: status 3
        // arrives as 1.
        let (status, body) = c.run(&json!({"value": {"mode": "exit"}}));
        assert_ne!(status, 200);
        assert_error(&body, "status 1");
        let (status, body) = c.run(&json!({"value": {"mode": "trap"}}));
        assert_ne!(status, 200);
        assert_error(&body, "trapped");
    });
}

/// A component on a standalone route; one that runs past its time limit is
/// stopped (epoch interruption works in components too) and the host serves
/// on.
#[test]
fn a_command_component_on_a_route() {
    wasmtime_only!();
    let site = Site::new(
        &["p2-echo", "p2-spin"],
        include_str!("sites/components-command-route.toml"),
    );
    let luge = site.start(&[]);
    // The route answers the whole stdout: echo's log line, then its result.
    let (status, body) = luge.request("POST", "/echo", br#"{"a":[1,2]}"#);
    assert_eq!(status, 200);
    let text = String::from_utf8(body).unwrap();
    assert_eq!(text.lines().last(), Some(r#"{"a":[1,2]}"#), "{text}");
    let started = std::time::Instant::now();
    let (status, _) = luge.post("/spin", &json!({}));
    assert_eq!(status, 504);
    assert!(started.elapsed() < std::time::Duration::from_secs(3));
    assert_eq!(luge.post("/echo", &json!({"b": 1})).0, 200);
}

/// Wasmer and WAMR run core modules only: a component is refused at init,
/// naming the engine.
#[test]
fn other_engines_refuse_components_by_name() {
    if on_wasmtime() {
        return;
    }
    for name in ["p2-echo", "http-handler"] {
        on_both_front_ends(&[], |c| {
            let (status, body) = c.init(&init_body(&wasm(name), "main", json!({})));
            assert_ne!(status, 200);
            let error = body["error"].as_str().unwrap();
            assert!(error.contains("component"), "{error}");
            assert!(error.contains(engine()), "{error}");
        });
    }
}

/// Python, from source to a request: `actions/python/hello/app.py` built
/// by componentize-py (scripts/build-actions.sh) into a WASI 0.2 command
/// component, served on a route, a fresh instance per request; and
/// `actions/python/web`, a wasi:http handler.
#[test]
fn a_python_function_end_to_end() {
    wasmtime_only!();
    let _shared = sharing_compiles();
    let site = Site::new(
        &["py-hello", "py-web"],
        "[[routes]]\npath = \"/hello\"\nmodule = \"py-hello.wasm\"\n\n\
         [[routes]]\npath = \"/web\"\nmodule = \"py-web.wasm\"\n",
    );
    let luge = site.start(&[]);
    for name in ["Luge", "❄"] {
        let (status, body) = luge.post("/hello", &json!({ "name": name }));
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            body,
            json!({ "greeting": format!("Hello, {name}!"), "language": "python" })
        );
    }
    let (status, body) = luge.post("/hello", &json!({}));
    assert_eq!(
        (status, body["greeting"].clone()),
        (200, json!("Hello, stranger!"))
    );
    // The same language as an HTTP handler (actions/python/web).
    let reply = luge.send("POST", "/web?q=2", &[("x-luge-test", "py")], b"snow");
    reply.expect(200);
    assert_eq!(
        reply.json(),
        json!({
            "language": "python",
            "method": "POST",
            "path": "/web?q=2",
            "test": "py",
            "body": "snow",
        })
    );
}

/// `wasi:config/store` from a route's `variables` (actions/python/config,
/// componentize-py): each route's own, nothing else's; a value never
/// reaches the log.
#[test]
fn a_component_reads_its_route_variables() {
    wasmtime_only!();
    let _shared = sharing_compiles();
    let site = Site::new(
        &["py-config"],
        "[[routes]]
path = \"/a\"
module = \"py-config.wasm\"
         variables = { greeting = \"hello from a\", api_key = \"s3cret-a\" }

         [[routes]]
path = \"/b\"
module = \"py-config.wasm\"
         variables = { greeting = \"hello from b\" }

         [[routes]]
path = \"/none\"
module = \"py-config.wasm\"
",
    );
    let luge = site.start(&[]);
    let (status, body) = luge.post("/a", &json!({"name": "greeting"}));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["value"], "hello from a");
    assert_eq!(
        body["all"],
        json!({"greeting": "hello from a", "api_key": "s3cret-a"})
    );
    let (status, body) = luge.post("/b", &json!({"name": "api_key"}));
    assert_eq!(
        (status, body["value"].clone()),
        (200, json!(null)),
        "{body}"
    );
    assert_eq!(body["all"], json!({"greeting": "hello from b"}));
    let (status, body) = luge.post("/none", &json!({}));
    assert_eq!((status, body["all"].clone()), (200, json!({})), "{body}");
    assert!(!luge.stderr().contains("s3cret"), "a value reached the log");

    // Names are checked where they are declared.
    let bad = Site::new(
        &["py-config"],
        "[[routes]]
path = \"/a\"
module = \"py-config.wasm\"
         variables = { Greeting = \"x\" }
",
    );
    let error = bad.try_start(&[]).err().unwrap();
    assert!(error.contains("invalid variable name"), "{error}");
}

/// `wasi:keyvalue` over Luge's state (actions/python/kv, componentize-py):
/// the default bucket is the function's own, a named one must be granted,
/// 32 concurrent increments land exactly, batches work, and the local tier
/// keeps the values across a restart.
#[test]
fn wasi_keyvalue_over_the_state_tiers() {
    wasmtime_only!();
    let _shared = sharing_compiles();
    let site = Site::new(
        &["py-kv"],
        "[[routes]]\npath = \"/kv\"\nmodule = \"py-kv.wasm\"\nstate = [\"shared\"]\n\n\
         [[routes]]\npath = \"/other\"\nmodule = \"py-kv.wasm\"\n",
    );
    let state_dir = tempfile::tempdir().unwrap();
    let args = ["--state-dir", path_str(state_dir.path())];
    let luge = site.start(&args);
    let ask = |path: &str, request: Value| {
        let (status, body) = luge.post(path, &request);
        assert_eq!(status, 200, "{request}: {body}");
        body
    };
    assert_eq!(ask("/kv", json!({"op": "incr", "key": "hits"}))["value"], 1);
    assert_eq!(
        ask("/kv", json!({"op": "incr", "key": "hits", "by": 4}))["value"],
        5
    );
    std::thread::scope(|scope| {
        for _ in 0..32 {
            scope.spawn(|| ask("/kv", json!({"op": "incr", "key": "hits"})));
        }
    });
    assert_eq!(
        ask("/kv", json!({"op": "get", "key": "hits"}))["value"],
        "37"
    );
    // The default bucket is private: another function sees nothing.
    assert_eq!(
        ask("/other", json!({"op": "get", "key": "hits"}))["value"],
        json!(null)
    );
    // A granted bucket is shared with whoever is granted it; not otherwise.
    ask(
        "/kv",
        json!({"op": "set", "bucket": "shared", "key": "k", "value": "v"}),
    );
    assert_eq!(
        ask("/kv", json!({"op": "get", "bucket": "shared", "key": "k"}))["value"],
        "v"
    );
    let refused = ask(
        "/other",
        json!({"op": "get", "bucket": "shared", "key": "k"}),
    );
    assert_error(&refused, "AccessDenied");
    let refused = ask("/kv", json!({"op": "get", "bucket": "no/such", "key": "k"}));
    assert_error(&refused, "NoSuchStore");
    // Keys may hold '/', in any bucket.
    ask("/kv", json!({"op": "set", "key": "a/b", "value": "slash"}));
    assert_eq!(
        ask("/kv", json!({"op": "get", "key": "a/b"}))["value"],
        "slash"
    );
    assert_eq!(
        ask("/kv", json!({"op": "exists", "key": "a/b"}))["exists"],
        true
    );
    ask("/kv", json!({"op": "delete", "key": "a/b"}));
    assert_eq!(
        ask("/kv", json!({"op": "exists", "key": "a/b"}))["exists"],
        false
    );
    let many = ask(
        "/kv",
        json!({"op": "many", "set": {"x": "1", "y": "2"}, "get": ["x", "z", "y"]}),
    );
    assert_eq!(many["values"], json!([["x", "1"], null, ["y", "2"]]));
    // What a guest can make the host hold is bounded: open buckets, and
    // keys per batch.
    let opened = ask("/kv", json!({"op": "open", "count": 63}));
    assert_eq!(opened["open"], 64, "{opened}");
    let refused = ask("/kv", json!({"op": "open", "count": 100_000}));
    assert_error(&refused, "at most 64 buckets");
    let keys: Vec<String> = (0..1025).map(|i| format!("k{i}")).collect();
    let refused = ask("/kv", json!({"op": "many", "get": keys}));
    assert_error(&refused, "at most 1024 keys");
    // Listing: a bucket's own keys, in order; another function's private
    // bucket lists none of them.
    assert_eq!(
        ask("/kv", json!({"op": "list"}))["keys"],
        json!(["hits", "x", "y"])
    );
    assert_eq!(
        ask("/kv", json!({"op": "list", "bucket": "shared"}))["keys"],
        json!(["k"])
    );
    assert_eq!(ask("/other", json!({"op": "list"}))["keys"], json!([]));
    // A counter is decimal text, as other wasi:keyvalue hosts keep it; a
    // value that is not one is an error, not a trap.
    ask("/kv", json!({"op": "set", "key": "text", "value": "snow"}));
    let bad = ask("/kv", json!({"op": "incr", "key": "text"}));
    assert_error(&bad, "not a counter");

    // The local tier persists: a restart finds the values.
    drop(luge);
    let luge = site.start(&args);
    let (status, body) = luge.post("/kv", &json!({"op": "get", "key": "hits"}));
    assert_eq!(
        (status, body["value"].clone()),
        (200, json!("37")),
        "{body}"
    );
}

/// `wasi:keyvalue`'s `global:` buckets are the Redis tier: what one host
/// writes there, another host (a second Luge on the same Redis) reads,
/// and 32 concurrent increments split between both land exactly.
#[test]
fn wasi_keyvalue_global_buckets_are_redis() {
    wasmtime_only!();
    let _shared = sharing_compiles();
    let redis = luge_testkit::redis::RedisServer::start().unwrap();
    let url = redis.url();
    let site = Site::new(
        &["py-kv"],
        "[[routes]]\npath = \"/kv\"\nmodule = \"py-kv.wasm\"\nstate = [\"shared\"]\n",
    );
    let one = site.start(&["--state-url", &url]);
    let two = site.start(&["--state-url", &url]);
    let ask = |luge: &Luge, request: Value| {
        let (status, body) = luge.post("/kv", &request);
        assert_eq!(status, 200, "{request}: {body}");
        body
    };
    ask(
        &one,
        json!({"op": "set", "bucket": "global:shared", "key": "k", "value": "from one"}),
    );
    assert_eq!(
        ask(
            &two,
            json!({"op": "get", "bucket": "global:shared", "key": "k"})
        )["value"],
        "from one"
    );
    // The local tier is each host's own.
    assert_eq!(
        ask(&two, json!({"op": "get", "bucket": "shared", "key": "k"}))["value"],
        json!(null)
    );
    std::thread::scope(|scope| {
        for i in 0..32 {
            let luge = if i % 2 == 0 { &one } else { &two };
            scope.spawn(move || {
                ask(
                    luge,
                    json!({"op": "incr", "bucket": "global:default", "key": "n"}),
                )
            });
        }
    });
    assert_eq!(
        ask(
            &one,
            json!({"op": "get", "bucket": "global:default", "key": "n"})
        )["value"],
        "32"
    );
    // Listing on the Redis tier: the bucket's keys, from either host.
    assert_eq!(
        ask(&two, json!({"op": "list", "bucket": "global:shared"}))["keys"],
        json!(["k"])
    );
    assert_eq!(
        ask(&one, json!({"op": "list", "bucket": "global:default"}))["keys"],
        json!(["n"])
    );
}

/// Starts `luge serve` with the HTTP handler (actions/http) on `routes`
/// (TOML after each route's `module`), and `args`.
pub(crate) fn serve_handler(routes: &[(&str, &str)], args: &[&str]) -> (Site, Luge) {
    let toml: String = routes
        .iter()
        .map(|(path, extra)| {
            format!("[[routes]]\npath = \"{path}\"\nmodule = \"http-handler.wasm\"\n{extra}\n")
        })
        .collect();
    let site = Site::new(&["http-handler"], &toml);
    let luge = site.start(args);
    (site, luge)
}

/// A handler of WASI's 0.2.0-rc-2023-11-10 candidate (actions/spin/
/// http-rc, its own bindings): its request and body read through the
/// candidate's types and streams, its outgoing request through the
/// candidate's handler on the same grants as a 0.2 component's.
#[test]
fn a_wasi_http_release_candidate_handler_runs_unchanged() {
    wasmtime_only!();
    let port = common::tcp_peer(common::UPSTREAM);
    let toml = format!(
        "[[routes]]\npath = \"/rc/...\"\nmodule = \"http-rc.wasm\"\n\
         allowed_outbound_hosts = [\"http://127.0.0.1:{port}\"]\n"
    );
    let site = Site::new(&["http-rc"], &toml);
    let luge = site.start(&[]);
    let reply = luge.send("POST", "/rc/echo?x=1", &[], b"the body");
    assert_eq!(
        (reply.status, String::from_utf8_lossy(&reply.body).as_ref()),
        (200, "rc-2023-11-10 POST /rc/echo?x=1 the body")
    );
    assert_eq!(reply.header("content-type"), "text/plain");
    let url = format!("http://127.0.0.1:{port}/page");
    let reply = luge.send("GET", "/rc/f", &[("x-fetch", &url)], b"");
    assert_eq!(
        String::from_utf8_lossy(&reply.body),
        "rc-2023-11-10 GET /rc/f  | 200 upstream!"
    );
    let other = format!("http://127.0.0.1:{}/page", port.wrapping_add(1));
    let reply = luge.send("GET", "/rc/f", &[("x-fetch", &other)], b"");
    assert_eq!(
        String::from_utf8_lossy(&reply.body),
        "rc-2023-11-10 GET /rc/f  | error ErrorCode::HttpRequestDenied"
    );
}

/// A wasi:http handler sees the method, path with query, headers and body
/// of the request, and its response (status, headers, body) is the
/// client's; a fresh instance per request.
#[test]
fn an_http_handler_answers_the_request() {
    wasmtime_only!();
    let (_dir, luge) = serve_handler(&[("/web/echo", ""), ("/web/hello", "")], &[]);
    let reply = luge.send(
        "POST",
        "/web/echo?a=1&b=%C3%A9",
        &[("x-luge-test", "snow ❄")],
        b"the body",
    );
    reply.expect(200);
    assert_eq!(reply.header("x-method"), "POST");
    assert_eq!(reply.header("x-path"), "/web/echo?a=1&b=%C3%A9");
    assert_eq!(reply.headers["x-echo"].as_bytes(), "snow ❄".as_bytes());
    assert_eq!(reply.body, b"the body");
    let reply = luge.send("PUT", "/web/echo", &[], b"");
    assert_eq!((reply.status, reply.header("x-method")), (200, "PUT"));
    for _ in 0..3 {
        let (status, body) = luge.request("GET", "/web/hello", b"");
        assert_eq!(status, 200);
        assert_eq!(body, b"hello from a wasi:http component\n");
    }
}

/// An idle worker instantiates a handler's next sandbox ahead of its
/// request (`luge_sandboxes_made_ahead`), and requests take them
/// (`..._used`); each request still has an instance of its own (the
/// guest's count of requests served reads 1) with its own environment
/// (`LUGE_REQUEST_ID`, the response's `x-request-id`), and a sandbox made
/// for one route's function never serves another's.
#[test]
fn http_handler_sandboxes_made_ahead_are_fresh_and_the_requests_own() {
    wasmtime_only!();
    let (_dir, luge) = serve_handler(&[("/a/fresh", ""), ("/b/fresh", "")], &["--workers", "1"]);
    let mut ids = std::collections::BTreeSet::new();
    for i in 0..25 {
        let path = if (10..15).contains(&i) {
            "/b/fresh"
        } else {
            "/a/fresh"
        };
        let reply = luge.send("GET", path, &[], b"");
        assert_eq!(reply.status, 200, "{path}");
        let id = reply.header("x-request-id").to_owned();
        assert_eq!(
            String::from_utf8_lossy(&reply.body),
            format!("1 {id}"),
            "{path}"
        );
        assert!(ids.insert(id));
    }
    let (made, used) = made_ahead(&luge);
    // One client, one request at a time: the worker is idle after each,
    // and all but the first of each run of one route's requests can take
    // a sandbox made ahead (22 of 25; fewer on a loaded machine, where an
    // instantiation can take longer than the filter's 200 µs, 2 ms in
    // this debug build).
    assert!(used >= 5.0, "made {made}, used {used}: {}", luge.stderr());
    assert!(made >= used, "made {made}, used {used}");
    // The other front end has no idle worker of its own: none made.
    let (_dir, luge) = serve_handler(&[("/a/fresh", "")], &["--front-end", "threads"]);
    for _ in 0..5 {
        let reply = luge.send("GET", "/a/fresh", &[], b"");
        assert_eq!(reply.status, 200);
    }
    assert_eq!(made_ahead(&luge).0, 0.0);
}

/// A site with the examples `modules`, the probes `probes` (each
/// actions/wat/NAME.wat, written as NAME.wasm) and `toml`.
fn site_with_probes(modules: &[&str], probes: &[&str], toml: &str) -> Site {
    let site = Site::new(modules, toml);
    let dir = site.config().parent().unwrap().to_owned();
    for name in probes {
        let source = format!("{}/../actions/wat/{name}.wat", env!("CARGO_MANIFEST_DIR"));
        let wasm = wat::parse_file(&source).unwrap_or_else(|e| panic!("{source}: {e}"));
        std::fs::write(dir.join(format!("{name}.wasm")), wasm).unwrap();
    }
    site
}

/// `luge_sandboxes_made_ahead_total` and `..._used_total` now.
fn made_ahead(luge: &Luge) -> (f64, f64) {
    let samples = crate::metrics::scrape(luge);
    (
        crate::metrics::value(&samples, "luge_sandboxes_made_ahead_total"),
        crate::metrics::value(&samples, "luge_sandboxes_made_ahead_used_total"),
    )
}

/// A hostile tenant's slow start (actions/wat/slow-start.wat: milliseconds
/// of guest work before its instance exists) never runs on a worker's idle
/// time: a handler whose instantiation was slow is instantiated on demand
/// only, however often it is asked for, while a quick one beside it is
/// made ahead.
#[test]
fn a_handler_with_a_slow_start_is_not_made_ahead() {
    wasmtime_only!();
    let site = site_with_probes(
        &["http-handler"],
        &["slow-start"],
        "[[routes]]\npath = \"/slow\"\nmodule = \"slow-start.wasm\"\n\n\
         [[routes]]\npath = \"/hello\"\nmodule = \"http-handler.wasm\"\n",
    );
    let luge = site.start(&["--workers", "1"]);
    let made = |luge: &Luge| made_ahead(luge).0;
    for _ in 0..5 {
        let (status, body) = luge.request("GET", "/slow", b"");
        let body = String::from_utf8_lossy(&body);
        assert_eq!(status, 500, "{body}");
        assert!(body.contains("returned without a response"), "{body}");
    }
    assert_eq!(made(&luge), 0.0);
    // Not even tried: a preparation that ran into the start would have
    // been interrupted (1 ms, 10 ms in this debug build), and said so.
    assert!(
        !luge.stderr_shows("instantiating ahead"),
        "{}",
        luge.stderr()
    );
    // The positive control: the same worker makes the quick one ahead
    // (not after every request on a loaded machine, where an
    // instantiation can take longer than the filter's 200 µs, 2 ms in
    // this debug build).
    for _ in 0..10 {
        assert_eq!(luge.request("GET", "/hello", b"").0, 200);
    }
    assert!(made(&luge) >= 1.0);
}

/// A handler that passes for a quick one on demand now and then
/// (actions/wat/fickle-start.wat: its start is quick one time in four,
/// 25 ms of guest work otherwise) runs its slow start on a worker's idle
/// time at most twice: a second preparation that used more CPU time than
/// a quick handler does, before 64 quick ones (which one in four never
/// makes), ends preparing for it, and no sandbox is made ahead for it
/// after that.
#[test]
fn a_handler_quick_only_now_and_then_is_made_ahead_no_more() {
    wasmtime_only!();
    let site = site_with_probes(
        &[],
        &["fickle-start"],
        "[[routes]]\npath = \"/fickle\"\nmodule = \"fickle-start.wasm\"\n",
    );
    let luge = site.start(&["--workers", "1"]);
    let made = |luge: &Luge| made_ahead(luge).0;
    // Until a quick start on demand has let a slow one run ahead: one in
    // four is quick, three in four of the preparations then are slow.
    let stopped = "the handler is instantiated on demand from now on";
    for _ in 0..200 {
        assert_eq!(luge.request("GET", "/fickle", b"").0, 500);
        if luge.stderr().contains(stopped) {
            break;
        }
    }
    assert!(luge.stderr_shows(stopped), "{}", luge.stderr());
    let before = made(&luge);
    for _ in 0..20 {
        assert_eq!(luge.request("GET", "/fickle", b"").0, 500);
    }
    assert_eq!(made(&luge), before);
}

/// Bodies stream both ways: a 16 MiB request echoed back chunk by chunk,
/// and a 48 MiB response, more than a function's captured output may
/// hold (32 MiB), so it cannot have been collected first. A body past
/// --max-body-mb is refused before the handler runs.
#[test]
fn an_http_handler_streams_large_bodies() {
    wasmtime_only!();
    let (_dir, luge) = serve_handler(&[("/echo", ""), ("/stream", "")], &["--max-body-mb", "20"]);
    let input: Vec<u8> = (0..16u32 << 20).map(|i| (i % 251) as u8).collect();
    // Written by one thread while another reads: the echo answers as it
    // reads, so a client that sent everything first would wait on itself.
    let mut stream = connect(&luge);
    let mut writer = stream.try_clone().unwrap();
    let sent = input.clone();
    let writing = std::thread::spawn(move || {
        use std::io::Write;
        write!(
            writer,
            "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            sent.len()
        )
        .unwrap();
        writer.write_all(&sent).unwrap();
    });
    let mut response = Vec::new();
    std::io::Read::read_to_end(&mut stream, &mut response).unwrap();
    writing.join().unwrap();
    let head_end = response.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&response[..head_end]).to_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    assert!(
        dechunk(&response[head_end + 4..]) == input,
        "the echoed body differs"
    );
    let reply = luge.send("GET", "/stream?768", &[], b"");
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("transfer-encoding"), "chunked");
    assert_eq!(reply.body.len(), 768 << 16);
    assert!(reply.body.iter().all(|&b| b == b'a'));
    let (status, body) = announce_oversized(&luge, "POST", "/echo", 21 << 20);
    assert_eq!(status, 413, "{body}");
}

/// A trapping handler is a 500 naming the trap; one that computes past its
/// time limit is a 504; meanwhile, on one worker, a CPU-bound handler is
/// preempted and other requests are answered; the host stays up.
#[test]
fn a_failing_http_handler_disturbs_nothing_else() {
    wasmtime_only!();
    let (_dir, luge) = serve_handler(
        &[
            ("/trap", ""),
            ("/spin", "limits = { timeout_ms = 1500 }"),
            ("/hello", ""),
        ],
        &["--workers", "1"],
    );
    let reply = luge.send("GET", "/trap", &[], b"");
    assert_eq!(reply.status, 500);
    let error = reply.json()["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(error.contains("trapped"), "{error}");
    let base = luge.base.clone();
    let spinner = std::thread::spawn(move || {
        let started = std::time::Instant::now();
        let status = luge_testkit::status_and_body(
            ureq::get(&format!("{base}/spin"))
                .config()
                .http_status_as_error(false)
                .build()
                .call()
                .unwrap(),
        )
        .0;
        (status, started.elapsed())
    });
    std::thread::sleep(std::time::Duration::from_millis(200));
    // The only worker is busy spinning: answered all the same, by
    // preemption, well before the spinner's time limit.
    let started = std::time::Instant::now();
    let (status, _) = luge.request("GET", "/hello", b"");
    assert_eq!(status, 200);
    assert!(
        started.elapsed() < std::time::Duration::from_millis(1000),
        "hello waited {:?} behind a spinning handler",
        started.elapsed()
    );
    let (status, elapsed) = spinner.join().unwrap();
    assert_eq!(status, 504);
    assert!(elapsed < std::time::Duration::from_secs(4), "{elapsed:?}");
    assert_eq!(luge.request("GET", "/hello", b"").0, 200);
    assert!(luge.stderr_shows("handler failed"), "{}", luge.stderr());
}

/// Outgoing HTTP is denied unless the route grants the origin; granted, the
/// handler reaches it. A grant with a path is refused at start.
#[test]
fn outgoing_http_needs_a_grant() {
    wasmtime_only!();
    // A one-page HTTP server on 127.0.0.1.
    let port = common::tcp_peer(common::UPSTREAM);
    let grant = format!("allowed_outbound_hosts = [\"http://127.0.0.1:{port}\"]");
    let (_dir, luge) = serve_handler(&[("/granted/fetch", &grant), ("/denied/fetch", "")], &[]);
    let url = format!("http://127.0.0.1:{port}/page");
    let reply = luge.send("GET", "/granted/fetch", &[("x-fetch", &url)], b"");
    assert_eq!(
        (reply.status, reply.body.as_slice()),
        (200, &b"upstream!"[..])
    );
    let hint = format!("add \"http://127.0.0.1:{port}\" to the function's allowed_outbound_hosts");
    for _ in 0..2 {
        let reply = luge.send("GET", "/denied/fetch", &[("x-fetch", &url)], b"");
        assert_eq!(reply.status, 502);
        let error = String::from_utf8_lossy(&reply.body).to_string();
        assert!(error.contains("HttpRequestDenied"), "{error}");
    }
    // The log tells the author the grant to add, once.
    assert!(luge.stderr_shows(&hint), "{}", luge.stderr());
    assert_eq!(luge.stderr().matches(&hint).count(), 1, "{}", luge.stderr());
    // Granted the origin, not the host: another port is denied.
    let other = format!("http://127.0.0.1:{}/page", port.wrapping_add(1));
    let reply = luge.send("GET", "/granted/fetch", &[("x-fetch", &other)], b"");
    assert!(String::from_utf8_lossy(&reply.body).contains("HttpRequestDenied"));
    // At most 64 outgoing requests per invocation (each is a descriptor).
    let reply = luge.send("GET", "/granted/fetch?64", &[("x-fetch", &url)], b"");
    assert_eq!(
        (reply.status, reply.body.as_slice()),
        (200, &b"upstream!"[..])
    );
    let reply = luge.send("GET", "/granted/fetch?70", &[("x-fetch", &url)], b"");
    let error = String::from_utf8_lossy(&reply.body).to_string();
    assert_eq!(reply.status, 502, "{error}");
    assert!(
        error.contains("after 64:") && error.contains("ConnectionLimitReached"),
        "{error}"
    );

    let site = Site::new(
        &["http-handler"],
        "[[routes]]\npath = \"/f\"\nmodule = \"http-handler.wasm\"\nallowed_outbound_hosts = [\"https://example.com/path\"]\n",
    );
    let refused = site.try_start(&[]).err().unwrap();
    assert!(refused.contains("a path is not allowed"), "{refused}");
}

/// A handler cannot run where a function's stdin and stdout are the
/// interface: an OpenWhisk container refuses it at init, a chain refuses it
/// as a stage, both saying why.
#[test]
fn an_http_handler_is_refused_where_stdin_and_stdout_are_the_interface() {
    wasmtime_only!();
    on_both_front_ends(&[], |c| {
        let (status, body) = c.init(&init_body(&wasm("http-handler"), "main", json!({})));
        assert_eq!(status, 400, "{body}");
        let error = body["error"].as_str().unwrap();
        assert!(error.contains("wasi:http/proxy"), "{error}");
    });
    let site = Site::new(
        &["http-handler"],
        "[[routes]]\npath = \"/h\"\nmodule = \"http-handler.wasm\"\n\n[[chains]]\npath = \"/c\"\nstages = [\"/h\"]\n",
    );
    let refused = site.try_start(&[]).err().unwrap();
    assert!(refused.contains("is an HTTP handler"), "{refused}");
}

/// The payload of a chunked HTTP/1.1 body.
fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line = body.windows(2).position(|w| w == b"\r\n").unwrap();
        let size =
            usize::from_str_radix(std::str::from_utf8(&body[..line]).unwrap().trim(), 16).unwrap();
        body = &body[line + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}

/// JavaScript, from source to a request, in both worlds: `actions/js/hello`
/// (a wasi:cli/command component built by componentize-js) as an OpenWhisk
/// action on both front ends and on a route, and `actions/js/web` (a
/// wasi:http handler, StarlingMonkey's fetch event) on a route.
#[test]
fn javascript_functions_end_to_end() {
    wasmtime_only!();
    let _shared = sharing_compiles();
    on_both_front_ends(&[], |c| {
        c.init_example("js-hello");
        let (status, body) = c.run(&json!({"value": {"name": "❄"}}));
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            body,
            json!({"greeting": "Hello, ❄!", "language": "javascript"})
        );
    });
    let site = Site::new(
        &["js-hello", "js-web"],
        "[[routes]]\npath = \"/hello\"\nmodule = \"js-hello.wasm\"\n\n\
         [[routes]]\npath = \"/web\"\nmodule = \"js-web.wasm\"\n",
    );
    let luge = site.start(&[]);
    let (status, body) = luge.post("/hello", &json!({"name": "Luge"}));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["greeting"], "Hello, Luge!");
    for _ in 0..2 {
        let reply = luge.send("PUT", "/web?x=1", &[("x-luge-test", "snow")], b"a body");
        reply.expect(200);
        assert_eq!(reply.header("x-handled-by"), "js");
        assert_eq!(
            reply.json(),
            json!({
                "language": "javascript",
                "method": "PUT",
                "path": "/web?x=1",
                "test": "snow",
                "body": "a body",
            })
        );
    }
}

/// Handlers take admission places like every function: past
/// `--max-pending` a request is a 503 with Retry-After, at once. A client
/// that leaves before the response head cancels its handler, which gives
/// its place back long before its time limit.
#[test]
fn http_handlers_are_admitted_and_cancelled() {
    wasmtime_only!();
    let (_site, luge) = serve_handler(
        &[("/spin", "limits = { timeout_ms = 20000 }"), ("/hello", "")],
        &["--max-pending", "1"],
    );
    // A spinning handler holds the only place; its client then leaves.
    let mut stream = connect(&luge);
    std::io::Write::write_all(
        &mut stream,
        b"GET /spin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let reply = luge.send("GET", "/hello", &[], b"");
    reply.expect(503);
    assert_eq!(reply.header("retry-after"), "1");
    drop(stream);
    // Cancelled at the next epoch tick: the place is back within a moment,
    // not after the 20 s time limit.
    let started = std::time::Instant::now();
    loop {
        let (status, _) = luge.request("GET", "/hello", b"");
        if status == 200 {
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "the abandoned handler kept its place"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// WASI 0.3 (actions/spin/http3 and cli3, `wasip3` from crates.io): a
/// service whose response body a task writes after `handle` returned, a
/// request body streamed back, concurrent requests, a trap mid-body that
/// disturbs nothing else; a 0.3 command on the function ABI, its error
/// result a failure.
#[test]
fn wasi_03_services_and_commands() {
    wasmtime_only!();
    let site = Site::new(
        &["http3", "cli3"],
        "[[routes]]\npath = \"/h3/...\"\nmodule = \"http3.wasm\"\n\n\
         [[routes]]\npath = \"/cli3\"\nmodule = \"cli3.wasm\"\n",
    );
    let luge = site.start(&[]);
    let hello = b"hello from a wasi:http@0.3 component\n".to_vec();
    let reply = luge.send("GET", "/h3/hello", &[], b"");
    assert_eq!((reply.status, &reply.body), (200, &hello));
    let big: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    let reply = luge.send("POST", "/h3/echo", &[], &big);
    assert_eq!(reply.status, 200);
    assert!(reply.body == big, "{} bytes back", reply.body.len());
    std::thread::scope(|scope| {
        for _ in 0..16 {
            scope.spawn(|| assert_eq!(luge.send("GET", "/h3/x", &[], b"").body, hello));
        }
    });
    // A trap after the head: the body is cut short, and the function's
    // failure is logged; the next request is served.
    let mut stream = connect(&luge);
    use std::io::{Read, Write};
    stream
        .write_all(b"GET /h3/trap HTTP/1.1\r\nhost: luge\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let raw = String::from_utf8_lossy(&raw);
    assert!(!raw.ends_with("0\r\n\r\n"), "a complete body: {raw}");
    assert!(luge.stderr_shows("trapped"), "{}", luge.stderr());
    assert_eq!(luge.send("GET", "/h3/hello", &[], b"").body, hello);

    // The 0.3 command: stdin to stdout; its error result is exit status 1.
    let (status, body) = luge.post("/cli3", &json!({"a": [1, 2]}));
    assert_eq!((status, body), (200, json!({"a": [1, 2]})));
    let (status, body) = luge.post("/cli3", &json!("fail"));
    assert_eq!(status, 500, "{body}");
    assert!(body.to_string().contains("status 1"), "{body}");
}

/// Sixteen clients at once on a reused instance that takes sixteen, on
/// two workers: every request is answered, promptly. The instance's
/// driver is polled by whichever of its requests' jobs a worker runs; a
/// wake-up lost between two of them (futures-util's `Shared`,
/// rust-lang/futures-rs#2706) left requests waiting for their time limit
/// (here 5 s, a 504) in most runs of a few seconds.
#[test]
fn a_reused_instance_serves_sixteen_clients_at_once_on_two_workers() {
    wasmtime_only!();
    let site = Site::new(
        &["http3"],
        "[[routes]]\npath = \"/r/...\"\nmodule = \"http3.wasm\"\nreuse = 128\n\
         reuse_concurrent = 16\nlimits = { timeout_ms = 5000 }\n",
    );
    let luge = site.start(&["--workers", "2"]);
    let until = std::time::Instant::now() + std::time::Duration::from_secs(4);
    let served: usize = std::thread::scope(|scope| {
        let clients: Vec<_> = (0..16)
            .map(|_| {
                scope.spawn(|| {
                    let mut served = 0;
                    while std::time::Instant::now() < until {
                        let sent = std::time::Instant::now();
                        let reply = luge.send("GET", "/r/hello", &[], b"");
                        reply.expect(200);
                        assert!(
                            sent.elapsed() < std::time::Duration::from_secs(2),
                            "a request waited {:?}",
                            sent.elapsed()
                        );
                        served += 1;
                    }
                    served
                })
            })
            .collect();
        clients.into_iter().map(|c| c.join().unwrap()).sum()
    });
    assert!(served >= 16, "{served} requests served");
}

/// Opt-in instance reuse for WASI 0.3 services: a fresh instance per
/// request unless a route sets `reuse`; with it, one instance serves that
/// many requests (the guest's own count shows it), `reuse_concurrent` of
/// them at once; a request past its time limit ends its instance (the next
/// one starts afresh); a route with grants is refused unless the operator
/// allows it, and a function that is not a 0.3 service is refused by name.
#[test]
fn wasi_03_instances_are_reused_only_where_a_route_opts_in() {
    wasmtime_only!();
    let site = Site::new(
        &["http3"],
        "[[routes]]\npath = \"/fresh/...\"\nmodule = \"http3.wasm\"\n\n\
         [[routes]]\npath = \"/seq/...\"\nmodule = \"http3.wasm\"\nreuse = 3\n\n\
         [[routes]]\npath = \"/par/...\"\nmodule = \"http3.wasm\"\nreuse = 100\n\
         reuse_concurrent = 4\n\n\
         [[routes]]\npath = \"/slow/...\"\nmodule = \"http3.wasm\"\nreuse = 100\n\
         limits = { timeout_ms = 500 }\n",
    );
    let luge = site.start(&[]);
    let count = |path: &str| {
        let reply = luge.send("GET", path, &[], b"");
        let body = String::from_utf8_lossy(&reply.body).trim().to_owned();
        assert_eq!(reply.status, 200, "{path}: {body}");
        body
    };
    for _ in 0..3 {
        assert_eq!(count("/fresh/count"), "count 1");
    }
    // Three requests per instance, one after another, then a new one.
    let served: Vec<String> = (0..7).map(|_| count("/seq/count")).collect();
    assert_eq!(
        served,
        ["1", "2", "3", "1", "2", "3", "1"].map(|n| format!("count {n}"))
    );
    // Four at once in one instance: each waits 1 s on wasi:clocks, and
    // they overlap there (one after another would take 4 s).
    let started = std::time::Instant::now();
    let mut served: Vec<String> = std::thread::scope(|scope| {
        let waiting: Vec<_> = (0..4).map(|_| scope.spawn(|| count("/par/wait"))).collect();
        waiting.into_iter().map(|w| w.join().unwrap()).collect()
    });
    served.sort();
    assert_eq!(served, ["1", "2", "3", "4"].map(|n| format!("count {n}")));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(3),
        "served one at a time: {:?}",
        started.elapsed()
    );
    // A request that burns CPU past its time limit ends its instance: the
    // next request is its new instance's first.
    assert_eq!(count("/slow/count"), "count 1");
    let reply = luge.send("GET", "/slow/spin", &[], b"");
    reply.expect(504);
    assert_eq!(count("/slow/count"), "count 1");
    assert_eq!(count("/slow/count"), "count 2");

    // A route with grants: refused unless the operator allows it.
    let granted = Site::new(
        &["http3"],
        "[[routes]]\npath = \"/g/...\"\nmodule = \"http3.wasm\"\nreuse = 8\n\
         allowed_outbound_hosts = [\"http://127.0.0.1:9\"]\n",
    );
    let refused = granted
        .try_start(&[])
        .err()
        .expect("reuse with grants refused");
    assert!(
        refused.contains("--allow-reuse-with-grants") && refused.contains("allowed_outbound_hosts"),
        "{refused}"
    );
    let allowed = granted.start(&["--allow-reuse-with-grants"]);
    for n in 1..=2 {
        let reply = allowed.send("GET", "/g/count", &[], b"");
        assert_eq!(String::from_utf8_lossy(&reply.body), format!("count {n}\n"));
    }
    // Not a WASI 0.3 service, bad bounds: refused at start, by name.
    for (toml, expected) in [
        (
            "[[routes]]\npath = \"/h/...\"\nmodule = \"http-handler.wasm\"\nreuse = 8\n",
            "WASI 0.3",
        ),
        (
            "[[routes]]\npath = \"/h/...\"\nmodule = \"http3.wasm\"\nreuse = 0\n",
            "reuse must be 1 to",
        ),
        (
            "[[routes]]\npath = \"/h/...\"\nmodule = \"http3.wasm\"\nreuse_concurrent = 2\n",
            "without reuse",
        ),
    ] {
        let site = Site::new(&["http3", "http-handler"], toml);
        let refused = site.try_start(&[]).err().expect("refused");
        assert!(refused.contains(expected), "{toml}: {refused}");
    }
}

/// The host objects a component creates at will (header fields, bodies,
/// streams) live outside its linear memory: their number is bounded by its
/// memory limit (64 MiB: 1024 resources of at most 64 KiB of fields), so a
/// guest that hoards them traps instead of growing the host's memory until
/// its time limit; the next request is served.
#[test]
fn a_component_holds_a_bounded_number_of_host_resources() {
    wasmtime_only!();
    let (_site, luge) = serve_handler(&[("/h/...", "limits = { memory_mb = 64 }")], &[]);
    let reply = luge.send("GET", "/h/hoard?1000", &[], b"");
    assert_eq!(
        (
            reply.status,
            String::from_utf8_lossy(&reply.body).into_owned()
        ),
        (200, "held 1000\n".to_owned())
    );
    let reply = luge.send("GET", "/h/hoard?1100", &[], b"");
    let body = String::from_utf8_lossy(&reply.body).into_owned();
    assert_eq!(reply.status, 500, "{body}");
    assert!(body.contains("trapped"), "{body}");
    assert_eq!(luge.send("GET", "/h/hello", &[], b"").status, 200);
}

/// Service chaining from a WASI 0.2 handler: `http://NAME.luge.internal`
/// is the function NAME of this host, reached in process when the caller
/// is granted it (`calls`, or its internal origin in
/// `allowed_outbound_hosts`), denied otherwise; the callee's response
/// streams back to the caller.
#[test]
fn chained_requests_reach_granted_functions() {
    wasmtime_only!();
    let site = Site::new(
        &["http-handler"],
        "[[routes]]\npath = \"/a/...\"\nmodule = \"http-handler.wasm\"\ncalls = [\"b\"]\n\n\
         [[routes]]\npath = \"/o/...\"\nmodule = \"http-handler.wasm\"\n\
         allowed_outbound_hosts = [\"http://b.luge.internal\"]\n\n\
         [[routes]]\npath = \"/b/...\"\nmodule = \"http-handler.wasm\"\nname = \"b\"\n\n\
         [[routes]]\npath = \"/c/...\"\nmodule = \"http-handler.wasm\"\n",
    );
    let luge = site.start(&[]);
    for caller in ["/a/fetch", "/o/fetch"] {
        let reply = luge.send(
            "GET",
            caller,
            &[("x-fetch", "http://b.luge.internal/b/hello")],
            b"",
        );
        assert_eq!(
            (
                reply.status,
                String::from_utf8_lossy(&reply.body).into_owned()
            ),
            (200, "hello from a wasi:http component\n".to_owned()),
            "{caller}"
        );
    }
    // Streamed through: 64 KiB from the callee's stream path.
    let reply = luge.send(
        "GET",
        "/a/fetch",
        &[("x-fetch", "http://b.luge.internal/b/stream?64")],
        b"",
    );
    assert_eq!(reply.status, 200);
    // Not granted, no such function, another port: denied alike.
    for (caller, url) in [
        ("/c/fetch", "http://b.luge.internal/b/hello"),
        ("/a/fetch", "http://nosuch.luge.internal/x"),
        ("/a/fetch", "http://b.luge.internal:8080/b/hello"),
    ] {
        let reply = luge.send("GET", caller, &[("x-fetch", url)], b"");
        let body = String::from_utf8_lossy(&reply.body).into_owned();
        assert_eq!(reply.status, 502, "{caller} {url}: {body}");
        assert!(body.contains("HttpRequestDenied"), "{caller} {url}: {body}");
    }
    // The chained calls are counted (as each callee ends).
    let counted = r#"luge_calls_total{caller="a/...",callee="b",how="chained",result="success"} 2"#;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut metrics = luge.get_text("/metrics");
    while !metrics.contains(counted) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
        metrics = luge.get_text("/metrics");
    }
    assert!(metrics.contains(counted), "{metrics}");
}

/// Every admitted handler finds a sandbox: a component's several core
/// instances and tables fit the pool as a module does, and the slots that
/// workers' deferred teardowns hold (luge_core::teardown: a finished
/// sandbox is freed after its response is out) are kept out of admission.
/// With every place taken by spinning handlers, a request is answered or
/// refused by admission, never failed for want of a sandbox (before, the
/// pool's core instances ran out first: a 500, "the function trapped").
#[test]
fn every_admitted_handler_finds_a_sandbox() {
    wasmtime_only!();
    // 16 slots, two workers: two are kept for their teardowns, 14 places.
    let (_site, luge) = serve_handler(
        &[("/spin", "limits = { timeout_ms = 400 }"), ("/hello", "")],
        &["--workers", "2", "--max-sandboxes", "16"],
    );
    let statuses = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..14 {
            scope.spawn(|| luge.request("GET", "/spin", b""));
        }
        for _ in 0..2 {
            scope.spawn(|| {
                // Past the spinners' 400 ms: some are answered for sure.
                let until = std::time::Instant::now() + std::time::Duration::from_millis(1200);
                while std::time::Instant::now() < until {
                    let (status, body) = luge.request("GET", "/hello", b"");
                    statuses
                        .lock()
                        .unwrap()
                        .push((status, String::from_utf8_lossy(&body).into_owned()));
                }
            });
        }
    });
    let statuses = statuses.into_inner().unwrap();
    let answered = statuses.iter().filter(|(status, _)| *status == 200).count();
    for (status, body) in &statuses {
        // Refused by admission, never by a pool that had no slot left.
        assert!(
            *status == 200 || (*status == 503 && !body.contains("sandbox slot")),
            "{status}: {body} ({answered} answered)"
        );
    }
    assert!(answered > 0, "{statuses:?}");
    let (status, body) = luge.request("GET", "/hello", b"");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
}
