//! XLA's reference schedulers, for comparison only (never CHOOSE_BEST candidates): the
//! list scheduler (ready node freeing the most bytes net of what it defines first) and
//! the DFS scheduler (post order visiting the operand with the largest cumulative
//! footprint first). XLA's post-order scheduler is `MakeInstructionPostOrder`, the same as
//! POST_ORDER.

use super::graph::Graph;
use super::post_order::dfs_from;
use super::state::State;

/// XLA's ListMemoryScheduler.
pub fn xla_list(g: &Graph) -> Vec<usize> {
    let mut st = State::new(g);
    let mut out = Vec::with_capacity(g.len());
    while st.done < g.len() {
        let v = st
            .ready()
            .into_iter()
            .max_by_key(|&v| {
                let net = st.freed_by(v) as i64 - g.defined_bytes(v) as i64;
                (net, std::cmp::Reverse(v))
            })
            .expect("a DAG always has a ready node");
        st.push(v);
        out.push(v);
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
    let mut done = vec![false; n];
    let mut out = Vec::with_capacity(n);
    let order = |_: usize, preds: &[usize]| {
        let mut p = preds.to_vec();
        p.sort_by_key(|&x| (std::cmp::Reverse(cumulative[x]), x));
        p
    };
    let starts: Vec<usize> = (0..n).filter(|&v| g.succs[v].is_empty()).collect();
    for s in starts {
        dfs_from(g, s, &mut done, &mut out, order);
    }
    out
}
