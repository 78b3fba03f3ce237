//! Training pipelines from loss modules: an MLP loss written as plain HLO with its layers
//! in 4 pipeline stages is split and differentiated by the frontend, trained as a pipeline
//! on a 4-IPU IPU Model with every schedule, and gives the weights of one plain SGD step on
//! the accumulated batch.

use ipuxla::compiler::IpuConfig;
use ipuxla::compiler::config::{AutoSelectIpus, PipelineSchedule};
use ipuxla::frontend::autodiff::grad;
use ipuxla::frontend::init::{Init, Rng};
use ipuxla::frontend::nn;
use ipuxla::frontend::optimizers::Optimizer;
use ipuxla::frontend::scopes::pipeline_stage;
use ipuxla::pipeline::loss::pipeline_from_loss;
use ipuxla::pipeline::run_training_pipeline_on_ipu_model;
use xla_ir::builder::ModuleBuilder;
use xla_ir::literal::ArrayLiteral;
use xla_ir::{ElementType, InstrId, Literal, Module, Shape};

const DIMS: [i64; 5] = [16, 32, 32, 32, 8];
const MICRO: i64 = 4;
const ACCUMULATION: u64 = 8;
const LR: f64 = 0.05;

/// The MLP's loss on a batch of `batch`: layer k in stage k (or no stages); with `step`,
/// the SGD step's new weights instead of the loss.
fn mlp(batch: i64, staged: bool, step: bool) -> Module {
    let mut b = ModuleBuilder::entry(format!("mlp_b{batch}"), "main");
    let f32s = |d: &[i64]| Shape::array(ElementType::F32, d);
    let mut w = Vec::new();
    for k in 0..4 {
        w.push(
            b.parameter(k as u64, f32s(&[DIMS[k], DIMS[k + 1]]), &format!("w{k}"))
                .unwrap(),
        );
    }
    let x = b.parameter(4, f32s(&[batch, DIMS[0]]), "x").unwrap();
    let y = b.parameter(5, f32s(&[batch, DIMS[4]]), "y").unwrap();
    let mut h: InstrId = x;
    for (k, &wk) in w.iter().enumerate() {
        let layer = |b: &mut xla_ir::builder::ComputationBuilder<'_>| {
            let z = nn::linear(b, h, wk, None).unwrap();
            if k < 3 {
                nn::relu(b, z).unwrap()
            } else {
                nn::mean_squared_error(b, z, y).unwrap()
            }
        };
        h = if staged {
            pipeline_stage(&mut b, k, layer)
        } else {
            layer(&mut b)
        };
    }
    if !step {
        return b.finish_module(h).unwrap();
    }
    let g = grad(&mut b, h, &w).unwrap();
    let new: Vec<InstrId> = (0..4)
        .map(|k| {
            Optimizer::sgd(LR)
                .apply(&mut b, w[k], g[k], &[], None)
                .unwrap()
                .0
        })
        .collect();
    let root = b.tuple(&new).unwrap();
    b.finish_module(root).unwrap()
}

fn array(dims: &[i64], rng: &mut Rng) -> ArrayLiteral {
    Init::Uniform { limit: 0.5 }.sample(dims, rng)
}

#[test]
fn a_staged_loss_module_trains_as_a_pipeline_with_every_schedule() {
    let mut rng = Rng::new(31);
    let weights: Vec<ArrayLiteral> = (0..4)
        .map(|k| array(&[DIMS[k], DIMS[k + 1]], &mut rng))
        .collect();
    let n = MICRO * ACCUMULATION as i64;
    let x = array(&[n, DIMS[0]], &mut rng);
    let y = array(&[n, DIMS[4]], &mut rng);
    // One plain SGD step on the whole accumulated batch.
    let mut plain_inputs: Vec<Literal> = weights.iter().cloned().map(Literal::Array).collect();
    plain_inputs.push(Literal::Array(x.clone()));
    plain_inputs.push(Literal::Array(y.clone()));
    let want = match xla_ir::eval::evaluate(&mlp(n, false, true), &plain_inputs).unwrap() {
        Literal::Tuple(items) => items,
        other => panic!("{other}"),
    };
    let module = mlp(MICRO, true, false);
    let trained = [true, true, true, true, false, false];
    let config = IpuConfig {
        auto_select_ipus: AutoSelectIpus::Count(4),
        ..IpuConfig::default()
    };
    let stack = |a: &ArrayLiteral, cols: i64| ArrayLiteral {
        shape: xla_ir::ArrayShape::new(ElementType::F32, &[ACCUMULATION as i64, MICRO, cols]),
        data: a.data.clone(),
    };
    for schedule in [
        PipelineSchedule::Grouped,
        PipelineSchedule::Interleaved,
        PipelineSchedule::Sequential,
    ] {
        let mut lp = pipeline_from_loss(&module, &trained, LR, ACCUMULATION, 1).unwrap();
        lp.pipeline.schedule = schedule;
        assert_eq!(lp.weights, [0, 1, 2, 3]);
        assert_eq!(lp.data, [4, 5]);
        let ws: Vec<Literal> = lp
            .weights
            .iter()
            .map(|&p| Literal::Array(weights[p].clone()))
            .collect();
        let batches = [
            Literal::Array(stack(&x, DIMS[0])),
            Literal::Array(stack(&y, DIMS[4])),
        ];
        let run = run_training_pipeline_on_ipu_model(&lp.pipeline, &config, &ws, &batches).unwrap();
        // Outputs: the losses of the micro-batches, then the trained weights.
        assert_eq!(run.outputs[0].shape.dims[..], [ACCUMULATION as i64]);
        for (k, want) in want.iter().enumerate() {
            let Literal::Array(w) = want else { panic!() };
            let (xla_ir::ArrayData::F32(got), xla_ir::ArrayData::F32(w)) =
                (&run.outputs[1 + k].data, &w.data)
            else {
                panic!("f32 weights")
            };
            for (i, (a, b)) in got.iter().zip(w).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-5 + 1e-4 * b.abs(),
                    "{schedule:?}: w{k}[{i}] {a} vs {b}"
                );
            }
        }
        let report = run.pipeline.expect("a pipeline report");
        assert!(
            report.bubble_fraction > 0.0 && report.bubble_fraction < 1.0,
            "{report:?}"
        );
    }
}

#[test]
fn loss_modules_that_break_the_pipeline_rules_are_refused() {
    // Stage 2 reading stage 0's value directly.
    let mut b = ModuleBuilder::entry("skip", "main");
    let f = |d: &[i64]| Shape::array(ElementType::F32, d);
    let w0 = b.parameter(0, f(&[2, 2]), "w0").unwrap();
    let w2 = b.parameter(1, f(&[2, 2]), "w2").unwrap();
    let x = b.parameter(2, f(&[1, 2]), "x").unwrap();
    let h0 = pipeline_stage(&mut b, 0, |b| b.dot(x, w0).unwrap());
    let h1 = pipeline_stage(&mut b, 1, |b| b.tanh(h0).unwrap());
    let h2 = pipeline_stage(&mut b, 2, |b| {
        let z = b.dot(h1, w2).unwrap();
        let z = b.add(z, h0).unwrap();
        ipuxla::frontend::ops::sum_all(b, z).unwrap()
    });
    let module = b.finish_module(h2).unwrap();
    let err = pipeline_from_loss(&module, &[true, true, false], 0.1, 4, 1).unwrap_err();
    let text = format!("{err:#}");
    assert!(
        text.contains("(stage 2) reads 'dot.")
            && text.contains("of stage 0: a stage reads only the stage before it"),
        "{text}"
    );
}

/// A stage with no weights (the loss alone) is a stage like the others.
#[test]
fn a_stage_without_weights_passes_gradients_on() {
    let mut b = ModuleBuilder::entry("loss_stage", "main");
    let f = |d: &[i64]| Shape::array(ElementType::F32, d);
    let w = b.parameter(0, f(&[3, 2]), "w").unwrap();
    let x = b.parameter(1, f(&[2, 3]), "x").unwrap();
    let y = b.parameter(2, f(&[2, 2]), "y").unwrap();
    let z = pipeline_stage(&mut b, 0, |b| nn::linear(b, x, w, None).unwrap());
    let loss = pipeline_stage(&mut b, 1, |b| nn::mean_squared_error(b, z, y).unwrap());
    let module = b.finish_module(loss).unwrap();
    let lp = pipeline_from_loss(&module, &[true, false, false], 0.1, 2, 1).unwrap();
    let mut rng = Rng::new(2);
    let config = IpuConfig {
        auto_select_ipus: AutoSelectIpus::Count(2),
        ..IpuConfig::default()
    };
    let w0 = array(&[3, 2], &mut rng);
    let run = run_training_pipeline_on_ipu_model(
        &lp.pipeline,
        &config,
        &[Literal::Array(w0.clone())],
        &[
            Literal::Array(array(&[2, 2, 3], &mut rng)),
            Literal::Array(array(&[2, 2, 2], &mut rng)),
        ],
    )
    .unwrap();
    assert_ne!(run.outputs[1], w0, "the weight was trained");
}
