//! `dot` with general dimension numbers and `convolution` with every dimension number,
//! padding, dilation and grouping. Floats accumulate in f64, integers wrap in i128.

use super::array::{count, for_each_index, strides};
use super::element::{Element, Num};
use super::{OpError, OpResult, literal};
use crate::attributes::{ConvDims, DotDims, Window};
use crate::literal::{ArrayData, ArrayLiteral, with_data};
use crate::{ArrayShape, ElementType};

/// An accumulator: f64 for floats, wrapping i128 for integers.
trait Acc: Copy + Default {
    fn from(n: Num) -> Self;
    fn mul_add(self, a: Self, b: Self) -> Self;
    fn to_num(self) -> Num;
}

impl Acc for f64 {
    fn from(n: Num) -> f64 {
        match n {
            Num::Float(f) => f,
            Num::Int(i) => i as f64,
            Num::Bool(b) => b as u8 as f64,
        }
    }
    fn mul_add(self, a: f64, b: f64) -> f64 {
        self + a * b
    }
    fn to_num(self) -> Num {
        Num::Float(self)
    }
}

impl Acc for i128 {
    fn from(n: Num) -> i128 {
        match n {
            Num::Float(f) => f as i128,
            Num::Int(i) => i,
            Num::Bool(b) => b as i128,
        }
    }
    fn mul_add(self, a: i128, b: i128) -> i128 {
        self.wrapping_add(a.wrapping_mul(b))
    }
    fn to_num(self) -> Num {
        Num::Int(self)
    }
}

/// The elements of `data` taken in `dims` order permuted by `perm` (a transpose), as
/// accumulator values.
fn permuted<A: Acc>(data: &ArrayData, dims: &[i64], perm: &[usize]) -> Vec<A> {
    let s = strides(dims);
    let out_dims: Vec<i64> = perm.iter().map(|&p| dims[p]).collect();
    let mut out = Vec::with_capacity(count(&out_dims));
    with_data!(data, v => for_each_index(&out_dims, |i| {
        let pos: usize = i.iter().zip(perm).map(|(&x, &p)| x as usize * s[p]).sum();
        out.push(A::from(Element::to_num(v[pos])));
    }));
    out
}

fn all<A: Acc>(data: &ArrayData) -> Vec<A> {
    with_data!(data, v => v.iter().map(|&x| A::from(Element::to_num(x))).collect())
}

fn finish<A: Acc>(out: &ArrayShape, acc: Vec<A>) -> OpResult {
    let data = super::array::from_nums(out.element_type, acc.len(), |i| acc[i].to_num());
    Ok(literal(out.element_type, &out.dims, data))
}

fn is_float(t: ElementType) -> bool {
    t.is_float()
}

pub(super) fn dot(
    lhs: &ArrayLiteral,
    rhs: &ArrayLiteral,
    out: &ArrayShape,
    dn: &DotDims,
) -> OpResult {
    if lhs.data.element_type() == ElementType::Pred {
        return Err(OpError::Message(
            "dot of pred operands is not supported".into(),
        ));
    }
    if is_float(out.element_type) || is_float(lhs.data.element_type()) {
        dot_with::<f64>(lhs, rhs, out, dn)
    } else {
        dot_with::<i128>(lhs, rhs, out, dn)
    }
}

fn dot_with<A: Acc>(
    lhs: &ArrayLiteral,
    rhs: &ArrayLiteral,
    out: &ArrayShape,
    dn: &DotDims,
) -> OpResult {
    let free = |rank: usize, batch: &[i64], contracting: &[i64]| -> Vec<usize> {
        (0..rank)
            .filter(|d| !batch.contains(&(*d as i64)) && !contracting.contains(&(*d as i64)))
            .collect()
    };
    let (ld, rd) = (&lhs.shape.dims, &rhs.shape.dims);
    let lhs_free = free(ld.len(), &dn.lhs_batch, &dn.lhs_contracting);
    let rhs_free = free(rd.len(), &dn.rhs_batch, &dn.rhs_contracting);
    let size = |dims: &[i64], which: &[usize]| {
        which
            .iter()
            .map(|&d| dims[d].max(0) as usize)
            .product::<usize>()
    };
    let as_usize = |v: &[i64]| v.iter().map(|&d| d as usize).collect::<Vec<_>>();
    let (lb, lc, rb, rc) = (
        as_usize(&dn.lhs_batch),
        as_usize(&dn.lhs_contracting),
        as_usize(&dn.rhs_batch),
        as_usize(&dn.rhs_contracting),
    );
    let (b, m, k, n) = (
        size(ld, &lb),
        size(ld, &lhs_free),
        size(ld, &lc),
        size(rd, &rhs_free),
    );
    let l: Vec<A> = permuted(&lhs.data, ld, &[lb.clone(), lhs_free, lc].concat());
    let r: Vec<A> = permuted(&rhs.data, rd, &[rb, rc, rhs_free].concat());
    let mut acc = vec![A::default(); b * m * n];
    for bi in 0..b {
        for mi in 0..m {
            let row = &mut acc[(bi * m + mi) * n..(bi * m + mi + 1) * n];
            for ki in 0..k {
                let a = l[(bi * m + mi) * k + ki];
                let rrow = &r[(bi * k + ki) * n..(bi * k + ki + 1) * n];
                for (o, &x) in row.iter_mut().zip(rrow) {
                    *o = o.mul_add(a, x);
                }
            }
        }
    }
    finish(out, acc)
}

#[allow(clippy::too_many_arguments)]
pub(super) fn convolution(
    input: &ArrayLiteral,
    kernel: &ArrayLiteral,
    out: &ArrayShape,
    window: &Window,
    dn: &ConvDims,
    feature_group_count: i64,
    batch_group_count: i64,
) -> OpResult {
    if is_float(out.element_type) || is_float(input.data.element_type()) {
        conv_with::<f64>(
            input,
            kernel,
            out,
            window,
            dn,
            feature_group_count,
            batch_group_count,
        )
    } else {
        conv_with::<i128>(
            input,
            kernel,
            out,
            window,
            dn,
            feature_group_count,
            batch_group_count,
        )
    }
}

#[allow(clippy::too_many_arguments)]
fn conv_with<A: Acc>(
    input: &ArrayLiteral,
    kernel: &ArrayLiteral,
    out: &ArrayShape,
    window: &Window,
    dn: &ConvDims,
    feature_group_count: i64,
    batch_group_count: i64,
) -> OpResult {
    let (id, kd, od) = (&input.shape.dims, &kernel.shape.dims, &out.dims);
    let (is, ks) = (strides(id), strides(kd));
    let x: Vec<A> = all(&input.data);
    let w: Vec<A> = all(&kernel.data);
    let spatial = dn.spatial_rank();
    let window_dims: Vec<crate::attributes::WindowDim> = if window.dims.is_empty() {
        dn.kernel_spatial
            .iter()
            .map(|&d| crate::attributes::WindowDim::of_size(kd[d as usize]))
            .collect()
    } else {
        window.dims.clone()
    };
    let out_features = od[dn.output_feature as usize];
    let input_batch = id[dn.input_batch as usize];
    let in_features_per_group = kd[dn.kernel_input_feature as usize];
    let out_features_per_group = out_features / feature_group_count;
    let batch_group_size = input_batch / batch_group_count;
    // Output features come in batch_group_count blocks; block g reads batch group g.
    let depthwise_multiplier = (out_features / batch_group_count).max(1);
    let kernel_spatial_sizes: Vec<i64> =
        dn.kernel_spatial.iter().map(|&d| kd[d as usize]).collect();
    // Per spatial dimension, the input offset each (output position, kernel position)
    // reads (None: padding or a hole of base dilation) and the kernel offset of each
    // kernel position: the loops below only add offsets.
    let mut input_offsets: Vec<Vec<Option<usize>>> = Vec::with_capacity(spatial);
    let mut kernel_offsets: Vec<Vec<usize>> = Vec::with_capacity(spatial);
    for d in 0..spatial {
        let wd = &window_dims[d];
        let (outs, ksize) = (od[dn.output_spatial[d] as usize], kernel_spatial_sizes[d]);
        let in_size = id[dn.input_spatial[d] as usize];
        let in_stride = is[dn.input_spatial[d] as usize];
        let mut table = Vec::with_capacity((outs * ksize).max(0) as usize);
        for o in 0..outs {
            for k in 0..ksize {
                let p = o * wd.stride - wd.pad_low + k * wd.window_dilation;
                let q = p / wd.base_dilation;
                table.push(
                    (p >= 0 && p % wd.base_dilation == 0 && q < in_size)
                        .then(|| q as usize * in_stride),
                );
            }
        }
        input_offsets.push(table);
        kernel_offsets.push(
            (0..ksize)
                .map(|k| {
                    let kk = if wd.window_reversal { ksize - 1 - k } else { k };
                    kk as usize * ks[dn.kernel_spatial[d] as usize]
                })
                .collect(),
        );
    }
    let mut kernel_positions: Vec<usize> = Vec::new();
    for_each_index(&kernel_spatial_sizes, |k| {
        kernel_positions.extend(k.iter().map(|&x| x as usize))
    });
    // With no spatial dimensions there is one (empty) kernel position.
    let positions = match spatial {
        0 => 1,
        _ => kernel_positions.len() / spatial,
    };
    let (in_feature_stride, kernel_in_stride) = (
        is[dn.input_feature as usize],
        ks[dn.kernel_input_feature as usize],
    );
    let mut out_spatial = vec![0usize; spatial];
    let mut acc = Vec::with_capacity(count(od));
    for_each_index(od, |o| {
        let f = o[dn.output_feature as usize];
        let group = f / out_features_per_group;
        let batch_group = f / depthwise_multiplier;
        let batch = o[dn.output_batch as usize] + batch_group * batch_group_size;
        for d in 0..spatial {
            out_spatial[d] = o[dn.output_spatial[d] as usize] as usize;
        }
        let input_base = batch as usize * is[dn.input_batch as usize]
            + (group * in_features_per_group) as usize * in_feature_stride;
        let kernel_base = f as usize * ks[dn.kernel_output_feature as usize];
        let mut sum = A::default();
        'positions: for t in 0..positions {
            let (mut xi, mut wi) = (input_base, kernel_base);
            for d in 0..spatial {
                let k = kernel_positions[t * spatial + d];
                let ksize = kernel_spatial_sizes[d] as usize;
                match input_offsets[d][out_spatial[d] * ksize + k] {
                    Some(off) => xi += off,
                    None => continue 'positions,
                }
                wi += kernel_offsets[d][k];
            }
            for _ in 0..in_features_per_group {
                sum = sum.mul_add(x[xi], w[wi]);
                xi += in_feature_stride;
                wi += kernel_in_stride;
            }
        }
        acc.push(sum);
    });
    if out.element_type.is_integer() {
        // XLA saturates integer convolution results to the result type.
        let bits = out.element_type.bit_width() as u32;
        let (lo, hi) = if out.element_type.is_signed_int() {
            (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
        } else {
            (0, (1i128 << bits) - 1)
        };
        let saturated: Vec<A> = acc
            .iter()
            .map(|a| match a.to_num() {
                Num::Int(i) => A::from(Num::Int(i.clamp(lo, hi))),
                _ => *a,
            })
            .collect();
        return finish(out, saturated);
    }
    finish(out, acc)
}
