//! Gradient rules of ops that move or reduce data without arithmetic between elements:
//! broadcast, transpose, slice, concatenate, pad, reduce.

use super::{AutodiffError, Contributions, unsupported};
use crate::ops::{self, Builder};
use xla_ir::attributes::{ComparisonDirection, PadDim, SliceDim};
use xla_ir::op::BinaryOp;
use xla_ir::{CompId, InstrId, Instruction, Op};

/// `broadcast(x), dimensions=mapping`: the cotangent summed over the added dimensions.
pub(super) fn broadcast(
    b: &mut Builder<'_>,
    x: InstrId,
    mapping: &[i64],
    g: InstrId,
) -> Result<Contributions, AutodiffError> {
    let rank = ops::dims(b, g).len() as i64;
    let added: Vec<i64> = (0..rank).filter(|d| !mapping.contains(d)).collect();
    let mut dx = ops::sum(b, g, &added)?;
    // The sum keeps the mapped dimensions in increasing order; put them in x's order.
    let mut sorted = mapping.to_vec();
    sorted.sort_unstable();
    if sorted != mapping {
        let perm: Vec<i64> = mapping
            .iter()
            .map(|m| {
                sorted
                    .iter()
                    .position(|s| s == m)
                    .expect("a mapped dimension") as i64
            })
            .collect();
        dx = b.transpose(dx, &perm)?;
    }
    let want = ops::dims(b, x);
    if ops::dims(b, dx) != want {
        dx = b.reshape(dx, &want)?;
    }
    Ok(vec![(0, dx)])
}

/// `transpose(x), dimensions=perm`: the cotangent transposed back.
pub(super) fn transpose(
    b: &mut Builder<'_>,
    perm: &[i64],
    g: InstrId,
) -> Result<Contributions, AutodiffError> {
    let mut inverse = vec![0i64; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inverse[p as usize] = i as i64;
    }
    Ok(vec![(0, b.transpose(g, &inverse)?)])
}

/// `slice(x)`: the cotangent padded with zeros back to x's shape.
pub(super) fn slice(
    b: &mut Builder<'_>,
    x: InstrId,
    slices: &[SliceDim],
    g: InstrId,
) -> Result<Contributions, AutodiffError> {
    let xd = ops::dims(b, x);
    let gd = ops::dims(b, g);
    if gd.contains(&0) {
        return Ok(vec![(0, ops::zeros_like(b, x)?)]);
    }
    let padding: Vec<PadDim> = slices
        .iter()
        .zip(xd.iter().zip(&gd))
        .map(|(s, (&n, &k))| PadDim {
            low: s.start,
            high: n - s.start - ((k - 1) * s.stride + 1),
            interior: s.stride - 1,
        })
        .collect();
    let t = ops::element_type(b, g);
    let zero = ops::scalar(b, t, 0.0)?;
    Ok(vec![(0, b.pad(g, zero, &padding)?)])
}

/// `concatenate(xs...)`: each operand's part of the cotangent.
pub(super) fn concatenate(
    b: &mut Builder<'_>,
    xs: &[InstrId],
    dimension: i64,
    g: InstrId,
) -> Result<Contributions, AutodiffError> {
    let gd = ops::dims(b, g);
    let mut at = 0;
    let mut out = Vec::with_capacity(xs.len());
    for (k, &x) in xs.iter().enumerate() {
        let n = ops::dims(b, x)[dimension as usize];
        let slices: Vec<SliceDim> = gd
            .iter()
            .enumerate()
            .map(|(d, &size)| {
                let (start, limit) = if d as i64 == dimension {
                    (at, at + n)
                } else {
                    (0, size)
                };
                SliceDim {
                    start,
                    limit,
                    stride: 1,
                }
            })
            .collect();
        out.push((k, b.slice(g, &slices)?));
        at += n;
    }
    Ok(out)
}

/// `pad(x, value)`: x's elements of the cotangent; the padding value gets the rest.
pub(super) fn pad(
    b: &mut Builder<'_>,
    padding: &[PadDim],
    g: InstrId,
    wants: &[bool],
) -> Result<Contributions, AutodiffError> {
    let t = ops::element_type(b, g);
    let zero = ops::scalar(b, t, 0.0)?;
    let unpad: Vec<PadDim> = padding
        .iter()
        .map(|p| PadDim {
            low: -p.low,
            high: -p.high,
            interior: 0,
        })
        .collect();
    let inner = b.pad(g, zero, &unpad)?;
    let inner_dims = ops::dims(b, inner);
    let slices: Vec<SliceDim> = padding
        .iter()
        .zip(&inner_dims)
        .map(|(p, &n)| SliceDim {
            start: 0,
            limit: n,
            stride: p.interior + 1,
        })
        .collect();
    let dx = b.slice(inner, &slices)?;
    let mut out = vec![(0, dx)];
    if wants[1] {
        let all = ops::sum_all(b, g)?;
        let mine = ops::sum_all(b, dx)?;
        out.push((1, b.subtract(all, mine)?));
    }
    Ok(out)
}

/// What a reducer computation combines with, when it is one binary op of its two
/// parameters.
pub(crate) fn reducer_op(b: &Builder<'_>, reducer: CompId) -> Option<BinaryOp> {
    let comp = b.module().computation(reducer);
    let root = comp.instr(comp.root);
    let Op::Binary(op) = root.op else { return None };
    let params: Vec<u64> = root
        .operands
        .iter()
        .filter_map(|&o| match comp.instr(o).op {
            Op::Parameter { number } => Some(number),
            _ => None,
        })
        .collect();
    let both = params.len() == 2 && params.contains(&0) && params.contains(&1);
    both.then_some(op)
}

/// `reduce(x, init)` by sum (the cotangent broadcast back) or by max/min (the cotangent
/// divided among the elements equal to the result, as JAX's chooser rule does).
pub(super) fn reduce(
    b: &mut Builder<'_>,
    (y, instr): (InstrId, &Instruction),
    dimensions: &[i64],
    to_apply: CompId,
    g: InstrId,
) -> Result<Contributions, AutodiffError> {
    if instr.operands.len() != 2 {
        return Err(unsupported(
            instr,
            "variadic reductions are not differentiable",
        ));
    }
    let x = instr.operands[0];
    let xd = ops::dims(b, x);
    match reducer_op(b, to_apply) {
        Some(BinaryOp::Add) => Ok(vec![(0, ops::broadcast_back(b, g, &xd, dimensions)?)]),
        Some(BinaryOp::Maximum | BinaryOp::Minimum) => {
            let yb = ops::broadcast_back(b, y, &xd, dimensions)?;
            let at = b.compare(x, yb, ComparisonDirection::Eq, None)?;
            let t = ops::element_type(b, x);
            let mask = b.convert(at, t)?;
            let counts = ops::sum(b, mask, dimensions)?;
            let share = b.divide(g, counts)?;
            let share = ops::broadcast_back(b, share, &xd, dimensions)?;
            Ok(vec![(0, b.multiply(share, mask)?)])
        }
        _ => Err(unsupported(
            instr,
            "only sum, max and min reductions are differentiable",
        )),
    }
}
