//! Algebraic clean-ups: identities (`x + 0`, `x * 1`, `x * 0` for integers or under fast
//! math), double negation, and the composition of two data movements of the same kind
//! (transpose, reshape, broadcast, slice, exact conversions) into one, or into nothing
//! when the composition is the identity. Constant folding of one-element values happens
//! in the analysis (`analysis.rs`), as egg's constant folding does.

use super::{Match, RuleOptions, derived, element_type, is_splat, nodes, retire, rule, splat};
use crate::egraph::analysis::{HloAnalysis, HloEGraph, add};
use crate::egraph::language::HloNode;
use crate::egraph::language::Signature;
use egg::{Id, Rewrite};
use xla_ir::attributes::SliceDim;
use xla_ir::literal::{ArrayData, ArrayLiteral};
use xla_ir::{ArrayShape, BinaryOp, ElementType, Literal, Op, Shape};

/// The algebra table.
pub fn rules(o: RuleOptions) -> Vec<Rewrite<HloNode, HloAnalysis>> {
    vec![
        rule("add-zero", "(add ?a ?b)", add_zero, o),
        rule("subtract-zero", "(subtract ?a ?b)", subtract_zero, o),
        rule("multiply-one", "(multiply ?a ?b)", multiply_one, o),
        rule("divide-one", "(divide ?a ?b)", divide_one, o),
        rule(
            "divide-by-constant",
            "(divide ?a ?b)",
            divide_by_constant,
            o,
        ),
        rule("multiply-zero", "(multiply ?a ?b)", multiply_zero, o),
        rule("negate-negate", "(negate (negate ?x))", negate_negate, o),
        rule(
            "transpose-transpose",
            "(transpose ?y)",
            transpose_transpose,
            o,
        ),
        rule(
            "transpose-identity",
            "(transpose ?x)",
            transpose_identity,
            o,
        ),
        rule("reshape-reshape", "(reshape ?y)", reshape_reshape, o),
        rule("reshape-identity", "(reshape ?x)", reshape_identity, o),
        rule(
            "broadcast-broadcast",
            "(broadcast ?y)",
            broadcast_broadcast,
            o,
        ),
        rule(
            "broadcast-identity",
            "(broadcast ?x)",
            broadcast_identity,
            o,
        ),
        rule("slice-slice", "(slice ?y)", slice_slice, o),
        rule("slice-identity", "(slice ?x)", slice_identity, o),
        rule("convert-convert", "(convert ?y)", convert_convert, o),
        rule("convert-identity", "(convert ?x)", convert_identity, o),
    ]
}

fn same_shape(eg: &HloEGraph, a: Id, b: Id) -> bool {
    let (x, y) = (&eg[a].data.shape, &eg[b].data.shape);
    match (x.as_array(), y.as_array()) {
        (Some(x), Some(y)) => x.dims == y.dims && x.element_type == y.element_type,
        _ => x == y,
    }
}

/// The other operand of `a op b` when either operand is a splat of `identity` (`op`
/// commutative).
fn either_identity(eg: &HloEGraph, m: &Match, identity: f64) -> Option<Id> {
    let (a, b) = (m.var("?a"), m.var("?b"));
    if is_splat(eg, b, identity) {
        Some(a)
    } else {
        is_splat(eg, a, identity).then_some(b)
    }
}

/// `a` when `b` is a splat of `identity` (`a op identity = a`).
fn right_identity(eg: &HloEGraph, m: &Match, identity: f64) -> Option<Id> {
    is_splat(eg, m.var("?b"), identity).then(|| m.var("?a"))
}

fn add_zero(eg: &mut HloEGraph, m: &Match, _: RuleOptions) -> Option<Id> {
    either_identity(eg, m, 0.0)
}

fn subtract_zero(eg: &mut HloEGraph, m: &Match, _: RuleOptions) -> Option<Id> {
    right_identity(eg, m, 0.0)
}

fn multiply_one(eg: &mut HloEGraph, m: &Match, _: RuleOptions) -> Option<Id> {
    either_identity(eg, m, 1.0)
}

fn divide_one(eg: &mut HloEGraph, m: &Match, _: RuleOptions) -> Option<Id> {
    right_identity(eg, m, 1.0)
}

/// XLA's `A / Const => A * (1 / Const)` for floats (`algebraic_simplifier.cc`,
/// `HandleDivide`; Graphcore's backend runs the same simplifier): the reciprocal rounded
/// to the element type, and the division retired, so results round as XLA's do (`x / 0.8`
/// becomes `x * 1.25`, which differs from the division in the last place for some `x`).
fn divide_by_constant(eg: &mut HloEGraph, m: &Match, _: RuleOptions) -> Option<Id> {
    let (a, b) = (m.var("?a"), m.var("?b"));
    let t = element_type(eg, m.class)?;
    if !nodes(eg, a, "constant").is_empty() || is_splat(eg, b, 1.0) {
        return None;
    }
    let c = splat(eg, b)?;
    let data = match t {
        ElementType::F32 => ArrayData::F32(vec![1.0 / c as f32]),
        ElementType::F16 => {
            let h = half::f16::from_f64(c).to_f32();
            ArrayData::F16(vec![half::f16::from_f32(1.0 / h)])
        }
        _ => return None,
    };
    let shape = eg[m.class].data.shape.clone();
    let dims = shape.as_array()?.dims.to_vec();
    let scalar = ArrayShape::new(t, &[]);
    let literal = Literal::Array(ArrayLiteral {
        shape: scalar.clone(),
        data,
    });
    let k = add(
        eg,
        Signature::new(Op::Constant { literal }, Shape::Array(scalar)),
        &[],
    );
    let spread = derived(
        eg,
        b,
        Op::Broadcast { dimensions: vec![] },
        Shape::array(t, &dims),
    );
    let k = add(eg, spread, &[k]);
    let product = derived(eg, m.class, Op::Binary(BinaryOp::Multiply), shape);
    let product = add(eg, product, &[a, k]);
    retire(eg, m.class, "divide", &[eg.find(a), eg.find(b)]);
    Some(product)
}

/// `x * 0 = 0` is false for floats when x is NaN or infinite: integers, or fast math only.
fn multiply_zero(eg: &mut HloEGraph, m: &Match, o: RuleOptions) -> Option<Id> {
    let float = element_type(eg, m.class).is_some_and(ElementType::is_float);
    if float && !o.enable_fast_math {
        return None;
    }
    let (a, b) = (m.var("?a"), m.var("?b"));
    [b, a].into_iter().find(|&z| is_splat(eg, z, 0.0))
}

fn negate_negate(_: &mut HloEGraph, m: &Match, _: RuleOptions) -> Option<Id> {
    Some(m.var("?x"))
}

/// The attributes of the `opcode` node of `class` over `child`.
fn op_over(eg: &HloEGraph, class: Id, opcode: &str, child: Id) -> Option<Op> {
    nodes(eg, class, opcode)
        .into_iter()
        .find(|n| eg.find(n.children[0]) == eg.find(child))
        .map(|n| eg.analysis.sig(n).op.clone())
}

/// The first `opcode` node of `class` with its operand and attributes.
fn inner(eg: &HloEGraph, class: Id, opcode: &str) -> Option<(Id, Op)> {
    nodes(eg, class, opcode)
        .first()
        .map(|n| (eg.find(n.children[0]), eg.analysis.sig(n).op.clone()))
}

fn is_identity(perm: &[i64]) -> bool {
    perm.iter().enumerate().all(|(i, &p)| p == i as i64)
}

fn transpose_transpose(eg: &mut HloEGraph, m: &Match, _: RuleOptions) -> Option<Id> {
    let y = m.var("?y");
    let Some(Op::Transpose { dimensions: p2 }) = op_over(eg, m.class, "transpose", y) else {
        return None;
    };
    let (x, Op::Transpose { dimensions: p1 }) = inner(eg, y, "transpose")? else {
        return None;
    };
    let composed: Vec<i64> = p2.iter().map(|&i| p1[i as usize]).collect();
    if is_identity(&composed) {
        return Some(x);
    }
    let shape = eg[m.class].data.shape.clone();
    let sig = derived(
        eg,
        m.class,
        Op::Transpose {
            dimensions: composed,
        },
        shape,
    );
    Some(add(eg, sig, &[x]))
}

fn transpose_identity(eg: &mut HloEGraph, m: &Match, _: RuleOptions) -> Option<Id> {
    let x = m.var("?x");
    match op_over(eg, m.class, "transpose", x)? {
        Op::Transpose { dimensions } if is_identity(&dimensions) => Some(x),
        _ => None,
    }
}

fn reshape_reshape(eg: &mut HloEGraph, m: &Match, _: RuleOptions) -> Option<Id> {
    let (x, _) = inner(eg, m.var("?y"), "reshape")?;
    if same_shape(eg, x, m.class) {
        return Some(x);
    }
    let shape = eg[m.class].data.shape.clone();
    let sig = derived(eg, m.class, Op::Reshape, shape);
    Some(add(eg, sig, &[x]))
}

fn reshape_identity(eg: &mut HloEGraph, m: &Match, _: RuleOptions) -> Option<Id> {
    let x = m.var("?x");
    same_shape(eg, x, m.class).then_some(x)
}

fn broadcast_broadcast(eg: &mut HloEGraph, m: &Match, _: RuleOptions) -> Option<Id> {
    let y = m.var("?y");
    let Some(Op::Broadcast { dimensions: d2 }) = op_over(eg, m.class, "broadcast", y) else {
        return None;
    };
    let (x, Op::Broadcast { dimensions: d1 }) = inner(eg, y, "broadcast")? else {
        return None;
    };
    let dimensions: Vec<i64> = d1.iter().map(|&d| d2[d as usize]).collect();
    let shape = eg[m.class].data.shape.clone();
    let sig = derived(eg, m.class, Op::Broadcast { dimensions }, shape);
    Some(add(eg, sig, &[x]))
}

fn broadcast_identity(eg: &mut HloEGraph, m: &Match, _: RuleOptions) -> Option<Id> {
    let x = m.var("?x");
    match op_over(eg, m.class, "broadcast", x)? {
        Op::Broadcast { dimensions } if is_identity(&dimensions) && same_shape(eg, x, m.class) => {
            Some(x)
        }
        _ => None,
    }
}

fn slice_slice(eg: &mut HloEGraph, m: &Match, _: RuleOptions) -> Option<Id> {
    let y = m.var("?y");
    let Some(Op::Slice { slices: outer }) = op_over(eg, m.class, "slice", y) else {
        return None;
    };
    let (x, Op::Slice { slices: first }) = inner(eg, y, "slice")? else {
        return None;
    };
    let out_dims = eg[m.class].data.shape.as_array()?.dims.clone();
    let slices: Vec<SliceDim> = first
        .iter()
        .zip(&outer)
        .zip(&out_dims)
        .map(|((a, b), &count)| {
            let start = a.start + b.start * a.stride;
            let stride = a.stride * b.stride;
            let limit = if count == 0 {
                start
            } else {
                start + (count - 1) * stride + 1
            };
            SliceDim {
                start,
                limit,
                stride,
            }
        })
        .collect();
    let shape = eg[m.class].data.shape.clone();
    let sig = derived(eg, m.class, Op::Slice { slices }, shape);
    Some(add(eg, sig, &[x]))
}

fn slice_identity(eg: &mut HloEGraph, m: &Match, _: RuleOptions) -> Option<Id> {
    let x = m.var("?x");
    match op_over(eg, m.class, "slice", x)? {
        Op::Slice { slices }
            if slices.iter().all(|s| s.start == 0 && s.stride == 1)
                && same_shape(eg, x, m.class) =>
        {
            Some(x)
        }
        _ => None,
    }
}

/// Every value of `from` is exactly a value of `to`.
fn widens_exactly(from: ElementType, to: ElementType) -> bool {
    use ElementType::*;
    let int_bits = |t| match t {
        S8 | U8 => Some(8),
        S16 | U16 => Some(16),
        S32 | U32 => Some(32),
        S64 | U64 => Some(64),
        _ => None,
    };
    let mantissa = |t| match t {
        F16 => Some(11),
        Bf16 => Some(8),
        F32 => Some(24),
        F64 => Some(53),
        _ => None,
    };
    let signed = |t| matches!(t, S8 | S16 | S32 | S64);
    if from == to || from == Pred {
        return true;
    }
    match (int_bits(from), int_bits(to), mantissa(from), mantissa(to)) {
        (Some(a), Some(b), _, _) => {
            (signed(from) == signed(to) && b >= a) || (!signed(from) && signed(to) && b > a)
        }
        (Some(a), None, _, Some(m)) => a < m,
        (None, None, Some(_), Some(_)) => {
            matches!((from, to), (F16 | Bf16, F32 | F64) | (F32, F64))
        }
        _ => false,
    }
}

fn convert_convert(eg: &mut HloEGraph, m: &Match, _: RuleOptions) -> Option<Id> {
    let y = m.var("?y");
    let (x, _) = inner(eg, y, "convert")?;
    let (a, b, c) = (
        element_type(eg, x)?,
        element_type(eg, y)?,
        element_type(eg, m.class)?,
    );
    if !widens_exactly(a, b) {
        return None;
    }
    if a == c {
        return Some(x);
    }
    let shape: Shape = eg[m.class].data.shape.clone();
    let sig = derived(eg, m.class, Op::Convert, shape);
    Some(add(eg, sig, &[x]))
}

fn convert_identity(eg: &mut HloEGraph, m: &Match, _: RuleOptions) -> Option<Id> {
    let x = m.var("?x");
    same_shape(eg, x, m.class).then_some(x)
}

#[cfg(test)]
mod tests {
    use super::widens_exactly;
    use xla_ir::ElementType::*;

    #[test]
    fn exact_widenings() {
        assert!(widens_exactly(F16, F32));
        assert!(widens_exactly(S8, S32));
        assert!(widens_exactly(U8, S16));
        assert!(widens_exactly(S16, F32));
        assert!(!widens_exactly(S32, F32));
        assert!(!widens_exactly(F32, F16));
        assert!(!widens_exactly(S32, U32));
        assert!(!widens_exactly(Bf16, F16));
    }
}
