//! XLA's collectives as collective steps of a replicated executable. The module's header
//! (`replica_count × num_partitions`) gives the replicas; every replica runs the one
//! program, device `d = replica × partitions + partition` being replica `d` of the
//! executable. Each collective reads its operands' tensors and writes new, linearly mapped
//! result tensors; splitting or joining along a dimension is a `Blocks` view of the
//! row-major array.

use super::reduce::simple_reducer;
use super::{Here, Lowerer, Scope, Value};
use crate::CompileError;
use runtime::{Blocks, Collective, CollectiveKind, Program, TensorId};
use xla_ir::collective::ReplicaGroups;
use xla_ir::{ArrayShape, Op};

/// Rows before dimension `d` of `shape` (the `outer` of a split along `d`).
fn outer(shape: &ArrayShape, d: i64) -> usize {
    shape.dims[..d as usize].iter().product::<i64>().max(1) as usize
}

impl Lowerer<'_> {
    /// `groups` as replica numbers of the executable.
    fn groups(&self, here: Here, groups: &ReplicaGroups) -> Result<Vec<Vec<usize>>, CompileError> {
        let n = self.replicas as i64;
        groups
            .check(n)
            .map_err(|e| here.unsupported(format!("{e} (the module runs on {n} devices)")))?;
        Ok(groups
            .groups(n)
            .into_iter()
            .map(|g| g.into_iter().map(|r| r as usize).collect())
            .collect())
    }

    /// Lowers a collective op (`all-reduce`, `all-gather`, `reduce-scatter`, `all-to-all`,
    /// `collective-permute`, `replica-id`, `partition-id`).
    pub(crate) fn collective(
        &mut self,
        scope: &mut Scope,
        here: Here,
    ) -> Result<Value, CompileError> {
        let instr = here.instr;
        let mut operands = Vec::new();
        for &o in instr.operands.iter() {
            operands.push(self.array(scope, o)?);
        }
        let results: Vec<ArrayShape> = instr.shape.leaf_arrays().into_iter().cloned().collect();
        let reducer = |to_apply| {
            simple_reducer(self.module, to_apply).ok_or_else(|| {
                here.unsupported(
                    "the reduction is not one of add, multiply, maximum, minimum, and, or",
                )
            })
        };
        let (kind, groups) = match &instr.op {
            Op::AllReduce { attrs, to_apply } => (
                CollectiveKind::AllReduce {
                    op: reducer(*to_apply)?,
                },
                self.groups(here, &attrs.replica_groups)?,
            ),
            Op::AllGather { attrs, dimension } => {
                let groups = self.groups(here, &attrs.replica_groups)?;
                let n = groups.first().map_or(1, Vec::len) as i64;
                let d = *dimension as usize;
                let (from, to) = (&operands[0].shape, &results[0]);
                if from.dims.get(d).map(|x| x * n) != to.dims.get(d).copied() {
                    return Err(here.unsupported(format!(
                        "gathering {from} over groups of {n} devices gives dimension {d} of {} elements, but the instruction declares {to} (run it on as many replicas as it was written for)",
                        from.dims.get(d).map_or(0, |x| x * n)
                    )));
                }
                (
                    CollectiveKind::AllGather {
                        blocks: Blocks {
                            outer: outer(&results[0], *dimension),
                        },
                    },
                    groups,
                )
            }
            Op::ReduceScatter {
                attrs,
                dimension,
                to_apply,
            } => (
                CollectiveKind::ReduceScatter {
                    op: reducer(*to_apply)?,
                    blocks: Blocks {
                        outer: outer(&operands[0].shape, *dimension),
                    },
                },
                self.groups(here, &attrs.replica_groups)?,
            ),
            Op::AllToAll { attrs, dimension } => (
                CollectiveKind::AllToAll {
                    blocks: dimension.map(|d| Blocks {
                        outer: outer(&operands[0].shape, d),
                    }),
                },
                self.groups(here, &attrs.replica_groups)?,
            ),
            Op::CollectivePermute { pairs, .. } => {
                let n = self.replicas as i64;
                let mut out = Vec::with_capacity(pairs.len());
                for &(s, t) in pairs {
                    if !(0..n).contains(&s) || !(0..n).contains(&t) {
                        return Err(here.unsupported(format!(
                            "source_target_pairs names {{{s},{t}}} but the module runs on {n} devices"
                        )));
                    }
                    out.push((s as usize, t as usize));
                }
                (CollectiveKind::Permute { pairs: out }, Vec::new())
            }
            Op::ReplicaId => (
                CollectiveKind::ReplicaIndex {
                    stride: self.partitions,
                    modulo: (self.replicas / self.partitions).max(1),
                },
                Vec::new(),
            ),
            Op::PartitionId => (
                CollectiveKind::ReplicaIndex {
                    stride: 1,
                    modulo: self.partitions,
                },
                Vec::new(),
            ),
            _ => return Err(here.unsupported("not a collective")),
        };
        for a in &operands {
            self.use_tensor(a.tensor);
        }
        let outputs: Vec<super::Arr> = results
            .iter()
            .enumerate()
            .map(|(k, shape)| self.linear_arr(&format!("{}.{k}", instr.name), shape))
            .collect();
        let id = self.b.collective(Collective {
            name: instr.name.clone(),
            kind,
            groups,
            inputs: operands.iter().map(|a| a.tensor).collect(),
            outputs: outputs.iter().map(|a| a.tensor).collect::<Vec<TensorId>>(),
        });
        self.emit(Program::Collective(id));
        let mut values: Vec<Value> = outputs.into_iter().map(Value::Array).collect();
        Ok(if instr.shape.is_tuple() {
            Value::Tuple(values)
        } else {
            values.pop().expect("an array result has one leaf")
        })
    }
}
