//! Isolation between pooled sandboxes (issue 26), on every engine: a
//! sandbox never sees what the one before it in its slot left behind, in
//! memory, tables or globals, however that one ended: normally, grown, by
//! a trap, at its time limit, cancelled by its client, or stopped in the
//! middle of a 16 MiB `memory.fill`/`memory.copy`. The probe is
//! `actions/wat/isolation.wat`; two sandbox slots, so every reader reuses
//! a writer's.

use crate::common;

use std::io::Write;
use std::time::{Duration, Instant};

use common::{Luge, Site, connect, engine};

fn probe() -> Vec<u8> {
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/../actions/wat/isolation.wat");
    wat::parse_file(source).unwrap_or_else(|e| panic!("{source}: {e}"))
}

/// A host with the probe on `/probe` (300 ms to run), two sandbox slots.
fn host(extra: &[&str]) -> (Luge, Site) {
    let site = Site::new(&[], include_str!("sites/isolation-host.toml"));
    site.add_module("probe", &probe());
    let mut args = vec!["--max-sandboxes", "2", "--max-pending", "2"];
    args.extend_from_slice(extra);
    (site.start(&args), site)
}

/// Readers, more than the slots: each must find nothing.
fn every_reader_is_clean(luge: &Luge, after: &str) {
    for _ in 0..6 {
        let started = Instant::now();
        let (status, body) = loop {
            let (status, body) = luge.request("POST", "/probe", b"r");
            // A cancelled writer may hold its place for a moment.
            if status != 503 || started.elapsed() > Duration::from_secs(5) {
                break (status, body);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(
            (status, String::from_utf8_lossy(&body).as_ref()),
            (200, "clean\n"),
            "a sandbox saw what one that {after} left behind"
        );
    }
}

fn scenario(luge: &Luge) {
    every_reader_is_clean(luge, "never ran");
    for (how, ends, after) in [
        ("wn", true, "ended normally"),
        ("wg", true, "grew to 16 MiB"),
        ("wt", false, "trapped"),
        ("wl", false, "reached its time limit"),
        ("wf", false, "was stopped in a 16 MiB memory.fill"),
    ] {
        // Both slots written, then read.
        for _ in 0..2 {
            let (status, body) = luge.request("POST", "/probe", how.as_bytes());
            assert_eq!(
                status == 200,
                ends,
                "{how}: {status} {}",
                String::from_utf8_lossy(&body)
            );
        }
        every_reader_is_clean(luge, after);
    }
    // Cancelled: the client goes away while it spins.
    for _ in 0..2 {
        let mut stream = connect(luge);
        stream
            .write_all(b"POST /probe HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nwl")
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        drop(stream);
    }
    every_reader_is_clean(luge, "was cancelled");
}

#[test]
fn a_sandbox_never_sees_what_its_slot_held_before() {
    let (luge, _dir) = host(&[]);
    scenario(&luge);
    // Wasmtime releases ended sandboxes' memory in batches, keeping some
    // resident: without that budget too (every slot reset at once).
    if engine() == "wasmtime" {
        let (luge, _dir) = host(&["--resident-budget-mb", "0"]);
        scenario(&luge);
    }
}
