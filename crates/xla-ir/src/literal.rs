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
    /// `c64` elements: (real, imaginary).
    C64(Vec<[f32; 2]>),
    /// `c128` elements: (real, imaginary).
    C128(Vec<[f64; 2]>),
    /// Elements of a type narrower than a byte or than `f16` (see [`crate::narrow`]): each
    /// element's bit pattern in one byte.
    Narrow {
        /// The element type.
        element_type: ElementType,
        /// One bit pattern per element.
        bits: Vec<u8>,
    },
}

/// Applies `$body` to the vector inside an [`ArrayData`] of a type ipuxla computes with
/// (those that hold [`crate::ElementType::is_computed`] types). Computing code runs only on
/// such data: the evaluator refuses other element types before it computes a value.
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
            ArrayData::C64(_) | ArrayData::C128(_) | ArrayData::Narrow { .. } => {
                unreachable!("values of element types ipuxla does not compute with are refused before evaluation")
            }
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
            ElementType::C64 => ArrayData::C64(vec![[0.0; 2]; count]),
            ElementType::C128 => ArrayData::C128(vec![[0.0; 2]; count]),
            t => ArrayData::Narrow {
                element_type: t,
                bits: vec![0; count],
            },
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
            ArrayData::C64(_) => ElementType::C64,
            ArrayData::C128(_) => ElementType::C128,
            ArrayData::Narrow { element_type, .. } => *element_type,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            ArrayData::C64(v) => v.len(),
            ArrayData::C128(v) => v.len(),
            ArrayData::Narrow { bits, .. } => bits.len(),
            computed => with_data!(computed, v => v.len()),
        }
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
                    ArrayData::Narrow { element_type, bits } => ArrayData::Narrow {
                        element_type: *element_type,
                        bits: indices.iter().map(|&i| bits[i]).collect(),
                    },
                }
            };
        }
        take_from!(
            Pred, S8, S16, S32, S64, U8, U16, U32, U64, F16, Bf16, F32, F64, C64, C128
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
            ArrayData::F16(v) if v[i].is_nan() => nan_text(v[i].to_bits() as u64, 16, 10),
            ArrayData::F16(v) => float_text(v[i].to_f64(), 5, 5, |_| Ok::<_, ()>(true)),
            ArrayData::Bf16(v) if v[i].is_nan() => nan_text(v[i].to_bits() as u64, 16, 7),
            ArrayData::Bf16(v) => float_text(v[i].to_f64(), 4, 4, |_| Ok::<_, ()>(true)),
            ArrayData::F32(v) if v[i].is_nan() => nan_text(v[i].to_bits() as u64, 32, 23),
            ArrayData::F32(v) => f32_text(v[i]),
            ArrayData::F64(v) if v[i].is_nan() => nan_text(v[i].to_bits(), 64, 52),
            ArrayData::F64(v) => f64_text(v[i]),
            ArrayData::C64(v) => format!("({}, {})", f32_text(v[i][0]), f32_text(v[i][1])),
            ArrayData::C128(v) => format!("({}, {})", f64_text(v[i][0]), f64_text(v[i][1])),
            ArrayData::Narrow { element_type, bits } => {
                let value = crate::narrow::decode(*element_type, bits[i]);
                if element_type.is_float() {
                    float_text(value, 4, 4, |_| Ok::<_, ()>(true))
                } else {
                    format!("{value}")
                }
            }
        }
    }
}

fn f32_text(x: f32) -> String {
    float_text(x as f64, 6, 9, |s| s.parse::<f32>().map(|y| y == x))
}

fn f64_text(x: f64) -> String {
    float_text(x, 15, 17, |s| s.parse::<f64>().map(|y| y == x))
}

/// A NaN as XLA prints it: `nan`, or `nan(0x..)` when its payload is not the default quiet
/// NaN's, with `-` when the sign bit is set.
fn nan_text(bits: u64, width: u32, mantissa_bits: u32) -> String {
    let sign = if bits >> (width - 1) & 1 == 1 {
        "-"
    } else {
        ""
    };
    let payload = bits & ((1u64 << mantissa_bits) - 1);
    if payload == 1u64 << (mantissa_bits - 1) {
        format!("{sign}nan")
    } else {
        format!("{sign}nan({payload:#x})")
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
