//! `scaling`: requests per second against server cores (issue 17's table).
//!
//! The machine's cores are split: the lower half (at least one) runs the
//! client, the rest the servers, each server process confined to its first
//! `n` cores for `n` = 1, 2, 4, ... by its CPU affinity (so Luge's
//! `--workers n` pin one worker per core there, and `wasmtime serve` sizes
//! its runtime to `n`). Three servers, one after another at each `n`:
//! Luge with worker front ends (its default on Wasmtime), Luge with
//! `--front-end threads`, and `wasmtime serve -S cli`. Luge serves c-ping on
//! a route and the `actions/http` hello component; `wasmtime serve` the
//! component. Per point: req/s at 64 keep-alive connections (the client's
//! threads, one per client core), server CPU per request, how busy the
//! client's cores were (near 100 % the client, not the server, sets the
//! rate), and the p50 of one connection.
//!
//! `--cores` and `--only` narrow a run to some core counts and rows (to
//! profile one point, say).

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use luge_benches::load::{self, LoadReport, Target};
use luge_benches::wasm;
use luge_benches::{allowed_cores, cpu_set, pin_to, proc};

use crate::http_proxy::{
    HELLO, LUGE_MARKER, Served, free_port, luge_serve, luge_site, process_cpu, start, wasmtime_cli,
};
use crate::{Report, Setup};

/// Connections of the throughput point by default (the wrk runs
/// used 64).
pub(crate) const CONNECTIONS: usize = 64;

/// The physical core `cpu` is a hardware thread of (package, core id), from
/// sysfs; a CPU whose topology cannot be read counts as a core of its own.
fn physical_core(cpu: usize) -> (i64, i64) {
    let read = |what: &str| {
        std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu{cpu}/topology/{what}"))
            .ok()
            .and_then(|s| s.trim().parse::<i64>().ok())
    };
    match (read("physical_package_id"), read("core_id")) {
        (Some(package), Some(core)) => (package, core),
        _ => (-1, -(cpu as i64) - 1),
    }
}

/// Splits `cores` between client and servers by physical core, so that no
/// server thread shares a core (its caches and execution units) with a
/// client thread: the client takes every hardware thread of the first
/// half of the physical cores, the servers the rest, ordered one thread
/// per physical core first (so `n` server cores are `n` physical cores
/// while there are enough), then their siblings.
fn split_by_physical_core(
    cores: &[usize],
    core_of: impl Fn(usize) -> (i64, i64),
) -> (Vec<usize>, Vec<usize>) {
    let mut groups: Vec<((i64, i64), Vec<usize>)> = Vec::new();
    for &cpu in cores {
        let key = core_of(cpu);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, threads)) => threads.push(cpu),
            None => groups.push((key, vec![cpu])),
        }
    }
    if groups.len() < 2 {
        // One physical core: split its threads instead.
        let (client, servers) = cores.split_at((cores.len() / 2).max(1));
        return (client.to_vec(), servers.to_vec());
    }
    let (client, servers) = groups.split_at(groups.len() / 2);
    let client = client.iter().flat_map(|(_, t)| t.iter().copied()).collect();
    let depth = servers.iter().map(|(_, t)| t.len()).max().unwrap_or(0);
    let servers = (0..depth)
        .flat_map(|i| servers.iter().filter_map(move |(_, t)| t.get(i).copied()))
        .collect();
    (client, servers)
}

/// Luge's count of jobs a worker took from another's queue so far (its
/// `luge_steals_total`), or `None` from a server without it.
fn steals(served: &Served) -> Option<u64> {
    let text = ureq::get(format!("http://{}/metrics", served.addr))
        .call()
        .ok()?
        .body_mut()
        .read_to_string()
        .ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("luge_steals_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}

/// How many physical cores `cpus` run on.
fn physical_cores(cpus: &[usize]) -> usize {
    let mut keys: Vec<_> = cpus.iter().map(|&c| physical_core(c)).collect();
    keys.sort_unstable();
    keys.dedup();
    keys.len()
}

/// Confines `command`'s process (and every thread it starts) to `cores`.
fn confine(command: &mut Command, cores: &[usize]) {
    let set = cpu_set(cores);
    // SAFETY: the closure runs in the child between fork and exec, where
    // only async-signal-safe calls are allowed; it makes one system call
    // (sched_setaffinity) on a set built before the fork, and allocates
    // nothing.
    unsafe {
        command.pre_exec(move || {
            rustix::thread::sched_setaffinity(None, &set).map_err(std::io::Error::from)
        });
    }
}

/// Warm-up before each measured window (fresh connections, slots and
/// caches), measured apart so that it counts in neither rate nor CPU.
const WARMUP: Duration = Duration::from_millis(500);

/// Which points of the table a run takes (all by default).
#[derive(Debug, Default)]
pub(crate) struct Only {
    /// Server core counts (powers of two up to the server cores); empty:
    /// every one.
    pub(crate) cores: Vec<usize>,
    /// Rows whose name holds this text ("workers, c-ping", "wasmtime").
    pub(crate) rows: Option<String>,
    /// Connections of the throughput point ([`CONNECTIONS`] by default).
    pub(crate) connections: usize,
    /// Leave out the one-connection p50 (so that a profile of the run
    /// holds the throughput point alone).
    pub(crate) no_p50: bool,
    /// Times the whole sweep runs, one after another: a machine whose
    /// points drift from minute to minute (the lent device's one-core
    /// point moved by a third between runs) is read by the rounds' median,
    /// each server measured in every round.
    pub(crate) rounds: usize,
}

/// `connections` spread over one client thread per core of `client`, each
/// pinned to its core; the reports merged.
fn drive(
    target: &Target,
    connections: usize,
    client: &[usize],
    warmup: Duration,
    window: Duration,
) -> LoadReport {
    let threads = client.len().min(connections).max(1);
    let parts: Vec<LoadReport> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let core = client[i % client.len()];
                let share = connections / threads + usize::from(i < connections % threads);
                scope.spawn(move || {
                    pin_to(core);
                    load::closed_loop(target, share, warmup, window)
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let mut merged = LoadReport {
        window,
        ..LoadReport::default()
    };
    for part in parts {
        merged.ok += part.ok;
        merged.errors += part.errors;
        merged.latencies_us.extend(part.latencies_us);
    }
    merged.latencies_us.sort_unstable();
    merged
}

pub(crate) fn scaling(setup: &Setup, window: Duration, only: &Only) -> anyhow::Result<Report> {
    let cores = allowed_cores();
    anyhow::ensure!(
        cores.len() >= 2,
        "scaling needs two cores at least (one for the client)"
    );
    let (client, servers) = split_by_physical_core(&cores, physical_core);
    let counts: Vec<usize> = std::iter::successors(Some(1usize), |n| Some(n * 2))
        .take_while(|&n| n <= servers.len())
        .filter(|n| only.cores.is_empty() || only.cores.contains(n))
        .collect();
    anyhow::ensure!(
        !counts.is_empty(),
        "--cores {:?}: none is a power of two of at most {} server cores",
        only.cores,
        servers.len()
    );

    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("ping.wasm"), wasm("c-ping"))?;
    let component = dir.path().join("handler.wasm");
    std::fs::write(&component, wasm("http-handler"))?;
    luge_site(
        dir.path(),
        "[[routes]]\npath = \"/ping\"\nmodule = \"ping.wasm\"\n\n[[routes]]\npath = \"/hello\"\nmodule = \"handler.wasm\"\n",
    )?;
    // Each server's state folder is its front end's, its core count's and
    // the round's.
    let luge = |n: usize, front_end: &str, on: &[usize], round: usize| -> anyhow::Result<Served> {
        let workers = n.to_string();
        let extra = ["--front-end", front_end, "--workers", &workers];
        let state = format!("state-{front_end}-{n}-{round}");
        let mut luge = luge_serve(setup, dir.path(), &state, &extra)?;
        confine(&mut luge, on);
        start(luge, LUGE_MARKER)
    };
    let wasmtime = |on: &[usize]| -> anyhow::Result<Served> {
        let mut wasmtime = Command::new(wasmtime_cli()?);
        wasmtime
            .args(["serve", "-S", "cli", "--addr"])
            .arg(format!("127.0.0.1:{}", free_port()?))
            .arg(&component);
        confine(&mut wasmtime, on);
        start(wasmtime, "Serving HTTP on ")
    };

    let mut sweep = Sweep {
        only,
        client: &client,
        servers: &servers,
        window,
        round: 0,
        rows: Vec::new(),
        series: Vec::new(),
    };
    let rows_of = |front_end: &str| {
        ["c-ping", "component"].map(|w| format!("luge --front-end {front_end}, {w}"))
    };
    for round in 0..only.rounds.max(1) {
        sweep.round = round;
        for &n in &counts {
            let on = &servers[..n];
            for front_end in ["workers", "threads"] {
                let [ping, component] = rows_of(front_end);
                if !sweep.wanted(&ping) && !sweep.wanted(&component) {
                    continue;
                }
                let served = luge(n, front_end, on, round)?;
                sweep.point(&ping, n, &served, "/ping", None);
                sweep.point(&component, n, &served, "/hello", Some(HELLO.len()));
            }
            if sweep.wanted(WASMTIME_ROW) {
                let served = wasmtime(on)?;
                sweep.point(WASMTIME_ROW, n, &served, "/hello", Some(HELLO.len()));
            }
        }
    }
    let Sweep {
        mut rows,
        mut series,
        ..
    } = sweep;
    if only.rounds > 1 {
        let medians = medians(&rows);
        // The plot draws the medians: one point per core count and server.
        series = Vec::new();
        for row in &medians {
            let (Ok(n), Ok(rate)) = (row[1].parse::<f64>(), row[4].parse::<f64>()) else {
                continue;
            };
            plotted(&mut series, &row[0], (n, rate));
        }
        rows.extend(medians);
    }
    anyhow::ensure!(
        !rows.is_empty(),
        "--only {:?} names no row (rows: luge --front-end workers|threads, c-ping|component; {WASMTIME_ROW})",
        only.rows
    );
    Ok(report(rows, series, (&client, &servers), only, window))
}

/// The `wasmtime serve` row's name.
const WASMTIME_ROW: &str = "wasmtime serve, component";

/// Adds `point` to the plotted series `name`.
fn plotted(series: &mut Vec<(String, Vec<(f64, f64)>)>, name: &str, point: (f64, f64)) {
    match series.iter_mut().find(|(s, _)| s == name) {
        Some((_, points)) => points.push(point),
        None => series.push((name.to_owned(), vec![point])),
    }
}

/// A sweep under way: what its points are measured with, and their rows
/// and plotted series so far.
struct Sweep<'a> {
    only: &'a Only,
    /// The client's cores.
    client: &'a [usize],
    /// The servers' cores; a server on `n` has the first `n`.
    servers: &'a [usize],
    window: Duration,
    /// The round under way, counted from 0.
    round: usize,
    rows: Vec<Vec<String>>,
    series: Vec<(String, Vec<(f64, f64)>)>,
}

impl Sweep<'_> {
    /// Whether `--only` keeps the row `name`.
    fn wanted(&self, name: &str) -> bool {
        self.only
            .rows
            .as_deref()
            .is_none_or(|text| name.contains(text))
    }

    /// Measures the row `name` at `n` cores against `served`'s `path`
    /// (answers `expect` bytes long, where given).
    fn point(&mut self, name: &str, n: usize, served: &Served, path: &str, expect: Option<usize>) {
        if !self.wanted(name) {
            return;
        }
        let target = Target {
            addr: served.addr,
            method: hyper::Method::GET,
            path: path.to_owned(),
            body: bytes::Bytes::new(),
            expect_len: expect,
            headers: Vec::new(),
        };
        let (connections, mut errors) = (self.only.connections.max(1), 0);
        drive(&target, connections, self.client, Duration::ZERO, WARMUP);
        // Luge's steal count (`wasmtime serve` has no such metric).
        let stolen_so_far = || name.starts_with("luge").then(|| steals(served)).flatten();
        let (cpu, ours, tlb, stolen) = (
            served.cpu(),
            process_cpu("self"),
            load::tlb_shootdowns(),
            stolen_so_far(),
        );
        let (threads, steal) = (
            proc::threads(served.child.id()),
            proc::steal(&self.servers[..n]),
        );
        let started = std::time::Instant::now();
        let loaded = drive(
            &target,
            connections,
            self.client,
            Duration::ZERO,
            self.window,
        );
        let (cpu, ours, tlb) = (
            served.cpu().saturating_sub(cpu),
            process_cpu("self").saturating_sub(ours),
            (tlb, load::tlb_shootdowns()),
        );
        let (threads, steal) = (
            proc::threads(served.child.id()).since(threads),
            proc::Steal::percent_since(proc::steal(&self.servers[..n]), steal),
        );
        // Requests whose job ran on another worker than the one that
        // received it (the worker front end); "-" for other servers.
        let stolen = match (stolen, stolen_so_far()) {
            (Some(before), Some(after)) => format!(
                "{:.1} %",
                after.saturating_sub(before) as f64 * 100.0 / loaded.ok.max(1) as f64
            ),
            _ => "-".to_owned(),
        };
        // The client's share of its cores while it drove (this process does
        // nothing else meanwhile).
        let client_busy = ours.as_secs_f64()
            / (started.elapsed().as_secs_f64() * self.client.len().min(connections) as f64);
        // The one-connection point: its p50, and the server's CPU per
        // request there (what a request costs when the server waits for
        // each: wake-ups, and a worker's spin between requests).
        let (p50, single_cpu) = if self.only.no_p50 {
            ("-".to_owned(), "-".to_owned())
        } else {
            drive(&target, 1, self.client, Duration::ZERO, WARMUP);
            let cpu = served.cpu();
            let single = drive(&target, 1, self.client, Duration::ZERO, self.window / 2);
            let cpu = served.cpu().saturating_sub(cpu);
            errors += single.errors;
            (
                single.percentile_us(50.0).to_string(),
                format!("{:.1}", load::cpu_us_per_request(cpu, single.ok)),
            )
        };
        let per_request_us = load::cpu_us_per_request(cpu, loaded.ok);
        self.rows.push(vec![
            name.to_owned(),
            n.to_string(),
            (self.round + 1).to_string(),
            physical_cores(&self.servers[..n]).to_string(),
            format!("{:.0}", loaded.throughput()),
            format!("{:.0}", loaded.throughput() / n as f64),
            format!("{per_request_us:.1}"),
            load::shootdowns_per_request(tlb.0, tlb.1, loaded.ok),
            format!("{:.0} %", client_busy * 100.0),
            stolen,
            p50,
            single_cpu,
            format!(
                "{:.2}",
                threads.involuntary as f64 / loaded.ok.max(1) as f64
            ),
            threads.ticker_percent(),
            steal,
            (loaded.errors + errors).to_string(),
        ]);
        plotted(&mut self.series, name, (n as f64, loaded.throughput()));
    }
}

/// The report of a sweep's `rows` and `series`, with the cores it ran on
/// (the client's, the servers').
fn report(
    rows: Vec<Vec<String>>,
    series: Vec<(String, Vec<(f64, f64)>)>,
    (client, servers): (&[usize], &[usize]),
    only: &Only,
    window: Duration,
) -> Report {
    Report {
        name: "scaling",
        title: "Requests per second against server cores".into(),
        columns: vec![
            "server, workload",
            "cores",
            "round",
            "physical cores",
            "req/s (throughput point)",
            "req/s per core",
            "server CPU µs/request",
            "TLB shootdowns/request",
            "client cores busy",
            "jobs stolen",
            "p50 µs (1 conn)",
            "server CPU µs/request (1 conn)",
            "involuntary switches/request",
            "epoch ticker % of CPU",
            "host steal % (server cores)",
            "errors",
        ],
        rows,
        x_desc: "server cores",
        y_desc: "requests per second (throughput point)",
        series,
        notes: format!(
            "Throughput point: {} keep-alive connections of a closed-loop client on cores {client:?} ({} threads, pinned); each server confined to its first n of cores {servers:?} by CPU affinity (client and servers on separate physical cores; the servers' cores one hardware thread per physical core first, then their siblings), Luge with `--workers n`. c-ping on a `[[routes]]` route; the component is `actions/http` (hello path) on a route of Luge and under `wasmtime serve -S cli`. {} ms per throughput point and half that for the one-connection point (its p50 and the server's CPU per request), each after 500 ms of warm-up outside the window; server CPU from /proc/PID/stat (10 ms ticks) over the window; client cores busy: this process's CPU over the window divided by its client threads' wall time; jobs stolen: Luge's `luge_steals_total` over the window per request (a job run by another worker than the one whose queue it was in); involuntary switches: the server's threads' `nonvoluntary_ctxt_switches` over the window per request (a thread preempted while it could still run: on one core, mostly the epoch ticker's wake-ups); epoch ticker: Luge's `luge-epoch` thread's share of the server's CPU (`schedstat`); host steal: the share of the server cores' clock ticks the host ran something else in (`/proc/stat`'s steal, which a virtual machine's CPU times may or may not leave out).",
            only.connections,
            client.len().min(only.connections),
            window.as_millis()
        ),
    }
}

/// The columns [`medians`] takes the median of, by index in a row, each
/// with the decimals it is written with: req/s, req/s per core, CPU µs
/// per request, the one-connection p50 and CPU per request, involuntary
/// switches per request, the ticker's share and the host's steal.
const MEDIAN_COLUMNS: [(usize, usize); 8] = [
    (4, 0),
    (5, 0),
    (6, 1),
    (10, 0),
    (11, 1),
    (12, 2),
    (13, 1),
    (14, 1),
];

/// One row per server, workload and core count of `rows` (each round's),
/// with the median over its rounds of each of [`MEDIAN_COLUMNS`] and
/// "median" as its round; the other measured columns are left out ("-").
fn medians(rows: &[Vec<String>]) -> Vec<Vec<String>> {
    let mut keys: Vec<(&str, &str)> = Vec::new();
    for row in rows {
        let key = (row[0].as_str(), row[1].as_str());
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys.into_iter()
        .map(|(name, cores)| {
            let of_key: Vec<&Vec<String>> = rows
                .iter()
                .filter(|row| row[0] == name && row[1] == cores)
                .collect();
            let mut median = vec!["-".to_owned(); of_key[0].len()];
            median[0] = name.to_owned();
            median[1] = cores.to_owned();
            median[2] = "median".to_owned();
            median[3] = of_key[0][3].clone();
            for (column, decimals) in MEDIAN_COLUMNS {
                let mut values: Vec<f64> = of_key
                    .iter()
                    .filter_map(|row| row[column].parse::<f64>().ok())
                    .collect();
                values.sort_by(f64::total_cmp);
                if let Some(&middle) = values.get(values.len() / 2) {
                    // An even count takes the mean of the middle two.
                    let value = if values.len().is_multiple_of(2) {
                        (values[values.len() / 2 - 1] + middle) / 2.0
                    } else {
                        middle
                    };
                    median[column] = format!("{value:.decimals$}");
                }
            }
            median
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{medians, split_by_physical_core};

    #[test]
    fn medians_are_per_server_and_core_count_over_the_rounds() {
        let row = |name: &str, cores: &str, round: &str, rate: &str, cpu: &str, p50: &str| {
            let mut row = vec!["x".to_owned(); 16];
            row[0] = name.to_owned();
            row[1] = cores.to_owned();
            row[2] = round.to_owned();
            row[4] = rate.to_owned();
            row[5] = rate.to_owned();
            row[6] = cpu.to_owned();
            row[10] = p50.to_owned();
            row
        };
        let rows = vec![
            row("a", "1", "1", "100", "10.0", "40"),
            row("a", "2", "1", "300", "8.0", "-"),
            row("a", "1", "2", "130", "7.5", "50"),
            row("a", "2", "2", "200", "9.0", "-"),
            row("a", "1", "3", "90", "12.0", "45"),
        ];
        let medians = medians(&rows);
        assert_eq!(medians.len(), 2);
        assert_eq!(medians[0][..3], ["a", "1", "median"]);
        assert_eq!(
            (medians[0][4].as_str(), medians[0][6].as_str()),
            ("100", "10.0")
        );
        assert_eq!(medians[0][10], "45");
        // Two rounds: the middle two's mean; no p50 measured: none.
        assert_eq!(medians[1][..3], ["a", "2", "median"]);
        assert_eq!(
            (medians[1][4].as_str(), medians[1][6].as_str()),
            ("250", "8.5")
        );
        assert_eq!(medians[1][10], "-");
        assert_eq!(medians[1][7], "-");
    }

    #[test]
    fn client_and_servers_share_no_physical_core() {
        // Siblings side by side: (0,1) (2,3) ...
        let cores: Vec<usize> = (0..16).collect();
        let (client, servers) = split_by_physical_core(&cores, |c| (0, (c / 2) as i64));
        assert_eq!(client, (0..8).collect::<Vec<_>>());
        assert_eq!(servers, [8, 10, 12, 14, 9, 11, 13, 15]);
        // Siblings half a machine apart (c, c+8), as bare metal numbers them.
        let (client, servers) = split_by_physical_core(&cores, |c| (0, (c % 8) as i64));
        assert_eq!(client, [0, 8, 1, 9, 2, 10, 3, 11]);
        assert_eq!(servers, [4, 5, 6, 7, 12, 13, 14, 15]);
        // No topology: every CPU a core; and one core of two threads.
        let (client, servers) = split_by_physical_core(&[0, 1], |c| (-1, -(c as i64) - 1));
        assert_eq!((client, servers), (vec![0], vec![1]));
        let (client, servers) = split_by_physical_core(&[0, 1], |_| (0, 0));
        assert_eq!((client, servers), (vec![0], vec![1]));
    }
}
