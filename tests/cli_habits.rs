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
