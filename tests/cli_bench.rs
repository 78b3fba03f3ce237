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
    }
    assert_eq!(cases[0]["name"], "seed_sum4");
}

#[test]
fn the_table_has_a_row_per_case_and_generated_inputs_are_unchecked() {
    // The bench fixtures keep only their modules: a copy of a case without inputs runs on
    // generated ones.
    let dir = std::env::temp_dir().join(format!("ipuxla-bench-{}", std::process::id()));
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
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].starts_with("case") && lines[0].contains("x XLA"));
    assert!(lines[1].starts_with("seed_sum4") && lines[1].ends_with("unchecked"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn outputs_that_differ_from_xla_fail_the_run_and_name_the_element() {
    let dir = std::env::temp_dir().join(format!("ipuxla-bench-bad-{}", std::process::id()));
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
#[test]
fn bench_cases_estimate_what_they_run_with_the_recorded_cycles_and_peaks() {
    let want = [
        ("bench_cnn_train_b32", 2_815_297, 433_408),
        ("bench_encoder_stack12_fwd", 5_253_819, 82_900),
        ("bench_mlp_train_b256", 329_562, 25_892),
        ("bench_transformer_fwd_bwd", 1_479_317, 65_212),
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
        for (c, (name, cycles, peak)) in v.as_array().unwrap().iter().zip(want) {
            assert_eq!(c["name"], name);
            assert_eq!(c["simulated_cycles"], cycles, "{name}");
            assert_eq!(c["peak_tile_bytes"], peak, "{name}");
            assert!(c["estimate_ms"].as_f64().is_some_and(|ms| ms > 0.0), "{c}");
        }
    }
}
