//! `churn`: sandbox creations per second and their latency as the rate
//! rises, and a native fork+exec for scale (Faasm Fig. 10, Sledge Table 3).

use std::sync::Arc;
use std::time::{Duration, Instant};

use luge_benches::wasm;
use luge_core::{Action, Invocation, Preemption};
use luge_registry::ModuleCode;
use luge_sched::{Job, Policy, Scheduler, SchedulerConfig};

use crate::{Report, Setup, mean_ms, percentile_ms, spawn_native};

pub(crate) fn churn(setup: &Setup, window: Duration) -> anyhow::Result<Report> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let _entered = runtime.enter();
    let registry = setup.registry();
    let module = registry.load(&ModuleCode::Wasm(wasm("noop")))?;
    let action = Arc::new(Action::command("noop"));
    let window = window.min(Duration::from_secs(3));
    let mut rows = Vec::new();
    let (mut avg_series, mut p99_series) = (Vec::new(), Vec::new());
    for rate in [1_000.0, 5_000.0, 10_000.0, 20_000.0, 40_000.0] {
        let scheduler = Scheduler::start(
            &SchedulerConfig {
                policy: Policy::Edf,
                ..SchedulerConfig::default()
            },
            None,
        )?;
        let (tx, rx) = std::sync::mpsc::channel();
        let start = Instant::now();
        let interval = Duration::from_secs_f64(1.0 / rate);
        let mut submitted = 0u64;
        let mut next = Duration::ZERO;
        while next < window {
            let arrival = start + next;
            while Instant::now() < arrival {
                std::hint::spin_loop();
            }
            let sandbox = Arc::clone(&module).start(
                Invocation::new(Arc::clone(&action), Vec::new()),
                Preemption::default(),
            );
            let tx = tx.clone();
            scheduler.submit(Job {
                function: Arc::from("noop"),
                deadline: arrival + Duration::from_millis(10),
                expected: None,
                longest_poll: std::time::Duration::from_secs(60),
                tenant: None,
                future: Box::pin(async move {
                    let outcome = sandbox.await;
                    let _ = tx.send((arrival, Instant::now(), outcome.termination.is_success()));
                }),
            });
            submitted += 1;
            next += interval;
        }
        drop(tx);
        let done: Vec<_> = rx.iter().take(submitted as usize).collect();
        let finished = done.iter().map(|d| d.1).max().unwrap_or(start);
        let achieved = done.len() as f64 / (finished - start).as_secs_f64();
        let latencies: Vec<Duration> = done.iter().map(|d| d.1 - d.0).collect();
        let failed = done.iter().filter(|d| !d.2).count();
        let (avg, p99) = (
            mean_ms(&latencies) * 1e3,
            percentile_ms(&latencies, 99.0) * 1e3,
        );
        avg_series.push((rate, avg));
        p99_series.push((rate, p99));
        rows.push(vec![
            format!("{rate:.0}"),
            format!("{achieved:.0}"),
            format!("{avg:.0}"),
            format!("{p99:.0}"),
            failed.to_string(),
        ]);
    }
    let native = luge_testkit::native_example("c-ping");
    let spawns: Vec<Duration> = (0..300).map(|_| spawn_native(&native, b"")).collect();
    rows.push(vec![
        "native fork+exec, one after another".into(),
        format!("{:.0}", 1000.0 / mean_ms(&spawns)),
        format!("{:.0}", mean_ms(&spawns) * 1e3),
        format!("{:.0}", percentile_ms(&spawns, 99.0) * 1e3),
        "0".into(),
    ]);
    Ok(Report {
        name: "churn",
        title: "Sandbox churn (Faasm Fig. 10, Sledge Table 3)".into(),
        columns: vec![
            "offered sandboxes/s",
            "completed sandboxes/s",
            "avg latency µs",
            "p99 latency µs",
            "failed",
        ],
        rows,
        x_desc: "offered sandboxes per second",
        y_desc: "latency, µs",
        series: vec![("avg".into(), avg_series), ("p99".into(), p99_series)],
        notes: format!(
            "`noop.wasm` sandboxes (instantiate, run `_start`, tear down) submitted to luge-sched (one pinned worker per core, edf) at a fixed rate for {} s each, no HTTP; latency from the scheduled submission to completion. The native row spawns the C `ping` built with `cc -O2` 300 times in sequence (Sledge Table 3 compares 61 µs avg / 146 µs p99 per sandbox with 487 / 588 µs for fork+exec).",
            window.as_secs_f64()
        ),
    })
}
