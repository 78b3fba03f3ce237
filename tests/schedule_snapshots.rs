//! Every scheduling algorithm on the small modules in `fixtures/schedules/`: the order of
//! each computation and the peak, as `ipuxla schedule` prints them, pinned as insta
//! snapshots (`cargo insta review` after an intended change).

use compiler::schedule::{Algorithm, Limits, schedule_module};
use ipuxla::compiler;
use std::path::Path;

fn check(fixture: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/schedules")
        .join(format!("{fixture}.hlo"));
    let module = xla_ir::parse_module(&std::fs::read_to_string(path).unwrap()).unwrap();
    for a in Algorithm::ALL {
        let text = schedule_module(&module, a, Limits::default()).to_text(&module);
        insta::assert_snapshot!(format!("{fixture}__{}", a.name()), text);
    }
}

#[test]
fn two_branches() {
    check("two_branches");
}

#[test]
fn shared_operand() {
    check("shared_operand");
}

#[test]
fn loop_with_a_callee() {
    check("loop");
}
