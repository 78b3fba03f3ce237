//! Steps per execution: the `conformance-loops` fixtures (training steps XLA ran N times)
//! run as device loops on the IPU Model (a full ipu2 and 4 tiles) and on the reference
//! evaluator, and match XLA's results; weights stay resident; bad loops are refused.

mod common;

use common::{check_output, load};
use compiler::{IpuConfig, PassOptions};
use ipuxla::compiler;
use ipuxla::device::{LoadedModule, run_device_loop_on_ipu_model, run_on_ipu_model};
use ipuxla::device_loop::{OutfeedMode, device_loop_for, evaluate_loop};
use ipuxla::runtime::EngineOptions;
use std::path::{Path, PathBuf};
use xla_ir::Literal;
use xla_ir::eval::Feeds;
use xla_ir::literal::ArrayLiteral;

fn loop_case(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/conformance-loops")
        .join(name)
}

const CASES: [&str; 3] = ["loop_counter_const", "loop_linreg_sgd", "loop_mlp_adam"];

/// The loop on the evaluator, with no host feeds.
fn reference_loop(
    module: &xla_ir::Module,
    lp: &compiler::DeviceLoop,
    inputs: &[Literal],
    mode: OutfeedMode,
) -> Vec<ArrayLiteral> {
    evaluate_loop(module, lp, inputs, mode, &mut Feeds::default()).unwrap()
}

fn iterations(info: &serde_json::Value) -> u64 {
    info["iterations"].as_u64().expect("case.json: iterations")
}

fn check_all(what: &str, info: &serde_json::Value, case: &Path, outputs: &[ArrayLiteral]) {
    let c = ipuxla::corpus::Case::read(case, "module.hlo").unwrap();
    assert_eq!(
        outputs.len(),
        info["outputs"].as_array().unwrap().len(),
        "{what}"
    );
    for (k, got) in outputs.iter().enumerate() {
        let (want, spec) = c.expected_output(k).unwrap().expect("stored output");
        check_output(&format!("{what}: output {k}"), got, &want, &spec);
    }
}

#[test]
fn every_loop_case_matches_xla_on_the_ipu_model_and_the_evaluator() {
    for name in CASES {
        let case = loop_case(name);
        let (info, module, inputs) = load(&case, "module.hlo");
        let lp = device_loop_for(&module, iterations(&info), &inputs).unwrap();
        let reference = reference_loop(&module, &lp, &inputs, OutfeedMode::All);
        check_all(
            &format!("{name} on the evaluator"),
            &info,
            &case,
            &reference,
        );
        for tiles in [1472, 4] {
            let mut config = IpuConfig::default();
            config.ipu_model.tiles_per_ipu = tiles;
            let run = run_device_loop_on_ipu_model(
                &module,
                &config,
                &PassOptions::default(),
                &inputs,
                lp.clone(),
                OutfeedMode::All,
                &mut Feeds::default(),
            )
            .unwrap_or_else(|e| panic!("{name} on {tiles} tiles: {e:#}"));
            check_all(
                &format!("{name} on {tiles} tiles"),
                &info,
                &case,
                &run.outputs,
            );
        }
    }
}

/// `loop_mlp_adam`'s inputs with the fed batches repeated to `n` iterations.
fn mlp_adam_inputs(n: usize) -> (xla_ir::Module, Vec<Literal>) {
    let (_, module, mut inputs) = load(&loop_case("loop_mlp_adam"), "module.hlo");
    for k in [7, 8] {
        let Literal::Array(all) = &inputs[k] else {
            panic!("array input")
        };
        let stored = all.shape.dims[0] as usize;
        let slices: Vec<ArrayLiteral> = (0..n).map(|i| all.index_leading(i % stored)).collect();
        inputs[k] = Literal::Array(ArrayLiteral::stack(&slices).unwrap());
    }
    (module, inputs)
}

#[test]
fn a_hundred_adam_steps_stream_the_weights_once_and_cost_less_per_step_than_one_run() {
    let (module, inputs) = mlp_adam_inputs(100);
    let config = IpuConfig::default();
    let lp = device_loop_for(&module, 100, &inputs).unwrap();
    let (mut loaded, _) = LoadedModule::load_device_loop(
        &module,
        &config,
        &PassOptions::default(),
        EngineOptions::default(),
        lp.clone(),
    )
    .unwrap();
    let (outputs, profile) = loaded.run(&inputs).unwrap();
    let facts = loaded.loop_facts().unwrap();
    // Carried parameters 0..7 stream in as in0..in6, before the loop; the fed batches
    // (in7, in8) once per iteration.
    let count = |name: &str| profile.steps.iter().filter(|s| s.name == name).count();
    for k in 0..7 {
        assert_eq!(count(&format!("stream in{k}")), 1, "carried parameter {k}");
    }
    assert_eq!(count("stream in7"), 100);
    assert_eq!(count("stream in8"), 100);
    // In: resident once and the batches every iteration; out: the loss every iteration and
    // the carried values once.
    let carried_out: u64 = facts.resident_bytes;
    assert_eq!(
        profile.totals.bytes_streamed,
        facts.resident_bytes
            + 100 * (facts.fed_bytes_per_iteration + facts.out_bytes_per_iteration)
            + carried_out
    );
    // One step run alone, with its weights streamed in and out.
    let one: Vec<Literal> = inputs
        .iter()
        .enumerate()
        .map(|(k, l)| match (k, l) {
            (7 | 8, Literal::Array(a)) => Literal::Array(a.index_leading(0)),
            _ => l.clone(),
        })
        .collect();
    let single = run_on_ipu_model(&module, &config, &one).unwrap();
    let per_iteration = profile.total_cycles / 100;
    assert!(
        per_iteration < single.profile.total_cycles,
        "{per_iteration} cycles per iteration, one step {}",
        single.profile.total_cycles
    );
    // The loop computes what the evaluator's loop does, and a second run the same again.
    let reference = reference_loop(&module, &lp, &inputs, OutfeedMode::All);
    let spec = serde_json::json!({"rtol": 2e-4, "atol": 1e-5});
    for (k, (got, want)) in outputs.iter().zip(&reference).enumerate() {
        check_output(&format!("output {k}"), got, want, &spec);
    }
    assert_eq!(outputs[7].shape.dims[..], [100]);
    let (again, _) = loaded.run(&inputs).unwrap();
    assert_eq!(again, outputs);
}

#[test]
fn outfeed_mode_last_keeps_the_last_iteration_of_stacked_outputs() {
    let case = loop_case("loop_linreg_sgd");
    let (info, module, inputs) = load(&case, "module.hlo");
    let lp = device_loop_for(&module, iterations(&info), &inputs).unwrap();
    let run = |mode| {
        let options = PassOptions::default();
        run_device_loop_on_ipu_model(
            &module,
            &IpuConfig::default(),
            &options,
            &inputs,
            lp.clone(),
            mode,
            &mut Feeds::default(),
        )
        .unwrap()
    };
    let (all, last) = (run(OutfeedMode::All), run(OutfeedMode::Last));
    let reference_last = reference_loop(&module, &lp, &inputs, OutfeedMode::Last);
    let n = iterations(&info) as usize;
    let mut stacked = 0;
    for (k, (a, l)) in all.outputs.iter().zip(&last.outputs).enumerate() {
        if a.shape.dims.len() == l.shape.dims.len() + 1 {
            stacked += 1;
            assert_eq!(a.shape.dims[0] as usize, n, "output {k}");
            let final_value = a.index_leading(n - 1);
            assert_eq!(final_value.data, l.data, "output {k}");
            assert_eq!(final_value.shape.dims, l.shape.dims, "output {k}");
        } else {
            assert_eq!(
                a, l,
                "output {k}: an aliased output is its final value in both modes"
            );
        }
        assert_eq!(l.shape.dims, reference_last[k].shape.dims, "output {k}");
    }
    assert!(
        stacked > 0,
        "the case has an output stacked over iterations"
    );
    // Every iteration still streams its outputs out: the same cycles either way.
    assert_eq!(all.profile.total_cycles, last.profile.total_cycles);
}

#[test]
fn bad_device_loops_are_refused_naming_the_parameter() {
    let (module, inputs) = mlp_adam_inputs(5);
    // A batch whose leading dimension is not the iteration count.
    let e = device_loop_for(&module, 4, &inputs)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("parameter 7 (") && e.contains("one more leading dimension of 4"),
        "{e}"
    );
    // A carried (aliased) parameter given one value per iteration.
    let mut fed_weights = inputs.clone();
    let Literal::Array(w) = &inputs[0] else {
        panic!("array input")
    };
    fed_weights[0] = Literal::Array(ArrayLiteral::stack(&vec![w.clone(); 5]).unwrap());
    let e = device_loop_for(&module, 5, &fed_weights)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("parameter 0") && e.contains("carried") && e.contains("cannot also be fed"),
        "{e}"
    );
    let e = device_loop_for(&module, 0, &inputs)
        .unwrap_err()
        .to_string();
    assert!(e.contains("at least 1"), "{e}");
}

#[test]
fn a_resident_loop_keeps_its_weights_on_the_device_between_runs() {
    let (module, inputs) = mlp_adam_inputs(5);
    let mut lp = device_loop_for(&module, 5, &inputs).unwrap();
    lp.resident = true;
    let (mut loaded, _) = LoadedModule::load_device_loop(
        &module,
        &IpuConfig::default(),
        &PassOptions::default(),
        EngineOptions::default(),
        lp,
    )
    .unwrap();
    let (first, p1) = loaded.run(&inputs).unwrap();
    let (second, p2) = loaded.run(&inputs).unwrap();
    let uploads = |p: &ipuxla::runtime::Profile| {
        (0..7)
            .map(|k| {
                let name = format!("stream in{k}");
                p.steps.iter().filter(|s| s.name == name).count()
            })
            .sum::<usize>()
    };
    assert_eq!(
        uploads(&p1),
        7,
        "the first run streams the 7 carried parameters in"
    );
    assert_eq!(uploads(&p2), 0, "the second finds them on the device");
    assert!(p2.totals.bytes_streamed < p1.totals.bytes_streamed);
    // The second run continues where the first stopped: 10 steps on the evaluator.
    let (_, inputs10) = mlp_adam_inputs(10);
    let lp10 = device_loop_for(&module, 10, &inputs10).unwrap();
    let reference = reference_loop(&module, &lp10, &inputs10, OutfeedMode::All);
    let spec = serde_json::json!({"rtol": 2e-4, "atol": 1e-5});
    for k in 0..7 {
        check_output(&format!("output {k}"), &second[k], &reference[k], &spec);
    }
    let later_losses: Vec<ArrayLiteral> = (5..10).map(|i| reference[7].index_leading(i)).collect();
    check_output(
        "losses 5..10",
        &second[7],
        &ArrayLiteral::stack(&later_losses).unwrap(),
        &spec,
    );
    // After reupload the next run starts again from the inputs.
    loaded.reupload();
    let (third, p3) = loaded.run(&inputs).unwrap();
    assert_eq!(uploads(&p3), 7);
    assert_eq!(third, first);
}

#[test]
fn the_configs_device_loop_keys_act_like_the_flags() {
    let case = loop_case("loop_linreg_sgd");
    let (info, module, inputs) = load(&case, "module.hlo");
    let n = iterations(&info);
    // Library: run_on_ipu_model with device_loop.iterations_per_loop runs the loop.
    let mut config = IpuConfig::default();
    config.device_loop.iterations_per_loop = Some(n);
    let run = run_on_ipu_model(&module, &config, &inputs).unwrap();
    check_all("iterations_per_loop", &info, &case, &run.outputs);
    assert_eq!(run.device_loop.unwrap().iterations, n);
    // LAST keeps the last iteration of the stacked outputs.
    config.device_loop.outfeed_mode = "last".into();
    let last = run_on_ipu_model(&module, &config, &inputs).unwrap();
    let lp = device_loop_for(&module, n, &inputs).unwrap();
    let want = reference_loop(&module, &lp, &inputs, OutfeedMode::Last);
    assert_eq!(last.outputs.len(), want.len());
    for (got, want) in last.outputs.iter().zip(&want) {
        check_output(
            "outfeed_mode LAST",
            got,
            want,
            &serde_json::json!({"rtol": 1e-5, "atol": 1e-6}),
        );
    }
    // compile() cannot know which parameters are fed: refused, saying what to use.
    let e = compiler::compile(&module, &config).unwrap_err().to_string();
    assert!(e.contains("compile with compile_device_loop"), "{e}");
    for (bad, needle) in [
        (
            r#"{"device_loop": {"iterations_per_loop": 0}}"#,
            "runs at least one iteration",
        ),
        (
            r#"{"device_loop": {"outfeed_mode": "SOME"}}"#,
            "must be ALL or LAST",
        ),
        (
            r#"{"optimizations": {"prefetch_data_streams": false}}"#,
            "prefetch_data_streams false is not modelled",
        ),
    ] {
        let c: IpuConfig = serde_json::from_str(bad).unwrap();
        let e = c.check().unwrap_err().to_string();
        assert!(e.contains(needle), "{bad}: {e}");
    }
}
