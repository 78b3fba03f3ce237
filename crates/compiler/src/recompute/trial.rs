//! The peak a move would give, found without making it. The heuristic weighs every
//! candidate move at every step; making each one (a new computation, its graph, its
//! liveness) cost a fuzzed seed 14 % of its compile. A move `(v, p)` changes where `v`'s
//! buffer dies, adds the copy's buffer, and keeps the buffers `v` reads live until the
//! copy reads them; every other buffer keeps its definer and readers and so its interval,
//! moved one step on from `p`. So the peak after a move is the current liveness profile
//! with a copy step inserted at `p`, less `v`'s bytes where its buffer no longer lives,
//! plus the copy's and its operands' where they now do. Values that name `v`'s
//! buffer (tuples, bitcasts, in-place updates: [`aliased_value`]) are followed, so the
//! result is exactly the estimator's peak of the computation with the move made.

use super::moves::Move;
use crate::schedule::{Graph, aliased_value, live_bytes};
use std::collections::HashMap;
use xla_ir::Computation;
use xla_ir::ids::CompId;

/// A scheduled computation's liveness, ready to weigh moves on it.
pub struct Trials<'a> {
    comp: &'a Computation,
    graph: Graph,
    /// The buffers of each node's value.
    values: Vec<Vec<usize>>,
    /// Each node by its instruction's arena index.
    node: Vec<usize>,
    /// Bytes live at each step (the estimator's profile).
    at: Vec<u64>,
    /// Bytes live entering each step, before it defines anything.
    entering: Vec<u64>,
    /// The last step needing each buffer (`None`: in the result).
    dies: Vec<Option<usize>>,
}

impl<'a> Trials<'a> {
    /// The trials of `comp` in its order (callees' peaks from `peaks`).
    pub fn new(comp: &'a Computation, peaks: &HashMap<CompId, u64>) -> Trials<'a> {
        let (graph, values) = Graph::with_values(comp, peaks);
        let n = graph.len();
        let arena = graph.ids.iter().map(|id| id.index() + 1).max().unwrap_or(0);
        let mut node = vec![usize::MAX; arena];
        for (i, id) in graph.ids.iter().enumerate() {
            node[id.index()] = i;
        }
        let order: Vec<usize> = (0..n).collect();
        let at = live_bytes(&graph, &order);
        let entering = (0..n)
            .map(|k| at[k] - graph.defined_bytes(k) - graph.callee[k])
            .collect();
        let dies = graph.buffers.iter().map(|b| b.dies_at(|u| u)).collect();
        Trials {
            comp,
            graph,
            values,
            node,
            at,
            entering,
            dies,
        }
    }

    /// The current peak.
    pub fn peak(&self) -> u64 {
        self.at.iter().copied().max().unwrap_or(0)
    }

    /// The current peak and the number of steps at it.
    pub fn level(&self) -> Level {
        Level::of(self.at.iter().copied())
    }

    /// The peak after making `m` alone (what `peak_of(&apply(comp, &[m]), peaks)` gives).
    pub fn peak_after(&self, m: Move) -> u64 {
        self.level_after(m).peak
    }

    /// The peak after making `m` alone, and the number of steps at it.
    pub fn level_after(&self, m: Move) -> Level {
        let g = &self.graph;
        let (v, p) = (self.node[m.value.index()], m.position);
        // A recomputable value defines exactly one buffer (an array, not an alias).
        let [bv] = g.defines[v][..] else {
            unreachable!("a recomputed value defines one buffer")
        };
        let size = g.buffers[bv].size;
        // The copy's buffer, by an index no real buffer has.
        let bc = g.buffers.len();
        // Values that change: nodes from `p` on that name `v`'s buffer through `v` read
        // after `p`, now naming the copy's.
        let mut changed: HashMap<usize, Vec<usize>> = HashMap::new();
        let copy = [bc];
        // The last steps (numbered with the copy at `p`) reading each buffer.
        let mut v_read = v;
        let mut copy_read = p;
        for &i in &g.buffers[bv].users {
            if i < p {
                v_read = v_read.max(i);
                continue;
            }
            let instr = self.comp.instr(g.ids[i]);
            let operand = |k: usize| -> &[usize] {
                let o = self.node[instr.operands[k].index()];
                if o == v {
                    &copy
                } else {
                    changed.get(&o).map_or(&self.values[o], |value| value)
                }
            };
            let reads = |b: usize| (0..instr.operands.len()).any(|k| operand(k).contains(&b));
            if reads(bv) {
                v_read = v_read.max(i + 1);
            }
            if reads(bc) {
                copy_read = copy_read.max(i + 1);
            }
            let value = aliased_value(self.comp, instr, operand);
            if let Some(value) = value.filter(|value| value.contains(&bc)) {
                changed.insert(i, value);
            }
        }
        let n = g.len();
        let result = changed.get(&g.root).unwrap_or(&self.values[g.root]);
        let last = n; // the last step with the copy in
        let v_dies = if result.contains(&bv) { last } else { v_read };
        let copy_dies = if result.contains(&bc) {
            last
        } else {
            copy_read
        };
        // Where `v`'s buffer lived before, in the same numbering.
        let was = match self.dies[bv] {
            None => last,
            Some(old) if old >= p => old + 1,
            Some(old) => old,
        };
        // The buffers the copy reads live on to it.
        let kept: Vec<(usize, u64)> = (g.uses[v].iter())
            .filter_map(|&b| Some((self.dies[b].filter(|&dies| dies < p)?, g.buffers[b].size)))
            .collect();
        Level::of((0..=last).map(|k| {
            let base = match k.cmp(&p) {
                std::cmp::Ordering::Less => self.at[k],
                std::cmp::Ordering::Equal => self.entering[p],
                std::cmp::Ordering::Greater => self.at[k - 1],
            };
            let freed = if k > v_dies && k <= was { size } else { 0 };
            let held = if k >= p && k <= copy_dies { size } else { 0 };
            let kept: u64 = kept
                .iter()
                .filter(|&&(dies, _)| k > dies && k <= p)
                .map(|&(_, size)| size)
                .sum();
            base - freed + held + kept
        }))
    }
}

/// A liveness profile's peak and how many steps reach it: a move that leaves the peak but
/// takes a step off it is progress on a plateau (several steps at the peak, which no one
/// move can all lower).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Level {
    /// Peak live bytes.
    pub peak: u64,
    /// Steps at the peak.
    pub steps: usize,
}

impl Level {
    /// The level of a profile (bytes live at each step).
    pub fn of(at: impl Iterator<Item = u64>) -> Level {
        at.fold(Level { peak: 0, steps: 0 }, |l, bytes| {
            match bytes.cmp(&l.peak) {
                std::cmp::Ordering::Greater => Level {
                    peak: bytes,
                    steps: 1,
                },
                std::cmp::Ordering::Equal => Level {
                    steps: l.steps + 1,
                    ..l
                },
                std::cmp::Ordering::Less => l,
            }
        })
    }
}
