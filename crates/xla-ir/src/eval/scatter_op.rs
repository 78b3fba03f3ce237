//! Scatters whose combiner is one binary op (or "assign"), planned once for codelets that
//! run on a tile's bytes: the evaluator's own targets ([`ScatterOp::targets`]) and
//! combination ([`ScatterOp::apply_f32`] and its neighbours) on typed slices, so such a
//! codelet reads its operand in place where the evaluator converted it to a literal.

use super::calls::{SimpleScalarFn, simple_scalar_fn};
use super::element::Element;
use super::reduce::{scatter_in_place, scatter_targets};
use crate::attributes::ScatterDims;
use crate::literal::{ArrayData, Literal};
use crate::{BinaryOp, ElementType, Module, Op};
use half::f16;

/// A single-operand scatter without batching dimensions whose combiner is one binary op
/// of its parameters, or returns the update.
#[derive(Debug, Clone)]
pub struct ScatterOp {
    dims: Vec<i64>,
    index_dims: Vec<i64>,
    update_dims: Vec<i64>,
    dn: ScatterDims,
    window_size: Vec<i64>,
    combine: SimpleScalarFn,
    element_type: ElementType,
    index_type: ElementType,
    /// Subtracted from each s32 or u32 index (as s32 bits), by index vector component,
    /// wrapping in the index type, with the stride of the index vector dimension in the
    /// index array.
    shifts: Option<(Vec<i32>, usize)>,
}

/// The constant `instr` subtracts from parameter `p1` when it is
/// `subtract(p1, broadcast(constant), dimensions={index_vector_dim})` of s32 or u32 values
/// (no dimensions, and one value, when the index vector dimension is the implicit one past
/// the last), as s32 bits, with the stride of the index vector dimension.
fn shifts(
    entry: &crate::Computation,
    instr: crate::InstrId,
    p1: crate::InstrId,
    index_vector_dim: i64,
) -> Option<(Vec<i32>, usize)> {
    let index_array = |id| {
        entry
            .instr(id)
            .shape
            .as_array()
            .filter(|a| matches!(a.element_type, ElementType::S32 | ElementType::U32))
    };
    let shifted = entry.instr(instr);
    let (Op::Binary(BinaryOp::Subtract), [x, b]) = (&shifted.op, shifted.operands.as_slice())
    else {
        return None;
    };
    let broadcast = entry.instr(*b);
    let (Op::Broadcast { dimensions }, [c]) = (&broadcast.op, broadcast.operands.as_slice()) else {
        return None;
    };
    let Op::Constant {
        literal: Literal::Array(lit),
    } = &entry.instr(*c).op
    else {
        return None;
    };
    let (index, out) = (index_array(p1)?, index_array(instr)?);
    let values: Vec<i32> = match (&lit.data, index.element_type) {
        (ArrayData::S32(v), ElementType::S32) => v.clone(),
        (ArrayData::U32(v), ElementType::U32) => v.iter().map(|&u| u as i32).collect(),
        _ => return None,
    };
    let ivd = usize::try_from(index_vector_dim).ok()?;
    let implicit = ivd == index.dims.len();
    let fits = *x == p1
        && out.element_type == index.element_type
        && match implicit {
            true => dimensions.is_empty() && values.len() == 1,
            false => {
                dimensions[..] == [index_vector_dim]
                    && index.dims.get(ivd) == Some(&(values.len() as i64))
            }
        };
    if !fits {
        return None;
    }
    if implicit {
        return Some((values, 1));
    }
    let stride = index.dims[ivd + 1..].iter().product::<i64>() as usize;
    Some((values, stride.max(1)))
}

impl ScatterOp {
    /// The plan of `module`'s entry when its root is such a scatter of the entry's
    /// parameters 0, 1 and 2 (operand, indices, updates), in order.
    /// The plan of `module`'s entry when its root is such a scatter of the entry's
    /// parameters 0, 1 and 2 (operand, indices, updates), in order, the indices possibly
    /// shifted first: `subtract(p1, broadcast(s32 constant))` along the index vector
    /// dimension (how a scatter split over operand slices addresses its slice).
    pub fn of(module: &Module) -> Option<ScatterOp> {
        let entry = module.entry_computation();
        let root = entry.root_instr();
        let Op::Scatter {
            dims: dn, to_apply, ..
        } = &root.op
        else {
            return None;
        };
        let params = entry.parameters();
        let number = |i: usize| match entry.instr(params[i]).op {
            Op::Parameter { number } => number == i as u64,
            _ => false,
        };
        if params.len() != 3 || !(0..3).all(number) || !dn.input_batching_dims.is_empty() {
            return None;
        }
        let [operand, indices, updates] = *root.operands.as_slice() else {
            return None;
        };
        if operand != params[0] || updates != params[2] {
            return None;
        }
        let shifts = match indices == params[1] {
            true => None,
            false => Some(shifts(entry, indices, params[1], dn.index_vector_dim)?),
        };
        let combine = simple_scalar_fn(module, *to_apply)
            .filter(|f| matches!(f, SimpleScalarFn::Binary { .. } | SimpleScalarFn::Second))?;
        let shape = |id| entry.instr(id).shape.as_array();
        let (operand, indices, updates) = (shape(params[0])?, shape(params[1])?, shape(updates)?);
        let window_operand_dims = (0..operand.rank() as i64)
            .filter(|d| !dn.inserted_window_dims.contains(d))
            .map(|d| d as usize);
        let mut window_size = vec![1i64; operand.rank()];
        for (j, d) in window_operand_dims.enumerate() {
            window_size[d] = *updates.dims.get(*dn.update_window_dims.get(j)? as usize)?;
        }
        Some(ScatterOp {
            dims: operand.dims.to_vec(),
            index_dims: indices.dims.to_vec(),
            update_dims: updates.dims.to_vec(),
            dn: dn.clone(),
            window_size,
            combine,
            element_type: operand.element_type,
            index_type: indices.element_type,
            shifts,
        })
    }

    /// The operand's (and the updates') element type.
    pub fn element_type(&self) -> ElementType {
        self.element_type
    }

    /// The indices' element type.
    pub fn index_type(&self) -> ElementType {
        self.index_type
    }

    /// For each update element (row-major), the operand element (row-major) it combines
    /// into, `None` where its window does not fit (XLA skips those), the index array read
    /// through `index` (its row-major element `i`).
    pub fn targets(&self, index: &dyn Fn(usize) -> i64) -> Vec<Option<usize>> {
        let shifted = |i: usize| match &self.shifts {
            // Subtraction wraps in the index type, as the module's `subtract` does.
            Some((by, stride)) => {
                let by = by[(i / stride) % by.len()];
                match self.index_type {
                    ElementType::U32 => (index(i) as u32).wrapping_sub(by as u32) as i64,
                    _ => (index(i) as i32).wrapping_sub(by) as i64,
                }
            }
            None => index(i),
        };
        scatter_targets(
            &self.dims,
            &self.index_dims,
            &shifted,
            &self.update_dims,
            &self.dn,
            &self.window_size,
        )
    }

    /// Combines `updates` into `target` at `at` (from [`ScatterOp::targets`]), in order;
    /// an error when the combiner is not defined for the type.
    pub fn apply_f32(
        &self,
        target: &mut [f32],
        updates: &[f32],
        at: &[Option<usize>],
    ) -> Result<(), String> {
        self.apply(target, updates, at)
    }

    /// [`ScatterOp::apply_f32`] for f16 elements.
    pub fn apply_f16(
        &self,
        target: &mut [f16],
        updates: &[f16],
        at: &[Option<usize>],
    ) -> Result<(), String> {
        self.apply(target, updates, at)
    }

    /// [`ScatterOp::apply_f32`] for s32 elements.
    pub fn apply_s32(
        &self,
        target: &mut [i32],
        updates: &[i32],
        at: &[Option<usize>],
    ) -> Result<(), String> {
        self.apply(target, updates, at)
    }

    /// [`ScatterOp::apply_f32`] for u32 elements.
    pub fn apply_u32(
        &self,
        target: &mut [u32],
        updates: &[u32],
        at: &[Option<usize>],
    ) -> Result<(), String> {
        self.apply(target, updates, at)
    }

    fn apply<T: Element>(
        &self,
        target: &mut [T],
        updates: &[T],
        at: &[Option<usize>],
    ) -> Result<(), String> {
        if updates.len() != at.len() || at.iter().flatten().any(|&p| p >= target.len()) {
            return Err(format!(
                "a scatter of {} updates into {} elements",
                updates.len(),
                target.len()
            ));
        }
        scatter_in_place(target, updates, at, self.combine).ok_or_else(|| {
            format!(
                "the scatter's combiner is not defined for {}",
                self.element_type
            )
        })
    }
}
