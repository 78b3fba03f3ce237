//! What a rearrangement or copy costs: the bytes each tile sends, receives and copies on
//! itself, and what crosses IPU-Links, accumulated piece by piece (a piece: elements that
//! move between one pair of tiles with a fixed stride) and turned into cycles.

use crate::RuntimeError;
use crate::cost;
use crate::executable::{Interval, Tensor};
use crate::paging;
use crate::system::System;
use std::collections::HashMap;

/// What a copy costs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CopyCost {
    pub on_tile_cycles: u64,
    pub sync_cycles: u64,
    pub exchange_cycles: u64,
    pub bytes_exchanged: u64,
    pub bytes_over_links: u64,
    /// Out of core: cycles paging what the copy reads and writes, and those bytes.
    pub paging_cycles: u64,
    pub bytes_paged: u64,
}

/// Bytes per tile (indexed `ipu * tiles_per_ipu + tile`) and per pair of IPUs: what a
/// rearrangement moves, accumulated piece by piece while it is loaded.
pub(crate) struct Traffic {
    tiles_per_ipu: usize,
    on_tile: Vec<u64>,
    sent: Vec<u64>,
    received: Vec<u64>,
    filled: Vec<u64>,
    links: HashMap<(usize, usize), u64>,
    bytes_exchanged: u64,
    bytes_over_links: u64,
}

impl Traffic {
    pub(crate) fn new(system: &System) -> Traffic {
        let tiles_per_ipu = system.target.tiles_per_ipu;
        let n = system.num_ipus() * tiles_per_ipu;
        Traffic {
            tiles_per_ipu,
            on_tile: vec![0; n],
            sent: vec![0; n],
            received: vec![0; n],
            filled: vec![0; n],
            links: HashMap::new(),
            bytes_exchanged: 0,
            bytes_over_links: 0,
        }
    }

    /// `bytes` sent from tile `src` to tile `dst` (each `(ipu, tile)`).
    pub(crate) fn add(&mut self, src: (usize, usize), dst: (usize, usize), bytes: u64) {
        let (s, d) = (
            src.0 * self.tiles_per_ipu + src.1,
            dst.0 * self.tiles_per_ipu + dst.1,
        );
        if s == d {
            self.on_tile[s] += bytes;
        } else if src.0 == dst.0 {
            self.sent[s] += bytes;
            self.received[d] += bytes;
            self.bytes_exchanged += bytes;
        } else {
            *self.links.entry((src.0, dst.0)).or_default() += bytes;
            self.bytes_over_links += bytes;
        }
    }

    /// `bytes` of fill value written on tile `(ipu, tile)`.
    pub(crate) fn fill(&mut self, ipu: usize, tile: usize, bytes: u64) {
        self.filled[ipu * self.tiles_per_ipu + tile] += bytes;
    }

    /// On-tile copies (and fills) first, then one sync and the exchange phase, whose length
    /// is the busiest tile's bytes over the exchange bandwidth or the slowest IPU-Link
    /// transfer, whichever is longer. Out of core, the virtual tiles a physical tile runs
    /// add up, and every byte read or written is paged to or from Streaming Memory.
    pub(crate) fn cost(&self, system: &System) -> Result<CopyCost, RuntimeError> {
        let target = &system.target;
        let ipus = system.num_ipus();
        let busiest =
            |v: &[u64]| paging::busiest_physical(target, ipus, v.iter().copied().enumerate());
        let on_tile = cost::on_tile_copy_cycles(busiest(&self.on_tile))
            .max(cost::on_tile_copy_cycles(busiest(&self.filled)));
        let exchanged = busiest(&self.sent).max(busiest(&self.received));
        let on_chip = cost::exchange_cycles(target, exchanged);
        let mut over_links = 0;
        for (&(from, to), &bytes) in &self.links {
            over_links = over_links.max(system.transfer_cycles(bytes, from, to)?);
        }
        // An on-tile copy reads and writes its bytes; a send reads, a receive or fill writes.
        let touched = (0..self.sent.len()).map(|t| {
            let bytes = 2 * self.on_tile[t] + self.sent[t] + self.received[t] + self.filled[t];
            (t, bytes)
        });
        let linked = self.links.iter().flat_map(|(&(from, to), &bytes)| {
            // Charged to the first tile of each IPU: only the per-IPU total matters.
            [
                (from * self.tiles_per_ipu, bytes),
                (to * self.tiles_per_ipu, bytes),
            ]
        });
        let (paging_cycles, bytes_paged) = paging::paging(target, ipus, touched.chain(linked));
        Ok(CopyCost {
            on_tile_cycles: on_tile,
            sync_cycles: if !self.links.is_empty() {
                system.global_sync_cycles()
            } else if exchanged > 0 {
                target.internal_sync_cycles
            } else {
                0
            },
            exchange_cycles: on_chip.max(over_links),
            bytes_exchanged: self.bytes_exchanged,
            bytes_over_links: self.bytes_over_links,
            paging_cycles,
            bytes_paged,
        })
    }
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
