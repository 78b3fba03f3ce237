//! Reductions and sorting: reduce, reduce-window, select-and-scatter, sort, topk.

use super::{
    Ctx, InferResult, array, check_dimension_list, check_scalars_result, scalar_signature,
    window_output_size,
};
use crate::attributes::Window;
use crate::ids::CompId;
use crate::{ArrayShape, ElementType, Shape};

/// Splits `N inputs, N inits` operands, checking inputs agree in dimensions and inits are scalars.
fn inputs_and_inits<'a>(ctx: &Ctx<'a>) -> InferResult<(Vec<&'a ArrayShape>, Vec<&'a ArrayShape>)> {
    let count = ctx.operands.len();
    if count < 2 || !count.is_multiple_of(2) {
        return Err(format!(
            "{} takes N inputs and N initial values, found {count} operands",
            ctx.op.name()
        ));
    }
    let n = count / 2;
    let inputs: Vec<&ArrayShape> = (0..n).map(|i| ctx.array(i)).collect::<InferResult<_>>()?;
    let inits: Vec<&ArrayShape> = (n..count)
        .map(|i| ctx.array(i))
        .collect::<InferResult<_>>()?;
    if inputs.iter().any(|x| x.dims != inputs[0].dims) {
        return Err(format!(
            "the inputs of {} must have the same dimensions",
            ctx.op.name()
        ));
    }
    if let Some(bad) = inits.iter().find(|x| !x.dims.is_empty()) {
        return Err(format!(
            "initial values of {} must be scalars, found {bad}",
            ctx.op.name()
        ));
    }
    Ok((inputs, inits))
}

/// Checks a reducer `(acc..., x...) -> acc...` and returns the accumulator types.
fn check_reducer(
    ctx: &Ctx<'_>,
    comp: CompId,
    inputs: &[&ArrayShape],
    inits: &[&ArrayShape],
) -> InferResult<Vec<ElementType>> {
    let acc: Vec<ElementType> = inits.iter().map(|i| i.element_type).collect();
    let mut params = acc.clone();
    params.extend(inputs.iter().map(|i| i.element_type));
    let role = format!("{}'s to_apply", ctx.op.name());
    let result = scalar_signature(ctx.module, comp, &role, &params)?;
    check_scalars_result(&role, &ctx.module.computation(comp).name, &result, &acc)?;
    Ok(acc)
}

fn one_or_tuple(shapes: Vec<Shape>) -> Shape {
    if shapes.len() == 1 {
        shapes.into_iter().next().expect("one shape")
    } else {
        Shape::Tuple(shapes)
    }
}

pub(super) fn reduce(ctx: &Ctx<'_>, dimensions: &[i64], to_apply: CompId) -> InferResult<Shape> {
    let (inputs, inits) = inputs_and_inits(ctx)?;
    let x = inputs[0];
    check_dimension_list("reduce dimension", dimensions, x.rank())?;
    let acc = check_reducer(ctx, to_apply, &inputs, &inits)?;
    let dims: Vec<i64> = (0..x.rank() as i64)
        .filter(|d| !dimensions.contains(d))
        .map(|d| x.dims[d as usize])
        .collect();
    Ok(one_or_tuple(acc.iter().map(|t| array(*t, &dims)).collect()))
}

fn windowed_dims(x: &ArrayShape, window: &Window) -> InferResult<Vec<i64>> {
    if window.dims.len() != x.rank() {
        return Err(format!(
            "the window has {} dimensions but the operand {x} has {}",
            window.dims.len(),
            x.rank()
        ));
    }
    x.dims
        .iter()
        .zip(&window.dims)
        .map(|(&d, w)| window_output_size(d, w))
        .collect()
}

pub(super) fn reduce_window(
    ctx: &Ctx<'_>,
    window: &Window,
    to_apply: CompId,
) -> InferResult<Shape> {
    let (inputs, inits) = inputs_and_inits(ctx)?;
    let dims = windowed_dims(inputs[0], window)?;
    let acc = check_reducer(ctx, to_apply, &inputs, &inits)?;
    Ok(one_or_tuple(acc.iter().map(|t| array(*t, &dims)).collect()))
}

pub(super) fn select_and_scatter(
    ctx: &Ctx<'_>,
    window: &Window,
    select: CompId,
    scatter: CompId,
) -> InferResult<Shape> {
    ctx.operand_count(3)?;
    let (operand, source, init) = (ctx.array(0)?, ctx.array(1)?, ctx.array(2)?);
    let t = operand.element_type;
    if !init.dims.is_empty() || init.element_type != source.element_type {
        return Err(format!(
            "select-and-scatter's initial value must be a {}[] scalar, found {init}",
            source.element_type
        ));
    }
    let dims = windowed_dims(operand, window)?;
    if source.dims.as_slice() != dims.as_slice() {
        return Err(format!(
            "the source {source} must have the windowed shape {dims:?} of the operand {operand}"
        ));
    }
    let chosen = scalar_signature(ctx.module, select, "select-and-scatter's select", &[t, t])?;
    check_scalars_result(
        "select-and-scatter's select",
        &ctx.module.computation(select).name,
        &chosen,
        &[ElementType::Pred],
    )?;
    let s = source.element_type;
    let combined = scalar_signature(ctx.module, scatter, "select-and-scatter's scatter", &[s, s])?;
    check_scalars_result(
        "select-and-scatter's scatter",
        &ctx.module.computation(scatter).name,
        &combined,
        &[s],
    )?;
    Ok(Shape::Array(operand.with_element_type(s)))
}

pub(super) fn sort(ctx: &Ctx<'_>, dimension: i64, comparator: CompId) -> InferResult<Shape> {
    ctx.min_operands(1)?;
    let keys: Vec<&ArrayShape> = (0..ctx.operands.len())
        .map(|i| ctx.array(i))
        .collect::<InferResult<_>>()?;
    let first = keys[0];
    if keys.iter().any(|k| k.dims != first.dims) {
        return Err("sort's operands must all have the same dimensions".to_string());
    }
    if dimension < 0 || dimension as usize >= first.rank() {
        return Err(format!(
            "sort dimension {dimension} is out of range for {first}"
        ));
    }
    let params: Vec<ElementType> = keys
        .iter()
        .flat_map(|k| [k.element_type, k.element_type])
        .collect();
    let result = scalar_signature(ctx.module, comparator, "sort's comparator", &params)?;
    check_scalars_result(
        "sort's comparator",
        &ctx.module.computation(comparator).name,
        &result,
        &[ElementType::Pred],
    )?;
    Ok(one_or_tuple(
        keys.iter().map(|k| Shape::Array((*k).clone())).collect(),
    ))
}

/// The (values, indices) result of top-k along the last dimension.
pub(crate) fn top_k_shape(x: &ArrayShape, k: i64) -> InferResult<Shape> {
    let Some(&last) = x.dims.last() else {
        return Err(format!("topk needs an operand of rank >= 1, found {x}"));
    };
    if k < 0 || k > last {
        return Err(format!(
            "k={k} is out of range for a last dimension of {last}"
        ));
    }
    let mut dims = x.dims.to_vec();
    *dims.last_mut().expect("rank >= 1") = k;
    Ok(Shape::Tuple(vec![
        array(x.element_type, &dims),
        array(ElementType::S32, &dims),
    ]))
}

pub(super) fn top_k(ctx: &Ctx<'_>, k: i64) -> InferResult<Shape> {
    ctx.operand_count(1)?;
    top_k_shape(ctx.array(0)?, k)
}
