//! Recomputation (`allow_recompute`): forward values the backward pass reads much later
//! are computed again before those reads instead of being kept live, trading cycles for
//! memory, as the IPU's small tile memory needs.
//!
//! - `moves`: what may be recomputed (cheap ops without effects; never a checkpoint) and
//!   where, and making a set of moves on a scheduled computation;
//! - `greedy`: the heuristic: at the liveness peak, the move that lowers the peak most per
//!   element recomputed, again until nothing lowers it or the budget is spent;
//! - `trial`: the peak a move would give, without making it (what the heuristic weighs);
//! - `exact`: every subset of the moves, for computations of at most
//!   [`exact::MAX_INSTRUCTIONS`] instructions: what the heuristic is judged against.
//!
//! The peak is the scheduler's liveness estimator's (`schedule::live_bytes`), the cost the
//! elements an op computes; both see the same moves.

pub mod exact;
pub mod greedy;
pub mod moves;
pub mod pipeline;
pub mod stash;
pub mod trial;

use crate::schedule::{Graph, live_bytes};
use std::collections::HashMap;
use xla_ir::ids::CompId;
use xla_ir::{Computation, Module, Op};

/// The share of a computation's element operations recomputation may add (matrix
/// products and convolutions count their multiply-adds): the seed's trade is memory for
/// "more compute", and the issue allows 30 % more cycles.
pub const BUDGET: f64 = 0.3;

/// The peak bytes the liveness estimator gives `c` in its order (callees' peaks from
/// `peaks`).
pub fn peak_of(c: &Computation, peaks: &HashMap<CompId, u64>) -> u64 {
    let g = Graph::of(c, peaks);
    let order: Vec<usize> = (0..g.len()).collect();
    live_bytes(&g, &order).into_iter().max().unwrap_or(0)
}

/// The peaks of every computation of `module` in its current order, callees first.
pub fn computation_peaks(module: &Module) -> HashMap<CompId, u64> {
    let mut peaks = HashMap::new();
    for c in module.post_order() {
        let p = peak_of(module.computation(c), &peaks);
        peaks.insert(c, p);
    }
    peaks
}

/// Element operations of one instruction: its result's elements, times the contracted
/// size for a product.
pub fn work(c: &Computation, instr: &xla_ir::Instruction) -> u64 {
    let elements = instr.shape.as_array().map_or(0, |a| a.element_count());
    match &instr.op {
        Op::Dot { .. } | Op::Convolution { .. } => {
            let operand = instr
                .operands
                .first()
                .and_then(|&o| c.instr(o).shape.as_array().map(|a| a.element_count()));
            let contracted = operand.map_or(1, |n| (n / elements.max(1)).max(1));
            elements * contracted
        }
        _ => elements,
    }
}

/// The element operations of `c`, and the most recomputation may add ([`BUDGET`]).
pub fn budget_of(c: &Computation) -> (u64, u64) {
    let total: u64 = c.order().iter().map(|&id| work(c, c.instr(id))).sum();
    (total, (BUDGET * total as f64) as u64)
}

/// What recomputing a computation did.
#[derive(Debug, Clone, PartialEq)]
pub struct Recomputed {
    /// Peak live bytes before.
    pub peak_before: u64,
    /// Peak live bytes after.
    pub peak_after: u64,
    /// Values recomputed.
    pub values: usize,
    /// Element operations added.
    pub work_added: u64,
    /// Element operations of the computation before.
    pub work_before: u64,
}

impl std::fmt::Display for Recomputed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pct = |a: u64, b: u64| 100.0 * (a as f64 - b as f64) / b.max(1) as f64;
        write!(
            f,
            "peak liveness {} -> {} B ({:+.1} %), {} values recomputed, {} element operations added ({:+.1} % of {})",
            self.peak_before,
            self.peak_after,
            pct(self.peak_after, self.peak_before),
            self.values,
            self.work_added,
            100.0 * self.work_added as f64 / self.work_before.max(1) as f64,
            self.work_before
        )
    }
}

/// Replaces every recomputation checkpoint of `c` by its operand (the value it pinned is
/// kept by then).
pub fn remove_checkpoints(c: &mut Computation) -> Result<usize, String> {
    let checkpoints: Vec<_> = c
        .order()
        .iter()
        .copied()
        .filter(|&id| {
            matches!(&c.instr(id).op, Op::CustomCall { target, .. } if target == moves::CHECKPOINT_TARGET)
        })
        .collect();
    if checkpoints.is_empty() {
        return Ok(0);
    }
    let operand: HashMap<_, _> = checkpoints
        .iter()
        .map(|&id| (id, c.instr(id).operands[0]))
        .collect();
    let resolve = |mut x| {
        while let Some(&o) = operand.get(&x) {
            x = o;
        }
        x
    };
    let order: Vec<_> = c.order().to_vec();
    for id in order {
        let instr = c.instr_mut(id);
        for o in instr.operands.iter_mut() {
            *o = resolve(*o);
        }
        for o in instr.control_predecessors.iter_mut() {
            *o = resolve(*o);
        }
    }
    c.root = resolve(c.root);
    c.remove(&checkpoints)?;
    Ok(checkpoints.len())
}
