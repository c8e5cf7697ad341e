//! The runwasi traits: [`LugeShim`] names the runtime, [`LugeSandbox`]
//! serves the container's app.

use std::path::Path;

use anyhow::Context as _;
use clap::Parser as _;
use containerd_shim_wasm::sandbox::Sandbox;
use containerd_shim_wasm::sandbox::context::{RuntimeContext, Source};
use containerd_shim_wasm::shim::{Compiler, Shim, Version};

use crate::app::{self, App};
use crate::compiler::{self, LugeCompiler};
use crate::oci;

/// The runtime `io.containerd.luge.v1`.
pub struct LugeShim;

impl Shim for LugeShim {
    type Sandbox = LugeSandbox;

    fn name() -> &'static str {
        "luge"
    }

    /// The package's version; the revision says `<none>`, as runwasi's
    /// own default does. Not runwasi's `version!()`: it reads the revision
    /// with `git describe --dirty` at compile time, which rewrites
    /// `.git/index`, on which the expansion then depends, so every later
    /// cargo command rebuilt this crate and its binaries (15-33 s each, five
    /// times in a CI run).
    fn version() -> Version {
        Version {
            version: env!("CARGO_PKG_VERSION"),
            revision: "<none>",
        }
    }

    /// Wasm layers are compiled here, once per node and image, and kept in
    /// containerd's content store, sealed with the node's key (read by
    /// `main`, see [`compiler::node_key`]). Without a key (its directory
    /// unwritable, say) nothing is compiled ahead and `luge serve`
    /// compiles in the container, as for an image of files.
    async fn compiler() -> Option<impl Compiler> {
        match LugeCompiler::new() {
            Ok(compiler) => Some(compiler),
            Err(e) => {
                log::error!("no compiler: {e:#}");
                None
            }
        }
    }

    fn supported_layers_types() -> &'static [&'static str] {
        oci::LAYER_TYPES
    }
}

/// One container: its app, served until the container is stopped.
#[derive(Default)]
pub struct LugeSandbox;

/// The variable `luge serve` reads its artifact key from.
const ARTIFACT_KEY_ENV: &str = "LUGE_KEY";

/// The container's root, as its process sees it (libcontainer has pivoted
/// into the image's root filesystem before the sandbox runs).
const ROOT: &str = "/";

impl Sandbox for LugeSandbox {
    /// A container this runtime serves holds an app; anything else is
    /// refused when the container is created (the CRI error, and so the
    /// pod's event, says "luge executor can't handle spec").
    async fn can_handle(&self, ctx: &impl RuntimeContext) -> anyhow::Result<()> {
        let found = match ctx.entrypoint().source {
            Source::Oci(layers) => oci::locked_app(layers)
                .map(drop)
                .map_err(anyhow::Error::from),
            Source::File(_) => app::find(Path::new(ROOT), ctx.entrypoint().arg0)
                .map(drop)
                .map_err(anyhow::Error::from),
        };
        // runwasi reports a refusal to containerd without its reason:
        // the reason goes to the shim's log (containerd's).
        if let Err(e) = &found {
            log::error!("refused: {e:#}");
        }
        found
    }

    /// Serves the app as `luge serve` in this process (the container's
    /// init process, in the pod's namespaces and cgroup) until SIGTERM or
    /// SIGINT, which `luge serve` answers by draining; its status is the
    /// container's exit status. Why an app could not be served (a module
    /// that does not compile, a trigger Luge lacks) ends the container
    /// with status 1 and the reason on its stderr (`kubectl logs`) and in
    /// its termination message (the pod's `lastState`).
    async fn run_wasi(&self, ctx: &impl RuntimeContext) -> anyhow::Result<i32> {
        match serve(ctx) {
            Ok(status) => Ok(status),
            Err(error) => {
                report(&error);
                Ok(1)
            }
        }
    }
}

/// Where the container sees its own cgroup.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Where kubelet reads a container's termination message (the default
/// `terminationMessagePath`); it keeps at most 4096 bytes of it.
const TERMINATION_LOG: &str = "/dev/termination-log";

fn report(error: &anyhow::Error) {
    let line = format!("luge: error: {}", luge_core::error_line(error.as_ref()));
    eprintln!("{line}");
    if Path::new(TERMINATION_LOG).exists() {
        let mut end = line.len().min(4096);
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        let _ = std::fs::write(TERMINATION_LOG, &line[..end]);
    }
}

/// The app the container holds, served until the container is stopped.
fn serve(ctx: &impl RuntimeContext) -> anyhow::Result<i32> {
    let root = Path::new(ROOT);
    let (app, fs_root) = match ctx.entrypoint().source {
        Source::Oci(layers) => {
            let dir = root.join(oci::APP_DIR);
            let manifest = oci::write_app(layers, &dir)?;
            let app = App::Spin {
                manifest,
                runtime_config: Some(root.join(app::RUNTIME_CONFIG)).filter(|p| p.is_file()),
            };
            (app, Some(oci::files_root(&dir)))
        }
        Source::File(_) => (app::find(root, ctx.entrypoint().arg0)?, None),
    };
    let listen = app::listen(ctx.envs())?;
    for entry in ctx.envs() {
        let (name, value) = entry.split_once('=').unwrap_or((entry, ""));
        // The artifact key is the node's, never the pod's: with a key
        // of its choosing, an image could carry machine code Luge
        // would load.
        if name.is_empty()
            || name == ARTIFACT_KEY_ENV
            || name.contains('\0')
            || value.contains('\0')
        {
            continue;
        }
        // SAFETY: this is the container's init process, forked by
        // libcontainer from one thread of the shim: only this thread
        // exists until `luge serve` below starts its own, so nothing
        // reads the environment while it is written (the variables are
        // the pod's `env`, which Spin apps read as `SPIN_VARIABLE_*`).
        unsafe { std::env::set_var(name, value) };
    }
    let secret = match compiler::node_key() {
        Ok(key) => key.secret().to_owned(),
        // No node key: one of this container's own, so nothing sealed
        // elsewhere loads, and what it compiles it keeps to itself.
        Err(e) => {
            log::error!("no node key ({e}): a key of the container's own");
            luge_registry::artifact::random_secret()?
        }
    };
    // SAFETY: as above, the only thread of this process.
    unsafe { std::env::set_var(ARTIFACT_KEY_ENV, secret) };
    let mut argv = vec!["luge".to_owned()];
    argv.extend(app::serve_args(&app, root, listen, fs_root.as_deref()));
    // SpinKube's selective deployment: only the components the pod names.
    argv.extend(app::retain_args(&app, ctx.envs()));
    // The pod's memory limit bounds its sandboxes (its CPU limit bounds
    // the workers through `available_parallelism`).
    argv.extend(app::memory_args(app::memory_limit(Path::new(CGROUP_ROOT))));
    // The first line of the container's log: how the app is served.
    eprintln!("luge: {}", argv[1..].join(" "));
    let cli = luge_executor::cli::Cli::try_parse_from(&argv)
        .with_context(|| format!("luge {}", argv[1..].join(" ")))?;
    // `luge serve` builds and blocks on a runtime of its own, which
    // cannot start inside runwasi's: it runs on a thread of its own.
    let served = std::thread::Builder::new()
        .name("luge-serve".to_owned())
        .spawn(move || luge_executor::main_with(cli))
        .context("cannot start luge serve")?;
    match served.join() {
        Ok(status) => Ok(i32::from(status?)),
        Err(_) => anyhow::bail!("luge serve panicked"),
    }
}
