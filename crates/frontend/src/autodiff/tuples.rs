//! Cotangents of tuple values: a tuple's cotangent is one per element, some absent (no
//! gradient reached them), so `get-tuple-element`, `tuple` and `while` can pass gradients
//! through the tuples JAX's loops carry.

use crate::ops::{self, Builder};
use xla_ir::builder::BuildError;
use xla_ir::{InstrId, Shape};

/// A value's cotangent: an array's, or a tuple's element by element.
#[derive(Debug, Clone)]
pub(super) enum Adj {
    /// An array value's cotangent.
    Array(InstrId),
    /// A tuple's: one per element, `None` where no gradient reached it.
    Tuple(Vec<Option<Adj>>),
}

/// Whether `shape` holds a floating-point array anywhere (only those carry gradients).
pub(super) fn carries_float(shape: &Shape) -> bool {
    match shape {
        Shape::Array(a) => a.element_type.is_float(),
        Shape::Tuple(items) => items.iter().any(carries_float),
        _ => false,
    }
}

/// Adds `c` into `slot`.
pub(super) fn accumulate(
    b: &mut Builder<'_>,
    slot: &mut Option<Adj>,
    c: Adj,
) -> Result<(), BuildError> {
    *slot = Some(match (slot.take(), c) {
        (None, c) => c,
        (Some(Adj::Array(a)), Adj::Array(c)) => Adj::Array(b.add(a, c)?),
        (Some(Adj::Tuple(mut a)), Adj::Tuple(c)) => {
            for (x, y) in a.iter_mut().zip(c) {
                if let Some(y) = y {
                    accumulate(b, x, y)?;
                }
            }
            Adj::Tuple(a)
        }
        (Some(_), _) => {
            return Err(BuildError::Shape {
                computation: String::new(),
                opcode: "gradient".into(),
                message: "an array's and a tuple's cotangents meet".into(),
            });
        }
    });
    Ok(())
}

/// The cotangent as one value of `shape`: zeros where none reached.
pub(super) fn materialise(
    b: &mut Builder<'_>,
    adj: Option<&Adj>,
    shape: &Shape,
) -> Result<InstrId, BuildError> {
    match (adj, shape) {
        (Some(Adj::Array(a)), _) => Ok(*a),
        (Some(Adj::Tuple(items)), Shape::Tuple(shapes)) => {
            let mut parts = Vec::with_capacity(shapes.len());
            for (k, s) in shapes.iter().enumerate() {
                parts.push(materialise(b, items.get(k).and_then(Option::as_ref), s)?);
            }
            b.tuple(&parts)
        }
        (None, Shape::Tuple(shapes)) => {
            let mut parts = Vec::with_capacity(shapes.len());
            for s in shapes {
                parts.push(materialise(b, None, s)?);
            }
            b.tuple(&parts)
        }
        (_, Shape::Array(a)) => ops::full(b, a.element_type, &a.dims, 0.0),
        (_, other) => Err(BuildError::Shape {
            computation: String::new(),
            opcode: "gradient".into(),
            message: format!("no cotangent for a value of {other}"),
        }),
    }
}

/// A tuple value's elements as a cotangent (`get-tuple-element` of each, recursively).
pub(super) fn split(b: &mut Builder<'_>, t: InstrId) -> Result<Adj, BuildError> {
    let shape = b.shape(t).clone();
    match shape {
        Shape::Tuple(items) => {
            let mut out = Vec::with_capacity(items.len());
            for k in 0..items.len() {
                let e = b.get_tuple_element(t, k as i64)?;
                out.push(Some(split(b, e)?));
            }
            Ok(Adj::Tuple(out))
        }
        _ => Ok(Adj::Array(t)),
    }
}
