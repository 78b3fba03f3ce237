//! Command-line habits: enum flags in any case, `--version`, shell completions, and the
//! documented exit codes (0 done, 1 could not, 2 usage).

mod common;
use common::ipuxla;

#[test]
fn enum_flags_take_any_case() {
    for order in ["snake", "SNAKE", "Snake"] {
        let out = ipuxla(&["devices", "--num-ipus", "4", "--selection-order", order]);
        assert!(
            out.status.success(),
            "{order}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn version_completions_and_exit_codes() {
    let out = ipuxla(&["--version"]);
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("ipuxla "));
    for shell in ["bash", "zsh", "fish"] {
        let out = ipuxla(&["completions", shell]);
        assert!(out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("ipuxla"),
            "{shell}"
        );
    }
    assert_eq!(ipuxla(&["run", "--no-such-flag"]).status.code(), Some(2));
    assert_eq!(
        ipuxla(&["dump", "/no/such/module.hlo"]).status.code(),
        Some(1)
    );
    let help = String::from_utf8_lossy(&ipuxla(&["--help"]).stdout).into_owned();
    assert!(help.contains("Exit status: 0 when"), "{help}");
}

/// `ipuxla ARGS` on a pseudo-terminal (util-linux `script`), progress shown at once: what
/// the terminal received.
fn on_a_terminal(args: &str) -> String {
    let command = format!("{} {args}", env!("CARGO_BIN_EXE_ipuxla"));
    let out = std::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env("IPUXLA_PROGRESS_DELAY_MS", "0")
        .output()
        .expect("util-linux `script` runs (Debian: bsdutils)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn progress_shows_on_a_terminal_only() {
    // A module that takes a moment to compile: a 2-layer encoder.
    let module =
        ipuxla::encoder::encoder_stack(2, ipuxla::encoder::EncoderSizes::default()).unwrap();
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ipuxla-progress-{}.hlo", std::process::id()));
    std::fs::write(&path, module.to_string()).unwrap();
    let file = path.to_str().unwrap();
    let shown = on_a_terminal(&format!("run {file} --estimate-only"));
    // Says what it does: compiling (a pass, lowering) or estimating.
    assert!(
        shown.contains("compiling") || shown.contains("estimating"),
        "{shown}"
    );
    // Cleared before the results: the summary lines start clean.
    assert!(
        shown.lines().any(|l| l.starts_with("simulated: ")),
        "{shown}"
    );
    let quiet = on_a_terminal(&format!("run {file} --estimate-only --quiet"));
    assert!(
        !quiet.contains("compiling") && !quiet.contains("estimating"),
        "{quiet}"
    );
    assert!(quiet.contains("simulated: "));
    // Piped: never.
    let piped = std::process::Command::new(env!("CARGO_BIN_EXE_ipuxla"))
        .args(["run", file, "--estimate-only"])
        .env("IPUXLA_PROGRESS_DELAY_MS", "0")
        .output()
        .unwrap();
    assert!(piped.status.success());
    let err = String::from_utf8_lossy(&piped.stderr);
    assert!(
        !err.contains("compiling") && !err.contains("estimating"),
        "{err}"
    );
    let _ = std::fs::remove_file(&path);
}

/// A reader that stops reading (`ipuxla bench | head -1`) ends the command quietly: no
/// panic on the closed pipe, exit 0, for the commands that print tables.
#[test]
fn a_closed_stdout_is_no_panic() {
    let hlo = format!(
        "{}/fixtures/conformance/seed_sum4/module.hlo",
        env!("CARGO_MANIFEST_DIR")
    );
    let case = format!(
        "{}/fixtures/conformance/seed_sum4",
        env!("CARGO_MANIFEST_DIR")
    );
    for args in [
        vec!["bench", case.as_str(), "--estimate-only"],
        vec!["schedule", hlo.as_str(), "--compare"],
        vec!["devices", "--num-ipus", "16"],
        vec!["config"],
    ] {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ipuxla"))
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Closing our end before the child writes: its first write meets a closed pipe.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(out.status.success(), "{args:?}: {err}");
    }
}
