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
            .ok_or_else(|| $c.error_at(pos, format!("'{text}' is not a valid {} value", $et)))?;
        let value = <$ty>::try_from(value).map_err(|_| out_of_range($c, pos, text, $et))?;
        $v.push(value);
    }};
}

/// XLA's words for a value the element type cannot hold.
fn out_of_range(c: &Cursor<'_>, pos: usize, text: &str, t: &str) -> ParseError {
    c.error_at(
        pos,
        format!(
            "'{text}' is out of range for literal's primitive type {}",
            t.to_uppercase()
        ),
    )
}

impl ElementSink {
    fn new(element_type: ElementType, capacity: usize) -> ElementSink {
        let mut data = ArrayData::zeros(element_type, 0);
        match &mut data {
            ArrayData::C64(v) => v.reserve(capacity),
            ArrayData::C128(v) => v.reserve(capacity),
            ArrayData::Narrow { bits, .. } => bits.reserve(capacity),
            computed => crate::literal::with_data!(computed, v => v.reserve(capacity)),
        }
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
            ArrayData::U64(v) => {
                // XLA reads u64 constants as 64-bit words: -1 is all ones.
                let (pos, text) = c.number_token()?;
                let value = parse_integer(text)
                    .ok_or_else(|| c.error_at(pos, format!("'{text}' is not a valid u64 value")))?;
                let word = if value < 0 {
                    i64::try_from(value).map(|x| x as u64).ok()
                } else {
                    u64::try_from(value).ok()
                };
                v.push(word.ok_or_else(|| out_of_range(c, pos, text, "u64"))?);
            }
            ArrayData::F16(v) => {
                let x = float_of(c, ElementType::F16)?;
                v.push(f16::from_bits(x as u16));
            }
            ArrayData::Bf16(v) => {
                let x = float_of(c, ElementType::Bf16)?;
                v.push(bf16::from_bits(x as u16));
            }
            ArrayData::F32(v) => v.push(f32::from_bits(float_of(c, ElementType::F32)? as u32)),
            ArrayData::F64(v) => v.push(f64::from_bits(float_of(c, ElementType::F64)?)),
            ArrayData::C64(v) => {
                let [re, im] = complex(c, ElementType::F32)?;
                v.push([f32::from_bits(re as u32), f32::from_bits(im as u32)]);
            }
            ArrayData::C128(v) => {
                let [re, im] = complex(c, ElementType::F64)?;
                v.push([f64::from_bits(re), f64::from_bits(im)]);
            }
            ArrayData::Narrow { element_type, bits } => {
                let t = *element_type;
                let (pos, text) = c.number_token()?;
                let bad = || c.error_at(pos, format!("'{text}' is not a valid {t} value"));
                let value = if t.is_float() {
                    let parsed = parse_float(text).ok_or_else(bad)?;
                    if let ParsedFloat::Nan {
                        payload: Some(p), ..
                    } = parsed
                    {
                        return Err(bad_payload(c, pos, p, t));
                    }
                    let value = parsed.as_f64();
                    if value.is_finite() && value.abs() > crate::narrow::max_finite(t) {
                        return Err(out_of_range(c, pos, text, t.name()));
                    }
                    if value.is_infinite() && !crate::narrow::has_infinity(t) {
                        return Err(out_of_range(c, pos, text, t.name()));
                    }
                    value
                } else {
                    parse_integer(text).ok_or_else(bad)? as f64
                };
                let encoded = crate::narrow::encode(t, value)
                    .ok_or_else(|| out_of_range(c, pos, text, t.name()))?;
                bits.push(encoded);
            }
        }
        Ok(())
    }

    fn finish(self) -> ArrayData {
        self.data
    }
}

/// `(re, im)`: the bit patterns of both parts, each of type `part`.
fn complex(c: &mut Cursor<'_>, part: ElementType) -> Result<[u64; 2]> {
    c.expect(b'(')?;
    let re = float_of(c, part)?;
    c.expect(b',')?;
    let im = float_of(c, part)?;
    c.expect(b')')?;
    Ok([re, im])
}

/// The next float element as the bit pattern of `t` (`f16`, `bf16`, `f32` or `f64`): XLA's
/// rules: a finite value beyond the type's range is an error (not an infinity), NaN payloads
/// must fit the mantissa.
fn float_of(c: &mut Cursor<'_>, t: ElementType) -> Result<u64> {
    let (pos, text) = c.number_token()?;
    let parsed = parse_float(text)
        .ok_or_else(|| c.error_at(pos, format!("'{text}' is not a valid {t} value")))?;
    let (width, mantissa_bits) = match t {
        ElementType::F16 | ElementType::Bf16 => (16, crate::narrow::nan_payload_bits(t)),
        ElementType::F32 => (32, Some(23)),
        _ => (64, Some(52)),
    };
    let mantissa_bits = mantissa_bits.expect("IEEE types carry NaN payloads") as u64;
    if let ParsedFloat::Nan { negative, payload } = parsed {
        let payload = payload.unwrap_or(1 << (mantissa_bits - 1));
        if payload == 0 || payload >> mantissa_bits != 0 {
            return Err(bad_payload(c, pos, payload, t));
        }
        let exponent_bits = width - 1 - mantissa_bits;
        let bits = ((negative as u64) << (width - 1))
            | (((1u64 << exponent_bits) - 1) << mantissa_bits)
            | payload;
        return Ok(bits);
    }
    let out_of_range_if = |overflowed: bool| {
        if overflowed && !parsed.is_infinite() {
            Err(out_of_range(c, pos, text, t.name()))
        } else {
            Ok(())
        }
    };
    // XLA's rule: a finite value that rounds to infinity in the type is out of range.
    Ok(match t {
        ElementType::F16 => {
            let x = f16::from_f64(parsed.as_f64());
            out_of_range_if(x.is_infinite())?;
            x.to_bits() as u64
        }
        ElementType::Bf16 => {
            let x = bf16::from_f64(parsed.as_f64());
            out_of_range_if(x.is_infinite())?;
            x.to_bits() as u64
        }
        ElementType::F32 => {
            let x = parsed.as_f32();
            out_of_range_if(x.is_infinite())?;
            x.to_bits() as u64
        }
        _ => {
            let x = parsed.as_f64();
            out_of_range_if(x.is_infinite())?;
            x.to_bits()
        }
    })
}

fn bad_payload(c: &Cursor<'_>, pos: usize, payload: u64, t: ElementType) -> ParseError {
    c.error_at(
        pos,
        format!(
            "{} tries to set NaN payload {payload:#x}, which it cannot hold",
            t.name()
        ),
    )
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
    /// `nan`, `-nan`, `nan(0x..)`.
    Nan {
        negative: bool,
        payload: Option<u64>,
    },
}

impl ParsedFloat<'_> {
    fn as_f32(&self) -> f32 {
        match self {
            ParsedFloat::Text(t) => t.parse::<f32>().unwrap_or(f32::NAN),
            ParsedFloat::Value(v) => *v as f32,
            ParsedFloat::Nan { negative: true, .. } => -f32::NAN,
            ParsedFloat::Nan { .. } => f32::NAN,
        }
    }

    fn as_f64(&self) -> f64 {
        match self {
            ParsedFloat::Text(t) => t.parse::<f64>().unwrap_or(f64::NAN),
            ParsedFloat::Value(v) => *v,
            ParsedFloat::Nan { negative: true, .. } => -f64::NAN,
            ParsedFloat::Nan { .. } => f64::NAN,
        }
    }

    /// Written as an infinity (`inf`, `-inf`), not a finite value that overflowed.
    fn is_infinite(&self) -> bool {
        matches!(self, ParsedFloat::Value(v) if v.is_infinite())
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
            return Some(ParsedFloat::Nan {
                negative,
                payload: None,
            });
        }
        _ => {}
    }
    if let Some(hex) = body
        .strip_prefix("nan(0x")
        .and_then(|rest| rest.strip_suffix(')'))
    {
        let payload = u64::from_str_radix(hex, 16).ok()?;
        return Some(ParsedFloat::Nan {
            negative,
            payload: Some(payload),
        });
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
