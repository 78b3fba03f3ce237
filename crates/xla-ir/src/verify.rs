//! The verifier: checks that a module is well formed and that every instruction's declared
//! shape is what shape inference gives for its operands and attributes.
//!
//! It runs after parsing and after every pass. Each error names the computation, the
//! instruction and (for parsed modules) the source line and column.

use crate::ids::{CompId, InstrId};
use crate::shape_inference::infer_shape;
use crate::{Computation, Module, Op, SourceLocation};
use std::collections::HashMap;
use std::fmt;

/// A verification failure with the context needed to find it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct VerifyError {
    /// The computation the problem is in.
    pub computation: String,
    /// The instruction, when the problem is in one.
    pub instruction: Option<String>,
    /// Where the instruction was parsed from, if known.
    pub location: Option<SourceLocation>,
    /// What is wrong and what was expected.
    pub message: String,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "in computation {}", self.computation)?;
        if let Some(i) = &self.instruction {
            write!(f, ", instruction {i}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Checks the whole module; the first problem found is returned.
pub fn verify(module: &Module) -> Result<(), VerifyError> {
    if module.computation_count() == 0 || module.entry.index() >= module.computation_count() {
        return Err(VerifyError {
            computation: module.name.clone(),
            instruction: None,
            location: None,
            message: "the module has no entry computation".to_string(),
        });
    }
    check_call_graph(module)?;
    let mut wrapped_by = HashMap::new();
    for (_, comp) in module.computations() {
        // Async chains first: a malformed chain explains the shapes around it.
        crate::verify_async::check(module, comp, &mut wrapped_by)
            .map_err(|(id, message)| instruction_error(comp, id, message))?;
        verify_computation(module, comp)?;
    }
    crate::alias::check_aliases(module)
        .map_err(|message| computation_error(module.entry_computation(), message))
}

fn computation_error(comp: &Computation, message: String) -> VerifyError {
    VerifyError {
        computation: comp.name.clone(),
        instruction: None,
        location: None,
        message,
    }
}

fn instruction_error(comp: &Computation, id: InstrId, message: String) -> VerifyError {
    let instr = comp.instr(id);
    VerifyError {
        computation: comp.name.clone(),
        instruction: Some(instr.name.clone()),
        location: instr.location,
        message,
    }
}

/// Rejects computations that call themselves, directly or through others, and calls of
/// computations that do not exist.
fn check_call_graph(module: &Module) -> Result<(), VerifyError> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Active,
        Done,
    }
    let n = module.computation_count();
    let mut marks = vec![Mark::New; n];
    for (start, _) in module.computations() {
        if marks[start.index()] != Mark::New {
            continue;
        }
        // Iterative DFS keeping the active path for the error message.
        let mut stack: Vec<(CompId, Vec<CompId>, usize)> = Vec::new();
        let callees = |id: CompId| -> Result<Vec<CompId>, VerifyError> {
            let comp = module.computation(id);
            let mut out = Vec::new();
            for (instr_id, instr) in comp.instructions() {
                for callee in instr.op.called_computations() {
                    if callee.index() >= n {
                        return Err(instruction_error(
                            comp,
                            instr_id,
                            "calls a computation that does not exist".into(),
                        ));
                    }
                    out.push(callee);
                }
            }
            Ok(out)
        };
        marks[start.index()] = Mark::Active;
        stack.push((start, callees(start)?, 0));
        while let Some((id, next, i)) = stack.last_mut() {
            if *i == next.len() {
                marks[id.index()] = Mark::Done;
                stack.pop();
                continue;
            }
            let callee = next[*i];
            *i += 1;
            match marks[callee.index()] {
                Mark::Done => {}
                Mark::Active => {
                    let path: Vec<&str> = stack
                        .iter()
                        .map(|(c, _, _)| module.computation(*c).name.as_str())
                        .chain([module.computation(callee).name.as_str()])
                        .collect();
                    return Err(computation_error(
                        module.computation(callee),
                        format!(
                            "computations call each other in a cycle: {}",
                            path.join(" -> ")
                        ),
                    ));
                }
                Mark::New => {
                    marks[callee.index()] = Mark::Active;
                    let callee_callees = callees(callee)?;
                    stack.push((callee, callee_callees, 0));
                }
            }
        }
    }
    Ok(())
}

fn verify_computation(module: &Module, comp: &Computation) -> Result<(), VerifyError> {
    if comp.is_empty() {
        return Err(computation_error(comp, "has no instructions".into()));
    }
    let mut position: HashMap<InstrId, usize> = HashMap::with_capacity(comp.len());
    let mut names: HashMap<&str, InstrId> = HashMap::with_capacity(comp.len());
    let mut parameters: Vec<(u64, InstrId)> = Vec::new();
    for (pos, (id, instr)) in comp.instructions().enumerate() {
        if names.insert(instr.name.as_str(), id).is_some() {
            return Err(instruction_error(
                comp,
                id,
                "the name is used twice in this computation".into(),
            ));
        }
        for (i, operand) in instr
            .operands
            .iter()
            .chain(&instr.control_predecessors)
            .enumerate()
        {
            if !position.contains_key(operand) {
                let what = if i < instr.operands.len() {
                    "operand"
                } else {
                    "control predecessor"
                };
                return Err(instruction_error(
                    comp,
                    id,
                    format!("{what} {i} is not an earlier instruction of this computation"),
                ));
            }
        }
        position.insert(id, pos);
        if let Op::Parameter { number } = instr.op {
            parameters.push((number, id));
        }
        let operand_shapes: Vec<&crate::Shape> = instr
            .operands
            .iter()
            .map(|o| &comp.instr(*o).shape)
            .collect();
        let inferred = infer_shape(&instr.op, &operand_shapes, Some(&instr.shape), module)
            .map_err(|m| instruction_error(comp, id, m))?;
        if !inferred.same_ignoring_layout(&instr.shape) {
            return Err(instruction_error(
                comp,
                id,
                format!(
                    "the declared shape is {} but {} gives {inferred}",
                    instr.shape,
                    instr.op.name()
                ),
            ));
        }
    }
    if !position.contains_key(&comp.root) {
        return Err(computation_error(
            comp,
            "the root is not one of its instructions".into(),
        ));
    }
    parameters.sort();
    for (expected, (number, id)) in parameters.iter().enumerate() {
        if *number != expected as u64 {
            let message = if *number < expected as u64 {
                format!("parameter number {number} is used twice")
            } else {
                format!(
                    "parameter numbers must be 0..{} without gaps; {expected} is missing",
                    parameters.len()
                )
            };
            return Err(instruction_error(comp, *id, message));
        }
    }
    Ok(())
}
