//! Tile memory planning: each tensor lives from the step that creates it to its last read;
//! on every tile, its pieces (tensor intervals) are placed first-fit at the lowest offset
//! not used by a piece live at the same time, largest first ([`tile`]), so memory is reused
//! between tensors never live together. Tiles are planned independently, in parallel.
//! Constants are pinned (written at load, never overwritten).

use super::Lowerer;
use crate::CompileError;
use crate::error::TileOutOfMemory;
use rayon::prelude::*;
use std::collections::HashMap;
use tile::{Order, Piece, TilePlan};

mod tile;

/// Offsets are multiples of 8 bytes (the 64-bit data path).
const ALIGN: u64 = 8;

/// When a tensor is live: from its first step to its last read, and in the steps of each
/// later call when it is a shared function's tensor.
#[derive(Clone, Copy)]
struct Lifetime<'a> {
    /// The first step it is live in.
    first: u64,
    /// The last step of its first span (of its only span, for most tensors).
    last: u64,
    /// Every span of steps it is live in, sorted and disjoint; one for most tensors.
    spans: &'a [(u64, u64)],
    /// When `spans` repeat the first span at shifts other blocks' spans share.
    repeat: Option<Repeat>,
    /// The last step it is live in at all (`last`, or a later call's).
    until: u64,
}

impl Lifetime<'_> {
    /// Whether the two are ever live in the same step.
    #[inline]
    fn meets(&self, other: &Lifetime) -> bool {
        if self.until < other.first || other.until < self.first {
            return false;
        }
        match (self.spans.len() <= 1, other.spans.len() <= 1) {
            (true, true) => self.first <= other.last && other.first <= self.last,
            (true, false) => overlaps_any(other.spans, (self.first, self.last)),
            (false, true) => overlaps_any(self.spans, (other.first, other.last)),
            (false, false) => {
                // The tensors of one shared function repeat in each call at the same
                // shifts: when the two first spans lie closer together than any two
                // shifts, no span of one call meets a span of another call, so the two
                // meet in every call or in none.
                if let (Some(a), Some(b)) = (self.repeat, other.repeat)
                    && a.id == b.id
                {
                    let (x, y) = (self.spans[0], other.spans[0]);
                    if x.1.max(y.1) - x.0.min(y.0) < a.least_shift {
                        return x.0 <= y.1 && y.0 <= x.1;
                    }
                }
                // Both sorted and disjoint: walk them together, stepping past the span
                // that ends first (it meets no later span of the other).
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
    }
}

/// Whether any of `spans` (sorted, disjoint) shares a step with `(first, last)`.
fn overlaps_any(spans: &[(u64, u64)], (first, last): (u64, u64)) -> bool {
    let i = spans.partition_point(|s| s.1 < first);
    spans.get(i).is_some_and(|s| s.0 <= last)
}

/// Spans that repeat their first span, shifted: the list of shifts, as an id shared by
/// every span list with the same shifts, and the least distance between two shifts.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Repeat {
    id: u32,
    least_shift: u64,
}

/// The repeat of `spans` (sorted, disjoint), if there are several spans and each is the
/// first shifted; `ids` numbers the lists of shifts seen.
fn repeat_of(spans: &[(u64, u64)], ids: &mut HashMap<Vec<u64>, u32>) -> Option<Repeat> {
    let (&(first, last), later) = spans.split_first()?;
    if later.is_empty() || later.iter().any(|s| s.1 - s.0 != last - first) {
        return None;
    }
    let shifts: Vec<u64> = later.iter().map(|s| s.0 - first).collect();
    let least_shift = std::iter::once(0)
        .chain(shifts.iter().copied())
        .zip(shifts.iter().copied())
        .map(|(a, b)| b - a)
        .min()?;
    let next = ids.len() as u32;
    let id = *ids.entry(shifts).or_insert(next);
    Some(Repeat { id, least_shift })
}

/// `spans` sorted and merged where they overlap or touch, so they are disjoint and their
/// ends ascend too.
fn disjoint(mut spans: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    spans.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(spans.len());
    for s in spans {
        match out.last_mut() {
            Some(last) if s.0 <= last.1.saturating_add(1) => last.1 = last.1.max(s.1),
            _ => out.push(s),
        }
    }
    out
}

/// Assigns every tensor interval an offset in its tile's memory; fails naming the tile, the
/// moment and the tensors live there when a tile's memory is exceeded.
pub(crate) fn allocate(l: &mut Lowerer) -> Result<(), CompileError> {
    let n = l.b.tensor_count();
    let also_live = std::mem::take(&mut l.also_live);
    // Each tensor's spans of live steps, sorted and disjoint.
    let spans: Vec<Vec<(u64, u64)>> = (0..n)
        .map(|i| {
            let life = l.life[i];
            let last = if life.pinned { u64::MAX } else { life.last };
            let also = also_live.get(&i).map_or(&[][..], Vec::as_slice);
            disjoint(
                std::iter::once((life.first, last))
                    .chain(also.iter().copied())
                    .collect(),
            )
        })
        .collect();
    for (i, spans) in spans.iter().enumerate() {
        l.b.tensor_mut(runtime::TensorId(i as u32)).live_steps = spans.clone();
    }
    let mut shift_ids = HashMap::new();
    let repeats: Vec<Option<Repeat>> = spans.iter().map(|s| repeat_of(s, &mut shift_ids)).collect();
    let tiles_per_ipu = l.target.tiles_per_ipu;
    let lifetimes: Vec<Lifetime> = (spans.iter().zip(&repeats))
        .map(|(spans, &repeat)| Lifetime {
            first: spans[0].0,
            // `last` is read only for tensors of one span, whose last step it is
            last: spans[0].1,
            spans,
            repeat,
            until: spans[spans.len() - 1].1,
        })
        .collect();
    // Each tile in size order; the busiest again in step order, keeping the better.
    let on_tiles = pieces_by_tile(l);
    let mut plans: Vec<TilePlan> = (0..on_tiles.tiles())
        .into_par_iter()
        .map(|slot| tile::plan_in(on_tiles.of(slot), &lifetimes, Order::Size))
        .collect();
    replan_busiest(&on_tiles, &lifetimes, &mut plans);
    let mut peak: Vec<Option<(u64, usize)>> = Vec::with_capacity(plans.len());
    for (slot, plan) in plans.into_iter().enumerate() {
        for (p, at) in on_tiles.of(slot).iter().zip(plan.offsets) {
            let t = l.b.tensor_mut(runtime::TensorId(p.tensor));
            t.mapping[p.interval as usize].offset = at;
        }
        peak.push(plan.peak.map(|(end, t)| (end, t as usize)));
    }
    record_liveness(l, &also_live);
    let capacity = l.target.bytes_per_tile;
    let worst = (peak.iter().enumerate())
        .filter_map(|(slot, p)| Some((slot, (*p)?)))
        .filter(|(_, (end, _))| *end > capacity)
        .max_by_key(|&(slot, (end, _))| (end, std::cmp::Reverse(slot)));
    if let Some((slot, (needed, t))) = worst {
        let (ipu, tile) = (slot / tiles_per_ipu, slot % tiles_per_ipu);
        let at_peak = runtime::tile_at_peak(l.b.executable(), ipu, tile);
        let step = at_peak
            .as_ref()
            .map_or_else(String::new, |a| a.step.clone());
        let live: Vec<(String, u64)> = (at_peak.into_iter())
            .flat_map(|a| a.tensors)
            .take(4)
            .map(|t| (t.name, t.bytes))
            .collect();
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
            step,
            live,
        })));
    }
    Ok(())
}

/// Every tile's pieces, tile by tile (`ipu * tiles_per_ipu + tile`), each tile's in the
/// order of their tensors and intervals.
struct PiecesByTile {
    starts: Vec<usize>,
    pieces: Vec<Piece>,
}

impl PiecesByTile {
    /// How many tiles (the last with a piece, plus one).
    fn tiles(&self) -> usize {
        self.starts.len() - 1
    }

    /// The pieces on tile `slot`.
    fn of(&self, slot: usize) -> &[Piece] {
        &self.pieces[self.starts[slot]..self.starts[slot + 1]]
    }
}

/// Plans the busiest tiles again in step order, from the busiest down, keeping on each the
/// plan that needs less, until the next tile's size-order peak is no higher than the
/// highest peak kept. The busiest tile then needs what it would if every tile took the
/// better of the two orders (decreasing size is not better on every tile: a 4-tile f16
/// product of the corpus needs 14 % more with it), for one more plan of a tile or a few.
fn replan_busiest(on_tiles: &PiecesByTile, lifetimes: &[Lifetime], plans: &mut [TilePlan]) {
    let mut slots: Vec<usize> = (0..plans.len()).collect();
    slots.sort_by_key(|&s| (std::cmp::Reverse(plans[s].bytes()), s));
    let mut high = 0;
    for s in slots {
        if plans[s].bytes() <= high {
            break;
        }
        let by_step = tile::plan_in(on_tiles.of(s), lifetimes, Order::Step);
        if by_step.bytes() < plans[s].bytes() {
            plans[s] = by_step;
        }
        high = high.max(plans[s].bytes());
    }
}

/// Groups every tensor interval by its tile.
fn pieces_by_tile(l: &Lowerer) -> PiecesByTile {
    let tiles_per_ipu = l.target.tiles_per_ipu;
    let tensors = (0..l.b.tensor_count()).map(|i| l.b.tensor_info(runtime::TensorId(i as u32)));
    let slot = |iv: &runtime::Interval| {
        debug_assert!(
            iv.tile < tiles_per_ipu,
            "intervals name a tile of their IPU"
        );
        iv.ipu * tiles_per_ipu + iv.tile
    };
    let mut starts: Vec<usize> = Vec::new();
    for t in tensors.clone() {
        for iv in &t.mapping {
            let s = slot(iv);
            if s + 2 > starts.len() {
                starts.resize(s + 2, 0);
            }
            starts[s + 1] += 1;
        }
    }
    if starts.is_empty() {
        starts.push(0);
    }
    for s in 1..starts.len() {
        starts[s] += starts[s - 1];
    }
    let mut fill = starts.clone();
    let mut pieces = vec![
        Piece {
            tensor: 0,
            interval: 0,
            bytes: 0
        };
        starts[starts.len() - 1]
    ];
    for (i, t) in tensors.enumerate() {
        let size = t.dtype.size() as u64;
        for (k, iv) in t.mapping.iter().enumerate() {
            let s = slot(iv);
            pieces[fill[s]] = Piece {
                tensor: i as u32,
                interval: k as u32,
                bytes: (iv.len as u64 * size).div_ceil(ALIGN) * ALIGN,
            };
            fill[s] += 1;
        }
    }
    PiecesByTile { starts, pieces }
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

    /// A seeded stream of numbers below the bound asked for (a linear congruential
    /// generator: the tests need no more).
    pub(super) fn below(seed: u64) -> impl FnMut(u64) -> u64 {
        let mut state = seed;
        move |m| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) % m
        }
    }

    /// Blocks meet exactly when some pair of their spans shares a step: random lists of up
    /// to 6 spans, overlapping among themselves too (merged as the allocator merges them),
    /// so single spans meet lists and lists meet lists.
    #[test]
    fn blocks_meet_when_some_spans_share_a_step() {
        let mut next = below(5);
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
            let raw = lists.clone();
            for l in &mut lists {
                *l = disjoint(std::mem::take(l));
            }
            let block = |spans: &[(u64, u64)]| Lifetime {
                first: spans[0].0,
                last: spans[0].1,
                spans: &[],
                repeat: None,
                until: spans.iter().map(|s| s.1).max().unwrap_or(0),
            };
            let (mut a, mut b) = (block(&lists[0]), block(&lists[1]));
            a.spans = &lists[0];
            b.spans = &lists[1];
            let any = (raw[0].iter()).any(|x| raw[1].iter().any(|y| x.0 <= y.1 && y.0 <= x.1));
            assert_eq!(a.meets(&b), any, "{raw:?}");
            assert_eq!(b.meets(&a), any, "{raw:?}");
        }
    }

    /// Two tensors of a function called several times: their spans repeat at the same
    /// shifts, and the shortcut (compare the first spans) agrees with comparing every pair,
    /// whether the spans lie closer together than the shifts or not.
    #[test]
    fn repeated_spans_meet_as_their_every_pair_does() {
        let mut next = below(11);
        let mut ids = HashMap::new();
        let mut shortcuts = 0;
        for _ in 0..3000 {
            let mut shifts = vec![0];
            for _ in 0..1 + next(4) {
                let s = shifts[shifts.len() - 1] + 1 + next(30);
                shifts.push(s);
            }
            let base = |a: u64, len: u64| -> Vec<(u64, u64)> {
                shifts.iter().map(|d| (a + d, a + len + d)).collect()
            };
            let raw = [base(next(20), next(12)), base(next(20), next(12))];
            let lists = raw.clone().map(disjoint);
            let block = |spans: &[(u64, u64)], ids: &mut HashMap<Vec<u64>, u32>| Lifetime {
                first: spans[0].0,
                last: spans[0].1,
                spans: &[],
                repeat: repeat_of(spans, ids),
                until: spans[spans.len() - 1].1,
            };
            let (mut a, mut b) = (block(&lists[0], &mut ids), block(&lists[1], &mut ids));
            a.spans = &lists[0];
            b.spans = &lists[1];
            if let (Some(x), Some(y)) = (a.repeat, b.repeat) {
                let (p, q) = (lists[0][0], lists[1][0]);
                if x.id == y.id && p.1.max(q.1) - p.0.min(q.0) < x.least_shift {
                    shortcuts += 1;
                }
            }
            let any = (raw[0].iter()).any(|x| raw[1].iter().any(|y| x.0 <= y.1 && y.0 <= x.1));
            assert_eq!(a.meets(&b), any, "{raw:?}");
            assert_eq!(b.meets(&a), any, "{raw:?}");
        }
        assert!(shortcuts > 100, "the shortcut was taken {shortcuts} times");
    }
}
