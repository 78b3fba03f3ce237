//! The dynamic slice splitter: a `dynamic-slice` or `dynamic-update-slice` of a large
//! array that starts at run time along several dimensions becomes a chain of ops that
//! each start along one, as PopLibs' `dynamicSlice` and `dynamicUpdate` do it
//! (`lib/popops/DynamicSlice.cpp`: "We insert into a single dimension at a time").
//!
//! Why: the lowering splits a dynamic slice over tiles along the dimensions it takes
//! whole (their start is always 0), so a slice that is partial along every large
//! dimension ran on a few tiles, each holding a large block of the operand (a
//! `[3,8,20]` update into a `[500,8,200]` f32 array: eight parts of 400 KB, out of
//! memory). One dimension at a time, each op takes every other dimension whole and
//! splits over all of them.
//!
//! - A slice takes the dimensions in PopLibs' `bestSliceOrder`: the one that keeps the
//!   smallest share of its elements first, so later ops read less.
//! - An update slices off every dimension but the last of that order (what the update
//!   covers along it), updates the innermost piece, then writes each piece back into the
//!   one it was sliced from, outwards. Starts are clamped per dimension, so each op
//!   clamps its own start as the single op would.
//!
//! An op keeps its single form when its parts (one per element of the dimensions it takes
//! whole) would each hold under [`LARGE`] bytes of the array: the lowering spreads it well
//! enough, and every op of the chain adds a superstep (a `[500,2,20]` update of a
//! `[500,8,200]` array: 6.4 KB a part, 2.4 % fewer cycles as one op).

use super::words::{Emitter, names_in, rebuild, renamed};
use super::{Pass, PassContext};
use crate::CompileError;
use crate::lower::codelet_split::LARGE;
use std::collections::HashMap;
use xla_ir::literal::{ArrayData, ArrayLiteral, Literal};
use xla_ir::{ArrayShape, CompId, ElementType, InstrId, Instruction, Module, Op, Shape};

const PASS: &str = "dynamic-slice-splitter";

/// The pass (`dynamic-slice-splitter`).
pub struct DynamicSliceSplitter;

impl Pass for DynamicSliceSplitter {
    fn name(&self) -> &'static str {
        PASS
    }

    fn run(&self, module: &mut Module, cx: &mut PassContext) -> Result<(), CompileError> {
        let split = split_all(module, LARGE)?;
        if split > 0 {
            cx.notes.push(format!(
                "{split} dynamic slice(s) or update(s) split into one op per dimension"
            ));
        }
        Ok(())
    }
}

/// Splits every dynamic slice and update of `module` of at least `min_bytes` that starts
/// along several dimensions; returns how many.
fn split_all(module: &mut Module, min_bytes: u64) -> Result<usize, CompileError> {
    let with_splits: Vec<CompId> = module
        .computations()
        .filter(|(_, c)| {
            c.instructions()
                .any(|(_, i)| plan(c, i, min_bytes).is_some())
        })
        .map(|(id, _)| id)
        .collect();
    let mut taken = names_in(module);
    let mut split = 0;
    for id in with_splits {
        let new = rebuild(PASS, module, id, &mut taken, &mut |e, old, instr, map| {
            let Some(order) = plan(old, instr, min_bytes) else {
                return Ok(None);
            };
            split += 1;
            let operands: Vec<InstrId> = instr.operands.iter().map(|&o| renamed(map, o)).collect();
            let value = match &instr.op {
                Op::DynamicSlice { sizes } => slice(e, instr, &operands, sizes, &order)?,
                _ => update(e, instr, &operands, &order)?,
            };
            Ok(Some(value))
        })?;
        *module.computation_mut(id) = new;
    }
    Ok(split)
}

/// The dimensions along which `instr` starts at run time, in the order to take them, when
/// it is a dynamic slice or update partial along two or more of them whose parts would
/// each hold at least `min_bytes` of the array (one part per element of the dimensions it
/// takes whole).
fn plan(c: &xla_ir::Computation, instr: &Instruction, min_bytes: u64) -> Option<Vec<usize>> {
    let operand = c.instr(*instr.operands.first()?).shape.as_array()?;
    let sizes: Vec<i64> = match &instr.op {
        Op::DynamicSlice { sizes } => sizes.clone(),
        Op::DynamicUpdateSlice => c.instr(instr.operands[1]).shape.as_array()?.dims.to_vec(),
        _ => return None,
    };
    let dims = &operand.dims;
    if sizes.len() != dims.len() || sizes.contains(&0) {
        return None;
    }
    let whole: u64 = (0..dims.len())
        .filter(|&d| sizes[d] == dims[d])
        .fold(1u64, |n, d| n.saturating_mul(dims[d] as u64));
    if operand.byte_size() / whole.max(1) < min_bytes {
        return None;
    }
    let mut partial: Vec<usize> = (0..dims.len()).filter(|&d| sizes[d] < dims[d]).collect();
    if partial.len() < 2 {
        return None;
    }
    // PopLibs' bestSliceOrder: the smallest share `sizes[d] / dims[d]` first.
    partial.sort_by(|&a, &b| {
        let (a_share, b_share) = (
            sizes[a] as i128 * dims[b] as i128,
            sizes[b] as i128 * dims[a] as i128,
        );
        a_share.cmp(&b_share).then(a.cmp(&b))
    });
    Some(partial)
}

/// `shape` with its dimensions replaced by `dims` (layout kept: the rank is the same).
fn resized(shape: &ArrayShape, dims: &[i64]) -> Shape {
    Shape::Array(ArrayShape {
        element_type: shape.element_type,
        dims: dims.iter().copied().collect(),
        layout: shape.layout.clone(),
    })
}

/// The start operands of a one-dimension op along `dim`: `starts[dim]` there, a zero of
/// that start's type elsewhere.
fn starts_along(
    e: &mut Emitter,
    starts: &[InstrId],
    dim: usize,
    zeros: &mut HashMap<ElementType, InstrId>,
) -> Result<Vec<InstrId>, CompileError> {
    (0..starts.len())
        .map(|d| {
            if d == dim {
                return Ok(starts[d]);
            }
            let t = e.element_type(starts[d]);
            if let Some(&z) = zeros.get(&t) {
                return Ok(z);
            }
            let literal = Literal::Array(ArrayLiteral {
                shape: ArrayShape::new(t, &[]),
                data: ArrayData::zeros(t, 1),
            });
            let z = e.add(Op::Constant { literal }, &[], None)?;
            zeros.insert(t, z);
            Ok(z)
        })
        .collect()
}

/// `dynamic-slice(x, starts...)` as one slice per dimension of `order`.
fn slice(
    e: &mut Emitter,
    instr: &Instruction,
    operands: &[InstrId],
    sizes: &[i64],
    order: &[usize],
) -> Result<InstrId, CompileError> {
    let (x, starts) = (operands[0], &operands[1..]);
    let shape = e.shape(x).as_array().cloned().expect("planned on an array");
    let mut zeros = HashMap::new();
    let mut dims = shape.dims.to_vec();
    let mut cur = x;
    for (k, &d) in order.iter().enumerate() {
        dims[d] = sizes[d];
        let starts = starts_along(e, starts, d, &mut zeros)?;
        let result = if k + 1 == order.len() {
            instr.shape.clone()
        } else {
            resized(&shape, &dims)
        };
        let op = Op::DynamicSlice {
            sizes: dims.clone(),
        };
        let operands: Vec<InstrId> = std::iter::once(cur).chain(starts).collect();
        cur = e.add(op, &operands, Some(result))?;
    }
    Ok(cur)
}

/// `dynamic-update-slice(t, u, starts...)`: the pieces of `t` sliced off along every
/// dimension of `order` but the last, the innermost updated with `u`, then each piece
/// written back into the one it came from.
fn update(
    e: &mut Emitter,
    instr: &Instruction,
    operands: &[InstrId],
    order: &[usize],
) -> Result<InstrId, CompileError> {
    let (t, u, starts) = (operands[0], operands[1], &operands[2..]);
    let shape = e.shape(t).as_array().cloned().expect("planned on an array");
    let sizes = e.dims(u);
    let mut zeros = HashMap::new();
    let mut pieces = vec![t];
    let mut dims = shape.dims.to_vec();
    for &d in &order[..order.len() - 1] {
        dims[d] = sizes[d];
        let starts = starts_along(e, starts, d, &mut zeros)?;
        let op = Op::DynamicSlice {
            sizes: dims.clone(),
        };
        let operands: Vec<InstrId> = std::iter::once(pieces[pieces.len() - 1])
            .chain(starts)
            .collect();
        pieces.push(e.add(op, &operands, Some(resized(&shape, &dims)))?);
    }
    let mut written = u;
    for (k, &d) in order.iter().enumerate().rev() {
        let starts = starts_along(e, starts, d, &mut zeros)?;
        let result = if k == 0 {
            instr.shape.clone()
        } else {
            e.shape(pieces[k]).clone()
        };
        let operands: Vec<InstrId> = [pieces[k], written].into_iter().chain(starts).collect();
        written = e.add(Op::DynamicUpdateSlice, &operands, Some(result))?;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use xla_ir::generate::Rng;

    /// A module slicing (or updating) a random block of a random array, starts of s32 or
    /// u32 parameters, so the evaluator also sees starts past either end.
    fn random_module(rng: &mut Rng) -> Module {
        let rank = 2 + rng.below(3);
        let dims: Vec<i64> = (0..rank).map(|_| 1 + rng.below(7) as i64).collect();
        let sizes: Vec<i64> = dims
            .iter()
            .map(|&d| 1 + rng.below(d as usize) as i64)
            .collect();
        let list = |v: &[i64]| v.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
        let ty = if rng.below(2) == 0 { "s32" } else { "u32" };
        let starts: Vec<String> = (0..rank).map(|d| format!("s{d}")).collect();
        let params: String = (0..rank)
            .map(|d| format!("  s{d} = {ty}[] parameter({})\n", d + 2))
            .collect();
        let root = if rng.below(2) == 0 {
            format!(
                "f32[{}] dynamic-slice(t, {}), dynamic_slice_sizes={{{}}}",
                list(&sizes),
                starts.join(", "),
                list(&sizes)
            )
        } else {
            format!(
                "f32[{}] dynamic-update-slice(t, u, {})",
                list(&dims),
                starts.join(", ")
            )
        };
        let text = format!(
            "HloModule m\n\nENTRY main {{\n  t = f32[{}] parameter(0)\n  u = f32[{}] parameter(1)\n{params}  ROOT r = {root}\n}}\n",
            list(&dims),
            list(&sizes)
        );
        xla_ir::parse_module(&text).expect("a valid module")
    }

    /// Start values of the module's parameters: in range, past the end, or (s32) negative.
    fn starts(module: &Module, rng: &mut Rng) -> Vec<xla_ir::Literal> {
        let mut inputs = xla_ir::generate::inputs(module, rng.next_u64());
        for input in inputs.iter_mut().skip(2) {
            let xla_ir::Literal::Array(a) = input else {
                unreachable!("starts are scalars")
            };
            let v = rng.below(12) as i64 - 3;
            a.data = match a.data {
                ArrayData::U32(_) => ArrayData::U32(vec![v.max(0) as u32]),
                _ => ArrayData::S32(vec![v as i32]),
            };
        }
        inputs
    }

    #[test]
    fn one_op_per_dimension_computes_the_single_op() {
        let mut rng = Rng::new(29);
        let mut split = 0;
        for case in 0..400 {
            let module = random_module(&mut rng);
            let mut rewritten = module.clone();
            split += split_all(&mut rewritten, 0).unwrap();
            xla_ir::verify::verify(&rewritten).unwrap();
            for _ in 0..3 {
                let inputs = starts(&module, &mut rng);
                let want = xla_ir::eval::evaluate(&module, &inputs).unwrap();
                let got = xla_ir::eval::evaluate(&rewritten, &inputs).unwrap();
                assert_eq!(got, want, "case {case}:\n{module}\n{rewritten}");
            }
        }
        assert!(split > 150, "{split} of 400 modules split");
    }

    #[test]
    fn small_arrays_and_one_partial_dimension_keep_their_op() {
        let text = "HloModule m\n\nENTRY main {\n  t = f32[500,8,200] parameter(0)\n  \
                    a = s32[] parameter(1)\n  z = s32[] constant(0)\n  \
                    ROOT r = f32[3,8,200] dynamic-slice(t, a, z, z), dynamic_slice_sizes={3,8,200}\n}\n";
        let mut module = xla_ir::parse_module(text).unwrap();
        assert_eq!(split_all(&mut module, LARGE).unwrap(), 0);
        let small = text
            .replace("500,8,200", "50,8,20")
            .replace("3,8,200", "3,8,2")
            .replace("(t, a, z, z)", "(t, a, z, a)");
        let mut module = xla_ir::parse_module(&small).unwrap();
        assert_eq!(split_all(&mut module, LARGE).unwrap(), 0);
        assert_eq!(split_all(&mut module, 0).unwrap(), 1);
    }
}
