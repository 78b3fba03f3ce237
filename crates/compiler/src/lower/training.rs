//! Lowering a training pipeline ([`crate::training_pipeline`]): every stage's forward,
//! backward, accumulation, zeroing and update computations become functions on its IPU,
//! and the schedule's steps call them side by side (`Program::Parallel`), moving
//! activations forward and gradients backward over the IPU-Links between steps.
//!
//! Each stage keeps on its IPU its weights, their gradient accumulators, the buffers the
//! stage before (activations) and after (gradients) fill, and a stash of `depth` slots of
//! the values its forward pass saved: a forward pass writes slot `stashed` (how many are
//! held), a backward pass reads slot 0 and the others move down one. (PopLibs' FIFOs rotate
//! an index instead of moving data; the moves here are charged as the copies they are.)
//!
//! Liveness: every tensor that crosses a function boundary (weights, accumulators, buffers,
//! stash slots, results handed on) lives for the whole program; a function's temporaries
//! live within it and may share memory with other functions' temporaries, since an IPU runs
//! one function at a time.

use super::pipeline::side_by_side;
use super::training_schedule::{Work, phases, repeats, stash_depths, training_steps};
use super::{Arr, Compiled, HostBuffer, Lowerer, PipelineLayout, PipelinePhase, Value};
use crate::training_pipeline::{StageShapes, TrainingPipeline};
use crate::{CompileError, IpuConfig};
use runtime::{FunctionId, Program, TensorId};
use std::collections::HashSet;
use xla_ir::Module;

/// The optimised modules of one stage.
#[derive(Debug, Clone)]
pub(crate) struct StageModules {
    pub forward: Module,
    /// The backward pass: `(weights, saved, gradients)`, or for a stage recomputed with
    /// RecomputeAndBackpropagateInterleaved `(weights, inputs, gradients)`.
    pub backward: Module,
    /// RecomputeThenBackpropagate: `(weights, inputs) -> (saved...)`, run before the
    /// backward pass.
    pub recompute: Option<Module>,
    /// Whether the stage stashes its inputs (and recomputes) rather than its saved values.
    pub recomputed: bool,
    /// A recomputed stage's checkpointed values (RecomputeAndBackpropagateInterleaved): its
    /// forward pass returns them after its outputs, and it stashes them after its inputs.
    pub checkpointed: Vec<xla_ir::ArrayShape>,
    pub update: Module,
    pub zeros: Module,
    pub accumulate: Module,
}

/// A stage's functions and the tensors they share with the steps.
struct Stage {
    ipu: usize,
    forward: FunctionId,
    /// RecomputeThenBackpropagate: the saved values from the stashed inputs, called
    /// before `backward`.
    recompute: Option<FunctionId>,
    backward: FunctionId,
    zero: FunctionId,
    update: FunctionId,
    /// The forward pass's results handed to the next stage, and that stage's buffers.
    outputs: Vec<Arr>,
    inputs: Vec<Arr>,
    /// What the stash keeps after a forward pass (the saved results, or a recomputed
    /// stage's inputs), and the stash: `[slot][value]`.
    stashed: Vec<Arr>,
    stash: Vec<Vec<Arr>>,
    /// The backward pass's input gradients (handed to the stage before), and the buffers
    /// the next stage's backward pass fills.
    input_gradients: Vec<Arr>,
    gradients: Vec<Arr>,
}

/// Lowers `pipeline` (checked, its stages' shapes `shapes`, its modules optimised).
pub(crate) fn lower_training_pipeline(
    pipeline: &TrainingPipeline,
    shapes: &[StageShapes],
    modules: &[StageModules],
    config: &IpuConfig,
) -> Result<Compiled, CompileError> {
    let target = config.target()?;
    let num_ipus = config.auto_select_ipus.num_ipus();
    let ipus = pipeline.ipus();
    if let Some((s, &ipu)) = ipus.iter().enumerate().find(|&(_, &i)| i >= num_ipus) {
        return Err(CompileError::Pipeline(format!(
            "stage {s} runs on IPU {ipu} but the system has {num_ipus} IPU{}: ask for more (auto_select_ipus, --num-ipus) or change device_mapping",
            if num_ipus == 1 { "" } else { "s" }
        )));
    }
    let mut l = Lowerer::new(&modules[0].forward, config, target, num_ipus, 1, 1)?;
    let order = match config.selection_order()? {
        runtime::SelectionOrder::Auto => runtime::SelectionOrder::Snake,
        other => other,
    };
    l.b.replicate(runtime::Replication { replicas: 1, order });
    let (inputs, outputs) = l.training(pipeline, shapes, modules, &ipus)?;
    let program = Program::Sequence(l.seqs.pop().expect("the main sequence"));
    super::memory::allocate(&mut l)?;
    let warnings = std::mem::take(&mut l.warnings);
    let pipeline = l.pipeline_layout.take();
    let executable = l.b.finish(program);
    Ok(Compiled {
        executable,
        inputs,
        outputs,
        infeeds: Vec::new(),
        outfeeds: Vec::new(),
        warnings,
        pipeline,
    })
}

fn arrays(v: &Value) -> Vec<Value> {
    v.leaves().into_iter().map(Value::Array).collect()
}

/// The tensors of `args`: a function's argument buffers.
fn tensors_of(args: &[Value]) -> HashSet<TensorId> {
    args.iter()
        .flat_map(|v| v.leaves())
        .map(|a| a.tensor)
        .collect()
}

fn values(arrs: &[Arr]) -> Vec<Value> {
    arrs.iter().cloned().map(Value::Array).collect()
}

impl<'m> Lowerer<'m> {
    fn training(
        &mut self,
        pipeline: &TrainingPipeline,
        shapes: &[StageShapes],
        modules: &'m [StageModules],
        ipus: &[usize],
    ) -> Result<(Vec<HostBuffer>, Vec<HostBuffer>), CompileError> {
        let n = shapes.len();
        let m = pipeline.gradient_accumulation_count;
        let steps = training_steps(pipeline.schedule, n, m);
        let depths = stash_depths(&steps);
        let start = self.step;
        let mut persistent: Vec<TensorId> = Vec::new();
        let mut host_in: Vec<HostBuffer> = Vec::new();
        let mut host_out: Vec<HostBuffer> = Vec::new();
        // Weights, streamed in once per execution onto their stage's IPU.
        let mut weights: Vec<Vec<Arr>> = Vec::with_capacity(n);
        for (s, sh) in shapes.iter().enumerate() {
            let mut w = Vec::new();
            for (k, shape) in sh.weights.iter().enumerate() {
                let name = format!("stage{s}.weight{k}");
                let v = self.on_ipu(ipus[s], |l| {
                    l.stream_in(&name, &xla_ir::Shape::Array(shape.clone()), &mut host_in)
                });
                w.extend(v.leaves());
            }
            weights.push(w);
        }
        let new_arrs = |l: &mut Self, s: usize, what: &str, list: &[xla_ir::ArrayShape]| {
            l.on_ipu(ipus[s], |l| {
                list.iter()
                    .enumerate()
                    .map(|(k, shape)| l.linear_arr(&format!("stage{s}.{what}{k}"), shape))
                    .collect::<Vec<Arr>>()
            })
        };
        let mut accumulators = Vec::with_capacity(n);
        let mut input_buffers: Vec<Vec<Arr>> = Vec::with_capacity(n);
        let mut gradient_buffers: Vec<Vec<Arr>> = Vec::with_capacity(n);
        let mut stashes: Vec<Vec<Vec<Arr>>> = Vec::with_capacity(n);
        for (s, sh) in shapes.iter().enumerate() {
            accumulators.push(new_arrs(self, s, "accumulated", &sh.weights));
            // Stage 0's inputs come from the host inside its forward function.
            input_buffers.push(if s == 0 {
                Vec::new()
            } else {
                new_arrs(self, s, "input", &sh.inputs)
            });
            let differentiated = pipeline.stages.get(s + 1).map_or(0, |next| next.gradients);
            gradient_buffers.push(new_arrs(
                self,
                s,
                "output_gradient",
                &sh.outputs[..differentiated],
            ));
            let with_checkpoints: Vec<xla_ir::ArrayShape>;
            let kept = if modules[s].recomputed {
                with_checkpoints = sh
                    .inputs
                    .iter()
                    .chain(&modules[s].checkpointed)
                    .cloned()
                    .collect();
                &with_checkpoints
            } else {
                &sh.saved
            };
            stashes.push(
                (0..depths[s])
                    .map(|slot| new_arrs(self, s, &format!("stash{slot}."), kept))
                    .collect(),
            );
        }
        let mut stages: Vec<Stage> = Vec::with_capacity(n);
        for s in 0..n {
            let ipu = ipus[s];
            let mods = &modules[s];
            // Forward: (weights, inputs) -> (outputs, saved); stage 0 reads a micro-batch
            // from the host, the last stage writes its outputs to the host.
            self.begin();
            let mut args = values(&weights[s]);
            let mut stage_inputs: Vec<Arr> = input_buffers[s].clone();
            if s == 0 {
                for (k, shape) in shapes[0].inputs.iter().enumerate() {
                    let first = host_in.len();
                    let shape = xla_ir::Shape::Array(shape.clone());
                    let v = self.on_ipu(ipu, |l| {
                        l.stream_in(&format!("micro_batch{k}"), &shape, &mut host_in)
                    });
                    for b in &mut host_in[first..] {
                        b.per_iteration = true;
                    }
                    persistent.extend(v.leaves().iter().map(|a| a.tensor));
                    stage_inputs.extend(v.leaves());
                    args.extend(arrays(&v));
                }
            } else {
                args.extend(values(&input_buffers[s]));
            }
            let taken = tensors_of(&args);
            let result = self.lower_on(ipu, &mods.forward, args)?;
            let leaves = result.leaves();
            // A recomputed stage's forward pass returns its outputs only.
            let saved_count = if mods.recomputed {
                mods.checkpointed.len()
            } else {
                shapes[s].saved.len()
            };
            let (outs, saved) = leaves.split_at(leaves.len() - saved_count);
            let outs = self.owned(ipu, outs, &taken);
            if s + 1 == n {
                for (j, leaf) in outs.iter().enumerate() {
                    let mut b = self.stream_out(&format!("out{j}"), leaf);
                    b.per_iteration = true;
                    host_out.push(b);
                }
            }
            let body = self.end();
            let forward = self.b.function(body);
            let slot0 = stashes[s]
                .first()
                .map(|slot| values(slot))
                .unwrap_or_default();
            // RecomputeThenBackpropagate: (weights, stashed inputs) -> saved values, which
            // the backward pass then reads.
            let mut recomputed_saved = Vec::new();
            let recompute = match &mods.recompute {
                Some(module) => {
                    self.begin();
                    let mut args = values(&weights[s]);
                    args.extend(slot0.iter().cloned());
                    let taken = tensors_of(&args);
                    let leaves = self.lower_on(ipu, module, args)?.leaves();
                    recomputed_saved = self.owned(ipu, &leaves, &taken);
                    let body = self.end();
                    Some(self.b.function(body))
                }
                None => None,
            };
            // Backward: (weights, saved, output gradients) -> (input gradients, weight
            // gradients), the latter added into the accumulators. (Interleaved
            // recomputation: the saved values are recomputed inside, from the inputs.)
            self.begin();
            let mut args = values(&weights[s]);
            if recompute.is_some() {
                args.extend(values(&recomputed_saved));
            } else {
                args.extend(slot0);
            }
            args.extend(values(&gradient_buffers[s]));
            let taken = tensors_of(&args);
            let grads = self.lower_on(ipu, &mods.backward, args)?.leaves();
            let (input_gradients, weight_gradients) = grads.split_at(pipeline.stages[s].gradients);
            let input_gradients = self.owned(ipu, input_gradients, &taken);
            let mut args = values(&accumulators[s]);
            args.extend(values(weight_gradients));
            let sum = self.lower_on(ipu, &mods.accumulate, args)?;
            let into = Value::Tuple(values(&accumulators[s]));
            self.on_ipu(ipu, |l| l.write_back(&sum, &into));
            let body = self.end();
            let backward = self.b.function(body);
            // Zeroing the accumulators, and the optimiser's update of the weights.
            self.begin();
            let zeros = self.lower_on(ipu, &mods.zeros, Vec::new())?;
            self.on_ipu(ipu, |l| l.write_back(&zeros, &into));
            let body = self.end();
            let zero = self.b.function(body);
            self.begin();
            let mut args = values(&weights[s]);
            args.extend(values(&accumulators[s]));
            let updated = self.lower_on(ipu, &mods.update, args)?;
            let into = Value::Tuple(values(&weights[s]));
            self.on_ipu(ipu, |l| l.write_back(&updated, &into));
            let body = self.end();
            let update = self.b.function(body);
            persistent.extend(
                outs.iter()
                    .chain(saved)
                    .chain(&recomputed_saved)
                    .chain(&input_gradients)
                    .map(|a| a.tensor),
            );
            stages.push(Stage {
                ipu,
                forward,
                recompute,
                backward,
                zero,
                update,
                outputs: outs,
                inputs: input_buffers[s].clone(),
                stashed: if mods.recomputed {
                    stage_inputs
                        .into_iter()
                        .chain(saved.iter().cloned())
                        .collect()
                } else {
                    saved.to_vec()
                },
                stash: stashes[s].clone(),
                input_gradients,
                gradients: gradient_buffers[s].clone(),
            });
        }
        for a in weights
            .iter()
            .chain(&accumulators)
            .chain(&input_buffers)
            .chain(&gradient_buffers)
            .chain(stashes.iter().flatten())
            .flatten()
        {
            persistent.push(a.tensor);
        }
        // One pipeline run: zero the accumulators, the steps phase by phase, update the
        // weights.
        let zero = side_by_side(stages.iter().map(|st| (st.ipu, Program::Call(st.zero))));
        let update = side_by_side(stages.iter().map(|st| (st.ipu, Program::Call(st.update))));
        let every = |n: u64| vec![n; stages.len()];
        let mut layout = vec![PipelinePhase {
            name: "accumulators zeroed".into(),
            program: zero,
            steps: 0,
            working: every(0),
        }];
        let all_working = |t: usize| {
            steps[t]
                .iter()
                .all(|w| w.forward.is_some() || w.backward.is_some())
        };
        for (name, range) in phases(steps.len(), all_working) {
            let mut items = Vec::new();
            for (count, block) in repeats(&steps[range.clone()], 2 * n) {
                let body: Vec<Program> = block
                    .iter()
                    .map(|&t| self.step_program(&stages, &steps[range.start + t]))
                    .collect();
                let body = if body.len() == 1 {
                    body.into_iter().next().expect("one step")
                } else {
                    Program::Sequence(body)
                };
                items.push(if count == 1 {
                    body
                } else {
                    Program::Repeat {
                        count,
                        body: Box::new(body),
                    }
                });
            }
            let working = (0..n)
                .map(|s| {
                    steps[range.clone()]
                        .iter()
                        .filter(|row| row[s].forward.is_some() || row[s].backward.is_some())
                        .count() as u64
                })
                .collect();
            layout.push(PipelinePhase {
                name: name.into(),
                program: Program::Sequence(items),
                steps: range.len() as u64,
                working,
            });
        }
        layout.push(PipelinePhase {
            name: "weight update".into(),
            program: update,
            steps: 0,
            working: every(0),
        });
        self.emit(Program::Repeat {
            count: pipeline.repeat_count,
            body: Box::new(Program::Sequence(
                layout.iter().map(|p| p.program.clone()).collect(),
            )),
        });
        self.pipeline_layout = Some(PipelineLayout {
            stage_ipus: ipus.to_vec(),
            phases: layout,
            runs: pipeline.repeat_count,
        });
        for a in weights.iter().flatten() {
            let j = host_out.len();
            let b = self.stream_out(&format!("out{j}"), a);
            host_out.push(b);
        }
        let now = self.step;
        let keep: HashSet<TensorId> = persistent.into_iter().collect();
        for (i, life) in self.life.iter_mut().enumerate() {
            if keep.contains(&TensorId(i as u32)) {
                life.first = life.first.min(start);
                life.last = now;
            }
        }
        Ok((host_in, host_out))
    }

    /// Lowers `module`'s entry computation on `ipu` with `args`, into the sequence being
    /// built; returns its root value.
    fn lower_on(
        &mut self,
        ipu: usize,
        module: &'m Module,
        args: Vec<Value>,
    ) -> Result<Value, CompileError> {
        let outer = std::mem::replace(&mut self.module, module);
        let out = self.on_ipu(ipu, |l| l.computation(module.entry, args));
        self.module = outer;
        out
    }

    /// `leaves` as values the function owns: a leaf that is one of its arguments (`taken`:
    /// a buffer another step may overwrite before the hand-off reads it) is copied into a
    /// tensor of its own.
    fn owned(&mut self, ipu: usize, leaves: &[Arr], taken: &HashSet<TensorId>) -> Vec<Arr> {
        leaves
            .iter()
            .map(|a| {
                if !taken.contains(&a.tensor) {
                    return a.clone();
                }
                let name = format!("{}.handed_on", self.b.tensor_info(a.tensor).name);
                let own = self.on_ipu(ipu, |l| l.linear_arr(&name, &a.shape));
                let copy = self.copy(a, &own);
                self.emit(copy);
                own
            })
            .collect()
    }

    /// The program of one step: each working stage's passes and stash moves side by side,
    /// then activations handed forward and gradients backward.
    fn step_program(&mut self, stages: &[Stage], work: &[Work]) -> Program {
        let mut branches = Vec::new();
        let mut handoffs = Vec::new();
        for (s, (st, w)) in stages.iter().zip(work).enumerate() {
            let mut seq = Vec::new();
            let mut held = w.stashed;
            if w.forward.is_some() {
                seq.push(Program::Call(st.forward));
                for (src, dst) in st.stashed.iter().zip(&st.stash[held]) {
                    seq.push(self.copy(src, dst));
                }
                held += 1;
                if let Some(next) = stages.get(s + 1) {
                    for (src, dst) in st.outputs.iter().zip(&next.inputs) {
                        handoffs.push((src.clone(), dst.clone()));
                    }
                }
            }
            if w.backward.is_some() {
                if let Some(recompute) = st.recompute {
                    seq.push(Program::Call(recompute));
                }
                seq.push(Program::Call(st.backward));
                for k in 0..held - 1 {
                    for (src, dst) in st.stash[k + 1].iter().zip(&st.stash[k]) {
                        seq.push(self.copy(src, dst));
                    }
                }
                if s > 0 {
                    for (src, dst) in st.input_gradients.iter().zip(&stages[s - 1].gradients) {
                        handoffs.push((src.clone(), dst.clone()));
                    }
                }
            }
            if !seq.is_empty() {
                branches.push((st.ipu, Program::Sequence(seq)));
            }
        }
        let mut body = vec![side_by_side(branches)];
        for (src, dst) in handoffs {
            body.push(self.copy(&src, &dst));
        }
        Program::Sequence(body)
    }

    fn copy(&mut self, src: &Arr, dst: &Arr) -> Program {
        self.use_tensor(src.tensor);
        self.use_tensor(dst.tensor);
        Program::Copy {
            src: src.tensor,
            dst: dst.tensor,
        }
    }
}
