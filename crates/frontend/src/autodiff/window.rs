//! Gradient rules of `reduce-window`: max pooling scatters the cotangent to each window's
//! first maximum (`select-and-scatter` with `>=`, as JAX emits), sum pooling spreads it over
//! each window (JAX's `_reduce_window_sum_transpose_rule`).

use super::shape_ops::reducer_op;
use super::{AutodiffError, Contributions, unsupported};
use crate::ops::{self, Builder};
use xla_ir::attributes::{ComparisonDirection, PadDim, Window, WindowDim};
use xla_ir::op::BinaryOp;
use xla_ir::{CompId, ElementType, InstrId, Instruction, Shape};

/// `reduce-window(x, init)` (the instruction `instr`).
pub(super) fn reduce_window(
    b: &mut Builder<'_>,
    (_, instr): (InstrId, &Instruction),
    window: &Window,
    to_apply: CompId,
    g: InstrId,
) -> Result<Contributions, AutodiffError> {
    if instr.operands.len() != 2 {
        return Err(unsupported(
            instr,
            "variadic reduce-windows are not differentiable",
        ));
    }
    let x = instr.operands[0];
    let t = ops::element_type(b, x);
    match reducer_op(b, to_apply) {
        Some(BinaryOp::Maximum) => {
            if window
                .dims
                .iter()
                .any(|w| w.base_dilation != 1 || w.window_dilation != 1)
            {
                return Err(unsupported(
                    instr,
                    "max pooling with dilation is not differentiable (select-and-scatter has none)",
                ));
            }
            let select = comparator(b, ComparisonDirection::Ge, t)?;
            let scatter = ops::reducer(b, BinaryOp::Add, t)?;
            let zero = ops::scalar(b, t, 0.0)?;
            let dx = b.select_and_scatter(x, g, zero, window.clone(), select, scatter)?;
            Ok(vec![(0, dx)])
        }
        Some(BinaryOp::Add) => {
            let xd = ops::dims(b, x);
            let gd = ops::dims(b, g);
            let dilate = |size: i64, d: i64| if size == 0 { 0 } else { 1 + d * (size - 1) };
            let padding: Vec<PadDim> = window
                .dims
                .iter()
                .enumerate()
                .map(|(k, w)| {
                    let before = dilate(w.size, w.window_dilation) - w.pad_low - 1;
                    let after = dilate(xd[k], w.base_dilation) + dilate(w.size, w.window_dilation)
                        - 1
                        - dilate(gd[k], w.stride)
                        - before;
                    PadDim {
                        low: before,
                        high: after,
                        interior: w.stride - 1,
                    }
                })
                .collect();
            let zero = ops::scalar(b, t, 0.0)?;
            let padded = b.pad(g, zero, &padding)?;
            let spread = Window {
                dims: window
                    .dims
                    .iter()
                    .map(|w| WindowDim {
                        size: w.size,
                        stride: w.base_dilation,
                        pad_low: 0,
                        pad_high: 0,
                        window_dilation: w.window_dilation,
                        base_dilation: 1,
                        window_reversal: false,
                    })
                    .collect(),
            };
            let add = ops::reducer(b, BinaryOp::Add, t)?;
            let zero = ops::scalar(b, t, 0.0)?;
            Ok(vec![(0, b.reduce_window(&[padded], &[zero], spread, add)?)])
        }
        _ => Err(unsupported(
            instr,
            "only max and sum reduce-windows are differentiable",
        )),
    }
}

/// The module's scalar comparator `a <direction> b` for `element_type` (built once).
pub(crate) fn comparator(
    b: &mut Builder<'_>,
    direction: ComparisonDirection,
    element_type: ElementType,
) -> Result<CompId, AutodiffError> {
    let name = format!(
        "{}_{}",
        direction.name().to_lowercase(),
        element_type.name()
    );
    if let Some((id, _)) = b.module().computations().find(|(_, c)| c.name == name) {
        return Ok(id);
    }
    Ok(b.sub_computation(name.clone(), |c| {
        let s = Shape::scalar(element_type);
        let p = c.parameter(0, s.clone(), &format!("{name}.a"))?;
        let q = c.parameter(1, s, &format!("{name}.b"))?;
        c.compare(p, q, direction, None)
    })?)
}
