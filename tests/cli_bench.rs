//! `ipuxla bench` from the outside: a table row or JSON object per case with XLA's
//! figures beside ours, outputs checked against the case's, and a failing exit when they
//! differ.

mod common;
use common::ipuxla;

use std::path::Path;

fn fixture(rel: &str) -> String {
    format!("{}/fixtures/conformance/{rel}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn json_has_the_figures_and_ratios_of_each_case() {
    let out = ipuxla(&[
        "bench",
        &fixture("seed_sum4"),
        &fixture("seed_vector_add"),
        "--runs",
        "2",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cases = v.as_array().expect("an array for several cases");
    assert_eq!(cases.len(), 2);
    for c in cases {
        for key in [
            "compile_ms",
            "run_ms_median",
            "simulated_cycles",
            "peak_tile_bytes",
        ] {
            assert!(c[key].as_f64().is_some_and(|x| x > 0.0), "{key} in {c}");
        }
        assert_eq!(c["outputs"], "matched");
        assert_eq!(c["runs"], 2);
        let ratio = c["run_ms_median"].as_f64().unwrap() / c["xla_run_ms_median"].as_f64().unwrap();
        assert!((c["run_ratio"].as_f64().unwrap() - ratio).abs() < 1e-9);
        // Loading's phases are parts of its time; they overlap (`LoadTimes`): the costs,
        // the kernels, and the host plan with the rearrangements each fit in what is left
        // beside the checks and the memory.
        let phase = |p: &str| {
            let key = format!("load_{p}_ms");
            c[&key]
                .as_f64()
                .filter(|&x| x >= 0.0)
                .unwrap_or_else(|| panic!("{key} in {c}"))
        };
        let phases = phase("checks")
            + phase("memory")
            + phase("costs")
                .max(phase("kernels"))
                .max(phase("host_plan") + phase("rearrangements"));
        let load = c["load_ms"].as_f64().unwrap();
        assert!(
            phases > 0.0 && phases <= load,
            "phases {phases} ms of {load} ms"
        );
        // A run's host time by family of steps: slowest first, adding up to the kinds'
        // times (the stream families to `host_streams_ms`; no collectives here).
        let steps = c["host_steps"].as_array().expect("host_steps");
        let ms = |s: &serde_json::Value| s["ms"].as_f64().unwrap();
        assert!(steps.windows(2).all(|w| ms(&w[0]) >= ms(&w[1])), "{c}");
        let of_kind =
            |kind: &str| -> f64 { steps.iter().filter(|s| s["kind"] == kind).map(ms).sum() };
        for (kind, key) in [
            ("compute", "host_compute_ms"),
            ("exchange", "host_exchange_ms"),
            ("stream", "host_streams_ms"),
        ] {
            let total = c[key].as_f64().unwrap();
            assert!(
                (of_kind(kind) - total).abs() <= 1e-6 * total.max(1.0),
                "{kind} in {c}"
            );
        }
        assert!(
            steps
                .iter()
                .any(|s| s["step"] == "stream out" && s["per_run"] == 1.0)
        );
    }
    assert_eq!(cases[0]["name"], "seed_sum4");
}

#[test]
fn the_table_has_a_row_per_case_and_generated_inputs_are_unchecked() {
    // The bench fixtures keep only their modules: a copy of a case without inputs runs on
    // generated ones.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ipuxla-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["case.json", "module.hlo"] {
        std::fs::copy(Path::new(&fixture("seed_sum4")).join(f), dir.join(f)).unwrap();
    }
    let out = ipuxla(&["bench", dir.to_str().unwrap(), "--runs", "1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    assert!(lines[0].starts_with("case") && lines[0].contains("x XLA"));
    assert!(lines[1].starts_with("seed_sum4") && lines[1].ends_with("unchecked"));
    // Below, the roofline table: a sum has no products; its three small parameters lie on
    // three tiles (spread as Graphcore's mapping helper spreads them), so two of them are
    // exchanged to the third's, at least as long as their lower bound.
    assert!(
        lines[3].starts_with("case") && lines[3].contains("% AMP peak"),
        "{text}"
    );
    let roofline: Vec<&str> = lines[4].split_whitespace().collect();
    assert_eq!(roofline[..2], ["seed_sum4", "0"], "{text}");
    assert_eq!(roofline[4..6], ["0.000", "0.00"], "{text}");
    let bound: f64 = roofline.last().unwrap().parse().unwrap();
    assert!(bound >= 1.0, "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn outputs_that_differ_from_xla_fail_the_run_and_name_the_element() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ipuxla-bench-bad-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("inputs")).unwrap();
    std::fs::create_dir_all(dir.join("outputs")).unwrap();
    let case = Path::new(&fixture("seed_sum4")).to_path_buf();
    for f in [
        "case.json",
        "module.hlo",
        "inputs/0.npy",
        "inputs/1.npy",
        "inputs/2.npy",
    ] {
        std::fs::copy(case.join(f), dir.join(f)).unwrap();
    }
    // The expected sum replaced by the first input: it cannot match.
    std::fs::copy(case.join("inputs/0.npy"), dir.join("outputs/0.npy")).unwrap();
    let out = ipuxla(&["bench", dir.to_str().unwrap(), "--runs", "1"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("outputs differ from XLA's: output 0: element"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn zero_runs_is_refused() {
    let out = ipuxla(&["bench", &fixture("seed_sum4"), "--runs", "0"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--runs must be at least 1"));
}

/// The four bench cases: `bench` fails when the model's estimate differs from a run's
/// profile, and their cycles and peak tile bytes are the ones BENCHMARKS.md records (a host
/// change never changes them). `--estimate-only` gives the same figures without running.
/// Their FLOPs are what `../shared/tools/flops.py` counts in the same modules.
#[test]
fn bench_cases_estimate_what_they_run_with_the_recorded_cycles_and_peaks() {
    let want = [
        ("bench_cnn_train_b32", 73_604, 27_660, 190_869_504u64),
        (
            "bench_encoder_stack12_fwd",
            1_241_551,
            53_568,
            2_617_245_696,
        ),
        ("bench_mlp_train_b256", 149_099, 22_568, 257_818_624),
        ("bench_transformer_fwd_bwd", 389_214, 52_244, 2_415_919_104),
    ];
    let dirs: Vec<String> = want.iter().map(|(c, ..)| fixture(c)).collect();
    let mut args = vec!["bench", "--json"];
    args.extend(dirs.iter().map(String::as_str));
    let estimated = ipuxla(&[args.clone(), vec!["--estimate-only"]].concat());
    args.extend(["--runs", "1", "--warmup", "0"]);
    let ran = ipuxla(&args);
    for out in [&ran, &estimated] {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        for (c, (name, cycles, peak, flops)) in v.as_array().unwrap().iter().zip(want) {
            assert_eq!(c["name"], name);
            assert_eq!(c["simulated_cycles"], cycles, "{name}");
            assert_eq!(c["peak_tile_bytes"], peak, "{name}");
            assert_eq!(c["flops"], flops, "{name}");
            // FLOPs over the simulated seconds on the device at the ipu2's 1.325 GHz.
            let device = c["device_cycles"].as_u64().unwrap();
            assert!(device < cycles && device > 0, "{c}");
            let tflops = flops as f64 / (device as f64 / 1.325e9) / 1e12;
            assert!(
                (c["tflops_per_s"].as_f64().unwrap() - tflops).abs() < 1e-9,
                "{c}"
            );
            let (exchange, bound) = (&c["exchange_cycles"], &c["exchange_lower_bound_cycles"]);
            assert!(
                exchange.as_u64() >= bound.as_u64() && bound.as_u64() > Some(0),
                "{c}"
            );
            assert!(c["estimate_ms"].as_f64().is_some_and(|ms| ms > 0.0), "{c}");
        }
    }
}

/// `fixtures/builder/` is what `--write-builder-cases` writes today, byte for byte: the
/// builder-made bench cases cannot drift from the builder.
#[test]
fn the_builder_cases_in_the_fixtures_are_what_the_builder_writes() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ipuxla-builder-cases-{}", std::process::id()));
    let out = ipuxla(&["bench", "--write-builder-cases", dir.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/builder");
    let written = String::from_utf8_lossy(&out.stdout);
    assert_eq!(written.lines().count(), 2, "{written}");
    for case in ["bench_matmul2048_f16", "bench_bert_base_layer_f16"] {
        for file in ["module.hlo", "case.json"] {
            let want = std::fs::read_to_string(fixtures.join(case).join(file)).unwrap();
            let got = std::fs::read_to_string(dir.join(case).join(file)).unwrap();
            assert!(
                got == want,
                "{case}/{file} differs: run `ipuxla bench --write-builder-cases fixtures/builder`"
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
    // It benches nothing, so bench's options are refused beside it.
    let out = ipuxla(&["bench", "--write-builder-cases", "/tmp/x", "--runs", "3"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));
}

/// `--scaling`: a row per stack with its layers and instructions; no layers, and the
/// options of benching cases, are refused.
#[test]
fn scaling_compiles_stacks_and_refuses_what_it_would_ignore() {
    let out = ipuxla(&["bench", "--scaling", "1", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = rows.as_array().expect("an array of rows");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["layers"], 1);
    assert!(rows[0]["instructions"].as_u64().unwrap() > 0, "{rows:?}");
    assert_eq!(rows[0]["ratio_to_first"], 1.0);
    let zero = ipuxla(&["bench", "--scaling", "0"]);
    assert!(String::from_utf8_lossy(&zero.stderr).contains("at least one layer"));
    for extra in [
        &["--runs", "3"][..],
        &["--warmup", "2"],
        &["--file", "module.opt.hlo"],
        &["fixtures/conformance/bench_mlp_train_b256"],
    ] {
        let mut args = vec!["bench", "--scaling", "1"];
        args.extend_from_slice(extra);
        let out = ipuxla(&args);
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("cannot be used with"),
            "{extra:?}"
        );
    }
}
