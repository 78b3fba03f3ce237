//! Collectives: the result shape from the operands and the size of a replica group.

use super::{Ctx, InferResult};
use crate::collective::ReplicaGroups;
use crate::ids::CompId;
use crate::{ArrayShape, ElementType, Module, Shape};

/// Devices the module declares (`replica_count` x `num_partitions`), if it declares any.
pub fn declared_devices(module: &Module) -> Option<i64> {
    match (module.replica_count, module.num_partitions) {
        (None, None) => None,
        (r, p) => Some(r.unwrap_or(1).max(1) * p.unwrap_or(1).max(1)),
    }
}

/// The groups checked against the declared devices (or, when none are declared, only for
/// repeats and sizes), and the size of each group.
fn group_size(ctx: &Ctx<'_>, groups: &ReplicaGroups) -> InferResult<usize> {
    let devices = match declared_devices(ctx.module) {
        Some(n) => n,
        None => match groups {
            ReplicaGroups::Listed(g) if g.is_empty() => 1,
            ReplicaGroups::Listed(g) => g.iter().flatten().max().map_or(1, |m| m + 1),
            ReplicaGroups::Iota { reshape, .. } => reshape.iter().product(),
        },
    };
    groups.check(devices)?;
    Ok(groups.groups(devices).first().map_or(1, Vec::len))
}

fn check_reducer(ctx: &Ctx<'_>, to_apply: CompId) -> InferResult<()> {
    let n = ctx.module.computation(to_apply).parameters().len();
    if n != 2 {
        return Err(format!(
            "{}'s to_apply must take two scalars, {} takes {n}",
            ctx.op.name(),
            ctx.module.computation(to_apply).name
        ));
    }
    Ok(())
}

fn arrays<'a>(ctx: &Ctx<'a>) -> InferResult<Vec<&'a ArrayShape>> {
    (0..ctx.operands.len()).map(|i| ctx.array(i)).collect()
}

fn tuple_or_single(shapes: Vec<Shape>) -> Shape {
    match <[Shape; 1]>::try_from(shapes) {
        Ok([one]) => one,
        Err(many) => Shape::Tuple(many),
    }
}

/// `all-reduce`: the operands' shapes (a tuple for several).
pub(super) fn all_reduce(
    ctx: &Ctx<'_>,
    groups: &ReplicaGroups,
    to_apply: CompId,
) -> InferResult<Shape> {
    ctx.min_operands(1)?;
    group_size(ctx, groups)?;
    check_reducer(ctx, to_apply)?;
    let shapes = arrays(ctx)?
        .into_iter()
        .map(|a| Shape::Array(a.clone()))
        .collect();
    Ok(tuple_or_single(shapes))
}

fn dimension(a: &ArrayShape, d: i64, op: &str) -> InferResult<usize> {
    usize::try_from(d)
        .ok()
        .filter(|&d| d < a.dims.len())
        .ok_or_else(|| format!("{op} dimension {d} is outside {a}"))
}

/// `all-gather`: dimension `d` times the group size.
pub(super) fn all_gather(ctx: &Ctx<'_>, groups: &ReplicaGroups, d: i64) -> InferResult<Shape> {
    ctx.operand_count(1)?;
    let n = group_size(ctx, groups)? as i64;
    let a = ctx.array(0)?;
    let d = dimension(a, d, "all-gather")?;
    let mut dims = a.dims.to_vec();
    // With every device in one group and no device count in the module, the group size is
    // the run's: as XLA does, accept any whole multiple the text declares.
    let unknown_size = declared_devices(ctx.module).is_none()
        && matches!(groups, ReplicaGroups::Listed(g) if g.is_empty());
    if unknown_size
        && let Some(Shape::Array(declared)) = ctx.declared
        && declared.rank() == a.rank()
        && a.dims[d] > 0
        && declared.dims[d] % a.dims[d] == 0
        && (0..a.rank()).all(|i| i == d || declared.dims[i] == a.dims[i])
    {
        dims[d] = declared.dims[d];
    } else {
        dims[d] *= n;
    }
    Ok(Shape::array(a.element_type, &dims))
}

/// `reduce-scatter`: dimension `d` divided by the group size.
pub(super) fn reduce_scatter(
    ctx: &Ctx<'_>,
    groups: &ReplicaGroups,
    d: i64,
    to_apply: CompId,
) -> InferResult<Shape> {
    ctx.operand_count(1)?;
    check_reducer(ctx, to_apply)?;
    let n = group_size(ctx, groups)? as i64;
    let a = ctx.array(0)?;
    let d = dimension(a, d, "reduce-scatter")?;
    if a.dims[d] % n != 0 {
        return Err(format!(
            "reduce-scatter splits dimension {d} of {a} into {n} blocks, which does not divide it"
        ));
    }
    let mut dims = a.dims.to_vec();
    dims[d] /= n;
    Ok(Shape::array(a.element_type, &dims))
}

/// `all-to-all`: the tuple form keeps its operands' shapes (one per group member); the
/// array form its operand's, whose dimension `d` the group size must divide.
pub(super) fn all_to_all(
    ctx: &Ctx<'_>,
    groups: &ReplicaGroups,
    d: Option<i64>,
) -> InferResult<Shape> {
    let n = group_size(ctx, groups)?;
    match d {
        None => {
            if ctx.operands.len() != n {
                return Err(format!(
                    "all-to-all in tuple form takes one operand per replica of a group ({n}), found {}",
                    ctx.operands.len()
                ));
            }
            let shapes = arrays(ctx)?
                .into_iter()
                .map(|a| Shape::Array(a.clone()))
                .collect();
            Ok(Shape::Tuple(shapes))
        }
        Some(d) => {
            ctx.operand_count(1)?;
            let a = ctx.array(0)?;
            let at = dimension(a, d, "all-to-all")?;
            if a.dims[at] % n as i64 != 0 {
                return Err(format!(
                    "all-to-all splits dimension {d} of {a} into {n} blocks, which does not divide it"
                ));
            }
            Ok(Shape::Array(a.clone()))
        }
    }
}

/// `collective-permute`: its operand's shape; each replica is a source once and a target
/// once at most.
pub(super) fn collective_permute(ctx: &Ctx<'_>, pairs: &[(i64, i64)]) -> InferResult<Shape> {
    ctx.operand_count(1)?;
    let devices = declared_devices(ctx.module);
    for (k, &(s, t)) in pairs.iter().enumerate() {
        for r in [s, t] {
            if r < 0 || devices.is_some_and(|n| r >= n) {
                return Err(format!(
                    "source_target_pairs names replica {r}, which does not exist"
                ));
            }
        }
        if pairs[..k].iter().any(|&(s2, _)| s2 == s) || pairs[..k].iter().any(|&(_, t2)| t2 == t) {
            return Err(format!(
                "source_target_pairs: replica {} sends twice or replica {} receives twice",
                s, t
            ));
        }
    }
    Ok(Shape::Array(ctx.array(0)?.clone()))
}

/// `replica-id()` / `partition-id()`: `u32[]`.
pub(super) fn device_id(ctx: &Ctx<'_>) -> InferResult<Shape> {
    ctx.operand_count(0)?;
    Ok(Shape::scalar(ElementType::U32))
}
