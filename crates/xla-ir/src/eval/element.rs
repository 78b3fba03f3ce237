//! Per-element semantics of the element-wise ops, with XLA's rules: integer arithmetic
//! wraps, division by zero and shifts past the width give XLA's defined results, min/max
//! propagate NaN, and 16-bit floats compute in f32 and round after every op.

use crate::op::{BinaryOp, UnaryOp};
use half::{bf16, f16};

/// A number as the conversion ops see it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Num {
    /// A boolean.
    Bool(bool),
    /// Any integer, exactly.
    Int(i128),
    /// Any float, exactly (every supported float type fits in f64).
    Float(f64),
}

/// A primitive element type with XLA's element-wise semantics.
pub(crate) trait Element: Copy + PartialEq + Send + Sync + 'static {
    /// `op(x)`, or `None` when the op does not apply to this type.
    fn unary(op: UnaryOp, x: Self) -> Option<Self>;
    /// `op(a, b)`, or `None` when the op does not apply to this type.
    fn binary(op: BinaryOp, a: Self, b: Self) -> Option<Self>;
    /// IEEE (or integer) ordering; `None` when unordered (NaN).
    fn partial(a: Self, b: Self) -> Option<std::cmp::Ordering>;
    /// XLA's total order (floats: -NaN < -Inf < ... < -0 < +0 < ... < Inf < NaN).
    fn total(a: Self, b: Self) -> std::cmp::Ordering;
    /// Whether a float is finite (always true for integers).
    fn is_finite(x: Self) -> bool;
    /// The value as a [`Num`].
    fn to_num(x: Self) -> Num;
    /// Converts with XLA's `convert` rules (float to int saturates, NaN becomes 0).
    fn from_num(n: Num) -> Self;
}

/// Float maths shared by f32 and f64.
macro_rules! float_element {
    ($t:ty, $erf:path, $bits:ty) => {
        impl Element for $t {
            fn unary(op: UnaryOp, x: $t) -> Option<$t> {
                Some(match op {
                    UnaryOp::Abs => x.abs(),
                    UnaryOp::Negate => -x,
                    UnaryOp::Sign => {
                        if x.is_nan() || x == 0.0 {
                            x
                        } else {
                            x.signum()
                        }
                    }
                    UnaryOp::Exp => x.exp(),
                    UnaryOp::Expm1 => x.exp_m1(),
                    UnaryOp::Log => x.ln(),
                    UnaryOp::Log1p => x.ln_1p(),
                    UnaryOp::Sqrt => x.sqrt(),
                    UnaryOp::Rsqrt => 1.0 / x.sqrt(),
                    UnaryOp::Cbrt => x.cbrt(),
                    UnaryOp::Tanh => x.tanh(),
                    UnaryOp::Logistic => 1.0 / (1.0 + (-x).exp()),
                    UnaryOp::Sine => x.sin(),
                    UnaryOp::Cosine => x.cos(),
                    UnaryOp::Tan => x.tan(),
                    UnaryOp::Erf => $erf(x),
                    UnaryOp::Floor => x.floor(),
                    UnaryOp::Ceil => x.ceil(),
                    UnaryOp::RoundNearestAfz => x.round(),
                    UnaryOp::RoundNearestEven => x.round_ties_even(),
                    UnaryOp::Copy => x,
                    UnaryOp::Not | UnaryOp::IsFinite | UnaryOp::Popcnt | UnaryOp::Clz => {
                        return None;
                    }
                })
            }

            #[inline(always)]
            fn binary(op: BinaryOp, a: $t, b: $t) -> Option<$t> {
                Some(match op {
                    BinaryOp::Add => a + b,
                    BinaryOp::Subtract => a - b,
                    BinaryOp::Multiply => a * b,
                    BinaryOp::Divide => a / b,
                    BinaryOp::Remainder => a % b,
                    BinaryOp::Power => a.powf(b),
                    BinaryOp::Atan2 => a.atan2(b),
                    BinaryOp::Maximum => {
                        if a.is_nan() || b.is_nan() {
                            <$t>::NAN
                        } else if a > b || (a == b && b.is_sign_negative()) {
                            a
                        } else {
                            b
                        }
                    }
                    BinaryOp::Minimum => {
                        if a.is_nan() || b.is_nan() {
                            <$t>::NAN
                        } else if a < b || (a == b && a.is_sign_negative()) {
                            a
                        } else {
                            b
                        }
                    }
                    _ => return None,
                })
            }

            fn partial(a: $t, b: $t) -> Option<std::cmp::Ordering> {
                a.partial_cmp(&b)
            }

            fn total(a: $t, b: $t) -> std::cmp::Ordering {
                a.total_cmp(&b)
            }

            fn is_finite(x: $t) -> bool {
                x.is_finite()
            }

            fn to_num(x: $t) -> Num {
                Num::Float(x as f64)
            }

            fn from_num(n: Num) -> $t {
                match n {
                    Num::Bool(b) => b as u8 as $t,
                    Num::Int(i) => i as $t,
                    Num::Float(f) => f as $t,
                }
            }
        }
    };
}

float_element!(f32, libm::erff, u32);
float_element!(f64, libm::erf, u64);

/// 16-bit floats compute in f32 and round the result back, as XLA's CPU backend does.
macro_rules! half_element {
    ($t:ty) => {
        impl Element for $t {
            fn unary(op: UnaryOp, x: $t) -> Option<$t> {
                f32::unary(op, x.to_f32()).map(<$t>::from_f32)
            }

            fn binary(op: BinaryOp, a: $t, b: $t) -> Option<$t> {
                f32::binary(op, a.to_f32(), b.to_f32()).map(<$t>::from_f32)
            }

            fn partial(a: $t, b: $t) -> Option<std::cmp::Ordering> {
                a.partial_cmp(&b)
            }

            fn total(a: $t, b: $t) -> std::cmp::Ordering {
                a.to_f32().total_cmp(&b.to_f32())
            }

            fn is_finite(x: $t) -> bool {
                x.is_finite()
            }

            fn to_num(x: $t) -> Num {
                Num::Float(x.to_f64())
            }

            fn from_num(n: Num) -> $t {
                match n {
                    Num::Bool(b) => <$t>::from_f32(b as u8 as f32),
                    // Integers round once, straight to the 16-bit type.
                    Num::Int(i) => <$t>::from_f64(i as f64),
                    Num::Float(f) => <$t>::from_f64(f),
                }
            }
        }
    };
}

half_element!(f16);
half_element!(bf16);

/// Integer maths with XLA's wrap-around, division and shift rules.
macro_rules! int_element {
    ($t:ty, $unsigned:ty, $signed:expr) => {
        impl Element for $t {
            fn unary(op: UnaryOp, x: $t) -> Option<$t> {
                Some(match op {
                    UnaryOp::Abs => {
                        if $signed {
                            (x as i128).unsigned_abs() as $t
                        } else {
                            x
                        }
                    }
                    UnaryOp::Negate => x.wrapping_neg(),
                    UnaryOp::Sign => {
                        if x == 0 {
                            0
                        } else if $signed && (x as i128) < 0 {
                            (-1i128) as $t
                        } else {
                            1
                        }
                    }
                    UnaryOp::Not => !x,
                    UnaryOp::Popcnt => x.count_ones() as $t,
                    UnaryOp::Clz => x.leading_zeros() as $t,
                    UnaryOp::Copy => x,
                    _ => return None,
                })
            }

            fn binary(op: BinaryOp, a: $t, b: $t) -> Option<$t> {
                let bits = <$t>::BITS as u64;
                Some(match op {
                    BinaryOp::Add => a.wrapping_add(b),
                    BinaryOp::Subtract => a.wrapping_sub(b),
                    BinaryOp::Multiply => a.wrapping_mul(b),
                    // x / 0 is -1 (all ones); MIN / -1 wraps to MIN.
                    BinaryOp::Divide => {
                        if b == 0 {
                            (-1i128) as $t
                        } else {
                            a.wrapping_div(b)
                        }
                    }
                    // x % 0 is x; MIN % -1 is 0.
                    BinaryOp::Remainder => {
                        if b == 0 {
                            a
                        } else {
                            a.wrapping_rem(b)
                        }
                    }
                    BinaryOp::Power => int_power(a as i128, b as i128, $signed) as $t,
                    BinaryOp::Maximum => a.max(b),
                    BinaryOp::Minimum => a.min(b),
                    BinaryOp::And => a & b,
                    BinaryOp::Or => a | b,
                    BinaryOp::Xor => a ^ b,
                    // Shift amounts are read as unsigned; past the width the bits are gone.
                    BinaryOp::ShiftLeft => {
                        if (b as $unsigned as u64) >= bits {
                            0
                        } else {
                            a.wrapping_shl(b as u32)
                        }
                    }
                    BinaryOp::ShiftRightLogical => {
                        if (b as $unsigned as u64) >= bits {
                            0
                        } else {
                            ((a as $unsigned) >> (b as u32)) as $t
                        }
                    }
                    BinaryOp::ShiftRightArithmetic => {
                        let shift = if (b as $unsigned as u64) >= bits {
                            bits - 1
                        } else {
                            b as $unsigned as u64
                        };
                        if $signed {
                            a >> shift
                        } else {
                            // Arithmetic shift of an unsigned value: the top bit is the sign.
                            (((a as $unsigned as i128) << (128 - bits) >> (128 - bits) >> shift)
                                as $t)
                        }
                    }
                    BinaryOp::Atan2 => return None,
                })
            }

            fn partial(a: $t, b: $t) -> Option<std::cmp::Ordering> {
                Some(a.cmp(&b))
            }

            fn total(a: $t, b: $t) -> std::cmp::Ordering {
                a.cmp(&b)
            }

            fn is_finite(_: $t) -> bool {
                true
            }

            fn to_num(x: $t) -> Num {
                Num::Int(x as i128)
            }

            fn from_num(n: Num) -> $t {
                match n {
                    Num::Bool(b) => b as $t,
                    Num::Int(i) => i as $t,
                    // Rust's float-to-int `as` saturates and maps NaN to 0, as XLA does.
                    Num::Float(f) => f as $t,
                }
            }
        }
    };
}

int_element!(i8, u8, true);
int_element!(i16, u16, true);
int_element!(i32, u32, true);
int_element!(i64, u64, true);
int_element!(u8, u8, false);
int_element!(u16, u16, false);
int_element!(u32, u32, false);
int_element!(u64, u64, false);

/// Integer power by squaring with wrap-around; negative exponents give 0 except for ±1.
fn int_power(base: i128, exp: i128, signed: bool) -> i128 {
    if signed && exp < 0 {
        return match base {
            1 => 1,
            -1 => {
                if exp % 2 == 0 {
                    1
                } else {
                    -1
                }
            }
            _ => 0,
        };
    }
    let (mut result, mut b, mut e) = (1i128, base, exp as u128);
    while e > 0 {
        if e & 1 == 1 {
            result = result.wrapping_mul(b);
        }
        b = b.wrapping_mul(b);
        e >>= 1;
    }
    result
}

impl Element for bool {
    fn unary(op: UnaryOp, x: bool) -> Option<bool> {
        match op {
            UnaryOp::Not => Some(!x),
            UnaryOp::Copy => Some(x),
            _ => None,
        }
    }

    fn binary(op: BinaryOp, a: bool, b: bool) -> Option<bool> {
        Some(match op {
            BinaryOp::And | BinaryOp::Minimum => a & b,
            BinaryOp::Or | BinaryOp::Maximum => a | b,
            BinaryOp::Xor => a ^ b,
            _ => return None,
        })
    }

    fn partial(a: bool, b: bool) -> Option<std::cmp::Ordering> {
        Some(a.cmp(&b))
    }

    fn total(a: bool, b: bool) -> std::cmp::Ordering {
        a.cmp(&b)
    }

    fn is_finite(_: bool) -> bool {
        true
    }

    fn to_num(x: bool) -> Num {
        Num::Bool(x)
    }

    fn from_num(n: Num) -> bool {
        match n {
            Num::Bool(b) => b,
            Num::Int(i) => i != 0,
            Num::Float(f) => f != 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_division_follows_xla() {
        assert_eq!(i32::binary(BinaryOp::Divide, 7, 0), Some(-1));
        assert_eq!(u32::binary(BinaryOp::Divide, 7, 0), Some(u32::MAX));
        assert_eq!(i32::binary(BinaryOp::Divide, i32::MIN, -1), Some(i32::MIN));
        assert_eq!(i32::binary(BinaryOp::Remainder, 7, 0), Some(7));
        assert_eq!(i32::binary(BinaryOp::Remainder, i32::MIN, -1), Some(0));
        assert_eq!(i32::binary(BinaryOp::Remainder, -7, 2), Some(-1));
    }

    #[test]
    fn shifts_past_the_width() {
        assert_eq!(i32::binary(BinaryOp::ShiftLeft, 1, 32), Some(0));
        assert_eq!(i32::binary(BinaryOp::ShiftRightLogical, -1, 40), Some(0));
        assert_eq!(
            i32::binary(BinaryOp::ShiftRightArithmetic, -8, 40),
            Some(-1)
        );
        assert_eq!(i32::binary(BinaryOp::ShiftRightArithmetic, -8, 1), Some(-4));
        assert_eq!(i32::binary(BinaryOp::ShiftLeft, 1, -1), Some(0));
        assert_eq!(
            u8::binary(BinaryOp::ShiftRightArithmetic, 0x80, 1),
            Some(0xC0)
        );
    }

    #[test]
    fn nan_propagates_through_min_and_max() {
        assert!(
            f32::binary(BinaryOp::Maximum, f32::NAN, 1.0)
                .unwrap()
                .is_nan()
        );
        assert!(
            f32::binary(BinaryOp::Minimum, 1.0, f32::NAN)
                .unwrap()
                .is_nan()
        );
        assert_eq!(
            f32::binary(BinaryOp::Maximum, -0.0, 0.0).map(f32::is_sign_positive),
            Some(true)
        );
    }

    #[test]
    fn conversions_saturate() {
        assert_eq!(i32::from_num(Num::Float(1e20)), i32::MAX);
        assert_eq!(i32::from_num(Num::Float(f64::NAN)), 0);
        assert_eq!(u8::from_num(Num::Int(300)), 44);
        assert!(bool::from_num(Num::Float(f64::NAN)));
        assert_eq!(int_power(3, 4, true), 81);
        assert_eq!(int_power(2, -1, true), 0);
    }
}
