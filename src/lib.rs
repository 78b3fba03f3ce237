//! ipuxla: compile XLA HLO programs for Graphcore IPUs and run them on an IPU Model.
//!
//! This facade re-exports the workspace's crates; the `ipuxla` binary's command line
//! lives in [`cli`].

pub mod bench;
pub mod bench_modules;
pub mod cli;
pub mod corpus;
pub mod device;
pub mod device_loop;
pub mod differential;
pub mod encoder;
pub mod executable_cache;
pub mod host_split;
pub mod ipu_model;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod pipeline;
pub mod progress;
pub mod replicas;
pub mod report;
pub mod roofline;
pub mod trace;

pub use compiler;
pub use frontend;
pub use frontend::npy;
pub use runtime;
pub use xla_ir;
