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
    let grads = b.call(&operands, vjp_comp)?;
    let mut out = Vec::new();
    for (i, k) in (0..wants.len()).filter(|&k| wants[k]).enumerate() {
        out.push((k, b.get_tuple_element(grads, i as i64)?));
    }
    Ok(out)
}

/// Computation `f`'s instructions built again into `b` with its parameters as `args`: the
/// value of its root.
fn inline(
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
