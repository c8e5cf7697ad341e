//! `state-ops`: what one state operation costs from inside a sandbox, on
//! the local tier and on Redis, for 100 B and 1 MiB values, against a plain
//! Redis client's round trip to the same server (issue 16).
//!
//! The engine runs `statebench` (an example that loops over one operation)
//! in-process with a [`luge_state::Session`], `n` times and 0 times; the
//! difference over `n` is one operation. Needs `redis-server` (started
//! here on a free loopback port).

use std::sync::Arc;
use std::time::{Duration, Instant};

use luge_benches::wasm;
use luge_core::{Action, Invocation};
use luge_registry::ModuleCode;
use luge_testkit::redis::RedisServer;
use serde_json::json;

use crate::{Report, Setup};

/// A `redis-server` on a free loopback port and its port.
pub(crate) fn redis() -> anyhow::Result<(RedisServer, u16)> {
    let server = RedisServer::start()?;
    let port = server.port;
    Ok((server, port))
}

pub(crate) fn state_ops(setup: &Setup) -> anyhow::Result<Report> {
    let (_redis, port) = redis()?;
    let url = format!("redis://127.0.0.1:{port}/");
    let dir = tempfile::tempdir()?;
    let store = Arc::new(luge_state::StateStore::open(&luge_state::StateConfig {
        dir: Some(dir.path().join("state")),
        redis_url: Some(url.clone()),
        quotas: luge_state::Quotas::default(),
    })?);
    let registry = setup.registry();
    let module = registry.load(&ModuleCode::Wasm(wasm("statebench")))?;
    let action = Arc::new(Action::command("statebench"));
    // Median of 5 runs of the loop, in µs per operation.
    let per_op = |op: &str, size: usize, global: bool, n: u64| -> anyhow::Result<f64> {
        let run = |n: u64| -> anyhow::Result<Duration> {
            let input = json!({ "op": op, "size": size, "n": n, "global": global });
            let invocation = Invocation {
                state: Some(Arc::new(store.session(
                    None,
                    "bench",
                    &[],
                    Instant::now() + Duration::from_secs(60),
                ))),
                ..Invocation::new(Arc::clone(&action), input.to_string())
            };
            let started = Instant::now();
            let outcome = module.run(invocation);
            anyhow::ensure!(
                outcome.termination.is_success(),
                "{op} {size} {global}: {:?} {}",
                outcome.termination,
                String::from_utf8_lossy(&outcome.stdout)
            );
            Ok(started.elapsed())
        };
        let mut samples: Vec<f64> = (0..5)
            .map(|_| Ok((run(n)?.as_secs_f64() - run(0)?.as_secs_f64()) * 1e6 / n as f64))
            .collect::<anyhow::Result<_>>()?;
        samples.sort_by(f64::total_cmp);
        Ok(samples[2])
    };
    // The same operations from a plain client, the reference for Redis.
    let client = redis::Client::open(url.as_str())?;
    let mut connection = client.get_connection()?;
    let mut plain = |op: &str, size: usize, n: u64| -> anyhow::Result<f64> {
        let value = vec![b'a'; size];
        redis::cmd("SET")
            .arg("plain")
            .arg(&value)
            .query::<()>(&mut connection)?;
        let started = Instant::now();
        for _ in 0..n {
            match op {
                "get" => {
                    redis::cmd("GET")
                        .arg("plain")
                        .query::<Vec<u8>>(&mut connection)?;
                }
                _ => redis::cmd("SET")
                    .arg("plain")
                    .arg(&value)
                    .query::<()>(&mut connection)?,
            }
        }
        Ok(started.elapsed().as_secs_f64() * 1e6 / n as f64)
    };
    let mut rows = Vec::new();
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for op in ["get", "set", "cas"] {
        let mut local_points = Vec::new();
        let mut global_points = Vec::new();
        for size in [100usize, 1 << 20] {
            let n = if size == 100 { 2000 } else { 40 };
            let local = per_op(op, size, false, n)?;
            let global = per_op(op, size, true, n)?;
            let reference = if op == "cas" {
                None
            } else {
                Some(plain(op, size, n)?)
            };
            local_points.push((size as f64, local));
            global_points.push((size as f64, global));
            rows.push(vec![
                op.to_owned(),
                if size == 100 {
                    "100 B".into()
                } else {
                    "1 MiB".into()
                },
                format!("{local:.2}"),
                format!("{global:.2}"),
                reference.map_or("-".into(), |r| format!("{r:.2}")),
                reference.map_or("-".into(), |r| format!("{:.2}x", global / r)),
            ]);
        }
        series.push((format!("{op}, local"), local_points));
        series.push((format!("{op}, Redis"), global_points));
    }
    Ok(Report {
        name: "state-ops",
        title: "State operations from inside a sandbox, µs each".into(),
        columns: vec![
            "operation",
            "value",
            "local tier µs",
            "Redis µs",
            "plain Redis client µs",
            "Redis through Luge / plain",
        ],
        rows,
        x_desc: "value size, bytes",
        y_desc: "µs per operation",
        series,
        notes: "`statebench` (Rust SDK) loops over one operation on a private key, run in-process by the engine with a state session (local tier persisted with fjall under a temp dir; global tier a `redis-server` on 127.0.0.1 started by the run); per operation = (time with n - time with 0) / n, median of 5; n = 2000 for 100 B, 40 for 1 MiB. The plain client is the `redis` crate's sync connection from the benchmark process to the same server, GET or SET of the same value.".into(),
    })
}
