//! `ipuxla dump`: parse, verify and print a module.

use clap::Args;
use std::io::Write;
use std::path::PathBuf;

/// Arguments of `ipuxla dump`.
#[derive(Debug, Args)]
pub struct DumpArgs {
    /// The HLO text file to read (as printed by XLA or JAX's `.as_text("hlo")`).
    pub file: PathBuf,
    /// Print a JSON summary (computations, instruction counts per opcode, parameter and
    /// result shapes) instead of the module text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `ipuxla dump`.
pub fn run(args: DumpArgs) -> anyhow::Result<()> {
    let module = super::load_module(&args.file)?;
    let mut out = std::io::stdout().lock();
    write!(out, "{module}")?;
    Ok(())
}
