//! The IPU Model: a bulk-synchronous simulation of IPUs, their tiles, the on-chip exchange
//! and the IPU-Links between chips.
//!
//! Like Poplar under the XLA backend, this crate is a device API that knows nothing of HLO:
//! targets ([`Target`]), multi-IPU systems ([`System`], [`SelectionOrder`]), executables of
//! tensors, compute sets and programs ([`Executable`], [`ExecutableBuilder`]), and an
//! [`Engine`] that checks and runs them as BSP supersteps, counting cycles and bytes per
//! tile into a [`Profile`]. Vertex kernels are JIT-compiled by the `codegen` crate.
#![warn(missing_docs)]

mod active_tiles;
mod buckets;
pub mod builder;
pub mod codelet;
mod compute_set;
pub mod cost;
pub mod engine;
pub mod error;
mod exchange;
pub mod executable;
mod kept_results;
pub(crate) mod operand_views;
mod paging;
mod product_batches;
pub mod profile;
mod rearrange;
mod scratch_reads;
pub mod selection;
pub mod system;
pub mod target;
mod validate;

pub use builder::ExecutableBuilder;
pub use codelet::{Codelet, CodeletRef};
pub use engine::{Engine, HostIo, HostTimes};
pub use error::RuntimeError;
pub use executable::{
    CodeletId, CodeletVertex, ComputeSet, ComputeSetId, Direction, Executable, FunctionId,
    Interval, Program, Rearrange, RearrangeId, Region, Run, RunSource, Stream, StreamId, Tensor,
    TensorId, Vertex,
};
pub use profile::{OutOfCore, Profile, StepKind, StepProfile};
pub use selection::{DeviceId, SelectionOrder, device_ids};
pub use system::{Hop, LinkKind, System};
pub use target::{IpuVersion, Target};
