//! `ipuxla schedule` from the outside: the order per computation, the peak as the last
//! line, one row per algorithm with `--compare`, and unknown algorithms named.

mod common;
use common::ipuxla;

fn fixture(rel: &str) -> String {
    format!("{}/fixtures/conformance/{rel}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_last_line_is_the_peak_and_every_instruction_is_listed() {
    let out = ipuxla(&[
        "schedule",
        &fixture("seed_vector_add/module.hlo"),
        "--algorithm",
        "post-order",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    // three f32[2] inputs, two adds: at most the inputs plus one sum live at once
    assert_eq!(*lines.last().unwrap(), "peak_liveness_bytes: 32");
    assert_eq!(lines[0], "main.1 (32 B): pa.1 pb.1 add.3 pc.1 add.4 add.5");
}

#[test]
fn compare_lists_every_algorithm_and_json_parses() {
    let out = ipuxla(&[
        "schedule",
        &fixture("layer_norm_affine/module.hlo"),
        "--compare",
        "--json",
    ]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["algorithm"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "choose-best",
            "post-order",
            "clustering",
            "shortest-path",
            "look-ahead",
            "xla-list",
            "xla-dfs",
            "xla-post-order",
            "optimal"
        ]
    );
    let peak = |n: &str| {
        v.as_array()
            .unwrap()
            .iter()
            .find(|r| r["algorithm"] == n)
            .unwrap()["peak_liveness_bytes"]
            .as_u64()
            .unwrap()
    };
    assert!(peak("optimal") <= peak("choose-best"));
}

#[test]
fn unknown_algorithms_are_named() {
    let out = ipuxla(&[
        "schedule",
        &fixture("seed_vector_add/module.hlo"),
        "--algorithm",
        "fastest",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown algorithm 'fastest'") && err.contains("look-ahead"),
        "{err}"
    );
}

/// LOOK_AHEAD's limits are taken where they act (look-ahead, choose-best, optimal) and
/// refused for an algorithm that does not search; `--compare` runs every algorithm, so a
/// chosen one is refused beside it.
#[test]
fn search_limits_and_compare_refuse_what_would_not_act() {
    let file = fixture("seed_vector_add/module.hlo");
    let run = |extra: &[&str]| {
        let mut args = vec!["schedule", file.as_str()];
        args.extend_from_slice(extra);
        ipuxla(&args)
    };
    for algorithm in ["look-ahead", "choose-best", "optimal"] {
        let out = run(&["--algorithm", algorithm, "--lookahead-depth", "2"]);
        assert!(out.status.success(), "{algorithm}");
    }
    let out = run(&["--algorithm", "post-order", "--search-space-size", "8"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("post-order does not search"), "{err}");
    assert!(
        run(&["--compare", "--lookahead-depth", "2"])
            .status
            .success()
    );
    let out = run(&["--compare", "--algorithm", "clustering"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));
}
