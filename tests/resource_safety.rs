//! Absurd sizes are errors before anything is allocated, on both engines: a broadcast
//! whose element count overflows, a 16 GB value, and tuple shapes nested thousands deep
//! (the parser's limit).

mod common;
use common::{fixture, ipuxla};

fn run(file: &str, engine: &str) -> String {
    let out_dir =
        std::env::temp_dir().join(format!("ipuxla-resource-{}-{engine}", std::process::id()));
    let out = ipuxla(&[
        "run",
        file,
        "--engine",
        engine,
        "--outdir",
        out_dir.to_str().unwrap(),
        "--overwrite",
        "-q",
    ]);
    assert!(!out.status.success(), "{file} on {engine} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn values_too_big_to_model_are_refused_by_name() {
    for name in ["overflowing_broadcast", "sixteen_gigabytes"] {
        let file = fixture(&format!("resource/{name}.hlo"));
        let ipu = run(&file, "ipu-model");
        assert!(
            ipu.contains("instruction 'b': its value")
                && ipu.contains("more than the IPU Model holds"),
            "{name}: {ipu}"
        );
        let reference = run(&file, "reference");
        assert!(
            reference.contains("more than the evaluator's limit"),
            "{name}: {reference}"
        );
    }
}

#[test]
fn deeply_nested_tuple_shapes_are_a_parse_error() {
    let mut shape = "f32[]".to_string();
    for _ in 0..3000 {
        shape = format!("({shape})");
    }
    let text = format!(
        "HloModule nest\n\nENTRY main {{\n  p = {shape} parameter(0)\n  ROOT r = {shape} copy(p)\n}}\n"
    );
    let e = xla_ir::parse_module(&text).unwrap_err().to_string();
    assert!(e.contains("nested deeper than"), "{e}");
}
