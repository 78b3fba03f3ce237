//! Literals: host values of arrays and tuples, as `constant(...)` carries them and the
//! evaluator computes them.

use crate::ElementType;
use crate::shape::{ArrayShape, Shape};
use half::{bf16, f16};
use std::fmt;

/// The elements of an array, in row-major (C) order, typed by element type.
#[derive(Debug, Clone, PartialEq)]
pub enum ArrayData {
    /// `pred` elements.
    Pred(Vec<bool>),
    /// `s8` elements.
    S8(Vec<i8>),
    /// `s16` elements.
    S16(Vec<i16>),
    /// `s32` elements.
    S32(Vec<i32>),
    /// `s64` elements.
    S64(Vec<i64>),
    /// `u8` elements.
    U8(Vec<u8>),
    /// `u16` elements.
    U16(Vec<u16>),
    /// `u32` elements.
    U32(Vec<u32>),
    /// `u64` elements.
    U64(Vec<u64>),
    /// `f16` elements.
    F16(Vec<f16>),
    /// `bf16` elements.
    Bf16(Vec<bf16>),
    /// `f32` elements.
    F32(Vec<f32>),
    /// `f64` elements.
    F64(Vec<f64>),
}

/// Applies `$body` to the vector inside any [`ArrayData`] variant.
macro_rules! with_data {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            ArrayData::Pred($v) => $body,
            ArrayData::S8($v) => $body,
            ArrayData::S16($v) => $body,
            ArrayData::S32($v) => $body,
            ArrayData::S64($v) => $body,
            ArrayData::U8($v) => $body,
            ArrayData::U16($v) => $body,
            ArrayData::U32($v) => $body,
            ArrayData::U64($v) => $body,
            ArrayData::F16($v) => $body,
            ArrayData::Bf16($v) => $body,
            ArrayData::F32($v) => $body,
            ArrayData::F64($v) => $body,
        }
    };
}
pub(crate) use with_data;

impl ArrayData {
    /// `count` zero elements of `element_type`.
    pub fn zeros(element_type: ElementType, count: usize) -> ArrayData {
        match element_type {
            ElementType::Pred => ArrayData::Pred(vec![false; count]),
            ElementType::S8 => ArrayData::S8(vec![0; count]),
            ElementType::S16 => ArrayData::S16(vec![0; count]),
            ElementType::S32 => ArrayData::S32(vec![0; count]),
            ElementType::S64 => ArrayData::S64(vec![0; count]),
            ElementType::U8 => ArrayData::U8(vec![0; count]),
            ElementType::U16 => ArrayData::U16(vec![0; count]),
            ElementType::U32 => ArrayData::U32(vec![0; count]),
            ElementType::U64 => ArrayData::U64(vec![0; count]),
            ElementType::F16 => ArrayData::F16(vec![f16::ZERO; count]),
            ElementType::Bf16 => ArrayData::Bf16(vec![bf16::ZERO; count]),
            ElementType::F32 => ArrayData::F32(vec![0.0; count]),
            ElementType::F64 => ArrayData::F64(vec![0.0; count]),
        }
    }

    /// The element type these elements have.
    pub fn element_type(&self) -> ElementType {
        match self {
            ArrayData::Pred(_) => ElementType::Pred,
            ArrayData::S8(_) => ElementType::S8,
            ArrayData::S16(_) => ElementType::S16,
            ArrayData::S32(_) => ElementType::S32,
            ArrayData::S64(_) => ElementType::S64,
            ArrayData::U8(_) => ElementType::U8,
            ArrayData::U16(_) => ElementType::U16,
            ArrayData::U32(_) => ElementType::U32,
            ArrayData::U64(_) => ElementType::U64,
            ArrayData::F16(_) => ElementType::F16,
            ArrayData::Bf16(_) => ElementType::Bf16,
            ArrayData::F32(_) => ElementType::F32,
            ArrayData::F64(_) => ElementType::F64,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        with_data!(self, v => v.len())
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements at `indices`, in that order (every index must be in range).
    pub fn take(&self, indices: &[usize]) -> ArrayData {
        macro_rules! take_from {
            ($($variant:ident),*) => {
                match self {
                    $(ArrayData::$variant(v) => ArrayData::$variant(indices.iter().map(|&i| v[i]).collect()),)*
                }
            };
        }
        take_from!(
            Pred, S8, S16, S32, S64, U8, U16, U32, U64, F16, Bf16, F32, F64
        )
    }

    /// Element `i` in HLO text form (XLA's round-trip formatting for floats).
    pub fn element_text(&self, i: usize) -> String {
        match self {
            ArrayData::Pred(v) => (if v[i] { "1" } else { "0" }).to_string(),
            ArrayData::S8(v) => v[i].to_string(),
            ArrayData::S16(v) => v[i].to_string(),
            ArrayData::S32(v) => v[i].to_string(),
            ArrayData::S64(v) => v[i].to_string(),
            ArrayData::U8(v) => v[i].to_string(),
            ArrayData::U16(v) => v[i].to_string(),
            ArrayData::U32(v) => v[i].to_string(),
            ArrayData::U64(v) => v[i].to_string(),
            // XLA prints 16-bit floats with their max_digits10 directly.
            ArrayData::F16(v) => float_text(v[i].to_f64(), 5, 5, |_| Ok::<_, ()>(true)),
            ArrayData::Bf16(v) => float_text(v[i].to_f64(), 4, 4, |_| Ok::<_, ()>(true)),
            ArrayData::F32(v) => {
                float_text(v[i] as f64, 6, 9, |s| s.parse::<f32>().map(|x| x == v[i]))
            }
            ArrayData::F64(v) => float_text(v[i], 15, 17, |s| s.parse::<f64>().map(|x| x == v[i])),
        }
    }
}

/// Formats a float as XLA's `RoundTripFpToString` does: `%.{digits10}g`, or
/// `%.{max_digits10}g` when the short form does not read back as the same value.
fn float_text<E>(
    value: f64,
    digits10: usize,
    max_digits10: usize,
    reads_back: impl Fn(&str) -> Result<bool, E>,
) -> String {
    if value.is_nan() {
        return if value.is_sign_negative() {
            "-nan"
        } else {
            "nan"
        }
        .to_string();
    }
    if value.is_infinite() {
        return if value < 0.0 { "-inf" } else { "inf" }.to_string();
    }
    let short = format_g(value, digits10);
    if reads_back(&short).unwrap_or(false) {
        short
    } else {
        format_g(value, max_digits10)
    }
}

/// C's `printf("%.{precision}g", value)` for finite values.
pub(crate) fn format_g(value: f64, precision: usize) -> String {
    let precision = precision.max(1);
    if value == 0.0 {
        return if value.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    let sci = format!("{:.*e}", precision - 1, value);
    let (mantissa, exponent) = sci
        .split_once('e')
        .expect("`{:e}` always prints an exponent");
    let exponent: i32 = exponent.parse().expect("`{:e}` prints a decimal exponent");
    if exponent < -4 || exponent >= precision as i32 {
        let mantissa = strip_fraction_zeros(mantissa);
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.abs())
    } else {
        let decimals = (precision as i32 - 1 - exponent).max(0) as usize;
        strip_fraction_zeros(&format!("{value:.decimals$}")).to_string()
    }
}

fn strip_fraction_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// An array value: its shape and its elements in row-major order.
#[derive(Debug, Clone, PartialEq)]
pub struct ArrayLiteral {
    /// The shape (its element type always matches `data`).
    pub shape: ArrayShape,
    /// The elements, row-major, `shape.element_count()` of them.
    pub data: ArrayData,
}

/// A host value: an array, a tuple of values, or a token.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    /// An array value.
    Array(ArrayLiteral),
    /// A tuple of values.
    Tuple(Vec<Literal>),
    /// An ordering token (carries no data).
    Token,
}

impl ArrayLiteral {
    /// A literal of the given shape, checking that data and shape agree.
    pub fn new(shape: ArrayShape, data: ArrayData) -> Result<ArrayLiteral, String> {
        if data.element_type() != shape.element_type {
            return Err(format!(
                "literal data is {} but the shape is {shape}",
                data.element_type()
            ));
        }
        if data.len() as u64 != shape.element_count() {
            return Err(format!(
                "literal has {} elements but the shape {shape} holds {}",
                data.len(),
                shape.element_count()
            ));
        }
        Ok(ArrayLiteral { shape, data })
    }

    /// A scalar `f32`.
    pub fn scalar_f32(value: f32) -> ArrayLiteral {
        ArrayLiteral {
            shape: ArrayShape::new(ElementType::F32, &[]),
            data: ArrayData::F32(vec![value]),
        }
    }

    /// A scalar `s32`.
    pub fn scalar_s32(value: i32) -> ArrayLiteral {
        ArrayLiteral {
            shape: ArrayShape::new(ElementType::S32, &[]),
            data: ArrayData::S32(vec![value]),
        }
    }

    /// A scalar `pred`.
    pub fn scalar_pred(value: bool) -> ArrayLiteral {
        ArrayLiteral {
            shape: ArrayShape::new(ElementType::Pred, &[]),
            data: ArrayData::Pred(vec![value]),
        }
    }

    /// Element `i` of the leading dimension (rank at least 1, `i` in range): the array of
    /// the remaining dimensions.
    pub fn index_leading(&self, i: usize) -> ArrayLiteral {
        let dims = &self.shape.dims[1..];
        let n: usize = dims.iter().map(|&d| d as usize).product();
        let indices: Vec<usize> = (i * n..(i + 1) * n).collect();
        ArrayLiteral {
            shape: ArrayShape::new(self.shape.element_type, dims),
            data: self.data.take(&indices),
        }
    }

    /// `items` (one shape, at least one of them) stacked along a new leading dimension.
    pub fn stack(items: &[ArrayLiteral]) -> Result<ArrayLiteral, String> {
        let first = items.first().ok_or("nothing to stack")?;
        let mut dims = vec![items.len() as i64];
        dims.extend_from_slice(&first.shape.dims);
        let mut data = first.data.clone();
        for item in &items[1..] {
            if !item.shape.same_ignoring_layout(&first.shape) {
                return Err(format!("cannot stack {} with {}", item.shape, first.shape));
            }
            macro_rules! append {
                ($($variant:ident),*) => {
                    match (&mut data, &item.data) {
                        $((ArrayData::$variant(a), ArrayData::$variant(b)) => a.extend_from_slice(b),)*
                        _ => return Err(format!("cannot stack {} data with {} data", item.data.element_type(), first.data.element_type())),
                    }
                };
            }
            append!(
                Pred, S8, S16, S32, S64, U8, U16, U32, U64, F16, Bf16, F32, F64
            );
        }
        ArrayLiteral::new(ArrayShape::new(first.shape.element_type, &dims), data)
    }

    /// A rank-1 `f32` array.
    pub fn vector_f32(values: &[f32]) -> ArrayLiteral {
        ArrayLiteral {
            shape: ArrayShape::new(ElementType::F32, &[values.len() as i64]),
            data: ArrayData::F32(values.to_vec()),
        }
    }
}

impl Literal {
    /// The shape of this value.
    pub fn shape(&self) -> Shape {
        match self {
            Literal::Array(a) => Shape::Array(a.shape.clone()),
            Literal::Tuple(elems) => Shape::Tuple(elems.iter().map(Literal::shape).collect()),
            Literal::Token => Shape::Token,
        }
    }
}

impl From<ArrayLiteral> for Literal {
    fn from(a: ArrayLiteral) -> Literal {
        Literal::Array(a)
    }
}

impl fmt::Display for ArrayLiteral {
    /// Prints the literal as the operand of `constant(...)`, in XLA's one-line form.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dims = &self.shape.dims;
        let rank = dims.len();
        if rank == 0 {
            return match &self.data {
                ArrayData::Pred(v) => f.write_str(if v[0] { "true" } else { "false" }),
                data => f.write_str(&data.element_text(0)),
            };
        }
        if rank == 1 {
            f.write_str("{")?;
            for i in 0..self.data.len() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                f.write_str(&self.data.element_text(i))?;
            }
            return f.write_str("}");
        }
        let mut next = 0usize;
        let mut prefix = Vec::with_capacity(rank);
        self.write_level(f, &mut prefix, &mut next)
    }
}

impl ArrayLiteral {
    fn write_level(
        &self,
        f: &mut fmt::Formatter<'_>,
        prefix: &mut Vec<i64>,
        next: &mut usize,
    ) -> fmt::Result {
        let dims = &self.shape.dims;
        let rank = dims.len();
        let depth = prefix.len();
        if depth == rank - 1 {
            let row = dims[depth];
            f.write_str(if row <= 1 { "{" } else { "{ " })?;
            for i in 0..row {
                if i > 0 {
                    f.write_str(", ")?;
                }
                f.write_str(&self.data.element_text(*next))?;
                *next += 1;
            }
            return f.write_str(if row <= 1 { "}" } else { " }" });
        }
        f.write_str("{")?;
        if rank > 3 && depth > 0 {
            write!(f, " /*i{}={}*/", depth - 1, prefix[depth - 1])?;
        }
        for i in 0..dims[depth] {
            f.write_str(if i > 0 { ", " } else { " " })?;
            prefix.push(i);
            self.write_level(f, prefix, next)?;
            prefix.pop();
        }
        f.write_str(" }")
    }
}

impl fmt::Display for Literal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Literal::Array(a) => write!(f, "{a}"),
            Literal::Token => f.write_str("token"),
            Literal::Tuple(elems) => {
                f.write_str("(")?;
                for (i, e) in elems.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{e}")?;
                }
                f.write_str(")")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_like_xla() {
        let text = |v: f32| ArrayData::F32(vec![v]).element_text(0);
        assert_eq!(text(1.0 / 6.0), "0.166666672");
        assert_eq!(text(1e-5), "1e-05");
        assert_eq!(text(0.5), "0.5");
        assert_eq!(text(-2.0), "-2");
        assert_eq!(text(1234567.0), "1234567");
        assert_eq!(text(3e38), "3e+38");
        assert_eq!(text(f32::NAN), "nan");
        assert_eq!(text(f32::NEG_INFINITY), "-inf");
        assert_eq!(text(-0.0), "-0");
        assert_eq!(ArrayData::F64(vec![0.1]).element_text(0), "0.1");
        assert_eq!(
            ArrayData::F16(vec![f16::from_f32(0.1)]).element_text(0),
            "0.099976"
        );
    }

    #[test]
    fn arrays_print_like_xla() {
        let lit = ArrayLiteral::new(
            ArrayShape::new(ElementType::S32, &[4, 1]),
            ArrayData::S32(vec![2, 0, 1, 1]),
        )
        .unwrap();
        assert_eq!(lit.to_string(), "{ {2}, {0}, {1}, {1} }");
        let lit = ArrayLiteral::new(
            ArrayShape::new(ElementType::F32, &[2, 3]),
            ArrayData::F32(vec![1.5, -2.0, 0.25, 3.0, 0.0, -0.125]),
        )
        .unwrap();
        assert_eq!(lit.to_string(), "{ { 1.5, -2, 0.25 }, { 3, 0, -0.125 } }");
        let lit = ArrayLiteral::new(
            ArrayShape::new(ElementType::F32, &[2, 1, 1, 2]),
            ArrayData::F32(vec![1.0, 2.0, 3.0, 4.0]),
        )
        .unwrap();
        assert_eq!(
            lit.to_string(),
            "{ { /*i0=0*/ { /*i1=0*/ { 1, 2 } } }, { /*i0=1*/ { /*i1=0*/ { 3, 4 } } } }"
        );
    }

    #[test]
    fn mismatched_data_is_an_error() {
        assert!(
            ArrayLiteral::new(
                ArrayShape::new(ElementType::F32, &[3]),
                ArrayData::F32(vec![1.0])
            )
            .is_err()
        );
        assert!(
            ArrayLiteral::new(
                ArrayShape::new(ElementType::S32, &[1]),
                ArrayData::F32(vec![1.0])
            )
            .is_err()
        );
    }
}
