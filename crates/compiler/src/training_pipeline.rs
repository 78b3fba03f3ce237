//! Training pipelines built from Rust: the seed's `pipelining_ops.pipeline(
//! computational_stages, gradient_accumulation_count, repeat_count, inputs, infeed_queue,
//! outfeed_queue, optimizer_function, device_mapping, pipeline_schedule)` for HLO stages.
//!
//! Each [`TrainingStage`] is a forward computation and its gradient computation (HLO
//! modules, built with [`xla_ir::builder`] or parsed). Stage `s` runs on IPU
//! `device_mapping[s]` (default `s`): its forward pass, its backward pass on the same IPU
//! (reading the values its forward pass saved, stashed until then), the accumulation of its
//! weights' gradients over `gradient_accumulation_count` micro-batches and, once per
//! pipeline run, the optimiser's update of the weights where they live. Micro-batches come
//! through stage 0's inputs (one per micro-batch, as the seed's infeed), the last stage's
//! outputs go to the host per micro-batch (its outfeed), and the whole pipeline runs
//! `repeat_count` times in one execution.
//!
//! Signatures (every value an array; tuples are the modules' root tuples):
//! - `forward`: `(weights..., inputs...) -> (outputs..., saved...)`; stage `s + 1`'s
//!   inputs are stage `s`'s outputs, in order and shape (a stage reads only the stage before
//!   it, as the seed requires: pass on explicitly what a later stage needs, labels say).
//! - `backward`: `(weights..., saved..., output gradients...) -> (input gradients...,
//!   weight gradients...)`: gradients of the first `next.gradients` outputs (none for the
//!   last stage, whose first output is differentiated: its loss), and of this stage's first
//!   `gradients` inputs (none for stage 0: its inputs are data).
//! - the optimiser, per stage: `(weights..., accumulated gradients...) -> (weights...)`
//!   ([`Optimizer::Sgd`] builds it).
//!
//! Accumulated gradients are sums over the micro-batches of a pipeline run (a loss summed
//! over the batch gives the accumulated batch's gradient).

use crate::config::{PipelineSchedule, RecomputationMode};
use crate::{CompileError, IpuConfig, recompute};
use xla_ir::builder::{BuildError, ComputationBuilder, ModuleBuilder};
use xla_ir::ids::InstrId;
use xla_ir::{ArrayShape, Module, Shape};

/// One pipeline stage: its forward computation and its gradient computation.
#[derive(Debug, Clone)]
pub struct TrainingStage {
    /// `(weights..., inputs...) -> (outputs..., saved...)`.
    pub forward: Module,
    /// `(weights..., saved..., gradients of the next stage's differentiated inputs...) ->
    /// (gradients of this stage's first `gradients` inputs..., weight gradients...)`.
    pub backward: Module,
    /// How many of the forward computation's parameters (the first ones) are the stage's
    /// weights: resident on its IPU, trained.
    pub weights: usize,
    /// How many of the forward computation's results (the last ones) are saved for the
    /// backward pass rather than passed on.
    pub saved: usize,
    /// How many of the stage's inputs (the first ones) receive gradients from its backward
    /// pass (0 for stage 0).
    pub gradients: usize,
}

/// The optimiser applied once per pipeline run to every stage's weights and accumulated
/// gradients (the seed's `optimizer_function`).
#[derive(Debug, Clone)]
pub enum Optimizer {
    /// Stochastic gradient descent: `w - learning_rate * g`.
    Sgd {
        /// The learning rate.
        learning_rate: f32,
    },
    /// One update module per stage: `(weights..., accumulated gradients...) -> (weights...)`.
    PerStage(Vec<Module>),
}

/// A training pipeline: stages, optimiser and the seed's pipeline options.
#[derive(Debug, Clone)]
pub struct TrainingPipeline {
    /// The stages, in order.
    pub stages: Vec<TrainingStage>,
    /// The weight update.
    pub optimizer: Optimizer,
    /// Micro-batches per pipeline run, their gradients accumulated into one update (the
    /// seed's `gradient_accumulation_count`; at least the number of stages for Grouped and
    /// Interleaved).
    pub gradient_accumulation_count: u64,
    /// Pipeline runs per execution (`repeat_count`, default 1).
    pub repeat_count: u64,
    /// How the stages share the steps.
    pub schedule: PipelineSchedule,
    /// The IPU of each stage (empty: stage K on IPU K). Stages that share an IPU (the
    /// seed's `[0, 1, 1, 0]`) run one after another within each step.
    pub device_mapping: Vec<usize>,
    /// How stages recompute their forward passes when the config's `allow_recompute` is
    /// on (default Auto); a mode other than Auto without it is an error.
    pub recomputation_mode: RecomputationMode,
}

impl TrainingPipeline {
    /// Everything the pipeline is, as text (its modules as HLO, its numbers and options):
    /// equal texts compile to the same executable (the executable cache's source).
    pub fn text(&self) -> String {
        use std::fmt::Write;
        let mut t = String::from("training pipeline\n");
        for (k, s) in self.stages.iter().enumerate() {
            let _ = writeln!(
                t,
                "stage {k}: {} weights, {} saved, {} gradients\n{}\n{}",
                s.weights, s.saved, s.gradients, s.forward, s.backward
            );
        }
        match &self.optimizer {
            Optimizer::Sgd { learning_rate } => {
                let _ = writeln!(t, "sgd {:?}", learning_rate.to_bits());
            }
            Optimizer::PerStage(updates) => {
                for u in updates {
                    let _ = writeln!(t, "update\n{u}");
                }
            }
        }
        let _ = writeln!(
            t,
            "accumulate {}, repeat {}, {:?}, mapping {:?}, {:?}",
            self.gradient_accumulation_count,
            self.repeat_count,
            self.schedule,
            self.device_mapping,
            self.recomputation_mode
        );
        t
    }

    /// A pipeline of `stages` with `optimizer`, accumulating `gradient_accumulation_count`
    /// micro-batches, repeat count 1, Grouped, stage K on IPU K.
    pub fn new(
        stages: Vec<TrainingStage>,
        optimizer: Optimizer,
        gradient_accumulation_count: u64,
    ) -> TrainingPipeline {
        TrainingPipeline {
            stages,
            optimizer,
            gradient_accumulation_count,
            repeat_count: 1,
            schedule: PipelineSchedule::Grouped,
            device_mapping: Vec::new(),
            recomputation_mode: RecomputationMode::Auto,
        }
    }

    /// Micro-batches one execution consumes: `gradient_accumulation_count × repeat_count`.
    pub fn micro_batches(&self) -> u64 {
        self.gradient_accumulation_count * self.repeat_count
    }

    /// The IPU of each stage.
    pub fn ipus(&self) -> Vec<usize> {
        if self.device_mapping.is_empty() {
            (0..self.stages.len()).collect()
        } else {
            self.device_mapping.clone()
        }
    }

    /// Checks the stages' signatures chain and the options fit; returns what each stage
    /// passes around.
    pub fn check(&self) -> Result<Vec<StageShapes>, CompileError> {
        let n = self.stages.len();
        if n == 0 {
            return Err(error("a pipeline needs at least one stage"));
        }
        if self.repeat_count == 0 {
            return Err(error("repeat_count must be at least 1"));
        }
        let m = self.gradient_accumulation_count;
        if m == 0 {
            return Err(error("gradient_accumulation_count must be at least 1"));
        }
        if self.schedule != PipelineSchedule::Sequential && m < n as u64 {
            return Err(error(format!(
                "gradient_accumulation_count {m} is less than the {n} stages: the {:?} schedule needs at least one micro-batch per stage to fill the pipeline (Sequential takes any count)",
                self.schedule
            )));
        }
        if !self.device_mapping.is_empty() && self.device_mapping.len() != n {
            return Err(error(format!(
                "device_mapping names {} IPUs but the pipeline has {n} stages",
                self.device_mapping.len()
            )));
        }
        let mut shapes: Vec<StageShapes> = Vec::with_capacity(n);
        for (s, stage) in self.stages.iter().enumerate() {
            shapes.push(stage_shapes(s, stage)?);
        }
        let updates = self.update_modules(&shapes)?;
        for s in 0..n {
            let here = &shapes[s];
            if s == 0 && self.stages[0].gradients != 0 {
                return Err(stage_error(
                    0,
                    "backward",
                    "stage 0's inputs are the micro-batch: `gradients` must be 0",
                ));
            }
            if self.stages[s].gradients > here.inputs.len() {
                return Err(stage_error(
                    s,
                    "backward",
                    format!(
                        "`gradients` is {} but the stage has {} inputs",
                        self.stages[s].gradients,
                        here.inputs.len()
                    ),
                ));
            }
            let grads_in: Vec<ArrayShape> = match shapes.get(s + 1) {
                Some(next) => {
                    if next.inputs != here.outputs {
                        return Err(stage_error(
                            s + 1,
                            "forward",
                            format!(
                                "its inputs ({}) are not stage {s}'s outputs ({}): a stage reads exactly what the stage before it passes on",
                                list(&next.inputs),
                                list(&here.outputs)
                            ),
                        ));
                    }
                    here.outputs[..self.stages[s + 1].gradients].to_vec()
                }
                None => Vec::new(),
            };
            let expected: Vec<ArrayShape> = here
                .weights
                .iter()
                .chain(&here.saved)
                .chain(&grads_in)
                .cloned()
                .collect();
            let params = array_params(&self.stages[s].backward, s, "backward")?;
            if params != expected {
                return Err(stage_error(
                    s,
                    "backward",
                    format!(
                        "it takes ({}) but must take the weights, the saved values and the gradients of the next stage's differentiated inputs: ({})",
                        list(&params),
                        list(&expected)
                    ),
                ));
            }
            let results = array_results(&self.stages[s].backward, s, "backward")?;
            let expected: Vec<ArrayShape> = here.inputs[..self.stages[s].gradients]
                .iter()
                .chain(&here.weights)
                .cloned()
                .collect();
            if results != expected {
                return Err(stage_error(
                    s,
                    "backward",
                    format!(
                        "it returns ({}) but must return the gradients of the first {} inputs and of the weights: ({})",
                        list(&results),
                        self.stages[s].gradients,
                        list(&expected)
                    ),
                ));
            }
            let update = &updates[s];
            let params = array_params(update, s, "optimizer")?;
            let expected: Vec<ArrayShape> =
                here.weights.iter().chain(&here.weights).cloned().collect();
            if params != expected {
                return Err(stage_error(
                    s,
                    "optimizer",
                    format!(
                        "it takes ({}) but must take the weights and their gradients: ({})",
                        list(&params),
                        list(&expected)
                    ),
                ));
            }
            let results = array_results(update, s, "optimizer")?;
            if results != here.weights {
                return Err(stage_error(
                    s,
                    "optimizer",
                    format!(
                        "it returns ({}) but must return the new weights: ({})",
                        list(&results),
                        list(&here.weights)
                    ),
                ));
            }
        }
        for (s, stage) in self.stages.iter().enumerate() {
            for (part, module) in [("forward", &stage.forward), ("backward", &stage.backward)] {
                refuse_shardings(module, s, part)?;
            }
        }
        Ok(shapes)
    }

    /// The optimiser's update module of every stage.
    pub fn update_modules(&self, shapes: &[StageShapes]) -> Result<Vec<Module>, CompileError> {
        match &self.optimizer {
            Optimizer::Sgd { learning_rate } => shapes
                .iter()
                .enumerate()
                .map(|(s, sh)| sgd_update(&format!("stage{s}_sgd"), &sh.weights, *learning_rate))
                .collect(),
            Optimizer::PerStage(modules) => {
                if modules.len() != shapes.len() {
                    return Err(error(format!(
                        "the optimiser has {} update modules for {} stages",
                        modules.len(),
                        shapes.len()
                    )));
                }
                Ok(modules.clone())
            }
        }
    }
}

/// What a stage's forward computation takes and gives, by role.
#[derive(Debug, Clone, PartialEq)]
pub struct StageShapes {
    /// The weights (the first parameters).
    pub weights: Vec<ArrayShape>,
    /// The inputs (the other parameters).
    pub inputs: Vec<ArrayShape>,
    /// The outputs passed on (the first results).
    pub outputs: Vec<ArrayShape>,
    /// The values saved for the backward pass (the last results).
    pub saved: Vec<ArrayShape>,
}

fn stage_shapes(s: usize, stage: &TrainingStage) -> Result<StageShapes, CompileError> {
    let params = array_params(&stage.forward, s, "forward")?;
    let results = array_results(&stage.forward, s, "forward")?;
    if stage.weights > params.len() {
        return Err(stage_error(
            s,
            "forward",
            format!(
                "`weights` is {} but it takes {} parameters",
                stage.weights,
                params.len()
            ),
        ));
    }
    if stage.saved > results.len() {
        return Err(stage_error(
            s,
            "forward",
            format!(
                "`saved` is {} but it returns {} values",
                stage.saved,
                results.len()
            ),
        ));
    }
    let (weights, inputs) = params.split_at(stage.weights);
    let (outputs, saved) = results.split_at(results.len() - stage.saved);
    for w in weights {
        if !w.element_type.is_float() {
            return Err(stage_error(
                s,
                "forward",
                format!("weight {w} is not floating point: weights are trained"),
            ));
        }
    }
    Ok(StageShapes {
        weights: weights.to_vec(),
        inputs: inputs.to_vec(),
        outputs: outputs.to_vec(),
        saved: saved.to_vec(),
    })
}

fn array_params(
    module: &Module,
    s: usize,
    part: &'static str,
) -> Result<Vec<ArrayShape>, CompileError> {
    module
        .entry_computation()
        .parameter_shapes()
        .iter()
        .enumerate()
        .map(|(k, p)| {
            p.as_array().cloned().ok_or_else(|| {
                stage_error(s, part, format!("parameter {k} is {p}; stages take arrays"))
            })
        })
        .collect()
}

fn array_results(
    module: &Module,
    s: usize,
    part: &'static str,
) -> Result<Vec<ArrayShape>, CompileError> {
    let root = &module.entry_computation().root_instr().shape;
    let items: Vec<&Shape> = match root {
        Shape::Tuple(items) => items.iter().collect(),
        other => vec![other],
    };
    items
        .into_iter()
        .enumerate()
        .map(|(k, r)| {
            r.as_array().cloned().ok_or_else(|| {
                stage_error(
                    s,
                    part,
                    format!("result {k} is {r}; a stage returns a tuple of arrays"),
                )
            })
        })
        .collect()
}

fn refuse_shardings(module: &Module, s: usize, part: &'static str) -> Result<(), CompileError> {
    for (_, comp) in module.computations() {
        if let Some((_, i)) = comp.instructions().find(|(_, i)| i.sharding.is_some()) {
            return Err(stage_error(
                s,
                part,
                format!(
                    "instruction {} carries a sharding; the pipeline places every stage on its IPU (device_mapping)",
                    i.name
                ),
            ));
        }
    }
    Ok(())
}

/// A module of one computation, `main`, whose root is the tuple `build` returns; `what` it
/// builds names a failure.
fn tuple_module(
    name: &str,
    what: &str,
    build: impl FnOnce(&mut ComputationBuilder<'_>) -> Result<Vec<InstrId>, BuildError>,
) -> Result<Module, CompileError> {
    let make = || -> Result<Module, BuildError> {
        let mut mb = ModuleBuilder::new(name);
        let mut c = mb.computation("main");
        let out = build(&mut c)?;
        let root = c.tuple(&out)?;
        let entry = c.finish(root)?;
        mb.finish(entry)
    };
    make().map_err(|e| error(format!("building {what}: {e}")))
}

/// Parameters `first..` of `c`, one per shape, named `prefix0`, `prefix1`, ...
fn parameters(
    c: &mut ComputationBuilder<'_>,
    first: usize,
    shapes: &[ArrayShape],
    prefix: &str,
) -> Result<Vec<InstrId>, BuildError> {
    shapes
        .iter()
        .enumerate()
        .map(|(k, w)| {
            c.parameter(
                (first + k) as u64,
                Shape::Array(w.clone()),
                &format!("{prefix}{k}"),
            )
        })
        .collect()
}

/// An SGD update module: `(w..., g...) -> (w - learning_rate * g...)`.
pub fn sgd_update(
    name: &str,
    weights: &[ArrayShape],
    learning_rate: f32,
) -> Result<Module, CompileError> {
    tuple_module(name, "the SGD update", |c| {
        let ws = parameters(c, 0, weights, "w")?;
        let gs = parameters(c, weights.len(), weights, "g")?;
        let mut out = Vec::new();
        for (k, w) in weights.iter().enumerate() {
            let lr = c.float_constant(w.element_type, learning_rate)?;
            let lr = c.broadcast(lr, &w.dims, &[])?;
            let step = c.multiply(lr, gs[k])?;
            out.push(c.subtract(ws[k], step)?);
        }
        Ok(out)
    })
}

/// Zeros of every shape, as a module of no parameters: how accumulators start a run.
pub fn zeros(name: &str, shapes: &[ArrayShape]) -> Result<Module, CompileError> {
    tuple_module(name, "the accumulators' zeros", |c| {
        shapes
            .iter()
            .map(|w| {
                let z = c.float_constant(w.element_type, 0.0)?;
                c.broadcast(z, &w.dims, &[])
            })
            .collect()
    })
}

/// `(acc..., g...) -> (acc + g...)`: how a backward pass adds its weight gradients.
pub fn accumulate(name: &str, shapes: &[ArrayShape]) -> Result<Module, CompileError> {
    tuple_module(name, "the gradient accumulation", |c| {
        let acc = parameters(c, 0, shapes, "acc")?;
        let gs = parameters(c, shapes.len(), shapes, "g")?;
        acc.iter().zip(gs).map(|(&a, g)| c.add(a, g)).collect()
    })
}

fn list(shapes: &[ArrayShape]) -> String {
    shapes
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn error(reason: impl Into<String>) -> CompileError {
    CompileError::Pipeline(reason.into())
}

fn stage_error(s: usize, part: &str, reason: impl Into<String>) -> CompileError {
    CompileError::Pipeline(format!("stage {s}'s {part} computation: {}", reason.into()))
}

/// Compiles `pipeline` for the IPU system `config` describes: one execution runs
/// [`TrainingPipeline::micro_batches`] micro-batches. The executable's inputs are every
/// stage's weights (stage order) and then stage 0's inputs (one value per micro-batch);
/// its outputs are the last stage's outputs (one value per micro-batch) and then every
/// stage's trained weights.
pub fn compile_training_pipeline(
    pipeline: &TrainingPipeline,
    config: &IpuConfig,
) -> Result<crate::Compiled, CompileError> {
    let shapes = pipeline.check()?;
    let updates = pipeline.update_modules(&shapes)?;
    let mode = recomputation(pipeline, config)?;
    // Every stage keeps the forward values its backward pass reads (a stage whose backward
    // pass runs its forward pass again is turned into one that stashes them): what the
    // IPU does without recomputation, and where recomputation starts from.
    let mut stashing = pipeline.clone();
    for stage in &mut stashing.stages {
        let form = recompute::stash::stashing_form(
            &stage.forward,
            &stage.backward,
            stage.weights,
            stage.saved,
        );
        stage.forward = form.forward;
        stage.backward = form.backward;
        stage.saved = form.saved;
    }
    let pipeline = &stashing;
    let shapes = pipeline.check().map_err(|e| {
        error(format!(
            "the stages' stashing form does not check (a bug in ipuxla): {e}"
        ))
    })?;
    let options = crate::PassOptions::default();
    let optimised = |m: &Module| -> Result<Module, CompileError> {
        Ok(crate::optimise(m, config, &options)?.0)
    };
    let mut modules = Vec::new();
    let mut notes = Vec::new();
    let last = pipeline.stages.len() - 1;
    for (s, (stage, sh)) in pipeline.stages.iter().zip(&shapes).enumerate() {
        // Every stage but the last recomputes (the last runs its backward pass right
        // after its forward pass: nothing waits in its stash), unless its forward pass
        // has an op that must not run twice.
        let stateful = recompute::pipeline::stateful_op(&stage.forward);
        let recomputed = match (mode, s == last, &stateful) {
            (Some(mode), false, None) => Some(mode),
            (Some(_), false, Some(op)) => {
                notes.push(format!(
                    "stage {s} is not recomputed: its forward pass has {op}, which must not run twice; it stashes its saved values"
                ));
                None
            }
            _ => None,
        };
        let (backward, recompute, checkpoints) = match recomputed {
            None => (optimised(&stage.backward)?, None, Vec::new()),
            Some(RecomputationMode::RecomputeAndBackpropagateInterleaved) => {
                // Checkpointed values are stashed beside the inputs, not recomputed.
                let checkpoints = recompute::pipeline::checkpoints(&stage.forward);
                let both = recompute::pipeline::recompute_and_backward(
                    &stage.forward,
                    &stage.backward,
                    stage.weights,
                    stage.saved,
                    &checkpoints,
                );
                (optimised(&both)?, None, checkpoints)
            }
            // Checkpoints have no effect here (the seed: RecomputeThenBackpropagate
            // recomputes everything).
            Some(_) => (
                optimised(&stage.backward)?,
                Some(optimised(&recompute::pipeline::saved_only(
                    &stage.forward,
                    stage.saved,
                ))?),
                Vec::new(),
            ),
        };
        let forward = if recomputed.is_some() {
            recompute::pipeline::outputs_and(&stage.forward, stage.saved, &checkpoints)
        } else {
            stage.forward.clone()
        };
        let fc = stage.forward.entry_computation();
        let checkpointed = checkpoints
            .iter()
            .map(|&c| {
                fc.instr(c).shape.as_array().cloned().ok_or_else(|| {
                    stage_error(
                        s,
                        "forward",
                        format!("checkpoint {} is not an array", fc.instr(c).name),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        modules.push(crate::lower::StageModules {
            forward: optimised(&forward)?,
            backward,
            recompute,
            recomputed: recomputed.is_some(),
            checkpointed,
            update: optimised(&updates[s])?,
            zeros: optimised(&zeros(&format!("stage{s}_zeros"), &sh.weights)?)?,
            accumulate: optimised(&accumulate(&format!("stage{s}_accumulate"), &sh.weights)?)?,
        });
    }
    let mut compiled = crate::lower::lower_training_pipeline(pipeline, &shapes, &modules, config)?;
    compiled.warnings.extend(notes);
    Ok(compiled)
}

/// The recomputation mode the pipeline runs with, resolved for its schedule; `None` when
/// `allow_recompute` is off (then a mode other than Auto is an error).
fn recomputation(
    pipeline: &TrainingPipeline,
    config: &IpuConfig,
) -> Result<Option<RecomputationMode>, CompileError> {
    if !config.allow_recompute {
        if pipeline.recomputation_mode != RecomputationMode::Auto {
            return Err(error(format!(
                "recomputation_mode is {:?} but allow_recompute is false: the mode says how the pipeline recomputes, so it needs allow_recompute",
                pipeline.recomputation_mode
            )));
        }
        return Ok(None);
    }
    pipeline
        .recomputation_mode
        .for_schedule(pipeline.schedule)
        .map(Some)
}
