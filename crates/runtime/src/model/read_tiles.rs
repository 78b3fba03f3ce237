//! The source tile each run of a block reads, found once per pattern of reads.
//!
//! A dot operand's gather copies each chunk of the operand to every tile that multiplies
//! it: blocks that read alike (the same source elements, run for run) and differ only in
//! where they write (the encoder's: each column chunk of a weight 8 times). What each run
//! reads is located once per pattern and the blocks of that pattern only walk their
//! destination.

use crate::model::layout::{Locator, TileSpan};
use crate::program::executable::RunSource;
use crate::program::runs::RunBlock;
use rustc_hash::FxHashMap;

/// Where a run reads: the tile (`ipu * tiles_per_ipu + tile`) and its IPU, or
/// [`ReadTile::CROSSES`] for a run that reads from more than one interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReadTile {
    pub tile: u32,
    pub ipu: u32,
}

impl ReadTile {
    /// A run that crosses intervals of its source (located piece by piece instead).
    pub(crate) const CROSSES: ReadTile = ReadTile {
        tile: u32::MAX,
        ipu: u32::MAX,
    };
}

/// What a block's runs read, as a key: source, first element, stride, length, count, step.
type Pattern = (u32, usize, isize, usize, usize, isize);

/// The tiles each pattern of reads reads from, run by run, for one rearrangement.
#[derive(Default)]
pub(crate) struct ReadTiles {
    /// Keyed with a fast hash (a gather has a block per operand chunk and destination):
    /// where in `tiles` each pattern's runs are.
    by_pattern: FxHashMap<Pattern, (usize, usize)>,
    /// Every pattern's, one after another (one allocation, not one per block).
    tiles: Vec<ReadTile>,
}

impl ReadTiles {
    /// Where each run of `block` (which reads source `source` with stride -1 or 1) reads,
    /// located once per pattern.
    pub(crate) fn of(
        &mut self,
        block: &RunBlock,
        source: &Locator,
        tiles_per_ipu: usize,
    ) -> &[ReadTile] {
        let RunSource::Tensor { k, start, stride } = block.first.source else {
            unreachable!("blocks that read a tensor are located")
        };
        let key = (
            k,
            start,
            stride,
            block.first.len,
            block.count,
            block.src_step,
        );
        let tiles = &mut self.tiles;
        let (from, to) = *self.by_pattern.entry(key).or_insert_with(|| {
            let from = tiles.len();
            locate(block, source, tiles_per_ipu, tiles);
            (from, tiles.len())
        });
        &self.tiles[from..to]
    }
}

/// Where each run of `block` reads (see [`ReadTiles::of`]), added to `tiles`.
fn locate(block: &RunBlock, source: &Locator, tiles_per_ipu: usize, tiles: &mut Vec<ReadTile>) {
    let len = block.first.len;
    let holds = |span: &TileSpan, lo: usize, hi: usize| span.start <= lo && hi < span.end;
    let mut s: Option<TileSpan> = None;
    tiles.extend(block.runs().map(|run| {
        let RunSource::Tensor { start, stride, .. } = run.source else {
            unreachable!("a block's runs read what its first reads")
        };
        let other_end = (start as isize + (len as isize - 1) * stride) as usize;
        let (lo, hi) = (start.min(other_end), start.max(other_end));
        let read = *s.insert(match s {
            Some(span) if holds(&span, lo, hi) => span,
            _ => source.span_at(lo),
        });
        match hi < read.end {
            true => ReadTile {
                tile: (read.ipu * tiles_per_ipu + read.tile) as u32,
                ipu: read.ipu as u32,
            },
            false => ReadTile::CROSSES,
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::test_numbers::numbers;
    use crate::program::executable::{Interval, Run, Tensor};
    use codegen::DType;

    /// Blocks of random patterns, some repeated, read where each run's own lookup says,
    /// however many blocks came before.
    #[test]
    fn each_run_reads_where_a_fresh_lookup_says() {
        let mut next = numbers(23);
        let tiles_per_ipu = 4;
        for _ in 0..200 {
            let mut mapping = Vec::new();
            let mut start = 0;
            while start < 300 {
                let len = (1 + next(20)).min(300 - start);
                let (ipu, tile) = (next(2), next(tiles_per_ipu));
                mapping.push(Interval {
                    ipu,
                    tile,
                    start,
                    len,
                    offset: 4 * start as u64,
                });
                start += len;
            }
            let source = Tensor {
                name: "s".into(),
                dtype: DType::F32,
                shape: vec![300],
                elements: 300,
                mapping,
                init: None,
                always_live: false,
                live_steps: Vec::new(),
            };
            let at = Locator::new(&source);
            let mut read_tiles = ReadTiles::default();
            // Patterns alike but for where they start, or in every way.
            let shape = |next: &mut dyn FnMut(usize) -> usize| {
                let (len, count) = (1 + next(6), 1 + next(8));
                let steps = [len as isize + next(12) as isize, -(len as isize)];
                (len, count, [1isize, -1][next(2)], steps[next(2)])
            };
            let alike = shape(&mut next);
            let patterns: Vec<RunBlock> = (0..1 + next(4))
                .map(|_| {
                    let (len, count, stride, src_step) = match next(2) {
                        0 => alike,
                        _ => shape(&mut next),
                    };
                    // Far enough in for 8 runs back and forth.
                    let first = 60 + next(40);
                    RunBlock {
                        first: Run::reading(0, (first, stride), 0, len),
                        count,
                        dst_step: len as isize,
                        src_step,
                    }
                })
                .collect();
            for _ in 0..8 {
                let mut block = patterns[next(patterns.len())];
                block.first.dst_start = next(100);
                let found = read_tiles.of(&block, &at, tiles_per_ipu).to_vec();
                let fresh: Vec<ReadTile> = block
                    .runs()
                    .map(|run| {
                        let RunSource::Tensor { start, stride, .. } = run.source else {
                            unreachable!("reads a tensor")
                        };
                        let end = (start as isize + (run.len as isize - 1) * stride) as usize;
                        let (lo, hi) = (start.min(end), start.max(end));
                        let (a, b) = (Locator::new(&source), Locator::new(&source));
                        let (x, y) = (a.span_at(lo), b.span_at(hi));
                        match (x.ipu, x.tile, x.start) == (y.ipu, y.tile, y.start) {
                            true => ReadTile {
                                tile: (x.ipu * tiles_per_ipu + x.tile) as u32,
                                ipu: x.ipu as u32,
                            },
                            false => ReadTile::CROSSES,
                        }
                    })
                    .collect();
                assert_eq!(found, fresh, "{block:?}");
            }
        }
    }
}
