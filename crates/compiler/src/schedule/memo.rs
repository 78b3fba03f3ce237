//! Schedules remembered across compiles, inside [`remembering`]: a caller that compiles
//! one module several ways (the differential check compiles each generated module four
//! times, for different tile counts and options) schedules each computation once, and
//! [`schedule_module`](super::schedule_module) remembers within one module, so repeated
//! layers are scheduled once. A schedule depends only on the computation's structure, the
//! algorithm and its limits, which together are the key; outside `remembering` nothing is
//! kept, so a compile's work, and what the benchmarks time, never depend on an earlier
//! compile.

use super::graph::{Graph, Structure};
use super::{Algorithm, Limits};
use std::cell::RefCell;
use std::collections::HashMap;

type Memo = HashMap<(Structure, Algorithm, Limits), Vec<usize>>;

thread_local! {
    /// The schedules of the innermost [`remembering`] call on this thread, if any.
    static MEMO: RefCell<Option<Memo>> = const { RefCell::new(None) };
}

/// Runs `f`, remembering every schedule made on this thread while it runs (nested calls
/// share the outer one's) and forgetting them all after.
pub fn remembering<T>(f: impl FnOnce() -> T) -> T {
    let outermost = MEMO.with(|m| {
        let mut m = m.borrow_mut();
        let outermost = m.is_none();
        m.get_or_insert_with(Memo::new);
        outermost
    });
    // Forget on the way out, also when `f` panics.
    struct Forget(bool);
    impl Drop for Forget {
        fn drop(&mut self) {
            if self.0 {
                MEMO.with(|m| m.borrow_mut().take());
            }
        }
    }
    let _forget = Forget(outermost);
    f()
}

/// `g`'s schedule by `algorithm`: remembered if [`remembering`] has seen one alike, else
/// made by `schedule` (and remembered, inside `remembering`).
pub(super) fn recall(
    g: &Graph,
    algorithm: Algorithm,
    limits: Limits,
    schedule: impl FnOnce() -> Vec<usize>,
) -> Vec<usize> {
    if MEMO.with(|m| m.borrow().is_none()) {
        return schedule();
    }
    let key = (g.structure(), algorithm, limits);
    let known = MEMO.with(|m| m.borrow().as_ref().and_then(|memo| memo.get(&key).cloned()));
    if let Some(order) = known {
        return order;
    }
    let order = schedule();
    MEMO.with(|m| {
        if let Some(memo) = m.borrow_mut().as_mut() {
            memo.insert(key, order.clone());
        }
    });
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn chain() -> Graph {
        Graph::from_parts(vec![vec![], vec![0], vec![1]], &[4, 4, 4], 2)
    }

    /// Schedules `g` by post order through `recall`, counting the schedules made.
    fn schedule(g: &Graph, made: &Cell<usize>) -> Vec<usize> {
        recall(g, Algorithm::PostOrder, Limits::default(), || {
            made.set(made.get() + 1);
            super::super::post_order::post_order(g)
        })
    }

    #[test]
    fn inside_remembering_a_graph_is_scheduled_once() {
        let made = Cell::new(0);
        let g = chain();
        let orders = remembering(|| [schedule(&g, &made), schedule(&chain(), &made)]);
        assert_eq!(made.get(), 1);
        assert_eq!(orders[0], orders[1]);
    }

    #[test]
    fn outside_remembering_nothing_is_kept() {
        let made = Cell::new(0);
        let g = chain();
        remembering(|| schedule(&g, &made));
        schedule(&g, &made);
        schedule(&g, &made);
        assert_eq!(made.get(), 3);
    }

    #[test]
    fn another_algorithm_or_limit_is_another_schedule() {
        let made = Cell::new(0);
        let g = chain();
        remembering(|| {
            schedule(&g, &made);
            recall(&g, Algorithm::Clustering, Limits::default(), || {
                made.set(made.get() + 1);
                vec![0, 1, 2]
            });
            let wider = Limits {
                search_size: 65,
                ..Limits::default()
            };
            recall(&g, Algorithm::PostOrder, wider, || {
                made.set(made.get() + 1);
                vec![0, 1, 2]
            });
        });
        assert_eq!(made.get(), 3);
    }
}
