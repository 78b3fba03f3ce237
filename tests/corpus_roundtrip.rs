//! Every module in the conformance corpus (copied into `fixtures/conformance/`) parses,
//! verifies and round-trips, and its structure matches what XLA itself reported.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use xla_ir::{Module, parse_module, verify};

fn cases() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/conformance");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("fixtures/conformance exists")
        .map(|e| e.expect("readable directory entry").path())
        .filter(|p| p.join("case.json").exists())
        .collect();
    cases.sort();
    assert!(
        cases.len() >= 49,
        "expected the whole corpus, found {} cases",
        cases.len()
    );
    cases
}

fn load(path: &Path) -> (String, Module) {
    let text = std::fs::read_to_string(path).unwrap();
    let module = parse_module(&text).unwrap_or_else(|e| panic!("{}:{e}", path.display()));
    verify(&module).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (text, module)
}

fn opcode_counts(module: &Module) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for (_, comp) in module.computations() {
        for (_, instr) in comp.instructions() {
            *counts.entry(instr.op.name().to_string()).or_default() += 1;
        }
    }
    counts
}

#[test]
fn every_module_round_trips_and_matches_xla_statistics() {
    for case in cases() {
        let info: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(case.join("case.json")).unwrap())
                .unwrap();
        for (file, key) in [("module.hlo", "hlo"), ("module.opt.hlo", "opt_hlo")] {
            let path = case.join(file);
            let (_, module) = load(&path);
            let printed = module.to_string();
            let reparsed = parse_module(&printed)
                .unwrap_or_else(|e| panic!("{} reprinted:{e}", path.display()));
            verify(&reparsed).unwrap();
            assert_eq!(
                reparsed.to_string(),
                printed,
                "{} does not round-trip",
                path.display()
            );

            let stats = &info[key];
            let expected: BTreeMap<String, u64> =
                serde_json::from_value(stats["opcode_counts"].clone()).unwrap();
            assert_eq!(
                opcode_counts(&module),
                expected,
                "{}: opcode counts differ from XLA's",
                path.display()
            );
            assert_eq!(
                module.computation_count() as u64,
                stats["computation_count"].as_u64().unwrap()
            );
        }
    }
}

#[test]
fn plain_modules_print_exactly_as_xla_printed_them() {
    for case in cases() {
        let path = case.join("module.hlo");
        let (text, module) = load(&path);
        assert_eq!(
            module.to_string(),
            text,
            "{} prints differently from XLA",
            path.display()
        );
    }
}

#[test]
fn entry_signatures_match_the_case_description() {
    for case in cases() {
        let info: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(case.join("case.json")).unwrap())
                .unwrap();
        let (_, module) = load(&case.join("module.hlo"));
        let entry = module.entry_program_shape();
        let params = info["params"].as_array().unwrap();
        assert_eq!(entry.parameters.len(), params.len(), "{}", case.display());
        for (shape, param) in entry.parameters.iter().zip(params) {
            let array = shape.as_array().unwrap();
            assert_eq!(
                array.element_type.name(),
                param["hlo_type"].as_str().unwrap()
            );
            let dims: Vec<i64> = serde_json::from_value(param["shape"].clone()).unwrap();
            assert_eq!(array.dims.as_slice(), dims.as_slice(), "{}", case.display());
        }
        let outputs = info["outputs"].as_array().unwrap();
        let leaves = entry.result.leaf_arrays();
        assert_eq!(leaves.len(), outputs.len(), "{}", case.display());
    }
}
