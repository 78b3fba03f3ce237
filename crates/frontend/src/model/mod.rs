//! A Keras-like model: [`Sequential`] layers with their weights, `compile` with an
//! optimiser, a loss and `steps_per_execution`, then `fit`, `evaluate` and `predict` on a
//! [`Device`](crate::device::Device), with gradient accumulation and replicas as the seed's
//! Keras has them (effective batch = batch × accumulation steps × replicas).
//!
//! ```
//! use ipuxla_frontend::device::Evaluator;
//! use ipuxla_frontend::layers::{Activation, Dense};
//! use ipuxla_frontend::losses::Loss;
//! use ipuxla_frontend::model::{CompileOptions, Dataset, FitOptions, Sequential};
//! use ipuxla_frontend::optimizers::Optimizer;
//! use xla_ir::literal::{ArrayData, ArrayLiteral};
//! use xla_ir::{ArrayShape, ElementType};
//!
//! // y = 2x - 1 from 64 points, fitted by one dense unit.
//! let xs: Vec<f32> = (0..64).map(|i| i as f32 / 32.0 - 1.0).collect();
//! let ys: Vec<f32> = xs.iter().map(|x| 2.0 * x - 1.0).collect();
//! let array = |v: Vec<f32>| ArrayLiteral {
//!     shape: ArrayShape::new(ElementType::F32, &[64, 1]),
//!     data: ArrayData::F32(v),
//! };
//! let data = Dataset::new(array(xs), array(ys))?;
//! let mut model = Sequential::new("line", &[1], 7);
//! model.add(Dense::new(1))?;
//! model.compile(CompileOptions {
//!     optimizer: Optimizer::sgd(0.5),
//!     loss: Loss::MeanSquaredError,
//!     steps_per_execution: 4,
//! })?;
//! let options = FitOptions { batch_size: 16, epochs: 30, verbose: false };
//! let history = model.fit(&mut Evaluator, &data, &options)?;
//! assert!(history.loss.last().unwrap() < &1e-4);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod fit;
mod graph;
mod pipeline;
mod programs;
mod summary;
mod weights_io;

pub use fit::{Dataset, Evaluation, FitOptions, History};
pub use graph::Tensor;
use graph::{Node, NodeOp};

use crate::autodiff::AutodiffError;
use crate::device::{DeviceError, LoadedStep};
use crate::init::Rng;
use crate::layers::{Layer, LayerError};
use crate::losses::Loss;
use crate::optimizers::Optimizer;
use std::collections::HashMap;
use std::ops::Range;
use std::path::PathBuf;
use xla_ir::builder::BuildError;
use xla_ir::literal::{ArrayData, ArrayLiteral};
use xla_ir::{ArrayShape, ElementType};

/// What went wrong building, compiling or running a model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A layer refused its input.
    #[error(transparent)]
    Layer(#[from] LayerError),
    /// Building the graph failed.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// Differentiating the loss failed.
    #[error(transparent)]
    Autodiff(#[from] AutodiffError),
    /// The model was used against its rules (with the rule stated).
    #[error("{0}")]
    Usage(String),
    /// The device could not load or run a step.
    #[error("{device}: {source}")]
    Device {
        /// The device's name.
        device: String,
        /// Its error.
        source: DeviceError,
    },
    /// A weights file could not be read or written.
    #[error("{}: {message}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
}

/// One weight of a model: `layer/name` and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Weight {
    /// `dense_1/kernel`, ...
    pub name: String,
    /// Its current value.
    pub value: ArrayLiteral,
    /// Whether training changes it by its gradient (else by its layer's updates).
    pub trainable: bool,
}

/// A layer in a model, with its name and the range of its weights in the model's list.
#[derive(Debug)]
struct NamedLayer {
    name: String,
    layer: Box<dyn Layer>,
    weights: Range<usize>,
}

/// `compile`'s options.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompileOptions {
    /// How weights change.
    pub optimizer: Optimizer,
    /// What is minimised.
    pub loss: Loss,
    /// Batches each replica runs per device execution (the seed's `steps_per_execution`).
    pub steps_per_execution: u64,
}

/// A compiled model's training state.
#[derive(Debug, Clone)]
struct Training {
    options: CompileOptions,
    gradient_accumulation: u64,
    replicas: usize,
    /// Per trainable weight, the optimiser's slots (in `Optimizer::slots` order).
    slots: Vec<Vec<ArrayLiteral>>,
    /// The optimiser's step count.
    step: i32,
    /// Per trainable weight, the gradients accumulated since the last update.
    accumulated: Vec<ArrayLiteral>,
    /// Batches accumulated since the last update.
    micro_batch: i32,
}

/// Which step program, for which batch (a loaded program is reused while these match).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum ProgramKey {
    Train { batch: i64, iterations: u64 },
    Pipeline { batch: i64, iterations: u64 },
    Evaluate { batch: i64, iterations: u64 },
    Predict { batch: i64, iterations: u64 },
}

/// Keras's `Sequential`: a [`Model`] built by [`Model::add`], each layer feeding the next.
pub type Sequential = Model;

/// A model: layers applied to its input ([`Model::add`] in a chain, or
/// [`Model::apply`]/[`Model::reuse`]/merges as a graph), their weights, and how it trains.
pub struct Model {
    name: String,
    input: Vec<i64>,
    input_type: ElementType,
    layers: Vec<NamedLayer>,
    /// The graph: node 0 is the input.
    nodes: Vec<Node>,
    output: Tensor,
    weights: Vec<Weight>,
    rng: Rng,
    training: Option<Training>,
    stages: Option<Vec<usize>>,
    loaded: HashMap<ProgramKey, (String, Box<dyn LoadedStep>)>,
    /// Whether the host's weights changed since the device last had them.
    weights_changed: bool,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("name", &self.name)
            .field("input", &self.input)
            .field("layers", &self.layers)
            .finish_non_exhaustive()
    }
}

impl Model {
    /// An empty model for f32 examples of `input` dimensions (without the batch), its
    /// weights drawn from `seed`.
    pub fn new(name: impl Into<String>, input: &[i64], seed: u64) -> Model {
        let dims = std::iter::once(1).chain(input.iter().copied()).collect();
        Model {
            name: name.into(),
            input: input.to_vec(),
            input_type: ElementType::F32,
            layers: Vec::new(),
            nodes: vec![Node {
                op: NodeOp::Input,
                inputs: Vec::new(),
                dims,
            }],
            output: Tensor(0),
            weights: Vec::new(),
            rng: Rng::new(seed),
            training: None,
            stages: None,
            loaded: HashMap::new(),
            weights_changed: true,
        }
    }

    /// The same model for integer examples (token ids for an [`Embedding`] first layer).
    ///
    /// [`Embedding`]: crate::layers::Embedding
    pub fn with_integer_input(mut self) -> Model {
        self.input_type = ElementType::S32;
        self
    }

    /// The model's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Something about the graph changed: programs must be built again.
    fn changed(&mut self) {
        self.training = None;
        self.stages = None;
        self.loaded.clear();
        self.weights_changed = true;
    }

    /// The layers' names, in order.
    pub fn layer_names(&self) -> Vec<&str> {
        self.layers.iter().map(|l| l.name.as_str()).collect()
    }

    /// The model's weights, in order.
    pub fn weights(&self) -> &[Weight] {
        &self.weights
    }

    /// Replaces every weight's value (same order, shapes and types as [`Self::weights`]).
    pub fn set_weights(&mut self, values: Vec<ArrayLiteral>) -> Result<(), ModelError> {
        if values.len() != self.weights.len() {
            return Err(ModelError::Usage(format!(
                "model {} has {} weights, {} values were given",
                self.name,
                self.weights.len(),
                values.len()
            )));
        }
        for (w, v) in self.weights.iter().zip(&values) {
            if w.value.shape != v.shape {
                return Err(ModelError::Usage(format!(
                    "weight {} is {}, the value given is {}",
                    w.name, w.value.shape, v.shape
                )));
            }
        }
        for (w, v) in self.weights.iter_mut().zip(values) {
            w.value = v;
        }
        self.weights_changed = true;
        Ok(())
    }

    /// The output's dimensions for a batch of `batch`.
    pub fn output_dims(&self, batch: i64) -> Vec<i64> {
        let mut d = self.nodes[self.output.0].dims.clone();
        d[0] = batch;
        d
    }

    /// Prepares the model for training with `options` (resets the optimiser's state).
    pub fn compile(&mut self, options: CompileOptions) -> Result<(), ModelError> {
        if self.output == Tensor(0) {
            return Err(ModelError::Usage(format!(
                "model {} has no layers to compile",
                self.name
            )));
        }
        if options.steps_per_execution == 0 {
            return Err(ModelError::Usage(
                "steps_per_execution must be at least 1".into(),
            ));
        }
        let out = self.output_dims(1);
        if let Loss::SparseCategoricalCrossentropy { .. } = options.loss
            && out.len() < 2
        {
            return Err(ModelError::Usage(format!(
                "sparse categorical cross-entropy needs outputs of [batch, classes]; model {} outputs {out:?}",
                self.name
            )));
        }
        let (accumulation, replicas) = self
            .training
            .as_ref()
            .map_or((1, 1), |t| (t.gradient_accumulation, t.replicas));
        self.training = Some(Training {
            options,
            gradient_accumulation: accumulation,
            replicas,
            slots: Vec::new(),
            step: 0,
            accumulated: Vec::new(),
            micro_batch: 0,
        });
        self.reset_optimizer_state();
        Ok(())
    }

    fn reset_optimizer_state(&mut self) {
        let weights = &self.weights;
        if let Some(t) = self.training.as_mut() {
            let per = t.options.optimizer.slots().len();
            let trainable = || weights.iter().filter(|w| w.trainable);
            t.slots = trainable()
                .map(|w| vec![zeros(&w.value.shape); per])
                .collect();
            t.step = 0;
            t.accumulated = trainable().map(|w| zeros(&w.value.shape)).collect();
            t.micro_batch = 0;
        }
        self.loaded.clear();
        self.weights_changed = true;
    }

    /// Gradient accumulation (the seed's `set_gradient_accumulation_options`): the
    /// gradients of `steps` batches are averaged before each weight update, so each update
    /// sees `batch × steps × replicas` examples.
    pub fn set_gradient_accumulation_options(&mut self, steps: u64) -> Result<(), ModelError> {
        let t = self.training_mut()?;
        if steps == 0 {
            return Err(ModelError::Usage(
                "gradient_accumulation_steps_per_replica must be at least 1".into(),
            ));
        }
        t.gradient_accumulation = steps;
        self.reset_optimizer_state();
        self.weights_changed = true;
        Ok(())
    }

    /// Data-parallel replicas (the IPU system's replication factor): each runs the step on
    /// its own batches, and the gradients are averaged across replicas before the update.
    pub fn set_replication_factor(&mut self, replicas: usize) -> Result<(), ModelError> {
        let t = self.training_mut()?;
        if replicas == 0 {
            return Err(ModelError::Usage(
                "the replication factor must be at least 1".into(),
            ));
        }
        t.replicas = replicas;
        self.loaded.clear();
        self.weights_changed = true;
        Ok(())
    }

    /// Puts the k-th node after the input (each layer application or merge, in the order
    /// they were added: Keras's post-order) in pipeline stage `stages[k]` (the seed's
    /// `set_pipeline_stage_assignment`): one stage per node, starting at 0, never going
    /// back, none skipped; a layer applied in two stages would share its weights across
    /// IPUs and is refused.
    pub fn set_pipeline_stage_assignment(&mut self, stages: &[usize]) -> Result<(), ModelError> {
        let nodes = self.nodes.len() - 1;
        if stages.len() != nodes {
            return Err(ModelError::Usage(format!(
                "the pipeline stage assignment names {} stages but model {} has {nodes} layers: every layer needs a stage",
                stages.len(),
                self.name,
            )));
        }
        for (k, pair) in stages.windows(2).enumerate() {
            if pair[1] < pair[0] || pair[1] > pair[0] + 1 {
                return Err(ModelError::Usage(format!(
                    "layer {} is in stage {} after layer {} in stage {}: stages must go up one at a time",
                    self.node_name(k + 2),
                    pair[1],
                    self.node_name(k + 1),
                    pair[0]
                )));
            }
        }
        if stages.first().is_some_and(|&s| s != 0) {
            return Err(ModelError::Usage(
                "the first layer must be in stage 0".into(),
            ));
        }
        let mut stage_of_layer: HashMap<usize, usize> = HashMap::new();
        for (k, &stage) in stages.iter().enumerate() {
            if let NodeOp::Layer(l) = self.nodes[k + 1].op
                && let Some(&other) = stage_of_layer.get(&l)
                && other != stage
            {
                return Err(ModelError::Usage(format!(
                    "layer {} is applied in stages {other} and {stage}: its weights would be shared across IPUs",
                    self.layers[l].name
                )));
            } else if let NodeOp::Layer(l) = self.nodes[k + 1].op {
                stage_of_layer.insert(l, stage);
            }
        }
        self.stages = Some(stages.to_vec());
        self.loaded.clear();
        Ok(())
    }

    /// The pipeline stage of each node after the input, if assigned.
    pub fn pipeline_stage_assignment(&self) -> Option<&[usize]> {
        self.stages.as_deref()
    }

    fn training(&self) -> Result<&Training, ModelError> {
        self.training.as_ref().ok_or_else(|| {
            ModelError::Usage(format!(
                "model {} is not compiled: call compile first",
                self.name
            ))
        })
    }

    fn training_mut(&mut self) -> Result<&mut Training, ModelError> {
        let name = self.name.clone();
        self.training.as_mut().ok_or_else(|| {
            ModelError::Usage(format!("model {name} is not compiled: call compile first"))
        })
    }

    fn carried_layout(&self) -> Result<programs::CarriedLayout, ModelError> {
        let t = self.training()?;
        Ok(programs::CarriedLayout {
            weights: self.weights.len(),
            trainable: self.weights.iter().filter(|w| w.trainable).count(),
            slots_per_weight: t.options.optimizer.slots().len(),
            step: t.options.optimizer.counts_steps(),
            accumulating: t.gradient_accumulation > 1,
        })
    }

    /// The training step's module for micro-batches of `batch` (to dump or run by hand).
    pub fn train_step_module(&self, batch: i64) -> Result<xla_ir::Module, ModelError> {
        Ok(self.train_program(batch)?.module)
    }
}

/// Zeros of `shape` (f32 or s32).
fn zeros(shape: &ArrayShape) -> ArrayLiteral {
    let n = shape.element_count() as usize;
    ArrayLiteral {
        shape: shape.clone(),
        data: ArrayData::zeros(shape.element_type, n),
    }
}
