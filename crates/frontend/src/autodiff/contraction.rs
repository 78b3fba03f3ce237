//! Gradient rules of the contractions: `dot` and `convolution` (JAX's transpose rules,
//! `_dot_general_transpose_lhs/rhs` and `_conv_general_dilated_transpose_lhs/rhs`).

use super::{AutodiffError, Contributions, unsupported};
use crate::ops::Builder;
use xla_ir::attributes::{ConvDims, DotDims, Window, WindowDim};
use xla_ir::{InstrId, Instruction};

/// `dot(x, y)` with dimension numbers `dims`.
pub(super) fn dot(
    b: &mut Builder<'_>,
    xy: &[InstrId],
    dims: &DotDims,
    g: InstrId,
    wants: &[bool],
) -> Result<Contributions, AutodiffError> {
    let (x, y) = (xy[0], xy[1]);
    let mut out = Vec::new();
    if wants[0] {
        let side = Side {
            contract: (&dims.lhs_contracting, &dims.rhs_contracting),
            batch: (&dims.lhs_batch, &dims.rhs_batch),
        };
        out.push((0, transpose_lhs(b, g, (x, y), side, false)?));
    }
    if wants[1] {
        let side = Side {
            contract: (&dims.rhs_contracting, &dims.lhs_contracting),
            batch: (&dims.rhs_batch, &dims.lhs_batch),
        };
        out.push((1, transpose_lhs(b, g, (y, x), side, true)?));
    }
    Ok(out)
}

/// Dimension numbers seen from the operand being differentiated (`.0`) and the other (`.1`).
struct Side<'a> {
    contract: (&'a [i64], &'a [i64]),
    batch: (&'a [i64], &'a [i64]),
}

/// The cotangent of `x` in `dot(x, y)` (or of `y` in `dot(y, x)` when `swapped`).
fn transpose_lhs(
    b: &mut Builder<'_>,
    g: InstrId,
    (x, y): (InstrId, InstrId),
    side: Side<'_>,
    swapped: bool,
) -> Result<InstrId, AutodiffError> {
    let rank = |b: &Builder<'_>, v: InstrId| crate::ops::dims(b, v).len() as i64;
    let (x_contract, y_contract) = side.contract;
    let (x_batch, y_batch) = side.batch;
    let remaining = |rank: i64, a: &[i64], c: &[i64]| -> Vec<i64> {
        (0..rank)
            .filter(|d| !a.contains(d) && !c.contains(d))
            .collect()
    };
    let x_kept = remaining(rank(b, x), x_contract, x_batch);
    let y_kept = remaining(rank(b, y), y_contract, y_batch);
    let nb = x_batch.len() as i64;
    // The product's dimensions: batch, then the left operand's kept, then the right's.
    let ans_batch: Vec<i64> = (0..nb).collect();
    let ans_y: Vec<i64> = if swapped {
        (nb..nb + y_kept.len() as i64).collect()
    } else {
        let start = nb + x_kept.len() as i64;
        (start..start + y_kept.len() as i64).collect()
    };
    let dims = DotDims {
        lhs_batch: ans_batch,
        rhs_batch: y_batch.to_vec(),
        lhs_contracting: ans_y,
        rhs_contracting: y_kept,
    };
    let d = b.dot_general(g, y, dims, None)?;
    // d holds x's batch, kept, then contracted dimensions (in y's contracting order).
    let mut by_y: Vec<(i64, i64)> = y_contract
        .iter()
        .copied()
        .zip(x_contract.iter().copied())
        .collect();
    by_y.sort_unstable();
    let order: Vec<i64> = x_batch
        .iter()
        .copied()
        .chain(x_kept)
        .chain(by_y.into_iter().map(|(_, xc)| xc))
        .collect();
    let mut perm: Vec<i64> = (0..order.len() as i64).collect();
    perm.sort_by_key(|&k| order[k as usize]);
    if perm.iter().enumerate().all(|(i, &p)| i as i64 == p) {
        return Ok(d);
    }
    Ok(b.transpose(d, &perm)?)
}

/// `convolution(input, kernel)`.
pub(super) fn convolution(
    b: &mut Builder<'_>,
    instr: &Instruction,
    window: &Window,
    dims: &ConvDims,
    (feature_groups, batch_groups): (i64, i64),
    g: InstrId,
    wants: &[bool],
) -> Result<Contributions, AutodiffError> {
    if feature_groups != 1 || batch_groups != 1 {
        return Err(unsupported(
            instr,
            "grouped convolutions are not differentiable yet",
        ));
    }
    if window.dims.iter().any(|w| w.window_reversal) {
        return Err(unsupported(
            instr,
            "reversed windows are not differentiable",
        ));
    }
    let (input, kernel) = (instr.operands[0], instr.operands[1]);
    let shape = |b: &Builder<'_>, v: InstrId, at: &[i64]| -> Vec<i64> {
        let d = crate::ops::dims(b, v);
        at.iter().map(|&k| d[k as usize]).collect()
    };
    let in_sizes = shape(b, input, &dims.input_spatial);
    let k_sizes = shape(b, kernel, &dims.kernel_spatial);
    let out_sizes = shape(b, g, &dims.output_spatial);
    let mut out = Vec::new();
    if wants[0] {
        // The kernel reversed in space, run over the cotangent.
        let reversed = b.reverse(kernel, &dims.kernel_spatial)?;
        let window = Window {
            dims: (0..window.dims.len())
                .map(|s| {
                    let w = &window.dims[s];
                    let before = dilate(k_sizes[s], w.window_dilation) - w.pad_low - 1;
                    let after = dilate(in_sizes[s], w.base_dilation)
                        + dilate(k_sizes[s], w.window_dilation)
                        - 1
                        - dilate(out_sizes[s], w.stride)
                        - before;
                    WindowDim {
                        size: k_sizes[s],
                        stride: w.base_dilation,
                        pad_low: before,
                        pad_high: after,
                        window_dilation: w.window_dilation,
                        base_dilation: w.stride,
                        window_reversal: false,
                    }
                })
                .collect(),
        };
        let trans = ConvDims {
            input_batch: dims.output_batch,
            input_feature: dims.output_feature,
            input_spatial: dims.output_spatial.clone(),
            kernel_input_feature: dims.kernel_output_feature,
            kernel_output_feature: dims.kernel_input_feature,
            kernel_spatial: dims.kernel_spatial.clone(),
            output_batch: dims.input_batch,
            output_feature: dims.input_feature,
            output_spatial: dims.input_spatial.clone(),
        };
        out.push((0, b.convolution(g, reversed, window, trans, 1, 1, None)?));
    }
    if wants[1] {
        // The input correlated with the cotangent.
        let window = Window {
            dims: (0..window.dims.len())
                .map(|s| {
                    let w = &window.dims[s];
                    let from_lhs =
                        dilate(out_sizes[s], w.stride) - dilate(in_sizes[s], w.base_dilation);
                    let from_rhs = dilate(k_sizes[s], w.window_dilation) - w.pad_low - 1;
                    WindowDim {
                        size: out_sizes[s],
                        stride: w.window_dilation,
                        pad_low: w.pad_low,
                        pad_high: from_lhs + from_rhs,
                        window_dilation: w.stride,
                        base_dilation: w.base_dilation,
                        window_reversal: false,
                    }
                })
                .collect(),
        };
        let trans = ConvDims {
            input_batch: dims.input_feature,
            input_feature: dims.input_batch,
            input_spatial: dims.input_spatial.clone(),
            kernel_input_feature: dims.output_batch,
            kernel_output_feature: dims.output_feature,
            kernel_spatial: dims.output_spatial.clone(),
            output_batch: dims.kernel_input_feature,
            output_feature: dims.kernel_output_feature,
            output_spatial: dims.kernel_spatial.clone(),
        };
        out.push((1, b.convolution(input, g, window, trans, 1, 1, None)?));
    }
    Ok(out)
}

/// The size of `size` elements with `dilation - 1` holes between neighbours.
fn dilate(size: i64, dilation: i64) -> i64 {
    if size == 0 {
        0
    } else {
        1 + dilation * (size - 1)
    }
}
