//! Reverse-mode automatic differentiation over HLO: the gradient of a value with respect to
//! others, emitted as more instructions of the same computation (so the result is plain HLO
//! that `ipuxla dump` prints and `ipuxla run` runs).
//!
//! The rules are JAX's (`jax/_src/lax`): a dot's operands get dot products with the
//! cotangent, a convolution's get the transposed convolutions, max pooling gets
//! `select-and-scatter` (first maximum of each window, as `>=` picks it), `maximum` splits
//! ties evenly, a max-reduce divides the cotangent among the tied maxima.
//!
//! ```
//! use ipuxla_frontend::autodiff::grad;
//! use xla_ir::builder::ModuleBuilder;
//! use xla_ir::{ElementType, Shape};
//!
//! // d/dx sum(x * x) = 2x
//! let mut g = ModuleBuilder::entry("square", "main");
//! let x = g.parameter(0, Shape::array(ElementType::F32, &[3]), "x")?;
//! let sq = g.multiply(x, x)?;
//! let loss = ipuxla_frontend::ops::sum_all(&mut g, sq)?;
//! let dx = grad(&mut g, loss, &[x])?;
//! let module = g.finish_module(dx[0])?;
//! let input = xla_ir::Literal::Array(xla_ir::literal::ArrayLiteral::vector_f32(&[1.0, 2.0, 3.0]));
//! let out = xla_ir::eval::evaluate(&module, &[input])?;
//! assert_eq!(out.to_string(), "{2, 4, 6}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod calls;
mod contraction;
mod elementwise;
mod indexing;
mod loops;
mod shape_ops;
mod tuples;
mod window;

use crate::ops::{self, Builder, STOP_GRADIENT};
use tuples::Adj;
use xla_ir::builder::BuildError;
use xla_ir::{InstrId, Op};

/// Why a gradient could not be built.
#[derive(Debug, thiserror::Error)]
pub enum AutodiffError {
    /// Building a gradient instruction failed (a bug in a rule, or a bad seed shape).
    #[error(transparent)]
    Build(#[from] BuildError),
    /// The value is on the path to the loss but its op has no gradient rule.
    #[error("cannot differentiate {opcode} '{name}': {reason}")]
    Unsupported {
        /// The instruction's opcode.
        opcode: String,
        /// The instruction's name.
        name: String,
        /// Why not.
        reason: String,
    },
    /// `grad` of something that is not a floating-point scalar.
    #[error("grad needs a floating-point scalar to differentiate, but '{name}' is {shape}")]
    NotScalar {
        /// The value's name.
        name: String,
        /// Its shape.
        shape: String,
    },
    /// A value given to differentiate with respect to is not a float array.
    #[error("cannot differentiate with respect to '{name}': it is {shape}, not a float array")]
    NotFloat {
        /// The value's name.
        name: String,
        /// Its shape.
        shape: String,
    },
}

/// The gradient of the scalar `loss` with respect to each of `wrt` (zeros where `loss`
/// does not depend on one).
pub fn grad(
    b: &mut Builder<'_>,
    loss: InstrId,
    wrt: &[InstrId],
) -> Result<Vec<InstrId>, AutodiffError> {
    let shape = b.shape(loss);
    let is_scalar = shape
        .as_array()
        .is_some_and(|a| a.dims.is_empty() && a.element_type.is_float());
    if !is_scalar {
        return Err(AutodiffError::NotScalar {
            name: b.instruction(loss).name.clone(),
            shape: shape.to_string(),
        });
    }
    let one = ops::full_like(b, loss, 1.0)?;
    vjp(b, loss, one, wrt)
}

/// The vector-Jacobian product: the cotangent of each of `wrt` given the cotangent `dy` of
/// `y` (same shape as `y`).
pub fn vjp(
    b: &mut Builder<'_>,
    y: InstrId,
    dy: InstrId,
    wrt: &[InstrId],
) -> Result<Vec<InstrId>, AutodiffError> {
    vjp_many(b, &[(y, dy)], wrt)
}

/// [`vjp`] of several values at once: the cotangent of each of `wrt` given the cotangents
/// of `outputs` (value, cotangent) together.
pub fn vjp_many(
    b: &mut Builder<'_>,
    outputs: &[(InstrId, InstrId)],
    wrt: &[InstrId],
) -> Result<Vec<InstrId>, AutodiffError> {
    for &w in wrt {
        let s = b.shape(w);
        if !s.as_array().is_some_and(|a| a.element_type.is_float()) {
            return Err(AutodiffError::NotFloat {
                name: b.instruction(w).name.clone(),
                shape: s.to_string(),
            });
        }
    }
    let n = b.computation_so_far().len();
    // Ids are in program order: the builder only appends, so operands come first.
    let mut depends = vec![false; n];
    for &w in wrt {
        depends[w.index()] = true;
    }
    for k in 0..n {
        let instr = b.instruction(InstrId(k as u32));
        if !depends[k]
            && tuples::carries_float(&instr.shape)
            && instr.operands.iter().any(|o| depends[o.index()])
        {
            depends[k] = true;
        }
    }
    let mut adjoint: Vec<Option<Adj>> = vec![None; n];
    for &(y, dy) in outputs {
        tuples::accumulate(b, &mut adjoint[y.index()], Adj::Array(dy))?;
    }
    let last = outputs.iter().map(|(y, _)| y.index()).max().unwrap_or(0);
    // The cotangents asked for, kept as they are reached (they may pass on further when a
    // value asked for is computed from another one asked for).
    let mut found: std::collections::HashMap<InstrId, Adj> = std::collections::HashMap::new();
    for k in (0..=last).rev() {
        let id = InstrId(k as u32);
        let Some(adj) = adjoint[k].take() else {
            continue;
        };
        if wrt.contains(&id) {
            found.insert(id, adj.clone());
        }
        if !depends[k] {
            continue;
        }
        let instr = b.instruction(id).clone();
        if instr.frontend_attributes.contains_key(STOP_GRADIENT) {
            continue;
        }
        let wants: Vec<bool> = instr.operands.iter().map(|o| depends[o.index()]).collect();
        if !wants.iter().any(|&w| w) {
            continue;
        }
        let contributions: Vec<(usize, Adj)> = match (&instr.op, adj) {
            (Op::GetTupleElement { index }, a) => {
                let arity = b.shape(instr.operands[0]).as_tuple().map_or(0, |t| t.len());
                let mut elems: Vec<Option<Adj>> = vec![None; arity];
                elems[*index as usize] = Some(a);
                vec![(0, Adj::Tuple(elems))]
            }
            (Op::Tuple, Adj::Tuple(elems)) => elems
                .into_iter()
                .enumerate()
                .filter_map(|(i, e)| e.map(|e| (i, e)))
                .collect(),
            (Op::While { condition, body }, a) => {
                let g = tuples::materialise(b, Some(&a), &instr.shape)?;
                let d = loops::while_loop(b, &instr, (*condition, *body), g)?;
                vec![(0, tuples::split(b, d)?)]
            }
            (_, Adj::Array(g)) => rule(b, id, g, &wants)?
                .into_iter()
                .map(|(i, c)| (i, Adj::Array(c)))
                .collect(),
            (_, Adj::Tuple(_)) => {
                return Err(unsupported(
                    &instr,
                    "no gradient rule for this tuple-valued op",
                ));
            }
        };
        for (i, c) in contributions {
            let o = instr.operands[i];
            if depends[o.index()] {
                tuples::accumulate(b, &mut adjoint[o.index()], c)?;
            }
        }
    }
    wrt.iter()
        .map(|&w| match found.get(&w) {
            Some(Adj::Array(g)) => Ok(*g),
            _ => Ok(ops::zeros_like(b, w)?),
        })
        .collect()
}

/// What one instruction passes back: (operand position, its cotangent contribution).
type Contributions = Vec<(usize, InstrId)>;

/// The cotangents of the operands of `id` (those `wants` marks) given its cotangent `g`.
fn rule(
    b: &mut Builder<'_>,
    id: InstrId,
    g: InstrId,
    wants: &[bool],
) -> Result<Contributions, AutodiffError> {
    let instr = b.instruction(id).clone();
    let x = &instr.operands;
    match &instr.op {
        Op::Unary(u) => elementwise::unary(b, *u, (id, &instr), g),
        Op::Binary(op) => elementwise::binary(b, *op, (id, &instr), g, wants),
        Op::Select => elementwise::select(b, x, g, wants),
        Op::Clamp => elementwise::clamp(b, x, g, wants),
        Op::Convert => {
            let t = ops::element_type(b, x[0]);
            Ok(vec![(0, b.convert(g, t)?)])
        }
        Op::Broadcast { dimensions } => shape_ops::broadcast(b, x[0], dimensions, g),
        Op::Reshape | Op::Bitcast => {
            let d = ops::dims(b, x[0]);
            Ok(vec![(0, b.reshape(g, &d)?)])
        }
        Op::Transpose { dimensions } => shape_ops::transpose(b, dimensions, g),
        Op::Slice { slices } => shape_ops::slice(b, x[0], slices, g),
        Op::Concatenate { dimension } => shape_ops::concatenate(b, x, *dimension, g),
        Op::Pad { padding } => shape_ops::pad(b, padding, g, wants),
        Op::Reverse { dimensions } => Ok(vec![(0, b.reverse(g, dimensions)?)]),
        Op::Reduce {
            dimensions,
            to_apply,
        } => shape_ops::reduce(b, (id, &instr), dimensions, *to_apply, g),
        Op::Dot { dims, .. } => contraction::dot(b, x, dims, g, wants),
        Op::Convolution {
            window,
            dims,
            feature_group_count,
            batch_group_count,
            ..
        } => contraction::convolution(
            b,
            &instr,
            window,
            dims,
            (*feature_group_count, *batch_group_count),
            g,
            wants,
        ),
        Op::ReduceWindow { window, to_apply } => {
            window::reduce_window(b, (id, &instr), window, *to_apply, g)
        }
        Op::Gather {
            dims, slice_sizes, ..
        } => indexing::gather(b, x, dims, slice_sizes, g),
        Op::DynamicSlice { .. } => indexing::dynamic_slice(b, x, g),
        Op::DynamicUpdateSlice => indexing::dynamic_update_slice(b, x, g, wants),
        Op::Call { to_apply } => calls::call(b, &instr, *to_apply, g, wants),
        Op::Conditional { branches } => calls::conditional(b, &instr, branches, g, wants),
        // A recomputation checkpoint is the identity.
        Op::CustomCall { target, .. } if target == xla_ir::call_config::CHECKPOINT_TARGET => {
            Ok(vec![(0, g)])
        }
        _ => Err(unsupported(&instr, "no gradient rule for this op")),
    }
}

/// The error for an instruction no rule covers.
fn unsupported(instr: &xla_ir::Instruction, reason: &str) -> AutodiffError {
    AutodiffError::Unsupported {
        opcode: instr.op.name().to_string(),
        name: instr.name.clone(),
        reason: reason.to_string(),
    }
}
