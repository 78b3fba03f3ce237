//! The IPU Model: a bulk-synchronous simulation of IPUs, their tiles, the on-chip exchange
//! and the IPU-Links between chips.
//!
//! Like Poplar under the XLA backend, this crate is a device API that knows nothing of HLO:
//! targets ([`Target`]), multi-IPU systems ([`System`], [`SelectionOrder`]), executables of
//! tensors, compute sets and programs ([`Executable`], [`ExecutableBuilder`]), and an
//! [`Engine`] that checks and runs them as BSP supersteps into a [`Profile`]. Vertex
//! kernels are JIT-compiled by the `codegen` crate.
//!
//! The crate has four layers; dependencies run `exec → model → program → device` only
//! (see `README.md` beside `src/` for how to add a step kind):
//! - `device/`: targets, systems of IPUs, selection orders;
//! - `program/`: the executable format, its builder, codelets and the one structural
//!   walker of a program;
//! - `model/`: the load-time checks, what each tile holds and what each step costs, from
//!   the executable and the target alone. [`estimate`] gives the [`Profile`] a run would record without running;
//! - `exec/`: the engine, which computes the same bytes on the host as fast as it can and
//!   takes every cycle and byte of its profile from `model/`.
#![warn(missing_docs)]

mod device;
mod error;
mod exec;
mod model;
mod program;

pub use device::selection;
pub use device::selection::{DeviceId, SelectionOrder, device_ids};
pub use device::system::{Hop, LinkKind, System};
pub use device::target::{IpuVersion, Target};
pub use error::{CodeSplit, RuntimeError};
pub use exec::engine::{Engine, EngineOptions, HostIo, LoadTimes, Progress};
pub use exec::host_times::{HostStep, HostStepKind, HostTimes, StepTime};
pub use exec::rendezvous::Transport;
pub use exec::replicated::{COLLECTIVE_WAIT_LIMIT, ReplicatedEngine};
pub use model::code;
pub use model::cost;
pub use model::estimate::{estimate, estimate_parts, estimate_replaying};
pub use model::layout::{live_on_tile, tile_at_peak};
pub use model::profile::{
    Beside, DataDependent, IpuActivity, OutOfCore, Profile, StepKind, StepProfile, TensorSize,
    TileAtPeak, TileMemory, TileTensor, Totals,
};
pub use program::builder::ExecutableBuilder;
pub use program::codelet::{Codelet, CodeletRef, GroupMember, SameBytes, VertexCost};
pub use program::collective::{Blocks, Collective, CollectiveId, CollectiveKind, Replication};
pub use program::executable::{
    CodeletId, CodeletVertex, ComputeSet, ComputeSetId, Direction, Executable, FunctionId,
    Interval, LivePoint, Program, Rearrange, RearrangeId, Region, Run, RunSource, Stream, StreamId,
    Tensor, TensorId, Vertex,
};
pub use program::runs::{RunBlock, Runs};
