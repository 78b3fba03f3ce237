//! POST_ORDER: XLA's `MakeInstructionPostOrder`: a depth-first walk from each node nothing
//! depends on (in program order, the root among them), emitting a node after its
//! predecessors (operands, then control predecessors, in order).

use super::graph::Graph;

/// The post order of `g`.
pub fn post_order(g: &Graph) -> Vec<usize> {
    post_order_by(g, vec![false; g.len()], <[usize]>::to_vec)
}

/// The nodes not yet `done` in a post order from every node nothing depends on (in
/// program order); `order_preds` chooses the order each node's predecessors are visited in.
pub fn post_order_by(
    g: &Graph,
    mut done: Vec<bool>,
    order_preds: impl Fn(&[usize]) -> Vec<usize>,
) -> Vec<usize> {
    let mut out = Vec::with_capacity(done.iter().filter(|d| !**d).count());
    for s in (0..g.len()).filter(|&v| g.succs[v].is_empty()) {
        dfs_from(g, s, &mut done, &mut out, &order_preds);
    }
    out
}

/// An iterative depth-first post-order walk from `start`; `order_preds` chooses the order
/// predecessors are visited in.
fn dfs_from(
    g: &Graph,
    start: usize,
    done: &mut [bool],
    out: &mut Vec<usize>,
    order_preds: impl Fn(&[usize]) -> Vec<usize>,
) {
    if done[start] {
        return;
    }
    let mut stack: Vec<(usize, Vec<usize>, usize)> = vec![(start, order_preds(&g.preds[start]), 0)];
    let mut on_stack = vec![false; g.len()];
    on_stack[start] = true;
    while let Some((v, preds, k)) = stack.last_mut() {
        if *k < preds.len() {
            let p = preds[*k];
            *k += 1;
            if !done[p] && !on_stack[p] {
                on_stack[p] = true;
                let ps = order_preds(&g.preds[p]);
                stack.push((p, ps, 0));
            }
        } else {
            let v = *v;
            done[v] = true;
            out.push(v);
            stack.pop();
        }
    }
}

/// What the heaviest-first walk weighs each node by.
pub struct Weights {
    /// Bytes needed to compute the node's cone as if it were a tree (Sethi–Ullman):
    /// operands in heaviest-first order, each result held while the next is computed.
    pub need: Vec<u64>,
    /// Paths into the node from the cone's leaves (saturating): how much shared work its
    /// cone holds.
    pub cone: Vec<u64>,
}

impl Weights {
    /// The weights of `g`'s nodes.
    pub fn of(g: &Graph) -> Weights {
        let mut w = Weights {
            need: vec![0; g.len()],
            cone: vec![0; g.len()],
        };
        for v in 0..g.len() {
            let (mut held, mut peak) = (0u64, 0u64);
            for p in w.heaviest_first(g, &g.preds[v]) {
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
        }
        w
    }

    /// `preds` ordered by what computing each costs beyond its result, largest first (the
    /// order that minimises a tree's peak), then the larger cone (its shared work is then
    /// ready for the others), then program order.
    pub fn heaviest_first(&self, g: &Graph, preds: &[usize]) -> Vec<usize> {
        let mut p = preds.to_vec();
        p.sort_by_key(|&x| {
            (
                std::cmp::Reverse(self.need[x].saturating_sub(g.defined_bytes(x))),
                std::cmp::Reverse(self.cone[x]),
                x,
            )
        });
        p
    }

    /// `preds` ordered by cone, largest first (the most shared work done first, for the
    /// others to reuse), then by need as [`Weights::heaviest_first`], then program order.
    pub fn largest_cone_first(&self, g: &Graph, preds: &[usize]) -> Vec<usize> {
        let mut p = preds.to_vec();
        p.sort_by_key(|&x| {
            (
                std::cmp::Reverse(self.cone[x]),
                std::cmp::Reverse(self.need[x].saturating_sub(g.defined_bytes(x))),
                x,
            )
        });
        p
    }
}
