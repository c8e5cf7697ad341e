//! `azure-mix`: latency ECDF of a skewed mix, 90 % of requests to two
//! functions and 10 % over 60 more, half of them CPU-bound (WOW Fig. 6).

use std::time::{Duration, Instant};

use luge_benches::{init_body, wasm};
use serde_json::json;

use crate::{Report, Setup, percentile_ms};

pub(crate) fn azure_mix(setup: &Setup, window: Duration) -> anyhow::Result<Report> {
    use rand::{RngExt, SeedableRng};
    let server = setup.server(&[]);
    // f0 and f1 take 90 % of requests; f2..f61 share 10 %. Even functions
    // are CPU-bound (BLAKE3 rounds), odd ones are echo.
    let functions = 62;
    for f in 0..functions {
        let code = if f % 2 == 0 {
            wasm("hash")
        } else {
            wasm("echo")
        };
        assert_eq!(
            server.post(&format!("/f{f}/init"), &init_body(&code)).0,
            200
        );
    }
    let rate = 150.0;
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x1a2e);
    let mut arrivals = Vec::new();
    let mut at = Duration::ZERO;
    while at < window {
        let pick: f64 = rng.random();
        let f = if pick < 0.45 {
            0
        } else if pick < 0.90 {
            1
        } else {
            2 + rng.random_range(0..functions - 2)
        };
        arrivals.push((at, f));
        let u: f64 = rng.random();
        at += Duration::from_secs_f64(-(1.0 - u).ln() / rate);
    }
    let start = Instant::now();
    let latencies: Vec<(usize, Duration)> = std::thread::scope(|s| {
        let handles: Vec<_> = arrivals
            .iter()
            .map(|&(at, f)| {
                let server = &server;
                if let Some(wait) = (start + at).checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                s.spawn(move || {
                    let params = if f % 2 == 0 {
                        json!({"iterations": 2000})
                    } else {
                        json!({"f": f})
                    };
                    let (status, _) = server.post(&format!("/f{f}/run"), &json!({"value": params}));
                    assert_eq!(status, 200);
                    (f, Instant::now() - (start + at))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client"))
            .collect()
    });
    let all: Vec<Duration> = latencies.iter().map(|l| l.1).collect();
    let hot: Vec<Duration> = latencies.iter().filter(|l| l.0 < 2).map(|l| l.1).collect();
    let tail: Vec<Duration> = latencies.iter().filter(|l| l.0 >= 2).map(|l| l.1).collect();
    let ecdf = |samples: &[Duration]| {
        let mut sorted: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len() as f64;
        sorted
            .iter()
            .enumerate()
            .map(|(i, &ms)| (ms, (i + 1) as f64 / n))
            .collect::<Vec<_>>()
    };
    let row = |name: &str, s: &[Duration]| {
        vec![
            name.to_owned(),
            s.len().to_string(),
            format!("{:.2}", percentile_ms(s, 50.0)),
            format!("{:.2}", percentile_ms(s, 90.0)),
            format!("{:.2}", percentile_ms(s, 99.0)),
        ]
    };
    Ok(Report {
        name: "azure-mix",
        title: "Latency ECDF of an Azure-like mix (WOW Fig. 6)".into(),
        columns: vec!["requests", "count", "p50 ms", "p90 ms", "p99 ms"],
        rows: vec![
            row("all", &all),
            row("two hot functions", &hot),
            row("60 others", &tail),
        ],
        x_desc: "latency, ms",
        y_desc: "fraction of requests",
        series: vec![
            ("all".into(), ecdf(&all)),
            ("two hot functions".into(), ecdf(&hot)),
            ("60 others".into(), ecdf(&tail)),
        ],
        notes: format!(
            "62 warm containers on one `luge serve`; open-loop Poisson arrivals at {rate} req/s for {} s (seed 0x1a2e); 45 % + 45 % of requests to f0 (hash, 2000 BLAKE3 rounds) and f1 (echo), 10 % spread over f2..f61 (alternately hash and echo). Latency over HTTP on 127.0.0.1 from the scheduled arrival, one client thread per request.",
            window.as_secs_f64()
        ),
    })
}
