//! Shared set-up for Luge's benchmarks: example modules, an engine, and an
//! in-process `luge serve` on 127.0.0.1 with a blocking HTTP client.

use std::sync::Arc;

pub mod load;
pub mod proc;
pub mod stats;

use clap::Parser;
use luge_core::WasmRuntime;
use luge_registry::{ArtifactKey, ModuleRegistry};
use serde_json::{Value, json};

/// Key secret of every benchmark executor.
pub const BENCH_KEY: &str = "luge benchmark key 0123456789abcdef";

pub use luge_testkit::example_wasm as wasm;

/// The benchmark key.
pub fn key() -> ArtifactKey {
    ArtifactKey::from_secret(BENCH_KEY.as_bytes()).expect("valid key")
}

/// A Wasmtime runtime with the executor's default configuration.
pub fn runtime() -> Arc<dyn WasmRuntime> {
    runtime_named("wasmtime").expect("engine")
}

/// The runtime `luge serve --engine NAME` would run, built by the same
/// factory with the same defaults (`wasmtime`, and with this crate's
/// features `wasmer`, `wasmer-singlepass`, `wamr`).
pub fn runtime_named(name: &str) -> anyhow::Result<Arc<dyn WasmRuntime>> {
    let kind = luge_engines::EngineKind::from_name(name).ok_or_else(|| {
        anyhow::anyhow!(
            "engine {name:?} is not built into these benches (wasmtime; features wasmer, wamr)"
        )
    })?;
    Ok(luge_engines::build(
        kind,
        &luge_engines::EngineSettings::default(),
    )?)
}

/// Every engine compiled into these benches, by name.
pub fn built_in_runtimes() -> Vec<(&'static str, Arc<dyn WasmRuntime>)> {
    luge_engines::EngineKind::built_in()
        .into_iter()
        .map(|kind| {
            let runtime = luge_engines::build(kind, &luge_engines::EngineSettings::default())
                .unwrap_or_else(|e| panic!("{}: {e}", kind.name()));
            (kind.name(), runtime)
        })
        .collect()
}

/// A registry without a disk cache.
pub fn registry() -> ModuleRegistry {
    ModuleRegistry::new(runtime(), key(), None)
}

/// The cores this process may run on, in order (core 0 alone when the
/// affinity cannot be read).
pub fn allowed_cores() -> Vec<usize> {
    let Ok(allowed) = rustix::thread::sched_getaffinity(None) else {
        return vec![0];
    };
    (0..rustix::thread::CpuSet::MAX_CPU)
        .filter(|&c| allowed.is_set(c))
        .collect()
}

/// The CPU set of cores `cores`.
pub fn cpu_set(cores: &[usize]) -> rustix::thread::CpuSet {
    let mut set = rustix::thread::CpuSet::new();
    for &core in cores {
        set.set(core);
    }
    set
}

/// Confines the calling thread to `core` (left unconfined if that fails).
pub fn pin_to(core: usize) {
    let _ = rustix::thread::sched_setaffinity(None, &cpu_set(&[core]));
}

/// An OpenWhisk init body for `code` (entry `main`).
pub fn init_body(code: &[u8]) -> Value {
    luge_testkit::init_body(code, "main", json!({}))
}

/// An in-process `luge serve` and a keep-alive client to it.
pub struct Server {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    agent: ureq::Agent,
    /// The server's cache, key and state (none for [`Server::attach`]).
    _dir: Option<tempfile::TempDir>,
}

impl Server {
    /// Starts `luge serve` on an ephemeral loopback port in background threads.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts `luge serve` like [`Server::start`], with extra flags.
    pub fn start_with(args: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let key_file = dir.path().join("key");
        std::fs::write(&key_file, BENCH_KEY).expect("key file");
        std::fs::set_permissions(
            &key_file,
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .expect("key file mode");
        let state_dir = dir.path().join("state");
        let mut argv = vec![
            "luge",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--cache-dir",
            dir.path().to_str().expect("utf-8 path"),
            "--key-file",
            key_file.to_str().expect("utf-8 path"),
            "--state-dir",
            state_dir.to_str().expect("utf-8 path"),
        ];
        argv.extend_from_slice(args);
        let cli = luge_executor::cli::Cli::parse_from(argv);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .expect("tokio");
            runtime.block_on(async move {
                // The scheduler's workers enter this runtime: build inside it.
                let (addr, executor) = luge_executor::serve::build(cli).expect("executor");
                let listener = tokio::net::TcpListener::bind(addr).await.expect("bind");
                tx.send(listener.local_addr().expect("addr")).expect("send");
                luge_executor::serve::serve(listener, executor, std::future::pending()).await;
            });
        });
        let addr = rx.recv().expect("server started");
        let agent = luge_testkit::http_agent();
        Self {
            base: format!("http://{addr}"),
            agent,
            _dir: Some(dir),
        }
    }

    /// A keep-alive client to a server already listening at `addr` (one in
    /// a process of its own, whose memory is read apart from this one's).
    pub fn attach(addr: std::net::SocketAddr) -> Self {
        Self {
            base: format!("http://{addr}"),
            agent: luge_testkit::http_agent(),
            _dir: None,
        }
    }

    /// The server's address.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.base
            .trim_start_matches("http://")
            .parse()
            .expect("socket address")
    }

    /// POSTs JSON and returns the status and reply.
    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let response = self
            .agent
            .post(format!("{}{path}", self.base))
            .send(serde_json::to_vec(body).expect("json"))
            .expect("request");
        let (status, body) = luge_testkit::status_and_body(response);
        (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }
}

/// Resident set size of this process in bytes (Linux): statm counts pages,
/// whose size is the kernel's (4 KiB on x86, 16 KiB on a Pi 5's kernel).
pub fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * rustix::param::page_size() as u64
}
