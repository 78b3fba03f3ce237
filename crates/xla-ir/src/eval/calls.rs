//! Ops that call computations: call, fusion, while, conditional, map; and applying small
//! scalar computations (reducers, comparators, combiners) element by element.

use super::array::{count, for_each_index, scalar_at};
use super::{Evaluator, OpError, OpResult, array, elementwise, literal};
use crate::attributes::{CompareType, ComparisonDirection};
use crate::ids::CompId;
use crate::literal::{ArrayData, ArrayLiteral};
use crate::op::BinaryOp;
use crate::{Literal, Op, Shape};

/// A scalar computation recognised as one op of its two parameters, which is applied
/// directly instead of walking the computation.
#[derive(Debug, Clone, Copy)]
pub(super) enum SimpleScalarFn {
    /// `op(p0, p1)`, or `op(p1, p0)` when `swapped`.
    Binary { op: BinaryOp, swapped: bool },
    /// `compare(p0, p1)` (or swapped).
    Compare {
        direction: ComparisonDirection,
        total: bool,
        swapped: bool,
    },
    /// Returns its second parameter (scatter's "assign").
    Second,
}

impl Evaluator<'_> {
    /// Recognises computations of the form `ROOT r = op(param0, param1)` on scalars.
    pub(super) fn simple_scalar_fn(&self, id: CompId) -> Option<SimpleScalarFn> {
        simple_scalar_fn(self.module, id)
    }

    /// Applies a scalar computation to scalar arguments; returns its scalar results.
    pub(super) fn apply_scalar(
        &self,
        id: CompId,
        simple: Option<SimpleScalarFn>,
        args: Vec<ArrayLiteral>,
    ) -> Result<Vec<ArrayLiteral>, OpError> {
        if let Some(f) = simple {
            let (a, b) = (&args[0], &args[1]);
            let value = match f {
                SimpleScalarFn::Second => return Ok(vec![b.clone()]),
                SimpleScalarFn::Binary { op, swapped } => {
                    let (x, y) = if swapped { (b, a) } else { (a, b) };
                    elementwise::binary(op, x, y)?
                }
                SimpleScalarFn::Compare {
                    direction,
                    total,
                    swapped,
                } => {
                    let (x, y) = if swapped { (b, a) } else { (a, b) };
                    let t = if total {
                        Some(CompareType::TotalOrder)
                    } else {
                        None
                    };
                    elementwise::compare(direction, t, x, y)?
                }
            };
            return Ok(vec![into_array(value)?]);
        }
        let args: Vec<Literal> = args.into_iter().map(Literal::Array).collect();
        match self.computation(id, &args)? {
            Literal::Array(a) => Ok(vec![a]),
            Literal::Tuple(elems) => elems.into_iter().map(into_array).collect(),
            Literal::Token => Err(OpError::Message(
                "a scalar computation returned a token".into(),
            )),
        }
    }

    pub(super) fn call(&self, id: CompId, operands: &[&Literal]) -> OpResult {
        let args: Vec<Literal> = operands.iter().map(|l| (*l).clone()).collect();
        Ok(self.computation(id, &args)?)
    }

    pub(super) fn while_loop(&self, init: &Literal, condition: CompId, body: CompId) -> OpResult {
        let mut state = init.clone();
        loop {
            let keep_going = self.computation(condition, std::slice::from_ref(&state))?;
            match keep_going {
                Literal::Array(ArrayLiteral {
                    data: ArrayData::Pred(p),
                    ..
                }) if p.len() == 1 => {
                    if !p[0] {
                        return Ok(state);
                    }
                }
                other => {
                    return Err(OpError::Message(format!(
                        "while condition returned {}",
                        other.shape()
                    )));
                }
            }
            state = self.computation(body, std::slice::from_ref(&state))?;
        }
    }

    pub(super) fn conditional(&self, operands: &[&Literal], branches: &[CompId]) -> OpResult {
        let selector = array(operands[0])?;
        let branch = match &selector.data {
            ArrayData::Pred(p) => {
                if p[0] {
                    0
                } else {
                    1
                }
            }
            data => {
                // An out-of-range index runs the last branch.
                let i = super::array::index_value(data, 0);
                if i < 0 || i as usize >= branches.len() {
                    branches.len() - 1
                } else {
                    i as usize
                }
            }
        };
        let arg = operands[branch + 1].clone();
        Ok(self.computation(branches[branch], &[arg])?)
    }

    pub(super) fn map(&self, xs: &[&ArrayLiteral], shape: &Shape, to_apply: CompId) -> OpResult {
        let out = shape
            .as_array()
            .ok_or_else(|| OpError::Message("map must produce an array".into()))?;
        let simple = self.simple_scalar_fn(to_apply).filter(|_| xs.len() == 2);
        let n = count(&out.dims);
        let mut results = Vec::with_capacity(n);
        let mut k = 0;
        let mut failure = None;
        for_each_index(&out.dims, |_| {
            if failure.is_some() {
                return;
            }
            let args = xs.iter().map(|x| scalar_at(&x.data, k)).collect();
            match self.apply_scalar(to_apply, simple, args) {
                Ok(mut r) => results.push(r.remove(0).data),
                Err(e) => failure = Some(e),
            }
            k += 1;
        });
        if let Some(e) = failure {
            return Err(e);
        }
        let data = if results.is_empty() {
            ArrayData::zeros(out.element_type, 0)
        } else {
            super::array::concat(&results.iter().collect::<Vec<_>>())
        };
        Ok(literal(out.element_type, &out.dims, data))
    }
}

fn into_array(l: Literal) -> Result<ArrayLiteral, OpError> {
    match l {
        Literal::Array(a) => Ok(a),
        other => Err(OpError::Message(format!(
            "expected a scalar, found {}",
            other.shape()
        ))),
    }
}

/// Recognises computations of the form `ROOT r = op(param0, param1)` on scalars.
pub(super) fn simple_scalar_fn(module: &crate::Module, id: CompId) -> Option<SimpleScalarFn> {
    let comp = module.computation(id);
    let params = comp.parameters();
    if params.len() != 2 || comp.len() > 3 {
        return None;
    }
    let root = comp.root_instr();
    if root.shape.as_array().is_none_or(|a| !a.dims.is_empty()) {
        return None;
    }
    if comp.root == params[1] {
        return Some(SimpleScalarFn::Second);
    }
    let swapped = match root.operands.as_slice() {
        [a, b] if *a == params[0] && *b == params[1] => false,
        [a, b] if *a == params[1] && *b == params[0] => true,
        _ => return None,
    };
    match &root.op {
        Op::Binary(op) => Some(SimpleScalarFn::Binary { op: *op, swapped }),
        Op::Compare {
            direction,
            compare_type,
        } => Some(SimpleScalarFn::Compare {
            direction: *direction,
            total: *compare_type == Some(CompareType::TotalOrder),
            swapped,
        }),
        _ => None,
    }
}
