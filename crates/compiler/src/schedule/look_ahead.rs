//! LOOK_AHEAD: at each step, every ready node is tried with a bounded search over the
//! schedule prefixes that follow it (`maximum_scheduler_lookahead_depth` steps deep, at
//! most `maximum_scheduler_search_space_size` nodes, split evenly between children); a
//! node scores the highest live bytes on its best continuation, and the lowest score is
//! scheduled (ties: program order). Branch and bound cuts continuations that cannot win.
//! Each step expands at most the search size per candidate, so it always terminates.

use super::graph::Graph;
use super::state::State;

/// The LOOK_AHEAD order of `g`.
pub fn look_ahead(g: &Graph, depth: usize, search_size: usize) -> Vec<usize> {
    let mut st = State::new(g);
    let mut out = Vec::with_capacity(g.len());
    while st.done < g.len() {
        let ready = st.ready();
        let budget = (search_size / ready.len().max(1)).max(1);
        // Score, then bytes live after the step (free memory early), then program order.
        let mut best: Option<(u64, u64, usize)> = None;
        for &v in &ready {
            let t = st.push(v);
            let after = st.live;
            let bound = best.map_or(u64::MAX, |b| b.0.saturating_add(1));
            let score = t.max(search(&mut st, depth.saturating_sub(1), budget, bound));
            st.pop(v);
            if best.is_none_or(|b| (score, after) < (b.0, b.1)) {
                best = Some((score, after, v));
            }
        }
        let (_, _, v) = best.expect("a DAG always has a ready node");
        st.push(v);
        out.push(v);
    }
    out
}

/// The lowest possible maximum live bytes over continuations up to `depth` steps, using at
/// most `budget` nodes; `bound`: stop once this cannot be beaten.
fn search(st: &mut State, depth: usize, budget: usize, bound: u64) -> u64 {
    if depth == 0 || budget <= 1 || st.done == st.graph().len() {
        return st.live;
    }
    let ready = st.ready();
    let share = (budget - 1) / ready.len().max(1);
    let mut best = u64::MAX;
    for v in ready {
        let t = st.push(v);
        let score = if t >= best.min(bound) {
            t
        } else {
            t.max(search(st, depth - 1, share, best.min(bound)))
        };
        st.pop(v);
        best = best.min(score);
        if share == 0 {
            break;
        }
    }
    best
}
