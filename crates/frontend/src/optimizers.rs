//! Optimisers: how a weight and its slots (momenta, second moments) change given its
//! gradient, written into the training step's graph. The formulas are Keras's (the seed's
//! `tf.keras.optimizers`), with JAX's spelling where the corpus has one.

use crate::ops::{self, Builder};
use xla_ir::builder::BuildError;
use xla_ir::{ElementType, InstrId};

/// An optimiser and its hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Optimizer {
    /// `w - lr * g`.
    Sgd {
        /// Learning rate.
        learning_rate: f64,
    },
    /// Keras `SGD(momentum=m)`: `v = m v - lr g; w = w + v`.
    Momentum {
        /// Learning rate.
        learning_rate: f64,
        /// Momentum.
        momentum: f64,
    },
    /// Adam with bias correction by the step count `t` (carried, starting at 0):
    /// `m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
    /// w = w - lr (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)`.
    Adam {
        /// Learning rate.
        learning_rate: f64,
        /// First-moment decay.
        beta_1: f64,
        /// Second-moment decay.
        beta_2: f64,
        /// Added to the denominator.
        epsilon: f64,
    },
    /// RMSprop: `ms = rho ms + (1-rho) g^2; w = w - lr g / (sqrt(ms) + eps)`.
    RmsProp {
        /// Learning rate.
        learning_rate: f64,
        /// Decay of the mean square.
        rho: f64,
        /// Added to the denominator.
        epsilon: f64,
    },
}

impl Optimizer {
    /// SGD with learning rate `learning_rate`.
    pub fn sgd(learning_rate: f64) -> Optimizer {
        Optimizer::Sgd { learning_rate }
    }

    /// Adam with Keras's defaults but the learning rate (0.9, 0.999, 1e-7).
    pub fn adam(learning_rate: f64) -> Optimizer {
        Optimizer::Adam {
            learning_rate,
            beta_1: 0.9,
            beta_2: 0.999,
            epsilon: 1e-7,
        }
    }

    /// The slots each weight carries, by name (each starts at zeros of the weight's shape).
    pub fn slots(&self) -> &'static [&'static str] {
        match self {
            Optimizer::Sgd { .. } => &[],
            Optimizer::Momentum { .. } => &["velocity"],
            Optimizer::Adam { .. } => &["m", "v"],
            Optimizer::RmsProp { .. } => &["ms"],
        }
    }

    /// Whether the optimiser carries a step count (an `s32` scalar starting at 0).
    pub fn counts_steps(&self) -> bool {
        matches!(self, Optimizer::Adam { .. })
    }

    /// The step count after this step (`t + 1`), for optimisers that count steps.
    pub fn next_step(&self, b: &mut Builder<'_>, t: InstrId) -> Result<InstrId, BuildError> {
        let one = ops::scalar(b, ElementType::S32, 1.0)?;
        b.add(t, one)
    }

    /// The new weight and slots after one step with gradient `g`; `step` is the step count
    /// after [`Optimizer::next_step`] when [`Optimizer::counts_steps`].
    pub fn apply(
        &self,
        b: &mut Builder<'_>,
        w: InstrId,
        g: InstrId,
        slots: &[InstrId],
        step: Option<InstrId>,
    ) -> Result<(InstrId, Vec<InstrId>), BuildError> {
        match *self {
            Optimizer::Sgd { learning_rate } => {
                let d = ops::scale(b, g, learning_rate)?;
                Ok((b.subtract(w, d)?, vec![]))
            }
            Optimizer::Momentum {
                learning_rate,
                momentum,
            } => {
                let kept = ops::scale(b, slots[0], momentum)?;
                let d = ops::scale(b, g, learning_rate)?;
                let v = b.subtract(kept, d)?;
                Ok((b.add(w, v)?, vec![v]))
            }
            Optimizer::Adam {
                learning_rate,
                beta_1,
                beta_2,
                epsilon,
            } => {
                let t = step.expect("Adam's step count: counts_steps() is true");
                let m = decay(b, slots[0], g, beta_1)?;
                let gg = b.multiply(g, g)?;
                let v = decay(b, slots[1], gg, beta_2)?;
                let mh = bias_corrected(b, m, beta_1, t)?;
                let vh = bias_corrected(b, v, beta_2, t)?;
                let lr_m = ops::scale(b, mh, learning_rate)?;
                let root = b.sqrt(vh)?;
                let eps = ops::full_like(b, root, epsilon)?;
                let denom = b.add(root, eps)?;
                let d = b.divide(lr_m, denom)?;
                Ok((b.subtract(w, d)?, vec![m, v]))
            }
            Optimizer::RmsProp {
                learning_rate,
                rho,
                epsilon,
            } => {
                let gg = b.multiply(g, g)?;
                let ms = decay(b, slots[0], gg, rho)?;
                let lr_g = ops::scale(b, g, learning_rate)?;
                let root = b.sqrt(ms)?;
                let eps = ops::full_like(b, root, epsilon)?;
                let denom = b.add(root, eps)?;
                let d = b.divide(lr_g, denom)?;
                Ok((b.subtract(w, d)?, vec![ms]))
            }
        }
    }
}

/// `rate * old + (1 - rate) * new`.
fn decay(
    b: &mut Builder<'_>,
    old: InstrId,
    new: InstrId,
    rate: f64,
) -> Result<InstrId, BuildError> {
    let kept = ops::scale(b, old, rate)?;
    let added = ops::scale(b, new, 1.0 - rate)?;
    b.add(kept, added)
}

/// `x / (1 - rate^t)` with the step count `t` converted to x's type.
fn bias_corrected(
    b: &mut Builder<'_>,
    x: InstrId,
    rate: f64,
    t: InstrId,
) -> Result<InstrId, BuildError> {
    let et = ops::element_type(b, x);
    let tf = b.convert(t, et)?;
    let r = ops::scalar(b, et, rate)?;
    let p = b.power(r, tf)?;
    let one = ops::scalar(b, et, 1.0)?;
    let c = b.subtract(one, p)?;
    let d = ops::dims(b, x);
    let cb = ops::broadcast_into(b, c, &d, &[])?;
    b.divide(x, cb)
}
