//! Where a model runs: a [`Device`] loads a step program (a training, evaluation or
//! prediction step run `iterations` times per execution, weights carried from one
//! iteration to the next) and runs executions of it. The facade's `IpuModel` runs them on
//! the IPU Model; [`Evaluator`] here runs them on the reference evaluator.

use xla_ir::eval::{evaluate, evaluate_replicated};
use xla_ir::literal::ArrayLiteral;
use xla_ir::{Literal, Module};

/// What a device reports when it cannot load or run a program.
pub type DeviceError = Box<dyn std::error::Error + Send + Sync>;

/// A step program: `module` run `iterations` times in one execution on each of `replicas`.
#[derive(Debug, Clone)]
pub struct StepProgram {
    /// The step (its `input_output_alias` names the carried parameters).
    pub module: Module,
    /// Iterations per execution (the seed's `steps_per_execution`).
    pub iterations: u64,
    /// Per entry parameter: fed one value per iteration (its input has a leading dimension
    /// of `iterations`).
    pub fed: Vec<bool>,
    /// Per entry parameter: the result leaf that holds its next value (carried from one
    /// iteration to the next, and resident on the device between executions).
    pub carried: Vec<Option<usize>>,
    /// Replicas (data parallel copies), each with its own inputs.
    pub replicas: usize,
}

/// One stage of a training pipeline (the compiler's `TrainingStage`): its forward and
/// backward computations.
#[derive(Debug, Clone)]
pub struct PipelineStage {
    /// `(weights..., inputs...) -> (outputs..., saved...)`.
    pub forward: Module,
    /// `(weights..., saved..., gradients of the next stage's differentiated inputs...) ->
    /// (gradients of this stage's first `gradients` inputs..., weight gradients...)`.
    pub backward: Module,
    /// The stage's weights: the forward computation's first parameters.
    pub weights: usize,
    /// Values saved for the backward pass: the forward computation's last results.
    pub saved: usize,
    /// The stage's first inputs that receive gradients (0 for stage 0).
    pub gradients: usize,
}

/// A training pipeline: stage `k` on IPU `k`, `gradient_accumulation` micro-batches per
/// pipeline run (their gradients summed into one update by `updates`), `repeat_count` runs
/// per execution.
#[derive(Debug, Clone)]
pub struct PipelineProgram {
    /// The stages.
    pub stages: Vec<PipelineStage>,
    /// Per stage: `(weights..., summed gradients...) -> (weights...)`.
    pub updates: Vec<Module>,
    /// Micro-batches per pipeline run.
    pub gradient_accumulation: u64,
    /// Pipeline runs per execution.
    pub repeat_count: u64,
}

/// A program loaded on a device.
pub trait LoadedStep {
    /// One execution: `inputs[r]` are replica r's, one literal per parameter (fed ones
    /// stacked over the iterations). Per replica: the result leaves, carried ones as their
    /// last values, the others stacked over the iterations.
    fn run(&mut self, inputs: &[Vec<Literal>]) -> Result<Vec<Vec<ArrayLiteral>>, DeviceError>;
    /// The host changed carried values: the next execution streams them in again.
    fn reupload(&mut self);
    /// The simulated cycles of the last execution, when the device models time.
    fn last_cycles(&self) -> Option<u64>;
}

/// Something that runs step programs.
pub trait Device {
    /// Its name, for messages.
    fn name(&self) -> String;
    /// Compiles and loads `program`.
    fn load(&mut self, program: StepProgram) -> Result<Box<dyn LoadedStep>, DeviceError>;

    /// Whether the device runs models in pipeline stages as pipelines (else a staged model
    /// trains with its plain step, which computes the same).
    fn runs_pipelines(&self) -> bool {
        false
    }

    /// Compiles and loads a training pipeline. One execution takes every stage's weights
    /// (in stage order) and stage 0's inputs stacked over the micro-batches; it returns the
    /// last stage's outputs stacked over them, then the trained weights.
    fn load_pipeline(
        &mut self,
        program: PipelineProgram,
    ) -> Result<Box<dyn LoadedStep>, DeviceError> {
        let _ = program;
        Err(format!("{} does not run training pipelines", self.name()).into())
    }
}

/// The reference evaluator as a device: exact IEEE arithmetic, no cycles.
#[derive(Debug, Clone, Copy, Default)]
pub struct Evaluator;

impl Device for Evaluator {
    fn name(&self) -> String {
        "the reference evaluator".into()
    }

    fn load(&mut self, program: StepProgram) -> Result<Box<dyn LoadedStep>, DeviceError> {
        xla_ir::verify(&program.module)?;
        Ok(Box::new(EvaluatorStep(program)))
    }
}

struct EvaluatorStep(StepProgram);

fn leaves(l: Literal, out: &mut Vec<ArrayLiteral>) {
    match l {
        Literal::Array(a) => out.push(a),
        Literal::Tuple(items) => items.into_iter().for_each(|x| leaves(x, out)),
        Literal::Token => {}
    }
}

impl LoadedStep for EvaluatorStep {
    fn run(&mut self, inputs: &[Vec<Literal>]) -> Result<Vec<Vec<ArrayLiteral>>, DeviceError> {
        let p = &self.0;
        if inputs.len() != p.replicas {
            return Err(
                format!("{} replicas, inputs for {} given", p.replicas, inputs.len()).into(),
            );
        }
        let mut args: Vec<Vec<Literal>> = inputs.to_vec();
        let mut stacked: Vec<Vec<Vec<ArrayLiteral>>> = vec![Vec::new(); p.replicas];
        let mut last: Vec<Vec<ArrayLiteral>> = vec![Vec::new(); p.replicas];
        for i in 0..p.iterations as usize {
            for (r, replica) in args.iter_mut().enumerate() {
                for (k, fed) in p.fed.iter().enumerate() {
                    if *fed {
                        let Literal::Array(all) = &inputs[r][k] else {
                            return Err(format!("fed parameter {k} is not an array").into());
                        };
                        replica[k] = Literal::Array(all.index_leading(i));
                    }
                }
            }
            let results = if p.replicas == 1 {
                vec![evaluate(&p.module, &args[0])?]
            } else {
                evaluate_replicated(&p.module, &args)?
            };
            for (r, result) in results.into_iter().enumerate() {
                let mut out = Vec::new();
                leaves(result, &mut out);
                for (k, carried) in p.carried.iter().enumerate() {
                    if let Some(leaf) = carried {
                        args[r][k] = Literal::Array(out[*leaf].clone());
                    }
                }
                stacked[r].resize_with(out.len(), Vec::new);
                for (j, v) in out.iter().enumerate() {
                    stacked[r][j].push(v.clone());
                }
                last[r] = out;
            }
        }
        let carried_leaves: Vec<usize> = p.carried.iter().flatten().copied().collect();
        let mut outputs = Vec::with_capacity(p.replicas);
        for (r, final_values) in last.into_iter().enumerate() {
            let mut replica = Vec::with_capacity(final_values.len());
            for (j, v) in final_values.into_iter().enumerate() {
                replica.push(if carried_leaves.contains(&j) {
                    v
                } else {
                    ArrayLiteral::stack(&stacked[r][j])?
                });
            }
            outputs.push(replica);
        }
        Ok(outputs)
    }

    fn reupload(&mut self) {}

    fn last_cycles(&self) -> Option<u64> {
        None
    }
}
