//! 64-bit integers kept exact on a 32-bit device: every `s64`/`u64` value of the module
//! becomes a `u32[dims..., 2]` array of (low, high) words, and each operation on it the
//! 32-bit operations that compute it (additions with carries, products from 16-bit
//! halves, shifts across the word boundary, comparisons high word first).
//!
//! The layout is the value's own bytes (the word dimension is the most minor), so a
//! `bitcast-convert` between `u64[n]` and `u32[n, 2]` (random-number state, hashing) moves
//! nothing. Operations without a word form (division, dots, sorts, gathers on 64-bit
//! values, conversions to and from floats) are refused by name.

use super::words::{Emitter, names_in, rebuild, renamed};
use crate::CompileError;
use std::collections::HashMap;
use xla_ir::attributes::{ComparisonDirection, PadDim, SliceDim};
use xla_ir::literal::{ArrayData, ArrayLiteral, Literal};
use xla_ir::{
    ArrayShape, BinaryOp, CompId, Computation, ElementType, InstrId, Instruction, Layout, Module,
    Op, Shape, UnaryOp,
};

const PASS: &str = "int64-conversion";

/// True for the 64-bit integer types.
pub(super) fn is_wide(t: ElementType) -> bool {
    matches!(t, ElementType::S64 | ElementType::U64)
}

fn has_wide(shape: &Shape) -> bool {
    shape.leaf_arrays().iter().any(|a| is_wide(a.element_type))
}

/// The word-pair form of a shape: each 64-bit integer leaf `T[dims]` becomes
/// `u32[dims, 2]` with the word dimension most minor.
pub(super) fn words_shape(shape: &Shape) -> Shape {
    match shape {
        Shape::Array(a) if is_wide(a.element_type) => Shape::Array(words_array(a)),
        Shape::Tuple(items) => Shape::Tuple(items.iter().map(words_shape).collect()),
        other => other.clone(),
    }
}

fn words_array(a: &ArrayShape) -> ArrayShape {
    let rank = a.dims.len() as i64;
    let mut dims = a.dims.clone();
    dims.push(2);
    let layout = a.layout.as_ref().map(|l| Layout {
        minor_to_major: std::iter::once(rank)
            .chain(l.minor_to_major.iter().copied())
            .collect(),
        ..l.clone()
    });
    ArrayShape {
        element_type: ElementType::U32,
        dims,
        layout,
    }
}

fn words_literal(l: &Literal) -> Literal {
    match l {
        Literal::Array(a) => {
            let split = |v: &mut dyn Iterator<Item = u64>| -> Vec<u32> {
                v.flat_map(|x| [x as u32, (x >> 32) as u32]).collect()
            };
            let words = match &a.data {
                ArrayData::U64(v) => split(&mut v.iter().copied()),
                ArrayData::S64(v) => split(&mut v.iter().map(|&x| x as u64)),
                _ => return l.clone(),
            };
            Literal::Array(ArrayLiteral {
                shape: words_array(&a.shape),
                data: ArrayData::U32(words),
            })
        }
        Literal::Tuple(items) => Literal::Tuple(items.iter().map(words_literal).collect()),
        Literal::Token => Literal::Token,
    }
}

/// Rewrites every 64-bit integer of `module` as word pairs; returns how many
/// instructions were rewritten.
pub(super) fn split_into_words(module: &mut Module) -> Result<usize, CompileError> {
    let reducers = word_reducers(module)?;
    let mut taken = names_in(module);
    let ids: Vec<CompId> = module.computations().map(|(id, _)| id).collect();
    let mut rewritten = 0;
    for id in ids {
        if reducers.values().any(|&(_, r)| r == id) {
            continue;
        }
        let new = rebuild(PASS, module, id, &mut taken, &mut |e, old, instr, map| {
            let involved = has_wide(&instr.shape)
                || instr
                    .operands
                    .iter()
                    .any(|o| has_wide(&old.instr(*o).shape));
            if !involved {
                return Ok(None);
            }
            rewritten += 1;
            rewrite(e, old, instr, map, &reducers).map(Some)
        })?;
        *module.computation_mut(id) = new;
    }
    if let Some(layout) = &mut module.entry_computation_layout {
        layout.parameters = layout.parameters.iter().map(words_shape).collect();
        layout.result = words_shape(&layout.result);
    }
    Ok(rewritten)
}

/// For each reducer of a 64-bit reduction: its bitwise op and a `u32` reducer doing the
/// same word by word. Any other reduction of 64-bit values is refused.
fn word_reducers(module: &mut Module) -> Result<Reducers, CompileError> {
    let mut needed: Vec<(CompId, BinaryOp)> = Vec::new();
    for (_, comp) in module.computations() {
        for (_, instr) in comp.instructions() {
            if let Op::Reduce { to_apply, .. } = &instr.op
                && has_wide(&instr.shape)
            {
                match bitwise_reducer(module.computation(*to_apply)) {
                    Some(op) if instr.operands.len() == 2 => needed.push((*to_apply, op)),
                    _ => {
                        return Err(unsupported(
                            comp,
                            instr,
                            "only and/or/xor reductions of 64-bit integers have a word form",
                        ));
                    }
                }
            }
        }
    }
    let mut taken = names_in(module);
    let mut made: HashMap<BinaryOp, CompId> = HashMap::new();
    let mut out = Reducers::new();
    for (reducer, op) in needed {
        let words = match made.get(&op) {
            Some(&c) => c,
            None => {
                let c = module.add_computation(u32_reducer(op, &mut taken));
                made.insert(op, c);
                c
            }
        };
        out.insert(reducer, (op, words));
    }
    Ok(out)
}

/// Reducers of 64-bit reductions: their op and the `u32` reducer that replaces them.
type Reducers = HashMap<CompId, (BinaryOp, CompId)>;

/// `(lhs: u32[], rhs: u32[]) -> op(lhs, rhs)`, with names not yet `taken`.
fn u32_reducer(op: BinaryOp, taken: &mut std::collections::HashSet<String>) -> Computation {
    let scalar = Shape::array(ElementType::U32, &[]);
    let mut name = |base: String| {
        let mut n = base.clone();
        let mut k = 1;
        while !taken.insert(n.clone()) {
            n = format!("{base}.{k}");
            k += 1;
        }
        n
    };
    let mut comp = Computation::new(name(format!("{}_u32_words", op.name())));
    let a = comp.push(Instruction::new(
        name("lhs".into()),
        Op::Parameter { number: 0 },
        &[],
        scalar.clone(),
    ));
    let b = comp.push(Instruction::new(
        name("rhs".into()),
        Op::Parameter { number: 1 },
        &[],
        scalar.clone(),
    ));
    comp.root = comp.push(Instruction::new(
        name(op.name().into()),
        Op::Binary(op),
        &[a, b],
        scalar,
    ));
    comp
}

/// The op of a reducer `(a, b) -> a OP b` with OP bitwise.
fn bitwise_reducer(comp: &Computation) -> Option<BinaryOp> {
    let root = comp.root_instr();
    match root.op {
        Op::Binary(op @ (BinaryOp::And | BinaryOp::Or | BinaryOp::Xor))
            if root
                .operands
                .iter()
                .all(|o| matches!(comp.instr(*o).op, Op::Parameter { .. })) =>
        {
            Some(op)
        }
        _ => None,
    }
}

fn unsupported(comp: &Computation, instr: &Instruction, reason: &str) -> CompileError {
    CompileError::Unsupported {
        at: crate::types::location(comp, instr),
        instruction: instr.name.clone(),
        opcode: instr.op.name().to_string(),
        reason: format!(
            "64-bit integers are computed as pairs of 32-bit words on the IPU here (the module needs them exact), and {reason} (run the module with --engine reference)"
        ),
    }
}

/// The 64-bit integer elements of `id` when it is a constant (or a broadcast, reshape or
/// bitcast of one).
pub(super) fn constant_values(comp: &Computation, mut id: InstrId) -> Option<Vec<u64>> {
    loop {
        let instr = comp.instr(id);
        match &instr.op {
            Op::Broadcast { .. } | Op::Reshape | Op::Bitcast => id = instr.operands[0],
            Op::Constant {
                literal: Literal::Array(a),
            } => {
                return match &a.data {
                    ArrayData::U64(v) => Some(v.clone()),
                    ArrayData::S64(v) => Some(v.iter().map(|&x| x as u64).collect()),
                    _ => None,
                };
            }
            _ => return None,
        }
    }
}

/// The single value every element of `id` has, when it is such a constant.
fn uniform_constant(comp: &Computation, id: InstrId) -> Option<u64> {
    let values = constant_values(comp, id)?;
    let first = *values.first()?;
    values.iter().all(|&v| v == first).then_some(first)
}

/// The words emitted for one instruction that touches 64-bit integers.
fn rewrite(
    e: &mut Emitter,
    comp: &Computation,
    instr: &Instruction,
    map: &[Option<InstrId>],
    reducers: &Reducers,
) -> Result<InstrId, CompileError> {
    let o: Vec<InstrId> = instr.operands.iter().map(|x| renamed(map, *x)).collect();
    let shape = words_shape(&instr.shape);
    let result_type = instr.shape.as_array().map(|a| a.element_type);
    let operand_type = |k: usize| {
        comp.instr(instr.operands[k])
            .shape
            .as_array()
            .map(|a| a.element_type)
    };
    let signed = |t: Option<ElementType>| t == Some(ElementType::S64);
    let fail = |reason: &str| Err(unsupported(comp, instr, reason));
    match &instr.op {
        Op::Parameter { .. }
        | Op::Tuple
        | Op::GetTupleElement { .. }
        | Op::While { .. }
        | Op::Call { .. }
        | Op::Fusion { .. }
        | Op::Conditional { .. }
        | Op::OptimizationBarrier
        | Op::Unary(UnaryOp::Copy) => {
            let mut copy = instr.clone();
            copy.shape = shape;
            let id = e.copy(&copy, map);
            Ok(id)
        }
        Op::Constant { literal } => {
            let mut copy = instr.clone();
            copy.shape = shape;
            copy.op = Op::Constant {
                literal: words_literal(literal),
            };
            Ok(e.copy(&copy, map))
        }
        Op::Reshape | Op::Bitcast | Op::Concatenate { .. } | Op::Reverse { .. }
            if has_wide(&instr.shape) =>
        {
            e.add(instr.op.clone(), &o, Some(shape))
        }
        Op::Broadcast { dimensions } if has_wide(&instr.shape) => {
            let mut dimensions = dimensions.clone();
            dimensions.push(instr.shape.as_array().map_or(0, |a| a.rank()) as i64);
            e.add(Op::Broadcast { dimensions }, &o, Some(shape))
        }
        Op::Transpose { dimensions } if has_wide(&instr.shape) => {
            let mut dimensions = dimensions.clone();
            dimensions.push(dimensions.len() as i64);
            e.add(Op::Transpose { dimensions }, &o, Some(shape))
        }
        Op::Slice { slices } if has_wide(&instr.shape) => {
            let mut slices = slices.clone();
            slices.push(SliceDim {
                start: 0,
                limit: 2,
                stride: 1,
            });
            e.add(Op::Slice { slices }, &o, Some(shape))
        }
        Op::Pad { padding } if has_wide(&instr.shape) => {
            let mut padding = padding.clone();
            padding.push(PadDim::default());
            e.add(Op::Pad { padding }, &o, Some(shape))
        }
        Op::Iota { dimension } => {
            let dims = array_dims(&instr.shape);
            let lo = e.add(
                Op::Iota {
                    dimension: *dimension,
                },
                &[],
                Some(Shape::array(ElementType::U32, &dims)),
            )?;
            let hi = e.splat(0, &dims)?;
            e.pair(lo, hi)
        }
        Op::Select if has_wide(&instr.shape) => {
            let p = o[0];
            let pdims = e.dims(p);
            let p = if pdims.is_empty() {
                p
            } else {
                let mut dims = pdims.clone();
                dims.push(2);
                let mapped: Vec<i64> = (0..pdims.len() as i64).collect();
                e.broadcast(p, &mapped, &dims, ElementType::Pred)?
            };
            e.add(Op::Select, &[p, o[1], o[2]], Some(shape))
        }
        Op::Convert => convert(e, o[0], operand_type(0), result_type, fail),
        Op::BitcastConvert => {
            let (from, to) = (operand_type(0), result_type);
            match (from, to) {
                (Some(f), Some(t)) if is_wide(f) && is_wide(t) => Ok(o[0]),
                (Some(f), Some(t)) if is_wide(f) && t.byte_size() == 4 && !t.is_float() => {
                    if t == ElementType::U32 {
                        Ok(o[0])
                    } else {
                        e.reinterpret(o[0], t)
                    }
                }
                (Some(f), Some(t)) if is_wide(t) && f.byte_size() == 4 && !f.is_float() => {
                    if f == ElementType::U32 {
                        Ok(o[0])
                    } else {
                        e.reinterpret(o[0], ElementType::U32)
                    }
                }
                _ => fail("this bitcast-convert has no word form"),
            }
        }
        Op::Unary(op) => {
            let x = o[0];
            match op {
                UnaryOp::Not => e.add(Op::Unary(UnaryOp::Not), &[x], Some(shape)),
                UnaryOp::Negate => {
                    let zero = e.splat(0, &e.dims(x))?;
                    subtract(e, zero, x)
                }
                UnaryOp::Abs => {
                    let zero = e.splat(0, &e.dims(x))?;
                    let negative = less(e, x, zero, signed(result_type))?;
                    let minus = subtract(e, zero, x)?;
                    select_pairs(e, negative, minus, x)
                }
                UnaryOp::Popcnt => {
                    let (lo, hi) = (e.word(x, 0)?, e.word(x, 1)?);
                    let a = e.unary(UnaryOp::Popcnt, lo)?;
                    let b = e.unary(UnaryOp::Popcnt, hi)?;
                    let n = e.binary(BinaryOp::Add, a, b)?;
                    let zero = e.splat(0, &e.dims(n))?;
                    e.pair(n, zero)
                }
                UnaryOp::Clz => {
                    let (lo, hi) = (e.word(x, 0)?, e.word(x, 1)?);
                    let zero = e.splat(0, &e.dims(hi))?;
                    let high_empty = e.compare(ComparisonDirection::Eq, hi, zero)?;
                    let clz_lo = e.unary(UnaryOp::Clz, lo)?;
                    let clz_lo = e.binary_const(BinaryOp::Add, clz_lo, 32)?;
                    let clz_hi = e.unary(UnaryOp::Clz, hi)?;
                    let n = e.select(high_empty, clz_lo, clz_hi)?;
                    e.pair(n, zero)
                }
                _ => fail(&format!(
                    "{} of 64-bit integers is not supported",
                    op.name()
                )),
            }
        }
        Op::Binary(op) => {
            let (a, b) = (o[0], o[1]);
            let s = signed(result_type);
            match op {
                BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => {
                    e.add(Op::Binary(*op), &[a, b], Some(shape))
                }
                BinaryOp::Add => add(e, a, b),
                BinaryOp::Subtract => subtract(e, a, b),
                BinaryOp::Multiply => multiply(e, a, b),
                BinaryOp::Maximum | BinaryOp::Minimum => {
                    let a_less = less(e, a, b, s)?;
                    if *op == BinaryOp::Maximum {
                        select_pairs(e, a_less, b, a)
                    } else {
                        select_pairs(e, a_less, a, b)
                    }
                }
                BinaryOp::ShiftLeft
                | BinaryOp::ShiftRightLogical
                | BinaryOp::ShiftRightArithmetic => {
                    let amount = uniform_constant(comp, instr.operands[1]);
                    shift(e, *op, a, b, amount)
                }
                _ => fail(&format!(
                    "{} of 64-bit integers is not supported",
                    op.name()
                )),
            }
        }
        Op::Compare { direction, .. } => {
            let s = signed(operand_type(0));
            compare(e, *direction, o[0], o[1], s)
        }
        Op::Clamp => {
            let s = signed(result_type);
            let (lo, x, hi) = (o[0], o[1], o[2]);
            let below = less(e, x, lo, s)?;
            let x = select_pairs(e, below, lo, x)?;
            let above = less(e, hi, x, s)?;
            select_pairs(e, above, hi, x)
        }
        Op::Reduce {
            dimensions,
            to_apply,
        } => {
            // `word_reducers` made a word reducer for every 64-bit reduction, or refused it.
            let Some(&(op, words)) = reducers.get(to_apply) else {
                return fail("this reduction has no word form");
            };
            let identity = if op == BinaryOp::And { u32::MAX } else { 0 };
            let init = e.splat(identity, &[])?;
            let reduced = e.add(
                Op::Reduce {
                    dimensions: dimensions.clone(),
                    to_apply: words,
                },
                &[o[0], init],
                Some(shape.clone()),
            )?;
            // The initial value joins once: the reduction is associative and commutative.
            let dims = e.dims(reduced);
            let init_words =
                e.broadcast(o[1], &[dims.len() as i64 - 1], &dims, ElementType::U32)?;
            e.add(Op::Binary(op), &[reduced, init_words], Some(shape))
        }
        _ => fail(&format!(
            "{} on 64-bit integers is not supported",
            instr.op.name()
        )),
    }
}

fn array_dims(shape: &Shape) -> Vec<i64> {
    shape
        .as_array()
        .map(|a| a.dims.to_vec())
        .unwrap_or_default()
}

fn split(e: &mut Emitter, x: InstrId) -> Result<(InstrId, InstrId), CompileError> {
    Ok((e.word(x, 0)?, e.word(x, 1)?))
}

fn add(e: &mut Emitter, a: InstrId, b: InstrId) -> Result<InstrId, CompileError> {
    let (a0, a1) = split(e, a)?;
    let (b0, b1) = split(e, b)?;
    let (lo, carry) = e.add_carry(a0, b0)?;
    let hi = e.binary(BinaryOp::Add, a1, b1)?;
    let hi = e.binary(BinaryOp::Add, hi, carry)?;
    e.pair(lo, hi)
}

fn subtract(e: &mut Emitter, a: InstrId, b: InstrId) -> Result<InstrId, CompileError> {
    let (a0, a1) = split(e, a)?;
    let (b0, b1) = split(e, b)?;
    let lo = e.binary(BinaryOp::Subtract, a0, b0)?;
    let borrowed = e.compare(ComparisonDirection::Lt, a0, b0)?;
    let borrow = e.convert(borrowed, ElementType::U32)?;
    let hi = e.binary(BinaryOp::Subtract, a1, b1)?;
    let hi = e.binary(BinaryOp::Subtract, hi, borrow)?;
    e.pair(lo, hi)
}

/// The low 64 bits of the product: the full product of the low words, plus the cross
/// products in the high word (their own high halves fall off the top).
fn multiply(e: &mut Emitter, a: InstrId, b: InstrId) -> Result<InstrId, CompileError> {
    let (a0, a1) = split(e, a)?;
    let (b0, b1) = split(e, b)?;
    let (lo, hi) = e.mul_wide(a0, b0)?;
    let x = e.binary(BinaryOp::Multiply, a0, b1)?;
    let y = e.binary(BinaryOp::Multiply, a1, b0)?;
    let hi = e.binary(BinaryOp::Add, hi, x)?;
    let hi = e.binary(BinaryOp::Add, hi, y)?;
    e.pair(lo, hi)
}

/// `a < b` of pairs: the high words decide (signed for `s64`), the low words break ties.
fn less(e: &mut Emitter, a: InstrId, b: InstrId, signed: bool) -> Result<InstrId, CompileError> {
    let (a0, a1) = split(e, a)?;
    let (b0, b1) = split(e, b)?;
    let (ha, hb) = if signed {
        (
            e.reinterpret(a1, ElementType::S32)?,
            e.reinterpret(b1, ElementType::S32)?,
        )
    } else {
        (a1, b1)
    };
    let high_less = e.compare(ComparisonDirection::Lt, ha, hb)?;
    let high_equal = e.compare(ComparisonDirection::Eq, a1, b1)?;
    let low_less = e.compare(ComparisonDirection::Lt, a0, b0)?;
    let tie = e.binary(BinaryOp::And, high_equal, low_less)?;
    e.binary(BinaryOp::Or, high_less, tie)
}

fn equal(e: &mut Emitter, a: InstrId, b: InstrId) -> Result<InstrId, CompileError> {
    let (a0, a1) = split(e, a)?;
    let (b0, b1) = split(e, b)?;
    let lo = e.compare(ComparisonDirection::Eq, a0, b0)?;
    let hi = e.compare(ComparisonDirection::Eq, a1, b1)?;
    e.binary(BinaryOp::And, lo, hi)
}

fn compare(
    e: &mut Emitter,
    direction: ComparisonDirection,
    a: InstrId,
    b: InstrId,
    signed: bool,
) -> Result<InstrId, CompileError> {
    use ComparisonDirection::*;
    match direction {
        Eq => equal(e, a, b),
        Ne => {
            let eq = equal(e, a, b)?;
            e.unary(UnaryOp::Not, eq)
        }
        Lt => less(e, a, b, signed),
        Gt => less(e, b, a, signed),
        Le => {
            let gt = less(e, b, a, signed)?;
            e.unary(UnaryOp::Not, gt)
        }
        Ge => {
            let lt = less(e, a, b, signed)?;
            e.unary(UnaryOp::Not, lt)
        }
    }
}

/// `select(p, a, b)` of pairs with `p` over the values (not their words).
fn select_pairs(
    e: &mut Emitter,
    p: InstrId,
    a: InstrId,
    b: InstrId,
) -> Result<InstrId, CompileError> {
    let pdims = e.dims(p);
    let mut dims = pdims.clone();
    dims.push(2);
    let mapped: Vec<i64> = (0..pdims.len() as i64).collect();
    let p = e.broadcast(p, &mapped, &dims, ElementType::Pred)?;
    e.select(p, a, b)
}

/// Conversions between 64-bit integers and narrower integers (or `pred`), and between
/// the two 64-bit types; floats are refused.
fn convert(
    e: &mut Emitter,
    x: InstrId,
    from: Option<ElementType>,
    to: Option<ElementType>,
    fail: impl Fn(&str) -> Result<InstrId, CompileError>,
) -> Result<InstrId, CompileError> {
    let (Some(from), Some(to)) = (from, to) else {
        return fail("this convert has no word form");
    };
    if is_wide(from) && is_wide(to) {
        return Ok(x);
    }
    if is_wide(to) {
        if from.is_float() {
            return fail(&format!("converting {from} to {to} is not supported"));
        }
        let lo = e.convert(x, ElementType::U32)?;
        let hi = if from.is_signed_int() {
            let s = e.convert(x, ElementType::S32)?;
            let dims = e.dims(s);
            let amount = e.splat(31, &dims)?;
            let amount = e.reinterpret(amount, ElementType::S32)?;
            let sign = e.binary(BinaryOp::ShiftRightArithmetic, s, amount)?;
            e.reinterpret(sign, ElementType::U32)?
        } else {
            e.splat(0, &e.dims(lo))?
        };
        return e.pair(lo, hi);
    }
    // From 64 bits to something narrower.
    if to.is_float() {
        return fail(&format!("converting {from} to {to} is not supported"));
    }
    let (lo, hi) = split(e, x)?;
    if to == ElementType::Pred {
        let any = e.binary(BinaryOp::Or, lo, hi)?;
        let zero = e.splat(0, &e.dims(any))?;
        return e.compare(ComparisonDirection::Ne, any, zero);
    }
    if to == ElementType::U32 {
        return Ok(lo);
    }
    e.convert(lo, to)
}

/// Shifts of pairs. A constant amount (the common `>> 32`) picks words directly; any
/// other amount combines both cases and selects, relying on 32-bit shifts by 32 or more
/// giving 0 (or the sign), as HLO defines them.
fn shift(
    e: &mut Emitter,
    op: BinaryOp,
    a: InstrId,
    b: InstrId,
    amount: Option<u64>,
) -> Result<InstrId, CompileError> {
    use BinaryOp::{Or, ShiftLeft, ShiftRightArithmetic, ShiftRightLogical, Subtract};
    let (a0, a1) = split(e, a)?;
    let dims = e.dims(a0);
    let sign = |e: &mut Emitter| -> Result<InstrId, CompileError> {
        let s = e.reinterpret(a1, ElementType::S32)?;
        let k = e.splat(31, &dims)?;
        let k = e.reinterpret(k, ElementType::S32)?;
        let fill = e.binary(ShiftRightArithmetic, s, k)?;
        e.reinterpret(fill, ElementType::U32)
    };
    if let Some(n) = amount {
        let (lo, hi) = match (op, n) {
            (_, 0) => return Ok(a),
            (ShiftLeft, n) if n < 32 => {
                let lo = e.binary_const(ShiftLeft, a0, n as u32)?;
                let h = e.binary_const(ShiftLeft, a1, n as u32)?;
                let carry = e.binary_const(ShiftRightLogical, a0, 32 - n as u32)?;
                (lo, e.binary(Or, h, carry)?)
            }
            (ShiftLeft, 32) => (e.splat(0, &dims)?, a0),
            (ShiftLeft, n) if n < 64 => (
                e.splat(0, &dims)?,
                e.binary_const(ShiftLeft, a0, n as u32 - 32)?,
            ),
            (ShiftLeft | ShiftRightLogical, _) if n >= 64 => {
                (e.splat(0, &dims)?, e.splat(0, &dims)?)
            }
            (_, n) if n < 32 => {
                let l = e.binary_const(ShiftRightLogical, a0, n as u32)?;
                let carry = e.binary_const(ShiftLeft, a1, 32 - n as u32)?;
                let lo = e.binary(Or, l, carry)?;
                let hi = if op == ShiftRightLogical {
                    e.binary_const(ShiftRightLogical, a1, n as u32)?
                } else {
                    let s = e.reinterpret(a1, ElementType::S32)?;
                    let k = e.splat(n as u32, &dims)?;
                    let k = e.reinterpret(k, ElementType::S32)?;
                    let h = e.binary(ShiftRightArithmetic, s, k)?;
                    e.reinterpret(h, ElementType::U32)?
                };
                (lo, hi)
            }
            (ShiftRightLogical, 32) => (a1, e.splat(0, &dims)?),
            (ShiftRightLogical, n) => (
                e.binary_const(ShiftRightLogical, a1, n as u32 - 32)?,
                e.splat(0, &dims)?,
            ),
            (_, n) => {
                let fill = sign(e)?;
                let lo = if n < 64 {
                    let s = e.reinterpret(a1, ElementType::S32)?;
                    let k = e.splat(n as u32 - 32, &dims)?;
                    let k = e.reinterpret(k, ElementType::S32)?;
                    let l = e.binary(ShiftRightArithmetic, s, k)?;
                    e.reinterpret(l, ElementType::U32)?
                } else {
                    fill
                };
                (lo, fill)
            }
        };
        return e.pair(lo, hi);
    }
    let (s, s_hi) = split(e, b)?;
    let thirty_two = e.splat(32, &dims)?;
    let up = e.binary(Subtract, thirty_two, s)?; // 32 - s (huge when s > 32: shifts to 0)
    let down = e.binary(Subtract, s, thirty_two)?; // s - 32 (huge when s < 32)
    let (lo, hi) = match op {
        ShiftLeft => {
            let lo = e.binary(ShiftLeft, a0, s)?;
            let h1 = e.binary(ShiftLeft, a1, s)?;
            let h2 = e.binary(ShiftRightLogical, a0, up)?;
            let h3 = e.binary(ShiftLeft, a0, down)?;
            let h = e.binary(Or, h1, h2)?;
            (lo, e.binary(Or, h, h3)?)
        }
        ShiftRightLogical => {
            let l1 = e.binary(ShiftRightLogical, a0, s)?;
            let l2 = e.binary(ShiftLeft, a1, up)?;
            let l3 = e.binary(ShiftRightLogical, a1, down)?;
            let l = e.binary(Or, l1, l2)?;
            (e.binary(Or, l, l3)?, e.binary(ShiftRightLogical, a1, s)?)
        }
        _ => {
            let sa1 = e.reinterpret(a1, ElementType::S32)?;
            let ss = e.reinterpret(s, ElementType::S32)?;
            let hi = e.binary(ShiftRightArithmetic, sa1, ss)?;
            let hi = e.reinterpret(hi, ElementType::U32)?;
            let l1 = e.binary(ShiftRightLogical, a0, s)?;
            let l2 = e.binary(ShiftLeft, a1, up)?;
            let small = e.binary(Or, l1, l2)?;
            let sdown = e.reinterpret(down, ElementType::S32)?;
            let large = e.binary(ShiftRightArithmetic, sa1, sdown)?;
            let large = e.reinterpret(large, ElementType::U32)?;
            let is_small = e.compare(ComparisonDirection::Lt, s, thirty_two)?;
            (e.select(is_small, small, large)?, hi)
        }
    };
    // An amount of 2^32 or more (or negative) shifts everything out.
    let zero = e.splat(0, &dims)?;
    let huge = e.compare(ComparisonDirection::Ne, s_hi, zero)?;
    let fill = if op == ShiftRightArithmetic {
        sign(e)?
    } else {
        zero
    };
    let lo = e.select(huge, fill, lo)?;
    let hi = e.select(huge, fill, hi)?;
    e.pair(lo, hi)
}

#[cfg(test)]
mod tests {
    //! The word form against 64-bit arithmetic on the reference evaluator: the same module
    //! evaluated as written and after the rewrite, over edge values and their pairs.
    use super::*;
    use xla_ir::attributes::ComparisonDirection as Dir;
    use xla_ir::builder::{BuildError, ComputationBuilder, ModuleBuilder};

    const EDGES: [u64; 14] = [
        0,
        1,
        2,
        31,
        32,
        33,
        63,
        64,
        0xFFFF_FFFF,
        0x1_0000_0000,
        0x8000_0000_0000_0000,
        u64::MAX,
        0x0123_4567_89AB_CDEF,
        0xDEAD_BEEF_0BAD_F00D,
    ];

    /// Every ordered pair of edge values, as two arrays.
    fn pairs() -> (Vec<u64>, Vec<u64>) {
        let mut a = Vec::new();
        let mut b = Vec::new();
        for &x in &EDGES {
            for &y in &EDGES {
                a.push(x);
                b.push(y);
            }
        }
        (a, b)
    }

    fn literal(t: ElementType, v: &[u64]) -> Literal {
        let data = match t {
            ElementType::U64 => ArrayData::U64(v.to_vec()),
            _ => ArrayData::S64(v.iter().map(|&x| x as i64).collect()),
        };
        Literal::Array(ArrayLiteral {
            shape: ArrayShape::new(t, &[v.len() as i64]),
            data,
        })
    }

    /// A word-pair result back in its 64-bit type.
    fn from_words(words: &ArrayLiteral, t: ElementType) -> ArrayLiteral {
        let ArrayData::U32(w) = &words.data else {
            panic!("words are u32, got {}", words.shape)
        };
        let values: Vec<u64> = w
            .chunks_exact(2)
            .map(|p| p[0] as u64 | (p[1] as u64) << 32)
            .collect();
        let dims = &words.shape.dims[..words.shape.dims.len() - 1];
        let data = match t {
            ElementType::U64 => ArrayData::U64(values),
            _ => ArrayData::S64(values.into_iter().map(|x| x as i64).collect()),
        };
        ArrayLiteral {
            shape: ArrayShape::new(t, dims),
            data,
        }
    }

    fn leaves(l: Literal) -> Vec<ArrayLiteral> {
        match l {
            Literal::Array(a) => vec![a],
            Literal::Tuple(items) => items.into_iter().flat_map(leaves).collect(),
            Literal::Token => vec![],
        }
    }

    type Build =
        dyn Fn(&mut ComputationBuilder, InstrId, InstrId) -> Result<Vec<InstrId>, BuildError>;

    /// Builds `(a: t[n], b: t[n]) -> tuple(build(a, b))`, evaluates it before and after
    /// the rewrite, and compares every result.
    fn same_after_rewrite(t: ElementType, build: &Build) {
        let (a, b) = pairs();
        let n = a.len() as i64;
        let mut m = ModuleBuilder::new("words");
        let mut main = m.computation("main");
        let pa = main.parameter(0, Shape::array(t, &[n]), "a").unwrap();
        let pb = main.parameter(1, Shape::array(t, &[n]), "b").unwrap();
        let outs = build(&mut main, pa, pb).unwrap();
        let root = main.tuple(&outs).unwrap();
        let entry = main.finish(root).unwrap();
        let module = m.finish(entry).unwrap();
        let inputs = [literal(t, &a), literal(t, &b)];
        let want = leaves(xla_ir::eval::evaluate(&module, &inputs).unwrap());

        let mut words = module.clone();
        split_into_words(&mut words).unwrap();
        xla_ir::verify(&words).unwrap_or_else(|e| panic!("{e}\n{words}"));
        let word_inputs: Vec<Literal> = inputs.iter().map(words_literal).collect();
        let got = leaves(xla_ir::eval::evaluate(&words, &word_inputs).unwrap());
        assert_eq!(got.len(), want.len());
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            let g = if is_wide(w.shape.element_type) {
                from_words(g, w.shape.element_type)
            } else {
                g.clone()
            };
            if g.data != w.data {
                let (ArrayData::U64(_)
                | ArrayData::S64(_)
                | ArrayData::Pred(_)
                | ArrayData::U32(_)
                | ArrayData::S32(_)) = &w.data
                else {
                    panic!("output {k}: {:?} vs {:?}", g.data, w.data);
                };
                let first = (0..a.len())
                    .find(|&i| {
                        format!("{:?}", slot(&g.data, i)) != format!("{:?}", slot(&w.data, i))
                    })
                    .expect("some element differs");
                panic!(
                    "{t} output {k} ({}): a={:#x} b={:#x}: words give {} but 64-bit arithmetic gives {}",
                    module.entry_computation().instr(outs[k]).op.name(),
                    a[first],
                    b[first],
                    slot(&g.data, first),
                    slot(&w.data, first)
                );
            }
        }
    }

    fn slot(d: &ArrayData, i: usize) -> String {
        match d {
            ArrayData::U64(v) => format!("{:#x}", v[i]),
            ArrayData::S64(v) => format!("{}", v[i]),
            ArrayData::U32(v) => format!("{:#x}", v[i]),
            ArrayData::S32(v) => format!("{}", v[i]),
            ArrayData::Pred(v) => format!("{}", v[i]),
            other => format!("{other:?}"),
        }
    }

    fn arithmetic(
        c: &mut ComputationBuilder,
        a: InstrId,
        b: InstrId,
    ) -> Result<Vec<InstrId>, BuildError> {
        let mut out = vec![
            c.add(a, b)?,
            c.subtract(a, b)?,
            c.multiply(a, b)?,
            c.and(a, b)?,
            c.or(a, b)?,
            c.xor(a, b)?,
            c.not(a)?,
            c.negate(a)?,
            c.maximum(a, b)?,
            c.minimum(a, b)?,
            c.shift_left(a, b)?,
            c.shift_right_logical(a, b)?,
            c.shift_right_arithmetic(a, b)?,
            c.popcnt(a)?,
            c.count_leading_zeros(a)?,
            c.clamp(b, a, b)?,
        ];
        if c.shape(a).as_array().map(|s| s.element_type) == Some(ElementType::S64) {
            out.push(c.abs(a)?);
        }
        for d in [Dir::Eq, Dir::Ne, Dir::Lt, Dir::Le, Dir::Gt, Dir::Ge] {
            out.push(c.compare(a, b, d, None)?);
        }
        let p = c.compare(a, b, Dir::Lt, None)?;
        out.push(c.select(p, a, b)?);
        for to in [
            ElementType::U32,
            ElementType::S32,
            ElementType::S8,
            ElementType::Pred,
        ] {
            let narrow = c.convert(a, to)?;
            out.push(narrow);
            out.push(c.convert(narrow, ElementType::U64)?);
            out.push(c.convert(narrow, ElementType::S64)?);
        }
        // Constant shift amounts take the direct path.
        let t = c.shape(a).as_array().map(|s| s.element_type).unwrap();
        for k in [0u64, 1, 31, 32, 33, 63, 64, 200] {
            let amount = c.constant(literal(t, &[k]))?;
            let amount = c.reshape(amount, &[])?;
            let dims = c.shape(a).as_array().unwrap().dims.to_vec();
            let amount = c.broadcast(amount, &dims, &[])?;
            out.push(c.shift_left(a, amount)?);
            out.push(c.shift_right_logical(a, amount)?);
            out.push(c.shift_right_arithmetic(a, amount)?);
        }
        Ok(out)
    }

    #[test]
    fn unsigned_arithmetic_in_words_is_64_bit_arithmetic() {
        same_after_rewrite(ElementType::U64, &arithmetic);
    }

    #[test]
    fn signed_arithmetic_in_words_is_64_bit_arithmetic() {
        same_after_rewrite(ElementType::S64, &arithmetic);
    }

    #[test]
    fn shapes_iota_reductions_and_reinterpretation_move_words_whole() {
        same_after_rewrite(ElementType::U64, &|c, a, _| {
            let n = c.shape(a).as_array().unwrap().dims[0];
            let grid = c.reshape(a, &[n / 4, 4])?;
            let t = c.transpose(grid, &[1, 0])?;
            let s = c.slice(
                t,
                &[
                    SliceDim {
                        start: 1,
                        limit: 3,
                        stride: 1,
                    },
                    SliceDim {
                        start: 0,
                        limit: n / 4,
                        stride: 2,
                    },
                ],
            )?;
            let r = c.reverse(s, &[1])?;
            let joined = c.concatenate(&[r, r], 0)?;
            let iota = c.iota(Shape::array(ElementType::U64, &[3, 5]), 1)?;
            let zero = c.constant(literal(ElementType::U64, &[0]))?;
            let zero = c.reshape(zero, &[])?;
            let or = c.sub_computation("or64", |r| {
                let x = r.parameter(0, Shape::scalar(ElementType::U64), "x")?;
                let y = r.parameter(1, Shape::scalar(ElementType::U64), "y")?;
                r.or(x, y)
            })?;
            let reduced = c.reduce(&[grid], &[zero], &[1], or)?;
            let as_words = c.bitcast_convert(a, Shape::array(ElementType::U32, &[n, 2]))?;
            let back = c.bitcast_convert(as_words, Shape::array(ElementType::U64, &[n]))?;
            Ok(vec![joined, iota, reduced, as_words, back])
        });
    }

    #[test]
    fn a_64_bit_division_is_refused_by_name() {
        let mut m = ModuleBuilder::new("div");
        let mut main = m.computation("main");
        let a = main
            .parameter(0, Shape::array(ElementType::S64, &[2]), "a")
            .unwrap();
        let d = main.divide(a, a).unwrap();
        let entry = main.finish(d).unwrap();
        let mut module = m.finish(entry).unwrap();
        let e = split_into_words(&mut module).unwrap_err().to_string();
        assert!(e.contains("divide") && e.contains("word"), "{e}");
    }
}
