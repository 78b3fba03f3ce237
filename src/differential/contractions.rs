//! Products added to a value, rounded once as the kernels round them, so that a comparison
//! can tell a fused multiply-add from a wrong result.
//!
//! The JIT contracts `a · b ± c` in a fused expression into one fused multiply-add, as XLA's
//! CPU backend does (`codegen::Expr::multiply_add`); the evaluator rounds the product, then
//! the sum. Both are right (XLA lets the compiler contract), and they differ by the
//! product's rounding, at most half an ulp of it, which the tolerance absorbs except where
//! the sum cancels: `x · x + x` at x = -0.9998 is -0.00019218803 fused and -0.00019216537
//! rounded twice, 1.2e-4 apart relatively, and two more cancelling sums and an `atan2` of
//! small values carry that to 0.16 % at an output (the campaign's replicated seed 919663).
//! Moving the product to either end of its rounding error does not reproduce that: the
//! ends move every value at once, and a cancellation turns their direction around.
//!
//! [`contracted`] rewrites a module so that every f32 `add` or `subtract` with an f32
//! `multiply` among its operands (the left one if both are) computes `a · b ± c` in f64
//! and rounds once to f32: the f64 product of two f32 values is exact, so the result is the
//! fused multiply-add's (within one ulp where rounding f64 to f32 rounds twice).

use super::sums::{Added, redirect};
use xla_ir::{BinaryOp, CompId, ElementType, InstrId, Module, Op};

/// `module` with every f32 sum of a product and a value computed as one fused multiply-add
/// (see the module's doc); other instructions unchanged.
pub fn contracted(module: &Module) -> Result<Module, String> {
    let mut out = module.clone();
    let ids: Vec<CompId> = module.computations().map(|(id, _)| id).collect();
    for id in ids {
        let comp = module.computation(id);
        let targets: Vec<(InstrId, usize)> = (comp.order().iter())
            .filter_map(|&i| product_operand(comp, i).map(|k| (i, k)))
            .collect();
        for (target, k) in targets {
            fuse(out.computation_mut(id), target, k)?;
        }
    }
    Ok(out)
}

/// Whether `id` is an f32 `add` or `subtract` with an f32 `multiply` operand, and which
/// operand (the left one first, as the JIT picks).
fn product_operand(comp: &xla_ir::Computation, id: InstrId) -> Option<usize> {
    let f32_array = |i: InstrId| {
        comp.instr(i).shape.as_array().map(|s| s.element_type) == Some(ElementType::F32)
    };
    let instr = comp.instr(id);
    if !matches!(instr.op, Op::Binary(BinaryOp::Add | BinaryOp::Subtract)) || !f32_array(id) {
        return None;
    }
    (instr.operands.iter())
        .position(|&o| matches!(comp.instr(o).op, Op::Binary(BinaryOp::Multiply)) && f32_array(o))
}

/// Replaces `target` (`x ± y`, operand `k` a product `a · b`) by the same sum computed in
/// f64 from `a`, `b` and the other operand, rounded to f32; its readers read that.
fn fuse(comp: &mut xla_ir::Computation, target: InstrId, k: usize) -> Result<(), String> {
    let instr = comp.instr(target).clone();
    let result = (instr.shape.as_array())
        .ok_or_else(|| format!("{}: not an array", instr.name))?
        .clone();
    let wide = result.with_element_type(ElementType::F64);
    let product = comp.instr(instr.operands[k]).operands.clone();
    let mut added = Added::new(format!("{}.fused", instr.name));
    let widen = |comp: &mut xla_ir::Computation, added: &mut Added, i: InstrId| {
        added.push(comp, "wide", Op::Convert, &[i], wide.clone())
    };
    let a = widen(comp, &mut added, product[0]);
    let b = widen(comp, &mut added, product[1]);
    let exact = added.push(
        comp,
        "product",
        Op::Binary(BinaryOp::Multiply),
        &[a, b],
        wide.clone(),
    );
    let other = widen(comp, &mut added, instr.operands[1 - k]);
    let mut operands = [other, other];
    operands[k] = exact;
    let sum = added.push(comp, "sum", instr.op.clone(), &operands, wide);
    let rounded = added.push(comp, "rounded", Op::Convert, &[sum], result);
    redirect(comp, target, rounded, &added.ids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use xla_ir::Literal;
    use xla_ir::literal::{ArrayData, ArrayLiteral};

    /// Seed 919663's cancellation: `x · x + x` and `x - x · x` at x = -0.999807775 round
    /// once, as a fused multiply-add does; a product nothing adds is left alone.
    #[test]
    fn a_product_added_to_a_value_rounds_once() {
        let text = "HloModule m
ENTRY main {
  x = f32[] parameter(0)
  p = f32[] multiply(x, x)
  s = f32[] add(p, x)
  d = f32[] subtract(x, p)
  ROOT t = (f32[], f32[], f32[]) tuple(s, d, p)
}";
        let module = xla_ir::parse_module(text).unwrap();
        let x = -0.999_807_8_f32;
        let inputs = [Literal::Array(ArrayLiteral::scalar_f32(x))];
        let run = |m: &Module| {
            crate::device_loop::leaves(xla_ir::eval::evaluate(m, &inputs).unwrap())
                .into_iter()
                .map(|a| match a.data {
                    ArrayData::F32(v) => v[0],
                    other => panic!("f32, not {other:?}"),
                })
                .collect::<Vec<f32>>()
        };
        let twice = run(&module);
        let once = run(&contracted(&module).unwrap());
        assert_eq!(twice, [x * x + x, x - x * x, x * x]);
        assert_eq!(once, [x.mul_add(x, x), (-x).mul_add(x, x), x * x]);
        assert_ne!(once[0], twice[0], "this x shows the difference");
    }
}
