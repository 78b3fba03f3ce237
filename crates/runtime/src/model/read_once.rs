//! Whether every destination tile of a rearrangement reads each source element at most
//! once, told from its blocks of runs without following a run.
//!
//! When it does, no tile sends a byte to one receiver twice, so what a tile puts on its
//! wires (its sends multicast, see `multicast`) is at most the bytes it holds of the
//! sources: a bound that settles the busiest sender of most gathers (a dot operand copied
//! to every tile that needs it: each source tile sends its bytes to many receivers, once
//! each) without collecting and sorting every stretch each tile sends.

use crate::model::layout::Locator;
use crate::program::executable::{Rearrange, RunSource};
use crate::program::runs::RunBlock;

/// The source elements a block reads: its runs `i < count` read source `k`'s elements
/// `first + i * step + 0..extent` (`step >= extent` when `count > 1`: the runs' reads are
/// disjoint).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Reads {
    k: u32,
    first: isize,
    step: isize,
    count: usize,
    extent: isize,
}

/// What a block reads that a receiver could be sent.
enum BlockReads {
    /// Nothing (a fill, an empty run, a stride other than -1, 0 or 1, whose sends are
    /// never shared).
    Nothing,
    /// These elements, each once.
    Once(Reads),
    /// Some element twice (runs of the block overlap in the source).
    Overlapping,
}

impl Reads {
    /// What `block` reads.
    fn of(block: &RunBlock) -> BlockReads {
        let (len, count) = (block.first.len as isize, block.count);
        let RunSource::Tensor { k, start, stride } = block.first.source else {
            return BlockReads::Nothing;
        };
        if len == 0 || !matches!(stride, -1..=1) {
            return BlockReads::Nothing;
        }
        // A stride-0 run sends its one element once (see `Traffic::add_repeated`).
        let extent = if stride == 0 { 1 } else { len };
        let lowest = match stride {
            -1 => start as isize - (len - 1),
            _ => start as isize,
        };
        let step = block.src_step;
        if count == 1 {
            return BlockReads::Once(Reads {
                k,
                first: lowest,
                step: 0,
                count,
                extent,
            });
        }
        if step.abs() < extent {
            return BlockReads::Overlapping;
        }
        let first = match step {
            s if s > 0 => lowest,
            s => lowest + (count as isize - 1) * s,
        };
        BlockReads::Once(Reads {
            k,
            first,
            step: step.abs(),
            count,
            extent,
        })
    }

    /// The elements from the lowest read to just past the highest.
    fn bounds(&self) -> (isize, isize) {
        let last = self.first + (self.count as isize - 1) * self.step;
        (self.first, last + self.extent)
    }

    /// Whether no element `lo..hi` is read.
    fn misses(&self, (lo, hi): (isize, isize)) -> bool {
        // The first run ending past `lo` (runs move up by `step > 0` when there are more).
        let i = match self.first + self.extent > lo {
            true => 0,
            false => (lo - self.first - self.extent) / self.step + 1,
        };
        i as usize >= self.count || self.first + i * self.step >= hi
    }

    /// Whether `self` and `other` read no element in common (`false`: they may).
    fn disjoint(&self, other: &Reads) -> bool {
        let (a, b) = (self.bounds(), other.bounds());
        if self.k != other.k || a.1 <= b.0 || b.1 <= a.0 {
            return true;
        }
        match (self.count, other.count) {
            (1, 1) => false,
            (1, _) => other.misses(a),
            (_, 1) => self.misses(b),
            // Runs a fixed step apart read, modulo the step, one arc each.
            _ if self.step == other.step => {
                let s = self.step;
                let apart = (other.first - self.first).rem_euclid(s);
                apart >= self.extent && s - apart >= other.extent
            }
            _ => false,
        }
    }
}

/// Whether `r` reads each source element at most once in all (no two runs, whatever tiles
/// they write, read one element): then every byte a tile sends goes to one receiver, and
/// a tile puts on its wires exactly the bytes it sends (a slice, the partial sums of a
/// dot gathered into place). `false` when that cannot be told cheaply: a source named
/// twice (two names of one element), a stride-0 run (a broadcast: its element goes to
/// every tile it writes), blocks whose runs overlap, or many blocks whose ranges
/// interleave. Distinct elements of the sources lie in distinct bytes, as the memory
/// planner places them.
pub(crate) fn reads_each_element_once_in_all(r: &Rearrange) -> bool {
    let named_twice = (r.sources.iter().enumerate()).any(|(i, s)| r.sources[..i].contains(s));
    if named_twice {
        return false;
    }
    let mut reads: Vec<Reads> = Vec::with_capacity(r.runs.blocks().len());
    for block in r.runs.blocks() {
        // A stride-0 run's one element goes to every tile the run writes.
        if matches!(block.first.source, RunSource::Tensor { stride: 0, .. }) {
            return false;
        }
        match Reads::of(block) {
            BlockReads::Nothing => {}
            BlockReads::Overlapping => return false,
            BlockReads::Once(reading) => reads.push(reading),
        }
    }
    // In order of where they start: each read is compared with the earlier ones whose
    // range it meets, which are few unless blocks interleave.
    reads.sort_unstable_by_key(|x| (x.k, x.first));
    let mut budget = 4 * reads.len() + 64;
    let mut open: Vec<usize> = Vec::new();
    for (i, x) in reads.iter().enumerate() {
        let (k, lo) = (x.k, x.first);
        open.retain(|&j| reads[j].k == k && reads[j].bounds().1 > lo);
        for &j in &open {
            if budget == 0 || !reads[j].disjoint(x) {
                return false;
            }
            budget -= 1;
        }
        open.push(i);
    }
    true
}

/// Whether each destination tile of `r` reads each source element at most once. `false`
/// when that cannot be told cheaply: blocks whose runs overlap in the source, or blocks
/// writing one tile with reads of different steps that overlap in range.
pub(crate) fn reads_each_element_once(r: &Rearrange, dst: &Locator, tiles_per_ipu: usize) -> bool {
    let blocks = r.runs.blocks();
    // (destination tile, block): the blocks each tile receives from.
    let mut written: Vec<(usize, u32)> = Vec::new();
    let mut reads: Vec<Reads> = Vec::with_capacity(blocks.len());
    // Blocks interleaved over many tiles (a transpose's columns) would cost more to sort
    // out than the stretches they save: give up past a few intervals per block.
    let mut budget = 4 * (blocks.len() + dst.intervals());
    for block in blocks {
        let reading = match Reads::of(block) {
            BlockReads::Nothing => continue,
            BlockReads::Overlapping => return false,
            BlockReads::Once(reading) => reading,
        };
        let at = reads.len() as u32;
        reads.push(reading);
        let last = block.run(block.count - 1).dst_start;
        let (lo, hi) = (
            block.first.dst_start.min(last),
            block.first.dst_start.max(last) + block.first.len,
        );
        let within = dst.tiles_holding(lo, hi, tiles_per_ipu, &mut budget, |tile| {
            written.push((tile, at))
        });
        if !within {
            return false;
        }
    }
    written.sort_unstable();
    written.dedup();
    for group in written.chunk_by(|a, b| a.0 == b.0) {
        for (i, &(_, a)) in group.iter().enumerate() {
            for &(_, b) in &group[i + 1..] {
                if budget == 0 || !reads[a as usize].disjoint(&reads[b as usize]) {
                    return false;
                }
                budget -= 1;
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::test_numbers::numbers;
    use std::collections::HashSet;

    fn reads(first: isize, step: isize, count: usize, extent: isize) -> Reads {
        Reads {
            k: 0,
            first,
            step,
            count,
            extent,
        }
    }

    /// `reads_each_element_once_in_all` never says so of blocks that read an element twice,
    /// and says so of disjoint blocks in few ranges.
    #[test]
    fn once_in_all_means_no_element_is_read_twice() {
        use crate::program::executable::{Run, TensorId};
        use crate::program::runs::Runs;
        let mut next = numbers(5);
        let mut told = 0;
        for _ in 0..3000 {
            let sources = 1 + next(2);
            let blocks: Vec<RunBlock> = (0..1 + next(5))
                .map(|_| {
                    let count = 1 + next(4);
                    let len = 1 + next(4);
                    let stride = [1isize, 1, 0, -1, 2][next(5)];
                    let src_step = [
                        len as isize,
                        len as isize + next(3) as isize,
                        1,
                        -(len as isize),
                    ][next(4)];
                    let start = 3 * len + 12 + next(30);
                    RunBlock {
                        first: Run::reading(next(sources) as u32, (start, stride), 0, len),
                        count,
                        dst_step: len as isize,
                        src_step,
                    }
                })
                .collect();
            let mut seen = HashSet::new();
            let mut twice = false;
            for b in &blocks {
                for run in b.runs() {
                    let RunSource::Tensor { k, start, stride } = run.source else {
                        continue;
                    };
                    if !matches!(stride, -1..=1) {
                        continue;
                    }
                    let extent = if stride == 0 { 1 } else { run.len as isize };
                    for e in 0..extent {
                        twice |= !seen.insert((k, start as isize + e * stride));
                    }
                }
            }
            let r = Rearrange {
                name: "r".into(),
                dst: TensorId(0),
                sources: (1..=sources as u32).map(TensorId).collect(),
                fill: vec![0; 4],
                runs: Runs::from_blocks(blocks),
            };
            let once = reads_each_element_once_in_all(&r);
            assert!(!(once && twice), "{:?}", r.runs.blocks());
            told += usize::from(once);
        }
        assert!(told > 500, "{told}");
        // One source named twice: its elements have two names.
        let named_twice = Rearrange {
            name: "r".into(),
            dst: TensorId(0),
            sources: vec![TensorId(1), TensorId(1)],
            fill: vec![0; 4],
            runs: Runs::from_blocks(vec![
                RunBlock::single(Run::reading(0, (0, 1), 0, 4)),
                RunBlock::single(Run::reading(1, (0, 1), 4, 4)),
            ]),
        };
        assert!(!reads_each_element_once_in_all(&named_twice));
    }

    fn elements(r: &Reads) -> HashSet<isize> {
        (0..r.count as isize)
            .flat_map(|i| (0..r.extent).map(move |e| r.first + i * r.step + e))
            .collect()
    }

    /// `disjoint` never says disjoint when two reads share an element, and says so for
    /// reads of one step whose arcs modulo the step do not meet, or a run that falls
    /// between another's.
    #[test]
    fn disjoint_reads_share_no_element() {
        let mut next = numbers(3);
        let mut told = 0;
        for _ in 0..3000 {
            let mut random = || {
                let count = 1 + next(6);
                let extent = 1 + next(5) as isize;
                let step = match count {
                    1 => 0,
                    _ => extent + [0, 1, 3, 7][next(4)],
                };
                reads(next(40) as isize, step, count, extent)
            };
            let (a, b) = (random(), random());
            let shared = !elements(&a).is_disjoint(&elements(&b));
            let disjoint = a.disjoint(&b);
            assert!(!(disjoint && shared), "{a:?} {b:?}");
            let same_step = a.step == b.step || a.count == 1 || b.count == 1;
            if same_step && !shared {
                assert!(disjoint, "{a:?} {b:?} share nothing");
                told += 1;
            }
        }
        assert!(told > 500, "{told}");
    }
}
