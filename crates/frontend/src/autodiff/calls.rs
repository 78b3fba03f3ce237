//! The gradient of a `call` (an outlined function): the callee's vector-Jacobian product
//! built once as a computation of its own (`<callee>_vjp_<operands>`: the callee's body
//! again, then its gradient) and called, so an outlined function's backward pass is
//! outlined too and shared by every call of it.

use super::{AutodiffError, Contributions, unsupported, vjp};
use crate::ops::Builder;
use xla_ir::{CompId, InstrId, Instruction, Op};

/// `call(args..., to_apply=f)`, cotangent `g`.
pub(super) fn call(
    b: &mut Builder<'_>,
    instr: &Instruction,
    f: CompId,
    g: InstrId,
    wants: &[bool],
) -> Result<Contributions, AutodiffError> {
    if instr.shape.as_array().is_none() {
        return Err(unsupported(
            instr,
            "only calls returning one array are differentiated",
        ));
    }
    let mask: String = wants.iter().map(|&w| if w { '1' } else { '0' }).collect();
    let callee = b.module().computation(f).name.clone();
    let name = format!("{callee}_vjp_{mask}");
    let existing = b
        .module()
        .computations()
        .find(|(_, c)| c.name == name)
        .map(|(id, _)| id);
    let vjp_comp = match existing {
        Some(id) => id,
        None => {
            let arg_shapes: Vec<xla_ir::Shape> =
                instr.operands.iter().map(|&a| b.shape(a).clone()).collect();
            let g_shape = b.shape(g).clone();
            let wanted: Vec<usize> = (0..wants.len()).filter(|&k| wants[k]).collect();
            b.sub_computation(name.clone(), |s| {
                let params = arg_shapes
                    .iter()
                    .enumerate()
                    .map(|(k, sh)| s.parameter(k as u64, sh.clone(), &format!("{name}.arg{k}")))
                    .collect::<Result<Vec<_>, _>>()?;
                let gp = s.parameter(params.len() as u64, g_shape, &format!("{name}.cotangent"))?;
                let y = inline(s, f, &params)?;
                let wrt: Vec<InstrId> = wanted.iter().map(|&k| params[k]).collect();
                let grads = vjp(s, y, gp, &wrt).map_err(|e| match e {
                    AutodiffError::Build(b) => b,
                    other => xla_ir::builder::BuildError::Shape {
                        computation: name.clone(),
                        opcode: "call".into(),
                        message: other.to_string(),
                    },
                })?;
                s.tuple(&grads)
            })?
        }
    };
    let mut operands = instr.operands.to_vec();
    operands.push(g);
    // An outlined function's backward pass is an outlined function too.
    let grads = if xla_ir::call_config::is_function_call(instr) {
        b.call_function(&operands, vjp_comp)?
    } else {
        b.call(&operands, vjp_comp)?
    };
    let mut out = Vec::new();
    for (i, k) in (0..wants.len()).filter(|&k| wants[k]).enumerate() {
        out.push((k, b.get_tuple_element(grads, i as i64)?));
    }
    Ok(out)
}

/// Computation `f`'s instructions built again into `b` with its parameters as `args`: the
/// value of its root.
pub(super) fn inline(
    b: &mut Builder<'_>,
    f: CompId,
    args: &[InstrId],
) -> Result<InstrId, xla_ir::builder::BuildError> {
    let comp = b.module().computation(f).clone();
    let mut map = std::collections::HashMap::new();
    for (id, instr) in comp.instructions() {
        let new = match instr.op {
            Op::Parameter { number } => args[number as usize],
            _ => {
                let operands: Vec<InstrId> = instr.operands.iter().map(|o| map[o]).collect();
                b.add_instruction(instr.op.clone(), &operands, Some(instr.shape.clone()))?
            }
        };
        map.insert(id, new);
    }
    Ok(map[&comp.root])
}

/// `conditional(selector, operands...)` (branch k takes operand k+1), cotangent `g`: the
/// same selection of the branches' vector-Jacobian products, each passing the cotangent
/// to its own operand and zeros to the others (JAX's `cond` transpose).
pub(super) fn conditional(
    b: &mut Builder<'_>,
    instr: &Instruction,
    branches: &[CompId],
    g: InstrId,
    wants: &[bool],
) -> Result<Contributions, AutodiffError> {
    let operands = &instr.operands[1..];
    if instr.shape.as_array().is_none() || operands.iter().any(|&o| b.shape(o).as_array().is_none())
    {
        return Err(unsupported(
            instr,
            "only conditionals of array operands returning one array are differentiated",
        ));
    }
    // Position k + 1 of the instruction is branch k's operand.
    let wanted: Vec<usize> = (0..operands.len()).filter(|&k| wants[k + 1]).collect();
    let shapes: Vec<xla_ir::Shape> = operands.iter().map(|&o| b.shape(o).clone()).collect();
    let g_shape = b.shape(g).clone();
    let mut vjps = Vec::with_capacity(branches.len());
    let mut args = Vec::with_capacity(branches.len());
    for (k, &branch) in branches.iter().enumerate() {
        let name = format!("{}_vjp", b.module().computation(branch).name);
        let arg_shape = xla_ir::Shape::Tuple(vec![shapes[k].clone(), g_shape.clone()]);
        let (wanted, shapes) = (wanted.clone(), shapes.clone());
        let comp = b.sub_computation(name.clone(), |s| {
            let p = s.parameter(0, arg_shape, &format!("{name}.arg"))?;
            let x = s.get_tuple_element(p, 0)?;
            let gp = s.get_tuple_element(p, 1)?;
            let mut out = Vec::with_capacity(wanted.len());
            for &j in &wanted {
                if j == k {
                    let y = inline(s, branch, &[x])?;
                    let dx = vjp(s, y, gp, &[x]).map_err(|e| match e {
                        AutodiffError::Build(b) => b,
                        other => xla_ir::builder::BuildError::Shape {
                            computation: name.clone(),
                            opcode: "conditional".into(),
                            message: other.to_string(),
                        },
                    })?;
                    out.push(dx[0]);
                } else {
                    let a = shapes[j].as_array().expect("array operands: checked");
                    out.push(crate::ops::full(s, a.element_type, &a.dims, 0.0)?);
                }
            }
            s.tuple(&out)
        })?;
        vjps.push(comp);
        args.push(b.tuple(&[operands[k], g])?);
    }
    let grads = b.conditional(instr.operands[0], &args, &vjps)?;
    let mut out = Vec::with_capacity(wanted.len());
    for (i, &j) in wanted.iter().enumerate() {
        out.push((j + 1, b.get_tuple_element(grads, i as i64)?));
    }
    Ok(out)
}
