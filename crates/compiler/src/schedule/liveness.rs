//! The liveness estimator: the peak bytes of a schedule. At each step the live bytes are
//! the buffers defined so far that are still to be read (or belong to the result), plus
//! the buffer being defined, plus the peak of any computation the step calls. Like
//! Poplar's estimator it is a lower bound: op temporaries are not known at this level.

use super::graph::Graph;

/// Peak live bytes of `order` (a valid order of `g`'s nodes).
pub fn peak_liveness_bytes(g: &Graph, order: &[usize]) -> u64 {
    live_bytes(g, order).into_iter().max().unwrap_or(0)
}

/// The bytes live at each step of `order` (a valid order of `g`'s nodes), the called
/// computations' peaks included: what [`peak_liveness_bytes`] takes the maximum of.
pub fn live_bytes(g: &Graph, order: &[usize]) -> Vec<u64> {
    let mut pos = vec![0usize; g.len()];
    for (k, &v) in order.iter().enumerate() {
        pos[v] = k;
    }
    // The step after which each buffer is dead.
    let dies: Vec<usize> = (g.buffers.iter())
        .map(|buf| buf.dies_at(|v| pos[v]).unwrap_or(usize::MAX))
        .collect();
    let mut freed_at = vec![0u64; order.len() + 1];
    for (b, buf) in g.buffers.iter().enumerate() {
        if dies[b] != usize::MAX {
            freed_at[dies[b]] += buf.size;
        }
    }
    let mut live = 0u64;
    let mut at = Vec::with_capacity(order.len());
    for (k, &v) in order.iter().enumerate() {
        live += g.defined_bytes(v);
        at.push(live + g.callee[v]);
        live -= freed_at[k];
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_holds_two_buffers_at_a_time() {
        // 0 -> 1 -> 2 (root), 10 bytes each
        let g = Graph::from_parts(vec![vec![], vec![0], vec![1]], &[10, 10, 10], 2);
        assert_eq!(peak_liveness_bytes(&g, &[0, 1, 2]), 20);
    }

    #[test]
    fn order_decides_the_peak() {
        // two independent branches 0->1 and 2->3 joined by 4; big intermediates 0 and 2
        let g = Graph::from_parts(
            vec![vec![], vec![0], vec![], vec![2], vec![1, 3]],
            &[100, 1, 100, 1, 1],
            4,
        );
        assert_eq!(peak_liveness_bytes(&g, &[0, 1, 2, 3, 4]), 102);
        assert_eq!(peak_liveness_bytes(&g, &[0, 2, 1, 3, 4]), 201);
    }
}
