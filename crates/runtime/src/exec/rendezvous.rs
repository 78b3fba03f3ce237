//! Where replicas running on host threads meet at each collective: round `k` is the `k`-th
//! collective every replica reaches. Each brings its inputs and the cycle it arrived at,
//! and leaves with everyone's; the last of a process's replicas to arrive carries its
//! process's arrivals to the other processes, if any (a [`Transport`]). A replica that fails or ends its program early makes the
//! others stop with an error naming it, and no replica waits longer than a time limit, so
//! replicas whose programs disagree never hang.

use crate::error::RuntimeError;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// What one replica brought to a round.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Arrival {
    /// The collective (its index in the executable): every replica of a round must be at
    /// the same one.
    pub collective: u32,
    /// The cycle it reached the collective at.
    pub cycle: u64,
    /// Its inputs' bytes, in order.
    pub inputs: Arc<Vec<Vec<u8>>>,
}

/// Carries what the replicas of one process brought to a collective to every other process
/// running replicas of the same program (MPI, with the `mpi` feature of the `ipuxla`
/// crate). Process `p` runs a contiguous range of replicas, ranges in process order.
pub trait Transport: Send + Sync {
    /// This process's number.
    fn rank(&self) -> usize;
    /// How many processes there are.
    fn size(&self) -> usize;
    /// Every process's `bytes`, in process order, for the exchange tagged `tag`; an error
    /// (never a hang past a time limit) when a process is at another tag or gone.
    fn all_gather(&self, tag: u64, bytes: &[u8]) -> Result<Vec<Vec<u8>>, String>;
}

#[derive(Default)]
struct Round {
    /// By local replica.
    arrivals: Vec<Option<Arrival>>,
    /// Every replica's arrival, once the round is complete.
    all: Option<Arc<Vec<Arrival>>>,
    /// Local replicas that have taken the result.
    taken: usize,
}

#[derive(Default)]
struct State {
    rounds: HashMap<u64, Round>,
    /// Why the run stops, once a replica failed or ended early.
    stopped: Option<String>,
    /// Local replicas whose program has ended.
    finished: Vec<bool>,
}

/// The meeting point of the replicas `local` of `replicas` in all (the others, if any, in
/// other processes reached through a [`Transport`]).
pub(crate) struct Rendezvous<'t> {
    local: Range<usize>,
    transport: Option<&'t dyn Transport>,
    state: Mutex<State>,
    changed: Condvar,
    limit: Duration,
}

impl<'t> Rendezvous<'t> {
    /// A meeting point for replicas `local` that wait at most `limit` for each other;
    /// `transport` reaches the other processes' replicas.
    pub(crate) fn new(
        local: Range<usize>,
        limit: Duration,
        transport: Option<&'t dyn Transport>,
    ) -> Rendezvous<'t> {
        Rendezvous {
            state: Mutex::new(State {
                finished: vec![false; local.len()],
                ..State::default()
            }),
            local,
            transport,
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
        s.finished[r - self.local.start] = true;
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
    ) -> Result<Arc<Vec<Arrival>>, RuntimeError> {
        let n = self.local.len();
        let start = Instant::now();
        let mut s = self.lock();
        let complete = {
            let r = s.rounds.entry(round).or_default();
            if r.arrivals.is_empty() {
                r.arrivals = vec![None; n];
            }
            r.arrivals[me - self.local.start] = Some(arrival);
            r.arrivals.iter().all(Option::is_some)
        };
        if complete {
            // The last local replica to arrive completes the round, across processes if
            // there are others.
            let local: Vec<Arrival> = s.rounds[&round]
                .arrivals
                .iter()
                .flatten()
                .cloned()
                .collect();
            let all = match self.transport {
                None => Ok(local),
                Some(t) => {
                    drop(s);
                    let all = exchange(t, round, &local);
                    s = self.lock();
                    all
                }
            };
            match all.and_then(|all| same_collective(&all).map(|()| all)) {
                Ok(all) => {
                    s.rounds.get_mut(&round).expect("the round exists").all = Some(Arc::new(all))
                }
                Err(e) => {
                    s.stopped.get_or_insert(e);
                }
            }
            self.changed.notify_all();
        }
        loop {
            if let Some(all) = s.rounds[&round].all.clone() {
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
            let round_state = &s.rounds[&round];
            let missing: Vec<usize> = (0..n)
                .filter(|&r| round_state.arrivals[r].is_none())
                .map(|r| r + self.local.start)
                .collect();
            if let Some(&r) = missing.iter().find(|&&r| s.finished[r - self.local.start]) {
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

/// Checks that every replica of a round is at the same collective.
fn same_collective(all: &[Arrival]) -> Result<(), String> {
    match all.iter().position(|a| a.collective != all[0].collective) {
        None => Ok(()),
        Some(r) => Err(format!(
            "replica {r} is at collective #{} while replica 0 is at #{}: the replicas' programs disagree",
            all[r].collective, all[0].collective
        )),
    }
}

/// Every process's arrivals for `round`, in replica order.
fn exchange(t: &dyn Transport, round: u64, local: &[Arrival]) -> Result<Vec<Arrival>, String> {
    let parts = t.all_gather(round, &encode(local))?;
    let mut all = Vec::new();
    for (p, bytes) in parts.iter().enumerate() {
        all.extend(decode(bytes).map_err(|e| format!("process {p} sent {e}"))?);
    }
    Ok(all)
}

/// Arrivals as bytes: a count, then each arrival's cycle, input count and inputs (each a
/// length and its bytes), little-endian.
fn encode(arrivals: &[Arrival]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend((arrivals.len() as u64).to_le_bytes());
    for a in arrivals {
        out.extend(u64::from(a.collective).to_le_bytes());
        out.extend(a.cycle.to_le_bytes());
        out.extend((a.inputs.len() as u64).to_le_bytes());
        for input in a.inputs.iter() {
            out.extend((input.len() as u64).to_le_bytes());
            out.extend(input);
        }
    }
    out
}

fn decode(bytes: &[u8]) -> Result<Vec<Arrival>, String> {
    let mut at = 0usize;
    let word = |at: &mut usize| -> Result<u64, String> {
        let w = bytes
            .get(*at..*at + 8)
            .ok_or_else(|| format!("{} bytes, cut short at byte {}", bytes.len(), *at))?;
        *at += 8;
        Ok(u64::from_le_bytes(w.try_into().expect("8 bytes")))
    };
    let count = word(&mut at)?;
    let mut out = Vec::new();
    for _ in 0..count {
        let collective = u32::try_from(word(&mut at)?).map_err(|_| "a bad collective number")?;
        let cycle = word(&mut at)?;
        let inputs = word(&mut at)?;
        let mut list = Vec::new();
        for _ in 0..inputs {
            let len = word(&mut at)? as usize;
            let data = bytes
                .get(at..at + len)
                .ok_or_else(|| format!("{} bytes, cut short in an input", bytes.len()))?;
            at += len;
            list.push(data.to_vec());
        }
        out.push(Arrival {
            collective,
            cycle,
            inputs: Arc::new(list),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrival(cycle: u64, byte: u8) -> Arrival {
        Arrival {
            collective: 0,
            cycle,
            inputs: Arc::new(vec![vec![byte]]),
        }
    }

    #[test]
    fn replicas_leave_with_everyones_values() {
        let rv = Rendezvous::new(0..3, Duration::from_secs(10), None);
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
    fn arrivals_cross_processes_as_bytes() {
        let a = vec![
            arrival(7, 1),
            Arrival {
                collective: 3,
                cycle: 9,
                inputs: Arc::new(vec![vec![1, 2, 3], vec![]]),
            },
        ];
        assert_eq!(decode(&encode(&a)).unwrap(), a);
        assert!(decode(&encode(&a)[..20]).unwrap_err().contains("cut short"));
    }

    #[test]
    fn a_replica_that_ends_early_stops_the_others() {
        let rv = Rendezvous::new(0..2, Duration::from_secs(10), None);
        std::thread::scope(|s| {
            s.spawn(|| rv.finish(1));
            let e = rv.meet(0, 0, "c", arrival(0, 0)).unwrap_err();
            assert!(e.to_string().contains("replica 1"), "{e}");
        });
    }
}
