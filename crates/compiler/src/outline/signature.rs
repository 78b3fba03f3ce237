//! What makes two instructions interchangeable in an outlined body: the same opcode and
//! attributes, the same result shape, the same number of operands, the same sharding and
//! frontend attributes, and called computations of the same structure (JAX gives every
//! `reduce` its own copy of the adder, `region_0.1`, `region_1.2`, ...). Names and metadata
//! do not count.

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use xla_ir::ids::CompId;
use xla_ir::{Computation, Instruction, Module, Op};

/// Structural fingerprints of computations, computed on demand.
#[derive(Default)]
pub(crate) struct Fingerprints {
    known: HashMap<CompId, u64>,
}

impl Fingerprints {
    /// The fingerprint of `comp`: its instructions in order, each by its signature and the
    /// positions of its operands.
    pub(crate) fn of(&mut self, module: &Module, comp: CompId) -> u64 {
        if let Some(&f) = self.known.get(&comp) {
            return f;
        }
        let c = module.computation(comp);
        let position = c.positions();
        let mut h = DefaultHasher::new();
        for &id in c.order() {
            let instr = c.instr(id);
            self.signature(module, c, instr).hash(&mut h);
            for o in &instr.operands {
                position.get(o).hash(&mut h);
            }
        }
        position.get(&c.root).hash(&mut h);
        let f = h.finish();
        self.known.insert(comp, f);
        f
    }

    /// The signature of `instr` (of computation `c`): equal for instructions one body can
    /// stand for.
    pub(crate) fn signature(
        &mut self,
        module: &Module,
        c: &Computation,
        instr: &Instruction,
    ) -> u64 {
        let mut op = instr.op.clone();
        let called = op.called_computations();
        let prints: Vec<u64> = called.iter().map(|&c| self.of(module, c)).collect();
        // Called computations by structure, not by id.
        let mut k = 0;
        op.map_called_computations(|_| {
            k += 1;
            CompId(k - 1)
        });
        let mut h = DefaultHasher::new();
        format!("{op:?}").hash(&mut h);
        prints.hash(&mut h);
        instr.shape.to_string().hash(&mut h);
        for &o in &instr.operands {
            c.instr(o).shape.to_string().hash(&mut h);
        }
        format!("{:?}", instr.sharding).hash(&mut h);
        format!("{:?}", instr.frontend_attributes).hash(&mut h);
        instr.backend_config.hash(&mut h);
        h.finish()
    }
}

/// Whether an instruction may be part of an outlined body: not a parameter, nothing with
/// an effect beyond its result (feeds, random state, collectives, custom calls), no control
/// flow or nested calls, an array result, no control dependencies.
pub(crate) fn outlinable(instr: &Instruction) -> bool {
    instr.shape.as_array().is_some()
        && instr.control_predecessors.is_empty()
        && !has_effects(&instr.op)
        && !matches!(
            instr.op,
            Op::Parameter { .. }
                | Op::While { .. }
                | Op::Conditional { .. }
                | Op::Call { .. }
                | Op::Fusion { .. }
                | Op::Tuple
                | Op::GetTupleElement { .. }
                | Op::ElidedConstant
                | Op::Foreign { .. }
        )
}

/// Ops whose running does more than compute their result: what makes a function
/// stateful, so it cannot be shared (the seed inlines such functions). Custom calls are
/// opaque, so stateful, except the activations ipuxla itself computes (GELU, swish, hard
/// sigmoid).
pub(crate) fn has_effects(op: &Op) -> bool {
    if let Op::CustomCall { target, .. } = op
        && xla_ir::activation::Activation::from_custom_call(target, None).is_some()
    {
        return false;
    }
    matches!(
        op,
        Op::Infeed { .. }
            | Op::Outfeed { .. }
            | Op::CustomCall { .. }
            | Op::AfterAll
            | Op::AllReduce { .. }
            | Op::AllGather { .. }
            | Op::ReduceScatter { .. }
            | Op::AllToAll { .. }
            | Op::CollectivePermute { .. }
            | Op::ReplicaId
            | Op::PartitionId
            | Op::OptimizationBarrier
            | Op::Foreign { .. }
    )
}

/// Whether `comp`, or any computation it calls, holds an op with effects.
pub(crate) fn computation_has_effects(module: &Module, comp: CompId) -> bool {
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![comp];
    while let Some(c) = stack.pop() {
        if !seen.insert(c) {
            continue;
        }
        for &id in module.computation(c).order() {
            let op = &module.computation(c).instr(id).op;
            if has_effects(op) {
                return true;
            }
            stack.extend(op.called_computations());
        }
    }
    false
}
