//! The pass-pipeline flags `run` and `dump` share.

use compiler::schedule::Algorithm;
use std::path::PathBuf;

/// `--dump-to`, `--stop-after`, `--scheduler`.
#[derive(Debug, Clone, clap::Args)]
pub struct PassFlags {
    /// Write the module before the first pass and after every pass into DIR, named as XLA
    /// names its dumps (`module_0000.NAME.0001.after_bitcast-decomposer.txt`); a
    /// pass with a report (the e-graph's sizes) also writes `...after_PASS.report.txt`.
    #[arg(long, value_name = "DIR")]
    pub dump_to: Option<PathBuf>,
    /// End the pass pipeline after this pass; later passes are skipped (passes:
    /// bitcast-decomposer, rng-bit-generator-expander, int64-conversion, egraph-optimiser,
    /// dynamic-slice-splitter, graph-outliner, ipu-scheduler, recomputation).
    #[arg(long, value_name = "PASS")]
    pub stop_after: Option<String>,
    /// The scheduling algorithm (`scheduling.algorithm`): choose-best (default),
    /// post-order, clustering, shortest-path, look-ahead, or for comparison xla-list,
    /// xla-dfs, xla-post-order, optimal.
    #[arg(long, value_name = "ALGORITHM", value_parser = super::schedule::parse_algorithm)]
    pub scheduler: Option<Algorithm>,
}

impl PassFlags {
    /// Applies `--scheduler` to `config`.
    pub fn apply(&self, config: &mut compiler::IpuConfig) {
        if let Some(a) = self.scheduler {
            config.scheduling.algorithm = a.name().into();
        }
    }

    /// The flags given, by name (each acts only where a module compiles).
    pub fn given(&self) -> Vec<&'static str> {
        super::given(&[
            ("--dump-to", self.dump_to.is_some()),
            ("--stop-after", self.stop_after.is_some()),
            ("--scheduler", self.scheduler.is_some()),
        ])
    }

    /// The pipeline options the flags ask for.
    pub fn options(&self) -> compiler::PassOptions {
        compiler::PassOptions {
            dump_to: self.dump_to.clone(),
            stop_after: self.stop_after.clone(),
        }
    }
}
