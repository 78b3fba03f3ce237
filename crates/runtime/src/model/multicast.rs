//! What a tile must put on its exchange wires when its sends are multicast.
//!
//! An IPU tile's send carries no destination: the sending tile puts the packet on its own
//! exchange wires at a compiled time, and every tile that is to receive it switches its
//! input to those wires at the matching time (Graphcore's patent application
//! US 2019/0121777 A1, "Instruction set", on the SEND and receive-mux instructions; Jia et
//! al. 2019, "Dissecting the Graphcore IPU Architecture via Microbenchmarking",
//! arXiv:1912.03413, for the exchange's measured behaviour). So one send of a byte reaches
//! any number of receivers in the same exchange. A receive writes one address, though: a
//! tile that reads a byte into `k` places (two rows of a broadcast bias) receives it `k`
//! times, and the sender sends it `k` times. What the sender puts on its wires is
//! therefore, per byte it holds, the most times any one receiver reads that byte.
//! (A single element written at many addresses of one tile, a broadcast's stride-0 run, is
//! received once and copied on that tile: see `Traffic::add`.)

use std::collections::{BTreeMap, HashMap};

/// A stretch of a source tile's memory sent to one receiver: bytes `start..end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub start: u64,
    pub end: u64,
    pub receiver: u32,
}

/// Bytes a tile sends for `spans` (in any order; sorted here): over its memory, the sum of
/// the most times any one receiver reads each byte.
pub(crate) fn bytes_sent(spans: &mut [Span]) -> u64 {
    if let [first, rest @ ..] = &spans[..]
        && rest.iter().all(|s| s.receiver == first.receiver)
    {
        // One receiver: nothing is shared.
        return spans.iter().map(|s| s.end - s.start).sum();
    }
    identical_or_disjoint(spans).unwrap_or_else(|| sweep(spans))
}

/// [`bytes_sent`] by a sweep over the stretches' ends, keeping each receiver's count.
fn sweep(spans: &[Span]) -> u64 {
    let mut events: Vec<(u64, u32, i64)> = Vec::with_capacity(2 * spans.len());
    for s in spans.iter().filter(|s| s.end > s.start) {
        events.push((s.start, s.receiver, 1));
        events.push((s.end, s.receiver, -1));
    }
    events.sort_unstable_by_key(|&(at, ..)| at);
    // Each receiver's current count, and how many receivers have each nonzero count.
    let mut level: HashMap<u32, i64> = HashMap::new();
    let mut levels: BTreeMap<i64, u32> = BTreeMap::new();
    let (mut total, mut at) = (0u64, 0u64);
    for (position, receiver, delta) in events {
        if position > at {
            let most = levels.last_key_value().map_or(0, |(&k, _)| k);
            total += (position - at) * most as u64;
            at = position;
        }
        let now = level.entry(receiver).or_insert(0);
        if *now > 0 {
            let n = levels.get_mut(now).expect("every nonzero level is counted");
            *n -= 1;
            if *n == 0 {
                levels.remove(now);
            }
        }
        *now += delta;
        if *now > 0 {
            *levels.entry(*now).or_insert(0) += 1;
        }
    }
    total
}

/// [`bytes_sent`] when any two spans are the same stretch or do not overlap (a broadcast
/// operand's blocks, most often): per stretch, its bytes times the most spans one receiver
/// has of it. `None` when some stretches overlap without being equal. Sorts `spans`.
fn identical_or_disjoint(spans: &mut [Span]) -> Option<u64> {
    spans.sort_unstable_by_key(|s| (s.start, s.end, s.receiver));
    let (mut total, mut covered) = (0u64, 0u64);
    for stretch in spans.chunk_by(|a, b| (a.start, a.end) == (b.start, b.end)) {
        let (start, end) = (stretch[0].start, stretch[0].end);
        if start == end {
            continue;
        }
        if start < covered {
            return None;
        }
        let most = stretch
            .chunk_by(|a, b| a.receiver == b.receiver)
            .map(|same| same.len() as u64)
            .max()
            .unwrap_or(0);
        total += (end - start) * most;
        covered = end;
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(start: u64, end: u64, receiver: u32) -> Span {
        Span {
            start,
            end,
            receiver,
        }
    }

    #[test]
    fn bytes_every_receiver_needs_once_are_sent_once() {
        let mut to_all: Vec<Span> = (0..100).map(|r| span(0, 64, r)).collect();
        assert_eq!(bytes_sent(&mut to_all), 64);
    }

    #[test]
    fn different_bytes_to_different_receivers_add_up() {
        assert_eq!(bytes_sent(&mut [span(0, 10, 1), span(10, 30, 2)]), 30);
        // Overlapping halves: the middle is shared.
        assert_eq!(bytes_sent(&mut [span(0, 20, 1), span(10, 30, 2)]), 30);
    }

    #[test]
    fn a_receiver_that_reads_bytes_into_k_places_is_sent_them_k_times() {
        // Two rows of a bias on tile 1, one on tile 2: the bias goes out twice.
        assert_eq!(
            bytes_sent(&mut [span(0, 8, 1), span(0, 8, 1), span(0, 8, 2)]),
            16
        );
        // A third receiver with three rows sets the count.
        let three = [span(0, 8, 3), span(0, 8, 3), span(0, 8, 3)];
        assert_eq!(bytes_sent(&mut [&three[..], &[span(0, 8, 1)]].concat()), 24);
    }

    /// The identical-or-disjoint shortcut gives what the sweep gives.
    #[test]
    fn the_shortcut_agrees_with_the_sweep() {
        let mut numbers = crate::model::test_numbers::numbers(7);
        let mut next = |n: u64| numbers(n as usize) as u64;
        for _ in 0..200 {
            // Stretches from a few fixed blocks: identical or disjoint.
            let mut spans: Vec<Span> = (0..next(12) + 2)
                .map(|_| {
                    let block = next(4) * 16;
                    span(block, block + 16, next(3) as u32)
                })
                .collect();
            spans.extend([span(0, 16, 0), span(16, 32, 1)]);
            let shortcut =
                identical_or_disjoint(&mut spans.clone()).expect("identical or disjoint");
            assert_eq!(sweep(&spans), shortcut, "{spans:?}");
            // A stretch overlapping two blocks leaves the shortcut to the sweep; it adds its
            // bytes only where no one receiver needs more.
            let mut with_overlap = spans.clone();
            with_overlap.push(span(8, 24, 99));
            assert!(identical_or_disjoint(&mut with_overlap.clone()).is_none());
            let swept = bytes_sent(&mut with_overlap.clone());
            assert!(swept >= shortcut && swept <= shortcut + 16, "{spans:?}");
        }
    }

    #[test]
    fn one_receiver_pays_every_byte_it_reads() {
        assert_eq!(bytes_sent(&mut [span(0, 8, 3), span(0, 4, 3)]), 12);
        assert_eq!(bytes_sent(&mut []), 0);
    }
}
