//! Shrinking a module the differential check refuses to a small one it refuses alike, for
//! a regression fixture (`fixtures/fuzz-regressions/`).
//!
//! [`shrink`] makes one change at a time to the entry computation and keeps it when the
//! check still fails the same way ([`failure_kind`]: a mismatch stays a mismatch, an error
//! an error of the same words), until no change is kept:
//! - the result: one leaf of a root tuple instead of the tuple;
//! - an instruction replaced by its value as a constant (what the evaluator computes for it,
//!   when every device computes the same), so what computes it goes: a parameter becomes a
//!   constant too, and the fixture needs no inputs;
//! - an instruction bypassed: its readers read one of its operands of its shape instead;
//! - the parameters removed once nothing reads any (a fixture without inputs); while some
//!   are read they all stay, so the generator makes the same inputs for the shrunk module.
//!
//! After each change, what nothing reads goes, and computations nothing calls. Candidates
//! the verifier or the evaluator refuses are not kept.

use xla_ir::literal::ArrayLiteral;
use xla_ir::{InstrId, Instruction, Literal, Module, Op};

/// A module and its inputs, one list per device.
#[derive(Clone, Debug)]
pub struct Case {
    /// The module.
    pub module: Module,
    /// Each device's arguments (one list for a module on one device).
    pub inputs: Vec<Vec<Literal>>,
}

/// What a failure is, for keeping a shrink that fails the same way: `None` for a module
/// the evaluator refuses (a candidate the shrinker broke), `"mismatch"` for outputs that
/// differ, else the error's words after the run that met it (digits and quoted names left
/// out: they change as the module shrinks).
pub fn failure_kind(error: &str) -> Option<String> {
    if error.starts_with("evaluator") || error.starts_with("the generator") {
        return None;
    }
    if error.contains(": element ") && error.contains(", expected ") {
        return Some("mismatch".into());
    }
    let words = error.split_once("): ").map_or(error, |(_, rest)| rest);
    let mut kind = String::new();
    let mut quoted = false;
    for c in words.chars() {
        match c {
            '\'' | '"' | '`' => quoted = !quoted,
            _ if quoted || c.is_ascii_digit() => {}
            _ => kind.push(c),
        }
    }
    Some(kind)
}

/// `case` shrunk while `check` fails it as it does `case` ([`failure_kind`]); `case` itself
/// if `check` passes it. `check` may panic: a panic is a failure of its own kind.
pub fn shrink(case: &Case, check: &dyn Fn(&Case) -> Result<(), String>) -> Case {
    let kind_of = |c: &Case| -> Option<String> {
        if xla_ir::verify(&c.module).is_err() {
            return None;
        }
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(c)));
        match outcome {
            Ok(Ok(())) => None,
            Ok(Err(e)) => failure_kind(&e),
            Err(_) => Some("panic".into()),
        }
    };
    let Some(kind) = kind_of(case) else {
        return case.clone();
    };
    let fails = |c: &Case| kind_of(c).as_ref() == Some(&kind);
    let mut best = case.clone();
    loop {
        let mut kept = false;
        for candidate in one_output(&best) {
            if fails(&candidate) {
                best = candidate;
                kept = true;
                break;
            }
        }
        // From the root back: freezing a late instruction takes its whole cone with it.
        let order: Vec<InstrId> = best.module.entry_computation().order().to_vec();
        for &id in order.iter().rev() {
            if !best.module.entry_computation().order().contains(&id) {
                continue;
            }
            let candidates = frozen(&best, id).into_iter().chain(bypassed(&best, id));
            for candidate in candidates {
                if fails(&candidate) {
                    best = candidate;
                    kept = true;
                    break;
                }
            }
        }
        if let Some(candidate) = without_unread_parameters(&best)
            && fails(&candidate)
        {
            best = candidate;
            kept = true;
        }
        if !kept {
            return best;
        }
    }
}

/// For a root tuple of several values, the case with each array leaf alone as the result.
fn one_output(case: &Case) -> Vec<Case> {
    let entry = case.module.entry_computation();
    let root = entry.root_instr();
    if !matches!(root.op, Op::Tuple) || root.operands.len() < 2 {
        return Vec::new();
    }
    (root.operands.iter())
        .filter(|&&o| entry.instr(o).shape.as_array().is_some())
        .map(|&o| {
            let mut c = case.clone();
            let entry = entry_mut(&mut c.module);
            entry.root = o;
            tidy(&mut c.module);
            c
        })
        .collect()
}

/// The case with `id` replaced by a constant of its value, if it is an array other than a
/// constant and every device computes the same value for it.
fn frozen(case: &Case, id: InstrId) -> Option<Case> {
    let entry = case.module.entry_computation();
    let instr = entry.instr(id);
    if matches!(instr.op, Op::Constant { .. }) || instr.shape.as_array().is_none() {
        return None;
    }
    let value = value_of(case, id)?;
    let mut c = case.clone();
    let constant = Instruction::new(
        instr.name.clone(),
        Op::Constant {
            literal: Literal::Array(value),
        },
        &[],
        instr.shape.clone(),
    );
    replace(&mut c.module, id, |entry| entry.push(constant)).ok()?;
    Some(c)
}

/// What the evaluator computes for `id` of the entry, if it is one array on every device.
fn value_of(case: &Case, id: InstrId) -> Option<ArrayLiteral> {
    let mut probe = case.module.clone();
    entry_mut(&mut probe).root = id;
    tidy(&mut probe);
    let values = match case.inputs.len() {
        1 => vec![xla_ir::eval::evaluate(&probe, &case.inputs[0]).ok()?],
        _ => xla_ir::eval::evaluate_replicated(&probe, &case.inputs).ok()?,
    };
    let first = values.first()?;
    if values.iter().any(|v| v != first) {
        return None;
    }
    match first {
        Literal::Array(a) => Some(a.clone()),
        _ => None,
    }
}

/// The cases with `id`'s readers reading one of its operands of its shape instead.
fn bypassed(case: &Case, id: InstrId) -> Vec<Case> {
    let entry = case.module.entry_computation();
    let instr = entry.instr(id);
    let mut operands: Vec<InstrId> = (instr.operands.iter())
        .copied()
        .filter(|&o| entry.instr(o).shape == instr.shape)
        .collect();
    operands.dedup();
    operands
        .into_iter()
        .filter_map(|o| {
            let mut c = case.clone();
            replace(&mut c.module, id, |_| o).ok()?;
            Some(c)
        })
        .collect()
}

/// The case without parameters when nothing reads any of them (each device's inputs then
/// empty); `None` otherwise. Parameters some of which are read all stay, so that the
/// generator's inputs for the shrunk module are those of the module it came from.
fn without_unread_parameters(case: &Case) -> Option<Case> {
    let entry = case.module.entry_computation();
    let parameters = entry.parameters();
    let read = (entry.order().iter())
        .flat_map(|&i| entry.instr(i).operands.iter())
        .chain([&entry.root])
        .any(|o| parameters.contains(o));
    if parameters.is_empty() || read {
        return None;
    }
    let mut c = case.clone();
    entry_mut(&mut c.module).remove(&parameters).ok()?;
    for inputs in &mut c.inputs {
        inputs.clear();
    }
    Some(c)
}

/// Replaces `id` in the entry by the instruction `with` gives (a new one it pushes, placed
/// where `id` was, or one before it): readers read it, then what nothing reads goes.
fn replace(
    module: &mut Module,
    id: InstrId,
    with: impl FnOnce(&mut xla_ir::Computation) -> InstrId,
) -> Result<(), String> {
    let entry = entry_mut(module);
    let before: Vec<InstrId> = entry.order().to_vec();
    let new = with(entry);
    let readers: Vec<InstrId> = entry.order().to_vec();
    for reader in readers {
        let instr = entry.instr_mut(reader);
        for o in instr
            .operands
            .iter_mut()
            .chain(&mut instr.control_predecessors)
        {
            if *o == id {
                *o = new;
            }
        }
    }
    if entry.root == id {
        entry.root = new;
    }
    if !before.contains(&new) {
        // Pushed last: it moves to where `id` stands.
        let mut order = Vec::with_capacity(before.len() + 1);
        for &i in &before {
            if i == id {
                order.push(new);
            }
            order.push(i);
        }
        entry.set_schedule(order)?;
    }
    tidy(module);
    Ok(())
}

/// Removes what the entry's root does not need (parameters stay), the computations
/// nothing calls, and the header's account of the entry's signature.
fn tidy(module: &mut Module) {
    let entry = entry_mut(module);
    let mut needed = std::collections::HashSet::new();
    let mut stack = vec![entry.root];
    while let Some(i) = stack.pop() {
        if needed.insert(i) {
            let instr = entry.instr(i);
            stack.extend(instr.operands.iter().chain(&instr.control_predecessors));
        }
    }
    let dead: Vec<InstrId> = (entry.order().iter().copied())
        .filter(|i| !needed.contains(i) && !matches!(entry.instr(*i).op, Op::Parameter { .. }))
        .collect();
    entry
        .remove(&dead)
        .expect("nothing kept reads a removed instruction: kept ones are the root's cone");
    // The header's entry layout and aliases describe the module before it shrank.
    module.entry_computation_layout = None;
    module.input_output_alias.clear();
    module.retain_reachable();
}

/// The entry computation, to change.
fn entry_mut(module: &mut Module) -> &mut xla_ir::Computation {
    let entry = module.entry;
    module.computation_mut(entry)
}

/// The module's text for a fixture: a first line `/* fuzz seed=S devices=D: about */` (the
/// seed whose inputs it takes, `xla_ir::generate::inputs` or `device_inputs`), then the
/// module.
pub fn fixture_text(case: &Case, seed: u64, about: &str) -> String {
    let devices = case.inputs.len();
    let mut text = format!("/* fuzz seed={seed} devices={devices}: {about} */\n");
    text.push_str(&case.module.to_string());
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

/// The seed and devices of a fixture's first line ([`fixture_text`]), if it has them.
pub fn fixture_origin(text: &str) -> Option<(u64, usize)> {
    let line = text.lines().next()?.strip_prefix("/* fuzz ")?;
    let value = |key: &str| -> Option<u64> {
        let rest = line.split_once(key)?.1;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    };
    Some((value("seed=")?, value("devices=")? as usize))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(text: &str, inputs: Vec<Literal>) -> Case {
        Case {
            module: xla_ir::parse_module(text).unwrap(),
            inputs: vec![inputs],
        }
    }

    /// A check that fails while the module still negates something: everything else goes,
    /// the parameter becomes a constant and the result one leaf.
    #[test]
    fn a_module_shrinks_to_what_keeps_it_failing() {
        let c = case(
            "HloModule m
ENTRY main {
  x = f32[3] parameter(0)
  e = f32[3] exponential(x)
  n = f32[3] negate(e)
  a = f32[3] add(n, x)
  t = f32[3] tanh(a)
  ROOT r = (f32[3], f32[3]) tuple(t, e)
}",
            vec![Literal::Array(ArrayLiteral::vector_f32(&[1.0, 2.0, 3.0]))],
        );
        let check = |c: &Case| {
            let negates = (c.module.entry_computation().order().iter()).any(|&i| {
                matches!(
                    c.module.entry_computation().instr(i).op,
                    Op::Unary(xla_ir::UnaryOp::Negate)
                )
            });
            match negates {
                true => Err("IPU Model (4 tiles): output 0: element 1 is 2, expected 1".into()),
                false => Ok(()),
            }
        };
        let small = shrink(&c, &check);
        let entry = small.module.entry_computation();
        let ops: Vec<&str> = (entry.order().iter())
            .map(|&i| entry.instr(i).op.name())
            .collect();
        assert_eq!(ops, ["constant", "negate"], "{}", small.module);
        assert!(entry.root_instr().shape.as_array().is_some());
        assert_eq!(small.inputs, vec![Vec::<Literal>::new()]);
        assert!(check(&small).is_err());
    }

    /// A check that passes gives the case back unchanged.
    #[test]
    fn a_passing_case_is_left_alone() {
        let c = case(
            "HloModule m
ENTRY main {
  x = f32[2] parameter(0)
  ROOT n = f32[2] negate(x)
}",
            vec![Literal::Array(ArrayLiteral::vector_f32(&[1.0, 2.0]))],
        );
        let small = shrink(&c, &|_| Ok(()));
        assert_eq!(small.module, c.module);
    }

    #[test]
    fn failures_are_kinds_without_numbers_or_names() {
        assert_eq!(
            failure_kind(
                "IPU Model (4 tiles), device 2, output 2: element 395 is -0.1, expected -0.2 (...)"
            ),
            Some("mismatch".into())
        );
        assert_eq!(failure_kind("evaluator: bad"), None);
        assert_eq!(
            failure_kind("IPU Model (4 tiles): compute set 'fusion.3' ran out of 624 bytes"),
            Some("compute set  ran out of  bytes".into())
        );
    }
}
