//! A worked training pipeline: a multi-layer perceptron with one dense layer per stage
//! (ReLU between layers), a squared-error loss summed over the batch in the last stage, and
//! its gradients written out by hand, as a frontend's autodiff would produce them.
//!
//! Stage `s` of `n`: weights `W_s: f32[d_s, d_{s+1}]`; inputs `(x: f32[b, d_s], y:
//! f32[b, d_n])` (the labels ride along to the last stage). Stages before the last compute
//! `h = relu(x W_s)` and pass on `(h, y)`, saving `(x, h)`; the last computes
//! `loss = ½ Σ (x W - y)²` and saves `(x, y)`.

use compiler::training_pipeline::TrainingStage;
use xla_ir::attributes::ComparisonDirection;
use xla_ir::builder::{BuildError, ComputationBuilder, ModuleBuilder};
use xla_ir::ids::InstrId;
use xla_ir::literal::ArrayLiteral;
use xla_ir::op::BinaryOp;
use xla_ir::{ElementType, Module, Shape};

fn f32s(dims: &[i64]) -> Shape {
    Shape::array(ElementType::F32, dims)
}

fn zeros_like(c: &mut ComputationBuilder<'_>, dims: &[i64]) -> Result<InstrId, BuildError> {
    let z = c.constant(ArrayLiteral::scalar_f32(0.0))?;
    c.broadcast(z, dims, &[])
}

/// `a · bᵀ` and `aᵀ · b` for 2-D arrays.
fn dot_bt(c: &mut ComputationBuilder<'_>, a: InstrId, b: InstrId) -> Result<InstrId, BuildError> {
    let bt = c.transpose(b, &[1, 0])?;
    c.dot(a, bt)
}

fn dot_at(c: &mut ComputationBuilder<'_>, a: InstrId, b: InstrId) -> Result<InstrId, BuildError> {
    let at = c.transpose(a, &[1, 0])?;
    c.dot(at, b)
}

fn module(
    name: &str,
    build: impl FnOnce(&mut ComputationBuilder<'_>) -> Result<InstrId, BuildError>,
) -> Result<Module, BuildError> {
    let mut mb = ModuleBuilder::new(name);
    let mut c = mb.computation("main");
    let root = build(&mut c)?;
    let entry = c.finish(root)?;
    mb.finish(entry)
}

/// The stages of an MLP with layer widths `widths` (`widths.len() - 1` stages) on
/// micro-batches of `batch` rows.
pub fn mlp_stages(widths: &[i64], batch: i64) -> Result<Vec<TrainingStage>, BuildError> {
    let n = widths.len().saturating_sub(1);
    let labels = [batch, widths[n]];
    let mut stages = Vec::with_capacity(n);
    for s in 0..n {
        let (din, dout) = (widths[s], widths[s + 1]);
        let last = s + 1 == n;
        let forward = module(&format!("stage{s}_forward"), |c| {
            let w = c.parameter(0, f32s(&[din, dout]), "w")?;
            let x = c.parameter(1, f32s(&[batch, din]), "x")?;
            let y = c.parameter(2, f32s(&labels), "y")?;
            let z = c.dot(x, w)?;
            if last {
                let diff = c.subtract(z, y)?;
                let sq = c.multiply(diff, diff)?;
                let zero = c.constant(ArrayLiteral::scalar_f32(0.0))?;
                let add = c.scalar_binary_computation("sum", BinaryOp::Add, ElementType::F32)?;
                let total = c.reduce(&[sq], &[zero], &[0, 1], add)?;
                let half = c.constant(ArrayLiteral::scalar_f32(0.5))?;
                let loss = c.multiply(total, half)?;
                c.tuple(&[loss, x, y])
            } else {
                let zeros = zeros_like(c, &[batch, dout])?;
                let h = c.maximum(z, zeros)?;
                c.tuple(&[h, y, x, h])
            }
        })?;
        let backward = module(&format!("stage{s}_backward"), |c| {
            let w = c.parameter(0, f32s(&[din, dout]), "w")?;
            let x = c.parameter(1, f32s(&[batch, din]), "x")?;
            let gz = if last {
                let y = c.parameter(2, f32s(&labels), "y")?;
                let z = c.dot(x, w)?;
                c.subtract(z, y)?
            } else {
                let h = c.parameter(2, f32s(&[batch, dout]), "h")?;
                let gh = c.parameter(3, f32s(&[batch, dout]), "gh")?;
                let zeros = zeros_like(c, &[batch, dout])?;
                let on = c.compare(h, zeros, ComparisonDirection::Gt, None)?;
                c.select(on, gh, zeros)?
            };
            let gw = dot_at(c, x, gz)?;
            if s == 0 {
                c.tuple(&[gw])
            } else {
                let gx = dot_bt(c, gz, w)?;
                c.tuple(&[gx, gw])
            }
        })?;
        stages.push(TrainingStage {
            forward,
            backward,
            weights: 1,
            saved: 2,
            gradients: usize::from(s > 0),
        });
    }
    Ok(stages)
}
