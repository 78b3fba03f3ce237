//! A partial schedule, updated one node at a time (and undone), with the liveness rules of
//! [`super::liveness`]: searches (LOOK_AHEAD, the optimal oracle, XLA's list scheduler)
//! use it to cost a step without recomputing the whole schedule.

use super::graph::Graph;

/// Scheduled nodes, live bytes, and what is ready.
pub struct State<'g> {
    g: &'g Graph,
    /// Unscheduled predecessors per node.
    pub waiting: Vec<usize>,
    /// Unscheduled readers per buffer.
    remaining: Vec<usize>,
    /// Bytes live after the last step.
    pub live: u64,
    /// Nodes scheduled so far.
    pub done: usize,
    /// Which nodes are scheduled.
    pub scheduled: Vec<bool>,
}

impl<'g> State<'g> {
    /// Nothing scheduled.
    pub fn new(g: &'g Graph) -> State<'g> {
        State {
            g,
            waiting: g.preds.iter().map(Vec::len).collect(),
            remaining: g.buffers.iter().map(|b| b.users.len()).collect(),
            live: 0,
            done: 0,
            scheduled: vec![false; g.len()],
        }
    }

    /// Nodes whose predecessors are all scheduled, in index order.
    pub fn ready(&self) -> Vec<usize> {
        (0..self.g.len())
            .filter(|&v| !self.scheduled[v] && self.waiting[v] == 0)
            .collect()
    }

    /// Bytes that die when `v` is scheduled now.
    pub fn freed_by(&self, v: usize) -> u64 {
        let g = self.g;
        let reads: u64 = g.uses[v]
            .iter()
            .filter(|&&b| self.remaining[b] == 1 && !g.buffers[b].root_live)
            .map(|&b| g.buffers[b].size)
            .sum();
        let unread: u64 = g.defines[v]
            .iter()
            .filter(|&&b| g.buffers[b].users.is_empty() && !g.buffers[b].root_live)
            .map(|&b| g.buffers[b].size)
            .sum();
        reads + unread
    }

    /// Schedules `v`; returns the bytes live during the step.
    pub fn push(&mut self, v: usize) -> u64 {
        let g = self.g;
        let transient = self.live + g.defined_bytes(v) + g.callee[v];
        let freed = self.freed_by(v);
        self.live = self.live + g.defined_bytes(v) - freed;
        for &b in &g.uses[v] {
            self.remaining[b] -= 1;
        }
        for &s in &g.succs[v] {
            self.waiting[s] -= 1;
        }
        self.scheduled[v] = true;
        self.done += 1;
        transient
    }

    /// Undoes the last `push(v)`.
    pub fn pop(&mut self, v: usize) {
        let g = self.g;
        self.scheduled[v] = false;
        self.done -= 1;
        for &s in &g.succs[v] {
            self.waiting[s] += 1;
        }
        for &b in &g.uses[v] {
            self.remaining[b] += 1;
        }
        let freed = self.freed_by(v);
        self.live = self.live + freed - g.defined_bytes(v);
    }

    /// The graph.
    pub fn graph(&self) -> &'g Graph {
        self.g
    }
}
