//! The IPU compiler: lowers an XLA HLO [`Module`] into a [`runtime::Executable`] for the IPU
//! Model, as Graphcore's XLA backend lowers onto Poplar. Tensors get tile mappings (linear
//! by default, planner-chosen for matrix products), element-wise chains fuse into one JIT
//! kernel per tile, reductions run as per-tile partials plus a cross-tile stage, data
//! movement becomes exchange, control flow becomes device programs, and tile memory is
//! reused between tensors that are never live together.
#![warn(missing_docs)]

pub mod config;
pub mod device_data;
pub mod error;
mod lower;
pub mod schedule;
pub mod types;
mod widen_int64;

pub use config::IpuConfig;
pub use error::CompileError;
pub use lower::{Compiled, HostBuffer};

use xla_ir::Module;

/// Compiles `module` for the IPU system `config` describes.
pub fn compile(module: &Module, config: &IpuConfig) -> Result<runtime::Executable, CompileError> {
    Ok(compile_with_io(module, config)?.executable)
}

/// Compiles `module`, returning the executable with the host streams of each parameter and
/// result and any warnings (such as the int64 conversion).
pub fn compile_with_io(module: &Module, config: &IpuConfig) -> Result<Compiled, CompileError> {
    config.check()?;
    types::check_device_types(module)?;
    let (module, warnings) = widen_int64::narrow_int64(module);
    let mut compiled = lower::lower_module(&module, config)?;
    compiled.warnings.splice(0..0, warnings);
    Ok(compiled)
}
