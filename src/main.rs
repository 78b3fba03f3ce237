//! The `ipuxla` command line.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = ipuxla::cli::Cli::parse();
    match ipuxla::cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e:#}");
            ExitCode::FAILURE
        }
    }
}
