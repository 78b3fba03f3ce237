//! Gives XLA's ops that ipuxla reads as [`Op::Foreign`] their meaning in ops it runs, where
//! the meaning allows, so the reference evaluator and the compiler take them: an async
//! chain (`async-start` .. `async-done`, `custom-call-start` .. `custom-call-done`, ...)
//! becomes its synchronous op (XLA's `ConvertAsyncCollectivesToSync` in spirit),
//! `copy-start`/`copy-done` a `copy`, `all-reduce-start`/`-done` (and the all-gather and
//! collective-permute pairs) the collective, `add-dependency` and `domain` their operand,
//! host transfers (`send`/`recv` with `is_host_transfer=true`) an outfeed or infeed, and
//! `batch-norm-training`/`-inference`/`-grad` their arithmetic (XLA's
//! `BatchNormExpander`). Whatever stays foreign is refused by name downstream.

use crate::builder::{BuildError, ComputationBuilder, ModuleBuilder};
use crate::ids::{CompId, InstrId};
use crate::{BinaryOp, Module, Op, Shape};
use std::collections::HashMap;

/// Why a foreign op could not be given its meaning.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("in computation {computation}, instruction {instruction}: {message}")]
pub struct ExpandError {
    /// The computation.
    pub computation: String,
    /// The instruction.
    pub instruction: String,
    /// What did not fit.
    pub message: String,
}

/// `module` with its foreign ops expanded where their meaning allows; `None` when it has
/// none to expand (the common case, at no cost).
pub fn expand_foreign_ops(module: &Module) -> Result<Option<Module>, ExpandError> {
    let has_foreign = module.computations().any(|(_, c)| {
        c.instructions()
            .any(|(_, i)| matches!(i.op, Op::Foreign { .. }))
    });
    if !has_foreign {
        return Ok(None);
    }
    let ids: Vec<CompId> = module.computations().map(|(id, _)| id).collect();
    let mut builder = ModuleBuilder::extend(module.clone());
    for id in ids {
        expand_computation(&mut builder, id)?;
    }
    Ok(Some(builder.into_module()))
}

/// The steps of a chain that carry no value of their own once the chain is synchronous.
fn is_chain_step(opcode: &str) -> bool {
    matches!(
        opcode,
        "async-start"
            | "async-update"
            | "copy-start"
            | "all-reduce-start"
            | "all-gather-start"
            | "collective-permute-start"
            | "add-dependency"
            | "domain"
            | "send"
            | "recv"
    ) || crate::parser::async_sugar(opcode).is_some_and(|(_, phase)| phase != "done")
}

fn expand_computation(builder: &mut ModuleBuilder, id: CompId) -> Result<(), ExpandError> {
    let comp = builder.module().computation(id).clone();
    let error = |instr: InstrId, message: String| ExpandError {
        computation: comp.name.clone(),
        instruction: comp.instr(instr).name.clone(),
        message,
    };
    let mut alias: HashMap<InstrId, InstrId> = HashMap::new();
    let mut rewritten: Vec<(InstrId, Op, Vec<InstrId>)> = Vec::new();
    for (iid, instr) in comp.instructions() {
        let Op::Foreign { opcode, .. } = &instr.op else {
            continue;
        };
        match opcode.as_str() {
            "add-dependency" | "domain" if !instr.operands.is_empty() => {
                alias.insert(iid, instr.operands[0]);
            }
            "batch-norm-training" | "batch-norm-inference" | "batch-norm-grad" => {
                let to_apply = batch_norm(builder, &comp, iid).map_err(|e| error(iid, e))?;
                rewritten.push((iid, Op::Call { to_apply }, instr.operands.to_vec()));
            }
            _ => {
                if let Some((op, operands)) = synchronous(&comp, iid).map_err(|e| error(iid, e))? {
                    rewritten.push((iid, op, operands));
                }
            }
        }
    }
    if alias.is_empty() && rewritten.is_empty() {
        return Ok(());
    }
    let resolve = |mut x: InstrId| {
        while let Some(&y) = alias.get(&x) {
            x = y;
        }
        x
    };
    let comp = builder.module_mut().computation_mut(id);
    for (iid, op, operands) in rewritten {
        let instr = comp.instr_mut(iid);
        instr.op = op;
        instr.operands = operands.into_iter().collect();
    }
    for iid in comp.order().to_vec() {
        let instr = comp.instr_mut(iid);
        for o in instr
            .operands
            .iter_mut()
            .chain(instr.control_predecessors.iter_mut())
        {
            *o = resolve(*o);
        }
    }
    comp.root = resolve(comp.root);
    // Drop the chain steps nothing reads any more (until none is left).
    loop {
        let mut used: Vec<bool> = vec![
            false;
            comp.order()
                .iter()
                .map(|i| i.index() + 1)
                .max()
                .unwrap_or(0)
        ];
        used[comp.root.index()] = true;
        for (_, instr) in comp.instructions() {
            for o in instr.operands.iter().chain(&instr.control_predecessors) {
                used[o.index()] = true;
            }
        }
        let before = comp.order().len();
        let keep: Vec<InstrId> = comp
            .order()
            .iter()
            .copied()
            .filter(|&i| {
                used[i.index()]
                    || !matches!(&comp.instr(i).op, Op::Foreign { opcode, .. } if is_chain_step(opcode))
            })
            .collect();
        if keep.len() == before {
            break;
        }
        comp.set_order(keep);
    }
    Ok(())
}

/// The synchronous form of a chain's last step (`async-done`, `X-done`, `copy-done`,
/// `all-reduce-done`, ...): its op and operands (those of the chain's start); `None` when
/// the instruction ends no chain.
fn synchronous(
    comp: &crate::Computation,
    id: InstrId,
) -> Result<Option<(Op, Vec<InstrId>)>, String> {
    let Op::Foreign { opcode, .. } = &comp.instr(id).op else {
        return Ok(None);
    };
    if matches!(opcode.as_str(), "send-done" | "recv-done") {
        return Ok(host_transfer(comp, id));
    }
    let collective = match opcode.as_str() {
        "copy-done" => Some("copy"),
        "all-reduce-done" => Some("all-reduce"),
        "all-gather-done" => Some("all-gather"),
        "collective-permute-done" => Some("collective-permute"),
        "async-done" => None,
        other if crate::parser::async_sugar(other).is_some_and(|(_, p)| p == "done") => None,
        _ => return Ok(None),
    };
    // Walk back through the updates to the start.
    let mut at = id;
    loop {
        let instr = comp.instr(at);
        let [operand] = instr.operands[..] else {
            return Ok(None);
        };
        let Op::Foreign { opcode, .. } = &comp.instr(operand).op else {
            return Ok(None);
        };
        at = operand;
        if opcode.ends_with("-start") {
            break;
        }
    }
    let start = comp.instr(at);
    let Op::Foreign {
        opcode,
        called,
        attributes,
    } = &start.op
    else {
        return Ok(None);
    };
    let operands = start.operands.to_vec();
    let attributes: Vec<(String, String)> = attributes
        .iter()
        .filter(|(n, _)| {
            !matches!(
                n.as_str(),
                "async_execution_thread"
                    | "output_to_operand_aliasing"
                    | "cross_program_prefetch_index"
            )
        })
        .cloned()
        .collect();
    let op = match (collective, opcode.as_str()) {
        (Some("copy"), "copy-start") => Op::Unary(crate::UnaryOp::Copy),
        (Some(op), _) => crate::parser::typed_op(op, called, &attributes, operands.len())?,
        (None, "async-start") => match called.iter().find(|(n, _)| n == "calls") {
            Some((_, c)) if c.len() == 1 => Op::Call { to_apply: c[0] },
            _ => return Err("async-start names no computation in calls=".into()),
        },
        (None, sugar) => {
            let (wrapped, _) = crate::parser::async_sugar(sugar)
                .ok_or_else(|| format!("{sugar} does not start an async chain"))?;
            crate::parser::typed_op(wrapped, called, &attributes, operands.len())?
        }
    };
    Ok(Some((op, operands)))
}

/// A host transfer (`send`/`recv` with `is_host_transfer=true`, ended by its `-done`): an
/// outfeed or infeed of the same value, named after the channel (`channel_15`).
fn host_transfer(comp: &crate::Computation, done: InstrId) -> Option<(Op, Vec<InstrId>)> {
    let [start] = comp.instr(done).operands[..] else {
        return None;
    };
    let start_instr = comp.instr(start);
    if start_instr.op.attribute("is_host_transfer") != Some("true") {
        return None;
    }
    let config = start_instr
        .op
        .attribute("channel_id")
        .map(|id| format!("channel_{id}"))
        .unwrap_or_default();
    match start_instr.op.name() {
        "recv" => Some((Op::Infeed { config }, start_instr.operands.to_vec())),
        "send" => {
            let value = *start_instr.operands.first()?;
            Some((
                Op::Outfeed {
                    config,
                    shape: Some(comp.instr(value).shape.clone()),
                },
                start_instr.operands.to_vec(),
            ))
        }
        _ => None,
    }
}

/// A computation computing a batch-norm instruction's result from its operands, as XLA's
/// `BatchNormExpander` does.
fn batch_norm(
    builder: &mut ModuleBuilder,
    comp: &crate::Computation,
    id: InstrId,
) -> Result<CompId, String> {
    let instr = comp.instr(id);
    let Op::Foreign { opcode, .. } = &instr.op else {
        unreachable!("called for batch-norm ops")
    };
    let attribute = |name: &str| {
        instr
            .op
            .attribute(name)
            .ok_or_else(|| format!("{opcode} needs {name}="))
    };
    let epsilon: f32 = attribute("epsilon")?
        .parse()
        .map_err(|_| format!("{opcode}: epsilon is not a number"))?;
    let feature: i64 = attribute("feature_index")?
        .parse()
        .map_err(|_| format!("{opcode}: feature_index is not an integer"))?;
    let shapes: Vec<Shape> = instr
        .operands
        .iter()
        .map(|o| comp.instr(*o).shape.clone())
        .collect();
    let arity = if opcode == "batch-norm-training" {
        3
    } else {
        5
    };
    if shapes.len() != arity {
        return Err(format!(
            "{opcode} takes {arity} operands, found {}",
            shapes.len()
        ));
    }
    let Some(Shape::Array(x)) = shapes.first() else {
        return Err(format!("{opcode}'s operand is not an array"));
    };
    let (t, dims) = (x.element_type, x.dims.to_vec());
    if !t.is_float() || !t.is_computed() || feature < 0 || feature as usize >= dims.len() {
        return Err(format!(
            "{opcode} needs a float operand with feature_index inside it, found {x} and {feature}"
        ));
    }
    let name = format!("{}.expanded", instr.name);
    let opcode = opcode.clone();
    let mut c = builder.computation(name);
    let build = |c: &mut ComputationBuilder<'_>| -> Result<InstrId, BuildError> {
        let params: Vec<InstrId> = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| c.parameter(i as u64, s.clone(), &format!("{}.p{i}", instr.name)))
            .collect::<Result<_, _>>()?;
        let reduce_dims: Vec<i64> = (0..dims.len() as i64).filter(|&d| d != feature).collect();
        let count: i64 = reduce_dims.iter().map(|&d| dims[d as usize]).product();
        let add = c.scalar_binary_computation(&format!("{}.add", instr.name), BinaryOp::Add, t)?;
        let zero = c.float_constant(t, 0.0)?;
        let scalar =
            |c: &mut ComputationBuilder<'_>, v: f32, to: &[i64]| -> Result<InstrId, BuildError> {
                let s = c.float_constant(t, v)?;
                c.broadcast(s, to, &[])
            };
        let features = [dims[feature as usize]];
        let per_feature =
            |c: &mut ComputationBuilder<'_>, v: InstrId| c.broadcast(v, &dims, &[feature]);
        let sum =
            |c: &mut ComputationBuilder<'_>, v: InstrId| c.reduce(&[v], &[zero], &reduce_dims, add);
        let n = scalar(c, count as f32, &features)?;
        let eps = scalar(c, epsilon, &features)?;
        match opcode.as_str() {
            "batch-norm-inference" => {
                let [x, scale, offset, mean, var] = params[..] else {
                    unreachable!("the operand count is checked before building")
                };
                // true_scale = scale * rsqrt(var + eps); true_shift = offset - mean * true_scale.
                let v = c.add(var, eps)?;
                let r = c.rsqrt(v)?;
                let true_scale = c.multiply(scale, r)?;
                let m = c.multiply(mean, true_scale)?;
                let true_shift = c.subtract(offset, m)?;
                let s = per_feature(c, true_scale)?;
                let sh = per_feature(c, true_shift)?;
                let y = c.multiply(x, s)?;
                c.add(y, sh)
            }
            "batch-norm-training" => {
                let [x, scale, offset] = params[..] else {
                    unreachable!("the operand count is checked before building")
                };
                // mean = E[x]; var = E[x^2] - E[x]^2.
                let total = sum(c, x)?;
                let mean = c.divide(total, n)?;
                let x2 = c.multiply(x, x)?;
                let total2 = sum(c, x2)?;
                let mean2 = c.divide(total2, n)?;
                let mm = c.multiply(mean, mean)?;
                let var = c.subtract(mean2, mm)?;
                let mean_b = per_feature(c, mean)?;
                let centred = c.subtract(x, mean_b)?;
                let v = c.add(var, eps)?;
                let r = c.rsqrt(v)?;
                let r_b = per_feature(c, r)?;
                let normalised = c.multiply(centred, r_b)?;
                let scale_b = per_feature(c, scale)?;
                let scaled = c.multiply(normalised, scale_b)?;
                let offset_b = per_feature(c, offset)?;
                let y = c.add(scaled, offset_b)?;
                c.tuple(&[y, mean, var])
            }
            _ => {
                let [x, scale, mean, var, grad] = params[..] else {
                    unreachable!("the operand count is checked before building")
                };
                // grad_offset = sum(g); grad_scale = sum(g * (x - mean)) * rsqrt(var + eps);
                // grad_x = scale * rsqrt(var + eps) / N
                //          * (g * N - sum(g) - (x - mean) * sum(g * (x - mean)) / (var + eps)).
                let v = c.add(var, eps)?;
                let r = c.rsqrt(v)?;
                let grad_offset = sum(c, grad)?;
                let mean_b = per_feature(c, mean)?;
                let centred = c.subtract(x, mean_b)?;
                let gc = c.multiply(grad, centred)?;
                let sum_gc = sum(c, gc)?;
                let grad_scale = c.multiply(sum_gc, r)?;
                let n_b = per_feature(c, n)?;
                let i1 = c.multiply(grad, n_b)?;
                let i2 = per_feature(c, grad_offset)?;
                let q = c.divide(sum_gc, v)?;
                let q_b = per_feature(c, q)?;
                let i4 = c.multiply(centred, q_b)?;
                let i12 = c.subtract(i1, i2)?;
                let i5 = c.subtract(i12, i4)?;
                let sr = c.multiply(scale, r)?;
                let k = c.divide(sr, n)?;
                let k_b = per_feature(c, k)?;
                let grad_x = c.multiply(k_b, i5)?;
                c.tuple(&[grad_x, grad_scale, grad_offset])
            }
        }
    };
    let root = build(&mut c).map_err(|e| e.to_string())?;
    c.finish(root).map_err(|e| e.to_string())
}
