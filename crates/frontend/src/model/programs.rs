//! The step programs a model runs: a training step (forward, loss, gradients, cross-replica
//! mean, accumulation, the optimiser), an evaluation step (loss and correct count) and a
//! prediction step, each one iteration of a device loop.

use super::{ModelError, Sequential};
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
    pub slots_per_weight: usize,
    pub step: bool,
    pub accumulating: bool,
}

impl CarriedLayout {
    /// Carried parameters in all.
    pub fn count(&self) -> usize {
        let w = self.weights;
        w + w * self.slots_per_weight
            + usize::from(self.step)
            + if self.accumulating { w + 1 } else { 0 }
    }
}

impl Sequential {
    /// The forward pass on `x` with the weights as `w` (in the model's order); layers in
    /// pipeline stages are marked with their stage.
    pub(super) fn forward(
        &self,
        b: &mut Builder<'_>,
        x: InstrId,
        w: &[InstrId],
        training: bool,
    ) -> Result<InstrId, ModelError> {
        let mut h = x;
        for (k, layer) in self.layers.iter().enumerate() {
            let mine = &w[layer.weights.clone()];
            let call = |b: &mut Builder<'_>| layer.layer.call(b, h, mine, training);
            h = match &self.stages {
                Some(stages) => {
                    b.with_frontend_attribute("ipu_stage", stages[k].to_string(), call)?
                }
                None => call(b)?,
            };
        }
        Ok(h)
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
        let mut slots = Vec::with_capacity(n);
        for (k, weight) in self.weights.iter().enumerate() {
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
            let _ = k;
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
            for weight in &self.weights {
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
        let out = self.forward(&mut b, x, &w, true)?;
        let loss = tr.options.loss.build(&mut b, out, y)?;
        let mut grads = grad(&mut b, loss, &w)?;
        let mut reported = loss;
        if tr.replicas > 1 {
            // Data parallelism: every replica applies the mean of the replicas' gradients.
            for g in grads.iter_mut() {
                *g = ops::cross_replica_mean(&mut b, *g, tr.replicas)?;
            }
            reported = ops::cross_replica_mean(&mut b, loss, tr.replicas)?;
        }
        let mut results: Vec<InstrId> = Vec::with_capacity(layout.count() + 1);
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
            let mut new_w = Vec::with_capacity(n);
            let mut new_slots = Vec::new();
            let mut new_acc = Vec::with_capacity(n);
            for k in 0..n {
                let total = b.add(acc[k], grads[k])?;
                let mean = ops::scale(&mut b, total, 1.0 / ga)?;
                let (uw, us) = opt.apply(&mut b, w[k], mean, &slots[k], stepped)?;
                new_w.push(choose(&mut b, apply, uw, w[k])?);
                for (s, &old) in us.into_iter().zip(&slots[k]) {
                    new_slots.push(choose(&mut b, apply, s, old)?);
                }
                let zero = ops::zeros_like(&mut b, total)?;
                new_acc.push(choose(&mut b, apply, zero, total)?);
            }
            results.extend(new_w);
            results.extend(new_slots);
            if let (Some(t), Some(st)) = (step, stepped) {
                results.push(b.select(apply, st, t)?);
            }
            results.extend(new_acc);
            let zero = ops::scalar(&mut b, ElementType::S32, 0.0)?;
            results.push(b.select(apply, zero, count)?);
        } else {
            let stepped = match step {
                Some(t) => Some(opt.next_step(&mut b, t)?),
                None => None,
            };
            let mut new_slots = Vec::new();
            for k in 0..n {
                let (uw, us) = opt.apply(&mut b, w[k], grads[k], &slots[k], stepped)?;
                results.push(uw);
                new_slots.extend(us);
            }
            results.extend(new_slots);
            results.extend(stepped);
        }
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
