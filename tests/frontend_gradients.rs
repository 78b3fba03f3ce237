//! The frontend's autodiff against XLA's gradients: the corpus's training cases rebuilt with
//! `ipuxla::frontend` (its layers' functions, `grad`, its optimisers) must reproduce XLA's
//! stored outputs within the corpus tolerance, on the reference evaluator and on the IPU
//! Model. Bench cases (whose inputs the fixtures do not keep) are compared with XLA's own
//! module on the same inputs, and with the stored outputs when `../shared` has them.

mod common;

use common::{check_output, leaves, load};
use ipuxla::compiler::{IpuConfig, PassOptions};
use ipuxla::device::LoadedModule;
use ipuxla::device_loop::{OutfeedMode, device_loop_for, evaluate_loop};
use ipuxla::frontend::autodiff::grad;
use ipuxla::frontend::nn::{self, Padding};
use ipuxla::frontend::ops::Builder;
use ipuxla::frontend::optimizers::Optimizer;
use ipuxla::runtime::EngineOptions;
use std::path::{Path, PathBuf};
use xla_ir::alias::{AliasKind, OutputAlias};
use xla_ir::builder::ModuleBuilder;
use xla_ir::eval::Feeds;
use xla_ir::literal::ArrayLiteral;
use xla_ir::{ElementType, InstrId, Module, Shape};

fn fixture(folder: &str, name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(folder)
        .join(name)
}

/// A module whose parameters have the case's shapes and types, built by `body` from them.
fn rebuild(
    info: &serde_json::Value,
    body: impl FnOnce(&mut Builder<'_>, &[InstrId]) -> Vec<InstrId>,
) -> Module {
    let name = info["name"].as_str().unwrap();
    let mut b = ModuleBuilder::entry(format!("{name}_frontend"), "main");
    let params: Vec<InstrId> = info["params"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(k, p)| {
            let mut dims: Vec<i64> = p["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_i64().unwrap())
                .collect();
            if p["role"] == "fed" {
                // A loop case's fed input stacks one value per iteration.
                dims.remove(0);
            }
            let t = match p["dtype"].as_str().unwrap() {
                "float32" => ElementType::F32,
                "int32" => ElementType::S32,
                other => panic!("dtype {other}"),
            };
            b.parameter(k as u64, Shape::array(t, &dims), &format!("p{k}"))
                .unwrap()
        })
        .collect();
    let outs = body(&mut b, &params);
    let root = b.tuple(&outs).unwrap();
    b.finish_module(root).unwrap()
}

/// Runs `module` on the evaluator and on the IPU Model and checks both against the stored
/// outputs.
fn check_against_stored(case: &Path, module: &Module) {
    let (info, _, inputs) = load(case, "module.hlo");
    let c = ipuxla::corpus::Case::read(case, "module.hlo").unwrap();
    let reference = leaves(xla_ir::eval::evaluate(module, &inputs).unwrap());
    let (mut loaded, _) =
        LoadedModule::load(module, &IpuConfig::default(), &PassOptions::default()).unwrap();
    let (device, _) = loaded.run(&inputs).unwrap();
    let name = info["name"].as_str().unwrap();
    for (engine, outputs) in [("evaluator", &reference), ("IPU Model", &device)] {
        assert_eq!(outputs.len(), info["outputs"].as_array().unwrap().len());
        for (k, got) in outputs.iter().enumerate() {
            let (want, spec) = c.expected_output(k).unwrap().expect("stored output");
            check_output(
                &format!("{name} on the {engine}: output {k}"),
                got,
                &want,
                &spec,
            );
        }
    }
}

/// The corpus's CNN: conv3x3-relu-pool twice, then dense (NHWC / HWIO).
fn cnn_logits(b: &mut Builder<'_>, p: &[InstrId], x: InstrId) -> InstrId {
    let conv = |b: &mut Builder<'_>, h, k, bias| {
        let c = nn::conv2d(b, h, k, [1, 1], Padding::Same).unwrap();
        let c = nn::add_bias(b, c, bias).unwrap();
        let r = nn::relu(b, c).unwrap();
        nn::pool2d(b, r, [2, 2], [2, 2], Padding::Valid, false).unwrap()
    };
    let h = conv(b, x, p[0], p[1]);
    let h = conv(b, h, p[2], p[3]);
    let f = nn::flatten(b, h).unwrap();
    nn::linear(b, f, p[4], Some(p[5])).unwrap()
}

/// The corpus's MLP: dense-relu layers, the last without relu.
fn mlp_logits(b: &mut Builder<'_>, p: &[InstrId], x: InstrId, biases: bool) -> InstrId {
    let per = if biases { 2 } else { 1 };
    let layers = p.len() / per;
    let mut h = x;
    for i in 0..layers {
        let bias = biases.then(|| p[2 * i + 1]);
        h = nn::linear(b, h, p[per * i], bias).unwrap();
        if i + 1 < layers {
            h = nn::relu(b, h).unwrap();
        }
    }
    h
}

/// `params - lr * grad(loss)` for each, then the loss: the corpus's SGD training steps.
fn sgd_step(
    b: &mut Builder<'_>,
    params: &[InstrId],
    loss: InstrId,
    learning_rate: f64,
) -> Vec<InstrId> {
    let grads = grad(b, loss, params).unwrap();
    let opt = Optimizer::sgd(learning_rate);
    let mut outs: Vec<InstrId> = params
        .iter()
        .zip(&grads)
        .map(|(&w, &g)| opt.apply(b, w, g, &[], None).unwrap().0)
        .collect();
    outs.push(loss);
    outs
}

/// RMSprop as the corpus writes it (lr 1e-3, rho 0.9, eps 1e-7): new params, new mean
/// squares, loss.
fn rmsprop_step(b: &mut Builder<'_>, p: &[InstrId], loss: InstrId) -> Vec<InstrId> {
    let (params, ms) = p.split_at(6);
    let grads = grad(b, loss, params).unwrap();
    let opt = Optimizer::RmsProp {
        learning_rate: 1e-3,
        rho: 0.9,
        epsilon: 1e-7,
    };
    let mut new_params = Vec::new();
    let mut new_ms = Vec::new();
    for k in 0..6 {
        let (w, slots) = opt.apply(b, params[k], grads[k], &[ms[k]], None).unwrap();
        new_params.push(w);
        new_ms.extend(slots);
    }
    new_params.extend(new_ms);
    new_params.push(loss);
    new_params
}

fn cnn_train_step(info: &serde_json::Value) -> Module {
    rebuild(info, |b, p| {
        let logits = cnn_logits(b, &p[..6], p[6]);
        let loss = nn::softmax_cross_entropy(b, logits, p[7]).unwrap();
        sgd_step(b, &p[..6], loss, 0.05)
    })
}

fn mlp_train_rmsprop(info: &serde_json::Value) -> Module {
    rebuild(info, |b, p| {
        let logits = mlp_logits(b, &p[..6], p[12], true);
        let loss = nn::softmax_cross_entropy(b, logits, p[13]).unwrap();
        rmsprop_step(b, p, loss)
    })
}

#[test]
fn cnn_training_step_matches_xla() {
    let case = fixture("conformance", "cnn_train_step");
    let (info, _, _) = load(&case, "module.hlo");
    check_against_stored(&case, &cnn_train_step(&info));
}

#[test]
fn mlp_rmsprop_training_step_matches_xla() {
    let case = fixture("conformance", "seed_mlp_train_rmsprop");
    let (info, _, _) = load(&case, "module.hlo");
    check_against_stored(&case, &mlp_train_rmsprop(&info));
}

/// Marks result `k` as the new value of parameter `k` for each of `carried`.
fn alias(module: &mut Module, carried: &[usize]) {
    module.input_output_alias = carried
        .iter()
        .map(|&k| OutputAlias {
            output: vec![k as i64],
            parameter: k as i64,
            parameter_index: vec![],
            kind: AliasKind::MayAlias,
        })
        .collect();
    xla_ir::verify(module).unwrap();
}

/// A loop case's step rebuilt, run as the case's device loop on both engines.
fn check_loop(name: &str, carried: usize, step: impl FnOnce(&serde_json::Value) -> Module) {
    let case = fixture("conformance-loops", name);
    let (info, _, inputs) = load(&case, "module.hlo");
    let mut module = step(&info);
    alias(&mut module, &(0..carried).collect::<Vec<_>>());
    let iterations = info["iterations"].as_u64().unwrap();
    let lp = device_loop_for(&module, iterations, &inputs).unwrap();
    let reference = evaluate_loop(
        &module,
        &lp,
        &inputs,
        OutfeedMode::All,
        &mut Feeds::default(),
    )
    .unwrap();
    let (mut loaded, _) = LoadedModule::load_device_loop(
        &module,
        &IpuConfig::default(),
        &PassOptions::default(),
        EngineOptions::default(),
        lp,
    )
    .unwrap();
    let (device, _) = loaded.run(&inputs).unwrap();
    let c = ipuxla::corpus::Case::read(&case, "module.hlo").unwrap();
    for (engine, outputs) in [("evaluator", &reference), ("IPU Model", &device)] {
        for (k, got) in outputs.iter().enumerate() {
            let (want, spec) = c.expected_output(k).unwrap().expect("stored output");
            check_output(
                &format!("{name} on the {engine}: output {k}"),
                got,
                &want,
                &spec,
            );
        }
    }
}

#[test]
fn linear_regression_sgd_loop_matches_xla() {
    check_loop("loop_linreg_sgd", 2, |info| {
        rebuild(info, |b, p| {
            let y = nn::linear(b, p[2], p[0], Some(p[1])).unwrap();
            let loss = nn::mean_squared_error(b, y, p[3]).unwrap();
            sgd_step(b, &p[..2], loss, 0.1)
        })
    });
}

#[test]
fn mlp_adam_loop_matches_xla() {
    check_loop("loop_mlp_adam", 7, |info| {
        rebuild(info, |b, p| {
            let logits = mlp_logits(b, &p[..2], p[7], false);
            let loss = nn::softmax_cross_entropy(b, logits, p[8]).unwrap();
            let grads = grad(b, loss, &p[..2]).unwrap();
            let opt = Optimizer::Adam {
                learning_rate: 0.01,
                beta_1: 0.9,
                beta_2: 0.999,
                epsilon: 1e-8,
            };
            let t = opt.next_step(b, p[6]).unwrap();
            let mut w = Vec::new();
            let mut m = Vec::new();
            let mut v = Vec::new();
            for k in 0..2 {
                let (nw, slots) = opt
                    .apply(b, p[k], grads[k], &[p[2 + k], p[4 + k]], Some(t))
                    .unwrap();
                w.push(nw);
                m.push(slots[0]);
                v.push(slots[1]);
            }
            [w, m, v, vec![t, loss]].concat()
        })
    });
}

/// The bench case `name`'s function rebuilt by `build`, against XLA's module on the same
/// inputs (the stored ones when `../shared` has them, else generated), on the evaluator.
fn check_bench(name: &str, build: impl FnOnce(&serde_json::Value) -> Module) {
    let fixture_case = fixture("conformance", name);
    let shared = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/conformance")
        .join(name);
    let c = ipuxla::corpus::Case::read(&fixture_case, "module.hlo").unwrap();
    let ours = build(&c.info);
    let stored = ipuxla::corpus::Case::read(&shared, "module.hlo")
        .ok()
        .and_then(|s| Some((s.stored_inputs().ok()??, s)));
    let inputs = match &stored {
        Some((inputs, _)) => inputs.clone(),
        None => common::arguments(&c.module),
    };
    let got = leaves(xla_ir::eval::evaluate(&ours, &inputs).unwrap());
    let want: Vec<ArrayLiteral> = match &stored {
        Some((_, s)) => (0..got.len())
            .map(|k| s.expected_output(k).unwrap().expect("stored output").0)
            .collect(),
        None => leaves(xla_ir::eval::evaluate(&c.module, &inputs).unwrap()),
    };
    assert_eq!(got.len(), want.len());
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        let spec = &c.info["outputs"][k];
        check_output(&format!("{name}: output {k}"), g, w, spec);
    }
}

#[test]
fn bench_training_steps_match_xla() {
    check_bench("bench_mlp_train_b256", mlp_train_rmsprop);
    check_bench("bench_cnn_train_b32", cnn_train_step);
}

/// The corpus's post-LN encoder layer (4-head self-attention, GELU FFN), as its JAX source.
fn encoder_layer(b: &mut Builder<'_>, x: InstrId, p: &[InstrId]) -> InstrId {
    use xla_ir::attributes::{DotDims, SliceDim};
    let d = ipuxla::frontend::ops::dims(b, x);
    let (nb, s, dm) = (d[0], d[1], d[2]);
    let (nh, dh) = (4, d[2] / 4);
    let qkv = nn::linear(b, x, p[0], Some(p[1])).unwrap();
    let part = |b: &mut Builder<'_>, k: i64| {
        let slices = [
            SliceDim {
                start: 0,
                limit: nb,
                stride: 1,
            },
            SliceDim {
                start: 0,
                limit: s,
                stride: 1,
            },
            SliceDim {
                start: k * dm,
                limit: (k + 1) * dm,
                stride: 1,
            },
        ];
        let t = b.slice(qkv, &slices).unwrap();
        let t = b.reshape(t, &[nb, s, nh, dh]).unwrap();
        b.transpose(t, &[0, 2, 1, 3]).unwrap()
    };
    let (q, k, v) = (part(b, 0), part(b, 1), part(b, 2));
    let qk = DotDims {
        lhs_batch: vec![0, 1],
        rhs_batch: vec![0, 1],
        lhs_contracting: vec![3],
        rhs_contracting: vec![3],
    };
    let scores = b.dot_general(q, k, qk, None).unwrap();
    let scores = ipuxla::frontend::ops::scale(b, scores, 1.0 / (dh as f64).sqrt()).unwrap();
    let att = nn::softmax(b, scores, 3).unwrap();
    let av = DotDims {
        lhs_batch: vec![0, 1],
        rhs_batch: vec![0, 1],
        lhs_contracting: vec![3],
        rhs_contracting: vec![2],
    };
    let o = b.dot_general(att, v, av, None).unwrap();
    let o = b.transpose(o, &[0, 2, 1, 3]).unwrap();
    let o = b.reshape(o, &[nb, s, dm]).unwrap();
    let proj = nn::linear(b, o, p[2], Some(p[3])).unwrap();
    let res = b.add(x, proj).unwrap();
    let x1 = nn::layer_norm(b, res, p[4], p[5], 1e-5).unwrap();
    let h = nn::linear(b, x1, p[6], Some(p[7])).unwrap();
    let h = nn::gelu(b, h).unwrap();
    let f = nn::linear(b, h, p[8], Some(p[9])).unwrap();
    let res = b.add(x1, f).unwrap();
    nn::layer_norm(b, res, p[10], p[11], 1e-5).unwrap()
}

#[test]
fn bench_transformer_gradients_match_xla() {
    check_bench("bench_transformer_fwd_bwd", |info| {
        rebuild(info, |b, p| {
            let y = encoder_layer(b, p[0], &p[2..]);
            let loss = nn::mean_squared_error(b, y, p[1]).unwrap();
            let grads = grad(b, loss, &p[2..]).unwrap();
            [vec![loss], grads].concat()
        })
    });
}

/// The data-parallel MLP step over 4 replicas, rebuilt, on 4 replicas of the evaluator and
/// of the IPU Model. In JAX's `shard_map` the gradient of a replicated weight is already
/// summed over the replicas (the transpose of making it vary per replica is a `psum`), so
/// the source's `pmean` of it changes nothing: the update uses the replicas' sum.
#[test]
fn data_parallel_training_step_matches_xla() {
    use ipuxla::frontend::ops::{cross_replica_mean, cross_replica_sum};
    let case = fixture("conformance-spmd", "spmd_dp_mlp_train");
    let (info, _, stacked) = load(&case, "module.opt.hlo");
    let replicas = info["replicas"].as_u64().unwrap() as usize;
    let per_replica = |l: &xla_ir::Literal, r: usize| match l {
        xla_ir::Literal::Array(a) => xla_ir::Literal::Array(a.index_leading(r)),
        other => panic!("{other}"),
    };
    let inputs: Vec<Vec<xla_ir::Literal>> = (0..replicas)
        .map(|r| stacked.iter().map(|l| per_replica(l, r)).collect())
        .collect();
    let mut b = ModuleBuilder::entry("spmd_dp_mlp_train_frontend", "main");
    let params: Vec<InstrId> = inputs[0]
        .iter()
        .enumerate()
        .map(|(k, l)| {
            let xla_ir::Literal::Array(a) = l else {
                panic!()
            };
            b.parameter(k as u64, Shape::Array(a.shape.clone()), &format!("p{k}"))
                .unwrap()
        })
        .collect();
    let h = nn::linear(&mut b, params[4], params[0], Some(params[1])).unwrap();
    let h = nn::relu(&mut b, h).unwrap();
    let o = nn::linear(&mut b, h, params[2], Some(params[3])).unwrap();
    let loss = nn::mean_squared_error(&mut b, o, params[5]).unwrap();
    let grads = grad(&mut b, loss, &params[..4]).unwrap();
    let mut outs = vec![cross_replica_mean(&mut b, loss, replicas).unwrap()];
    for k in 0..4 {
        let g = cross_replica_sum(&mut b, grads[k], replicas).unwrap();
        let (w, _) = Optimizer::sgd(0.1)
            .apply(&mut b, params[k], g, &[], None)
            .unwrap();
        outs.push(w);
    }
    let root = b.tuple(&outs).unwrap();
    let mut module = b.finish_module(root).unwrap();
    module.replica_count = Some(replicas as i64);
    xla_ir::verify(&module).unwrap();

    let reference: Vec<Vec<ArrayLiteral>> = xla_ir::eval::evaluate_replicated(&module, &inputs)
        .unwrap()
        .into_iter()
        .map(leaves)
        .collect();
    let device = ipuxla::replicas::run_replicated_on_ipu_model(
        &module,
        &IpuConfig::default(),
        &PassOptions::default(),
        &inputs,
    )
    .unwrap()
    .outputs;
    let c = ipuxla::corpus::Case::read(&case, "module.opt.hlo").unwrap();
    for (engine, outputs) in [("evaluator", &reference), ("IPU Model", &device)] {
        for (r, replica) in outputs.iter().enumerate() {
            for (k, got) in replica.iter().enumerate() {
                let (want, spec) = c.expected_output(k).unwrap().expect("stored output");
                check_output(
                    &format!("spmd_dp_mlp_train on the {engine}: replica {r} output {k}"),
                    got,
                    &want.index_leading(r),
                    &spec,
                );
            }
        }
    }
}

/// The gradient of a `fori_loop` (a while loop's cotangent taken backwards trip by trip,
/// each trip's state replayed) runs on the IPU Model as on the evaluator.
#[test]
fn loop_gradients_run_on_the_ipu_model() {
    use xla_ir::attributes::ComparisonDirection;
    let f32s = |d: &[i64]| Shape::array(ElementType::F32, d);
    let mut b = ModuleBuilder::entry("fori_grad", "main");
    let x0 = b.parameter(0, f32s(&[2, 3]), "x0").unwrap();
    let w = b.parameter(1, f32s(&[3, 3]), "w").unwrap();
    let s32 = Shape::scalar(ElementType::S32);
    let state = Shape::Tuple(vec![s32, f32s(&[2, 3]), f32s(&[3, 3])]);
    let cond = b
        .sub_computation("cond", |c| {
            let s = c.parameter(0, state.clone(), "cs")?;
            let i = c.get_tuple_element(s, 0)?;
            let n = c.constant(ArrayLiteral::scalar_s32(3))?;
            c.compare(i, n, ComparisonDirection::Lt, None)
        })
        .unwrap();
    let body = b
        .sub_computation("body", |c| {
            let s = c.parameter(0, state.clone(), "bs")?;
            let i = c.get_tuple_element(s, 0)?;
            let x = c.get_tuple_element(s, 1)?;
            let w = c.get_tuple_element(s, 2)?;
            let one = c.constant(ArrayLiteral::scalar_s32(1))?;
            let i1 = c.add(i, one)?;
            let d = c.dot(x, w)?;
            let t = c.tanh(d)?;
            c.tuple(&[i1, t, w])
        })
        .unwrap();
    let zero = b.constant(ArrayLiteral::scalar_s32(0)).unwrap();
    let init = b.tuple(&[zero, x0, w]).unwrap();
    let lp = b.while_loop(init, cond, body).unwrap();
    let x = b.get_tuple_element(lp, 1).unwrap();
    let loss = ipuxla::frontend::ops::sum_all(&mut b, x).unwrap();
    let g = grad(&mut b, loss, &[x0, w]).unwrap();
    let root = b.tuple(&g).unwrap();
    let module = b.finish_module(root).unwrap();
    let inputs = common::arguments(&module);
    let want = leaves(xla_ir::eval::evaluate(&module, &inputs).unwrap());
    let (mut loaded, _) =
        LoadedModule::load(&module, &IpuConfig::default(), &PassOptions::default()).unwrap();
    let (got, _) = loaded.run(&inputs).unwrap();
    let spec = serde_json::json!({"rtol": 1e-5, "atol": 1e-6});
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        check_output(&format!("gradient {k}"), g, w, &spec);
    }
}
