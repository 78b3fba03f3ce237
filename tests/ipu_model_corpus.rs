//! Every fixture case compiled for the IPU Model and run there, in both forms, on a full
//! ipu2 (1472 tiles) and on a 4-tile IPU, matches the reference evaluator (at twice the
//! case's tolerance: both are within it of XLA). On 4 tiles, a case whose inputs and
//! outputs alone are more than the tiles hold must run out of core (through Streaming
//! Memory) and still match. `x64_int64` must fail with the f64 error.
//!
//! Every run's profile is also what the model estimates without running (replaying the
//! run's branch decisions where the program has data-dependent control flow), and the
//! engine's host shortcuts change no cycle and no byte of an output (but for the last bits
//! of products the host multiplies from operands seen in place: gemm's summation order
//! follows the operands' shape and strides).

mod common;

use common::{cases, check_output, leaves, load};
use compiler::{IpuConfig, PassOptions};
use ipuxla::compiler;
use ipuxla::device::LoadedModule;
use ipuxla::runtime::{EngineOptions, Profile};
use std::path::Path;

/// The estimate of a loaded module equals the profile `run` recorded: exactly when the run
/// made no decision on data, and replaying its decisions when it did (without them, the
/// estimate says which loops and branches it could not know).
fn check_estimate(what: &str, loaded: &LoadedModule, run: &Profile) {
    let replayed = loaded.estimate(&run.decisions).unwrap();
    assert_eq!(
        &replayed, run,
        "{what}: estimate replaying the run's decisions"
    );
    let blind = loaded.estimate(&[]).unwrap();
    if run.decisions.is_empty() {
        assert_eq!(&blind, run, "{what}: estimate");
    } else {
        assert!(!blind.data_dependent.is_empty(), "{what}: {blind:?}");
    }
}

fn run_case(case: &Path, file: &str, tiles: usize) {
    let (info, module, inputs) = load(case, file);
    let what = format!(
        "{}/{file} on {tiles} tiles",
        case.file_name().unwrap().to_string_lossy()
    );
    let mut config = IpuConfig::default();
    config.ipu_model.tiles_per_ipu = tiles;
    let reference = leaves(xla_ir::eval::evaluate(&module, &inputs).unwrap());
    let (mut loaded, _) = LoadedModule::load(&module, &config, &PassOptions::default())
        .unwrap_or_else(|e| panic!("{what}: {e:#}"));
    let (outputs, profile) = loaded
        .run(&inputs)
        .unwrap_or_else(|e| panic!("{what}: {e:#}"));
    check_estimate(&what, &loaded, &profile);
    let target = config.target().unwrap();
    let io_bytes: u64 = inputs
        .iter()
        .map(|l| l.shape().byte_size())
        .chain(reference.iter().map(|a| a.shape.byte_size()))
        .sum();
    let capacity = target.bytes_per_tile * target.tiles_per_ipu as u64;
    if io_bytes > capacity {
        assert_eq!(
            profile.out_of_core.map(|o| o.physical_tiles_per_ipu),
            Some(target.tiles_per_ipu),
            "{what}: inputs and outputs of {io_bytes} B cannot fit {capacity} B of tiles"
        );
        assert!(profile.totals.bytes_paged >= io_bytes, "{what}: paging");
    }
    assert_eq!(outputs.len(), reference.len(), "{what}: outputs");
    for (k, ((got, want), spec)) in outputs
        .iter()
        .zip(&reference)
        .zip(info["outputs"].as_array().unwrap())
        .enumerate()
    {
        let doubled = serde_json::json!({
            "rtol": spec["rtol"].as_f64().unwrap_or(0.0) * 2.0,
            "atol": spec["atol"].as_f64().unwrap_or(0.0) * 2.0,
        });
        check_output(&format!("{what} output {k}"), got, want, &doubled);
    }
    assert!(profile.total_cycles > 0, "{what}: no cycles counted");
}

fn run_all(file: &str, tiles: usize) {
    for case in cases() {
        if case.ends_with("x64_int64") {
            let (_, module, inputs) = load(&case, file);
            let e = ipuxla::device::run_on_ipu_model(&module, &IpuConfig::default(), &inputs)
                .unwrap_err();
            assert!(format!("{e:#}").contains("no 64-bit floats"), "{e:#}");
            continue;
        }
        run_case(&case, file, tiles);
    }
}

#[test]
fn plain_modules_on_a_full_ipu() {
    run_all("module.hlo", 0);
}

#[test]
fn optimised_modules_on_a_full_ipu() {
    run_all("module.opt.hlo", 0);
}

#[test]
fn plain_modules_on_four_tiles() {
    run_all("module.hlo", 4);
}

#[test]
fn optimised_modules_on_four_tiles() {
    run_all("module.opt.hlo", 4);
}

#[test]
fn host_shortcuts_change_no_byte_and_no_cycle() {
    let plain = EngineOptions {
        shortcuts: false,
        ..EngineOptions::default()
    };
    let mut exact = 0;
    let mut windowed = 0;
    let mut grouped = 0;
    for case in cases().iter().filter(|c| !c.ends_with("x64_int64")) {
        let (info, module, inputs) = load(case, "module.opt.hlo");
        let run = |engine: EngineOptions| {
            let options = PassOptions::default();
            let (mut loaded, _) =
                LoadedModule::load_with(&module, &IpuConfig::default(), &options, engine).unwrap();
            let (outputs, profile) = loaded.run(&inputs).unwrap();
            let engine = loaded.engine();
            let seen = (
                engine.viewed_products(),
                engine.windowed_codelet_inputs(),
                engine.grouped_codelets(),
            );
            (outputs, profile, seen)
        };
        let (fast, fast_profile, (batches, codelet_inputs, groups)) = run(EngineOptions::default());
        let (slow, slow_profile, (none, no_inputs, no_groups)) = run(plain);
        windowed += codelet_inputs;
        grouped += usize::from(groups > 0 && batches == 0);
        let what = case.display();
        assert_eq!(
            none, 0,
            "{what}: shortcuts off, no operand is seen in place"
        );
        assert_eq!(
            no_inputs, 0,
            "{what}: shortcuts off, codelets read tile memory"
        );
        assert_eq!(no_groups, 0, "{what}: shortcuts off, codelets run alone");
        assert_eq!(fast_profile, slow_profile, "{what}: profiles");
        assert_eq!(fast.len(), slow.len(), "{what}");
        let specs = info["outputs"].as_array().unwrap();
        for (k, ((a, b), spec)) in fast.iter().zip(&slow).zip(specs).enumerate() {
            if batches == 0 {
                assert_eq!(
                    bits(&a.data),
                    bits(&b.data),
                    "{what}: output {k}, bit for bit"
                );
            } else {
                check_output(&format!("{what}: output {k}"), a, b, spec);
            }
        }
        exact += usize::from(batches == 0);
    }
    assert!(exact >= 30, "only {exact} cases ran without operand views");
    assert!(
        windowed > 0,
        "no codelet read its input from a kept window: the comparison above did not cover it"
    );
    assert!(
        grouped > 0,
        "no case compared bit for bit ran codelets in groups: the comparison did not cover them"
    );
}

#[test]
fn a_second_run_on_other_inputs_computes_from_them() {
    // The convolution parts that share one patch matrix read their input from a kept
    // window, named for one run: a later run on other inputs must not reuse the first's.
    for name in ["cnn_train_step", "conv2d_basic"] {
        let case = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/conformance")
            .join(name);
        let (_, module, inputs) = load(&case, "module.hlo");
        let others = common::arguments(&module);
        let load = || {
            let (loaded, _) =
                LoadedModule::load(&module, &IpuConfig::default(), &PassOptions::default())
                    .unwrap();
            loaded
        };
        let mut twice = load();
        assert!(twice.engine().windowed_codelet_inputs() > 0, "{name}");
        let (first, _) = twice.run(&inputs).unwrap();
        let (second, _) = twice.run(&others).unwrap();
        let (fresh, _) = load().run(&others).unwrap();
        let same = |a: &xla_ir::literal::ArrayLiteral, b: &xla_ir::literal::ArrayLiteral| {
            bits(&a.data) == bits(&b.data)
        };
        assert!(
            first.iter().zip(&second).any(|(a, b)| !same(a, b)),
            "{name}: the inputs matter"
        );
        for (k, (a, b)) in second.iter().zip(&fresh).enumerate() {
            assert!(
                same(a, b),
                "{name}: output {k} of the second run differs from a fresh engine's"
            );
        }
    }
}

/// An array's elements as bits (NaNs compare equal to themselves).
fn bits(data: &xla_ir::literal::ArrayData) -> Vec<u8> {
    format!("{data:?}").into_bytes()
}
