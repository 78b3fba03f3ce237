//! Lowering kernel expressions to Cranelift IR, one element (scalar) or four (f32x4) at a time.

use crate::kernel::{BinaryOp, CmpOp, DType, Expr, UnaryOp};
use crate::math::{self, Emitter};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{Endianness, FuncRef, InstBuilder, MemFlagsData, Type, Value, types};
use cranelift_frontend::FunctionBuilder;

/// Host functions kernels call: the exact float remainder and integer powers (scalar only).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Helpers {
    pub fmod: FuncRef,
    pub powi: FuncRef,
    pub powu: FuncRef,
}

/// Emits Cranelift IR for [`math::Emitter`] on `lanes` f32 lanes (1 or 4).
pub(crate) struct ClifEmitter<'a, 'b> {
    pub b: &'a mut FunctionBuilder<'b>,
    pub lanes: u8,
}

impl ClifEmitter<'_, '_> {
    fn ftype(&self) -> Type {
        if self.lanes == 4 {
            types::F32X4
        } else {
            types::F32
        }
    }

    fn itype(&self) -> Type {
        if self.lanes == 4 {
            types::I32X4
        } else {
            types::I32
        }
    }

    fn lane_flags() -> MemFlagsData {
        MemFlagsData::new().with_endianness(Endianness::Little)
    }
}

impl Emitter for ClifEmitter<'_, '_> {
    type F = Value;
    type I = Value;
    type M = Value;

    fn f(&mut self, v: f32) -> Value {
        let c = self.b.ins().f32const(v);
        if self.lanes == 4 {
            self.b.ins().splat(types::F32X4, c)
        } else {
            c
        }
    }
    fn i(&mut self, v: i32) -> Value {
        let c = self.b.ins().iconst(types::I32, v as i64);
        if self.lanes == 4 {
            self.b.ins().splat(types::I32X4, c)
        } else {
            c
        }
    }
    fn add(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fadd(a, b)
    }
    fn sub(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fsub(a, b)
    }
    fn mul(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fmul(a, b)
    }
    fn fma(&mut self, a: Value, b: Value, c: Value) -> Value {
        self.b.ins().fma(a, b, c)
    }
    fn div(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fdiv(a, b)
    }
    fn abs(&mut self, a: Value) -> Value {
        self.b.ins().fabs(a)
    }
    fn nearest(&mut self, a: Value) -> Value {
        self.b.ins().nearest(a)
    }
    fn lt(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fcmp(FloatCC::LessThan, a, b)
    }
    fn eq(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fcmp(FloatCC::Equal, a, b)
    }
    fn ieq(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().icmp(IntCC::Equal, a, b)
    }
    fn select(&mut self, m: Value, a: Value, b: Value) -> Value {
        if self.lanes == 4 {
            // Vector masks are all-ones lanes: select bits.
            let mask = self.b.ins().bitcast(types::F32X4, Self::lane_flags(), m);
            self.b.ins().bitselect(mask, a, b)
        } else {
            self.b.ins().select(m, a, b)
        }
    }
    fn float_to_bits(&mut self, a: Value) -> Value {
        let t = self.itype();
        self.b.ins().bitcast(t, Self::lane_flags(), a)
    }
    fn bits_to_float(&mut self, a: Value) -> Value {
        let t = self.ftype();
        self.b.ins().bitcast(t, Self::lane_flags(), a)
    }
    fn iadd(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().iadd(a, b)
    }
    fn isub(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().isub(a, b)
    }
    fn iand(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().band(a, b)
    }
    fn ior(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().bor(a, b)
    }
    fn ixor(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().bxor(a, b)
    }
    fn ishl(&mut self, a: Value, s: u8) -> Value {
        self.b.ins().ishl_imm_s(a, s as i64)
    }
    fn isra(&mut self, a: Value, s: u8) -> Value {
        self.b.ins().sshr_imm_s(a, s as i64)
    }
    fn imax(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().smax(a, b)
    }
    fn imin(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().smin(a, b)
    }
    fn to_int(&mut self, a: Value) -> Value {
        let t = self.itype();
        self.b.ins().fcvt_to_sint_sat(t, a)
    }
    fn to_float(&mut self, a: Value) -> Value {
        let t = self.ftype();
        self.b.ins().fcvt_from_sint(t, a)
    }
}

/// The Cranelift type of a compute type (pred is a byte holding 0 or 1).
pub(crate) fn clif_type(t: DType, lanes: u8) -> Type {
    match (t.compute(), lanes) {
        (DType::F32, 1) => types::F32,
        (DType::F32, _) => types::F32X4,
        (DType::S32 | DType::U32, 1) => types::I32,
        (DType::S32 | DType::U32, _) => types::I32X4,
        (DType::Pred, _) => types::I8,
        (DType::F16, _) => unreachable!("compute types are never f16"),
    }
}

/// True when an f32 expression can run four lanes at a time (no integer, pred or helper ops).
pub(crate) fn vectorizable(expr: &Expr, inputs: &[DType]) -> bool {
    match expr {
        Expr::Input(k) => inputs[*k as usize].compute() == DType::F32,
        Expr::F32(_) => true,
        Expr::Unary(op, x) => {
            !matches!(
                op,
                UnaryOp::IsFinite | UnaryOp::Not | UnaryOp::Popcnt | UnaryOp::Clz
            ) && vectorizable(x, inputs)
        }
        Expr::Binary(op, a, b) => {
            !matches!(op, BinaryOp::Rem) && vectorizable(a, inputs) && vectorizable(b, inputs)
        }
        Expr::Select(p, a, b) => {
            matches!(&**p, Expr::Compare(_, x, y) if vectorizable(x, inputs) && vectorizable(y, inputs))
                && vectorizable(a, inputs)
                && vectorizable(b, inputs)
        }
        Expr::Clamp(l, x, h) => {
            vectorizable(l, inputs) && vectorizable(x, inputs) && vectorizable(h, inputs)
        }
        _ => false,
    }
}

fn float_cc(op: CmpOp) -> FloatCC {
    match op {
        CmpOp::Eq => FloatCC::Equal,
        CmpOp::Ne => FloatCC::NotEqual,
        CmpOp::Lt => FloatCC::LessThan,
        CmpOp::Le => FloatCC::LessThanOrEqual,
        CmpOp::Gt => FloatCC::GreaterThan,
        CmpOp::Ge => FloatCC::GreaterThanOrEqual,
    }
}

fn int_cc(op: CmpOp, signed: bool) -> IntCC {
    match (op, signed) {
        (CmpOp::Eq, _) => IntCC::Equal,
        (CmpOp::Ne, _) => IntCC::NotEqual,
        (CmpOp::Lt, true) => IntCC::SignedLessThan,
        (CmpOp::Le, true) => IntCC::SignedLessThanOrEqual,
        (CmpOp::Gt, true) => IntCC::SignedGreaterThan,
        (CmpOp::Ge, true) => IntCC::SignedGreaterThanOrEqual,
        (CmpOp::Lt, false) => IntCC::UnsignedLessThan,
        (CmpOp::Le, false) => IntCC::UnsignedLessThanOrEqual,
        (CmpOp::Gt, false) => IntCC::UnsignedGreaterThan,
        (CmpOp::Ge, false) => IntCC::UnsignedGreaterThanOrEqual,
    }
}

/// Lowers expressions for one loop body, given the loaded inputs.
pub(crate) struct ExprLowering<'x> {
    pub inputs: &'x [DType],
    pub loaded: &'x [Option<Value>],
    pub helpers: Helpers,
    pub lanes: u8,
}

impl ExprLowering<'_> {
    /// The value of `expr` and its compute type.
    pub fn lower(&self, b: &mut FunctionBuilder<'_>, expr: &Expr) -> (Value, DType) {
        let lanes = self.lanes;
        match expr {
            Expr::Input(k) => (
                self.loaded[*k as usize].expect("inputs used are loaded"),
                self.inputs[*k as usize].compute(),
            ),
            Expr::F32(bits) => (
                ClifEmitter { b, lanes }.f(f32::from_bits(*bits)),
                DType::F32,
            ),
            Expr::S32(v) => (b.ins().iconst(types::I32, *v as i64), DType::S32),
            Expr::U32(v) => (b.ins().iconst(types::I32, *v as i64), DType::U32),
            Expr::Pred(v) => (b.ins().iconst(types::I8, *v as i64), DType::Pred),
            Expr::Unary(op, x) => {
                let (v, t) = self.lower(b, x);
                self.unary(b, *op, v, t)
            }
            Expr::Binary(op, x, y) => {
                if let Some(m) = expr.multiply_add() {
                    let (fa, t) = self.lower(b, m.a);
                    if t == DType::F32 {
                        let (fb, _) = self.lower(b, m.b);
                        let (fc, _) = self.lower(b, m.c);
                        let fa = if m.negate_product {
                            b.ins().fneg(fa)
                        } else {
                            fa
                        };
                        let fc = if m.negate_addend {
                            b.ins().fneg(fc)
                        } else {
                            fc
                        };
                        return (b.ins().fma(fa, fb, fc), t);
                    }
                }
                let (a, t) = self.lower(b, x);
                let (c, _) = self.lower(b, y);
                (self.binary(b, *op, a, c, t), t)
            }
            Expr::Compare(op, x, y) => {
                let (a, t) = self.lower(b, x);
                let (c, _) = self.lower(b, y);
                let v = match t {
                    DType::F32 => b.ins().fcmp(float_cc(*op), a, c),
                    other => b.ins().icmp(int_cc(*op, other == DType::S32), a, c),
                };
                (v, DType::Pred)
            }
            Expr::Select(p, x, y) => {
                let (m, _) = self.lower(b, p);
                let (a, t) = self.lower(b, x);
                let (c, _) = self.lower(b, y);
                (ClifEmitter { b, lanes }.select(m, a, c), t)
            }
            Expr::Clamp(lo, x, hi) => {
                let (l, t) = self.lower(b, lo);
                let (v, _) = self.lower(b, x);
                let (h, _) = self.lower(b, hi);
                let raised = self.binary(b, BinaryOp::Max, v, l, t);
                (self.binary(b, BinaryOp::Min, raised, h, t), t)
            }
            Expr::Convert(to, x) => {
                let (v, from) = self.lower(b, x);
                (convert(b, v, from, to.compute()), to.compute())
            }
        }
    }

    fn unary(
        &self,
        b: &mut FunctionBuilder<'_>,
        op: UnaryOp,
        v: Value,
        t: DType,
    ) -> (Value, DType) {
        let lanes = self.lanes;
        if t == DType::F32 {
            let mut e = ClifEmitter { b, lanes };
            let r = match op {
                UnaryOp::Abs => e.b.ins().fabs(v),
                UnaryOp::Neg => e.b.ins().fneg(v),
                UnaryOp::Sign => {
                    let one = e.f(1.0);
                    let signed = math::copysign(&mut e, one, v);
                    let zero = e.f(0.0);
                    let is_zero = e.eq(v, zero);
                    let keep = e.select(is_zero, v, signed);
                    let is_num = e.eq(v, v);
                    e.select(is_num, keep, v)
                }
                UnaryOp::Floor => e.b.ins().floor(v),
                UnaryOp::Ceil => e.b.ins().ceil(v),
                UnaryOp::RoundEven => e.b.ins().nearest(v),
                UnaryOp::RoundAfz => {
                    // trunc(x), plus one step away from zero when the dropped part is ≥ ½.
                    // NaN and ±inf give a NaN difference, so they keep trunc(x) = x.
                    let t = e.b.ins().trunc(v);
                    let diff = e.b.ins().fsub(v, t);
                    let d = e.b.ins().fabs(diff);
                    let half = e.f(0.5);
                    let ge_half = e.b.ins().fcmp(FloatCC::GreaterThanOrEqual, d, half);
                    let one = e.f(1.0);
                    let step = math::copysign(&mut e, one, v);
                    let away = e.b.ins().fadd(t, step);
                    e.select(ge_half, away, t)
                }
                UnaryOp::Sqrt => e.b.ins().sqrt(v),
                UnaryOp::Rsqrt => {
                    let s = e.b.ins().sqrt(v);
                    let one = e.f(1.0);
                    e.b.ins().fdiv(one, s)
                }
                UnaryOp::IsFinite => {
                    let a = e.b.ins().fabs(v);
                    let inf = e.b.ins().f32const(f32::INFINITY);
                    return (e.b.ins().fcmp(FloatCC::LessThan, a, inf), DType::Pred);
                }
                // The transcendental routines; anything else is not a float op.
                op => math::unary(&mut e, op, v)
                    .unwrap_or_else(|| unreachable!("type-checked: {op:?} is not a float op")),
            };
            return (r, DType::F32);
        }
        let r = match (op, t) {
            (UnaryOp::Not, DType::Pred) => b.ins().bxor_imm_s(v, 1),
            (UnaryOp::Not, _) => b.ins().bnot(v),
            (UnaryOp::Abs, DType::S32) => b.ins().iabs(v),
            (UnaryOp::Abs, _) => v,
            (UnaryOp::Neg, _) => b.ins().ineg(v),
            (UnaryOp::Sign, DType::S32) => {
                let pos = b.ins().icmp_imm_s(IntCC::SignedGreaterThan, v, 0);
                let neg = b.ins().icmp_imm_s(IntCC::SignedLessThan, v, 0);
                let pos = b.ins().uextend(types::I32, pos);
                let neg = b.ins().uextend(types::I32, neg);
                b.ins().isub(pos, neg)
            }
            (UnaryOp::Sign, _) => {
                let nz = b.ins().icmp_imm_s(IntCC::NotEqual, v, 0);
                b.ins().uextend(types::I32, nz)
            }
            (UnaryOp::Popcnt, _) => b.ins().popcnt(v),
            (UnaryOp::Clz, _) => b.ins().clz(v),
            (op, t) => unreachable!("type-checked: {op:?} of {t:?}"),
        };
        (r, t)
    }

    fn binary(
        &self,
        b: &mut FunctionBuilder<'_>,
        op: BinaryOp,
        x: Value,
        y: Value,
        t: DType,
    ) -> Value {
        let h = self.helpers;
        match t {
            DType::F32 => match op {
                BinaryOp::Add => b.ins().fadd(x, y),
                BinaryOp::Sub => b.ins().fsub(x, y),
                BinaryOp::Mul => b.ins().fmul(x, y),
                BinaryOp::Div => b.ins().fdiv(x, y),
                BinaryOp::Max => b.ins().fmax(x, y),
                BinaryOp::Min => b.ins().fmin(x, y),
                BinaryOp::Rem => call(b, h.fmod, &[x, y]),
                BinaryOp::Pow => math::pow(
                    &mut ClifEmitter {
                        b,
                        lanes: self.lanes,
                    },
                    x,
                    y,
                ),
                BinaryOp::Atan2 => math::atan2(
                    &mut ClifEmitter {
                        b,
                        lanes: self.lanes,
                    },
                    x,
                    y,
                ),
                _ => unreachable!("type-checked: {op:?} is not a float op"),
            },
            DType::Pred => match op {
                BinaryOp::And | BinaryOp::Min => b.ins().band(x, y),
                BinaryOp::Or | BinaryOp::Max => b.ins().bor(x, y),
                BinaryOp::Xor => b.ins().bxor(x, y),
                _ => unreachable!("type-checked: {op:?} is not a pred op"),
            },
            _ => {
                let signed = t == DType::S32;
                match op {
                    BinaryOp::Add => b.ins().iadd(x, y),
                    BinaryOp::Sub => b.ins().isub(x, y),
                    BinaryOp::Mul => b.ins().imul(x, y),
                    BinaryOp::Div | BinaryOp::Rem => int_div_rem(b, op, x, y, signed),
                    BinaryOp::Pow => call(b, if signed { h.powi } else { h.powu }, &[x, y]),
                    BinaryOp::Max => {
                        if signed {
                            b.ins().smax(x, y)
                        } else {
                            b.ins().umax(x, y)
                        }
                    }
                    BinaryOp::Min => {
                        if signed {
                            b.ins().smin(x, y)
                        } else {
                            b.ins().umin(x, y)
                        }
                    }
                    BinaryOp::And => b.ins().band(x, y),
                    BinaryOp::Or => b.ins().bor(x, y),
                    BinaryOp::Xor => b.ins().bxor(x, y),
                    BinaryOp::Shl | BinaryOp::ShrLogical | BinaryOp::ShrArithmetic => {
                        // Cranelift masks shift amounts; XLA clears (or sign-fills) past the width.
                        let past = b.ins().icmp_imm_s(IntCC::UnsignedGreaterThanOrEqual, y, 32);
                        if op == BinaryOp::ShrArithmetic {
                            let max = b.ins().iconst(types::I32, 31);
                            let amount = b.ins().select(past, max, y);
                            b.ins().sshr(x, amount)
                        } else {
                            let shifted = if op == BinaryOp::Shl {
                                b.ins().ishl(x, y)
                            } else {
                                b.ins().ushr(x, y)
                            };
                            let zero = b.ins().iconst(types::I32, 0);
                            b.ins().select(past, zero, shifted)
                        }
                    }
                    BinaryOp::Atan2 => unreachable!("type-checked: atan2 is a float op"),
                }
            }
        }
    }
}

fn call(b: &mut FunctionBuilder<'_>, f: FuncRef, args: &[Value]) -> Value {
    let inst = b.ins().call(f, args);
    b.inst_results(inst)[0]
}

/// Division and remainder without traps: x/0 = -1 (all ones), x%0 = x, MIN/-1 = MIN, MIN%-1 = 0.
fn int_div_rem(
    b: &mut FunctionBuilder<'_>,
    op: BinaryOp,
    x: Value,
    y: Value,
    signed: bool,
) -> Value {
    let zero_divisor = b.ins().icmp_imm_s(IntCC::Equal, y, 0);
    let one = b.ins().iconst(types::I32, 1);
    let mut safe = b.ins().select(zero_divisor, one, y);
    if signed {
        let min = b.ins().icmp_imm_s(IntCC::Equal, x, i32::MIN as i64);
        let minus_one = b.ins().icmp_imm_s(IntCC::Equal, y, -1);
        let overflow = b.ins().band(min, minus_one);
        safe = b.ins().select(overflow, one, safe);
    }
    let r = match (op, signed) {
        (BinaryOp::Div, true) => b.ins().sdiv(x, safe),
        (BinaryOp::Div, false) => b.ins().udiv(x, safe),
        (_, true) => b.ins().srem(x, safe),
        (_, false) => b.ins().urem(x, safe),
    };
    let fallback = if op == BinaryOp::Div {
        b.ins().iconst(types::I32, -1)
    } else {
        x
    };
    b.ins().select(zero_divisor, fallback, r)
}

/// Converts a scalar between compute types with the reference's rules.
pub(crate) fn convert(b: &mut FunctionBuilder<'_>, v: Value, from: DType, to: DType) -> Value {
    match (from, to) {
        (f, t) if f == t => v,
        (DType::F32, DType::S32) => b.ins().fcvt_to_sint_sat(types::I32, v),
        (DType::F32, DType::U32) => b.ins().fcvt_to_uint_sat(types::I32, v),
        (DType::F32, DType::Pred) => {
            let zero = b.ins().f32const(0.0);
            b.ins().fcmp(FloatCC::NotEqual, v, zero)
        }
        (DType::S32, DType::F32) => b.ins().fcvt_from_sint(types::F32, v),
        (DType::U32, DType::F32) => b.ins().fcvt_from_uint(types::F32, v),
        (DType::Pred, DType::F32) => {
            let w = b.ins().uextend(types::I32, v);
            b.ins().fcvt_from_uint(types::F32, w)
        }
        (DType::S32 | DType::U32, DType::Pred) => b.ins().icmp_imm_s(IntCC::NotEqual, v, 0),
        (DType::Pred, DType::S32 | DType::U32) => b.ins().uextend(types::I32, v),
        // s32 ↔ u32 keep their bits.
        (DType::S32 | DType::U32, DType::S32 | DType::U32) => v,
        (f, t) => unreachable!("no conversion {f:?} → {t:?} among compute types"),
    }
}
