//! XLA's reference schedulers, for comparison only (never CHOOSE_BEST candidates): the
//! list scheduler (ready node freeing the most bytes net of what it defines first) and
//! the DFS scheduler (post order visiting the operand with the largest cumulative
//! footprint first). XLA's post-order scheduler is `MakeInstructionPostOrder`, the same as
//! POST_ORDER. LOOK_AHEAD's beam uses the list rule ([`list_order`]) as one way of
//! completing a prefix.

use super::graph::Graph;
use super::post_order::post_order_by;
use super::state::State;

/// XLA's ListMemoryScheduler.
pub fn xla_list(g: &Graph) -> Vec<usize> {
    list_order(&mut State::new(g))
}

/// The unscheduled nodes of `st` in the order XLA's list scheduler takes them: the ready
/// node that frees the most bytes net of what it defines first (then program order).
/// `st` is left as it was.
pub fn list_order(st: &mut State) -> Vec<usize> {
    let g = st.graph();
    let mut ready = st.ready();
    let mut out = Vec::with_capacity(g.len() - st.done);
    while !ready.is_empty() {
        let k = (0..ready.len())
            .max_by_key(|&k| {
                let v = ready[k];
                let net = st.freed_by(v) as i64 - g.defined_bytes(v) as i64;
                (net, std::cmp::Reverse(v))
            })
            .expect("ready is not empty");
        let v = ready.swap_remove(k);
        st.push(v);
        out.push(v);
        ready.extend(g.succs[v].iter().filter(|&&s| st.waiting[s] == 0));
    }
    for &v in out.iter().rev() {
        st.pop(v);
    }
    out
}

/// XLA's DFSMemoryScheduler.
pub fn xla_dfs(g: &Graph) -> Vec<usize> {
    let n = g.len();
    let mut cumulative = vec![0u64; n];
    for v in 0..n {
        // Nodes are in program order, so predecessors come first. Shared predecessors count
        // once per path, as XLA's does; saturate rather than overflow on wide DAGs.
        cumulative[v] = g.preds[v].iter().fold(g.defined_bytes(v), |acc, &p| {
            acc.saturating_add(cumulative[p])
        });
    }
    let heaviest: Vec<Vec<usize>> = (0..n)
        .map(|v| {
            let mut p = g.preds[v].clone();
            p.sort_by_key(|&x| (std::cmp::Reverse(cumulative[x]), x));
            p
        })
        .collect();
    post_order_by(g, vec![false; n], |v| &heaviest[v])
}
