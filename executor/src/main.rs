//! `luge`: see the `luge_executor` library for what it does.

use clap::Parser;

fn main() -> anyhow::Result<()> {
    luge_executor::main_with(luge_executor::cli::Cli::parse())
}
