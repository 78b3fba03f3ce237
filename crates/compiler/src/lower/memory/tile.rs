//! One tile's memory plan: its pieces (each tensor interval mapped there) placed first-fit
//! in decreasing size, as XLA's heap simulator orders buffers
//! (`GlobalDecreasingSizeBestFitHeap`: sizes down, then longer lives first). Placed in
//! the order tensors are made, short-lived small tensors leave holes that large ones cannot
//! use: the bench cases' busiest tiles needed 2-9 % more that way (BENCHMARKS.md).

use super::Lifetime;

/// A tensor interval mapped to the tile: the tensor, the interval's index in its mapping,
/// and its bytes (aligned).
#[derive(Clone, Copy, Debug)]
pub(super) struct Piece {
    pub tensor: u32,
    pub interval: u32,
    pub bytes: u64,
}

/// The orders a tile's pieces can be placed in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Order {
    /// Decreasing size, then longer lives first, then the order tensors are made.
    Size,
    /// The order tensors are made (their first steps), ties by tensor and interval.
    Step,
}

/// A tile's plan: each piece's offset (in the order of the pieces given) and the highest
/// end with the tensor whose piece reached it first.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct TilePlan {
    pub offsets: Vec<u64>,
    pub peak: Option<(u64, u32)>,
}

impl TilePlan {
    /// The highest end (0 for a tile without pieces).
    pub(super) fn bytes(&self) -> u64 {
        self.peak.map_or(0, |p| p.0)
    }
}

/// Plans one tile's pieces in `order`.
pub(super) fn plan_in(pieces: &[Piece], lifetimes: &[Lifetime], order: Order) -> TilePlan {
    place(pieces, lifetimes, &ordered(pieces, lifetimes, order))
}

/// The indices of `pieces` in the order asked for.
fn ordered(pieces: &[Piece], lifetimes: &[Lifetime], order: Order) -> Vec<u32> {
    let mut keys: Vec<(u64, u64, u64, u32, u32, u32)> = (pieces.iter().enumerate())
        .map(|(k, p)| {
            let life = &lifetimes[p.tensor as usize];
            let (size, span) = match order {
                Order::Size => (!p.bytes, !life.until.saturating_sub(life.first)),
                Order::Step => (0, 0),
            };
            (size, span, life.first, p.tensor, p.interval, k as u32)
        })
        .collect();
    keys.sort_unstable();
    keys.iter().map(|k| k.5).collect()
}

/// A placed piece: its bytes `[begin, end)` and its tensor's lifetime's ends at hand (a
/// walk tests them for every piece it passes).
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

/// Placed pieces by where they begin: the pieces of one stretch of steps ([`Placed`] keeps
/// one per stretch).
#[derive(Default)]
struct Stretch(Vec<Block>);

impl Stretch {
    /// Walks on from piece `*from` while pieces begin below the end of `bytes` from `*at`:
    /// each one live with `piece` that ends past `*at` moves `*at` to its end. Whether `*at`
    /// moved.
    fn walk(&self, from: &mut usize, at: &mut u64, bytes: u64, piece: &Live) -> bool {
        let mut moved = false;
        while let Some(b) = self.0.get(*from).filter(|b| b.begin < *at + bytes) {
            *from += 1;
            // Both of one span: their ends overlap, so they meet.
            if b.end > *at
                && b.until >= piece.life.first
                && piece.life.until >= b.first
                && ((!piece.several && !b.several)
                    || piece.lifetimes[b.tensor as usize].meets(piece.life))
            {
                *at = b.end;
                moved = true;
            }
        }
        moved
    }

    /// Places `block` among the others by where it begins.
    fn insert(&mut self, block: Block) {
        let k = self.0.partition_point(|b| b.begin <= block.begin);
        self.0.insert(k, block);
    }
}

/// A piece's tensor's lifetime, and every tensor's (to test tensors of several spans).
struct Live<'a, 'l> {
    life: &'a Lifetime<'l>,
    several: bool,
    lifetimes: &'a [Lifetime<'l>],
}

/// The placed pieces, in stretches of steps: a piece is kept in every stretch its tensor's
/// first to last live step reaches, and looks only at the stretches its own reaches. Only
/// pieces live in a step of one of them can meet it; on the bench cases' tiles about one
/// placed piece in four is live with the next one placed, and a walk over all of them was
/// the lowering's largest cost.
struct Placed {
    /// The first step of each stretch after the first.
    cuts: Vec<u64>,
    /// The stretches, then the pieces that reach more than [`Placed::MOST_REACHED`] of
    /// them, kept once (a layer stack's weights live in every stretch: kept in each, every
    /// piece's walk passed them in each it reached, and the 12-layer encoder compiled 20 %
    /// slower).
    stretches: Vec<Stretch>,
    /// Each stretch's walk's position, for the piece being placed.
    cursors: Vec<usize>,
}

impl Placed {
    /// The most stretches a piece is kept in; one reaching more is kept with the long ones.
    const MOST_REACHED: usize = 2;

    /// Stretches of about [`PIECES_PER_STRETCH`] pieces' first steps each, for `pieces`.
    fn for_pieces(pieces: &[Piece], lifetimes: &[Lifetime]) -> Placed {
        const PIECES_PER_STRETCH: usize = 24;
        let mut firsts: Vec<u64> = (pieces.iter())
            .map(|p| lifetimes[p.tensor as usize].first)
            .collect();
        firsts.sort_unstable();
        let count = (pieces.len() / PIECES_PER_STRETCH).clamp(1, 64);
        let mut cuts: Vec<u64> = (1..count)
            .map(|j| firsts[j * firsts.len() / count])
            .collect();
        cuts.dedup();
        let stretches = (0..cuts.len() + 2).map(|_| Stretch::default()).collect();
        Placed {
            cursors: vec![0; cuts.len() + 2],
            cuts,
            stretches,
        }
    }

    /// The stretches `life` reaches.
    fn reached(&self, life: &Lifetime) -> std::ops::RangeInclusive<usize> {
        let of = |step: u64| self.cuts.partition_point(|&c| c <= step);
        of(life.first)..=of(life.until)
    }

    /// The lowest offset from which `bytes` meet no placed piece live with `piece`: the
    /// walks of the stretches it reaches and of the long pieces, again while one moves the
    /// offset (a walk stops at
    /// the first piece beginning at or past the end of the bytes, and goes on from there
    /// when the offset moves). Each move is to the end of a piece the bytes would meet, so
    /// the offset never passes the lowest free one, and stops there.
    fn lowest_free(&mut self, bytes: u64, piece: &Live) -> u64 {
        let long = self.stretches.len() - 1;
        let reached = self.reached(piece.life);
        let walked = || reached.clone().chain(std::iter::once(long));
        for s in walked() {
            self.cursors[s] = 0;
        }
        let mut at = 0;
        loop {
            let mut moved = false;
            for s in walked() {
                moved |= self.stretches[s].walk(&mut self.cursors[s], &mut at, bytes, piece);
            }
            if !moved {
                return at;
            }
        }
    }

    /// Places a piece of `tensor` at `at`.
    fn insert(&mut self, at: u64, bytes: u64, piece: &Live, tensor: u32) {
        let block = Block {
            begin: at,
            end: at + bytes,
            first: piece.life.first,
            until: piece.life.until,
            tensor,
            several: piece.several,
        };
        let reached = self.reached(piece.life);
        if reached.clone().count() > Placed::MOST_REACHED {
            let long = self.stretches.len() - 1;
            self.stretches[long].insert(block);
        } else {
            for s in reached {
                self.stretches[s].insert(block);
            }
        }
    }
}

/// First fit in `order`: each piece at the lowest offset past every placed piece it meets
/// that begins below the end of its bytes from there ([`Placed::lowest_free`]).
fn place(pieces: &[Piece], lifetimes: &[Lifetime], order: &[u32]) -> TilePlan {
    let mut offsets = vec![0u64; pieces.len()];
    let mut peak: Option<(u64, u32)> = None;
    let mut placed = Placed::for_pieces(pieces, lifetimes);
    for &k in order {
        let p = pieces[k as usize];
        let life = &lifetimes[p.tensor as usize];
        let piece = Live {
            life,
            several: life.spans.len() > 1,
            lifetimes,
        };
        let at = placed.lowest_free(p.bytes, &piece);
        offsets[k as usize] = at;
        placed.insert(at, p.bytes, &piece, p.tensor);
        if peak.is_none_or(|(end, _)| at + p.bytes > end) {
            peak = Some((at + p.bytes, p.tensor));
        }
    }
    TilePlan { offsets, peak }
}

#[cfg(test)]
mod tests {
    use super::super::disjoint;
    use super::super::tests::below;
    use super::*;

    /// Random tiles: pieces of random sizes and one or several spans each (several pieces
    /// of one tensor among them); one in eight of up to 300 tensors, so the placed pieces
    /// fall in many stretches of steps.
    fn random_tile(next: &mut impl FnMut(u64) -> u64) -> (Vec<Piece>, Vec<Vec<(u64, u64)>>) {
        let most = if next(8) == 0 { 300 } else { 40 };
        let tensors = 1 + next(most) as usize;
        let spans: Vec<Vec<(u64, u64)>> = (0..tensors)
            .map(|_| {
                disjoint(
                    (0..1 + next(3) * next(2))
                        .map(|_| {
                            let a = next(60);
                            (a, a + next(15))
                        })
                        .collect(),
                )
            })
            .collect();
        let mut pieces = Vec::new();
        for t in 0..tensors {
            for k in 0..1 + next(2) {
                pieces.push(Piece {
                    tensor: t as u32,
                    interval: k as u32,
                    bytes: 8 * next(20),
                });
            }
        }
        (pieces, spans)
    }

    fn lifetimes(spans: &[Vec<(u64, u64)>]) -> Vec<Lifetime<'_>> {
        spans
            .iter()
            .map(|s| Lifetime {
                first: s[0].0,
                last: s[0].1,
                spans: s,
                repeat: None,
                until: s[s.len() - 1].1,
            })
            .collect()
    }

    /// Whether two span lists share a step (by brute force).
    fn share_a_step(a: &[(u64, u64)], b: &[(u64, u64)]) -> bool {
        a.iter().any(|x| b.iter().any(|y| x.0 <= y.1 && y.0 <= x.1))
    }

    /// In either order, pieces whose tensors share a step never share a byte; each piece
    /// sits at the lowest offset free of the pieces placed before it (first fit); the peak
    /// is the highest end.
    #[test]
    fn plans_are_first_fit_and_never_overlap_live_pieces() {
        let mut next = below(29);
        for _ in 0..400 {
            let (pieces, spans) = random_tile(&mut next);
            let lifetimes = lifetimes(&spans);
            for order_kind in [Order::Size, Order::Step] {
                let plan = plan_in(&pieces, &lifetimes, order_kind);
                let order = ordered(&pieces, &lifetimes, order_kind);
                let live = |a: usize, b: usize| {
                    share_a_step(
                        &spans[pieces[a].tensor as usize],
                        &spans[pieces[b].tensor as usize],
                    )
                };
                let range = |k: usize, at: u64| (at, at + pieces[k].bytes);
                let clash = |(a0, a1): (u64, u64), (b0, b1): (u64, u64)| a0 < b1 && b0 < a1;
                for (r, &k) in order.iter().enumerate() {
                    let k = k as usize;
                    let before: Vec<usize> = order[..r]
                        .iter()
                        .map(|&b| b as usize)
                        .filter(|&b| live(k, b))
                        .collect();
                    let fits = |at: u64| {
                        before
                            .iter()
                            .all(|&b| !clash(range(k, at), range(b, plan.offsets[b])))
                    };
                    assert!(fits(plan.offsets[k]), "{pieces:?} {spans:?}");
                    // First fit: no lower offset among 0 and the ends of earlier pieces.
                    let lower = std::iter::once(0)
                        .chain(before.iter().map(|&b| plan.offsets[b] + pieces[b].bytes))
                        .filter(|&at| at < plan.offsets[k])
                        .find(|&at| fits(at));
                    assert_eq!(lower, None, "{order_kind:?}: {pieces:?} {spans:?}");
                }
                let high = (0..pieces.len())
                    .map(|k| plan.offsets[k] + pieces[k].bytes)
                    .max();
                assert_eq!(plan.peak.map(|p| p.0), high);
            }
        }
    }

    /// The case decreasing size is for: a short-lived tensor and a long-lived one made
    /// first, then a larger one once the short one is gone. In step order the larger one
    /// finds the short one's place too small and goes on top; in size order it goes first,
    /// at 0, and the short one fits beside it in time.
    #[test]
    fn large_pieces_first_leave_no_hole_under_them() {
        let spans = vec![vec![(0, 1)], vec![(0, 5)], vec![(2, 5)]];
        let lifetimes = lifetimes(&spans);
        let piece = |tensor: u32, bytes: u64| Piece {
            tensor,
            interval: 0,
            bytes,
        };
        let pieces = [piece(0, 100), piece(1, 100), piece(2, 200)];
        let by_step = plan_in(&pieces, &lifetimes, Order::Step);
        let by_size = plan_in(&pieces, &lifetimes, Order::Size);
        assert_eq!(by_step.offsets, [0, 100, 200]);
        assert_eq!(by_step.peak, Some((400, 2)));
        // Equal sizes: the longer-lived one first.
        assert_eq!(by_size.offsets, [0, 200, 0]);
        assert_eq!(by_size.peak, Some((300, 1)));
    }
}
