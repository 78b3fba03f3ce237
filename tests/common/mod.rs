//! Helpers the corpus tests share: the fixture cases, result leaves, and the corpus's
//! tolerance rule.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use xla_ir::Literal;
use xla_ir::literal::ArrayLiteral;

/// The fixture cases that have inputs (all but the bench cases).
pub fn cases() -> Vec<PathBuf> {
    let cases: Vec<PathBuf> = case_dirs("fixtures/conformance")
        .into_iter()
        .filter(|p| p.join("inputs").is_dir())
        .collect();
    assert!(
        cases.len() >= 45,
        "expected every non-bench case, found {}",
        cases.len()
    );
    cases
}

/// The case directories (those with a `case.json`) of a fixture folder, sorted.
pub fn case_dirs(folder: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(folder);
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("case.json").is_file())
        .collect();
    cases.sort();
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

/// The corpus rule (see [`ipuxla::corpus::compare_output`]), as an assertion.
pub fn check_output(what: &str, got: &ArrayLiteral, want: &ArrayLiteral, spec: &serde_json::Value) {
    if let Err(e) = ipuxla::corpus::compare_output(got, want, spec) {
        panic!("{what}: {e}");
    }
}

/// A case's description, module and inputs.
pub fn load(case: &Path, file: &str) -> (serde_json::Value, xla_ir::Module, Vec<Literal>) {
    let c = ipuxla::corpus::Case::read(case, file).unwrap();
    let inputs = c
        .stored_inputs()
        .unwrap()
        .expect("the case stores its inputs");
    (c.info, c.module, inputs)
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

/// Runs the `ipuxla` binary with `args`.
pub fn ipuxla(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_ipuxla"))
        .args(args)
        .output()
        .expect("the ipuxla binary runs")
}

/// The path of `rel` under the project's `fixtures/`.
pub fn fixture(rel: &str) -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(rel)
        .to_string_lossy()
        .into_owned()
}

/// Deterministic arguments for every parameter of `m`'s entry: values in [-1, 1) (f32,
/// f16), or ten times that, truncated (s32).
pub fn arguments(m: &xla_ir::Module) -> Vec<Literal> {
    use xla_ir::ElementType;
    use xla_ir::literal::ArrayData;
    m.entry_computation()
        .parameter_shapes()
        .iter()
        .enumerate()
        .map(|(p, s)| {
            let a = s.as_array().expect("array parameters");
            let n = a.element_count() as usize;
            let v = (0..n).map(move |i| ((i * 7919 + p * 104_729) % 2000) as f32 / 1000.0 - 1.0);
            let data = match a.element_type {
                ElementType::F16 => ArrayData::F16(v.map(half::f16::from_f32).collect()),
                ElementType::S32 => ArrayData::S32(v.map(|x| (x * 10.0) as i32).collect()),
                _ => ArrayData::F32(v.collect()),
            };
            Literal::Array(ArrayLiteral {
                shape: xla_ir::ArrayShape::new(a.element_type, &a.dims),
                data,
            })
        })
        .collect()
}
