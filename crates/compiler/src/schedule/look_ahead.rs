//! LOOK_AHEAD: a bounded search over schedule prefixes, in three phases.
//!
//! 1. **Greedy look-ahead** (Graphcore's scheduler): at each step every ready node is tried
//!    with a search over the prefixes that follow it, `maximum_scheduler_lookahead_depth`
//!    steps deep and at most `maximum_scheduler_search_space_size` nodes (split evenly
//!    between children, branch and bound cutting what cannot win); the node whose best
//!    continuation peaks lowest is scheduled (ties: fewer bytes live after it, then program
//!    order).
//! 2. **Beam search**, seeded with phase 1's schedule as the incumbent: the beam holds at
//!    most `maximum_scheduler_search_space_size` prefixes, one per set of scheduled nodes.
//!    Each level extends every prefix by every ready node, keeps the most promising four
//!    per beam slot (lowest peak so far, then fewest bytes live), and judges each by where
//!    it leads — looking ahead to the end: it is completed three ways (post orders visiting
//!    the operand that needs the most memory first, Sethi–Ullman, and the operand with the
//!    largest cone first; and a list scheduler freeing the most bytes first) and scores its
//!    lowest completion. Every completion is a whole schedule; the lowest seen becomes the
//!    incumbent, and the beam is run again (up to four times) while that improves.
//! 3. **Branch and bound** ([`super::branch_and_bound`]), seeded with that incumbent, for at
//!    most [`EXACT_WORK`] steps: depth first, cutting prefixes that reach the incumbent's
//!    peak or a set of nodes already reached lower. It completes on most small
//!    computations, making the answer the minimum there: on random computations of up
//!    to 24 nodes the beam alone was above 1.05 x the optimum where the optimum builds a
//!    small node's whole cone early to free large buffers.
//!
//! Phase 1 showed why phase 2 exists: a few steps of look-ahead cannot see that building a
//! small node's whole cone early frees large buffers; on the corpus it lost to XLA's DFS
//! scheduler on a quarter of the modules. Every phase is bounded: phase 1 expands at most
//! the search size per candidate per step; each beam run narrows its width on large
//! computations so that its work stays under [`BEAM_WORK`] steps, stopping with the best
//! schedule found when that is spent, and a run that does not improve ends the search;
//! phase 3 stops after [`EXACT_WORK`] steps.

use super::branch_and_bound;
use super::graph::Graph;
use super::liveness::peak_liveness_bytes;
use super::post_order::{Weights, post_order_by};
use super::state::State;
use super::xla::list_order_and_peak;
use rayon::prelude::*;
use std::collections::HashMap;

/// The most steps (scheduling one node in a search state) phase 2 may take on one
/// computation: the beam narrows to stay within it and stops, keeping the best schedule
/// found, when it is spent.
pub const BEAM_WORK: u64 = 1 << 20;

/// The most steps phase 3 (branch and bound) may take on one computation.
pub const EXACT_WORK: u64 = 1 << 18;

/// The most beam runs (each starts from the previous one's best schedule).
const BEAM_RUNS: usize = 4;

/// Prefixes judged (completed to the end) per prefix kept in the beam.
const JUDGED_PER_KEPT: usize = 4;

/// The LOOK_AHEAD order of `g`.
pub fn look_ahead(g: &Graph, depth: usize, search_size: usize) -> Vec<usize> {
    let greedy = greedy_look_ahead(g, depth, search_size);
    let peak = peak_liveness_bytes(g, &greedy);
    let mut best = (peak, greedy);
    for _ in 0..BEAM_RUNS {
        let before = best.0;
        best = beam_search(g, search_size, best);
        if best.0 >= before {
            break;
        }
    }
    branch_and_bound::improve(g, best, EXACT_WORK).1
}

/// Phase 1: the greedy choice with a bounded look-ahead at each step.
fn greedy_look_ahead(g: &Graph, depth: usize, search_size: usize) -> Vec<usize> {
    let mut st = State::new(g);
    let mut out = Vec::with_capacity(g.len());
    while st.done < g.len() {
        let ready = st.ready();
        let budget = (search_size / ready.len().max(1)).max(1);
        // Score, then bytes live after the step (free memory early), then program order.
        let mut best: Option<(u64, u64, usize)> = None;
        for &v in &ready {
            let t = st.push(v);
            let after = st.live;
            let bound = best.map_or(u64::MAX, |b| b.0.saturating_add(1));
            let score = t.max(search(&mut st, depth.saturating_sub(1), budget, bound));
            st.pop(v);
            if best.is_none_or(|b| (score, after) < (b.0, b.1)) {
                best = Some((score, after, v));
            }
        }
        let (_, _, v) = best.expect("a DAG always has a ready node");
        st.push(v);
        out.push(v);
    }
    out
}

/// The lowest possible maximum live bytes over continuations up to `depth` steps, using at
/// most `budget` nodes; `bound`: stop once this cannot be beaten.
fn search(st: &mut State, depth: usize, budget: usize, bound: u64) -> u64 {
    if depth == 0 || budget <= 1 || st.done == st.graph().len() {
        return st.live;
    }
    let ready = st.ready();
    let share = (budget - 1) / ready.len().max(1);
    let mut best = u64::MAX;
    // Where the search below a child would stop at once, the bytes live after the child
    // are its score: no need to schedule it.
    let leaves = depth == 1 || share <= 1 || st.done + 1 == st.graph().len();
    for v in ready {
        let score = if leaves {
            let (t, after) = st.try_push(v);
            if t >= best.min(bound) {
                t
            } else {
                t.max(after)
            }
        } else {
            let t = st.push(v);
            let score = if t >= best.min(bound) {
                t
            } else {
                t.max(search(st, depth - 1, share, best.min(bound)))
            };
            st.pop(v);
            score
        };
        best = best.min(score);
        if share == 0 {
            break;
        }
    }
    best
}

/// A prefix in the beam: its last node and the prefix before it (an index into the
/// arena of prefixes), its peak, the bytes live after it and its set's hash.
#[derive(Clone, Copy)]
struct Prefix {
    parent: usize,
    node: usize,
    peak: u64,
    live: u64,
    hash: u64,
}

/// The arena's root: the empty prefix.
const EMPTY: usize = usize::MAX;

/// Phase 2: the beam search; returns the lowest `(peak, order)` found, `incumbent` if
/// nothing beats it.
fn beam_search(g: &Graph, search_size: usize, incumbent: (u64, Vec<usize>)) -> (u64, Vec<usize>) {
    let n = g.len();
    let weights = Weights::of(g);
    let keys: Vec<u64> = (0..n as u64).map(splitmix).collect();
    let mut arena: Vec<Prefix> = Vec::new();
    let mut beam: Vec<usize> = vec![EMPTY];
    let mut best = incumbent;
    let mut st = State::new(g);
    // Pushes one judged prefix costs (replay, three completions), measured as we go.
    let mut per_judged = 3 * n as u64 + 1;
    for level in 0..n {
        let left = BEAM_WORK.saturating_sub(st.pushes);
        if left == 0 {
            break;
        }
        let affordable = left / (n - level) as u64 / per_judged / JUDGED_PER_KEPT as u64;
        let width = (affordable as usize).clamp(1, search_size.max(1));
        let before = st.pushes;
        // Every extension, the best per scheduled set.
        let mut extensions: HashMap<u64, Prefix> = HashMap::new();
        for &p in &beam {
            let prefix = nodes_of(&arena, p);
            replay(&mut st, &prefix);
            let (peak, hash) = if p == EMPTY {
                (0, 0)
            } else {
                (arena[p].peak, arena[p].hash)
            };
            for v in st.ready() {
                let (t, live) = st.try_push(v);
                let e = Prefix {
                    parent: p,
                    node: v,
                    peak: peak.max(t),
                    live,
                    hash: hash ^ keys[v],
                };
                let slot = extensions.entry(e.hash).or_insert(e);
                if (e.peak, e.live) < (slot.peak, slot.live) {
                    *slot = e;
                }
            }
            unreplay(&mut st, &prefix);
        }
        let mut next: Vec<Prefix> = extensions
            .into_values()
            .filter(|e| e.peak < best.0)
            .collect();
        if next.is_empty() {
            break;
        }
        next.sort_unstable_by_key(|e| (e.peak, e.live, e.hash));
        next.truncate(width * JUDGED_PER_KEPT);
        // Judge each by where it leads: in parallel, each judgement replaying its prefix on
        // a state of its own; the completions are then weighed in order, as one thread would.
        let first = arena.len();
        arena.extend_from_slice(&next);
        let prefixes: Vec<Vec<usize>> = (first..arena.len())
            .map(|id| nodes_of(&arena, id))
            .collect();
        let judgements: Vec<Judgement> = prefixes
            .par_iter()
            .zip(next.par_iter())
            .map_init(
                || State::new(g),
                |own, (prefix, e)| judge(g, &weights, own, prefix, e.peak),
            )
            .collect();
        let mut judged: Vec<(u64, u64, u64, usize)> = Vec::with_capacity(next.len());
        for (k, (prefix, judgement)) in prefixes.iter().zip(judgements).enumerate() {
            st.pushes += judgement.pushes;
            let mut lowest = u64::MAX;
            for (peak, rest) in judgement.completions {
                if peak < best.0 {
                    best = (peak, [&prefix[..], &rest[..]].concat());
                }
                lowest = lowest.min(peak);
            }
            judged.push((lowest, next[k].peak, next[k].live, first + k));
        }
        per_judged = ((st.pushes - before) / judged.len() as u64).max(1);
        judged.sort_unstable();
        beam = judged
            .into_iter()
            .take(width)
            .map(|(_, _, _, id)| id)
            .collect();
    }
    best
}

/// A judged prefix: its three completions (peak of prefix and completion, the completion's
/// order) and the pushes judging it took.
struct Judgement {
    completions: [(u64, Vec<usize>); 3],
    pushes: u64,
}

/// Completes `prefix` (whose peak is `peak`) three ways on `st` (left as it was found):
/// post orders visiting the operand that needs the most memory first and the operand with
/// the largest cone first, and a list scheduler freeing the most bytes first.
fn judge(g: &Graph, weights: &Weights, st: &mut State, prefix: &[usize], peak: u64) -> Judgement {
    let before = st.pushes;
    replay(st, prefix);
    let heaviest = post_order_by(g, st.scheduled.clone(), |v| weights.heaviest_first(v));
    let largest_cone = post_order_by(g, st.scheduled.clone(), |v| weights.largest_cone_first(v));
    let complete = |st: &mut State, rest: Vec<usize>| {
        let mut highest = peak;
        for &v in &rest {
            highest = highest.max(st.push(v));
        }
        unreplay(st, &rest);
        (highest, rest)
    };
    let heaviest = complete(st, heaviest);
    let largest_cone = complete(st, largest_cone);
    // The list order scheduled its nodes as it chose them: its peak is known, and the
    // completion counts the pushes it would take again, as the budget always has.
    let (listed, listed_peak) = list_order_and_peak(st);
    st.pushes += listed.len() as u64;
    let completions = [heaviest, largest_cone, (peak.max(listed_peak), listed)];
    unreplay(st, prefix);
    Judgement {
        completions,
        pushes: st.pushes - before,
    }
}

/// The nodes of prefix `p`, first to last.
fn nodes_of(arena: &[Prefix], mut p: usize) -> Vec<usize> {
    let mut out = Vec::new();
    while p != EMPTY {
        out.push(arena[p].node);
        p = arena[p].parent;
    }
    out.reverse();
    out
}

fn replay(st: &mut State, prefix: &[usize]) {
    for &v in prefix {
        st.push(v);
    }
}

fn unreplay(st: &mut State, prefix: &[usize]) {
    for &v in prefix.iter().rev() {
        st.pop(v);
    }
}

/// A well-mixed 64-bit key per node (SplitMix64), so a set's hash is the XOR of its nodes'.
fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
