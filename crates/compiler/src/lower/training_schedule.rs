//! When each stage of a training pipeline runs its forward and backward passes: the
//! seed's schedules as a list of steps, and the values each stage keeps stashed between its
//! forward pass of a micro-batch and its backward pass of it.
//!
//! With `S` stages and `m` micro-batches (stage `s` forward `F_s`, backward `B_s`):
//! - **Grouped**: in step `t` stage `s` runs `F_s` of micro-batch `t - s` and then `B_s` of
//!   micro-batch `t - (2S - 2 - s)`; the last stage runs the backward pass of the
//!   micro-batch it has just run forward. `m + 2S - 2` steps; stage `s` stashes up to
//!   `2(S - 1 - s) + 1` micro-batches.
//! - **Interleaved**: an IPU runs one pass per step: `F_s(i)` in step `2i + s`, `B_s(i)`
//!   in step `2i + 2S - 1 - s` (the other parity, so they never collide). `2m + 2S - 2`
//!   steps; stage `s` stashes up to `S - s` micro-batches.
//! - **Sequential**: one pass at a time, each micro-batch through every forward stage and
//!   back through every backward stage: `2Sm` steps, one stashed micro-batch.

use crate::config::PipelineSchedule;

/// What one stage does in one step: the micro-batches it runs forward and backward
/// (forward first when both), and how many micro-batches it holds stashed before the step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Work {
    pub forward: Option<u64>,
    pub backward: Option<u64>,
    pub stashed: usize,
}

impl Work {
    /// The step's program for this stage depends on this only (not on the micro-batch
    /// numbers): steps with equal shapes run the same program.
    pub fn shape(&self) -> (bool, bool, usize) {
        (
            self.forward.is_some(),
            self.backward.is_some(),
            self.stashed,
        )
    }
}

/// The steps of one pipeline run of `m` micro-batches through `stages` stages: per step,
/// per stage, its work.
pub(crate) fn training_steps(schedule: PipelineSchedule, stages: usize, m: u64) -> Vec<Vec<Work>> {
    let s_count = stages as u64;
    let within = |i: i64| (0..m as i64).contains(&i).then_some(i as u64);
    let total = match schedule {
        PipelineSchedule::Grouped => m + 2 * s_count - 2,
        PipelineSchedule::Interleaved => 2 * m + 2 * s_count - 2,
        PipelineSchedule::Sequential => 2 * s_count * m,
    };
    let mut stashed = vec![0usize; stages];
    let mut steps = Vec::with_capacity(total as usize);
    for t in 0..total as i64 {
        let mut row = Vec::with_capacity(stages);
        for s in 0..stages as i64 {
            let last = 2 * s_count as i64 - 1;
            let (forward, backward) = match schedule {
                PipelineSchedule::Grouped => (within(t - s), within(t - (last - 1 - s))),
                PipelineSchedule::Interleaved => {
                    let half = |d: i64| {
                        if d >= 0 && d % 2 == 0 {
                            within(d / 2)
                        } else {
                            None
                        }
                    };
                    (half(t - s), half(t - (last - s)))
                }
                PipelineSchedule::Sequential => {
                    let (i, k) = (t / (last + 1), t % (last + 1));
                    (
                        (k == s).then(|| within(i)).flatten(),
                        (k == last - s).then(|| within(i)).flatten(),
                    )
                }
            };
            row.push(Work {
                forward,
                backward,
                stashed: stashed[s as usize],
            });
            let here = &mut stashed[s as usize];
            *here = *here + forward.is_some() as usize - backward.is_some() as usize;
        }
        steps.push(row);
    }
    steps
}

/// The most micro-batches each stage holds stashed at once (after a forward pass, before
/// the backward pass of the same step).
pub(crate) fn stash_depths(steps: &[Vec<Work>]) -> Vec<usize> {
    let stages = steps.first().map_or(0, |r| r.len());
    (0..stages)
        .map(|s| {
            steps
                .iter()
                .map(|r| r[s].stashed + r[s].forward.is_some() as usize)
                .max()
                .unwrap_or(0)
        })
        .collect()
}

/// Steps grouped into runs of a repeated block: `(repetitions, block)` where `block` is the
/// steps (indices) of one repetition. At each point the block length (up to `max_period`)
/// that covers the most steps wins; equal steps are equal in [`Work::shape`].
pub(crate) fn repeats(steps: &[Vec<Work>], max_period: usize) -> Vec<(u64, Vec<usize>)> {
    let shape = |t: usize| steps[t].iter().map(Work::shape).collect::<Vec<_>>();
    let mut out = Vec::new();
    let mut t = 0;
    while t < steps.len() {
        let mut best = (1u64, 1usize);
        for p in 1..=max_period.min(steps.len() - t) {
            let mut reps = 1;
            while t + (reps + 1) * p <= steps.len()
                && (0..p).all(|k| shape(t + reps * p + k) == shape(t + k))
            {
                reps += 1;
            }
            if reps > 1 && reps * p > best.0 as usize * best.1 {
                best = (reps as u64, p);
            }
        }
        out.push((best.0, (t..t + best.1).collect()));
        t += best.0 as usize * best.1;
    }
    out
}

/// The steps `0..total` as the pipeline's phases: the ramp-up (before the first step in
/// which every stage works), the steady state (from it to the last such step) and the
/// ramp-down (after it); empty phases are left out, and a pipeline in which no step keeps
/// every stage working is one phase, "one stage at a time".
pub(crate) fn phases(
    total: usize,
    all_working: impl Fn(usize) -> bool,
) -> Vec<(&'static str, std::ops::Range<usize>)> {
    let full: Vec<usize> = (0..total).filter(|&t| all_working(t)).collect();
    let (Some(&first), Some(&last)) = (full.first(), full.last()) else {
        return vec![("one stage at a time", 0..total)];
    };
    [
        ("ramp-up", 0..first),
        ("steady state", first..last + 1),
        ("ramp-down", last + 1..total),
    ]
    .into_iter()
    .filter(|(_, r)| !r.is_empty())
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every micro-batch goes forward through the stages in order, then backward in
    /// reverse order, each pass after the one it needs; stashes pop in push order.
    fn check(schedule: PipelineSchedule, stages: usize, m: u64) -> Vec<Vec<Work>> {
        let steps = training_steps(schedule, stages, m);
        let mut fwd = vec![vec![None; stages]; m as usize];
        let mut bwd = vec![vec![None; stages]; m as usize];
        for (t, row) in steps.iter().enumerate() {
            for (s, w) in row.iter().enumerate() {
                if let Some(i) = w.forward {
                    assert!(fwd[i as usize][s].replace(t).is_none());
                }
                if let Some(i) = w.backward {
                    assert!(bwd[i as usize][s].replace(t).is_none());
                }
            }
        }
        for i in 0..m as usize {
            for s in 0..stages {
                let (f, b) = (fwd[i][s].unwrap(), bwd[i][s].unwrap());
                assert!(b >= f, "{schedule:?}: B{s}({i}) before F{s}({i})");
                if s > 0 {
                    assert!(f > fwd[i][s - 1].unwrap(), "F{s}({i}) too early");
                }
                if s + 1 < stages {
                    assert!(b > bwd[i][s + 1].unwrap(), "B{s}({i}) too early");
                }
            }
        }
        let end = steps.last().unwrap();
        for w in end {
            assert_eq!(
                w.stashed + w.forward.is_some() as usize - w.backward.is_some() as usize,
                0
            );
        }
        steps
    }

    #[test]
    fn grouped_stashes_two_micro_batches_more_per_stage_from_the_end() {
        let steps = check(PipelineSchedule::Grouped, 4, 8);
        assert_eq!(steps.len(), 8 + 6);
        assert_eq!(stash_depths(&steps), vec![7, 5, 3, 1]);
    }

    #[test]
    fn interleaved_stashes_fewer_in_more_steps() {
        let steps = check(PipelineSchedule::Interleaved, 4, 8);
        assert_eq!(steps.len(), 16 + 6);
        assert_eq!(stash_depths(&steps), vec![4, 3, 2, 1]);
        for row in &steps {
            assert!(
                row.iter()
                    .all(|w| !(w.forward.is_some() && w.backward.is_some()))
            );
        }
    }

    #[test]
    fn sequential_runs_one_pass_at_a_time() {
        let steps = check(PipelineSchedule::Sequential, 3, 5);
        assert_eq!(steps.len(), 30);
        assert_eq!(stash_depths(&steps), vec![1, 1, 1]);
        for row in &steps {
            let passes = row
                .iter()
                .map(|w| w.forward.is_some() as usize + w.backward.is_some() as usize)
                .sum::<usize>();
            assert_eq!(passes, 1);
        }
    }

    #[test]
    fn phases_split_at_the_steps_that_keep_every_stage_working() {
        let steps = check(PipelineSchedule::Grouped, 4, 8);
        let working = |t: usize| {
            steps[t]
                .iter()
                .all(|w| w.forward.is_some() || w.backward.is_some())
        };
        let p = phases(steps.len(), working);
        assert_eq!(
            p,
            vec![
                ("ramp-up", 0..3),
                ("steady state", 3..11),
                ("ramp-down", 11..14)
            ]
        );
        assert_eq!(phases(4, |_| false), vec![("one stage at a time", 0..4)]);
    }

    #[test]
    fn steady_states_become_repeats() {
        let steps = check(PipelineSchedule::Grouped, 4, 16);
        let runs = repeats(&steps, 8);
        let covered: usize = runs.iter().map(|(n, b)| *n as usize * b.len()).sum();
        assert_eq!(covered, steps.len());
        assert!(
            runs.iter().any(|(n, b)| *n == 10 && b.len() == 1),
            "{runs:?}"
        );
        let seq = check(PipelineSchedule::Sequential, 4, 16);
        assert_eq!(repeats(&seq, 8), vec![(16, (0..8).collect())]);
        let inter = check(PipelineSchedule::Interleaved, 4, 16);
        assert!(repeats(&inter, 8).iter().any(|(_, b)| b.len() == 2));
    }
}
