//! What a rearrangement or copy costs: the bytes each tile sends, receives and copies on
//! itself, and what crosses IPU-Links, accumulated piece by piece (a piece: elements that
//! move between one pair of tiles with a fixed stride) and turned into cycles.

use crate::device::system::System;
use crate::error::RuntimeError;
use crate::model::code::TakingPart;
use crate::model::cost;
use crate::model::layout::{Locator, destination_pieces};
use crate::model::multicast::{self, Span};
use crate::model::paging;
use crate::model::shifted_reads::{ShiftedReads, StridedRead};
use crate::program::executable::{Rearrange, RunSource, Tensor};
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
    /// Bytes each tile reads to send, every receiver's counted (what paging reads).
    sent: Vec<u64>,
    /// What the tiles send in stretches of their memory, for [`multicast::bytes_sent`]:
    /// all tiles' in one list, in the order added (one list per tile grew by reallocation
    /// at nearly every run of a gather that reads another tile at each run).
    stretches: Vec<Stretch>,
    /// Per tile, 1 + the index in `stretches` of its last stretch (0: none yet).
    last_stretch: Vec<u32>,
    /// Bytes each tile sends that no other receiver can share (strided reads).
    unshared: Vec<u64>,
    received: Vec<u64>,
    filled: Vec<u64>,
    links: HashMap<(usize, usize), u64>,
    bytes_exchanged: u64,
    bytes_over_links: u64,
    /// Whether each tile sends, receives, copies or fills anything.
    taking_part: Vec<bool>,
}

/// A stretch a tile sends, in [`Traffic`]'s list of all tiles' stretches.
struct Stretch {
    /// 1 + the index of the same tile's stretch before it (0: none).
    before: u32,
    span: Span,
}

impl Traffic {
    /// No bytes moved yet, on `system`'s tiles.
    pub(crate) fn new(system: &System) -> Traffic {
        let tiles_per_ipu = system.target.tiles_per_ipu;
        let n = system.num_ipus() * tiles_per_ipu;
        Traffic {
            tiles_per_ipu,
            on_tile: vec![0; n],
            sent: vec![0; n],
            stretches: Vec::new(),
            last_stretch: vec![0; n],
            unshared: vec![0; n],
            received: vec![0; n],
            filled: vec![0; n],
            links: HashMap::new(),
            bytes_exchanged: 0,
            bytes_over_links: 0,
            taking_part: vec![false; n],
        }
    }

    /// The tiles that took part, in tile order.
    pub(crate) fn taking_part(&self) -> TakingPart {
        let tiles = self.taking_part.iter().enumerate();
        tiles.filter(|&(_, &p)| p).map(|(t, _)| t as u32).collect()
    }

    /// `count` elements of `size` bytes read from tile `src` (each `(ipu, tile)`) at byte
    /// `offset`, then every `stride` (-1, 0 or 1; other strides: [`Traffic::add_strided`])
    /// elements, and written on tile `dst`.
    pub(crate) fn add(
        &mut self,
        src: (usize, usize),
        dst: (usize, usize),
        (offset, stride): (u64, isize),
        count: usize,
        size: u64,
    ) {
        let (s, d) = (
            src.0 * self.tiles_per_ipu + src.1,
            dst.0 * self.tiles_per_ipu + dst.1,
        );
        debug_assert!(
            matches!(stride, -1..=1),
            "strided reads are added with add_strided"
        );
        let bytes = count as u64 * size;
        self.taking_part[s] = true;
        self.taking_part[d] = true;
        if s == d {
            self.on_tile[s] += bytes;
        } else if src.0 == dst.0 && stride == 0 {
            // One element written at `count` addresses (a broadcast): received once, then
            // copied on the receiving tile, as a Poplar broadcast view is read there.
            self.sent[s] += size;
            self.received[d] += size;
            self.bytes_exchanged += size;
            self.on_tile[d] += bytes - size;
            self.stretch(s, offset, offset + size, d);
        } else if src.0 == dst.0 {
            self.sent[s] += bytes;
            self.received[d] += bytes;
            self.bytes_exchanged += bytes;
            // The stretch of source memory read.
            let last = (count as u64).saturating_sub(1) * size;
            match stride {
                1 => self.stretch(s, offset, offset + bytes, d),
                _ => self.stretch(s, offset.saturating_sub(last), offset + size, d),
            }
        } else {
            *self.links.entry((src.0, dst.0)).or_default() += bytes;
            self.bytes_over_links += bytes;
        }
    }

    /// [`Traffic::add`] for a read with a stride other than -1, 0 or 1: where its bytes
    /// lie in the source's memory does not matter (no receiver can share a strided send),
    /// only how many go between which tiles, so reads of the same tiles add up.
    pub(crate) fn add_strided(
        &mut self,
        src: (usize, usize),
        dst: (usize, usize),
        count: usize,
        size: u64,
    ) {
        let (s, d) = (
            src.0 * self.tiles_per_ipu + src.1,
            dst.0 * self.tiles_per_ipu + dst.1,
        );
        let bytes = count as u64 * size;
        self.taking_part[s] = true;
        self.taking_part[d] = true;
        if s == d {
            self.on_tile[s] += bytes;
        } else if src.0 == dst.0 {
            self.sent[s] += bytes;
            self.received[d] += bytes;
            self.bytes_exchanged += bytes;
            self.unshared[s] += bytes;
        } else {
            *self.links.entry((src.0, dst.0)).or_default() += bytes;
            self.bytes_over_links += bytes;
        }
    }

    /// Tile `s` sends bytes `start..end` of its memory to tile `receiver`: a stretch that
    /// continues the tile's last one to the same receiver extends it (what each byte is
    /// sent for is unchanged, and [`multicast::bytes_sent`] has fewer stretches to sort).
    fn stretch(&mut self, s: usize, start: u64, end: u64, receiver: usize) {
        let receiver = receiver as u32;
        let last = self.last_stretch[s] as usize;
        match self.stretches.get_mut(last.wrapping_sub(1)) {
            Some(last) if last.span.receiver == receiver && last.span.end == start => {
                last.span.end = end
            }
            _ => {
                self.stretches.push(Stretch {
                    before: self.last_stretch[s],
                    span: Span {
                        start,
                        end,
                        receiver,
                    },
                });
                self.last_stretch[s] = self.stretches.len() as u32;
            }
        }
    }

    /// The stretches tile `t` sends (latest first).
    fn stretches_of(&self, t: usize) -> Vec<Span> {
        let mut spans = Vec::new();
        let mut next = self.last_stretch[t] as usize;
        while let Some(s) = self.stretches.get(next.wrapping_sub(1)) {
            spans.push(s.span);
            next = s.before as usize;
        }
        spans
    }

    /// `bytes` of fill value written on tile `(ipu, tile)`.
    pub(crate) fn fill(&mut self, ipu: usize, tile: usize, bytes: u64) {
        self.filled[ipu * self.tiles_per_ipu + tile] += bytes;
        self.taking_part[ipu * self.tiles_per_ipu + tile] = true;
    }

    /// The most bytes a tile (physical tile, out of core) puts on its wires, receivers
    /// sharing its sends ([`multicast::bytes_sent`]), or `at_least` if no tile puts more.
    fn busiest_sender(&self, target: &crate::Target, ipus: usize, at_least: u64) -> u64 {
        let on_wires = |t: usize| self.unshared[t] + multicast::bytes_sent(self.stretches_of(t));
        if target.is_out_of_core() {
            let all = (0..self.sent.len()).map(|t| (t, on_wires(t)));
            return paging::busiest_physical(target, ipus, all).max(at_least);
        }
        // A tile puts at most what it reads to send on its wires: the tiles that read most
        // come first, and the search stops at the first that cannot pass the busiest so far
        // (the sweeps are the costly part; most tiles never need one).
        let mut senders: Vec<usize> = (0..self.sent.len())
            .filter(|&t| self.sent[t] > at_least)
            .collect();
        senders.sort_unstable_by_key(|&t| std::cmp::Reverse(self.sent[t]));
        let mut most = at_least;
        for t in senders {
            if self.sent[t] <= most {
                break;
            }
            most = most.max(on_wires(t));
        }
        most
    }

    /// On-tile copies (and fills) first, then one sync and the exchange phase, whose length
    /// is the busiest tile's bytes over the exchange bandwidth (a tile's: the most of what
    /// it receives and what it puts on its wires, sends being multicast) or the slowest
    /// IPU-Link transfer, whichever is longer. Out of core, the virtual tiles a physical tile runs
    /// add up, and every byte read or written is paged to or from Streaming Memory.
    pub(crate) fn cost(&self, system: &System) -> Result<CopyCost, RuntimeError> {
        let target = &system.target;
        let ipus = system.num_ipus();
        let busiest =
            |v: &[u64]| paging::busiest_physical(target, ipus, v.iter().copied().enumerate());
        let on_tile = cost::on_tile_copy_cycles(busiest(&self.on_tile))
            .max(cost::on_tile_copy_cycles(busiest(&self.filled)));
        let exchanged = self.busiest_sender(target, ipus, busiest(&self.received));
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

/// What rearrangement `r` (validated, over `tensors`) costs on `system`: every run split into
/// the pieces that land on one destination tile, each of those into the pieces it reads from
/// one source tile, each piece's bytes counted as an on-tile copy, an exchange between tiles
/// or a transfer over IPU-Links; and the tiles taking part (whose control code runs it).
pub(crate) fn rearrangement_cost(
    system: &System,
    tensors: &[Tensor],
    r: &Rearrange,
) -> Result<(CopyCost, TakingPart), RuntimeError> {
    let dst = &tensors[r.dst.0 as usize];
    let size = dst.dtype.size();
    let bytes = |n: usize| (n * size) as u64;
    let mut traffic = Traffic::new(system);
    let dst_at = Locator::new(dst);
    let sources: Vec<Locator> = r
        .sources
        .iter()
        .map(|s| Locator::new(&tensors[s.0 as usize]))
        .collect();
    let mut strided = ShiftedReads::default();
    destination_pieces(r, &dst_at, size, |run, (ipu, tile, _, n), done| {
        match run.source {
            RunSource::Fill => traffic.fill(ipu, tile, bytes(n)),
            RunSource::Tensor { k, start, stride } => {
                let first = (start as isize + done as isize * stride) as usize;
                let source = &sources[k as usize];
                if matches!(stride, -1..=1) {
                    source.pieces(first, stride, n, size as u64, |(si, st, at, m)| {
                        traffic.add((si, st), (ipu, tile), (at, stride), m, size as u64)
                    });
                } else {
                    let read = StridedRead {
                        k,
                        first,
                        stride,
                        len: n,
                        dst: (ipu, tile),
                    };
                    strided.read(source, read, |src, dst, m| {
                        traffic.add_strided(src, dst, m, size as u64)
                    });
                }
            }
        }
    });
    strided.flush(|src, dst, m| traffic.add_strided(src, dst, m, size as u64));
    Ok((traffic.cost(system)?, traffic.taking_part()))
}
