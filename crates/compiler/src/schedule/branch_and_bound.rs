//! LOOK_AHEAD's last phase: a depth-first branch and bound over schedule prefixes, seeded
//! with the best schedule found so far and stopped after a fixed amount of work.
//!
//! A prefix is cut when its peak already reaches the incumbent's, or when the same set of
//! nodes was reached before with a peak no higher (the bytes live after a set do not depend
//! on its order, so the earlier visit dominates). Children are tried lowest step first, so
//! good schedules come early and cut the rest. On small computations the search usually
//! completes, and then its answer is the minimum peak; on large ones the budget runs out
//! and the incumbent (or the best improvement found) is returned. The search also stops at
//! once when the incumbent meets a lower bound no schedule can beat: the largest step,
//! a node with all its operands live plus what it defines.

use super::graph::Graph;
use super::state::{SetHasher, State, node_key};
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::BuildHasherDefault;

/// The best of `incumbent` and what `work` pushes of branch and bound find.
pub fn improve(g: &Graph, incumbent: (u64, Vec<usize>), work: u64) -> (u64, Vec<usize>) {
    let floor = lower_bound(g);
    if incumbent.0 <= floor {
        return incumbent;
    }
    let mut search = Search {
        st: State::new(g),
        best: incumbent,
        floor,
        work,
        seen: HashMap::default(),
        keys: (0..g.len() as u64).map(node_key).collect(),
        set: 0,
        path: Vec::with_capacity(g.len()),
        children: vec![Vec::new(); g.len()],
    };
    search.descend(0);
    search.best
}

/// No schedule peaks below the largest single step: a node's operands, its result and
/// the peak of what it calls are live together.
fn lower_bound(g: &Graph) -> u64 {
    (0..g.len())
        .map(|v| {
            let read: u64 = g.uses[v]
                .iter()
                .filter(|b| !g.defines[v].contains(b))
                .map(|&b| g.buffers[b].size)
                .sum();
            read + g.defined_bytes(v) + g.callee[v]
        })
        .max()
        .unwrap_or(0)
}

struct Search<'g> {
    st: State<'g>,
    best: (u64, Vec<usize>),
    floor: u64,
    work: u64,
    /// The lowest peak each visited set of scheduled nodes was reached with, by the set's
    /// hash (the search looks one up at nearly every node it visits; two sets of one 64-bit
    /// hash are as unlikely as in the beam's table of sets).
    seen: HashMap<u64, u64, BuildHasherDefault<SetHasher>>,
    /// A well-mixed key per node.
    keys: Vec<u64>,
    /// The scheduled set's hash: the XOR of its nodes' keys.
    set: u64,
    path: Vec<usize>,
    /// The children of the prefix at each depth, a buffer per depth kept between visits.
    children: Vec<Vec<(u64, u64, usize)>>,
}

impl Search<'_> {
    fn exhausted(&self) -> bool {
        self.st.pushes >= self.work || self.best.0 <= self.floor
    }

    fn descend(&mut self, peak: u64) {
        let n = self.st.graph().len();
        if self.st.done == n {
            if peak < self.best.0 {
                self.best = (peak, self.path.clone());
            }
            return;
        }
        if self.exhausted() {
            return;
        }
        match self.seen.entry(self.set) {
            Entry::Occupied(before) if *before.get() <= peak => return,
            Entry::Occupied(mut before) => *before.get_mut() = peak,
            Entry::Vacant(slot) => {
                slot.insert(peak);
            }
        }
        let depth = self.st.done;
        let mut children = std::mem::take(&mut self.children[depth]);
        children.clear();
        // Sorted by the whole key (nodes differ), so the order the ready nodes come in
        // does not matter. A child that reaches the incumbent's peak is never tried (the
        // incumbent only gets lower), so it is not sorted either.
        for k in 0..self.st.ready_unordered().len() {
            let v = self.st.ready_unordered()[k];
            let (t, live) = self.st.try_push(v);
            if peak.max(t) < self.best.0 {
                children.push((peak.max(t), live, v));
            }
        }
        children.sort_unstable();
        for &(child_peak, _, v) in &children {
            if child_peak >= self.best.0 || self.exhausted() {
                break;
            }
            self.st.push(v);
            self.set ^= self.keys[v];
            self.path.push(v);
            self.descend(child_peak);
            self.path.pop();
            self.set ^= self.keys[v];
            self.st.pop(v);
        }
        self.children[depth] = children;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::liveness::peak_liveness_bytes;

    #[test]
    fn finds_the_order_that_finishes_a_big_branch_first() {
        // Two branches 0->1 and 2->3 joined by 4; the program order (0 2 1 3 4) holds both
        // big buffers at once.
        let g = Graph::from_parts(
            vec![vec![], vec![], vec![0], vec![1], vec![2, 3]],
            &[100, 100, 1, 1, 1],
            4,
        );
        let start = vec![0, 1, 2, 3, 4];
        let (peak, order) = improve(&g, (peak_liveness_bytes(&g, &start), start), 1 << 20);
        assert!(g.is_valid_order(&order));
        assert_eq!(peak, peak_liveness_bytes(&g, &order));
        assert_eq!(peak, 102);
    }

    #[test]
    fn no_work_keeps_the_incumbent() {
        let g = Graph::from_parts(vec![vec![], vec![], vec![0, 1]], &[5, 5, 5], 2);
        let start = vec![1, 0, 2];
        let (peak, order) = improve(&g, (99, start.clone()), 0);
        assert_eq!((peak, order), (99, start));
    }
}
