//! `gather` and `scatter`, with XLA's dimension numbers including batching dimensions.

use super::{
    Ctx, InferResult, array, check_dimension_list, check_scalars_result, scalar_signature,
};
use crate::attributes::{GatherDims, ScatterDims};
use crate::ids::CompId;
use crate::{ArrayShape, Shape};

/// The index array's dimensions with the index vector dimension made explicit, and the
/// remaining ("batch") dimensions.
fn split_indices(indices: &ArrayShape, index_vector_dim: i64) -> InferResult<(i64, Vec<i64>)> {
    let rank = indices.rank() as i64;
    if index_vector_dim < 0 || index_vector_dim > rank {
        return Err(format!(
            "index_vector_dim {index_vector_dim} is out of range for indices {indices}"
        ));
    }
    if !indices.element_type.is_integer() {
        return Err(format!("indices must be integers, found {indices}"));
    }
    let mut dims: Vec<i64> = indices.dims.to_vec();
    if index_vector_dim == rank {
        dims.push(1);
    }
    let vector_size = dims.remove(index_vector_dim as usize);
    Ok((vector_size, dims))
}

/// Checks batching dimension pairs: operand dimensions against index dimensions (which
/// must exist, differ from the index vector dimension, and have the same sizes).
fn check_batching(
    operand: &ArrayShape,
    operand_batching: &[i64],
    indices: &ArrayShape,
    indices_batching: &[i64],
    index_vector_dim: i64,
    names: (&str, &str),
) -> InferResult<()> {
    if operand_batching.len() != indices_batching.len() {
        return Err(format!("{} and {} differ in length", names.0, names.1));
    }
    check_dimension_list(names.1, indices_batching, indices.rank())?;
    if indices_batching.contains(&index_vector_dim) {
        return Err(format!(
            "{} must not contain index_vector_dim {index_vector_dim}",
            names.1
        ));
    }
    for (&o, &i) in operand_batching.iter().zip(indices_batching) {
        let (a, b) = (operand.dims[o as usize], indices.dims[i as usize]);
        if a != b {
            return Err(format!(
                "batching dimension {o} of the operand has size {a} but dimension {i} of the indices has {b}"
            ));
        }
    }
    Ok(())
}

fn check_sorted(what: &str, dims: &[i64]) -> InferResult<()> {
    if dims.windows(2).all(|w| w[0] < w[1]) {
        Ok(())
    } else {
        Err(format!("{what} must be sorted, found {dims:?}"))
    }
}

pub(super) fn gather(ctx: &Ctx<'_>, dn: &GatherDims, slice_sizes: &[i64]) -> InferResult<Shape> {
    ctx.operand_count(2)?;
    let (operand, indices) = (ctx.array(0)?, ctx.array(1)?);
    let rank = operand.rank();
    let (vector_size, batch_dims) = split_indices(indices, dn.index_vector_dim)?;
    if vector_size as usize != dn.start_index_map.len() {
        return Err(format!(
            "the index vector has {vector_size} components but start_index_map has {}",
            dn.start_index_map.len()
        ));
    }
    if slice_sizes.len() != rank {
        return Err(format!(
            "slice_sizes needs {rank} entries for {operand}, found {}",
            slice_sizes.len()
        ));
    }
    for (i, (&s, &d)) in slice_sizes.iter().zip(&operand.dims).enumerate() {
        if s < 0 || s > d {
            return Err(format!(
                "slice size {s} is invalid for operand dimension {i} of size {d}"
            ));
        }
    }
    check_dimension_list("start_index_map entry", &dn.start_index_map, rank)?;
    check_sorted("collapsed_slice_dims", &dn.collapsed_slice_dims)?;
    check_dimension_list("collapsed slice dimension", &dn.collapsed_slice_dims, rank)?;
    check_sorted("operand_batching_dims", &dn.operand_batching_dims)?;
    check_dimension_list(
        "operand batching dimension",
        &dn.operand_batching_dims,
        rank,
    )?;
    for &d in dn
        .collapsed_slice_dims
        .iter()
        .chain(&dn.operand_batching_dims)
    {
        if slice_sizes[d as usize] > 1 {
            return Err(format!(
                "collapsed or batching dimension {d} must have slice size 1, found {}",
                slice_sizes[d as usize]
            ));
        }
    }
    if dn
        .collapsed_slice_dims
        .iter()
        .any(|d| dn.operand_batching_dims.contains(d))
    {
        return Err("collapsed_slice_dims and operand_batching_dims must not overlap".to_string());
    }
    if dn
        .start_index_map
        .iter()
        .any(|d| dn.operand_batching_dims.contains(d))
    {
        return Err("start_index_map must not contain operand batching dimensions".to_string());
    }
    check_batching(
        operand,
        &dn.operand_batching_dims,
        indices,
        &dn.start_indices_batching_dims,
        dn.index_vector_dim,
        ("operand_batching_dims", "start_indices_batching_dims"),
    )?;
    let window: Vec<i64> = (0..rank)
        .filter(|d| {
            let d = *d as i64;
            !dn.collapsed_slice_dims.contains(&d) && !dn.operand_batching_dims.contains(&d)
        })
        .map(|d| slice_sizes[d])
        .collect();
    if window.len() != dn.offset_dims.len() {
        return Err(format!(
            "offset_dims has {} entries but the slice keeps {} dimensions",
            dn.offset_dims.len(),
            window.len()
        ));
    }
    let out_rank = dn.offset_dims.len() + batch_dims.len();
    check_sorted("offset_dims", &dn.offset_dims)?;
    check_dimension_list("offset dimension", &dn.offset_dims, out_rank)?;
    let (mut w, mut b) = (window.iter(), batch_dims.iter());
    let dims: Vec<i64> = (0..out_rank as i64)
        .map(|d| {
            let next = if dn.offset_dims.contains(&d) {
                w.next()
            } else {
                b.next()
            };
            *next.expect("offset and batch dimensions add up to the output rank")
        })
        .collect();
    Ok(array(operand.element_type, &dims))
}

pub(super) fn scatter(ctx: &Ctx<'_>, dn: &ScatterDims, to_apply: CompId) -> InferResult<Shape> {
    let count = ctx.operands.len();
    if count < 3 || count.is_multiple_of(2) {
        return Err(format!(
            "scatter takes N operands, indices and N updates (an odd count >= 3), found {count}"
        ));
    }
    let n = (count - 1) / 2;
    let operands: Vec<&ArrayShape> = (0..n).map(|i| ctx.array(i)).collect::<InferResult<_>>()?;
    let indices = ctx.array(n)?;
    let updates: Vec<&ArrayShape> = (n + 1..count)
        .map(|i| ctx.array(i))
        .collect::<InferResult<_>>()?;
    let operand = operands[0];
    let rank = operand.rank();
    if operands.iter().any(|o| o.dims != operand.dims) {
        return Err("scatter's operands must all have the same dimensions".to_string());
    }
    let (vector_size, batch_dims) = split_indices(indices, dn.index_vector_dim)?;
    if vector_size as usize != dn.scatter_dims_to_operand_dims.len() {
        return Err(format!(
            "the index vector has {vector_size} components but scatter_dims_to_operand_dims has {}",
            dn.scatter_dims_to_operand_dims.len()
        ));
    }
    check_dimension_list(
        "scatter_dims_to_operand_dims entry",
        &dn.scatter_dims_to_operand_dims,
        rank,
    )?;
    check_sorted("inserted_window_dims", &dn.inserted_window_dims)?;
    check_dimension_list("inserted window dimension", &dn.inserted_window_dims, rank)?;
    check_dimension_list("input batching dimension", &dn.input_batching_dims, rank)?;
    if dn
        .inserted_window_dims
        .iter()
        .any(|d| dn.input_batching_dims.contains(d))
    {
        return Err("inserted_window_dims and input_batching_dims must not overlap".to_string());
    }
    if dn
        .scatter_dims_to_operand_dims
        .iter()
        .any(|d| dn.input_batching_dims.contains(d))
    {
        return Err(
            "scatter_dims_to_operand_dims must not contain input batching dimensions".to_string(),
        );
    }
    check_batching(
        operand,
        &dn.input_batching_dims,
        indices,
        &dn.scatter_indices_batching_dims,
        dn.index_vector_dim,
        ("input_batching_dims", "scatter_indices_batching_dims"),
    )?;
    if dn.update_window_dims.len() + dn.inserted_window_dims.len() + dn.input_batching_dims.len()
        != rank
    {
        return Err(format!(
            "update_window_dims ({}) + inserted_window_dims ({}) + input_batching_dims ({}) must equal the operand rank {rank}",
            dn.update_window_dims.len(),
            dn.inserted_window_dims.len(),
            dn.input_batching_dims.len()
        ));
    }
    let update_rank = dn.update_window_dims.len() + batch_dims.len();
    check_sorted("update_window_dims", &dn.update_window_dims)?;
    check_dimension_list(
        "update window dimension",
        &dn.update_window_dims,
        update_rank,
    )?;
    let operand_window: Vec<i64> = (0..rank as i64)
        .filter(|d| !dn.inserted_window_dims.contains(d) && !dn.input_batching_dims.contains(d))
        .map(|d| operand.dims[d as usize])
        .collect();
    for update in &updates {
        if update.rank() != update_rank {
            return Err(format!("updates {update} must have rank {update_rank}"));
        }
        let (mut w, mut b) = (operand_window.iter(), batch_dims.iter());
        for (d, &size) in update.dims.iter().enumerate() {
            if dn.update_window_dims.contains(&(d as i64)) {
                let limit = *w.next().expect("window dims match the operand rank");
                if size > limit {
                    return Err(format!(
                        "update window dimension {d} (size {size}) exceeds the operand's {limit}"
                    ));
                }
            } else {
                let expected = *b.next().expect("scatter dims match the index batch dims");
                if size != expected {
                    return Err(format!(
                        "update dimension {d} has size {size} but the indices give {expected}"
                    ));
                }
            }
        }
    }
    let mut types: Vec<_> = operands.iter().map(|o| o.element_type).collect();
    types.extend(updates.iter().map(|u| u.element_type));
    let result = scalar_signature(ctx.module, to_apply, "scatter's to_apply", &types)?;
    let name = &ctx.module.computation(to_apply).name;
    check_scalars_result("scatter's to_apply", name, &result, &types[..n])?;
    Ok(if n == 1 {
        Shape::Array(operand.clone())
    } else {
        Shape::Tuple(
            operands
                .iter()
                .map(|o| Shape::Array((*o).clone()))
                .collect(),
        )
    })
}
