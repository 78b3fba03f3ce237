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

/// A block in use on one tile: `[begin, end)` bytes of tensor `tensor`, with its lifetime's
/// ends at hand (the first-fit scan tests them for every block it passes; a block is kept
/// small, since placing one moves the blocks after it).
#[derive(Clone, Copy)]
struct Block {
    begin: u64,
    end: u64,
    first: u64,
    until: u64,
    tensor: u32,
    /// Whether the tensor is live in several spans (else `first..=until` is its one span).
    several: bool,
}

impl Block {
    /// Whether the tensors of the two blocks are ever live in the same step.
    #[inline]
    fn meets(&self, other: &Block, lifetimes: &[Lifetime]) -> bool {
        if self.until < other.first || other.until < self.first {
            return false;
        }
        // One span each: their ends overlap, so they meet.
        if !self.several && !other.several {
            return true;
        }
        lifetimes[self.tensor as usize].meets(&lifetimes[other.tensor as usize])
    }
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
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| (l.life[i].first, i));
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
    // Per tile (`ipu * tiles_per_ipu + tile`): the blocks in use, sorted by `begin` (ties
    // in the order placed), and how many there were when those no later tensor can meet
    // were last dropped; the highest end so far and the tensor that reached it.
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
    let mut live: Vec<(Vec<Block>, usize)> = Vec::new();
    let mut peak: Vec<Option<(u64, usize)>> = Vec::new();
    for i in order {
        let life = l.life[i];
        let this = Block {
            begin: 0,
            end: 0,
            first: lifetimes[i].first,
            until: lifetimes[i].until,
            tensor: i as u32,
            several: lifetimes[i].spans.len() > 1,
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
            // First fit: the lowest offset past every block live with this one that begins
            // below the end of the range. Blocks come by `begin`, so the first block at or
            // past the range's end ends the search, live or not.
            let mut at = 0;
            for b in blocks.iter() {
                if b.begin >= at + bytes {
                    break;
                }
                if b.end > at && b.meets(&this, &lifetimes) {
                    at = b.end;
                }
            }
            iv.offset = at;
            let place = blocks.partition_point(|b| b.begin <= at);
            let block = Block {
                begin: at,
                end: at + bytes,
                ..this
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
    fn below(seed: u64) -> impl FnMut(u64) -> u64 {
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
