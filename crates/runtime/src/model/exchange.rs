//! What a rearrangement or copy costs: the bytes each tile sends, receives and copies on
//! itself, and what crosses IPU-Links, accumulated piece by piece (a piece: elements that
//! move between one pair of tiles with a fixed stride) and turned into cycles.

use crate::device::system::System;
use crate::error::RuntimeError;
use crate::model::code::TakingPart;
use crate::model::cost;
use crate::model::layout::{Locator, TileSpan, destination_pieces};
use crate::model::multicast::{self, Span};
use crate::model::paging;
use crate::model::read_once;
use crate::model::read_tiles::{ReadTile, ReadTiles};
use crate::model::shifted_reads::{ShiftedReads, StridedRead};
use crate::model::strided_blocks::StridedCounts;
use crate::program::executable::{Rearrange, Run, RunSource, Tensor};
use crate::program::runs::RunBlock;
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
/// rearrangement moves, accumulated piece by piece while it is costed. One `Traffic` serves
/// rearrangement after rearrangement ([`Traffic::clear`] resets the tiles that took part):
/// a system's per-tile tables are allocated once per host thread, not per rearrangement.
pub(crate) struct Traffic {
    tiles_per_ipu: usize,
    on_tile: Vec<u64>,
    /// Bytes each tile reads to send, every receiver's counted (what paging reads).
    sent: Vec<u64>,
    /// What the tiles send in stretches of their memory, for [`multicast::bytes_sent`]:
    /// all tiles' in one list, in the order added (a gather reads another tile at nearly
    /// every run; the stretches of the tiles whose multicast is counted are picked out of
    /// the list in one pass, see [`Traffic::spans_of`]).
    stretches: Vec<Stretch>,
    /// Stretches sent several times, each a fixed step further (a block of runs that read
    /// one tile): few, and kept apart so that a stretch stays small.
    repeated: Vec<(Stretch, usize, i64)>,
    /// Per tile, its latest stretch, so that a stretch continuing it extends it without
    /// reading the list (one entry per tile: a table the cache holds).
    tails: Vec<Tail>,
    /// Bytes each tile sends that no other receiver can share (strided reads).
    unshared: Vec<u64>,
    received: Vec<u64>,
    filled: Vec<u64>,
    links: HashMap<(usize, usize), u64>,
    bytes_exchanged: u64,
    bytes_over_links: u64,
    /// Whether each tile sends, receives, copies or fills anything.
    taking_part: Vec<bool>,
    /// The tiles whose `taking_part` is set, in the order they joined: all that
    /// [`Traffic::clear`] has to reset.
    joined: Vec<u32>,
    /// Whether stretches are kept (not when every tile's sends can be bounded without them).
    keeping_stretches: bool,
    /// Known without the stretches: the most any tile puts on its wires
    /// ([`Traffic::settle_sends`]).
    sends_settled: Option<u64>,
}

/// Bytes `start..end` of tile `tile`'s memory, sent to `receiver`.
#[derive(Clone, Copy)]
struct Stretch {
    start: u64,
    end: u64,
    tile: u32,
    receiver: u32,
}

/// A tile's latest stretch: 1 + its index in [`Traffic::stretches`] (0: none), its
/// receiver and end.
#[derive(Clone, Copy, Default)]
struct Tail {
    index: u32,
    receiver: u32,
    end: u64,
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
            repeated: Vec::new(),
            tails: vec![Tail::default(); n],
            unshared: vec![0; n],
            received: vec![0; n],
            filled: vec![0; n],
            links: HashMap::new(),
            bytes_exchanged: 0,
            bytes_over_links: 0,
            taking_part: vec![false; n],
            joined: Vec::new(),
            keeping_stretches: true,
            sends_settled: None,
        }
    }

    /// How many tiles, and how many on each IPU.
    fn tiles(&self) -> (usize, usize) {
        (self.sent.len(), self.tiles_per_ipu)
    }

    /// No bytes moved yet again: the tiles that took part reset, the lists emptied; the
    /// stretches each tile sends kept from now on or not.
    pub(crate) fn clear(&mut self, keeping_stretches: bool) {
        self.keeping_stretches = keeping_stretches;
        self.sends_settled = None;
        for &t in &self.joined {
            let t = t as usize;
            self.on_tile[t] = 0;
            self.sent[t] = 0;
            self.tails[t] = Tail::default();
            self.unshared[t] = 0;
            self.received[t] = 0;
            self.filled[t] = 0;
            self.taking_part[t] = false;
        }
        self.joined.clear();
        self.stretches.clear();
        self.repeated.clear();
        self.links.clear();
        self.bytes_exchanged = 0;
        self.bytes_over_links = 0;
    }

    /// The tiles that took part, in tile order.
    pub(crate) fn taking_part(&self) -> TakingPart {
        let tiles = self.taking_part.iter().enumerate();
        tiles.filter(|&(_, &p)| p).map(|(t, _)| t as u32).collect()
    }

    /// Tile `t` takes part.
    #[inline(always)]
    fn join(&mut self, t: usize) {
        if !self.taking_part[t] {
            self.taking_part[t] = true;
            self.joined.push(t as u32);
        }
    }

    /// `count` elements of `size` bytes read from tile `src` (each `(ipu, tile)`) at byte
    /// `offset`, then every `stride` (-1, 0 or 1; other strides: [`Traffic::add_strided`])
    /// elements, and written on tile `dst`.
    pub(crate) fn add(
        &mut self,
        src: (usize, usize),
        dst: (usize, usize),
        read: (u64, isize),
        count: usize,
        size: u64,
    ) {
        self.add_repeated(src, dst, read, count, size, (1, 0));
    }

    /// [`Traffic::add`] `times` times, the read's offset moving `step` bytes each time (a
    /// block of runs between one pair of tiles): the same bytes, and the same stretches
    /// held as one repeated stretch.
    #[inline(always)]
    pub(crate) fn add_repeated(
        &mut self,
        src: (usize, usize),
        dst: (usize, usize),
        (offset, stride): (u64, isize),
        count: usize,
        size: u64,
        (times, step): (usize, i64),
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
        let n = times as u64;
        self.join(s);
        self.join(d);
        if s == d {
            self.on_tile[s] += n * bytes;
        } else if src.0 == dst.0 && stride == 0 {
            // One element written at `count` addresses (a broadcast): received once, then
            // copied on the receiving tile, as a Poplar broadcast view is read there.
            self.sent[s] += n * size;
            self.received[d] += n * size;
            self.bytes_exchanged += n * size;
            self.on_tile[d] += n * (bytes - size);
            self.stretch(s, (offset, offset + size), d, (times, step));
        } else if src.0 == dst.0 {
            self.sent[s] += n * bytes;
            self.received[d] += n * bytes;
            self.bytes_exchanged += n * bytes;
            // The stretch of source memory read.
            let last = (count as u64).saturating_sub(1) * size;
            let span = match stride {
                1 => (offset, offset + bytes),
                _ => (offset.saturating_sub(last), offset + size),
            };
            self.stretch(s, span, d, (times, step));
        } else {
            *self.links.entry((src.0, dst.0)).or_default() += n * bytes;
            self.bytes_over_links += n * bytes;
        }
    }

    /// `bytes` read with stride -1 or 1 from tile `s` and written on tile `d` (each
    /// `(ipu * tiles_per_ipu + tile, ipu)`), when no stretch is kept: what
    /// [`Traffic::add`] counts of such a read.
    #[inline(always)]
    fn add_bytes(
        &mut self,
        (s, src_ipu): (usize, usize),
        (d, dst_ipu): (usize, usize),
        bytes: u64,
    ) {
        debug_assert!(!self.keeping_stretches);
        self.join(s);
        self.join(d);
        if s == d {
            self.on_tile[s] += bytes;
        } else if src_ipu == dst_ipu {
            self.sent[s] += bytes;
            self.received[d] += bytes;
            self.bytes_exchanged += bytes;
        } else {
            *self.links.entry((src_ipu, dst_ipu)).or_default() += bytes;
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
        self.join(s);
        self.join(d);
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

    /// What [`Traffic::add_strided`] adds for strided reads between the tiles of one IPU,
    /// given per tile (`(ipu, tile)`): the elements read from it, written on it, and both
    /// (copied on the tile), each of `size` bytes.
    pub(crate) fn add_counted(
        &mut self,
        (ipu, tile): (usize, usize),
        (read, written, stayed): (u64, u64, u64),
        size: u64,
    ) {
        let t = ipu * self.tiles_per_ipu + tile;
        self.join(t);
        self.on_tile[t] += stayed * size;
        let (sent, received) = ((read - stayed) * size, (written - stayed) * size);
        self.sent[t] += sent;
        self.unshared[t] += sent;
        self.received[t] += received;
        self.bytes_exchanged += sent;
    }

    /// Tile `s` sends bytes `start..end` of its memory to tile `receiver`, `times` times,
    /// `step` bytes further each time. A stretch that continues the tile's latest one to the
    /// same receiver extends it, as does a repeat that continues itself (what each byte is
    /// sent for is unchanged, and [`multicast::bytes_sent`] has fewer stretches to sort).
    #[inline(always)]
    fn stretch(
        &mut self,
        s: usize,
        (start, end): (u64, u64),
        receiver: usize,
        (times, step): (usize, i64),
    ) {
        if !self.keeping_stretches {
            return;
        }
        let receiver = receiver as u32;
        let end = match times {
            1 => end,
            _ if step == (end - start) as i64 => start + times as u64 * (end - start),
            _ => {
                let stretch = Stretch {
                    start,
                    end,
                    tile: s as u32,
                    receiver,
                };
                self.repeated.push((stretch, times, step));
                return;
            }
        };
        let tail = &mut self.tails[s];
        if tail.index != 0 && tail.receiver == receiver && tail.end == start {
            self.stretches[tail.index as usize - 1].end = end;
            tail.end = end;
            return;
        }
        self.stretches.push(Stretch {
            start,
            end,
            tile: s as u32,
            receiver,
        });
        *tail = Tail {
            index: self.stretches.len() as u32,
            receiver,
            end,
        };
    }

    /// The stretches each of `tiles` sends (repeats spelled out), picked out of the list
    /// of all tiles' in one pass: `spans[ends[i - 1]..ends[i]]` are those of `tiles[i]`.
    fn spans_of(&self, tiles: &[usize]) -> (Vec<Span>, Vec<usize>) {
        const NOT_ASKED: u32 = u32::MAX;
        let mut slot = vec![NOT_ASKED; self.sent.len()];
        for (i, &t) in tiles.iter().enumerate() {
            slot[t] = i as u32;
        }
        let mut ends = vec![0usize; tiles.len()];
        for s in &self.stretches {
            if let Some(n) = ends.get_mut(slot[s.tile as usize] as usize) {
                *n += 1;
            }
        }
        for &(s, times, _) in &self.repeated {
            if let Some(n) = ends.get_mut(slot[s.tile as usize] as usize) {
                *n += times;
            }
        }
        // Counts to the start of each tile's spans, then each span placed at its tile's
        // next free place, which leaves `ends` at each tile's end.
        let mut at = 0;
        for n in &mut ends {
            (*n, at) = (at, at + *n);
        }
        let empty = Span {
            start: 0,
            end: 0,
            receiver: 0,
        };
        let mut spans = vec![empty; at];
        for s in &self.stretches {
            if let Some(n) = ends.get_mut(slot[s.tile as usize] as usize) {
                spans[*n] = Span {
                    start: s.start,
                    end: s.end,
                    receiver: s.receiver,
                };
                *n += 1;
            }
        }
        for &(s, times, step) in &self.repeated {
            if let Some(n) = ends.get_mut(slot[s.tile as usize] as usize) {
                for i in 0..times as i64 {
                    spans[*n] = Span {
                        start: (s.start as i64 + i * step) as u64,
                        end: (s.end as i64 + i * step) as u64,
                        receiver: s.receiver,
                    };
                    *n += 1;
                }
            }
        }
        (spans, ends)
    }

    /// `bytes` of fill value written on tile `(ipu, tile)`.
    pub(crate) fn fill(&mut self, ipu: usize, tile: usize, bytes: u64) {
        let t = ipu * self.tiles_per_ipu + tile;
        self.filled[t] += bytes;
        self.join(t);
    }

    /// With every receiver reading each source element once, a tile puts on its wires what
    /// it cannot share and, of the rest it sends, at most the bytes it holds of the
    /// sources (`held()` per tile). Whether that settles the busiest sender without the
    /// stretches: it does unless a tile that sends shared bytes could pass the busiest
    /// receiver. On the physical tiles only.
    fn settle_sends(&mut self, held: impl FnOnce() -> Vec<u64>) -> bool {
        let received = (self.joined.iter().map(|&t| self.received[t as usize]))
            .max()
            .unwrap_or(0);
        let over: Vec<usize> = (self.joined.iter().map(|&t| t as usize))
            .filter(|&t| self.sent[t] > received)
            .collect();
        // A tile that sends nothing shareable puts exactly its unshared bytes on its wires.
        let mut busiest = received;
        let (mut held, mut held_bytes) = (Some(held), None);
        for &t in &over {
            let shared = self.sent[t] - self.unshared[t];
            if shared > 0 {
                let make = || held.take().expect("made once")();
                if self.unshared[t] + shared.min(held_bytes.get_or_insert_with(make)[t]) > received
                {
                    return false;
                }
            }
            if shared == 0 {
                busiest = busiest.max(self.unshared[t]);
            }
        }
        self.sends_settled = Some(busiest);
        true
    }

    /// With no source element read twice, a tile's every byte sent goes to one receiver:
    /// it puts on its wires exactly what it sends, and the busiest sender is settled.
    fn settle_sends_exactly(&mut self) -> bool {
        let sent = self.joined.iter().map(|&t| self.sent[t as usize]);
        self.sends_settled = Some(sent.max().unwrap_or(0));
        true
    }

    /// The most bytes a tile (physical tile, out of core) puts on its wires, receivers
    /// sharing its sends ([`multicast::bytes_sent`]), or `at_least` if no tile puts more.
    fn busiest_sender(&self, target: &crate::Target, ipus: usize, at_least: u64) -> u64 {
        if let Some(busiest) = self.sends_settled {
            return busiest.max(at_least);
        }
        if target.is_out_of_core() {
            let all: Vec<usize> = (0..self.sent.len()).collect();
            let (spans, ends) = self.spans_of(&all);
            let on_wires = all.iter().map(|&t| {
                let from = t.checked_sub(1).map_or(0, |p| ends[p]);
                (
                    t,
                    self.unshared[t] + multicast::bytes_sent(&spans[from..ends[t]]),
                )
            });
            return paging::busiest_physical(target, ipus, on_wires).max(at_least);
        }
        // A tile puts at most what it reads to send on its wires: the tiles that read most
        // come first, and the search stops at the first that cannot pass the busiest so far
        // (the sweeps are the costly part; most tiles never need one).
        let mut senders: Vec<usize> = (self.joined.iter().map(|&t| t as usize))
            .filter(|&t| self.sent[t] > at_least)
            .collect();
        if senders.is_empty() {
            return at_least;
        }
        senders.sort_unstable_by_key(|&t| std::cmp::Reverse(self.sent[t]));
        let (spans, ends) = self.spans_of(&senders);
        let mut most = at_least;
        for (i, &t) in senders.iter().enumerate() {
            if self.sent[t] <= most {
                break;
            }
            let from = i.checked_sub(1).map_or(0, |p| ends[p]);
            let on_wires = self.unshared[t] + multicast::bytes_sent(&spans[from..ends[i]]);
            most = most.max(on_wires);
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
        // Tiles that took no part hold zeros everywhere: only those that did are read.
        let busiest = |v: &[u64]| {
            let per_tile = self.joined.iter().map(|&t| (t as usize, v[t as usize]));
            paging::busiest_physical(target, ipus, per_tile)
        };
        let on_tile = cost::on_tile_copy_cycles(busiest(&self.on_tile))
            .max(cost::on_tile_copy_cycles(busiest(&self.filled)));
        let exchanged = self.busiest_sender(target, ipus, busiest(&self.received));
        let on_chip = cost::exchange_cycles(target, exchanged);
        let mut over_links = 0;
        for (&(from, to), &bytes) in &self.links {
            over_links = over_links.max(system.transfer_cycles(bytes, from, to)?);
        }
        // An on-tile copy reads and writes its bytes; a send reads, a receive or fill writes.
        let touched = self.joined.iter().map(|&t| {
            let t = t as usize;
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
/// `traffic` (for `system`) is cleared first.
pub(crate) fn rearrangement_cost(
    traffic: &mut Traffic,
    system: &System,
    tensors: &[Tensor],
    r: &Rearrange,
) -> Result<(CopyCost, TakingPart), RuntimeError> {
    cost_bounding_sends(traffic, system, tensors, r, true)
}

/// [`rearrangement_cost`], bounding what tiles send when receivers read each element once
/// (`bound`), or from every stretch each tile sends (the same cost, found the long way).
fn cost_bounding_sends(
    traffic: &mut Traffic,
    system: &System,
    tensors: &[Tensor],
    r: &Rearrange,
    bound: bool,
) -> Result<(CopyCost, TakingPart), RuntimeError> {
    if let Some(dst) = copied_in_place(tensors, r) {
        traffic.clear(true);
        let size = dst.dtype.size() as u64;
        for iv in dst.mapping.iter().filter(|iv| iv.len > 0) {
            traffic.add(
                (iv.ipu, iv.tile),
                (iv.ipu, iv.tile),
                (iv.offset, 1),
                iv.len,
                size,
            );
        }
        return Ok((traffic.cost(system)?, traffic.taking_part()));
    }
    let dst_at = Locator::new(&tensors[r.dst.0 as usize]);
    let sources: Vec<Locator> = r
        .sources
        .iter()
        .map(|s| Locator::new(&tensors[s.0 as usize]))
        .collect();
    let tiles_per_ipu = system.target.tiles_per_ipu;
    // Receivers that read each source element once are sent at most what a tile holds of
    // the sources: unless a tile holds more than the busiest receiver receives, what each
    // tile sends to whom need not be kept. With no element read twice at all, each tile
    // puts exactly what it sends on its wires. (Out of core every tile's sends add up on
    // its physical tile, so they are always kept.)
    let bound = bound && !system.target.is_out_of_core();
    let once_in_all = bound && read_once::reads_each_element_once_in_all(r);
    let once =
        once_in_all || (bound && read_once::reads_each_element_once(r, &dst_at, tiles_per_ipu));
    traffic.clear(!once);
    add_runs(traffic, tensors, r, &dst_at, &sources);
    let tiles = traffic.tiles();
    let settled = match (once_in_all, once) {
        (true, _) => traffic.settle_sends_exactly(),
        (false, true) => traffic.settle_sends(|| held_of_sources(tensors, r, tiles)),
        (false, false) => false,
    };
    if once && !settled {
        traffic.clear(true);
        add_runs(traffic, tensors, r, &dst_at, &sources);
    }
    Ok((traffic.cost(system)?, traffic.taking_part()))
}

/// `r`'s destination, if `r` copies the whole of a source laid out as the destination is
/// (the same intervals on the same tiles, as a `Copy` between tensors of one layout
/// most often is): then every element is copied on its own tile.
fn copied_in_place<'t>(tensors: &'t [Tensor], r: &Rearrange) -> Option<&'t Tensor> {
    let dst = &tensors[r.dst.0 as usize];
    let [block] = r.runs.blocks() else {
        return None;
    };
    let whole = Run::reading(0, (0, 1), 0, dst.elements);
    let src = &tensors[r.sources.first()?.0 as usize];
    let places = |t: &'t Tensor| t.mapping.iter().map(|i| (i.ipu, i.tile, i.start, i.len));
    (block.count == 1 && block.first == whole && places(dst).eq(places(src))).then_some(dst)
}

/// Bytes each tile (`ipu * tiles_per_ipu + tile`, `tiles` of them) holds of `r`'s sources,
/// a source named twice counted twice.
fn held_of_sources(
    tensors: &[Tensor],
    r: &Rearrange,
    (tiles, tiles_per_ipu): (usize, usize),
) -> Vec<u64> {
    let mut held = vec![0u64; tiles];
    for s in &r.sources {
        let t = &tensors[s.0 as usize];
        for iv in &t.mapping {
            held[iv.ipu * tiles_per_ipu + iv.tile] += (iv.len * t.dtype.size()) as u64;
        }
    }
    held
}

/// Adds every run of `r` to `traffic`.
fn add_runs(
    traffic: &mut Traffic,
    tensors: &[Tensor],
    r: &Rearrange,
    dst_at: &Locator,
    sources: &[Locator],
) {
    let size = tensors[r.dst.0 as usize].dtype.size();
    let bytes = |n: usize| (n * size) as u64;
    let mut strided = ShiftedReads::default();
    let mut one_run = |traffic: &mut Traffic, run: Run| {
        destination_pieces(&run, dst_at, size, |(ipu, tile, _, n), done| {
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
    };
    let mut read_tiles = ReadTiles::default();
    let mut counted = StridedCounts::default();
    for block in r.runs.blocks() {
        if let RunSource::Tensor { k, .. } = block.first.source
            && counted.add_block(block, (dst_at, &sources[k as usize]), |tile, counts| {
                traffic.add_counted(tile, counts, size as u64)
            })
        {
            continue;
        }
        let at = (dst_at, sources);
        by_pairs_of_tiles(traffic, block, at, &mut read_tiles, size, &mut one_run);
    }
    strided.flush(|src, dst, m| traffic.add_strided(src, dst, m, size as u64));
}

/// Adds a block's runs to `traffic` a stretch of runs at a time: consecutive runs written
/// on one tile and (a tensor source read with stride -1, 0 or 1) read from one tile add what
/// they would one by one, without locating each (dot operand gathers: millions of runs,
/// a few stretches per tile). A run that crosses an interval, or a block that steps
/// backwards or reads with another stride, goes to `one_run`. The order traffic is added
/// in does not change what it costs.
fn by_pairs_of_tiles(
    traffic: &mut Traffic,
    block: &RunBlock,
    (dst_at, sources): (&Locator, &[Locator]),
    read_tiles: &mut ReadTiles,
    size: usize,
    one_run: &mut impl FnMut(&mut Traffic, Run),
) {
    let len = block.first.len;
    let source = match block.first.source {
        RunSource::Tensor { k, stride, .. } if matches!(stride, -1..=1) => {
            Some((&sources[k as usize], stride))
        }
        RunSource::Tensor { .. } => None,
        RunSource::Fill => None,
    };
    let fill = block.first.source == RunSource::Fill;
    if len == 0 || block.count == 1 || block.dst_step <= 0 || (source.is_none() && !fill) {
        block.runs().for_each(|run| one_run(traffic, run));
        return;
    }
    if let (false, Some((source, 1 | -1))) = (traffic.keeping_stretches, source) {
        let reads = read_tiles.of(block, source, traffic.tiles_per_ipu);
        return run_by_run_counting(traffic, block, (dst_at, source, reads), size, one_run);
    }
    let (ds, ss) = (block.dst_step as usize, block.src_step);
    let size = size as u64;
    // The intervals of the last run written and read: the next run is most often written
    // in the same one (and read in the same or the next).
    let mut d = dst_at.span_at(block.first.dst_start);
    let mut s: Option<TileSpan> = None;
    let holds = |span: &TileSpan, at: usize| span.start <= at && at < span.end;
    let mut i = 0;
    while i < block.count {
        let run = block.run(i);
        if !holds(&d, run.dst_start) {
            d = dst_at.span_at(run.dst_start);
        }
        if run.dst_start + len > d.end {
            one_run(traffic, run);
            i += 1;
            continue;
        }
        // Runs i..=j all write within d (the run could move up `room` elements in it) ...
        let (room, last) = (d.end - len - run.dst_start, block.count - 1 - i);
        let dst = (d.ipu, d.tile);
        let (RunSource::Tensor { start, .. }, Some((source, stride))) = (run.source, source) else {
            let j = i + runs_that_fit((room, ds), (usize::MAX, 1)).min(last);
            traffic.fill(d.ipu, d.tile, ((j - i + 1) * len) as u64 * size);
            i = j + 1;
            continue;
        };
        let reach = (len - 1) as isize * stride;
        let (lo, hi) = (
            start.min((start as isize + reach) as usize),
            start.max((start as isize + reach) as usize),
        );
        let s = *s.insert(match s {
            Some(span) if holds(&span, lo) => span,
            _ => source.span_at(lo),
        });
        if hi >= s.end {
            read_across(traffic, run, dst, source, size);
            i += 1;
            continue;
        }
        // ... and read within s.
        let read_room = match ss {
            0 => (usize::MAX, 1),
            ss if ss > 0 => (s.end - 1 - hi, ss as usize),
            ss => (lo - s.start, ss.unsigned_abs()),
        };
        let j = i + runs_that_fit((room, ds), read_room).min(last);
        let at = s.offset + (start - s.start) as u64 * size;
        let repeats = (j - i + 1, ss as i64 * size as i64);
        traffic.add_repeated((s.ipu, s.tile), dst, (at, stride), len, size, repeats);
        i = j + 1;
    }
}

/// [`by_pairs_of_tiles`] for a block read with stride -1 or 1 when no stretch is kept: then
/// a run within one interval of each side only adds its bytes to its two tiles, and the
/// block is walked run by run with nothing else to work out (no stretch to grow, no
/// repeat to count: most runs of a gather are alone in their source interval). `reads`:
/// where each run reads ([`ReadTiles`]) in `source`.
fn run_by_run_counting(
    traffic: &mut Traffic,
    block: &RunBlock,
    (dst_at, source, reads): (&Locator, &Locator, &[ReadTile]),
    size: usize,
    one_run: &mut impl FnMut(&mut Traffic, Run),
) {
    let len = block.first.len;
    let bytes = (len * size) as u64;
    let (step, tiles_per_ipu) = (block.dst_step as usize, traffic.tiles_per_ipu);
    let mut d = dst_at.span_at(block.first.dst_start);
    let mut written = d.ipu * tiles_per_ipu + d.tile;
    for (i, &read) in reads.iter().enumerate() {
        let dst_start = block.first.dst_start + i * step;
        if !(d.start <= dst_start && dst_start < d.end) {
            d = dst_at.span_at(dst_start);
            written = d.ipu * tiles_per_ipu + d.tile;
        }
        if dst_start + len > d.end {
            one_run(traffic, block.run(i));
            continue;
        }
        if read == ReadTile::CROSSES {
            read_across(traffic, block.run(i), (d.ipu, d.tile), source, size as u64);
            continue;
        }
        traffic.add_bytes(
            (read.tile as usize, read.ipu as usize),
            (written, d.ipu),
            bytes,
        );
    }
}

/// Adds a run written within one destination interval, on tile `dst`, and read with stride
/// -1, 0 or 1 across source intervals: what `add_runs`' run by run costing adds for it (its
/// one destination piece), without locating the destination again (BERT's attention
/// gathers: 300 000 such runs).
fn read_across(traffic: &mut Traffic, run: Run, dst: (usize, usize), source: &Locator, size: u64) {
    let RunSource::Tensor { start, stride, .. } = run.source else {
        unreachable!("a run read across source intervals reads a tensor")
    };
    debug_assert!(matches!(stride, -1..=1), "read_across takes unit strides");
    source.pieces(start, stride, run.len, size, |(si, st, at, m)| {
        traffic.add((si, st), dst, (at, stride), m, size)
    });
}

/// How many more runs fit both in the destination and in the source: `(room, step)` each,
/// elements the first run could move and elements each run moves on from the one before.
/// Most stretches of a gather are one run, so no division unless a second run fits (a
/// division costs more than the rest of a run's costing).
fn runs_that_fit(
    (dst_room, dst_step): (usize, usize),
    (src_room, src_step): (usize, usize),
) -> usize {
    match dst_room < dst_step || src_room < src_step {
        true => 0,
        false => (dst_room / dst_step).min(src_room / src_step),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::target::Target;
    use crate::model::test_numbers::numbers;
    use crate::program::executable::{Interval, Run, TensorId};
    use crate::program::runs::Runs;
    use codegen::DType;

    /// A tensor of `elements` in intervals of random lengths on random tiles of 2 IPUs of
    /// 4 tiles, at random offsets (no two of its intervals on one tile overlapping).
    fn tensor(elements: usize, next: &mut impl FnMut(usize) -> usize) -> Tensor {
        tensor_on(2, elements, next)
    }

    /// [`tensor`] on `ipus` IPUs (1 or 2) of 4 tiles.
    fn tensor_on(ipus: usize, elements: usize, next: &mut impl FnMut(usize) -> usize) -> Tensor {
        let mut mapping = Vec::new();
        let mut start = 0;
        // Where each tile's memory is free from: a tensor's elements never share a byte.
        let mut free = [[0u64; 4]; 2];
        while start < elements {
            let len = (1 + next(24)).min(elements - start);
            let (ipu, tile) = (usize::from(ipus == 2 && next(6) == 0), next(4));
            let offset = free[ipu][tile] + 4 * next(64) as u64;
            free[ipu][tile] = offset + 4 * len as u64;
            mapping.push(Interval {
                ipu,
                tile,
                start,
                len,
                offset,
            });
            start += len;
        }
        Tensor {
            name: "t".into(),
            dtype: DType::F32,
            shape: vec![elements],
            elements,
            mapping,
            init: None,
            always_live: false,
            live_steps: Vec::new(),
        }
    }

    /// The rearrangement of `runs` into tensor 0 from tensor 1, twice: its runs joined into
    /// blocks where they continue each other, and each run a block of its own.
    fn blocks_and_singles(runs: Vec<Run>) -> (Rearrange, Rearrange) {
        let rearrange = |runs: Runs| Rearrange {
            name: "r".into(),
            dst: TensorId(0),
            sources: vec![TensorId(1)],
            fill: vec![0; 4],
            runs,
        };
        let blocks = Runs::from(runs.clone());
        let singles = Runs::from_blocks(runs.into_iter().map(RunBlock::single).collect());
        (rearrange(blocks), rearrange(singles))
    }

    /// Bounding what tiles send by what they hold, when receivers read each element once,
    /// costs what following every stretch costs: gathers copying a matrix's column chunks
    /// to several places (a chunk sometimes read twice by one receiver, sometimes read
    /// with stride 0 or -1), over random layouts; the bound settles some of them.
    #[test]
    fn the_read_once_bound_costs_what_every_stretch_costs() {
        let system = System::new(Target::ipu2().with_tiles_per_ipu(4), 2).expect("2 IPUs");
        let mut next = numbers(17);
        let mut traffic = Traffic::new(&system);
        let mut settled = 0;
        for case in 0..400 {
            let (rows, cols) = (1 + next(8), 2 + next(10));
            let source = tensor(rows * cols, &mut next);
            let mut blocks = Vec::new();
            let mut written = 0;
            for _ in 0..1 + next(4) {
                let mut c0 = 0;
                while c0 < cols {
                    let len = (1 + next(4)).min(cols - c0);
                    let stride = [1isize, 1, 1, 0, -1][next(5)];
                    let start = match stride {
                        -1 => c0 + len - 1,
                        _ => c0,
                    };
                    blocks.push(RunBlock {
                        first: Run::reading(0, (start, stride), written, len),
                        count: rows,
                        dst_step: len as isize,
                        src_step: cols as isize,
                    });
                    written += rows * len;
                    if next(6) != 0 {
                        c0 += len;
                    }
                }
            }
            let rearrange = Rearrange {
                name: "r".into(),
                dst: TensorId(0),
                sources: vec![TensorId(1)],
                fill: vec![0; 4],
                runs: Runs::from_blocks(blocks),
            };
            let tensors = [tensor(written, &mut next), source];
            let exact = cost_bounding_sends(&mut traffic, &system, &tensors, &rearrange, false);
            let bounded = cost_bounding_sends(&mut traffic, &system, &tensors, &rearrange, true);
            settled += usize::from(traffic.sends_settled.is_some());
            assert_eq!(
                bounded.expect("costs"),
                exact.expect("costs"),
                "case {case}"
            );
        }
        assert!(settled > 40, "the bound settled {settled} of 400");
    }

    /// A whole copy between tensors of one layout costs what the same copy in two runs
    /// (which is not taken for one) costs: every byte copied on its tile.
    #[test]
    fn a_copy_in_place_costs_what_its_runs_cost() {
        let system = System::new(Target::ipu2().with_tiles_per_ipu(4), 2).expect("2 IPUs");
        let mut next = numbers(23);
        let mut traffic = Traffic::new(&system);
        for case in 0..100 {
            let elements = 2 + next(200);
            let source = tensor(elements, &mut next);
            let mut dst = source.clone();
            for iv in &mut dst.mapping {
                iv.offset = 4 * next(4096) as u64;
            }
            let cut = 1 + next(elements - 1);
            let rearrange = |runs: Vec<Run>| Rearrange {
                name: "r".into(),
                dst: TensorId(0),
                sources: vec![TensorId(1)],
                fill: vec![0; 4],
                runs: Runs::from(runs),
            };
            let whole = rearrange(vec![Run::reading(0, (0, 1), 0, elements)]);
            let halves = rearrange(vec![
                Run::reading(0, (0, 1), 0, cut),
                Run::reading(0, (cut, 1), cut, elements - cut),
            ]);
            let tensors = [dst, source];
            assert!(copied_in_place(&tensors, &whole).is_some());
            assert!(copied_in_place(&tensors, &halves).is_none());
            let (a, b) = (
                rearrangement_cost(&mut traffic, &system, &tensors, &whole).expect("costs"),
                rearrangement_cost(&mut traffic, &system, &tensors, &halves).expect("costs"),
            );
            assert_eq!(a, b, "case {case}");
        }
    }

    /// Costing a rearrangement block by block gives what costing its runs one at a time
    /// gives: gathers of rows and columns, broadcasts, reverses and fills, over layouts
    /// whose intervals runs cross and stay within.
    #[test]
    fn blocks_cost_what_their_runs_cost_one_by_one() {
        let system = System::new(Target::ipu2().with_tiles_per_ipu(4), 2).expect("2 IPUs");
        let mut next = numbers(11);
        let mut traffic = Traffic::new(&system);
        for case in 0..1000 {
            let (rows, cols) = (1 + next(12), 1 + next(12));
            // The block starts anywhere in both tensors (its first run may cross an
            // interval of the destination while later runs read inside that interval's
            // range of elements).
            let (s0, d0) = (next(24), next(24));
            let source = tensor(s0 + rows * cols + 8, &mut next);
            let (count, len) = (1 + next(rows), 1 + next(cols));
            let dst = tensor(d0 + count * len, &mut next);
            let stride = [1isize, 1, 0, -1][next(4)];
            let fill = next(8) == 0;
            let runs: Vec<Run> = (0..count)
                .map(|i| {
                    let start = s0
                        + match stride {
                            -1 => i * cols + len - 1,
                            _ => i * cols,
                        };
                    Run {
                        source: match fill {
                            true => RunSource::Fill,
                            false => RunSource::Tensor {
                                k: 0,
                                start,
                                stride,
                            },
                        },
                        dst_start: d0 + i * len,
                        len,
                    }
                })
                .collect();
            let tensors = [dst, source];
            let (a, b) = blocks_and_singles(runs);
            let by_blocks = rearrangement_cost(&mut traffic, &system, &tensors, &a);
            let by_runs = rearrangement_cost(&mut traffic, &system, &tensors, &b);
            // Every stretch kept: the path of blocks that may read an element twice.
            let kept = cost_bounding_sends(&mut traffic, &system, &tensors, &a, false);
            let fresh = rearrangement_cost(&mut Traffic::new(&system), &system, &tensors, &a);
            let (by_blocks, by_runs) = (by_blocks.expect("costs"), by_runs.expect("costs"));
            assert_eq!(
                fresh.expect("costs"),
                by_blocks,
                "case {case}: a cleared traffic"
            );
            assert_eq!(by_blocks.0, by_runs.0, "case {case}: {:?}", a.runs);
            assert_eq!(kept.expect("costs"), by_runs, "case {case}: stretches kept");
            assert_eq!(by_blocks.1, by_runs.1, "case {case}");
        }
    }

    /// Transposed reads on one IPU, costed by counting, cost what they cost run by run:
    /// blocks of columns of a random matrix, written one after another or with gaps, over
    /// layouts whose intervals are shorter and longer than a row.
    #[test]
    fn strided_blocks_counted_cost_what_their_runs_cost() {
        let system = System::new(Target::ipu2().with_tiles_per_ipu(4), 1).expect("1 IPU");
        let mut next = numbers(29);
        let mut traffic = Traffic::new(&system);
        let mut counted = 0;
        for case in 0..1000 {
            let (rows, cols) = (1 + next(12), 2 + next(12));
            let (s0, d0) = (next(24), next(24));
            let source = tensor_on(1, s0 + rows * cols + 8, &mut next);
            let c0 = next(cols);
            let (count, len) = (1 + next(cols - c0), 1 + next(rows));
            let dst_step = len + if next(3) == 0 { next(4) } else { 0 };
            let dst = tensor_on(1, d0 + count * dst_step + 1, &mut next);
            let runs: Vec<Run> = (0..count)
                .map(|r| Run::reading(0, (s0 + c0 + r, cols as isize), d0 + r * dst_step, len))
                .collect();
            let (a, b) = blocks_and_singles(runs);
            let tensors = [dst, source];
            let (src_at, dst_at) = (Locator::new(&tensors[1]), Locator::new(&tensors[0]));
            let taken = a.runs.blocks().iter().any(|block| {
                StridedCounts::default().add_block(block, (&dst_at, &src_at), |_, _| {})
            });
            counted += usize::from(taken);
            let by_blocks = rearrangement_cost(&mut traffic, &system, &tensors, &a);
            let by_runs = rearrangement_cost(&mut traffic, &system, &tensors, &b);
            assert_eq!(
                by_blocks.expect("costs"),
                by_runs.expect("costs"),
                "case {case}: {:?}",
                a.runs
            );
        }
        assert!(counted > 500, "{counted} of 1000 blocks counted");
    }
}
