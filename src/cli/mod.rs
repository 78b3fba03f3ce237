//! The `ipuxla` command line: one module per subcommand.

/// `println!` that returns the error (to `main`, which takes a closed pipe as a reader
/// that stopped: `ipuxla bench | head`) instead of panicking.
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout(), $($t)*)?
    }};
}

/// `print!` as [`outln`] is `println!`.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout(), $($t)*)?
    }};
}

mod bench;
mod compile;
mod config;
mod convert;
mod devices;
mod dump;
mod load;
mod pass_flags;
mod report;
mod run;
mod schedule;
mod summary;
mod target_flags;

use clap::{Parser, Subcommand};

pub use load::{load_config, load_module};
pub use pass_flags::PassFlags;
pub use target_flags::TargetFlags;

/// ipuxla: compile XLA HLO programs for Graphcore IPUs and run them on an IPU Model.
#[derive(Debug, Parser)]
#[command(
    name = "ipuxla",
    version,
    about,
    long_about = None,
    after_help = "Exit status: 0 when the command did what it was asked, 1 when it could not (bad input, a module that does not compile or fit, outputs that differ in bench), 2 for a command line that does not parse."
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// No progress indicators on stderr (they appear only on a terminal, for work that
    /// takes over a second: compiling, loading, simulating, bench cases).
    #[arg(long, short, global = true)]
    pub quiet: bool,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Parse and verify an HLO text module, then print it in canonical form (or a summary).
    Dump(dump::DumpArgs),
    /// Run a module (HLO text, or an executable `compile` wrote) on .npy inputs and write
    /// its results as .npy files.
    Run(Box<run::RunArgs>),
    /// Compile a module once and write the executable (`-o FILE.ipux`) for `run`, which
    /// then runs it without compiling (pre-compilation).
    Compile(Box<compile::CompileArgs>),
    /// Convert a module for the IPU (the seed's `convert`): f16 precision with excluded
    /// nodes, int64 to int32; writes the converted module for `run`.
    Convert(convert::ConvertArgs),
    /// Schedule a module's instructions for peak memory and print the order and peak.
    Schedule(schedule::ScheduleArgs),
    /// Compile and run corpus cases, timing them against XLA's figures in `case.json`, and
    /// set each simulated run against the IPU's roofline (FLOPs, TFLOP/s, % of AMP peak,
    /// exchange share and lower bound).
    Bench(bench::BenchArgs),
    /// Write a profile (`run --profile`) as one self-contained HTML page: tile memory heat
    /// maps, the liveness curve, cycles per step, the largest tensors, per-IPU totals.
    Report(report::ReportArgs),
    /// List the modelled IPU system as `gc-info -l` would, and the shard to IPU orders.
    Devices(devices::DevicesArgs),
    /// Print every IpuConfig option with its type, default, value and what it does.
    Config(config::ConfigArgs),
    /// Print a completion script for a shell (`ipuxla completions bash > ~/.local/share/bash-completion/completions/ipuxla`).
    Completions {
        /// The shell.
        #[arg(value_enum, ignore_case = true)]
        shell: clap_complete::Shell,
    },
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    crate::progress::set_quiet(cli.quiet);
    match cli.command {
        Command::Dump(args) => dump::run(args),
        Command::Convert(args) => convert::run(args),
        Command::Run(args) => run::run(*args),
        Command::Compile(args) => compile::run(*args),
        Command::Devices(args) => devices::run(args),
        Command::Config(args) => config::run(args),
        Command::Schedule(args) => schedule::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Report(args) => report::run(args),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            let mut command = Cli::command();
            clap_complete::generate(shell, &mut command, "ipuxla", &mut std::io::stdout());
            Ok(())
        }
    }
}

/// The names of the flags given, from `(name, given)` pairs: for refusing flags that would
/// not act.
fn given(flags: &[(&'static str, bool)]) -> Vec<&'static str> {
    flags
        .iter()
        .filter_map(|&(name, given)| given.then_some(name))
        .collect()
}
