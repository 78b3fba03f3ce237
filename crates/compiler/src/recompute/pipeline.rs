//! Recomputation in training pipelines (the seed's `RecomputationMode`s): a recomputed
//! stage stashes its *inputs* for its backward pass instead of the values its forward pass
//! saves, and recomputes those from the stashed inputs when the backward pass runs. This
//! file builds the modules that do it from a stage's forward and backward computations:
//!
//! - [`saved_only`]: `(weights..., inputs...) -> (saved...)`, the forward pass without the
//!   outputs it hands on: RecomputeThenBackpropagate runs it, then the backward pass;
//! - [`recompute_and_backward`]: `(weights..., inputs..., gradients...) ->
//!   backward(weights, saved(weights, inputs), gradients)` in one computation, which the
//!   scheduler interleaves: RecomputeAndBackpropagateInterleaved.
//!
//! A forward pass with an op that has effects (feeds, collectives, opaque custom calls) is
//! never recomputed: [`stateful_op`] names it.

use crate::outline::signature::has_effects;
use std::collections::{HashMap, HashSet};
use xla_ir::ids::{CompId, InstrId};
use xla_ir::{Computation, Instruction, Module, Op, Shape};

/// The first instruction of `module` (any computation) that must not run twice: an op with
/// effects. `None` when the forward pass may be recomputed.
pub fn stateful_op(module: &Module) -> Option<String> {
    module.computations().find_map(|(_, c)| {
        c.instructions()
            .find(|(_, i)| has_effects(&i.op) && !is_checkpoint(&i.op))
            .map(|(_, i)| i.name.clone())
    })
}

/// `forward` (`(weights..., inputs...) -> (outputs..., saved...)`) reduced to its last
/// `saved` results; what only the outputs need is removed.
pub fn saved_only(forward: &Module, saved: usize) -> Module {
    let results = result_leaves(forward.entry_computation());
    keep_results(forward, &results[results.len() - saved..], "recompute")
}

/// `forward` without its last `saved` results: the forward pass of a recomputed stage,
/// which stashes its inputs instead.
pub fn outputs_only(forward: &Module, saved: usize) -> Module {
    let results = result_leaves(forward.entry_computation());
    keep_results(forward, &results[..results.len() - saved], "outputs")
}

/// `module` returning the values `kept` of its entry computation (as a tuple), named
/// `NAME.suffix`; what they do not need is removed.
pub(super) fn keep_results(module: &Module, kept: &[InstrId], suffix: &str) -> Module {
    let mut out = module.clone();
    out.name = format!("{}.{suffix}", module.name);
    // The results change: a declared layout or aliasing of the old ones no longer applies.
    out.entry_computation_layout = None;
    out.input_output_alias.clear();
    let comp = out.computation_mut(module.entry);
    let shapes: Vec<Shape> = kept.iter().map(|&i| comp.instr(i).shape.clone()).collect();
    let root = comp.push(Instruction::new(
        unique_name(comp, suffix),
        Op::Tuple,
        kept,
        Shape::Tuple(shapes),
    ));
    comp.root = root;
    remove_dead(comp);
    out.retain_reachable();
    out
}

/// The recomputation checkpoints of `module`'s entry computation, in program order: the
/// values a recomputing stage stashes instead of recomputing.
pub fn checkpoints(module: &Module) -> Vec<InstrId> {
    let c = module.entry_computation();
    c.order()
        .iter()
        .copied()
        .filter(|&id| is_checkpoint(&c.instr(id).op))
        .collect()
}

/// Whether `op` is a `RecomputationCheckpoint` custom-call.
pub fn is_checkpoint(op: &Op) -> bool {
    matches!(op, Op::CustomCall { target, .. } if target == xla_ir::call_config::CHECKPOINT_TARGET)
}

/// `forward` returning its outputs (all results but the last `saved`) and then the values
/// `extra` of its entry computation.
pub fn outputs_and(forward: &Module, saved: usize, extra: &[InstrId]) -> Module {
    let results = result_leaves(forward.entry_computation());
    let mut kept = results[..results.len() - saved].to_vec();
    kept.extend_from_slice(extra);
    keep_results(forward, &kept, "outputs")
}

/// One computation that recomputes `forward`'s `saved` values from the weights and inputs
/// and runs `backward` on them: `(weights..., inputs..., checkpointed..., gradients...) ->
/// backward's results`, where `backward` takes `(weights..., saved..., gradients...)`, the
/// first `weights` parameters of both are the stage's weights, and `checkpointed` are the
/// values of `forward`'s instructions `checkpoints`, stashed rather than recomputed.
pub fn recompute_and_backward(
    forward: &Module,
    backward: &Module,
    weights: usize,
    saved: usize,
    checkpoints: &[InstrId],
) -> Module {
    let mut out = Module::new(format!("{}.recompute_and_backward", backward.name));
    let mut done_fwd = HashMap::new();
    let mut done_bwd = HashMap::new();
    let mut entry = Computation::new(format!(
        "{}.recompute_and_backward",
        backward.entry_computation().name
    ));
    let fwd = forward.entry_computation();
    let bwd = backward.entry_computation();
    let fwd_params = fwd.parameters();
    let bwd_params = bwd.parameters();
    let mut params: Vec<InstrId> = Vec::new();
    // Parameters: the weights and inputs as the forward pass numbers them, then the
    // backward pass's gradients.
    for (k, &p) in fwd_params.iter().enumerate() {
        let mut instr = fwd.instr(p).clone();
        instr.op = Op::Parameter { number: k as u64 };
        params.push(entry.push(instr));
    }
    let mut checkpointed = Vec::new();
    for (k, &c) in checkpoints.iter().enumerate() {
        let instr = fwd.instr(c);
        let p = Instruction::new(
            unique_name(&entry, &format!("{}.stashed", instr.name)),
            Op::Parameter {
                number: (fwd_params.len() + k) as u64,
            },
            &[],
            instr.shape.clone(),
        );
        checkpointed.push(entry.push(p));
    }
    let first_gradient = fwd_params.len() + checkpoints.len();
    for (k, &p) in bwd_params[weights + saved..].iter().enumerate() {
        let mut instr = bwd.instr(p).clone();
        instr.name = unique_name(&entry, &instr.name);
        instr.op = Op::Parameter {
            number: (first_gradient + k) as u64,
        };
        params.push(entry.push(instr));
    }
    // The forward pass, its parameters mapped to the new ones and its checkpoints to the
    // stashed values (what only they read is not recomputed).
    let mut map: HashMap<InstrId, InstrId> =
        fwd_params.iter().copied().zip(params.clone()).collect();
    map.extend(checkpoints.iter().copied().zip(checkpointed));
    copy_body(
        forward,
        &mut out,
        &mut done_fwd,
        fwd,
        &mut entry,
        &mut map,
        "recompute.",
    );
    let leaves = result_leaves(fwd);
    let saved_values: Vec<InstrId> = leaves[leaves.len() - saved..]
        .iter()
        .map(|l| map[l])
        .collect();
    // The backward pass: weights, saved values, then the gradient parameters.
    let mut map: HashMap<InstrId, InstrId> = HashMap::new();
    for (k, &p) in bwd_params.iter().enumerate() {
        let to = if k < weights {
            params[k]
        } else if k < weights + saved {
            saved_values[k - weights]
        } else {
            // `params` holds the forward's parameters, then the gradients.
            params[fwd_params.len() + k - weights - saved]
        };
        map.insert(p, to);
    }
    copy_body(
        backward,
        &mut out,
        &mut done_bwd,
        bwd,
        &mut entry,
        &mut map,
        "",
    );
    entry.root = map[&bwd.root];
    remove_dead(&mut entry);
    let id = out.add_computation(entry);
    out.entry = id;
    out
}

/// Copies `from`'s instructions other than parameters (already in `map`) into `into`,
/// names prefixed with `prefix` and made unique, called computations copied into `module`.
fn copy_body(
    src: &Module,
    module: &mut Module,
    done: &mut HashMap<CompId, CompId>,
    from: &Computation,
    into: &mut Computation,
    map: &mut HashMap<InstrId, InstrId>,
    prefix: &str,
) {
    for &id in from.order() {
        if map.contains_key(&id) {
            continue;
        }
        let mut instr = from.instr(id).clone();
        instr.name = unique_name(into, &format!("{prefix}{}", instr.name));
        instr.operands = instr.operands.iter().map(|o| map[o]).collect();
        instr.control_predecessors = instr.control_predecessors.iter().map(|p| map[p]).collect();
        let called: Vec<(CompId, CompId)> = instr
            .op
            .called_computations()
            .into_iter()
            .map(|c| (c, module.import_computation(src, c, done)))
            .collect();
        instr.op.map_called_computations(|c| {
            called
                .iter()
                .find(|(old, _)| *old == c)
                .map_or(c, |(_, new)| *new)
        });
        map.insert(id, into.push(instr));
    }
}

/// The values a computation returns: its root tuple's operands, or the root itself.
pub(super) fn result_leaves(comp: &Computation) -> Vec<InstrId> {
    let root = comp.root_instr();
    if matches!(root.op, Op::Tuple) {
        root.operands.to_vec()
    } else {
        vec![comp.root]
    }
}

/// `base`, or `base.N` for the first `N` no instruction of `comp` is named.
fn unique_name(comp: &Computation, base: &str) -> String {
    if comp.find(base).is_none() {
        return base.to_string();
    }
    (1..)
        .map(|k| format!("{base}.{k}"))
        .find(|name| comp.find(name).is_none())
        .expect("some suffix is free")
}

/// Removes what the root does not read (parameters stay: they are the signature).
pub(super) fn remove_dead(comp: &mut Computation) {
    let mut live = HashSet::new();
    let mut stack = vec![comp.root];
    while let Some(id) = stack.pop() {
        if live.insert(id) {
            let instr = comp.instr(id);
            stack.extend(instr.operands.iter().copied());
            stack.extend(instr.control_predecessors.iter().copied());
        }
    }
    let dead: Vec<InstrId> = comp
        .order()
        .iter()
        .copied()
        .filter(|id| !live.contains(id) && !matches!(comp.instr(*id).op, Op::Parameter { .. }))
        .collect();
    comp.remove(&dead)
        .expect("dead instructions are neither the root nor read by a live one");
}

#[cfg(test)]
mod tests {
    use super::*;
    use xla_ir::literal::{ArrayLiteral, Literal};

    fn parse(text: &str) -> Module {
        xla_ir::parse_module(text).unwrap()
    }

    const FORWARD: &str = "HloModule fwd\n\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n\nENTRY f {\n  w = f32[2] parameter(0)\n  x = f32[2] parameter(1)\n  h = f32[2] multiply(w, x)\n  y = f32[2] tanh(h)\n  z = f32[] constant(0)\n  out = f32[] reduce(y, z), dimensions={0}, to_apply=add\n  ROOT t = (f32[], f32[2]) tuple(out, h)\n}\n";
    const BACKWARD: &str = "HloModule bwd\n\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n\nENTRY b {\n  w = f32[2] parameter(0)\n  h = f32[2] parameter(1)\n  g = f32[] parameter(2)\n  y = f32[2] tanh(h)\n  yy = f32[2] multiply(y, y)\n  one = f32[2] broadcast(f32[] constant(1)), dimensions={}\n  d = f32[2] subtract(one, yy)\n  gb = f32[2] broadcast(g), dimensions={}\n  dh = f32[2] multiply(d, gb)\n  z = f32[] constant(0)\n  s = f32[] reduce(dh, z), dimensions={0}, to_apply=add\n  ROOT t = (f32[2], f32[]) tuple(dh, s)\n}\n";

    fn vector(v: &[f32]) -> Literal {
        Literal::Array(ArrayLiteral::vector_f32(v))
    }

    #[test]
    fn saved_only_keeps_the_saved_values_and_what_they_need() {
        let m = saved_only(&parse(FORWARD), 1);
        xla_ir::verify(&m).unwrap();
        let text = m.to_string();
        assert!(
            !text.contains("reduce("),
            "the output's reduction is gone: {text}"
        );
        assert_eq!(m.entry_computation().parameters().len(), 2);
        let got = xla_ir::eval::evaluate(&m, &[vector(&[2.0, 3.0]), vector(&[0.5, 1.0])]).unwrap();
        assert_eq!(got, Literal::Tuple(vec![vector(&[1.0, 3.0])]));
    }

    #[test]
    fn outputs_only_drops_the_saved_values() {
        let m = outputs_only(&parse(FORWARD), 1);
        xla_ir::verify(&m).unwrap();
        let got = xla_ir::eval::evaluate(&m, &[vector(&[0.0, 0.0]), vector(&[0.5, 1.0])]).unwrap();
        assert_eq!(
            got,
            Literal::Tuple(vec![Literal::Array(ArrayLiteral::scalar_f32(0.0))])
        );
    }

    #[test]
    fn recompute_and_backward_equals_the_backward_pass_on_the_forward_passs_values() {
        let (fwd, bwd) = (parse(FORWARD), parse(BACKWARD));
        let both = recompute_and_backward(&fwd, &bwd, 1, 1, &[]);
        xla_ir::verify(&both).unwrap();
        let (w, x, g) = (
            vector(&[0.3, -0.7]),
            vector(&[1.5, 0.25]),
            Literal::Array(ArrayLiteral::scalar_f32(2.0)),
        );
        let forward = xla_ir::eval::evaluate(&fwd, &[w.clone(), x.clone()]).unwrap();
        let Literal::Tuple(items) = forward else {
            panic!("a tuple")
        };
        let want = xla_ir::eval::evaluate(&bwd, &[w.clone(), items[1].clone(), g.clone()]).unwrap();
        let got = xla_ir::eval::evaluate(&both, &[w, x, g]).unwrap();
        assert_eq!(got, want);
        assert_eq!(both.entry_computation().parameters().len(), 3);
    }

    #[test]
    fn an_op_with_effects_is_named() {
        let m = parse(
            "HloModule m\n\nENTRY e {\n  x = f32[2] parameter(0)\n  ROOT c = f32[2] custom-call(x), custom_call_target=\"Opaque\"\n}\n",
        );
        assert_eq!(stateful_op(&m).as_deref(), Some("c"));
        assert_eq!(stateful_op(&parse(FORWARD)), None);
    }
}
