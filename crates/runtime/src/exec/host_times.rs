//! Where a run's host time went: by kind of step, and by step of the executable.
//!
//! The simulator's own cost, not the device's (that is the profile's): what a user reads
//! to see which compute set or rearrangement the host spends its time on.

use crate::program::executable::{Executable, TensorId};
use rustc_hash::FxHashMap;
use std::borrow::Cow;
use std::time::Duration;

/// Host time a run spent, by kind of step and by step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostTimes {
    /// Running compute sets (vertices).
    pub compute: Duration,
    /// Carrying out copies, rearrangements and collectives (the exchange; collectives are
    /// not kept step by step).
    pub exchange: Duration,
    /// Host stream transfers.
    pub streams: Duration,
    /// By compute set (the executable's order): its executions' time.
    pub compute_sets: Vec<StepTime>,
    /// By rearrangement (the executable's order).
    pub rearranges: Vec<StepTime>,
    /// By copy of a whole tensor (`Program::Copy`): `(source, destination)`.
    pub copies: FxHashMap<(TensorId, TensorId), StepTime>,
    /// By host stream (the executable's order).
    pub stream_copies: Vec<StepTime>,
}

/// One step's host time over a run: every execution of it added.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepTime {
    /// The time its executions took.
    pub time: Duration,
    /// How many times it ran.
    pub runs: u32,
    /// Bytes its executions copied on the host: an exchange step's gathered into windows
    /// and written to tiles (or copied tile to tile), a stream's written or read; for a
    /// compute set, the bytes its vertices read and write (regions in tile memory, inputs
    /// read from kept windows and scratches, batched products' operands and results).
    pub bytes: u64,
}

impl StepTime {
    fn add(&mut self, d: Duration, bytes: u64) {
        self.time += d;
        self.runs += 1;
        self.bytes += bytes;
    }

    fn add_all(&mut self, other: &StepTime) {
        self.time += other.time;
        self.runs += other.runs;
        self.bytes += other.bytes;
    }
}

/// Which kind of step a [`HostStep`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostStepKind {
    /// A compute set.
    Compute,
    /// A rearrangement (the exchange).
    Exchange,
    /// A host stream transfer.
    Stream,
}

/// One named step's host time ([`HostTimes::by_step`]).
#[derive(Debug, Clone, PartialEq)]
pub struct HostStep<'e> {
    /// What kind of step.
    pub kind: HostStepKind,
    /// The compute set's, rearrangement's or stream's name in the executable; a copy's as
    /// the profile names it (`copy SOURCE -> DESTINATION`).
    pub name: Cow<'e, str>,
    /// Its time and executions.
    pub time: StepTime,
}

impl HostTimes {
    /// Zero times for every step of `exe`.
    pub(crate) fn for_executable(exe: &Executable) -> HostTimes {
        HostTimes {
            compute_sets: vec![StepTime::default(); exe.compute_sets.len()],
            rearranges: vec![StepTime::default(); exe.rearranges.len()],
            stream_copies: vec![StepTime::default(); exe.streams.len()],
            ..HostTimes::default()
        }
    }

    /// Compute set `cs` took `d`, reading and writing `bytes`.
    pub(crate) fn compute_set(&mut self, cs: usize, d: Duration, bytes: u64) {
        self.compute += d;
        self.compute_sets[cs].add(d, bytes);
    }

    /// Rearrangement `r` took `d`, copying `bytes`.
    pub(crate) fn rearrange(&mut self, r: usize, d: Duration, bytes: u64) {
        self.exchange += d;
        self.rearranges[r].add(d, bytes);
    }

    /// The copy of tensor `src` to `dst` took `d`, copying `bytes`.
    pub(crate) fn copy(&mut self, (src, dst): (TensorId, TensorId), d: Duration, bytes: u64) {
        self.exchange += d;
        self.copies.entry((src, dst)).or_default().add(d, bytes);
    }

    /// Stream `s`'s transfer of `bytes` took `d`.
    pub(crate) fn stream(&mut self, s: usize, d: Duration, bytes: u64) {
        self.streams += d;
        self.stream_copies[s].add(d, bytes);
    }

    /// Adds `other`'s times (another run of the same executable) to these.
    pub fn add(&mut self, other: &HostTimes) {
        self.compute += other.compute;
        self.exchange += other.exchange;
        self.streams += other.streams;
        for (mine, theirs) in [
            (&mut self.compute_sets, &other.compute_sets),
            (&mut self.rearranges, &other.rearranges),
            (&mut self.stream_copies, &other.stream_copies),
        ] {
            if mine.len() < theirs.len() {
                mine.resize(theirs.len(), StepTime::default());
            }
            for (m, t) in mine.iter_mut().zip(theirs) {
                m.add_all(t);
            }
        }
        for (k, t) in &other.copies {
            self.copies.entry(*k).or_default().add_all(t);
        }
    }

    /// Every step that ran, named from `exe` (the executable these times are of).
    pub fn by_step<'e>(&self, exe: &'e Executable) -> Vec<HostStep<'e>> {
        let named = |kind, times: &[StepTime], name: &dyn Fn(usize) -> &'e str| {
            (times.iter().enumerate())
                .filter(|(_, t)| t.runs > 0)
                .map(|(i, &time)| HostStep {
                    kind,
                    name: Cow::Borrowed(name(i)),
                    time,
                })
                .collect::<Vec<_>>()
        };
        let mut steps = named(HostStepKind::Compute, &self.compute_sets, &|i| {
            &exe.compute_sets[i].name
        });
        steps.extend(named(HostStepKind::Exchange, &self.rearranges, &|i| {
            &exe.rearranges[i].name
        }));
        steps.extend(named(HostStepKind::Stream, &self.stream_copies, &|i| {
            &exe.streams[i].name
        }));
        let tensor = |t: TensorId| &exe.tensors[t.0 as usize].name;
        let mut copies: Vec<_> = self.copies.iter().collect();
        copies.sort_unstable_by_key(|(k, _)| **k);
        steps.extend(copies.into_iter().map(|(&(src, dst), &time)| HostStep {
            kind: HostStepKind::Exchange,
            name: Cow::Owned(format!("copy {} -> {}", tensor(src), tensor(dst))),
            time,
        }));
        steps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_add_up_step_by_step() {
        let ms = Duration::from_millis;
        let mut one = HostTimes {
            compute_sets: vec![StepTime::default(); 2],
            rearranges: vec![StepTime::default(); 1],
            ..HostTimes::default()
        };
        one.compute_set(1, ms(3), 40);
        one.compute_set(1, ms(2), 40);
        one.rearrange(0, ms(4), 100);
        one.copy((TensorId(3), TensorId(1)), ms(1), 7);
        let mut total = HostTimes::default();
        total.add(&one);
        total.add(&one);
        assert_eq!(total.compute, ms(10));
        assert_eq!(total.exchange, ms(10));
        assert_eq!(total.copies[&(TensorId(3), TensorId(1))].runs, 2);
        assert_eq!(total.compute_sets[0], StepTime::default());
        let twice = StepTime {
            time: ms(10),
            runs: 4,
            bytes: 160,
        };
        assert_eq!(total.compute_sets[1], twice);
        assert_eq!(total.rearranges[0].runs, 2);
        assert_eq!(total.rearranges[0].bytes, 200);
        assert_eq!(total.copies[&(TensorId(3), TensorId(1))].bytes, 14);
    }
}
