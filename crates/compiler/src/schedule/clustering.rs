//! CLUSTERING: chains of nodes with a single user form clusters; each cluster scores the
//! bytes its nodes free (all operand bytes read minus bytes defined, parameters defining
//! nothing); ready clusters are emitted most-freeing first (ties: the earliest node), each
//! in chain order. A cluster's external edges leave only its last node, so the cluster
//! graph has no cycles.

use super::graph::Graph;
use std::collections::BinaryHeap;

/// The CLUSTERING order of `g`.
pub fn clustering(g: &Graph) -> Vec<usize> {
    let n = g.len();
    let mut cluster_of = vec![usize::MAX; n];
    let mut clusters: Vec<Vec<usize>> = Vec::new();
    for v in 0..n {
        if cluster_of[v] != usize::MAX {
            continue;
        }
        let c = clusters.len();
        let mut chain = vec![v];
        cluster_of[v] = c;
        let mut cur = v;
        while let [u] = g.succs[cur][..] {
            if cluster_of[u] != usize::MAX {
                break;
            }
            cluster_of[u] = c;
            chain.push(u);
            cur = u;
        }
        clusters.push(chain);
    }
    let freed = |v: usize| -> i64 {
        let read: u64 = g.uses[v].iter().map(|&b| g.buffers[b].size).sum();
        let defined = if g.parameter[v] {
            0
        } else {
            g.defined_bytes(v).max(g.callee[v])
        };
        read as i64 - defined as i64
    };
    let score: Vec<i64> = clusters
        .iter()
        .map(|c| c.iter().map(|&v| freed(v)).sum())
        .collect();
    let mut waiting = vec![0usize; clusters.len()];
    let mut deps: Vec<Vec<usize>> = vec![Vec::new(); clusters.len()];
    for (c, nodes) in clusters.iter().enumerate() {
        let mut from: Vec<usize> = nodes
            .iter()
            .flat_map(|&v| g.preds[v].iter().map(|&p| cluster_of[p]))
            .filter(|&pc| pc != c)
            .collect();
        from.sort_unstable();
        from.dedup();
        waiting[c] = from.len();
        for pc in from {
            deps[pc].push(c);
        }
    }
    let mut heap: BinaryHeap<(i64, std::cmp::Reverse<usize>)> = (0..clusters.len())
        .filter(|&c| waiting[c] == 0)
        .map(|c| (score[c], std::cmp::Reverse(clusters[c][0])))
        .collect();
    let mut out = Vec::with_capacity(n);
    while let Some((_, std::cmp::Reverse(first))) = heap.pop() {
        let c = cluster_of[first];
        out.extend_from_slice(&clusters[c]);
        for &d in &deps[c] {
            waiting[d] -= 1;
            if waiting[d] == 0 {
                heap.push((score[d], std::cmp::Reverse(clusters[d][0])));
            }
        }
    }
    out
}
