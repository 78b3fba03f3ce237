//! Compile errors: each names the instruction (and its line) a user has to change.

use runtime::RuntimeError;

/// What stops a module compiling.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CompileError {
    /// The module given to the compiler is not valid HLO (shapes that do not agree, ...).
    #[error("the module does not verify: {0}")]
    InvalidModule(String),
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
    /// Calls nested deeper than lowering's recursion allows.
    #[error(
        "calls nest {depth} computations deep from the entry; the limit is {limit} (lowering recurses through them)"
    )]
    TooDeep {
        /// The module's call depth.
        depth: usize,
        /// The limit (`xla_ir::eval::MAX_CALL_DEPTH`).
        limit: usize,
    },
    /// A value bigger than the IPU Model can hold.
    #[error(
        "{at}: instruction '{instruction}': its value {shape} needs {bytes} bytes on the device, more than the IPU Model holds in host memory for one value ({limit} bytes, the reference evaluator's limit too)"
    )]
    TooBig {
        /// Where (`computation 'c', line L`).
        at: String,
        /// The instruction's name.
        instruction: String,
        /// Its shape.
        shape: String,
        /// Its bytes in device storage (saturating).
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// A tile's live tensors do not fit its memory.
    #[error(transparent)]
    OutOfMemory(Box<TileOutOfMemory>),
    /// A pipeline the compiler cannot build (stages, parameters, results).
    #[error("pipeline: {0}")]
    Pipeline(String),
    /// An instruction sharded onto an IPU the program does not have.
    #[error(
        "{at}: instruction '{instruction}' is sharded onto IPU {device} (sharding={{maximal device={device}}}) but the program has {ipus} IPU{}: ask for more with auto_select_ipus or --num-ipus",
        if *ipus == 1 { "" } else { "s" }
    )]
    Sharding {
        /// Where.
        at: String,
        /// The instruction.
        instruction: String,
        /// The IPU its sharding names.
        device: i64,
        /// IPUs the program has.
        ipus: usize,
    },
    /// A device loop (steps per execution) that cannot run this module as asked.
    #[error("device loop of {iterations} iterations: {reason}")]
    DeviceLoop {
        /// The iterations asked for.
        iterations: u64,
        /// What is wrong, naming the parameter or output.
        reason: String,
    },
    /// `--stop-after` names no pass of the pipeline.
    #[error("--stop-after '{name}': there is no such pass; the passes are {}", known.join(", "))]
    UnknownPass {
        /// The name given.
        name: String,
        /// The pipeline's passes, in order.
        known: Vec<String>,
    },
    /// A pass failed (a compiler bug: the message says which pass and why).
    #[error("pass '{pass}' failed: {reason}")]
    Pass {
        /// The pass.
        pass: String,
        /// What went wrong.
        reason: String,
    },
    /// A `--dump-to` file could not be written.
    #[error("{path}: cannot write the dump: {reason}")]
    Dump {
        /// The file.
        path: String,
        /// The operating system's reason.
        reason: String,
    },
    /// The program does not fit, or the executable is rejected by the IPU Model.
    #[error(transparent)]
    Device(#[from] RuntimeError),
}

/// Which tile ran out of memory, when, and what was live on it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "IPU {ipu} tile {tile} is out of memory{}: {needed} bytes are needed at step '{step}' (its highest tensor: '{when}') but the tile has {available}; live on the tile then: {}{}",
    virtual_tile.map(|(v, n)| format!(" even out of core (as virtual tile {v} of {n} per IPU, paged through Streaming Memory)")).unwrap_or_default(),
    live.iter().map(|(n, b)| format!("{n} ({b} B)")).collect::<Vec<_>>().join(", "),
    if hint.is_empty() { String::new() } else { format!("; {hint}") }
)]
pub struct TileOutOfMemory {
    /// The IPU.
    pub ipu: usize,
    /// The (physical) tile.
    pub tile: usize,
    /// Out of core: the virtual tile that does not fit, and the virtual tiles per IPU.
    pub virtual_tile: Option<(usize, usize)>,
    /// What else could make it fit (empty when nothing is known).
    pub hint: String,
    /// Bytes the tile needs at its peak.
    pub needed: u64,
    /// Bytes a tile has.
    pub available: u64,
    /// The tensor placed highest on the tile: its end is the bytes needed.
    pub when: String,
    /// The step at which the tile holds the most while that tensor is live.
    pub step: String,
    /// The largest tensors live on the tile at the peak (name, bytes there).
    pub live: Vec<(String, u64)>,
}
