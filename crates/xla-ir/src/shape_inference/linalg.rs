//! `dot` (general dimension numbers) and `convolution` (all dimension numbers, groups,
//! padding and dilations).

use super::{Ctx, InferResult, array, check_dimension_list, window_output_size};
use crate::attributes::{ConvDims, DotDims, Window, WindowDim};
use crate::{ArrayShape, ElementType, Shape};

/// The result element type: the declared one (XLA's `preferred_element_type`) when it is of
/// the same kind as the operands, else the operands' type.
fn result_type(ctx: &Ctx<'_>, lhs: &ArrayShape, rhs: &ArrayShape) -> InferResult<ElementType> {
    let same_kind = |a: ElementType, b: ElementType| {
        a.is_float() == b.is_float() && (a == ElementType::Pred) == (b == ElementType::Pred)
    };
    if !same_kind(lhs.element_type, rhs.element_type) {
        return Err(format!(
            "{} needs operands of the same kind, found {lhs} and {rhs}",
            ctx.op.name()
        ));
    }
    match ctx.declared.and_then(Shape::as_array) {
        Some(d) if same_kind(d.element_type, lhs.element_type) => Ok(d.element_type),
        Some(d) => Err(format!(
            "{} of {} operands cannot produce {}",
            ctx.op.name(),
            lhs.element_type,
            d.element_type
        )),
        None => Ok(lhs.element_type),
    }
}

pub(super) fn dot(ctx: &Ctx<'_>, dn: &DotDims) -> InferResult<Shape> {
    ctx.operand_count(2)?;
    let (lhs, rhs) = (ctx.array(0)?, ctx.array(1)?);
    if dn.lhs_batch.len() != dn.rhs_batch.len() {
        return Err("lhs_batch_dims and rhs_batch_dims differ in length".to_string());
    }
    if dn.lhs_contracting.len() != dn.rhs_contracting.len() {
        return Err("lhs_contracting_dims and rhs_contracting_dims differ in length".to_string());
    }
    let lhs_used: Vec<i64> = dn
        .lhs_batch
        .iter()
        .chain(&dn.lhs_contracting)
        .copied()
        .collect();
    let rhs_used: Vec<i64> = dn
        .rhs_batch
        .iter()
        .chain(&dn.rhs_contracting)
        .copied()
        .collect();
    check_dimension_list("lhs batch or contracting dimension", &lhs_used, lhs.rank())?;
    check_dimension_list("rhs batch or contracting dimension", &rhs_used, rhs.rank())?;
    for (kind, l, r) in [
        ("batch", &dn.lhs_batch, &dn.rhs_batch),
        ("contracting", &dn.lhs_contracting, &dn.rhs_contracting),
    ] {
        for (&a, &b) in l.iter().zip(r.iter()) {
            if lhs.dims[a as usize] != rhs.dims[b as usize] {
                return Err(format!(
                    "{kind} dimensions differ in size: lhs dimension {a} is {} but rhs dimension {b} is {}",
                    lhs.dims[a as usize], rhs.dims[b as usize]
                ));
            }
        }
    }
    let t = result_type(ctx, lhs, rhs)?;
    let mut dims: Vec<i64> = dn.lhs_batch.iter().map(|&d| lhs.dims[d as usize]).collect();
    dims.extend(
        (0..lhs.rank() as i64)
            .filter(|d| !lhs_used.contains(d))
            .map(|d| lhs.dims[d as usize]),
    );
    dims.extend(
        (0..rhs.rank() as i64)
            .filter(|d| !rhs_used.contains(d))
            .map(|d| rhs.dims[d as usize]),
    );
    Ok(array(t, &dims))
}

pub(super) fn convolution(
    ctx: &Ctx<'_>,
    window: &Window,
    dn: &ConvDims,
    feature_group_count: i64,
    batch_group_count: i64,
) -> InferResult<Shape> {
    ctx.operand_count(2)?;
    let (input, kernel) = (ctx.array(0)?, ctx.array(1)?);
    let rank = dn.spatial_rank() + 2;
    if input.rank() != rank || kernel.rank() != rank {
        return Err(format!(
            "dim_labels {dn} need rank-{rank} input and kernel, found {input} and {kernel}"
        ));
    }
    let mut input_dims = vec![dn.input_batch, dn.input_feature];
    input_dims.extend(&dn.input_spatial);
    check_dimension_list("input dimension", &input_dims, rank)?;
    let mut kernel_dims = vec![dn.kernel_input_feature, dn.kernel_output_feature];
    kernel_dims.extend(&dn.kernel_spatial);
    check_dimension_list("kernel dimension", &kernel_dims, rank)?;
    if feature_group_count < 1 || batch_group_count < 1 {
        return Err("feature_group_count and batch_group_count must be at least 1".to_string());
    }
    let in_features = input.dims[dn.input_feature as usize];
    let batch = input.dims[dn.input_batch as usize];
    let kernel_in = kernel.dims[dn.kernel_input_feature as usize];
    let kernel_out = kernel.dims[dn.kernel_output_feature as usize];
    if in_features % feature_group_count != 0 || in_features / feature_group_count != kernel_in {
        return Err(format!(
            "input features ({in_features}) / feature_group_count ({feature_group_count}) must equal the kernel's input features ({kernel_in})"
        ));
    }
    if kernel_out % feature_group_count != 0 {
        return Err(format!(
            "kernel output features ({kernel_out}) must be divisible by feature_group_count ({feature_group_count})"
        ));
    }
    if batch % batch_group_count != 0 || kernel_out % batch_group_count != 0 {
        return Err(format!(
            "batch ({batch}) and kernel output features ({kernel_out}) must be divisible by batch_group_count ({batch_group_count})"
        ));
    }
    let spatial_window: Vec<WindowDim> = if window.dims.is_empty() && dn.spatial_rank() > 0 {
        dn.kernel_spatial
            .iter()
            .map(|&d| WindowDim::of_size(kernel.dims[d as usize]))
            .collect()
    } else {
        window.dims.clone()
    };
    if spatial_window.len() != dn.spatial_rank() {
        return Err(format!(
            "the window has {} dimensions but there are {} spatial dimensions",
            spatial_window.len(),
            dn.spatial_rank()
        ));
    }
    let t = result_type(ctx, input, kernel)?;
    let mut out = vec![0i64; rank];
    out[dn.output_batch as usize] = batch / batch_group_count;
    out[dn.output_feature as usize] = kernel_out;
    let mut output_dims = vec![dn.output_batch, dn.output_feature];
    output_dims.extend(&dn.output_spatial);
    check_dimension_list("output dimension", &output_dims, rank)?;
    for (i, w) in spatial_window.iter().enumerate() {
        let kernel_size = kernel.dims[dn.kernel_spatial[i] as usize];
        if w.size != kernel_size {
            return Err(format!(
                "window size {} of spatial dimension {i} differs from the kernel's {kernel_size}",
                w.size
            ));
        }
        let base = input.dims[dn.input_spatial[i] as usize];
        out[dn.output_spatial[i] as usize] = window_output_size(base, w)?;
    }
    Ok(array(t, &out))
}
