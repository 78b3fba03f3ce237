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

/// A random computation-like DAG of `n` nodes from `seed`: node i reads up to three earlier
/// nodes, every node but the last (the root) is read by a later one (XLA computations
/// have no dead instructions), sizes 1..1000 bytes.
fn computation_like(seed: u64, n: usize) -> Graph {
    let mut state = seed;
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        state >> 33
    };
    let mut preds: Vec<Vec<usize>> = (0..n)
        .map(|i| {
            let k = if i == 0 { 0 } else { next() % 4 };
            (0..k).map(|_| next() as usize % i).collect()
        })
        .collect();
    let mut read = vec![false; n];
    for &p in preds.iter().flatten() {
        read[p] = true;
    }
    let unread: Vec<usize> = (0..n - 1).filter(|&i| !read[i]).collect();
    for i in unread {
        let j = i + 1 + next() as usize % (n - 1 - i);
        preds[j].push(i);
    }
    for p in &mut preds {
        p.sort_unstable();
        p.dedup();
    }
    let sizes: Vec<u64> = (0..n).map(|_| 1 + next() % 999).collect();
    Graph::from_parts(preds, &sizes, n - 1)
}

/// The bound: CHOOSE_BEST <= 1.05 x optimal on every such DAG. Before LOOK_AHEAD
/// gained its branch-and-bound phase, seed 21 (n = 23) was 1.16 x: the optimum builds a
/// small node's whole cone early to free four large buffers, a move neither the beam's
/// completions nor its prefixes found.
#[test]
fn choose_best_is_within_five_percent_of_optimal_on_random_computations() {
    let limits = Limits::default();
    let mut above = Vec::new();
    for seed in 0..1000u64 {
        let n = 2 + (seed % 23) as usize;
        let g = computation_like(seed, n);
        let opt = peak_liveness_bytes(&g, &schedule_graph(&g, Algorithm::Optimal, limits));
        let best = peak_liveness_bytes(&g, &schedule_graph(&g, Algorithm::ChooseBest, limits));
        assert!(
            best >= opt,
            "seed {seed}: choose-best {best} below optimal {opt}"
        );
        if best as f64 > 1.05 * opt as f64 {
            above.push((seed, best, opt));
        }
    }
    assert!(
        above.is_empty(),
        "above 1.05 x optimal (seed, choose-best, optimal): {above:?}"
    );
}
