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

use std::collections::HashMap;

/// A stretch of a source tile's memory sent to one receiver: bytes `start..end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub start: u64,
    pub end: u64,
    pub receiver: u32,
}

/// Bytes a tile sends for `spans` (in any order): over its memory, the sum of the most
/// times any one receiver reads each byte.
pub(crate) fn bytes_sent(spans: &[Span]) -> u64 {
    if let [first, rest @ ..] = spans
        && rest.iter().all(|s| s.receiver == first.receiver)
    {
        // One receiver: nothing is shared.
        return spans.iter().map(|s| s.end - s.start).sum();
    }
    sweep(spans)
}

/// [`bytes_sent`] by a sweep over the stretches' ends, keeping each receiver's count and
/// how many receivers have each count: the most any receiver has moves by at most one an
/// event, so it is kept without searching.
fn sweep(spans: &[Span]) -> u64 {
    let mut events: Vec<(u64, u32, bool)> = Vec::with_capacity(2 * spans.len());
    for s in spans.iter().filter(|s| s.end > s.start) {
        events.push((s.start, s.receiver, true));
        events.push((s.end, s.receiver, false));
    }
    events.sort_unstable_by_key(|&(at, ..)| at);
    let receivers = dense_receivers(&mut events);
    let mut level = vec![0usize; receivers];
    // `counted[k]`: receivers whose count is k (k >= 1); `most`: the highest such k.
    let mut counted = vec![0u32; spans.len() + 1];
    let (mut most, mut total, mut at) = (0usize, 0u64, 0u64);
    for (position, receiver, starts) in events {
        if position > at {
            total += (position - at) * most as u64;
            at = position;
        }
        let now = &mut level[receiver as usize];
        if *now > 0 {
            counted[*now] -= 1;
        }
        if starts {
            *now += 1;
            most = most.max(*now);
        } else {
            // Every end follows its own start: the count is at least one.
            *now -= 1;
        }
        if *now > 0 {
            counted[*now] += 1;
        }
        if most > 0 && counted[most] == 0 {
            // Only this receiver left the highest count, for the one below it.
            most -= 1;
        }
    }
    total
}

/// Renumbers the events' receivers `0..k` (in order of first appearance) and returns `k`:
/// through a table indexed by receiver when receivers are tile numbers of a modest system,
/// else through a map.
fn dense_receivers(events: &mut [(u64, u32, bool)]) -> usize {
    const UNSEEN: u32 = u32::MAX;
    let highest = events.iter().map(|e| e.1 as usize).max().unwrap_or(0);
    let mut k = 0u32;
    if highest <= 4 * events.len() + 4096 {
        let mut ids = vec![UNSEEN; highest + 1];
        for (_, receiver, _) in events.iter_mut() {
            let id = &mut ids[*receiver as usize];
            if *id == UNSEEN {
                (*id, k) = (k, k + 1);
            }
            *receiver = *id;
        }
    } else {
        let mut ids: HashMap<u32, u32> = HashMap::new();
        for (_, receiver, _) in events.iter_mut() {
            let next = ids.len() as u32;
            *receiver = *ids.entry(*receiver).or_insert(next);
        }
        k = ids.len() as u32;
    }
    k as usize
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
        let to_all: Vec<Span> = (0..100).map(|r| span(0, 64, r)).collect();
        assert_eq!(bytes_sent(&to_all), 64);
    }

    #[test]
    fn different_bytes_to_different_receivers_add_up() {
        assert_eq!(bytes_sent(&[span(0, 10, 1), span(10, 30, 2)]), 30);
        // Overlapping halves: the middle is shared.
        assert_eq!(bytes_sent(&[span(0, 20, 1), span(10, 30, 2)]), 30);
    }

    #[test]
    fn a_receiver_that_reads_bytes_into_k_places_is_sent_them_k_times() {
        // Two rows of a bias on tile 1, one on tile 2: the bias goes out twice.
        assert_eq!(
            bytes_sent(&[span(0, 8, 1), span(0, 8, 1), span(0, 8, 2)]),
            16
        );
        // A third receiver with three rows sets the count.
        let three = [span(0, 8, 3), span(0, 8, 3), span(0, 8, 3)];
        assert_eq!(bytes_sent(&[&three[..], &[span(0, 8, 1)]].concat()), 24);
    }

    /// The sweep against a count byte by byte: per byte, the most spans of one receiver
    /// that hold it.
    #[test]
    fn the_sweep_counts_what_each_byte_needs() {
        let mut numbers = crate::model::test_numbers::numbers(11);
        let mut next = |n: u64| numbers(n as usize) as u64;
        for _ in 0..300 {
            let spans: Vec<Span> = (0..next(20) + 1)
                .map(|_| {
                    let start = next(40);
                    span(start, start + next(12), 1000 * next(5) as u32)
                })
                .collect();
            let by_byte: u64 = (0..64)
                .map(|byte| {
                    let mut per_receiver: HashMap<u32, u64> = HashMap::new();
                    for s in spans.iter().filter(|s| (s.start..s.end).contains(&byte)) {
                        *per_receiver.entry(s.receiver).or_default() += 1;
                    }
                    per_receiver.values().copied().max().unwrap_or(0)
                })
                .sum();
            assert_eq!(sweep(&spans), by_byte, "{spans:?}");
            assert_eq!(bytes_sent(&spans.clone()), by_byte, "{spans:?}");
        }
    }

    #[test]
    fn one_receiver_pays_every_byte_it_reads() {
        assert_eq!(bytes_sent(&[span(0, 8, 3), span(0, 4, 3)]), 12);
        assert_eq!(bytes_sent(&[]), 0);
    }
}
