//! `ipuxla convert --precision-mode FP16` (the seed's precision conversion): a forward
//! model computes in f16 on the IPU Model, matches XLA's f32 outputs within the corpus's f16
//! tolerance class, and holds less memory than in f32; excluded nodes stay f32; every
//! option of the command acts or is refused by name.

mod common;
use common::{fixture, ipuxla, load};

use ipuxla::npy::read_npy;
use std::path::{Path, PathBuf};

/// The corpus's f16 tolerance classes (rtol, and atol for an output of RMS 1).
fn f16_class(class: &str) -> f64 {
    match class {
        "exact" => 0.0,
        "tight" => 1e-3,
        "elementwise" => 2e-3,
        "reduction" => 1e-2,
        _ => 2e-2,
    }
}

#[test]
fn a_transformer_encoder_in_fp16_matches_xla_and_holds_less_memory() {
    let case =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/conformance/transformer_encoder_fwd");
    let (info, module, inputs) = load(&case, "module.hlo");
    let fp16 =
        ipuxla::compiler::convert::to_fp16(&module, &|_: &xla_ir::Instruction| false).unwrap();
    assert_eq!(fp16.entry_program_shape(), module.entry_program_shape());
    let mut config = ipuxla::compiler::IpuConfig::default();
    config.ipu_model.tiles_per_ipu = 16;
    let half = ipuxla::device::run_on_ipu_model(&fp16, &config, &inputs).unwrap();
    let full = ipuxla::device::run_on_ipu_model(&module, &config, &inputs).unwrap();
    let class = f16_class(info["tolerance_class"].as_str().unwrap());
    for (k, (got, spec)) in half
        .outputs
        .iter()
        .zip(info["outputs"].as_array().unwrap())
        .enumerate()
    {
        let want = read_npy(&case.join(spec["file"].as_str().unwrap())).unwrap();
        let rms = spec["ref_rms"].as_f64().unwrap();
        let f16_spec = serde_json::json!({"rtol": class, "atol": class * rms});
        ipuxla::corpus::compare_output(got, &want, &f16_spec)
            .unwrap_or_else(|e| panic!("output {k} in FP16: {e}"));
    }
    let peak = |r: &ipuxla::device::DeviceRun| r.profile.peak_tile().map_or(0, |t| t.bytes_used);
    assert!(
        peak(&half) < peak(&full),
        "FP16 peak {} vs FP32 {}",
        peak(&half),
        peak(&full)
    );
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ipuxla-convert-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

#[test]
fn the_command_converts_keeps_excluded_nodes_and_refuses_what_it_cannot_do() {
    let input = fixture("conformance/seed_mlp_forward/module.hlo");
    let out = scratch("mlp16.hlo");
    let _ = std::fs::remove_file(&out);
    let o = out.to_str().unwrap();
    let run = ipuxla(&[
        "convert",
        &input,
        "-o",
        o,
        "--precision-mode",
        "FP16",
        "--precision-conversion-excluded-nodes",
        "^exp",
        "^dot_general\\.",
    ]);
    assert!(run.status.success(), "{}", stderr(&run));
    assert!(
        stderr(&run).contains("kept f32 by the excluded-nodes regexes"),
        "{}",
        stderr(&run)
    );
    let text = std::fs::read_to_string(&out).unwrap();
    let converted = xla_ir::parse_module(&text).unwrap();
    xla_ir::verify(&converted).unwrap();
    let mut kept = 0;
    for (_, comp) in converted.computations() {
        for (_, instr) in comp.instructions() {
            let leaf_types: Vec<_> = instr
                .shape
                .leaf_arrays()
                .iter()
                .map(|a| a.element_type)
                .collect();
            let named = instr.name.starts_with("exp") || instr.name.starts_with("dot_general.");
            // The converts the conversion adds around them carry their names too.
            if named && !instr.name.contains(".to_") {
                assert!(
                    !leaf_types.contains(&xla_ir::ElementType::F16),
                    "{} converted",
                    instr.name
                );
                kept += 1;
            }
        }
    }
    assert!(
        kept > 0,
        "the regexes name instructions of the module:\n{text}"
    );
    assert!(text.contains("f16["), "{text}");
    // The converted module runs.
    let original = xla_ir::parse_module(&std::fs::read_to_string(&input).unwrap()).unwrap();
    assert_eq!(
        converted.entry_program_shape(),
        original.entry_program_shape()
    );

    // An existing output needs --overwrite; bad regexes and options out of place are refused.
    let again = ipuxla(&["convert", &input, "-o", o, "--precision-mode", "FP16"]);
    assert!(
        !again.status.success() && stderr(&again).contains("--overwrite"),
        "{}",
        stderr(&again)
    );
    let bad = ipuxla(&[
        "convert",
        &input,
        "-o",
        o,
        "--overwrite",
        "--precision-mode",
        "FP16",
        "--precision-conversion-excluded-nodes",
        "(",
    ]);
    assert!(
        stderr(&bad).contains("'(' is not a regex"),
        "{}",
        stderr(&bad)
    );
    let alone = ipuxla(&[
        "convert",
        &input,
        "-o",
        o,
        "--overwrite",
        "--precision-conversion-excluded-nodes",
        "x",
    ]);
    assert!(
        stderr(&alone).contains("needs --precision-mode FP16"),
        "{}",
        stderr(&alone)
    );
}

#[test]
fn the_config_file_takes_the_seeds_layout_and_names_what_is_not_implemented() {
    let input = fixture("conformance/x64_int64/module.hlo");
    let out = scratch("int32.hlo");
    let config = scratch("convert.json");
    std::fs::write(
        &config,
        "{\n  // the seed's sample has comments\n  \"int64_to_int32_conversion\": true,\n  \"precision_mode\": \"FP32\"\n}\n",
    )
    .unwrap();
    let run = ipuxla(&[
        "convert",
        &input,
        "-o",
        out.to_str().unwrap(),
        "--overwrite",
        "--config-file",
        config.to_str().unwrap(),
    ]);
    assert!(run.status.success(), "{}", stderr(&run));
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(!text.contains("s64[") && !text.contains("u64["), "{text}");
    assert!(
        stderr(&run).contains("narrowed from 64 to 32 bits"),
        "{}",
        stderr(&run)
    );

    std::fs::write(&config, "{\"num_ipus\": 4}").unwrap();
    let refused = ipuxla(&[
        "convert",
        &input,
        "-o",
        out.to_str().unwrap(),
        "--overwrite",
        "--config-file",
        config.to_str().unwrap(),
    ]);
    assert!(
        stderr(&refused).contains("option num_ipus is not implemented by ipuxla convert yet"),
        "{}",
        stderr(&refused)
    );
    std::fs::write(&config, "{\"precision_mode\": \"FP8\"}").unwrap();
    let bad = ipuxla(&[
        "convert",
        &input,
        "-o",
        out.to_str().unwrap(),
        "--overwrite",
        "--config-file",
        config.to_str().unwrap(),
    ]);
    assert!(
        stderr(&bad).contains("precision_mode must be"),
        "{}",
        stderr(&bad)
    );
}
