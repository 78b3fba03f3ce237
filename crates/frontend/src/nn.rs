//! Neural-network functions on graph values, written as JAX writes them (`jax.nn`,
//! `jnp`), so a model built here computes what the same JAX model computes: linear maps,
//! activations, softmax, layer normalisation, one-hot labels and the losses.

use crate::ops::{self, Builder};
use xla_ir::attributes::{ComparisonDirection, DotDims};
use xla_ir::builder::BuildError;
use xla_ir::{ElementType, InstrId, Shape};

/// `x @ w` over x's last dimension (`w` is `[in, out]`), plus `bias` (`[out]`) if given.
pub fn linear(
    b: &mut Builder<'_>,
    x: InstrId,
    w: InstrId,
    bias: Option<InstrId>,
) -> Result<InstrId, BuildError> {
    let rank = ops::dims(b, x).len() as i64;
    let dims = DotDims {
        lhs_contracting: vec![rank - 1],
        rhs_contracting: vec![0],
        ..DotDims::default()
    };
    let y = b.dot_general(x, w, dims, None)?;
    match bias {
        None => Ok(y),
        Some(bias) => add_bias(b, y, bias),
    }
}

/// `y + bias`, `bias` broadcast along y's last dimension.
pub fn add_bias(b: &mut Builder<'_>, y: InstrId, bias: InstrId) -> Result<InstrId, BuildError> {
    let d = ops::dims(b, y);
    let last = d.len() as i64 - 1;
    let bb = ops::broadcast_into(b, bias, &d, &[last])?;
    b.add(y, bb)
}

/// `jax.nn.relu`: `x` where positive, else 0 (its gradient is 0 at 0, as JAX's is).
pub fn relu(b: &mut Builder<'_>, x: InstrId) -> Result<InstrId, BuildError> {
    let zero = ops::zeros_like(b, x)?;
    let positive = b.compare(x, zero, ComparisonDirection::Gt, None)?;
    b.select(positive, x, zero)
}

/// `jax.nn.gelu` (approximate=True, its default): `x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
pub fn gelu(b: &mut Builder<'_>, x: InstrId) -> Result<InstrId, BuildError> {
    let x2 = b.multiply(x, x)?;
    let x3 = b.multiply(x2, x)?;
    let c = ops::scale(b, x3, 0.044715)?;
    let inner = b.add(x, c)?;
    let inner = ops::scale(b, inner, (2.0 / std::f64::consts::PI).sqrt())?;
    let t = b.tanh(inner)?;
    times_half_one_plus(b, x, t)
}

/// `x * (1 + t) / 2`: both GELUs' last step.
fn times_half_one_plus(b: &mut Builder<'_>, x: InstrId, t: InstrId) -> Result<InstrId, BuildError> {
    let one = ops::full_like(b, t, 1.0)?;
    let cdf = b.add(one, t)?;
    let cdf = ops::scale(b, cdf, 0.5)?;
    b.multiply(x, cdf)
}

/// `jax.nn.gelu(x, approximate=False)`: `x/2 (1 + erf(x / sqrt 2))`.
pub fn gelu_exact(b: &mut Builder<'_>, x: InstrId) -> Result<InstrId, BuildError> {
    let s = ops::scale(b, x, std::f64::consts::FRAC_1_SQRT_2)?;
    let e = b.erf(s)?;
    times_half_one_plus(b, x, e)
}

/// `jax.nn.swish` (silu): `x * sigmoid(x)`.
pub fn swish(b: &mut Builder<'_>, x: InstrId) -> Result<InstrId, BuildError> {
    let s = b.logistic(x)?;
    b.multiply(x, s)
}

/// `jax.nn.softmax` over `axis`: `exp(x - stop_gradient(max)) / sum`.
pub fn softmax(b: &mut Builder<'_>, x: InstrId, axis: i64) -> Result<InstrId, BuildError> {
    let d = ops::dims(b, x);
    let m = ops::max(b, x, &[axis])?;
    let m = ops::stop_gradient(b, m)?;
    let mb = ops::broadcast_back(b, m, &d, &[axis])?;
    let shifted = b.subtract(x, mb)?;
    let e = b.exp(shifted)?;
    let s = ops::sum(b, e, &[axis])?;
    let sb = ops::broadcast_back(b, s, &d, &[axis])?;
    b.divide(e, sb)
}

/// `jax.nn.log_softmax` over `axis`: `shifted - log(sum(exp(shifted)))`, with
/// `shifted = x - stop_gradient(max)`.
pub fn log_softmax(b: &mut Builder<'_>, x: InstrId, axis: i64) -> Result<InstrId, BuildError> {
    let d = ops::dims(b, x);
    let m = ops::max(b, x, &[axis])?;
    let m = ops::stop_gradient(b, m)?;
    let mb = ops::broadcast_back(b, m, &d, &[axis])?;
    let shifted = b.subtract(x, mb)?;
    let e = b.exp(shifted)?;
    let s = ops::sum(b, e, &[axis])?;
    let l = b.log(s)?;
    let lb = ops::broadcast_back(b, l, &d, &[axis])?;
    b.subtract(shifted, lb)
}

/// Layer normalisation over the last axis, as the corpus's JAX writes it:
/// `(x - mean) * rsqrt(mean((x - mean)^2) + eps) * gamma + beta`.
pub fn layer_norm(
    b: &mut Builder<'_>,
    x: InstrId,
    gamma: InstrId,
    beta: InstrId,
    epsilon: f64,
) -> Result<InstrId, BuildError> {
    let d = ops::dims(b, x);
    let last = d.len() as i64 - 1;
    let mean = ops::mean(b, x, &[last])?;
    let mb = ops::broadcast_back(b, mean, &d, &[last])?;
    let centred = b.subtract(x, mb)?;
    let sq = b.multiply(centred, centred)?;
    let var = ops::mean(b, sq, &[last])?;
    let eps = ops::full_like(b, var, epsilon)?;
    let v = b.add(var, eps)?;
    let r = b.rsqrt(v)?;
    let rb = ops::broadcast_back(b, r, &d, &[last])?;
    let normed = b.multiply(centred, rb)?;
    let gb = ops::broadcast_into(b, gamma, &d, &[last])?;
    let scaled = b.multiply(normed, gb)?;
    let bb = ops::broadcast_into(b, beta, &d, &[last])?;
    b.add(scaled, bb)
}

/// `jax.nn.one_hot(labels, classes)` of element type `t`: `labels[..., None] == arange`.
pub fn one_hot(
    b: &mut Builder<'_>,
    labels: InstrId,
    classes: i64,
    t: ElementType,
) -> Result<InstrId, BuildError> {
    let mut d = ops::dims(b, labels);
    let lt = ops::element_type(b, labels);
    let rank = d.len() as i64;
    d.push(classes);
    let mapping: Vec<i64> = (0..rank).collect();
    let lb = b.broadcast(labels, &d, &mapping)?;
    let iota = b.iota(Shape::array(lt, &d), rank)?;
    let eq = b.compare(lb, iota, ComparisonDirection::Eq, None)?;
    b.convert(eq, t)
}

/// Mean softmax cross-entropy of `logits` (`[batch, classes]`) against integer `labels`
/// (`[batch]`): `-mean(sum(one_hot * log_softmax(logits), -1))`.
pub fn softmax_cross_entropy(
    b: &mut Builder<'_>,
    logits: InstrId,
    labels: InstrId,
) -> Result<InstrId, BuildError> {
    let d = ops::dims(b, logits);
    let last = d.len() as i64 - 1;
    let t = ops::element_type(b, logits);
    let logp = log_softmax(b, logits, last)?;
    let oh = one_hot(b, labels, d[last as usize], t)?;
    let picked = b.multiply(oh, logp)?;
    let per_example = ops::sum(b, picked, &[last])?;
    let m = ops::mean_all(b, per_example)?;
    b.negate(m)
}

/// Mean squared error `mean((y - target)^2)`.
pub fn mean_squared_error(
    b: &mut Builder<'_>,
    y: InstrId,
    target: InstrId,
) -> Result<InstrId, BuildError> {
    let diff = b.subtract(y, target)?;
    let sq = b.multiply(diff, diff)?;
    ops::mean_all(b, sq)
}

/// How a window meets the edges (the seed's and Keras's `padding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Padding {
    /// No padding: windows stay inside the input.
    Valid,
    /// Zero padding so the output has `ceil(input / stride)` positions (TF's split: the
    /// extra element after).
    Same,
}

impl Padding {
    /// (low, high) padding of one spatial dimension.
    pub fn amounts(self, input: i64, window: i64, stride: i64) -> (i64, i64) {
        match self {
            Padding::Valid => (0, 0),
            Padding::Same => {
                let out = (input + stride - 1) / stride;
                let total = ((out - 1) * stride + window - input).max(0);
                (total / 2, total - total / 2)
            }
        }
    }
}

/// A 2-D convolution of NHWC `x` with HWIO `kernel` (`lax.conv_general_dilated` with
/// `("NHWC", "HWIO", "NHWC")`).
pub fn conv2d(
    b: &mut Builder<'_>,
    x: InstrId,
    kernel: InstrId,
    strides: [i64; 2],
    padding: Padding,
) -> Result<InstrId, BuildError> {
    use xla_ir::attributes::{ConvDims, Window, WindowDim};
    let xd = ops::dims(b, x);
    let kd = ops::dims(b, kernel);
    let dims = (0..2)
        .map(|s| {
            let (lo, hi) = padding.amounts(xd[1 + s], kd[s], strides[s]);
            WindowDim {
                size: kd[s],
                stride: strides[s],
                pad_low: lo,
                pad_high: hi,
                window_dilation: 1,
                base_dilation: 1,
                window_reversal: false,
            }
        })
        .collect();
    let conv = ConvDims::nhwc_hwio();
    b.convolution(x, kernel, Window { dims }, conv, 1, 1, None)
}

/// Max (`average == false`) or average pooling of NHWC `x` over `pool` windows (an average
/// counts only the window's elements inside the input, as Keras's does).
pub fn pool2d(
    b: &mut Builder<'_>,
    x: InstrId,
    pool: [i64; 2],
    strides: [i64; 2],
    padding: Padding,
    average: bool,
) -> Result<InstrId, BuildError> {
    use xla_ir::attributes::{Window, WindowDim};
    use xla_ir::op::BinaryOp;
    let xd = ops::dims(b, x);
    let one = WindowDim {
        size: 1,
        stride: 1,
        pad_low: 0,
        pad_high: 0,
        window_dilation: 1,
        base_dilation: 1,
        window_reversal: false,
    };
    let mut dims = vec![one];
    for s in 0..2 {
        let (lo, hi) = padding.amounts(xd[1 + s], pool[s], strides[s]);
        dims.push(WindowDim {
            size: pool[s],
            stride: strides[s],
            pad_low: lo,
            pad_high: hi,
            ..one
        });
    }
    dims.push(one);
    let t = ops::element_type(b, x);
    let window = Window { dims };
    if average {
        let zero = ops::scalar(b, t, 0.0)?;
        let add = ops::reducer(b, BinaryOp::Add, t)?;
        let s = b.reduce_window(&[x], &[zero], window.clone(), add)?;
        if padding == Padding::Valid {
            return ops::scale(b, s, 1.0 / (pool[0] * pool[1]) as f64);
        }
        // Keras averages over the window's elements inside the input only.
        let ones = ops::full_like(b, x, 1.0)?;
        let counts = b.reduce_window(&[ones], &[zero], window, add)?;
        b.divide(s, counts)
    } else {
        let low = ops::scalar(b, t, f64::NEG_INFINITY)?;
        let max = ops::reducer(b, BinaryOp::Maximum, t)?;
        b.reduce_window(&[x], &[low], window, max)
    }
}

/// `x` reshaped to `[batch, everything else]`.
pub fn flatten(b: &mut Builder<'_>, x: InstrId) -> Result<InstrId, BuildError> {
    let d = ops::dims(b, x);
    let rest: i64 = d[1..].iter().product();
    b.reshape(x, &[d[0], rest])
}
