//! The moves recomputation makes on a scheduled computation: a cheap value whose uses are
//! far apart is computed again right before its later uses instead of being kept live in
//! between (XLA's rematerialisation; Graphcore's `allow_recompute`). A move is `(value,
//! position)`: a copy of the value's instruction placed before the instruction at
//! `position`, and every use at or after it reading the copy. Moves compose: a copy whose
//! operand is itself recomputed before it reads that operand's copy, so chains are
//! recomputed from their checkpoints.

use std::collections::HashMap;
use xla_ir::ids::InstrId;
use xla_ir::{Computation, Instruction, Op};

pub use xla_ir::call_config::CHECKPOINT_TARGET;

/// One move: recompute `value` before the instruction at `position` of the order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    /// The value recomputed.
    pub value: InstrId,
    /// Where its copy goes (an index into the computation's order).
    pub position: usize,
}

/// Whether an instruction is worth recomputing: cheap and without effects — element-wise
/// arithmetic, conversions, and data movement that copies or broadcasts (what Graphcore
/// recomputes first: casts, normalisation and non-linearities). Never a random or
/// stateful op, a reduction, a product, or a checkpoint; nor a reshape, which the lowering
/// makes a view of its operand (recomputing it frees nothing).
pub fn recomputable(instr: &Instruction) -> bool {
    instr.shape.as_array().is_some()
        && instr.control_predecessors.is_empty()
        && matches!(
            instr.op,
            Op::Unary(_)
                | Op::Binary(_)
                | Op::Compare { .. }
                | Op::Select
                | Op::Clamp
                | Op::Convert
                | Op::Broadcast { .. }
                | Op::Transpose { .. }
                | Op::Slice { .. }
                | Op::Iota { .. }
        )
}

/// The candidate moves of `c` (scheduled): for every recomputable value, recompute it
/// before the first use after the longest stretch in which it is only kept.
pub fn candidates(c: &Computation) -> Vec<Move> {
    let order = c.order();
    let mut uses: HashMap<InstrId, Vec<usize>> = HashMap::new();
    for (k, &id) in order.iter().enumerate() {
        for &o in &c.instr(id).operands {
            uses.entry(o).or_default().push(k);
        }
    }
    let mut moves = Vec::new();
    for (k, &id) in order.iter().enumerate() {
        let instr = c.instr(id);
        if id == c.root || !recomputable(instr) {
            continue;
        }
        let Some(at) = uses.get(&id) else { continue };
        let mut points: Vec<usize> = at.clone();
        points.sort_unstable();
        points.dedup();
        let mut last = k;
        let mut best: Option<(usize, usize)> = None;
        for &p in &points {
            if p > last + 1 && best.is_none_or(|(gap, _)| p - last > gap) {
                best = Some((p - last, p));
            }
            last = p;
        }
        if let Some((_, p)) = best {
            moves.push(Move {
                value: id,
                position: p,
            });
        }
    }
    moves
}

/// `c` with `moves` made (at most one per value): each copy is named `NAME.recomputed`
/// and placed before the instruction at its position, copies of operands before copies
/// of their users.
pub fn apply(c: &Computation, moves: &[Move]) -> Computation {
    let order = c.order();
    let position = c.positions();
    let at: HashMap<InstrId, usize> = moves.iter().map(|m| (m.value, m.position)).collect();
    let mut placed: Vec<Vec<InstrId>> = vec![Vec::new(); order.len()];
    for m in moves {
        placed[m.position].push(m.value);
    }
    for copies in &mut placed {
        copies.sort_by_key(|v| position[v]);
    }
    let mut new = Computation::new(c.name.clone());
    new.reserve(order.len() + moves.len());
    let mut original: HashMap<InstrId, InstrId> = HashMap::new();
    let mut copy: HashMap<InstrId, InstrId> = HashMap::new();
    // The value an instruction at position `q` reads for operand `o`.
    let read = |o: InstrId,
                q: usize,
                original: &HashMap<InstrId, InstrId>,
                copy: &HashMap<InstrId, InstrId>| {
        match at.get(&o) {
            Some(&p) if p <= q => copy[&o],
            _ => original[&o],
        }
    };
    for (q, &id) in order.iter().enumerate() {
        for &v in &placed[q] {
            let mut instr = c.instr(v).clone();
            instr.name = format!("{}.recomputed", instr.name);
            instr.location = None;
            for o in instr.operands.iter_mut() {
                *o = read(*o, q, &original, &copy);
            }
            copy.insert(v, new.push(instr));
        }
        let mut instr = c.instr(id).clone();
        for o in instr.operands.iter_mut() {
            *o = read(*o, q, &original, &copy);
        }
        for o in instr.control_predecessors.iter_mut() {
            *o = original[o];
        }
        original.insert(id, new.push(instr));
    }
    new.root = original[&c.root];
    new
}
