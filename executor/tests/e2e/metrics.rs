//! `GET /metrics`: valid Prometheus/OpenMetrics text whose counters move as
//! invocations happen.

use crate::common;

use common::*;
use serde_json::json;

/// Checks every line is a comment or `name{labels} value`, and returns the
/// samples as (series, value).
fn parse(text: &str) -> Vec<(String, f64)> {
    assert!(
        text.ends_with("# EOF\n"),
        "OpenMetrics text ends with # EOF"
    );
    let mut samples = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') {
            let kind = line.split(' ').nth(1).unwrap_or("");
            assert!(
                ["HELP", "TYPE", "UNIT", "EOF"].contains(&kind),
                "bad comment: {line}"
            );
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("bad sample: {line}"));
        let name_end = series.find('{').unwrap_or(series.len());
        let name = &series[..name_end];
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name: {line}"
        );
        if name_end < series.len() {
            assert!(series.ends_with('}'), "bad labels: {line}");
        }
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value: {line}"));
        samples.push((series.to_owned(), value));
    }
    samples
}

pub(crate) fn value(samples: &[(String, f64)], series: &str) -> f64 {
    samples
        .iter()
        .find(|(s, _)| s == series)
        .map_or(0.0, |(_, v)| *v)
}

pub(crate) fn scrape(luge: &Luge) -> Vec<(String, f64)> {
    let (status, body) = luge.request("GET", "/metrics", b"");
    assert_eq!(status, 200);
    parse(&String::from_utf8(body).unwrap())
}

#[test]
fn counters_move_with_invocations() {
    let luge = Luge::start("serve", &["--workers", "2"]);
    let before = scrape(&luge);
    assert_eq!(value(&before, "luge_cold_starts_total"), 0.0);

    let echo = init_body(&wasm("echo"), "main", json!({"name": "echo-fn"}));
    let fail = init_body(&wasm("fail"), "main", json!({"name": "fail-fn"}));
    luge.init_ok("/e/init", &echo);
    luge.init_ok("/f/init", &fail);
    for _ in 0..3 {
        assert_eq!(luge.post("/e/run", &json!({"value": {}})).0, 200);
    }
    assert_eq!(
        luge.post("/f/run", &json!({"value": {"mode": "exit"}})).0,
        502
    );
    assert_eq!(
        luge.post("/f/run", &json!({"value": {"mode": "trap"}})).0,
        502
    );
    // A deadline already past is a miss.
    assert_eq!(
        luge.post("/e/run", &json!({"value": {}, "deadline": "1"}))
            .0,
        200
    );

    let after = scrape(&luge);
    let s = |series: &str| value(&after, series);
    assert_eq!(
        s("luge_invocations_total{function=\"echo-fn\",outcome=\"success\"}"),
        4.0
    );
    assert_eq!(
        s("luge_invocations_total{function=\"fail-fn\",outcome=\"exit_error\"}"),
        1.0
    );
    assert_eq!(
        s("luge_invocations_total{function=\"fail-fn\",outcome=\"trap\"}"),
        1.0
    );
    assert_eq!(
        s("luge_invocation_seconds_count{function=\"echo-fn\"}"),
        4.0
    );
    assert!(s("luge_invocation_seconds_sum{function=\"echo-fn\"}") > 0.0);
    assert_eq!(s("luge_cold_starts_total"), 2.0);
    assert_eq!(s("luge_compiles_total"), 2.0);
    assert_eq!(s("luge_modules_loaded"), 2.0);
    // The worker records a miss once the job's future has returned, just
    // after the job answered: wait for it (bounded) rather than race it.
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while value(
        &scrape(&luge),
        "luge_deadline_misses_total{function=\"echo-fn\"}",
    ) < 1.0
    {
        assert!(
            std::time::Instant::now() < give_up,
            "no deadline miss counted"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let busy: f64 = (0..2)
        .map(|w| s(&format!("luge_worker_busy_seconds_total{{worker=\"{w}\"}}")))
        .sum();
    assert!(busy > 0.0, "{after:?}");
}

#[test]
fn proxy_serves_metrics_too() {
    let luge = Luge::start("proxy", &[]);
    luge.init_ok("/init", &init_body(&wasm("echo"), "main", json!({})));
    assert_eq!(luge.post("/run", &json!({"value": {}})).0, 200);
    let samples = scrape(&luge);
    assert_eq!(
        value(
            &samples,
            "luge_invocations_total{function=\"test-action\",outcome=\"success\"}"
        ),
        1.0
    );
}

/// Run where it arrived: with worker front ends (Wasmtime's default) the
/// worker that reads a request runs its sandbox, so one client's requests
/// one after another are all submitted locally and none is stolen; with
/// `--front-end threads` (the other engines' default) every request is
/// handed over. Engines whose sandboxes do not yield refuse worker front
/// ends.
#[test]
fn requests_run_on_the_worker_that_received_them() {
    let wasmtime = engine() == "wasmtime";
    if !wasmtime {
        let refused = Luge::try_start("serve", &["--front-end", "workers"])
            .err()
            .unwrap();
        assert!(
            refused.contains("--front-end workers needs --engine wasmtime"),
            "{refused}"
        );
    }
    let cases: &[(&[&str], bool)] = &[
        (&[], wasmtime),
        (&["--front-end", "threads"], false),
        (&["--front-end", "workers"], true),
    ];
    for &(args, local) in cases.iter().filter(|(_, local)| wasmtime || !local) {
        let mut all = vec!["--workers", "2"];
        all.extend_from_slice(args);
        let luge = Luge::start("serve", &all);
        luge.init_ok("/c/init", &init_body(&wasm("echo"), "main", json!({})));
        for i in 0..50 {
            let reply = luge.post("/c/run", &json!({"value": {"i": i}}));
            assert_eq!(reply, (200, json!({"i": i})), "{args:?}");
        }
        let samples = scrape(&luge);
        let submits = value(&samples, "luge_local_submits_total");
        if local {
            assert_eq!(submits, 50.0, "{args:?}");
            assert_eq!(value(&samples, "luge_steals_total"), 0.0, "{args:?}");
        } else {
            assert_eq!(submits, 0.0, "{args:?}");
        }
    }
}

/// The metric families `luge serve` exposes (its `# TYPE` lines), with
/// every family in use: telemetry on, a route, a call, a cron trigger.
fn families() -> std::collections::BTreeSet<String> {
    let site = Site::new(
        &["fanout", "fib"],
        "[[routes]]\npath = \"/fanout\"\nmodule = \"fanout.wasm\"\ncalls = [\"fib\"]\n\n\
         [[routes]]\npath = \"/fib\"\nmodule = \"fib.wasm\"\n\n\
         [[triggers]]\nfunction = \"/fib\"\ncron = \"* * * * * *\"\n",
    );
    let config = site.config();
    // Nothing listens at the endpoint: export fails, which is counted.
    let luge = Luge::start_with_env(
        "serve",
        &["--config", path_str(&config)],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")],
    );
    let (status, body) = luge.post(
        "/fanout",
        &json!({ "calls": [{ "name": "fib", "input": { "n": 3 } }] }),
    );
    assert_eq!(status, 200, "{body}");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let text = luge.get_text("/metrics");
        if text.contains("luge_trigger_lag_seconds_bucket") || std::time::Instant::now() > until {
            return text
                .lines()
                .filter_map(|l| l.strip_prefix("# TYPE "))
                .filter_map(|l| l.split(' ').next())
                .map(str::to_owned)
                .collect();
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// `luge_x_total`, `luge_x_bucket`: the family `luge_x`.
fn family(series: &str) -> &str {
    ["_total", "_bucket", "_count", "_sum", "_created"]
        .iter()
        .find_map(|suffix| series.strip_suffix(suffix))
        .unwrap_or(series)
}

/// Every metric the Grafana dashboard (deploy/grafana/luge.json) charts
/// exists, and every metric Luge exposes is explained in
/// docs/OPERATIONS.md, so neither drifts from the code.
#[test]
fn the_dashboard_and_the_operations_guide_name_every_metric_and_no_other() {
    let families = families();
    for used in [
        "luge_invocations",
        "luge_calls",
        "luge_trigger_events",
        "luge_telemetry_records",
    ] {
        assert!(families.contains(used), "{used}: {families:?}");
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("deploy/grafana/luge.json")).unwrap(),
    )
    .unwrap();
    let mut charted = std::collections::BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            for (at, _) in expr.match_indices("luge_") {
                let name: String = expr[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                charted.insert(family(&name).to_owned());
            }
        }
    }
    for name in &charted {
        assert!(
            families.contains(name),
            "the dashboard charts {name}, which Luge does not expose"
        );
    }
    let guide = std::fs::read_to_string(root.join("docs/OPERATIONS.md")).unwrap();
    for name in &families {
        assert!(
            guide.contains(&format!("`{name}`")),
            "docs/OPERATIONS.md does not explain {name}"
        );
    }
}

/// The book's metrics reference (docs/book/src/ref-metrics.md) is what a
/// server serves: each family's name, type and help as `GET /metrics`
/// describes it, telemetry on. A family added, renamed or explained anew
/// fails here until the book says it too; `LUGE_BLESS=1` rewrites it.
#[test]
fn the_books_metrics_reference_is_the_servers() {
    wasmtime_only!();
    // Telemetry on (its records are a family), towards a port where
    // nothing answers: nothing is exported, every family is described.
    let otlp = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")];
    let luge = Luge::start_with_env("serve", &[], &otlp);
    let (status, body) = luge.request("GET", "/metrics", b"");
    assert_eq!(status, 200);
    let made = reference(&String::from_utf8(body).unwrap());
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/book/src/ref-metrics.md");
    if std::env::var_os("LUGE_BLESS").is_some() {
        std::fs::write(&path, &made).expect("the book is writable");
    }
    let written = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        written == made,
        "docs/book/src/ref-metrics.md is not what `GET /metrics` describes: rewrite it with \
         `LUGE_BLESS=1 ./scripts/cargo-linted.sh test --workspace --all-features --test e2e -- \
         the_books_metrics_reference` and commit it"
    );
}

/// The book's chapter from the registered families and an exposition's
/// `# TYPE` and `# HELP` lines, in the order the server writes them.
fn reference(text: &str) -> String {
    // The registered families first: `/metrics` describes them once they
    // have a member, which this idle server's have not.
    let mut families: Vec<(String, String, String)> = luge_executor::metrics::REGISTERED
        .iter()
        .map(|(name, kind, help)| {
            (
                format!("luge_{name}"),
                (*kind).to_owned(),
                (*help).to_owned(),
            )
        })
        .collect();
    for line in text.lines() {
        let mut words = line.splitn(4, ' ');
        let (Some("#"), Some(kind), Some(name)) = (words.next(), words.next(), words.next()) else {
            continue;
        };
        let rest = words.next().unwrap_or("").to_owned();
        let at = match families.iter().position(|(n, ..)| n == name) {
            Some(at) => at,
            None => {
                families.push((name.to_owned(), String::new(), String::new()));
                families.len() - 1
            }
        };
        match kind {
            "TYPE" => families[at].1 = rest,
            "HELP" => families[at].2 = rest.replace('|', "\\|"),
            _ => {}
        }
    }
    let mut page = String::from(
        "# Metrics reference\n\n\
         Every family `GET /metrics` serves (OpenMetrics text, on `luge serve`'s\n\
         port and the OpenWhisk proxy's), as a server with telemetry on describes\n\
         it. Counters' samples end in `_total`; histograms' in `_bucket`, `_sum`\n\
         and `_count`. Made from a running server by the test\n\
         `metrics::the_books_metrics_reference_is_the_servers` (`LUGE_BLESS=1`\n\
         rewrites it): do not edit it by hand.\n\n\
         | family | type | what it says |\n|---|---|---|\n",
    );
    for (name, kind, help) in families {
        page.push_str(&format!("| `{name}` | {kind} | {help} |\n"));
    }
    page
}

/// `luge_invocations_in_flight` is the load to scale on: 1 while a request
/// runs, 0 once it has ended, beside the bound it is held against.
#[test]
fn invocations_in_flight_is_the_load_held() {
    let site = Site::new(
        &["sleep"],
        "[[routes]]\npath = \"/sleep\"\nmodule = \"sleep.wasm\"\n",
    );
    let config = site.config();
    let luge = Luge::start(
        "serve",
        &["--config", path_str(&config), "--max-pending", "48"],
    );
    let in_flight = |luge: &Luge| value(&scrape(luge), "luge_invocations_in_flight");
    assert_eq!(in_flight(&luge), 0.0);
    assert_eq!(value(&scrape(&luge), "luge_admission_places"), 48.0);
    std::thread::scope(|scope| {
        let slow = scope.spawn(|| luge.post("/sleep", &json!({ "ms": 1500 })));
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while in_flight(&luge) != 1.0 {
            assert!(std::time::Instant::now() < until, "never in flight");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(slow.join().unwrap().0, 200);
    });
    assert_eq!(in_flight(&luge), 0.0);
}
