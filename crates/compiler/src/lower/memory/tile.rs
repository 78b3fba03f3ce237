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

/// The placed pieces, ordered by where they begin, field by field: the walk first picks
/// out, eight at a time and without a branch, the pieces live in the piece's steps (about
/// one in four on the bench cases' tiles; a branch per piece mispredicted that often), and
/// tests only those against the offset.
#[derive(Default)]
struct Placed {
    begin: Vec<u64>,
    end: Vec<u64>,
    /// Each piece's tensor's first and last live steps.
    first: Vec<u64>,
    until: Vec<u64>,
    tensor: Vec<u32>,
    /// Whether the tensor is live in several spans (else `first..=until` is its one span).
    several: Vec<bool>,
}

impl Placed {
    fn with_capacity(n: usize) -> Placed {
        Placed {
            begin: Vec::with_capacity(n),
            end: Vec::with_capacity(n),
            first: Vec::with_capacity(n),
            until: Vec::with_capacity(n),
            tensor: Vec::with_capacity(n),
            several: Vec::with_capacity(n),
        }
    }

    /// The lowest offset from which `bytes` meet no placed piece live in a step of `life`
    /// (of `tensor`'s pieces, several when the tensor has several spans): each placed piece
    /// that begins below the end of the bytes from the offset found so far and ends past
    /// it, and is live with it, moves the offset to its end. The pieces are in the order
    /// they begin, so the walk ends at the first live one at or past that end.
    fn lowest_free(
        &self,
        bytes: u64,
        life: &Lifetime,
        several: bool,
        lifetimes: &[Lifetime],
    ) -> u64 {
        const CHUNK: usize = 8;
        let (from, to) = (life.first, life.until);
        let mut at = 0;
        for start in (0..self.begin.len()).step_by(CHUNK) {
            if self.begin[start] >= at + bytes {
                break;
            }
            let stop = (start + CHUNK).min(self.begin.len());
            let mut live = 0u32;
            for (j, (&first, &until)) in (self.first[start..stop].iter())
                .zip(&self.until[start..stop])
                .enumerate()
            {
                live |= u32::from((until >= from) & (first <= to)) << j;
            }
            while live != 0 {
                let k = start + live.trailing_zeros() as usize;
                live &= live - 1;
                if self.begin[k] >= at + bytes {
                    return at;
                }
                // Both of one span: their ends overlap, so they meet.
                if self.end[k] > at
                    && ((!several && !self.several[k])
                        || lifetimes[self.tensor[k] as usize].meets(life))
                {
                    at = self.end[k];
                }
            }
        }
        at
    }

    /// Places a piece at `at`, among the others by where it begins.
    fn insert(&mut self, at: u64, bytes: u64, life: &Lifetime, tensor: u32, several: bool) {
        let k = self.begin.partition_point(|&b| b <= at);
        self.begin.insert(k, at);
        self.end.insert(k, at + bytes);
        self.first.insert(k, life.first);
        self.until.insert(k, life.until);
        self.tensor.insert(k, tensor);
        self.several.insert(k, several);
    }
}

/// First fit in `order`: each piece at the lowest offset past every placed piece it meets
/// that begins below the end of its bytes from there ([`Placed::lowest_free`]). (In step
/// order pieces no later piece can meet could be forgotten; in size order none can, and a
/// walk past them all is still cheaper than listing each piece's neighbours in time and
/// sorting them, measured on the bench cases.)
fn place(pieces: &[Piece], lifetimes: &[Lifetime], order: &[u32]) -> TilePlan {
    let mut offsets = vec![0u64; pieces.len()];
    let mut peak: Option<(u64, u32)> = None;
    let mut placed = Placed::with_capacity(pieces.len());
    for &k in order {
        let p = pieces[k as usize];
        let life = &lifetimes[p.tensor as usize];
        let several = life.spans.len() > 1;
        let at = placed.lowest_free(p.bytes, life, several, lifetimes);
        offsets[k as usize] = at;
        placed.insert(at, p.bytes, life, p.tensor, several);
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
    /// of one tensor among them).
    fn random_tile(next: &mut impl FnMut(u64) -> u64) -> (Vec<Piece>, Vec<Vec<(u64, u64)>>) {
        let tensors = 1 + next(40) as usize;
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
