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
