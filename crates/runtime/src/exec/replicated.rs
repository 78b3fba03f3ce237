//! A replicated executable run: one engine per replica, each on its own host thread,
//! meeting the others at every collective. Each replica's profile is its own (every cycle
//! and byte from the model); a replica that reaches a collective before the others waits
//! for the last (a sync step in its profile), as replicas on IPU-Links do.

use crate::error::RuntimeError;
use crate::exec::engine::{Engine, EngineOptions, HostIo, Seat};
use crate::exec::rendezvous::{Rendezvous, Transport};
use crate::model::profile::Profile;
use crate::program::executable::Executable;
use std::ops::Range;
use std::time::Duration;

/// How long a replica waits at a collective for the others before giving up.
pub const COLLECTIVE_WAIT_LIMIT: Duration = Duration::from_secs(120);

/// A replicated executable loaded once per replica (of those this process runs).
pub struct ReplicatedEngine {
    engines: Vec<Engine>,
    /// The replicas this process runs.
    local: Range<usize>,
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
        ReplicatedEngine::load_local(exe, options, 0..n)
    }

    /// Loads the replicas `local` of `exe` only: this process's share when other
    /// processes run the others ([`ReplicatedEngine::run_across`]).
    pub fn load_local(
        exe: Executable,
        options: EngineOptions,
        local: Range<usize>,
    ) -> Result<ReplicatedEngine, RuntimeError> {
        let total = exe.replication.replicas.max(1);
        if local.is_empty() || local.end > total {
            return Err(RuntimeError::Run(format!(
                "replicas {local:?} of an executable of {total} replicas"
            )));
        }
        let n = local.len();
        let threads = match options.threads {
            0 => (std::thread::available_parallelism().map_or(1, |c| c.get()) / n).max(1),
            t => t,
        };
        let options = EngineOptions { threads, ..options };
        if n == 1 {
            // One replica loads on this thread: a fresh thread's allocator arena made the
            // load of the transformer bench 55 % slower.
            return Ok(ReplicatedEngine {
                engines: vec![Engine::load_with(exe, options)?],
                local,
            });
        }
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
            local,
        })
    }

    /// Number of replicas of the executable.
    pub fn replicas(&self) -> usize {
        self.engines[0].executable().replication.replicas.max(1)
    }

    /// The replicas this process runs.
    pub fn local(&self) -> Range<usize> {
        self.local.clone()
    }

    /// The engine of local replica `r` (counted from the first this process runs).
    pub fn engine(&self, r: usize) -> &Engine {
        &self.engines[r]
    }

    /// The engine of local replica `r`, to change (its progress hook).
    pub fn engine_mut(&mut self, r: usize) -> &mut Engine {
        &mut self.engines[r]
    }

    /// Runs every replica's program once, replica `r` exchanging buffers with the host
    /// through `ios[r]`; returns each replica's profile.
    pub fn run(&mut self, ios: &mut [HostIo]) -> Result<Vec<Profile>, RuntimeError> {
        self.run_across(ios, None)
    }

    /// Runs this process's replicas once (`ios[i]`: local replica `i`'s host buffers),
    /// the collectives reaching the other processes' replicas through `transport`.
    pub fn run_across(
        &mut self,
        ios: &mut [HostIo],
        transport: Option<&dyn Transport>,
    ) -> Result<Vec<Profile>, RuntimeError> {
        let n = self.engines.len();
        if ios.len() != n {
            return Err(RuntimeError::Run(format!(
                "{n} replicas need {n} host buffer sets, {} were given",
                ios.len()
            )));
        }
        if let ([engine], [io], None) = (&mut self.engines[..], &mut ios[..], transport)
            && self.local == (0..1)
        {
            // One replica meets nobody: it runs on this thread.
            return Ok(vec![engine.run_seated(io, None)?]);
        }
        let rendezvous = Rendezvous::new(self.local.clone(), COLLECTIVE_WAIT_LIMIT, transport);
        let first = self.local.start;
        let results: Vec<Result<Profile, RuntimeError>> = std::thread::scope(|s| {
            let handles: Vec<_> = self
                .engines
                .iter_mut()
                .zip(ios.iter_mut())
                .enumerate()
                .map(|(i, (engine, io))| {
                    let rendezvous = &rendezvous;
                    let r = first + i;
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
                .map(|(i, h)| {
                    let r = first + i;
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
