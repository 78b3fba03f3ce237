//! Pipelining (inference): an entry computation whose instructions carry the frontend
//! attribute `ipu_stage="K"` runs as a pipeline over the micro-batches of a device loop
//! (`--iterations M`, the fed parameters' slices). Stage K runs on IPU K; at pipeline step
//! `t` stage K works on micro-batch `t - K`, every active stage side by side
//! (`Program::Parallel`), then each stage's values for the next stage are copied over the
//! IPU-Links into that stage's input buffers. Ramp-up and ramp-down steps run the stages
//! that have work; the steady state is one `Repeat`. This is the seed's Grouped schedule
//! for a forward-only pipeline (`pipelining_ops.pipeline` with no optimiser).
//!
//! Stages are propagated as shards are (an unannotated instruction takes its first
//! operand's stage, else its first user's); a stage may read only the stage before it
//! (the seed's rule), fed parameters feed stage 0, and results come from the last stage.

use super::device_loop::{DeviceLoop, ParameterRole};
use super::{
    Arr, HostBuffer, Lowerer, PipelineLayout, PipelinePhase, Scope, Value, elementwise, sharding,
    training_schedule,
};
use crate::CompileError;
use crate::config::PipelineSchedule;
use runtime::{FunctionId, Program, TensorId};
use std::collections::{HashMap, HashSet};
use xla_ir::Computation;
use xla_ir::ids::InstrId;

/// The attribute that names an instruction's pipeline stage.
pub const STAGE_ATTRIBUTE: &str = "ipu_stage";

/// The pipeline stage `ipu_stage` gives instruction `i` of `comp`, if any.
fn explicit_stage(comp: &Computation, i: InstrId) -> Option<usize> {
    comp.instr(i)
        .frontend_attributes
        .get(STAGE_ATTRIBUTE)
        .and_then(|v| v.trim().parse::<usize>().ok())
}

/// Whether any instruction of `comp` carries a pipeline stage (`ipu_stage`): the entry
/// computation of such a module pipelines under a device loop.
pub fn has_pipeline_stages(comp: &Computation) -> bool {
    comp.order()
        .iter()
        .any(|&i| explicit_stage(comp, i).is_some())
}

/// The stage of every instruction of `comp`, when any carries `ipu_stage`.
pub(crate) fn stages_of(comp: &Computation) -> Option<HashMap<InstrId, usize>> {
    has_pipeline_stages(comp).then(|| sharding::propagate(comp, |i| explicit_stage(comp, i)))
}

/// Stages' programs `(IPU, program)` side by side: one `Parallel` branch per IPU, running
/// the programs of the stages that share it one after another (in the order given); one
/// branch alone is just its program.
pub(super) fn side_by_side(programs: impl IntoIterator<Item = (usize, Program)>) -> Program {
    let mut branches: Vec<(usize, Vec<Program>)> = Vec::new();
    for (ipu, p) in programs {
        match branches.iter_mut().find(|(i, _)| *i == ipu) {
            Some((_, list)) => list.push(p),
            None => branches.push((ipu, vec![p])),
        }
    }
    let mut list: Vec<Program> = branches
        .into_iter()
        .map(|(_, mut ps)| {
            if ps.len() == 1 {
                ps.pop().expect("one program")
            } else {
                Program::Sequence(ps)
            }
        })
        .collect();
    if list.len() == 1 {
        list.pop().expect("one branch")
    } else {
        Program::Parallel(list)
    }
}

fn error(reason: impl Into<String>) -> CompileError {
    CompileError::Pipeline(reason.into())
}

impl Lowerer<'_> {
    /// The entry computation as a pipeline over `lp.iterations` micro-batches: constant
    /// parameters streamed in once onto their stage's IPU, fed ones into stage 0 every
    /// step it runs, results streamed out of the last stage every step it runs.
    pub(crate) fn entry_pipeline(
        &mut self,
        lp: &DeviceLoop,
        stages: HashMap<InstrId, usize>,
    ) -> Result<(Vec<HostBuffer>, Vec<HostBuffer>), CompileError> {
        let module = self.module;
        let entry = module.entry_computation();
        let roles = lp.roles(module)?;
        let count = stages.values().copied().max().unwrap_or(0) + 1;
        let ipus = self.b.num_ipus();
        let schedule = self.pipelining.schedule()?;
        if schedule == PipelineSchedule::Interleaved {
            return Err(error(
                "pipeline_schedule Interleaved alternates forward and backward stages, and a forward (inference) pipeline has no backward stages: use Grouped or Sequential, or build a training pipeline (compiler::training_pipeline)",
            ));
        }
        let mapping: Vec<usize> = match &self.pipelining.device_mapping {
            m if m.is_empty() => (0..count).collect(),
            m if m.len() != count => {
                return Err(error(format!(
                    "device_mapping names {} IPUs but the entry computation has {count} stages",
                    m.len()
                )));
            }
            m => m.clone(),
        };
        for (s, &ipu) in mapping.iter().enumerate() {
            if ipu >= ipus {
                return Err(error(format!(
                    "stage {s} runs on IPU {ipu} but the program has {ipus} IPU{}: ask for more (auto_select_ipus, --num-ipus) or change device_mapping",
                    if ipus == 1 { "" } else { "s" }
                )));
            }
        }
        let ipu_of = |s: usize| mapping[s];
        if roles
            .iter()
            .any(|r| matches!(r, ParameterRole::Carried { .. }))
        {
            return Err(error(
                "a pipeline with aliased (trained) parameters is not built yet: only forward (inference) pipelines run so far",
            ));
        }
        let params = entry.parameters();
        let shapes = entry.parameter_shapes();
        let stage_of = |i: InstrId| stages.get(&i).copied().unwrap_or(0);
        for (k, (&p, role)) in params.iter().zip(&roles).enumerate() {
            if *role == ParameterRole::Fed && stage_of(p) != 0 {
                return Err(error(format!(
                    "parameter {k} ({}) is fed one micro-batch per step but stage {} reads it; fed parameters feed stage 0",
                    entry.instr(p).name,
                    stage_of(p)
                )));
            }
        }
        // Constants (weights) once, each on its stage's IPU.
        let mut made: Vec<HostBuffer> = Vec::new();
        let mut ranges = vec![0..0; params.len()];
        let mut args: Vec<Option<Value>> = vec![None; params.len()];
        for (k, (&p, role)) in params.iter().zip(&roles).enumerate() {
            if *role == ParameterRole::Constant {
                let first = made.len();
                let v = self.on_ipu(ipu_of(stage_of(p)), |l| {
                    l.stream_in(&format!("param{k}"), &shapes[k], &mut made)
                });
                args[k] = Some(v);
                ranges[k] = first..made.len();
            }
        }
        let start = self.step;
        // A weight read by a stage on another IPU is copied there once, here, not in that
        // stage's every step (the copy is found by the stage's lowering: `onto_placement`).
        for (k, (&p, role)) in params.iter().zip(&roles).enumerate() {
            let Some(v) = args[k].clone().filter(|_| *role == ParameterRole::Constant) else {
                continue;
            };
            let mut readers: Vec<usize> = entry
                .order()
                .iter()
                .filter(|&&i| entry.instr(i).operands.contains(&p))
                .map(|&i| ipu_of(stage_of(i)))
                .filter(|&ipu| ipu != ipu_of(stage_of(p)))
                .collect();
            readers.sort_unstable();
            readers.dedup();
            for ipu in readers {
                self.on_ipu(ipu, |l| l.onto_placement(&v));
            }
        }
        let f16 = !self.b.executable().floating_point.is_active();
        let readers = elementwise::readers(entry);
        let mut fused = elementwise::fusion_candidates(module, entry, &readers, f16);
        sharding::keep_fusion_on_one_ipu(entry, &stages, &mut fused);
        // An instruction reading the stage before is its own step, which reads the value
        // from this stage's buffer (filled a step earlier); fused into its user it would
        // read the producer's tensor in place, by then the next micro-batch's.
        for &i in entry.order() {
            let from_before = |o: &InstrId| {
                stages.get(o) != stages.get(&i)
                    && !matches!(entry.instr(*o).op, xla_ir::Op::Parameter { .. })
            };
            if entry.instr(i).operands.iter().any(from_before) {
                fused.remove(&i);
            }
        }
        let mut scope = Scope {
            comp: module.entry,
            env: HashMap::new(),
            fused,
            shards: stages.iter().map(|(&i, &s)| (i, ipu_of(s))).collect(),
            // A stage's products are read across stages and buffers: their sums stay apart.
            defer_sums: HashSet::new(),
            pending_sums: HashMap::new(),
            views: HashMap::new(),
        };
        // By receiving stage: (the producer's tensor, the buffer the stage reads).
        let mut handoffs: Vec<Vec<(TensorId, TensorId)>> = Vec::with_capacity(count);
        let mut functions: Vec<FunctionId> = Vec::with_capacity(count);
        let mut outputs: Vec<HostBuffer> = Vec::new();
        for s in 0..count {
            self.begin();
            if s == 0 {
                for (k, role) in roles.iter().enumerate() {
                    if *role == ParameterRole::Fed {
                        let first = made.len();
                        let v = self.on_ipu(ipu_of(0), |l| {
                            l.stream_in(&format!("param{k}"), &shapes[k], &mut made)
                        });
                        args[k] = Some(v);
                        ranges[k] = first..made.len();
                    }
                }
                for (&p, a) in params.iter().zip(&args) {
                    scope
                        .env
                        .insert(p, a.clone().expect("every parameter is streamed in"));
                }
            }
            let mut buffers: HashMap<TensorId, Arr> = HashMap::new();
            let mut incoming = Vec::new();
            for &i in entry.order() {
                if stage_of(i) != s
                    || scope.env.contains_key(&i)
                    || scope.fused.contains(&i)
                    || elementwise::is_lazy_constant(entry, i)
                {
                    continue;
                }
                // Values of the stage before come through this stage's buffers.
                let mut restore = Vec::new();
                for &o in entry.instr(i).operands.iter() {
                    let from = stage_of(o);
                    if let Some(k) = params.iter().position(|&q| q == o) {
                        // Weights are the same at every step (copied where needed); a
                        // micro-batch is stage 0's alone.
                        if roles[k] == ParameterRole::Fed && s != 0 {
                            return Err(error(format!(
                                "instruction {} (stage {s}) reads parameter {k} ({}), which is fed one micro-batch per step; fed parameters feed stage 0 only",
                                entry.instr(i).name,
                                entry.instr(o).name
                            )));
                        }
                        continue;
                    }
                    if from == s {
                        continue;
                    }
                    if from + 1 != s {
                        return Err(error(format!(
                            "instruction {} (stage {s}) reads {} of stage {from}: a stage reads only the stage before it",
                            entry.instr(i).name,
                            entry.instr(o).name
                        )));
                    }
                    let Some(v) = scope.env.get(&o).cloned() else {
                        continue;
                    };
                    let buffered = self.buffered(&v, s, ipu_of(s), &mut buffers, &mut incoming);
                    scope.env.insert(o, buffered);
                    restore.push((o, v));
                }
                let v = self.sharded_instruction(&mut scope, i, ipu_of(s))?;
                scope.env.insert(i, v);
                for (o, v) in restore {
                    scope.env.insert(o, v);
                }
            }
            if s == count - 1 {
                let root = self.value(&mut scope, entry.root)?;
                let tiles = self.target.tiles_per_ipu;
                for (j, leaf) in root.leaves().iter().enumerate() {
                    if self
                        .mapping(leaf.tensor)
                        .iter()
                        .any(|p| p.tile / tiles != ipu_of(s))
                    {
                        return Err(error(format!(
                            "result {j} does not come from the last stage ({s}); every result of a pipeline does"
                        )));
                    }
                    let mut b = self.stream_out(&format!("out{j}"), leaf);
                    b.per_iteration = true;
                    outputs.push(b);
                }
            }
            let body = self.end();
            functions.push(self.b.function(body));
            handoffs.push(incoming);
        }
        for (range, role) in ranges.iter().zip(&roles) {
            for b in &mut made[range.clone()] {
                b.per_iteration = *role == ParameterRole::Fed;
            }
        }
        let inputs = ranges
            .iter()
            .flat_map(|r| made[r.clone()].iter().cloned())
            .collect();
        let phases = match schedule {
            PipelineSchedule::Interleaved => unreachable!("refused above"),
            PipelineSchedule::Grouped => {
                self.pipeline_steps(lp.iterations, &mapping, &functions, &handoffs)
            }
            PipelineSchedule::Sequential => {
                // One stage at a time, each stage's values handed on right after it.
                let mut body = Vec::new();
                for (s, &f) in functions.iter().enumerate() {
                    body.push(Program::Call(f));
                    for &(src, dst) in handoffs.get(s + 1).into_iter().flatten() {
                        self.use_tensor(src);
                        self.use_tensor(dst);
                        body.push(Program::Copy { src, dst });
                    }
                }
                vec![PipelinePhase {
                    name: "one stage at a time".into(),
                    program: Program::Repeat {
                        count: lp.iterations,
                        body: Box::new(Program::Sequence(body)),
                    },
                    steps: lp.iterations * count as u64,
                    working: vec![lp.iterations; count],
                }]
            }
        };
        for p in &phases {
            self.emit(p.program.clone());
        }
        self.pipeline_layout = Some(PipelineLayout {
            stage_ipus: mapping.clone(),
            phases,
            runs: 1,
        });
        // Every tensor of the pipeline holds a micro-batch's value from one step to the
        // next: none shares memory with another.
        let now = self.step;
        self.extend_lives(start);
        for l in self.life.iter_mut().filter(|l| l.first >= start) {
            l.last = now;
        }
        Ok((inputs, outputs))
    }

    /// `v` as stage `s` reads it: each array through a buffer on IPU `s` (made once per
    /// producer tensor), which the step before fills from the producer.
    fn buffered(
        &mut self,
        v: &Value,
        s: usize,
        ipu: usize,
        buffers: &mut HashMap<TensorId, Arr>,
        handoffs: &mut Vec<(TensorId, TensorId)>,
    ) -> Value {
        match v {
            Value::Array(a) => {
                let buf = match buffers.get(&a.tensor) {
                    Some(b) => b.clone(),
                    None => {
                        let name = format!("{}.stage{s}", self.b.tensor_info(a.tensor).name);
                        let b = self.on_ipu(ipu, |l| l.linear_arr(&name, &a.shape));
                        buffers.insert(a.tensor, b.clone());
                        handoffs.push((a.tensor, b.tensor));
                        b
                    }
                };
                Value::Array(Arr {
                    tensor: buf.tensor,
                    shape: a.shape.clone(),
                })
            }
            Value::Tuple(items) => Value::Tuple(
                items
                    .iter()
                    .map(|x| self.buffered(x, s, ipu, buffers, handoffs))
                    .collect(),
            ),
            Value::Token => Value::Token,
        }
    }

    /// The pipeline's steps for `m` micro-batches: at step `t` the stages `s` with
    /// `0 <= t - s < m` run side by side, then the stages that run at `t + 1` get their
    /// inputs; runs of equal steps become one `Repeat`. Returns the phases (ramp-up, steady
    /// state, ramp-down), each one program.
    fn pipeline_steps(
        &mut self,
        m: u64,
        mapping: &[usize],
        functions: &[FunctionId],
        handoffs: &[Vec<(TensorId, TensorId)>],
    ) -> Vec<PipelinePhase> {
        let count = functions.len() as u64;
        let active = |t: u64| -> Vec<usize> {
            (0..count)
                .filter(|&s| t >= s && t - s < m)
                .map(|s| s as usize)
                .collect()
        };
        let mut steps: Vec<(Vec<usize>, Vec<usize>)> = Vec::new();
        for t in 0..m + count - 1 {
            let next: Vec<usize> = active(t + 1).into_iter().filter(|&s| s > 0).collect();
            steps.push((active(t), next));
        }
        let all_working = |t: usize| steps[t].0.len() == functions.len();
        let mut out = Vec::new();
        for (name, range) in training_schedule::phases(steps.len(), all_working) {
            let mut items = Vec::new();
            let mut t = range.start;
            while t < range.end {
                let mut same = 1;
                while t + same < range.end && steps[t + same] == steps[t] {
                    same += 1;
                }
                let (now, next) = &steps[t];
                let mut body = vec![side_by_side(
                    now.iter()
                        .map(|&s| (mapping[s], Program::Call(functions[s]))),
                )];
                for &s in next {
                    for &(src, dst) in &handoffs[s] {
                        self.use_tensor(src);
                        self.use_tensor(dst);
                        body.push(Program::Copy { src, dst });
                    }
                }
                let step = Program::Sequence(body);
                items.push(if same == 1 {
                    step
                } else {
                    Program::Repeat {
                        count: same as u64,
                        body: Box::new(step),
                    }
                });
                t += same;
            }
            let working = (0..functions.len())
                .map(|s| {
                    steps[range.clone()]
                        .iter()
                        .filter(|x| x.0.contains(&s))
                        .count() as u64
                })
                .collect();
            out.push(PipelinePhase {
                name: name.into(),
                program: Program::Sequence(items),
                steps: range.len() as u64,
                working,
            });
        }
        out
    }
}
