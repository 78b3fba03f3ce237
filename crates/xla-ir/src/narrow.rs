//! Values of the element types narrower than a byte or than `f16` (2- and 4-bit integers,
//! XLA's 8- and 4-bit floats): each element is its bit pattern in one byte, decoded to and
//! encoded from `f64` here. ipuxla reads, checks and prints these types; it does not compute
//! with them.

use crate::ElementType;

/// How a narrow float type lays out its bits.
#[derive(Debug, Clone, Copy)]
struct FloatFormat {
    exponent_bits: u32,
    mantissa_bits: u32,
    bias: i32,
    signed: bool,
    /// IEEE-like: the all-ones exponent holds infinities and NaNs.
    ieee: bool,
    /// `fn`: no infinities; the all-ones pattern (per sign) is NaN.
    finite_nan_all_ones: bool,
    /// `fnuz`: no infinities, no negative zero; the negative-zero pattern is the NaN.
    unsigned_zero: bool,
}

fn format_of(t: ElementType) -> Option<FloatFormat> {
    let f = |exponent_bits, mantissa_bits, bias, ieee, fnan, uz| FloatFormat {
        exponent_bits,
        mantissa_bits,
        bias,
        signed: true,
        ieee,
        finite_nan_all_ones: fnan,
        unsigned_zero: uz,
    };
    Some(match t {
        ElementType::F4e2m1fn => f(2, 1, 1, false, false, false),
        ElementType::F8e3m4 => f(3, 4, 3, true, false, false),
        ElementType::F8e4m3 => f(4, 3, 7, true, false, false),
        ElementType::F8e4m3fn => f(4, 3, 7, false, true, false),
        ElementType::F8e4m3fnuz => f(4, 3, 8, false, false, true),
        ElementType::F8e4m3b11fnuz => f(4, 3, 11, false, false, true),
        ElementType::F8e5m2 => f(5, 2, 15, true, false, false),
        ElementType::F8e5m2fnuz => f(5, 2, 16, false, false, true),
        ElementType::F8e8m0fnu => FloatFormat {
            exponent_bits: 8,
            mantissa_bits: 0,
            bias: 127,
            signed: false,
            ieee: false,
            finite_nan_all_ones: true,
            unsigned_zero: false,
        },
        _ => return None,
    })
}

/// The value of bit pattern `bits` of a narrow type (integers as exact `f64`s).
pub fn decode(t: ElementType, bits: u8) -> f64 {
    match t {
        ElementType::S2 => (((bits << 6) as i8) >> 6) as f64,
        ElementType::S4 => (((bits << 4) as i8) >> 4) as f64,
        ElementType::U2 => (bits & 0x3) as f64,
        ElementType::U4 => (bits & 0xf) as f64,
        _ => decode_float(
            format_of(t).expect("decode is called for narrow types only"),
            bits,
        ),
    }
}

fn decode_float(f: FloatFormat, bits: u8) -> f64 {
    let total = f.exponent_bits + f.mantissa_bits + f.signed as u32;
    let bits = (bits as u32) & ((1 << total) - 1);
    let negative = f.signed && bits >> (total - 1) == 1;
    let exponent = (bits >> f.mantissa_bits) & ((1 << f.exponent_bits) - 1);
    let mantissa = bits & ((1 << f.mantissa_bits) - 1);
    let max_exponent = (1 << f.exponent_bits) - 1;
    let sign = if negative { -1.0 } else { 1.0 };
    if f.unsigned_zero && negative && exponent == 0 && mantissa == 0 {
        return f64::NAN;
    }
    if f.ieee && exponent == max_exponent {
        return if mantissa == 0 {
            sign * f64::INFINITY
        } else {
            sign * f64::NAN
        };
    }
    if f.finite_nan_all_ones && exponent == max_exponent && mantissa == (1 << f.mantissa_bits) - 1 {
        return sign * f64::NAN;
    }
    let scale = |e: i32| 2f64.powi(e);
    let m = mantissa as f64 / (1u32 << f.mantissa_bits) as f64;
    if exponent == 0 && f.mantissa_bits > 0 {
        sign * m * scale(1 - f.bias)
    } else {
        sign * (1.0 + m) * scale(exponent as i32 - f.bias)
    }
}

/// The largest finite value of a narrow float type.
pub fn max_finite(t: ElementType) -> f64 {
    (0..=255u8)
        .map(|b| decode(t, b))
        .filter(|v| v.is_finite())
        .fold(f64::MIN, f64::max)
}

/// True when the type has infinities.
pub fn has_infinity(t: ElementType) -> bool {
    format_of(t).is_some_and(|f| f.ieee)
}

/// The bit pattern of `value` in a narrow type: integers must fit exactly; floats round to
/// the nearest value (ties to an even mantissa); NaN keeps its sign where the type can.
pub fn encode(t: ElementType, value: f64) -> Option<u8> {
    let int_range = match t {
        ElementType::S2 => Some((-2.0, 1.0)),
        ElementType::S4 => Some((-8.0, 7.0)),
        ElementType::U2 => Some((0.0, 3.0)),
        ElementType::U4 => Some((0.0, 15.0)),
        _ => None,
    };
    if let Some((lo, hi)) = int_range {
        if value.fract() != 0.0 || value < lo || value > hi {
            return None;
        }
        let mask = (1u16 << t.bit_width()) - 1;
        return Some(((value as i16) as u16 & mask) as u8);
    }
    let patterns = 1u16 << t.bit_width();
    if value.is_nan() {
        return (0..patterns)
            .map(|b| b as u8)
            .filter(|&b| decode(t, b).is_nan())
            .max_by_key(|&b| {
                (
                    decode(t, b).is_sign_negative() == value.is_sign_negative(),
                    b,
                )
            });
    }
    if value.is_infinite() {
        return (0..patterns)
            .map(|b| b as u8)
            .find(|&b| decode(t, b) == value);
    }
    let unsigned_zero = format_of(t).is_some_and(|f| f.unsigned_zero);
    let mut best: Option<(u8, f64)> = None;
    for b in 0..patterns {
        let b = b as u8;
        let v = decode(t, b);
        let wrong_zero =
            v == 0.0 && v.is_sign_negative() != value.is_sign_negative() && !unsigned_zero;
        if v.is_nan() || v.is_infinite() || wrong_zero {
            continue;
        }
        let d = (v - value).abs();
        let better = match best {
            None => true,
            Some((bb, bd)) => d < bd || (d == bd && b & 1 == 0 && bb & 1 == 1),
        };
        if better {
            best = Some((b, d));
        }
    }
    best.map(|(b, _)| b)
}

/// The largest NaN payload an IEEE-like type can carry; `None` for types whose NaN has one
/// fixed encoding (`fn`, `fnuz`) and for non-float types.
pub fn nan_payload_bits(t: ElementType) -> Option<u32> {
    match t {
        ElementType::F16 => Some(10),
        ElementType::Bf16 => Some(7),
        ElementType::F32 => Some(23),
        ElementType::F64 => Some(52),
        _ => format_of(t).filter(|f| f.ieee).map(|f| f.mantissa_bits),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        assert_eq!(max_finite(ElementType::F8e4m3fn), 448.0);
        assert_eq!(max_finite(ElementType::F8e5m2), 57344.0);
        assert_eq!(max_finite(ElementType::F8e4m3b11fnuz), 30.0);
        assert_eq!(max_finite(ElementType::F4e2m1fn), 6.0);
        assert!(decode(ElementType::F8e4m3fn, 0x7f).is_nan());
        assert!(decode(ElementType::F8e4m3b11fnuz, 0x80).is_nan());
        assert_eq!(decode(ElementType::S4, 0x8), -8.0);
        assert_eq!(decode(ElementType::F8e8m0fnu, 127), 1.0);
    }

    #[test]
    fn encode_round_trips_every_value() {
        for t in ElementType::ALL
            .into_iter()
            .filter(|t| t.bit_width() <= 8 && !t.is_computed())
        {
            for b in 0..(1u16 << t.bit_width()) {
                let v = decode(t, b as u8);
                let back = encode(t, v).unwrap_or_else(|| panic!("{t} {b:#x}"));
                let again = decode(t, back);
                assert!(
                    (v.is_nan() && again.is_nan()) || (v == again),
                    "{t}: {b:#x} -> {v} -> {back:#x}"
                );
            }
        }
        assert_eq!(encode(ElementType::U4, 16.0), None);
        assert_eq!(encode(ElementType::S4, -9.0), None);
        assert_eq!(
            decode(
                ElementType::F8e4m3fn,
                encode(ElementType::F8e4m3fn, 7.0).unwrap()
            ),
            7.0
        );
    }
}
