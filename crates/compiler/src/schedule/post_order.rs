//! POST_ORDER: XLA's `MakeInstructionPostOrder`: a depth-first walk from each node nothing
//! depends on (in program order, the root among them), emitting a node after its
//! predecessors (operands, then control predecessors, in order).

use super::graph::Graph;

/// The post order of `g`.
pub fn post_order(g: &Graph) -> Vec<usize> {
    post_order_by(g, vec![false; g.len()], |v| &g.preds[v])
}

/// The nodes not yet `done` in a post order from every node nothing depends on (in
/// program order); `order_preds(v)` lists `v`'s predecessors in the order they are visited.
pub fn post_order_by<'o>(
    g: &Graph,
    mut done: Vec<bool>,
    order_preds: impl Fn(usize) -> &'o [usize],
) -> Vec<usize> {
    let mut out = Vec::with_capacity(done.iter().filter(|d| !**d).count());
    // A node is on the stack until it is done, so one set serves every walk.
    let mut on_stack = vec![false; g.len()];
    let mut stack: Vec<(usize, usize)> = Vec::new();
    for start in (0..g.len()).filter(|&v| g.succs[v].is_empty()) {
        if done[start] {
            continue;
        }
        // An iterative depth-first walk: each entry is a node and how many of its
        // predecessors were visited.
        stack.push((start, 0));
        on_stack[start] = true;
        while let Some((v, k)) = stack.last_mut() {
            let preds = order_preds(*v);
            if *k < preds.len() {
                let p = preds[*k];
                *k += 1;
                if !done[p] && !on_stack[p] {
                    on_stack[p] = true;
                    stack.push((p, 0));
                }
            } else {
                let v = *v;
                done[v] = true;
                out.push(v);
                stack.pop();
            }
        }
    }
    out
}

/// What the heaviest-first walk weighs each node by, and the orders it visits each node's
/// predecessors in (fixed by the graph, so computed once).
pub struct Weights {
    /// Bytes needed to compute the node's cone as if it were a tree (Sethi–Ullman):
    /// operands in heaviest-first order, each result held while the next is computed.
    pub need: Vec<u64>,
    /// Paths into the node from the cone's leaves (saturating): how much shared work its
    /// cone holds.
    pub cone: Vec<u64>,
    heaviest: Vec<Vec<usize>>,
    largest_cone: Vec<Vec<usize>>,
}

impl Weights {
    /// The weights of `g`'s nodes.
    pub fn of(g: &Graph) -> Weights {
        let n = g.len();
        let mut w = Weights {
            need: vec![0; n],
            cone: vec![0; n],
            heaviest: Vec::with_capacity(n),
            largest_cone: Vec::with_capacity(n),
        };
        for v in 0..n {
            // A node's predecessors come before it: their weights are final.
            let beyond = |x: usize| w.need[x].saturating_sub(g.defined_bytes(x));
            let mut heaviest = g.preds[v].clone();
            heaviest.sort_by_key(|&x| {
                (
                    std::cmp::Reverse(beyond(x)),
                    std::cmp::Reverse(w.cone[x]),
                    x,
                )
            });
            let mut largest_cone = g.preds[v].clone();
            largest_cone.sort_by_key(|&x| {
                (
                    std::cmp::Reverse(w.cone[x]),
                    std::cmp::Reverse(beyond(x)),
                    x,
                )
            });
            let (mut held, mut peak) = (0u64, 0u64);
            for &p in &heaviest {
                peak = peak.max(held.saturating_add(w.need[p]));
                held = held.saturating_add(g.defined_bytes(p));
            }
            w.need[v] = peak.max(
                held.saturating_add(g.defined_bytes(v))
                    .saturating_add(g.callee[v]),
            );
            w.cone[v] = g.preds[v]
                .iter()
                .fold(1u64, |acc, &p| acc.saturating_add(w.cone[p]));
            w.heaviest.push(heaviest);
            w.largest_cone.push(largest_cone);
        }
        w
    }

    /// `v`'s predecessors ordered by what computing each costs beyond its result, largest
    /// first (the order that minimises a tree's peak), then the larger cone (its shared
    /// work is then ready for the others), then program order.
    pub fn heaviest_first(&self, v: usize) -> &[usize] {
        &self.heaviest[v]
    }

    /// `v`'s predecessors ordered by cone, largest first (the most shared work done first,
    /// for the others to reuse), then by need as [`Weights::heaviest_first`], then program
    /// order.
    pub fn largest_cone_first(&self, v: usize) -> &[usize] {
        &self.largest_cone[v]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A random DAG of `n` nodes (node i reads up to three earlier ones; the last is the
    /// root), from a small linear congruential generator.
    fn random_dag(n: usize, seed: &mut u64) -> Graph {
        let mut next = |below: usize| {
            *seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (*seed >> 33) as usize % below
        };
        let preds: Vec<Vec<usize>> = (0..n)
            .map(|i| {
                let mut p: Vec<usize> = if i == 0 {
                    vec![]
                } else {
                    (0..next(4)).map(|_| next(i)).collect()
                };
                p.sort_unstable();
                p.dedup();
                p
            })
            .collect();
        let sizes: Vec<u64> = (0..n).map(|_| 1 + next(1000) as u64).collect();
        Graph::from_parts(preds, &sizes, n - 1)
    }

    #[test]
    fn a_walk_from_a_scheduled_set_is_the_walk_from_nothing_without_it() {
        // What LOOK_AHEAD's judgements rely on: they filter one walk instead of walking
        // from each prefix's set.
        let mut seed = 7;
        for n in 2..40 {
            for _ in 0..10 {
                let g = random_dag(n, &mut seed);
                let w = Weights::of(&g);
                let full = post_order_by(&g, vec![false; n], |v| w.heaviest_first(v));
                let cones = post_order_by(&g, vec![false; n], |v| w.largest_cone_first(v));
                // Every prefix of a valid order is a set a schedule can reach.
                for cut in 0..=n {
                    let mut done = vec![false; n];
                    for &v in &cones[..cut] {
                        done[v] = true;
                    }
                    let walked = post_order_by(&g, done.clone(), |v| w.heaviest_first(v));
                    let filtered: Vec<usize> = full.iter().copied().filter(|&v| !done[v]).collect();
                    assert_eq!(walked, filtered, "{n} nodes, {cut} scheduled");
                }
            }
        }
    }
}
