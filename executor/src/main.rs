//! `luge`: see the `luge_executor` library for what it does.

use std::process::ExitCode;

use clap::Parser;

// The allocator is the library's choice (see its `Allocator`).
#[global_allocator]
static ALLOCATOR: luge_executor::Allocator = luge_executor::Allocator {};

fn main() -> ExitCode {
    match luge_executor::main_with(luge_executor::cli::Cli::parse()) {
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
