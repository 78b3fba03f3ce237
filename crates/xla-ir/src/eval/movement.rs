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

/// Start indices clamped so that a window of `sizes` fits in `dims`.
fn clamped_starts(starts: &[&ArrayLiteral], dims: &[i64], sizes: &[i64]) -> Vec<i64> {
    starts
        .iter()
        .zip(dims.iter().zip(sizes))
        .map(|(s, (&d, &size))| index_value(&s.data, 0).clamp(0, (d - size).max(0)))
        .collect()
}

pub(super) fn dynamic_slice(
    operands: &[&ArrayLiteral],
    shape: &ArrayShape,
    sizes: &[i64],
) -> OpResult {
    let x = operands[0];
    let starts = clamped_starts(&operands[1..], &x.shape.dims, sizes);
    let s = strides(&x.shape.dims);
    let map = index_map(&shape.dims, |i| {
        i.iter()
            .zip(&starts)
            .zip(&s)
            .map(|((&v, &st), &k)| (v + st) as usize * k)
            .sum()
    });
    out(shape, take(&x.data, &map))
}

pub(super) fn dynamic_update_slice(operands: &[&ArrayLiteral]) -> OpResult {
    let (x, update) = (operands[0], operands[1]);
    let starts = clamped_starts(&operands[2..], &x.shape.dims, &update.shape.dims);
    let s = strides(&x.shape.dims);
    let mut data = x.data.clone();
    let mut k = 0;
    for_each_index(&update.shape.dims, |i| {
        let to = i
            .iter()
            .zip(&starts)
            .zip(&s)
            .map(|((&v, &st), &st2)| (v + st) as usize * st2)
            .sum();
        array::copy_element(&mut data, to, &update.data, k);
        k += 1;
    });
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

/// Reads the start index vector at `full` (index vector dimension iterated over `k`).
pub(super) fn start_vector(
    indices: &ArrayLiteral,
    full: &mut [i64],
    index_vector_dim: usize,
    len: usize,
) -> Vec<i64> {
    let s = strides(&indices.shape.dims);
    (0..len)
        .map(|k| {
            if index_vector_dim < indices.shape.rank() {
                full[index_vector_dim] = k as i64;
            }
            index_value(&indices.data, linear(full, &s))
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
    let rank = operand.shape.rank();
    let ivd = dn.index_vector_dim as usize;
    let s = strides(&operand.shape.dims);
    let offset_operand_dims: Vec<usize> = (0..rank)
        .filter(|&d| {
            !dn.collapsed_slice_dims.contains(&(d as i64))
                && !dn.operand_batching_dims.contains(&(d as i64))
        })
        .collect();
    let map = index_map(&shape.dims, |out_index| {
        let batch: Vec<i64> = (0..out_index.len())
            .filter(|d| !dn.offset_dims.contains(&(*d as i64)))
            .map(|d| out_index[d])
            .collect();
        let window: Vec<i64> = dn
            .offset_dims
            .iter()
            .map(|&d| out_index[d as usize])
            .collect();
        let mut full = with_vector_dim(&batch, ivd, indices.shape.rank());
        let starts = start_vector(indices, &mut full, ivd, dn.start_index_map.len());
        let mut operand_index = vec![0i64; rank];
        for (k, &d) in dn.start_index_map.iter().enumerate() {
            let d = d as usize;
            operand_index[d] = starts[k].clamp(0, operand.shape.dims[d] - slice_sizes[d]);
        }
        set_batching_starts(
            &mut operand_index,
            &dn.operand_batching_dims,
            &dn.start_indices_batching_dims,
            &batch,
            ivd,
            indices.shape.rank(),
        );
        for (j, &d) in offset_operand_dims.iter().enumerate() {
            operand_index[d] += window[j];
        }
        linear(&operand_index, &s)
    });
    out(shape, take(&operand.data, &map))
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
