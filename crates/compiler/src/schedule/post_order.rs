//! POST_ORDER: XLA's `MakeInstructionPostOrder`: a depth-first walk from each node nothing
//! depends on (in program order, the root among them), emitting a node after its
//! predecessors (operands, then control predecessors, in order).

use super::graph::Graph;

/// The post order of `g`.
pub fn post_order(g: &Graph) -> Vec<usize> {
    let n = g.len();
    let mut done = vec![false; n];
    let mut out = Vec::with_capacity(n);
    let starts: Vec<usize> = (0..n).filter(|&v| g.succs[v].is_empty()).collect();
    for s in starts {
        dfs_from(g, s, &mut done, &mut out, |_, preds| preds.to_vec());
    }
    out
}

/// An iterative depth-first post-order walk from `start`; `order_preds` chooses the order
/// predecessors are visited in.
pub fn dfs_from(
    g: &Graph,
    start: usize,
    done: &mut [bool],
    out: &mut Vec<usize>,
    order_preds: impl Fn(usize, &[usize]) -> Vec<usize>,
) {
    if done[start] {
        return;
    }
    let mut stack: Vec<(usize, Vec<usize>, usize)> =
        vec![(start, order_preds(start, &g.preds[start]), 0)];
    let mut on_stack = vec![false; g.len()];
    on_stack[start] = true;
    while let Some((v, preds, k)) = stack.last_mut() {
        if *k < preds.len() {
            let p = preds[*k];
            *k += 1;
            if !done[p] && !on_stack[p] {
                on_stack[p] = true;
                let ps = order_preds(p, &g.preds[p]);
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
