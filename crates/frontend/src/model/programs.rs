//! The step programs a model runs: a training step (forward, loss, gradients, cross-replica
//! mean, accumulation, the optimiser), an evaluation step (loss and correct count) and a
//! prediction step, each one iteration of a device loop.

use super::{Model, ModelError, NodeOp};
use crate::autodiff::grad;
use crate::device::StepProgram;
use crate::ops::{self, Builder};
use xla_ir::alias::{AliasKind, OutputAlias};
use xla_ir::attributes::ComparisonDirection;
use xla_ir::builder::ModuleBuilder;
use xla_ir::{ElementType, InstrId, Shape};

/// What a training step carries, in parameter (and result) order.
#[derive(Debug, Clone, Copy)]
pub(super) struct CarriedLayout {
    pub weights: usize,
    pub trainable: usize,
    pub slots_per_weight: usize,
    pub step: bool,
    pub accumulating: bool,
}

impl CarriedLayout {
    /// Carried parameters in all.
    pub fn count(&self) -> usize {
        let t = self.trainable;
        self.weights
            + t * self.slots_per_weight
            + usize::from(self.step)
            + if self.accumulating { t + 1 } else { 0 }
    }
}

impl Model {
    /// The forward pass on `x` with the weights as `w` (in the model's order); nodes in
    /// pipeline stages are marked with their stage.
    pub(super) fn forward(
        &self,
        b: &mut Builder<'_>,
        x: InstrId,
        w: &[InstrId],
        training: bool,
    ) -> Result<InstrId, ModelError> {
        Ok(self.forward_with_updates(b, x, w, training)?.0)
    }

    /// [`Self::forward`] and the new values of non-trainable weights (by index in the
    /// model's weights; a layer applied twice updates with its last application).
    pub(super) fn forward_with_updates(
        &self,
        b: &mut Builder<'_>,
        x: InstrId,
        w: &[InstrId],
        training: bool,
    ) -> Result<(InstrId, Vec<(usize, InstrId)>), ModelError> {
        let mut updates = Vec::new();
        let mut values = vec![x];
        for (k, node) in self.nodes.iter().enumerate().skip(1) {
            let ins: Vec<InstrId> = node.inputs.iter().map(|t| values[t.0]).collect();
            let op = node.op;
            let mut call = |b: &mut Builder<'_>| -> Result<InstrId, xla_ir::builder::BuildError> {
                match op {
                    NodeOp::Input => unreachable!("node 0 is the only input"),
                    NodeOp::Layer(l) => {
                        let layer = &self.layers[l];
                        let range = layer.weights.clone();
                        let called = layer.layer.call_with_updates(
                            b,
                            ins[0],
                            &w[range.clone()],
                            training,
                        )?;
                        for (k, v) in called.updates {
                            updates.retain(|(i, _)| *i != range.start + k);
                            updates.push((range.start + k, v));
                        }
                        Ok(called.value)
                    }
                    NodeOp::Add => b.add(ins[0], ins[1]),
                    NodeOp::Concatenate(axis) => b.concatenate(&ins, axis),
                }
            };
            let v = match &self.stages {
                Some(stages) => b.with_frontend_attribute(
                    crate::scopes::PIPELINE_STAGE,
                    stages[k - 1].to_string(),
                    call,
                )?,
                None => call(b)?,
            };
            values.push(v);
        }
        Ok((values[self.output.0], updates))
    }

    fn weight_params(&self, b: &mut Builder<'_>) -> Result<Vec<InstrId>, ModelError> {
        let mut out = Vec::with_capacity(self.weights.len());
        for (k, w) in self.weights.iter().enumerate() {
            let name = w.name.replace('/', ".");
            out.push(b.parameter(k as u64, Shape::Array(w.value.shape.clone()), &name)?);
        }
        Ok(out)
    }

    fn data_params(
        &self,
        b: &mut Builder<'_>,
        first: u64,
        batch: i64,
        with_target: bool,
    ) -> Result<(InstrId, Option<InstrId>), ModelError> {
        let mut xd = vec![batch];
        xd.extend(&self.input);
        let x = b.parameter(first, Shape::array(self.input_type, &xd), "x")?;
        if !with_target {
            return Ok((x, None));
        }
        let loss = self.training()?.options.loss;
        let (t, td) = loss.target(&self.output_dims(batch));
        let y = b.parameter(first + 1, Shape::array(t, &td), "y")?;
        Ok((x, Some(y)))
    }

    /// The training step for micro-batches of `batch` examples.
    pub(super) fn train_program(&self, batch: i64) -> Result<StepProgram, ModelError> {
        let tr = self.training()?;
        let opt = tr.options.optimizer;
        let layout = self.carried_layout()?;
        let n = self.weights.len();
        let mut b = ModuleBuilder::entry(format!("{}_train_step", self.name), "train_step");
        let w = self.weight_params(&mut b)?;
        let mut next = n as u64;
        let mut param = |b: &mut Builder<'_>, shape: Shape, name: String| {
            let p = b.parameter(next, shape, &name);
            next += 1;
            p
        };
        let trainable: Vec<usize> = (0..n).filter(|&k| self.weights[k].trainable).collect();
        let mut slots = Vec::with_capacity(trainable.len());
        for &k in &trainable {
            let weight = &self.weights[k];
            let mut mine = Vec::new();
            for s in opt.slots() {
                let name = format!("{}.{s}", weight.name.replace('/', "."));
                mine.push(param(
                    &mut b,
                    Shape::Array(weight.value.shape.clone()),
                    name,
                )?);
            }
            slots.push(mine);
        }
        let step = if layout.step {
            Some(param(
                &mut b,
                Shape::scalar(ElementType::S32),
                "step".into(),
            )?)
        } else {
            None
        };
        let mut acc = Vec::new();
        let mut micro = None;
        if layout.accumulating {
            for &k in &trainable {
                let weight = &self.weights[k];
                let name = format!("{}.accumulated", weight.name.replace('/', "."));
                acc.push(param(
                    &mut b,
                    Shape::Array(weight.value.shape.clone()),
                    name,
                )?);
            }
            micro = Some(param(
                &mut b,
                Shape::scalar(ElementType::S32),
                "micro_batch".into(),
            )?);
        }
        let first_data = next;
        let (x, y) = self.data_params(&mut b, first_data, batch, true)?;
        let y = y.expect("asked for the target");
        let (out, updates) = self.forward_with_updates(&mut b, x, &w, true)?;
        let loss = tr.options.loss.build(&mut b, out, y)?;
        let wrt: Vec<InstrId> = trainable.iter().map(|&k| w[k]).collect();
        let mut grads = grad(&mut b, loss, &wrt)?;
        let mut reported = loss;
        // Non-trainable weights: their layers' updates, or as they were.
        let mut new_w: Vec<InstrId> = w.clone();
        for (k, v) in updates {
            let float = ops::element_type(&b, v).is_float();
            new_w[k] = if tr.replicas > 1 && float {
                // Moving statistics stay the same on every replica: their mean.
                ops::cross_replica_mean(&mut b, v, tr.replicas)?
            } else {
                v
            };
        }
        if tr.replicas > 1 {
            // Data parallelism: every replica applies the mean of the replicas' gradients.
            for g in grads.iter_mut() {
                *g = ops::cross_replica_mean(&mut b, *g, tr.replicas)?;
            }
            reported = ops::cross_replica_mean(&mut b, loss, tr.replicas)?;
        }
        let mut new_slots = Vec::new();
        let mut tail: Vec<InstrId> = Vec::new();
        if let (Some(micro), true) = (micro, layout.accumulating) {
            let ga = tr.gradient_accumulation as f64;
            let one = ops::scalar(&mut b, ElementType::S32, 1.0)?;
            let count = b.add(micro, one)?;
            let due = ops::scalar(&mut b, ElementType::S32, ga)?;
            let apply = b.compare(count, due, ComparisonDirection::Eq, None)?;
            let stepped = match step {
                Some(t) => Some(opt.next_step(&mut b, t)?),
                None => None,
            };
            let mut new_acc = Vec::with_capacity(trainable.len());
            for (j, &k) in trainable.iter().enumerate() {
                let total = b.add(acc[j], grads[j])?;
                let mean = ops::scale(&mut b, total, 1.0 / ga)?;
                let (uw, us) = opt.apply(&mut b, w[k], mean, &slots[j], stepped)?;
                new_w[k] = choose(&mut b, apply, uw, w[k])?;
                for (s, &old) in us.into_iter().zip(&slots[j]) {
                    new_slots.push(choose(&mut b, apply, s, old)?);
                }
                let zero = ops::zeros_like(&mut b, total)?;
                new_acc.push(choose(&mut b, apply, zero, total)?);
            }
            if let (Some(t), Some(st)) = (step, stepped) {
                tail.push(b.select(apply, st, t)?);
            }
            tail.extend(new_acc);
            let zero = ops::scalar(&mut b, ElementType::S32, 0.0)?;
            tail.push(b.select(apply, zero, count)?);
        } else {
            let stepped = match step {
                Some(t) => Some(opt.next_step(&mut b, t)?),
                None => None,
            };
            for (j, &k) in trainable.iter().enumerate() {
                let (uw, us) = opt.apply(&mut b, w[k], grads[j], &slots[j], stepped)?;
                new_w[k] = uw;
                new_slots.extend(us);
            }
            tail.extend(stepped);
        }
        let mut results: Vec<InstrId> = Vec::with_capacity(layout.count() + 1);
        results.extend(new_w);
        results.extend(new_slots);
        results.extend(tail);
        results.push(reported);
        let root = b.tuple(&results)?;
        let mut module = b.finish_module(root)?;
        let carried = layout.count();
        module.input_output_alias = (0..carried)
            .map(|k| OutputAlias {
                output: vec![k as i64],
                parameter: k as i64,
                parameter_index: vec![],
                kind: AliasKind::MayAlias,
            })
            .collect();
        if tr.replicas > 1 {
            module.replica_count = Some(tr.replicas as i64);
        }
        xla_ir::verify(&module).map_err(xla_ir::builder::BuildError::from)?;
        let params = carried + 2;
        Ok(StepProgram {
            module,
            iterations: tr.options.steps_per_execution,
            fed: (0..params).map(|k| k >= carried).collect(),
            carried: (0..params).map(|k| (k < carried).then_some(k)).collect(),
            replicas: tr.replicas,
        })
    }

    /// The evaluation step: the loss and (for class labels) the number of correct examples
    /// of a batch, weights constant.
    pub(super) fn evaluate_program(
        &self,
        batch: i64,
        iterations: u64,
    ) -> Result<StepProgram, ModelError> {
        let tr = self.training()?;
        let mut b = ModuleBuilder::entry(format!("{}_evaluate_step", self.name), "evaluate_step");
        let w = self.weight_params(&mut b)?;
        let (x, y) = self.data_params(&mut b, w.len() as u64, batch, true)?;
        let y = y.expect("asked for the target");
        let out = self.forward(&mut b, x, &w, false)?;
        let loss = tr.options.loss.build(&mut b, out, y)?;
        let mut results = vec![loss];
        results.extend(tr.options.loss.correct(&mut b, out, y)?);
        let root = b.tuple(&results)?;
        let module = b.finish_module(root)?;
        let params = w.len() + 2;
        Ok(StepProgram {
            module,
            iterations,
            fed: (0..params).map(|k| k >= w.len()).collect(),
            carried: vec![None; params],
            replicas: 1,
        })
    }

    /// The prediction step: the model's outputs for a batch.
    pub(super) fn predict_program(
        &self,
        batch: i64,
        iterations: u64,
    ) -> Result<StepProgram, ModelError> {
        let mut b = ModuleBuilder::entry(format!("{}_predict_step", self.name), "predict_step");
        let w = self.weight_params(&mut b)?;
        let (x, _) = self.data_params(&mut b, w.len() as u64, batch, false)?;
        let out = self.forward(&mut b, x, &w, false)?;
        let root = b.tuple(&[out])?;
        let module = b.finish_module(root)?;
        let params = w.len() + 1;
        Ok(StepProgram {
            module,
            iterations,
            fed: (0..params).map(|k| k >= w.len()).collect(),
            carried: vec![None; params],
            replicas: 1,
        })
    }
}

/// `if apply { a } else { b }` for arrays, the predicate broadcast to their shape.
fn choose(
    b: &mut Builder<'_>,
    apply: InstrId,
    a: InstrId,
    otherwise: InstrId,
) -> Result<InstrId, ModelError> {
    let d = ops::dims(b, a);
    let p = ops::broadcast_into(b, apply, &d, &[])?;
    Ok(b.select(p, a, otherwise)?)
}
