//! Every scheduler on random DAGs: a valid order (each node after its predecessors), and
//! the exact optimum never above any of them.

use compiler::schedule::{Algorithm, Graph, Limits, peak_liveness_bytes, schedule_graph};
use proptest::prelude::*;

/// A DAG of `n` nodes: node i depends on up to three earlier nodes; the last is the root.
fn dag() -> impl Strategy<Value = Graph> {
    (2usize..=20).prop_flat_map(|n| {
        (
            proptest::collection::vec(
                proptest::collection::vec(any::<prop::sample::Index>(), 0..=3),
                n,
            ),
            proptest::collection::vec(1u64..1000, n),
        )
            .prop_map(move |(edges, sizes)| {
                let preds: Vec<Vec<usize>> = edges
                    .iter()
                    .enumerate()
                    .map(|(i, e)| {
                        let mut p: Vec<usize> = if i == 0 {
                            vec![]
                        } else {
                            e.iter().map(|x| x.index(i)).collect()
                        };
                        p.sort_unstable();
                        p.dedup();
                        p
                    })
                    .collect();
                Graph::from_parts(preds, &sizes, n - 1)
            })
    })
}

proptest! {
    #[test]
    fn every_algorithm_gives_a_valid_order_and_optimal_is_lowest(g in dag()) {
        let limits = Limits::default();
        let opt = peak_liveness_bytes(&g, &schedule_graph(&g, Algorithm::Optimal, limits));
        for a in Algorithm::ALL {
            let order = schedule_graph(&g, a, limits);
            prop_assert!(g.is_valid_order(&order), "{} gave {:?}", a.name(), order);
            prop_assert!(opt <= peak_liveness_bytes(&g, &order), "optimal above {}", a.name());
        }
    }
}

#[test]
fn look_ahead_terminates_on_a_wide_graph() {
    // 2000 independent nodes feeding one root: thousands of ready nodes per step.
    let n = 2001;
    let mut preds = vec![vec![]; n];
    preds[n - 1] = (0..n - 1).collect();
    let g = Graph::from_parts(preds, &vec![4; n], n - 1);
    let order = schedule_graph(&g, Algorithm::LookAhead, Limits::default());
    assert!(g.is_valid_order(&order));
}
