//! Where a run's host time went: by kind of step, and by step of the executable.
//!
//! The simulator's own cost, not the device's (that is the profile's): what a user reads
//! to see which compute set or rearrangement the host spends its time on.

use crate::program::executable::Executable;
use std::time::Duration;

/// Host time a run spent, by kind of step and by step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostTimes {
    /// Running compute sets (vertices).
    pub compute: Duration,
    /// Carrying out copies and rearrangements (the exchange).
    pub exchange: Duration,
    /// Host stream transfers.
    pub streams: Duration,
    /// By compute set (the executable's order): its executions' time.
    pub compute_sets: Vec<StepTime>,
    /// By rearrangement (the executable's order). Copies of whole tensors
    /// (`Program::Copy`) count only in `exchange`.
    pub rearranges: Vec<StepTime>,
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
}

impl StepTime {
    fn add(&mut self, d: Duration) {
        self.time += d;
        self.runs += 1;
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
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostStep<'e> {
    /// What kind of step.
    pub kind: HostStepKind,
    /// The compute set's, rearrangement's or stream's name in the executable.
    pub name: &'e str,
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

    /// Compute set `cs` took `d`.
    pub(crate) fn compute_set(&mut self, cs: usize, d: Duration) {
        self.compute += d;
        self.compute_sets[cs].add(d);
    }

    /// Rearrangement `r` took `d`.
    pub(crate) fn rearrange(&mut self, r: usize, d: Duration) {
        self.exchange += d;
        self.rearranges[r].add(d);
    }

    /// Stream `s`'s transfer took `d`.
    pub(crate) fn stream(&mut self, s: usize, d: Duration) {
        self.streams += d;
        self.stream_copies[s].add(d);
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
                m.time += t.time;
                m.runs += t.runs;
            }
        }
    }

    /// Every step that ran, named from `exe` (the executable these times are of).
    pub fn by_step<'e>(&self, exe: &'e Executable) -> Vec<HostStep<'e>> {
        let named = |kind, times: &[StepTime], name: &dyn Fn(usize) -> &'e str| {
            (times.iter().enumerate())
                .filter(|(_, t)| t.runs > 0)
                .map(|(i, &time)| HostStep {
                    kind,
                    name: name(i),
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
        one.compute_set(1, ms(3));
        one.compute_set(1, ms(2));
        one.rearrange(0, ms(4));
        let mut total = HostTimes::default();
        total.add(&one);
        total.add(&one);
        assert_eq!(total.compute, ms(10));
        assert_eq!(total.exchange, ms(8));
        assert_eq!(total.compute_sets[0], StepTime::default());
        let twice = StepTime {
            time: ms(10),
            runs: 4,
        };
        assert_eq!(total.compute_sets[1], twice);
        assert_eq!(total.rearranges[0].runs, 2);
    }
}
