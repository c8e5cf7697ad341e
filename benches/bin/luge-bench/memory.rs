//! `memory`: RSS per warm container and per running sandbox, and how many
//! fit in 1 GiB (WOW Table II, Faasm Table 3).

use std::time::Duration;

use luge_benches::{init_body, wasm};
use serde_json::json;

use crate::{Report, Setup, variant};

pub(crate) fn memory(setup: &Setup) -> anyhow::Result<Report> {
    let server = setup.server(&[]);
    let init = init_body(&wasm("sleep"));
    assert_eq!(server.post("/warm0/init", &init).0, 200);
    assert_eq!(
        server.post("/warm0/run", &json!({"value": {"ms": 1}})).0,
        200
    );
    let containers = 200;
    let before = settled_resident();
    for i in 1..=containers {
        assert_eq!(server.post(&format!("/warm{i}/init"), &init).0, 200);
    }
    let per_container = resident().saturating_sub(before) as f64 / containers as f64;

    // Containers that each bring their own module (a distinct content hash
    // of the same code, sealed ahead): what WOW's per-container figure
    // counts, the module's code and data included.
    let distinct = 50;
    let registry = setup.registry();
    let sleep = wasm("sleep");
    let artifacts = (0..distinct)
        .map(|i| registry.compile_sealed(&variant(&sleep, 1_000 + i)))
        .collect::<Result<Vec<_>, _>>()?;
    let before_distinct = settled_resident();
    for (i, artifact) in artifacts.iter().enumerate() {
        assert_eq!(
            server
                .post(&format!("/own{i}/init"), &init_body(artifact))
                .0,
            200
        );
    }
    let per_module_container = resident().saturating_sub(before_distinct) as f64 / distinct as f64;
    let running = 64;
    let idle = settled_resident();
    let peak = std::thread::scope(|s| {
        for i in 0..running {
            let server = &server;
            s.spawn(move || {
                server.post(
                    &format!("/warm{}/run", i + 1),
                    &json!({"value": {"ms": 800}}),
                )
            });
        }
        std::thread::sleep(Duration::from_millis(400));
        resident()
    });
    let per_sandbox = peak.saturating_sub(idle) as f64 / running as f64;
    let gib = (1u64 << 30) as f64;
    let rows = vec![
        vec![
            "warm container with its own module (distinct artifact)".into(),
            format!("{:.1}", per_module_container / 1024.0),
            format!("{:.0}", gib / per_module_container.max(1.0)),
        ],
        vec![
            "warm container (init of an already loaded module)".into(),
            format!("{:.1}", per_container / 1024.0),
            format!("{:.0}", gib / per_container.max(1.0)),
        ],
        vec![
            format!("running sandbox ({running} sleeping at once)"),
            format!("{:.1}", per_sandbox / 1024.0),
            format!("{:.0}", gib / per_sandbox.max(1.0)),
        ],
    ];
    Ok(Report {
        name: "memory",
        title: "Memory per container and per running sandbox (WOW Table II, Faasm Table 3)".into(),
        columns: vec!["what", "RSS KiB each", "how many fit in 1 GiB"],
        rows,
        x_desc: "",
        y_desc: "",
        series: Vec::new(),
        notes: format!(
            "`sleep.wasm` (Rust) on one in-process `luge serve`; RSS of the process from /proc/self/statm. {containers} extra containers of the loaded module; {distinct} containers each initialized from its own sealed artifact of the same code (a distinct content hash); then {running} of the first kind each running a 800 ms sleep at once (sampled after 400 ms). WOW Table II reports 2.9-6.3 MiB per container."
        ),
    })
}

/// [`resident`] once it holds still: read every 50 ms until two readings
/// in a row are within 64 KiB of each other (at most 2 s). A baseline is
/// taken so, because what an earlier experiment of the same process
/// started may still be giving memory back (a server's pools and threads
/// torn down, an allocator's delayed purges), and a baseline read in the
/// middle of that left a later reading below it: the distinct-artifact row
/// read 0 KiB once in `luge-bench all`.
fn settled_resident() -> u64 {
    const STILL: u64 = 64 << 10;
    let mut last = resident();
    for _ in 0..40 {
        std::thread::sleep(Duration::from_millis(50));
        let now = resident();
        if now.abs_diff(last) < STILL {
            return now;
        }
        last = now;
    }
    last
}

/// This process's resident memory, read once the allocator has given back
/// what it holds freed (`luge_executor::release_free_memory`): each
/// reading counts what is in use.
fn resident() -> u64 {
    luge_executor::release_free_memory();
    luge_benches::rss_bytes()
}
