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
    /// The first time it is sent ...
    span: Span,
    /// ... of how many, each `step` bytes on from the one before.
    times: usize,
    step: i64,
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
        read: (u64, isize),
        count: usize,
        size: u64,
    ) {
        self.add_repeated(src, dst, read, count, size, (1, 0));
    }

    /// [`Traffic::add`] `times` times, the read's offset moving `step` bytes each time (a
    /// block of runs between one pair of tiles): the same bytes, and the same stretches
    /// held as one repeated stretch.
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
        self.taking_part[s] = true;
        self.taking_part[d] = true;
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

    /// Tile `s` sends bytes `start..end` of its memory to tile `receiver`, `times` times,
    /// `step` bytes further each time. A stretch that continues the tile's last one to the
    /// same receiver extends it, as does a repeat that continues itself (what each byte is
    /// sent for is unchanged, and [`multicast::bytes_sent`] has fewer stretches to sort).
    fn stretch(
        &mut self,
        s: usize,
        (start, end): (u64, u64),
        receiver: usize,
        (times, step): (usize, i64),
    ) {
        let receiver = receiver as u32;
        let (end, times, step) = match times {
            1 => (end, 1, 0),
            _ if step == (end - start) as i64 => (start + times as u64 * (end - start), 1, 0),
            _ => (end, times, step),
        };
        let last = self.last_stretch[s] as usize;
        match self.stretches.get_mut(last.wrapping_sub(1)) {
            Some(last)
                if times == 1
                    && last.times == 1
                    && last.span.receiver == receiver
                    && last.span.end == start =>
            {
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
                    times,
                    step,
                });
                self.last_stretch[s] = self.stretches.len() as u32;
            }
        }
    }

    /// The stretches tile `t` sends (latest first), following the tile's chain through
    /// the list of all tiles' stretches.
    fn stretches_of(&self, t: usize) -> impl Iterator<Item = &Stretch> {
        let mut next = self.last_stretch[t] as usize;
        std::iter::from_fn(move || {
            let s = self.stretches.get(next.wrapping_sub(1))?;
            next = s.before as usize;
            Some(s)
        })
    }

    /// What tile `t` puts on its exchange wires, receivers sharing its sends.
    fn on_wires(&self, t: usize) -> u64 {
        let mut spans = Vec::new();
        for s in self.stretches_of(t) {
            spans.extend((0..s.times as i64).map(|i| Span {
                start: (s.span.start as i64 + i * s.step) as u64,
                end: (s.span.end as i64 + i * s.step) as u64,
                receiver: s.span.receiver,
            }));
        }
        self.unshared[t] + multicast::bytes_sent(spans)
    }

    /// `bytes` of fill value written on tile `(ipu, tile)`.
    pub(crate) fn fill(&mut self, ipu: usize, tile: usize, bytes: u64) {
        self.filled[ipu * self.tiles_per_ipu + tile] += bytes;
        self.taking_part[ipu * self.tiles_per_ipu + tile] = true;
    }

    /// The most bytes a tile (physical tile, out of core) puts on its wires, receivers
    /// sharing its sends ([`multicast::bytes_sent`]), or `at_least` if no tile puts more.
    fn busiest_sender(&self, target: &crate::Target, ipus: usize, at_least: u64) -> u64 {
        if target.is_out_of_core() {
            let all = (0..self.sent.len()).map(|t| (t, self.on_wires(t)));
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
            most = most.max(self.on_wires(t));
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
    let mut one_run = |traffic: &mut Traffic, run: Run| {
        destination_pieces(&run, &dst_at, size, |(ipu, tile, _, n), done| {
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
    for block in r.runs.blocks() {
        by_pairs_of_tiles(&mut traffic, block, &dst_at, &sources, size, &mut one_run);
    }
    strided.flush(|src, dst, m| traffic.add_strided(src, dst, m, size as u64));
    Ok((traffic.cost(system)?, traffic.taking_part()))
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
    dst_at: &Locator,
    sources: &[Locator],
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
    let (ds, ss) = (block.dst_step as usize, block.src_step);
    let size = size as u64;
    let mut i = 0;
    while i < block.count {
        let run = block.run(i);
        let d = dst_at.span_at(run.dst_start);
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
        let s = source.span_at(lo);
        if hi >= s.end {
            one_run(traffic, run);
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
    /// 4 tiles, at random offsets.
    fn tensor(elements: usize, next: &mut impl FnMut(usize) -> usize) -> Tensor {
        let mut mapping = Vec::new();
        let mut start = 0;
        while start < elements {
            let len = (1 + next(24)).min(elements - start);
            mapping.push(Interval {
                ipu: usize::from(next(6) == 0),
                tile: next(4),
                start,
                len,
                offset: 4 * next(4096) as u64,
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
        }
    }

    /// Costing a rearrangement block by block gives what costing its runs one at a time
    /// gives: gathers of rows and columns, broadcasts, reverses and fills, over layouts
    /// whose intervals runs cross and stay within.
    #[test]
    fn blocks_cost_what_their_runs_cost_one_by_one() {
        let system = System::new(Target::ipu2().with_tiles_per_ipu(4), 2).expect("2 IPUs");
        let mut next = numbers(11);
        for case in 0..300 {
            let (rows, cols) = (1 + next(12), 1 + next(12));
            let source = tensor(rows * cols + 8, &mut next);
            let (count, len) = (1 + next(rows), 1 + next(cols));
            let dst = tensor(count * len, &mut next);
            let stride = [1isize, 1, 0, -1][next(4)];
            let fill = next(8) == 0;
            let runs: Vec<Run> = (0..count)
                .map(|i| {
                    let start = match stride {
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
                        dst_start: i * len,
                        len,
                    }
                })
                .collect();
            let blocks = Runs::from(runs.clone());
            let singles = Runs::from_blocks(runs.into_iter().map(RunBlock::single).collect());
            let rearrange = |runs: Runs| Rearrange {
                name: "r".into(),
                dst: TensorId(0),
                sources: vec![TensorId(1)],
                fill: vec![0; 4],
                runs,
            };
            let tensors = [dst, source];
            let (a, b) = (rearrange(blocks), rearrange(singles));
            let by_blocks = rearrangement_cost(&system, &tensors, &a).expect("costs");
            let by_runs = rearrangement_cost(&system, &tensors, &b).expect("costs");
            assert_eq!(by_blocks.0, by_runs.0, "case {case}: {:?}", a.runs);
            assert_eq!(by_blocks.1, by_runs.1, "case {case}");
        }
    }
}
