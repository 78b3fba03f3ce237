//! The exact solver for small computations: every subset of the candidate moves within
//! the budget, the one with the lowest estimated peak (ties: the least work). It judges
//! the heuristic on graphs of at most [`MAX_INSTRUCTIONS`] instructions (Checkmate solves
//! the same choice as an integer program; with at most [`MAX_MOVES`] moves enumeration is
//! exact and quick).

use super::moves::{apply, candidates};
use super::{Recomputed, budget_of, peak_of, work};
use std::collections::HashMap;
use xla_ir::Computation;
use xla_ir::ids::CompId;

/// Most instructions a computation may have for the exact solver.
pub const MAX_INSTRUCTIONS: usize = 40;
/// Most candidate moves it enumerates the subsets of.
pub const MAX_MOVES: usize = 20;

/// The best subset of `c`'s candidate moves, or None when `c` is too big.
pub fn recompute(
    c: &Computation,
    peaks: &HashMap<CompId, u64>,
) -> Option<(Computation, Recomputed)> {
    if c.len() > MAX_INSTRUCTIONS {
        return None;
    }
    let moves = candidates(c);
    if moves.len() > MAX_MOVES {
        return None;
    }
    let (work_before, budget) = budget_of(c);
    let costs: Vec<u64> = moves
        .iter()
        .map(|m| work(c, c.instr(m.value)).max(1))
        .collect();
    let peak_before = peak_of(c, peaks);
    let mut best = (peak_before, 0u64, 0u32);
    for mask in 1u32..(1 << moves.len()) {
        let cost: u64 = (0..moves.len())
            .filter(|k| mask & (1 << k) != 0)
            .map(|k| costs[k])
            .sum();
        if cost > budget {
            continue;
        }
        let chosen: Vec<_> = (0..moves.len())
            .filter(|k| mask & (1 << k) != 0)
            .map(|k| moves[k])
            .collect();
        let p = peak_of(&apply(c, &chosen), peaks);
        if (p, cost) < (best.0, best.1) {
            best = (p, cost, mask);
        }
    }
    let chosen: Vec<_> = (0..moves.len())
        .filter(|k| best.2 & (1 << k) != 0)
        .map(|k| moves[k])
        .collect();
    let report = Recomputed {
        peak_before,
        peak_after: best.0,
        values: chosen.len(),
        work_added: best.1,
        work_before,
    };
    Some((apply(c, &chosen), report))
}
