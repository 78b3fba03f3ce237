//! `ipuxla convert`, the seed's model converter for HLO: `--precision-mode FP16` (a forward
//! model computes in f16 on the IPU Model, matches XLA's f32 outputs within the corpus's f16
//! tolerance class and holds less memory; excluded nodes stay f32), `--gelu-replacement`,
//! `--manual-sharding` and `--num-ipus`, `--batch-per-step`, `--pipeline-cfg` manual and
//! load, `--config-file`; every option acts or is refused by name.

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
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ipuxla-convert-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// `ipuxla convert INPUT -o OUTPUT --overwrite EXTRA...`.
fn convert_to(input: &Path, output: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "convert",
        input.to_str().unwrap(),
        "-o",
        output.to_str().unwrap(),
        "--overwrite",
    ];
    args.extend_from_slice(extra);
    ipuxla(&args)
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

    std::fs::write(&config, "{\"merge_subgraphs\": true}").unwrap();
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
        stderr(&refused)
            .contains("option merge_subgraphs is not implemented by ipuxla convert yet"),
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

#[test]
fn manual_sharding_places_nodes_and_run_takes_the_ipu_count_from_the_module() {
    let case = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/conformance/seed_mlp_forward");
    let input = case.join("module.hlo");
    let out = scratch("mlp2.hlo");
    let o = out.to_str().unwrap();
    // Parameters x, w1, b1 on IPU 0, everything else on IPU 1 (the first match wins).
    let run = ipuxla(&[
        "convert",
        input.to_str().unwrap(),
        "-o",
        o,
        "--overwrite",
        "--num-ipus",
        "2",
        "--manual-sharding",
        "^(x|w1|b1)\\.",
        ".",
    ]);
    assert!(run.status.success(), "{}", stderr(&run));
    assert!(
        stderr(&run).contains("on IPU 0") && stderr(&run).contains("on IPU 1"),
        "{}",
        stderr(&run)
    );
    let module = xla_ir::parse_module(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(module.frontend_attributes()["ipuxla.num_ipus"], "2");
    let entry = module.entry_computation();
    let device = |name: &str| match &entry.instr(entry.find(name).unwrap()).sharding {
        Some(xla_ir::Sharding::Maximal { device }) => *device,
        other => panic!("{name}: {other:?}"),
    };
    assert_eq!(device("w1.1"), 0);
    assert_eq!(device(&entry.root_instr().name.clone()), 1);

    // `run` without --num-ipus runs it on the module's 2 IPUs, with XLA's results.
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(case.join("case.json")).unwrap()).unwrap();
    let inputs: Vec<String> = info["params"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            format!(
                "{}={}",
                p["index"],
                case.join(p["file"].as_str().unwrap()).display()
            )
        })
        .collect();
    let outdir = scratch("mlp2-out");
    let ran = ipuxla(&[
        "run",
        o,
        "--inputs",
        &inputs.join(";"),
        "--outdir",
        outdir.to_str().unwrap(),
        "--overwrite",
    ]);
    assert!(ran.status.success(), "{}", stderr(&ran));
    let stdout = String::from_utf8_lossy(&ran.stdout).to_string() + &stderr(&ran);
    assert!(stdout.contains("2 x ipu2"), "{stdout}");
    let spec = &info["outputs"][0];
    let got = read_npy(&outdir.join("output_0.npy")).unwrap();
    let want = read_npy(&case.join(spec["file"].as_str().unwrap())).unwrap();
    ipuxla::corpus::compare_output(&got, &want, spec).unwrap();

    // A regex per IPU, or the command says so.
    let wrong = ipuxla(&[
        "convert",
        input.to_str().unwrap(),
        "-o",
        o,
        "--overwrite",
        "--num-ipus",
        "4",
        "--manual-sharding",
        "a",
        "b",
    ]);
    assert!(
        stderr(&wrong).contains("gives 2 regex(es) but the model runs on 4 IPU(s)"),
        "{}",
        stderr(&wrong)
    );
}

#[test]
fn gelu_replacement_fuses_the_named_gelu_and_keeps_the_values() {
    let case =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/conformance/transformer_encoder_fwd");
    let out = scratch("gelu.hlo");
    // The seed's form: the GELU's nodes, its input, and the node that uses its output.
    let rule = r#"{
      "gelu_replacement": {
        "nodes": ["^(integer_pow\\.[23]|mul\\.(2[3-5]|3[4-7])|add\\.(31|5[01])|tanh\\.1)$"],
        "node_as_gelu_input": ["^add\\.49$"], // the bias add before the GELU
        "node_use_gelu_output": ["^dot_general\\.11$"]
      }
    }"#;
    let run = ipuxla(&[
        "convert",
        case.join("module.hlo").to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--overwrite",
        "--gelu-replacement",
        rule,
    ]);
    assert!(run.status.success(), "{}", stderr(&run));
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(
        text.matches("custom_call_target=\"Gelu\"").count(),
        1,
        "{text}"
    );
    assert!(
        text.contains(r#"backend_config={"approximate":true}"#),
        "{text}"
    );
    assert!(
        !text.contains("tanh("),
        "the replaced nodes are gone:\n{text}"
    );
    // The fused GELU computes what the nodes did: XLA's outputs at the case's tolerances.
    let (info, _, inputs) = load(&case, "module.hlo");
    let module = xla_ir::parse_module(&text).unwrap();
    let mut config = ipuxla::compiler::IpuConfig::default();
    config.ipu_model.tiles_per_ipu = 16;
    let ran = ipuxla::device::run_on_ipu_model(&module, &config, &inputs).unwrap();
    for (got, spec) in ran.outputs.iter().zip(info["outputs"].as_array().unwrap()) {
        let want = read_npy(&case.join(spec["file"].as_str().unwrap())).unwrap();
        ipuxla::corpus::compare_output(got, &want, spec).unwrap();
    }
    // A rule that names no GELU is an error, not a silent no-op.
    let none = ipuxla(&[
        "convert",
        case.join("module.hlo").to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--overwrite",
        "--gelu-replacement",
        r#"{"nodes": ["^nothing$"], "node_as_gelu_input": ["x"], "node_use_gelu_output": ["y"]}"#,
    ]);
    assert!(stderr(&none).contains("names no GELU"), "{}", stderr(&none));
}

#[test]
fn batch_per_step_is_the_device_loop_run_uses() {
    let case = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/conformance/seed_vector_add");
    let out = scratch("loop.hlo");
    let o = out.to_str().unwrap();
    let run = ipuxla(&[
        "convert",
        case.join("module.hlo").to_str().unwrap(),
        "-o",
        o,
        "--overwrite",
        "--batch-per-step",
        "3",
    ]);
    assert!(run.status.success(), "{}", stderr(&run));
    let outdir = scratch("loop-out");
    let input = |k: usize| case.join(format!("inputs/{k}.npy")).display().to_string();
    let inputs = format!("0={};1={};2={}", input(0), input(1), input(2));
    let ran = ipuxla(&[
        "run",
        o,
        "--inputs",
        &inputs,
        "--outdir",
        outdir.to_str().unwrap(),
        "--overwrite",
    ]);
    assert!(ran.status.success(), "{}", stderr(&ran));
    let all = String::from_utf8_lossy(&ran.stdout).to_string() + &stderr(&ran);
    assert!(all.contains("device loop: 3 iterations"), "{all}");
    // --iterations on the command line still wins.
    let ran = ipuxla(&[
        "run",
        o,
        "--inputs",
        &inputs,
        "--outdir",
        outdir.to_str().unwrap(),
        "--overwrite",
        "--iterations",
        "2",
    ]);
    let all = String::from_utf8_lossy(&ran.stdout).to_string() + &stderr(&ran);
    assert!(all.contains("device loop: 2 iterations"), "{all}");
}

#[test]
fn pipeline_cfg_manual_writes_a_solution_that_load_reproduces_and_run_pipelines() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pipeline");
    // The two-stage fixture without its stage annotations.
    let plain = std::fs::read_to_string(dir.join("two_stages.hlo"))
        .unwrap()
        .replace(", frontend_attributes={ipu_stage=\"0\"}", "")
        .replace(", frontend_attributes={ipu_stage=\"1\"}", "");
    assert!(!plain.contains("ipu_stage"));
    let input = scratch("plain.hlo");
    std::fs::write(&input, &plain).unwrap();
    let solution_dir = scratch("solution");
    let manual = scratch("manual.hlo");
    let cfg = format!(
        r#"{{"converter": "manual", "manual_pipeline_config": [["^a$"], ["^(b|c)$"]], "device_info": [0, 1], "solution_dir": "{}"}}"#,
        solution_dir.display()
    );
    let run = ipuxla(&[
        "convert",
        input.to_str().unwrap(),
        "-o",
        manual.to_str().unwrap(),
        "--overwrite",
        "--pipeline-cfg",
        &cfg,
    ]);
    assert!(run.status.success(), "{}", stderr(&run));
    assert!(
        !manual.with_extension("pipeconfig").exists(),
        "solution_dir given: written there"
    );
    let text = std::fs::read_to_string(&manual).unwrap();
    assert!(
        text.contains(r#"c = f32[4]{0} multiply(b, b), frontend_attributes={ipu_stage="1"}"#),
        "{text}"
    );
    assert!(
        text.contains(r#"ipuxla.device_mapping="0,1""#) && text.contains(r#"ipuxla.num_ipus="2""#),
        "{text}"
    );

    // Loading the solution gives the same module, byte for byte.
    let solution = solution_dir.join("pipeline.pipeconfig");
    let loaded = scratch("loaded.hlo");
    let cfg = format!(
        r#"{{"converter": "load", "solution_path": "{}"}}"#,
        solution.display()
    );
    let run = ipuxla(&[
        "convert",
        input.to_str().unwrap(),
        "-o",
        loaded.to_str().unwrap(),
        "--overwrite",
        "--pipeline-cfg",
        &cfg,
    ]);
    assert!(run.status.success(), "{}", stderr(&run));
    assert_eq!(std::fs::read_to_string(&loaded).unwrap(), text);

    // `run --iterations` pipelines it on the module's two IPUs with the fixture's results.
    let inputs = format!(
        "0={};1={}",
        dir.join("x.npy").display(),
        dir.join("w.npy").display()
    );
    let outdir = scratch("pipelined");
    let ran = ipuxla(&[
        "run",
        loaded.to_str().unwrap(),
        "--iterations",
        "3",
        "--inputs",
        &inputs,
        "--outdir",
        outdir.to_str().unwrap(),
        "--overwrite",
    ]);
    let stdout = String::from_utf8_lossy(&ran.stdout);
    assert!(
        ran.status.success()
            && stdout.contains("[[1, 16, 81, 256], [25, 144, 441, 1024], [81, 400, 1089, 2304]]"),
        "{stdout}{}",
        stderr(&ran)
    );

    // Bad solutions are refused by name; the auto converter without --num-ipus searches
    // for the fewest IPUs (this small model fits on the first count it tries, 2).
    std::fs::write(
        &solution,
        r#"{"device_info": [0, 1], "pipeline_mapping": {"x": 0, "nope": 1}}"#,
    )
    .unwrap();
    let bad = ipuxla(&[
        "convert",
        input.to_str().unwrap(),
        "-o",
        loaded.to_str().unwrap(),
        "--overwrite",
        "--pipeline-cfg",
        &cfg,
    ]);
    assert!(
        stderr(&bad).contains("names nope, which is not an instruction"),
        "{}",
        stderr(&bad)
    );
    let auto = ipuxla(&[
        "convert",
        input.to_str().unwrap(),
        "-o",
        loaded.to_str().unwrap(),
        "--overwrite",
        "--pipeline-cfg",
        r#"{"converter": "auto"}"#,
    ]);
    assert!(auto.status.success(), "{}", stderr(&auto));
    assert!(
        std::fs::read_to_string(&loaded)
            .unwrap()
            .contains("ipuxla.num_ipus=\"2\""),
        "{}",
        stderr(&auto)
    );
    // Keys of the seed's pipeline_cfg that do not act here are refused, not ignored.
    let other = ipuxla(&[
        "convert",
        input.to_str().unwrap(),
        "-o",
        loaded.to_str().unwrap(),
        "--overwrite",
        "--num-ipus",
        "2",
        "--pipeline-cfg",
        r#"{"converter": "manual", "fine_tune_iter": 5}"#,
    ]);
    assert!(
        stderr(&other).contains("fine_tune_iter=5 is not implemented for the \"manual\" converter"),
        "{}",
        stderr(&other)
    );
}

/// `fine_tune_iter`: the auto split re-weighted by what each stage took in the pipeline's
/// estimate, the fastest pipeline kept (never slower than the first split).
#[test]
fn fine_tuning_keeps_the_fastest_split() {
    let out = scratch("tuned.hlo");
    let mlp = PathBuf::from(fixture("conformance/bench_mlp_train_b256/module.hlo"));
    let tune = |iterations: &str| {
        let cfg = format!(r#"{{"converter": "auto", "fine_tune_iter": {iterations}}}"#);
        convert_to(&mlp, &out, &["--num-ipus", "2", "--pipeline-cfg", &cfg])
    };
    let tuned = tune("4");
    let err = stderr(&tuned);
    assert!(tuned.status.success(), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("fine tuning"))
        .unwrap_or_else(|| panic!("{err}"));
    let cycles: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    // "fine tuning (4 iteration(s) at most): the pipeline of 4 micro-batches B -> A cycles"
    let (before, after) = (cycles[cycles.len() - 2], cycles[cycles.len() - 1]);
    assert!(after <= before, "{line}");
    let bad = tune("-1");
    assert!(
        stderr(&bad).contains("fine_tune_iter must be a non-negative integer"),
        "{}",
        stderr(&bad)
    );
}

#[test]
fn pipeline_cfg_auto_balances_stages_by_the_models_cycles_and_keeps_xlas_results() {
    let case =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/conformance/transformer_encoder_fwd");
    let out = scratch("enc2.hlo");
    let solution_dir = scratch("enc2-solution");
    let cfg = format!(
        r#"{{"converter": "auto", "priority": "cycle", "solution_dir": "{}"}}"#,
        solution_dir.display()
    );
    let run = ipuxla(&[
        "convert",
        case.join("module.hlo").to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--overwrite",
        "--num-ipus",
        "2",
        "--pipeline-cfg",
        &cfg,
    ]);
    assert!(run.status.success(), "{}", stderr(&run));
    // The solution file reproduces the module (and without solution_dir it lands beside
    // the output).
    let beside = scratch("enc2-beside.hlo");
    let run = ipuxla(&[
        "convert",
        case.join("module.hlo").to_str().unwrap(),
        "-o",
        beside.to_str().unwrap(),
        "--overwrite",
        "--num-ipus",
        "2",
        "--pipeline-cfg",
        r#"{"converter": "auto"}"#,
    ]);
    assert!(
        run.status.success() && beside.with_extension("pipeconfig").exists(),
        "{}",
        stderr(&run)
    );
    let again = scratch("enc2-loaded.hlo");
    let load = format!(
        r#"{{"converter": "load", "solution_path": "{}"}}"#,
        solution_dir.join("pipeline.pipeconfig").display()
    );
    let run = ipuxla(&[
        "convert",
        case.join("module.hlo").to_str().unwrap(),
        "-o",
        again.to_str().unwrap(),
        "--overwrite",
        "--num-ipus",
        "2",
        "--pipeline-cfg",
        &load,
    ]);
    assert!(run.status.success(), "{}", stderr(&run));
    assert_eq!(
        std::fs::read_to_string(&again).unwrap(),
        std::fs::read_to_string(&out).unwrap()
    );

    // Four micro-batches through the two stages: each is XLA's result; in the steady state
    // both stages are busy within 15% of each other.
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(case.join("case.json")).unwrap()).unwrap();
    let inputs: Vec<String> = info["params"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            format!(
                "{}={}",
                p["index"],
                case.join(p["file"].as_str().unwrap()).display()
            )
        })
        .collect();
    let outdir = scratch("enc2-out");
    let ran = ipuxla(&[
        "run",
        out.to_str().unwrap(),
        "--inputs",
        &inputs.join(";"),
        "--iterations",
        "4",
        "--outdir",
        outdir.to_str().unwrap(),
        "--overwrite",
    ]);
    let all = String::from_utf8_lossy(&ran.stdout).to_string() + &stderr(&ran);
    assert!(ran.status.success(), "{all}");
    assert!(all.contains("pipeline: 2 stages"), "{all}");
    let steady = all
        .lines()
        .find(|l| l.trim_start().starts_with("steady state"))
        .unwrap_or_else(|| panic!("{all}"));
    let busy: Vec<f64> = steady
        .split("stage ")
        .skip(1)
        .map(|part| {
            part.split_whitespace()
                .nth(1)
                .unwrap()
                .trim_end_matches('%')
                .parse()
                .unwrap()
        })
        .collect();
    let (lo, hi) = busy
        .iter()
        .fold((f64::MAX, 0f64), |(lo, hi), &b| (lo.min(b), hi.max(b)));
    assert!(busy.len() == 2 && lo >= 0.85 * hi, "{steady}");
    for (k, spec) in info["outputs"].as_array().unwrap().iter().enumerate() {
        let want = read_npy(&case.join(spec["file"].as_str().unwrap())).unwrap();
        let got = read_npy(&outdir.join(format!("output_{k}.npy"))).unwrap();
        for batch in 0..4 {
            ipuxla::corpus::compare_output(&got.index_leading(batch), &want, spec)
                .unwrap_or_else(|e| panic!("micro-batch {batch}: {e}"));
        }
    }
}

#[test]
fn planner_options_written_by_convert_act_in_run_unless_run_overrides_them() {
    let case = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/conformance/seed_mlp_forward");
    let out = scratch("amp.hlo");
    let o = out.to_str().unwrap();
    let run = ipuxla(&[
        "convert",
        case.join("module.hlo").to_str().unwrap(),
        "-o",
        o,
        "--overwrite",
        "--matmul-amp",
        "0.3",
        "--matmul-partial-type",
        "half",
    ]);
    assert!(run.status.success(), "{}", stderr(&run));
    let module = xla_ir::parse_module(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let options = module.frontend_attributes();
    assert_eq!(options["ipuxla.matmul_amp"], "0.3");
    assert_eq!(options["ipuxla.matmul_partial_type"], "half");
    // The module's half partials act: refused for this f32 model, naming the option; the
    // command line's float wins.
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(case.join("case.json")).unwrap()).unwrap();
    let inputs: Vec<String> = info["params"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            format!(
                "{}={}",
                p["index"],
                case.join(p["file"].as_str().unwrap()).display()
            )
        })
        .collect();
    let outdir = scratch("amp-out");
    let joined = inputs.join(";");
    let base = [
        "run",
        o,
        "--inputs",
        joined.as_str(),
        "--outdir",
        outdir.to_str().unwrap(),
        "--overwrite",
    ];
    let refused = ipuxla(&base);
    assert!(
        stderr(&refused).contains("partialsType half"),
        "{}",
        stderr(&refused)
    );
    let mut with_float = base.to_vec();
    with_float.extend(["--matmul-partial-type", "float"]);
    let ran = ipuxla(&with_float);
    assert!(ran.status.success(), "{}", stderr(&ran));
    // Out of range, as the seed says.
    let bad = ipuxla(&[
        "convert",
        case.join("module.hlo").to_str().unwrap(),
        "-o",
        o,
        "--overwrite",
        "--conv-amp",
        "1.5",
    ]);
    assert!(
        stderr(&bad).contains("must be between 0.0 and 1.0"),
        "{}",
        stderr(&bad)
    );
}

/// A chain of dots whose weights (8 x 576 KB) overflow the tiles of 2 small IPUs: the auto
/// converter without --num-ipus searches upward from min_ipu_quantity and settles on 4 (a
/// system has whole cards of 2), whose pipeline runs to the evaluator's values; capped at
/// 2 it says which tile does not fit and by how much.
#[test]
fn the_auto_converter_finds_the_fewest_ipus_the_stages_fit_on() {
    let dir = scratch("fewest");
    std::fs::create_dir_all(&dir).unwrap();
    let (d, layers) = (384, 8);
    let mut text = String::from("HloModule chain\n\nENTRY main {\n");
    text += &format!("  x = f32[8,{d}]{{1,0}} parameter(0)\n");
    for i in 0..layers {
        text += &format!("  w{i} = f32[{d},{d}]{{1,0}} parameter({})\n", i + 1);
    }
    let mut h = "x".to_string();
    for i in 0..layers {
        let root = if i + 1 == layers { "ROOT " } else { "" };
        text += &format!(
            "  d{i} = f32[8,{d}]{{1,0}} dot({h}, w{i}), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n  {root}t{i} = f32[8,{d}]{{1,0}} tanh(d{i})\n"
        );
        h = format!("t{i}");
    }
    text += "}\n";
    let input = dir.join("chain.hlo");
    std::fs::write(&input, text).unwrap();
    let small = dir.join("small.json");
    std::fs::write(&small, r#"{"ipu_model": {"tiles_per_ipu": 4}}"#).unwrap();
    let output = dir.join("out.hlo");
    let convert = |cfg: &str| {
        convert_to(
            &input,
            &output,
            &[
                "--ipu-config",
                small.to_str().unwrap(),
                "--pipeline-cfg",
                cfg,
            ],
        )
    };
    let profiles = dir.join("profiles");
    let found = convert(&format!(
        r#"{{"converter": "auto", "profiling_root_dir": "{}"}}"#,
        profiles.display()
    ));
    assert!(found.status.success(), "{}", stderr(&found));
    let converted = std::fs::read_to_string(&output).unwrap();
    assert!(
        converted.contains("ipuxla.num_ipus=\"4\""),
        "{}",
        stderr(&found)
    );
    // The chosen split's profile: a pipeline of 8 micro-batches on the 4 IPUs.
    let profile: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(profiles.join("profile.json")).unwrap())
            .unwrap();
    assert_eq!(profile["num_ipus"], 4);
    assert!(profile["total_cycles"].as_u64().unwrap() > 0);

    let capped = convert(r#"{"converter": "auto", "max_ipu_quantity": 2}"#);
    let err = stderr(&capped);
    assert!(!capped.status.success());
    assert!(
        err.contains("does not fit on 2 to 2 IPUs") && err.contains("out of memory"),
        "{err}"
    );
    let inverted =
        convert(r#"{"converter": "auto", "min_ipu_quantity": 4, "max_ipu_quantity": 2}"#);
    assert!(
        stderr(&inverted).contains("min_ipu_quantity 4 is more than max_ipu_quantity 2"),
        "{}",
        stderr(&inverted)
    );
    let no_config = convert_to(&input, &output, &["--ipu-config", small.to_str().unwrap()]);
    assert!(
        stderr(&no_config).contains("without --pipeline-cfg nothing reads it"),
        "{}",
        stderr(&no_config)
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `--excluded-nodes`: a pre-processing and a post-processing instruction run on the host
/// around the device program, with the values the whole module computes; with
/// `--remove-excluded-nodes` they are cut out (what they fed becomes a parameter, what
/// they read a result); an excluded instruction between device ones is refused by name.
#[test]
fn excluded_nodes_run_on_the_host_or_are_removed() {
    let dir = scratch("excluded");
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("m.hlo");
    std::fs::write(
        &input,
        "HloModule excluded\n\nENTRY main {\n  x = f32[4,8]{1,0} parameter(0)\n  w = f32[8,8]{1,0} parameter(1)\n  pre = f32[4,8]{1,0} multiply(x, x)\n  d = f32[4,8]{1,0} dot(pre, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n  t = f32[4,8]{1,0} tanh(d)\n  post = f32[4,8]{1,0} negate(t)\n  ROOT r = (f32[4,8]{1,0}, f32[4,8]{1,0}) tuple(post, d)\n}\n",
    )
    .unwrap();
    let convert = |out: &Path, extra: &[&str]| convert_to(&input, out, extra);
    let hosted = dir.join("hosted.hlo");
    let done = convert(&hosted, &["--excluded-nodes", "^pre$", "^post$"]);
    assert!(
        stderr(&done).contains("2 excluded instruction(s) run on the host, before and after"),
        "{}",
        stderr(&done)
    );
    let m = parse(&hosted);
    let ids: Vec<_> = m.entry_computation().order().to_vec();
    let marked: Vec<&str> = ids
        .iter()
        .map(|&i| m.entry_computation().instr(i))
        .filter(|i| ipuxla::host_split::on_host(i))
        .map(|i| i.name.as_str())
        .collect();
    assert_eq!(marked, ["pre", "post"]);
    // Run on the IPU Model (host parts on the evaluator) and on the reference engine.
    let x: Vec<f32> = (0..32).map(|i| (i as f32 - 16.0) / 8.0).collect();
    let w: Vec<f32> = (0..64)
        .map(|i| ((i * 7 % 13) as f32 - 6.0) / 10.0)
        .collect();
    let (xf, wf) = (dir.join("x.npy"), dir.join("w.npy"));
    ipuxla::npy::write_npy(
        &xf,
        &ipuxla::xla_ir::literal::ArrayLiteral::new(
            ipuxla::xla_ir::ArrayShape::new(ipuxla::xla_ir::ElementType::F32, &[4, 8]),
            ipuxla::xla_ir::literal::ArrayData::F32(x),
        )
        .unwrap(),
    )
    .unwrap();
    ipuxla::npy::write_npy(
        &wf,
        &ipuxla::xla_ir::literal::ArrayLiteral::new(
            ipuxla::xla_ir::ArrayShape::new(ipuxla::xla_ir::ElementType::F32, &[8, 8]),
            ipuxla::xla_ir::literal::ArrayData::F32(w),
        )
        .unwrap(),
    )
    .unwrap();
    let inputs = format!("0={};1={}", xf.display(), wf.display());
    let run = |file: &Path, outdir: &str, engine: &str| {
        let out = dir.join(outdir);
        let r = ipuxla(&[
            "run",
            file.to_str().unwrap(),
            "--inputs",
            &inputs,
            "--outdir",
            out.to_str().unwrap(),
            "--overwrite",
            "--engine",
            engine,
        ]);
        assert!(r.status.success(), "{}", stderr(&r));
        (0..2)
            .map(|k| read_npy(&out.join(format!("output_{k}.npy"))).unwrap())
            .collect::<Vec<_>>()
    };
    let on_ipu = run(&hosted, "ipu", "ipu-model");
    let on_host = run(&input, "ref", "reference");
    for (a, b) in on_ipu.iter().zip(&on_host) {
        let (
            ipuxla::xla_ir::literal::ArrayData::F32(a),
            ipuxla::xla_ir::literal::ArrayData::F32(b),
        ) = (&a.data, &b.data)
        else {
            panic!("f32 results")
        };
        for (p, q) in a.iter().zip(b) {
            assert!((p - q).abs() <= 1e-5 + 1e-5 * q.abs(), "{p} vs {q}");
        }
    }
    // Removed: `pre` is now a parameter, the results are what `post` and the root read.
    let removed = dir.join("removed.hlo");
    let cut = convert(
        &removed,
        &[
            "--excluded-nodes",
            "^pre$",
            "^post$",
            "--remove-excluded-nodes",
        ],
    );
    assert!(cut.status.success(), "{}", stderr(&cut));
    let m = parse(&removed);
    let entry = m.entry_computation();
    let params: Vec<&str> = entry
        .parameters()
        .iter()
        .map(|&p| entry.instr(p).name.as_str())
        .collect();
    assert_eq!(params, ["pre", "w"]);
    assert!(!m.to_string().contains("negate"), "{m}");
    // Between device instructions: refused, naming it.
    let stuck = convert(&dir.join("bad.hlo"), &["--excluded-nodes", "^d$"]);
    assert!(
        stderr(&stuck).contains("instruction 'd' is marked to run on the host")
            && stderr(&stuck).contains("between device instructions"),
        "{}",
        stderr(&stuck)
    );
    // No IPU placement: all on the host, the same values.
    let all = dir.join("all.hlo");
    let placed = convert(&all, &["--no-ipu-placement"]);
    assert!(
        stderr(&placed).contains("nothing on the IPU"),
        "{}",
        stderr(&placed)
    );
    assert_eq!(run(&all, "all", "ipu-model"), on_host);
    let nothing = convert(&dir.join("none.hlo"), &["--excluded-nodes", "^nope$"]);
    assert!(
        stderr(&nothing).contains("matches no instruction"),
        "{}",
        stderr(&nothing)
    );
    std::fs::remove_dir_all(&dir).ok();
}

fn parse(path: &Path) -> ipuxla::xla_ir::Module {
    ipuxla::xla_ir::parse_module(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `--batch-size`: written into the module, so `run --iterations 2` takes a flat batch of
/// 2 × 4 rows for a parameter of 4 as two micro-batches — the same outputs as the stacked
/// `[2, 4, ...]` input; a size no parameter has is refused.
#[test]
fn batch_size_lets_run_take_a_flat_batch_of_micro_batches() {
    let dir = scratch("batch");
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("m.hlo");
    std::fs::write(
        &input,
        "HloModule batched\n\nENTRY main {\n  x = f32[4,2]{1,0} parameter(0)\n  ROOT y = f32[4,2]{1,0} multiply(x, x)\n}\n",
    )
    .unwrap();
    let out = dir.join("b.hlo");
    let converted = convert_to(&input, &out, &["--batch-size", "4"]);
    assert!(converted.status.success(), "{}", stderr(&converted));
    assert!(parse(&out).to_string().contains("ipuxla.batch_size=\"4\""));
    let values: Vec<f32> = (0..16).map(|i| i as f32).collect();
    let write = |name: &str, dims: &[i64]| {
        let f = dir.join(name);
        ipuxla::npy::write_npy(
            &f,
            &ipuxla::xla_ir::literal::ArrayLiteral::new(
                ipuxla::xla_ir::ArrayShape::new(ipuxla::xla_ir::ElementType::F32, dims),
                ipuxla::xla_ir::literal::ArrayData::F32(values.clone()),
            )
            .unwrap(),
        )
        .unwrap();
        f
    };
    let (flat, stacked) = (write("flat.npy", &[8, 2]), write("stacked.npy", &[2, 4, 2]));
    let run = |file: &Path, x: &Path, outdir: &str| {
        let o = dir.join(outdir);
        let r = ipuxla(&[
            "run",
            file.to_str().unwrap(),
            "--iterations",
            "2",
            "--inputs",
            &format!("0={}", x.display()),
            "--outdir",
            o.to_str().unwrap(),
            "--overwrite",
        ]);
        assert!(r.status.success(), "{}", stderr(&r));
        read_npy(&o.join("output_0.npy")).unwrap()
    };
    let a = run(&out, &flat, "flat");
    let b = run(&input, &stacked, "stacked");
    assert_eq!(a.shape.dims[..], [2, 4, 2]);
    assert_eq!(a, b);
    let refused = convert_to(&input, &dir.join("c.hlo"), &["--batch-size", "3"]);
    assert!(
        stderr(&refused).contains("no parameter has a leading dimension of 3"),
        "{}",
        stderr(&refused)
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The bench MLP's RMSprop training step with `--precision-mode FP16`: the converter writes
/// the module stored beside XLA's results for it, and the IPU Model runs it within the
/// corpus's f16 tolerance class ("deep") of XLA running the same f16 program, with a lower
/// peak tile memory than the f32 module's. (Against the f32 reference even XLA's f16 run
/// misses: see `fixtures/convert/bench_mlp_fp16/README.md`.)
#[test]
fn the_bench_mlp_training_step_in_fp16_matches_xla_running_the_same_program() {
    let dir = PathBuf::from(fixture("convert/bench_mlp_fp16"));
    let source = PathBuf::from(fixture("conformance/bench_mlp_train_b256/module.hlo"));
    let written = scratch("bench_mlp_fp16.hlo");
    let out = convert_to(&source, &written, &["--precision-mode", "FP16"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("102 in state updates"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read_to_string(&written).unwrap(),
        std::fs::read_to_string(dir.join("module.fp16.hlo")).unwrap(),
        "the FP16 conversion changed: regenerate XLA's results as {}/README.md says",
        dir.display()
    );
    let half = parse(&written);
    let full = parse(&source);
    let inputs = bench_mlp_fp16_inputs();
    let config = ipuxla::compiler::IpuConfig::default();
    let half_run = ipuxla::device::run_on_ipu_model(&half, &config, &inputs).unwrap();
    let full_run = ipuxla::device::run_on_ipu_model(&full, &config, &inputs).unwrap();
    within_f16_class_of_xla(&half_run.outputs, "FP16", |_| 1.0);
    let peak = |r: &ipuxla::device::DeviceRun| r.profile.peak_tile().map_or(0, |t| t.bytes_used);
    assert!(
        peak(&half_run) < peak(&full_run),
        "FP16 peak {} vs FP32 {}",
        peak(&half_run),
        peak(&full_run)
    );
}

/// The bench MLP's inputs, as `fixtures/convert/bench_mlp_fp16` holds them.
fn bench_mlp_fp16_inputs() -> Vec<xla_ir::Literal> {
    let dir = PathBuf::from(fixture("convert/bench_mlp_fp16"));
    (0..14)
        .map(|k| xla_ir::Literal::Array(read_npy(&dir.join(format!("inputs/{k}.npy"))).unwrap()))
        .collect()
}

/// Asserts `outputs` are within the corpus's f16 tolerance class ("deep"), times
/// `widen(k)` for output `k`, of XLA running the FP16 bench MLP.
fn within_f16_class_of_xla(
    outputs: &[xla_ir::literal::ArrayLiteral],
    what: &str,
    widen: impl Fn(usize) -> f64,
) {
    let dir = PathBuf::from(fixture("convert/bench_mlp_fp16"));
    for (k, got) in outputs.iter().enumerate() {
        let class = f16_class("deep") * widen(k);
        let want = read_npy(&dir.join(format!("xla_outputs/{k}.npy"))).unwrap();
        let xla_ir::literal::ArrayData::F32(values) = &want.data else {
            panic!("output {k}: XLA's result is f32, as the module's");
        };
        let rms = (values.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / values.len() as f64)
            .sqrt();
        let spec = serde_json::json!({"rtol": class, "atol": class * rms});
        ipuxla::corpus::compare_output(got, &want, &spec)
            .unwrap_or_else(|e| panic!("output {k} in {what} against XLA's f16 run: {e}"));
    }
}

/// `partialsType: half` on the FP16 bench MLP: its f16 matrix products store their partials
/// in f16 on the AMP's faster f16-partials path, so the step takes fewer cycles, and its
/// numbers change measurably. The weights and biases stay within the f16 class of XLA's f16
/// run (which accumulates f16 products in f32); the RMSprop second moments of the hidden
/// layers (outputs 6-9) do not: the gradients' 256-sample sums are rounded to f16 as
/// partials are stored (once for each of the dot's K parts), and a moment squares the
/// gradient, so they reach 3.2 times the class (62 of w2's 32,768 moments beyond it, 2
/// beyond 3 times, with w2's gradient summed in 5 K parts; in 3 parts it was 2.8 times and
/// 20 moments). Within 4 times it is asserted: the precision half partials cost, measured.
#[test]
fn half_partials_make_the_fp16_bench_mlp_faster_at_a_measured_cost_in_precision() {
    let module = parse(Path::new(&fixture(
        "convert/bench_mlp_fp16/module.fp16.hlo",
    )));
    let inputs = bench_mlp_fp16_inputs();
    let run = |partials: &str| {
        let mut config = ipuxla::compiler::IpuConfig::default();
        config
            .matmuls
            .poplar_options
            .insert("partialsType".into(), partials.into());
        ipuxla::device::run_on_ipu_model(&module, &config, &inputs).unwrap()
    };
    let (float, half) = (run("float"), run("half"));
    assert!(
        half.profile.total_cycles < float.profile.total_cycles,
        "half partials {} cycles vs float {}",
        half.profile.total_cycles,
        float.profile.total_cycles
    );
    let second_moments = 6..=9;
    within_f16_class_of_xla(&half.outputs, "FP16 with half partials", |k| {
        if second_moments.contains(&k) {
            4.0
        } else {
            1.0
        }
    });
    // Measurably different: the first layer's weights move by more than f32 rounding.
    let differ = |k: usize| -> f64 {
        let (xla_ir::literal::ArrayData::F32(a), xla_ir::literal::ArrayData::F32(b)) =
            (&float.outputs[k].data, &half.outputs[k].data)
        else {
            panic!("f32 outputs");
        };
        a.iter()
            .zip(b)
            .map(|(x, y)| f64::from((x - y).abs()))
            .fold(0.0, f64::max)
    };
    assert!(differ(0) > 1e-5, "w1 moved by {} only", differ(0));
}
