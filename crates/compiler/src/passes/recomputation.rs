//! The recomputation pass (`recomputation`), after the scheduler: with `allow_recompute`
//! (default off, as the seed's `IPUConfig`), forward values kept live for a much later
//! read are computed again before it (`crate::recompute`'s heuristic on the entry
//! computation); its note gives the estimator's peak before and after and the work added.
//! Either way, recomputation checkpoints (`custom-call` "RecomputationCheckpoint", the
//! seed's `recomputation_checkpoint`) are replaced by the values they pinned.

use super::{Pass, PassContext};
use crate::CompileError;
use crate::recompute;
use xla_ir::Module;

/// The pass.
pub struct Recomputation;

impl Pass for Recomputation {
    fn name(&self) -> &'static str {
        "recomputation"
    }

    fn run(&self, module: &mut Module, cx: &mut PassContext) -> Result<(), CompileError> {
        let failed = |reason: String| CompileError::Pass {
            pass: "recomputation".into(),
            reason,
        };
        if cx.config.allow_recompute {
            let peaks = recompute::computation_peaks(module);
            let entry = module.entry;
            let (recomputed, report) =
                recompute::greedy::recompute(module.computation(entry), &peaks);
            *module.computation_mut(entry) = recomputed;
            cx.notes
                .push(format!("{}: {report}", module.computation(entry).name));
        } else {
            cx.notes
                .push("allow_recompute is off: nothing recomputed".into());
        }
        let ids: Vec<_> = module.computations().map(|(id, _)| id).collect();
        let mut removed = 0;
        for id in ids {
            removed += recompute::remove_checkpoints(module.computation_mut(id)).map_err(failed)?;
        }
        if removed > 0 {
            cx.notes.push(format!(
                "{removed} recomputation checkpoints replaced by their values"
            ));
        }
        Ok(())
    }
}
