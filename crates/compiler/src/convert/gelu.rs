//! `--gelu-replacement`: the nodes that compute a GELU by hand are replaced by one GELU
//! (`custom-call`, target `Gelu`, fused into one kernel on the IPU), as the seed's converter
//! replaces them with its IPU-optimised GELU. The caller names the GELU's nodes, its input
//! and the nodes that use its output; the form (tanh approximation or erf) is the one the
//! replaced nodes compute, so the values stay what they were.

use std::collections::HashSet;
use xla_ir::{Activation, Computation, InstrId, Instruction, Module, Op, UnaryOp};

/// Which instructions make up each GELU.
pub struct GeluRule<'a> {
    /// The GELU's own nodes.
    pub nodes: &'a dyn Fn(&Instruction) -> bool,
    /// The GELU's input.
    pub input: &'a dyn Fn(&Instruction) -> bool,
    /// The nodes that use the GELU's output.
    pub output_user: &'a dyn Fn(&Instruction) -> bool,
}

/// Replaces every GELU the rule names; returns how many, or what did not fit.
pub fn replace_gelu(module: &mut Module, rule: &GeluRule<'_>) -> Result<usize, String> {
    let ids: Vec<_> = module.computations().map(|(id, _)| id).collect();
    let mut replaced = 0;
    for id in ids {
        replaced += replace_in(module.computation_mut(id), rule)?;
    }
    Ok(replaced)
}

fn replace_in(comp: &mut Computation, rule: &GeluRule<'_>) -> Result<usize, String> {
    let mut replaced = 0;
    let mut made: Vec<(InstrId, InstrId)> = Vec::new(); // (GELU output, replacement)
    for user in comp.order().to_vec() {
        if !(rule.output_user)(comp.instr(user)) {
            continue;
        }
        for k in 0..comp.instr(user).operands.len() {
            let out = comp.instr(user).operands[k];
            if !(rule.nodes)(comp.instr(out)) {
                continue;
            }
            if let Some(&(_, gelu)) = made.iter().find(|(o, _)| *o == out) {
                comp.instr_mut(user).operands[k] = gelu;
                continue;
            }
            let (input, tanh) = trace(comp, out, rule)?;
            let shape = comp.instr(out).shape.clone();
            if !comp.instr(input).shape.same_ignoring_layout(&shape) {
                return Err(format!(
                    "the GELU ending at {} has input {} of shape {}, not its shape {shape}",
                    comp.instr(out).name,
                    comp.instr(input).name,
                    comp.instr(input).shape
                ));
            }
            let activation = Activation::Gelu { approximate: tanh };
            let mut gelu = Instruction::new(
                format!("{}.gelu", comp.instr(out).name),
                Op::CustomCall {
                    target: activation.target().to_string(),
                    called_computations: Vec::new(),
                    attributes: Vec::new(),
                },
                &[input],
                shape,
            );
            gelu.backend_config = activation.backend_config();
            let gelu = insert_after(comp, input, gelu);
            comp.instr_mut(user).operands[k] = gelu;
            made.push((out, gelu));
            replaced += 1;
        }
    }
    if replaced > 0 {
        drop_unused(comp, rule);
    }
    Ok(replaced)
}

/// The GELU's input (the one instruction the rule names as input that its nodes read) and
/// whether it is the tanh form.
fn trace(comp: &Computation, out: InstrId, rule: &GeluRule<'_>) -> Result<(InstrId, bool), String> {
    let mut inputs = HashSet::new();
    let mut seen = HashSet::new();
    let mut stack = vec![out];
    let mut tanh = false;
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        let instr = comp.instr(id);
        tanh |= instr.op == Op::Unary(UnaryOp::Tanh);
        for &o in &instr.operands {
            let operand = comp.instr(o);
            if (rule.input)(operand) {
                inputs.insert(o);
            } else if (rule.nodes)(operand) {
                stack.push(o);
            } else if !matches!(operand.op, Op::Constant { .. } | Op::Broadcast { .. }) {
                return Err(format!(
                    "the GELU ending at {} reads {}, which is neither one of its nodes nor its input",
                    comp.instr(out).name,
                    operand.name
                ));
            }
        }
    }
    match inputs.len() {
        1 => Ok((*inputs.iter().next().expect("one input"), tanh)),
        n => Err(format!(
            "the GELU ending at {} reads {n} instructions named as its input; it needs one",
            comp.instr(out).name
        )),
    }
}

/// Adds `instr` to the program order right after `after`.
fn insert_after(comp: &mut Computation, after: InstrId, instr: Instruction) -> InstrId {
    let id = comp.push(instr);
    let mut order = comp.order().to_vec();
    order.pop();
    let at = order
        .iter()
        .position(|&i| i == after)
        .map_or(order.len(), |p| p + 1);
    order.insert(at, id);
    comp.set_schedule(order)
        .expect("a value placed after its only operand keeps the order valid");
    id
}

/// Removes the GELU nodes (and the constants and broadcasts only they used) nothing reads.
fn drop_unused(comp: &mut Computation, rule: &GeluRule<'_>) {
    loop {
        let mut used = HashSet::new();
        used.insert(comp.root);
        for (_, instr) in comp.instructions() {
            used.extend(instr.operands.iter().copied());
            used.extend(instr.control_predecessors.iter().copied());
        }
        let dead: Vec<InstrId> = comp
            .order()
            .iter()
            .copied()
            .filter(|i| !used.contains(i))
            .filter(|&i| {
                let instr = comp.instr(i);
                (rule.nodes)(instr)
                    || matches!(instr.op, Op::Constant { .. } | Op::Broadcast { .. })
            })
            .collect();
        if dead.is_empty() {
            return;
        }
        comp.remove(&dead)
            .expect("only instructions nothing reads are removed");
    }
}
