//! `ipuxla config`: every IpuConfig option with its type, default, value and description,
//! as text and as JSON; values from `--config FILE`, checked as `run` checks them.

mod common;
use common::ipuxla;

fn temp_config(name: &str, text: &str) -> std::path::PathBuf {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ipuxla-config-{}-{name}.json", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn json_lists_every_option_with_type_default_value_and_description() {
    let out = ipuxla(&["config", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list.len(), ipuxla::compiler::config_docs::OPTIONS.len());
    for row in &list {
        for field in ["key", "type", "default", "value", "description"] {
            assert!(row.get(field).is_some(), "{row} has no {field}");
        }
        assert_eq!(row["default"], row["value"], "defaults without --config");
        assert!(!row["description"].as_str().unwrap().is_empty());
    }
    let key = |k: &str| list.iter().find(|r| r["key"] == k).unwrap().clone();
    assert_eq!(key("scheduling.algorithm")["default"], "CHOOSE_BEST");
    assert_eq!(key("floating_point_behaviour.esr")["type"], "bool");
}

#[test]
fn values_come_from_the_config_file_and_changed_ones_show_their_default() {
    let path = temp_config(
        "values",
        r#"{"ipu_model": {"tiles_per_ipu": 4}, "floating_point_behaviour": {"nanoo": true}}"#,
    );
    let out = ipuxla(&["config", "--config", path.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("ipu_model.tiles_per_ipu = 4 (default 0)"),
        "{text}"
    );
    assert!(
        text.contains("floating_point_behaviour.nanoo = true (default false)"),
        "{text}"
    );
    assert!(
        text.contains("scheduling.algorithm = \"CHOOSE_BEST\"\n"),
        "{text}"
    );
    std::fs::remove_file(path).unwrap();
}

/// Options that would be accepted and change nothing are refused, naming the option.
#[test]
fn options_that_would_change_nothing_are_refused() {
    for (name, text, want) in [
        (
            "devices",
            r#"{"auto_select_ipus": [2, 2]}"#,
            "auto_select_ipus [2, 2] configures 2 devices",
        ),
        (
            "unknown",
            r#"{"ipu_model": {"tile_count": 4}}"#,
            "tile_count",
        ),
    ] {
        let path = temp_config(name, text);
        let out = ipuxla(&["config", "--config", path.to_str().unwrap()]);
        assert!(!out.status.success(), "{name}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(want), "{name}: {stderr}");
        std::fs::remove_file(path).unwrap();
    }
}
