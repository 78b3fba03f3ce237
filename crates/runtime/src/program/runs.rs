//! A rearrangement's runs in compact form: consecutive runs that differ only by fixed steps
//! of their source and destination starts (a dot operand's rows gathered from a row-major
//! matrix, a transpose's columns) are one [`RunBlock`].
//!
//! A gather of `rows x cols` elements is `rows` runs but one block, so lowering writes, the
//! executable stores and validation checks a block per gather rather than a run per row
//! (the transformer bench's dots: 3.26 M runs, 61 k blocks). Anything that needs the runs
//! themselves walks them with [`Runs::iter`], in the order they were pushed.

use serde::{Deserialize, Serialize};

/// Where a run of a rearrangement reads from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RunSource {
    /// Elements of `Rearrange::sources[k]`: the run's element `i` reads source element
    /// `start + i * stride` (`stride` 1: a contiguous run; 0: one element repeated, as a
    /// broadcast; other values: a transpose's column, a reverse).
    Tensor {
        /// Index into the sources.
        k: u32,
        /// First element read.
        start: usize,
        /// Source elements between consecutive elements of the run.
        #[serde(default = "contiguous")]
        stride: isize,
    },
    /// The fill element, repeated.
    Fill,
}

fn contiguous() -> isize {
    1
}

impl RunSource {
    /// A contiguous run of source `k` from `start`.
    pub fn contiguous(k: u32, start: usize) -> RunSource {
        RunSource::Tensor {
            k,
            start,
            stride: 1,
        }
    }
}

/// `len` consecutive destination elements from `dst_start` copied from a source run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// Where the elements come from.
    pub source: RunSource,
    /// First destination element.
    pub dst_start: usize,
    /// Number of elements.
    pub len: usize,
}

impl Run {
    /// `len` destination elements from `dst_start` read from source `k` at `start`, then
    /// every `stride` elements.
    pub fn reading(k: u32, (start, stride): (usize, isize), dst_start: usize, len: usize) -> Run {
        Run {
            source: RunSource::Tensor { k, start, stride },
            dst_start,
            len,
        }
    }
}

/// `count` runs: run `i` is `first` with its destination start moved by `i * dst_step`
/// elements and (a tensor source) its source start by `i * src_step`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunBlock {
    /// The first run.
    pub first: Run,
    /// How many runs (at least 1 in a valid executable).
    pub count: usize,
    /// Destination elements between the starts of consecutive runs.
    pub dst_step: isize,
    /// Source elements between the starts of consecutive runs (0 for a fill).
    pub src_step: isize,
}

impl RunBlock {
    /// A block of the one run `run`.
    pub fn single(run: Run) -> RunBlock {
        RunBlock {
            first: run,
            count: 1,
            dst_step: 0,
            src_step: 0,
        }
    }

    /// Run `i` of the block (`i < count`; starts wrap as the arithmetic of a malformed
    /// block would, which validation rejects before anything reads them).
    pub fn run(&self, i: usize) -> Run {
        let mut run = self.first;
        let i = i as isize;
        run.dst_start =
            (run.dst_start as isize).wrapping_add(i.wrapping_mul(self.dst_step)) as usize;
        if let RunSource::Tensor { start, .. } = &mut run.source {
            *start = (*start as isize).wrapping_add(i.wrapping_mul(self.src_step)) as usize;
        }
        run
    }

    /// The block's runs, in order.
    pub fn runs(&self) -> impl ExactSizeIterator<Item = Run> + '_ {
        (0..self.count).map(|i| self.run(i))
    }

    /// The last run (the first for an empty block).
    pub fn last(&self) -> Run {
        self.run(self.count.saturating_sub(1))
    }

    /// Destination elements the block writes.
    pub fn elements(&self) -> usize {
        self.count * self.first.len
    }

    /// Whether `run` continues this block: same source, stride and length, starts one step
    /// on (a block of one run takes any step).
    fn continues_with(&self, run: &Run) -> Option<(isize, isize)> {
        // Empty runs never share a block: a block of them would be work without bytes.
        if run.len != self.first.len || run.len == 0 || self.count == 0 {
            return None;
        }
        let last = self.last();
        let dst_step = run.dst_start as isize - last.dst_start as isize;
        let src_step = match (last.source, run.source) {
            (RunSource::Fill, RunSource::Fill) => 0,
            (
                RunSource::Tensor {
                    k,
                    start: from,
                    stride,
                },
                RunSource::Tensor {
                    k: k2,
                    start,
                    stride: stride2,
                },
            ) if k == k2 && stride == stride2 => start as isize - from as isize,
            _ => return None,
        };
        let steps = (dst_step, src_step);
        (self.count == 1 || steps == (self.dst_step, self.src_step)).then_some(steps)
    }
}

/// A rearrangement's runs, as blocks; see the module docs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Runs {
    blocks: Vec<RunBlock>,
}

impl Runs {
    /// No runs.
    pub fn new() -> Runs {
        Runs::default()
    }

    /// Exactly these blocks (as stored; not merged further).
    pub fn from_blocks(blocks: Vec<RunBlock>) -> Runs {
        Runs { blocks }
    }

    /// Appends `run`: into the last block when it continues it, else as a new block.
    pub fn push(&mut self, run: Run) {
        if let Some(last) = self.blocks.last_mut()
            && let Some((dst_step, src_step)) = last.continues_with(&run)
        {
            last.dst_step = dst_step;
            last.src_step = src_step;
            last.count += 1;
            return;
        }
        self.blocks.push(RunBlock::single(run));
    }

    /// Appends `count` runs: `first`, then each moved on by `dst_step` and `src_step` from
    /// the one before, exactly as `count` calls of [`Runs::push`] would (a dot operand's
    /// rows: one block, whatever their number).
    pub fn push_stepped(&mut self, first: Run, count: usize, dst_step: isize, src_step: isize) {
        let moved = RunBlock {
            first,
            count: 2,
            dst_step,
            src_step,
        };
        // Empty runs never share a block, and fills step by 0 whatever `src_step` says.
        let tensor = matches!(first.source, RunSource::Tensor { .. });
        let pushed_one_by_one = if tensor && first.len > 0 { 2 } else { count };
        for i in 0..count.min(pushed_one_by_one) {
            self.push(moved.run(i));
        }
        if count > pushed_one_by_one {
            // The second run either continued the block before it, with these steps, or
            // opened a block the third run continues: the rest join the same block.
            let last = self.blocks.last_mut().expect("runs were just pushed");
            if last.count == 1 {
                (last.dst_step, last.src_step) = (dst_step, src_step);
            }
            last.count += count - pushed_one_by_one;
        }
    }

    /// The blocks, in order.
    pub fn blocks(&self) -> &[RunBlock] {
        &self.blocks
    }

    /// Every run, in the order pushed.
    pub fn iter(&self) -> impl Iterator<Item = Run> + '_ {
        self.blocks.iter().flat_map(RunBlock::runs)
    }

    /// How many runs.
    pub fn count(&self) -> usize {
        self.blocks.iter().map(|b| b.count).sum()
    }

    /// Destination elements written.
    pub fn elements(&self) -> usize {
        self.blocks.iter().map(RunBlock::elements).sum()
    }

    /// Whether there are no runs.
    pub fn is_empty(&self) -> bool {
        self.blocks.iter().all(|b| b.count == 0)
    }

    /// The first run, if any (a test's or a shortcut's look at a one-run rearrangement).
    pub fn first(&self) -> Option<Run> {
        self.blocks.iter().find(|b| b.count > 0).map(|b| b.first)
    }
}

impl From<Vec<Run>> for Runs {
    fn from(runs: Vec<Run>) -> Runs {
        runs.into_iter().collect()
    }
}

impl FromIterator<Run> for Runs {
    fn from_iter<I: IntoIterator<Item = Run>>(runs: I) -> Runs {
        let mut all = Runs::new();
        for run in runs {
            all.push(run);
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(start: usize, stride: isize, dst_start: usize, len: usize) -> Run {
        Run::reading(0, (start, stride), dst_start, len)
    }

    #[test]
    fn rows_of_a_gather_are_one_block_and_come_back_in_order() {
        // Rows 2..6 of columns 3..7 of a [8, 10] matrix, packed.
        let rows: Vec<Run> = (2..6).map(|r| run(r * 10 + 3, 1, (r - 2) * 4, 4)).collect();
        let runs = Runs::from(rows.clone());
        assert_eq!(runs.blocks().len(), 1);
        assert_eq!(runs.blocks()[0].src_step, 10);
        assert_eq!(runs.blocks()[0].dst_step, 4);
        assert_eq!(runs.iter().collect::<Vec<_>>(), rows);
        assert_eq!((runs.count(), runs.elements()), (4, 16));
    }

    #[test]
    fn a_run_that_breaks_the_step_starts_a_new_block() {
        let all = vec![
            run(0, 1, 0, 4),
            run(10, 1, 4, 4),
            run(20, 1, 8, 4),
            run(35, 1, 12, 4),  // source step 15, not 10
            run(45, -1, 16, 4), // another stride
            run(55, -1, 20, 4),
            run(65, -1, 24, 3), // another length
            Run {
                source: RunSource::Fill,
                dst_start: 27,
                len: 3,
            },
            Run {
                source: RunSource::Fill,
                dst_start: 31,
                len: 3,
            },
        ];
        let runs = Runs::from(all.clone());
        let counts: Vec<usize> = runs.blocks().iter().map(|b| b.count).collect();
        assert_eq!(counts, [3, 1, 2, 1, 2]);
        assert_eq!(runs.iter().collect::<Vec<_>>(), all);
        assert!(!runs.is_empty() && Runs::new().is_empty());
    }

    #[test]
    fn stepped_runs_make_the_blocks_pushing_them_one_by_one_makes() {
        let fill = |dst_start, len| Run {
            source: RunSource::Fill,
            dst_start,
            len,
        };
        // What comes before: nothing, one run, a block with the steps that follow or others.
        let prefixes = [
            vec![],
            vec![run(0, 1, 0, 4)],
            vec![run(0, 1, 0, 4), run(10, 1, 4, 4)],
            vec![run(0, 1, 0, 4), run(7, 1, 4, 4)],
            vec![fill(0, 4), fill(4, 4)],
        ];
        let firsts = [
            run(20, 1, 8, 4),
            run(20, 3, 8, 4),
            run(20, 1, 8, 0),
            run(20, 1, 8, 1),
            fill(8, 4),
        ];
        for prefix in &prefixes {
            for &first in &firsts {
                for count in 0..6 {
                    for (dst_step, src_step) in [(4, 10), (4, 7), (4, -3), (0, 0), (-4, 10)] {
                        let mut one_by_one = Runs::from(prefix.clone());
                        let moved = RunBlock {
                            first,
                            count,
                            dst_step,
                            src_step,
                        };
                        moved.runs().for_each(|r| one_by_one.push(r));
                        let mut stepped = Runs::from(prefix.clone());
                        stepped.push_stepped(first, count, dst_step, src_step);
                        assert_eq!(
                            stepped, one_by_one,
                            "{prefix:?} then {count} of {first:?} by {dst_step}, {src_step}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn runs_of_different_sources_never_share_a_block() {
        let mut other = run(10, 1, 4, 4);
        other.source = RunSource::Tensor {
            k: 1,
            start: 10,
            stride: 1,
        };
        let runs = Runs::from(vec![run(0, 1, 0, 4), other]);
        assert_eq!(runs.blocks().len(), 2);
    }
}
