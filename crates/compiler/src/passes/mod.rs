//! The pass pipeline: one explicit list of HLO-to-HLO passes run before lowering. Each pass
//! runs in a `tracing` span (`ipuxla::pass`) that records its time; `--dump-to DIR` writes
//! the module before the first pass and after every pass in XLA's file naming
//! (`module_0000.NAME.0000.before_optimizations.txt`,
//! `module_0000.NAME.0001.after_rng-bit-generator-expander.txt`, ...); `--stop-after PASS` ends the
//! pipeline after that pass. A new pass is one file here and one line in [`pipeline`].

mod bitcast_decomposer;
mod dynamic_slice_splitter;
mod egraph_optimiser;
mod graph_outliner;
mod int64_conversion;
mod int64_words;
mod ipu_scheduler;
mod recomputation;
mod rng_expander;
mod words;

pub use bitcast_decomposer::BitcastDecomposer;
pub use dynamic_slice_splitter::DynamicSliceSplitter;
pub use egraph_optimiser::EgraphOptimiser;
pub use graph_outliner::GraphOutliner;
pub use int64_conversion::{Int64Conversion, narrow_int64};
pub use ipu_scheduler::IpuScheduler;
pub use recomputation::Recomputation;
pub use rng_expander::RngBitGeneratorExpander;

use crate::{CompileError, IpuConfig};
use std::path::{Path, PathBuf};
use std::time::Instant;
use xla_ir::Module;

/// A module-to-module transformation.
pub trait Pass {
    /// The name dumps and `--stop-after` use (lowercase, hyphenated, as XLA's).
    fn name(&self) -> &'static str;
    /// Transforms `module`.
    fn run(&self, module: &mut Module, cx: &mut PassContext) -> Result<(), CompileError>;
}

/// What passes read and report besides the module.
pub struct PassContext<'a> {
    /// The IPU system being compiled for.
    pub config: &'a IpuConfig,
    /// Warnings for the user (conversions the device needed, ...).
    pub warnings: Vec<String>,
    /// What the running pass reports about itself (sizes, limits hit), one line each.
    pub notes: Vec<String>,
}

/// The pipeline, in order.
pub fn pipeline() -> Vec<Box<dyn Pass>> {
    vec![
        Box::new(BitcastDecomposer),
        Box::new(RngBitGeneratorExpander),
        Box::new(Int64Conversion),
        Box::new(EgraphOptimiser),
        Box::new(DynamicSliceSplitter),
        Box::new(GraphOutliner),
        Box::new(IpuScheduler),
        Box::new(Recomputation),
    ]
}

/// The names of the pipeline's passes, in order.
pub fn pass_names() -> Vec<&'static str> {
    pipeline().iter().map(|p| p.name()).collect()
}

/// How to run the pipeline.
#[derive(Debug, Clone, Default)]
pub struct PassOptions {
    /// Write the module before the first pass and after every pass into this directory
    /// (created if missing).
    pub dump_to: Option<PathBuf>,
    /// End the pipeline after the pass of this name.
    pub stop_after: Option<String>,
}

/// One pass as it ran.
#[derive(Debug, Clone)]
pub struct PassRun {
    /// The pass.
    pub name: &'static str,
    /// Host seconds it took.
    pub seconds: f64,
    /// What the pass reported (e-graph sizes, ...), one line each.
    pub notes: Vec<String>,
}

/// What the pipeline did.
#[derive(Debug, Clone, Default)]
pub struct PipelineReport {
    /// The passes that ran, in order.
    pub passes: Vec<PassRun>,
    /// Warnings for the user.
    pub warnings: Vec<String>,
    /// Files written by `--dump-to`, in order.
    pub dumps: Vec<PathBuf>,
}

/// Runs the pipeline on `module`.
pub fn run_pipeline(
    module: &mut Module,
    config: &IpuConfig,
    options: &PassOptions,
) -> Result<PipelineReport, CompileError> {
    let passes = pipeline();
    if let Some(stop) = &options.stop_after
        && !passes.iter().any(|p| p.name() == stop)
    {
        return Err(CompileError::UnknownPass {
            name: stop.clone(),
            known: passes.iter().map(|p| p.name().to_string()).collect(),
        });
    }
    let mut report = PipelineReport::default();
    let mut cx = PassContext {
        config,
        warnings: Vec::new(),
        notes: Vec::new(),
    };
    if let Some(dir) = &options.dump_to {
        report
            .dumps
            .push(dump(dir, module, 0, "before_optimizations")?);
    }
    for (k, pass) in passes.iter().enumerate() {
        let span = tracing::info_span!(target: "ipuxla::pass", "pass", name = pass.name());
        let _entered = span.enter();
        let start = Instant::now();
        pass.run(module, &mut cx)?;
        let seconds = start.elapsed().as_secs_f64();
        tracing::info!(target: "ipuxla::pass", ms = seconds * 1e3, "done");
        let notes = std::mem::take(&mut cx.notes);
        if let Some(dir) = &options.dump_to {
            let stage = format!("after_{}", pass.name());
            report.dumps.push(dump(dir, module, k + 1, &stage)?);
            if !notes.is_empty() {
                let stage = format!("after_{}.report", pass.name());
                report.dumps.push(write_dump(
                    dir,
                    module,
                    k + 1,
                    &stage,
                    &(notes.join("\n") + "\n"),
                )?);
            }
        }
        report.passes.push(PassRun {
            name: pass.name(),
            seconds,
            notes,
        });
        if options.stop_after.as_deref() == Some(pass.name()) {
            break;
        }
    }
    report.warnings = cx.warnings;
    Ok(report)
}

/// Writes `module` as `DIR/module_0000.NAME.STEP.STAGE.txt`.
fn dump(dir: &Path, module: &Module, step: usize, stage: &str) -> Result<PathBuf, CompileError> {
    write_dump(dir, module, step, stage, &module.to_string())
}

/// Writes `text` as `DIR/module_0000.NAME.STEP.STAGE.txt`.
fn write_dump(
    dir: &Path,
    module: &Module,
    step: usize,
    stage: &str,
    text: &str,
) -> Result<PathBuf, CompileError> {
    let path = dir.join(format!("module_0000.{}.{step:04}.{stage}.txt", module.name));
    let failed = |e: std::io::Error| CompileError::Dump {
        path: path.display().to_string(),
        reason: e.to_string(),
    };
    std::fs::create_dir_all(dir).map_err(failed)?;
    std::fs::write(&path, text).map_err(failed)?;
    Ok(path)
}
