//! The e-graph optimiser pass (`egraph-optimiser`): runs [`crate::egraph`] on every
//! computation that is not a reducer or comparator (those are scalar lambdas the lowering
//! pattern-matches), and notes each computation's e-graph size, iterations, stop reason,
//! cost and time for the pass report (`--dump-to` writes it next to the module).

use super::{Pass, PassContext};
use crate::CompileError;
use crate::egraph::cost::IpuCostModel;
use crate::egraph::rules::RuleOptions;
use crate::egraph::{RunnerLimits, instruction_names, optimise_computation};
use std::collections::HashSet;
use xla_ir::{CompId, Module, Op};

/// The pass.
pub struct EgraphOptimiser;

/// Computations called as scalar lambdas (reducers, comparators, scatter combiners, map
/// bodies): left alone.
fn lambdas(module: &Module) -> HashSet<CompId> {
    let mut out = HashSet::new();
    for (_, comp) in module.computations() {
        for (_, instr) in comp.instructions() {
            match &instr.op {
                Op::Reduce { to_apply, .. }
                | Op::ReduceWindow { to_apply, .. }
                | Op::Scatter { to_apply, .. }
                | Op::Map { to_apply, .. } => {
                    out.insert(*to_apply);
                }
                Op::Sort { comparator, .. } => {
                    out.insert(*comparator);
                }
                Op::SelectAndScatter {
                    select, scatter, ..
                } => {
                    out.insert(*select);
                    out.insert(*scatter);
                }
                _ => {}
            }
        }
    }
    out
}

impl Pass for EgraphOptimiser {
    fn name(&self) -> &'static str {
        "egraph-optimiser"
    }

    fn run(&self, module: &mut Module, cx: &mut PassContext) -> Result<(), CompileError> {
        let o = &cx.config.optimizations;
        if !o.egraph.enabled {
            cx.notes
                .push("off (optimizations.egraph.enabled is false)".into());
            return Ok(());
        }
        let options = RuleOptions {
            combine_matmuls: o.combine_matmuls,
            enable_fast_math: o.enable_fast_math,
        };
        let limits = RunnerLimits {
            node_limit: o.egraph.node_limit,
            iteration_limit: o.egraph.iteration_limit,
            time_limit_seconds: o.egraph.time_limit_seconds,
        };
        cx.notes.push(format!(
            "limits: {} nodes, {} iterations, {} s per computation; combine_matmuls={}, enable_fast_math={}",
            limits.node_limit,
            limits.iteration_limit,
            limits.time_limit_seconds,
            options.combine_matmuls,
            options.enable_fast_math
        ));
        let model = IpuCostModel::new(cx.config.target()?);
        let skip = lambdas(module);
        let ids: Vec<CompId> = module
            .computations()
            .map(|(id, _)| id)
            .filter(|id| !skip.contains(id))
            .collect();
        let rules = crate::egraph::rules::rules(options);
        let mut names = instruction_names(module);
        for id in ids {
            let report = optimise_computation(module, id, &rules, limits, &model, &mut names);
            cx.notes.push(report.line());
        }
        xla_ir::verify(module).map_err(|e| CompileError::Pass {
            pass: self.name().into(),
            reason: format!("the optimised module does not verify: {e}"),
        })?;
        Ok(())
    }
}
