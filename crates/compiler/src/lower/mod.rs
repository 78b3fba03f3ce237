//! Lowering a module onto the IPU Model: the walk over computations, the values each
//! instruction produces (device tensors, tuples of them), and the bookkeeping every lowering
//! shares (tensor creation, program emission, liveness steps).

mod allocation;
mod broadcast_views;
pub(crate) mod codelet;
pub(crate) mod codelet_split;
mod collectives;
mod control;
pub(crate) mod conv_codelet;
mod deferred_sums;
mod device_loop;
mod dot;
pub(crate) mod elementwise;
mod feeds;
mod mapping;
mod memory;
mod movement;
mod native_ops;
mod pipeline;
mod reduce;
mod scatter;
mod sharding;
mod training;
mod training_schedule;

use crate::CompileError;
use crate::config::{IpuConfig, PlannerOptions};
use crate::types::{device_type, location};
use codegen::DType;
pub use device_loop::{DeviceLoop, ParameterRole, UPLOAD_STREAM};
pub use feeds::{Feed, name_feeds};
use mapping::Piece;
pub(crate) use pipeline::STAGE_ATTRIBUTE;
pub use pipeline::has_pipeline_stages;
pub(crate) use pipeline::stages_of as propagated_stages;
use runtime::{
    Direction, Executable, ExecutableBuilder, Interval, Program, Rearrange, Target, TensorId,
};
pub(crate) use sharding::shards_of as propagated_shards;
use std::collections::{HashMap, HashSet};
pub(crate) use training::{StageModules, lower_training_pipeline};
use xla_ir::ids::{CompId, InstrId};
use xla_ir::{ArrayShape, Computation, Instruction, Module, Op, Shape};

/// A compiled module: the executable and how host values enter and leave it.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// The device program.
    pub executable: Executable,
    /// One host-to-device stream per parameter leaf, in parameter order.
    pub inputs: Vec<HostBuffer>,
    /// One device-to-host stream per result leaf, in result order.
    pub outputs: Vec<HostBuffer>,
    /// The module's infeeds, in order of first use.
    pub infeeds: Vec<Feed>,
    /// The module's outfeeds, in order of first use.
    pub outfeeds: Vec<Feed>,
    /// Warnings (conversions the device needed).
    pub warnings: Vec<String>,
    /// A pipeline: its phases, for profiles.
    pub pipeline: Option<PipelineLayout>,
}

/// Where a pipeline's phases are in its executable, so a profile can show them.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PipelineLayout {
    /// The IPU of each stage.
    pub stage_ipus: Vec<usize>,
    /// The phases of one pipeline run, in order.
    pub phases: Vec<PipelinePhase>,
    /// Pipeline runs per execution (`repeat_count`).
    pub runs: u64,
}

/// One phase of a pipeline run: the ramp-up, the steady state, the ramp-down (or a
/// training pipeline's zeroing of accumulators and weight update).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PipelinePhase {
    /// "ramp-up", "steady state", ...
    pub name: String,
    /// The phase's program (part of the executable's main program tree).
    pub program: Program,
    /// Pipeline steps in the phase.
    pub steps: u64,
    /// Per stage: the steps of the phase in which it works.
    pub working: Vec<u64>,
}

/// A host stream and the HLO shape of the values it carries.
#[derive(Debug, Clone)]
pub struct HostBuffer {
    /// The stream's name in the executable.
    pub stream: String,
    /// The HLO shape (device bytes use [`crate::types::device_type`]).
    pub shape: ArrayShape,
    /// In a device loop: the stream carries one value per iteration (a fed parameter, or
    /// an output stacked over iterations); otherwise one per execution.
    pub per_iteration: bool,
}

/// A device array: a tensor and the HLO shape it holds (row-major, logical order).
#[derive(Debug, Clone)]
pub(crate) struct Arr {
    pub tensor: TensorId,
    pub shape: ArrayShape,
}

impl Arr {
    pub fn elements(&self) -> usize {
        self.shape.element_count() as usize
    }

    /// A region covering the whole tensor.
    pub fn whole(&self) -> runtime::Region {
        runtime::Region {
            tensor: self.tensor,
            start: 0,
            len: self.elements(),
        }
    }

    pub fn dims(&self) -> Vec<usize> {
        self.shape.dims.iter().map(|&d| d as usize).collect()
    }
}

/// What an instruction produces on the device.
#[derive(Debug, Clone)]
pub(crate) enum Value {
    Array(Arr),
    Tuple(Vec<Value>),
    Token,
}

impl Value {
    /// The leaves, in order.
    pub fn leaves(&self) -> Vec<Arr> {
        match self {
            Value::Array(a) => vec![a.clone()],
            Value::Tuple(items) => items.iter().flat_map(Value::leaves).collect(),
            Value::Token => vec![],
        }
    }
}

/// Liveness of one tensor in program steps.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Life {
    pub first: u64,
    pub last: u64,
    /// Constants: never share memory.
    pub pinned: bool,
}

/// The instruction being lowered, for error messages.
#[derive(Clone, Copy)]
pub(crate) struct Here<'a> {
    pub comp: &'a Computation,
    pub instr: &'a Instruction,
}

impl Here<'_> {
    pub fn unsupported(&self, reason: impl Into<String>) -> CompileError {
        CompileError::Unsupported {
            at: location(self.comp, self.instr),
            instruction: self.instr.name.clone(),
            opcode: self.instr.op.name().to_string(),
            reason: reason.into(),
        }
    }

    pub fn array(&self) -> Result<&ArrayShape, CompileError> {
        self.instr
            .shape
            .as_array()
            .ok_or_else(|| self.unsupported("tuple-shaped results of this op are not supported"))
    }
}

/// The state of one computation being lowered.
pub(crate) struct Scope {
    pub comp: CompId,
    pub env: HashMap<InstrId, Value>,
    /// Element-wise instructions inlined into their single consumer's kernel.
    pub fused: HashSet<InstrId>,
    /// The IPU of each instruction, where the computation is sharded (`sharding.rs`).
    pub shards: HashMap<InstrId, usize>,
    /// Products whose K-part sum waits for their one element-wise reader
    /// (`deferred_sums.rs`).
    pub defer_sums: HashSet<InstrId>,
    /// Those lowered, their sums not yet made.
    pub pending_sums: HashMap<InstrId, deferred_sums::PendingSum>,
    /// Broadcasts their element-wise readers read in place, with their repeats
    /// (`broadcast_views.rs`): made only if something else asks for them.
    pub views: HashMap<InstrId, usize>,
}

/// Lowers HLO into an executable.
pub(crate) struct Lowerer<'m> {
    pub module: &'m Module,
    pub b: ExecutableBuilder,
    pub target: Target,
    /// Tiles new values may be placed on: all of the IPUs', or one IPU's for an instruction
    /// sharded onto it (see `sharding.rs`), from global tile `tile_base` on.
    pub tiles: usize,
    /// The first global tile of the placement.
    pub tile_base: usize,
    pub matmul: PlannerOptions,
    pub conv: PlannerOptions,
    pub step: u64,
    pub life: Vec<Life>,
    pub mappings: Vec<Vec<Piece>>,
    seqs: Vec<Vec<Program>>,
    next_tile: usize,
    pub warnings: Vec<String>,
    /// Feeds made so far, with their streams.
    infeeds: Vec<(Feed, Vec<runtime::StreamId>)>,
    outfeeds: Vec<(Feed, Vec<runtime::StreamId>)>,
    /// Values copied onto another IPU for sharded users, `(tensor, tile base) -> copy`: one
    /// layer per nested sequence being built (a copy made inside a loop body or branch is
    /// not there after it).
    shard_copies: Vec<HashMap<(TensorId, usize), TensorId>>,
    /// `(from, to)` IPUs of every value copied for a sharded user.
    crossings: HashSet<(usize, usize)>,
    /// Devices the module runs on (`replica_count × num_partitions`): the executable's
    /// replicas.
    pub replicas: usize,
    /// `num_partitions`.
    pub partitions: usize,
    /// How a staged module pipelines.
    pub pipelining: crate::config::PipeliningConfig,
    /// A pipeline's phases, once lowered.
    pub pipeline_layout: Option<PipelineLayout>,
    /// What each step emitted runs, by step (for the liveness report).
    pub step_names: Vec<String>,
    /// Calls marked as outlined functions, by callee.
    function_calls: HashMap<CompId, usize>,
    /// Functions compiled once and shared, by callee and placement (`tile_base`, `tiles`).
    shared_functions: HashMap<(CompId, usize, usize), control::SharedFunction>,
    /// Slices read only as shared functions' arguments, never made: the copy of each into
    /// an argument is the slice's rearrangement writing the argument (`movement::Deferred`).
    deferred: HashMap<TensorId, movement::Deferred>,
    /// Steps a tensor is live in beside its `Life` (a shared function's tensors, in each
    /// later call), by tensor index.
    pub also_live: HashMap<usize, Vec<(u64, u64)>>,
    /// The convolution codelets' plans, shared by parts of equal shapes.
    pub conv_plans: conv_codelet::ConvPlans,
}

/// Compiles a module (types already checked and narrowed) for `target` (the config's, or
/// the same IPU out of core).
pub(crate) fn lower_module(
    module: &Module,
    config: &IpuConfig,
    target: Target,
    device_loop: Option<&DeviceLoop>,
) -> Result<Compiled, CompileError> {
    let (replicas, partitions) = replication(module);
    let requested = config.auto_select_ipus.num_ipus();
    let order = config.selection_order()?;
    let num_ipus = if replicas == 1 {
        if order != runtime::SelectionOrder::Auto && requested == 1 {
            return Err(CompileError::Config(format!(
                "selection_order {} places IPUs on the ladder, but this module runs on one IPU (one device, auto_select_ipus 1), so only AUTO applies",
                config.selection_order
            )));
        }
        requested
    } else if requested == 1 {
        1
    } else if requested.is_multiple_of(replicas) {
        // The seed's rule: the IPUs requested are replicas x IPUs per replica.
        requested / replicas
    } else {
        return Err(CompileError::Config(format!(
            "auto_select_ipus asks for {requested} IPUs but the module runs on {replicas} devices (replica_count x num_partitions): ask for a multiple of {replicas} (replicas x IPUs per replica), or leave it unset for one IPU each"
        )));
    };
    let mut l = Lowerer::new(module, config, target, num_ipus, replicas, partitions)?;
    l.b.replicate(runtime::Replication { replicas, order });
    l.check_shards()?;
    let (inputs, outputs) = match device_loop {
        None => l.entry_once()?,
        Some(lp) => match pipeline::stages_of(module.entry_computation()) {
            Some(stages) => l.entry_pipeline(lp, stages)?,
            None => l.entry_loop(lp)?,
        },
    };
    let program = Program::Sequence(l.seqs.pop().expect("the main sequence"));
    memory::allocate(&mut l)?;
    let warnings = std::mem::take(&mut l.warnings);
    let infeeds = l.infeeds.drain(..).map(|(f, _)| f).collect();
    let outfeeds = l.outfeeds.drain(..).map(|(f, _)| f).collect();
    if replicas == 1 && order == runtime::SelectionOrder::Auto && !l.crossings.is_empty() {
        l.b.replicate(runtime::Replication {
            replicas,
            order: sharding::auto_order(&l.crossings, num_ipus),
        });
    }
    let executable = l.b.finish(program);
    Ok(Compiled {
        executable,
        inputs,
        outputs,
        infeeds,
        outfeeds,
        warnings,
        pipeline: l.pipeline_layout.take(),
    })
}

/// `(devices, partitions)` of a module: `replica_count × num_partitions` and
/// `num_partitions` (1 and 1 when the header names neither).
pub fn replication(module: &Module) -> (usize, usize) {
    let devices = xla_ir::shape_inference::collective::declared_devices(module).unwrap_or(1);
    let partitions = module.num_partitions.unwrap_or(1).max(1);
    (devices.max(1) as usize, partitions as usize)
}

impl<'m> Lowerer<'m> {
    /// A lowerer for `module` on `num_ipus` IPUs of `target` (per replica).
    pub(crate) fn new(
        module: &'m Module,
        config: &IpuConfig,
        target: Target,
        num_ipus: usize,
        replicas: usize,
        partitions: usize,
    ) -> Result<Lowerer<'m>, CompileError> {
        let mut b = ExecutableBuilder::new(target.clone(), num_ipus);
        b.set_floating_point(config.floating_point_behaviour.mode());
        Ok(Lowerer {
            module,
            b,
            tiles: target.tiles_per_ipu * num_ipus,
            tile_base: 0,
            target,
            matmul: config.matmuls.options("matmuls")?,
            conv: config.convolutions.options("convolutions")?,
            step: 0,
            life: Vec::new(),
            mappings: Vec::new(),
            seqs: vec![Vec::new()],
            next_tile: 0,
            warnings: Vec::new(),
            infeeds: Vec::new(),
            outfeeds: Vec::new(),
            shard_copies: vec![HashMap::new()],
            crossings: HashSet::new(),
            replicas,
            partitions,
            pipelining: config.pipelining.clone(),
            pipeline_layout: None,
            step_names: Vec::new(),
            function_calls: control::function_calls(module),
            shared_functions: HashMap::new(),
            deferred: HashMap::new(),
            also_live: HashMap::new(),
            conv_plans: conv_codelet::ConvPlans::default(),
        })
    }

    /// The entry computation run once: every parameter streamed in, every result leaf
    /// streamed out. Returns the input and output host buffers.
    fn entry_once(&mut self) -> Result<(Vec<HostBuffer>, Vec<HostBuffer>), CompileError> {
        let module = self.module;
        let entry = module.entry_computation();
        let mut args = Vec::new();
        let mut inputs = Vec::new();
        let shards = sharding::shards_of(entry);
        for (k, &p) in entry.parameters().iter().enumerate() {
            let shape = &entry.instr(p).shape;
            let name = format!("param{k}");
            let block = allocation::slice_block(entry, p);
            let mut stream_in = |l: &mut Self| match (shape, block) {
                (Shape::Array(a), Some(block)) => {
                    let pieces = allocation::blocked(
                        &l.linear_pieces(block, l.dtype(a)),
                        a.element_count() as usize,
                        block,
                    );
                    Value::Array(l.stream_in_array(&name, a, pieces, &mut inputs))
                }
                _ => l.stream_in(&name, shape, &mut inputs),
            };
            args.push(match shards.get(&p) {
                Some(&ipu) => self.on_ipu(ipu, stream_in),
                None => stream_in(self),
            });
        }
        let result = self.computation(module.entry, args)?;
        let outputs = result
            .leaves()
            .iter()
            .enumerate()
            .map(|(k, leaf)| self.stream_out(&format!("out{k}"), leaf))
            .collect();
        Ok((inputs, outputs))
    }

    /// A device-to-host stream named `name` and the step copying `leaf` into it.
    fn stream_out(&mut self, name: &str, leaf: &Arr) -> HostBuffer {
        let dtype = self.dtype(&leaf.shape);
        let s = self
            .b
            .stream(name, Direction::DeviceToHost, dtype, leaf.elements());
        self.use_tensor(leaf.tensor);
        self.emit(Program::StreamCopy {
            stream: s,
            tensor: leaf.tensor,
        });
        HostBuffer {
            stream: name.to_string(),
            shape: leaf.shape.clone(),
            per_iteration: false,
        }
    }

    /// The device type of an array shape (types were checked before lowering).
    pub fn dtype(&self, shape: &ArrayShape) -> DType {
        device_type(shape.element_type).expect("device types are checked before lowering")
    }

    /// Appends a program step.
    pub fn emit(&mut self, p: Program) {
        let name = self.describe(&p);
        self.step_names.push(name);
        self.seqs.last_mut().expect("a sequence").push(p);
        self.step += 1;
    }

    /// What a step runs, for the liveness report.
    fn describe(&self, p: &Program) -> String {
        let exe = self.b.executable();
        match p {
            Program::Execute(id) => exe.compute_sets[id.0 as usize].name.clone(),
            Program::Copy { src, dst } => format!(
                "copy {} -> {}",
                exe.tensors[src.0 as usize].name, exe.tensors[dst.0 as usize].name
            ),
            Program::Rearrange(id) => exe.rearranges[id.0 as usize].name.clone(),
            Program::StreamCopy { stream, .. } => {
                format!("stream {}", exe.streams[stream.0 as usize].name)
            }
            Program::Repeat { count, .. } => format!("repeat x{count}"),
            Program::RepeatWhileTrue { .. } => "while".into(),
            Program::If { .. } | Program::Switch { .. } => "branch".into(),
            Program::Call(f) => format!("call function {}", f.0),
            Program::Collective(c) => exe.collectives[c.0 as usize].name.clone(),
            Program::Parallel(_) => "parallel".into(),
            Program::Sync => "sync".into(),
            Program::Sequence(_) => "sequence".into(),
        }
    }

    /// Starts collecting steps into a nested sequence.
    pub fn begin(&mut self) {
        self.seqs.push(Vec::new());
        self.shard_copies.push(HashMap::new());
    }

    /// Ends the nested sequence, returning it.
    pub fn end(&mut self) -> Program {
        self.shard_copies.pop();
        Program::Sequence(self.seqs.pop().expect("begin before end"))
    }

    /// A new tensor with this mapping (offsets are planned at the end).
    pub fn tensor(
        &mut self,
        name: &str,
        dtype: DType,
        dims: &[usize],
        pieces: Vec<Piece>,
    ) -> TensorId {
        let tpi = self.target.tiles_per_ipu;
        let mapping = pieces
            .iter()
            .filter(|p| p.len > 0)
            .map(|p| Interval {
                ipu: p.tile / tpi,
                tile: p.tile % tpi,
                start: p.start,
                len: p.len,
                offset: 0,
            })
            .collect();
        let id = self.b.tensor_mapped(name, dtype, dims, mapping);
        self.life.push(Life {
            first: self.step,
            last: self.step,
            pinned: false,
        });
        self.mappings
            .push(pieces.into_iter().filter(|p| p.len > 0).collect());
        id
    }

    /// A new array with a linear mapping.
    pub fn linear_arr(&mut self, name: &str, shape: &ArrayShape) -> Arr {
        let n = shape.element_count() as usize;
        let pieces = self.linear_pieces(n, self.dtype(shape));
        self.arr_mapped(name, shape, pieces)
    }

    /// A new array with the given mapping.
    pub fn arr_mapped(&mut self, name: &str, shape: &ArrayShape, pieces: Vec<Piece>) -> Arr {
        let dims: Vec<usize> = shape.dims.iter().map(|&d| d as usize).collect();
        let dtype = self.dtype(shape);
        Arr {
            tensor: self.tensor(name, dtype, &dims, pieces),
            shape: shape.clone(),
        }
    }

    /// Records a read of `t` at the current step.
    pub fn use_tensor(&mut self, t: TensorId) {
        let life = &mut self.life[t.0 as usize];
        life.last = life.last.max(self.step);
    }

    /// The mapping of a tensor.
    pub fn mapping(&self, t: TensorId) -> &[Piece] {
        &self.mappings[t.0 as usize]
    }

    /// Where a parameter with no layout its readers want lies: linearly, and when it does
    /// not span every tile, from the next tile of a cursor that moves on with each such
    /// tensor, so that successive small parameters spread over the tiles instead of
    /// piling onto the tiles every tensor of their size starts at (Graphcore's
    /// `tools/mapping_helper.cc`, ANCHORS.md §1.9).
    fn parameter_pieces(&mut self, n: usize, dtype: DType) -> Vec<Piece> {
        let mut pieces = mapping::linear(n, self.tiles, dtype);
        // Within the one IPU the mapping starts on (a placement may span several).
        let per_ipu = self.target.tiles_per_ipu.min(self.tiles);
        let first = pieces.first().map_or(0, |p| p.tile);
        let ipu = first / per_ipu;
        if pieces.iter().all(|p| p.tile / per_ipu == ipu) && pieces.len() < per_ipu {
            let to = self.next_tile() % per_ipu;
            for p in &mut pieces {
                p.tile =
                    ipu * per_ipu + (p.tile % per_ipu + per_ipu - first % per_ipu + to) % per_ipu;
            }
        }
        self.placed(pieces)
    }

    /// `n` elements of type `dtype` spread linearly over the placement's tiles.
    pub fn linear_pieces(&self, n: usize, dtype: DType) -> Vec<Piece> {
        self.placed(mapping::linear(n, self.tiles, dtype))
    }

    /// Pieces laid out on tiles `0..self.tiles`, moved onto the placement's tiles.
    pub fn placed(&self, mut pieces: Vec<Piece>) -> Vec<Piece> {
        for p in &mut pieces {
            p.tile += self.tile_base;
        }
        pieces
    }

    /// The global tile of the placement's tile `local` (wrapping round).
    pub fn tile_at(&self, local: usize) -> usize {
        self.tile_base + local % self.tiles
    }

    /// Whether every piece lies on the placement's tiles.
    pub fn within_placement(&self, pieces: &[Piece]) -> bool {
        pieces
            .iter()
            .all(|p| (self.tile_base..self.tile_base + self.tiles).contains(&p.tile))
    }

    /// A tile for work that runs on one tile, chosen round-robin (a placement's local
    /// index: see [`Lowerer::tile_at`]).
    pub fn next_tile(&mut self) -> usize {
        let t = self.next_tile % self.tiles;
        self.next_tile += 97;
        t
    }

    /// Runs a rearrangement into a new tensor.
    pub fn rearrange_into(
        &mut self,
        dst: TensorId,
        sources: Vec<TensorId>,
        runs: runtime::Runs,
        fill: Vec<u8>,
        name: &str,
    ) {
        for s in &sources {
            self.use_tensor(*s);
        }
        let id = self.b.rearrange(Rearrange {
            name: name.to_string(),
            dst,
            sources,
            fill,
            runs,
        });
        self.emit(Program::Rearrange(id));
    }

    /// `t` itself if it already has this mapping, else a copy of it that has.
    pub fn with_mapping(&mut self, a: &Arr, pieces: &[Piece]) -> Arr {
        if self.mapping(a.tensor) == pieces {
            return a.clone();
        }
        let name = format!("{}.relayout", self.b.tensor_info(a.tensor).name);
        let copy = self.arr_mapped(&name, &a.shape, pieces.to_vec());
        self.use_tensor(a.tensor);
        self.emit(Program::Copy {
            src: a.tensor,
            dst: copy.tensor,
        });
        copy
    }

    /// A host-to-device stream per leaf of `shape`, each into a linearly mapped tensor.
    fn stream_in(&mut self, name: &str, shape: &Shape, inputs: &mut Vec<HostBuffer>) -> Value {
        match shape {
            Shape::Array(a) => {
                let pieces = self.parameter_pieces(a.element_count() as usize, self.dtype(a));
                Value::Array(self.stream_in_array(name, a, pieces, inputs))
            }
            Shape::Tuple(items) => Value::Tuple(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, s)| self.stream_in(&format!("{name}.{i}"), s, inputs))
                    .collect(),
            ),
            Shape::Token => Value::Token,
        }
    }

    /// An array laid out as `pieces`, filled from a new host-to-device stream.
    fn stream_in_array(
        &mut self,
        name: &str,
        a: &ArrayShape,
        pieces: Vec<Piece>,
        inputs: &mut Vec<HostBuffer>,
    ) -> Arr {
        let stream_name = format!("in{}", inputs.len());
        let arr = self.arr_mapped(name, a, pieces);
        let dtype = self.dtype(a);
        let s = self
            .b
            .stream(&stream_name, Direction::HostToDevice, dtype, arr.elements());
        self.emit(Program::StreamCopy {
            stream: s,
            tensor: arr.tensor,
        });
        inputs.push(HostBuffer {
            stream: stream_name,
            shape: a.clone(),
            per_iteration: false,
        });
        arr
    }

    /// Lowers computation `id` with `args` bound to its parameters; returns its root value.
    pub fn computation(&mut self, id: CompId, args: Vec<Value>) -> Result<Value, CompileError> {
        let comp = self.module.computation(id);
        let shards = sharding::shards_of(comp);
        let f16 = !self.b.executable().floating_point.is_active();
        let readers = elementwise::readers(comp);
        let mut fused = elementwise::fusion_candidates(self.module, comp, &readers, f16);
        sharding::keep_fusion_on_one_ipu(comp, &shards, &mut fused);
        let (defer_sums, views) = match shards.is_empty() {
            true => (
                deferred_sums::sums_to_defer(self.module, comp, &readers, f16),
                broadcast_views::broadcast_views(self.module, comp, &readers),
            ),
            false => (HashSet::new(), HashMap::new()),
        };
        let mut scope = Scope {
            comp: id,
            env: HashMap::new(),
            fused,
            shards,
            defer_sums,
            pending_sums: HashMap::new(),
            views,
        };
        for (&p, arg) in comp.parameters().iter().zip(args) {
            scope.env.insert(p, arg);
        }
        for &i in comp.order() {
            if scope.env.contains_key(&i)
                || scope.fused.contains(&i)
                || elementwise::is_lazy_constant(comp, i)
                || scope.views.contains_key(&i)
            {
                continue;
            }
            let v = self.instruction(&mut scope, i)?;
            scope.env.insert(i, v);
        }
        self.value(&mut scope, comp.root)
    }

    /// The value of an instruction already lowered, materialising constants on demand.
    pub fn value(&mut self, scope: &mut Scope, id: InstrId) -> Result<Value, CompileError> {
        // A product whose sum waited for a reader that did not take it: made now.
        if let Some(sum) = scope.pending_sums.remove(&id) {
            let v = Value::Array(self.finish_sum(sum));
            scope.env.insert(id, v.clone());
            return Ok(v);
        }
        if let Some(v) = scope.env.get(&id) {
            return Ok(v.clone());
        }
        let v = self.instruction(scope, id)?;
        scope.env.insert(id, v.clone());
        Ok(v)
    }

    /// The array value of an operand.
    pub fn array(&mut self, scope: &mut Scope, id: InstrId) -> Result<Arr, CompileError> {
        match self.value(scope, id)? {
            Value::Array(a) => Ok(a),
            _ => {
                let comp = self.module.computation(scope.comp);
                Err(Here {
                    comp,
                    instr: comp.instr(id),
                }
                .unsupported("a tuple where an array is expected"))
            }
        }
    }

    /// Lowers one instruction, on its IPU where the computation is sharded.
    fn instruction(&mut self, scope: &mut Scope, id: InstrId) -> Result<Value, CompileError> {
        match scope.shards.get(&id) {
            Some(&ipu) => self.sharded_instruction(scope, id, ipu),
            None => self.unsharded_instruction(scope, id),
        }
    }

    /// Lowers one instruction where the placement is.
    fn unsharded_instruction(
        &mut self,
        scope: &mut Scope,
        id: InstrId,
    ) -> Result<Value, CompileError> {
        let module = self.module;
        let comp = module.computation(scope.comp);
        let instr = comp.instr(id);
        let here = Here { comp, instr };
        match &instr.op {
            Op::Parameter { .. } => Err(here.unsupported("a parameter with no argument")),
            Op::Constant { literal } => Ok(self.constant(&instr.name, literal)),
            Op::Tuple => {
                let ops: Vec<InstrId> = instr.operands.to_vec();
                let mut items = Vec::with_capacity(ops.len());
                for o in ops {
                    items.push(self.value(scope, o)?);
                }
                Ok(Value::Tuple(items))
            }
            Op::GetTupleElement { index } => match self.value(scope, instr.operands[0])? {
                Value::Tuple(items) => items
                    .get(*index as usize)
                    .cloned()
                    .ok_or_else(|| here.unsupported("tuple index out of range")),
                _ => Err(here.unsupported("get-tuple-element of a non-tuple")),
            },
            Op::AfterAll => Ok(Value::Token),
            Op::AllReduce { .. }
            | Op::AllGather { .. }
            | Op::ReduceScatter { .. }
            | Op::AllToAll { .. }
            | Op::CollectivePermute { .. }
            | Op::ReplicaId
            | Op::PartitionId => self.collective(scope, here),
            Op::RngBitGenerator { .. } => Err(here.unsupported(crate::types::RNG_UNEXPANDED)),
            Op::Infeed { .. } => self.infeed(here),
            Op::Outfeed { .. } => self.outfeed(scope, here),
            Op::Fusion { calls, .. } | Op::Call { to_apply: calls } => {
                let ops: Vec<InstrId> = instr.operands.to_vec();
                let mut args = Vec::new();
                for o in ops {
                    args.push(self.value(scope, o)?);
                }
                if matches!(instr.op, Op::Call { .. }) {
                    self.call(instr, *calls, args)
                } else {
                    self.computation(*calls, args)
                }
            }
            Op::While { condition, body } => {
                let state = self.value(scope, instr.operands[0])?;
                self.while_loop(here, *condition, *body, state)
            }
            Op::Conditional { branches } => self.conditional(scope, here, branches),
            Op::Reshape | Op::Unary(xla_ir::UnaryOp::Copy) => {
                let a = self.array(scope, instr.operands[0])?;
                Ok(Value::Array(Arr {
                    tensor: a.tensor,
                    shape: here.array()?.clone(),
                }))
            }
            Op::Bitcast => Err(here.unsupported(
                "a bitcast is lowered as the transposes and reshape the bitcast-decomposer pass \
                 spells it as; this module did not go through the pass pipeline",
            )),
            Op::Broadcast { .. }
            | Op::Transpose { .. }
            | Op::Slice { .. }
            | Op::Concatenate { .. }
            | Op::Pad { .. }
            | Op::Reverse { .. } => self.movement(scope, here),
            Op::Iota { .. } => self.folded_constant(here),
            Op::Dot { .. } => self.dot(scope, here, id),
            Op::Reduce { .. } => self.reduce(scope, here),
            _ if elementwise::is_jit_elementwise(module, comp, id) => {
                self.elementwise(scope, here, id)
            }
            _ => self.codelet_op(scope, here),
        }
    }

    /// A constant: an initialised, pinned tensor.
    fn constant(&mut self, name: &str, literal: &xla_ir::Literal) -> Value {
        match literal {
            xla_ir::Literal::Array(a) => {
                let n = a.shape.element_count() as usize;
                let pieces = if n * 4 <= 4096 {
                    let local = self.next_tile();
                    mapping::single(n, self.tile_at(local))
                } else {
                    self.linear_pieces(n, self.dtype(&a.shape))
                };
                let arr = self.arr_mapped(name, &a.shape, pieces);
                self.b.tensor_mut(arr.tensor).init = Some(crate::device_data::to_device(&a.data));
                // Written at load time, so live from the first step to the last.
                let life = &mut self.life[arr.tensor.0 as usize];
                life.pinned = true;
                life.first = 0;
                Value::Array(arr)
            }
            xla_ir::Literal::Tuple(items) => Value::Tuple(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, l)| self.constant(&format!("{name}.{i}"), l))
                    .collect(),
            ),
            xla_ir::Literal::Token => Value::Token,
        }
    }

    /// An instruction with no operands whose value is fixed (iota): evaluated at compile
    /// time into a constant.
    fn folded_constant(&mut self, here: Here) -> Result<Value, CompileError> {
        let m = codelet::single_op_module(self.module, here.instr, &[], None);
        let lit = xla_ir::eval::evaluate(&m, &[])
            .map_err(|e| here.unsupported(format!("cannot fold: {e}")))?;
        Ok(self.constant(&here.instr.name, &lit))
    }
}
