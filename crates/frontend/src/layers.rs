//! Layers: what a Keras layer is, over graph values. A layer says which weights it needs for
//! an input shape ([`Layer::build`]) and computes its output from its input and those
//! weights ([`Layer::call`]); a model owns the weights' values.

use crate::init::Init;
use crate::nn::{self, Padding};
use crate::ops::{self, Builder};
use xla_ir::builder::BuildError;
use xla_ir::{ElementType, InstrId};

/// A weight a layer needs: its name within the layer, dimensions and initial values.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightSpec {
    /// `kernel`, `bias`, `gamma`, ...
    pub name: String,
    /// Its dimensions.
    pub dims: Vec<i64>,
    /// How it starts.
    pub init: Init,
    /// Whether training changes it by its gradient (moving statistics and random states
    /// change by the layer's own updates instead).
    pub trainable: bool,
}

/// What went wrong in a layer: its name and why (shapes included).
#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    /// The input does not suit the layer.
    #[error("layer {layer}: {message}")]
    Shape {
        /// The layer.
        layer: String,
        /// What was wrong, with both shapes.
        message: String,
    },
    /// Building the layer's graph failed.
    #[error("layer {layer}: {source}")]
    Build {
        /// The layer.
        layer: String,
        /// The builder's error.
        source: BuildError,
    },
}

/// A layer of a model.
pub trait Layer: std::fmt::Debug {
    /// The layer's kind, for default names (`dense`, `conv2d`, ...).
    fn kind(&self) -> &'static str;
    /// The weights the layer needs for inputs of `input` (batch first) and the output's
    /// dimensions.
    fn build(&self, name: &str, input: &[i64]) -> Result<(Vec<WeightSpec>, Vec<i64>), LayerError>;
    /// The output on `x` with the layer's `weights` (in [`Layer::build`]'s order); `training`
    /// is false for `evaluate` and `predict`.
    fn call(
        &self,
        b: &mut Builder<'_>,
        x: InstrId,
        weights: &[InstrId],
        training: bool,
    ) -> Result<InstrId, BuildError>;

    /// [`Layer::call`] and the new values of the layer's non-trainable weights (by position
    /// in its weights) after a training step: moving statistics, random states.
    fn call_with_updates(
        &self,
        b: &mut Builder<'_>,
        x: InstrId,
        weights: &[InstrId],
        training: bool,
    ) -> Result<Called, BuildError> {
        Ok(Called {
            value: self.call(b, x, weights, training)?,
            updates: Vec::new(),
        })
    }
}

/// A layer's output and the new values of its non-trainable weights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Called {
    /// The output.
    pub value: InstrId,
    /// (position in the layer's weights, new value).
    pub updates: Vec<(usize, InstrId)>,
}

/// An element-wise activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Activation {
    /// None (`linear`).
    #[default]
    Linear,
    /// `relu`.
    Relu,
    /// `gelu` (tanh approximation, JAX's default).
    Gelu,
    /// `swish` / `silu`.
    Swish,
    /// `tanh`.
    Tanh,
    /// `sigmoid`.
    Sigmoid,
    /// `softmax` over the last axis.
    Softmax,
}

impl Activation {
    /// `x` through the activation.
    pub fn apply(self, b: &mut Builder<'_>, x: InstrId) -> Result<InstrId, BuildError> {
        match self {
            Activation::Linear => Ok(x),
            Activation::Relu => nn::relu(b, x),
            Activation::Gelu => nn::gelu(b, x),
            Activation::Swish => nn::swish(b, x),
            Activation::Tanh => b.tanh(x),
            Activation::Sigmoid => b.logistic(x),
            Activation::Softmax => {
                let last = ops::dims(b, x).len() as i64 - 1;
                nn::softmax(b, x, last)
            }
        }
    }
}

fn shape_error(name: &str, message: String) -> LayerError {
    LayerError::Shape {
        layer: name.to_string(),
        message,
    }
}

/// `Dense(units, activation)`: `activation(x @ kernel + bias)` over the last dimension.
#[derive(Debug, Clone, PartialEq)]
pub struct Dense {
    /// Output features.
    pub units: i64,
    /// Applied to the output.
    pub activation: Activation,
    /// Whether there is a bias.
    pub use_bias: bool,
}

impl Dense {
    /// A dense layer of `units` outputs, with a bias and no activation.
    pub fn new(units: i64) -> Dense {
        Dense {
            units,
            activation: Activation::Linear,
            use_bias: true,
        }
    }

    /// The same layer with `activation`.
    pub fn activation(mut self, activation: Activation) -> Dense {
        self.activation = activation;
        self
    }
}

impl Layer for Dense {
    fn kind(&self) -> &'static str {
        "dense"
    }

    fn build(&self, name: &str, input: &[i64]) -> Result<(Vec<WeightSpec>, Vec<i64>), LayerError> {
        if input.len() < 2 {
            return Err(shape_error(
                name,
                format!("needs inputs of rank 2 or more (batch, features), got {input:?}"),
            ));
        }
        let features = input[input.len() - 1];
        let mut weights = vec![WeightSpec {
            name: "kernel".into(),
            dims: vec![features, self.units],
            init: Init::GlorotUniform {
                fan_in: features,
                fan_out: self.units,
            },
            trainable: true,
        }];
        if self.use_bias {
            weights.push(WeightSpec {
                name: "bias".into(),
                dims: vec![self.units],
                init: Init::Zeros,
                trainable: true,
            });
        }
        let mut out = input.to_vec();
        *out.last_mut().expect("rank >= 2") = self.units;
        Ok((weights, out))
    }

    fn call(
        &self,
        b: &mut Builder<'_>,
        x: InstrId,
        w: &[InstrId],
        _training: bool,
    ) -> Result<InstrId, BuildError> {
        let y = nn::linear(b, x, w[0], self.use_bias.then(|| w[1]))?;
        self.activation.apply(b, y)
    }
}

/// `Conv2D(filters, kernel_size)` on NHWC inputs with HWIO kernels.
#[derive(Debug, Clone, PartialEq)]
pub struct Conv2D {
    /// Output channels.
    pub filters: i64,
    /// Kernel height and width.
    pub kernel_size: [i64; 2],
    /// Strides.
    pub strides: [i64; 2],
    /// `same` or `valid`.
    pub padding: Padding,
    /// Applied to the output.
    pub activation: Activation,
}

impl Conv2D {
    /// `filters` outputs of a `kernel_size` window, stride 1, `same` padding, with a bias.
    pub fn new(filters: i64, kernel_size: [i64; 2]) -> Conv2D {
        Conv2D {
            filters,
            kernel_size,
            strides: [1, 1],
            padding: Padding::Same,
            activation: Activation::Linear,
        }
    }

    /// The same layer with `activation`.
    pub fn activation(mut self, activation: Activation) -> Conv2D {
        self.activation = activation;
        self
    }

    /// The same layer with `padding`.
    pub fn with_padding(mut self, padding: Padding) -> Conv2D {
        self.padding = padding;
        self
    }

    /// The same layer with `strides`.
    pub fn with_strides(mut self, strides: [i64; 2]) -> Conv2D {
        self.strides = strides;
        self
    }
}

/// The output size of one spatial dimension.
fn windowed(input: i64, window: i64, stride: i64, padding: Padding) -> i64 {
    let (lo, hi) = padding.amounts(input, window, stride);
    (input + lo + hi - window) / stride + 1
}

impl Layer for Conv2D {
    fn kind(&self) -> &'static str {
        "conv2d"
    }

    fn build(&self, name: &str, input: &[i64]) -> Result<(Vec<WeightSpec>, Vec<i64>), LayerError> {
        if input.len() != 4 {
            return Err(shape_error(
                name,
                format!("needs NHWC inputs (rank 4), got {input:?}"),
            ));
        }
        let [kh, kw] = self.kernel_size;
        let cin = input[3];
        let (oh, ow) = (
            windowed(input[1], kh, self.strides[0], self.padding),
            windowed(input[2], kw, self.strides[1], self.padding),
        );
        if oh < 1 || ow < 1 {
            return Err(shape_error(
                name,
                format!(
                    "a {kh}x{kw} window does not fit inputs of {input:?} with {:?} padding",
                    self.padding
                ),
            ));
        }
        let weights = vec![
            WeightSpec {
                name: "kernel".into(),
                dims: vec![kh, kw, cin, self.filters],
                init: Init::GlorotUniform {
                    fan_in: kh * kw * cin,
                    fan_out: kh * kw * self.filters,
                },
                trainable: true,
            },
            WeightSpec {
                name: "bias".into(),
                dims: vec![self.filters],
                init: Init::Zeros,
                trainable: true,
            },
        ];
        Ok((weights, vec![input[0], oh, ow, self.filters]))
    }

    fn call(
        &self,
        b: &mut Builder<'_>,
        x: InstrId,
        w: &[InstrId],
        _training: bool,
    ) -> Result<InstrId, BuildError> {
        let c = nn::conv2d(b, x, w[0], self.strides, self.padding)?;
        let c = nn::add_bias(b, c, w[1])?;
        self.activation.apply(b, c)
    }
}

/// `MaxPooling2D` / `AveragePooling2D` on NHWC inputs.
#[derive(Debug, Clone, PartialEq)]
pub struct Pool2D {
    /// Window height and width.
    pub pool_size: [i64; 2],
    /// Strides (Keras's default: the pool size).
    pub strides: [i64; 2],
    /// `same` or `valid`.
    pub padding: Padding,
    /// Average (true) or max.
    pub average: bool,
}

impl Pool2D {
    /// Max pooling over `pool_size` windows, strides the pool size, `valid` padding.
    pub fn max(pool_size: [i64; 2]) -> Pool2D {
        Pool2D {
            pool_size,
            strides: pool_size,
            padding: Padding::Valid,
            average: false,
        }
    }

    /// Average pooling over `pool_size` windows, strides the pool size, `valid` padding.
    pub fn average(pool_size: [i64; 2]) -> Pool2D {
        Pool2D {
            average: true,
            ..Pool2D::max(pool_size)
        }
    }
}

impl Layer for Pool2D {
    fn kind(&self) -> &'static str {
        if self.average {
            "average_pooling2d"
        } else {
            "max_pooling2d"
        }
    }

    fn build(&self, name: &str, input: &[i64]) -> Result<(Vec<WeightSpec>, Vec<i64>), LayerError> {
        if input.len() != 4 {
            return Err(shape_error(
                name,
                format!("needs NHWC inputs (rank 4), got {input:?}"),
            ));
        }
        let oh = windowed(input[1], self.pool_size[0], self.strides[0], self.padding);
        let ow = windowed(input[2], self.pool_size[1], self.strides[1], self.padding);
        if oh < 1 || ow < 1 {
            return Err(shape_error(
                name,
                format!(
                    "a {:?} pool does not fit inputs of {input:?}",
                    self.pool_size
                ),
            ));
        }
        Ok((vec![], vec![input[0], oh, ow, input[3]]))
    }

    fn call(
        &self,
        b: &mut Builder<'_>,
        x: InstrId,
        _w: &[InstrId],
        _training: bool,
    ) -> Result<InstrId, BuildError> {
        nn::pool2d(
            b,
            x,
            self.pool_size,
            self.strides,
            self.padding,
            self.average,
        )
    }
}

/// `Flatten`: `[batch, everything else]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flatten;

impl Layer for Flatten {
    fn kind(&self) -> &'static str {
        "flatten"
    }

    fn build(&self, name: &str, input: &[i64]) -> Result<(Vec<WeightSpec>, Vec<i64>), LayerError> {
        if input.is_empty() {
            return Err(shape_error(name, "needs a batch dimension".into()));
        }
        Ok((vec![], vec![input[0], input[1..].iter().product()]))
    }

    fn call(
        &self,
        b: &mut Builder<'_>,
        x: InstrId,
        _w: &[InstrId],
        _training: bool,
    ) -> Result<InstrId, BuildError> {
        nn::flatten(b, x)
    }
}

/// `RecomputationCheckpoint` (the seed's Keras layer): its input unchanged, marked so that
/// recomputation (`allow_recompute`) keeps it and recomputes what follows from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecomputationCheckpoint;

impl Layer for RecomputationCheckpoint {
    fn kind(&self) -> &'static str {
        "recomputation_checkpoint"
    }

    fn build(&self, _name: &str, input: &[i64]) -> Result<(Vec<WeightSpec>, Vec<i64>), LayerError> {
        Ok((vec![], input.to_vec()))
    }

    fn call(
        &self,
        b: &mut Builder<'_>,
        x: InstrId,
        _w: &[InstrId],
        _training: bool,
    ) -> Result<InstrId, BuildError> {
        crate::ops::recomputation_checkpoint(b, x)
    }
}

/// `LayerNormalization` over the last axis, with a scale and an offset.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerNorm {
    /// Added to the variance.
    pub epsilon: f64,
}

impl Default for LayerNorm {
    fn default() -> LayerNorm {
        LayerNorm { epsilon: 1e-3 }
    }
}

impl Layer for LayerNorm {
    fn kind(&self) -> &'static str {
        "layer_normalization"
    }

    fn build(&self, name: &str, input: &[i64]) -> Result<(Vec<WeightSpec>, Vec<i64>), LayerError> {
        let Some(&features) = input.last() else {
            return Err(shape_error(name, "needs an input of rank 1 or more".into()));
        };
        let spec = |n: &str, init| WeightSpec {
            name: n.into(),
            dims: vec![features],
            init,
            trainable: true,
        };
        Ok((
            vec![spec("gamma", Init::Ones), spec("beta", Init::Zeros)],
            input.to_vec(),
        ))
    }

    fn call(
        &self,
        b: &mut Builder<'_>,
        x: InstrId,
        w: &[InstrId],
        _training: bool,
    ) -> Result<InstrId, BuildError> {
        nn::layer_norm(b, x, w[0], w[1], self.epsilon)
    }
}

/// An activation as a layer of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActivationLayer(pub Activation);

impl Layer for ActivationLayer {
    fn kind(&self) -> &'static str {
        "activation"
    }

    fn build(&self, _name: &str, input: &[i64]) -> Result<(Vec<WeightSpec>, Vec<i64>), LayerError> {
        Ok((vec![], input.to_vec()))
    }

    fn call(
        &self,
        b: &mut Builder<'_>,
        x: InstrId,
        _w: &[InstrId],
        _training: bool,
    ) -> Result<InstrId, BuildError> {
        self.0.apply(b, x)
    }
}

/// `Embedding(input_dim, output_dim)`: integer ids to rows of a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Embedding {
    /// Rows of the table (the vocabulary).
    pub input_dim: i64,
    /// Features per row.
    pub output_dim: i64,
}

impl Layer for Embedding {
    fn kind(&self) -> &'static str {
        "embedding"
    }

    fn build(&self, _name: &str, input: &[i64]) -> Result<(Vec<WeightSpec>, Vec<i64>), LayerError> {
        let mut out = input.to_vec();
        out.push(self.output_dim);
        Ok((
            vec![WeightSpec {
                name: "embeddings".into(),
                dims: vec![self.input_dim, self.output_dim],
                init: Init::Uniform { limit: 0.05 },
                trainable: true,
            }],
            out,
        ))
    }

    fn call(
        &self,
        b: &mut Builder<'_>,
        ids: InstrId,
        w: &[InstrId],
        _training: bool,
    ) -> Result<InstrId, BuildError> {
        use xla_ir::attributes::GatherDims;
        let d = ops::dims(b, ids);
        let rank = d.len() as i64;
        let ids = if ops::element_type(b, ids) == ElementType::S32 {
            ids
        } else {
            b.convert(ids, ElementType::S32)?
        };
        let dims = GatherDims {
            offset_dims: vec![rank],
            collapsed_slice_dims: vec![0],
            start_index_map: vec![0],
            operand_batching_dims: vec![],
            start_indices_batching_dims: vec![],
            index_vector_dim: rank,
        };
        b.gather(w[0], ids, dims, &[1, self.output_dim])
    }
}

/// `BatchNormalization` over the last axis: in training, the batch's mean and variance
/// normalise and update the moving statistics (`moving = momentum * moving + (1 - momentum)
/// * batch`); in evaluation and prediction the moving statistics normalise.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchNorm {
    /// Decay of the moving statistics.
    pub momentum: f64,
    /// Added to the variance.
    pub epsilon: f64,
}

impl Default for BatchNorm {
    fn default() -> BatchNorm {
        BatchNorm {
            momentum: 0.99,
            epsilon: 1e-3,
        }
    }
}

impl Layer for BatchNorm {
    fn kind(&self) -> &'static str {
        "batch_normalization"
    }

    fn build(&self, name: &str, input: &[i64]) -> Result<(Vec<WeightSpec>, Vec<i64>), LayerError> {
        let Some(&features) = input.last().filter(|_| input.len() >= 2) else {
            return Err(shape_error(
                name,
                format!("needs inputs of rank 2 or more (batch, ..., features), got {input:?}"),
            ));
        };
        let spec = |n: &str, init, trainable| WeightSpec {
            name: n.into(),
            dims: vec![features],
            init,
            trainable,
        };
        Ok((
            vec![
                spec("gamma", Init::Ones, true),
                spec("beta", Init::Zeros, true),
                spec("moving_mean", Init::Zeros, false),
                spec("moving_variance", Init::Ones, false),
            ],
            input.to_vec(),
        ))
    }

    fn call(
        &self,
        b: &mut Builder<'_>,
        x: InstrId,
        w: &[InstrId],
        training: bool,
    ) -> Result<InstrId, BuildError> {
        Ok(self.call_with_updates(b, x, w, training)?.value)
    }

    fn call_with_updates(
        &self,
        b: &mut Builder<'_>,
        x: InstrId,
        w: &[InstrId],
        training: bool,
    ) -> Result<Called, BuildError> {
        let d = ops::dims(b, x);
        let last = d.len() as i64 - 1;
        let batch_axes: Vec<i64> = (0..last).collect();
        let (mean, var) = if training {
            let mean = ops::mean(b, x, &batch_axes)?;
            let mb = ops::broadcast_into(b, mean, &d, &[last])?;
            let c = b.subtract(x, mb)?;
            let sq = b.multiply(c, c)?;
            (mean, ops::mean(b, sq, &batch_axes)?)
        } else {
            (w[2], w[3])
        };
        let mb = ops::broadcast_into(b, mean, &d, &[last])?;
        let centred = b.subtract(x, mb)?;
        let eps = ops::full_like(b, var, self.epsilon)?;
        let v = b.add(var, eps)?;
        let r = b.rsqrt(v)?;
        let scale = b.multiply(r, w[0])?;
        let sb = ops::broadcast_into(b, scale, &d, &[last])?;
        let y = b.multiply(centred, sb)?;
        let value = nn::add_bias(b, y, w[1])?;
        if !training {
            return Ok(Called {
                value,
                updates: Vec::new(),
            });
        }
        let mut updates = Vec::new();
        for (k, stat) in [(2, mean), (3, var)] {
            let kept = ops::scale(b, w[k], self.momentum)?;
            let added = ops::scale(b, stat, 1.0 - self.momentum)?;
            updates.push((k, b.add(kept, added)?));
        }
        Ok(Called { value, updates })
    }
}

/// `Dropout(rate)`: in training, each element is kept with probability `1 - rate` (and
/// scaled by `1 / (1 - rate)`) by random bits from `rng-bit-generator` (Philox) whose state
/// is the layer's non-trainable weight; in evaluation and prediction it passes `x` on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dropout {
    /// The fraction of elements dropped.
    pub rate: f64,
}

impl Layer for Dropout {
    fn kind(&self) -> &'static str {
        "dropout"
    }

    fn build(&self, name: &str, input: &[i64]) -> Result<(Vec<WeightSpec>, Vec<i64>), LayerError> {
        if !(0.0..1.0).contains(&self.rate) {
            return Err(shape_error(
                name,
                format!("the rate must be in [0, 1), it is {}", self.rate),
            ));
        }
        Ok((
            vec![WeightSpec {
                name: "rng_state".into(),
                dims: vec![2],
                init: Init::RandomState,
                trainable: false,
            }],
            input.to_vec(),
        ))
    }

    fn call(
        &self,
        b: &mut Builder<'_>,
        x: InstrId,
        w: &[InstrId],
        training: bool,
    ) -> Result<InstrId, BuildError> {
        Ok(self.call_with_updates(b, x, w, training)?.value)
    }

    fn call_with_updates(
        &self,
        b: &mut Builder<'_>,
        x: InstrId,
        w: &[InstrId],
        training: bool,
    ) -> Result<Called, BuildError> {
        if !training || self.rate == 0.0 {
            return Ok(Called {
                value: x,
                updates: Vec::new(),
            });
        }
        use xla_ir::literal::{ArrayData, ArrayLiteral};
        use xla_ir::op::RngAlgorithm;
        use xla_ir::{ArrayShape, Op, Shape};
        let d = ops::dims(b, x);
        let t = ops::element_type(b, x);
        let state_shape = b.shape(w[0]).clone();
        let declared = Shape::Tuple(vec![state_shape, Shape::array(ElementType::U32, &d)]);
        let rng = b.add_instruction(
            Op::RngBitGenerator {
                algorithm: RngAlgorithm::Default,
            },
            &[w[0]],
            Some(declared),
        )?;
        let state = b.get_tuple_element(rng, 0)?;
        let bits = b.get_tuple_element(rng, 1)?;
        // Uniform in [0, 1) from the top 23 bits: 1.m as an f32, minus 1.
        let u32_const = |b: &mut Builder<'_>, v: u32| -> Result<InstrId, BuildError> {
            let c = b.constant(ArrayLiteral {
                shape: ArrayShape::new(ElementType::U32, &[]),
                data: ArrayData::U32(vec![v]),
            })?;
            b.broadcast(c, &d, &[])
        };
        let nine = u32_const(b, 9)?;
        let mantissa = b.shift_right_logical(bits, nine)?;
        let one_bits = u32_const(b, 0x3f80_0000)?;
        let f = b.or(mantissa, one_bits)?;
        let f = b.bitcast_convert(f, Shape::array(ElementType::F32, &d))?;
        let one = ops::full_like(b, f, 1.0)?;
        let u = b.subtract(f, one)?;
        let keep_p = ops::full_like(b, u, 1.0 - self.rate)?;
        let keep = b.compare(u, keep_p, xla_ir::attributes::ComparisonDirection::Lt, None)?;
        let scaled = ops::scale(b, x, 1.0 / (1.0 - self.rate))?;
        let zero = ops::zeros_like(b, x)?;
        let value = b.select(keep, scaled, zero)?;
        let value = if t == ElementType::F32 {
            value
        } else {
            b.convert(value, t)?
        };
        Ok(Called {
            value,
            updates: vec![(0, state)],
        })
    }
}
