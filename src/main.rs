//! The `ipuxla` command line.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    // `IPUXLA_LOG=ipuxla::plan=debug` (any tracing filter) prints the compiler's decisions.
    if let Ok(filter) = std::env::var("IPUXLA_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .without_time()
            .init();
    }
    let cli = ipuxla::cli::Cli::parse();
    match ipuxla::cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e:#}");
            ExitCode::FAILURE
        }
    }
}
