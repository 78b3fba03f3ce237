//! SHORTEST_PATH: each node costs its shortest distance (over predecessor edges) to an
//! output, the root's or any other's; parameters are then costed past every real distance,
//! the farthest smallest, so they become live as late as possible. A list scheduler emits
//! the cheapest ready node first: work close to the outputs finishes first.

use super::graph::Graph;
use std::collections::{BTreeSet, VecDeque};

/// The SHORTEST_PATH order of `g`.
pub fn shortest_path(g: &Graph) -> Vec<usize> {
    let n = g.len();
    let mut dist = vec![usize::MAX; n];
    let outputs: Vec<usize> = std::iter::once(g.root)
        .chain((0..n).filter(|&v| v != g.root && g.succs[v].is_empty()))
        .collect();
    for o in outputs {
        let mut seen = vec![usize::MAX; n];
        let mut q = VecDeque::from([o]);
        seen[o] = 0;
        while let Some(v) = q.pop_front() {
            dist[v] = dist[v].min(seen[v]);
            for &p in &g.preds[v] {
                if seen[p] == usize::MAX {
                    seen[p] = seen[v] + 1;
                    q.push_back(p);
                }
            }
        }
    }
    let mut params: Vec<usize> = (0..n).filter(|&v| g.parameter[v]).collect();
    params.sort_by_key(|&v| (std::cmp::Reverse(dist[v]), v));
    for (k, v) in params.into_iter().enumerate() {
        dist[v] = n + k;
    }
    list_schedule(g, |v| dist[v])
}

/// Emits the ready node with the smallest `(cost, index)` until all are emitted.
pub fn list_schedule(g: &Graph, cost: impl Fn(usize) -> usize) -> Vec<usize> {
    let n = g.len();
    let mut waiting: Vec<usize> = g.preds.iter().map(Vec::len).collect();
    let mut ready: BTreeSet<(usize, usize)> = (0..n)
        .filter(|&v| waiting[v] == 0)
        .map(|v| (cost(v), v))
        .collect();
    let mut out = Vec::with_capacity(n);
    while let Some(&first) = ready.iter().next() {
        ready.remove(&first);
        let v = first.1;
        out.push(v);
        for &s in &g.succs[v] {
            waiting[s] -= 1;
            if waiting[s] == 0 {
                ready.insert((cost(s), s));
            }
        }
    }
    out
}
