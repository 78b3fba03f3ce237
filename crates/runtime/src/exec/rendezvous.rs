//! Where replicas running on host threads meet at each collective: round `k` is the `k`-th
//! collective every replica reaches. Each brings its inputs and the cycle it arrived at,
//! and leaves with everyone's. A replica that fails or ends its program early makes the
//! others stop with an error naming it, and no replica waits longer than a time limit, so
//! replicas whose programs disagree never hang.

use crate::error::RuntimeError;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// What one replica brought to a round.
#[derive(Debug, Clone)]
pub(crate) struct Arrival {
    /// The cycle it reached the collective at.
    pub cycle: u64,
    /// Its inputs' bytes, in order.
    pub inputs: Arc<Vec<Vec<u8>>>,
}

#[derive(Default)]
struct Round {
    arrivals: Vec<Option<Arrival>>,
    /// Replicas that have taken the round's result.
    taken: usize,
}

#[derive(Default)]
struct State {
    rounds: HashMap<u64, Round>,
    /// Why the run stops, once a replica failed or ended early.
    stopped: Option<String>,
    /// Replicas whose program has ended.
    finished: Vec<bool>,
}

/// The meeting point of `replicas` replicas.
pub(crate) struct Rendezvous {
    replicas: usize,
    state: Mutex<State>,
    changed: Condvar,
    limit: Duration,
}

impl Rendezvous {
    /// A meeting point for `replicas` replicas that wait at most `limit` for each other.
    pub(crate) fn new(replicas: usize, limit: Duration) -> Rendezvous {
        Rendezvous {
            replicas,
            state: Mutex::new(State {
                finished: vec![false; replicas],
                ..State::default()
            }),
            changed: Condvar::new(),
            limit,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A replica thread that panicked while holding the lock leaves the state as it was
        // between two whole updates; carrying on with it is safe.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Replica `r`'s program has ended (successfully): replicas waiting for it at a
    /// collective stop.
    pub(crate) fn finish(&self, r: usize) {
        let mut s = self.lock();
        s.finished[r] = true;
        self.changed.notify_all();
    }

    /// Replica `r` failed: every replica waiting stops with `why`.
    pub(crate) fn fail(&self, r: usize, why: &str) {
        let mut s = self.lock();
        s.stopped
            .get_or_insert_with(|| format!("replica {r} failed: {why}"));
        self.changed.notify_all();
    }

    /// Replica `me` arrives at round `round` of collective `name`; returns every replica's
    /// arrival, in replica order, once all have come.
    pub(crate) fn meet(
        &self,
        round: u64,
        me: usize,
        name: &str,
        arrival: Arrival,
    ) -> Result<Vec<Arrival>, RuntimeError> {
        let n = self.replicas;
        let start = Instant::now();
        let mut s = self.lock();
        {
            let r = s.rounds.entry(round).or_default();
            if r.arrivals.is_empty() {
                r.arrivals = vec![None; n];
            }
            r.arrivals[me] = Some(arrival);
        }
        self.changed.notify_all();
        loop {
            let round_state = &s.rounds[&round];
            if round_state.arrivals.iter().all(Option::is_some) {
                let all: Vec<Arrival> = round_state.arrivals.iter().flatten().cloned().collect();
                let r = s.rounds.get_mut(&round).expect("the round exists");
                r.taken += 1;
                if r.taken == n {
                    s.rounds.remove(&round);
                }
                return Ok(all);
            }
            if let Some(why) = &s.stopped {
                return Err(RuntimeError::Run(format!(
                    "replica {me} at collective {name}: {why}"
                )));
            }
            let missing: Vec<usize> = (0..n)
                .filter(|&r| round_state.arrivals[r].is_none())
                .collect();
            if let Some(&r) = missing.iter().find(|&&r| s.finished[r]) {
                return Err(RuntimeError::Run(format!(
                    "replica {me} waits at collective {name} (its collective {}) for replica {r}, whose program ended without reaching it: the replicas' programs disagree",
                    round + 1
                )));
            }
            let waited = start.elapsed();
            if waited >= self.limit {
                return Err(RuntimeError::Run(format!(
                    "replica {me} waited {:.0} s at collective {name} for replicas {missing:?}",
                    waited.as_secs_f64()
                )));
            }
            s = self
                .changed
                .wait_timeout(s, self.limit - waited)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrival(cycle: u64, byte: u8) -> Arrival {
        Arrival {
            cycle,
            inputs: Arc::new(vec![vec![byte]]),
        }
    }

    #[test]
    fn replicas_leave_with_everyones_values() {
        let rv = Rendezvous::new(3, Duration::from_secs(10));
        let got: Vec<Vec<u8>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..3)
                .map(|r| {
                    let rv = &rv;
                    s.spawn(move || {
                        let all = rv.meet(0, r, "c", arrival(r as u64, r as u8)).unwrap();
                        all.iter().map(|a| a.inputs[0][0]).collect::<Vec<u8>>()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(got.iter().all(|v| v == &[0, 1, 2]));
    }

    #[test]
    fn a_replica_that_ends_early_stops_the_others() {
        let rv = Rendezvous::new(2, Duration::from_secs(10));
        std::thread::scope(|s| {
            s.spawn(|| rv.finish(1));
            let e = rv.meet(0, 0, "c", arrival(0, 0)).unwrap_err();
            assert!(e.to_string().contains("replica 1"), "{e}");
        });
    }
}
