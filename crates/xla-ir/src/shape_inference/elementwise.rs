//! Element-wise ops: unary and binary maths, compare, select, clamp, conversions.

use super::{Ctx, InferResult};
use crate::op::{BinaryOp, UnaryOp};
use crate::{ElementType, Shape};

pub(super) fn unary(ctx: &Ctx<'_>, op: UnaryOp) -> InferResult<Shape> {
    ctx.operand_count(1)?;
    let x = ctx.array(0)?;
    if !op.accepts(x.element_type) {
        return Err(format!(
            "{} does not accept {} operands",
            op.name(),
            x.element_type
        ));
    }
    let result_type = match op {
        UnaryOp::IsFinite => ElementType::Pred,
        // The magnitude of a complex value is real.
        UnaryOp::Abs => x.element_type.component_type(),
        _ => x.element_type,
    };
    Ok(Shape::Array(x.with_element_type(result_type)))
}

pub(super) fn binary(ctx: &Ctx<'_>, op: BinaryOp) -> InferResult<Shape> {
    ctx.operand_count(2)?;
    let (a, b) = (ctx.array(0)?, ctx.array(1)?);
    if !a.same_ignoring_layout(b) {
        return Err(format!(
            "{} needs operands of the same shape, found {a} and {b}",
            op.name()
        ));
    }
    if !op.accepts(a.element_type) {
        return Err(format!(
            "{} does not accept {} operands",
            op.name(),
            a.element_type
        ));
    }
    Ok(Shape::Array(a.clone()))
}

pub(super) fn compare(ctx: &Ctx<'_>) -> InferResult<Shape> {
    ctx.operand_count(2)?;
    let (a, b) = (ctx.array(0)?, ctx.array(1)?);
    if !a.same_ignoring_layout(b) {
        return Err(format!(
            "compare needs operands of the same shape, found {a} and {b}"
        ));
    }
    Ok(Shape::Array(a.with_element_type(ElementType::Pred)))
}

pub(super) fn select(ctx: &Ctx<'_>) -> InferResult<Shape> {
    ctx.operand_count(3)?;
    let pred = ctx.array(0)?;
    let (t, f) = (ctx.operands[1], ctx.operands[2]);
    if pred.element_type != ElementType::Pred {
        return Err(format!(
            "the first operand of select must be pred, found {pred}"
        ));
    }
    if !t.same_ignoring_layout(f) {
        return Err(format!(
            "select needs both branches of the same shape, found {t} and {f}"
        ));
    }
    let t = ctx.array(1)?;
    if !pred.dims.is_empty() && pred.dims != t.dims {
        return Err(format!(
            "select's predicate {pred} does not match the branches {t}"
        ));
    }
    Ok(Shape::Array(t.clone()))
}

pub(super) fn clamp(ctx: &Ctx<'_>) -> InferResult<Shape> {
    ctx.operand_count(3)?;
    let (lo, x, hi) = (ctx.array(0)?, ctx.array(1)?, ctx.array(2)?);
    for (what, bound) in [("min", lo), ("max", hi)] {
        if bound.element_type != x.element_type {
            return Err(format!(
                "clamp's {what} {bound} has another element type than the operand {x}"
            ));
        }
        if !bound.dims.is_empty() && bound.dims != x.dims {
            return Err(format!(
                "clamp's {what} {bound} must be a scalar or have the operand's shape {x}"
            ));
        }
    }
    Ok(Shape::Array(x.clone()))
}

pub(super) fn convert(ctx: &Ctx<'_>) -> InferResult<Shape> {
    ctx.operand_count(1)?;
    let x = ctx.array(0)?;
    let out = ctx.declared_array()?;
    if out.dims != x.dims {
        return Err(format!(
            "convert changes only the element type, but {x} becomes {out}"
        ));
    }
    Ok(Shape::Array(x.with_element_type(out.element_type)))
}

pub(super) fn bitcast_convert(ctx: &Ctx<'_>) -> InferResult<Shape> {
    ctx.operand_count(1)?;
    let x = ctx.array(0)?;
    let out = ctx.declared_array()?;
    let (from, to) = (x.element_type.bit_width(), out.element_type.bit_width());
    let mut dims = x.dims.clone();
    if from > to {
        dims.push((from / to) as i64);
    } else if from < to {
        let ratio = (to / from) as i64;
        if dims.last() != Some(&ratio) {
            return Err(format!(
                "bitcast-convert from {x} to {} needs a last dimension of {ratio}",
                out.element_type
            ));
        }
        dims.pop();
    }
    if out.dims != dims {
        return Err(format!(
            "bitcast-convert of {x} to {} gives dimensions {dims:?}, not {out}",
            out.element_type
        ));
    }
    Ok(Shape::Array(out.clone()))
}

pub(super) fn reduce_precision(
    ctx: &Ctx<'_>,
    exponent_bits: i64,
    mantissa_bits: i64,
) -> InferResult<Shape> {
    ctx.operand_count(1)?;
    let x = ctx.array(0)?;
    if !x.element_type.is_float() {
        return Err(format!("reduce-precision needs a float operand, found {x}"));
    }
    if exponent_bits < 1 || mantissa_bits < 0 {
        return Err(format!(
            "reduce-precision needs exponent_bits >= 1 and mantissa_bits >= 0, found {exponent_bits} and {mantissa_bits}"
        ));
    }
    Ok(Shape::Array(x.clone()))
}
