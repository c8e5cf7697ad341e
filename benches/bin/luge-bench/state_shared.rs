//! `state-shared`: 16 sandboxes at once each reading one 10 MB value,
//! through the local tier (one copy in the host, copied into each sandbox
//! when read) against each receiving it as its input (issue 16). The C
//! `measure` function only moves the bytes in; nothing is parsed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use luge_benches::{rss_bytes, wasm};
use luge_core::state::{State, Tier};
use luge_core::{Action, Invocation};
use luge_registry::ModuleCode;

use crate::{Report, Setup, percentile_ms};

const SIZE: usize = 10 << 20;
const SANDBOXES: usize = 16;

pub(crate) fn state_shared(setup: &Setup, rounds: usize) -> anyhow::Result<Report> {
    let dir = tempfile::tempdir()?;
    let store = Arc::new(luge_state::StateStore::open(&luge_state::StateConfig {
        dir: Some(dir.path().join("state")),
        redis_url: None,
        quotas: luge_state::Quotas {
            max_value_bytes: 16 << 20,
            ..luge_state::Quotas::default()
        },
    })?);
    let granted = vec!["blobs".to_owned()];
    let until = || Instant::now() + Duration::from_secs(60);
    store
        .session(None, "loader", &granted, until())
        .set("blobs/big", &vec![7u8; SIZE], Tier::Local)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let registry = setup.registry();
    let module = registry.load(&ModuleCode::Wasm(wasm("c-measure")))?;
    let input_action = Arc::new(Action::command("measure"));
    let mut state_action = Action::command("measure");
    state_action.capabilities.args = vec!["state".to_owned()];
    let state_action = Arc::new(state_action);
    let input = Arc::new(vec![7u8; SIZE]);
    let mut rows = Vec::new();
    for way in ["as input", "from the local tier"] {
        let (mut walls, mut each, mut peaks) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds.max(3) {
            let base = rss_bytes();
            let peak = AtomicU64::new(base);
            let done = AtomicBool::new(false);
            let started = Instant::now();
            std::thread::scope(|scope| {
                scope.spawn(|| {
                    while !done.load(Ordering::Relaxed) {
                        peak.fetch_max(rss_bytes(), Ordering::Relaxed);
                        std::thread::sleep(Duration::from_micros(500));
                    }
                });
                let runs: Vec<_> = (0..SANDBOXES)
                    .map(|_| {
                        scope.spawn(|| {
                            let t = Instant::now();
                            let invocation = if way == "as input" {
                                Invocation::new(Arc::clone(&input_action), input.as_slice())
                            } else {
                                Invocation {
                                    state: Some(Arc::new(store.session(
                                        None,
                                        "measure",
                                        &granted,
                                        until(),
                                    ))),
                                    ..Invocation::new(Arc::clone(&state_action), &b""[..])
                                }
                            };
                            let outcome = module.run(invocation);
                            let ok = outcome.termination.is_success()
                                && String::from_utf8_lossy(&outcome.stdout)
                                    .contains(&format!("\"bytes\":{SIZE}"));
                            (ok, t.elapsed())
                        })
                    })
                    .collect();
                for run in runs {
                    let (ok, t) = run.join().expect("sandbox thread");
                    assert!(ok, "{way}: a sandbox did not read the value");
                    each.push(t);
                }
                done.store(true, Ordering::Relaxed);
            });
            walls.push(started.elapsed());
            peaks.push(peak.load(Ordering::Relaxed).saturating_sub(base));
        }
        peaks.sort_unstable();
        let wall = percentile_ms(&walls, 50.0);
        let peak_mb = peaks[peaks.len() / 2] as f64 / f64::from(1 << 20);
        rows.push(vec![
            way.to_owned(),
            format!("{wall:.1}"),
            format!("{:.1}", percentile_ms(&each, 50.0)),
            format!("{peak_mb:.0}"),
        ]);
    }
    Ok(Report {
        name: "state-shared",
        title: "16 sandboxes reading one 10 MB value".into(),
        columns: vec![
            "the value arrives",
            "all 16 done, ms (median)",
            "one sandbox, ms (median)",
            "peak RSS growth, MB (median)",
        ],
        rows,
        x_desc: "",
        y_desc: "ms",
        series: Vec::new(),
        notes: format!(
            "The C `measure` function (reads stdin, or `state_get` of `blobs/big`, into a buffer and answers its length), {SANDBOXES} runs at once on {SANDBOXES} threads of this process (`LoadedModule::run`, no HTTP), {} rounds. As input, each invocation carries its own 10 MB copy (as a request body would); through the local tier the host keeps one copy and each sandbox copies it into its memory when it reads. Peak RSS growth: sampled every 0.5 ms during the round, over the process's RSS before it.",
            rounds.max(3),
        ),
    })
}
