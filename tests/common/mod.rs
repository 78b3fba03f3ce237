//! Helpers the corpus tests share: the fixture cases, result leaves, and the corpus's
//! tolerance rule.
#![allow(dead_code)]

use ipuxla::npy::read_npy;
use std::path::{Path, PathBuf};
use xla_ir::Literal;
use xla_ir::literal::{ArrayData, ArrayLiteral};

/// The fixture cases that have inputs (all but the bench cases).
pub fn cases() -> Vec<PathBuf> {
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

/// The leaves of a result.
pub fn leaves(l: Literal) -> Vec<ArrayLiteral> {
    match l {
        Literal::Array(a) => vec![a],
        Literal::Tuple(t) => t.into_iter().flat_map(leaves).collect(),
        Literal::Token => vec![],
    }
}

pub fn as_f64(data: &ArrayData) -> Option<Vec<f64>> {
    Some(match data {
        ArrayData::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
        ArrayData::Bf16(v) => v.iter().map(|x| x.to_f64()).collect(),
        ArrayData::F32(v) => v.iter().map(|&x| x as f64).collect(),
        ArrayData::F64(v) => v.clone(),
        _ => return None,
    })
}

/// The corpus rule: |got - want| <= atol + rtol * |want|; NaN matches NaN, infinities match.
pub fn check_output(what: &str, got: &ArrayLiteral, want: &ArrayLiteral, spec: &serde_json::Value) {
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

/// A case's description, module and inputs.
pub fn load(case: &Path, file: &str) -> (serde_json::Value, xla_ir::Module, Vec<Literal>) {
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(case.join("case.json")).unwrap()).unwrap();
    let module = xla_ir::parse_module(&std::fs::read_to_string(case.join(file)).unwrap()).unwrap();
    let inputs: Vec<Literal> = info["params"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| Literal::Array(read_npy(&case.join(p["file"].as_str().unwrap())).unwrap()))
        .collect();
    (info, module, inputs)
}

/// The names of the files in `dir`, sorted.
pub fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}
