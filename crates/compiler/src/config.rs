//! `IpuConfig`: the options of the seed's `IPUConfig` this compiler uses, with the seed's
//! names and defaults, loadable from JSON (`--config FILE.json`). Unknown keys are errors,
//! so a misspelt option never silently keeps its default.

use crate::CompileError;
use runtime::IpuVersion;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The IPU configuration (the seed's `IPUConfig` hierarchy, for the options used so far).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IpuConfig {
    /// `ipu_model.*`: the simulated IPU.
    pub ipu_model: IpuModelConfig,
    /// `auto_select_ipus`: IPUs to use; `[]` (the default) means one.
    pub auto_select_ipus: AutoSelectIpus,
    /// `matmuls.*`: matrix-product planner options.
    pub matmuls: PlannerConfig,
    /// `convolutions.*`: convolution planner options.
    pub convolutions: PlannerConfig,
    /// `floating_point_behaviour.*`: IEEE exception and rounding modes.
    pub floating_point_behaviour: FloatingPointBehaviour,
    /// `scheduling.*`: instruction scheduling.
    pub scheduling: SchedulingConfig,
    /// `optimizations.*`: graph optimisations.
    pub optimizations: OptimizationsConfig,
    /// `allow_recompute` (default false, as the seed's `IPUConfig`): forward values kept
    /// live for a much later read are computed again before it (cheap element-wise ops,
    /// conversions and data movement; never random or stateful ops, reductions, products
    /// or checkpointed values), lowering peak memory for at most 30 % more work.
    pub allow_recompute: bool,
    /// `selection_order`: the order in which the program's IPUs (its shards, and the
    /// replicas of a replicated module) take the IPUs of the ladder: "AUTO" (the default:
    /// replicas in HOOF order, so ring collectives close on a direct link; shards in HOOF
    /// order when the first and last exchange values, else SNAKE; a flat multi-IPU program
    /// in natural order), "ZIGZAG", "SNAKE" or "HOOF". A program of one IPU refuses any
    /// order but AUTO.
    pub selection_order: String,
    /// `pipelining.*` (ipuxla's own section, with the seed's `pipeline()` argument names):
    /// how a module with `ipu_stage` attributes runs under `--iterations`.
    pub pipelining: PipeliningConfig,
    /// `device_loop.*` (ipuxla's own section, with the seed's names): steps per execution.
    pub device_loop: DeviceLoopConfig,
    /// `executable_cache_path` (TensorFlow for IPU's name for its executable cache; the
    /// CLI's `--executable-cache-dir`): a directory where every module compiled to run is
    /// stored, and from where later runs of the same module and config read it instead of
    /// compiling. "" (the default) caches nothing.
    pub executable_cache_path: String,
}

/// `device_loop.*`: how many times one execution runs the entry computation, and what is
/// kept of results produced every iteration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeviceLoopConfig {
    /// `iterations_per_loop` (the seed's `IPURunConfig` name; Keras `steps_per_execution`,
    /// the CLI's `--iterations`): unset (the default) runs the module once, as written; N
    /// runs it N times in one execution (a device loop: aliased parameters resident, fed
    /// parameters one slice per iteration). Only what knows the inputs can act on it (which
    /// parameters are fed depends on their shapes): `ipuxla run` and
    /// `ipuxla::device::run_on_ipu_model`; `compiler::compile` refuses it.
    pub iterations_per_loop: Option<u64>,
    /// `outfeed_mode` (the seed's `IPUOutfeedMode`): "ALL" (the default: every iteration's
    /// value, stacked) or "LAST".
    pub outfeed_mode: String,
}

impl Default for DeviceLoopConfig {
    fn default() -> DeviceLoopConfig {
        DeviceLoopConfig {
            iterations_per_loop: None,
            outfeed_mode: "ALL".into(),
        }
    }
}

impl DeviceLoopConfig {
    /// Whether `outfeed_mode` is LAST (checked: ALL or LAST, any case).
    pub fn keeps_last_only(&self) -> Result<bool, CompileError> {
        match self.outfeed_mode.to_ascii_uppercase().as_str() {
            "ALL" => Ok(false),
            "LAST" => Ok(true),
            other => Err(CompileError::Config(format!(
                "device_loop.outfeed_mode is '{other}'; it must be ALL or LAST"
            ))),
        }
    }
}

/// `pipelining.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PipeliningConfig {
    /// `pipeline_schedule`: "Grouped" (the default: every stage works at once, each on
    /// its own micro-batch), "Interleaved" (a training pipeline's IPUs alternate forward
    /// and backward stages; a forward pipeline, which has no backward stages, refuses it)
    /// or "Sequential" (one stage at a time, the seed's debug mode).
    pub pipeline_schedule: String,
    /// `device_mapping`: the IPU of each stage (empty, the default: stage K on IPU K).
    pub device_mapping: Vec<usize>,
    /// `recomputation_mode` (with `allow_recompute`, training pipelines): "Auto" (the
    /// default), "RecomputeThenBackpropagate" or "RecomputeAndBackpropagateInterleaved".
    pub recomputation_mode: String,
}

impl Default for PipeliningConfig {
    fn default() -> PipeliningConfig {
        PipeliningConfig {
            pipeline_schedule: "Grouped".into(),
            device_mapping: Vec::new(),
            recomputation_mode: "Auto".into(),
        }
    }
}

/// How a training pipeline recomputes its stages' forward passes when `allow_recompute`
/// is on (the seed's `pipeline(recomputation_mode=...)`): every stage but the last stashes
/// its inputs instead of the values its backward pass reads, and recomputes those.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecomputationMode {
    /// The seed's default: RecomputeThenBackpropagate for Grouped and Interleaved
    /// schedules, RecomputeAndBackpropagateInterleaved for Sequential.
    #[default]
    Auto,
    /// Recompute all of the stage's saved values, then run its backward pass (Grouped and
    /// Interleaved schedules).
    RecomputeThenBackpropagate,
    /// Recompute and backpropagate as one computation, scheduled together so values die
    /// as soon as the backward pass has read them: lower liveness (Grouped and Sequential
    /// schedules).
    RecomputeAndBackpropagateInterleaved,
}

impl RecomputationMode {
    /// The mode named `name` (case-insensitive).
    pub fn parse(name: &str) -> Result<RecomputationMode, CompileError> {
        match name.to_ascii_lowercase().as_str() {
            "auto" => Ok(RecomputationMode::Auto),
            "recomputethenbackpropagate" => Ok(RecomputationMode::RecomputeThenBackpropagate),
            "recomputeandbackpropagateinterleaved" => {
                Ok(RecomputationMode::RecomputeAndBackpropagateInterleaved)
            }
            _ => Err(CompileError::Config(format!(
                "pipelining.recomputation_mode is '{name}'; it must be Auto, RecomputeThenBackpropagate or RecomputeAndBackpropagateInterleaved"
            ))),
        }
    }

    /// The mode used with `schedule`: Auto resolved as the seed does; a pair the seed does
    /// not support is an error.
    pub fn for_schedule(
        self,
        schedule: PipelineSchedule,
    ) -> Result<RecomputationMode, CompileError> {
        use PipelineSchedule::*;
        use RecomputationMode::*;
        match (self, schedule) {
            (Auto, Grouped | Interleaved) => Ok(RecomputeThenBackpropagate),
            (Auto, Sequential) => Ok(RecomputeAndBackpropagateInterleaved),
            (RecomputeThenBackpropagate, Sequential) => Err(CompileError::Pipeline(
                "RecomputeThenBackpropagate is not supported with the Sequential schedule (the seed supports it with Grouped and Interleaved); use RecomputeAndBackpropagateInterleaved or Auto".into(),
            )),
            (RecomputeAndBackpropagateInterleaved, Interleaved) => Err(CompileError::Pipeline(
                "RecomputeAndBackpropagateInterleaved is not supported with the Interleaved schedule (the seed supports it with Grouped and Sequential); use RecomputeThenBackpropagate or Auto".into(),
            )),
            (mode, _) => Ok(mode),
        }
    }
}

/// A pipeline schedule (`pipelining.pipeline_schedule`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PipelineSchedule {
    /// Every stage at once, each on its own micro-batch; in training, each IPU runs its
    /// stage's forward pass and then its backward pass in every step (the seed's default).
    Grouped,
    /// Training only: in each step an IPU runs either a forward or a backward stage, a
    /// backward stage as soon as its activations arrive: fewer activations are stashed
    /// (less memory), but steps mixing forward and backward stages last as long as the
    /// backward ones (slower).
    Interleaved,
    /// One stage at a time (the seed's debug mode: scheduled as a sharded model).
    Sequential,
}

impl PipelineSchedule {
    /// The schedule named `name` (case-insensitive: grouped, interleaved, sequential).
    pub fn parse(name: &str) -> Result<PipelineSchedule, CompileError> {
        match name.to_ascii_lowercase().as_str() {
            "grouped" => Ok(PipelineSchedule::Grouped),
            "interleaved" => Ok(PipelineSchedule::Interleaved),
            "sequential" => Ok(PipelineSchedule::Sequential),
            other => Err(CompileError::Config(format!(
                "pipelining.pipeline_schedule is '{other}'; it must be Grouped, Interleaved or Sequential"
            ))),
        }
    }
}

impl PipeliningConfig {
    /// The schedule, checked.
    pub fn schedule(&self) -> Result<PipelineSchedule, CompileError> {
        PipelineSchedule::parse(&self.pipeline_schedule)
    }

    /// The recomputation mode, checked.
    pub fn recomputation_mode(&self) -> Result<RecomputationMode, CompileError> {
        RecomputationMode::parse(&self.recomputation_mode)
    }
}

impl Default for IpuConfig {
    fn default() -> IpuConfig {
        IpuConfig {
            ipu_model: IpuModelConfig::default(),
            auto_select_ipus: AutoSelectIpus::default(),
            matmuls: PlannerConfig::default(),
            convolutions: PlannerConfig::default(),
            floating_point_behaviour: FloatingPointBehaviour::default(),
            scheduling: SchedulingConfig::default(),
            optimizations: OptimizationsConfig::default(),
            allow_recompute: false,
            selection_order: "AUTO".into(),
            pipelining: PipeliningConfig::default(),
            device_loop: DeviceLoopConfig::default(),
            executable_cache_path: String::new(),
        }
    }
}

/// `auto_select_ipus`: an int, or a list with one entry per device (the IPUs it controls).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AutoSelectIpus {
    /// One device of this many IPUs.
    Count(usize),
    /// One entry per device (the IPUs it controls); a module runs on one device, chosen by
    /// [`IpuConfig::for_device`] (`--device K`); `check` refuses a list of several.
    PerDevice(Vec<usize>),
}

impl Default for AutoSelectIpus {
    fn default() -> AutoSelectIpus {
        AutoSelectIpus::PerDevice(Vec::new())
    }
}

impl AutoSelectIpus {
    /// IPUs the compiled program uses.
    pub fn num_ipus(&self) -> usize {
        match self {
            AutoSelectIpus::Count(n) => *n,
            AutoSelectIpus::PerDevice(v) => v.first().copied().unwrap_or(1),
        }
    }

    /// The IPUs of each device it configures (the seed's `/device:IPU:0`, `/device:IPU:1`,
    /// ...): one per list entry; an int, or nothing, is one device.
    pub fn devices(&self) -> Vec<usize> {
        match self {
            AutoSelectIpus::Count(n) => vec![*n],
            AutoSelectIpus::PerDevice(v) if v.is_empty() => vec![1],
            AutoSelectIpus::PerDevice(v) => v.clone(),
        }
    }
}

/// `ipu_model.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IpuModelConfig {
    /// `ipu_model.version`: "ipu1" or "ipu2" (default "ipu2").
    pub version: String,
    /// `ipu_model.tiles_per_ipu`: tiles per simulated IPU; 0 (the default) is the version's
    /// standard count.
    pub tiles_per_ipu: usize,
    /// `ipu_model.compile_ipu_code` (default true): the seed's "also compile real IPU code
    /// (reported memory then includes code)": tile memory holds the kernels' code, vertex
    /// state and control code beside the tensors. False counts tensors only.
    pub compile_ipu_code: bool,
    /// `ipu_model.streaming_memory` (ipuxla's own option, default true): a module too big
    /// for tile memory runs out of core, paged through Streaming Memory, on IPUs that have
    /// it (ipu2); false makes it fail with the out-of-memory report instead.
    pub streaming_memory: bool,
}

impl Default for IpuModelConfig {
    fn default() -> IpuModelConfig {
        IpuModelConfig {
            version: "ipu2".into(),
            tiles_per_ipu: 0,
            compile_ipu_code: true,
            streaming_memory: true,
        }
    }
}

/// `matmuls.*` or `convolutions.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct PlannerConfig {
    /// `poplar_options`: `availableMemoryProportion` (default "0.6") and `partialsType`
    /// ("float", the default, or "half").
    pub poplar_options: BTreeMap<String, String>,
}

/// The type matrix-product and convolution partial sums are kept in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartialsType {
    /// f32 partials.
    Float,
    /// f16 partials (twice the AMP rate for f16 inputs, less precision).
    Half,
}

/// The planner options a lowering uses, checked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlannerOptions {
    /// Proportion of tile memory a plan may use for its temporaries.
    pub available_memory_proportion: f64,
    /// Partial sums' type.
    pub partials: PartialsType,
}

impl PlannerConfig {
    /// The checked options (`what` names the planner in errors).
    pub fn options(&self, what: &str) -> Result<PlannerOptions, CompileError> {
        let mut out = PlannerOptions {
            available_memory_proportion: 0.6,
            partials: PartialsType::Float,
        };
        for (key, value) in &self.poplar_options {
            match key.as_str() {
                "availableMemoryProportion" => {
                    let v: f64 = value.trim().parse().map_err(|_| {
                        CompileError::Config(format!(
                            "{what}.poplar_options.availableMemoryProportion is '{value}', not a number"
                        ))
                    })?;
                    if !(0.0..=1.0).contains(&v) {
                        return Err(CompileError::Config(format!(
                            "{what}.poplar_options.availableMemoryProportion is {v}; it must be between 0.0 and 1.0"
                        )));
                    }
                    out.available_memory_proportion = v;
                }
                "partialsType" => {
                    out.partials = match value.trim().to_ascii_lowercase().as_str() {
                        "float" => PartialsType::Float,
                        "half" => PartialsType::Half,
                        _ => {
                            return Err(CompileError::Config(format!(
                                "{what}.poplar_options.partialsType is '{value}'; it must be 'float' or 'half'"
                            )));
                        }
                    }
                }
                _ => {
                    return Err(CompileError::Config(format!(
                        "{what}.poplar_options has unknown option '{key}' (known: availableMemoryProportion, partialsType)"
                    )));
                }
            }
        }
        Ok(out)
    }
}

/// `floating_point_behaviour.*` (all default false, as `IPUConfig` has them). They act on
/// the element-wise vertices (fused JIT kernels): an exception stops the run with an error
/// naming the compute set, IPU, tile and element; reductions and matrix products compute
/// as IEEE defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FloatingPointBehaviour {
    /// Invalid operations (a NaN made from non-NaN operands: 0/0, ∞-∞, √-1) raise an
    /// exception.
    pub inv: bool,
    /// Division by zero (and the log of zero) raises an exception.
    pub div0: bool,
    /// Overflow (an infinity made from finite operands) raises an exception.
    pub oflo: bool,
    /// Stochastic rounding of f16 results (f32 to f16 conversions and f16 arithmetic):
    /// each rounds up with probability equal to its distance from the f16 below.
    pub esr: bool,
    /// Overflow gives NaN instead of an infinity.
    pub nanoo: bool,
    /// Enables all five.
    pub set_all: bool,
    /// ipuxla's own: the seed stochastic rounding starts from (the seed's
    /// `reset_ipu_seed`); the same seed rounds the same way on every run (default 1).
    pub esr_seed: u64,
}

impl Default for FloatingPointBehaviour {
    fn default() -> FloatingPointBehaviour {
        FloatingPointBehaviour {
            inv: false,
            div0: false,
            oflo: false,
            esr: false,
            nanoo: false,
            set_all: false,
            esr_seed: 1,
        }
    }
}

impl FloatingPointBehaviour {
    /// The kernels' floating-point mode (`set_all` turns on all five).
    pub fn mode(&self) -> codegen::FloatMode {
        let all = self.set_all;
        codegen::FloatMode {
            inv: self.inv || all,
            div0: self.div0 || all,
            oflo: self.oflo || all,
            nanoo: self.nanoo || all,
            esr: (self.esr || all).then_some(self.esr_seed),
        }
    }
}

/// `scheduling.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulingConfig {
    /// `scheduling.algorithm`: CHOOSE_BEST (default), CLUSTERING, POST_ORDER, LOOK_AHEAD,
    /// SHORTEST_PATH.
    pub algorithm: String,
    /// `maximum_scheduler_lookahead_depth` (default 5).
    pub maximum_scheduler_lookahead_depth: usize,
    /// `maximum_scheduler_search_space_size` (default 64).
    pub maximum_scheduler_search_space_size: usize,
}

impl Default for SchedulingConfig {
    fn default() -> SchedulingConfig {
        SchedulingConfig {
            algorithm: "CHOOSE_BEST".into(),
            maximum_scheduler_lookahead_depth: 5,
            maximum_scheduler_search_space_size: 64,
        }
    }
}

/// `optimizations.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OptimizationsConfig {
    /// `optimizations.prefetch_data_streams` (default true): the host prepares each data
    /// stream's next buffer while the IPU runs, so a stream copy waits for its transfer
    /// only, which is all the IPU Model charges. False (the host's preparation on the
    /// IPU's time) is refused: no source gives the host-side latency to charge.
    pub prefetch_data_streams: bool,
    /// `optimizations.combine_matmuls` (default false): combine matrix products that share
    /// an operand (the same weights or the same input) into one.
    pub combine_matmuls: bool,
    /// `optimizations.enable_fast_math` (default false): float rewrites that ignore NaN and
    /// infinities (`x * 0 = 0`).
    pub enable_fast_math: bool,
    /// `optimizations.enable_graph_outlining` (default true): repeated regions of the same
    /// ops on the same shapes share one body of code, each use copying its inputs into the
    /// body's (less code in tile memory, more cycles). Calls the program marks as outlined
    /// functions are shared whatever this says.
    pub enable_graph_outlining: bool,
    /// `optimizations.egraph.*` (ipuxla's own): the e-graph optimiser.
    pub egraph: EgraphConfig,
}

impl Default for OptimizationsConfig {
    fn default() -> OptimizationsConfig {
        OptimizationsConfig {
            prefetch_data_streams: true,
            combine_matmuls: false,
            enable_fast_math: false,
            enable_graph_outlining: true,
            egraph: EgraphConfig::default(),
        }
    }
}

/// `optimizations.egraph.*`: the e-graph optimiser's switch and runner limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EgraphConfig {
    /// Run the optimiser (default true).
    pub enabled: bool,
    /// Most e-nodes per computation (default [`EGRAPH_NODE_LIMIT`]).
    pub node_limit: usize,
    /// Most rounds of the rules (default [`EGRAPH_ITERATION_LIMIT`]).
    pub iteration_limit: usize,
    /// Seconds per computation, a safety net (default [`EGRAPH_TIME_LIMIT_SECONDS`]).
    pub time_limit_seconds: f64,
}

/// Default `optimizations.egraph.node_limit`.
pub const EGRAPH_NODE_LIMIT: usize = 50_000;
/// Default `optimizations.egraph.iteration_limit`.
pub const EGRAPH_ITERATION_LIMIT: usize = 16;
/// Default `optimizations.egraph.time_limit_seconds`.
pub const EGRAPH_TIME_LIMIT_SECONDS: f64 = 10.0;

impl Default for EgraphConfig {
    fn default() -> EgraphConfig {
        EgraphConfig {
            enabled: true,
            node_limit: EGRAPH_NODE_LIMIT,
            iteration_limit: EGRAPH_ITERATION_LIMIT,
            time_limit_seconds: EGRAPH_TIME_LIMIT_SECONDS,
        }
    }
}

/// IPUs in the modelled system (an IPU-POD64).
pub const MAX_IPUS: usize = 64;

/// Scheduling algorithms the seed names.
pub const SCHEDULING_ALGORITHMS: [&str; 5] = [
    "CHOOSE_BEST",
    "CLUSTERING",
    "POST_ORDER",
    "LOOK_AHEAD",
    "SHORTEST_PATH",
];

impl IpuConfig {
    /// Reads a JSON config file.
    pub fn from_json(text: &str) -> Result<IpuConfig, CompileError> {
        serde_json::from_str(text).map_err(|e| CompileError::Config(format!("{e}")))
    }

    /// The IPU version.
    pub fn version(&self) -> Result<IpuVersion, CompileError> {
        match self.ipu_model.version.as_str() {
            "ipu1" => Ok(IpuVersion::Ipu1),
            "ipu2" => Ok(IpuVersion::Ipu2),
            other => Err(CompileError::Config(format!(
                "ipu_model.version is '{other}'; it must be 'ipu1' or 'ipu2'"
            ))),
        }
    }

    /// The simulated target (version and tile count applied).
    pub fn target(&self) -> Result<runtime::Target, CompileError> {
        let mut t = runtime::Target::of(self.version()?);
        t.compile_ipu_code = self.ipu_model.compile_ipu_code;
        Ok(if self.ipu_model.tiles_per_ipu > 0 {
            t.with_tiles_per_ipu(self.ipu_model.tiles_per_ipu)
        } else {
            t
        })
    }

    /// The config of device `k` of `auto_select_ipus` (the seed's `/device:IPU:k`, which a
    /// TensorFlow program picks with `ipu_scope`): the same options on that device's IPUs.
    /// A module runs on one device; this is how a multi-device list chooses it.
    pub fn for_device(&self, k: usize) -> Result<IpuConfig, CompileError> {
        let devices = self.auto_select_ipus.devices();
        let Some(&n) = devices.get(k) else {
            return Err(CompileError::Config(format!(
                "device {k}: auto_select_ipus {} configures {} device(s), numbered from 0",
                serde_json::to_string(&self.auto_select_ipus).unwrap_or_default(),
                devices.len()
            )));
        };
        let mut c = self.clone();
        c.auto_select_ipus = AutoSelectIpus::PerDevice(vec![n]);
        Ok(c)
    }

    /// `selection_order`, parsed.
    pub fn selection_order(&self) -> Result<runtime::SelectionOrder, CompileError> {
        runtime::SelectionOrder::from_name(&self.selection_order).ok_or_else(|| {
            CompileError::Config(format!(
                "selection_order is '{}'; it must be AUTO, ZIGZAG, SNAKE or HOOF",
                self.selection_order
            ))
        })
    }

    /// Checks every option (called by `compile`).
    pub fn check(&self) -> Result<(), CompileError> {
        self.selection_order()?;
        if let AutoSelectIpus::PerDevice(list) = &self.auto_select_ipus
            && list.len() > 1
        {
            return Err(CompileError::Config(format!(
                "auto_select_ipus {list:?} configures {} devices and a module runs on one: choose it (`--device K` on the command line, `IpuConfig::for_device(K)` in the library; the seed's /device:IPU:K), or give one entry",
                list.len()
            )));
        }
        if !self.optimizations.prefetch_data_streams {
            return Err(CompileError::Config(
                "optimizations.prefetch_data_streams false is not modelled: the IPU Model charges a stream copy its transfer only (what prefetching leaves), and no source gives the host-side latency an unprefetched stream would add".into(),
            ));
        }
        if self.device_loop.iterations_per_loop == Some(0) {
            return Err(CompileError::Config(
                "device_loop.iterations_per_loop is 0; a device loop runs at least one iteration (leave it unset to run the module once)".into(),
            ));
        }
        self.device_loop.keeps_last_only()?;
        self.pipelining.schedule()?;
        if self.pipelining.recomputation_mode()? != RecomputationMode::Auto && !self.allow_recompute
        {
            return Err(CompileError::Config(format!(
                "pipelining.recomputation_mode is {} but allow_recompute is false: the mode says how a pipeline recomputes, so it needs allow_recompute true",
                self.pipelining.recomputation_mode
            )));
        }
        let standard = runtime::Target::of(self.version()?).tiles_per_ipu;
        if self.ipu_model.tiles_per_ipu > standard {
            return Err(CompileError::Config(format!(
                "ipu_model.tiles_per_ipu is {}; an {} has {standard} tiles",
                self.ipu_model.tiles_per_ipu, self.ipu_model.version
            )));
        }
        let target = self.target()?;
        let n = self.auto_select_ipus.num_ipus();
        if n > MAX_IPUS {
            return Err(CompileError::Config(format!(
                "auto_select_ipus asks for {n} IPUs; the modelled system (an IPU-POD64) has {MAX_IPUS}"
            )));
        }
        runtime::System::new(target, n).map_err(|e| {
            CompileError::Config(format!("auto_select_ipus asks for {n} IPUs: {e}"))
        })?;
        self.matmuls.options("matmuls")?;
        self.convolutions.options("convolutions")?;
        if crate::schedule::Algorithm::from_name(&self.scheduling.algorithm).is_none() {
            return Err(CompileError::Config(format!(
                "scheduling.algorithm is '{}'; it must be one of {} (or, for comparison, \
                 xla-list, xla-dfs, xla-post-order, optimal)",
                self.scheduling.algorithm,
                SCHEDULING_ALGORITHMS.join(", ")
            )));
        }
        let e = &self.optimizations.egraph;
        if e.node_limit == 0
            || e.iteration_limit == 0
            || e.time_limit_seconds.is_nan()
            || e.time_limit_seconds <= 0.0
        {
            return Err(CompileError::Config(format!(
                "optimizations.egraph limits must be positive: node_limit {}, iteration_limit {}, time_limit_seconds {}",
                e.node_limit, e.iteration_limit, e.time_limit_seconds
            )));
        }
        if self.scheduling.maximum_scheduler_search_space_size == 0 {
            return Err(CompileError::Config(
                "scheduling.maximum_scheduler_search_space_size must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_seeds() {
        let c = IpuConfig::default();
        assert_eq!(c.ipu_model.version, "ipu2");
        assert_eq!(c.ipu_model.tiles_per_ipu, 0);
        assert!(c.ipu_model.streaming_memory);
        assert_eq!(c.auto_select_ipus.num_ipus(), 1);
        let m = c.matmuls.options("matmuls").unwrap();
        assert_eq!(m.available_memory_proportion, 0.6);
        assert_eq!(m.partials, PartialsType::Float);
        assert_eq!(c.scheduling.algorithm, "CHOOSE_BEST");
        assert_eq!(c.selection_order, "AUTO");
        assert!(!c.floating_point_behaviour.esr);
        c.check().unwrap();
    }

    #[test]
    fn json_loads_nested_options_and_rejects_unknown_keys() {
        let c = IpuConfig::from_json(
            r#"{"ipu_model": {"tiles_per_ipu": 4, "streaming_memory": false}, "auto_select_ipus": 2,
                "matmuls": {"poplar_options": {"availableMemoryProportion": "0.3", "partialsType": "half"}}}"#,
        )
        .unwrap();
        assert_eq!(c.ipu_model.tiles_per_ipu, 4);
        assert!(!c.ipu_model.streaming_memory);
        assert_eq!(c.auto_select_ipus.num_ipus(), 2);
        assert_eq!(
            c.matmuls.options("matmuls").unwrap().partials,
            PartialsType::Half
        );
        let e = IpuConfig::from_json(r#"{"ipu_modle": {}}"#).unwrap_err();
        assert!(e.to_string().contains("ipu_modle"), "{e}");
    }

    #[test]
    fn bad_values_are_named() {
        let mut c = IpuConfig::default();
        c.matmuls
            .poplar_options
            .insert("availableMemoryProportion".into(), "1.5".into());
        assert!(
            c.check()
                .unwrap_err()
                .to_string()
                .contains("between 0.0 and 1.0")
        );
        let mut c = IpuConfig::default();
        c.convolutions
            .poplar_options
            .insert("partialsType".into(), "double".into());
        assert!(
            c.check()
                .unwrap_err()
                .to_string()
                .contains("'float' or 'half'")
        );
        let c = IpuConfig {
            auto_select_ipus: AutoSelectIpus::Count(1000),
            ..IpuConfig::default()
        };
        assert!(c.check().unwrap_err().to_string().contains("1000"));
    }

    /// One device per `auto_select_ipus` entry; `for_device` picks one, which then checks.
    #[test]
    fn a_device_list_gives_one_config_per_device() {
        let c = IpuConfig::from_json(r#"{"auto_select_ipus": [1, 4]}"#).unwrap();
        assert_eq!(c.auto_select_ipus.devices(), vec![1, 4]);
        assert!(c.check().unwrap_err().to_string().contains("--device K"));
        let d1 = c.for_device(1).unwrap();
        assert_eq!(d1.auto_select_ipus.num_ipus(), 4);
        d1.check().unwrap();
        assert!(c.for_device(2).is_err());
        assert_eq!(IpuConfig::default().auto_select_ipus.devices(), vec![1]);
        assert_eq!(AutoSelectIpus::Count(2).devices(), vec![2]);
    }
}
