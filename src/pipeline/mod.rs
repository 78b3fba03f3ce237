//! Training pipelines on the IPU Model, built from Rust ([`compiler::training_pipeline`]):
//! run one, or compute what it computes on the reference evaluator, one micro-batch after
//! another.

use crate::device::{DeviceRun, LoadTimings, LoadedModule, run_once};
use crate::device_loop::OutfeedMode;
use anyhow::Context;
pub use compiler::config::PipelineSchedule;
pub use compiler::training_pipeline::{Optimizer, TrainingPipeline, TrainingStage, sgd_update};
use compiler::{DeviceLoop, IpuConfig};
use runtime::EngineOptions;
use xla_ir::eval::{EvaluateError, evaluate};
use xla_ir::literal::ArrayLiteral;
use xla_ir::{Literal, Module};

pub mod loss;
pub mod mlp;

/// Compiles `pipeline` for `config` and runs one execution on the IPU Model:
/// `weights` are every stage's weights (stage order, one literal per weight) and
/// `micro_batches` stage 0's inputs, each with a leading dimension of
/// [`TrainingPipeline::micro_batches`]. The run's outputs are the last stage's outputs
/// (stacked over the micro-batches) and then every stage's trained weights.
pub fn run_training_pipeline_on_ipu_model(
    pipeline: &TrainingPipeline,
    config: &IpuConfig,
    weights: &[Literal],
    micro_batches: &[Literal],
) -> anyhow::Result<DeviceRun> {
    let t0 = std::time::Instant::now();
    let obtained = crate::executable_cache::compile_pipeline(pipeline, config)?;
    let (compiled, read_from) = (obtained.compiled, obtained.read_from);
    let compile_seconds = t0.elapsed().as_secs_f64();
    let shapes = pipeline.check()?;
    let last = shapes.last().expect("a checked pipeline has stages");
    let declared = last
        .outputs
        .iter()
        .chain(shapes.iter().flat_map(|s| &s.weights))
        .cloned()
        .collect();
    let lp = DeviceLoop {
        iterations: pipeline.micro_batches(),
        fed: Vec::new(),
        resident: false,
    };
    let (mut loaded, load_seconds) =
        LoadedModule::from_compiled(compiled, declared, Some(lp), EngineOptions::default(), None)?;
    loaded.outfeed_mode = OutfeedMode::All;
    let inputs: Vec<Literal> = weights.iter().chain(micro_batches).cloned().collect();
    let timings = LoadTimings {
        compile_seconds,
        load_seconds,
        read_from,
    };
    run_once(loaded, timings, &inputs, &mut Default::default())
}

/// What `pipeline` computes, on the reference evaluator: for each pipeline run, every
/// micro-batch forward through the stages and back, the weight gradients summed, then the
/// optimiser's update. Same inputs and outputs as [`run_training_pipeline_on_ipu_model`].
pub fn evaluate_training_pipeline(
    pipeline: &TrainingPipeline,
    weights: &[Literal],
    micro_batches: &[Literal],
) -> anyhow::Result<Vec<ArrayLiteral>> {
    let shapes = pipeline.check()?;
    let updates = pipeline.update_modules(&shapes)?;
    let mut w: Vec<Vec<Literal>> = Vec::new();
    let mut rest = weights;
    for (s, sh) in shapes.iter().enumerate() {
        anyhow::ensure!(
            rest.len() >= sh.weights.len(),
            "stage {s} takes {} weights but only {} are left of the {} given",
            sh.weights.len(),
            rest.len(),
            weights.len()
        );
        let (mine, others) = rest.split_at(sh.weights.len());
        w.push(mine.to_vec());
        rest = others;
    }
    anyhow::ensure!(
        rest.is_empty(),
        "{} weights given, the stages take {}",
        weights.len(),
        weights.len() - rest.len()
    );
    let batches: Vec<&ArrayLiteral> = micro_batches
        .iter()
        .map(|l| match l {
            Literal::Array(a) => Ok(a),
            _ => Err(anyhow::anyhow!("micro-batches are arrays")),
        })
        .collect::<anyhow::Result<_>>()?;
    let run = |m: &Module, args: &[Literal], what: &str| -> anyhow::Result<Vec<Literal>> {
        let out = evaluate(m, args)
            .map_err(|e: EvaluateError| anyhow::anyhow!(e))
            .with_context(|| what.to_string())?;
        Ok(match out {
            Literal::Tuple(items) => items,
            other => vec![other],
        })
    };
    let n = shapes.len();
    let mut outputs: Vec<Vec<ArrayLiteral>> = Vec::new();
    let mut next = 0usize;
    for _ in 0..pipeline.repeat_count {
        let mut acc: Vec<Vec<Literal>> = Vec::new();
        for (s, sh) in shapes.iter().enumerate() {
            let zeros = compiler::training_pipeline::zeros("zeros", &sh.weights)?;
            acc.push(run(&zeros, &[], &format!("stage {s}'s zeros"))?);
        }
        for _ in 0..pipeline.gradient_accumulation_count {
            let mut x: Vec<Literal> = batches
                .iter()
                .map(|b| Literal::Array(b.index_leading(next)))
                .collect();
            next += 1;
            let mut saved: Vec<Vec<Literal>> = Vec::new();
            for s in 0..n {
                let args: Vec<Literal> = w[s].iter().cloned().chain(x).collect();
                let mut out = run(
                    &pipeline.stages[s].forward,
                    &args,
                    &format!("stage {s}'s forward computation"),
                )?;
                let kept = out.split_off(out.len() - shapes[s].saved.len());
                saved.push(kept);
                x = out;
            }
            outputs.push(x.into_iter().flat_map(crate::device_loop::leaves).collect());
            let mut grads: Vec<Literal> = Vec::new();
            for s in (0..n).rev() {
                let args: Vec<Literal> = w[s]
                    .iter()
                    .cloned()
                    .chain(saved[s].iter().cloned())
                    .chain(grads)
                    .collect();
                let mut out = run(
                    &pipeline.stages[s].backward,
                    &args,
                    &format!("stage {s}'s backward computation"),
                )?;
                let weight_grads = out.split_off(pipeline.stages[s].gradients);
                let sum =
                    compiler::training_pipeline::accumulate("accumulate", &shapes[s].weights)?;
                let args: Vec<Literal> = acc[s].iter().cloned().chain(weight_grads).collect();
                acc[s] = run(&sum, &args, "accumulating gradients")?;
                grads = out;
            }
        }
        for s in 0..n {
            let args: Vec<Literal> = w[s].iter().cloned().chain(acc[s].iter().cloned()).collect();
            w[s] = run(&updates[s], &args, &format!("stage {s}'s optimiser update"))?;
        }
    }
    let mut result = Vec::new();
    let per_output = outputs.first().map_or(0, |o| o.len());
    for j in 0..per_output {
        let items: Vec<ArrayLiteral> = outputs.iter().map(|o| o[j].clone()).collect();
        result.push(ArrayLiteral::stack(&items).map_err(|e| anyhow::anyhow!(e))?);
    }
    result.extend(w.into_iter().flatten().flat_map(crate::device_loop::leaves));
    Ok(result)
}
