//! The `ipuxla` command line: one module per subcommand.

mod dump;
mod load;

use clap::{Parser, Subcommand};

pub use load::load_module;

/// ipuxla: compile XLA HLO programs for Graphcore IPUs and run them on an IPU Model.
#[derive(Debug, Parser)]
#[command(name = "ipuxla", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Parse and verify an HLO text module, then print it in canonical form (or a summary).
    Dump(dump::DumpArgs),
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Dump(args) => dump::run(args),
    }
}
