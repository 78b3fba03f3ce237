//! Instruction scheduling for peak memory, as the IPU backend does it: computations are
//! scheduled callees first (a callee's peak is the cost of the instructions calling it),
//! each with one of the seed's algorithms (CHOOSE_BEST, CLUSTERING, POST_ORDER,
//! LOOK_AHEAD, SHORTEST_PATH), XLA's reference schedulers for comparison, or `optimal`
//! (an exact search for small computations, the tests' oracle). Every schedule is scored
//! by the same liveness estimator ([`peak_liveness_bytes`]).

mod branch_and_bound;
mod clustering;
mod graph;
mod liveness;
pub mod look_ahead;
mod memo;
mod optimal;
mod post_order;
mod shortest_path;
mod state;
mod xla;

pub use graph::{Graph, aliased_value};
pub use liveness::{live_bytes, peak_liveness_bytes};
pub use memo::remembering;
pub use optimal::OPTIMAL_MAX;

use std::collections::HashMap;
use xla_ir::Module;
use xla_ir::ids::{CompId, InstrId};

/// A scheduling algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// The lowest estimate among POST_ORDER, CLUSTERING, SHORTEST_PATH and (for
    /// computations within its limits) LOOK_AHEAD; ties go to the earlier of that list.
    ChooseBest,
    /// XLA's post order.
    PostOrder,
    /// Chains of single-user nodes, most-freeing first.
    Clustering,
    /// Closest to an output first.
    ShortestPath,
    /// Bounded search over schedule prefixes (greedy look-ahead, then a beam).
    LookAhead,
    /// XLA's list scheduler (comparison only).
    XlaList,
    /// XLA's DFS scheduler (comparison only).
    XlaDfs,
    /// XLA's post-order scheduler (comparison only; the same order as POST_ORDER).
    XlaPostOrder,
    /// Exact minimum peak (computations of at most 24 instructions; larger ones fall back
    /// to CHOOSE_BEST).
    Optimal,
}

impl Algorithm {
    /// Every algorithm, in the order `--compare` lists them.
    pub const ALL: [Algorithm; 9] = [
        Algorithm::ChooseBest,
        Algorithm::PostOrder,
        Algorithm::Clustering,
        Algorithm::ShortestPath,
        Algorithm::LookAhead,
        Algorithm::XlaList,
        Algorithm::XlaDfs,
        Algorithm::XlaPostOrder,
        Algorithm::Optimal,
    ];

    /// The command-line name (`choose-best`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::ChooseBest => "choose-best",
            Algorithm::PostOrder => "post-order",
            Algorithm::Clustering => "clustering",
            Algorithm::ShortestPath => "shortest-path",
            Algorithm::LookAhead => "look-ahead",
            Algorithm::XlaList => "xla-list",
            Algorithm::XlaDfs => "xla-dfs",
            Algorithm::XlaPostOrder => "xla-post-order",
            Algorithm::Optimal => "optimal",
        }
    }

    /// Whether LOOK_AHEAD's [`Limits`] act on this algorithm: LOOK_AHEAD itself, CHOOSE_BEST
    /// (it runs LOOK_AHEAD among its candidates) and OPTIMAL (CHOOSE_BEST on computations
    /// too large for it).
    pub fn uses_limits(self) -> bool {
        matches!(
            self,
            Algorithm::ChooseBest | Algorithm::LookAhead | Algorithm::Optimal
        )
    }

    /// From a command-line name or the seed's `SchedulingAlgorithm` name.
    pub fn from_name(s: &str) -> Option<Algorithm> {
        let canon = s.to_ascii_lowercase().replace('_', "-");
        Algorithm::ALL.into_iter().find(|a| a.name() == canon)
    }
}

/// The search limits of LOOK_AHEAD (IpuConfig's scheduling options).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limits {
    /// `maximum_scheduler_lookahead_depth` (default 5).
    pub depth: usize,
    /// `maximum_scheduler_search_space_size` (default 64).
    pub search_size: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            depth: 5,
            search_size: 64,
        }
    }
}

/// Computations of at most this many instructions get LOOK_AHEAD among CHOOSE_BEST's
/// candidates; on larger ones its work budget ([`look_ahead::BEAM_WORK`]) leaves the beam
/// too narrow to be worth its time.
pub const LOOK_AHEAD_IN_CHOOSE_BEST_MAX: usize = 512;

/// An order of `g`'s nodes by `algorithm`.
pub fn schedule_graph(g: &Graph, algorithm: Algorithm, limits: Limits) -> Vec<usize> {
    match algorithm {
        Algorithm::PostOrder | Algorithm::XlaPostOrder => post_order::post_order(g),
        Algorithm::Clustering => clustering::clustering(g),
        Algorithm::ShortestPath => shortest_path::shortest_path(g),
        Algorithm::LookAhead => look_ahead::look_ahead(g, limits.depth, limits.search_size),
        Algorithm::XlaList => xla::xla_list(g),
        Algorithm::XlaDfs => xla::xla_dfs(g),
        Algorithm::Optimal => {
            optimal::optimal(g).unwrap_or_else(|| schedule_graph(g, Algorithm::ChooseBest, limits))
        }
        Algorithm::ChooseBest => {
            let mut candidates = vec![
                Algorithm::PostOrder,
                Algorithm::Clustering,
                Algorithm::ShortestPath,
            ];
            if g.len() <= LOOK_AHEAD_IN_CHOOSE_BEST_MAX {
                candidates.push(Algorithm::LookAhead);
            }
            let mut best: Option<(u64, Vec<usize>)> = None;
            for a in candidates {
                let order = schedule_graph(g, a, limits);
                let peak = peak_liveness_bytes(g, &order);
                if best.as_ref().is_none_or(|b| peak < b.0) {
                    best = Some((peak, order));
                }
            }
            best.expect("candidates are never empty").1
        }
    }
}

/// A module's schedule: an order and a peak per computation.
#[derive(Debug, Clone)]
pub struct ModuleSchedule {
    /// Computations in the order they were scheduled (callees first).
    pub computations: Vec<CompId>,
    /// The order of each computation's instructions.
    pub orders: HashMap<CompId, Vec<InstrId>>,
    /// Each computation's peak live bytes, its callees' peaks included.
    pub peaks: HashMap<CompId, u64>,
    /// The entry computation's peak.
    pub peak_liveness_bytes: u64,
}

impl ModuleSchedule {
    /// One line per computation, `NAME (PEAK B): INSTR INSTR ...` in schedule order, then
    /// `peak_liveness_bytes: N` (what `ipuxla schedule` prints).
    pub fn to_text(&self, module: &Module) -> String {
        let mut out = String::new();
        for c in &self.computations {
            let comp = module.computation(*c);
            let order: Vec<&str> = self.orders[c]
                .iter()
                .map(|&i| comp.instr(i).name.as_str())
                .collect();
            out += &format!("{} ({} B): {}\n", comp.name, self.peaks[c], order.join(" "));
        }
        out += &format!("peak_liveness_bytes: {}\n", self.peak_liveness_bytes);
        out
    }
}

/// Schedules every computation of `module`, callees first.
pub fn schedule_module(module: &Module, algorithm: Algorithm, limits: Limits) -> ModuleSchedule {
    let computations = module.post_order();
    let mut orders = HashMap::new();
    let mut peaks = HashMap::new();
    // Layers repeat: computations alike in structure are scheduled once.
    remembering(|| {
        for &c in &computations {
            let g = Graph::of(module.computation(c), &peaks);
            let order = memo::recall(&g, algorithm, limits, || {
                schedule_graph(&g, algorithm, limits)
            });
            debug_assert!(
                g.is_valid_order(&order),
                "{} gave an invalid order",
                algorithm.name()
            );
            peaks.insert(c, peak_liveness_bytes(&g, &order));
            orders.insert(c, order.into_iter().map(|v| g.ids[v]).collect());
        }
    });
    let peak_liveness_bytes = peaks.get(&module.entry).copied().unwrap_or(0);
    ModuleSchedule {
        computations,
        orders,
        peaks,
        peak_liveness_bytes,
    }
}
