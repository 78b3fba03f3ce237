//! Gradient rules of element-wise ops (JAX's `lax` JVPs, transposed).

use super::{AutodiffError, Contributions, unsupported};
use crate::ops::{self, Builder};
use xla_ir::attributes::ComparisonDirection;
use xla_ir::op::{BinaryOp, UnaryOp};
use xla_ir::{InstrId, Instruction};

/// The operand of unary instruction `y` (`instr`), cotangent `g`.
pub(super) fn unary(
    b: &mut Builder<'_>,
    op: UnaryOp,
    (y, instr): (InstrId, &Instruction),
    g: InstrId,
) -> Result<Contributions, AutodiffError> {
    let x = instr.operands[0];
    let dx = match op {
        UnaryOp::Negate => b.negate(g)?,
        UnaryOp::Copy => g,
        UnaryOp::Exp => b.multiply(g, y)?,
        UnaryOp::Expm1 => {
            let one = ops::full_like(b, y, 1.0)?;
            let e = b.add(y, one)?;
            b.multiply(g, e)?
        }
        UnaryOp::Log => b.divide(g, x)?,
        UnaryOp::Log1p => {
            let one = ops::full_like(b, x, 1.0)?;
            let x1 = b.add(x, one)?;
            b.divide(g, x1)?
        }
        UnaryOp::Sqrt => {
            // d sqrt(x) = 0.5 / sqrt(x)
            let half = ops::scale(b, g, 0.5)?;
            b.divide(half, y)?
        }
        UnaryOp::Rsqrt => {
            // d x^-1/2 = -0.5 x^-1/2 / x
            let t = b.divide(y, x)?;
            let t = ops::scale(b, t, -0.5)?;
            b.multiply(g, t)?
        }
        UnaryOp::Cbrt => {
            let t = b.divide(y, x)?;
            let t = ops::scale(b, t, 1.0 / 3.0)?;
            b.multiply(g, t)?
        }
        UnaryOp::Tanh => {
            let one = ops::full_like(b, y, 1.0)?;
            let yy = b.multiply(y, y)?;
            let d = b.subtract(one, yy)?;
            b.multiply(g, d)?
        }
        UnaryOp::Logistic => {
            let one = ops::full_like(b, y, 1.0)?;
            let rest = b.subtract(one, y)?;
            let d = b.multiply(y, rest)?;
            b.multiply(g, d)?
        }
        UnaryOp::Sine => {
            let c = b.cosine(x)?;
            b.multiply(g, c)?
        }
        UnaryOp::Cosine => {
            let s = b.sine(x)?;
            let s = b.negate(s)?;
            b.multiply(g, s)?
        }
        UnaryOp::Tan => {
            // 1 + tan^2
            let one = ops::full_like(b, y, 1.0)?;
            let yy = b.multiply(y, y)?;
            let d = b.add(one, yy)?;
            b.multiply(g, d)?
        }
        UnaryOp::Erf => {
            // 2/sqrt(pi) exp(-x^2)
            let xx = b.multiply(x, x)?;
            let nxx = b.negate(xx)?;
            let e = b.exp(nxx)?;
            let d = ops::scale(b, e, std::f64::consts::FRAC_2_SQRT_PI)?;
            b.multiply(g, d)?
        }
        UnaryOp::Abs => {
            let s = b.sign(x)?;
            b.multiply(g, s)?
        }
        // Piecewise constant: no gradient.
        UnaryOp::Sign
        | UnaryOp::Floor
        | UnaryOp::Ceil
        | UnaryOp::RoundNearestAfz
        | UnaryOp::RoundNearestEven => return Ok(vec![]),
        _ => return Err(unsupported(instr, "no gradient rule for this op")),
    };
    Ok(vec![(0, dx)])
}

/// The operands of binary instruction `z` (`instr`), cotangent `g`.
pub(super) fn binary(
    b: &mut Builder<'_>,
    op: BinaryOp,
    (z, instr): (InstrId, &Instruction),
    g: InstrId,
    wants: &[bool],
) -> Result<Contributions, AutodiffError> {
    let (x, y) = (instr.operands[0], instr.operands[1]);
    let mut out = Vec::new();
    match op {
        BinaryOp::Add => {
            out.push((0, g));
            out.push((1, g));
        }
        BinaryOp::Subtract => {
            out.push((0, g));
            if wants[1] {
                out.push((1, b.negate(g)?));
            }
        }
        BinaryOp::Multiply => {
            if wants[0] {
                out.push((0, b.multiply(g, y)?));
            }
            if wants[1] {
                out.push((1, b.multiply(x, g)?));
            }
        }
        BinaryOp::Divide => {
            let gy = b.divide(g, y)?;
            if wants[0] {
                out.push((0, gy));
            }
            if wants[1] {
                // -g x / y^2 = -(g / y) * (x / y)
                let q = b.divide(x, y)?;
                let t = b.multiply(gy, q)?;
                out.push((1, b.negate(t)?));
            }
        }
        BinaryOp::Maximum | BinaryOp::Minimum => {
            // lax.max/min: the cotangent goes to the chosen operand, split evenly on ties.
            let direction = if op == BinaryOp::Maximum {
                ComparisonDirection::Gt
            } else {
                ComparisonDirection::Lt
            };
            let zero = ops::zeros_like(b, g)?;
            let half = ops::scale(b, g, 0.5)?;
            let eq = b.compare(x, y, ComparisonDirection::Eq, None)?;
            let tie = b.select(eq, half, zero)?;
            if wants[0] {
                let pick = b.compare(x, y, direction, None)?;
                out.push((0, b.select(pick, g, tie)?));
            }
            if wants[1] {
                let pick = b.compare(y, x, direction, None)?;
                out.push((1, b.select(pick, g, tie)?));
            }
        }
        BinaryOp::Power => {
            // x^y: y x^(y-1) and log(x) x^y
            if wants[0] {
                let one = ops::full_like(b, y, 1.0)?;
                let ym1 = b.subtract(y, one)?;
                let p = b.power(x, ym1)?;
                let d = b.multiply(y, p)?;
                out.push((0, b.multiply(g, d)?));
            }
            if wants[1] {
                let l = b.log(x)?;
                let d = b.multiply(l, z)?;
                out.push((1, b.multiply(g, d)?));
            }
        }
        BinaryOp::Atan2 => {
            // atan2(x, y): y/(x^2+y^2), -x/(x^2+y^2)
            let xx = b.multiply(x, x)?;
            let yy = b.multiply(y, y)?;
            let r = b.add(xx, yy)?;
            let gr = b.divide(g, r)?;
            if wants[0] {
                out.push((0, b.multiply(gr, y)?));
            }
            if wants[1] {
                let t = b.multiply(gr, x)?;
                out.push((1, b.negate(t)?));
            }
        }
        BinaryOp::Remainder => {
            // x - y * trunc(x / y)
            out.push((0, g));
            if wants[1] {
                let q = b.divide(x, y)?;
                let s = b.sign(q)?;
                let a = b.abs(q)?;
                let f = b.floor(a)?;
                let t = b.multiply(s, f)?;
                let t = b.multiply(g, t)?;
                out.push((1, b.negate(t)?));
            }
        }
        _ => return Err(unsupported(instr, "not differentiable")),
    }
    Ok(out)
}

/// `select(p, t, f)`.
pub(super) fn select(
    b: &mut Builder<'_>,
    x: &[InstrId],
    g: InstrId,
    wants: &[bool],
) -> Result<Contributions, AutodiffError> {
    let zero = ops::zeros_like(b, g)?;
    let mut out = Vec::new();
    if wants[1] {
        out.push((1, b.select(x[0], g, zero)?));
    }
    if wants[2] {
        out.push((2, b.select(x[0], zero, g)?));
    }
    Ok(out)
}

/// `clamp(lo, x, hi)`: the cotangent goes to `x` where it is inside the bounds, else to
/// the bound that was taken.
pub(super) fn clamp(
    b: &mut Builder<'_>,
    x: &[InstrId],
    g: InstrId,
    wants: &[bool],
) -> Result<Contributions, AutodiffError> {
    let (lo, v, hi) = (x[0], x[1], x[2]);
    let scalar_bounds = ops::dims(b, lo) != ops::dims(b, v) || ops::dims(b, hi) != ops::dims(b, v);
    if scalar_bounds && (wants[0] || wants[2]) {
        return Err(AutodiffError::Unsupported {
            opcode: "clamp".into(),
            name: b.instruction(v).name.clone(),
            reason: "gradients of scalar clamp bounds are not supported".into(),
        });
    }
    let zero = ops::zeros_like(b, g)?;
    let (lo_b, hi_b) = (bound(b, lo, v)?, bound(b, hi, v)?);
    let above_lo = b.compare(v, lo_b, ComparisonDirection::Ge, None)?;
    let below_hi = b.compare(v, hi_b, ComparisonDirection::Le, None)?;
    let inside = b.and(above_lo, below_hi)?;
    let mut out = Vec::new();
    if wants[1] {
        out.push((1, b.select(inside, g, zero)?));
    }
    if wants[0] {
        let under = b.compare(v, lo_b, ComparisonDirection::Lt, None)?;
        out.push((0, b.select(under, g, zero)?));
    }
    if wants[2] {
        let over = b.compare(v, hi_b, ComparisonDirection::Gt, None)?;
        out.push((2, b.select(over, g, zero)?));
    }
    Ok(out)
}

/// A clamp bound broadcast to the clamped value's shape.
fn bound(b: &mut Builder<'_>, bound: InstrId, like: InstrId) -> Result<InstrId, AutodiffError> {
    let d = ops::dims(b, like);
    Ok(ops::broadcast_into(b, bound, &d, &[])?)
}
