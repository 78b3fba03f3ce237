//! Every fixture case compiled for the IPU Model and run there, in both forms, on a full
//! ipu2 (1472 tiles) and on a 4-tile IPU, matches the reference evaluator (at twice the
//! case's tolerance: both are within it of XLA). On 4 tiles, a case whose inputs and
//! outputs alone are more than the tiles hold must run out of core (through Streaming
//! Memory) and still match. `x64_int64` must fail with the f64 error.

mod common;

use common::{cases, check_output, leaves, load};
use compiler::IpuConfig;
use ipuxla::compiler;
use std::path::Path;

fn run_case(case: &Path, file: &str, tiles: usize) {
    let (info, module, inputs) = load(case, file);
    let what = format!(
        "{}/{file} on {tiles} tiles",
        case.file_name().unwrap().to_string_lossy()
    );
    let mut config = IpuConfig::default();
    config.ipu_model.tiles_per_ipu = tiles;
    let reference = leaves(xla_ir::eval::evaluate(&module, &inputs).unwrap());
    let run = ipuxla::device::run_on_ipu_model(&module, &config, &inputs)
        .unwrap_or_else(|e| panic!("{what}: {e:#}"));
    let target = config.target().unwrap();
    let io_bytes: u64 = inputs
        .iter()
        .map(|l| l.shape().byte_size())
        .chain(reference.iter().map(|a| a.shape.byte_size()))
        .sum();
    let capacity = target.bytes_per_tile * target.tiles_per_ipu as u64;
    if io_bytes > capacity {
        assert_eq!(
            run.profile.out_of_core.map(|o| o.physical_tiles_per_ipu),
            Some(target.tiles_per_ipu),
            "{what}: inputs and outputs of {io_bytes} B cannot fit {capacity} B of tiles"
        );
        assert!(run.profile.totals.bytes_paged >= io_bytes, "{what}: paging");
    }
    assert_eq!(run.outputs.len(), reference.len(), "{what}: outputs");
    for (k, ((got, want), spec)) in run
        .outputs
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
    assert!(run.profile.total_cycles > 0, "{what}: no cycles counted");
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
