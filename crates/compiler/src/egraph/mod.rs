//! The e-graph optimiser: equality saturation over each computation (egg), with the
//! rewrite tables in [`rules`] and a DAG-aware extraction priced by the IPU cost model.
//! It sits after canonicalisation (int64 conversion) and before scheduling in the pass
//! list; the pass is `egraph-optimiser` (`passes/egraph_optimiser.rs`).
//!
//! Per computation: load it into an e-graph ([`convert::load`]), run the rules within
//! the runner limits of `optimizations.egraph` (nodes, iterations, seconds), extract the
//! cheapest DAG ([`extract::extract`]), and rebuild the computation, keeping the names and
//! metadata of surviving instructions. A computation whose extraction would cost more
//! than the original (which the rules' charter rules out, but the cost model is an
//! estimate) is kept as it was.

pub mod analysis;
pub mod convert;
pub mod cost;
pub mod extract;
pub mod language;
pub mod rules;

use analysis::{HloAnalysis, HloEGraph};
use cost::IpuCostModel;
use egg::{Runner, StopReason};
use std::collections::HashSet;
use std::time::{Duration, Instant};
use xla_ir::{CompId, Module};

/// The runner's limits (`optimizations.egraph.*`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunnerLimits {
    /// Most e-nodes before the runner stops.
    pub node_limit: usize,
    /// Most iterations (rounds of every rule).
    pub iteration_limit: usize,
    /// A safety net in seconds; the result then depends on the machine's speed.
    pub time_limit_seconds: f64,
}

/// What the optimiser did to one computation.
#[derive(Debug, Clone, PartialEq)]
pub struct ComputationReport {
    /// The computation.
    pub computation: String,
    /// Instructions before and after.
    pub instructions: (usize, usize),
    /// E-nodes and e-classes when the runner stopped.
    pub egraph_nodes: usize,
    /// E-classes when the runner stopped.
    pub egraph_classes: usize,
    /// Iterations run.
    pub iterations: usize,
    /// Why the runner stopped.
    pub stop_reason: String,
    /// Estimated cost (cycles) before and after.
    pub cost: (f64, f64),
    /// Seconds spent.
    pub seconds: f64,
    /// Set when the computation was kept unchanged, with why.
    pub kept: Option<String>,
}

impl ComputationReport {
    /// One line for the pass report.
    pub fn line(&self) -> String {
        let kept = match &self.kept {
            Some(why) => format!("; kept as it was: {why}"),
            None => String::new(),
        };
        format!(
            "{}: {} -> {} instructions, e-graph {} nodes / {} classes after {} iterations ({}), cost {:.0} -> {:.0} cycles, {:.1} ms{kept}",
            self.computation,
            self.instructions.0,
            self.instructions.1,
            self.egraph_nodes,
            self.egraph_classes,
            self.iterations,
            self.stop_reason,
            self.cost.0,
            self.cost.1,
            self.seconds * 1e3
        )
    }
}

fn stop_reason(r: &Option<StopReason>) -> String {
    match r {
        Some(StopReason::Saturated) => "saturated".into(),
        Some(StopReason::IterationLimit(n)) => format!("iteration limit {n}"),
        Some(StopReason::NodeLimit(n)) => format!("node limit {n}"),
        Some(StopReason::TimeLimit(s)) => format!("time limit {s} s"),
        Some(StopReason::Other(s)) => s.clone(),
        None => "not run".into(),
    }
}

/// Every instruction name of `module` (the names [`optimise_computation`] keeps unique).
pub fn instruction_names(module: &Module) -> HashSet<String> {
    module
        .computations()
        .flat_map(|(_, c)| c.instructions().map(|(_, i)| i.name.clone()))
        .collect()
}

/// Optimises one computation of `module` in place with `rules` (from [`rules::rules`]).
/// `names` holds every instruction name of the module and is kept up to date.
pub fn optimise_computation(
    module: &mut Module,
    id: CompId,
    rules: &[egg::Rewrite<language::HloNode, HloAnalysis>],
    limits: RunnerLimits,
    model: &IpuCostModel,
    names: &mut HashSet<String>,
) -> ComputationReport {
    let start = Instant::now();
    let comp = module.computation(id);
    let mut report = ComputationReport {
        computation: comp.name.clone(),
        instructions: (comp.len(), comp.len()),
        egraph_nodes: 0,
        egraph_classes: 0,
        iterations: 0,
        stop_reason: "not run".into(),
        cost: (0.0, 0.0),
        seconds: 0.0,
        kept: None,
    };
    if let Some(why) = convert::unsupported(module, comp) {
        report.kept = Some(why);
        return report;
    }
    let mut egraph = HloEGraph::new(HloAnalysis::default());
    let loaded = convert::load(&mut egraph, comp);
    egraph.rebuild();
    let before = loaded_cost(&egraph, &loaded, model);
    let runner = Runner::default()
        .with_egraph(egraph)
        .with_node_limit(limits.node_limit)
        .with_iter_limit(limits.iteration_limit)
        .with_time_limit(Duration::from_secs_f64(limits.time_limit_seconds))
        .run(rules);
    report.iterations = runner.iterations.len();
    report.stop_reason = stop_reason(&runner.stop_reason);
    let egraph = runner.egraph;
    report.egraph_nodes = egraph.total_number_of_nodes();
    report.egraph_classes = egraph.number_of_classes();
    let mut roots: Vec<egg::Id> = loaded.parameters.clone();
    roots.push(loaded.root);
    let choice = match extract::extract(&egraph, &roots, model) {
        Ok(c) => c,
        Err(e) => {
            report.kept = Some(e);
            report.seconds = start.elapsed().as_secs_f64();
            return report;
        }
    };
    let after = extract::dag_cost(&egraph, &choice, model);
    report.cost = (before, after);
    let forced = !egraph.analysis.subsumed.is_empty();
    // Sums in another order differ in the last bits: only a real increase counts.
    if after > before * (1.0 + 1e-9) && !forced {
        report.kept = Some(format!(
            "the extraction costs more ({after:.0} > {before:.0} cycles)"
        ));
        report.cost.1 = before;
    } else {
        let original = module.computation(id);
        for (_, i) in original.instructions() {
            names.remove(&i.name);
        }
        let rebuilt = convert::rebuild(&egraph, original, &loaded, &choice, names);
        report.instructions.1 = rebuilt.len();
        *module.computation_mut(id) = rebuilt;
    }
    report.seconds = start.elapsed().as_secs_f64();
    report
}

/// The cost of the computation as loaded (each loaded class's original node once).
fn loaded_cost(egraph: &HloEGraph, loaded: &convert::Loaded, model: &IpuCostModel) -> f64 {
    let mut choice = std::collections::HashMap::new();
    for (class, node) in loaded.classes.iter().zip(&loaded.nodes) {
        if let (Some(c), Some(n)) = (class, node) {
            choice
                .entry(egraph.find(*c))
                .or_insert_with(|| analysis::canonical(egraph, n));
        }
    }
    extract::dag_cost(egraph, &choice, model)
}
