//! Blocks of strided reads (transposes) costed by counting, not by locating each element.
//!
//! A transposed operand is gathered by a block of runs: run `r` reads elements
//! `start + r + i * stride` (`i < len`) and writes them from `dst_start + r * dst_step`.
//! Costing it run by run finds the tile of every element read (where the source's
//! intervals are shorter than a row, every element of a column sits in its own interval),
//! and a transformer's rearrangements read millions. But a strided read's bytes count only
//! per pair of tiles and never as stretches of memory (`exchange::Traffic::add_strided`), and on
//! one IPU what they add is, per tile: the bytes read from it, the bytes written on it, and
//! the bytes both read from and written on it (copied on the tile). Each is a count: the
//! reads row by row of the block (row `i` reads a contiguous range, `count` elements), the
//! writes run by run, and the elements that stay on their tile, for each piece of a run
//! written on a tile, by counting which of its elements the tile's own source intervals
//! hold (a division per interval, not a lookup per element).

use crate::model::layout::Locator;
use crate::program::runs::{RunBlock, RunSource};
use std::collections::HashMap;

/// Per tile of one IPU: elements read from it, written on it, and both.
#[derive(Default)]
pub(crate) struct StridedCounts {
    /// `[read, written, stayed]` per tile (`tile` index on the IPU).
    counts: Vec<[u64; 3]>,
    /// Tiles with a count, in the order they got one.
    touched: Vec<usize>,
    /// Each source's intervals by tile, sorted (built once per source, on first use).
    by_tile: HashMap<u32, HashMap<usize, Vec<(usize, usize)>>>,
}

impl StridedCounts {
    fn count(&mut self, tile: usize, what: usize, n: usize) {
        if self.counts.len() <= tile {
            self.counts.resize(tile + 1, [0; 3]);
        }
        let c = &mut self.counts[tile];
        if *c == [0; 3] {
            self.touched.push(tile);
        }
        c[what] += n as u64;
    }

    /// Counts `block` (reading source `k`, located by `source`, written where `dst_at`
    /// says), calls `add((ipu, tile), (read, written, stayed))` for each tile it touches
    /// (elements read from the tile, written on it, and both), and returns true; or
    /// returns false, calling nothing, for a block this does not cover: a single run, a
    /// stride of -1, 0 or 1, runs that do not start one element apart in the source or that
    /// overlap in the destination, or tensors not all on one IPU.
    pub(crate) fn add_block(
        &mut self,
        block: &RunBlock,
        (dst_at, source): (&Locator, &Locator),
        mut add: impl FnMut((usize, usize), (u64, u64, u64)),
    ) -> bool {
        let RunSource::Tensor { k, start, stride } = block.first.source else {
            return false;
        };
        let (len, count) = (block.first.len, block.count);
        let ipu = match (dst_at.one_ipu(), source.one_ipu()) {
            (Some(a), Some(b)) if a == b => a,
            _ => return false,
        };
        if count < 2
            || len == 0
            || stride < 2
            || block.src_step != 1
            || block.dst_step < len as isize
        {
            return false;
        }
        let (stride, dst_step) = (stride as usize, block.dst_step as usize);
        let d0 = block.first.dst_start;
        // Reads: row `i` of the block reads `count` consecutive elements.
        for i in 0..len {
            source.pieces(start + i * stride, 1, count, 1, |(_, tile, _, n)| {
                self.count(tile, 0, n)
            });
        }
        let by_tile = self
            .by_tile
            .entry(k)
            .or_insert_with(|| source.intervals_by_tile());
        let mut writes: Vec<(usize, usize)> = Vec::new();
        let mut stayed: Vec<(usize, usize)> = Vec::new();
        for r in 0..count {
            let mut done = 0;
            dst_at.pieces(d0 + r * dst_step, 1, len, 1, |(_, tile, _, n)| {
                writes.push((tile, n));
                // Elements i in done..done + n read start + r + i * stride: those in one
                // of this tile's own source intervals stay on the tile.
                let mut kept = 0;
                if let Some(spans) = by_tile.get(&tile) {
                    kept = kept_on_tile(spans, start + r, stride, (done, done + n));
                }
                if kept > 0 {
                    stayed.push((tile, kept));
                }
                done += n;
            });
        }
        for (tile, n) in writes {
            self.count(tile, 1, n);
        }
        for (tile, n) in stayed {
            self.count(tile, 2, n);
        }
        for tile in self.touched.drain(..) {
            let [read, written, stayed] = std::mem::take(&mut self.counts[tile]);
            add((ipu, tile), (read, written, stayed));
        }
        true
    }
}

/// How many of the elements `first + i * stride`, `i` in `is.0..is.1`, lie in `spans`
/// (disjoint intervals sorted by start).
fn kept_on_tile(
    spans: &[(usize, usize)],
    first: usize,
    stride: usize,
    is: (usize, usize),
) -> usize {
    let (lo, hi) = (first + is.0 * stride, first + (is.1 - 1) * stride);
    // The first interval ending after `lo`.
    let mut k = spans.partition_point(|&(_, end)| end <= lo);
    let mut kept = 0;
    while let Some(&(a, b)) = spans.get(k) {
        if a > hi {
            break;
        }
        // i with a <= first + i * stride < b, within `is`.
        let from = a.saturating_sub(first).div_ceil(stride).max(is.0);
        let to = b.saturating_sub(first).div_ceil(stride).min(is.1);
        kept += to.saturating_sub(from);
        k += 1;
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_elements_a_tile_holds_of_a_strided_read() {
        // Elements 3, 10, 17, 24, 31 (first 3, stride 7); the tile holds 0..11 and 20..30.
        let spans = [(0, 11), (20, 30)];
        assert_eq!(kept_on_tile(&spans, 3, 7, (0, 5)), 3);
        assert_eq!(kept_on_tile(&spans, 3, 7, (1, 4)), 2);
        assert_eq!(kept_on_tile(&spans, 3, 7, (4, 5)), 0);
        assert_eq!(kept_on_tile(&[], 3, 7, (0, 5)), 0);
    }
}
