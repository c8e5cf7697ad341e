//! `luge run`: one WASI command, once, on this terminal — the module's
//! stdout and stderr are this process's, its exit status is this
//! process's status. For trying a function before deploying it and for
//! running WASI conformance suites (`scripts/wasi-testsuite.sh`).
//!
//! The action is made where every front end makes one (luge-registry's
//! `admit`: grants, what the engine cannot enforce refused, limits within
//! OpenWhisk's defaults and maxima, code detection, the entry point), and
//! run on the chosen engine straight from the registry: there is nothing
//! to schedule. The module sees exactly
//! what the flags give it: `argv` (the module's file name, then the
//! arguments), the `--env` variables and no others, the `--dir` grants.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::Args;
use luge_core::capabilities::{Annotations, DirRequest};
use luge_core::limits::{LimitPolicy, RequestedLimits};
use luge_core::{DirMode, Invocation, Termination};
use luge_engines::{EngineKind, EngineSettings};
use luge_registry::admit::{self, Bounds, Wanted};
use luge_registry::{ArtifactKey, ModuleRegistry};

/// Status for an ending that is not an exit (a trap, a limit): 128 +
/// SIGABRT, as `wasmtime run` and a C program that aborts.
pub const TRAP_STATUS: u8 = 134;

/// Most stdin bytes a run reads (the default request body cap of
/// `luge serve`): the module gets them all at once.
const MAX_STDIN_BYTES: u64 = 64 << 20;

/// `luge run`'s arguments.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Engine to run on.
    #[arg(long, value_enum, default_value = "wasmtime")]
    pub engine: EngineKind,
    /// `NAME=VALUE`: a variable of the module's environment (repeat).
    #[arg(long = "env", value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// `HOST[::GUEST]`: grant a host directory, read-write, at GUEST
    /// (default: the same path) (repeat).
    #[arg(long = "dir", value_name = "HOST[::GUEST]")]
    pub dirs: Vec<String>,
    /// `HOST[::GUEST]`: grant a host directory read-only (repeat).
    #[arg(long = "dir-ro", value_name = "HOST[::GUEST]")]
    pub dirs_read_only: Vec<String>,
    /// An `allowed_outbound_hosts` entry (Spin's grammar:
    /// `tcp://127.0.0.1:5432`, `https://*.example.com`, `*://*:*`), what
    /// the module may reach: HTTP requests, `wasi:sockets` (repeat)
    /// [default: nothing].
    #[arg(long = "allow-outbound", value_name = "SCHEME://HOST[:PORT]")]
    pub allow_outbound: Vec<String>,
    /// Give the module the host's network as this process has it, as
    /// `wasmtime run -S inherit-network`: `wasi:sockets` bind, listen and
    /// connect anywhere, loopback included, unchecked (for modules of your
    /// own: a conformance suite, a server tried locally; Wasmtime engine
    /// only). `luge serve` has no such thing.
    #[arg(long)]
    pub inherit_network: bool,
    /// Time limit of the run, ms [default: 60000, at most 300000:
    /// OpenWhisk's].
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    /// Memory limit of the run, MiB [default: 256, at most 512: OpenWhisk's].
    #[arg(long)]
    pub memory_mb: Option<u64>,
    /// The export to call [default: `_start`, a WASI command].
    #[arg(long)]
    pub invoke: Option<String>,
    /// The module's stdin: FILE, read whole before it starts as a request
    /// body is, or `-`, this process's stdin (on Wasmtime read as the
    /// module reads it, as `wasmtime run`'s; read whole first on the other
    /// engines) [default: empty; never waited on].
    #[arg(long, value_name = "FILE")]
    pub stdin: Option<PathBuf>,
    /// The module (`.wasm`, or WebAssembly text).
    pub module: PathBuf,
    /// Its arguments (`argv[1..]`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

/// Largest module `luge run` reads (the default of `/init`'s code cap).
const MAX_CODE_BYTES: usize = 64 << 20;

/// A `HOST[::GUEST]` grant in `mode`, as the directory request every
/// front end makes: the host path absolute and taken beneath `/` (the fs
/// root of a run is the operator's whole filesystem).
fn dir_request(spec: &str, mode: DirMode) -> anyhow::Result<DirRequest> {
    let (host, guest) = spec.split_once("::").unwrap_or((spec, spec));
    if guest.is_empty() {
        bail!("--dir {spec}: the guest path is empty");
    }
    let host = std::fs::canonicalize(host).with_context(|| format!("--dir {spec}"))?;
    Ok(DirRequest {
        host: host.to_string_lossy().trim_start_matches('/').to_owned(),
        guest: guest.to_owned(),
        mode,
    })
}

/// Runs the module as `args` say; the status the process should exit with.
pub fn run(args: RunArgs) -> anyhow::Result<u8> {
    if args.inherit_network && args.engine != EngineKind::Wasmtime {
        bail!(
            "--inherit-network: the {} engine has no wasi:sockets",
            args.engine.name()
        );
    }
    let code = std::fs::read(&args.module)
        .with_context(|| format!("cannot read {}", args.module.display()))?;
    let mut env = Vec::with_capacity(args.env.len());
    for pair in &args.env {
        let Some((name, value)) = pair.split_once('=') else {
            bail!("--env {pair}: expected NAME=VALUE");
        };
        env.push((name.to_owned(), value.to_owned()));
    }
    let mut dirs = Vec::with_capacity(args.dirs.len() + args.dirs_read_only.len());
    for spec in &args.dirs {
        dirs.push(dir_request(spec, DirMode::ReadWrite)?);
    }
    for spec in &args.dirs_read_only {
        dirs.push(dir_request(spec, DirMode::ReadOnly)?);
    }
    let annotations = Annotations {
        dirs,
        args: args.args,
        outbound_http: args.allow_outbound.into_iter().map(Into::into).collect(),
        limits: RequestedLimits {
            memory_mb: args.memory_mb,
            timeout_ms: args.timeout_ms,
            fuel: None,
        },
        ..Annotations::default()
    };
    // OpenWhisk's defaults and maxima, as `luge serve` has them.
    let policy = Bounds {
        fs_root: Some(PathBuf::from("/")),
        limits: LimitPolicy::default(),
        max_code_bytes: MAX_CODE_BYTES,
    };
    let runtime = luge_engines::build(
        args.engine,
        &EngineSettings {
            target: None,
            // One sandbox: this run's.
            sandboxes: Some(1),
            max_memory_bytes: policy.limits.max.memory_bytes,
            fuel: false,
            resident_budget_bytes: luge_engines::DEFAULT_RESIDENT_BUDGET_BYTES,
        },
    )?;
    let name = args.module.file_name().map_or_else(
        || "main.wasm".to_owned(),
        |n| n.to_string_lossy().into_owned(),
    );
    // The one place an action is made: grants (and what this engine
    // cannot enforce refused), limits within the policy, environment.
    let mut action = admit::action(&*runtime, &policy, name, String::new(), env, annotations)?;
    if args.inherit_network {
        action.capabilities.network = luge_core::capabilities::Network::Inherit;
    }
    // Artifacts never leave this process: any key seals them.
    let key = ArtifactKey::from_secret(b"luge run: artifacts stay in this process")?;
    let registry = ModuleRegistry::new(runtime, key, None);
    let module = admit::load(&registry, &policy, code, &action, None)?;
    action.entry = admit::entry(
        &*module,
        Wanted::Command(args.invoke.as_deref().unwrap_or("")),
    )?;

    let mut stdin = Vec::new();
    // On Wasmtime, `-` is this process's stdin as the module reads it (as
    // `wasmtime run`'s); the other engines take it whole before the start.
    let live_stdin = args.engine == EngineKind::Wasmtime
        && args.stdin.as_ref().is_some_and(|p| p.as_os_str() == "-");
    match &args.stdin {
        None => {}
        Some(_) if live_stdin => {}
        Some(path) if path.as_os_str() == "-" => {
            std::io::stdin()
                .take(MAX_STDIN_BYTES + 1)
                .read_to_end(&mut stdin)
                .context("cannot read stdin")?;
        }
        Some(path) => {
            std::fs::File::open(path)
                .and_then(|file| file.take(MAX_STDIN_BYTES + 1).read_to_end(&mut stdin))
                .with_context(|| format!("cannot read {}", path.display()))?;
        }
    }
    if stdin.len() as u64 > MAX_STDIN_BYTES {
        bail!("stdin is larger than {} MiB", MAX_STDIN_BYTES >> 20);
    }
    let outcome = module.run(Invocation {
        // Output as it is written (a server announcing its port); what an
        // engine captured instead is written below.
        inherit_stdio: true,
        inherit_stdin: live_stdin,
        ..Invocation::new(Arc::new(action), stdin)
    });
    std::io::stdout().write_all(&outcome.stdout)?;
    std::io::stdout().flush()?;
    std::io::stderr().write_all(&outcome.stderr)?;
    Ok(match outcome.termination {
        Termination::Exited(status) => status as u8,
        Termination::Failed(reason) => bail!("{reason}"),
        Termination::Trapped(message) => ended(&format!("trap: {message}")),
        Termination::TimedOut(limit) => ended(&format!("time limit of {limit:?} reached")),
        Termination::OutOfMemory { limit_bytes } => ended(&format!(
            "memory limit of {} MiB reached",
            limit_bytes >> 20
        )),
        Termination::OutOfFuel => ended("out of fuel"),
        Termination::OutputTooLarge { limit_bytes } => {
            ended(&format!("output cut at its cap of {limit_bytes} bytes"))
        }
    })
}

/// Says why the module ended without exiting; [`TRAP_STATUS`].
fn ended(why: &str) -> u8 {
    eprintln!("luge: {why}");
    TRAP_STATUS
}
