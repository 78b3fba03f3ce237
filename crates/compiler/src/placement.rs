//! Where lowering places every instruction: the IPU of a sharded computation's
//! instructions (`sharding={maximal device=K}`, propagated to the unannotated ones) and the
//! pipeline stage of the entry computation's (`ipu_stage`, propagated the same way). Written
//! into the module, it is what `ipuxla dump --passes` shows.

use crate::lower::{STAGE_ATTRIBUTE, propagated_shards, propagated_stages};
use xla_ir::Module;
use xla_ir::sharding::Sharding;

/// Writes the propagated shard and stage of every instruction of `module` into it, in
/// the computations that carry any: the module lowers exactly as before.
pub fn annotate_placement(module: &mut Module) {
    let ids: Vec<_> = module.computations().map(|(id, _)| id).collect();
    for id in ids {
        let shards = propagated_shards(module.computation(id));
        let stages = if id == module.entry {
            propagated_stages(module.computation(id)).unwrap_or_default()
        } else {
            Default::default()
        };
        let comp = module.computation_mut(id);
        for (i, device) in shards {
            let instr = comp.instr_mut(i);
            if instr.sharding.is_none() {
                instr.sharding = Some(Sharding::Maximal {
                    device: device as i64,
                });
            }
        }
        for (i, stage) in stages {
            comp.instr_mut(i)
                .frontend_attributes
                .entry(STAGE_ATTRIBUTE.to_string())
                .or_insert_with(|| stage.to_string());
        }
    }
}

/// The pipeline stage of every instruction of `comp` (`ipu_stage`, propagated as lowering
/// propagates it), when any instruction carries one.
pub fn pipeline_stages(
    comp: &xla_ir::Computation,
) -> Option<std::collections::HashMap<xla_ir::InstrId, usize>> {
    propagated_stages(comp)
}
