//! `ipuxla report` and `--trace` from the outside: the page is self-contained and shows
//! the profile's numbers; every trace event is well formed and every step with cycles has
//! its slices. (The page in a real browser: `.ci/run`'s headless Chromium stage.)

mod common;
use common::{fixture, ipuxla};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn scratch(name: &str) -> PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ipuxla-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Estimates `case`'s module, writing its profile and trace; returns both.
fn profile_and_trace(case: &str, extra: &[&str]) -> (Value, Value, PathBuf) {
    let profile = scratch(&format!("{case}.profile.json"));
    let trace = scratch(&format!("{case}.trace.json"));
    let module = fixture(&format!("conformance/{case}/module.hlo"));
    let mut args = vec![
        "run",
        &module,
        "--estimate-only",
        "--profile",
        profile.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = ipuxla(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read = |p: &Path| serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    (read(&profile), read(&trace), profile)
}

#[test]
fn the_report_page_is_self_contained_and_shows_the_profiles_numbers() {
    let (p, _, path) = profile_and_trace("transformer_encoder_fwd", &[]);
    let html_path = scratch("transformer_encoder_fwd.html");
    let out = ipuxla(&[
        "report",
        path.to_str().unwrap(),
        "-o",
        html_path.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(&html_path).unwrap();
    for outside in ["<script", "http://", "https://", "<link", "src="] {
        assert!(
            !html.contains(outside),
            "the page fetches or runs something: {outside}"
        );
    }
    let total = p["total_cycles"].as_u64().unwrap();
    assert!(html.contains(&format!("id=\"total-cycles\">{total}<")));
    let peak_tile = p["tiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["bytes_used"].as_u64().unwrap())
        .max()
        .unwrap();
    assert!(html.contains(&format!("id=\"peak-tile-bytes\">{peak_tile}<")));
    let liveness = p["liveness"].as_array().unwrap();
    assert!(!liveness.is_empty());
    let peak_live = liveness
        .iter()
        .map(|l| l["bytes"].as_u64().unwrap())
        .max()
        .unwrap();
    assert!(html.contains(&format!("id=\"peak-live-bytes\">{peak_live}<")));
    let largest = p["largest_tensors"].as_array().unwrap();
    assert_eq!(largest.len(), 20);
    // The largest tensors, then the tensors the busiest tile holds at its peak (and a row
    // for the rest when there are more).
    let at_peak = &p["peak_tile_contents"];
    let listed = at_peak["tensors"].as_array().unwrap().len()
        + usize::from(at_peak["others"].as_u64().unwrap_or(0) > 0);
    assert!(listed > 0);
    assert!(html.contains("id=\"peak-tile\""));
    assert!(html.contains(&format!(
        "at its peak ({})",
        at_peak["step"].as_str().unwrap()
    )));
    assert_eq!(html.matches("<td class=\"name\">").count(), 20 + listed);
    assert_eq!(html.matches("<svg class=\"heatmap\"").count(), 1);
    // A profile that is not one: the file named.
    let bad = scratch("not-a-profile.json");
    std::fs::write(&bad, "{\"x\": 1}").unwrap();
    let out = ipuxla(&[
        "report",
        bad.to_str().unwrap(),
        "-o",
        html_path.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("not a profile written by ipuxla run --profile")
    );
}

#[test]
fn every_trace_event_is_well_formed_and_every_step_has_its_slices() {
    let (p, t, _) = profile_and_trace("seed_mlp_train_rmsprop", &[]);
    let events = t["traceEvents"].as_array().unwrap();
    let mut stepped = std::collections::BTreeSet::new();
    for e in events {
        let ph = e["ph"].as_str().unwrap();
        assert!(e["pid"].is_u64() && e["tid"].is_u64(), "{e}");
        assert!(e["name"].is_string(), "{e}");
        match ph {
            "M" => assert!(e["args"]["name"].is_string() || e["args"]["sort_index"].is_u64()),
            "X" => {
                let (ts, dur) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
                assert!(
                    ts >= 0.0 && dur >= 0.0 && ts.is_finite() && dur.is_finite(),
                    "{e}"
                );
                assert!(e["args"]["cycles"].is_u64(), "{e}");
                assert!(e["args"]["tiles"].is_u64(), "{e}");
                stepped.insert(e["args"]["step"].as_u64().unwrap());
            }
            other => panic!("unexpected phase {other}: {e}"),
        }
    }
    let with_cycles: std::collections::BTreeSet<u64> = p["steps"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .filter(|(_, s)| s["cycles"].as_u64().unwrap() > 0)
        .map(|(i, _)| i as u64)
        .collect();
    assert_eq!(stepped, with_cycles);
}
