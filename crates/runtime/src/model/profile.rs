//! What a run cost: per program step, per tile, and in total. Serialises to JSON.

use serde::{Deserialize, Serialize};

/// The kind of a program step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StepKind {
    /// A compute set (compute, then sync).
    Execute,
    /// A tensor copy (on-tile, exchange and/or IPU-Links).
    Copy,
    /// A host stream transfer.
    StreamCopy,
    /// A sync, or the sync a branch decision costs (or a replica's wait for the others
    /// at a collective).
    Sync,
    /// A phase of a collective between replicas (IPU-Links).
    Collective,
}

/// One executed program step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepProfile {
    /// The compute set, tensors or stream involved.
    pub name: String,
    /// What kind of step.
    pub kind: StepKind,
    /// Cycles in all.
    pub cycles: u64,
    /// Of which computing (the slowest tile).
    pub compute_cycles: u64,
    /// Of which synchronising.
    pub sync_cycles: u64,
    /// Of which exchanging, on chip or over IPU-Links, or streaming.
    pub exchange_cycles: u64,
    /// Bytes that crossed a tile boundary (exchange, IPU-Links or host link).
    pub bytes_moved: u64,
    /// Of which over IPU-Links.
    pub bytes_over_links: u64,
    /// Out of core: of `cycles`, paging between Streaming Memory and the tiles (absent
    /// from the JSON when 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub paging_cycles: u64,
    /// Out of core: bytes paged between Streaming Memory and the tiles (absent when 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub bytes_paged: u64,
    /// A program on several IPUs: the IPUs the step computes on, exchanges from or to, or
    /// streams to (absent for one IPU, and for syncs, which hold every IPU).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ipus: Vec<usize>,
    /// Tiles the step computes on, or reads or writes (absent when 0: syncs, collectives).
    #[serde(default, skip_serializing_if = "is_zero_usize")]
    pub tiles: usize,
    /// A step of a `Parallel` branch other than the slowest (whose cycles are the
    /// `Parallel`'s, so this step's count as 0 above): when it ran and what it took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beside: Option<Beside>,
}

/// When a step beside the slowest branch of a `Parallel` ran, and its own cycles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Beside {
    /// The branch whose cycles the `Parallel` took.
    pub slowest_branch: usize,
    /// Cycles from the start of the run to this step's start.
    pub start: u64,
    /// Its cycles, computing, exchanging and synchronising.
    pub cycles: u64,
    /// Of which computing.
    pub compute_cycles: u64,
    /// Of which exchanging.
    pub exchange_cycles: u64,
    /// Of which synchronising.
    pub sync_cycles: u64,
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

fn is_zero_usize(x: &usize) -> bool {
    *x == 0
}

/// The memory a tile uses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TileMemory {
    /// The IPU.
    pub ipu: usize,
    /// The tile.
    pub tile: usize,
    /// Bytes in use: the span of its tensors, and its code.
    pub bytes_used: u64,
    /// Bytes left.
    pub bytes_free: u64,
    /// Of `bytes_used`, bytes live for the whole program: tensors (constants, weights,
    /// results held to the end) and all of the code below (absent when 0). The rest is
    /// not always live: variables and activations.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub always_live_bytes: u64,
    /// Of `always_live_bytes`, the code of the kernels and codelets its vertices run.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub code_bytes: u64,
    /// Of `always_live_bytes`, the state of its vertices.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub vertex_state_bytes: u64,
    /// Of `always_live_bytes`, the control code of the steps it runs.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub control_code_bytes: u64,
}

impl TileMemory {
    /// Its code, vertex state and control code together.
    pub fn all_code_bytes(&self) -> u64 {
        self.code_bytes + self.vertex_state_bytes + self.control_code_bytes
    }
}

/// Sums over all steps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// Cycles computing.
    pub compute_cycles: u64,
    /// Cycles synchronising.
    pub sync_cycles: u64,
    /// Cycles exchanging or streaming.
    pub exchange_cycles: u64,
    /// Bytes exchanged between tiles of one IPU.
    pub bytes_exchanged: u64,
    /// Bytes sent over IPU-Links.
    pub bytes_over_links: u64,
    /// Bytes streamed to or from the host.
    pub bytes_streamed: u64,
    /// Out of core: cycles paging (absent from the JSON when 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub paging_cycles: u64,
    /// Out of core: bytes paged between Streaming Memory and the tiles (absent when 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub bytes_paged: u64,
}

/// The tile using the most memory of `tiles` (the lowest-numbered of equals).
pub fn busiest(tiles: &[TileMemory]) -> Option<&TileMemory> {
    tiles
        .iter()
        .max_by_key(|t| (t.bytes_used, usize::MAX - t.tile))
}

/// The profile of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// The target (`ipu2`).
    pub target: String,
    /// IPUs used.
    pub num_ipus: usize,
    /// Tiles per IPU (virtual ones out of core).
    #[serde(default)]
    pub tiles_per_ipu: usize,
    /// Tile clock in Hz.
    pub clock_hz: f64,
    /// Cycles of the whole run.
    pub total_cycles: u64,
    /// Simulated time at the target's clock.
    pub seconds: f64,
    /// Sums by kind.
    pub totals: Totals,
    /// Every executed step, in order.
    pub steps: Vec<StepProfile>,
    /// Memory of every tile that holds data (out of core: of every virtual tile).
    pub tiles: Vec<TileMemory>,
    /// Present when the program ran out of core: laid out on more tiles than the IPU has,
    /// paged through Streaming Memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_of_core: Option<OutOfCore>,
    /// The value of every loop predicate and branch index the run read, in order (absent
    /// when the program has no control flow on data). [`estimate_replaying`] these gives
    /// this profile again.
    ///
    /// [`estimate_replaying`]: crate::estimate_replaying
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub decisions: Vec<i64>,
    /// In an estimate: the loops and branches whose course depends on data the estimate
    /// does not have, and how each was counted (absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub data_dependent: Vec<DataDependent>,
    /// A program on several IPUs: what each IPU did (absent for one IPU).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ipus: Vec<IpuActivity>,
    /// The compiler's liveness over the program's steps as lowered (absent when the
    /// executable does not carry it, and from profiles of the engine's runs: copy
    /// [`Executable::liveness`] in to write a report).
    ///
    /// [`Executable::liveness`]: crate::Executable::liveness
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub liveness: Vec<crate::program::executable::LivePoint>,
    /// The largest tensors, largest first (at most 20).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub largest_tensors: Vec<TensorSize>,
    /// What the busiest tile holds when its memory peaks (absent when the executable does
    /// not say when its tensors are live).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_tile_contents: Option<TileAtPeak>,
}

/// What one tile holds at its peak: the step, while the tensor placed highest in its
/// memory is live, at which it holds the most, and every tensor live there then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TileAtPeak {
    /// The IPU.
    pub ipu: usize,
    /// The tile.
    pub tile: usize,
    /// The step (as the compiler's liveness names it).
    pub step: String,
    /// The tensors live on the tile then, largest first (at most [`TileAtPeak::LISTED`]).
    pub tensors: Vec<TileTensor>,
    /// Tensors live there too, beyond those listed.
    #[serde(default, skip_serializing_if = "is_zero_usize")]
    pub others: usize,
    /// Their bytes on the tile.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub others_bytes: u64,
}

impl TileAtPeak {
    /// Tensors a profile lists by name.
    pub const LISTED: usize = 12;
}

/// A tensor's bytes on one tile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TileTensor {
    /// Its name.
    pub name: String,
    /// Bytes on the tile.
    pub bytes: u64,
    /// Whether it lives for the whole program.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub always_live: bool,
}

/// A tensor's size and spread, for memory reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorSize {
    /// Its name.
    pub name: String,
    /// Bytes on all tiles.
    pub bytes: u64,
    /// Tiles it lives on.
    pub tiles: usize,
    /// Whether it lives for the whole program.
    pub always_live: bool,
}

/// What one IPU of a multi-IPU program did during a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpuActivity {
    /// The IPU.
    pub ipu: usize,
    /// Cycles of the steps it took part in: computing on its tiles, exchanging from or to
    /// them, streaming to or from the host (a branch of a `Parallel` counts its own
    /// cycles). The rest of the run it waited: in syncs, or for other IPUs.
    pub busy_cycles: u64,
    /// Bytes over IPU-Links in the steps it took part in (sent or received).
    pub bytes_over_links: u64,
}

impl Profile {
    /// The tile using the most memory (the lowest-numbered of equals).
    pub fn peak_tile(&self) -> Option<&TileMemory> {
        busiest(&self.tiles)
    }

    /// The fraction of the IPUs' time spent waiting (`1 - Σ busy / (IPUs × total)`): a
    /// pipeline's bubble, a sharded program's idle shards. 0 for one IPU.
    pub fn idle_fraction(&self) -> f64 {
        if self.ipus.is_empty() || self.total_cycles == 0 {
            return 0.0;
        }
        let busy: u64 = self
            .ipus
            .iter()
            .map(|a| a.busy_cycles.min(self.total_cycles))
            .sum();
        1.0 - busy as f64 / (self.ipus.len() as f64 * self.total_cycles as f64)
    }
}

/// A loop or branch whose course an estimate could not know, and how it was counted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum DataDependent {
    /// A `RepeatWhileTrue` whose trip count depends on data: one iteration (its condition,
    /// the branch and its body: `steps_per_iteration` steps from `first_step`) is counted,
    /// then the condition and branch that leave the loop.
    Loop {
        /// The predicate tensor.
        predicate: String,
        /// The index in `steps` of the counted iteration's first step.
        first_step: usize,
        /// Steps of one iteration.
        steps_per_iteration: usize,
        /// Cycles of one iteration: the profile's total grows by this for each trip more.
        cycles_per_iteration: u64,
    },
    /// An `If` or `Switch` whose branch depends on data: the costliest branch is counted
    /// (`steps` steps from `first_step`).
    Branch {
        /// The predicate or index tensor.
        predicate: String,
        /// The index in `steps` of the counted branch's first step.
        first_step: usize,
        /// Steps of the counted branch.
        steps: usize,
        /// The branch counted: for an If 0 is the false branch and 1 the true one; for a
        /// Switch, the case (the default is last).
        taken: usize,
        /// Branches there were.
        branches: usize,
    },
}

/// How a program ran out of core.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutOfCore {
    /// Virtual tiles per IPU the program is laid out on.
    pub virtual_tiles_per_ipu: usize,
    /// Tiles per IPU that run them (virtual tile `v` runs on tile `v % physical`).
    pub physical_tiles_per_ipu: usize,
}
