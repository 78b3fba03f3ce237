//! Ops that move data without arithmetic: bitcast, broadcast, reshape, transpose, slice,
//! concatenate, pad, reverse, iota, dynamic-slice, dynamic-update-slice.

use super::{Ctx, InferResult, array, check_dimension_list};
use crate::attributes::{PadDim, SliceDim};
use crate::{ArrayShape, Op, Shape};

pub(super) fn bitcast(ctx: &Ctx<'_>) -> InferResult<Shape> {
    ctx.operand_count(1)?;
    let x = ctx.array(0)?;
    let out = ctx.declared_array()?;
    if x.byte_size() != out.byte_size() {
        return Err(format!(
            "bitcast keeps the bytes, but {x} and {out} differ in size"
        ));
    }
    Ok(Shape::Array(out.clone()))
}

pub(super) fn broadcast(ctx: &Ctx<'_>, dimensions: &[i64]) -> InferResult<Shape> {
    ctx.operand_count(1)?;
    let x = ctx.array(0)?;
    let out = ctx.declared_array()?;
    if dimensions.len() != x.rank() {
        return Err(format!(
            "broadcast of {x} needs {} entries in dimensions={{}}, found {}",
            x.rank(),
            dimensions.len()
        ));
    }
    check_dimension_list("broadcast dimension", dimensions, out.rank())?;
    for (i, &d) in dimensions.iter().enumerate() {
        if x.dims[i] != out.dims[d as usize] {
            return Err(format!(
                "broadcast maps operand dimension {i} (size {}) to result dimension {d} (size {})",
                x.dims[i], out.dims[d as usize]
            ));
        }
    }
    if out.element_type != x.element_type {
        return Err(format!(
            "broadcast cannot change the element type ({x} to {out})"
        ));
    }
    Ok(Shape::Array(out.clone()))
}

pub(super) fn reshape(ctx: &Ctx<'_>) -> InferResult<Shape> {
    ctx.operand_count(1)?;
    let x = ctx.array(0)?;
    let out = ctx.declared_array()?;
    if x.element_count() != out.element_count() || x.element_type != out.element_type {
        return Err(format!(
            "reshape keeps the elements, but {x} and {out} differ"
        ));
    }
    Ok(Shape::Array(out.clone()))
}

pub(super) fn transpose(ctx: &Ctx<'_>, perm: &[i64]) -> InferResult<Shape> {
    ctx.operand_count(1)?;
    let x = ctx.array(0)?;
    if perm.len() != x.rank() {
        return Err(format!(
            "transpose of {x} needs a permutation of {} dimensions",
            x.rank()
        ));
    }
    check_dimension_list("transpose dimension", perm, x.rank())?;
    let dims: Vec<i64> = perm.iter().map(|&p| x.dims[p as usize]).collect();
    Ok(array(x.element_type, &dims))
}

pub(super) fn slice(ctx: &Ctx<'_>, slices: &[SliceDim]) -> InferResult<Shape> {
    ctx.operand_count(1)?;
    let x = ctx.array(0)?;
    if slices.len() != x.rank() {
        return Err(format!(
            "slice of {x} needs {} ranges, found {}",
            x.rank(),
            slices.len()
        ));
    }
    let mut dims = Vec::with_capacity(slices.len());
    for (i, (s, &d)) in slices.iter().zip(&x.dims).enumerate() {
        if s.start < 0 || s.start > s.limit || s.limit > d || s.stride < 1 {
            return Err(format!(
                "slice range [{}:{}:{}] is invalid for dimension {i} of size {d}",
                s.start, s.limit, s.stride
            ));
        }
        dims.push(((s.limit - s.start) as u64).div_ceil(s.stride as u64) as i64);
    }
    Ok(array(x.element_type, &dims))
}

pub(super) fn concatenate(ctx: &Ctx<'_>, dimension: i64) -> InferResult<Shape> {
    ctx.min_operands(1)?;
    let first = ctx.array(0)?;
    if dimension < 0 || dimension as usize >= first.rank() {
        return Err(format!(
            "concatenate dimension {dimension} is out of range for {first}"
        ));
    }
    let d = dimension as usize;
    let mut dims: Vec<i64> = first.dims.to_vec();
    for i in 1..ctx.operands.len() {
        let x = ctx.array(i)?;
        let same_other_dims = x.rank() == first.rank()
            && x.dims
                .iter()
                .zip(&first.dims)
                .enumerate()
                .all(|(j, (a, b))| j == d || a == b);
        if x.element_type != first.element_type || !same_other_dims {
            return Err(format!(
                "concatenate along {dimension} needs operands that agree elsewhere, found {first} and {x}"
            ));
        }
        dims[d] = dims[d]
            .checked_add(x.dims[d])
            .ok_or_else(|| format!("concatenating along {dimension} overflows"))?;
    }
    Ok(array(first.element_type, &dims))
}

pub(super) fn pad(ctx: &Ctx<'_>, padding: &[PadDim]) -> InferResult<Shape> {
    ctx.operand_count(2)?;
    let (x, value) = (ctx.array(0)?, ctx.array(1)?);
    if !value.dims.is_empty() || value.element_type != x.element_type {
        return Err(format!(
            "pad's value must be a {}[] scalar, found {value}",
            x.element_type
        ));
    }
    if padding.len() != x.rank() {
        return Err(format!(
            "padding of {x} needs {} dimensions, found {}",
            x.rank(),
            padding.len()
        ));
    }
    let mut dims = Vec::with_capacity(padding.len());
    for (i, (p, &d)) in padding.iter().zip(&x.dims).enumerate() {
        if p.interior < 0 {
            return Err(format!(
                "interior padding {} of dimension {i} is negative",
                p.interior
            ));
        }
        let size = (d - 1)
            .max(0)
            .checked_mul(p.interior)
            .and_then(|inner| inner.checked_add(d))
            .and_then(|s| s.checked_add(p.low))
            .and_then(|s| s.checked_add(p.high))
            .ok_or_else(|| format!("padding of dimension {i} overflows"))?;
        if size < 0 {
            return Err(format!(
                "padding {}_{}_{} makes dimension {i} negative",
                p.low, p.high, p.interior
            ));
        }
        dims.push(size);
    }
    Ok(array(x.element_type, &dims))
}

pub(super) fn reverse(ctx: &Ctx<'_>, dimensions: &[i64]) -> InferResult<Shape> {
    ctx.operand_count(1)?;
    let x = ctx.array(0)?;
    check_dimension_list("reverse dimension", dimensions, x.rank())?;
    Ok(Shape::Array(x.clone()))
}

pub(super) fn iota(ctx: &Ctx<'_>, dimension: i64) -> InferResult<Shape> {
    ctx.operand_count(0)?;
    let out = ctx.declared_array()?;
    if dimension < 0 || dimension as usize >= out.rank() {
        return Err(format!(
            "iota_dimension {dimension} is out of range for {out}"
        ));
    }
    if out.element_type == crate::ElementType::Pred {
        return Err("iota cannot produce pred".to_string());
    }
    Ok(Shape::Array(out.clone()))
}

/// Checks the scalar integer start indices of dynamic-slice and dynamic-update-slice.
/// True when a `dynamic-slice` or `dynamic-update-slice` gives its start indices as one
/// rank-1 array (XLA's older form, which it still reads) rather than one scalar per
/// dimension. ipuxla reads and checks this form but computes only the scalar one.
pub fn vector_start_indices(op: &Op, operands: &[&Shape]) -> bool {
    let first = match op {
        Op::DynamicSlice { .. } => 1,
        Op::DynamicUpdateSlice => 2,
        _ => return false,
    };
    // Scalar start indices are rank 0, so a rank-1 index operand is the vector form.
    operands.len() == first + 1 && matches!(operands[first], Shape::Array(a) if a.rank() == 1)
}

fn check_start_indices(ctx: &Ctx<'_>, first: usize, rank: usize) -> InferResult<()> {
    if vector_start_indices(ctx.op, ctx.operands) {
        let s = ctx.array(first)?;
        if s.dims[0] as usize != rank || !s.element_type.is_integer() {
            return Err(format!(
                "{} of a rank-{rank} array takes {rank} start indices, found {s}",
                ctx.op.name()
            ));
        }
        return Ok(());
    }
    if ctx.operands.len() != first + rank {
        return Err(format!(
            "{} of a rank-{rank} array takes {} operands ({rank} start indices), found {}",
            ctx.op.name(),
            first + rank,
            ctx.operands.len()
        ));
    }
    let mut index_type = None;
    for i in first..first + rank {
        let s = ctx.array(i)?;
        if !s.dims.is_empty() || !s.element_type.is_integer() {
            return Err(format!(
                "start index operand {i} must be an integer scalar, found {s}"
            ));
        }
        if *index_type.get_or_insert(s.element_type) != s.element_type {
            return Err("start indices must all have the same element type".to_string());
        }
    }
    Ok(())
}

pub(super) fn dynamic_slice(ctx: &Ctx<'_>, sizes: &[i64]) -> InferResult<Shape> {
    ctx.min_operands(1)?;
    let x = ctx.array(0)?;
    check_start_indices(ctx, 1, x.rank())?;
    if sizes.len() != x.rank() {
        return Err(format!(
            "dynamic_slice_sizes needs {} entries for {x}",
            x.rank()
        ));
    }
    for (i, (&s, &d)) in sizes.iter().zip(&x.dims).enumerate() {
        if s < 0 || s > d {
            return Err(format!(
                "slice size {s} is invalid for dimension {i} of size {d}"
            ));
        }
    }
    Ok(array(x.element_type, sizes))
}

pub(super) fn dynamic_update_slice(ctx: &Ctx<'_>) -> InferResult<Shape> {
    ctx.min_operands(2)?;
    let (x, update): (&ArrayShape, &ArrayShape) = (ctx.array(0)?, ctx.array(1)?);
    check_start_indices(ctx, 2, x.rank())?;
    let fits = update.rank() == x.rank() && update.dims.iter().zip(&x.dims).all(|(u, d)| u <= d);
    if update.element_type != x.element_type || !fits {
        return Err(format!("update {update} does not fit in {x}"));
    }
    Ok(Shape::Array(x.clone()))
}
