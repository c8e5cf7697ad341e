//! The Luge executor: the library behind the `luge` binary.
//!
//! - `luge proxy`: one OpenWhisk action container per process (`/init`,
//!   `/run`), a drop-in for an action runtime image.
//! - `luge serve`: many containers per process (`/{id}/init|run|destroy`,
//!   `/{id}/logs`), for OpenWhisk's WasmContainerFactory; and a standalone
//!   function host: routes from `--config luge.toml` or `--sledge-spec`,
//!   uploads under `/v1/functions` ([`standalone`]).
//! - `luge run`: one WASI command once, on this terminal ([`run`]): to try
//!   a function, and for the WASI conformance suite.
//!
//! This binary is thin layers; each imports only the layers below it
//! (checked by a test of this crate), from the top:
//!
//! - `serve`: listeners, and where connections are served ([`frontend`]:
//!   on the scheduler's workers, or on threads beside them), until
//!   shutdown; `assemble`: the command line ([`cli`], [`options`]),
//!   `luge.toml` and the operator's files become an `App`.
//! - `routes`: a request to its protocol's handler: a tenant's routes,
//!   function routes and chains, then the executor's own API (`router`,
//!   with `matchit`).
//! - The protocols, one handler type each behind one trait (`protocol`):
//!   `openwhisk` (containers' `/init` and `/run`, and their management),
//!   [`standalone`] (function routes, chains, the management API),
//!   `handler` (wasi:http components); `calls` (between functions, behind
//!   luge-core's `Calls`).
//! - `app`: what the process hosts, admission and the one execution
//!   pipeline every protocol ends in; [`admission`] (places shared fairly
//!   between tenants, bounded per call tree), [`dispatch`] (handing
//!   invocations to the scheduler), [`metrics`], [`http`] plumbing, `auth`.

pub mod admission;
mod app;
mod arrivals;
mod assemble;
mod auth;
mod calls;
pub mod cli;
pub mod config_keys;
pub mod dispatch;
pub mod frontend;
mod handler;
pub mod http;
mod invocation;
pub mod metrics;
mod openwhisk;
pub mod options;
mod protocol;
mod route_headers;
mod router;
mod routes;
pub mod run;
mod runtime_config;
pub mod serve;
pub mod standalone;
mod telemetry;
mod triggers;

use tracing_subscriber::EnvFilter;

/// The global allocator of the executor's binaries (`luge`, and
/// `luge-bench`, which serves as `luge` does): mimalloc with the
/// `mimalloc` feature, a default; the system's malloc without it.
///
/// Why mimalloc: a component request makes about 100 heap allocations and
/// as many frees, nine of them past glibc's thread cache (the instances'
/// contexts, the store, hyper's buffers), and glibc's `malloc` and `free`
/// were 10-11 % of the server's CPU at 64 connections. With mimalloc's
/// per-thread free lists a request costs about 3 µs less CPU (8 %).
/// What it costs: about 7 MB more resident per process, and a little more
/// per running sandbox (docs/BENCHMARKS-ARCHIVE.md, "mimalloc as the binaries'
/// allocator"). What a compile frees stays with the threads it ran on
/// until they allocate again (about 30 MB for a Spin app's component):
/// the servers' registry returns it after each compile
/// ([`release_compile_memory`]; docs/BENCHMARKS-ARCHIVE.md, "Luge on Kubernetes",
/// measured again 2026-11-30). A binary declares it so:
///
/// ```ignore
/// #[global_allocator]
/// static ALLOCATOR: luge_executor::Allocator = luge_executor::Allocator {};
/// ```
#[cfg(feature = "mimalloc")]
pub type Allocator = mimalloc::MiMalloc;
/// The global allocator of the executor's binaries: the system's malloc
/// (a build without the `mimalloc` feature).
#[cfg(not(feature = "mimalloc"))]
pub type Allocator = std::alloc::System;

/// Gives what [`Allocator`] holds freed back to the system now, so that
/// resident memory read right after counts what is in use: how
/// `luge-bench memory` reads memory per container. mimalloc returns freed
/// pages only after a delay, and only as the thread that freed them
/// allocates again, so a reading could miss what was allocated into pages
/// freed earlier (it read 0 KiB per container now and then). The system's
/// malloc is left as it is: its figures were always read so.
pub fn release_free_memory() {
    #[cfg(feature = "mimalloc")]
    // SAFETY: `mi_collect` only returns memory that mimalloc holds unused
    // to the system; it may be called at any time, from any thread, and
    // touches no memory the program uses.
    unsafe {
        libmimalloc_sys::mi_collect(true);
    }
}

/// Gives back what a compile freed, whichever allocator the binary uses:
/// [`release_free_memory`] on every thread a compile may have run on (the
/// calling one and rayon's pool, where Wasmtime compiles a module's
/// functions in parallel, and whose threads allocate nothing between
/// compiles), and glibc's `malloc_trim` for a binary that allocates with
/// glibc's malloc (containerd-shim-luge: it declares no global
/// allocator), which otherwise keeps freed memory at the top of its heaps
/// and in its threads' arenas. Starts rayon's pool if no compile has yet.
/// Run by the servers' registry after each compile
/// (`ModuleRegistry::with_after_compile`).
pub fn release_compile_memory() {
    release_free_memory();
    #[cfg(feature = "mimalloc")]
    rayon::broadcast(|_| release_free_memory());
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` only returns free memory of glibc's heaps to
    // the system, under their locks; it may be called from any thread at
    // any time and touches no memory in use.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Runs the executor for parsed command-line arguments: `luge run` until
/// its module ends (its exit status returned), the servers until a
/// shutdown signal (0).
/// Sends Luge's logs to stderr, at `LUGE_LOG`'s levels (an `EnvFilter`),
/// else at `default_level`; colored on a terminal only. With the `log`
/// crate's records bridged in; a process that embeds Luge and set its own
/// `log` logger first (containerd-shim-luge) keeps it, and Luge's own
/// records still go to stderr.
pub fn init_logging(default_level: &str) {
    let subscriber = || {
        tracing_subscriber::fmt()
            .with_env_filter(
                EnvFilter::try_from_env("LUGE_LOG")
                    .unwrap_or_else(|_| EnvFilter::new(default_level)),
            )
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
    };
    if subscriber().try_init().is_err() {
        let _ = tracing::subscriber::set_global_default(subscriber().finish());
    }
}

pub fn main_with(cli: cli::Cli) -> anyhow::Result<u8> {
    // Logs go to stderr. In proxy mode the process's streams are the
    // action's logs as OpenWhisk collects them, so only warnings go there.
    let default_level = match cli.command {
        cli::Command::Proxy { .. } | cli::Command::Run(_) => "warn",
        cli::Command::Serve { .. } => "info",
        // As `spin up`: the routes on stdout, only what went wrong on
        // stderr.
        cli::Command::Up(_) | cli::Command::Completions { .. } => "warn",
    };
    init_logging(default_level);
    match cli.command {
        cli::Command::Run(args) => return run::run(args),
        cli::Command::Completions { shell } => {
            use clap::CommandFactory;
            let mut command = cli::Cli::command();
            clap_complete::generate(shell, &mut command, "luge", &mut std::io::stdout());
            return Ok(0);
        }
        _ => {}
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("luge-http")
        .build()?;
    runtime.block_on(serve::run(cli))?;
    Ok(0)
}

#[cfg(test)]
mod layers {
    use std::collections::{BTreeMap, BTreeSet};

    /// Each module of this crate and the modules it names (`crate::m`),
    /// outside its tests.
    fn imports() -> BTreeMap<String, BTreeSet<String>> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut modules = BTreeMap::new();
        for entry in std::fs::read_dir(&dir).expect("src") {
            let path = entry.expect("entry").path();
            let Some(name) = path.file_stem().and_then(|n| n.to_str()) else {
                continue;
            };
            if path.extension().is_some_and(|e| e == "rs") && name != "lib" && name != "main" {
                let text = std::fs::read_to_string(&path).expect("source");
                let code = text.split("#[cfg(test)]").next().unwrap_or_default();
                let named: BTreeSet<String> = code
                    .split("crate::")
                    .skip(1)
                    .map(|rest| {
                        rest.chars()
                            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                            .collect::<String>()
                    })
                    .filter(|m| m != name && !m.is_empty())
                    .collect();
                modules.insert(name.to_owned(), named);
            }
        }
        modules
    }

    #[test]
    fn layers_run_in_their_documented_order() {
        let modules = imports();
        assert!(modules.contains_key("app") && modules.contains_key("routes"));
        // Circles in every crate: luge-testkit's tests/layers.rs. Here,
        // the order of the layers this crate's docs name.
        let below = |upper: &str, lower: &str| !modules[lower].contains(upper);
        for (upper, lower) in [
            ("routes", "app"),
            ("serve", "routes"),
            ("standalone", "app"),
            ("routes", "protocol"),
            ("openwhisk", "protocol"),
            ("standalone", "protocol"),
            ("handler", "protocol"),
            ("protocol", "app"),
            ("app", "admission"),
            ("calls", "admission"),
            ("metrics", "admission"),
            ("triggers", "app"),
            ("standalone", "invocation"),
            ("handler", "invocation"),
            ("calls", "invocation"),
            ("triggers", "invocation"),
            ("invocation", "app"),
            ("app", "telemetry"),
            ("handler", "telemetry"),
        ] {
            assert!(below(upper, lower), "{lower} imports {upper}");
        }
    }
}
