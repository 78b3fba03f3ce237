//! `optimal`: the exact minimum-peak schedule by search over the sets of scheduled nodes
//! (memoised), for computations of at most [`OPTIMAL_MAX`] nodes. An oracle for tests.

use super::graph::Graph;
use super::state::State;
use std::collections::HashMap;

/// The largest computation `optimal` accepts.
pub const OPTIMAL_MAX: usize = 24;

/// The minimum-peak order, or `None` when `g` has more than [`OPTIMAL_MAX`] nodes.
pub fn optimal(g: &Graph) -> Option<Vec<usize>> {
    if g.len() > OPTIMAL_MAX {
        return None;
    }
    let mut st = State::new(g);
    let mut memo: HashMap<u32, (u64, usize)> = HashMap::new();
    best(&mut st, 0, &mut memo);
    let (mut mask, mut out) = (0u32, Vec::with_capacity(g.len()));
    while out.len() < g.len() {
        let (_, v) = memo[&mask];
        out.push(v);
        mask |= 1 << v;
    }
    Some(out)
}

/// The lowest peak over all completions of the schedule `mask`, and the next node to take.
fn best(st: &mut State, mask: u32, memo: &mut HashMap<u32, (u64, usize)>) -> u64 {
    if st.done == st.graph().len() {
        return 0;
    }
    if let Some(&(peak, _)) = memo.get(&mask) {
        return peak;
    }
    let mut result = (u64::MAX, usize::MAX);
    for v in st.ready() {
        let t = st.push(v);
        let peak = if t >= result.0 {
            t
        } else {
            t.max(best(st, mask | (1 << v), memo))
        };
        st.pop(v);
        if peak < result.0 {
            result = (peak, v);
        }
    }
    memo.insert(mask, result);
    result.0
}
