//! Training, evaluation and prediction: the dataset cut into the batches each execution's
//! iterations and replicas take, the step programs loaded once and run, the weights read
//! back after every execution.

use super::{Model, ModelError, ProgramKey};
use crate::device::{Device, StepProgram};
use indicatif::{ProgressBar, ProgressStyle};
use xla_ir::literal::{ArrayData, ArrayLiteral};
use xla_ir::{ArrayShape, Literal};

/// Examples and (for training and evaluation) their targets, the first dimension counting
/// the examples.
#[derive(Debug, Clone)]
pub struct Dataset {
    x: ArrayLiteral,
    y: Option<ArrayLiteral>,
}

impl Dataset {
    /// `x[i]` with target `y[i]`; both must hold the same number of examples.
    pub fn new(x: ArrayLiteral, y: ArrayLiteral) -> Result<Dataset, ModelError> {
        let (nx, ny) = (x.shape.dims.first(), y.shape.dims.first());
        if nx.is_none() || nx != ny {
            return Err(ModelError::Usage(format!(
                "the dataset's inputs are {} and its targets {}: both need a leading dimension of the same number of examples",
                x.shape, y.shape
            )));
        }
        Ok(Dataset { x, y: Some(y) })
    }

    /// Inputs without targets (for `predict`).
    pub fn inputs(x: ArrayLiteral) -> Dataset {
        Dataset { x, y: None }
    }

    /// The inputs.
    pub fn x(&self) -> ArrayLiteral {
        self.x.clone()
    }

    /// The number of examples.
    pub fn len(&self) -> usize {
        self.x.shape.dims.first().map_or(0, |&n| n as usize)
    }

    /// Whether there are no examples.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `fit`'s options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FitOptions {
    /// Examples per batch (per replica, per accumulation step).
    pub batch_size: i64,
    /// Passes over the dataset.
    pub epochs: usize,
    /// Whether to draw a progress bar (hidden anyway when stderr is not a terminal).
    pub verbose: bool,
}

/// What `fit` did.
#[derive(Debug, Clone, PartialEq)]
pub struct History {
    /// The mean loss of each epoch's batches (across replicas).
    pub loss: Vec<f64>,
    /// Device executions run.
    pub executions: usize,
    /// Weight updates made.
    pub updates: u64,
    /// Simulated cycles of all executions, when the device models time.
    pub cycles: Option<u64>,
}

/// The result of `evaluate`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Evaluation {
    /// The mean loss over the batches.
    pub loss: f64,
    /// The fraction of examples whose label scored highest (class labels only).
    pub accuracy: Option<f64>,
}

/// Executions of `steps_per_execution` iterations, then one of the rest: (first
/// iteration, iterations).
fn executions(total: u64, per: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < total {
        let n = per.min(total - at);
        out.push((at, n));
        at += n;
    }
    out
}

/// The rows `starts[k] .. starts[k] + rows` of `a` for each k, stacked as
/// `[starts.len(), rows, ...]`.
fn take_rows(a: &ArrayLiteral, starts: &[usize], rows: usize) -> Result<ArrayLiteral, ModelError> {
    let per_row: usize = a.shape.dims[1..].iter().product::<i64>() as usize;
    let span = rows * per_row;
    fn gather<T: Clone>(v: &[T], starts: &[usize], per_row: usize, span: usize) -> Vec<T> {
        let mut out = Vec::with_capacity(starts.len() * span);
        for &s in starts {
            out.extend_from_slice(&v[s * per_row..s * per_row + span]);
        }
        out
    }
    let data = match &a.data {
        ArrayData::F32(v) => ArrayData::F32(gather(v, starts, per_row, span)),
        ArrayData::S32(v) => ArrayData::S32(gather(v, starts, per_row, span)),
        other => {
            return Err(ModelError::Usage(format!(
                "datasets of {:?} are not supported (f32 or s32)",
                std::mem::discriminant(other)
            )));
        }
    };
    let mut dims = vec![starts.len() as i64, rows as i64];
    dims.extend(&a.shape.dims[1..]);
    Ok(ArrayLiteral {
        shape: ArrayShape::new(a.shape.element_type, &dims),
        data,
    })
}

fn mean(v: &[f32]) -> f64 {
    v.iter().map(|&x| x as f64).sum::<f64>() / v.len().max(1) as f64
}

fn f32s(a: &ArrayLiteral) -> Vec<f32> {
    match &a.data {
        ArrayData::F32(v) => v.clone(),
        _ => Vec::new(),
    }
}

impl Model {
    fn check_data(&self, data: &Dataset, with_target: bool) -> Result<(), ModelError> {
        let want = &self.input;
        if data.x.shape.dims[1..] != want[..] || data.x.shape.element_type != self.input_type {
            return Err(ModelError::Usage(format!(
                "model {} takes examples of {:?} {want:?}, the dataset's inputs are {}",
                self.name, self.input_type, data.x.shape
            )));
        }
        if !with_target {
            return Ok(());
        }
        let loss = self.training()?.options.loss;
        let (t, td) = loss.target(&self.output_dims(1));
        let y = data.y.as_ref().ok_or_else(|| {
            ModelError::Usage("this dataset has no targets (Dataset::inputs)".into())
        })?;
        if y.shape.dims[1..] != td[1..] || y.shape.element_type != t {
            return Err(ModelError::Usage(format!(
                "the loss needs targets of {t:?} {:?} per example, the dataset's are {}",
                &td[1..],
                y.shape
            )));
        }
        Ok(())
    }

    /// Loads `program` under `key` unless it is loaded; makes sure its resident weights are
    /// the host's.
    fn program(
        &mut self,
        device: &mut dyn Device,
        key: ProgramKey,
        build: impl FnOnce(&Model) -> Result<StepProgram, ModelError>,
    ) -> Result<(), ModelError> {
        let device_name = device.name();
        let stale = self
            .loaded
            .get(&key)
            .is_none_or(|(name, _)| *name != device_name);
        if stale {
            let program = build(self)?;
            let loaded = device.load(program).map_err(|source| ModelError::Device {
                device: device_name.clone(),
                source,
            })?;
            self.loaded.insert(key, (device_name, loaded));
        }
        Ok(())
    }

    /// Trains on `data` for `options.epochs` epochs. Each replica takes `batch_size`
    /// examples per iteration, `steps_per_execution` iterations per execution; the weights
    /// change every `gradient accumulation` iterations, by the mean gradient of
    /// `batch × accumulation × replicas` consecutive examples (so the result is the plain
    /// loop's on batches of that size). The dataset must hold a whole number of those.
    /// Unlike the seed's Keras, `steps_per_execution` need not be a multiple of the
    /// accumulation steps: the accumulated gradients stay on the device between executions.
    pub fn fit(
        &mut self,
        device: &mut dyn Device,
        data: &Dataset,
        options: &FitOptions,
    ) -> Result<History, ModelError> {
        self.check_data(data, true)?;
        let tr = self.training()?.clone();
        let b = options.batch_size;
        if b < 1 {
            return Err(ModelError::Usage("batch_size must be at least 1".into()));
        }
        let (ga, r, s) = (
            tr.gradient_accumulation,
            tr.replicas as u64,
            tr.options.steps_per_execution,
        );
        let effective = b as u64 * ga * r;
        let n = data.len() as u64;
        if n == 0 || !n.is_multiple_of(effective) {
            return Err(ModelError::Usage(format!(
                "the dataset has {n} examples, not a multiple of the effective batch size: batch_size {b} x gradient_accumulation_steps_per_replica {ga} x replicas {r} = {effective}"
            )));
        }
        let iterations = n / (b as u64 * r);
        let plan = executions(iterations, s);
        let pipelined = self.stages.is_some() && device.runs_pipelines();
        if pipelined && !s.is_multiple_of(ga) {
            return Err(ModelError::Usage(format!(
                "a pipelined model runs whole pipeline runs per execution: steps_per_execution ({s}) must be a multiple of gradient_accumulation_steps_per_replica ({ga})"
            )));
        }
        let bar = if options.verbose {
            ProgressBar::new((plan.len() * options.epochs) as u64)
        } else {
            ProgressBar::hidden()
        };
        bar.set_style(
            ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} executions, loss {msg}")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        let mut history = History {
            loss: Vec::new(),
            executions: 0,
            updates: 0,
            cycles: None,
        };
        let mut last: Option<ProgramKey> = None;
        for epoch in 0..options.epochs {
            bar.set_prefix(format!("epoch {}/{}", epoch + 1, options.epochs));
            let mut losses = Vec::new();
            for &(first, count) in &plan {
                if pipelined {
                    let loss = self.run_pipeline(device, data, b, (first, count))?;
                    losses.extend(loss);
                    history.executions += 1;
                    history.updates += count / ga;
                    bar.set_message(format!("{:.4}", mean(&losses)));
                    bar.inc(1);
                    continue;
                }
                let key = ProgramKey::Train {
                    batch: b,
                    iterations: count,
                };
                self.program(device, key, |m| {
                    let mut p = m.train_program(b)?;
                    p.iterations = count;
                    Ok(p)
                })?;
                let inputs = self.train_inputs(data, b as usize, (first, count))?;
                let name = self.loaded[&key].0.clone();
                let changed = self.weights_changed || last != Some(key);
                let (_, loaded) = self.loaded.get_mut(&key).expect("loaded above");
                if changed {
                    loaded.reupload();
                }
                let outputs = loaded.run(&inputs).map_err(|source| ModelError::Device {
                    device: name,
                    source,
                })?;
                if let Some(c) = loaded.last_cycles() {
                    *history.cycles.get_or_insert(0) += c;
                }
                last = Some(key);
                self.take_training_outputs(&outputs[0])?;
                for replica in &outputs {
                    losses.extend(f32s(replica.last().expect("the loss")));
                }
                history.executions += 1;
                history.updates += (first + count) / ga - first / ga;
                bar.set_message(format!("{:.4}", mean(&losses)));
                bar.inc(1);
            }
            history.loss.push(mean(&losses));
        }
        bar.finish_and_clear();
        Ok(history)
    }

    /// One execution of the training pipeline over `count` micro-batches from `first`: the
    /// micro-batches' losses; the weights are read back.
    fn run_pipeline(
        &mut self,
        device: &mut dyn Device,
        data: &Dataset,
        b: i64,
        (first, count): (u64, u64),
    ) -> Result<Vec<f32>, ModelError> {
        let ga = self.training()?.gradient_accumulation;
        let key = ProgramKey::Pipeline {
            batch: b,
            iterations: count,
        };
        let device_name = device.name();
        if self
            .loaded
            .get(&key)
            .is_none_or(|(name, _)| *name != device_name)
        {
            let program = self.pipeline_program(b, count / ga)?;
            let loaded = device
                .load_pipeline(program)
                .map_err(|source| ModelError::Device {
                    device: device_name.clone(),
                    source,
                })?;
            self.loaded.insert(key, (device_name, loaded));
        }
        let inputs = self.batch_inputs(data, true, b, (first, count))?;
        let out = self.run_loaded(key, &[inputs])?;
        let out = &out[0];
        for (w, v) in self.weights.iter_mut().zip(&out[1..]) {
            w.value = v.clone();
        }
        self.weights_changed = true;
        Ok(f32s(&out[0]))
    }

    /// Each replica's inputs for the execution of `count` iterations from `first`.
    fn train_inputs(
        &self,
        data: &Dataset,
        b: usize,
        (first, count): (u64, u64),
    ) -> Result<Vec<Vec<Literal>>, ModelError> {
        let tr = self.training()?;
        let (ga, r) = (tr.gradient_accumulation as usize, tr.replicas);
        let layout = self.carried_layout()?;
        let mut carried: Vec<Literal> = self
            .weights
            .iter()
            .map(|w| Literal::Array(w.value.clone()))
            .collect();
        for slots in &tr.slots {
            carried.extend(slots.iter().cloned().map(Literal::Array));
        }
        if layout.step {
            carried.push(Literal::Array(ArrayLiteral::scalar_s32(tr.step)));
        }
        if layout.accumulating {
            carried.extend(tr.accumulated.iter().cloned().map(Literal::Array));
            carried.push(Literal::Array(ArrayLiteral::scalar_s32(tr.micro_batch)));
        }
        let y = data.y.as_ref().expect("checked: training data has targets");
        let mut out = Vec::with_capacity(r);
        for replica in 0..r {
            // Iteration i's batch: the (i % ga)-th of its update's ga x r batches, this
            // replica's share; updates take consecutive blocks of ga x r x b examples.
            let starts: Vec<usize> = (first as usize..(first + count) as usize)
                .map(|i| {
                    let update = i / ga;
                    (update * ga * r + (i % ga) * r + replica) * b
                })
                .collect();
            let mut inputs = carried.clone();
            inputs.push(Literal::Array(take_rows(&data.x, &starts, b)?));
            inputs.push(Literal::Array(take_rows(y, &starts, b)?));
            out.push(inputs);
        }
        Ok(out)
    }

    /// Reads the carried values back from replica 0's results.
    fn take_training_outputs(&mut self, out: &[ArrayLiteral]) -> Result<(), ModelError> {
        let layout = self.carried_layout()?;
        let n = self.weights.len();
        let t = layout.trainable;
        let per = layout.slots_per_weight;
        for (w, v) in self.weights.iter_mut().zip(&out[..n]) {
            w.value = v.clone();
        }
        let tr = self
            .training
            .as_mut()
            .expect("compiled: checked by carried_layout");
        for k in 0..t {
            tr.slots[k] = out[n + k * per..n + (k + 1) * per].to_vec();
        }
        let mut at = n + t * per;
        let scalar = |a: &ArrayLiteral| match &a.data {
            ArrayData::S32(v) => v[0],
            _ => 0,
        };
        if layout.step {
            tr.step = scalar(&out[at]);
            at += 1;
        }
        if layout.accumulating {
            tr.accumulated = out[at..at + t].to_vec();
            tr.micro_batch = scalar(&out[at + t]);
        }
        self.weights_changed = false;
        Ok(())
    }

    /// The mean loss (and accuracy, for class labels) over `data` in batches of
    /// `batch_size`, `steps_per_execution` batches per execution, on one replica (the
    /// replication factor is for training).
    pub fn evaluate(
        &mut self,
        device: &mut dyn Device,
        data: &Dataset,
        batch_size: i64,
    ) -> Result<Evaluation, ModelError> {
        self.check_data(data, true)?;
        let batches = self.batches(data, batch_size)?;
        let s = self.training()?.options.steps_per_execution;
        let (mut losses, mut correct) = (Vec::new(), None::<f64>);
        for (first, count) in executions(batches, s) {
            let key = ProgramKey::Evaluate {
                batch: batch_size,
                iterations: count,
            };
            self.program(device, key, |m| m.evaluate_program(batch_size, count))?;
            let inputs = self.batch_inputs(data, true, batch_size, (first, count))?;
            let out = self.run_loaded(key, &[inputs])?;
            losses.extend(f32s(&out[0][0]));
            if let Some(c) = out[0].get(1) {
                *correct.get_or_insert(0.0) += f32s(c).iter().map(|&x| x as f64).sum::<f64>();
            }
        }
        Ok(Evaluation {
            loss: mean(&losses),
            accuracy: correct.map(|c| c / data.len() as f64),
        })
    }

    /// The model's outputs for every example of `data`, in batches of `batch_size`.
    pub fn predict(
        &mut self,
        device: &mut dyn Device,
        data: &Dataset,
        batch_size: i64,
    ) -> Result<ArrayLiteral, ModelError> {
        self.check_data(data, false)?;
        let batches = self.batches(data, batch_size)?;
        let s = self
            .training
            .as_ref()
            .map_or(1, |t| t.options.steps_per_execution);
        let mut parts = Vec::new();
        for (first, count) in executions(batches, s) {
            let key = ProgramKey::Predict {
                batch: batch_size,
                iterations: count,
            };
            self.program(device, key, |m| m.predict_program(batch_size, count))?;
            let inputs = self.batch_inputs(data, false, batch_size, (first, count))?;
            let out = self.run_loaded(key, &[inputs])?;
            // [count, batch, ...] -> count * batch examples.
            for i in 0..count as usize {
                parts.push(out[0][0].index_leading(i));
            }
        }
        let stacked = ArrayLiteral::stack(&parts).map_err(ModelError::Usage)?;
        let mut dims = self.output_dims(data.len() as i64);
        dims[0] = data.len() as i64;
        Ok(ArrayLiteral {
            shape: ArrayShape::new(stacked.shape.element_type, &dims),
            data: stacked.data,
        })
    }

    /// The weights, then batches `first..first + count` of `batch` consecutive examples
    /// stacked (and their targets, `with_target`): a step's inputs when the weights are
    /// not carried.
    fn batch_inputs(
        &self,
        data: &Dataset,
        with_target: bool,
        batch: i64,
        (first, count): (u64, u64),
    ) -> Result<Vec<Literal>, ModelError> {
        let starts: Vec<usize> = (first..first + count)
            .map(|i| i as usize * batch as usize)
            .collect();
        let mut inputs: Vec<Literal> = self
            .weights
            .iter()
            .map(|w| Literal::Array(w.value.clone()))
            .collect();
        inputs.push(Literal::Array(take_rows(&data.x, &starts, batch as usize)?));
        if with_target {
            let y = data.y.as_ref().expect("checked: the data has targets");
            inputs.push(Literal::Array(take_rows(y, &starts, batch as usize)?));
        }
        Ok(inputs)
    }

    fn batches(&self, data: &Dataset, batch_size: i64) -> Result<u64, ModelError> {
        let n = data.len() as i64;
        if batch_size < 1 || n == 0 || n % batch_size != 0 {
            return Err(ModelError::Usage(format!(
                "the dataset has {n} examples, not a whole number of batches of {batch_size}"
            )));
        }
        Ok((n / batch_size) as u64)
    }

    fn run_loaded(
        &mut self,
        key: ProgramKey,
        inputs: &[Vec<Literal>],
    ) -> Result<Vec<Vec<ArrayLiteral>>, ModelError> {
        let (name, loaded) = self.loaded.get_mut(&key).expect("loaded by the caller");
        loaded.run(inputs).map_err(|source| ModelError::Device {
            device: name.clone(),
            source,
        })
    }
}
