//! `python`: a Python function (`actions/python/hello`, componentize-py,
//! a WASI 0.2 command component of about 18 MB) on Luge: the upload (a
//! compile), the cold start from its artifact (load + first request) and a
//! warm request, a fresh instance each time (issue 18).

use std::sync::Arc;
use std::time::Instant;

use luge_benches::{key, wasm};
use luge_core::{Action, Invocation};
use luge_registry::{ModuleCode, ModuleRegistry};

use crate::{Report, Setup, percentile_ms};

pub(crate) fn python(setup: &Setup, rounds: usize) -> anyhow::Result<Report> {
    let code = wasm("py-hello");
    let registry = ModuleRegistry::new(Arc::clone(&setup.runtime), key(), None);
    let started = Instant::now();
    let artifact = registry.compile_sealed(&code)?;
    let upload = started.elapsed();
    let action = Arc::new(Action::command("hello"));
    let input = &b"{\"name\": \"Luge\"}"[..];
    let (mut colds, mut loads, mut copies, mut warms) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds.max(3) {
        // A registry of its own each round: nothing shared, a real load.
        let fresh = ModuleRegistry::new(Arc::clone(&setup.runtime), key(), None);
        // The artifact as it arrives (an /init body decoded, a cache file
        // read): its bytes in memory of their own. Copying them is the
        // transport's cost, not the load's, so it is timed apart (it was
        // inside the cold start before issue 27: tens of thousands of
        // page faults for a Python interpreter).
        let started = Instant::now();
        let arrived = ModuleCode::Artifact(artifact.clone());
        copies.push(started.elapsed());
        let started = Instant::now();
        let module = fresh.load(&arrived)?;
        loads.push(started.elapsed());
        let outcome = module.run(Invocation::new(Arc::clone(&action), input));
        colds.push(started.elapsed());
        anyhow::ensure!(
            String::from_utf8_lossy(&outcome.stdout).contains("Hello, Luge!"),
            "{:?}",
            outcome.termination
        );
        for _ in 0..50 {
            let started = Instant::now();
            let outcome = module.run(Invocation::new(Arc::clone(&action), input));
            warms.push(started.elapsed());
            anyhow::ensure!(
                outcome.termination.is_success(),
                "{:?}",
                outcome.termination
            );
        }
    }
    let rows = vec![vec![
        format!("{:.1}", code.len() as f64 / 1e6),
        format!("{:.1}", artifact.len() as f64 / 1e6),
        format!("{:.0}", upload.as_secs_f64() * 1e3),
        format!("{:.1}", percentile_ms(&colds, 50.0)),
        format!("{:.1}", percentile_ms(&loads, 50.0)),
        format!("{:.1}", percentile_ms(&copies, 50.0)),
        format!("{:.2}", percentile_ms(&warms, 50.0)),
        format!("{:.2}", percentile_ms(&warms, 99.0)),
    ]];
    Ok(Report {
        name: "python",
        title: "A Python function (componentize-py) on Luge".into(),
        columns: vec![
            "component MB",
            "artifact MB",
            "upload (compile) ms",
            "cold start ms (artifact load + first request)",
            "of which the load ms",
            "copy of the arriving artifact ms (not counted)",
            "warm request p50 ms",
            "warm p99 ms",
        ],
        rows,
        x_desc: "",
        y_desc: "",
        series: Vec::new(),
        notes: format!(
            "`actions/python/hello/app.py` built by componentize-py 0.25.1 (which pre-initializes CPython with Wizer) for `wasi:cli/command`; in-process `LoadedModule::run` with JSON on stdin, no HTTP; {} rounds, each a fresh registry loading the sealed artifact, then 50 warm requests (a fresh instance each).",
            rounds.max(3)
        ),
    })
}
