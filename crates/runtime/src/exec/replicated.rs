//! A replicated executable run: one engine per replica, each on its own host thread,
//! meeting the others at every collective. Each replica's profile is its own (every cycle
//! and byte from the model); a replica that reaches a collective before the others waits
//! for the last (a sync step in its profile), as replicas on IPU-Links do.

use crate::error::RuntimeError;
use crate::exec::engine::{Engine, EngineOptions, HostIo, Seat};
use crate::exec::rendezvous::Rendezvous;
use crate::model::profile::Profile;
use crate::program::executable::Executable;
use std::time::Duration;

/// How long a replica waits at a collective for the others before giving up.
pub const COLLECTIVE_WAIT_LIMIT: Duration = Duration::from_secs(120);

/// A replicated executable loaded once per replica.
pub struct ReplicatedEngine {
    engines: Vec<Engine>,
}

impl ReplicatedEngine {
    /// Loads `exe` (`exe.replication.replicas` replicas, any number including 1) once per
    /// replica, in parallel. With `options.threads` 0 the host's cores are shared among the
    /// replicas; the thread count changes no byte and no cycle.
    pub fn load_with(
        exe: Executable,
        options: EngineOptions,
    ) -> Result<ReplicatedEngine, RuntimeError> {
        let n = exe.replication.replicas.max(1);
        let threads = match options.threads {
            0 => (std::thread::available_parallelism().map_or(1, |c| c.get()) / n).max(1),
            t => t,
        };
        let options = EngineOptions { threads, ..options };
        let loaded: Vec<Result<Engine, RuntimeError>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..n)
                .map(|_| {
                    let exe = exe.clone();
                    s.spawn(move || Engine::load_with(exe, options))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(RuntimeError::Run("a replica's load panicked".into()))
                    })
                })
                .collect()
        });
        Ok(ReplicatedEngine {
            engines: loaded.into_iter().collect::<Result<_, _>>()?,
        })
    }

    /// Number of replicas.
    pub fn replicas(&self) -> usize {
        self.engines.len()
    }

    /// Replica `r`'s engine (its tensors, its host times).
    pub fn engine(&self, r: usize) -> &Engine {
        &self.engines[r]
    }

    /// Runs every replica's program once, replica `r` exchanging buffers with the host
    /// through `ios[r]`; returns each replica's profile.
    pub fn run(&mut self, ios: &mut [HostIo]) -> Result<Vec<Profile>, RuntimeError> {
        let n = self.engines.len();
        if ios.len() != n {
            return Err(RuntimeError::Run(format!(
                "{n} replicas need {n} host buffer sets, {} were given",
                ios.len()
            )));
        }
        let rendezvous = Rendezvous::new(n, COLLECTIVE_WAIT_LIMIT);
        let results: Vec<Result<Profile, RuntimeError>> = std::thread::scope(|s| {
            let handles: Vec<_> = self
                .engines
                .iter_mut()
                .zip(ios.iter_mut())
                .enumerate()
                .map(|(r, (engine, io))| {
                    let rendezvous = &rendezvous;
                    s.spawn(move || {
                        let seat = Seat {
                            replica: r,
                            rendezvous,
                            round: 0,
                        };
                        let result = engine.run_seated(io, Some(seat));
                        match &result {
                            Ok(_) => rendezvous.finish(r),
                            Err(e) => rendezvous.fail(r, &e.to_string()),
                        }
                        result
                    })
                })
                .collect();
            handles
                .into_iter()
                .enumerate()
                .map(|(r, h)| {
                    h.join().unwrap_or_else(|_| {
                        Err(RuntimeError::Run(format!("replica {r}'s run panicked")))
                    })
                })
                .collect()
        });
        // The first failure a replica reported itself (the others name it).
        let mut errors = results.iter().filter_map(|r| r.as_ref().err());
        if let Some(first) = errors
            .clone()
            .find(|e| !e.to_string().contains(" failed: "))
        {
            return Err(first.clone());
        }
        if let Some(e) = errors.next() {
            return Err(e.clone());
        }
        Ok(results.into_iter().map(|r| r.expect("no errors")).collect())
    }
}
