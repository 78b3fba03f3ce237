//! The IPU's floating-point control (`floating_point_behaviour`) for element-wise kernels:
//! exceptions (`inv`, `div0`, `oflo`) detected at the operation that raises them, NaN on
//! overflow (`nanoo`), and stochastic rounding of f16 results (`esr`).
//!
//! Exceptions and `nanoo` rewrite the kernel's expressions: each float operation's result
//! is checked against its operands (a NaN from non-NaN operands is invalid; an infinity
//! from finite operands is a division by zero when it divides by zero or takes the log of
//! zero, an overflow otherwise), and the checks' bits are OR-ed into one extra `u32`
//! output, the status, which the runner reads and the executor never stores in tile
//! memory. The rewrite repeats sub-expressions; Cranelift's value numbering computes each
//! once. On the IPU the checks are the floating-point unit's own, so the model charges
//! the kernel as written, never the rewrite.

use crate::kernel::{BinaryOp, CmpOp, DType, ElementwiseKernel, Expr, UnaryOp};
use crate::types::expr_type;
use serde::{Deserialize, Serialize};

/// Which floating-point behaviours are on (all off by default, as `IPUConfig` has them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct FloatMode {
    /// Invalid operations (a NaN made from non-NaN operands) raise an exception.
    pub inv: bool,
    /// Division by zero (and the log of zero) raises an exception.
    pub div0: bool,
    /// Overflow (an infinity made from finite operands) raises an exception.
    pub oflo: bool,
    /// Overflow gives NaN instead of an infinity.
    pub nanoo: bool,
    /// f16 results round stochastically, seeded with this (`None`: round to nearest even).
    pub esr: Option<u64>,
}

impl FloatMode {
    /// True when any exception is checked.
    pub fn checks(&self) -> bool {
        self.inv || self.div0 || self.oflo
    }

    /// True when anything differs from IEEE defaults.
    pub fn is_active(&self) -> bool {
        self.checks() || self.nanoo || self.esr.is_some()
    }
}

/// Outputs whose exceptions the status tells apart (3 bits each); later outputs share the
/// last group.
const STATUS_GROUPS: usize = 10;

/// A floating-point exception a kernel raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FpException {
    /// An invalid operation (`inv`): 0/0, ∞-∞, √-1, ...
    Invalid,
    /// A division by zero (`div0`).
    DivideByZero,
    /// An overflow (`oflo`).
    Overflow,
}

impl FpException {
    /// The status bit the checked kernel sets for it.
    pub fn bit(self) -> u32 {
        match self {
            FpException::Invalid => 1,
            FpException::DivideByZero => 2,
            FpException::Overflow => 4,
        }
    }

    /// The exception and the kernel output whose bits are set in `status` (outputs in
    /// order, then invalid before division by zero before overflow).
    pub fn from_status(status: u32) -> Option<(FpException, usize)> {
        (0..STATUS_GROUPS).find_map(|k| {
            let group = (status >> (3 * k)) & 7;
            [
                FpException::Invalid,
                FpException::DivideByZero,
                FpException::Overflow,
            ]
            .into_iter()
            .find(|e| group & e.bit() != 0)
            .map(|e| (e, k))
        })
    }

    /// The `floating_point_behaviour` flag that enables it.
    pub fn flag(self) -> &'static str {
        match self {
            FpException::Invalid => "inv",
            FpException::DivideByZero => "div0",
            FpException::Overflow => "oflo",
        }
    }
}

impl std::fmt::Display for FpException {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FpException::Invalid => "invalid operation",
            FpException::DivideByZero => "division by zero",
            FpException::Overflow => "overflow",
        })
    }
}

fn is_nan(x: &Expr) -> Expr {
    Expr::compare(CmpOp::Ne, x.clone(), x.clone())
}

fn not(x: Expr) -> Expr {
    Expr::unary(UnaryOp::Not, x)
}

fn and(a: Expr, b: Expr) -> Expr {
    Expr::binary(BinaryOp::And, a, b)
}

fn finite(x: &Expr) -> Expr {
    Expr::unary(UnaryOp::IsFinite, x.clone())
}

/// ±∞: not finite and not NaN.
fn infinite(x: &Expr) -> Expr {
    and(not(finite(x)), not(is_nan(x)))
}

fn bit_if(cond: Expr, bit: u32) -> Expr {
    Expr::Select(
        Box::new(cond),
        Box::new(Expr::U32(bit)),
        Box::new(Expr::U32(0)),
    )
}

fn or_bits(a: Option<Expr>, b: Option<Expr>) -> Option<Expr> {
    match (a, b) {
        (Some(a), Some(b)) => Some(Expr::binary(BinaryOp::Or, a, b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// Whether `e` is a float operation that can raise an exception: its result and operands.
fn float_op<'e>(e: &'e Expr, inputs: &[DType]) -> Option<Vec<&'e Expr>> {
    let float = expr_type(e, inputs).ok()? == DType::F32;
    match e {
        Expr::Unary(op, x) if float && !matches!(op, UnaryOp::Abs | UnaryOp::Neg) => Some(vec![x]),
        Expr::Binary(op, a, b) if float && !matches!(op, BinaryOp::Max | BinaryOp::Min) => {
            Some(vec![a, b])
        }
        _ => None,
    }
}

/// The condition under which `e` (a float operation over `operands`) divides by zero.
fn divides_by_zero(e: &Expr, operands: &[&Expr]) -> Expr {
    let zero = Expr::f32(0.0);
    match e {
        Expr::Binary(BinaryOp::Div, ..) => and(
            and(infinite(e), finite(operands[0])),
            Expr::compare(CmpOp::Eq, operands[1].clone(), zero),
        ),
        Expr::Unary(UnaryOp::Log | UnaryOp::Rsqrt, x) => {
            and(infinite(e), Expr::compare(CmpOp::Eq, (**x).clone(), zero))
        }
        _ => Expr::Pred(false),
    }
}

/// An infinity from finite operands that is not a division by zero.
fn overflows(e: &Expr, operands: &[&Expr]) -> Expr {
    let all_finite = operands
        .iter()
        .map(|x| finite(x))
        .reduce(and)
        .unwrap_or(Expr::Pred(true));
    and(
        and(infinite(e), all_finite),
        not(divides_by_zero(e, operands)),
    )
}

/// The status bits of every checked exception raised in `e`.
fn status(e: &Expr, inputs: &[DType], mode: FloatMode) -> Option<Expr> {
    let children: Vec<&Expr> = match e {
        Expr::Unary(_, x) | Expr::Convert(_, x) => vec![x],
        Expr::Binary(_, a, b) | Expr::Compare(_, a, b) => vec![a, b],
        Expr::Select(p, a, b) | Expr::Clamp(p, a, b) => vec![p, a, b],
        _ => vec![],
    };
    let mut bits = children
        .into_iter()
        .fold(None, |acc, c| or_bits(acc, status(c, inputs, mode)));
    if let Some(operands) = float_op(e, inputs) {
        if mode.inv {
            let fresh = operands.iter().map(|x| not(is_nan(x))).fold(is_nan(e), and);
            bits = or_bits(bits, Some(bit_if(fresh, 1)));
        }
        if mode.div0 {
            bits = or_bits(bits, Some(bit_if(divides_by_zero(e, &operands), 2)));
        }
        if mode.oflo {
            bits = or_bits(bits, Some(bit_if(overflows(e, &operands), 4)));
        }
    }
    bits
}

/// `e` with every float operation's overflow turned into NaN (`nanoo`).
fn nan_on_overflow(e: &Expr, inputs: &[DType]) -> Expr {
    let rebuilt = match e {
        Expr::Unary(op, x) => Expr::unary(*op, nan_on_overflow(x, inputs)),
        Expr::Binary(op, a, b) => {
            Expr::binary(*op, nan_on_overflow(a, inputs), nan_on_overflow(b, inputs))
        }
        Expr::Compare(op, a, b) => {
            Expr::compare(*op, nan_on_overflow(a, inputs), nan_on_overflow(b, inputs))
        }
        Expr::Select(p, a, b) => Expr::Select(
            Box::new(nan_on_overflow(p, inputs)),
            Box::new(nan_on_overflow(a, inputs)),
            Box::new(nan_on_overflow(b, inputs)),
        ),
        Expr::Clamp(p, a, b) => Expr::Clamp(
            Box::new(nan_on_overflow(p, inputs)),
            Box::new(nan_on_overflow(a, inputs)),
            Box::new(nan_on_overflow(b, inputs)),
        ),
        Expr::Convert(t, x) => Expr::Convert(*t, Box::new(nan_on_overflow(x, inputs))),
        leaf => leaf.clone(),
    };
    match float_op(&rebuilt, inputs) {
        Some(operands) => {
            let overflow = overflows(&rebuilt, &operands);
            Expr::Select(
                Box::new(overflow),
                Box::new(Expr::f32(f32::NAN)),
                Box::new(rebuilt.clone()),
            )
        }
        None => rebuilt,
    }
}

/// The kernel as it runs under `mode`: NaN on overflow applied, and with exception
/// checks a last `u32` output holding each element's status bits (three per output). Returns it and whether
/// it has the status output.
pub fn guarded(kernel: &ElementwiseKernel, mode: FloatMode) -> (ElementwiseKernel, bool) {
    let mut out = kernel.clone();
    if mode.nanoo {
        for (_, e) in &mut out.outputs {
            *e = nan_on_overflow(e, &kernel.inputs);
        }
    }
    if !mode.checks() {
        return (out, false);
    }
    // Checked on the kernel as written: an overflow `nanoo` turned into NaN is still an
    // overflow, not an invalid operation.
    let bits = kernel
        .outputs
        .iter()
        .enumerate()
        .fold(None, |acc, (k, (_, e))| {
            let shift = 3 * k.min(STATUS_GROUPS - 1) as u32;
            let own = status(e, &kernel.inputs, mode).map(|b| match shift {
                0 => b,
                _ => Expr::binary(BinaryOp::Shl, b, Expr::U32(shift)),
            });
            or_bits(acc, own)
        });
    match bits {
        Some(bits) => {
            out.outputs.push((DType::U32, bits));
            (out, true)
        }
        None => (out, false),
    }
}

/// Rounds `x` to f16 stochastically: up with probability equal to the distance from the
/// f16 below, using `random` (uniform 32 bits) — an unbiased rounding.
pub fn round_f16_stochastic(x: f32, random: u32) -> half::f16 {
    let down = half::f16::from_f32(x);
    if !x.is_finite() || down.to_f32() == x {
        return down;
    }
    // The two f16 neighbours around x.
    let (lo, hi) = if down.to_f32() < x {
        (down, next_up(down))
    } else {
        (next_down(down), down)
    };
    let (l, h) = (lo.to_f32() as f64, hi.to_f32() as f64);
    if !h.is_finite() || !l.is_finite() {
        return down;
    }
    let p_up = (x as f64 - l) / (h - l);
    if (random as f64) < p_up * 4_294_967_296.0 {
        hi
    } else {
        lo
    }
}

fn next_up(h: half::f16) -> half::f16 {
    let b = h.to_bits();
    if h.to_f32() == 0.0 {
        return half::f16::from_bits(1);
    }
    half::f16::from_bits(if b & 0x8000 == 0 { b + 1 } else { b - 1 })
}

fn next_down(h: half::f16) -> half::f16 {
    let b = h.to_bits();
    if h.to_f32() == 0.0 {
        return half::f16::from_bits(0x8001);
    }
    half::f16::from_bits(if b & 0x8000 == 0 { b - 1 } else { b + 1 })
}

/// Writes `values` as f16 bytes rounded stochastically, element `i` with the random bits
/// of `(seed, salt, first + i)`.
pub fn narrow_stochastic(values: &[f32], bytes: &mut [u8], seed: u64, salt: u64, first: usize) {
    for (i, (x, c)) in values.iter().zip(bytes.chunks_exact_mut(2)).enumerate() {
        let h = round_f16_stochastic(*x, rounding_bits(seed, salt, (first + i) as u64));
        c.copy_from_slice(&h.to_bits().to_le_bytes());
    }
}

/// A 32-bit hash of (seed, salt, element): the stochastic rounding's random bits, the
/// same for the same element of the same vertex on every run (SplitMix64's finaliser).
pub fn rounding_bits(seed: u64, salt: u64, element: u64) -> u32 {
    let mut z = seed
        .wrapping_add(salt.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_add(element.wrapping_mul(0xBF58_476D_1CE4_E5B9));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CodegenError, KernelCache, KernelSpec};

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn f32s(b: &[u8]) -> Vec<f32> {
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    /// Runs `a op b` over the pairs under `mode`.
    fn run(op: BinaryOp, a: &[f32], b: &[f32], mode: FloatMode) -> Result<Vec<f32>, CodegenError> {
        let spec = KernelSpec::Elementwise(ElementwiseKernel {
            inputs: vec![DType::F32, DType::F32],
            outputs: vec![(DType::F32, Expr::binary(op, Expr::input(0), Expr::input(1)))],
            repeats: Vec::new(),
        });
        let mut cache = KernelCache::new().unwrap();
        let id = cache.compile_with(&spec, mode).unwrap();
        let (a, b) = (f32_bytes(a), f32_bytes(b));
        let mut out = vec![0u8; a.len()];
        cache
            .table()
            .get(id)
            .run_elementwise(&[&a, &b], &mut [&mut out], a.len() / 4)?;
        Ok(f32s(&out))
    }

    fn raised(r: Result<Vec<f32>, CodegenError>) -> (FpException, usize) {
        match r {
            Err(CodegenError::FloatingPoint {
                exception, element, ..
            }) => (exception, element),
            other => panic!("expected an exception, got {other:?}"),
        }
    }

    #[test]
    fn each_exception_is_raised_at_its_first_element_only_when_enabled() {
        let all = FloatMode {
            inv: true,
            div0: true,
            oflo: true,
            ..FloatMode::default()
        };
        // Eleven elements: the vector body and the scalar tail both run.
        let mut a = vec![1.0f32; 11];
        let mut b = vec![2.0f32; 11];
        b[9] = 0.0;
        assert_eq!(
            raised(run(BinaryOp::Div, &a, &b, all)),
            (FpException::DivideByZero, 9)
        );
        a[3] = 0.0;
        b[3] = 0.0;
        assert_eq!(
            raised(run(BinaryOp::Div, &a, &b, all)),
            (FpException::Invalid, 3)
        );
        let big = vec![3e38f32; 11];
        assert_eq!(
            raised(run(BinaryOp::Mul, &big, &big, all)),
            (FpException::Overflow, 0)
        );
        // Off, or another flag on: IEEE results, no exception.
        let plain = run(BinaryOp::Div, &a, &b, FloatMode::default()).unwrap();
        assert!(plain[3].is_nan() && plain[9].is_infinite());
        let only_oflo = FloatMode {
            oflo: true,
            ..FloatMode::default()
        };
        assert!(run(BinaryOp::Div, &a, &b, only_oflo).is_ok());
        // NaN inputs propagate without raising: the exception is where the NaN was made.
        let nan = vec![f32::NAN; 11];
        assert!(run(BinaryOp::Add, &nan, &b, all).is_ok());
    }

    #[test]
    fn nanoo_turns_overflow_into_nan_but_not_division_by_zero() {
        let mode = FloatMode {
            nanoo: true,
            ..FloatMode::default()
        };
        let out = run(BinaryOp::Mul, &[3e38, 2.0], &[3e38, 3.0], mode).unwrap();
        assert!(out[0].is_nan(), "{out:?}");
        assert_eq!(out[1], 6.0);
        let out = run(BinaryOp::Div, &[1.0], &[0.0], mode).unwrap();
        assert_eq!(out[0], f32::INFINITY);
        let ieee = run(BinaryOp::Mul, &[3e38], &[3e38], FloatMode::default()).unwrap();
        assert_eq!(ieee[0], f32::INFINITY);
    }

    #[test]
    fn stochastic_rounding_is_unbiased_and_exact_values_stay() {
        let x = 1.0f32 + 1.0 / 4096.0; // a quarter of the way between f16 1.0 and 1.0009766
        let ups = (0..10_000u64)
            .filter(|&i| round_f16_stochastic(x, rounding_bits(7, 0, i)).to_f32() > 1.0)
            .count();
        assert!((2200..2800).contains(&ups), "{ups} of 10000 rounded up");
        assert_eq!(round_f16_stochastic(1.5, 123).to_f32(), 1.5);
        assert_eq!(round_f16_stochastic(-x, 0).to_f32(), -1.0);
    }
}
