//! Small graph helpers every layer, loss and gradient rule needs: constants shaped like a
//! value, sums and means over dimensions, the scalar reducers (built once per module).

use xla_ir::builder::{BuildError, ComputationBuilder};
use xla_ir::literal::ArrayLiteral;
use xla_ir::op::BinaryOp;
use xla_ir::{CompId, ElementType, InstrId, Shape};

/// The builder every frontend function writes into.
pub type Builder<'m> = ComputationBuilder<'m>;

/// The dimensions of an array value (empty for a scalar; a tuple has none).
pub fn dims(b: &Builder<'_>, x: InstrId) -> Vec<i64> {
    b.shape(x)
        .as_array()
        .map_or(Vec::new(), |a| a.dims.to_vec())
}

/// The element type of an array value (`F32` for a tuple, which no caller differentiates).
pub fn element_type(b: &Builder<'_>, x: InstrId) -> ElementType {
    b.shape(x)
        .as_array()
        .map_or(ElementType::F32, |a| a.element_type)
}

/// A scalar constant `value` of `element_type`.
pub fn scalar(
    b: &mut Builder<'_>,
    element_type: ElementType,
    value: f64,
) -> Result<InstrId, BuildError> {
    match element_type {
        ElementType::F64 => b.constant(
            ArrayLiteral::new(
                xla_ir::ArrayShape::new(ElementType::F64, &[]),
                xla_ir::literal::ArrayData::F64(vec![value]),
            )
            .map_err(|message| BuildError::Shape {
                computation: String::new(),
                opcode: "constant".into(),
                message,
            })?,
        ),
        ElementType::S32 => b.constant(ArrayLiteral::scalar_s32(value as i32)),
        t => b.float_constant(t, value as f32),
    }
}

/// `value` in every element of an array of `element_type` and `dims`.
pub fn full(
    b: &mut Builder<'_>,
    element_type: ElementType,
    dims: &[i64],
    value: f64,
) -> Result<InstrId, BuildError> {
    let s = scalar(b, element_type, value)?;
    if dims.is_empty() {
        return Ok(s);
    }
    b.broadcast(s, dims, &[])
}

/// `value` in every element of an array shaped like `x`.
pub fn full_like(b: &mut Builder<'_>, x: InstrId, value: f64) -> Result<InstrId, BuildError> {
    let (t, d) = (element_type(b, x), dims(b, x));
    full(b, t, &d, value)
}

/// Zeros shaped like `x`.
pub fn zeros_like(b: &mut Builder<'_>, x: InstrId) -> Result<InstrId, BuildError> {
    full_like(b, x, 0.0)
}

/// `x * value` (a constant broadcast to `x`'s shape).
pub fn scale(b: &mut Builder<'_>, x: InstrId, value: f64) -> Result<InstrId, BuildError> {
    let c = full_like(b, x, value)?;
    b.multiply(x, c)
}

/// The module's scalar reducer `op` for `element_type` (`sum_f32`, `max_f32`, ...): built
/// the first time it is asked for, found by name after.
pub fn reducer(
    b: &mut Builder<'_>,
    op: BinaryOp,
    element_type: ElementType,
) -> Result<CompId, BuildError> {
    let kind = match op {
        BinaryOp::Add => "sum",
        BinaryOp::Maximum => "max",
        BinaryOp::Minimum => "min",
        BinaryOp::Multiply => "product",
        _ => op.name(),
    };
    let name = format!("{kind}_{}", element_type.name());
    if let Some((id, _)) = b.module().computations().find(|(_, c)| c.name == name) {
        return Ok(id);
    }
    b.scalar_binary_computation(&name, op, element_type)
}

/// The sum of `x` over `dimensions`.
pub fn sum(b: &mut Builder<'_>, x: InstrId, dimensions: &[i64]) -> Result<InstrId, BuildError> {
    if dimensions.is_empty() {
        return Ok(x);
    }
    let t = element_type(b, x);
    let zero = scalar(b, t, 0.0)?;
    let add = reducer(b, BinaryOp::Add, t)?;
    b.reduce(&[x], &[zero], dimensions, add)
}

/// The maximum of `x` over `dimensions`.
pub fn max(b: &mut Builder<'_>, x: InstrId, dimensions: &[i64]) -> Result<InstrId, BuildError> {
    let t = element_type(b, x);
    let low = scalar(b, t, f64::NEG_INFINITY)?;
    let m = reducer(b, BinaryOp::Maximum, t)?;
    b.reduce(&[x], &[low], dimensions, m)
}

/// The mean of `x` over `dimensions`.
pub fn mean(b: &mut Builder<'_>, x: InstrId, dimensions: &[i64]) -> Result<InstrId, BuildError> {
    let d = dims(b, x);
    let count: i64 = dimensions.iter().map(|&k| d[k as usize]).product();
    let s = sum(b, x, dimensions)?;
    scale(b, s, 1.0 / count as f64)
}

/// The sum of every element of `x` (a scalar).
pub fn sum_all(b: &mut Builder<'_>, x: InstrId) -> Result<InstrId, BuildError> {
    let all: Vec<i64> = (0..dims(b, x).len() as i64).collect();
    sum(b, x, &all)
}

/// The mean of every element of `x` (a scalar).
pub fn mean_all(b: &mut Builder<'_>, x: InstrId) -> Result<InstrId, BuildError> {
    let all: Vec<i64> = (0..dims(b, x).len() as i64).collect();
    mean(b, x, &all)
}

/// `x` (of `x`'s dims, a subsequence of `to`'s at `mapping`) broadcast to `to`.
pub fn broadcast_into(
    b: &mut Builder<'_>,
    x: InstrId,
    to: &[i64],
    mapping: &[i64],
) -> Result<InstrId, BuildError> {
    if dims(b, x) == to {
        return Ok(x);
    }
    b.broadcast(x, to, mapping)
}

/// `x` with `dimensions` (sorted) summed away and kept as size 1: `keepdims=True`.
pub fn keep_dims(
    b: &mut Builder<'_>,
    reduced: InstrId,
    full_dims: &[i64],
    dimensions: &[i64],
) -> Result<InstrId, BuildError> {
    let kept: Vec<i64> = full_dims
        .iter()
        .enumerate()
        .map(|(k, &n)| {
            if dimensions.contains(&(k as i64)) {
                1
            } else {
                n
            }
        })
        .collect();
    b.reshape(reduced, &kept)
}

/// `reduced` (over `dimensions` of an array of `full_dims`) broadcast back to `full_dims`.
pub fn broadcast_back(
    b: &mut Builder<'_>,
    reduced: InstrId,
    full_dims: &[i64],
    dimensions: &[i64],
) -> Result<InstrId, BuildError> {
    let mapping: Vec<i64> = (0..full_dims.len() as i64)
        .filter(|k| !dimensions.contains(k))
        .collect();
    broadcast_into(b, reduced, full_dims, &mapping)
}

/// The value of `x` with no gradient through it (JAX's `stop_gradient`): a `copy` marked
/// with the frontend attribute [`STOP_GRADIENT`], which autodiff does not cross.
pub fn stop_gradient(b: &mut Builder<'_>, x: InstrId) -> Result<InstrId, BuildError> {
    b.with_frontend_attribute(STOP_GRADIENT, "true", |b| b.copy(x))
}

/// `x` marked as a recomputation checkpoint (the seed's
/// `pipelining_ops.recomputation_checkpoint`): with `allow_recompute` its value is kept
/// and what reads it later is recomputed from it, not from further back. The identity
/// otherwise, and to autodiff.
pub fn recomputation_checkpoint(b: &mut Builder<'_>, x: InstrId) -> Result<InstrId, BuildError> {
    b.recomputation_checkpoint(x)
}

/// The frontend attribute that stops gradients ([`stop_gradient`]).
pub const STOP_GRADIENT: &str = "ipuxla.stop_gradient";

/// An array shape of `element_type` and `dims`.
pub fn array(element_type: ElementType, dims: &[i64]) -> Shape {
    Shape::array(element_type, dims)
}

/// The sum of `x` over all `replicas` (`lax.psum`): an `all-reduce` with `add`.
pub fn cross_replica_sum(
    b: &mut Builder<'_>,
    x: InstrId,
    replicas: usize,
) -> Result<InstrId, BuildError> {
    use xla_ir::collective::{CollectiveAttrs, ReplicaGroups};
    let t = element_type(b, x);
    let sum = reducer(b, BinaryOp::Add, t)?;
    let attrs = CollectiveAttrs {
        channel_id: None,
        replica_groups: ReplicaGroups::Listed(vec![(0..replicas as i64).collect()]),
        use_global_device_ids: false,
        constrain_layout: false,
    };
    b.add_instruction(
        xla_ir::Op::AllReduce {
            attrs,
            to_apply: sum,
        },
        &[x],
        None,
    )
}

/// The mean of `x` over all `replicas` (`lax.pmean`): [`cross_replica_sum`], scaled.
pub fn cross_replica_mean(
    b: &mut Builder<'_>,
    x: InstrId,
    replicas: usize,
) -> Result<InstrId, BuildError> {
    let total = cross_replica_sum(b, x, replicas)?;
    scale(b, total, 1.0 / replicas as f64)
}
