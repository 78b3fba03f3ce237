//! Sharding: XLA's `sharding={maximal device=K}` (what the seed's `ipu_shard(K)` writes)
//! places an instruction on logical IPU K: its results are laid out on that IPU's tiles,
//! its vertices run there, and operands that live on another IPU are first copied over the
//! IPU-Links (one copy per value and IPU, shared by every user there), as the seed's
//! inter-IPU copy inserter does.
//!
//! An instruction without a maximal sharding takes one by the seed's propagation rule:
//! the shard of its first operand that has one, else of its first user that has one. A
//! computation with no maximal sharding at all is not sharded: its instructions go where
//! the instruction that calls it goes (the whole system at the top). In a sharded entry
//! computation, what no rule reaches is placed on IPU 0. Other shardings (tiled,
//! replicated: the SPMD partitioner's) place nothing.

use super::{Arr, Lowerer, Scope, Value};
use crate::CompileError;
use crate::types::location;
use std::collections::HashMap;
use xla_ir::ids::InstrId;
use xla_ir::{Computation, Sharding};

/// The IPU of every instruction of a computation that has maximal shardings (empty when it
/// has none).
pub(crate) fn shards_of(comp: &Computation) -> HashMap<InstrId, usize> {
    let explicit = |i: InstrId| match &comp.instr(i).sharding {
        Some(Sharding::Maximal { device }) => usize::try_from(*device).ok(),
        _ => None,
    };
    if !comp.order().iter().any(|&i| explicit(i).is_some()) {
        return HashMap::new();
    }
    propagate(comp, explicit)
}

/// Every instruction's place (IPU, stage): `explicit`'s, else its first operand's, else
/// its first user's, else 0.
pub(crate) fn propagate(
    comp: &Computation,
    explicit: impl Fn(InstrId) -> Option<usize>,
) -> HashMap<InstrId, usize> {
    let order = comp.order();
    let mut shard: HashMap<InstrId, usize> = HashMap::new();
    for &i in order {
        let from_operand = || {
            comp.instr(i)
                .operands
                .iter()
                .find_map(|o| shard.get(o).copied())
        };
        if let Some(k) = explicit(i).or_else(from_operand) {
            shard.insert(i, k);
        }
    }
    // Then users, latest first, so a chain of unsharded producers takes its consumer's.
    let mut users: HashMap<InstrId, Vec<InstrId>> = HashMap::new();
    for &i in order {
        for &o in comp.instr(i).operands.iter() {
            users.entry(o).or_default().push(i);
        }
    }
    for &i in order.iter().rev() {
        if shard.contains_key(&i) {
            continue;
        }
        let from_user = users
            .get(&i)
            .and_then(|us| us.iter().find_map(|u| shard.get(u).copied()));
        shard.insert(i, from_user.unwrap_or(0));
    }
    shard
}

/// The order AUTO chooses for a sharded program from the IPUs its values cross between
/// (`crossings`): HOOF when the last IPU and the first exchange values (a ring), else
/// SNAKE (consecutive IPUs directly linked, as chains of shards need).
pub(crate) fn auto_order(
    crossings: &std::collections::HashSet<(usize, usize)>,
    ipus: usize,
) -> runtime::SelectionOrder {
    let last = ipus.saturating_sub(1);
    if last > 1 && (crossings.contains(&(last, 0)) || crossings.contains(&(0, last))) {
        runtime::SelectionOrder::Hoof
    } else {
        runtime::SelectionOrder::Snake
    }
}

/// Takes out of `fused` every instruction whose user runs on another IPU: an instruction
/// inlined into its user's kernel would run on the user's IPU, not its own.
pub(crate) fn keep_fusion_on_one_ipu(
    comp: &Computation,
    shards: &HashMap<InstrId, usize>,
    fused: &mut std::collections::HashSet<InstrId>,
) {
    if shards.is_empty() {
        return;
    }
    for &i in comp.order() {
        for o in comp.instr(i).operands.iter() {
            if shards.get(o) != shards.get(&i) {
                fused.remove(o);
            }
        }
    }
}

impl Lowerer<'_> {
    /// Checks that every maximal sharding of the module names an IPU it has.
    pub(crate) fn check_shards(&self) -> Result<(), CompileError> {
        let ipus = self.b.num_ipus();
        for (_, comp) in self.module.computations() {
            for &i in comp.order() {
                if let Some(Sharding::Maximal { device }) = &comp.instr(i).sharding
                    && !usize::try_from(*device).is_ok_and(|d| d < ipus)
                {
                    let instr = comp.instr(i);
                    return Err(CompileError::Sharding {
                        at: location(comp, instr),
                        instruction: instr.name.clone(),
                        device: *device,
                        ipus,
                    });
                }
            }
        }
        Ok(())
    }

    /// Runs `lower` with new values placed on IPU `ipu`'s tiles.
    pub(crate) fn on_ipu<T>(&mut self, ipu: usize, lower: impl FnOnce(&mut Self) -> T) -> T {
        let saved = (self.tile_base, self.tiles);
        let tpi = self.target.tiles_per_ipu;
        (self.tile_base, self.tiles) = (ipu * tpi, tpi);
        let out = lower(self);
        (self.tile_base, self.tiles) = saved;
        out
    }

    /// Lowers instruction `id` of a sharded computation on its IPU, its operands that live
    /// elsewhere copied there first.
    pub(crate) fn sharded_instruction(
        &mut self,
        scope: &mut Scope,
        id: InstrId,
        ipu: usize,
    ) -> Result<Value, CompileError> {
        self.on_ipu(ipu, |l| {
            let operands: Vec<InstrId> =
                l.module.computation(scope.comp).instr(id).operands.to_vec();
            let mut restore = Vec::new();
            for o in operands {
                let Some(v) = scope.env.get(&o).cloned() else {
                    continue;
                };
                let moved = l.onto_placement(&v);
                if let Some(moved) = moved {
                    scope.env.insert(o, moved);
                    restore.push((o, v));
                }
            }
            let out = l.unsharded_instruction(scope, id);
            for (o, v) in restore {
                scope.env.insert(o, v);
            }
            out
        })
    }

    /// `v` copied onto the placement's tiles where it lives elsewhere (`None`: it is
    /// already there).
    pub(super) fn onto_placement(&mut self, v: &Value) -> Option<Value> {
        match v {
            Value::Array(a) => {
                if self.within_placement(self.mapping(a.tensor)) {
                    return None;
                }
                let key = (a.tensor, self.tile_base);
                if let Some(t) = self.shard_copies.iter().rev().find_map(|m| m.get(&key)) {
                    return Some(Value::Array(Arr {
                        tensor: *t,
                        shape: a.shape.clone(),
                    }));
                }
                let tpi = self.target.tiles_per_ipu;
                let to = self.tile_base / tpi;
                let from: Vec<usize> = self
                    .mapping(a.tensor)
                    .iter()
                    .map(|p| p.tile / tpi)
                    .collect();
                self.crossings.extend(from.into_iter().map(|f| (f, to)));
                let pieces = self.linear_pieces(a.elements(), self.dtype(&a.shape));
                let copy = self.with_mapping(a, &pieces);
                self.shard_copies
                    .last_mut()
                    .expect("the main sequence's layer")
                    .insert(key, copy.tensor);
                Some(Value::Array(copy))
            }
            Value::Tuple(items) => {
                let moved: Vec<Option<Value>> =
                    items.iter().map(|x| self.onto_placement(x)).collect();
                if moved.iter().all(Option::is_none) {
                    return None;
                }
                Some(Value::Tuple(
                    moved
                        .into_iter()
                        .zip(items)
                        .map(|(m, x)| m.unwrap_or_else(|| x.clone()))
                        .collect(),
                ))
            }
            Value::Token => None,
        }
    }
}
