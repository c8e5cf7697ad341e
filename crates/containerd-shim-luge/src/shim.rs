//! The runwasi traits: [`LugeShim`] names the runtime, [`LugeSandbox`]
//! serves the container's app.

use std::path::Path;

use anyhow::Context as _;
use clap::Parser as _;
use containerd_shim_wasm::sandbox::Sandbox;
use containerd_shim_wasm::sandbox::context::RuntimeContext;
use containerd_shim_wasm::shim::{Shim, Version, version};

use crate::app;

/// The runtime `io.containerd.luge.v1`.
pub struct LugeShim;

impl Shim for LugeShim {
    type Sandbox = LugeSandbox;

    fn name() -> &'static str {
        "luge"
    }

    fn version() -> Version {
        version!()
    }
}

/// One container: its app, served until the container is stopped.
#[derive(Default)]
pub struct LugeSandbox;

/// The container's root, as its process sees it (libcontainer has pivoted
/// into the image's root filesystem before the sandbox runs).
const ROOT: &str = "/";

impl Sandbox for LugeSandbox {
    /// A container this runtime serves holds an app; anything else is
    /// refused when the container is created, with the reason (runwasi
    /// turns it into the CRI error kubelet reports as the pod's event).
    async fn can_handle(&self, ctx: &impl RuntimeContext) -> anyhow::Result<()> {
        app::find(Path::new(ROOT), ctx.entrypoint().arg0)?;
        Ok(())
    }

    /// Serves the app as `luge serve` in this process (the container's
    /// init process, in the pod's namespaces and cgroup) until SIGTERM or
    /// SIGINT, which `luge serve` answers by draining; its status is the
    /// container's exit status.
    async fn run_wasi(&self, ctx: &impl RuntimeContext) -> anyhow::Result<i32> {
        let root = Path::new(ROOT);
        let app = app::find(root, ctx.entrypoint().arg0)?;
        let listen = app::listen(ctx.envs())?;
        for entry in ctx.envs() {
            let (name, value) = entry.split_once('=').unwrap_or((entry, ""));
            if name.is_empty() || name.contains('\0') || value.contains('\0') {
                continue;
            }
            // SAFETY: this is the container's init process, forked by
            // libcontainer from one thread of the shim: only this thread
            // exists until `luge serve` below starts its own, so nothing
            // reads the environment while it is written (the variables are
            // the pod's `env`, which Spin apps read as `SPIN_VARIABLE_*`).
            unsafe { std::env::set_var(name, value) };
        }
        let mut argv = vec!["luge".to_owned()];
        argv.extend(app::serve_args(&app, root, listen));
        let cli = luge_executor::cli::Cli::try_parse_from(&argv)
            .with_context(|| format!("luge {}", argv[1..].join(" ")))?;
        // `luge serve` builds and blocks on a runtime of its own, which
        // cannot start inside runwasi's: it runs on a thread of its own.
        let served = std::thread::Builder::new()
            .name("luge-serve".to_owned())
            .spawn(move || luge_executor::main_with(cli))
            .context("cannot start luge serve")?;
        match served.join() {
            Ok(Ok(status)) => Ok(i32::from(status)),
            Ok(Err(error)) => {
                // The container's stderr: `kubectl logs` and the pod's
                // last state say why it ended.
                eprintln!("luge: error: {}", luge_core::error_line(error.as_ref()));
                Ok(1)
            }
            Err(_) => anyhow::bail!("luge serve panicked"),
        }
    }
}
