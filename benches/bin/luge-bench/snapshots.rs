//! `snapshots`: a function with a costly start-up (`preinit`: a prime
//! table built in its initialisation), with and without its pre-initialized
//! snapshot (issue 18): what the upload costs, the cold start from the
//! artifact (load + first request) and a warm request (a fresh sandbox from
//! the loaded module).

use std::sync::Arc;
use std::time::{Duration, Instant};

use luge_benches::{key, wasm};
use luge_core::{Action, Invocation, LimitPolicy};
use luge_registry::{ModuleCode, ModuleRegistry};

use crate::{Report, Setup, percentile_ms, variant};

pub(crate) fn snapshots(setup: &Setup, rounds: usize) -> anyhow::Result<Report> {
    let plain = ModuleRegistry::new(Arc::clone(&setup.runtime), key(), None);
    let preinit = luge_engines::preinitializer(&LimitPolicy::default().default)?
        .ok_or_else(|| anyhow::anyhow!("no snapshots in this build"))?;
    let snapshotting =
        ModuleRegistry::new(Arc::clone(&setup.runtime), key(), None).with_preinitializer(preinit);
    let action = Arc::new(Action::command("preinit"));
    let base = wasm("preinit");
    let run = |module: &Arc<dyn luge_core::LoadedModule>| -> anyhow::Result<Duration> {
        let started = Instant::now();
        let outcome = module.run(Invocation::new(Arc::clone(&action), &b"{\"nth\": 5}"[..]));
        anyhow::ensure!(
            outcome.termination.is_success(),
            "{:?}",
            outcome.termination
        );
        Ok(started.elapsed())
    };
    let mut rows = Vec::new();
    let mut series = Vec::new();
    for (name, registry) in [
        ("without snapshot", &plain),
        ("with snapshot", &snapshotting),
    ] {
        let (mut uploads, mut colds, mut warms) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds.max(3) {
            // A fresh content hash each round: nothing shared or cached.
            let code = variant(&base, 9000 + round as u64);
            let started = Instant::now();
            let artifact = registry.compile_sealed(&code)?;
            uploads.push(started.elapsed());
            let started = Instant::now();
            let module = registry.load(&ModuleCode::Artifact(artifact))?;
            run(&module)?;
            colds.push(started.elapsed());
            for _ in 0..20 {
                warms.push(run(&module)?);
            }
        }
        let (upload, cold, warm) = (
            percentile_ms(&uploads, 50.0),
            percentile_ms(&colds, 50.0),
            percentile_ms(&warms, 50.0),
        );
        series.push((name.to_owned(), vec![(1.0, cold), (2.0, warm)]));
        rows.push(vec![
            name.to_owned(),
            format!("{upload:.1}"),
            format!("{cold:.2}"),
            format!("{warm:.3}"),
            format!("{:.3}", percentile_ms(&warms, 99.0)),
        ]);
    }
    Ok(Report {
        name: "snapshots",
        title: "A 50 ms start-up, with and without its snapshot".into(),
        columns: vec![
            "preinit",
            "upload (compile, + init and snapshot) ms",
            "cold start ms (artifact load + first request)",
            "warm request p50 ms",
            "warm p99 ms",
        ],
        rows,
        x_desc: "1 = cold start, 2 = warm request",
        y_desc: "ms (median)",
        series,
        notes: format!(
            "`preinit` (Rust SDK) builds a table of primes in `wizer.initialize`; without a snapshot every invocation builds it in its fresh sandbox. In-process: the registry compiles a fresh variant of the module (sealed artifact), loads it and runs it once (cold), then 20 more times (warm: a fresh sandbox each). Medians over {} rounds; a request here is `LoadedModule::run`, no HTTP.",
            rounds.max(3)
        ),
    })
}
