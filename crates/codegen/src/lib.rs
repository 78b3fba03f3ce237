//! Vertex kernels for the IPU Model: a small typed kernel IR ([`kernel`]), its meaning in
//! plain Rust ([`reference`]), and a Cranelift JIT that compiles kernels to host code.
//! Matrix-product partials run on the `gemm` crate: measured in one run on this machine
//! (`cargo bench -p ipuxla-codegen`), gemm reached 72–107 GFLOP/s at 256³ against 34–41
//! GFLOP/s for the JIT's 4×8 f32x4 register-blocked kernel (kept as
//! [`KernelCache::compile_jit_matmul`] for comparison and cross-checking).
//!
//! The runtime knows kernels only as [`KernelSpec`] values; it JIT-compiles them when an
//! engine loads an executable.
#![warn(missing_docs)]

mod each_column;
pub mod fp;
pub mod halves;
pub mod jit;
pub mod kernel;
mod lower;
pub mod math;
mod narrow_product;
pub mod reference;
mod shared_jit;
pub mod slots;
mod stages;
pub mod types;
mod wide_math;

pub use each_column::{gemm_f32_each_column, gemm_f32_narrow_columns};
pub use fp::{FloatMode, FpException};
pub use jit::{
    CompiledKernel, KernelCache, KernelId, KernelTable, MatRef, PlainElementwise, PlainReduce,
    gemm_f32, gemm_f32_refs,
};
pub use kernel::{
    BinaryOp, CmpOp, DType, ElementwiseKernel, Expr, KernelSpec, MatMulKernel, ReduceKernel,
    ReduceOp, UnaryOp,
};

/// What went wrong building or compiling a kernel.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodegenError {
    /// A kernel expression is ill-typed.
    #[error("kernel type error: {0}")]
    Type(String),
    /// Cranelift rejected the generated code or the host ISA is unsupported.
    #[error("JIT compilation failed: {0}")]
    Jit(String),
    /// A checked kernel raised a floating-point exception (`floating_point_behaviour`).
    #[error("floating-point exception: {exception} at element {element} of the vertex's output {output} (floating_point_behaviour.{})", exception.flag())]
    FloatingPoint {
        /// What was raised.
        exception: FpException,
        /// The kernel output whose expression raised it.
        output: usize,
        /// The first element (of the vertex's outputs) that raised it.
        element: usize,
    },
}
