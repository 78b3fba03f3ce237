//! Every conformance case in `fixtures/conformance/` runs through the reference evaluator,
//! in both forms (JAX's module.hlo and XLA's optimised module.opt.hlo), and matches the
//! outputs XLA computed at the case's tolerances (exact for integers and bools).

use ipuxla::npy::read_npy;
use std::path::{Path, PathBuf};
use xla_ir::literal::{ArrayData, ArrayLiteral};
use xla_ir::{Literal, parse_module};

fn cases() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/conformance");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("inputs").is_dir())
        .collect();
    cases.sort();
    assert!(
        cases.len() >= 45,
        "expected every non-bench case, found {}",
        cases.len()
    );
    cases
}

fn leaves(l: Literal) -> Vec<ArrayLiteral> {
    match l {
        Literal::Array(a) => vec![a],
        Literal::Tuple(t) => t.into_iter().flat_map(leaves).collect(),
        Literal::Token => vec![],
    }
}

fn as_f64(data: &ArrayData) -> Option<Vec<f64>> {
    Some(match data {
        ArrayData::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
        ArrayData::Bf16(v) => v.iter().map(|x| x.to_f64()).collect(),
        ArrayData::F32(v) => v.iter().map(|&x| x as f64).collect(),
        ArrayData::F64(v) => v.clone(),
        _ => return None,
    })
}

/// The corpus rule: |got - want| <= atol + rtol * |want|; NaN matches NaN, infinities match.
fn check_output(what: &str, got: &ArrayLiteral, want: &ArrayLiteral, spec: &serde_json::Value) {
    assert_eq!(
        got.shape.element_type, want.shape.element_type,
        "{what}: element type"
    );
    assert_eq!(got.shape.dims, want.shape.dims, "{what}: dimensions");
    match (as_f64(&got.data), as_f64(&want.data)) {
        (Some(g), Some(w)) => {
            let rtol = spec["rtol"].as_f64().unwrap_or(0.0);
            let atol = spec["atol"].as_f64().unwrap_or(0.0);
            for (i, (&a, &b)) in g.iter().zip(&w).enumerate() {
                let ok = if b.is_nan() {
                    a.is_nan()
                } else if b.is_infinite() {
                    a == b
                } else {
                    (a - b).abs() <= atol + rtol * b.abs()
                };
                assert!(
                    ok,
                    "{what}: element {i} is {a}, expected {b} (rtol {rtol}, atol {atol})"
                );
            }
        }
        _ => assert_eq!(got.data, want.data, "{what}: integer or bool values differ"),
    }
}

fn run_case(case: &Path, file: &str) {
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(case.join("case.json")).unwrap()).unwrap();
    let module = parse_module(&std::fs::read_to_string(case.join(file)).unwrap()).unwrap();
    let inputs: Vec<Literal> = info["params"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| Literal::Array(read_npy(&case.join(p["file"].as_str().unwrap())).unwrap()))
        .collect();
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
