//! The scheduler pass (`ipu-scheduler`): orders every computation's instructions with the
//! algorithm `scheduling.algorithm` names (CHOOSE_BEST by default) and its limits, and marks
//! the module scheduled. Lowering visits instructions in this order, so it decides when
//! each tensor is created and freed on the tiles.

use super::{Pass, PassContext};
use crate::CompileError;
use crate::schedule::{Algorithm, Limits, schedule_module};
use xla_ir::Module;

/// The pass.
pub struct IpuScheduler;

impl Pass for IpuScheduler {
    fn name(&self) -> &'static str {
        "ipu-scheduler"
    }

    fn run(&self, module: &mut Module, cx: &mut PassContext) -> Result<(), CompileError> {
        let s = &cx.config.scheduling;
        let algorithm = Algorithm::from_name(&s.algorithm).ok_or_else(|| CompileError::Pass {
            pass: self.name().into(),
            reason: format!("unknown scheduling algorithm '{}'", s.algorithm),
        })?;
        let limits = Limits {
            depth: s.maximum_scheduler_lookahead_depth,
            search_size: s.maximum_scheduler_search_space_size,
        };
        let schedule = schedule_module(module, algorithm, limits);
        for c in schedule.computations {
            let order = schedule.orders[&c].clone();
            module
                .computation_mut(c)
                .set_schedule(order)
                .map_err(|reason| CompileError::Pass {
                    pass: self.name().into(),
                    reason,
                })?;
        }
        module.is_scheduled = true;
        tracing::debug!(
            target: "ipuxla::pass",
            algorithm = algorithm.name(),
            peak_liveness_bytes = schedule.peak_liveness_bytes,
            "scheduled"
        );
        Ok(())
    }
}
