//! A system of IPUs joined by IPU-Links as C2 cards on a ladder: IPUs 2k and 2k+1 share a
//! card, and IPU k links to k+2 up the ladder. Routes, hop counts and transfer costs.

use crate::device::target::Target;
use crate::error::RuntimeError;
use petgraph::graph::{NodeIndex, UnGraph};
use serde::{Deserialize, Serialize};

/// The kind of an IPU-Link connection between two neighbouring IPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LinkKind {
    /// Between the two IPUs of a card (2k ↔ 2k+1): 4 IPU-Links.
    Card,
    /// Up or down the ladder (k ↔ k+2): 2 IPU-Links.
    Ladder,
}

impl LinkKind {
    /// Parallel IPU-Links of this kind (PopLibs `addGlobalExchangeConstraints`:
    /// 4 intra-card, 2 up, 2 down, 2 cross-rung — Mk2's 10 links).
    pub fn links(self) -> u64 {
        match self {
            LinkKind::Card => 4,
            LinkKind::Ladder => 2,
        }
    }
}

/// One hop of a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hop {
    /// The IPU the data leaves.
    pub from: usize,
    /// The IPU the data reaches.
    pub to: usize,
    /// The link used.
    pub kind: LinkKind,
}

/// N modelled IPUs of one target, linked as a ladder of C2 cards, and the logical IPUs a
/// program uses placed on them (by a selection order; identity unless placed).
#[derive(Debug, Clone)]
pub struct System {
    /// The target every IPU models.
    pub target: Target,
    graph: UnGraph<usize, LinkKind>,
    /// By logical IPU, the physical IPU it runs on.
    logical: Vec<usize>,
}

impl System {
    /// A system of `num_ipus` IPUs: 1, or an even number (whole cards).
    pub fn new(target: Target, num_ipus: usize) -> Result<System, RuntimeError> {
        if num_ipus == 0 || (num_ipus > 1 && !num_ipus.is_multiple_of(2)) {
            return Err(RuntimeError::InvalidSystem(format!(
                "{num_ipus} IPUs: a system has 1 IPU or whole C2 cards of 2"
            )));
        }
        let mut graph = UnGraph::with_capacity(num_ipus, num_ipus * 2);
        for ipu in 0..num_ipus {
            graph.add_node(ipu);
        }
        for ipu in 0..num_ipus {
            if ipu % 2 == 0 && ipu + 1 < num_ipus {
                graph.add_edge(NodeIndex::new(ipu), NodeIndex::new(ipu + 1), LinkKind::Card);
            }
            if ipu + 2 < num_ipus {
                graph.add_edge(
                    NodeIndex::new(ipu),
                    NodeIndex::new(ipu + 2),
                    LinkKind::Ladder,
                );
            }
        }
        Ok(System {
            target,
            graph,
            logical: (0..num_ipus).collect(),
        })
    }

    /// A system of `physical` IPUs whose logical IPU `i` is physical IPU `logical[i]` (a
    /// selection order's choice): routes and costs between logical IPUs follow the physical
    /// ladder.
    pub fn placed(
        target: Target,
        physical: usize,
        logical: Vec<usize>,
    ) -> Result<System, RuntimeError> {
        let mut system = System::new(target, physical)?;
        if let Some(&bad) = logical.iter().find(|&&p| p >= physical) {
            return Err(RuntimeError::InvalidSystem(format!(
                "logical IPUs placed on IPU {bad} of a system of {physical}"
            )));
        }
        system.logical = logical;
        Ok(system)
    }

    /// Number of (logical) IPUs.
    pub fn num_ipus(&self) -> usize {
        self.logical.len()
    }

    /// The physical IPU of logical IPU `ipu`.
    pub fn physical(&self, ipu: usize) -> usize {
        self.logical.get(ipu).copied().unwrap_or(ipu)
    }

    /// The link joining two IPUs directly, if any.
    pub fn link(&self, a: usize, b: usize) -> Option<LinkKind> {
        let e = self.graph.find_edge(NodeIndex::new(a), NodeIndex::new(b))?;
        Some(self.graph[e])
    }

    /// The hops from logical IPU `from` to `to` on a shortest route between their physical
    /// IPUs: crossing the card first when they sit on different sides, then stepping up or
    /// down the ladder (as PopLibs routes). Hops name physical IPUs.
    pub fn route(&self, from: usize, to: usize) -> Result<Vec<Hop>, RuntimeError> {
        let n = self.num_ipus();
        if from >= n || to >= n {
            return Err(RuntimeError::InvalidSystem(format!(
                "no route from IPU {from} to IPU {to} in a system of {n} IPUs"
            )));
        }
        let (from, to) = (self.logical[from], self.logical[to]);
        let mut hops = Vec::new();
        let mut at = from;
        if at % 2 != to % 2 && at / 2 != to / 2 {
            let across = at ^ 1;
            hops.push(self.hop(at, across));
            at = across;
        }
        while at != to {
            let next = if at / 2 == to / 2 {
                to
            } else if to > at {
                at + 2
            } else {
                at - 2
            };
            hops.push(self.hop(at, next));
            at = next;
        }
        Ok(hops)
    }

    fn hop(&self, from: usize, to: usize) -> Hop {
        let kind = self
            .link(from, to)
            .expect("routes follow the ladder's edges");
        Hop { from, to, kind }
    }

    /// Number of IPU-Link hops between two IPUs.
    pub fn hops(&self, from: usize, to: usize) -> Result<usize, RuntimeError> {
        Ok(self.route(from, to)?.len())
    }

    /// Cycles to move `bytes` from one IPU to another: store-and-forward over each hop, each
    /// hop costing its latency plus the bytes over that link's bandwidth.
    pub fn transfer_cycles(&self, bytes: u64, from: usize, to: usize) -> Result<u64, RuntimeError> {
        let t = &self.target;
        let latency = (t.ipu_link_hop_latency_s * t.clock_hz).ceil() as u64;
        Ok(self
            .route(from, to)?
            .iter()
            .map(|hop| {
                let bandwidth = t.ipu_link_bytes_per_s() * hop.kind.links() as f64;
                latency + (bytes as f64 / bandwidth * t.clock_hz).ceil() as u64
            })
            .sum())
    }

    /// Cycles of a sync across all the (logical) IPUs: the farthest two apart on the
    /// ladder, in hops, there and back. Where the IPUs sit does not change it for a
    /// system that uses all of its IPUs.
    pub fn global_sync_cycles(&self) -> u64 {
        let n = self.num_ipus();
        if n == 1 {
            return 0;
        }
        let mut diameter = 1;
        for a in 0..n {
            for b in a + 1..n {
                diameter = diameter.max(self.hops(a, b).unwrap_or(1));
            }
        }
        self.target.global_sync_cycles(diameter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ladder_routes() {
        let s = System::new(Target::ipu2(), 16).unwrap();
        assert_eq!(s.link(0, 1), Some(LinkKind::Card));
        assert_eq!(s.link(1, 3), Some(LinkKind::Ladder));
        assert_eq!(s.link(1, 2), None);
        assert_eq!(s.hops(0, 1).unwrap(), 1);
        assert_eq!(s.hops(1, 2).unwrap(), 2);
        assert_eq!(s.hops(0, 15).unwrap(), 8);
        let route = s.route(1, 2).unwrap();
        assert_eq!((route[0].from, route[0].to, route[1].to), (1, 0, 2));
        assert!(System::new(Target::ipu2(), 3).is_err());
        assert!(s.route(0, 16).is_err());
    }
}
