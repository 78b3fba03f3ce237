//! The meaning of every kernel op, in plain Rust. JIT-compiled kernels must match it bit for
//! bit. Transcendental functions are defined as the approximations in [`crate::math`] (run
//! on the host); their distance from `std`'s functions is measured in ulps there.

use crate::kernel::{
    BinaryOp, CmpOp, DType, ElementwiseKernel, Expr, ReduceKernel, ReduceOp, UnaryOp,
};
use crate::math::{self, HostEmitter};

/// A value of a compute type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    /// f32 (also f16 values, computed in f32).
    F32(f32),
    /// s32.
    S32(i32),
    /// u32.
    U32(u32),
    /// pred.
    Pred(bool),
}

impl Scalar {
    fn as_f64(self) -> f64 {
        match self {
            Scalar::F32(v) => v as f64,
            Scalar::S32(v) => v as f64,
            Scalar::U32(v) => v as f64,
            Scalar::Pred(v) => v as u8 as f64,
        }
    }

    fn as_i64(self) -> i64 {
        match self {
            Scalar::F32(v) => v as i64,
            Scalar::S32(v) => v as i64,
            Scalar::U32(v) => v as i64,
            Scalar::Pred(v) => v as i64,
        }
    }
}

/// Reads element `i` of storage type `t` from `bytes`.
pub fn load(t: DType, bytes: &[u8], i: usize) -> Scalar {
    let at = |n: usize| &bytes[i * n..i * n + n];
    match t {
        DType::F32 => Scalar::F32(f32::from_le_bytes(at(4).try_into().expect("4 bytes"))),
        DType::F16 => {
            Scalar::F32(half::f16::from_le_bytes(at(2).try_into().expect("2 bytes")).to_f32())
        }
        DType::S32 => Scalar::S32(i32::from_le_bytes(at(4).try_into().expect("4 bytes"))),
        DType::U32 => Scalar::U32(u32::from_le_bytes(at(4).try_into().expect("4 bytes"))),
        DType::Pred => Scalar::Pred(bytes[i] != 0),
    }
}

/// Writes `v` as element `i` of storage type `t` into `bytes`.
pub fn store(t: DType, bytes: &mut [u8], i: usize, v: Scalar) {
    let n = t.size();
    let out = &mut bytes[i * n..i * n + n];
    match (t, v) {
        (DType::F32, Scalar::F32(x)) => out.copy_from_slice(&x.to_le_bytes()),
        (DType::F16, Scalar::F32(x)) => out.copy_from_slice(&half::f16::from_f32(x).to_le_bytes()),
        (DType::S32, Scalar::S32(x)) => out.copy_from_slice(&x.to_le_bytes()),
        (DType::U32, Scalar::U32(x)) => out.copy_from_slice(&x.to_le_bytes()),
        (DType::Pred, Scalar::Pred(x)) => out[0] = x as u8,
        (t, v) => panic!("store of {v:?} as {t:?}: kernels are type-checked before they run"),
    }
}

fn float_unary(op: UnaryOp, x: f32) -> f32 {
    match op {
        UnaryOp::Abs => x.abs(),
        UnaryOp::Neg => -x,
        UnaryOp::Sign => {
            if x.is_nan() || x == 0.0 {
                x
            } else {
                x.signum()
            }
        }
        UnaryOp::Floor => x.floor(),
        UnaryOp::Ceil => x.ceil(),
        UnaryOp::RoundAfz => x.round(),
        UnaryOp::RoundEven => x.round_ties_even(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Rsqrt => 1.0 / x.sqrt(),
        // The transcendental routines; anything else is not a float op.
        op => math::unary(&mut HostEmitter, op, x)
            .unwrap_or_else(|| unreachable!("type-checked: {op:?} is not a float op")),
    }
}

/// `op(a, b)` on f32, with NaN-propagating min and max.
pub fn float_binary(op: BinaryOp, a: f32, b: f32) -> f32 {
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Rem => a % b,
        BinaryOp::Pow => math::pow(&mut HostEmitter, a, b),
        BinaryOp::Atan2 => math::atan2(&mut HostEmitter, a, b),
        BinaryOp::Max => {
            if a.is_nan() || b.is_nan() {
                f32::NAN
            } else if a > b || (a == b && b.is_sign_negative()) {
                a
            } else {
                b
            }
        }
        BinaryOp::Min => {
            if a.is_nan() || b.is_nan() {
                f32::NAN
            } else if a < b || (a == b && a.is_sign_negative()) {
                a
            } else {
                b
            }
        }
        _ => unreachable!("type-checked: {op:?} is not a float op"),
    }
}

macro_rules! int_binary {
    ($name:ident, $t:ty, $u:ty, $signed:expr) => {
        fn $name(op: BinaryOp, a: $t, b: $t) -> $t {
            match op {
                BinaryOp::Add => a.wrapping_add(b),
                BinaryOp::Sub => a.wrapping_sub(b),
                BinaryOp::Mul => a.wrapping_mul(b),
                BinaryOp::Div => {
                    if b == 0 {
                        (-1i64) as $t
                    } else {
                        a.wrapping_div(b)
                    }
                }
                BinaryOp::Rem => {
                    if b == 0 {
                        a
                    } else {
                        a.wrapping_rem(b)
                    }
                }
                BinaryOp::Pow => {
                    if $signed && (b as i64) < 0 {
                        match a as i64 {
                            1 => 1,
                            -1 => {
                                if (b as i64) % 2 == 0 {
                                    1
                                } else {
                                    (-1i64) as $t
                                }
                            }
                            _ => 0,
                        }
                    } else {
                        let (mut r, mut x, mut e) = (1 as $t, a, b as $u);
                        while e > 0 {
                            if e & 1 == 1 {
                                r = r.wrapping_mul(x);
                            }
                            x = x.wrapping_mul(x);
                            e >>= 1;
                        }
                        r
                    }
                }
                BinaryOp::Max => a.max(b),
                BinaryOp::Min => a.min(b),
                BinaryOp::And => a & b,
                BinaryOp::Or => a | b,
                BinaryOp::Xor => a ^ b,
                BinaryOp::Shl => {
                    if (b as $u) >= 32 {
                        0
                    } else {
                        a.wrapping_shl(b as u32)
                    }
                }
                BinaryOp::ShrLogical => {
                    if (b as $u) >= 32 {
                        0
                    } else {
                        ((a as $u) >> (b as u32)) as $t
                    }
                }
                BinaryOp::ShrArithmetic => {
                    let s = if (b as $u) >= 32 { 31 } else { b as u32 };
                    (((a as $u) as i32) >> s) as $t
                }
                BinaryOp::Atan2 => unreachable!("type-checked: atan2 is a float op"),
            }
        }
    };
}

int_binary!(s32_binary, i32, u32, true);
int_binary!(u32_binary, u32, u32, false);

fn compare(op: CmpOp, ord: Option<std::cmp::Ordering>) -> bool {
    use std::cmp::Ordering::*;
    match op {
        CmpOp::Eq => ord == Some(Equal),
        CmpOp::Ne => ord != Some(Equal),
        CmpOp::Lt => ord == Some(Less),
        CmpOp::Le => matches!(ord, Some(Less | Equal)),
        CmpOp::Gt => ord == Some(Greater),
        CmpOp::Ge => matches!(ord, Some(Greater | Equal)),
    }
}

/// Converts to the compute type of `t` (float→int saturating, NaN → 0; to pred: != 0).
pub fn convert(t: DType, v: Scalar) -> Scalar {
    match t.compute() {
        DType::F32 => Scalar::F32(match v {
            Scalar::S32(x) => x as f32,
            Scalar::U32(x) => x as f32,
            other => other.as_f64() as f32,
        }),
        DType::S32 => Scalar::S32(match v {
            Scalar::F32(x) => x as i32,
            other => other.as_i64() as i32,
        }),
        DType::U32 => Scalar::U32(match v {
            Scalar::F32(x) => x as u32,
            other => other.as_i64() as u32,
        }),
        DType::Pred => Scalar::Pred(match v {
            Scalar::F32(x) => x != 0.0,
            other => other.as_i64() != 0,
        }),
        DType::F16 => unreachable!("compute types are never f16"),
    }
}

/// Evaluates `expr` for one element, given that element of every input.
pub fn eval(expr: &Expr, inputs: &[Scalar]) -> Scalar {
    match expr {
        Expr::Input(k) => inputs[*k as usize],
        Expr::F32(bits) => Scalar::F32(f32::from_bits(*bits)),
        Expr::S32(v) => Scalar::S32(*v),
        Expr::U32(v) => Scalar::U32(*v),
        Expr::Pred(v) => Scalar::Pred(*v),
        Expr::Unary(op, x) => match (op, eval(x, inputs)) {
            (UnaryOp::IsFinite, Scalar::F32(v)) => Scalar::Pred(v.is_finite()),
            (_, Scalar::F32(v)) => Scalar::F32(float_unary(*op, v)),
            (UnaryOp::Not, Scalar::Pred(v)) => Scalar::Pred(!v),
            (op, Scalar::S32(v)) => Scalar::S32(match op {
                UnaryOp::Abs => v.wrapping_abs(),
                UnaryOp::Neg => v.wrapping_neg(),
                UnaryOp::Sign => v.signum(),
                UnaryOp::Not => !v,
                UnaryOp::Popcnt => v.count_ones() as i32,
                UnaryOp::Clz => v.leading_zeros() as i32,
                _ => unreachable!("type-checked"),
            }),
            (op, Scalar::U32(v)) => Scalar::U32(match op {
                UnaryOp::Abs => v,
                UnaryOp::Neg => v.wrapping_neg(),
                UnaryOp::Sign => (v != 0) as u32,
                UnaryOp::Not => !v,
                UnaryOp::Popcnt => v.count_ones(),
                UnaryOp::Clz => v.leading_zeros(),
                _ => unreachable!("type-checked"),
            }),
            (op, v) => unreachable!("type-checked: {op:?} of {v:?}"),
        },
        Expr::Binary(op, a, b) => {
            if let Some(m) = expr.multiply_add()
                && let Scalar::F32(x) = eval(m.a, inputs)
            {
                let (Scalar::F32(y), Scalar::F32(z)) = (eval(m.b, inputs), eval(m.c, inputs))
                else {
                    unreachable!("type-checked: a float product and addend")
                };
                let x = if m.negate_product { -x } else { x };
                let z = if m.negate_addend { -z } else { z };
                return Scalar::F32(x.mul_add(y, z));
            }
            binary_value(*op, eval(a, inputs), eval(b, inputs))
        }
        Expr::Compare(op, a, b) => Scalar::Pred(match (eval(a, inputs), eval(b, inputs)) {
            (Scalar::F32(x), Scalar::F32(y)) => compare(*op, x.partial_cmp(&y)),
            (Scalar::S32(x), Scalar::S32(y)) => compare(*op, Some(x.cmp(&y))),
            (Scalar::U32(x), Scalar::U32(y)) => compare(*op, Some(x.cmp(&y))),
            (Scalar::Pred(x), Scalar::Pred(y)) => compare(*op, Some(x.cmp(&y))),
            (x, y) => unreachable!("type-checked: compare of {x:?} and {y:?}"),
        }),
        Expr::Select(p, a, b) => match eval(p, inputs) {
            Scalar::Pred(true) => eval(a, inputs),
            _ => eval(b, inputs),
        },
        Expr::Clamp(lo, x, hi) => {
            let raised = binary_value(BinaryOp::Max, eval(x, inputs), eval(lo, inputs));
            binary_value(BinaryOp::Min, raised, eval(hi, inputs))
        }
        Expr::Convert(t, x) => convert(*t, eval(x, inputs)),
    }
}

/// `op(a, b)` on two values of one compute type.
pub fn binary_value(op: BinaryOp, a: Scalar, b: Scalar) -> Scalar {
    match (a, b) {
        (Scalar::F32(x), Scalar::F32(y)) => Scalar::F32(float_binary(op, x, y)),
        (Scalar::S32(x), Scalar::S32(y)) => Scalar::S32(s32_binary(op, x, y)),
        (Scalar::U32(x), Scalar::U32(y)) => Scalar::U32(u32_binary(op, x, y)),
        (Scalar::Pred(x), Scalar::Pred(y)) => Scalar::Pred(match op {
            BinaryOp::And | BinaryOp::Min => x & y,
            BinaryOp::Or | BinaryOp::Max => x | y,
            BinaryOp::Xor => x ^ y,
            _ => unreachable!("type-checked"),
        }),
        (x, y) => unreachable!("type-checked: {op:?} of {x:?} and {y:?}"),
    }
}

/// Runs an element-wise kernel on `n` elements of memory, as the reference.
pub fn run_elementwise(
    kernel: &ElementwiseKernel,
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    n: usize,
) {
    let mut values = Vec::with_capacity(kernel.inputs.len());
    for i in 0..n {
        values.clear();
        values.extend(
            kernel
                .inputs
                .iter()
                .zip(inputs)
                .enumerate()
                .map(|(k, (t, bytes))| load(*t, bytes, i / kernel.repeat(k))),
        );
        for ((t, e), out) in kernel.outputs.iter().zip(outputs.iter_mut()) {
            store(*t, out, i, eval(e, &values));
        }
    }
}

/// Combines two partials.
pub fn combine(op: ReduceOp, a: Scalar, b: Scalar) -> Scalar {
    binary_value(reduce_binary(op), a, b)
}

/// The binary op a reduction combines with.
pub fn reduce_binary(op: ReduceOp) -> BinaryOp {
    match op {
        ReduceOp::Sum => BinaryOp::Add,
        ReduceOp::Product => BinaryOp::Mul,
        ReduceOp::Max => BinaryOp::Max,
        ReduceOp::Min => BinaryOp::Min,
        ReduceOp::And => BinaryOp::And,
        ReduceOp::Or => BinaryOp::Or,
    }
}

/// The value of type `t` whose bits (as [`ReduceKernel::init`] holds them) are `bits`.
pub fn scalar_of_bits(t: DType, bits: u32) -> Scalar {
    match t {
        DType::F32 | DType::F16 => Scalar::F32(f32::from_bits(bits)),
        DType::S32 => Scalar::S32(bits as i32),
        DType::U32 => Scalar::U32(bits),
        DType::Pred => Scalar::Pred(bits != 0),
    }
}

/// The identity of a reduction in partial type `t`: combined with any `x` it gives `x`, bit
/// for bit. For an f32 sum that is -0 (-0 + x = x for every x, where +0 + -0 = +0), so a
/// run of -0 sums to -0 as XLA's reduction of it from an init of -0 does.
pub fn identity(op: ReduceOp, t: DType) -> Scalar {
    match (op, t) {
        (ReduceOp::Sum, DType::F32) => Scalar::F32(-0.0),
        (ReduceOp::Product, DType::F32) => Scalar::F32(1.0),
        (ReduceOp::Max, DType::F32) => Scalar::F32(f32::NEG_INFINITY),
        (ReduceOp::Min, DType::F32) => Scalar::F32(f32::INFINITY),
        (ReduceOp::Sum | ReduceOp::Or, DType::S32) => Scalar::S32(0),
        (ReduceOp::Product, DType::S32) => Scalar::S32(1),
        (ReduceOp::Max, DType::S32) => Scalar::S32(i32::MIN),
        (ReduceOp::Min | ReduceOp::And, DType::S32) => {
            Scalar::S32(if op == ReduceOp::And { -1 } else { i32::MAX })
        }
        (ReduceOp::Sum | ReduceOp::Or | ReduceOp::Max, DType::U32) => Scalar::U32(0),
        (ReduceOp::Product, DType::U32) => Scalar::U32(1),
        (ReduceOp::Min | ReduceOp::And, DType::U32) => Scalar::U32(u32::MAX),
        (ReduceOp::And | ReduceOp::Min, DType::Pred) => Scalar::Pred(true),
        (_, DType::Pred) => Scalar::Pred(false),
        (ReduceOp::And | ReduceOp::Or, _) => unreachable!("type-checked: and/or of floats"),
        (_, DType::F16) => unreachable!("partials are never f16"),
    }
}

/// Reduces each run in the order the JIT does: four interleaved lane partials over the
/// first multiple of four elements, combined as (l0 ∘ l1) ∘ (l2 ∘ l3), then the tail in order.
pub fn run_reduce(
    kernel: &ReduceKernel,
    input: &[u8],
    output: &mut [u8],
    run_length: usize,
    runs: usize,
) {
    let t = kernel.partial_type();
    for r in 0..runs {
        let base = r * run_length;
        let value = |i: usize| convert(t, load(kernel.input, input, base + i));
        let mut lanes = [identity(kernel.op, t); 4];
        let whole = run_length / 4 * 4;
        for i in (0..whole).step_by(4) {
            for (l, lane) in lanes.iter_mut().enumerate() {
                *lane = combine(kernel.op, *lane, value(i + l));
            }
        }
        let mut acc = combine(
            kernel.op,
            combine(kernel.op, lanes[0], lanes[1]),
            combine(kernel.op, lanes[2], lanes[3]),
        );
        for i in whole..run_length {
            acc = combine(kernel.op, acc, value(i));
        }
        if let Some(bits) = kernel.init {
            acc = combine(kernel.op, acc, scalar_of_bits(t, bits));
        }
        store(t, output, r, acc);
    }
}
