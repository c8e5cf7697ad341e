//! `luge-precompile`: compile a Wasm module once, ahead of time, into an
//! artifact that `luge` loads without compiling.
//!
//! The artifact is sealed with the operator's key (`--key-file` or
//! `LUGE_KEY`; by default the same local key `luge` uses on this host) and
//! names its engine, engine version and target, so an executor refuses
//! anything it did not authorize or cannot run. `--target` cross-compiles,
//! e.g. Raspberry Pi artifacts on an x86 host.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::Parser;
use luge_core::WasmRuntime;
use luge_engines::{EngineKind, EngineSettings};
use luge_registry::artifact;
use luge_registry::{ModuleCode, ModuleRegistry};

/// Compile a .wasm module into an authenticated Luge artifact.
#[derive(Debug, Parser)]
#[command(name = "luge-precompile", version)]
struct Cli {
    /// The WebAssembly module (a .wasm file, or a zip holding one).
    input: PathBuf,
    /// Where to write the artifact.
    #[arg(short, long)]
    output: PathBuf,
    /// Engine the artifact is for.
    #[arg(long, value_enum, default_value = "wasmtime")]
    engine: EngineKind,
    /// Target triple (default: this host), e.g. aarch64-unknown-linux-gnu.
    #[arg(long)]
    target: Option<String>,
    /// Compile with fuel metering, for executors started with `--fuel`
    /// (Wasmtime; an artifact is refused by an executor whose metering differs).
    #[arg(long)]
    fuel: bool,
    /// The export a module's snapshot initialisation runs, instead of
    /// `wizer.initialize` (under the executor's default limits, no grants).
    #[arg(long, value_name = "EXPORT")]
    init_function: Option<String>,
    /// Write a zip holding the artifact as main.luge (for `wsk action create`).
    #[arg(long)]
    zip: bool,
    /// File holding the operator's key secret (or set LUGE_KEY).
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// Cache directory holding this host's local key when no key is given.
    #[arg(long)]
    cache_dir: Option<PathBuf>,
}

fn runtime(cli: &Cli) -> anyhow::Result<Arc<dyn WasmRuntime>> {
    // Compiling only: no sandboxes, no address space to reserve.
    let settings = EngineSettings::compile_only(cli.target.clone(), cli.fuel);
    Ok(luge_engines::build(cli.engine, &settings)?)
}

fn main() -> std::process::ExitCode {
    match precompile(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // One line a person can act on; the trace only when asked for.
            eprintln!(
                "luge-precompile: error: {}",
                luge_core::error_line(error.as_ref())
            );
            if std::env::var_os("RUST_BACKTRACE").is_some_and(|v| v != "0") {
                eprintln!("{error:?}");
            }
            std::process::ExitCode::FAILURE
        }
    }
}

fn precompile(cli: Cli) -> anyhow::Result<()> {
    let bytes =
        std::fs::read(&cli.input).with_context(|| format!("reading {}", cli.input.display()))?;
    let wasm = match ModuleCode::detect(bytes, usize::MAX)
        .with_context(|| format!("{} is not usable", cli.input.display()))?
    {
        ModuleCode::Wasm(wasm) => wasm,
        ModuleCode::Artifact(_) => bail!("{} is already a Luge artifact", cli.input.display()),
    };
    let cache_dir = cli
        .cache_dir
        .clone()
        .unwrap_or_else(artifact::default_cache_dir);
    let (key, _) = artifact::operator_key(cli.key_file.as_deref(), &cache_dir)?;
    let runtime = runtime(&cli)?;
    let id = runtime.id().clone();
    let mut registry = ModuleRegistry::new(runtime, key, None);
    // A module exporting `wizer.initialize` (or `--init-function`) is
    // shipped as its snapshot, its initialisation bounded by the
    // executor's default limits.
    let defaults = luge_core::LimitPolicy::default().default;
    if let Some(preinit) = luge_engines::preinitializer(&defaults)? {
        registry = registry.with_preinitializer(preinit);
    }
    let init = cli
        .init_function
        .as_ref()
        .map(|function| luge_registry::Init {
            function: function.clone(),
            timeout: defaults.timeout,
            memory_bytes: defaults.memory_bytes,
            env: Vec::new(),
            args: Vec::new(),
            dirs: Vec::new(),
        });
    let sealed = registry
        .compile_sealed_with(&wasm, init.as_ref())
        .with_context(|| format!("{} was refused", cli.input.display()))?;
    let output = if cli.zip { zipped(&sealed)? } else { sealed };
    std::fs::write(&cli.output, &output)
        .with_context(|| format!("writing {}", cli.output.display()))?;
    eprintln!(
        "wrote {} ({} bytes, {id})",
        cli.output.display(),
        output.len()
    );
    Ok(())
}

fn zipped(artifact: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut out = std::io::Cursor::new(Vec::new());
    let mut writer = zip::ZipWriter::new(&mut out);
    writer.start_file("main.luge", zip::write::SimpleFileOptions::default())?;
    writer.write_all(artifact)?;
    writer.finish()?;
    Ok(out.into_inner())
}
