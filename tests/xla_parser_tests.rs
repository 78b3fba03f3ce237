//! The module texts of XLA's own parser tests (`xla/hlo/parser/hlo_parser_test.cc`, copied
//! into `fixtures/xla-parser/`, see its README): what XLA parses, ipuxla parses, verifies
//! (where XLA verified it) and prints back stably; what XLA rejects, ipuxla rejects with a
//! located error (the error ipuxla gives for that fault, in each fixture's
//! `.ipuxla-error`). No text may panic.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use xla_ir::{parse_module, verify};

/// Which of XLA's expectations a fixture carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// XLA parses and verifies it.
    Accept,
    /// XLA parses it (its test does not verify it).
    AcceptUnverified,
    /// XLA rejects it.
    Reject,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/xla-parser")
}

fn fixtures() -> Vec<(String, Expect, PathBuf)> {
    let mut out = Vec::new();
    for (dir, expect) in [
        ("accept", Expect::Accept),
        ("accept-unverified", Expect::AcceptUnverified),
        ("reject", Expect::Reject),
    ] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
            .unwrap_or_else(|e| panic!("fixtures/xla-parser/{dir}: {e}"))
            .map(|e| e.expect("readable directory entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "hlo"))
            .collect();
        files.sort();
        for path in files {
            let stem = path.file_stem().unwrap().to_string_lossy().to_string();
            out.push((format!("{dir}/{stem}"), expect, path));
        }
    }
    out
}

/// What ipuxla did with one fixture: `Ok` when it met XLA's expectation, else why not.
/// A rejection must carry `reason` (the fixture's `.ipuxla-error`): the error ipuxla gives
/// for the fault XLA names (its words are in `.xla-error`), not some other one.
fn check(expect: Expect, text: &str, reason: &str) -> Result<(), String> {
    let parsed = parse_module(text);
    let rejected_for = |message: String| {
        if message.contains(reason) {
            Ok(())
        } else {
            Err(format!(
                "rejected for another reason: {message} (expected {reason:?})"
            ))
        }
    };
    match expect {
        Expect::Reject => match parsed {
            Err(e) if e.line > 0 => rejected_for(e.to_string()),
            Err(e) => Err(format!("rejected without a location: {e}")),
            Ok(module) => match verify(&module) {
                Err(e) if e.location.is_some() || e.instruction.is_some() => {
                    rejected_for(e.to_string())
                }
                Err(e) => Err(format!("rejected without naming where: {e}")),
                Ok(()) => Err("accepted a module XLA rejects".into()),
            },
        },
        Expect::Accept | Expect::AcceptUnverified => {
            let module = parsed.map_err(|e| format!("parse: {e}"))?;
            if expect == Expect::Accept {
                verify(&module).map_err(|e| format!("verify: {e}"))?;
            }
            let printed = module.to_string();
            let reparsed =
                parse_module(&printed).map_err(|e| format!("reparse: {e}\n{printed}"))?;
            if expect == Expect::Accept {
                verify(&reparsed).map_err(|e| format!("verify reprinted: {e}"))?;
            }
            let again = reparsed.to_string();
            if again != printed {
                return Err(format!(
                    "printing is not stable:\n--- first\n{printed}\n--- second\n{again}"
                ));
            }
            Ok(())
        }
    }
}

fn outcome(expect: Expect, path: &Path) -> Result<(), String> {
    let bytes = std::fs::read(path).unwrap();
    let text = String::from_utf8(bytes).expect("fixtures are UTF-8");
    let reason = match expect {
        Expect::Reject => std::fs::read_to_string(path.with_extension("ipuxla-error"))
            .unwrap_or_else(|e| panic!("{}: its .ipuxla-error: {e}", path.display())),
        _ => String::new(),
    };
    match catch_unwind(AssertUnwindSafe(|| check(expect, &text, &reason))) {
        Ok(r) => r,
        Err(_) => Err("PANICKED".into()),
    }
}

#[test]
fn xla_parser_test_modules_meet_xlas_expectations() {
    let all = fixtures();
    assert!(all.len() >= 300, "found only {} fixtures", all.len());
    let failures: Vec<String> = all
        .iter()
        .filter_map(|(name, expect, path)| {
            outcome(*expect, path)
                .err()
                .map(|why| format!("{name}: {why}"))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} fixtures fail:\n{}",
        failures.len(),
        all.len(),
        failures.join("\n")
    );
}

/// XLA's parser refuses operands nested 50,000 deep with "maximum recursion depth exceeded"
/// instead of overflowing its stack; so must ipuxla (on a test thread's 2 MiB stack).
#[test]
fn deeply_nested_operands_are_refused_not_overflowed() {
    let depth = 50_000;
    let mut text = String::from("f32[] ");
    for _ in 0..depth {
        text.push_str("add(f32[] ");
    }
    text.push_str("constant(0)");
    for _ in 0..depth {
        text.push_str(", f32[] constant(0))");
    }
    let err = parse_module(&text).expect_err("50,000 nested operands are refused");
    assert!(err.line > 0, "{err}");
}

/// Nesting just inside the limit parses (on a test thread's 2 MiB stack, unoptimised too),
/// names every nested instruction and infers the shapes left out.
#[test]
fn nesting_within_the_limit_parses() {
    let depth = 60;
    let mut text = String::from("HloModule m\nENTRY e {\n  p = f32[] parameter(0)\n  ROOT r = ");
    for _ in 0..depth {
        text.push_str("add(p, ");
    }
    text.push('p');
    for _ in 0..depth {
        text.push(')');
    }
    text.push_str("\n}\n");
    let module = parse_module(&text).unwrap();
    verify(&module).unwrap();
    let entry = module.entry_computation();
    assert_eq!(entry.instructions().count(), depth + 1);
    assert_eq!(entry.root_instr().shape.to_string(), "f32[]");
    assert!(entry.instructions().any(|(_, i)| i.name == "add.anon.58"));
}
