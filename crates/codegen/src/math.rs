//! Transcendental functions as vectorisable approximations, written once over [`Emitter`].
//!
//! The same routine runs as plain Rust on `f32` ([`HostEmitter`], used to measure accuracy
//! against `std` in ulps) and emits Cranelift IR on scalars or `f32x4` lanes (the JIT's
//! emitter), so what is measured is what the kernels compute. Range reductions and
//! polynomials follow Cephes (`expf`, `logf`, `tanhf`, `sinf`/`cosf`); only branch-free
//! operations are used, so four lanes compute at once. `log` and `log1p` evaluate in the
//! order XLA's CPU backend does, fused multiply-adds included, so they give XLA's bits
//! (checked against XLA's own results on 400,000 inputs: jax 0.10.2).
//!
//! Accuracy (max error, in ulps of the correctly rounded result, measured by the tests in
//! this file over special values, subnormals and millions of random inputs):
//!
//! | function | ulps | domain of the bound |
//! |---|---|---|
//! | exp | 2 | all f32 |
//! | log | 2 | all f32 |
//! | expm1, log1p | 4 | all f32 |
//! | tanh, logistic | 4 | all f32 |
//! | sin, cos | 3 | \|x\| ≤ 8192 (larger arguments lose accuracy to range reduction) |
//! | tan | 4 | \|x\| ≤ 8192, away from poles |
//! | erf | 4 | all f32 |
//! | cbrt | 2 | all f32 |
//! | atan2 | 4 | all f32 pairs |
//! | pow | 8 | all f32 pairs whose result is normal |

// Polynomial coefficients are quoted as published (Cephes), not rounded to f32 by hand.
#![allow(clippy::excessive_precision)]

use crate::kernel::UnaryOp;

/// The operations the approximations need, on one value or on a vector of lanes.
pub trait Emitter {
    /// A float value (one lane or several).
    type F: Copy;
    /// An i32 value with as many lanes.
    type I: Copy;
    /// A per-lane condition.
    type M: Copy;

    /// A float constant.
    fn f(&mut self, v: f32) -> Self::F;
    /// An integer constant.
    fn i(&mut self, v: i32) -> Self::I;
    /// a + b.
    fn add(&mut self, a: Self::F, b: Self::F) -> Self::F;
    /// a - b.
    fn sub(&mut self, a: Self::F, b: Self::F) -> Self::F;
    /// a * b.
    fn mul(&mut self, a: Self::F, b: Self::F) -> Self::F;
    /// a · b + c, rounded once (a fused multiply-add).
    fn fma(&mut self, a: Self::F, b: Self::F, c: Self::F) -> Self::F;
    /// a / b.
    fn div(&mut self, a: Self::F, b: Self::F) -> Self::F;
    /// |a|.
    fn abs(&mut self, a: Self::F) -> Self::F;
    /// Round half to even.
    fn nearest(&mut self, a: Self::F) -> Self::F;
    /// a < b.
    fn lt(&mut self, a: Self::F, b: Self::F) -> Self::M;
    /// a == b (false for NaN).
    fn eq(&mut self, a: Self::F, b: Self::F) -> Self::M;
    /// Integer a == b.
    fn ieq(&mut self, a: Self::I, b: Self::I) -> Self::M;
    /// m ? a : b.
    fn select(&mut self, m: Self::M, a: Self::F, b: Self::F) -> Self::F;
    /// The bits of a float.
    fn float_to_bits(&mut self, a: Self::F) -> Self::I;
    /// The float with these bits.
    fn bits_to_float(&mut self, a: Self::I) -> Self::F;
    /// Integer a + b (wrapping).
    fn iadd(&mut self, a: Self::I, b: Self::I) -> Self::I;
    /// Integer a - b (wrapping).
    fn isub(&mut self, a: Self::I, b: Self::I) -> Self::I;
    /// a & b.
    fn iand(&mut self, a: Self::I, b: Self::I) -> Self::I;
    /// a | b.
    fn ior(&mut self, a: Self::I, b: Self::I) -> Self::I;
    /// a ^ b.
    fn ixor(&mut self, a: Self::I, b: Self::I) -> Self::I;
    /// a << s.
    fn ishl(&mut self, a: Self::I, s: u8) -> Self::I;
    /// a >> s (arithmetic).
    fn isra(&mut self, a: Self::I, s: u8) -> Self::I;
    /// The larger of a and b (signed).
    fn imax(&mut self, a: Self::I, b: Self::I) -> Self::I;
    /// The smaller of a and b (signed).
    fn imin(&mut self, a: Self::I, b: Self::I) -> Self::I;
    /// Float to integer, truncating and saturating (NaN → 0).
    fn to_int(&mut self, a: Self::F) -> Self::I;
    /// Integer to float.
    fn to_float(&mut self, a: Self::I) -> Self::F;
}

/// Plain Rust on one `f32`: the routines' meaning, used to measure their accuracy.
pub struct HostEmitter;

impl Emitter for HostEmitter {
    type F = f32;
    type I = i32;
    type M = bool;

    fn f(&mut self, v: f32) -> f32 {
        v
    }
    fn i(&mut self, v: i32) -> i32 {
        v
    }
    fn add(&mut self, a: f32, b: f32) -> f32 {
        a + b
    }
    fn sub(&mut self, a: f32, b: f32) -> f32 {
        a - b
    }
    fn mul(&mut self, a: f32, b: f32) -> f32 {
        a * b
    }
    fn fma(&mut self, a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
    fn div(&mut self, a: f32, b: f32) -> f32 {
        a / b
    }
    fn abs(&mut self, a: f32) -> f32 {
        a.abs()
    }
    fn nearest(&mut self, a: f32) -> f32 {
        a.round_ties_even()
    }
    fn lt(&mut self, a: f32, b: f32) -> bool {
        a < b
    }
    fn eq(&mut self, a: f32, b: f32) -> bool {
        a == b
    }
    fn ieq(&mut self, a: i32, b: i32) -> bool {
        a == b
    }
    fn select(&mut self, m: bool, a: f32, b: f32) -> f32 {
        if m { a } else { b }
    }
    fn float_to_bits(&mut self, a: f32) -> i32 {
        a.to_bits() as i32
    }
    fn bits_to_float(&mut self, a: i32) -> f32 {
        f32::from_bits(a as u32)
    }
    fn iadd(&mut self, a: i32, b: i32) -> i32 {
        a.wrapping_add(b)
    }
    fn isub(&mut self, a: i32, b: i32) -> i32 {
        a.wrapping_sub(b)
    }
    fn iand(&mut self, a: i32, b: i32) -> i32 {
        a & b
    }
    fn ior(&mut self, a: i32, b: i32) -> i32 {
        a | b
    }
    fn ixor(&mut self, a: i32, b: i32) -> i32 {
        a ^ b
    }
    fn ishl(&mut self, a: i32, s: u8) -> i32 {
        a.wrapping_shl(s as u32)
    }
    fn isra(&mut self, a: i32, s: u8) -> i32 {
        a >> s
    }
    fn imax(&mut self, a: i32, b: i32) -> i32 {
        a.max(b)
    }
    fn imin(&mut self, a: i32, b: i32) -> i32 {
        a.min(b)
    }
    fn to_int(&mut self, a: f32) -> i32 {
        a as i32
    }
    fn to_float(&mut self, a: i32) -> f32 {
        a as f32
    }
}

/// The transcendental ops [`unary`] computes (all but `RoundF16`, the rounding it also
/// computes): the ops `crate::wide_math` runs on sixteen lanes.
pub const TRANSCENDENTAL: [UnaryOp; 11] = [
    UnaryOp::Exp,
    UnaryOp::Expm1,
    UnaryOp::Log,
    UnaryOp::Log1p,
    UnaryOp::Tanh,
    UnaryOp::Logistic,
    UnaryOp::Cbrt,
    UnaryOp::Sin,
    UnaryOp::Cos,
    UnaryOp::Tan,
    UnaryOp::Erf,
];

/// `op` of `x` when `op` is one of the routines here (`None`, and nothing emitted, for any
/// other op): the one mapping from kernel ops to routines, shared by the JIT, the
/// reference and [`crate::wide_math`].
#[inline(always)]
pub fn unary<E: Emitter>(e: &mut E, op: UnaryOp, x: E::F) -> Option<E::F> {
    Some(match op {
        UnaryOp::Exp => exp(e, x),
        UnaryOp::Expm1 => expm1(e, x),
        UnaryOp::Log => log(e, x),
        UnaryOp::Log1p => log1p(e, x),
        UnaryOp::Tanh => tanh(e, x),
        UnaryOp::Logistic => logistic(e, x),
        UnaryOp::Cbrt => cbrt(e, x),
        UnaryOp::Sin => sin(e, x),
        UnaryOp::Cos => cos(e, x),
        UnaryOp::Tan => tan(e, x),
        UnaryOp::Erf => erf(e, x),
        UnaryOp::RoundF16 => round_to_f16(e, x),
        _ => return None,
    })
}

/// Horner evaluation of `coeffs[0] x^(n-1) + ... + coeffs[n-1]`.
#[inline(always)]
fn poly<E: Emitter>(e: &mut E, x: E::F, coeffs: &[f32]) -> E::F {
    let mut acc = e.f(coeffs[0]);
    for &c in &coeffs[1..] {
        let m = e.mul(acc, x);
        let k = e.f(c);
        acc = e.add(m, k);
    }
    acc
}

/// a with the sign of s.
#[inline(always)]
pub fn copysign<E: Emitter>(e: &mut E, a: E::F, s: E::F) -> E::F {
    let (ab, sb) = (e.float_to_bits(a), e.float_to_bits(s));
    let (mag, sign) = (e.i(0x7fff_ffff), e.i(i32::MIN));
    let m = e.iand(ab, mag);
    let s = e.iand(sb, sign);
    let bits = e.ior(m, s);
    e.bits_to_float(bits)
}

#[inline(always)]
fn is_nan<E: Emitter>(e: &mut E, a: E::F) -> E::M {
    // NaN is the only value not equal to itself: select on the comparison's complement.
    let not_nan = e.eq(a, a);
    let one = e.f(1.0);
    let zero = e.f(0.0);
    let flag = e.select(not_nan, zero, one);
    e.lt(zero, flag)
}

/// 2^n for integer-valued n in [-126, 127], by building the exponent field (n = -127
/// gives +0: a zero field with a zero mantissa).
#[inline(always)]
fn pow2<E: Emitter>(e: &mut E, n: E::I) -> E::F {
    let bias = e.i(127);
    let biased = e.iadd(n, bias);
    let bits = e.ishl(biased, 23);
    e.bits_to_float(bits)
}

/// e^r for |r| ≤ ln 2 / 2 (Cephes `expf`'s polynomial).
#[inline(always)]
fn exp_reduced<E: Emitter>(e: &mut E, r: E::F) -> E::F {
    let p = poly(
        e,
        r,
        &[
            1.987_569_1e-4,
            1.398_199_9e-3,
            8.333_452e-3,
            4.166_579_6e-2,
            1.666_666_5e-1,
            5.000_000_1e-1,
        ],
    );
    let rr = e.mul(r, r);
    let p = e.mul(p, rr);
    let p = e.add(p, r);
    let one = e.f(1.0);
    e.add(p, one)
}

/// e^x.
#[inline(always)]
pub fn exp<E: Emitter>(e: &mut E, x: E::F) -> E::F {
    let (lo, hi) = (e.f(-104.0), e.f(89.0));
    // Below -104 the result rounds to +0. Such lanes are moved to -176, where n is -254
    // and both scale factors below are 2^-127's bits, that is +0: the lane's product is
    // an exact +0 with no operation on a subnormal. (Clamped to -104, as they were, their
    // last multiply had a result below the normals, for which x86 takes a microcode assist
    // on every vector operation: softmax's far-negative inputs ran five times slower.
    // Results between -104 and -87.3 are subnormal and still take it.) Above 89, clamp:
    // the scaling overflows to +inf.
    let far_below = e.f(-176.0);
    let below = e.lt(x, lo);
    let xc = e.select(below, far_below, x);
    let above = e.lt(hi, xc);
    let xc = e.select(above, hi, xc);
    let log2e = e.f(std::f32::consts::LOG2_E);
    let t = e.mul(xc, log2e);
    let n = e.nearest(t);
    let (c1, c2) = (e.f(0.693_359_4), e.f(-2.121_944_4e-4));
    let nc1 = e.mul(n, c1);
    let r = e.sub(xc, nc1);
    let nc2 = e.mul(n, c2);
    let r = e.sub(r, nc2);
    let y = exp_reduced(e, r);
    // Scale by 2^n in two steps so subnormal results round once.
    let ni = e.to_int(n);
    let n1 = e.isra(ni, 1);
    let n2 = e.isub(ni, n1);
    let s1 = pow2(e, n1);
    let s2 = pow2(e, n2);
    let y = e.mul(y, s1);
    let y = e.mul(y, s2);
    let nan = is_nan(e, x);
    e.select(nan, x, y)
}

/// Where [`exponent_and_mantissa`] puts the mantissa.
#[derive(Clone, Copy, PartialEq)]
enum MantissaRange {
    /// m in [0.5, 1).
    Half,
    /// m in [1, 2).
    One,
}

/// x = m · 2^e for finite positive x (subnormals included), with e as a float.
#[inline(always)]
fn exponent_and_mantissa<E: Emitter>(e: &mut E, x: E::F, range: MantissaRange) -> (E::F, E::F) {
    // Subnormals: scale into the normal range first.
    let min_normal = e.f(f32::MIN_POSITIVE);
    let sub = e.lt(x, min_normal);
    let scale = e.f(8_388_608.0);
    let scaled = e.mul(x, scale);
    let xs = e.select(sub, scaled, x);
    let adj_sub = e.f(-23.0);
    let zero = e.f(0.0);
    let adj = e.select(sub, adj_sub, zero);
    let bits = e.float_to_bits(xs);
    let shifted = e.isra(bits, 23);
    let mask = e.i(0xff);
    let biased = e.iand(shifted, mask);
    let (bias, exponent_bits) = match range {
        MantissaRange::Half => (126, 0x3f00_0000),
        MantissaRange::One => (127, 0x3f80_0000),
    };
    let k = e.i(bias);
    let ei = e.isub(biased, k);
    let ef = e.to_float(ei);
    let ef = e.add(ef, adj);
    let mant_mask = e.i(0x007f_ffff);
    let mant = e.iand(bits, mant_mask);
    let field = e.i(exponent_bits);
    let mbits = e.ior(mant, field);
    (ef, e.bits_to_float(mbits))
}

/// ln x: Cephes' `logf` in the order XLA's CPU backend evaluates it (its `GenerateVF32Log`:
/// the polynomial as three interleaved Horner chains of fused multiply-adds), so a log
/// matches XLA's bit for bit on normal inputs. (Subnormal inputs are scaled into range
/// here; XLA's CPU backend takes them as 2^-126.)
#[inline(always)]
pub fn log<E: Emitter>(e: &mut E, x: E::F) -> E::F {
    let (ef, m) = exponent_and_mantissa(e, x, MantissaRange::Half);
    let zero = e.f(0.0);
    let one = e.f(1.0);
    // m in [0.5, 1): below sqrt(1/2) use 2m - 1 and one exponent less, else m - 1.
    let sqrt_half = e.f(std::f32::consts::FRAC_1_SQRT_2);
    let small = e.lt(m, sqrt_half);
    let m_if_small = e.select(small, m, zero);
    let one_if_small = e.select(small, one, zero);
    let m1 = e.sub(m, one);
    let ef = e.sub(ef, one_if_small);
    let m = e.add(m1, m_if_small);
    let x2 = e.mul(m, m);
    let x3 = e.mul(x2, m);
    let c = |e: &mut E, v: f32| e.f(v);
    let (p0, p1, p2) = (
        c(e, 7.037_683_6e-2),
        c(e, -1.151_461e-1),
        c(e, 1.167_699_9e-1),
    );
    let (p3, p4, p5) = (
        c(e, -1.242_014_1e-1),
        c(e, 1.424_932_3e-1),
        c(e, -1.666_805_8e-1),
    );
    let (p6, p7, p8) = (
        c(e, 2.000_071_4e-1),
        c(e, -2.499_999_4e-1),
        c(e, 3.333_333_1e-1),
    );
    let y = e.fma(m, p0, p1);
    let y1 = e.fma(m, p3, p4);
    let y2 = e.fma(m, p6, p7);
    let y = e.fma(y, m, p2);
    let y1 = e.fma(y1, m, p5);
    let y2 = e.fma(y2, m, p8);
    let y = e.fma(y, x3, y1);
    let y = e.fma(y, x3, y2);
    let q1 = e.f(-2.121_944_4e-4);
    let eq1 = e.mul(q1, ef);
    let y = e.fma(y, x3, eq1);
    let halfv = e.f(0.5);
    let hx2 = e.mul(halfv, x2);
    let m = e.sub(m, hx2);
    let r = e.add(m, y);
    let q2 = e.f(0.693_359_4);
    let eq2 = e.mul(q2, ef);
    let r = e.add(r, eq2);
    // Special values: log(0) = -inf, log(x<0) = NaN, log(inf) = inf, log(NaN) = NaN.
    let is_zero = e.eq(x, zero);
    let neg_inf = e.f(f32::NEG_INFINITY);
    let r = e.select(is_zero, neg_inf, r);
    let negative = e.lt(x, zero);
    let nan = e.f(f32::NAN);
    let r = e.select(negative, nan, r);
    let inf = e.f(f32::INFINITY);
    let is_inf = e.eq(x, inf);
    let r = e.select(is_inf, inf, r);
    let x_nan = is_nan(e, x);
    e.select(x_nan, x, r)
}

/// e^x - 1, by Kahan's correction of exp(x) - 1.
#[inline(always)]
pub fn expm1<E: Emitter>(e: &mut E, x: E::F) -> E::F {
    let u = exp(e, x);
    let one = e.f(1.0);
    let um1 = e.sub(u, one);
    let lu = log(e, u);
    // um1 · (x / ln u): the quotient is near 1, so nothing overflows before the end.
    let q = e.div(x, lu);
    let r = e.mul(um1, q);
    let u_is_one = e.eq(u, one);
    let r = e.select(u_is_one, x, r);
    let minus_one = e.f(-1.0);
    let saturated = e.eq(um1, minus_one);
    let r = e.select(saturated, minus_one, r);
    let inf = e.f(f32::INFINITY);
    let u_inf = e.eq(u, inf);
    e.select(u_inf, inf, r)
}

/// ln(1 + x) as XLA's CPU backend computes it (its `log1p` intrinsic): for |x| < sqrt(2) - 1
/// x - x²/2 + x³·P(x)/Q(x), Cephes' rational approximation with both polynomials in
/// Horner form from zero by fused multiply-adds; elsewhere log(1 + x).
#[inline(always)]
pub fn log1p<E: Emitter>(e: &mut E, x: E::F) -> E::F {
    const NUMERATOR: [f32; 7] = [
        4.527_000_086_244_52e-5,
        4.985_410_282_319_337_6e-1,
        6.578_732_594_206_104,
        2.991_191_932_855_307_3e1,
        6.094_966_798_098_779e1,
        5.711_296_359_058_554e1,
        2.003_955_349_920_128e1,
    ];
    const DENOMINATOR: [f32; 7] = [
        1.0,
        1.506_290_908_346_919_2e1,
        8.304_756_596_796_721e1,
        2.217_623_982_373_285_6e2,
        3.090_987_222_531_206e2,
        2.164_278_861_449_594_8e2,
        6.011_866_049_760_384e1,
    ];
    // A function, not a closure, so it is inlined as the routines are (`wide_math` needs
    // every operation inside its loop).
    #[inline(always)]
    fn horner<E: Emitter>(e: &mut E, x: E::F, coeffs: &[f32]) -> E::F {
        let mut acc = e.f(0.0);
        for &c in coeffs {
            let k = e.f(c);
            acc = e.fma(acc, x, k);
        }
        acc
    }
    let num = horner(e, x, &NUMERATOR);
    let den = horner(e, x, &DENOMINATOR);
    let x2 = e.mul(x, x);
    let ratio = e.div(num, den);
    let x3 = e.mul(x, x2);
    let tail = e.mul(x3, ratio);
    let minus_half = e.f(-0.5);
    let tail = e.fma(minus_half, x2, tail);
    let small = e.add(x, tail);
    let one = e.f(1.0);
    let u = e.add(x, one);
    let large = log(e, u);
    let ax = e.abs(x);
    let threshold = e.f(0.414_213_57);
    let is_small = e.lt(ax, threshold);
    e.select(is_small, small, large)
}

/// x rounded to the nearest f16 value, ties to even, and kept as f32: what narrowing to f16
/// and widening back gives ([`crate::halves`]: F16C's `vcvtps2ph` and `vcvtph2ps`), so an
/// f16 op's result inside a fused expression is what it would be stored and read back. A
/// NaN stays a NaN of its payload, quieted (the narrowing at the kernel's output quiets
/// it and drops the same low payload bits either way).
#[inline(always)]
pub fn round_to_f16<E: Emitter>(e: &mut E, x: E::F) -> E::F {
    // |x| + M - M rounds |x| to a multiple of M's ulp, half to even, in one addition:
    // M = 2^(k + 13) for |x|'s binade 2^k leaves f16's 11 significant bits; k is held to
    // [-14, 16]: below, f16's subnormals are multiples of 2^-24; above, the result is
    // past f16's range anyway (and M stays finite).
    let bits = e.float_to_bits(x);
    let magnitude_bits = e.i(0x7fff_ffff);
    let magnitude_bits = e.iand(bits, magnitude_bits);
    let magnitude = e.bits_to_float(magnitude_bits);
    let exponent_bits = e.i(0x7f80_0000);
    let binade = e.iand(bits, exponent_bits);
    let (lowest, highest) = (e.i(0x3880_0000), e.i(0x4780_0000));
    let binade = e.imax(binade, lowest);
    let binade = e.imin(binade, highest);
    let shift = e.i(13 << 23);
    let m = e.iadd(binade, shift);
    let m = e.bits_to_float(m);
    let sum = e.add(magnitude, m);
    let rounded = e.sub(sum, m);
    // Past f16's largest finite value (65504): infinity. (A NaN stays a NaN: it compares
    // false.) Then x's sign, -0 included.
    let largest = e.f(65504.0);
    let overflows = e.lt(largest, rounded);
    let inf = e.f(f32::INFINITY);
    let rounded = e.select(overflows, inf, rounded);
    let rounded = e.float_to_bits(rounded);
    let sign = e.i(i32::MIN);
    let sign = e.iand(bits, sign);
    let signed = e.ior(rounded, sign);
    e.bits_to_float(signed)
}

/// tanh x: a polynomial near 0, 1 - 2/(e^2|x| + 1) elsewhere.
#[inline(always)]
pub fn tanh<E: Emitter>(e: &mut E, x: E::F) -> E::F {
    let ax = e.abs(x);
    let z = e.mul(x, x);
    let p = poly(
        e,
        z,
        &[
            -5.704_988_7e-3,
            2.063_908_9e-2,
            -5.373_971_6e-2,
            1.333_144_2e-1,
            -3.333_328_2e-1,
        ],
    );
    let pz = e.mul(p, z);
    let pzx = e.mul(pz, x);
    let small = e.add(pzx, x);
    let two = e.f(2.0);
    let ax2 = e.mul(ax, two);
    let ex = exp(e, ax2);
    let one = e.f(1.0);
    let ex1 = e.add(ex, one);
    let q = e.div(two, ex1);
    let large = e.sub(one, q);
    let large = copysign(e, large, x);
    let limit = e.f(0.625);
    let is_small = e.lt(ax, limit);
    let r = e.select(is_small, small, large);
    // tanh is odd: the result has x's sign, -0 included (the polynomial makes +0 of -0).
    copysign(e, r, x)
}

/// 1 / (1 + e^-x), as XLA computes it (`LogisticExpander`).
/// With t = e^-|x|: 1/(1+t) for x ≥ 0 and t/(1+t) for x < 0, so neither side overflows;
/// but where XLA's e^-x overflows to +inf in f32 (x ≤ -88.72283935546875) its result is 0,
/// not the denormal t/(1+t) gives, and so is this one.
#[inline(always)]
pub fn logistic<E: Emitter>(e: &mut E, x: E::F) -> E::F {
    let zero = e.f(0.0);
    let ax = e.abs(x);
    let nax = e.sub(zero, ax);
    let t = exp(e, nax);
    let one = e.f(1.0);
    let d = e.add(one, t);
    let positive = e.div(one, d);
    let negative = e.div(t, d);
    let is_negative = e.lt(x, zero);
    let r = e.select(is_negative, negative, positive);
    // The float just above -88.72283935546875: below it, e^-x is +inf in f32.
    let overflow = e.f(-LOGISTIC_ZERO_BELOW);
    let is_zero = e.lt(x, overflow);
    e.select(is_zero, zero, r)
}

/// The largest f32 whose exponential is finite: `logistic(x)` is 0 for x < -this.
const LOGISTIC_ZERO_BELOW: f32 = 88.722_83;

/// The reduced argument and quadrant of x (x = r + q·π/2), and sin r, cos r.
#[inline(always)]
fn sin_cos_reduced<E: Emitter>(e: &mut E, x: E::F) -> (E::I, E::F, E::F) {
    let two_over_pi = e.f(std::f32::consts::FRAC_2_PI);
    let t = e.mul(x, two_over_pi);
    let y = e.nearest(t);
    // π/2 in four parts of at most 11 significant bits (the last full): y·part is exact
    // for |y| < 2^13, so the reduction loses nothing for |x| ≤ 8192.
    let mut r = x;
    for part in [1.570_312_5, 4.837_512_97e-4, 7.549_533_6e-8, 2.563_344e-12] {
        let d = e.f(part);
        let yd = e.mul(y, d);
        r = e.sub(r, yd);
    }
    let q = e.to_int(y);
    let z = e.mul(r, r);
    let ps = poly(e, z, &[-1.951_529_6e-4, 8.332_161e-3, -1.666_665_5e-1]);
    let rz = e.mul(r, z);
    let t = e.mul(rz, ps);
    let s = e.add(r, t);
    let pc = poly(e, z, &[2.443_315_7e-5, -1.388_731_6e-3, 4.166_664_6e-2]);
    let zz = e.mul(z, z);
    let t = e.mul(zz, pc);
    let halfv = e.f(0.5);
    let hz = e.mul(halfv, z);
    let one = e.f(1.0);
    let c = e.sub(one, hz);
    let c = e.add(c, t);
    (q, s, c)
}

/// sin(r + q·π/2) from sin r and cos r.
#[inline(always)]
fn by_quadrant<E: Emitter>(e: &mut E, q: E::I, s: E::F, c: E::F) -> E::F {
    let one = e.i(1);
    let odd = e.iand(q, one);
    let v = e.ieq(odd, one);
    let value = e.select(v, c, s);
    let two = e.i(2);
    let half_turn = e.iand(q, two);
    let sign = e.ishl(half_turn, 30);
    let bits = e.float_to_bits(value);
    let flipped = e.ixor(bits, sign);
    e.bits_to_float(flipped)
}

/// `x` where it is ±0, else `r`: an odd function's value at zero keeps the zero's sign
/// (the argument reduction or a polynomial makes +0 of -0).
#[inline(always)]
fn zero_keeps_sign<E: Emitter>(e: &mut E, x: E::F, r: E::F) -> E::F {
    let zero = e.f(0.0);
    let is_zero = e.eq(x, zero);
    e.select(is_zero, x, r)
}

/// sin x.
#[inline(always)]
pub fn sin<E: Emitter>(e: &mut E, x: E::F) -> E::F {
    let (q, s, c) = sin_cos_reduced(e, x);
    let r = by_quadrant(e, q, s, c);
    zero_keeps_sign(e, x, r)
}

/// cos x = sin(x + π/2), by shifting the quadrant.
#[inline(always)]
pub fn cos<E: Emitter>(e: &mut E, x: E::F) -> E::F {
    let (q, s, c) = sin_cos_reduced(e, x);
    let one = e.i(1);
    let q1 = e.iadd(q, one);
    by_quadrant(e, q1, s, c)
}

/// tan x: s/c in even quadrants, -c/s in odd ones.
#[inline(always)]
pub fn tan<E: Emitter>(e: &mut E, x: E::F) -> E::F {
    let (q, s, c) = sin_cos_reduced(e, x);
    let sc = e.div(s, c);
    let cs = e.div(c, s);
    let zero = e.f(0.0);
    let ncs = e.sub(zero, cs);
    let one = e.i(1);
    let odd = e.iand(q, one);
    let v = e.ieq(odd, one);
    let r = e.select(v, ncs, sc);
    zero_keeps_sign(e, x, r)
}

/// erf x: a Taylor polynomial below 0.5, 1 - erfc (Numerical Recipes' Chebyshev fit) above.
#[inline(always)]
pub fn erf<E: Emitter>(e: &mut E, x: E::F) -> E::F {
    let ax = e.abs(x);
    let x2 = e.mul(x, x);
    let taylor = poly(
        e,
        x2,
        &[
            1.0 / 9360.0,
            -1.0 / 1320.0,
            1.0 / 216.0,
            -1.0 / 42.0,
            1.0 / 10.0,
            -1.0 / 3.0,
            1.0,
        ],
    );
    let k = e.f(std::f32::consts::FRAC_2_SQRT_PI);
    let tx = e.mul(taylor, x);
    let small = e.mul(tx, k);
    let one = e.f(1.0);
    let halfv = e.f(0.5);
    let hax = e.mul(halfv, ax);
    let d = e.add(one, hax);
    let t = e.div(one, d);
    let p = poly(
        e,
        t,
        &[
            0.170_872_77,
            -0.822_152_23,
            1.488_515_9,
            -1.135_203_98,
            0.278_868_07,
            -0.186_288_06,
            0.096_784_18,
            0.374_091_96,
            1.000_023_7,
            -1.265_512_2,
        ],
    );
    let zero = e.f(0.0);
    let nax2 = e.sub(zero, x2);
    let arg = e.add(nax2, p);
    let ex = exp(e, arg);
    let erfc = e.mul(t, ex);
    let large = e.sub(one, erfc);
    let large = copysign(e, large, x);
    let limit = e.f(0.5);
    let is_small = e.lt(ax, limit);
    let r = e.select(is_small, small, large);
    zero_keeps_sign(e, x, r)
}

/// ∛x: exp(ln|x| / 3) refined by one Newton step, with the sign of x.
#[inline(always)]
pub fn cbrt<E: Emitter>(e: &mut E, x: E::F) -> E::F {
    let ax = e.abs(x);
    // Keep g³ in the normal range: tiny inputs scale up by 2^96, huge ones down (∛ is 2^±32).
    let (tiny, huge) = (e.f(1e-30), e.f(1e30));
    let is_tiny = e.lt(ax, tiny);
    let is_huge = e.lt(huge, ax);
    let (up, down) = (e.f(7.922_816_3e28), e.f(1.262_177_4e-29));
    let one = e.f(1.0);
    let pre = e.select(is_tiny, up, one);
    let pre = e.select(is_huge, down, pre);
    let (post_up, post_down) = (e.f(2.328_306_4e-10), e.f(4_294_967_296.0));
    let post = e.select(is_tiny, post_up, one);
    let post = e.select(is_huge, post_down, post);
    let ax_unscaled = ax;
    let ax = e.mul(ax, pre);
    let lx = log(e, ax);
    let third = e.f(1.0 / 3.0);
    let l3 = e.mul(lx, third);
    let g = exp(e, l3);
    let g2 = e.mul(g, g);
    let g3 = e.mul(g2, g);
    let num = e.sub(g3, ax);
    let three = e.f(3.0);
    let den = e.mul(g2, three);
    let step = e.div(num, den);
    let g = e.sub(g, step);
    let g = e.mul(g, post);
    let r = copysign(e, g, x);
    // 0, ±inf and NaN are their own cube roots.
    let zero = e.f(0.0);
    let ax = ax_unscaled;
    let is_zero = e.eq(ax, zero);
    let r = e.select(is_zero, x, r);
    let inf = e.f(f32::INFINITY);
    let is_inf = e.eq(ax, inf);
    let r = e.select(is_inf, x, r);
    let nan = is_nan(e, x);
    e.select(nan, x, r)
}

/// True where the sign bit of `a` is set (including -0 and -NaN).
#[inline(always)]
fn sign_set<E: Emitter>(e: &mut E, a: E::F) -> E::M {
    let bits = e.float_to_bits(a);
    let s = e.isra(bits, 31);
    let minus_one = e.i(-1);
    e.ieq(s, minus_one)
}

/// atan t for t ≥ 0 (Cephes `atanf`: reduce to |t| ≤ tan π/8, then a polynomial).
#[inline(always)]
fn atan_positive<E: Emitter>(e: &mut E, t: E::F) -> E::F {
    let (t3, t1) = (e.f(2.414_213_5), e.f(0.414_213_57));
    let big = e.lt(t3, t);
    let mid = e.lt(t1, t);
    let one = e.f(1.0);
    let zero = e.f(0.0);
    let minus_one = e.f(-1.0);
    let inv = e.div(minus_one, t);
    let tm1 = e.sub(t, one);
    let tp1 = e.add(t, one);
    let shifted = e.div(tm1, tp1);
    let r = e.select(mid, shifted, t);
    let r = e.select(big, inv, r);
    let (quarter, half) = (
        e.f(std::f32::consts::FRAC_PI_4),
        e.f(std::f32::consts::FRAC_PI_2),
    );
    let y0 = e.select(mid, quarter, zero);
    let y0 = e.select(big, half, y0);
    let z = e.mul(r, r);
    let p = poly(
        e,
        z,
        &[
            8.053_744_5e-2,
            -1.387_768_6e-1,
            1.997_771_1e-1,
            -3.333_295e-1,
        ],
    );
    let pz = e.mul(p, z);
    let pzr = e.mul(pz, r);
    let a = e.add(pzr, r);
    e.add(y0, a)
}

/// atan2(y, x) with IEEE special cases (±0, ±inf, NaN).
#[inline(always)]
pub fn atan2<E: Emitter>(e: &mut E, y: E::F, x: E::F) -> E::F {
    let (ay, ax) = (e.abs(y), e.abs(x));
    let ratio = e.div(ay, ax);
    let base = atan_positive(e, ratio);
    // 0/0 and inf/inf have no ratio: the angle is 0 and π/4 there.
    let zero = e.f(0.0);
    let inf = e.f(f32::INFINITY);
    let y_zero = e.eq(ay, zero);
    let base = e.select(y_zero, zero, base);
    let y_inf = e.eq(ay, inf);
    let x_inf = e.eq(ax, inf);
    let quarter = e.f(std::f32::consts::FRAC_PI_4);
    let half = e.f(std::f32::consts::FRAC_PI_2);
    let inf_over_finite = e.select(x_inf, quarter, half);
    let base = e.select(y_inf, inf_over_finite, base);
    // Left half-plane (x < 0 or x = -0): π - angle.
    let pi = e.f(std::f32::consts::PI);
    let mirrored = e.sub(pi, base);
    let left = sign_set(e, x);
    let r = e.select(left, mirrored, base);
    let r = copysign(e, r, y);
    let nan_x = is_nan(e, x);
    let r = e.select(nan_x, x, r);
    let nan_y = is_nan(e, y);
    e.select(nan_y, y, r)
}

/// Veltkamp split: hi holds the top 12 bits of a, lo the rest, so hi·hi products are exact.
#[inline(always)]
fn split<E: Emitter>(e: &mut E, a: E::F) -> (E::F, E::F) {
    let k = e.f(4097.0);
    let c = e.mul(k, a);
    let d = e.sub(c, a);
    let hi = e.sub(c, d);
    let lo = e.sub(a, hi);
    (hi, lo)
}

/// a·b as p + err exactly (Dekker, no fused multiply-add needed).
#[inline(always)]
fn two_prod<E: Emitter>(e: &mut E, a: E::F, b: E::F) -> (E::F, E::F) {
    let p = e.mul(a, b);
    let (ah, al) = split(e, a);
    let (bh, bl) = split(e, b);
    let hh = e.mul(ah, bh);
    let t = e.sub(hh, p);
    let hl = e.mul(ah, bl);
    let t = e.add(t, hl);
    let lh = e.mul(al, bh);
    let t = e.add(t, lh);
    let ll = e.mul(al, bl);
    let err = e.add(t, ll);
    (p, err)
}

/// a + b as s + err exactly (Knuth).
#[inline(always)]
fn two_sum<E: Emitter>(e: &mut E, a: E::F, b: E::F) -> (E::F, E::F) {
    let s = e.add(a, b);
    let bb = e.sub(s, a);
    let sbb = e.sub(s, bb);
    let ea = e.sub(a, sbb);
    let eb = e.sub(b, bb);
    let err = e.add(ea, eb);
    (s, err)
}

/// log2 |x| in float-float (hi + lo) for finite positive x, with the exponent separated.
#[inline(always)]
fn log2_extended<E: Emitter>(e: &mut E, x: E::F) -> (E::F, E::F) {
    let (ef, m) = exponent_and_mantissa(e, x, MantissaRange::One);
    let zero = e.f(0.0);
    // m in [1, 2): use m/2 and exponent + 1 above √2 so f = m - 1 lies in [√½ - 1, √2 - 1).
    let sqrt2 = e.f(std::f32::consts::SQRT_2);
    let high = e.lt(sqrt2, m);
    let halfv = e.f(0.5);
    let m_half = e.mul(m, halfv);
    let m = e.select(high, m_half, m);
    let one = e.f(1.0);
    let ef1 = e.add(ef, one);
    let ef = e.select(high, ef1, ef);
    let f = e.sub(m, one);
    // ln(1 + f) = f - f²/2 + s(f²/2 + R(s²)), s = f / (2 + f)  (fdlibm logf), in float-float.
    let two = e.f(2.0);
    let d = e.add(two, f);
    let sv = e.div(f, d);
    let z = e.mul(sv, sv);
    let r = poly(
        e,
        z,
        &[0.242_790_79, 0.284_987_87, 0.400_009_72, 0.666_666_63],
    );
    let r = e.mul(r, z);
    let (ff, ff_err) = two_prod(e, f, f);
    let hfsq = e.mul(ff, halfv);
    let hfsq_err = e.mul(ff_err, halfv);
    let neg_hfsq = e.sub(zero, hfsq);
    let (ln_hi, sum_err) = two_sum(e, f, neg_hfsq);
    let hr = e.add(hfsq, r);
    let shr = e.mul(sv, hr);
    let lo = e.sub(sum_err, hfsq_err);
    let ln_lo = e.add(lo, shr);
    // × 1/ln 2 = il_hi + il_lo.
    let (il_hi, il_lo) = (e.f(std::f32::consts::LOG2_E), e.f(1.925_963e-8));
    let (p, p_err) = two_prod(e, ln_hi, il_hi);
    let a = e.mul(ln_hi, il_lo);
    let b = e.mul(ln_lo, il_hi);
    let lo = e.add(p_err, a);
    let lo = e.add(lo, b);
    // Add the exponent (an exact small integer).
    let (hi, err) = two_sum(e, ef, p);
    let lo = e.add(err, lo);
    (hi, lo)
}

/// x^y with IEEE special cases; y·log2|x| is carried in float-float so large exponents
/// keep their accuracy.
#[inline(always)]
pub fn pow<E: Emitter>(e: &mut E, x: E::F, y: E::F) -> E::F {
    let ax = e.abs(x);
    let (l_hi, l_lo) = log2_extended(e, ax);
    // |y| beyond 2^64 over- or underflows for every |x| ≠ 1; clamp so products stay finite.
    let (big, neg_big) = (e.f(1.844_674_4e19), e.f(-1.844_674_4e19));
    let over = e.lt(big, y);
    let yc = e.select(over, big, y);
    let under = e.lt(y, neg_big);
    let yc = e.select(under, neg_big, yc);
    let (t_hi, t_err) = two_prod(e, yc, l_hi);
    let yl = e.mul(yc, l_lo);
    let t_lo = e.add(t_err, yl);
    // Renormalise so t_lo is below half an ulp of t_hi and the reduced argument stays small.
    let (t_hi, t_lo) = two_sum(e, t_hi, t_lo);
    let (lim, neg_lim) = (e.f(300.0), e.f(-300.0));
    let hi_over = e.lt(lim, t_hi);
    let t_hi = e.select(hi_over, lim, t_hi);
    let hi_under = e.lt(t_hi, neg_lim);
    let t_hi = e.select(hi_under, neg_lim, t_hi);
    // A clamped exponent has no meaningful low part.
    let zero_lo = e.f(0.0);
    let t_lo = e.select(hi_over, zero_lo, t_lo);
    let t_lo = e.select(hi_under, zero_lo, t_lo);
    let n = e.nearest(t_hi);
    let frac = e.sub(t_hi, n);
    let r = e.add(frac, t_lo);
    let ln2 = e.f(std::f32::consts::LN_2);
    let u = e.mul(r, ln2);
    let core = exp_reduced(e, u);
    let one = e.f(1.0);
    // Scale by 2^n in three near-equal steps (|n| ≤ 300, so each is within ±100): the
    // exponent fields stay valid and subnormal results round once.
    let third = e.f(1.0 / 3.0);
    let nt = e.mul(n, third);
    let n1 = e.nearest(nt);
    let rest = e.sub(n, n1);
    let half_step = e.f(0.5);
    let rh = e.mul(rest, half_step);
    let n2 = e.nearest(rh);
    let n3 = e.sub(rest, n2);
    let (i1, i2, i3) = (e.to_int(n1), e.to_int(n2), e.to_int(n3));
    let s1 = pow2(e, i1);
    let s2 = pow2(e, i2);
    let s3 = pow2(e, i3);
    let mut mag = e.mul(core, s1);
    mag = e.mul(mag, s2);
    mag = e.mul(mag, s3);
    // Zeros, infinities and infinite exponents.
    let zero = e.f(0.0);
    let inf = e.f(f32::INFINITY);
    let y_neg = e.lt(y, zero);
    let zero_or_inf = e.select(y_neg, inf, zero);
    let inf_or_zero = e.select(y_neg, zero, inf);
    let x_zero = e.eq(ax, zero);
    mag = e.select(x_zero, zero_or_inf, mag);
    let x_inf = e.eq(ax, inf);
    mag = e.select(x_inf, inf_or_zero, mag);
    let ay = e.abs(y);
    let y_inf = e.eq(ay, inf);
    let x_small = e.lt(ax, one);
    let x_large = e.lt(one, ax);
    let on_large = e.select(x_large, inf_or_zero, one);
    let by_y = e.select(x_small, zero_or_inf, on_large);
    mag = e.select(y_inf, by_y, mag);
    // Negative x: odd integer exponents keep the sign, other non-integers are NaN.
    let yr = e.nearest(y);
    let y_int = e.eq(yr, y);
    let halfv = e.f(0.5);
    let yh = e.mul(y, halfv);
    let yhr = e.nearest(yh);
    let y_even = e.eq(yhr, yh);
    let negated = e.sub(zero, mag);
    let odd_sign = e.select(y_even, mag, negated);
    let signed = e.select(y_int, odd_sign, mag);
    let x_sign = sign_set(e, x);
    let mut result = e.select(x_sign, signed, mag);
    let x_neg = e.lt(x, zero);
    let nan = e.f(f32::NAN);
    let not_int = e.select(y_int, result, nan);
    let finite_neg = e.select(x_inf, result, not_int);
    result = e.select(x_neg, finite_neg, result);
    let nan_x = is_nan(e, x);
    result = e.select(nan_x, x, result);
    let nan_y = is_nan(e, y);
    result = e.select(nan_y, y, result);
    // pow(x, ±0) = 1 and pow(1, y) = 1, even for NaN.
    let y_zero = e.eq(y, zero);
    result = e.select(y_zero, one, result);
    let x_one = e.eq(x, one);
    e.select(x_one, one, result)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(x, log1p x)` as XLA's CPU backend computes it (jax 0.10.2, `jnp.log1p` jitted), as
    /// f32 bits: both of its branches.
    const XLA_LOG1P: [(u32, u32); 24] = [
        (0x3ffb6334, 0x3f8b1358),
        (0x3f267dea, 0x3f00410f),
        (0x3f7552e1, 0x3f2c0d15),
        (0x3f96697c, 0x3f46ee30),
        (0x40278dc8, 0x3fa49955),
        (0x3f2765b5, 0x3f00cd5b),
        (0x40343886, 0x3fab6a91),
        (0x3f8bf6a1, 0x3f3d2350),
        (0x3a626494, 0x3a624b91),
        (0xb9ef7a3f, 0xb9ef8840),
        (0x3a38d34e, 0x3a38c2a2),
        (0x3a6ea32e, 0x3a6e8764),
        (0xb988e9bd, 0xb988ee51),
        (0xb9a66d68, 0xb9a6742b),
        (0x39701e9c, 0x39701792),
        (0xb9d3ac63, 0xb9d3b754),
        (0xbf117b5a, 0xbf570a15),
        (0xbf3ef1e0, 0xbfaf5a40),
        (0xbf660acd, 0xc0127a24),
        (0xbecba0e4, 0xbf01cc05),
        (0xbee1abbd, 0xbf14c861),
        (0xbf4e2032, 0xbfd15dba),
        (0xbf2ad64f, 0xbf8ce0db),
        (0xbf70f2b9, 0xc0355af1),
    ];

    #[test]
    fn log1p_and_log_give_xlas_bits() {
        for (x, want) in XLA_LOG1P {
            let x = f32::from_bits(x);
            let got = log1p(&mut HostEmitter, x);
            assert_eq!(
                got.to_bits(),
                want,
                "log1p({x:e}) = {got:e}, XLA {:e}",
                f32::from_bits(want)
            );
        }
    }

    /// Distance in representable f32 values (0 when both are NaN or identical).
    fn ulps(a: f32, b: f32) -> u64 {
        if a.is_nan() && b.is_nan() {
            return 0;
        }
        if a.is_nan() || b.is_nan() {
            return u64::MAX;
        }
        let key = |v: f32| {
            let bits = v.to_bits() as i64;
            if bits < 0x8000_0000 {
                bits
            } else {
                0x8000_0000 - bits
            }
        };
        (key(a) - key(b)).unsigned_abs()
    }

    /// Special values, subnormals, and a spread of random bit patterns in `range`.
    fn inputs(range: f32) -> Vec<f32> {
        let mut v = vec![
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::MIN_POSITIVE,
            1e-40,
            -1e-40,
            1.0,
            -1.0,
            0.5,
            0.625,
            -0.625,
            88.0,
            -88.0,
            100.0,
            -110.0,
        ];
        let mut state = 0x1234_5678_9abc_def0u64;
        // Unoptimised test builds check fewer values; `cargo test --release` checks 800k.
        let count = if cfg!(debug_assertions) {
            40_000
        } else {
            400_000
        };
        for _ in 0..count {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let x = f32::from_bits(state as u32);
            if x.is_finite() && x.abs() <= range {
                v.push(x);
            }
            let uniform = (state >> 40) as f32 / (1u64 << 24) as f32;
            v.push((uniform * 2.0 - 1.0) * range.min(1e4));
        }
        v
    }

    fn check(
        name: &str,
        f: fn(&mut HostEmitter, f32) -> f32,
        reference: fn(f64) -> f64,
        max_ulps: u64,
        range: f32,
    ) {
        let mut worst = (0u64, 0.0f32);
        for x in inputs(range) {
            let got = f(&mut HostEmitter, x);
            let want = reference(x as f64) as f32;
            let u = ulps(got, want);
            if u > worst.0 {
                worst = (u, x);
            }
        }
        assert!(
            worst.0 <= max_ulps,
            "{name}: {} ulps at x = {:e} (got {:e}, want {:e})",
            worst.0,
            worst.1,
            f(&mut HostEmitter, worst.1),
            reference(worst.1 as f64)
        );
    }

    #[test]
    fn rounding_to_f16_is_narrowing_and_widening_back() {
        let round_trip = |x: f32| {
            crate::halves::widened(
                &{
                    let mut b = [0u8; 2];
                    crate::halves::narrow_into(&[x], &mut b);
                    b
                },
                1,
            )[0]
        };
        // The edges: f16's largest value and where rounding passes it, its smallest normal
        // and subnormal, ties on both sides of each, f32's extremes and subnormals.
        let mut values: Vec<f32> = vec![
            0.0,
            -0.0,
            1.0,
            -1.0,
            65504.0,
            65519.99,
            65520.0,
            -65520.0,
            65536.0,
            1e10,
            f32::MAX,
            f32::MIN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MIN_POSITIVE,
            1e-40,
            -1e-45,
            6.103_515_6e-5,
            6.097_555e-5,
            5.960_464_5e-8,
            2.980_232_2e-8,
            -2.980_232_3e-8,
            8.940_697e-8,
            1.000_488_3,
            1.000_976_6,
            1.001_464_8,
            2049.0,
            2051.0,
        ];
        // Every f32 whose low 13 bits are a tie, just below or above one, and random bits.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..if cfg!(debug_assertions) {
            100_000
        } else {
            2_000_000
        } {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let bits = state as u32;
            values.push(f32::from_bits(bits));
            let tie = (bits & !0x1fff) | 0x1000;
            values.extend([tie, tie - 1, tie + 1].map(f32::from_bits));
        }
        for x in values {
            let got = round_to_f16(&mut HostEmitter, x);
            if x.is_nan() {
                assert!(got.is_nan(), "{x:?}");
                continue;
            }
            let want = round_trip(x);
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "{x:e} ({:#010x})",
                x.to_bits()
            );
        }
    }

    #[test]
    fn exp_is_within_2_ulps() {
        check("exp", exp, f64::exp, 2, f32::MAX);
    }

    /// Inputs below -104 give +0, the bits they gave when clamped to -104 and scaled there
    /// (checked against that computation, done plainly), now by scale factors of +0.
    #[test]
    fn exp_below_its_range_is_the_zero_the_clamped_scaling_rounds_to() {
        let e = &mut HostEmitter;
        let clamped = exp(e, -104.0);
        assert_eq!(clamped.to_bits(), 0);
        // -104 scaled the old way: reduction, polynomial, two multiplies by 2^-75.
        let n = (-104.0f32 * std::f32::consts::LOG2_E).round_ties_even();
        assert_eq!(n, -150.0);
        let r = -104.0f32 - n * 0.693_359_4 - n * -2.121_944_4e-4;
        let y = exp_reduced(e, r);
        let pow2 = |k: i32| f32::from_bits(((k + 127) as u32) << 23);
        assert_eq!((y * pow2(-75) * pow2(-75)).to_bits(), 0);
        for x in [-104.000_01f32, -200.0, -1e30, f32::MIN, f32::NEG_INFINITY] {
            assert_eq!(exp(e, x).to_bits(), 0, "exp({x})");
        }
        assert!(exp(e, -103.9) > 0.0 && exp(e, -103.9) < f32::MIN_POSITIVE);
    }

    #[test]
    fn log_is_within_2_ulps() {
        check("log", |e, x| log(e, x.abs()), |x| x.abs().ln(), 2, f32::MAX);
        assert!(log(&mut HostEmitter, -1.0).is_nan());
    }

    #[test]
    fn expm1_and_log1p_are_within_4_ulps() {
        check("expm1", expm1, f64::exp_m1, 4, f32::MAX);
        check(
            "log1p",
            |e, x| log1p(e, x.abs()),
            |x| x.abs().ln_1p(),
            4,
            f32::MAX,
        );
    }

    #[test]
    fn tanh_and_logistic_are_within_4_ulps() {
        check("tanh", tanh, f64::tanh, 4, f32::MAX);
        // XLA's 1 / (1 + e^-x) with e^-x in f32: 0 once e^-x overflows.
        let xla = |x: f64| match (-x) as f32 > LOGISTIC_ZERO_BELOW {
            true => 0.0,
            false => 1.0 / (1.0 + (-x).exp()),
        };
        check("logistic", logistic, xla, 4, f32::MAX);
        assert_eq!((LOGISTIC_ZERO_BELOW).exp(), 3.402_798_5e38);
        assert!(
            f32::from_bits(LOGISTIC_ZERO_BELOW.to_bits() + 1)
                .exp()
                .is_infinite()
        );
        for x in [-88.722_84_f32, -100.0, -104.0, -1e30] {
            assert_eq!(logistic(&mut HostEmitter, x).to_bits(), 0, "{x}");
        }
        assert!(logistic(&mut HostEmitter, -LOGISTIC_ZERO_BELOW) > 0.0);
    }

    #[test]
    fn sin_cos_tan_are_accurate_within_8192() {
        check("sin", sin, f64::sin, 3, 8192.0);
        check("cos", cos, f64::cos, 3, 8192.0);
        check("tan", tan, f64::tan, 4, 8192.0);
    }

    /// Every pair plus every pair of `specials`, within `max_ulps` of the f64 reference.
    fn check_pairs(
        name: &str,
        f: fn(&mut HostEmitter, f32, f32) -> f32,
        reference: fn(f64, f64) -> f64,
        max_ulps: u64,
        mut pairs: Vec<(f32, f32)>,
        specials: &[f32],
    ) {
        for &a in specials {
            for &b in specials {
                pairs.push((a, b));
            }
        }
        let mut worst = (0u64, 0.0f32, 0.0f32);
        for (a, b) in pairs {
            let u = ulps(
                f(&mut HostEmitter, a, b),
                reference(a as f64, b as f64) as f32,
            );
            if u > worst.0 {
                worst = (u, a, b);
            }
        }
        let (u, a, b) = worst;
        assert!(
            u <= max_ulps,
            "{name}: {u} ulps at ({a:e}, {b:e}): got {:e}, want {:e}",
            f(&mut HostEmitter, a, b),
            reference(a as f64, b as f64)
        );
    }

    #[test]
    fn atan2_is_within_4_ulps() {
        let xs = inputs(f32::MAX);
        let pairs = xs.chunks_exact(2).map(|p| (p[0], p[1])).collect();
        let specials = [
            0.0f32,
            -0.0,
            1.0,
            -1.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1e-40,
            -3.0,
        ];
        check_pairs("atan2", atan2, f64::atan2, 4, pairs, &specials);
    }

    #[test]
    fn pow_is_within_8_ulps() {
        let xs = inputs(f32::MAX);
        // Bases of either sign with exponents of moderate size, then integer exponents.
        let mut pairs: Vec<(f32, f32)> = xs
            .chunks_exact(2)
            .map(|p| {
                (
                    p[0].abs().min(1e6) * if p[1] < 0.0 { -1.0 } else { 1.0 },
                    p[1] / 1e3,
                )
            })
            .collect();
        pairs.extend(
            xs.chunks_exact(2)
                .map(|p| (p[0].abs(), (p[1] % 64.0).round())),
        );
        let specials = [
            0.0f32,
            -0.0,
            1.0,
            -1.0,
            2.0,
            -2.0,
            0.5,
            3.0,
            -3.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1e-40,
            1.000_000_1,
            100.0,
        ];
        check_pairs("pow", pow, f64::powf, 8, pairs, &specials);
    }

    #[test]
    fn erf_and_cbrt() {
        check("erf", erf, libm::erf, 4, f32::MAX);
        check("cbrt", cbrt, f64::cbrt, 2, f32::MAX);
    }
}

#[cfg(test)]
mod signed_zero {
    use super::*;

    /// A unary function as the host evaluates it.
    type Unary = fn(&mut HostEmitter, f32) -> f32;

    /// Odd functions keep the sign of zero, as XLA's (libm's) do: f(-0) is -0, f(+0) is +0
    /// (an `atan2` downstream tells them apart).
    #[test]
    fn odd_functions_keep_the_sign_of_zero() {
        let odd: [(&str, Unary); 7] = [
            ("tanh", tanh),
            ("sin", sin),
            ("tan", tan),
            ("erf", erf),
            ("expm1", expm1),
            ("log1p", log1p),
            ("cbrt", cbrt),
        ];
        for (name, f) in odd {
            for zero in [0.0f32, -0.0] {
                let got = f(&mut HostEmitter, zero);
                assert_eq!(got.to_bits(), zero.to_bits(), "{name}({zero:?}) = {got:?}");
            }
        }
    }
}
