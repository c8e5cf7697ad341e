//! The Luge executor: the library behind the `luge` binary.
//!
//! - `luge proxy`: one OpenWhisk action container per process (`/init`,
//!   `/run`), a drop-in for an action runtime image.
//! - `luge serve`: many containers per process (`/{id}/init|run|destroy`,
//!   `/{id}/logs`), for OpenWhisk's WasmContainerFactory; and a standalone
//!   function host: routes from `--config luge.toml` or `--sledge-spec`,
//!   uploads under `/v1/functions` ([`standalone`]).
//!
//! This binary is a thin layer, in the order a request meets it: CLI
//! ([`cli`]) and config assembly (`assemble`: `luge.toml`, the operator's
//! files, the function host), where connections are served ([`frontend`]:
//! on the scheduler's workers, or on threads beside them), HTTP plumbing
//! ([`http`]), routing (`router`:
//! the executor's own API, with `matchit`), the handlers ([`routes`],
//! [`standalone`], `handler` for wasi:http components, `calls`), handing
//! invocations to the scheduler ([`dispatch`]), and Prometheus metrics
//! ([`metrics`]).

mod assemble;
mod calls;
pub mod cli;
pub mod dispatch;
pub mod frontend;
mod handler;
pub mod http;
pub mod metrics;
mod router;
pub mod routes;
pub mod standalone;

use tracing_subscriber::EnvFilter;

/// Runs the executor for parsed command-line arguments until a shutdown
/// signal.
pub fn main_with(cli: cli::Cli) -> anyhow::Result<()> {
    // Logs go to stderr. In proxy mode the process's streams are the
    // action's logs as OpenWhisk collects them, so only warnings go there.
    let default_level = match cli.command {
        cli::Command::Proxy { .. } => "warn",
        cli::Command::Serve { .. } => "info",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("LUGE_LOG").unwrap_or_else(|_| EnvFilter::new(default_level)),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("luge-http")
        .build()?;
    runtime.block_on(routes::run(cli))
}
