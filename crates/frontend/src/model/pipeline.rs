//! Training a model whose layers are in pipeline stages as a training pipeline: each stage's
//! forward computation (its layers; the last stage's loss) and backward computation (the
//! forward again from the saved inputs, then its vector-Jacobian product), and per stage an
//! SGD update of the summed gradients. Stage k runs on IPU k.

use super::{Model, ModelError, NodeOp};
use crate::autodiff::{grad, vjp};
use crate::device::{PipelineProgram, PipelineStage};
use crate::ops::{self, Builder};
use crate::optimizers::Optimizer;
use xla_ir::builder::ModuleBuilder;
use xla_ir::{InstrId, Module, Shape};

impl Model {
    /// Why this model cannot train as a pipeline, if it cannot.
    fn pipeline_refusal(&self) -> Option<String> {
        let tr = self.training.as_ref()?;
        if !matches!(tr.options.optimizer, Optimizer::Sgd { .. }) {
            return Some(format!(
                "a pipelined model trains with SGD only (its stages' updates keep no optimiser state yet), not {:?}",
                tr.options.optimizer
            ));
        }
        if tr.replicas > 1 {
            return Some("a pipelined model cannot be replicated yet".into());
        }
        if let Some(w) = self.weights.iter().find(|w| !w.trainable) {
            return Some(format!(
                "weight {} is not trainable: a pipeline's stages hold trainable weights only",
                w.name
            ));
        }
        for (k, node) in self.nodes.iter().enumerate().skip(1) {
            let chained = node.inputs.len() == 1 && node.inputs[0].0 == k - 1;
            if !chained || !matches!(node.op, NodeOp::Layer(_)) {
                return Some(format!(
                    "{} does not take the previous layer's output alone: pipelines train chains of layers",
                    self.node_name(k)
                ));
            }
        }
        None
    }

    /// The training pipeline for micro-batches of `batch`, `repeat_count` runs per
    /// execution.
    pub(super) fn pipeline_program(
        &self,
        batch: i64,
        repeat_count: u64,
    ) -> Result<PipelineProgram, ModelError> {
        if let Some(why) = self.pipeline_refusal() {
            return Err(ModelError::Usage(why));
        }
        let tr = self.training()?;
        let stages = self.stages.as_ref().expect("a pipeline needs stages");
        let count = stages.last().map_or(0, |&s| s + 1);
        let ga = tr.gradient_accumulation;
        if ga < count as u64 {
            return Err(ModelError::Usage(format!(
                "a pipeline of {count} stages needs gradient_accumulation_steps_per_replica of at least {count} (one micro-batch per stage to fill it), it is {ga}"
            )));
        }
        let Optimizer::Sgd { learning_rate } = tr.options.optimizer else {
            unreachable!("refused above");
        };
        let mut out = PipelineProgram {
            stages: Vec::new(),
            updates: Vec::new(),
            gradient_accumulation: ga,
            repeat_count,
        };
        for s in 0..count {
            // Nodes 1.. are the layers in order; node k is in stage stages[k - 1].
            let nodes: Vec<usize> = (1..self.nodes.len())
                .filter(|&k| stages[k - 1] == s)
                .collect();
            let weights: Vec<usize> = nodes
                .iter()
                .flat_map(|&k| match self.nodes[k].op {
                    NodeOp::Layer(l) => self.layers[l].weights.clone(),
                    _ => 0..0,
                })
                .collect();
            let input_dims = {
                let mut d = self.nodes[nodes[0] - 1].dims.clone();
                d[0] = batch;
                d
            };
            let last = s + 1 == count;
            out.stages
                .push(self.stage(s, &nodes, &weights, &input_dims, last)?);
            out.updates
                .push(self.stage_update(s, &weights, learning_rate / ga as f64)?);
        }
        Ok(out)
    }

    /// The weights' and inputs' parameters of a stage's computation.
    fn stage_params(
        &self,
        b: &mut Builder<'_>,
        weights: &[usize],
        input_dims: &[i64],
        first_stage: bool,
    ) -> Result<(Vec<InstrId>, InstrId, InstrId), ModelError> {
        let mut w = Vec::with_capacity(weights.len());
        for (k, &i) in weights.iter().enumerate() {
            let name = self.weights[i].name.replace('/', ".");
            w.push(b.parameter(
                k as u64,
                Shape::Array(self.weights[i].value.shape.clone()),
                &name,
            )?);
        }
        let at = weights.len() as u64;
        let t = if first_stage {
            self.input_type
        } else {
            xla_ir::ElementType::F32
        };
        let h = b.parameter(at, Shape::array(t, input_dims), "h")?;
        let loss = self.training()?.options.loss;
        let (lt, ld) = loss.target(&self.output_dims(input_dims[0]));
        let y = b.parameter(at + 1, Shape::array(lt, &ld), "y")?;
        Ok((w, h, y))
    }

    /// The stage's layers on `h`.
    fn stage_forward(
        &self,
        b: &mut Builder<'_>,
        nodes: &[usize],
        weights: &[usize],
        w: &[InstrId],
        h: InstrId,
    ) -> Result<InstrId, ModelError> {
        let mut v = h;
        for &k in nodes {
            let NodeOp::Layer(l) = self.nodes[k].op else {
                unreachable!("pipelines are chains of layers: checked");
            };
            let layer = &self.layers[l];
            let mine: Vec<InstrId> = layer
                .weights
                .clone()
                .map(|i| {
                    w[weights
                        .iter()
                        .position(|&x| x == i)
                        .expect("a stage weight")]
                })
                .collect();
            v = layer.layer.call(b, v, &mine, true)?;
        }
        Ok(v)
    }

    fn stage(
        &self,
        s: usize,
        nodes: &[usize],
        weights: &[usize],
        input_dims: &[i64],
        last: bool,
    ) -> Result<PipelineStage, ModelError> {
        let loss_kind = self.training()?.options.loss;
        // Forward: (weights, h, y) -> (h', y | loss, saved h, saved y).
        let mut b = ModuleBuilder::entry(format!("{}_stage{s}_forward", self.name), "forward");
        let (w, h, y) = self.stage_params(&mut b, weights, input_dims, s == 0)?;
        let out = self.stage_forward(&mut b, nodes, weights, &w, h)?;
        let mut results = if last {
            vec![loss_kind.build(&mut b, out, y)?]
        } else {
            vec![out, b.copy(y)?]
        };
        results.push(b.copy(h)?);
        results.push(b.copy(y)?);
        let root = b.tuple(&results)?;
        let forward = b.finish_module(root)?;
        // Backward: (weights, saved h, saved y, gradient of h') -> (gradient of h, of weights).
        let mut b = ModuleBuilder::entry(format!("{}_stage{s}_backward", self.name), "backward");
        let (w, h, y) = self.stage_params(&mut b, weights, input_dims, s == 0)?;
        let out = self.stage_forward(&mut b, nodes, weights, &w, h)?;
        let mut wrt = Vec::new();
        if s > 0 {
            wrt.push(h);
        }
        wrt.extend(&w);
        let grads = if last {
            let loss = loss_kind.build(&mut b, out, y)?;
            grad(&mut b, loss, &wrt)?
        } else {
            let gshape = b.shape(out).clone();
            let g = b.parameter(weights.len() as u64 + 2, gshape, "gradient")?;
            vjp(&mut b, out, g, &wrt)?
        };
        let root = b.tuple(&grads)?;
        let backward = b.finish_module(root)?;
        Ok(PipelineStage {
            forward,
            backward,
            weights: weights.len(),
            saved: 2,
            gradients: usize::from(s > 0),
        })
    }

    /// `(weights..., summed gradients...) -> (weights - rate * gradients...)`.
    fn stage_update(&self, s: usize, weights: &[usize], rate: f64) -> Result<Module, ModelError> {
        let mut b = ModuleBuilder::entry(format!("{}_stage{s}_update", self.name), "update");
        let mut w = Vec::new();
        for (k, &i) in weights.iter().enumerate() {
            let shape = Shape::Array(self.weights[i].value.shape.clone());
            w.push(b.parameter(k as u64, shape, &format!("w{k}"))?);
        }
        let mut out = Vec::new();
        for (k, &i) in weights.iter().enumerate() {
            let shape = Shape::Array(self.weights[i].value.shape.clone());
            let g = b.parameter((weights.len() + k) as u64, shape, &format!("g{k}"))?;
            let d = ops::scale(&mut b, g, rate)?;
            out.push(b.subtract(w[k], d)?);
        }
        let root = b.tuple(&out)?;
        Ok(b.finish_module(root)?)
    }
}
