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
//!    incumbent, and the beam is run again (up to four times) while that improves; a set
//!    judged in one run is not judged again (where a set leads does not depend on the
//!    order that reached it).
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
use super::state::{SetHasher, State, node_key};
use super::xla::list_order_and_peak;
use rayon::prelude::*;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

/// Maps keyed by a set's 64-bit hash (already well mixed).
type BySet<V> = HashMap<u64, V, BuildHasherDefault<SetHasher>>;

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
    let mut judged = Judged::default();
    let orders = PostOrders::of(g);
    for _ in 0..BEAM_RUNS {
        let before = best.0;
        best = beam_search(g, search_size, best, &orders, &mut judged);
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
            let after = st.live();
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
        return st.live();
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
/// nothing beats it. `judged` keeps what earlier runs found of each scheduled set.
fn beam_search(
    g: &Graph,
    search_size: usize,
    incumbent: (u64, Vec<usize>),
    orders: &PostOrders,
    judged: &mut Judged,
) -> (u64, Vec<usize>) {
    let n = g.len();
    let keys: Vec<u64> = (0..n as u64).map(node_key).collect();
    let mut arena: Vec<Prefix> = Vec::new();
    // The beam: each prefix with the state it leaves (no prefix is replayed from scratch;
    // the work budget still counts the replays, as it always has, so that the beam's
    // widths and the schedule do not depend on how the host gets there).
    let mut beam: Vec<(usize, State)> = vec![(EMPTY, State::new(g))];
    let mut best = incumbent;
    // Steps taken: a replayed prefix's nodes, a tried node, a judgement's pushes.
    let mut work: u64 = 0;
    // Pushes one judged prefix costs (replay, three completions), measured as we go.
    let mut per_judged = 3 * n as u64 + 1;
    for level in 0..n {
        let left = BEAM_WORK.saturating_sub(work);
        if left == 0 {
            break;
        }
        let affordable = left / (n - level) as u64 / per_judged / JUDGED_PER_KEPT as u64;
        let width = (affordable as usize).clamp(1, search_size.max(1));
        let before = work;
        // Every extension, the best per scheduled set (with its parent's place in the beam).
        let mut extensions: BySet<(Prefix, usize)> = BySet::default();
        for (slot, (p, st)) in beam.iter_mut().enumerate() {
            work += level as u64;
            let (peak, hash) = if *p == EMPTY {
                (0, 0)
            } else {
                (arena[*p].peak, arena[*p].hash)
            };
            for v in st.ready() {
                let (t, live) = st.try_push(v);
                let e = Prefix {
                    parent: *p,
                    node: v,
                    peak: peak.max(t),
                    live,
                    hash: hash ^ keys[v],
                };
                let kept = extensions.entry(e.hash).or_insert((e, slot));
                if (e.peak, e.live) < (kept.0.peak, kept.0.live) {
                    *kept = (e, slot);
                }
            }
            work += st.pushes;
            st.pushes = 0;
        }
        let mut next: Vec<(Prefix, usize)> = extensions
            .into_values()
            .filter(|(e, _)| e.peak < best.0)
            .collect();
        if next.is_empty() {
            break;
        }
        next.sort_unstable_by_key(|(e, _)| (e.peak, e.live, e.hash));
        next.truncate(width * JUDGED_PER_KEPT);
        // Each prefix's state: its parent's, one node on.
        let states: Vec<State> = next
            .iter()
            .map(|&(e, slot)| {
                let mut st = beam[slot].1.clone();
                st.push(e.node);
                st.pushes = 0;
                st
            })
            .collect();
        // Judge each by where it leads (a set judged before is not judged again): in
        // parallel, each judgement on a state of its own; the completions are then weighed
        // in order, as one thread would.
        let fresh: Vec<usize> = (0..next.len())
            .filter(|&k| judged.get(next[k].0.hash, &states[k]).is_none())
            .collect();
        let judgements: Vec<Judgement> = fresh
            .par_iter()
            .map(|&k| judge(orders, &states[k]))
            .collect();
        for (&k, judgement) in fresh.iter().zip(judgements) {
            judged.insert(next[k].0.hash, &states[k], judgement);
        }
        let first = arena.len();
        arena.extend(next.iter().map(|(e, _)| *e));
        let mut ranked: Vec<(u64, u64, u64, usize)> = Vec::with_capacity(next.len());
        for (k, ((e, _), st)) in next.iter().zip(&states).enumerate() {
            let judgement = judged
                .get(e.hash, st)
                .expect("every prefix was judged, now or before");
            work += (level + 1) as u64 + judgement.pushes;
            let mut lowest = u64::MAX;
            for (way, &completion_peak) in judgement.peaks.iter().enumerate() {
                let peak = e.peak.max(completion_peak);
                if peak < best.0 {
                    let prefix = nodes_of(&arena, first + k);
                    let rest = completion(orders, st, way);
                    best = (peak, [&prefix[..], &rest[..]].concat());
                }
                lowest = lowest.min(peak);
            }
            ranked.push((lowest, e.peak, e.live, k));
        }
        per_judged = ((work - before) / ranked.len() as u64).max(1);
        ranked.sort_unstable();
        let mut states: Vec<Option<State>> = states.into_iter().map(Some).collect();
        beam = ranked
            .into_iter()
            .take(width)
            .map(|(_, _, _, k)| {
                let st = states[k].take().expect("each prefix is kept once");
                (first + k, st)
            })
            .collect();
    }
    best
}

/// Where a scheduled set leads: the most bytes live during the steps of each of its three
/// completions ([`completion`]), and the pushes judging it took after reaching the set. It
/// depends on the set alone, not on the order that reached it, and so do the completions:
/// one is made again only when it beats the incumbent (kept, the orders were most of the
/// search's allocations).
struct Judgement {
    peaks: [u64; 3],
    pushes: u64,
}

/// Judgements by scheduled set (its hash, checked against the set itself), across the
/// beam's runs: a run after the first meets most of the last one's sets again.
#[derive(Default)]
struct Judged(BySet<(Vec<bool>, Judgement)>);

impl Judged {
    /// The judgement of the set `st` has scheduled (whose hash is `hash`), if made before.
    fn get(&self, hash: u64, st: &State) -> Option<&Judgement> {
        self.0
            .get(&hash)
            .filter(|(set, _)| *set == st.scheduled)
            .map(|(_, j)| j)
    }

    /// Keeps `judgement` of the set `st` has scheduled.
    fn insert(&mut self, hash: u64, st: &State, judgement: Judgement) {
        self.0.insert(hash, (st.scheduled.clone(), judgement));
    }
}

/// The two post orders a judgement completes a prefix with, walked once from the empty
/// schedule. A walk from a scheduled set emits its unscheduled nodes in the same order as
/// this walk does: a scheduled node's cone is scheduled, so where the walk from nothing
/// descends into it, it emits only scheduled nodes; each judgement filters these.
struct PostOrders {
    /// Visiting the operand that needs the most memory first (Sethi–Ullman).
    heaviest: Vec<usize>,
    /// Visiting the operand with the largest cone first.
    largest_cone: Vec<usize>,
}

impl PostOrders {
    fn of(g: &Graph) -> PostOrders {
        let weights = Weights::of(g);
        let nothing = vec![false; g.len()];
        PostOrders {
            heaviest: post_order_by(g, nothing.clone(), |v| weights.heaviest_first(v)),
            largest_cone: post_order_by(g, nothing, |v| weights.largest_cone_first(v)),
        }
    }
}

/// Judges the schedule `st` holds by completing it three ways ([`completion`]), each
/// counted on a copy of its tally.
fn judge(orders: &PostOrders, st: &State) -> Judgement {
    let completed = |order: &[usize]| -> (u64, usize) {
        let mut tally = st.tally().clone();
        let (mut peak, mut pushes) = (0, 0);
        for v in unscheduled_in(order, st) {
            peak = peak.max(tally.push(v).0);
            pushes += 1;
        }
        (peak, pushes)
    };
    let (heaviest, heaviest_pushes) = completed(&orders.heaviest);
    let (largest_cone, largest_cone_pushes) = completed(&orders.largest_cone);
    // The list order's peak is known as it chooses; the budget counts its pushes twice,
    // as it always has (once choosing, once completing).
    let (listed, listed_peak) = list_order_and_peak(st);
    let pushes = (heaviest_pushes + largest_cone_pushes + 2 * listed.len()) as u64;
    Judgement {
        peaks: [heaviest, largest_cone, listed_peak],
        pushes,
    }
}

/// Completion `way` of the schedule `st` holds: the unscheduled nodes in the order of the
/// two [`PostOrders`] (0, 1), or of a list scheduler freeing the most bytes first (2).
fn completion(orders: &PostOrders, st: &State, way: usize) -> Vec<usize> {
    let post_order = match way {
        0 => &orders.heaviest,
        1 => &orders.largest_cone,
        _ => return list_order_and_peak(st).0,
    };
    unscheduled_in(post_order, st).collect()
}

/// The nodes of `order` that `st` has not scheduled, in that order.
fn unscheduled_in<'a>(order: &'a [usize], st: &'a State) -> impl Iterator<Item = usize> + 'a {
    order.iter().copied().filter(|&v| !st.scheduled[v])
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
