//! `sort` (multi-operand, stable, any comparator) and `topk`.

use super::array::{for_each_index, linear, scalar_at, strides, take};
use super::element::Element;
use super::{Evaluator, OpError, OpResult, literal, one_or_tuple};
use crate::ElementType;
use crate::ids::CompId;
use crate::literal::{ArrayData, ArrayLiteral, with_data};

/// A stable merge sort that tolerates any comparator (inconsistent ones included), so a
/// user's comparator can never make the evaluator panic.
pub(super) fn merge_sort<E>(
    items: &mut Vec<usize>,
    less: &mut dyn FnMut(usize, usize) -> Result<bool, E>,
) -> Result<(), E> {
    if items.len() <= 1 {
        return Ok(());
    }
    let mut right = items.split_off(items.len() / 2);
    let mut left = std::mem::take(items);
    merge_sort(&mut left, less)?;
    merge_sort(&mut right, less)?;
    let (mut i, mut j) = (0, 0);
    items.reserve(left.len() + right.len());
    while i < left.len() && j < right.len() {
        // Take from the right only when it is strictly less: keeps equal keys in order.
        if less(right[j], left[i])? {
            items.push(right[j]);
            j += 1;
        } else {
            items.push(left[i]);
            i += 1;
        }
    }
    items.extend_from_slice(&left[i..]);
    items.extend_from_slice(&right[j..]);
    Ok(())
}

/// The linear positions of every row along `dimension`, one vector per row.
pub(super) fn rows(dims: &[i64], dimension: usize) -> Vec<Vec<usize>> {
    let s = strides(dims);
    let mut outer = dims.to_vec();
    outer[dimension] = 1;
    let mut out = Vec::new();
    for_each_index(&outer, |i| {
        let base = linear(i, &s);
        out.push(
            (0..dims[dimension] as usize)
                .map(|k| base + k * s[dimension])
                .collect(),
        );
    });
    out
}

impl Evaluator<'_> {
    pub(super) fn sort(
        &self,
        keys: &[&ArrayLiteral],
        dimension: i64,
        comparator: CompId,
    ) -> OpResult {
        let dims = &keys[0].shape.dims;
        let simple = self
            .simple_scalar_fn(comparator)
            .filter(|_| keys.len() == 1);
        let mut permutation = vec![0usize; keys[0].data.len()];
        for row in rows(dims, dimension as usize) {
            let mut order: Vec<usize> = (0..row.len()).collect();
            let mut less = |a: usize, b: usize| -> Result<bool, OpError> {
                let args = keys
                    .iter()
                    .flat_map(|k| [scalar_at(&k.data, row[a]), scalar_at(&k.data, row[b])])
                    .collect();
                let r = self.apply_scalar(comparator, simple, args)?;
                Ok(matches!(&r[0].data, ArrayData::Pred(p) if p[0]))
            };
            merge_sort(&mut order, &mut less)?;
            for (k, &o) in order.iter().enumerate() {
                permutation[row[k]] = row[o];
            }
        }
        let values = keys
            .iter()
            .map(|k| literal(k.data.element_type(), dims, take(&k.data, &permutation)))
            .collect();
        Ok(one_or_tuple(values))
    }
}

/// The k largest (or smallest) elements along the last dimension and their indices,
/// in XLA's total order (NaN above infinity), ties broken by the lower index.
pub(super) fn top_k(x: &ArrayLiteral, k: i64, largest: bool) -> OpResult {
    let dims = &x.shape.dims;
    let last = dims.len() - 1;
    let mut out_dims = dims.to_vec();
    out_dims[last] = k;
    let mut picked = Vec::new();
    let mut indices = Vec::new();
    for row in rows(dims, last) {
        let mut order: Vec<usize> = (0..row.len()).collect();
        with_data!(&x.data, v => order.sort_by(|&a, &b| {
            let ord = Element::total(v[row[a]], v[row[b]]);
            let ord = if largest { ord.reverse() } else { ord };
            ord.then(a.cmp(&b))
        }));
        for &o in order.iter().take(k as usize) {
            picked.push(row[o]);
            indices.push(o as i32);
        }
    }
    let values = literal(x.data.element_type(), &out_dims, take(&x.data, &picked));
    let positions = literal(ElementType::S32, &out_dims, ArrayData::S32(indices));
    Ok(crate::Literal::Tuple(vec![values, positions]))
}
