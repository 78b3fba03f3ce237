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
