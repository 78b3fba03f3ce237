//! Parses the literal inside `constant(...)` against the instruction's declared shape.

use super::ParseError;
use super::cursor::Cursor;
use crate::literal::{ArrayData, ArrayLiteral, Literal};
use crate::shape::ArrayShape;
use crate::{ElementType, Shape};
use half::{bf16, f16};

type Result<T> = std::result::Result<T, ParseError>;

/// A literal of `shape`: a scalar, nested `{...}` per dimension, or `(...)` for tuples.
pub(crate) fn literal(c: &mut Cursor<'_>, shape: &Shape) -> Result<Literal> {
    match shape {
        Shape::Token => Err(c.expected("no constant of token shape")),
        Shape::Tuple(elems) => {
            c.expect(b'(')?;
            let mut out = Vec::with_capacity(elems.len());
            for (i, e) in elems.iter().enumerate() {
                if i > 0 {
                    c.expect(b',')?;
                }
                out.push(literal(c, e)?);
            }
            c.expect(b')')?;
            Ok(Literal::Tuple(out))
        }
        Shape::Array(a) => Ok(Literal::Array(array_literal(c, a)?)),
    }
}

fn array_literal(c: &mut Cursor<'_>, shape: &ArrayShape) -> Result<ArrayLiteral> {
    let start = c.pos();
    if c.eat_str("{...}") {
        return Err(c.error_at(
            start,
            "constant data was elided as {...}; re-dump the module with large constants printed",
        ));
    }
    let count = shape.element_count();
    // Every element takes at least one character, so a shape larger than the text left
    // is an error, not a reason to allocate.
    let capacity = (count as usize).min(1 << 20);
    let mut builder = ElementSink::new(shape.element_type, capacity);
    if shape.dims.is_empty() {
        builder.push(c)?;
    } else {
        level(c, shape, 0, &mut builder)?;
    }
    let data = builder.finish();
    ArrayLiteral::new(shape.clone(), data).map_err(|m| c.error_at(start, m))
}

fn level(
    c: &mut Cursor<'_>,
    shape: &ArrayShape,
    depth: usize,
    sink: &mut ElementSink,
) -> Result<()> {
    let open = c.pos();
    c.expect(b'{')?;
    let want = shape.dims[depth];
    let mut got = 0i64;
    if !c.eat(b'}') {
        loop {
            if depth + 1 == shape.dims.len() {
                sink.push(c)?;
            } else {
                level(c, shape, depth + 1, sink)?;
            }
            got += 1;
            if c.eat(b'}') {
                break;
            }
            if !c.eat(b',') {
                return Err(c.expected("',' or '}' in the constant"));
            }
        }
    }
    if got != want {
        return Err(c.error_at(
            open,
            format!(
                "constant has {got} elements in dimension {depth} but the shape {shape} has {want}"
            ),
        ));
    }
    Ok(())
}

/// Collects parsed elements of one element type.
struct ElementSink {
    data: ArrayData,
}

macro_rules! push_int {
    ($v:expr, $c:expr, $ty:ty, $et:expr) => {{
        let (pos, text) = $c.number_token()?;
        let value = parse_integer(text)
            .and_then(|v| <$ty>::try_from(v).ok())
            .ok_or_else(|| $c.error_at(pos, format!("'{text}' is not a valid {} value", $et)))?;
        $v.push(value);
    }};
}

impl ElementSink {
    fn new(element_type: ElementType, capacity: usize) -> ElementSink {
        let mut data = ArrayData::zeros(element_type, 0);
        crate::literal::with_data!(&mut data, v => v.reserve(capacity));
        ElementSink { data }
    }

    fn push(&mut self, c: &mut Cursor<'_>) -> Result<()> {
        match &mut self.data {
            ArrayData::Pred(v) => {
                let (pos, text) = c.number_token()?;
                v.push(match text {
                    "true" | "1" => true,
                    "false" | "0" => false,
                    _ => {
                        return Err(c.error_at(
                            pos,
                            format!("'{text}' is not a pred value (true, false, 1, 0)"),
                        ));
                    }
                });
            }
            ArrayData::S8(v) => push_int!(v, c, i8, "s8"),
            ArrayData::S16(v) => push_int!(v, c, i16, "s16"),
            ArrayData::S32(v) => push_int!(v, c, i32, "s32"),
            ArrayData::S64(v) => push_int!(v, c, i64, "s64"),
            ArrayData::U8(v) => push_int!(v, c, u8, "u8"),
            ArrayData::U16(v) => push_int!(v, c, u16, "u16"),
            ArrayData::U32(v) => push_int!(v, c, u32, "u32"),
            ArrayData::U64(v) => push_int!(v, c, u64, "u64"),
            ArrayData::F16(v) => v.push(f16::from_f64(float(c, "f16")?)),
            ArrayData::Bf16(v) => v.push(bf16::from_f64(float(c, "bf16")?)),
            ArrayData::F32(v) => {
                let (pos, text) = c.number_token()?;
                v.push(parse_float(text).map(|x| x.as_f32()).ok_or_else(|| {
                    c.error_at(pos, format!("'{text}' is not a valid f32 value"))
                })?);
            }
            ArrayData::F64(v) => v.push(float(c, "f64")?),
        }
        Ok(())
    }

    fn finish(self) -> ArrayData {
        self.data
    }
}

fn float(c: &mut Cursor<'_>, type_name: &str) -> Result<f64> {
    let (pos, text) = c.number_token()?;
    parse_float(text)
        .map(|x| x.as_f64())
        .ok_or_else(|| c.error_at(pos, format!("'{text}' is not a valid {type_name} value")))
}

/// An integer as written (decimal, or `true`/`false` for XLA's pred-as-int forms).
fn parse_integer(text: &str) -> Option<i128> {
    match text {
        "true" => Some(1),
        "false" => Some(0),
        _ => text.parse::<i128>().ok(),
    }
}

/// A float as written; kept as text-derived values so `f32` parses with a single rounding.
enum ParsedFloat<'a> {
    Text(&'a str),
    Value(f64),
}

impl ParsedFloat<'_> {
    fn as_f32(&self) -> f32 {
        match self {
            ParsedFloat::Text(t) => t.parse::<f32>().unwrap_or(f32::NAN),
            ParsedFloat::Value(v) => *v as f32,
        }
    }

    fn as_f64(&self) -> f64 {
        match self {
            ParsedFloat::Text(t) => t.parse::<f64>().unwrap_or(f64::NAN),
            ParsedFloat::Value(v) => *v,
        }
    }
}

fn parse_float(text: &str) -> Option<ParsedFloat<'_>> {
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let sign = if negative { -1.0 } else { 1.0 };
    match body {
        "inf" | "infinity" | "Inf" => return Some(ParsedFloat::Value(sign * f64::INFINITY)),
        "nan" | "NaN" => {
            return Some(ParsedFloat::Value(if negative {
                -f64::NAN
            } else {
                f64::NAN
            }));
        }
        _ => {}
    }
    if body.starts_with("nan(") {
        // A NaN with a payload: XLA prints `nan(0x...)`; the payload does not change results.
        return Some(ParsedFloat::Value(if negative {
            -f64::NAN
        } else {
            f64::NAN
        }));
    }
    let valid = !body.is_empty()
        && body
            .chars()
            .all(|ch| ch.is_ascii_digit() || matches!(ch, '.' | 'e' | 'E' | '-' | '+'))
        && body
            .chars()
            .next()
            .is_some_and(|ch| ch.is_ascii_digit() || ch == '.');
    (valid && text.parse::<f64>().is_ok()).then_some(ParsedFloat::Text(text))
}
