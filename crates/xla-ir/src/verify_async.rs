//! The verifier's checks of XLA's asynchronous ops (`async-start`, `async-update`,
//! `async-done` and their sugar `X-start`, `X-update`, `X-done`), which ipuxla reads as
//! [`Op::Foreign`]: the start's shape is `((operands), outputs, state..)`, an update keeps
//! its operand's shape, updates and dones continue one start (same wrapped op, same
//! computation, same execution thread), and no computation is wrapped by two starts.

use crate::ids::{CompId, InstrId};
use crate::{Computation, Module, Op, Shape};
use std::collections::HashMap;

/// Which step of an async chain an instruction is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Start,
    Update,
    Done,
}

/// An instruction's place in an async chain: its phase, the op it wraps when written as
/// sugar (`custom-call-start` wraps `custom-call`), its `calls=` and execution thread.
struct AsyncStep<'a> {
    phase: Phase,
    wrapped: Option<&'a str>,
    calls: Option<CompId>,
    thread: Option<&'a str>,
}

fn step(op: &Op) -> Option<AsyncStep<'_>> {
    let Op::Foreign {
        opcode,
        called,
        attributes,
    } = op
    else {
        return None;
    };
    let (wrapped, phase) = match opcode.as_str() {
        "async-start" => (None, Phase::Start),
        "async-update" => (None, Phase::Update),
        "async-done" => (None, Phase::Done),
        other => {
            let (wrapped, phase) = crate::parser::async_sugar(other)?;
            let phase = match phase {
                "start" => Phase::Start,
                "update" => Phase::Update,
                _ => Phase::Done,
            };
            (Some(wrapped), phase)
        }
    };
    let calls = called
        .iter()
        .find(|(name, _)| name == "calls")
        .and_then(|(_, c)| c.first().copied());
    let thread = attributes
        .iter()
        .find(|(name, _)| name == "async_execution_thread")
        .map(|(_, v)| v.trim_matches('"'));
    Some(AsyncStep {
        phase,
        wrapped,
        calls,
        thread,
    })
}

/// Checks every async chain of `comp`; `wrapped_by` collects which start wraps each
/// computation, across the module.
pub(crate) fn check(
    module: &Module,
    comp: &Computation,
    wrapped_by: &mut HashMap<CompId, InstrId>,
) -> Result<(), (InstrId, String)> {
    for (id, instr) in comp.instructions() {
        let Some(this) = step(&instr.op) else {
            continue;
        };
        if this.phase == Phase::Start {
            let well_formed = matches!(&instr.shape, Shape::Tuple(items)
                if items.len() >= 2 && matches!(items[0], Shape::Tuple(_)));
            if !well_formed {
                return Err((
                    id,
                    "AsyncStart expects the op shape to be in the form of ((async-operands), async-outputs, state).".into(),
                ));
            }
            if let Some(c) = this.calls
                && wrapped_by.insert(c, id).is_some()
            {
                return Err((
                    id,
                    format!(
                        "Computation {} is called by more than one async op",
                        module.computation(c).name
                    ),
                ));
            }
            continue;
        }
        // An update or done continues the chain of its single operand.
        let previous = match instr.operands[..] {
            [o] => step(&comp.instr(o).op)
                .filter(|s| s.phase != Phase::Done)
                .map(|s| (o, s)),
            _ => None,
        };
        let Some((operand, _)) = previous else {
            return Err((
                id,
                "AsyncUpdate and AsyncDone expect a single async op as their operand.".into(),
            ));
        };
        if this.phase == Phase::Update
            && !instr.shape.same_ignoring_layout(&comp.instr(operand).shape)
        {
            return Err((
                id,
                "AsyncUpdate expects the op shape to be the same as the operand shape.".into(),
            ));
        }
        // Walk back to the start of the chain.
        let mut at = operand;
        let start = loop {
            let s = step(&comp.instr(at).op).expect("the chain holds async steps only");
            if s.phase == Phase::Start {
                break s;
            }
            match comp.instr(at).operands[..] {
                [o] if step(&comp.instr(o).op).is_some() => at = o,
                _ => {
                    return Err((
                        id,
                        "AsyncUpdate and AsyncDone expect a single async op as their operand."
                            .into(),
                    ));
                }
            }
        };
        if let (Some(expected), Some(got)) = (start.wrapped, this.wrapped)
            && expected != got
        {
            return Err((
                id,
                format!("Expect async wrapped opcode to be {expected}, but got {got}"),
            ));
        }
        if let (Some(expected), Some(got)) = (start.calls, this.calls)
            && expected != got
        {
            return Err((
                id,
                format!(
                    "Expect async_wrapped_computation to be {}, but got {}",
                    module.computation(expected).name,
                    module.computation(got).name
                ),
            ));
        }
        let expected_thread = start.thread.unwrap_or("main");
        if let Some(got) = this.thread
            && got != expected_thread
        {
            return Err((
                id,
                format!("Expect async_execution_thread to be {expected_thread}, but got {got}"),
            ));
        }
    }
    Ok(())
}
