//! Every conformance case in `fixtures/conformance/` runs through the reference evaluator,
//! in both forms (JAX's module.hlo and XLA's optimised module.opt.hlo), and matches the
//! outputs XLA computed at the case's tolerances (exact for integers and bools).

mod common;

use common::{cases, check_output, leaves, load};
use ipuxla::npy::read_npy;
use std::path::Path;
use xla_ir::literal::ArrayLiteral;

fn run_case(case: &Path, file: &str) {
    let (info, module, inputs) = load(case, file);
    let what = format!("{}/{file}", case.file_name().unwrap().to_string_lossy());
    let result = xla_ir::eval::evaluate(&module, &inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
    let got = leaves(result);
    let outputs = info["outputs"].as_array().unwrap();
    assert_eq!(got.len(), outputs.len(), "{what}: number of outputs");
    for (k, (g, spec)) in got.iter().zip(outputs).enumerate() {
        let want = read_npy(&case.join(spec["file"].as_str().unwrap())).unwrap();
        check_output(&format!("{what} output {k}"), g, &want, spec);
    }
}

#[test]
fn plain_modules_match_xla() {
    for case in cases() {
        run_case(&case, "module.hlo");
    }
}

#[test]
fn optimised_modules_match_xla() {
    for case in cases() {
        run_case(&case, "module.opt.hlo");
    }
}

#[test]
#[should_panic(expected = "element 1 is 8.5, expected 8")]
fn the_tolerance_rule_catches_a_wrong_value() {
    let lit = |v: &[f32]| ArrayLiteral::vector_f32(v);
    let spec = serde_json::json!({"rtol": 1e-6, "atol": 1e-6});
    check_output("example", &lit(&[3.0, 8.5]), &lit(&[3.0, 8.0]), &spec);
}
