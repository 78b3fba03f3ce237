//! Strided reads costed once per group of shifted copies.
//!
//! A transposed operand block is gathered by runs that each read a column: run `j` reads
//! elements `start + j + i * stride`. Where the source is laid out by rows, every element
//! of a column sits in its own interval, so finding where a column's elements live costs a
//! lookup per element, and a rearrangement of 5 M elements made 5 M lookups. The next
//! column, moved up by one element, falls into the same intervals (so on the same tiles, in
//! the same pieces) as long as no element crosses its interval's end: its traffic is the
//! previous column's again. A strided read's bytes are counted per pair of tiles and never
//! located (no multicast stretch, see `exchange::Traffic::add_strided`), so such repeats
//! add up exactly, and are added in one go when the group ends.

use crate::model::layout::Locator;

/// A read of `len` elements of source `k`, from element `first`, every `stride`, written on
/// tile `dst` (`(ipu, tile)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StridedRead {
    pub k: u32,
    pub first: usize,
    pub stride: isize,
    pub len: usize,
    pub dst: (usize, usize),
}

/// The last strided read's pieces and how many shifted copies of it are not yet added.
#[derive(Default)]
pub(crate) struct ShiftedReads {
    last: Option<StridedRead>,
    /// The last read's source tiles in order, `(ipu, tile, elements)`, neighbours on one
    /// tile joined.
    pieces: Vec<(usize, usize, usize)>,
    /// How far the last read can still move up and fall into the same pieces.
    room: usize,
    /// Reads of `pieces` not yet added to the traffic.
    repeats: usize,
}

impl ShiftedReads {
    /// Adds `read` (of elements located by `source`) with `add(source tile, destination
    /// tile, elements)`, or keeps it to add with the reads it repeats.
    pub(crate) fn read(
        &mut self,
        source: &Locator,
        read: StridedRead,
        add: impl FnMut((usize, usize), (usize, usize), usize),
    ) {
        if let Some(last) = &mut self.last
            && (last.k, last.stride, last.len, last.dst)
                == (read.k, read.stride, read.len, read.dst)
            && read.first > last.first
            && read.first - last.first <= self.room
        {
            self.room -= read.first - last.first;
            last.first = read.first;
            self.repeats += 1;
            return;
        }
        self.flush(add);
        let mut room = usize::MAX;
        let pieces = &mut self.pieces;
        // Byte offsets are not used: any element size will do.
        source.pieces_with_room(
            read.first,
            read.stride,
            read.len,
            1,
            |(ipu, tile, _, n), r| {
                room = room.min(r);
                match pieces.last_mut() {
                    Some(p) if (p.0, p.1) == (ipu, tile) => p.2 += n,
                    _ => pieces.push((ipu, tile, n)),
                }
            },
        );
        self.last = Some(read);
        self.room = room;
        self.repeats = 1;
    }

    /// Adds the reads kept so far with `add`, as [`ShiftedReads::read`].
    pub(crate) fn flush(&mut self, mut add: impl FnMut((usize, usize), (usize, usize), usize)) {
        if let Some(last) = self.last.take() {
            for &(ipu, tile, n) in &self.pieces {
                add((ipu, tile), last.dst, n * self.repeats);
            }
        }
        self.pieces.clear();
        self.repeats = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::executable::{Interval, Tensor};
    use codegen::DType;
    use std::collections::BTreeMap;

    /// A `rows x cols` f32 tensor laid out by half rows, half row `h` on tile `h % 7` of
    /// IPU `h % 2`.
    fn by_half_rows(rows: usize, cols: usize) -> Tensor {
        let half = cols / 2;
        let mapping = (0..2 * rows)
            .map(|h| Interval {
                ipu: h % 2,
                tile: h % 7,
                start: h * half,
                len: half,
                offset: (h / 7 * half * 4) as u64,
            })
            .collect();
        Tensor {
            name: "t".into(),
            dtype: DType::F32,
            shape: vec![rows, cols],
            elements: rows * cols,
            mapping,
            init: None,
            always_live: false,
            live_steps: Vec::new(),
        }
    }

    /// Elements per (source tile, destination tile).
    type Tally = BTreeMap<((usize, usize), (usize, usize)), usize>;

    fn tally(t: &mut Tally) -> impl FnMut((usize, usize), (usize, usize), usize) + '_ {
        |src, dst, n| *t.entry((src, dst)).or_default() += n
    }

    /// Columns of a row-major tensor read one after another (in order, out of order, of
    /// other lengths and to other tiles) add what their elements read one by one add.
    #[test]
    fn shifted_columns_add_what_their_elements_add() {
        let t = by_half_rows(9, 10);
        let source = Locator::new(&t);
        let (mut kept, mut plain) = (Tally::new(), Tally::new());
        let mut reads = ShiftedReads::default();
        let read = |col: usize, len: usize, tile: usize| StridedRead {
            k: 0,
            first: col,
            stride: 10,
            len,
            dst: (0, tile),
        };
        let mut all: Vec<StridedRead> = (0..10).map(|col| read(col, 9, 8)).collect();
        all.extend([read(3, 8, 8), read(4, 8, 8), read(2, 8, 9), read(3, 8, 9)]);
        all.extend([read(9, 9, 8), read(7, 9, 8), read(8, 9, 8), read(1, 9, 7)]);
        for r in all {
            reads.read(&source, r, tally(&mut kept));
            for i in 0..r.len {
                source.pieces(r.first + 10 * i, 1, 1, 4, |(ipu, tile, _, n)| {
                    tally(&mut plain)((ipu, tile), r.dst, n)
                });
            }
        }
        reads.flush(tally(&mut kept));
        assert_eq!(kept, plain);
    }

    /// Within a half row a column repeats the one before; across its end it does not.
    #[test]
    fn a_read_repeats_the_last_only_while_its_elements_stay_in_their_intervals() {
        let t = by_half_rows(4, 10);
        let source = Locator::new(&t);
        let mut added = Tally::new();
        let mut reads = ShiftedReads::default();
        let read = |col| StridedRead {
            k: 0,
            first: col,
            stride: 10,
            len: 4,
            dst: (0, 12),
        };
        for col in 0..5 {
            reads.read(&source, read(col), tally(&mut added));
        }
        assert_eq!((reads.repeats, added.len()), (5, 0));
        reads.read(&source, read(5), tally(&mut added));
        assert_eq!(reads.repeats, 1);
        assert_eq!(added.values().sum::<usize>(), 5 * 4);
    }
}
