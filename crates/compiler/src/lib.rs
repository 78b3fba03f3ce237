//! The IPU compiler: lowers an XLA HLO [`Module`] into a [`runtime::Executable`] for the IPU
//! Model, as Graphcore's XLA backend lowers onto Poplar. Tensors get tile mappings (linear
//! by default, planner-chosen for matrix products), element-wise chains fuse into one JIT
//! kernel per tile, reductions run as per-tile partials plus a cross-tile stage, data
//! movement becomes exchange, control flow becomes device programs, and tile memory is
//! reused between tensors that are never live together.
#![warn(missing_docs)]

pub mod config;
pub mod config_docs;
pub mod convert;
pub mod device_data;
pub mod egraph;
pub mod error;
mod lower;
mod out_of_core;
pub mod outline;
pub mod passes;
pub mod placement;
pub mod recompute;
pub mod schedule;
pub mod stored;
pub mod training_pipeline;
pub mod types;

pub use config::IpuConfig;
pub use error::CompileError;
pub use lower::{
    Compiled, DeviceLoop, Feed, HostBuffer, ParameterRole, PipelineLayout, PipelinePhase,
    UPLOAD_STREAM, has_pipeline_stages, replication,
};
pub use passes::{PassOptions, PipelineReport};

use xla_ir::Module;

/// Compiles `module` for the IPU system `config` describes.
pub fn compile(module: &Module, config: &IpuConfig) -> Result<runtime::Executable, CompileError> {
    Ok(compile_with_io(module, config)?.executable)
}

/// Compiles `module`, returning the executable with the host streams of each parameter and
/// result and any warnings (such as the int64 conversion).
pub fn compile_with_io(module: &Module, config: &IpuConfig) -> Result<Compiled, CompileError> {
    compile_with_options(module, config, &PassOptions::default())
}

/// Compiles `module`, running the pass pipeline as `options` say (dumps, stopping early),
/// then lowering the result.
pub fn compile_with_options(
    module: &Module,
    config: &IpuConfig,
    options: &PassOptions,
) -> Result<Compiled, CompileError> {
    compile_inner(module, config, options, None)
}

/// Compiles `module` to run its entry computation `device_loop.iterations` times in one
/// device execution (steps per execution): parameters its `input_output_alias` names stay
/// resident, fed ones come one value per iteration, other results are streamed out every
/// iteration ([`DeviceLoop`]).
pub fn compile_device_loop(
    module: &Module,
    config: &IpuConfig,
    options: &PassOptions,
    device_loop: &DeviceLoop,
) -> Result<Compiled, CompileError> {
    compile_inner(module, config, options, Some(device_loop))
}

fn compile_inner(
    module: &Module,
    config: &IpuConfig,
    options: &PassOptions,
    device_loop: Option<&DeviceLoop>,
) -> Result<Compiled, CompileError> {
    match (device_loop, config.device_loop.iterations_per_loop) {
        (None, Some(n)) => {
            return Err(CompileError::Config(format!(
                "device_loop.iterations_per_loop is {n}: which parameters are fed one slice per iteration depends on the inputs, so compile with compile_device_loop (ipuxla::device_loop::device_loop_for works it out) or run with ipuxla::device::run_on_ipu_model"
            )));
        }
        (Some(lp), Some(n)) if lp.iterations != n => {
            return Err(CompileError::Config(format!(
                "device_loop.iterations_per_loop is {n} but the device loop runs {} iterations",
                lp.iterations
            )));
        }
        _ => {}
    }
    if let Some(lp) = device_loop {
        // Checked before the passes, so a bad loop is reported on the module as written.
        lp.roles(module)?;
    }
    let has_feeds = module.computations().any(|(_, c)| {
        c.instructions()
            .any(|(_, i)| matches!(i.op, xla_ir::Op::Infeed { .. } | xla_ir::Op::Outfeed { .. }))
    });
    let named;
    let module = if has_feeds {
        let mut m = module.clone();
        lower::name_feeds(&mut m);
        named = m;
        &named
    } else {
        module
    };
    let (module, report) = optimise(module, config, options)?;
    let lowering = tracing::info_span!(target: "ipuxla::phase", "phase", name = "lowering");
    let mut compiled =
        lowering.in_scope(|| out_of_core::lower_fitting(&module, config, device_loop))?;
    compiled.warnings.splice(0..0, report.warnings);
    Ok(compiled)
}

/// Checks `module` and `config` and runs the pass pipeline on a copy of the module: what
/// lowering would receive.
pub fn optimise(
    module: &Module,
    config: &IpuConfig,
    options: &PassOptions,
) -> Result<(Module, PipelineReport), CompileError> {
    config.check()?;
    // Checked here, so a bad module is reported as the caller's, not as a pass's failure.
    xla_ir::verify(module).map_err(|e| CompileError::InvalidModule(e.to_string()))?;
    // XLA's ops ipuxla reads as foreign, in the ops they mean where that is known.
    let expanded =
        xla_ir::expand::expand_foreign_ops(module).map_err(|e| CompileError::Unsupported {
            at: format!("computation '{}'", e.computation),
            instruction: e.instruction.clone(),
            opcode: "foreign op".into(),
            reason: e.message.clone(),
        })?;
    let module = expanded.as_ref().unwrap_or(module);
    types::check_device_limits(module)?;
    let mut module = module.clone();
    let report = passes::run_pipeline(&mut module, config, options)?;
    Ok((module, report))
}
