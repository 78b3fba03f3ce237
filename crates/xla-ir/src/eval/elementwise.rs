//! Element-wise ops: unary and binary maths, compare, select, clamp and conversions.

use super::array::{self, from_le_bytes, from_nums, map_same, num, to_le_bytes, zip_same};
use super::element::Element;
use super::{OpError, OpResult};
use crate::attributes::{CompareType, ComparisonDirection};
use crate::literal::{ArrayData, ArrayLiteral};
use crate::op::{BinaryOp, UnaryOp};
use crate::{ArrayShape, ElementType, Shape};
use std::cmp::Ordering;

fn not_defined(op: &str, t: ElementType) -> OpError {
    OpError::Message(format!("{op} is not defined for {t}"))
}

fn result(shape: &ArrayShape, data: ArrayData) -> OpResult {
    Ok(super::literal(data.element_type(), &shape.dims, data))
}

pub(super) fn unary(op: UnaryOp, x: &ArrayLiteral, _out: &Shape) -> OpResult {
    let t = x.data.element_type();
    if op == UnaryOp::IsFinite {
        let flags: Vec<bool> = crate::literal::with_data!(&x.data, v => v.iter().map(|&e| Element::is_finite(e)).collect());
        return result(&x.shape, ArrayData::Pred(flags));
    }
    let data = map_same!(&x.data, v => v
        .iter()
        .map(|&e| Element::unary(op, e))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| not_defined(op.name(), t))?);
    result(&x.shape, data)
}

pub(super) fn binary(op: BinaryOp, a: &ArrayLiteral, b: &ArrayLiteral) -> OpResult {
    let t = a.data.element_type();
    let mismatch = Err(OpError::Message(format!(
        "{} of {} and {}",
        op.name(),
        a.shape,
        b.shape
    )));
    let data = zip_same!(&a.data, &b.data, x, y => x
        .iter()
        .zip(y.iter())
        .map(|(&p, &q)| Element::binary(op, p, q))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| not_defined(op.name(), t))?, mismatch);
    result(&a.shape, data)
}

fn holds(direction: ComparisonDirection, ord: Option<Ordering>) -> bool {
    match direction {
        ComparisonDirection::Eq => ord == Some(Ordering::Equal),
        ComparisonDirection::Ne => ord != Some(Ordering::Equal),
        ComparisonDirection::Lt => ord == Some(Ordering::Less),
        ComparisonDirection::Le => matches!(ord, Some(Ordering::Less | Ordering::Equal)),
        ComparisonDirection::Gt => ord == Some(Ordering::Greater),
        ComparisonDirection::Ge => matches!(ord, Some(Ordering::Greater | Ordering::Equal)),
    }
}

/// `a direction b` for two elements of one type (IEEE or total order).
pub(super) fn compare_elements<T: Element>(
    direction: ComparisonDirection,
    total: bool,
    a: T,
    b: T,
) -> bool {
    let ord = if total {
        Some(T::total(a, b))
    } else {
        T::partial(a, b)
    };
    holds(direction, ord)
}

pub(super) fn compare(
    direction: ComparisonDirection,
    compare_type: Option<CompareType>,
    a: &ArrayLiteral,
    b: &ArrayLiteral,
) -> OpResult {
    let total = compare_type == Some(CompareType::TotalOrder);
    macro_rules! flags {
        ($($variant:ident),*) => {
            match (&a.data, &b.data) {
                $((ArrayData::$variant(x), ArrayData::$variant(y)) => x
                    .iter()
                    .zip(y.iter())
                    .map(|(&p, &q)| compare_elements(direction, total, p, q))
                    .collect(),)*
                _ => return Err(OpError::Message(format!("compare of {} and {}", a.shape, b.shape))),
            }
        };
    }
    let flags: Vec<bool> = flags!(
        Pred, S8, S16, S32, S64, U8, U16, U32, U64, F16, Bf16, F32, F64
    );
    result(&a.shape, ArrayData::Pred(flags))
}

pub(super) fn select(
    pred: &ArrayLiteral,
    on_true: &ArrayLiteral,
    on_false: &ArrayLiteral,
) -> OpResult {
    let ArrayData::Pred(p) = &pred.data else {
        return Err(OpError::Message("select's predicate is not pred".into()));
    };
    let n = on_true.data.len();
    let both = array::concat(&[&on_true.data, &on_false.data]);
    let scalar = p.len() == 1 && n != 1;
    let indices: Vec<usize> = (0..n)
        .map(|i| {
            if p[if scalar { 0 } else { i }] {
                i
            } else {
                n + i
            }
        })
        .collect();
    result(&on_true.shape, array::take(&both, &indices))
}

pub(super) fn clamp(lo: &ArrayLiteral, x: &ArrayLiteral, hi: &ArrayLiteral) -> OpResult {
    let n = x.data.len();
    let spread = |b: &ArrayLiteral| -> ArrayData {
        if b.data.len() == n {
            b.data.clone()
        } else {
            array::take(&b.data, &vec![0; n])
        }
    };
    let (lo, hi) = (
        ArrayLiteral {
            shape: x.shape.clone(),
            data: spread(lo),
        },
        ArrayLiteral {
            shape: x.shape.clone(),
            data: spread(hi),
        },
    );
    let raised = binary(BinaryOp::Maximum, x, &lo)?;
    binary(BinaryOp::Minimum, super::array(&raised)?, &hi)
}

pub(super) fn convert(x: &ArrayLiteral, out: &ArrayShape) -> OpResult {
    let data = from_nums(out.element_type, x.data.len(), |i| num(&x.data, i));
    result(&x.shape, data)
}

pub(super) fn bitcast_convert(x: &ArrayLiteral, out: &ArrayShape) -> OpResult {
    let data = from_le_bytes(out.element_type, &to_le_bytes(&x.data));
    Ok(super::literal(out.element_type, &out.dims, data))
}

/// Rounds the mantissa to `mantissa_bits` (nearest even) and the exponent range to
/// `exponent_bits` (overflow to infinity, underflow to zero), as XLA defines it.
fn reduce_precision_bits(
    bits: u64,
    width: u32,
    exp_width: u32,
    exponent_bits: i64,
    mantissa_bits: i64,
) -> u64 {
    let mant_width = width - 1 - exp_width;
    let mut x = bits;
    if (mantissa_bits as u32) < mant_width {
        let shift = mant_width - mantissa_bits as u32;
        let last_bit_mask = 1u64 << shift;
        let base_bias = (last_bit_mask >> 1) - 1;
        let last_bit = (x & last_bit_mask) >> shift;
        let truncation_mask = !(last_bit_mask - 1);
        x = x.wrapping_add(last_bit + base_bias) & truncation_mask;
    }
    if (exponent_bits as u32) < exp_width {
        let sign_mask = 1u64 << (width - 1);
        let exp_mask = ((1u64 << exp_width) - 1) << mant_width;
        let bias = (1u64 << (exp_width - 1)) - 1;
        let reduced_bias = (1u64 << (exponent_bits - 1)) - 1;
        let max_exp = (bias + reduced_bias) << mant_width;
        let min_exp = (bias - reduced_bias) << mant_width;
        let exponent = x & exp_mask;
        let signed_zero = x & sign_mask;
        if exponent > max_exp {
            x = signed_zero | exp_mask;
        } else if exponent <= min_exp {
            x = signed_zero;
        }
    }
    x
}

pub(super) fn reduce_precision(
    x: &ArrayLiteral,
    exponent_bits: i64,
    mantissa_bits: i64,
) -> OpResult {
    let f32_op = |v: f32| -> f32 {
        if v.is_nan() {
            return if mantissa_bits > 0 {
                v
            } else {
                f32::INFINITY.copysign(v)
            };
        }
        f32::from_bits(reduce_precision_bits(
            v.to_bits() as u64,
            32,
            8,
            exponent_bits,
            mantissa_bits,
        ) as u32)
    };
    let data = match &x.data {
        ArrayData::F32(v) => ArrayData::F32(v.iter().map(|&e| f32_op(e)).collect()),
        ArrayData::F16(v) => ArrayData::F16(
            v.iter()
                .map(|e| half::f16::from_f32(f32_op(e.to_f32())))
                .collect(),
        ),
        ArrayData::Bf16(v) => ArrayData::Bf16(
            v.iter()
                .map(|e| half::bf16::from_f32(f32_op(e.to_f32())))
                .collect(),
        ),
        ArrayData::F64(v) => ArrayData::F64(
            v.iter()
                .map(|&e| {
                    if e.is_nan() {
                        if mantissa_bits > 0 {
                            e
                        } else {
                            f64::INFINITY.copysign(e)
                        }
                    } else {
                        f64::from_bits(reduce_precision_bits(
                            e.to_bits(),
                            64,
                            11,
                            exponent_bits,
                            mantissa_bits,
                        ))
                    }
                })
                .collect(),
        ),
        other => return Err(not_defined("reduce-precision", other.element_type())),
    };
    result(&x.shape, data)
}

/// An activation custom-call (GELU, swish, hard sigmoid) on floats.
pub(super) fn activation(a: crate::Activation, x: &ArrayLiteral) -> OpResult {
    let data = match &x.data {
        ArrayData::F32(v) => ArrayData::F32(v.iter().map(|&e| a.apply_f32(e)).collect()),
        ArrayData::F64(v) => ArrayData::F64(v.iter().map(|&e| a.apply_f64(e)).collect()),
        ArrayData::F16(v) => ArrayData::F16(
            v.iter()
                .map(|&e| half::f16::from_f32(a.apply_f32(e.to_f32())))
                .collect(),
        ),
        ArrayData::Bf16(v) => ArrayData::Bf16(
            v.iter()
                .map(|&e| half::bf16::from_f32(a.apply_f32(e.to_f32())))
                .collect(),
        ),
        other => return Err(not_defined(a.target(), other.element_type())),
    };
    result(&x.shape, data)
}
