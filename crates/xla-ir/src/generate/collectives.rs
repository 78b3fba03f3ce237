//! The generator's collectives, in modules of several replicas (`Options::replicas`), as
//! JAX's `shard_map` writes them (`num_partitions`, `channel_id=1`, global device ids): sums
//! and maxima over a group, gathers along the first dimension, a ring of sends, and the
//! partition's index.

use super::Gen;
use crate::ElementType;
use crate::builder::BuildError;
use crate::collective::{CollectiveAttrs, ReplicaGroups};
use crate::ids::InstrId;
use crate::literal::ArrayLiteral;
use crate::op::{BinaryOp, Op};

impl Gen<'_, '_> {
    /// A collective across the replicas on `x` (of `dims`, type `t`): over all of them, or
    /// over pairs when there are four or more and an even number.
    pub(super) fn collective(
        &mut self,
        x: InstrId,
        dims: &[i64],
        t: ElementType,
    ) -> Result<InstrId, BuildError> {
        let n = self.options.replicas as i64;
        let groups: Vec<Vec<i64>> = if n >= 4 && n % 2 == 0 && self.rng.chance(0.5) {
            (0..n).step_by(2).map(|a| vec![a, a + 1]).collect()
        } else {
            vec![(0..n).collect()]
        };
        let size = groups[0].len() as i64;
        let elements: i64 = dims.iter().product();
        let attrs = CollectiveAttrs {
            channel_id: Some(1),
            replica_groups: ReplicaGroups::Listed(groups.clone()),
            use_global_device_ids: true,
            constrain_layout: false,
        };
        match self.rng.below(4) {
            0 | 1 => {
                let op = *self.rng.pick(&[BinaryOp::Add, BinaryOp::Maximum]);
                let name = format!("combine{}", self.values.len());
                let to_apply = self.c.scalar_binary_computation(&name, op, t)?;
                let r = self
                    .c
                    .add_instruction(Op::AllReduce { attrs, to_apply }, &[x], None)?;
                match (op, t) {
                    (BinaryOp::Add, ElementType::S32) => self.clamped(r, dims),
                    (BinaryOp::Add, _) => self.c.tanh(r),
                    _ => Ok(r),
                }
            }
            2 if !dims.is_empty() && elements * size <= self.options.max_elements => {
                let gather = Op::AllGather {
                    attrs,
                    dimension: 0,
                };
                self.c.add_instruction(gather, &[x], None)
            }
            2 | 3 if self.rng.chance(0.5) => {
                // Each replica sends to the next of its group, the last to the first.
                let pairs = groups
                    .iter()
                    .flat_map(|g| (0..g.len()).map(move |i| (g[i], g[(i + 1) % g.len()])))
                    .collect();
                let permute = Op::CollectivePermute {
                    channel_id: Some(1),
                    pairs,
                };
                self.c.add_instruction(permute, &[x], None)
            }
            _ => {
                // x plus the partition's index.
                let id = self.c.add_instruction(Op::PartitionId, &[], None)?;
                let id = self.c.convert(id, t)?;
                let id = self.c.broadcast(id, dims, &[])?;
                let sum = self.c.add(x, id)?;
                match t {
                    ElementType::S32 => self.clamped(sum, dims),
                    _ => self.c.tanh(sum),
                }
            }
        }
    }

    /// An `s32` value of `dims` clamped to [-8, 8].
    fn clamped(&mut self, x: InstrId, dims: &[i64]) -> Result<InstrId, BuildError> {
        let high = self.c.constant(ArrayLiteral::scalar_s32(8))?;
        let high = self.c.broadcast(high, dims, &[])?;
        let low = self.c.negate(high)?;
        self.c.clamp(low, x, high)
    }
}
