//! Compile errors: each names the instruction (and its line) a user has to change.

use runtime::RuntimeError;

/// What stops a module compiling.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CompileError {
    /// An option of the `IpuConfig` (or a command-line flag) is invalid.
    #[error("invalid IPU configuration: {0}")]
    Config(String),
    /// A 64-bit float on the device.
    #[error(
        "{at}: instruction '{instruction}' computes f64, but the IPU has no 64-bit floats; convert the program to f32 (in JAX: leave jax_enable_x64 off, or cast with .astype(jnp.float32))"
    )]
    F64 {
        /// Where (`computation 'c', line L`).
        at: String,
        /// The instruction's name.
        instruction: String,
    },
    /// An op (or a use of it) the lowering does not support yet.
    #[error(
        "{at}: instruction '{instruction}': {opcode} is not supported on the IPU yet: {reason}"
    )]
    Unsupported {
        /// Where (`computation 'c', line L`).
        at: String,
        /// The instruction's name.
        instruction: String,
        /// The opcode.
        opcode: String,
        /// Why, and what to do instead.
        reason: String,
    },
    /// The program does not fit, or the executable is rejected by the IPU Model.
    #[error(transparent)]
    Device(#[from] RuntimeError),
}
