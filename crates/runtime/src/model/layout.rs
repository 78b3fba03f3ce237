//! Where things live on the tiles: the bytes each tile's tensors span, the byte range of a
//! vertex's region in its tile's memory, the pieces (one tile, one stride) a run of a
//! tensor's elements falls into, and the source elements a rearrangement reads.

use crate::model::profile::TileMemory;
use crate::program::executable::{Executable, Interval, Rearrange, Region, Run, RunSource, Tensor};
use std::collections::HashMap;

/// Bytes each used tile needs: the end of the last tensor interval there.
pub(crate) fn tile_extents(exe: &Executable) -> HashMap<(usize, usize), u64> {
    let mut extents: HashMap<(usize, usize), u64> = HashMap::new();
    for t in &exe.tensors {
        for iv in &t.mapping {
            let end = iv.offset + (iv.len * t.dtype.size()) as u64;
            let e = extents.entry((iv.ipu, iv.tile)).or_insert(0);
            *e = (*e).max(end);
        }
    }
    extents
}

/// The memory of every tile that holds data, in tile order (`ipu`, then `tile`): what a
/// profile reports and what an engine allocates.
pub(crate) fn tile_memory(exe: &Executable) -> Vec<TileMemory> {
    let mut tiles: Vec<TileMemory> = tile_extents(exe)
        .into_iter()
        .filter(|&(_, bytes)| bytes > 0)
        .map(|((ipu, tile), bytes)| TileMemory {
            ipu,
            tile,
            bytes_used: bytes,
            bytes_free: exe.target.bytes_per_tile.saturating_sub(bytes),
        })
        .collect();
    tiles.sort_unstable_by_key(|t| (t.ipu, t.tile));
    tiles
}

/// The byte range of a region in its vertex's tile memory, if the region lies entirely in
/// one interval on that tile.
pub(crate) fn region_bytes(t: &Tensor, r: &Region, ipu: usize, tile: usize) -> Option<(u64, u64)> {
    let holds = |iv: &&crate::program::executable::Interval| {
        iv.ipu == ipu
            && iv.tile == tile
            && iv.start <= r.start
            && r.start + r.len <= iv.start + iv.len
    };
    // Mappings are usually in element order: try a binary search before a scan.
    let guess = t.mapping.partition_point(|iv| iv.start + iv.len <= r.start);
    let iv = match t.mapping.get(guess).filter(holds) {
        Some(iv) => iv,
        None => t.mapping.iter().find(holds)?,
    };
    let size = t.dtype.size() as u64;
    let begin = iv.offset + (r.start - iv.start) as u64 * size;
    Some((begin, begin + r.len as u64 * size))
}

/// The elements `lo..hi` each source's runs read (`lo >= hi`: none): the window gathered
/// from that source, whose element `i` is source element `lo + i`.
pub(crate) fn source_ranges(r: &Rearrange) -> Vec<(usize, usize)> {
    let mut range = vec![(usize::MAX, 0usize); r.sources.len()];
    for run in &r.runs {
        if let (RunSource::Tensor { k, start, stride }, true) = (run.source, run.len > 0) {
            let last = (start as isize + (run.len as isize - 1) * stride) as usize;
            let w = &mut range[k as usize];
            *w = (w.0.min(start.min(last)), w.1.max(start.max(last) + 1));
        }
    }
    range
}

/// Per source, the element ranges its runs read, sorted and merged (a strided run counts
/// as the whole span it steps over).
pub(crate) fn read_intervals(r: &Rearrange) -> Vec<Vec<(usize, usize)>> {
    let mut spans = vec![Vec::new(); r.sources.len()];
    for run in &r.runs {
        if let (RunSource::Tensor { k, start, stride }, true) = (run.source, run.len > 0) {
            let last = (start as isize + (run.len as isize - 1) * stride) as usize;
            spans[k as usize].push((start.min(last), start.max(last) + 1));
        }
    }
    for s in &mut spans {
        s.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(s.len());
        for &(a, b) in s.iter() {
            match merged.last_mut() {
                Some(m) if a <= m.1 => m.1 = m.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        *s = merged;
    }
    spans
}

/// Finds where elements of a tensor live.
pub(crate) struct Locator<'t> {
    sorted: Vec<&'t Interval>,
    /// The interval holding element `b * bucket` for each `b`: a lookup starts there and
    /// walks forward, so finding an element costs O(1) when intervals are of similar size
    /// (a strided read of a tensor spread over every tile lands in a new interval at
    /// almost every element).
    first_in_bucket: Vec<u32>,
    bucket: usize,
}

/// Elements that live on one tile and are read with one stride: `(ipu, tile, byte offset of
/// the first, elements)`.
pub(crate) type Piece = (usize, usize, u64, usize);

impl<'t> Locator<'t> {
    pub(crate) fn new(t: &'t Tensor) -> Locator<'t> {
        let mut sorted: Vec<_> = t.mapping.iter().collect();
        sorted.sort_by_key(|iv| iv.start);
        let bucket = t.elements.div_ceil(sorted.len().max(1)).max(1);
        let mut first_in_bucket = Vec::with_capacity(t.elements.div_ceil(bucket));
        let mut k = 0;
        for b in 0..t.elements.div_ceil(bucket) {
            while sorted[k].start + sorted[k].len <= b * bucket {
                k += 1;
            }
            first_in_bucket.push(k as u32);
        }
        Locator {
            sorted,
            first_in_bucket,
            bucket,
        }
    }

    /// The index in `sorted` of the interval holding element `at`.
    fn find(&self, at: usize) -> usize {
        let mut k = self.first_in_bucket[at / self.bucket] as usize;
        while self.sorted[k].start + self.sorted[k].len <= at {
            k += 1;
        }
        k
    }

    /// Calls `f` with the pieces covering elements `start + i * stride` for `i` in
    /// `0..len`, in order. Within one interval, consecutive elements stay on its tile, so a
    /// piece is as long as the stride allows.
    pub(crate) fn pieces(
        &self,
        start: usize,
        stride: isize,
        len: usize,
        size: u64,
        mut f: impl FnMut(Piece),
    ) {
        let mut i = 0;
        while i < len {
            let at = (start as isize + i as isize * stride) as usize;
            let k = self.find(at);
            let iv = self.sorted[k];
            let left = len - i;
            // A stride past the interval's end leaves one element here: no division.
            let count = match stride {
                0 => left,
                s if s > 0 && at + s as usize >= iv.start + iv.len => 1,
                s if s > 0 => (iv.start + iv.len - at).div_ceil(s as usize).min(left),
                s if at - iv.start < s.unsigned_abs() => 1,
                s => ((at - iv.start) / s.unsigned_abs() + 1).min(left),
            };
            f((
                iv.ipu,
                iv.tile,
                iv.offset + (at - iv.start) as u64 * size,
                count,
            ));
            i += count;
        }
    }
}

/// Calls `f(run, piece, done)` for every piece (one destination tile) of every run of `r`,
/// in run order; `done` is how many of the run's elements come before the piece. `dst`
/// locates `r`'s destination, whose elements are `size` bytes.
pub(crate) fn destination_pieces(
    r: &Rearrange,
    dst: &Locator,
    size: usize,
    mut f: impl FnMut(&Run, Piece, usize),
) {
    for run in &r.runs {
        let mut done = 0;
        dst.pieces(run.dst_start, 1, run.len, size as u64, |piece| {
            f(run, piece, done);
            done += piece.3;
        });
    }
}
