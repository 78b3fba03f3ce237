//! A training pipeline stage in its *stashing* form: the forward pass also returns the
//! forward values its backward pass reads (the residuals), and the backward pass reads
//! them instead of computing them again. This is what a stage costs without recomputation
//! (the IPU keeps a stage's activations in its stash until its backward pass), whatever
//! form the stage came in: the frontend builds backward passes that run the forward pass
//! again from the saved inputs, and this file turns such a stage into the one that keeps
//! its activations. With `allow_recompute`, [`super::pipeline`] then recomputes the
//! residuals from the stashed inputs.
//!
//! The backward pass's forward part is found by structure: an instruction of the backward
//! computation is a forward value when the forward computation has one with the same
//! signature (op, attributes, called computations by structure, shapes) on the
//! counterparts of its operands; weights and saved values are the counterparts of the
//! forward pass's weights and saved results. Values built from constants alone are built
//! again in the backward pass rather than stashed; ops with effects never match.

use super::pipeline::{keep_results, remove_dead, result_leaves};
use crate::outline::signature::{Fingerprints, has_effects};
use std::collections::{HashMap, HashSet};
use xla_ir::ids::InstrId;
use xla_ir::{Computation, Instruction, Module, Op};

/// A stage's forward and backward computations in the stashing form.
#[derive(Debug, Clone)]
pub struct Stashing {
    /// `(weights..., inputs...) -> (outputs..., residuals...)`.
    pub forward: Module,
    /// `(weights..., residuals..., gradients...) -> (the original backward's results)`.
    pub backward: Module,
    /// How many residuals the forward pass returns last.
    pub saved: usize,
}

/// The stashing form of a stage whose forward computation `forward` returns its outputs
/// and then `saved` values, and whose `backward` takes `(weights..., saved...,
/// gradients...)`; the first `weights` parameters of both are the weights.
pub fn stashing_form(
    forward: &Module,
    backward: &Module,
    weights: usize,
    saved: usize,
) -> Stashing {
    let fc = forward.entry_computation();
    let bc = backward.entry_computation();
    let f_results = result_leaves(fc);
    let outputs = f_results.len() - saved;
    let counterpart = counterparts(forward, backward, weights, &f_results[outputs..]);
    let from_constants = built_from_constants(bc);
    let is_weight = |id: InstrId| matches!(bc.instr(id).op, Op::Parameter { number } if (number as usize) < weights);
    // The backward part, and the forward values it reads.
    let backward_part: Vec<InstrId> = bc
        .order()
        .iter()
        .copied()
        .filter(|id| !counterpart.contains_key(id) && !is_parameter(bc.instr(*id)))
        .collect();
    let mut read = HashSet::new();
    for &id in &backward_part {
        let instr = bc.instr(id);
        for &o in instr.operands.iter().chain(&instr.control_predecessors) {
            if counterpart.contains_key(&o) && !from_constants.contains(&o) && !is_weight(o) {
                read.insert(o);
            }
        }
    }
    let residuals: Vec<InstrId> = bc
        .order()
        .iter()
        .copied()
        .filter(|id| read.contains(id))
        .collect();
    // Forward: the outputs, then the residuals' counterparts.
    let kept: Vec<InstrId> = f_results[..outputs]
        .iter()
        .copied()
        .chain(residuals.iter().map(|r| counterpart[r]))
        .collect();
    let new_forward = keep_results(forward, &kept, "stashing");
    // Backward: weights, residuals and gradients as parameters, then the backward part.
    let mut out = backward.clone();
    out.name = format!("{}.stashing", backward.name);
    out.entry_computation_layout = None;
    let mut entry = Computation::new(bc.name.clone());
    let mut map: HashMap<InstrId, InstrId> = HashMap::new();
    let b_params = bc.parameters();
    for &p in &b_params[..weights] {
        map.insert(p, entry.push(bc.instr(p).clone()));
    }
    for (j, &r) in residuals.iter().enumerate() {
        let mut p = Instruction::new(
            format!("{}.stashed", bc.instr(r).name),
            Op::Parameter {
                number: (weights + j) as u64,
            },
            &[],
            bc.instr(r).shape.clone(),
        );
        p.metadata = bc.instr(r).metadata.clone();
        map.insert(r, entry.push(p));
    }
    for (k, &p) in b_params[weights + saved..].iter().enumerate() {
        let mut instr = bc.instr(p).clone();
        instr.op = Op::Parameter {
            number: (weights + residuals.len() + k) as u64,
        };
        map.insert(p, entry.push(instr));
    }
    for &id in &backward_part {
        copy_into(bc, id, &mut entry, &mut map);
    }
    entry.root = map[&bc.root];
    remove_dead(&mut entry);
    *out.computation_mut(backward.entry) = entry;
    out.retain_reachable();
    Stashing {
        forward: new_forward,
        backward: out,
        saved: residuals.len(),
    }
}

fn is_parameter(instr: &Instruction) -> bool {
    matches!(instr.op, Op::Parameter { .. })
}

/// Copies `id` of `from` into `into`, and first what it reads that is not there yet (only
/// values built from constants can be missing).
fn copy_into(
    from: &Computation,
    id: InstrId,
    into: &mut Computation,
    map: &mut HashMap<InstrId, InstrId>,
) -> InstrId {
    if let Some(&done) = map.get(&id) {
        return done;
    }
    let mut instr = from.instr(id).clone();
    let operands: Vec<InstrId> = instr
        .operands
        .iter()
        .map(|&o| copy_into(from, o, into, map))
        .collect();
    let preds: Vec<InstrId> = instr
        .control_predecessors
        .iter()
        .map(|&p| copy_into(from, p, into, map))
        .collect();
    instr.operands = operands.into_iter().collect();
    instr.control_predecessors = preds;
    let new = into.push(instr);
    map.insert(id, new);
    new
}

/// The instructions of `c` computed from constants alone (no parameter among what they
/// read, no effects): built again where needed rather than stashed.
fn built_from_constants(c: &Computation) -> HashSet<InstrId> {
    let mut set = HashSet::new();
    for &id in c.order() {
        let instr = c.instr(id);
        let pure = !is_parameter(instr)
            && !has_effects(&instr.op)
            && !matches!(instr.op, Op::RngBitGenerator { .. })
            && instr.shape.as_array().is_some();
        if pure && instr.operands.iter().all(|o| set.contains(o)) {
            set.insert(id);
        }
    }
    set
}

/// For each instruction of `backward`'s entry that computes a forward value, the
/// instruction of `forward`'s entry that computes it: weights map to weights, the saved
/// parameters to `saved_results`, the rest by signature on mapped operands.
fn counterparts(
    forward: &Module,
    backward: &Module,
    weights: usize,
    saved_results: &[InstrId],
) -> HashMap<InstrId, InstrId> {
    let fc = forward.entry_computation();
    let bc = backward.entry_computation();
    let mut f_prints = Fingerprints::default();
    let mut b_prints = Fingerprints::default();
    let matchable = |instr: &Instruction| {
        !is_parameter(instr)
            && (!has_effects(&instr.op) || super::pipeline::is_checkpoint(&instr.op))
            && !matches!(instr.op, Op::Tuple)
            && instr.control_predecessors.is_empty()
    };
    let mut known: HashMap<(u64, Vec<InstrId>), InstrId> = HashMap::new();
    for &id in fc.order() {
        let instr = fc.instr(id);
        if matchable(instr) {
            let key = (
                f_prints.signature(forward, fc, instr),
                instr.operands.to_vec(),
            );
            known.entry(key).or_insert(id);
        }
    }
    let f_params = fc.parameters();
    let mut map: HashMap<InstrId, InstrId> = HashMap::new();
    for &id in bc.order() {
        let instr = bc.instr(id);
        if let Op::Parameter { number } = instr.op {
            let n = number as usize;
            if n < weights {
                map.insert(id, f_params[n]);
            } else if n < weights + saved_results.len() {
                // A saved result that copies a value stands for that value.
                let mut f = saved_results[n - weights];
                while let (Op::Unary(xla_ir::UnaryOp::Copy), [from]) =
                    (&fc.instr(f).op, &fc.instr(f).operands[..])
                {
                    f = *from;
                }
                map.insert(id, f);
            }
            continue;
        }
        if !matchable(instr) {
            continue;
        }
        let Some(operands) = instr
            .operands
            .iter()
            .map(|o| map.get(o).copied())
            .collect::<Option<Vec<InstrId>>>()
        else {
            continue;
        };
        let key = (b_prints.signature(backward, bc, instr), operands);
        if let Some(&f) = known.get(&key) {
            map.insert(id, f);
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;
    use xla_ir::literal::{ArrayLiteral, Literal};

    fn parse(text: &str) -> Module {
        xla_ir::parse_module(text).unwrap()
    }

    /// A stage as the frontend builds it: the forward saves its input, the backward runs
    /// the forward again (`h`, `y`) and then its vector-Jacobian product.
    const FORWARD: &str = "HloModule fwd\n\nENTRY f {\n  w = f32[3] parameter(0)\n  x = f32[3] parameter(1)\n  h = f32[3] multiply(w, x)\n  y = f32[3] tanh(h)\n  keep = f32[3] copy(x)\n  ROOT t = (f32[3], f32[3]) tuple(y, keep)\n}\n";
    const BACKWARD: &str = "HloModule bwd\n\nENTRY b {\n  w = f32[3] parameter(0)\n  x = f32[3] parameter(1)\n  g = f32[3] parameter(2)\n  h = f32[3] multiply(w, x)\n  y = f32[3] tanh(h)\n  yy = f32[3] multiply(y, y)\n  one = f32[] constant(1)\n  ones = f32[3] broadcast(one), dimensions={}\n  d = f32[3] subtract(ones, yy)\n  dh = f32[3] multiply(d, g)\n  dx = f32[3] multiply(dh, w)\n  dw = f32[3] multiply(dh, x)\n  ROOT t = (f32[3], f32[3]) tuple(dx, dw)\n}\n";

    fn vector(v: &[f32]) -> Literal {
        Literal::Array(ArrayLiteral::vector_f32(v))
    }

    #[test]
    fn the_backward_pass_reads_the_forward_values_instead_of_recomputing_them() {
        let (fwd, bwd) = (parse(FORWARD), parse(BACKWARD));
        let s = stashing_form(&fwd, &bwd, 1, 1);
        xla_ir::verify(&s.forward).unwrap();
        xla_ir::verify(&s.backward).unwrap();
        // Residuals: x (dw reads it) and y (the derivative reads it); h is not read by
        // the backward part, the constant is built again.
        assert_eq!(s.saved, 2, "{}\n{}", s.forward, s.backward);
        let text = s.backward.to_string();
        assert!(!text.contains("tanh"), "the forward part is gone: {text}");
        assert!(text.contains("constant(1)"), "{text}");
        let (w, x, g) = (
            vector(&[0.5, -1.0, 2.0]),
            vector(&[1.0, 0.25, -0.5]),
            vector(&[1.0, 2.0, 3.0]),
        );
        let Literal::Tuple(f) =
            xla_ir::eval::evaluate(&s.forward, &[w.clone(), x.clone()]).unwrap()
        else {
            panic!("a tuple")
        };
        let mut args = vec![w.clone()];
        args.extend(f[1..].iter().cloned());
        args.push(g.clone());
        let got = xla_ir::eval::evaluate(&s.backward, &args).unwrap();
        let want = xla_ir::eval::evaluate(&bwd, &[w, x, g]).unwrap();
        assert_eq!(got, want);
    }

    #[test]
    fn a_backward_pass_that_reads_saved_values_keeps_them() {
        let fwd = parse(
            "HloModule fwd\n\nENTRY f {\n  w = f32[3] parameter(0)\n  x = f32[3] parameter(1)\n  h = f32[3] multiply(w, x)\n  y = f32[3] tanh(h)\n  ROOT t = (f32[3], f32[3]) tuple(y, h)\n}\n",
        );
        let bwd = parse(
            "HloModule bwd\n\nENTRY b {\n  w = f32[3] parameter(0)\n  h = f32[3] parameter(1)\n  g = f32[3] parameter(2)\n  c = f32[3] cosine(h)\n  dh = f32[3] multiply(c, g)\n  ROOT t = (f32[3]) tuple(dh)\n}\n",
        );
        let s = stashing_form(&fwd, &bwd, 1, 1);
        assert_eq!(s.saved, 1);
        let text = s.forward.to_string();
        assert!(text.contains("tuple(y, h)"), "{text}");
    }
}
