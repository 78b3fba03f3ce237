//! Reductions whose reducer is more than one binary op (an argmax's pairs, XLA's
//! optimised pools carrying their winners' coordinates) fold every group in lockstep:
//! when every group holds the same number of positions, the reducer, made of element-wise
//! ops only, runs once per position on vectors holding that position's element of every
//! group, instead of once per element on scalars. Each vector element goes through the
//! same ops in the same order as the scalar fold would, so the results are the same.

use super::array;
use super::groups::Groups;
use super::{Evaluator, OpError};
use crate::ids::{CompId, InstrId};
use crate::literal::{ArrayData, ArrayLiteral};
use crate::{ArrayShape, Computation, Instruction, Literal, Module, Op, Shape};
use std::collections::HashMap;

/// Positions a lockstep fold tabulates at most (the groups times their length).
const MOST_POSITIONS: usize = 1 << 24;

/// `reducer` rewritten to work on vectors of `n` elements, as the entry of a module of its
/// own, when every instruction of it is element-wise on scalars (parameters, constants,
/// unary and binary maths, compares, selects, clamps, converts, and a tuple root).
fn vectorized(module: &Module, reducer: CompId, n: usize) -> Option<Module> {
    let comp = module.computation(reducer);
    let mut out = Computation::new(comp.name.clone());
    let vector = |s: &Shape| -> Option<Shape> {
        let a = s.as_array().filter(|a| a.dims.is_empty())?;
        Some(Shape::Array(ArrayShape::new(a.element_type, &[n as i64])))
    };
    let mut ids: HashMap<InstrId, InstrId> = HashMap::new();
    for &id in comp.order() {
        let instr = comp.instr(id);
        let operands: Vec<InstrId> = instr.operands.iter().map(|o| ids[o]).collect();
        let shape = match &instr.op {
            Op::Tuple => Shape::Tuple(
                (operands.iter())
                    .map(|&o| out.instr(o).shape.clone())
                    .collect(),
            ),
            _ => vector(&instr.shape)?,
        };
        let new = match &instr.op {
            Op::Constant { .. } => {
                let scalar = out.push(Instruction::new(
                    instr.name.clone(),
                    instr.op.clone(),
                    &[],
                    instr.shape.clone(),
                ));
                let broadcast = Op::Broadcast { dimensions: vec![] };
                let name = format!("{}.lockstep", instr.name);
                out.push(Instruction::new(name, broadcast, &[scalar], shape))
            }
            Op::Parameter { .. }
            | Op::Unary(_)
            | Op::Binary(_)
            | Op::Compare { .. }
            | Op::Select
            | Op::Clamp
            | Op::Convert
            | Op::Tuple => out.push(Instruction::new(
                instr.name.clone(),
                instr.op.clone(),
                &operands,
                shape,
            )),
            _ => return None,
        };
        ids.insert(id, new);
    }
    out.root = ids[&comp.root];
    let mut m = Module::new(format!("{}.lockstep", module.name));
    m.entry = m.add_computation(out);
    Some(m)
}

impl Evaluator<'_> {
    /// The fold of [`Evaluator::fold`] run in lockstep (see the module doc), or `None`
    /// when it does not apply: groups of different lengths, too many positions, or a
    /// reducer that is not element-wise.
    pub(super) fn fold_in_lockstep(
        &self,
        inputs: &[&ArrayLiteral],
        inits: &[&ArrayLiteral],
        reducer: CompId,
        n: usize,
        groups: &impl Groups,
    ) -> Result<Option<Vec<ArrayData>>, OpError> {
        if n == 0 {
            return Ok(None);
        }
        let mut len = None;
        let mut positions: Vec<usize> = Vec::new();
        let uniform = groups.each(|first, offsets| {
            if *len.get_or_insert(offsets.len()) != offsets.len()
                || positions.len() + offsets.len() > MOST_POSITIONS
            {
                return Err(());
            }
            positions.extend(offsets.iter().map(|r| first + r));
            Ok(())
        });
        let (Ok(()), Some(len)) = (uniform, len) else {
            return Ok(None);
        };
        let Some(module) = vectorized(self.module, reducer, n) else {
            return Ok(None);
        };
        let evaluator = self.nested(&module);
        let vector = |data: ArrayData| {
            let shape = ArrayShape::new(data.element_type(), &[n as i64]);
            Literal::Array(ArrayLiteral { shape, data })
        };
        let mut acc: Vec<Literal> = (inits.iter())
            .map(|i| vector(array::take(&i.data, &vec![0; n])))
            .collect();
        let mut at = vec![0usize; n];
        for r in 0..len {
            for (g, a) in at.iter_mut().enumerate() {
                *a = positions[g * len + r];
            }
            let mut args = acc;
            args.extend(inputs.iter().map(|x| vector(array::take(&x.data, &at))));
            acc = match evaluator.computation(module.entry, &args)? {
                Literal::Tuple(values) => values,
                value => vec![value],
            };
        }
        acc.into_iter()
            .map(|l| match l {
                Literal::Array(a) => Ok(a.data),
                other => Err(OpError::Message(format!(
                    "a reducer returned {} where an array was expected",
                    other.shape()
                ))),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }
}
