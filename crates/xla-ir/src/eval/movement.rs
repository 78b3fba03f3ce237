//! Data movement: every op here computes, for each output element, which input element
//! it takes, and then takes them.

use super::array::{
    self, count, for_each_index, from_nums, index_value, linear, physical_order, strides, take,
};
use super::element::Num;
use super::{OpResult, literal};
use crate::ArrayShape;
use crate::attributes::{GatherDims, PadDim, SliceDim};
use crate::literal::{ArrayData, ArrayLiteral};

fn out(shape: &ArrayShape, data: ArrayData) -> OpResult {
    Ok(literal(shape.element_type, &shape.dims, data))
}

/// Output positions mapped to input positions, for every output multi-index.
fn index_map(dims: &[i64], mut source: impl FnMut(&[i64]) -> usize) -> Vec<usize> {
    let mut map = Vec::with_capacity(count(dims));
    for_each_index(dims, |i| map.push(source(i)));
    map
}

pub(super) fn reshape(x: &ArrayLiteral, shape: &ArrayShape) -> OpResult {
    out(shape, x.data.clone())
}

/// A reshape of the bytes in memory: follows both layouts.
pub(super) fn bitcast(
    x: &ArrayLiteral,
    operand_shape: &ArrayShape,
    shape: &ArrayShape,
) -> OpResult {
    let physical = match physical_order(operand_shape) {
        Some(order) => take(&x.data, &order),
        None => x.data.clone(),
    };
    let data = if physical.element_type() != shape.element_type {
        array::from_le_bytes(shape.element_type, &array::to_le_bytes(&physical))
    } else {
        physical
    };
    let logical = match physical_order(shape) {
        Some(order) => {
            // `order[p]` is the logical index stored at physical position p: invert it.
            let mut inverse = vec![0usize; order.len()];
            for (p, &l) in order.iter().enumerate() {
                inverse[l] = p;
            }
            take(&data, &inverse)
        }
        None => data,
    };
    out(shape, logical)
}

pub(super) fn broadcast(x: &ArrayLiteral, shape: &ArrayShape, dimensions: &[i64]) -> OpResult {
    let s = strides(&x.shape.dims);
    let map = index_map(&shape.dims, |i| {
        dimensions
            .iter()
            .zip(&s)
            .map(|(&d, &st)| i[d as usize] as usize * st)
            .sum()
    });
    out(shape, take(&x.data, &map))
}

pub(super) fn transpose(x: &ArrayLiteral, shape: &ArrayShape, perm: &[i64]) -> OpResult {
    let s = strides(&x.shape.dims);
    let map = index_map(&shape.dims, |i| {
        perm.iter()
            .enumerate()
            .map(|(k, &p)| i[k] as usize * s[p as usize])
            .sum()
    });
    out(shape, take(&x.data, &map))
}

pub(super) fn slice(x: &ArrayLiteral, shape: &ArrayShape, slices: &[SliceDim]) -> OpResult {
    let s = strides(&x.shape.dims);
    let map = index_map(&shape.dims, |i| {
        slices
            .iter()
            .enumerate()
            .map(|(d, sl)| (sl.start + i[d] * sl.stride) as usize * s[d])
            .sum()
    });
    out(shape, take(&x.data, &map))
}

pub(super) fn concatenate(xs: &[&ArrayLiteral], shape: &ArrayShape, dimension: i64) -> OpResult {
    let d = dimension as usize;
    let all = array::concat(&xs.iter().map(|x| &x.data).collect::<Vec<_>>());
    let mut bases = Vec::with_capacity(xs.len());
    let mut offset = 0;
    for x in xs {
        bases.push(offset);
        offset += x.data.len();
    }
    let map = index_map(&shape.dims, |i| {
        let mut along = i[d];
        let mut part = 0;
        while along >= xs[part].shape.dims[d] {
            along -= xs[part].shape.dims[d];
            part += 1;
        }
        let s = strides(&xs[part].shape.dims);
        let mut j = i.to_vec();
        j[d] = along;
        bases[part] + linear(&j, &s)
    });
    out(shape, take(&all, &map))
}

pub(super) fn pad(
    x: &ArrayLiteral,
    value: &ArrayLiteral,
    shape: &ArrayShape,
    padding: &[PadDim],
) -> OpResult {
    let both = array::concat(&[&x.data, &value.data]);
    let fill = x.data.len();
    let s = strides(&x.shape.dims);
    let map = index_map(&shape.dims, |i| {
        let mut pos = 0usize;
        for (d, p) in padding.iter().enumerate() {
            let t = i[d] - p.low;
            let step = p.interior + 1;
            if t < 0 || t % step != 0 || t / step >= x.shape.dims[d] {
                return fill;
            }
            pos += (t / step) as usize * s[d];
        }
        pos
    });
    out(shape, take(&both, &map))
}

pub(super) fn reverse(x: &ArrayLiteral, dimensions: &[i64]) -> OpResult {
    let dims = &x.shape.dims;
    let s = strides(dims);
    let map = index_map(dims, |i| {
        i.iter()
            .enumerate()
            .map(|(d, &v)| {
                let v = if dimensions.contains(&(d as i64)) {
                    dims[d] - 1 - v
                } else {
                    v
                };
                v as usize * s[d]
            })
            .sum()
    });
    out(&x.shape, take(&x.data, &map))
}

pub(super) fn iota(shape: &ArrayShape, dimension: i64) -> OpResult {
    let mut values = Vec::with_capacity(count(&shape.dims));
    for_each_index(&shape.dims, |i| values.push(i[dimension as usize]));
    let data = from_nums(shape.element_type, values.len(), |k| {
        Num::Int(values[k] as i128)
    });
    out(shape, data)
}

/// `starts` clamped so that a window of `sizes` fits in `dims` (XLA's dynamic slices).
fn clamp_starts(starts: &[i64], dims: &[i64], sizes: &[i64]) -> Vec<i64> {
    starts
        .iter()
        .zip(dims.iter().zip(sizes))
        .map(|(&s, (&d, &size))| s.clamp(0, (d - size).max(0)))
        .collect()
}

/// The row-major positions in an array of `dims` of a window of `sizes` at `starts`
/// (clamped, as XLA clamps a dynamic slice's), in the window's row-major order.
fn window_positions(dims: &[i64], starts: &[i64], sizes: &[i64]) -> Vec<usize> {
    let starts = clamp_starts(starts, dims, sizes);
    let s = strides(dims);
    index_map(sizes, |i| {
        i.iter()
            .zip(&starts)
            .zip(&s)
            .map(|((&v, &st), &k)| (v + st) as usize * k)
            .sum()
    })
}

/// For each element of a dynamic slice of `sizes` at `starts` (unclamped) from an array of
/// `dims`, the array element it takes (row-major positions): the evaluator's dynamic
/// slice, for kernels that move the elements themselves.
pub fn dynamic_slice_sources(dims: &[i64], starts: &[i64], sizes: &[i64]) -> Vec<usize> {
    window_positions(dims, starts, sizes)
}

/// For each element of a dynamic update slice's update of `sizes` at `starts` (unclamped)
/// into an array of `dims`, the array element it replaces (row-major positions).
pub fn dynamic_update_targets(dims: &[i64], starts: &[i64], sizes: &[i64]) -> Vec<usize> {
    window_positions(dims, starts, sizes)
}

pub(super) fn dynamic_slice(
    operands: &[&ArrayLiteral],
    shape: &ArrayShape,
    sizes: &[i64],
) -> OpResult {
    let x = operands[0];
    let starts: Vec<i64> = operands[1..]
        .iter()
        .map(|s| index_value(&s.data, 0))
        .collect();
    let map = dynamic_slice_sources(&x.shape.dims, &starts, sizes);
    debug_assert_eq!(map.len(), count(&shape.dims));
    out(shape, take(&x.data, &map))
}

pub(super) fn dynamic_update_slice(operands: &[&ArrayLiteral]) -> OpResult {
    let (x, update) = (operands[0], operands[1]);
    let starts: Vec<i64> = operands[2..]
        .iter()
        .map(|s| index_value(&s.data, 0))
        .collect();
    let targets = dynamic_update_targets(&x.shape.dims, &starts, &update.shape.dims);
    let mut data = x.data.clone();
    for (k, &to) in targets.iter().enumerate() {
        array::copy_element(&mut data, to, &update.data, k);
    }
    out(&x.shape, data)
}

/// The index array's multi-index for a batch position, with the index vector dimension
/// inserted at `index_vector_dim` (value filled in by the caller).
pub(super) fn with_vector_dim(
    batch: &[i64],
    index_vector_dim: usize,
    indices_rank: usize,
) -> Vec<i64> {
    let mut full = batch.to_vec();
    if index_vector_dim < indices_rank {
        full.insert(index_vector_dim, 0);
    }
    full
}

/// Reads the start index vector at `full` (index vector dimension iterated over `k`) from
/// an index array of `dims` whose row-major element `i` is `index(i)`.
pub(super) fn start_vector(
    dims: &[i64],
    index: &dyn Fn(usize) -> i64,
    full: &mut [i64],
    index_vector_dim: usize,
    len: usize,
) -> Vec<i64> {
    let s = strides(dims);
    (0..len)
        .map(|k| {
            if index_vector_dim < dims.len() {
                full[index_vector_dim] = k as i64;
            }
            index(linear(full, &s))
        })
        .collect()
}

pub(super) fn gather(
    operand: &ArrayLiteral,
    indices: &ArrayLiteral,
    shape: &ArrayShape,
    dn: &GatherDims,
    slice_sizes: &[i64],
) -> OpResult {
    let index = |i: usize| index_value(&indices.data, i);
    let map = gather_sources(
        &operand.shape.dims,
        &indices.shape.dims,
        &index,
        &shape.dims,
        dn,
        slice_sizes,
    );
    out(shape, take(&operand.data, &map))
}

/// For each element of a gather's result of `out_dims` (row-major), the element of the
/// operand of `dims` it takes (row-major), the index array of `index_dims` read through
/// `index` (its row-major element `i`): the evaluator's gather, for kernels that move the
/// elements themselves.
pub fn gather_sources(
    dims: &[i64],
    index_dims: &[i64],
    index: &dyn Fn(usize) -> i64,
    out_dims: &[i64],
    dn: &GatherDims,
    slice_sizes: &[i64],
) -> Vec<usize> {
    let rank = dims.len();
    let ivd = dn.index_vector_dim as usize;
    let s = strides(dims);
    let offset_operand_dims: Vec<usize> = (0..rank)
        .filter(|&d| {
            !dn.collapsed_slice_dims.contains(&(d as i64))
                && !dn.operand_batching_dims.contains(&(d as i64))
        })
        .collect();
    index_map(out_dims, |out_index| {
        let batch: Vec<i64> = (0..out_index.len())
            .filter(|d| !dn.offset_dims.contains(&(*d as i64)))
            .map(|d| out_index[d])
            .collect();
        let window: Vec<i64> = dn
            .offset_dims
            .iter()
            .map(|&d| out_index[d as usize])
            .collect();
        let mut full = with_vector_dim(&batch, ivd, index_dims.len());
        let starts = start_vector(index_dims, index, &mut full, ivd, dn.start_index_map.len());
        let mut operand_index = vec![0i64; rank];
        for (k, &d) in dn.start_index_map.iter().enumerate() {
            let d = d as usize;
            operand_index[d] = starts[k].clamp(0, dims[d] - slice_sizes[d]);
        }
        set_batching_starts(
            &mut operand_index,
            &dn.operand_batching_dims,
            &dn.start_indices_batching_dims,
            &batch,
            ivd,
            index_dims.len(),
        );
        for (j, &d) in offset_operand_dims.iter().enumerate() {
            operand_index[d] += window[j];
        }
        linear(&operand_index, &s)
    })
}

/// Sets the operand index of each batching dimension to the batch position of its paired
/// index dimension (`batch` counts the index array's dimensions other than the vector one).
pub(super) fn set_batching_starts(
    operand_index: &mut [i64],
    operand_batching_dims: &[i64],
    index_batching_dims: &[i64],
    batch: &[i64],
    index_vector_dim: usize,
    indices_rank: usize,
) {
    for (&od, &id) in operand_batching_dims.iter().zip(index_batching_dims) {
        let id = id as usize;
        let pos = if id > index_vector_dim && index_vector_dim < indices_rank {
            id - 1
        } else {
            id
        };
        operand_index[od as usize] = batch[pos];
    }
}
