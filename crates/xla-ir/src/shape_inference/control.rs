//! Tuples and control flow: get-tuple-element, while, conditional, call, fusion, map,
//! custom-call, after-all.

use super::{Ctx, InferResult, array};
use crate::ids::CompId;
use crate::{Computation, ElementType, Shape};

fn computation<'a>(ctx: &Ctx<'a>, id: CompId, role: &str) -> InferResult<&'a Computation> {
    if id.index() < ctx.module.computation_count() {
        Ok(ctx.module.computation(id))
    } else {
        Err(format!(
            "{role} refers to a computation that does not exist"
        ))
    }
}

/// Checks that `comp` takes parameters of exactly these shapes.
fn check_parameters(comp: &Computation, role: &str, expected: &[&Shape]) -> InferResult<()> {
    let params = comp.parameter_shapes();
    if params.len() != expected.len() {
        return Err(format!(
            "{role} {} takes {} parameters but is given {}",
            comp.name,
            params.len(),
            expected.len()
        ));
    }
    for (i, (p, e)) in params.iter().zip(expected).enumerate() {
        if !p.same_ignoring_layout(e) {
            return Err(format!(
                "{role} {}: parameter {i} is {p} but is given {e}",
                comp.name
            ));
        }
    }
    Ok(())
}

pub(super) fn get_tuple_element(ctx: &Ctx<'_>, index: i64) -> InferResult<Shape> {
    ctx.operand_count(1)?;
    match ctx.operands[0] {
        Shape::Tuple(elems) => usize::try_from(index)
            .ok()
            .and_then(|i| elems.get(i))
            .cloned()
            .ok_or_else(|| {
                format!(
                    "index {index} is out of range for a tuple of {} elements",
                    elems.len()
                )
            }),
        other => Err(format!(
            "get-tuple-element needs a tuple operand, found {other}"
        )),
    }
}

pub(super) fn while_loop(ctx: &Ctx<'_>, condition: CompId, body: CompId) -> InferResult<Shape> {
    ctx.operand_count(1)?;
    let state = ctx.operands[0];
    let cond = computation(ctx, condition, "while's condition")?;
    check_parameters(cond, "while's condition", &[state])?;
    let pred = Shape::scalar(ElementType::Pred);
    if !cond.root_instr().shape.same_ignoring_layout(&pred) {
        return Err(format!(
            "while's condition {} must return pred[], it returns {}",
            cond.name,
            cond.root_instr().shape
        ));
    }
    let body_comp = computation(ctx, body, "while's body")?;
    check_parameters(body_comp, "while's body", &[state])?;
    if !body_comp.root_instr().shape.same_ignoring_layout(state) {
        return Err(format!(
            "while's body {} must return the loop state {state}, it returns {}",
            body_comp.name,
            body_comp.root_instr().shape
        ));
    }
    Ok(state.clone())
}

pub(super) fn conditional(ctx: &Ctx<'_>, branches: &[CompId]) -> InferResult<Shape> {
    ctx.operand_count(branches.len() + 1)?;
    let selector = ctx.array(0)?;
    let selector_ok = selector.dims.is_empty()
        && match selector.element_type {
            ElementType::Pred => branches.len() == 2,
            ElementType::S32 => !branches.is_empty(),
            _ => false,
        };
    if !selector_ok {
        return Err(format!(
            "conditional's selector must be pred[] with 2 branches or s32[] with at least 1, found {selector} with {}",
            branches.len()
        ));
    }
    let mut result: Option<&Shape> = None;
    for (i, &b) in branches.iter().enumerate() {
        let comp = computation(ctx, b, "conditional's branch")?;
        check_parameters(
            comp,
            &format!("conditional branch {i}"),
            &[ctx.operands[i + 1]],
        )?;
        let root = &comp.root_instr().shape;
        match result {
            None => result = Some(root),
            Some(r) if !r.same_ignoring_layout(root) => {
                return Err(format!(
                    "conditional's branches return different shapes: {r} and {root} ({})",
                    comp.name
                ));
            }
            Some(_) => {}
        }
    }
    Ok(result.expect("at least one branch").clone())
}

pub(super) fn call(ctx: &Ctx<'_>, callee: CompId) -> InferResult<Shape> {
    let role = ctx.op.name();
    let comp = computation(ctx, callee, role)?;
    check_parameters(comp, role, ctx.operands)?;
    Ok(comp.root_instr().shape.clone())
}

pub(super) fn map(ctx: &Ctx<'_>, dimensions: &[i64], to_apply: CompId) -> InferResult<Shape> {
    ctx.min_operands(1)?;
    let first = ctx.array(0)?;
    let mut scalars = Vec::new();
    for i in 0..ctx.operands.len() {
        let x = ctx.array(i)?;
        if x.dims != first.dims {
            return Err("map's operands must all have the same dimensions".to_string());
        }
        scalars.push(Shape::scalar(x.element_type));
    }
    if !dimensions.is_empty() && dimensions != (0..first.rank() as i64).collect::<Vec<_>>() {
        return Err(format!(
            "map must apply to all dimensions in order, found {dimensions:?}"
        ));
    }
    let comp = computation(ctx, to_apply, "map's to_apply")?;
    let refs: Vec<&Shape> = scalars.iter().collect();
    check_parameters(comp, "map's to_apply", &refs)?;
    match &comp.root_instr().shape {
        Shape::Array(a) if a.dims.is_empty() => Ok(array(a.element_type, &first.dims)),
        other => Err(format!(
            "map's to_apply {} must return a scalar, it returns {other}",
            comp.name
        )),
    }
}

pub(super) fn custom_call(ctx: &Ctx<'_>, target: &str) -> InferResult<Shape> {
    let declared = ctx.declared()?;
    if target == "TopK" {
        // XLA CPU's form of topk: (values, indices) along the last dimension.
        ctx.operand_count(1)?;
        let k = declared
            .as_tuple()
            .and_then(|t| t.first())
            .and_then(Shape::as_array)
            .and_then(|a| a.dims.last().copied())
            .ok_or_else(|| {
                format!("custom-call TopK must return (values, indices), found {declared}")
            })?;
        return super::reductions::top_k_shape(ctx.array(0)?, k);
    }
    // A recomputation checkpoint is the identity (it only marks a value to keep).
    if target == crate::call_config::CHECKPOINT_TARGET {
        ctx.operand_count(1)?;
        return Ok(Shape::Array(ctx.array(0)?.clone()));
    }
    // An activation is element-wise (its backend_config is checked where it is used).
    if crate::Activation::from_custom_call(target, None).is_some() {
        ctx.operand_count(1)?;
        let x = ctx.array(0)?;
        if !x.element_type.is_float() {
            return Err(format!("custom-call {target} takes floats, found {x}"));
        }
        return Ok(Shape::Array(x.clone()));
    }
    // Other targets are opaque: their result is whatever the text says.
    Ok(declared.clone())
}

/// `rng-bit-generator(state)`: `(state, bits)` with the bits' shape as declared (32- or
/// 64-bit integers); the state is a `u64` vector of at least 2 words.
pub(super) fn rng_bit_generator(ctx: &Ctx<'_>) -> InferResult<Shape> {
    ctx.operand_count(1)?;
    let state = ctx.array(0)?;
    if state.element_type != ElementType::U64 || state.dims.len() != 1 || state.dims[0] < 2 {
        return Err(format!(
            "rng-bit-generator's state is a u64 vector of at least 2 words, found {state}"
        ));
    }
    let declared = ctx.declared()?;
    match declared.as_tuple() {
        Some([s, Shape::Array(bits)]) if s.same_ignoring_layout(ctx.operands[0]) => {
            if !matches!(
                bits.element_type,
                ElementType::U32 | ElementType::S32 | ElementType::U64 | ElementType::S64
            ) {
                return Err(format!(
                    "rng-bit-generator makes 32- or 64-bit integers, not {}",
                    bits.element_type
                ));
            }
            Ok(declared.clone())
        }
        _ => Err(format!(
            "rng-bit-generator returns (state {state}, bits), found {declared}"
        )),
    }
}

/// `infeed(token)`: `(value, token)`, the value's shape as declared (an array or a tuple
/// of arrays).
pub(super) fn infeed(ctx: &Ctx<'_>) -> InferResult<Shape> {
    ctx.operand_count(1)?;
    if !matches!(ctx.operands[0], Shape::Token) {
        return Err(format!("infeed takes a token, found {}", ctx.operands[0]));
    }
    let declared = ctx.declared()?;
    match declared.as_tuple() {
        Some([value, Shape::Token]) => {
            if contains_token(value) {
                return Err(format!("infeed's value must hold no token, found {value}"));
            }
            Ok(declared.clone())
        }
        _ => Err(format!("infeed returns (value, token[]), found {declared}")),
    }
}

/// `outfeed(value, token)`: a token; `outfeed_shape`, when given, is the value's shape.
pub(super) fn outfeed(ctx: &Ctx<'_>, shape: Option<&Shape>) -> InferResult<Shape> {
    ctx.operand_count(2)?;
    if !matches!(ctx.operands[1], Shape::Token) {
        return Err(format!(
            "outfeed's second operand is a token, found {}",
            ctx.operands[1]
        ));
    }
    if contains_token(ctx.operands[0]) {
        return Err(format!(
            "outfeed's value must hold no token, found {}",
            ctx.operands[0]
        ));
    }
    if let Some(s) = shape
        && !s.same_ignoring_layout(ctx.operands[0])
    {
        return Err(format!(
            "outfeed_shape is {s} but the value is {}",
            ctx.operands[0]
        ));
    }
    Ok(Shape::Token)
}

fn contains_token(s: &Shape) -> bool {
    match s {
        Shape::Token => true,
        Shape::Tuple(items) => items.iter().any(contains_token),
        Shape::Array(_) => false,
    }
}

pub(super) fn after_all(_ctx: &Ctx<'_>) -> InferResult<Shape> {
    // XLA orders after-all after any values (`after-all(neg)` makes a dependency chain),
    // so operands need not be tokens.
    Ok(Shape::Token)
}
