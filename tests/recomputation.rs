//! Recomputation (`allow_recompute`): values read early and late are computed again before
//! the late read, lowering the estimated peak without changing a result; checkpoints pin
//! values; and on small training graphs the heuristic is judged by the exact solver.

use ipuxla::compiler::recompute::{self, exact, greedy};
use ipuxla::compiler::{IpuConfig, PassOptions, optimise};
use ipuxla::frontend::autodiff::grad;
use ipuxla::frontend::nn;
use ipuxla::xla_ir::builder::ModuleBuilder;
use ipuxla::xla_ir::literal::ArrayData;
use ipuxla::xla_ir::{ElementType, InstrId, Literal, Module, Shape};

mod common;

fn recomputing() -> IpuConfig {
    IpuConfig {
        allow_recompute: true,
        ..IpuConfig::default()
    }
}

/// The module after the scheduler (what recomputation starts from).
fn scheduled(m: &Module) -> Module {
    let options = PassOptions {
        stop_after: Some("ipu-scheduler".into()),
        ..PassOptions::default()
    };
    optimise(m, &IpuConfig::default(), &options).unwrap().0
}

fn fixture(path: &str) -> Module {
    let text = std::fs::read_to_string(common::fixture(path)).unwrap();
    ipuxla::xla_ir::parse_module(&text).unwrap()
}

fn f32s(l: &Literal) -> Vec<f32> {
    match l {
        Literal::Array(a) => match &a.data {
            ArrayData::F32(v) => v.clone(),
            other => panic!("expected f32, got {:?}", other.element_type()),
        },
        Literal::Tuple(items) => items.iter().flat_map(f32s).collect(),
        Literal::Token => vec![],
    }
}

#[test]
fn a_value_read_early_and_late_is_recomputed_and_no_result_changes() {
    let m = fixture("recompute/early_and_late.hlo");
    let (out, report) = optimise(&m, &recomputing(), &PassOptions::default()).unwrap();
    let notes = &report.passes.last().unwrap().notes;
    assert!(notes[0].contains("1 values recomputed"), "{notes:?}");
    assert!(out.to_string().contains("scale.recomputed"), "{out}");
    let s = scheduled(&m);
    let peaks = recompute::computation_peaks(&s);
    let before = recompute::peak_of(s.entry_computation(), &peaks);
    let after = recompute::peak_of(out.entry_computation(), &recompute::computation_peaks(&out));
    assert!(after < before, "{after} vs {before}");
    // The same values with and without, close to the evaluator's.
    let inputs = common::arguments(&m);
    let want = f32s(&ipuxla::xla_ir::eval::evaluate(&m, &inputs).unwrap());
    let run = |config: IpuConfig| -> Vec<f32> {
        let run = ipuxla::device::run_on_ipu_model(&m, &config, &inputs).unwrap();
        run.outputs
            .iter()
            .flat_map(|o| match &o.data {
                ArrayData::F32(v) => v.clone(),
                _ => panic!("f32 results"),
            })
            .collect()
    };
    let (plain, recomputed) = (run(IpuConfig::default()), run(recomputing()));
    assert_eq!(plain, recomputed);
    for (g, w) in recomputed.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-5 + 1e-5 * w.abs(), "{g} vs {w}");
    }
}

#[test]
fn a_checkpoint_pins_its_value_and_leaves_no_trace() {
    let text = std::fs::read_to_string(common::fixture("recompute/early_and_late.hlo"))
        .unwrap()
        .replace(
            "  early = f32[16,1024]{1,0} multiply(y, scale)",
            "  kept = f32[16,1024]{1,0} custom-call(scale), custom_call_target=\"RecomputationCheckpoint\"\n  early = f32[16,1024]{1,0} multiply(y, kept)",
        )
        .replace("multiply(t5, scale)", "multiply(t5, kept)");
    let m = ipuxla::xla_ir::parse_module(&text).unwrap();
    let (out, report) = optimise(&m, &recomputing(), &PassOptions::default()).unwrap();
    let notes = report.passes.last().unwrap().notes.join("\n");
    assert!(notes.contains("0 values recomputed"), "{notes}");
    assert!(
        notes.contains("1 recomputation checkpoints replaced"),
        "{notes}"
    );
    let printed = out.to_string();
    assert!(!printed.contains("RecomputationCheckpoint") && !printed.contains("recomputed"));
    // The evaluator reads a checkpoint as the identity.
    let inputs = common::arguments(&m);
    let plain = fixture("recompute/early_and_late.hlo");
    assert_eq!(
        f32s(&ipuxla::xla_ir::eval::evaluate(&m, &inputs).unwrap()),
        f32s(&ipuxla::xla_ir::eval::evaluate(&plain, &inputs).unwrap())
    );
}

/// A small training step built with the frontend: `layers` dense layers of `width` on a
/// batch of `batch`, `activation` between them, mean squared error, and the gradients of
/// every weight.
fn training_step(layers: usize, width: i64, batch: i64, activation: &str) -> Module {
    let f32t = ElementType::F32;
    let mut g = ModuleBuilder::entry("train", "main");
    let x = g
        .parameter(0, Shape::array(f32t, &[batch, width]), "x")
        .unwrap();
    let target = g
        .parameter(1, Shape::array(f32t, &[batch, width]), "target")
        .unwrap();
    let mut weights: Vec<InstrId> = Vec::new();
    let mut h = x;
    for k in 0..layers {
        let w = g
            .parameter(
                2 + k as u64,
                Shape::array(f32t, &[width, width]),
                &format!("w{k}"),
            )
            .unwrap();
        weights.push(w);
        h = g.dot(h, w).unwrap();
        if k + 1 < layers {
            h = match activation {
                "relu" => nn::relu(&mut g, h).unwrap(),
                "tanh" => g.tanh(h).unwrap(),
                _ => g.logistic(h).unwrap(),
            };
        }
    }
    let loss = nn::mean_squared_error(&mut g, h, target).unwrap();
    let grads = grad(&mut g, loss, &weights).unwrap();
    let mut results = vec![loss];
    results.extend(grads);
    let root = g.tuple(&results).unwrap();
    g.finish_module(root).unwrap()
}

#[test]
fn the_heuristic_is_within_ten_percent_of_the_exact_solver_on_small_training_graphs() {
    let (mut judged, mut lowered) = (0, 0);
    for (layers, width, batch) in [
        (2, 32, 8),
        (3, 32, 8),
        (4, 32, 8),
        (2, 8, 256),
        (3, 8, 256),
        (4, 8, 256),
    ] {
        for activation in ["relu", "tanh", "logistic"] {
            let m = scheduled(&training_step(layers, width, batch, activation));
            let c = m.entry_computation();
            if c.len() > exact::MAX_INSTRUCTIONS {
                continue;
            }
            let peaks = recompute::computation_peaks(&m);
            let (_, heuristic) = greedy::recompute(c, &peaks);
            let Some((_, best)) = exact::recompute(c, &peaks) else {
                continue;
            };
            assert!(
                heuristic.peak_after as f64 <= 1.1 * best.peak_after as f64,
                "{layers} layers, {activation}: heuristic {heuristic}, exact {best}"
            );
            assert!(best.peak_after <= heuristic.peak_after);
            eprintln!(
                "{layers} layers {activation} ({} instructions): before {}, heuristic {}, exact {}",
                c.len(),
                heuristic.peak_before,
                heuristic.peak_after,
                best.peak_after
            );
            judged += 1;
            if best.peak_after < best.peak_before {
                lowered += 1;
            }
        }
    }
    assert!(judged >= 4, "only {judged} graphs small enough to judge");
    assert!(
        lowered >= 1,
        "no graph where recomputing lowers the peak: nothing judged"
    );
}

#[test]
fn no_training_case_of_the_corpus_is_small_enough_for_the_exact_solver() {
    // The issue asks for the exact comparison on the corpus's training cases of at most
    // 40 instructions; there are none (the smallest, cnn_train_step, has 100), so the
    // test above judges frontend-built training steps instead. This pins that fact.
    for case in [
        "cnn_train_step",
        "seed_mlp_train_rmsprop",
        "bench_mlp_train_b256",
        "bench_cnn_train_b32",
        "bench_transformer_fwd_bwd",
    ] {
        let m = fixture(&format!("conformance/{case}/module.hlo"));
        assert!(
            m.entry_computation().len() > exact::MAX_INSTRUCTIONS,
            "{case} is small enough now: judge it"
        );
    }
}

#[test]
fn a_checkpointed_training_step_computes_what_the_plain_one_does() {
    // The same step with a checkpoint after the first layer: the evaluator, and the IPU
    // Model with recomputation, give the plain step's loss and gradients.
    let build = |checkpoint: bool| -> Module {
        let f32t = ElementType::F32;
        let mut g = ModuleBuilder::entry("train", "main");
        let x = g.parameter(0, Shape::array(f32t, &[64, 8]), "x").unwrap();
        let target = g
            .parameter(1, Shape::array(f32t, &[64, 8]), "target")
            .unwrap();
        let w0 = g.parameter(2, Shape::array(f32t, &[8, 8]), "w0").unwrap();
        let w1 = g.parameter(3, Shape::array(f32t, &[8, 8]), "w1").unwrap();
        let mut h = g.dot(x, w0).unwrap();
        h = nn::relu(&mut g, h).unwrap();
        if checkpoint {
            h = ipuxla::frontend::scopes::recomputation_checkpoint(&mut g, h).unwrap();
        }
        let y = g.dot(h, w1).unwrap();
        let loss = nn::mean_squared_error(&mut g, y, target).unwrap();
        let grads = grad(&mut g, loss, &[w0, w1]).unwrap();
        let root = g.tuple(&[loss, grads[0], grads[1]]).unwrap();
        g.finish_module(root).unwrap()
    };
    let (plain, checked) = (build(false), build(true));
    assert!(checked.to_string().contains("RecomputationCheckpoint"));
    let inputs = common::arguments(&plain);
    let want = f32s(&ipuxla::xla_ir::eval::evaluate(&plain, &inputs).unwrap());
    assert_eq!(
        f32s(&ipuxla::xla_ir::eval::evaluate(&checked, &inputs).unwrap()),
        want
    );
    let run = ipuxla::device::run_on_ipu_model(&checked, &recomputing(), &inputs).unwrap();
    let got: Vec<f32> = run
        .outputs
        .iter()
        .flat_map(|o| match &o.data {
            ArrayData::F32(v) => v.clone(),
            _ => panic!("f32 results"),
        })
        .collect();
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-4 + 1e-4 * w.abs(), "{g} vs {w}");
    }
}

/// Every candidate move's peak as `trial` weighs it equals the estimator's peak of the
/// computation with the move made, also after moves (copies of copies, tuples of copies).
#[test]
fn a_trial_peak_is_the_peak_of_the_move_made() {
    use ipuxla::compiler::recompute::moves::{apply, candidates};
    use ipuxla::compiler::recompute::trial::{Level, Trials};
    use ipuxla::compiler::schedule::{Graph, live_bytes};
    /// The peak and the steps at it, by the estimator on the computation itself.
    fn level_of(
        c: &ipuxla::xla_ir::Computation,
        peaks: &std::collections::HashMap<ipuxla::xla_ir::CompId, u64>,
    ) -> Level {
        let g = Graph::of(c, peaks);
        let order: Vec<usize> = (0..g.len()).collect();
        Level::of(live_bytes(&g, &order).into_iter())
    }
    let mut modules: Vec<(String, Module)> = [
        "recompute/early_and_late.hlo",
        "conformance/cnn_train_step/module.hlo",
        "conformance/seed_mlp_train_rmsprop/module.hlo",
    ]
    .iter()
    .map(|path| (path.to_string(), scheduled(&fixture(path))))
    .collect();
    for activation in ["relu", "tanh"] {
        let m = scheduled(&training_step(3, 8, 16, activation));
        modules.push((format!("training step, {activation}"), m));
    }
    // Generated modules: tuples, bitcasts, in-place updates and loops naming buffers.
    let options = ipuxla::xla_ir::generate::Options {
        instructions: 24,
        ..Default::default()
    };
    for seed in 0..40 {
        let m = ipuxla::xla_ir::generate::module(seed, &options).unwrap();
        modules.push((format!("generated seed {seed}"), scheduled(&m)));
    }
    let mut weighed = 0;
    for (name, m) in &modules {
        let peaks = recompute::computation_peaks(m);
        let mut c = m.entry_computation().clone();
        for step in 0..4 {
            let trials = Trials::new(&c, &peaks);
            assert_eq!(trials.peak(), recompute::peak_of(&c, &peaks), "{name}");
            assert_eq!(trials.level(), level_of(&c, &peaks), "{name}");
            let moves = candidates(&c);
            for &mv in &moves {
                let made = level_of(&apply(&c, &[mv]), &peaks);
                assert_eq!(trials.level_after(mv), made, "{name}, step {step}, {mv:?}");
                weighed += 1;
            }
            // Make the lowest move, or the first when none lowers the peak.
            let Some(&next) = moves
                .iter()
                .min_by_key(|&&mv| trials.peak_after(mv))
                .filter(|&&mv| trials.peak_after(mv) < trials.peak())
                .or(moves.first())
            else {
                break;
            };
            c = apply(&c, &[next]);
        }
    }
    assert!(weighed >= 100, "only {weighed} moves weighed");
}

/// The transformer bench case's estimated peak sits on a plateau after nine moves: six
/// steps of the GELU's backward pass at the same bytes, which no one move lowers. Taking
/// steps off the plateau (recomputing two broadcast constants before their late reads)
/// reaches the issue's -30 % within the 30 % work budget.
#[test]
fn the_heuristic_gets_off_a_plateau_on_the_bench_transformer() {
    let m = scheduled(&fixture("conformance/bench_transformer_fwd_bwd/module.hlo"));
    let peaks = recompute::computation_peaks(&m);
    let (out, report) = greedy::recompute(m.entry_computation(), &peaks);
    assert!(
        report.peak_after as f64 <= 0.7 * report.peak_before as f64,
        "{report}"
    );
    assert!(
        report.work_added as f64 <= 0.1 * report.work_before as f64,
        "{report}"
    );
    assert_eq!(recompute::peak_of(&out, &peaks), report.peak_after);
}
