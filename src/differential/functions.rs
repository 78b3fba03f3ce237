//! Functions the kernels approximate, moved to either end of their error bound, so that a
//! comparison can tell an approximation from a wrong result.
//!
//! The JIT's exp, log, tanh, logistic, sin and the others are polynomial approximations
//! within a few ulps of the correctly rounded result (`codegen::math`, whose tests measure
//! each bound); the evaluator calls Rust's `std`. Both are within the bound, and the
//! tolerance absorbs the difference, except where a discontinuous op (floor, compare,
//! convert to an integer) sits behind the function and its value lies on the step:
//! `logistic(-1.5) + logistic(1.5)` is exactly 1 in the evaluator and one ulp below 1 on
//! the IPU Model, and `convert` to s32 gives 1 and 0 (the campaign's seed 767696).
//!
//! [`perturbed`] rewrites a module so that every such function's f32 result `r` becomes
//! `r · (1 ± k 2⁻²³)`, `k` its bound in ulps: at least `k` ulps of `r` away (between `k`
//! and `2k`, as `r`'s significand lies in [1, 2)). An f16 result moves by `r · (1 ± 2⁻¹⁰)`,
//! one or two of its ulps: the kernels compute f16 functions in f32 and round once, so
//! within the f32 bound the result can differ by one f16 ulp where the f32 value lies near
//! a rounding boundary.

use super::sums::{Added, End, redirect};
use xla_ir::{BinaryOp, CompId, ElementType, InstrId, Module, Op, UnaryOp};

/// The error bound in f32 ulps of the kernels' approximation of `op`, if they approximate
/// it (the table in `codegen::math`'s documentation; sqrt, rsqrt, division and the
/// rounding functions are exact).
fn ulps(op: &Op) -> Option<u32> {
    match op {
        Op::Unary(u) => match u {
            UnaryOp::Exp | UnaryOp::Log | UnaryOp::Cbrt => Some(2),
            UnaryOp::Sine | UnaryOp::Cosine => Some(3),
            UnaryOp::Expm1
            | UnaryOp::Log1p
            | UnaryOp::Tanh
            | UnaryOp::Logistic
            | UnaryOp::Tan
            | UnaryOp::Erf => Some(4),
            _ => None,
        },
        Op::Binary(BinaryOp::Atan2) => Some(4),
        Op::Binary(BinaryOp::Power) => Some(8),
        _ => None,
    }
}

/// `module` with every approximated function's float result moved to `end` of its bound
/// (see the module's doc); other instructions unchanged.
pub fn perturbed(module: &Module, end: End) -> Result<Module, String> {
    let mut out = module.clone();
    let ids: Vec<CompId> = module.computations().map(|(id, _)| id).collect();
    for id in ids {
        let comp = module.computation(id);
        let targets: Vec<(InstrId, ElementType, u32)> = (comp.order().iter())
            .filter_map(|&i| {
                let instr = comp.instr(i);
                let ty = instr.shape.as_array()?.element_type;
                let k = ulps(&instr.op)?;
                matches!(ty, ElementType::F32 | ElementType::F16).then_some((i, ty, k))
            })
            .collect();
        for (target, ty, k) in targets {
            let relative = match ty {
                ElementType::F32 => k as f64 * f64::from(f32::EPSILON),
                _ => 1.0 / 1024.0,
            };
            let signed = match end {
                End::Lower => -relative,
                End::Upper => relative,
            };
            move_result(out.computation_mut(id), target, signed as f32)?;
        }
    }
    Ok(out)
}

/// Replaces the value `r` of `target` by `r + r · relative`, computed in f32 and converted
/// back to its type; its readers read the moved value.
fn move_result(
    comp: &mut xla_ir::Computation,
    target: InstrId,
    relative: f32,
) -> Result<(), String> {
    let instr = comp.instr(target).clone();
    let result = (instr.shape.as_array())
        .ok_or_else(|| format!("{}: not an array", instr.name))?
        .clone();
    let wide = result.with_element_type(ElementType::F32);
    let mut added = Added::new(format!("{}.approximated", instr.name));
    let value = match result.element_type {
        ElementType::F32 => target,
        _ => added.push(comp, "wide", Op::Convert, &[target], wide.clone()),
    };
    let mut moved = added.plus_scaled(comp, value, value, relative, &wide);
    if result.element_type != ElementType::F32 {
        moved = added.push(comp, "narrow", Op::Convert, &[moved], result);
    }
    redirect(comp, target, moved, &added.ids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use xla_ir::literal::ArrayLiteral;
    use xla_ir::{ArrayShape, Literal};

    /// Seed 767696 of the campaign, reduced: `logistic(-1.5) + logistic(1.5)` is 1 in the
    /// evaluator, one ulp below on the IPU Model (the JIT's logistic is within 4 ulps), so
    /// `convert` to s32 gives 1 and 0. The lower end of the approximations gives 0, the
    /// upper 1; an f32 output beside it moves by a few ulps only.
    #[test]
    fn a_conversion_behind_an_approximated_function_can_take_either_side_of_its_step() {
        let text = "HloModule m
ENTRY main {
  x = f32[2] parameter(0)
  l = f32[2] logistic(x)
  r = f32[2] reverse(l), dimensions={0}
  s = f32[2] add(l, r)
  c = s32[2] convert(s)
  ROOT t = (s32[2], f32[2]) tuple(c, l)
}";
        let module = xla_ir::parse_module(text).unwrap();
        let x = ArrayLiteral {
            shape: ArrayShape::new(ElementType::F32, &[2]),
            data: xla_ir::literal::ArrayData::F32(vec![-1.5, 1.5]),
        };
        let inputs = [Literal::Array(x)];
        let run =
            |m: &Module| crate::device_loop::leaves(xla_ir::eval::evaluate(m, &inputs).unwrap());
        let s32 = |a: &ArrayLiteral| match &a.data {
            xla_ir::literal::ArrayData::S32(v) => v.clone(),
            other => panic!("s32, not {other:?}"),
        };
        let f32s = |a: &ArrayLiteral| match &a.data {
            xla_ir::literal::ArrayData::F32(v) => v.clone(),
            other => panic!("f32, not {other:?}"),
        };
        let want = run(&module);
        assert_eq!(s32(&want[0]), [1, 1]);
        let low = run(&perturbed(&module, End::Lower).unwrap());
        let high = run(&perturbed(&module, End::Upper).unwrap());
        assert_eq!(s32(&low[0]), [0, 0]);
        assert_eq!(s32(&high[0]), [1, 1]);
        for (moved, sign) in [(&low[1], -1i64), (&high[1], 1)] {
            for (m, w) in f32s(moved).iter().zip(f32s(&want[1])) {
                let ulps = (m.to_bits() as i64 - w.to_bits() as i64) * sign;
                assert!((4..=8).contains(&ulps), "{m} from {w}: {ulps} ulps");
            }
        }
    }
}
