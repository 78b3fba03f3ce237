//! The frontend's Keras-like model end to end: training with steps per execution, gradient
//! accumulation and replicas gives the plain loop's weights; the IPU Model and the
//! evaluator agree; bad models and datasets are refused with the rule they break.

use ipuxla::compiler::IpuConfig;
use ipuxla::frontend::device::{Device, Evaluator};
use ipuxla::frontend::layers::{Activation, Conv2D, Dense, Flatten, Pool2D};
use ipuxla::frontend::losses::Loss;
use ipuxla::frontend::model::{CompileOptions, Dataset, FitOptions, Sequential};
use ipuxla::frontend::optimizers::Optimizer;
use ipuxla::ipu_model::IpuModel;
use xla_ir::literal::{ArrayData, ArrayLiteral};
use xla_ir::{ArrayShape, ElementType};

/// `n` examples of 6 features in 3 classes: the class is the argmax of a fixed linear map.
fn classes(n: usize, seed: u64) -> Dataset {
    let mut rng = ipuxla::frontend::init::Rng::new(seed);
    let mut x = Vec::with_capacity(n * 6);
    let mut y = Vec::with_capacity(n);
    for _ in 0..n {
        let v: Vec<f32> = (0..6).map(|_| rng.normal() as f32).collect();
        let scores = [v[0] + v[1] - v[2], v[2] + v[3] - v[4], v[4] + v[5] - v[0]];
        let label = (0..3)
            .max_by(|&a, &b| scores[a].total_cmp(&scores[b]))
            .unwrap();
        x.extend(v);
        y.push(label as i32);
    }
    Dataset::new(
        ArrayLiteral {
            shape: ArrayShape::new(ElementType::F32, &[n as i64, 6]),
            data: ArrayData::F32(x),
        },
        ArrayLiteral {
            shape: ArrayShape::new(ElementType::S32, &[n as i64]),
            data: ArrayData::S32(y),
        },
    )
    .unwrap()
}

fn mlp(steps_per_execution: u64, optimizer: Optimizer) -> Sequential {
    let mut m = Sequential::new("mlp", &[6], 3);
    m.add(Dense::new(16).activation(Activation::Relu)).unwrap();
    m.add(Dense::new(3)).unwrap();
    m.compile(CompileOptions {
        optimizer,
        loss: Loss::SparseCategoricalCrossentropy { from_logits: true },
        steps_per_execution,
    })
    .unwrap();
    m
}

fn small_ipu() -> IpuModel {
    let mut config = IpuConfig::default();
    config.ipu_model.tiles_per_ipu = 16;
    IpuModel::new(config)
}

fn f32s(a: &ArrayLiteral) -> &[f32] {
    match &a.data {
        ArrayData::F32(v) => v,
        _ => panic!("f32 weights"),
    }
}

fn assert_same_weights(what: &str, a: &Sequential, b: &Sequential) {
    for (wa, wb) in a.weights().iter().zip(b.weights()) {
        for (k, (x, y)) in f32s(&wa.value).iter().zip(f32s(&wb.value)).enumerate() {
            assert!(
                (x - y).abs() <= 1e-5 + 1e-4 * y.abs(),
                "{what}: {} element {k}: {x} vs {y}",
                wa.name
            );
        }
    }
}

/// steps_per_execution 10, accumulation 4, 2 replicas, batch 4 = the plain loop on
/// batches of 32, for SGD and for Adam (whose step count must advance once per update).
#[test]
fn accumulation_and_replicas_give_the_plain_loops_weights() {
    let data = classes(320, 11);
    for optimizer in [Optimizer::sgd(0.1), Optimizer::adam(0.01)] {
        let mut plain = mlp(1, optimizer);
        let options = FitOptions {
            batch_size: 32,
            epochs: 2,
            verbose: false,
        };
        let plain_history = plain.fit(&mut Evaluator, &data, &options).unwrap();
        assert_eq!(plain_history.updates, 20);
        for device in [&mut Evaluator as &mut dyn Device, &mut small_ipu()] {
            let mut fancy = mlp(10, optimizer);
            fancy.set_gradient_accumulation_options(4).unwrap();
            fancy.set_replication_factor(2).unwrap();
            let options = FitOptions {
                batch_size: 4,
                epochs: 2,
                verbose: false,
            };
            let history = fancy.fit(device, &data, &options).unwrap();
            assert_eq!(
                history.cycles.is_some(),
                device.name().contains("IPU Model"),
                "only the IPU Model counts cycles"
            );
            assert_eq!(history.updates, 20);
            assert_eq!(
                history.executions, 8,
                "40 iterations per epoch, 10 per execution"
            );
            let what = format!("{optimizer:?} on {}", device.name());
            assert_same_weights(&what, &fancy, &plain);
            // The losses are those of the same batches, by micro-batch: their means agree
            // only roughly, so the weights are the check.
            assert!(history.loss[1] < history.loss[0], "{what}: {history:?}");
        }
    }
}

fn image_classes(n: usize) -> Dataset {
    // 8x8 one-channel images: class 0 bright on the left half, class 1 on the right.
    let mut rng = ipuxla::frontend::init::Rng::new(5);
    let mut x = Vec::with_capacity(n * 64);
    let mut y = Vec::with_capacity(n);
    for i in 0..n {
        let label = (i % 2) as i32;
        for _row in 0..8 {
            for col in 0..8 {
                let lit = (col < 4) == (label == 0);
                x.push(if lit { 1.0 } else { 0.0 } + 0.3 * rng.normal() as f32);
            }
        }
        y.push(label);
    }
    Dataset::new(
        ArrayLiteral {
            shape: ArrayShape::new(ElementType::F32, &[n as i64, 8, 8, 1]),
            data: ArrayData::F32(x),
        },
        ArrayLiteral {
            shape: ArrayShape::new(ElementType::S32, &[n as i64]),
            data: ArrayData::S32(y),
        },
    )
    .unwrap()
}

/// A small CNN learns on the IPU Model, gives the evaluator's weights, predicts and
/// evaluates; its weights survive a save and a load.
#[test]
fn a_cnn_trains_on_the_ipu_model_as_on_the_evaluator() {
    let data = image_classes(64);
    let build = || {
        let mut m = Sequential::new("cnn", &[8, 8, 1], 9);
        m.add(Conv2D::new(4, [3, 3]).activation(Activation::Relu))
            .unwrap();
        m.add(Pool2D::max([2, 2])).unwrap();
        m.add(Flatten).unwrap();
        m.add(Dense::new(2)).unwrap();
        m.compile(CompileOptions {
            optimizer: Optimizer::Momentum {
                learning_rate: 0.05,
                momentum: 0.9,
            },
            loss: Loss::SparseCategoricalCrossentropy { from_logits: true },
            steps_per_execution: 4,
        })
        .unwrap();
        m
    };
    let options = FitOptions {
        batch_size: 8,
        epochs: 3,
        verbose: false,
    };
    let mut on_ipu = build();
    let mut on_eval = build();
    let mut ipu = small_ipu();
    on_ipu.fit(&mut ipu, &data, &options).unwrap();
    on_eval.fit(&mut Evaluator, &data, &options).unwrap();
    assert_same_weights("cnn", &on_ipu, &on_eval);
    let result = on_ipu.evaluate(&mut ipu, &data, 8).unwrap();
    assert!(result.accuracy.unwrap() > 0.9, "{result:?}");
    let predictions = on_ipu
        .predict(&mut ipu, &Dataset::inputs(data.x()), 16)
        .unwrap();
    assert_eq!(predictions.shape.dims[..], [64, 2]);

    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ipuxla-weights-{}", std::process::id()));
    on_ipu.save_weights(&dir).unwrap();
    let mut fresh = build();
    fresh.load_weights(&dir).unwrap();
    assert_same_weights("loaded", &fresh, &on_ipu);
    // Weights loaded on the host reach the device: the same evaluation as before.
    assert_eq!(fresh.evaluate(&mut ipu, &data, 8).unwrap(), result);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_models_and_datasets_are_refused_with_the_rule() {
    // A layer that cannot take its input names itself and the shapes.
    let mut m = Sequential::new("bad", &[6], 1);
    m.add(Dense::new(4)).unwrap();
    let err = m.add(Conv2D::new(2, [3, 3])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "layer conv2d: needs NHWC inputs (rank 4), got [1, 4]"
    );
    let mut img = Sequential::new("img", &[4, 4, 1], 1);
    let err = img
        .add(Conv2D::new(2, [5, 5]).with_padding(ipuxla::frontend::nn::Padding::Valid))
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("layer conv2d: a 5x5 window does not fit inputs of [1, 4, 4, 1]"),
        "{err}"
    );

    // Stage assignments: one per layer, going up one at a time.
    let mut m = mlp(1, Optimizer::sgd(0.1));
    let err = m.set_pipeline_stage_assignment(&[0]).unwrap_err();
    assert!(
        err.to_string()
            .contains("names 1 stages but model mlp has 2 layers"),
        "{err}"
    );
    let err = m.set_pipeline_stage_assignment(&[0, 2]).unwrap_err();
    assert!(
        err.to_string()
            .contains("layer dense_1 is in stage 2 after layer dense in stage 0"),
        "{err}"
    );

    // The effective batch rule.
    m.set_gradient_accumulation_options(4).unwrap();
    m.set_replication_factor(2).unwrap();
    let options = FitOptions {
        batch_size: 4,
        epochs: 1,
        verbose: false,
    };
    let err = m
        .fit(&mut Evaluator, &classes(100, 1), &options)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the dataset has 100 examples, not a multiple of the effective batch size: batch_size 4 x gradient_accumulation_steps_per_replica 4 x replicas 2 = 32"
    );

    // Targets of the wrong kind, and models used before compile.
    let mut m = mlp(1, Optimizer::sgd(0.1));
    let floats = Dataset::new(classes(32, 1).x(), classes(32, 1).x()).unwrap();
    let err = m.fit(&mut Evaluator, &floats, &options).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("the loss needs targets of S32 [] per example"),
        "{err}"
    );
    let mut raw = Sequential::new("raw", &[6], 1);
    raw.add(Dense::new(2)).unwrap();
    let err = raw
        .fit(&mut Evaluator, &classes(32, 1), &options)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "model raw is not compiled: call compile first"
    );
}

/// Layers in pipeline stages train as a training pipeline on a 2-IPU IPU Model (stage k on
/// IPU k, the gradients of `accumulation` micro-batches summed into each update) and give
/// the plain loop's weights; they predict as a forward pipeline; what a pipeline cannot
/// train yet is refused by name.
#[test]
fn staged_models_train_and_predict_as_pipelines() {
    let data = classes(64, 1);
    let config = IpuConfig {
        auto_select_ipus: ipuxla::compiler::config::AutoSelectIpus::Count(2),
        ..IpuConfig::default()
    };
    let mut ipu = IpuModel::new(config);
    let options = FitOptions {
        batch_size: 4,
        epochs: 2,
        verbose: false,
    };
    let mut plain = mlp(8, Optimizer::sgd(0.1));
    plain.set_gradient_accumulation_options(4).unwrap();
    let mut staged = mlp(8, Optimizer::sgd(0.1));
    staged.set_gradient_accumulation_options(4).unwrap();
    staged.set_pipeline_stage_assignment(&[0, 1]).unwrap();
    plain.fit(&mut Evaluator, &data, &options).unwrap();
    let history = staged.fit(&mut ipu, &data, &options).unwrap();
    assert_eq!(history.updates, 8);
    assert_same_weights("pipelined", &staged, &plain);

    let x = Dataset::inputs(data.x());
    let want = plain.predict(&mut ipu, &x, 8).unwrap();
    let mut staged_copy = mlp(4, Optimizer::sgd(0.1));
    staged_copy
        .set_weights(plain.weights().iter().map(|w| w.value.clone()).collect())
        .unwrap();
    staged_copy.set_pipeline_stage_assignment(&[0, 1]).unwrap();
    assert_eq!(staged_copy.predict(&mut ipu, &x, 8).unwrap(), want);

    let mut adam = mlp(8, Optimizer::adam(0.01));
    adam.set_gradient_accumulation_options(4).unwrap();
    adam.set_pipeline_stage_assignment(&[0, 1]).unwrap();
    let err = adam.fit(&mut ipu, &data, &options).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("a pipelined model trains with SGD only"),
        "{err}"
    );
    let mut short = mlp(8, Optimizer::sgd(0.1));
    short.set_pipeline_stage_assignment(&[0, 1]).unwrap();
    let err = short.fit(&mut ipu, &data, &options).unwrap_err();
    assert!(
        err.to_string()
            .contains("needs gradient_accumulation_steps_per_replica of at least 2"),
        "{err}"
    );
}

/// A functional model (a residual connection, a layer applied twice, a concatenation)
/// trains to the same weights on the IPU Model as on the evaluator; applying its shared
/// layer in two pipeline stages is refused.
#[test]
fn functional_models_with_shared_layers_train() {
    use ipuxla::frontend::model::Model;
    let data = classes(64, 4);
    let build = || {
        let mut m = Model::new("functional", &[6], 21);
        let x = m.input();
        let h = m
            .apply(Dense::new(6).activation(Activation::Tanh), x)
            .unwrap();
        let again = m.reuse(h, h).unwrap();
        let res = m.add_tensors(x, again).unwrap();
        let both = m.concatenate(&[res, h], -1).unwrap();
        m.apply(Dense::new(3), both).unwrap();
        m.compile(CompileOptions {
            optimizer: Optimizer::RmsProp {
                learning_rate: 0.01,
                rho: 0.9,
                epsilon: 1e-7,
            },
            loss: Loss::SparseCategoricalCrossentropy { from_logits: true },
            steps_per_execution: 2,
        })
        .unwrap();
        m
    };
    let mut a = build();
    let mut b = build();
    assert_eq!(
        a.weights().len(),
        4,
        "the reused layer has one kernel and one bias"
    );
    let options = FitOptions {
        batch_size: 8,
        epochs: 2,
        verbose: false,
    };
    a.fit(&mut small_ipu(), &data, &options).unwrap();
    b.fit(&mut Evaluator, &data, &options).unwrap();
    assert_same_weights("functional", &a, &b);
    let err = a
        .set_pipeline_stage_assignment(&[0, 1, 1, 1, 1])
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "layer dense is applied in stages 0 and 1: its weights would be shared across IPUs"
    );
    let mut c = Model::new("bad", &[6], 1);
    let h = c.apply(Dense::new(4), c.input()).unwrap();
    let err = c.reuse(h, h).unwrap_err();
    assert!(
        err.to_string()
            .contains("layer dense applied again to [1, 4]: it would need kernel of [4, 4], its weight is f32[6,4]"),
        "{err}"
    );
}

/// Batch normalisation (moving statistics updated by training, used by evaluation) and
/// dropout (Philox bits from a state the step carries) train to the same weights and states
/// on the IPU Model as on the evaluator, with 2 replicas.
#[test]
fn batch_norm_and_dropout_train_alike_on_both_engines() {
    use ipuxla::frontend::layers::{BatchNorm, Dropout};
    let data = classes(128, 8);
    let build = || {
        let mut m = Sequential::new("regularised", &[6], 17);
        m.add(Dense::new(16)).unwrap();
        m.add(BatchNorm::default()).unwrap();
        m.add(ipuxla::frontend::layers::ActivationLayer(Activation::Relu))
            .unwrap();
        m.add(Dropout { rate: 0.25 }).unwrap();
        m.add(Dense::new(3)).unwrap();
        m.compile(CompileOptions {
            // Not Adam: the bias before the normalisation has a zero gradient up to
            // rounding, which Adam would scale up into different noise on each engine.
            optimizer: Optimizer::sgd(0.1),
            loss: Loss::SparseCategoricalCrossentropy { from_logits: true },
            steps_per_execution: 4,
        })
        .unwrap();
        m.set_replication_factor(2).unwrap();
        m
    };
    let options = FitOptions {
        batch_size: 8,
        epochs: 3,
        verbose: false,
    };
    let mut a = build();
    let mut b = build();
    let names: Vec<&str> = a.weights().iter().map(|w| w.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "dense/kernel",
            "dense/bias",
            "batch_normalization/gamma",
            "batch_normalization/beta",
            "batch_normalization/moving_mean",
            "batch_normalization/moving_variance",
            "dropout/rng_state",
            "dense_1/kernel",
            "dense_1/bias"
        ]
    );
    let start = a.weights()[4].value.clone();
    let state = a.weights()[6].value.clone();
    let mut ipu = small_ipu();
    a.fit(&mut ipu, &data, &options).unwrap();
    b.fit(&mut Evaluator, &data, &options).unwrap();
    assert_ne!(
        a.weights()[4].value,
        start,
        "training moves the moving mean"
    );
    assert_ne!(
        a.weights()[6].value,
        state,
        "dropout draws new bits every step"
    );
    assert_eq!(
        a.weights()[6].value,
        b.weights()[6].value,
        "the same bits on both"
    );
    for (wa, wb) in a.weights().iter().zip(b.weights()) {
        if wa.value.shape.element_type == ElementType::F32 {
            for (x, y) in f32s(&wa.value).iter().zip(f32s(&wb.value)) {
                assert!(
                    (x - y).abs() <= 1e-4 + 1e-3 * y.abs(),
                    "{}: {x} vs {y}",
                    wa.name
                );
            }
        }
    }
    let on_ipu = a.evaluate(&mut ipu, &data, 8).unwrap();
    let on_eval = b.evaluate(&mut Evaluator, &data, 8).unwrap();
    assert!(
        (on_ipu.loss - on_eval.loss).abs() < 1e-3,
        "{on_ipu:?} vs {on_eval:?}"
    );
    assert!(on_ipu.accuracy.unwrap() > 0.6, "{on_ipu:?}");
}

/// Token ids through an embedding table (gathered forward, scatter-added backward) train
/// to the same table on the IPU Model as on the evaluator.
#[test]
fn embeddings_train_on_integer_inputs() {
    use ipuxla::frontend::layers::Embedding;
    let n = 64;
    let mut rng = ipuxla::frontend::init::Rng::new(3);
    let tokens: Vec<i32> = (0..n * 4).map(|_| rng.below(10) as i32).collect();
    let labels: Vec<i32> = (0..n).map(|i| tokens[i * 4] % 3).collect();
    let data = Dataset::new(
        ArrayLiteral {
            shape: ArrayShape::new(ElementType::S32, &[n as i64, 4]),
            data: ArrayData::S32(tokens),
        },
        ArrayLiteral {
            shape: ArrayShape::new(ElementType::S32, &[n as i64]),
            data: ArrayData::S32(labels),
        },
    )
    .unwrap();
    let build = || {
        let mut m = Sequential::new("tokens", &[4], 5).with_integer_input();
        m.add(Embedding {
            input_dim: 10,
            output_dim: 8,
        })
        .unwrap();
        m.add(Flatten).unwrap();
        m.add(Dense::new(3)).unwrap();
        m.compile(CompileOptions {
            optimizer: Optimizer::sgd(0.5),
            loss: Loss::SparseCategoricalCrossentropy { from_logits: true },
            steps_per_execution: 4,
        })
        .unwrap();
        m
    };
    let options = FitOptions {
        batch_size: 8,
        epochs: 5,
        verbose: false,
    };
    let (mut a, mut b) = (build(), build());
    let history = a.fit(&mut small_ipu(), &data, &options).unwrap();
    b.fit(&mut Evaluator, &data, &options).unwrap();
    assert_same_weights("embedding", &a, &b);
    assert!(history.loss[4] < history.loss[0] * 0.5, "{history:?}");
}

#[test]
fn the_summary_lists_layers_shapes_weights_and_stages() {
    let mut m = mlp(1, Optimizer::sgd(0.1));
    m.set_pipeline_stage_assignment(&[0, 1]).unwrap();
    assert_eq!(
        m.summary(),
        "Model: mlp\n\
         Layer    Output shape  Weights  Stage\n\
         -------------------------------------\n\
         dense    (None, 16)    112      0\n\
         dense_1  (None, 3)     51       1\n\
         Total weights: 163\n\
         Trainable weights: 163\n"
    );
}

/// A `RecomputationCheckpoint` layer changes no value: a model with one trains, with
/// recomputation on, to the plain model's weights on the evaluator.
#[test]
fn a_recomputation_checkpoint_layer_trains_like_the_plain_model() {
    use ipuxla::frontend::layers::RecomputationCheckpoint;
    let data = classes(64, 3);
    let build = |checkpoint: bool| {
        let mut m = Sequential::new("mlp", &[6], 3);
        m.add(Dense::new(16).activation(Activation::Relu)).unwrap();
        if checkpoint {
            m.add(RecomputationCheckpoint).unwrap();
        }
        m.add(Dense::new(3)).unwrap();
        m.compile(CompileOptions {
            optimizer: Optimizer::Sgd { learning_rate: 0.1 },
            loss: Loss::SparseCategoricalCrossentropy { from_logits: true },
            steps_per_execution: 2,
        })
        .unwrap();
        m
    };
    let options = FitOptions {
        batch_size: 8,
        epochs: 2,
        verbose: false,
    };
    let mut config = IpuConfig::default();
    config.ipu_model.tiles_per_ipu = 16;
    config.allow_recompute = true;
    let mut ipu = IpuModel::new(config);
    let mut checked = build(true);
    let mut plain = build(false);
    checked.fit(&mut ipu, &data, &options).unwrap();
    plain.fit(&mut Evaluator, &data, &options).unwrap();
    assert_same_weights("checkpointed", &checked, &plain);
}
