//! A partial schedule, updated one node at a time (and undone), with the liveness rules of
//! [`super::liveness`]: searches (LOOK_AHEAD, the optimal oracle, XLA's list scheduler)
//! use it to cost a step without recomputing the whole schedule.

use super::graph::Graph;
use std::hash::Hasher;

/// What decides a schedule's live bytes from here on: the unscheduled readers of each
/// buffer and the bytes live. Learning the peak of a completion needs no more than this
/// (no ready list, no undo stack), so searches copy a tally rather than a whole [`State`].
#[derive(Clone)]
pub struct Tally<'g> {
    g: &'g Graph,
    /// Unscheduled readers per buffer.
    remaining: Vec<usize>,
    /// Bytes live after the last step.
    live: u64,
}

impl<'g> Tally<'g> {
    /// Nothing scheduled.
    fn new(g: &'g Graph) -> Tally<'g> {
        Tally {
            g,
            remaining: g.buffers.iter().map(|b| b.users.len()).collect(),
            live: 0,
        }
    }

    /// Readers of buffer `b` not scheduled yet.
    pub fn readers_left(&self, b: usize) -> usize {
        self.remaining[b]
    }

    /// Bytes that die when `v` is scheduled now.
    pub fn freed_by(&self, v: usize) -> u64 {
        let g = self.g;
        let reads: u64 = g.uses[v]
            .iter()
            .filter(|&&b| self.remaining[b] == 1)
            .map(|&b| g.dies[b])
            .sum();
        reads + g.unread[v]
    }

    /// Counts `v` as scheduled; returns the bytes live during the step and the bytes it
    /// freed.
    pub fn push(&mut self, v: usize) -> (u64, u64) {
        let g = self.g;
        let transient = self.live + g.defined_bytes(v) + g.callee[v];
        // What `freed_by` counts, in the same pass that counts the reads down.
        let mut freed = g.unread[v];
        for &b in &g.uses[v] {
            if self.remaining[b] == 1 {
                freed += g.dies[b];
            }
            self.remaining[b] -= 1;
        }
        self.live = self.live + g.defined_bytes(v) - freed;
        (transient, freed)
    }

    /// What `push(v)` would return and the bytes live after it, without counting `v`.
    fn try_push(&self, v: usize) -> (u64, u64) {
        let g = self.g;
        let transient = self.live + g.defined_bytes(v) + g.callee[v];
        (transient, self.live + g.defined_bytes(v) - self.freed_by(v))
    }

    /// Undoes the last `push(v)`, which freed `freed` bytes.
    fn pop(&mut self, v: usize, freed: u64) {
        for &b in &self.g.uses[v] {
            self.remaining[b] += 1;
        }
        self.live = self.live + freed - self.g.defined_bytes(v);
    }
}

/// Scheduled nodes, live bytes, and what is ready.
pub struct State<'g> {
    g: &'g Graph,
    /// Unscheduled predecessors per node.
    pub waiting: Vec<usize>,
    /// Readers left per buffer and bytes live.
    tally: Tally<'g>,
    /// Nodes scheduled so far.
    pub done: usize,
    /// Which nodes are scheduled.
    pub scheduled: Vec<bool>,
    /// Calls to `push` so far: the work a search has done.
    pub pushes: u64,
    /// Unscheduled nodes with no unscheduled predecessor, in no order.
    ready_list: Vec<usize>,
    /// Each node's index in `ready_list` (`usize::MAX`: not there).
    ready_at: Vec<usize>,
    /// The nodes pushed and not popped, each with the bytes its push freed (what its pop
    /// gives back, without counting them again).
    pushed: Vec<(usize, u64)>,
}

impl Clone for State<'_> {
    /// The same state, its stacks with room for every node (a clone goes on to be pushed
    /// further: a search judging where a prefix leads).
    fn clone(&self) -> Self {
        let n = self.g.len();
        let mut ready_list = Vec::with_capacity(n);
        ready_list.extend_from_slice(&self.ready_list);
        let mut pushed = Vec::with_capacity(n);
        pushed.extend_from_slice(&self.pushed);
        State {
            g: self.g,
            waiting: self.waiting.clone(),
            tally: self.tally.clone(),
            done: self.done,
            scheduled: self.scheduled.clone(),
            pushes: self.pushes,
            ready_list,
            ready_at: self.ready_at.clone(),
            pushed,
        }
    }
}

impl<'g> State<'g> {
    /// Nothing scheduled.
    pub fn new(g: &'g Graph) -> State<'g> {
        let mut ready_list = Vec::with_capacity(g.len());
        ready_list.extend((0..g.len()).filter(|&v| g.preds[v].is_empty()));
        let mut ready_at = vec![usize::MAX; g.len()];
        for (k, &v) in ready_list.iter().enumerate() {
            ready_at[v] = k;
        }
        State {
            g,
            ready_list,
            ready_at,
            waiting: g.preds.iter().map(Vec::len).collect(),
            tally: Tally::new(g),
            done: 0,
            scheduled: vec![false; g.len()],
            pushes: 0,
            pushed: Vec::with_capacity(g.len()),
        }
    }

    /// Nodes whose predecessors are all scheduled, in index order.
    pub fn ready(&self) -> Vec<usize> {
        let mut r = self.ready_list.clone();
        r.sort_unstable();
        r
    }

    /// Nodes whose predecessors are all scheduled, in no particular order (for callers that
    /// order them themselves).
    pub fn ready_unordered(&self) -> &[usize] {
        &self.ready_list
    }

    fn make_ready(&mut self, v: usize) {
        self.ready_at[v] = self.ready_list.len();
        self.ready_list.push(v);
    }

    fn unmake_ready(&mut self, v: usize) {
        let k = self.ready_at[v];
        self.ready_list.swap_remove(k);
        if let Some(&moved) = self.ready_list.get(k) {
            self.ready_at[moved] = k;
        }
        self.ready_at[v] = usize::MAX;
    }

    /// Bytes live after the last step.
    pub fn live(&self) -> u64 {
        self.tally.live
    }

    /// Readers left per buffer and bytes live: a copy of it completes a schedule from
    /// here to learn its peak.
    pub fn tally(&self) -> &Tally<'g> {
        &self.tally
    }

    /// Schedules `v`; returns the bytes live during the step.
    pub fn push(&mut self, v: usize) -> u64 {
        let (transient, freed) = self.tally.push(v);
        self.pushed.push((v, freed));
        self.unmake_ready(v);
        for &s in &self.g.succs[v] {
            self.waiting[s] -= 1;
            if self.waiting[s] == 0 {
                self.make_ready(s);
            }
        }
        self.scheduled[v] = true;
        self.done += 1;
        self.pushes += 1;
        transient
    }

    /// What `push(v)` would return and the bytes live after it, without scheduling `v`
    /// (cheaper than a push and its pop). It counts in `pushes` as the push it stands for,
    /// so a search's work budget is spent the same either way.
    pub fn try_push(&mut self, v: usize) -> (u64, u64) {
        self.pushes += 1;
        self.tally.try_push(v)
    }

    /// Undoes the last `push(v)`.
    pub fn pop(&mut self, v: usize) {
        let (last, freed) = self.pushed.pop().expect("pop undoes a push");
        debug_assert_eq!(last, v, "pop undoes the last push");
        self.scheduled[v] = false;
        self.done -= 1;
        // The successors this push made ready are no longer ready.
        for &s in self.g.succs[v].iter().rev() {
            if self.waiting[s] == 0 {
                self.unmake_ready(s);
            }
            self.waiting[s] += 1;
        }
        self.make_ready(v);
        self.tally.pop(v, freed);
    }

    /// The graph.
    pub fn graph(&self) -> &'g Graph {
        self.g
    }
}

/// Hashes sets of scheduled nodes (bit words, or a 64-bit hash of the set already) by
/// multiplying and rotating: searches look a set up at every node they visit, and
/// SipHash's resistance to chosen keys buys nothing here.
#[derive(Default)]
pub struct SetHasher(u64);

impl Hasher for SetHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    /// The state folded so that every bit reaches the low bits too: a multiply carries a
    /// word's bits only upwards, and the table picks buckets by the low bits, so sets that
    /// differ in high bits of a word (nodes 32-63 of each 64) would share buckets.
    fn finish(&self) -> u64 {
        mix(self.0)
    }
}

/// A well-mixed 64-bit key for node `v` (SplitMix64), so a set's hash is the XOR of its
/// nodes' keys, kept as nodes are scheduled and unscheduled.
pub fn node_key(v: u64) -> u64 {
    mix(v.wrapping_add(0x9e37_79b9_7f4a_7c15))
}

/// SplitMix64's finaliser: every input bit reaches every output bit.
pub fn mix(z: u64) -> u64 {
    let z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn try_push_reports_what_a_push_would_and_counts_as_one() {
        // 0 and 1 feed 2 (the root): scheduling 2 frees both operands.
        let g = Graph::from_parts(vec![vec![], vec![], vec![0, 1]], &[100, 10, 1], 2);
        let mut st = State::new(&g);
        for v in [0, 1, 2] {
            let pushes = st.pushes;
            let tried = st.try_push(v);
            assert_eq!(st.pushes, pushes + 1);
            let transient = st.push(v);
            assert_eq!(tried, (transient, st.live()), "node {v}");
        }
        assert_eq!(st.live(), 1, "only the root is live at the end");
        for v in [2, 1, 0] {
            st.pop(v);
        }
        assert_eq!((st.live(), st.done), (0, 0));
    }
}
