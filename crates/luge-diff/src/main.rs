//! `luge-diff`: runs generated modules on every engine and reports where
//! they disagree.
//!
//! ```text
//! luge-diff --cases 5000                 # a fresh seed, printed
//! luge-diff --seed 7 --only 1234 --keep d # one case again, module kept
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result, bail};
use clap::Parser;
use luge_diff::{Class, Engines, Run, Source, Verdict};
use luge_engines::EngineKind;

#[derive(Parser)]
#[command(about = "Differential execution of generated modules across Luge's engines")]
struct Cli {
    /// Cases to run.
    #[arg(long, default_value_t = 1000)]
    cases: u64,
    /// The seed (default: from the clock, printed so the run can be
    /// repeated).
    #[arg(long)]
    seed: Option<u64>,
    /// Run only this case of the seed.
    #[arg(long)]
    only: Option<u64>,
    /// Run this module (.wasm or .wat, empty stdin) instead of generated
    /// cases; `--timeout-ms` sets its time limit.
    #[arg(long, conflicts_with = "only")]
    module: Option<PathBuf>,
    /// The time limit of `--module`, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    timeout_ms: u64,
    /// Engines to compare (default: all compiled in).
    #[arg(long, value_delimiter = ',')]
    engines: Vec<EngineKind>,
    /// Keep each disagreeing module (and with --only, the case's module)
    /// in this directory, as .wasm and .wat.
    #[arg(long)]
    keep: Option<PathBuf>,
    /// Worker threads (default: one per core).
    #[arg(long)]
    workers: Option<usize>,
    /// Print each case as it starts and ends.
    #[arg(long)]
    verbose: bool,
}

#[derive(Default)]
struct Tally {
    cases: u64,
    skipped: u64,
    classes: BTreeMap<String, u64>,
    known: BTreeMap<&'static str, u64>,
    disagreements: Vec<(u64, Vec<Run>)>,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let seed = cli.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    let kinds = if cli.engines.is_empty() {
        EngineKind::built_in()
    } else {
        cli.engines.clone()
    };
    let engines = Engines::new(&kinds)?;
    if let Some(path) = &cli.module {
        return run_module(&cli, &engines, path);
    }
    if let Some(dir) = &cli.keep {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let (first, count) = match cli.only {
        Some(n) => (n, 1),
        None => (0, cli.cases),
    };
    println!(
        "luge-diff: seed {seed}, {count} cases, engines {}",
        kinds.iter().map(|k| k.name()).collect::<Vec<_>>().join(",")
    );
    let next = AtomicU64::new(first);
    let tally = Mutex::new(Tally::default());
    let workers = cli.workers.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(usize::from)
            .unwrap_or(1)
    });
    let started = std::time::Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..workers.max(1) {
            scope.spawn(|| {
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    if index >= first + count {
                        break;
                    }
                    run_case(&cli, &engines, seed, index, &tally);
                }
            });
        }
    });
    let t = tally.into_inner().unwrap_or_else(|e| e.into_inner());
    report(&t, seed, started.elapsed())
}

/// Runs the one module at `path` (`--module`) on every engine.
fn run_module(cli: &Cli, engines: &Engines, path: &std::path::Path) -> Result<()> {
    let wasm = wat::parse_file(path).with_context(|| format!("reading {}", path.display()))?;
    let case = luge_diff::Case {
        source: Source::Structured,
        index: 0,
        wasm,
        stdin: Vec::new(),
        timeout: std::time::Duration::from_millis(cli.timeout_ms),
    };
    let runs = luge_diff::run_case(engines, &case);
    print_runs(&runs);
    if matches!(luge_diff::judge(&runs), Verdict::Disagree) {
        bail!("the engines disagree");
    }
    Ok(())
}

/// Each engine's run of a case: how it ended, its output's size, what it
/// said.
fn print_runs(runs: &[Run]) {
    for r in runs {
        println!(
            "  {:<18} {:<28} stdout {} bytes {}",
            r.engine.name(),
            format!("{:?}", r.class),
            r.stdout.len(),
            r.detail
        );
    }
}

/// Generates case `index` of `seed`, runs it on every engine, keeps it
/// where asked, and counts it in `tally`.
fn run_case(cli: &Cli, engines: &Engines, seed: u64, index: u64, tally: &Mutex<Tally>) {
    let Some(case) = luge_diff::case(seed, index) else {
        lock(tally).skipped += 1;
        return;
    };
    if cli.verbose {
        eprintln!("case {index} ({:?}) starts", case.source);
    }
    let runs = luge_diff::run_case(engines, &case);
    if cli.verbose {
        let classes: Vec<_> = runs.iter().map(|r| &r.class).collect();
        eprintln!("case {index} ends: {classes:?}");
    }
    let verdict = luge_diff::judge(&runs);
    let keep = cli.only.is_some() || matches!(verdict, Verdict::Disagree);
    if let (Some(dir), true) = (&cli.keep, keep) {
        let name = format!("{seed}-{index}.wasm");
        if let Err(e) = std::fs::write(dir.join(&name), &case.wasm) {
            eprintln!("luge-diff: keeping {name}: {e}");
        }
        if let Ok(text) = wasmprinter::print_bytes(&case.wasm) {
            let name = format!("{seed}-{index}.wat");
            if let Err(e) = std::fs::write(dir.join(&name), text) {
                eprintln!("luge-diff: keeping {name}: {e}");
            }
        }
    }
    let mut t = lock(tally);
    t.cases += 1;
    let source = match case.source {
        Source::Structured => "structured",
        Source::Smith => "smith",
    };
    *t.classes
        .entry(format!("{source} {:?}", runs[0].class))
        .or_default() += 1;
    match verdict {
        Verdict::Agree => {}
        Verdict::Known(d) => *t.known.entry(d.name).or_default() += 1,
        Verdict::Disagree => t.disagreements.push((index, runs)),
    }
}

/// Prints what the cases came to; an error where any disagreed.
fn report(t: &Tally, seed: u64, took: std::time::Duration) -> Result<()> {
    println!(
        "{} cases in {:.1} s ({} skipped: wasm-smith made nothing)",
        t.cases,
        took.as_secs_f64(),
        t.skipped
    );
    println!("outcomes (as the first engine ended):");
    for (class, n) in &t.classes {
        println!("  {n:>6}  {class}");
    }
    for (name, n) in &t.known {
        println!("known difference {name}: {n} cases");
    }
    for (index, runs) in &t.disagreements {
        println!("DISAGREE case {index} (luge-diff --seed {seed} --only {index}):");
        print_runs(runs);
        print_prefix_difference(runs);
    }
    if !t.disagreements.is_empty() {
        bail!("{} of {} cases disagree", t.disagreements.len(), t.cases);
    }
    println!("every case agreed or differed as documented");
    Ok(())
}

/// Where the stdouts first part, when the classes agree.
fn print_prefix_difference(runs: &[Run]) {
    let Some(first) = runs.first() else { return };
    for r in &runs[1..] {
        if r.stdout != first.stdout && r.class == first.class && r.class != Class::Refused {
            let at = first
                .stdout
                .iter()
                .zip(&r.stdout)
                .position(|(a, b)| a != b)
                .unwrap_or(first.stdout.len().min(r.stdout.len()));
            println!(
                "  stdout of {} and {} part at byte {at} (word {})",
                first.engine.name(),
                r.engine.name(),
                at / 8
            );
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
