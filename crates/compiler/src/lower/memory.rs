//! Tile memory planning: each tensor lives from the step that creates it to its last read;
//! on every tile, tensors are placed first-fit at the lowest offset not used by a tensor
//! live at the same time, so memory is reused between tensors never live together.
//! Constants are pinned (written at load, never overwritten).

use super::Lowerer;
use crate::CompileError;
use crate::error::TileOutOfMemory;
use std::collections::HashMap;

/// Offsets are multiples of 8 bytes (the 64-bit data path).
const ALIGN: u64 = 8;

/// A block in use on one tile: `[begin, end)` bytes, live from step `first` to `last`, and
/// in the steps of each later call when it is a shared function's tensor (`spans`).
#[derive(Clone)]
struct Block<'a> {
    begin: u64,
    end: u64,
    first: u64,
    last: u64,
    /// Every span of steps it is live in (`(first, last)` and each later call's), sorted
    /// by their first step; one span for most tensors.
    spans: &'a [(u64, u64)],
    /// The last step it is live in at all (`last`, or a later call's).
    until: u64,
}

impl Block<'_> {
    /// Whether the two are ever live in the same step.
    fn meets(&self, other: &Block) -> bool {
        if self.spans.len() <= 1 && other.spans.len() <= 1 {
            return self.first <= other.last && other.first <= self.last;
        }
        // Both sorted by first step: walk them together, stepping past the span that ends
        // first (it meets no later span of the other).
        let (mut i, mut j) = (0, 0);
        while let (Some(x), Some(y)) = (self.spans.get(i), other.spans.get(j)) {
            if x.0 <= y.1 && y.0 <= x.1 {
                return true;
            }
            if x.1 < y.1 {
                i += 1;
            } else {
                j += 1;
            }
        }
        false
    }
}

/// Assigns every tensor interval an offset in its tile's memory; fails naming the tile, the
/// moment and the tensors live there when a tile's memory is exceeded.
pub(crate) fn allocate(l: &mut Lowerer) -> Result<(), CompileError> {
    let n = l.b.tensor_count();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| (l.life[i].first, i));
    let also_live = std::mem::take(&mut l.also_live);
    // Each tensor's spans of live steps, sorted by their first step.
    let spans: Vec<Vec<(u64, u64)>> = (0..n)
        .map(|i| {
            let life = l.life[i];
            let last = if life.pinned { u64::MAX } else { life.last };
            let also = also_live.get(&i).map_or(&[][..], Vec::as_slice);
            let mut all: Vec<(u64, u64)> = std::iter::once((life.first, last))
                .chain(also.iter().copied())
                .collect();
            all.sort_unstable();
            all
        })
        .collect();
    // Per tile (`ipu * tiles_per_ipu + tile`): the blocks in use, sorted by `begin` (ties
    // in the order placed), and how many there were when those no later tensor can meet
    // were last dropped; the highest end so far and the tensor that reached it.
    let tiles_per_ipu = l.target.tiles_per_ipu;
    let mut live: Vec<(Vec<Block>, usize)> = Vec::new();
    let mut peak: Vec<Option<(u64, usize)>> = Vec::new();
    for i in order {
        let life = l.life[i];
        let also = also_live.get(&i).map_or(&[][..], Vec::as_slice);
        let last = if life.pinned { u64::MAX } else { life.last };
        let this = Block {
            begin: 0,
            end: 0,
            first: life.first,
            last,
            spans: &spans[i],
            until: also.iter().fold(last, |m, a| m.max(a.1)),
        };
        let t = l.b.tensor_mut(runtime::TensorId(i as u32));
        let size = t.dtype.size() as u64;
        for iv in &mut t.mapping {
            let bytes = (iv.len as u64 * size).div_ceil(ALIGN) * ALIGN;
            debug_assert!(
                iv.tile < tiles_per_ipu,
                "intervals name a tile of their IPU"
            );
            let slot = iv.ipu * tiles_per_ipu + iv.tile;
            if slot >= live.len() {
                live.resize_with(slot + 1, Default::default);
                peak.resize(slot + 1, None);
            }
            let (blocks, kept) = &mut live[slot];
            // Dropped once no later tensor can meet them (tensors come in order of their
            // first step, so such a block meets none): every time the list has doubled,
            // which keeps the work per placement constant.
            if blocks.len() >= 2 * *kept + 16 {
                blocks.retain(|b| b.until >= life.first);
                *kept = blocks.len();
            }
            let mut at = 0;
            for b in blocks.iter().filter(|b| b.meets(&this)) {
                if b.begin >= at + bytes {
                    break;
                }
                at = at.max(b.end);
            }
            iv.offset = at;
            let place = blocks.partition_point(|b| b.begin <= at);
            let block = Block {
                begin: at,
                end: at + bytes,
                ..this.clone()
            };
            blocks.insert(place, block);
            let p = peak[slot].get_or_insert((0, i));
            if at + bytes > p.0 {
                *p = (at + bytes, i);
            }
        }
    }
    record_liveness(l, &also_live);
    let capacity = l.target.bytes_per_tile;
    let worst = (peak.iter().enumerate())
        .filter_map(|(slot, p)| Some((slot, (*p)?)))
        .filter(|(_, (end, _))| *end > capacity)
        .max_by_key(|&(slot, (end, _))| (end, std::cmp::Reverse(slot)));
    if let Some((slot, (needed, t))) = worst {
        let (ipu, tile) = (slot / tiles_per_ipu, slot % tiles_per_ipu);
        let step = l.life[t].first;
        let mut live: Vec<(String, u64)> = (0..n)
            .filter(|&j| {
                let life = l.life[j];
                life.first <= step && (life.pinned || life.last >= step)
            })
            .filter_map(|j| {
                let info = l.b.tensor_info(runtime::TensorId(j as u32));
                let bytes: usize = info
                    .mapping
                    .iter()
                    .filter(|iv| iv.ipu == ipu && iv.tile == tile)
                    .map(|iv| iv.len * info.dtype.size())
                    .sum();
                (bytes > 0).then(|| (info.name.clone(), bytes as u64))
            })
            .collect();
        live.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        live.truncate(4);
        let target = &l.target;
        return Err(CompileError::OutOfMemory(Box::new(TileOutOfMemory {
            ipu,
            tile: target.physical_tile(tile),
            virtual_tile: target
                .is_out_of_core()
                .then_some((tile, target.tiles_per_ipu)),
            hint: String::new(),
            needed,
            available: capacity,
            when: l.b.tensor_info(runtime::TensorId(t as u32)).name.clone(),
            live,
        })));
    }
    Ok(())
}

/// Marks the tensors live for the whole program (constants, and tensors made before the
/// first compute step that live to the last step) and records the bytes live at each step
/// (the executable's liveness, for memory reports).
fn record_liveness(l: &mut Lowerer, also_live: &HashMap<usize, Vec<(u64, u64)>>) {
    let steps = l.step_names.len();
    if steps == 0 {
        return;
    }
    let end = steps as u64 - 1;
    let first_compute = l
        .step_names
        .iter()
        .position(|n| !n.starts_with("stream "))
        .unwrap_or(0) as u64;
    let mut delta = vec![0i64; steps + 1];
    for i in 0..l.b.tensor_count() {
        let life = l.life[i];
        let id = runtime::TensorId(i as u32);
        let t = l.b.tensor_info(id);
        let bytes = (t.elements * t.dtype.size()) as i64;
        let (first, last) = if life.pinned {
            (0, end)
        } else {
            (life.first.min(end), life.last.min(end))
        };
        delta[first as usize] += bytes;
        delta[last as usize + 1] -= bytes;
        for &(a, b) in also_live.get(&i).map_or(&[][..], Vec::as_slice) {
            delta[a.min(end) as usize] += bytes;
            delta[b.min(end) as usize + 1] -= bytes;
        }
        let always = life.pinned || (life.first < first_compute && life.last >= end);
        l.b.tensor_mut(id).always_live = always;
    }
    let mut live = 0i64;
    let points = l
        .step_names
        .iter()
        .zip(&delta)
        .map(|(name, d)| {
            live += d;
            runtime::LivePoint {
                step: name.clone(),
                bytes: live.max(0) as u64,
            }
        })
        .collect();
    l.b.set_liveness(points);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The walk of two sorted span lists finds a shared step exactly when some pair of
    /// spans shares one: random lists of up to 6 spans, overlapping among themselves too.
    #[test]
    fn blocks_meet_when_some_spans_share_a_step() {
        let mut state = 5u64;
        let mut next = |m: u64| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) % m
        };
        for _ in 0..2000 {
            let mut lists: Vec<Vec<(u64, u64)>> = (0..2)
                .map(|_| {
                    (0..1 + next(6))
                        .map(|_| {
                            let a = next(40);
                            (a, a + next(6))
                        })
                        .collect()
                })
                .collect();
            for l in &mut lists {
                l.sort_unstable();
            }
            let block = |spans: &[(u64, u64)]| Block {
                begin: 0,
                end: 8,
                first: spans[0].0,
                last: spans[0].1,
                spans: &[],
                until: spans.iter().map(|s| s.1).max().unwrap_or(0),
            };
            let (mut a, mut b) = (block(&lists[0]), block(&lists[1]));
            a.spans = &lists[0];
            b.spans = &lists[1];
            let any = (lists[0].iter()).any(|x| lists[1].iter().any(|y| x.0 <= y.1 && y.0 <= x.1));
            assert_eq!(a.meets(&b), any, "{lists:?}");
            assert_eq!(b.meets(&a), any, "{lists:?}");
        }
    }
}
