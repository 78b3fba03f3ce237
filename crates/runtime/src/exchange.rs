//! Planning a tensor copy: which bytes go from which tile to which, and what it costs.

use crate::RuntimeError;
use crate::cost;
use crate::executable::Tensor;
use crate::system::System;
use std::collections::HashMap;

/// A contiguous run of bytes moving from one tile's memory to another's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Move {
    pub src: (usize, usize, u64),
    pub dst: (usize, usize, u64),
    pub bytes: u64,
}

/// The moves that copy every element of `src` to the same element of `dst`.
pub(crate) fn plan(src: &Tensor, dst: &Tensor) -> Vec<Move> {
    let size = src.dtype.size() as u64;
    let mut a = src.mapping.clone();
    let mut b = dst.mapping.clone();
    a.sort_by_key(|iv| iv.start);
    b.sort_by_key(|iv| iv.start);
    let (mut i, mut j, mut at) = (0, 0, 0usize);
    let mut moves = Vec::new();
    while i < a.len() && j < b.len() {
        let (x, y) = (&a[i], &b[j]);
        let end = (x.start + x.len).min(y.start + y.len);
        if end > at {
            moves.push(Move {
                src: (x.ipu, x.tile, x.offset + (at - x.start) as u64 * size),
                dst: (y.ipu, y.tile, y.offset + (at - y.start) as u64 * size),
                bytes: (end - at) as u64 * size,
            });
            at = end;
        }
        if x.start + x.len == end {
            i += 1;
        }
        if y.start + y.len == end {
            j += 1;
        }
    }
    moves
}

/// What a copy costs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CopyCost {
    pub on_tile_cycles: u64,
    pub sync_cycles: u64,
    pub exchange_cycles: u64,
    pub bytes_exchanged: u64,
    pub bytes_over_links: u64,
}

/// Costs the moves: on-tile copies first, then one sync and the exchange phase, whose
/// length is the busiest tile's bytes over the exchange bandwidth or the slowest IPU-Link
/// transfer, whichever is longer.
pub(crate) fn cost(system: &System, moves: &[Move]) -> Result<CopyCost, RuntimeError> {
    let target = &system.target;
    let mut on_tile: HashMap<(usize, usize), u64> = HashMap::new();
    let mut sent: HashMap<(usize, usize), u64> = HashMap::new();
    let mut received: HashMap<(usize, usize), u64> = HashMap::new();
    let mut links: HashMap<(usize, usize), u64> = HashMap::new();
    let mut c = CopyCost::default();
    for m in moves {
        let (s, d) = ((m.src.0, m.src.1), (m.dst.0, m.dst.1));
        if s == d {
            *on_tile.entry(s).or_default() += m.bytes;
        } else if s.0 == d.0 {
            *sent.entry(s).or_default() += m.bytes;
            *received.entry(d).or_default() += m.bytes;
            c.bytes_exchanged += m.bytes;
        } else {
            *links.entry((s.0, d.0)).or_default() += m.bytes;
            c.bytes_over_links += m.bytes;
        }
    }
    c.on_tile_cycles = on_tile
        .values()
        .map(|b| cost::on_tile_copy_cycles(*b))
        .max()
        .unwrap_or(0);
    let busiest = sent
        .values()
        .chain(received.values())
        .copied()
        .max()
        .unwrap_or(0);
    let on_chip = cost::exchange_cycles(target, busiest);
    let mut over_links = 0;
    for (&(from, to), &bytes) in &links {
        over_links = over_links.max(system.transfer_cycles(bytes, from, to)?);
    }
    c.exchange_cycles = on_chip.max(over_links);
    c.sync_cycles = if !links.is_empty() {
        system.global_sync_cycles()
    } else if busiest > 0 {
        target.internal_sync_cycles
    } else {
        0
    };
    Ok(c)
}

/// Finds where elements of a tensor live.
struct Locator<'t> {
    sorted: Vec<&'t crate::executable::Interval>,
    size: u64,
}

impl<'t> Locator<'t> {
    fn new(t: &'t Tensor) -> Locator<'t> {
        let mut sorted: Vec<_> = t.mapping.iter().collect();
        sorted.sort_by_key(|iv| iv.start);
        Locator {
            sorted,
            size: t.dtype.size() as u64,
        }
    }

    /// `(ipu, tile, byte offset, elements)` pieces covering elements `start..start + len`.
    fn pieces(&self, start: usize, len: usize, out: &mut Vec<(usize, usize, u64, usize)>) {
        out.clear();
        let mut i = self.sorted.partition_point(|iv| iv.start + iv.len <= start);
        let (mut at, end) = (start, start + len);
        while at < end {
            let iv = self.sorted[i];
            let stop = end.min(iv.start + iv.len);
            out.push((
                iv.ipu,
                iv.tile,
                iv.offset + (at - iv.start) as u64 * self.size,
                stop - at,
            ));
            at = stop;
            i += 1;
        }
    }
}

/// Bytes a rearrangement writes with its fill value: `(ipu, tile, byte offset, elements)`.
pub(crate) type FillRun = (usize, usize, u64, usize);

/// The moves and fills that carry out a rearrangement; adjacent moves are merged.
pub(crate) fn plan_rearrange(
    tensors: &[Tensor],
    r: &crate::executable::Rearrange,
) -> (Vec<Move>, Vec<FillRun>) {
    use crate::executable::RunSource;
    let dst = &tensors[r.dst.0 as usize];
    let size = dst.dtype.size() as u64;
    let dst_at = Locator::new(dst);
    let sources: Vec<Locator> = r
        .sources
        .iter()
        .map(|s| Locator::new(&tensors[s.0 as usize]))
        .collect();
    let mut moves: Vec<Move> = Vec::new();
    let mut fills = Vec::new();
    let (mut dp, mut sp) = (Vec::new(), Vec::new());
    for run in &r.runs {
        dst_at.pieces(run.dst_start, run.len, &mut dp);
        match run.source {
            RunSource::Fill => fills.extend(dp.iter().copied()),
            RunSource::Tensor { k, start } => {
                let mut from = start;
                for &(ipu, tile, offset, n) in &dp {
                    sources[k as usize].pieces(from, n, &mut sp);
                    let mut to = offset;
                    for &(sipu, stile, soffset, m) in &sp {
                        let bytes = m as u64 * size;
                        let next = Move {
                            src: (sipu, stile, soffset),
                            dst: (ipu, tile, to),
                            bytes,
                        };
                        match moves.last_mut() {
                            Some(last)
                                if last.src.0 == sipu
                                    && last.src.1 == stile
                                    && last.src.2 + last.bytes == soffset
                                    && last.dst.0 == ipu
                                    && last.dst.1 == tile
                                    && last.dst.2 + last.bytes == to =>
                            {
                                last.bytes += bytes
                            }
                            _ => moves.push(next),
                        }
                        to += bytes;
                    }
                    from += n;
                }
            }
        }
    }
    (moves, fills)
}
