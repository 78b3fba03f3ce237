//! The runtime's error type: everything a user needs to fix a system, a program or its
//! inputs (which tile, how many bytes, which tensor).

/// How a tile's always-live bytes split, for an out-of-memory report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeSplit {
    /// Kernel and codelet code.
    pub code: u64,
    /// Vertex state.
    pub vertex_state: u64,
    /// Control code.
    pub control: u64,
    /// Tensors live for the whole program (constants, weights).
    pub always_live_tensors: u64,
}

impl CodeSplit {
    /// `" (always live: ...)"`, for the error message.
    fn describe(&self) -> String {
        format!(
            " (always live: {} B of code, {} B of vertex state, {} B of control code, {} B of constants and weights; the rest variables and activations)",
            self.code, self.vertex_state, self.control, self.always_live_tensors
        )
    }
}

/// What went wrong in the IPU Model.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RuntimeError {
    /// A system that cannot be built (IPU count, routes).
    #[error("invalid system: {0}")]
    InvalidSystem(String),
    /// A tile's tensors (and code) do not fit in its memory.
    #[error(
        "IPU {ipu} tile {tile} is out of memory: {} need {needed} bytes but the tile has {available}{}; largest tensors there: {}",
        if code.is_some() { "its tensors and code" } else { "its tensors" },
        code.as_ref().map(CodeSplit::describe).unwrap_or_default(),
        largest.iter().map(|(n, b)| format!("{n} ({b} B)")).collect::<Vec<_>>().join(", ")
    )]
    OutOfMemory {
        /// The IPU.
        ipu: usize,
        /// The tile.
        tile: usize,
        /// Bytes the tile needs.
        needed: u64,
        /// Bytes a tile has.
        available: u64,
        /// The largest tensors on the tile (name, bytes on this tile), largest first.
        largest: Vec<(String, u64)>,
        /// When code was counted: how the always-live bytes split.
        code: Option<CodeSplit>,
    },
    /// An executable that is malformed (bad ids, mappings, regions, types).
    #[error("invalid executable: {0}")]
    InvalidExecutable(String),
    /// A program reads a tensor before anything writes it.
    #[error("the program reads tensor {tensor} ({context}) but nothing has written it")]
    UninitialisedRead {
        /// The tensor.
        tensor: String,
        /// The program step reading it.
        context: String,
    },
    /// A kernel failed to compile.
    #[error("compute set {compute_set}, vertex {vertex}: {message}")]
    Kernel {
        /// The compute set.
        compute_set: String,
        /// The vertex's index in it.
        vertex: usize,
        /// What the compiler said.
        message: String,
    },
    /// A host-to-device stream had no buffer left when the program read it.
    #[error(
        "stream {stream} ran dry: the program reads its value {wanted} into tensor {tensor}, {fed} were fed"
    )]
    StreamDry {
        /// The stream.
        stream: String,
        /// The tensor it was to fill.
        tensor: String,
        /// Which value the program asked for (1-based).
        wanted: usize,
        /// How many values the host fed.
        fed: usize,
    },
    /// A problem while running: host buffers missing or of the wrong size.
    #[error("{0}")]
    Run(String),
}
