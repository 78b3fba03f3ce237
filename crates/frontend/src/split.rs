//! Training pipelines from a loss module: an HLO entry computation `(weights..., micro-batch
//! inputs...) -> loss` whose instructions are in pipeline stages (`ipu_stage`) is split into
//! the stages' forward computations and, by [`autodiff`](crate::autodiff), their backward
//! computations: no gradient has to be written or marked by hand.
//!
//! Stage `s` computes its instructions from its weights (the trained parameters it reads),
//! the values of stage `s - 1` it reads, and the micro-batch inputs; the micro-batch enters
//! stage 0 and is passed on to the last stage that reads it. Constants are built again in
//! every stage that reads them. A stage's backward computation runs its forward again from
//! the saved inputs, then its vector-Jacobian product.

use crate::autodiff::{AutodiffError, grad, vjp_many};
use crate::device::PipelineStage;
use std::collections::HashMap;
use xla_ir::builder::{BuildError, ComputationBuilder, ModuleBuilder};
use xla_ir::{InstrId, Module, Op, Shape};

/// Why a loss module could not be split into training stages.
#[derive(Debug, thiserror::Error)]
pub enum SplitError {
    /// The module breaks a pipeline rule (instruction and stages named).
    #[error("{0}")]
    Rule(String),
    /// Building a stage's computation failed.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// Differentiating a stage failed.
    #[error(transparent)]
    Autodiff(#[from] AutodiffError),
}

/// Where a stage's input comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// A value computed by the previous stage.
    Value(InstrId),
    /// A micro-batch parameter.
    Data(InstrId),
}

/// A loss module split into training stages.
#[derive(Debug, Clone)]
pub struct Split {
    /// The stages, in order.
    pub stages: Vec<PipelineStage>,
    /// Per stage, the entry parameter numbers of its weights (in the order its computations
    /// take them).
    pub weights: Vec<Vec<usize>>,
    /// The entry parameter numbers of the micro-batch inputs (stage 0's inputs, in order).
    pub data: Vec<usize>,
}

/// Splits `module`'s entry into training stages: `stage_of` gives every instruction's stage
/// (the compiler's propagation), `trained[p]` says whether parameter `p` is a weight (else
/// a micro-batch input). The entry's root must be a float scalar (the loss) in the last
/// stage.
pub fn training_stages(
    module: &Module,
    stage_of: &HashMap<InstrId, usize>,
    trained: &[bool],
) -> Result<Split, SplitError> {
    let comp = module.entry_computation();
    let rule = |m: String| SplitError::Rule(m);
    let root = comp.instr(comp.root);
    if !root
        .shape
        .as_array()
        .is_some_and(|a| a.dims.is_empty() && a.element_type.is_float())
    {
        return Err(rule(format!(
            "the root '{}' is {}: a training pipeline's module returns its loss, a float scalar",
            root.name, root.shape
        )));
    }
    let params = comp.parameters();
    if params.len() != trained.len() {
        return Err(rule(format!(
            "{} parameters but {} weight flags",
            params.len(),
            trained.len()
        )));
    }
    let param_number: HashMap<InstrId, usize> =
        params.iter().enumerate().map(|(k, &p)| (p, k)).collect();
    // Values computed from constants alone (JAX's broadcast zeros, ...): built again in
    // every stage that reads them.
    let mut constant: std::collections::HashSet<InstrId> = std::collections::HashSet::new();
    for &i in comp.order() {
        let instr = comp.instr(i);
        if !matches!(instr.op, Op::Parameter { .. })
            && instr.operands.iter().all(|o| constant.contains(o))
            && instr.op.called_computations().is_empty()
        {
            constant.insert(i);
        }
    }
    let free = |i: InstrId| constant.contains(&i);
    let stage = |i: InstrId| stage_of.get(&i).copied().unwrap_or(0);
    let count = comp
        .order()
        .iter()
        .filter(|&&i| !param_number.contains_key(&i) && !free(i))
        .map(|&i| stage(i))
        .max()
        .unwrap_or(0)
        + 1;
    if stage(comp.root) + 1 != count {
        return Err(rule(format!(
            "the loss '{}' is in stage {} but the last stage is {}: the loss ends the pipeline",
            root.name,
            stage(comp.root),
            count - 1
        )));
    }
    // What each stage computes and reads.
    let mut body: Vec<Vec<InstrId>> = vec![Vec::new(); count];
    for &i in comp.order() {
        if !param_number.contains_key(&i) && !free(i) {
            body[stage(i)].push(i);
        }
    }
    let mut weights: Vec<Vec<InstrId>> = vec![Vec::new(); count];
    let mut weight_stage: HashMap<InstrId, usize> = HashMap::new();
    let mut values_in: Vec<Vec<InstrId>> = vec![Vec::new(); count];
    let mut last_data_reader: HashMap<InstrId, usize> = HashMap::new();
    for (s, list) in body.iter().enumerate() {
        for &i in list {
            for &o in comp.instr(i).operands.iter() {
                if let Some(&p) = param_number.get(&o) {
                    if trained[p] {
                        if let Some(&t) = weight_stage.get(&o)
                            && t != s
                        {
                            return Err(rule(format!(
                                "weight '{}' is read by stages {t} and {s}: a weight lives on its stage's IPU (read it in one stage)",
                                comp.instr(o).name
                            )));
                        }
                        if weight_stage.insert(o, s).is_none() {
                            weights[s].push(o);
                        }
                    } else {
                        let e = last_data_reader.entry(o).or_insert(s);
                        *e = (*e).max(s);
                    }
                } else if !free(o) && stage(o) != s {
                    let t = stage(o);
                    if t + 1 != s {
                        return Err(rule(format!(
                            "'{}' (stage {s}) reads '{}' of stage {t}: a stage reads only the stage before it (pass the value on through the stages in between)",
                            comp.instr(i).name,
                            comp.instr(o).name
                        )));
                    }
                    if !values_in[s].contains(&o) {
                        values_in[s].push(o);
                    }
                }
            }
        }
    }
    for list in &mut weights {
        list.sort_by_key(|w| param_number[w]);
    }
    let data: Vec<InstrId> = params
        .iter()
        .copied()
        .filter(|p| !trained[param_number[p]])
        .collect();
    // Stage s's inputs: float values of stage s-1, other values, then the data it or a later
    // stage reads (all the data for stage 0).
    let is_float = |i: InstrId| {
        comp.instr(i)
            .shape
            .as_array()
            .is_some_and(|a| a.element_type.is_float())
    };
    let mut inputs: Vec<Vec<Source>> = Vec::with_capacity(count);
    let mut gradients = Vec::with_capacity(count);
    for (s, read) in values_in.iter().enumerate() {
        let mut list: Vec<Source> = Vec::new();
        let (float, other): (Vec<InstrId>, Vec<InstrId>) = read.iter().partition(|&&v| is_float(v));
        gradients.push(if s == 0 { 0 } else { float.len() });
        list.extend(float.into_iter().map(Source::Value));
        list.extend(other.into_iter().map(Source::Value));
        for &d in &data {
            if s == 0 || last_data_reader.get(&d).is_some_and(|&t| t >= s) {
                list.push(Source::Data(d));
            }
        }
        inputs.push(list);
    }
    let mut stages = Vec::with_capacity(count);
    for s in 0..count {
        let outputs: Vec<Source> = if s + 1 == count {
            Vec::new()
        } else {
            inputs[s + 1].clone()
        };
        stages.push(build_stage(
            module,
            s,
            (&weights[s], &inputs[s]),
            &body[s],
            &outputs,
            gradients.get(s + 1).copied().unwrap_or(0),
            gradients[s],
        )?);
    }
    Ok(Split {
        stages,
        weights: weights
            .iter()
            .map(|list| list.iter().map(|w| param_number[w]).collect())
            .collect(),
        data: data.iter().map(|d| param_number[d]).collect(),
    })
}

/// The parameters (weights, then inputs) and the body of a stage, built into `b`: the
/// weights' and inputs' parameters and where every source instruction went.
type Emitted = (Vec<InstrId>, Vec<InstrId>, HashMap<InstrId, InstrId>);

fn emit_stage(
    b: &mut ComputationBuilder<'_>,
    comp: &xla_ir::Computation,
    (weights, inputs): (&[InstrId], &[Source]),
    body: &[InstrId],
) -> Result<Emitted, BuildError> {
    let mut map: HashMap<InstrId, InstrId> = HashMap::new();
    let prefix = &comp.name;
    let mut w = Vec::new();
    for (k, &p) in weights.iter().enumerate() {
        let instr = comp.instr(p);
        let id = b.parameter(
            k as u64,
            plain(&instr.shape),
            &format!("{prefix}.{}", instr.name),
        )?;
        map.insert(p, id);
        w.push(id);
    }
    let mut ins = Vec::new();
    for (k, src) in inputs.iter().enumerate() {
        let (Source::Value(v) | Source::Data(v)) = *src;
        let instr = comp.instr(v);
        let name = format!("{prefix}.{}", instr.name);
        let id = b.parameter((weights.len() + k) as u64, plain(&instr.shape), &name)?;
        map.insert(v, id);
        ins.push(id);
    }
    for &i in body {
        let instr = comp.instr(i);
        let mut operands = Vec::with_capacity(instr.operands.len());
        for &o in instr.operands.iter() {
            operands.push(rematerialise(b, comp, o, &mut map)?);
        }
        let id = b.add_instruction(instr.op.clone(), &operands, Some(instr.shape.clone()))?;
        map.insert(i, id);
    }
    Ok((w, ins, map))
}

/// `shape` with the default layout: what the stages' computations pass each other.
fn plain(shape: &Shape) -> Shape {
    match shape.as_array() {
        Some(a) => Shape::array(a.element_type, &a.dims),
        None => shape.clone(),
    }
}

/// `o`'s value in the stage: mapped already, or (a value computed from constants alone)
/// built again here with its operands.
fn rematerialise(
    b: &mut ComputationBuilder<'_>,
    comp: &xla_ir::Computation,
    o: InstrId,
    map: &mut HashMap<InstrId, InstrId>,
) -> Result<InstrId, BuildError> {
    if let Some(&m) = map.get(&o) {
        return Ok(m);
    }
    let c = comp.instr(o);
    let mut operands = Vec::with_capacity(c.operands.len());
    for &x in c.operands.iter() {
        operands.push(rematerialise(b, comp, x, map)?);
    }
    let id = b.add_instruction(c.op.clone(), &operands, Some(c.shape.clone()))?;
    map.insert(o, id);
    Ok(id)
}

/// A module of `module`'s computations (its reducers, bodies, ...) whose entry `build`
/// writes: the stage computation, alone with what it calls.
fn stage_module(
    module: &Module,
    name: String,
    build: impl FnOnce(&mut ComputationBuilder<'_>) -> Result<InstrId, SplitError>,
) -> Result<Module, SplitError> {
    let mut base = module.clone();
    base.input_output_alias.clear();
    base.entry_computation_layout = None;
    let mut mb = ModuleBuilder::extend(base);
    let mut b = mb.computation(name.clone());
    let root = build(&mut b)?;
    let entry = b.finish(root)?;
    let mut m = mb.into_module();
    m.entry = entry;
    m.name = name;
    m.retain_reachable();
    xla_ir::verify(&m).map_err(BuildError::from)?;
    Ok(m)
}

/// Stage `s`'s forward and backward computations.
fn build_stage(
    module: &Module,
    s: usize,
    (weights, inputs): (&[InstrId], &[Source]),
    body: &[InstrId],
    outputs: &[Source],
    next_gradients: usize,
    gradients: usize,
) -> Result<PipelineStage, SplitError> {
    let comp = module.entry_computation();
    let last = outputs.is_empty();
    let value_of = |map: &HashMap<InstrId, InstrId>, src: &Source| {
        let (Source::Value(v) | Source::Data(v)) = *src;
        map[&v]
    };
    // Forward: (weights, inputs) -> (outputs | loss, saved inputs).
    let forward = stage_module(module, format!("{}.stage{s}.forward", comp.name), |b| {
        let (_, ins, map) = emit_stage(b, comp, (weights, inputs), body)?;
        let mut results: Vec<InstrId> = if last {
            vec![map[&comp.root]]
        } else {
            outputs
                .iter()
                .map(|o| b.copy(value_of(&map, o)))
                .collect::<Result<_, _>>()?
        };
        for &i in &ins {
            results.push(b.copy(i)?);
        }
        Ok(b.tuple(&results)?)
    })?;
    // Backward: (weights, saved inputs, gradients of the next stage's float inputs) ->
    // (gradients of this stage's float inputs, of its weights).
    let backward = stage_module(module, format!("{}.stage{s}.backward", comp.name), |b| {
        let (w, ins, map) = emit_stage(b, comp, (weights, inputs), body)?;
        let wrt: Vec<InstrId> = ins[..gradients].iter().chain(&w).copied().collect();
        let grads = if last {
            grad(b, map[&comp.root], &wrt)?
        } else {
            let mut pairs = Vec::with_capacity(next_gradients);
            for (k, o) in outputs[..next_gradients].iter().enumerate() {
                let y = value_of(&map, o);
                let shape: Shape = plain(b.shape(y));
                let at = (weights.len() + inputs.len() + k) as u64;
                let g = b.parameter(at, shape, &format!("{}.gradient{k}", comp.name))?;
                pairs.push((y, g));
            }
            vjp_many(b, &pairs, &wrt)?
        };
        Ok(b.tuple(&grads)?)
    })?;
    Ok(PipelineStage {
        forward,
        backward,
        weights: weights.len(),
        saved: inputs.len(),
        gradients,
    })
}
