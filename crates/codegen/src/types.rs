//! Type checking of kernel expressions: every node's compute type (f32, s32, u32, pred).

use crate::CodegenError;
use crate::kernel::{BinaryOp, DType, ElementwiseKernel, Expr, UnaryOp};

/// The compute type of `expr` given the inputs' storage types.
pub fn expr_type(expr: &Expr, inputs: &[DType]) -> Result<DType, CodegenError> {
    let bad = |m: String| Err(CodegenError::Type(m));
    Ok(match expr {
        Expr::Input(k) => match inputs.get(*k as usize) {
            Some(t) => t.compute(),
            None => {
                return bad(format!(
                    "input {k} does not exist; the kernel has {}",
                    inputs.len()
                ));
            }
        },
        Expr::F32(_) => DType::F32,
        Expr::S32(_) => DType::S32,
        Expr::U32(_) => DType::U32,
        Expr::Pred(_) => DType::Pred,
        Expr::Unary(op, x) => {
            let t = expr_type(x, inputs)?;
            let ok = match op {
                UnaryOp::Abs | UnaryOp::Neg | UnaryOp::Sign => t != DType::Pred,
                UnaryOp::Not => !t.is_float(),
                UnaryOp::Popcnt | UnaryOp::Clz => matches!(t, DType::S32 | DType::U32),
                _ => t == DType::F32,
            };
            if !ok {
                return bad(format!("{op:?} does not apply to {t:?}"));
            }
            if *op == UnaryOp::IsFinite {
                DType::Pred
            } else {
                t
            }
        }
        Expr::Binary(op, a, b) => {
            let (ta, tb) = (expr_type(a, inputs)?, expr_type(b, inputs)?);
            if ta != tb {
                return bad(format!("{op:?} of {ta:?} and {tb:?}"));
            }
            let ok = match op {
                BinaryOp::Atan2 => ta == DType::F32,
                BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => !ta.is_float(),
                BinaryOp::Shl | BinaryOp::ShrArithmetic | BinaryOp::ShrLogical => {
                    matches!(ta, DType::S32 | DType::U32)
                }
                BinaryOp::Max | BinaryOp::Min => true,
                _ => ta != DType::Pred,
            };
            if !ok {
                return bad(format!("{op:?} does not apply to {ta:?}"));
            }
            ta
        }
        Expr::Compare(op, a, b) => {
            let (ta, tb) = (expr_type(a, inputs)?, expr_type(b, inputs)?);
            if ta != tb {
                return bad(format!("{op:?} compares {ta:?} with {tb:?}"));
            }
            DType::Pred
        }
        Expr::Select(p, a, b) => {
            let (tp, ta, tb) = (
                expr_type(p, inputs)?,
                expr_type(a, inputs)?,
                expr_type(b, inputs)?,
            );
            if tp != DType::Pred || ta != tb {
                return bad(format!(
                    "select needs (pred, T, T), found ({tp:?}, {ta:?}, {tb:?})"
                ));
            }
            ta
        }
        Expr::Clamp(lo, x, hi) => {
            let (tl, tx, th) = (
                expr_type(lo, inputs)?,
                expr_type(x, inputs)?,
                expr_type(hi, inputs)?,
            );
            if tl != tx || th != tx {
                return bad(format!(
                    "clamp needs (T, T, T), found ({tl:?}, {tx:?}, {th:?})"
                ));
            }
            tx
        }
        Expr::Convert(t, x) => {
            expr_type(x, inputs)?;
            t.compute()
        }
    })
}

/// Checks that every output expression computes its output's type.
pub fn check_elementwise(kernel: &ElementwiseKernel) -> Result<(), CodegenError> {
    if kernel.outputs.is_empty() {
        return Err(CodegenError::Type(
            "an element-wise kernel needs at least one output".into(),
        ));
    }
    if !kernel.repeats.is_empty() && kernel.repeats.len() != kernel.inputs.len() {
        return Err(CodegenError::Type(format!(
            "{} repeat counts for {} inputs",
            kernel.repeats.len(),
            kernel.inputs.len()
        )));
    }
    for (i, (t, e)) in kernel.outputs.iter().enumerate() {
        let computed = expr_type(e, &kernel.inputs)?;
        if computed != t.compute() {
            return Err(CodegenError::Type(format!(
                "output {i} is {t:?} but its expression computes {computed:?}"
            )));
        }
    }
    Ok(())
}
