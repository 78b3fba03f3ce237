//! An MNIST-shaped classifier (28x28 inputs, 10 classes) trained on the IPU Model with the
//! frontend's Keras-like model, `steps_per_execution` and gradient accumulation, on
//! synthetic data: each class is a random prototype image plus noise, so a small MLP can
//! separate them. Prints the loss of each epoch and the accuracy on held-out examples.
//!
//! `cargo run --release --example mnist_classifier`

use ipuxla::compiler::IpuConfig;
use ipuxla::frontend::init::Rng;
use ipuxla::frontend::layers::{Activation, Dense, Flatten};
use ipuxla::frontend::losses::Loss;
use ipuxla::frontend::model::{CompileOptions, Dataset, FitOptions, Sequential};
use ipuxla::frontend::optimizers::Optimizer;
use ipuxla::ipu_model::IpuModel;
use xla_ir::literal::{ArrayData, ArrayLiteral};
use xla_ir::{ArrayShape, ElementType};

const CLASSES: usize = 10;
const PIXELS: usize = 28 * 28;

/// `n` noisy images of the classes' prototypes, the classes taken in turn.
fn images(prototypes: &[Vec<f32>], n: usize, noise: f64, rng: &mut Rng) -> anyhow::Result<Dataset> {
    let mut x = Vec::with_capacity(n * PIXELS);
    let mut y = Vec::with_capacity(n);
    for i in 0..n {
        let label = (i * 7 + rng.below(3) as usize) % CLASSES;
        x.extend(
            prototypes[label]
                .iter()
                .map(|&p| p + (noise * rng.normal()) as f32),
        );
        y.push(label as i32);
    }
    Ok(Dataset::new(
        ArrayLiteral {
            shape: ArrayShape::new(ElementType::F32, &[n as i64, 28, 28]),
            data: ArrayData::F32(x),
        },
        ArrayLiteral {
            shape: ArrayShape::new(ElementType::S32, &[n as i64]),
            data: ArrayData::S32(y),
        },
    )?)
}

/// Trains the classifier, prints its progress, returns its held-out accuracy.
fn train(verbose: bool) -> anyhow::Result<f64> {
    let started = std::time::Instant::now();
    let mut rng = Rng::new(2026);
    let prototypes: Vec<Vec<f32>> = (0..CLASSES)
        .map(|_| (0..PIXELS).map(|_| rng.normal() as f32 * 0.5).collect())
        .collect();
    let train = images(&prototypes, 4096, 2.0, &mut rng)?;
    let test = images(&prototypes, 1024, 2.0, &mut rng)?;

    let mut model = Sequential::new("mnist_mlp", &[28, 28], 42);
    model.add(Flatten)?;
    model.add(Dense::new(128).activation(Activation::Relu))?;
    model.add(Dense::new(CLASSES as i64))?;
    model.compile(CompileOptions {
        optimizer: Optimizer::adam(1e-3),
        loss: Loss::SparseCategoricalCrossentropy { from_logits: true },
        steps_per_execution: 16,
    })?;
    model.set_gradient_accumulation_options(2)?;

    let mut ipu = IpuModel::new(IpuConfig::default());
    let options = FitOptions {
        batch_size: 32,
        epochs: 3,
        verbose,
    };
    let history = model.fit(&mut ipu, &train, &options)?;
    for (epoch, loss) in history.loss.iter().enumerate() {
        println!("epoch {}: loss {loss:.4}", epoch + 1);
    }
    println!(
        "{} executions, {} weight updates, {} simulated cycles",
        history.executions,
        history.updates,
        history.cycles.unwrap_or(0)
    );
    let result = model.evaluate(&mut ipu, &test, 32)?;
    println!(
        "held-out loss {:.4}, accuracy {:.2}%",
        result.loss,
        100.0 * result.accuracy.unwrap_or(0.0)
    );
    println!("{:.1} s on the host", started.elapsed().as_secs_f64());
    Ok(result.accuracy.unwrap_or(0.0))
}

fn main() -> anyhow::Result<()> {
    train(true)?;
    Ok(())
}

#[test]
fn the_classifier_learns_the_classes() {
    let accuracy = train(false).unwrap();
    assert!(accuracy >= 0.95, "held-out accuracy {accuracy}");
}
