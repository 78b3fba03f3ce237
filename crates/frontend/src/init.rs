//! Initial values of weights, drawn on the host from a seed so a model starts the same way
//! every time (Keras's initialisers).

use xla_ir::literal::{ArrayData, ArrayLiteral};
use xla_ir::{ArrayShape, ElementType};

/// How a weight starts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    /// All zeros (Keras's default for biases).
    Zeros,
    /// All ones (normalisation scales).
    Ones,
    /// Uniform in `±sqrt(6 / (fan_in + fan_out))` (Keras's default for kernels).
    GlorotUniform {
        /// Inputs per output unit.
        fan_in: i64,
        /// Outputs per input unit.
        fan_out: i64,
    },
    /// Uniform in `[-limit, limit)`.
    Uniform {
        /// The bound.
        limit: f64,
    },
    /// Normal with mean 0 and this standard deviation.
    Normal {
        /// The standard deviation.
        stddev: f64,
    },
    /// Random 64-bit words (`u64`): the state of a random number generator.
    RandomState,
}

/// A seeded generator (xla-ir's SplitMix64): the same seed gives the same weights on
/// every machine.
#[derive(Debug, Clone)]
pub struct Rng(xla_ir::generate::Rng);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(xla_ir::generate::Rng::new(seed))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u = self.uniform().max(f64::MIN_POSITIVE);
        let v = self.uniform();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    /// A value below `n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

impl Init {
    /// An array of `dims` drawn from this initialiser (f32; u64 for
    /// [`Init::RandomState`]).
    pub fn sample(self, dims: &[i64], rng: &mut Rng) -> ArrayLiteral {
        let n: i64 = dims.iter().product();
        if self == Init::RandomState {
            return ArrayLiteral {
                shape: ArrayShape::new(ElementType::U64, dims),
                data: ArrayData::U64((0..n).map(|_| rng.next_u64()).collect()),
            };
        }
        let values: Vec<f32> = (0..n)
            .map(|_| match self {
                Init::Zeros => 0.0,
                Init::Ones => 1.0,
                Init::GlorotUniform { fan_in, fan_out } => {
                    let limit = (6.0 / (fan_in + fan_out).max(1) as f64).sqrt();
                    (limit * (2.0 * rng.uniform() - 1.0)) as f32
                }
                Init::Uniform { limit } => (limit * (2.0 * rng.uniform() - 1.0)) as f32,
                Init::Normal { stddev } => (stddev * rng.normal()) as f32,
                Init::RandomState => unreachable!("returned above"),
            })
            .collect();
        ArrayLiteral {
            shape: ArrayShape::new(ElementType::F32, dims),
            data: ArrayData::F32(values),
        }
    }
}
