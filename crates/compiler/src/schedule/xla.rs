//! XLA's reference schedulers, for comparison only (never CHOOSE_BEST candidates): the
//! list scheduler (ready node freeing the most bytes net of what it defines first) and
//! the DFS scheduler (post order visiting the operand with the largest cumulative
//! footprint first). XLA's post-order scheduler is `MakeInstructionPostOrder`, the same as
//! POST_ORDER. LOOK_AHEAD's beam uses the list rule ([`list_order`]) as one way of
//! completing a prefix.

use super::graph::Graph;
use super::post_order::post_order_by;
use super::state::{State, Tally};

/// XLA's ListMemoryScheduler.
pub fn xla_list(g: &Graph) -> Vec<usize> {
    list_order(&State::new(g))
}

/// The unscheduled nodes of `st` in the order XLA's list scheduler takes them: the ready
/// node that frees the most bytes net of what it defines first (then program order).
pub fn list_order(st: &State) -> Vec<usize> {
    list_order_and_peak(st).0
}

/// [`list_order`], and the most bytes live during any of its steps (from `st`'s state).
/// It schedules on copies of the counts it needs (readers left, unscheduled operands),
/// not on a whole [`State`].
pub fn list_order_and_peak(st: &State) -> (Vec<usize>, u64) {
    let g = st.graph();
    let mut tally = st.tally().clone();
    let mut waiting = st.waiting.clone();
    let mut peak = 0;
    let net_of = |tally: &Tally, v: usize| tally.freed_by(v) as i64 - g.defined_bytes(v) as i64;
    let mut ready = st.ready_unordered().to_vec();
    // Each ready node's net bytes, kept up to date: a push changes another node's only
    // where it leaves that node the last reader of a buffer.
    let mut net: Vec<i64> = ready.iter().map(|&v| net_of(&tally, v)).collect();
    let mut at = vec![usize::MAX; g.len()];
    for (k, &v) in ready.iter().enumerate() {
        at[v] = k;
    }
    let mut out = Vec::with_capacity(g.len() - st.done);
    while !ready.is_empty() {
        // Keys differ (node ids do), so the order `ready` holds them in does not matter.
        let k = (0..ready.len())
            .max_by_key(|&k| (net[k], std::cmp::Reverse(ready[k])))
            .expect("ready is not empty");
        let v = ready.swap_remove(k);
        net.swap_remove(k);
        at[v] = usize::MAX;
        if let Some(&moved) = ready.get(k) {
            at[moved] = k;
        }
        peak = peak.max(tally.push(v).0);
        out.push(v);
        for &b in &g.uses[v] {
            if tally.readers_left(b) == 1 {
                for &u in &g.buffers[b].users {
                    if let Some(&k) = at.get(u).filter(|&&k| k != usize::MAX) {
                        net[k] = net_of(&tally, u);
                    }
                }
            }
        }
        for &s in &g.succs[v] {
            waiting[s] -= 1;
            if waiting[s] == 0 {
                at[s] = ready.len();
                ready.push(s);
                net.push(net_of(&tally, s));
            }
        }
    }
    (out, peak)
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
