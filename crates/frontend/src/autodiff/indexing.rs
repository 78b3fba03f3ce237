//! Gradient rules of indexing ops: a gather's cotangent is scattered back with `add`
//! (embeddings), dynamic slices' go back into zeros at the same start.

use super::{AutodiffError, Contributions};
use crate::ops::{self, Builder};
use xla_ir::InstrId;
use xla_ir::attributes::{GatherDims, ScatterDims};
use xla_ir::op::BinaryOp;

/// `gather(operand, indices)`: the cotangent added into zeros at the gathered places.
pub(super) fn gather(
    b: &mut Builder<'_>,
    x: &[InstrId],
    dims: &GatherDims,
    _slice_sizes: &[i64],
    g: InstrId,
) -> Result<Contributions, AutodiffError> {
    let (operand, indices) = (x[0], x[1]);
    let zeros = ops::zeros_like(b, operand)?;
    let scatter_dims = ScatterDims {
        update_window_dims: dims.offset_dims.clone(),
        inserted_window_dims: dims.collapsed_slice_dims.clone(),
        scatter_dims_to_operand_dims: dims.start_index_map.clone(),
        input_batching_dims: dims.operand_batching_dims.clone(),
        scatter_indices_batching_dims: dims.start_indices_batching_dims.clone(),
        index_vector_dim: dims.index_vector_dim,
    };
    let t = ops::element_type(b, g);
    let add = ops::reducer(b, BinaryOp::Add, t)?;
    Ok(vec![(0, b.scatter(zeros, indices, g, scatter_dims, add)?)])
}

/// `dynamic-slice(x, starts...)`: the cotangent written into zeros at the same start.
pub(super) fn dynamic_slice(
    b: &mut Builder<'_>,
    x: &[InstrId],
    g: InstrId,
) -> Result<Contributions, AutodiffError> {
    let zeros = ops::zeros_like(b, x[0])?;
    Ok(vec![(0, b.dynamic_update_slice(zeros, g, &x[1..])?)])
}

/// `dynamic-update-slice(x, update, starts...)`: x gets the cotangent outside the update,
/// the update its slice of it.
pub(super) fn dynamic_update_slice(
    b: &mut Builder<'_>,
    x: &[InstrId],
    g: InstrId,
    wants: &[bool],
) -> Result<Contributions, AutodiffError> {
    let (update, starts) = (x[1], &x[2..]);
    let mut out = Vec::new();
    if wants[0] {
        let zeros = ops::zeros_like(b, update)?;
        out.push((0, b.dynamic_update_slice(g, zeros, starts)?));
    }
    if wants[1] {
        let sizes = ops::dims(b, update);
        out.push((1, b.dynamic_slice(g, starts, &sizes)?));
    }
    Ok(out)
}
