//! The int64 conversion: the IPU has no 64-bit integers. Usually (the seed's
//! `--int64_to_int32_conversion`) s64 and u64 values become s32 and u32, with a warning,
//! and values beyond 32 bits wrap. A module that needs its 64-bit integers exact (it
//! reinterprets them as 32-bit words, as random-number state is handled, or shifts them
//! by a whole word) keeps them instead as pairs of 32-bit words (`int64_words`).

use super::{Pass, PassContext};
use crate::CompileError;
use xla_ir::literal::{ArrayData, ArrayLiteral, Literal};
use xla_ir::{BinaryOp, ElementType, Module, Op, Shape};

/// The pass (`int64-conversion`).
pub struct Int64Conversion;

impl Pass for Int64Conversion {
    fn name(&self) -> &'static str {
        "int64-conversion"
    }

    fn run(&self, module: &mut Module, cx: &mut PassContext) -> Result<(), CompileError> {
        match needs_exact_words(module) {
            Some(why) => {
                let rewritten = super::int64_words::split_into_words(module)?;
                cx.notes.push(format!(
                    "64-bit integers kept exact as 32-bit word pairs ({why}): {rewritten} instruction(s) rewritten"
                ));
            }
            None => cx.warnings.extend(narrow_int64(module)),
        }
        Ok(())
    }
}

/// Whether `id` is a constant (or a broadcast or reshape of one) with an element of 32 or
/// more: a shift by a whole 32-bit word.
fn shifts_a_word_or_more(comp: &xla_ir::Computation, id: xla_ir::InstrId) -> bool {
    super::int64_words::constant_values(comp, id).is_some_and(|v| v.iter().any(|&x| x >= 32))
}

/// Why the module's 64-bit integers must stay exact, if they must: a `bitcast-convert`
/// between 64-bit integers and 32-bit words (two `u32` as one `u64`, as random-number
/// state is handled), or a shift of a 64-bit integer by a whole word or more, means
/// something else once narrowed to 32 bits.
fn needs_exact_words(module: &Module) -> Option<String> {
    let wide = |t: ElementType| matches!(t, ElementType::S64 | ElementType::U64);
    for (_, comp) in module.computations() {
        for (_, instr) in comp.instructions() {
            if let Op::Binary(
                BinaryOp::ShiftLeft | BinaryOp::ShiftRightLogical | BinaryOp::ShiftRightArithmetic,
            ) = instr.op
                && instr.shape.as_array().is_some_and(|a| wide(a.element_type))
                && shifts_a_word_or_more(comp, instr.operands[1])
            {
                return Some(format!("'{}' shifts by a whole word", instr.name));
            }
            if !matches!(instr.op, Op::BitcastConvert) {
                continue;
            }
            let from = comp
                .instr(instr.operands[0])
                .shape
                .as_array()
                .map(|a| a.element_type);
            let to = instr.shape.as_array().map(|a| a.element_type);
            if let (Some(from), Some(to)) = (from, to)
                && (wide(from) || wide(to))
                && from.byte_size() != to.byte_size()
            {
                return Some(format!("'{}' reinterprets {from} as {to}", instr.name));
            }
        }
    }
    None
}

fn narrow_type(t: ElementType) -> ElementType {
    match t {
        ElementType::S64 => ElementType::S32,
        ElementType::U64 => ElementType::U32,
        other => other,
    }
}

/// Rewrites a shape's 64-bit integer leaves; true when anything changed.
fn narrow_shape(shape: &mut Shape) -> bool {
    match shape {
        Shape::Array(a) => {
            let t = narrow_type(a.element_type);
            let changed = t != a.element_type;
            a.element_type = t;
            changed
        }
        Shape::Tuple(items) => items.iter_mut().fold(false, |c, s| narrow_shape(s) | c),
        Shape::Token => false,
    }
}

fn narrow_literal(l: &mut Literal) {
    match l {
        Literal::Array(a) => narrow_array(a),
        Literal::Tuple(items) => items.iter_mut().for_each(narrow_literal),
        Literal::Token => {}
    }
}

fn narrow_array(a: &mut ArrayLiteral) {
    a.shape.element_type = narrow_type(a.shape.element_type);
    a.data = match &a.data {
        ArrayData::S64(v) => ArrayData::S32(v.iter().map(|&x| x as i32).collect()),
        ArrayData::U64(v) => ArrayData::U32(v.iter().map(|&x| x as u32).collect()),
        _ => return,
    };
}

/// Narrows every s64/u64 of `out`; returns a warning naming how many instructions changed
/// (none when nothing did).
pub fn narrow_int64(out: &mut Module) -> Vec<String> {
    let mut changed = Vec::new();
    let ids: Vec<_> = out.computations().map(|(id, _)| id).collect();
    for id in ids {
        let comp = out.computation_mut(id);
        let instrs: Vec<_> = comp.instructions().map(|(i, _)| i).collect();
        for i in instrs {
            let instr = comp.instr_mut(i);
            if narrow_shape(&mut instr.shape) {
                changed.push(instr.name.clone());
                if let Op::Constant { literal } = &mut instr.op {
                    narrow_literal(literal);
                }
            }
        }
    }
    if let Some(layout) = &mut out.entry_computation_layout {
        layout.parameters.iter_mut().for_each(|s| {
            narrow_shape(s);
        });
        narrow_shape(&mut layout.result);
    }
    if changed.is_empty() {
        Vec::new()
    } else {
        vec![format!(
            "the IPU has no 64-bit integers: {} instruction(s) converted from s64/u64 to s32/u32 (first: '{}'); values beyond 32 bits wrap",
            changed.len(),
            changed[0]
        )]
    }
}
