//! `ipuxla devices`: the gc-info-style listing and the seed's selection orders.

use std::process::Command;

fn devices(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ipuxla"))
        .arg("devices")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn sixteen_ipus_list_ids_0_to_30_and_the_seeds_orders() {
    let (ok, out, _) = devices(&["--num-ipus", "16"]);
    assert!(ok);
    for id in 0..=30 {
        assert!(
            out.contains(&format!("-+- Id: [{id:>2}]")),
            "id {id} missing:\n{out}"
        );
    }
    assert!(!out.contains("Id: [31]"));
    assert!(out.contains("ZIGZAG 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15"));
    assert!(out.contains("SNAKE  0, 1, 3, 2, 4, 5, 7, 6, 8, 9, 11, 10, 12, 13, 15, 14"));
    assert!(out.contains("HOOF   0, 2, 4, 6, 8, 10, 12, 14, 15, 13, 11, 9, 7, 5, 3, 1"));
    assert!(out.contains("* AUTO"), "AUTO is the default choice:\n{out}");
}

#[test]
fn the_chosen_order_is_marked_and_bad_counts_are_refused() {
    let (ok, out, _) = devices(&[
        "--num-ipus",
        "4",
        "--selection-order",
        "HOOF",
        "--ipu-version",
        "ipu1",
    ]);
    assert!(ok);
    assert!(out.contains("* HOOF   0, 2, 3, 1"), "{out}");
    assert!(out.contains("4 x ipu1, 1216 tiles x 256 KiB"), "{out}");
    let (ok, _, err) = devices(&["--num-ipus", "3"]);
    assert!(!ok);
    assert!(
        err.contains("3 IPUs: a system has 1 IPU or whole C2 cards of 2"),
        "{err}"
    );
}

/// `auto_select_ipus` lists: one device per entry (the seed's `/device:IPU:K`); `devices
/// --config` lists them and `run --device K` runs a module on device K's IPUs.
#[test]
fn a_multi_device_config_lists_its_devices_and_run_chooses_one() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ipuxla-devices-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("two.json");
    std::fs::write(&config, r#"{"auto_select_ipus": [1, 2]}"#).unwrap();
    let config = config.to_str().unwrap();

    let (ok, out, err) = devices(&["--num-ipus", "4", "--config", config]);
    assert!(ok, "{err}");
    assert!(
        out.contains("/device:IPU:0  1 IPU  (run --device 0)"),
        "{out}"
    );
    assert!(
        out.contains("/device:IPU:1  2 IPUs  (run --device 1)"),
        "{out}"
    );

    let case = |f: &str| {
        format!(
            "{}/fixtures/conformance/seed_vector_add/{f}",
            env!("CARGO_MANIFEST_DIR")
        )
    };
    let inputs = (0..3)
        .map(|i| format!("{i}={}", case(&format!("inputs/{i}.npy"))))
        .collect::<Vec<_>>()
        .join(";");
    let run = |extra: &[&str]| {
        let outdir = dir.join("out");
        let out = Command::new(env!("CARGO_BIN_EXE_ipuxla"))
            .args([
                "run",
                &case("module.hlo"),
                "--inputs",
                &inputs,
                "--overwrite",
            ])
            .args(["--outdir", outdir.to_str().unwrap(), "--config", config])
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, _, err) = run(&[]);
    assert!(!ok, "two devices and no choice was accepted");
    assert!(
        err.contains("configures 2 devices") && err.contains("--device K"),
        "{err}"
    );
    for (k, ipus) in [("0", "on 1 x ipu2"), ("1", "on 2 x ipu2")] {
        let (ok, out, err) = run(&["--device", k]);
        assert!(ok, "--device {k}: {err}");
        assert!(out.contains(ipus), "--device {k}: {out}");
    }
    let (ok, _, err) = run(&["--device", "2"]);
    assert!(!ok);
    assert!(
        err.contains("device 2: auto_select_ipus [1,2] configures 2 device(s)"),
        "{err}"
    );
}
