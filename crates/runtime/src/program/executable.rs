//! The device program an engine runs: tensors mapped onto tiles, host streams, compute sets
//! of vertices, functions and the program tree. It knows nothing of HLO.

use crate::device::target::Target;
use crate::program::codelet::CodeletRef;
use crate::program::collective::{Collective, CollectiveId, Replication};
pub use crate::program::runs::{Run, RunSource, Runs};
use codegen::{DType, KernelSpec};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

pub use crate::program::tensor_id::TensorId;

/// Index of a stream in [`Executable::streams`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StreamId(pub u32);

/// Index of a compute set in [`Executable::compute_sets`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ComputeSetId(pub u32);

/// Index of a function in [`Executable::functions`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FunctionId(pub u32);

/// A run of a tensor's elements held by one tile, at a byte offset in that tile's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interval {
    /// The IPU.
    pub ipu: usize,
    /// The tile on that IPU.
    pub tile: usize,
    /// First element of the tensor in this interval.
    pub start: usize,
    /// Number of elements.
    pub len: usize,
    /// Byte offset of the first element in the tile's memory.
    pub offset: u64,
}

/// A tensor: a flat array of elements spread over tiles.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tensor {
    /// A name for errors and profiles.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Dimensions (row-major); their product is `elements`.
    pub shape: Vec<usize>,
    /// Number of elements.
    pub elements: usize,
    /// Where each element lives; every element exactly once.
    pub mapping: Vec<Interval>,
    /// Contents written when the executable is loaded (constants), in element order. A
    /// tensor with contents must not share tile memory with any other tensor.
    #[serde(default)]
    pub init: Option<Vec<u8>>,
    /// Live for the whole program (constants, weights, results held to the end), as the
    /// compiler planned it: what a memory report shows as always live.
    #[serde(default)]
    pub always_live: bool,
    /// The spans of steps (indices into [`Executable::liveness`], inclusive, sorted and
    /// disjoint) the compiler planned the tensor live in: what a memory report reads to say
    /// what a tile holds at its peak. Empty when the compiler did not say.
    #[serde(default)]
    pub live_steps: Vec<(u64, u64)>,
}

impl Tensor {
    /// Whether the compiler planned the tensor live at `step` (of [`Executable::liveness`]).
    pub fn live_at(&self, step: u64) -> bool {
        let i = self.live_steps.partition_point(|s| s.1 < step);
        self.live_steps.get(i).is_some_and(|s| s.0 <= step)
    }
}

/// The compiler's liveness at one step of the program as it was lowered (a loop body or
/// function once): the step, and the bytes of every tensor live there, on all tiles.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LivePoint {
    /// What the step runs (a compute set, a copy, a stream).
    pub step: String,
    /// Bytes live.
    pub bytes: u64,
}

/// Which way a host stream moves data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Direction {
    /// Host to device (an infeed, or an input).
    HostToDevice,
    /// Device to host (an outfeed, or an output).
    DeviceToHost,
}

/// A host stream: each transfer moves one buffer of `elements` elements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stream {
    /// A name for errors and profiles (and the key host buffers are given by).
    pub name: String,
    /// Direction.
    pub direction: Direction,
    /// Element type.
    pub dtype: DType,
    /// Elements per transfer.
    pub elements: usize,
}

/// A run of a tensor's elements a vertex reads or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Region {
    /// The tensor.
    pub tensor: TensorId,
    /// First element.
    pub start: usize,
    /// Number of elements.
    pub len: usize,
}

/// A vertex's regions read: inline up to two (most vertices read one or two regions;
/// hundreds of thousands of vertices each allocated a vector).
pub type Regions = smallvec::SmallVec<[Region; 2]>;

/// A vertex's regions written: inline one (few kernels write more), so that a vertex takes
/// 24 bytes less (a transformer's compile writes 290 000 of them to fresh memory).
pub type Written = smallvec::SmallVec<[Region; 1]>;

/// A kernel instance on one tile, connected to regions of that tile's memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Vertex {
    /// What it computes: shared by the vertices of one kernel (a kernel repeats on every
    /// tile of a compute set, and an expression kernel is a tree).
    pub kernel: Arc<KernelSpec>,
    /// The IPU.
    pub ipu: usize,
    /// The tile.
    pub tile: usize,
    /// Regions read, one per kernel input.
    pub inputs: Regions,
    /// Regions written, one per kernel output.
    pub outputs: Written,
    /// For reductions: elements per run (the output region holds one partial per run).
    pub run_length: usize,
    /// 0 for a vertex one worker runs. Otherwise a multi-vertex (PopLibs' `MultiVertex`,
    /// element-wise kernels only): the tile's workers share its elements in runs starting
    /// on multiples of `grain`, at least two grains each ([`crate::cost::worker_shares`]),
    /// and each share costs what a vertex of its elements would.
    #[serde(default)]
    pub grain: usize,
}

/// Index of a codelet in [`Executable::codelets`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CodeletId(pub u32);

/// A codelet instance on one tile: a native vertex (like Poplar's C++ codelets) for work the
/// JIT's kernel IR does not express: sorts, gathers, scatters, dynamic slices.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CodeletVertex {
    /// What it runs.
    pub codelet: CodeletId,
    /// The IPU.
    pub ipu: usize,
    /// The tile.
    pub tile: usize,
    /// Regions read, in the codelet's input order.
    pub inputs: Vec<Region>,
    /// Regions written, in the codelet's output order.
    pub outputs: Vec<Region>,
}

/// Vertices that run in one compute phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComputeSet {
    /// A name for profiles.
    pub name: String,
    /// The JIT-compiled vertices.
    pub vertices: Vec<Vertex>,
    /// The codelet vertices.
    #[serde(default)]
    pub codelet_vertices: Vec<CodeletVertex>,
}

/// Index of a rearrangement in [`Executable::rearranges`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RearrangeId(pub u32);

/// A data-movement step: the destination's elements gathered from runs of source tensors (or
/// a fill value). Transposes, slices, concatenations, pads and broadcasts compile to these;
/// the engine turns them into exchange and IPU-Link moves at load time, as Poplar turns
/// copies between tensor views into exchange code.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rearrange {
    /// A name for profiles.
    pub name: String,
    /// The tensor written (every element covered by exactly one run).
    pub dst: TensorId,
    /// The tensors read (all of the destination's type).
    pub sources: Vec<TensorId>,
    /// One element's bytes, for `RunSource::Fill` runs.
    pub fill: Vec<u8>,
    /// The runs, in any order (in blocks of evenly stepping runs).
    pub runs: Runs,
}

/// The program tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Program {
    /// Run each in turn.
    Sequence(Vec<Program>),
    /// Run a compute set (one BSP superstep: compute, then sync).
    Execute(ComputeSetId),
    /// Run a rearrangement (an exchange of element runs).
    Rearrange(RearrangeId),
    /// Copy all of `src` to `dst` (same type and size): on-tile or through an exchange.
    Copy {
        /// Source tensor.
        src: TensorId,
        /// Destination tensor.
        dst: TensorId,
    },
    /// Run the body `count` times.
    Repeat {
        /// Iterations.
        count: u64,
        /// The body.
        body: Box<Program>,
    },
    /// Run `condition`, then while the pred scalar `predicate` is true run `body` and
    /// `condition` again.
    RepeatWhileTrue {
        /// Computes the predicate.
        condition: Box<Program>,
        /// A one-element pred tensor.
        predicate: TensorId,
        /// The body.
        body: Box<Program>,
    },
    /// Branch on a one-element pred tensor.
    If {
        /// The predicate.
        predicate: TensorId,
        /// Runs when true.
        then: Box<Program>,
        /// Runs when false.
        otherwise: Box<Program>,
    },
    /// Branch on a one-element s32 tensor: case i, or `default` when out of range.
    Switch {
        /// The index.
        index: TensorId,
        /// The cases.
        cases: Vec<Program>,
        /// Runs when no case matches.
        default: Box<Program>,
    },
    /// Run a function.
    Call(FunctionId),
    /// Move one buffer between a host stream and a tensor.
    StreamCopy {
        /// The stream.
        stream: StreamId,
        /// The tensor written (host to device) or read (device to host).
        tensor: TensorId,
    },
    /// A barrier across all tiles (and IPUs).
    Sync,
    /// Run a collective with the other replicas (a replicated executable).
    Collective(CollectiveId),
    /// Branches on disjoint IPUs (pipeline stages, say) run side by side, each through its
    /// own steps on its own IPUs (the seed's stages "working on different micro-batches at
    /// once"); the `Parallel` lasts as long as its slowest branch. A branch holds no
    /// data-dependent control flow and runs no compute set on another branch's IPUs.
    Parallel(Vec<Program>),
}

/// Everything an engine needs to run a program.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Executable {
    /// The target every IPU models.
    pub target: Target,
    /// IPUs used.
    pub num_ipus: usize,
    /// Tensors.
    pub tensors: Vec<Tensor>,
    /// Host streams.
    pub streams: Vec<Stream>,
    /// Compute sets.
    pub compute_sets: Vec<ComputeSet>,
    /// Functions programs can call.
    pub functions: Vec<Program>,
    /// Rearrangements programs run.
    #[serde(default)]
    pub rearranges: Vec<Rearrange>,
    /// Native codelets; they are code, so serde skips them (an executable read back from
    /// JSON has none, and one whose compute sets use them fails to load). The compiler that
    /// made them stores and rebuilds its own (`compiler::stored`, through
    /// [`crate::Codelet::as_any`]).
    #[serde(skip)]
    pub codelets: Vec<CodeletRef>,
    /// Collectives programs run.
    #[serde(default)]
    pub collectives: Vec<Collective>,
    /// How many replicas run the program, and where they sit.
    #[serde(default)]
    pub replication: Replication,
    /// The IPU's floating-point control for element-wise vertices (exceptions, NaN on
    /// overflow, stochastic rounding); all off by default.
    #[serde(default)]
    pub floating_point: codegen::FloatMode,
    /// The compiler's liveness over the program's steps (empty when it did not say).
    #[serde(default)]
    pub liveness: Vec<LivePoint>,
    /// The main program.
    pub program: Program,
}
