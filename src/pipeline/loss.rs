//! Training pipelines from a loss module: `(weights..., micro-batch inputs...) -> loss` with
//! its instructions in pipeline stages (`ipu_stage`; none: one stage). The frontend splits
//! it into stages and differentiates each ([`frontend::split`]); the stages' weights are
//! updated by SGD on the mean gradient of the accumulated micro-batches.

use anyhow::{Context, bail};
use compiler::training_pipeline::{Optimizer, TrainingPipeline, TrainingStage};
use std::collections::HashMap;
use xla_ir::Module;

/// The compiler's form of a frontend pipeline stage.
pub fn training_stage(s: frontend::device::PipelineStage) -> TrainingStage {
    TrainingStage {
        forward: s.forward,
        backward: s.backward,
        weights: s.weights,
        saved: s.saved,
        gradients: s.gradients,
    }
}

/// A loss module's training pipeline and where its weights and data come from.
#[derive(Debug, Clone)]
pub struct LossPipeline {
    /// The pipeline.
    pub pipeline: TrainingPipeline,
    /// The entry parameter number of each of the pipeline's weights (every stage's, in
    /// stage order): what its weight inputs and trained-weight outputs are.
    pub weights: Vec<usize>,
    /// The entry parameter numbers of the micro-batch inputs, in stage 0's order.
    pub data: Vec<usize>,
}

/// The training pipeline of `module` (a loss module): `trained[p]` marks the weights;
/// each update is `w - learning_rate * mean gradient` over `gradient_accumulation`
/// micro-batches; `repeat_count` updates per execution.
pub fn pipeline_from_loss(
    module: &Module,
    trained: &[bool],
    learning_rate: f64,
    gradient_accumulation: u64,
    repeat_count: u64,
) -> anyhow::Result<LossPipeline> {
    if gradient_accumulation == 0 {
        bail!("the gradient accumulation must be at least 1");
    }
    let entry = module.entry_computation();
    let stages = compiler::placement::pipeline_stages(entry).unwrap_or_else(|| {
        entry
            .order()
            .iter()
            .map(|&i| (i, 0))
            .collect::<HashMap<_, _>>()
    });
    let split = frontend::split::training_stages(module, &stages, trained)
        .with_context(|| format!("training pipeline of {}", module.name))?;
    let stages = split.stages.into_iter().map(training_stage).collect();
    // The pipeline sums the micro-batches' gradients; the update takes their mean.
    let optimizer = Optimizer::Sgd {
        learning_rate: (learning_rate / gradient_accumulation as f64) as f32,
    };
    let mut pipeline = TrainingPipeline::new(stages, optimizer, gradient_accumulation);
    pipeline.repeat_count = repeat_count;
    Ok(LossPipeline {
        pipeline,
        weights: split.weights.into_iter().flatten().collect(),
        data: split.data,
    })
}
