//! Losses and the accuracy metric, as a model's `compile` names them.

use crate::nn;
use crate::ops::{self, Builder};
use xla_ir::attributes::ComparisonDirection;
use xla_ir::builder::BuildError;
use xla_ir::{ElementType, InstrId};

/// A model's loss: the mean over the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// Integer class labels (`s32[batch]`) against class scores: logits
    /// (`from_logits: true`) or probabilities (`false`, clipped to `[1e-7, 1 - 1e-7]` as
    /// Keras clips them).
    SparseCategoricalCrossentropy {
        /// Whether the model's outputs are logits.
        from_logits: bool,
    },
    /// Targets of the output's shape: `mean((y - target)^2)`.
    MeanSquaredError,
}

impl Loss {
    /// The element type and dimensions of the targets for outputs of `output` dims.
    pub fn target(self, output: &[i64]) -> (ElementType, Vec<i64>) {
        match self {
            Loss::SparseCategoricalCrossentropy { .. } => {
                (ElementType::S32, output[..output.len() - 1].to_vec())
            }
            Loss::MeanSquaredError => (ElementType::F32, output.to_vec()),
        }
    }

    /// The loss of outputs `y` against `target`.
    pub fn build(
        self,
        b: &mut Builder<'_>,
        y: InstrId,
        target: InstrId,
    ) -> Result<InstrId, BuildError> {
        match self {
            Loss::SparseCategoricalCrossentropy { from_logits: true } => {
                nn::softmax_cross_entropy(b, y, target)
            }
            Loss::SparseCategoricalCrossentropy { from_logits: false } => {
                let lo = ops::full_like(b, y, 1e-7)?;
                let hi = ops::full_like(b, y, 1.0 - 1e-7)?;
                let p = b.clamp(lo, y, hi)?;
                let logp = b.log(p)?;
                let d = ops::dims(b, y);
                let last = d.len() as i64 - 1;
                let t = ops::element_type(b, y);
                let oh = nn::one_hot(b, target, d[last as usize], t)?;
                let picked = b.multiply(oh, logp)?;
                let per = ops::sum(b, picked, &[last])?;
                let m = ops::mean_all(b, per)?;
                b.negate(m)
            }
            Loss::MeanSquaredError => nn::mean_squared_error(b, y, target),
        }
    }

    /// For class labels: how many of the batch's examples score their label highest (an f32
    /// scalar); `None` for regression losses.
    pub fn correct(
        self,
        b: &mut Builder<'_>,
        y: InstrId,
        target: InstrId,
    ) -> Result<Option<InstrId>, BuildError> {
        let Loss::SparseCategoricalCrossentropy { .. } = self else {
            return Ok(None);
        };
        let d = ops::dims(b, y);
        let last = d.len() as i64 - 1;
        let t = ops::element_type(b, y);
        let oh = nn::one_hot(b, target, d[last as usize], t)?;
        // A label's score: the scores where the one-hot is 1 (others masked to -inf).
        let low = ops::full_like(b, y, f64::NEG_INFINITY)?;
        let one = ops::full_like(b, y, 1.0)?;
        let hit = b.compare(oh, one, ComparisonDirection::Eq, None)?;
        let masked = b.select(hit, y, low)?;
        let label_score = ops::max(b, masked, &[last])?;
        let best = ops::max(b, y, &[last])?;
        let right = b.compare(label_score, best, ComparisonDirection::Ge, None)?;
        let right = b.convert(right, ElementType::F32)?;
        Ok(Some(ops::sum_all(b, right)?))
    }
}
