//! Snapshots of the canonical printer on small modules that cover what the corpus does not:
//! every sharding form, tiled layouts, every literal type, control-flow spellings, windows
//! and dimension numbers. Review changes with `cargo insta review`.

use std::path::Path;
use xla_ir::{parse_module, verify};

fn canonical(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/printer")
        .join(format!("{name}.hlo"));
    let text = std::fs::read_to_string(&path).unwrap();
    let module = parse_module(&text).unwrap_or_else(|e| panic!("{}:{e}", path.display()));
    verify(&module).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let printed = module.to_string();
    let again = parse_module(&printed).unwrap().to_string();
    assert_eq!(again, printed, "{name} does not round-trip");
    printed
}

#[test]
fn annotations() {
    insta::assert_snapshot!(canonical("annotations"));
}

#[test]
fn constants() {
    insta::assert_snapshot!(canonical("constants"));
}

#[test]
fn control_flow() {
    insta::assert_snapshot!(canonical("control_flow"));
}

#[test]
fn windows_and_dims() {
    insta::assert_snapshot!(canonical("windows_and_dims"));
}

#[test]
fn tiled_layouts() {
    insta::assert_snapshot!(canonical("tiled_layouts"));
}

#[test]
fn seed_vector_add_optimised() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/conformance/seed_vector_add/module.opt.hlo");
    let module = parse_module(&std::fs::read_to_string(path).unwrap()).unwrap();
    insta::assert_snapshot!(module.to_string());
}
