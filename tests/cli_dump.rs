//! `ipuxla dump` from the outside: output, round trips, JSON, and errors as FILE:LINE:COL.

use common::ipuxla;

use std::path::{Path, PathBuf};

mod common;

fn fixture(rel: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(rel)
        .to_string_lossy()
        .into_owned()
}

fn scratch(name: &str, contents: &[u8]) -> PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ipuxla-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

#[test]
fn dump_prints_text_that_dumps_to_itself() {
    for case in [
        "seed_vector_add",
        "scan_lstm",
        "cond_switch",
        "gather_embedding",
    ] {
        for file in ["module.hlo", "module.opt.hlo"] {
            let first = ipuxla(&["dump", &fixture(&format!("conformance/{case}/{file}"))]);
            assert!(
                first.status.success(),
                "{}",
                String::from_utf8_lossy(&first.stderr)
            );
            let a = scratch(&format!("{case}-{file}"), &first.stdout);
            let second = ipuxla(&["dump", a.to_str().unwrap()]);
            assert!(
                second.status.success(),
                "{}",
                String::from_utf8_lossy(&second.stderr)
            );
            assert_eq!(first.stdout, second.stdout, "{case}/{file}");
        }
    }
}

#[test]
fn json_summary_describes_the_module() {
    let out = ipuxla(&[
        "dump",
        "--json",
        &fixture("conformance/seed_vector_add/module.hlo"),
    ]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["name"], "jit_seed_vector_add");
    assert_eq!(v["opcode_counts"]["add"], 3);
    assert_eq!(v["opcode_counts"]["parameter"], 3);
    assert_eq!(v["parameters"].as_array().unwrap().len(), 3);
    assert_eq!(v["result"], "f32[2]{0}");
    assert_eq!(v["computations"][0]["is_entry"], true);
}

fn assert_error(contents: &str, expected_position: &str, expected_message: &str) {
    let path = scratch(
        &format!("bad-{}.hlo", expected_position.replace(':', "_")),
        contents.as_bytes(),
    );
    let out = ipuxla(&["dump", path.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "expected failure for {contents:?}");
    let prefix = format!("{}:{expected_position}: ", path.display());
    assert!(
        stderr.starts_with(&prefix),
        "stderr {stderr:?} does not start with {prefix:?}"
    );
    assert!(
        stderr.contains(expected_message),
        "stderr {stderr:?} lacks {expected_message:?}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn errors_name_file_line_and_column() {
    let header = "HloModule m\n\nENTRY e {\n  a = f32[2]{0} parameter(0)\n";
    assert_error(
        &format!("{header}  ROOT c = f32[2]{{0}} frob(a)\n}}\n"),
        "5:22",
        "unknown opcode 'frob'",
    );
    assert_error(
        &format!("{header}  ROOT c = f32[2]{{0}} add(a, q)\n}}\n"),
        "5:29",
        "undefined instruction 'q'",
    );
    assert_error(
        &format!("{header}  ROOT c = f32[3]{{0}} add(a, a)\n}}\n"),
        "5:8",
        "declared shape is f32[3]{0}",
    );
    assert_error(
        &format!("{header}  ROOT c = f32[2]{{0}} add(a, a\n"),
        "6:1",
        "expected ',' or ')'",
    );
    assert_error(
        &format!("{header}  a = f32[2]{{0}} negate(a)\n}}\n"),
        "5:3",
        "duplicate instruction name 'a'",
    );
    assert_error(
        "HloModule m\n\nENTRY e {\n  ROOT r = f32[] reduce(), dimensions={0}, to_apply=missing\n}\n",
        "4:53",
        "undefined computation 'missing'",
    );
}

#[test]
fn unreadable_and_non_utf8_files_are_clear_errors() {
    let missing = ipuxla(&["dump", "/nonexistent/module.hlo"]);
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr)
            .contains("/nonexistent/module.hlo: cannot read file")
    );

    let path = scratch(
        "latin1.hlo",
        b"HloModule m\n\nENTRY e {\n  a = f32[] parameter(0) \xe9\n}\n",
    );
    let out = ipuxla(&["dump", path.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(":4:26: invalid UTF-8"), "{stderr}");
}

#[test]
fn help_documents_every_flag() {
    let out = ipuxla(&["dump", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("--json") && help.contains("<FILE>"), "{help}");
    for pass in ipuxla::compiler::passes::pass_names() {
        assert!(
            help.contains(pass),
            "--help does not name pass {pass}: {help}"
        );
    }
}

#[test]
fn dump_passes_writes_one_file_per_pass_and_prints_the_scheduled_module() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ipuxla-cli-dumps-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = ipuxla(&[
        "dump",
        &fixture("conformance/bench_transformer_fwd_bwd/module.hlo"),
        "--passes",
        "--dump-to",
        dir.to_str().unwrap(),
        "--scheduler",
        "look-ahead",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.starts_with("HloModule jit_transformer_train_grads, is_scheduled=true"));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("pass ipu-scheduler"), "{stderr}");
    let names = common::file_names(&dir);
    assert_eq!(
        names,
        [
            "module_0000.jit_transformer_train_grads.0000.before_optimizations.txt",
            "module_0000.jit_transformer_train_grads.0001.after_bitcast-decomposer.txt",
            "module_0000.jit_transformer_train_grads.0002.after_rng-bit-generator-expander.txt",
            "module_0000.jit_transformer_train_grads.0003.after_int64-conversion.txt",
            "module_0000.jit_transformer_train_grads.0004.after_egraph-optimiser.report.txt",
            "module_0000.jit_transformer_train_grads.0004.after_egraph-optimiser.txt",
            "module_0000.jit_transformer_train_grads.0005.after_dynamic-slice-splitter.txt",
            "module_0000.jit_transformer_train_grads.0006.after_graph-outliner.report.txt",
            "module_0000.jit_transformer_train_grads.0006.after_graph-outliner.txt",
            "module_0000.jit_transformer_train_grads.0007.after_ipu-scheduler.txt",
            "module_0000.jit_transformer_train_grads.0008.after_recomputation.report.txt",
            "module_0000.jit_transformer_train_grads.0008.after_recomputation.txt",
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn pass_flags_without_passes_and_unknown_passes_are_errors() {
    let file = fixture("conformance/binary_arith/module.hlo");
    let out = ipuxla(&["dump", &file, "--stop-after", "ipu-scheduler"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("need --passes"));
    let out = ipuxla(&["dump", &file, "--passes", "--stop-after", "dce"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--stop-after 'dce': there is no such pass; the passes are bitcast-decomposer, rng-bit-generator-expander, int64-conversion, egraph-optimiser, dynamic-slice-splitter, graph-outliner, ipu-scheduler, recomputation"),
        "{stderr}"
    );
    let out = ipuxla(&["dump", &file, "--passes", "--scheduler", "fastest"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown algorithm 'fastest'"));
    // Stopping after the int64 conversion leaves the module unscheduled.
    let out = ipuxla(&[
        "dump",
        &file,
        "--passes",
        "--stop-after",
        "int64-conversion",
    ]);
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stdout).contains("is_scheduled"));
}

#[test]
fn dump_passes_turns_each_gelu_of_the_seed_program_into_one_op() {
    for form in ["module.hlo", "module.opt.hlo"] {
        let out = ipuxla(&[
            "dump",
            &fixture(&format!("conformance/seed_matmul_ln_gelu/{form}")),
            "--passes",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let gelus = text
            .lines()
            .filter(|l| l.contains("custom-call(") && l.contains("custom_call_target=\"Gelu\""))
            .count();
        // Two GELUs, or the seed's two identical blocks outlined into one function.
        let outlined = text.contains("to_apply=outlined.0");
        assert_eq!(gelus, if outlined { 1 } else { 2 }, "{form}:\n{text}");
        assert!(
            !text.contains(" tanh(") && !text.contains(" erf("),
            "{form}:\n{text}"
        );
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(stderr.contains("pass egraph-optimiser"), "{stderr}");
        assert!(stderr.contains("e-graph "), "{stderr}");
    }
}

#[test]
fn dump_passes_shows_every_instructions_shard_and_stage() {
    let out = ipuxla(&["dump", "--passes", &fixture("pipeline/two_stages.hlo")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // `w` and `x` carry no stage in the file: they take their first user's.
    for (name, stage) in [("x", 0), ("w", 0), ("a", 0), ("b", 1), ("c", 1)] {
        let line = text
            .lines()
            .find(|l| {
                l.trim_start()
                    .trim_start_matches("ROOT ")
                    .starts_with(&format!("{name} ="))
            })
            .unwrap_or_else(|| panic!("no {name} in\n{text}"));
        assert!(
            line.contains(&format!("ipu_stage=\"{stage}\"")),
            "{name}: {line}"
        );
    }
    // The annotated module lowers as the original did: dumping it again changes nothing.
    let again = scratch("two_stages_placed.hlo", &out.stdout);
    let second = ipuxla(&["dump", "--passes", again.to_str().unwrap()]);
    assert_eq!(String::from_utf8_lossy(&second.stdout), text);
}
