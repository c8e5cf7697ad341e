//! A function with a costly start-up, made once by a snapshot: it exports
//! `wizer.initialize`, which builds a table (about 50 ms of work: the
//! primes below 480,000 by trial division, deliberately
//! plain). Luge runs it once when the module is compiled and snapshots the
//! result; every invocation then starts from the snapshot with the table
//! already built. `{"nth": 10}` answers the 10th prime and whether this
//! invocation had to build the table itself (`built_here`: true only
//! without a snapshot), and `{"seen": n}` counts calls within this
//! sandbox (always 1: every invocation is a fresh sandbox).
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use luge_action::{Error, Value, json};

static TABLE: OnceLock<Vec<u32>> = OnceLock::new();
static IN_MAIN: AtomicBool = AtomicBool::new(false);
static BUILT_IN_MAIN: AtomicBool = AtomicBool::new(false);
static CALLS: AtomicU64 = AtomicU64::new(0);

fn build() -> Vec<u32> {
    BUILT_IN_MAIN.store(IN_MAIN.load(Ordering::Relaxed), Ordering::Relaxed);
    let limit = std::hint::black_box(480_000u32);
    (2..limit)
        .filter(|&n| (2..n).take_while(|d| d * d <= n).all(|d| n % d != 0))
        .collect()
}

/// Wizer's initialisation entry point: run once, at upload.
#[unsafe(export_name = "wizer.initialize")]
pub extern "C" fn initialize() {
    TABLE.get_or_init(build);
}

fn handler(params: Value) -> Result<Value, Error> {
    let calls = CALLS.fetch_add(1, Ordering::Relaxed) + 1;
    let table = TABLE.get_or_init(build);
    let nth = params["nth"].as_u64().unwrap_or(0) as usize;
    Ok(json!({
        "prime": table.get(nth),
        "primes": table.len(),
        "built_here": BUILT_IN_MAIN.load(Ordering::Relaxed),
        "seen": calls,
    }))
}

fn main() {
    IN_MAIN.store(true, Ordering::Relaxed);
    luge_action::run(handler)
}
