//! `luge`: see the `luge_executor` library for what it does.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

// The allocator is the library's choice (see its `Allocator`).
#[global_allocator]
static ALLOCATOR: luge_executor::Allocator = luge_executor::Allocator {};

fn main() -> ExitCode {
    use luge_executor::cli::{Cli, version};
    // Made once, for the life of the process (clap takes a static text).
    let version: &'static str = Box::leak(version().into_boxed_str());
    let matches = Cli::command().version(version).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    match luge_executor::main_with(cli) {
        Ok(status) => ExitCode::from(status),
        Err(error) => {
            // One line a person can act on; the trace only when asked for.
            eprintln!("luge: error: {}", luge_core::error_line(error.as_ref()));
            if std::env::var_os("RUST_BACKTRACE").is_some_and(|v| v != "0") {
                eprintln!("{error:?}");
            }
            ExitCode::FAILURE
        }
    }
}
