//! The gradient of a `while` loop (JAX's `fori_loop` and `scan` lower to one): the loop
//! runs again counting its trips N, then a backward loop takes the cotangent from trip N
//! down to trip 1, each trip's state computed again from the initial state (N² body runs
//! in all: no state is stashed) and the body's vector-Jacobian product applied to it. The
//! state must be a flat tuple of arrays; only float elements carry gradients.

use super::calls::inline;
use super::{AutodiffError, unsupported, vjp_many};
use crate::ops::{self, Builder};
use xla_ir::attributes::ComparisonDirection;
use xla_ir::builder::BuildError;
use xla_ir::{CompId, ElementType, InstrId, Instruction, Shape};

/// The cotangent of the initial state of `instr` (`while(init)`) given `g`, the
/// cotangent of its final state.
pub(super) fn while_loop(
    b: &mut Builder<'_>,
    instr: &Instruction,
    (cond, body): (CompId, CompId),
    g: InstrId,
) -> Result<InstrId, AutodiffError> {
    let init = instr.operands[0];
    let state = b.shape(init).clone();
    let Some(leaves) = state.as_tuple().map(<[Shape]>::to_vec) else {
        return Err(unsupported(
            instr,
            "a while loop whose state is not a tuple",
        ));
    };
    if leaves.iter().any(|l| l.as_array().is_none()) {
        return Err(unsupported(instr, "a while loop whose state nests tuples"));
    }
    let name = b.module().computation(body).name.clone();
    let s32 = Shape::scalar(ElementType::S32);
    let to_build = |e: AutodiffError| match e {
        AutodiffError::Build(b) => b,
        other => BuildError::Shape {
            computation: name.clone(),
            opcode: "while".into(),
            message: other.to_string(),
        },
    };

    // The trip count: the loop again with a counter.
    let counted = Shape::Tuple(vec![state.clone(), s32.clone()]);
    let count_cond = b.sub_computation(format!("{name}_count_cond"), |c| {
        let p = c.parameter(0, counted.clone(), &format!("{name}_count_cond.p"))?;
        let s = c.get_tuple_element(p, 0)?;
        inline(c, cond, &[s])
    })?;
    let count_body = b.sub_computation(format!("{name}_count_body"), |c| {
        let p = c.parameter(0, counted.clone(), &format!("{name}_count_body.p"))?;
        let s = c.get_tuple_element(p, 0)?;
        let k = c.get_tuple_element(p, 1)?;
        let next = inline(c, body, &[s])?;
        let one = ops::scalar(c, ElementType::S32, 1.0)?;
        let k1 = c.add(k, one)?;
        c.tuple(&[next, k1])
    })?;
    let zero = ops::scalar(b, ElementType::S32, 0.0)?;
    let start = b.tuple(&[init, zero])?;
    let counting = b.while_loop(start, count_cond, count_body)?;
    let trips = b.get_tuple_element(counting, 1)?;

    // The state after j trips: (k, j, state) run while k < j.
    let replay = Shape::Tuple(vec![s32.clone(), s32.clone(), state.clone()]);
    let replay_cond = b.sub_computation(format!("{name}_replay_cond"), |c| {
        let p = c.parameter(0, replay.clone(), &format!("{name}_replay_cond.p"))?;
        let k = c.get_tuple_element(p, 0)?;
        let j = c.get_tuple_element(p, 1)?;
        c.compare(k, j, ComparisonDirection::Lt, None)
    })?;
    let replay_body = b.sub_computation(format!("{name}_replay_body"), |c| {
        let p = c.parameter(0, replay.clone(), &format!("{name}_replay_body.p"))?;
        let k = c.get_tuple_element(p, 0)?;
        let j = c.get_tuple_element(p, 1)?;
        let s = c.get_tuple_element(p, 2)?;
        let one = ops::scalar(c, ElementType::S32, 1.0)?;
        let k1 = c.add(k, one)?;
        let next = inline(c, body, &[s])?;
        c.tuple(&[k1, j, next])
    })?;

    // One trip backwards: the body's vector-Jacobian product at a state.
    let body_vjp = b.sub_computation(format!("{name}_vjp"), |c| {
        let s = c.parameter(0, state.clone(), &format!("{name}_vjp.state"))?;
        let gp = c.parameter(1, state.clone(), &format!("{name}_vjp.cotangent"))?;
        let xs = (0..leaves.len())
            .map(|k| c.get_tuple_element(s, k as i64))
            .collect::<Result<Vec<_>, _>>()?;
        let t = c.tuple(&xs)?;
        let y = inline(c, body, &[t])?;
        let float: Vec<usize> = (0..leaves.len())
            .filter(|&k| {
                leaves[k]
                    .as_array()
                    .is_some_and(|a| a.element_type.is_float())
            })
            .collect();
        let mut pairs = Vec::with_capacity(float.len());
        for &k in &float {
            let yk = c.get_tuple_element(y, k as i64)?;
            let gk = c.get_tuple_element(gp, k as i64)?;
            pairs.push((yk, gk));
        }
        let wrt: Vec<InstrId> = float.iter().map(|&k| xs[k]).collect();
        let grads = vjp_many(c, &pairs, &wrt).map_err(to_build)?;
        let mut parts = Vec::with_capacity(leaves.len());
        for (k, leaf) in leaves.iter().enumerate() {
            parts.push(match float.iter().position(|&f| f == k) {
                Some(i) => grads[i],
                None => {
                    let a = leaf.as_array().expect("array leaves: checked");
                    ops::full(c, a.element_type, &a.dims, 0.0)?
                }
            });
        }
        c.tuple(&parts)
    })?;

    // Backwards from trip N to trip 1: (j, cotangent, initial state) while j > 0.
    let back = Shape::Tuple(vec![s32.clone(), state.clone(), state.clone()]);
    let back_cond = b.sub_computation(format!("{name}_back_cond"), |c| {
        let p = c.parameter(0, back.clone(), &format!("{name}_back_cond.p"))?;
        let j = c.get_tuple_element(p, 0)?;
        let zero = ops::scalar(c, ElementType::S32, 0.0)?;
        c.compare(j, zero, ComparisonDirection::Gt, None)
    })?;
    let back_body = b.sub_computation(format!("{name}_back_body"), |c| {
        let p = c.parameter(0, back.clone(), &format!("{name}_back_body.p"))?;
        let j = c.get_tuple_element(p, 0)?;
        let gj = c.get_tuple_element(p, 1)?;
        let s0 = c.get_tuple_element(p, 2)?;
        let one = ops::scalar(c, ElementType::S32, 1.0)?;
        let j1 = c.subtract(j, one)?;
        let zero = ops::scalar(c, ElementType::S32, 0.0)?;
        let start = c.tuple(&[zero, j1, s0])?;
        let replayed = c.while_loop(start, replay_cond, replay_body)?;
        let sj = c.get_tuple_element(replayed, 2)?;
        let g1 = c.call(&[sj, gj], body_vjp)?;
        c.tuple(&[j1, g1, s0])
    })?;
    let start = b.tuple(&[trips, g, init])?;
    let done = b.while_loop(start, back_cond, back_body)?;
    Ok(b.get_tuple_element(done, 1)?)
}
