//! The e-graph optimiser on every conformance case, both forms, with matmul combining on:
//! the optimised module evaluates (reference evaluator) to what the unoptimised one does,
//! at the case's tolerances, and still matches XLA's stored outputs.

mod common;

use common::{cases, check_output, leaves, load};
use ipuxla::compiler::IpuConfig;
use ipuxla::compiler::passes::{EgraphOptimiser, Pass, PassContext};
use ipuxla::npy::read_npy;
use std::path::Path;

fn run_case(case: &Path, file: &str, config: &IpuConfig) {
    let (info, module, inputs) = load(case, file);
    let what = format!("{}/{file}", case.file_name().unwrap().to_string_lossy());
    let mut optimised = module.clone();
    let mut cx = PassContext {
        config,
        warnings: Vec::new(),
        notes: Vec::new(),
    };
    EgraphOptimiser
        .run(&mut optimised, &mut cx)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let before = leaves(xla_ir::eval::evaluate(&module, &inputs).unwrap());
    let after = leaves(
        xla_ir::eval::evaluate(&optimised, &inputs).unwrap_or_else(|e| panic!("{what}: {e}")),
    );
    let outputs = info["outputs"].as_array().unwrap();
    assert_eq!(after.len(), before.len(), "{what}: number of outputs");
    for (k, ((a, b), spec)) in after.iter().zip(&before).zip(outputs).enumerate() {
        check_output(&format!("{what} output {k} (optimised vs not)"), a, b, spec);
        let want = read_npy(&case.join(spec["file"].as_str().unwrap())).unwrap();
        check_output(
            &format!("{what} output {k} (optimised vs XLA)"),
            a,
            &want,
            spec,
        );
    }
}

fn config() -> IpuConfig {
    let mut config = IpuConfig::default();
    config.optimizations.combine_matmuls = true;
    config
}

#[test]
fn optimised_plain_modules_evaluate_as_before() {
    let config = config();
    for case in cases() {
        run_case(&case, "module.hlo", &config);
    }
}

#[test]
fn optimised_xla_modules_evaluate_as_before() {
    let config = config();
    for case in cases() {
        run_case(&case, "module.opt.hlo", &config);
    }
}
