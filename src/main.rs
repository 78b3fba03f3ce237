//! The `ipuxla` command line.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    use tracing_subscriber::prelude::*;
    // `IPUXLA_LOG=ipuxla::plan=debug` (any tracing filter) prints the compiler's decisions;
    // the progress indicator hears of the passes (and nothing else).
    let log = std::env::var("IPUXLA_LOG").ok().map(|filter| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .without_time()
            .with_filter(tracing_subscriber::EnvFilter::new(filter))
    });
    let passes =
        ipuxla::progress::PassLayer.with_filter(tracing_subscriber::filter::filter_fn(|m| {
            ipuxla::progress::PassLayer::TARGETS.contains(&m.target())
        }));
    tracing_subscriber::registry().with(passes).with(log).init();
    let cli = ipuxla::cli::Cli::parse();
    match ipuxla::cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that stopped reading (`ipuxla dump big.hlo | head`) is not a failure.
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e:#}");
            ExitCode::FAILURE
        }
    }
}
