//! Activation functions carried in HLO as one `custom-call` each (as Graphcore's backend
//! carries its fused popnn non-linearities): the e-graph optimiser forms them from their
//! element-wise patterns, the evaluator evaluates them here, and the IPU lowering runs each
//! as one fused kernel. The formulas are the seed's `nn_ops` ones, computed in f32 for
//! f32, f16 and bf16 values (then rounded to the element type) and in f64 for f64.

use std::fmt;

/// `sqrt(2 / pi)`, the tanh GELU's inner scale.
pub const GELU_TANH_SCALE: f64 = 0.797_884_560_802_865_4;
/// The tanh GELU's cubic coefficient.
pub const GELU_TANH_CUBIC: f64 = 0.044_715;
/// `1 / sqrt(2)`, the erf GELU's scale.
pub const GELU_ERF_SCALE: f64 = std::f64::consts::FRAC_1_SQRT_2;
/// The hard sigmoid's slope (popnn's `HARD_SIGMOID`: `clamp(0.2 x + 0.5, 0, 1)`).
pub const HARD_SIGMOID_SLOPE: f64 = 0.2;
/// The hard sigmoid's offset.
pub const HARD_SIGMOID_OFFSET: f64 = 0.5;

/// An activation function with a custom-call form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Activation {
    /// `nn_ops.gelu(x, approximate)`: `x Φ(x)`, with `Φ` from tanh when `approximate`,
    /// from erf otherwise.
    Gelu {
        /// The tanh form (`0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x³)))`).
        approximate: bool,
    },
    /// `nn_ops.swish(x)`: `x * logistic(x)`.
    Swish,
    /// `nn_ops.hard_sigmoid(x)`: `clamp(0.2 x + 0.5, 0, 1)`.
    HardSigmoid,
}

impl Activation {
    /// The custom-call target.
    pub fn target(self) -> &'static str {
        match self {
            Activation::Gelu { .. } => "Gelu",
            Activation::Swish => "Swish",
            Activation::HardSigmoid => "HardSigmoid",
        }
    }

    /// The custom-call's `backend_config` (GELU's approximate flag).
    pub fn backend_config(self) -> Option<String> {
        match self {
            Activation::Gelu { approximate } => Some(format!("{{\"approximate\":{approximate}}}")),
            _ => None,
        }
    }

    /// The activation a custom-call computes: `None` for other targets, an error for a
    /// known target whose `backend_config` is malformed.
    pub fn from_custom_call(
        target: &str,
        backend_config: Option<&str>,
    ) -> Option<Result<Activation, String>> {
        match target {
            "Gelu" => {
                Some(gelu_flag(backend_config).map(|approximate| Activation::Gelu { approximate }))
            }
            "Swish" => Some(Ok(Activation::Swish)),
            "HardSigmoid" => Some(Ok(Activation::HardSigmoid)),
            _ => None,
        }
    }

    /// The activation of one f32 value.
    pub fn apply_f32(self, x: f32) -> f32 {
        match self {
            Activation::Gelu { approximate: true } => {
                let inner = GELU_TANH_SCALE as f32 * (x + GELU_TANH_CUBIC as f32 * x * x * x);
                0.5 * x * (1.0 + inner.tanh())
            }
            Activation::Gelu { approximate: false } => {
                0.5 * x * (1.0 + libm::erff(x * GELU_ERF_SCALE as f32))
            }
            Activation::Swish => x / (1.0 + (-x).exp()),
            Activation::HardSigmoid => {
                (HARD_SIGMOID_SLOPE as f32 * x + HARD_SIGMOID_OFFSET as f32).clamp(0.0, 1.0)
            }
        }
    }

    /// The activation of one f64 value.
    pub fn apply_f64(self, x: f64) -> f64 {
        match self {
            Activation::Gelu { approximate: true } => {
                0.5 * x * (1.0 + (GELU_TANH_SCALE * (x + GELU_TANH_CUBIC * x * x * x)).tanh())
            }
            Activation::Gelu { approximate: false } => {
                0.5 * x * (1.0 + libm::erf(x * GELU_ERF_SCALE))
            }
            Activation::Swish => x / (1.0 + (-x).exp()),
            Activation::HardSigmoid => {
                (HARD_SIGMOID_SLOPE * x + HARD_SIGMOID_OFFSET).clamp(0.0, 1.0)
            }
        }
    }
}

impl fmt::Display for Activation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Activation::Gelu { approximate } => write!(f, "Gelu(approximate={approximate})"),
            other => f.write_str(other.target()),
        }
    }
}

/// GELU's `approximate` flag from `backend_config` (`{"approximate":true}`, or the same
/// JSON as a quoted HLO string); absent means the seed's default, true.
fn gelu_flag(backend_config: Option<&str>) -> Result<bool, String> {
    let Some(text) = backend_config else {
        return Ok(true);
    };
    let compact: String = text
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '\\' && *c != '"')
        .collect();
    match compact.as_str() {
        "" | "{}" => Ok(true),
        "{approximate:true}" => Ok(true),
        "{approximate:false}" => Ok(false),
        _ => Err(format!(
            "custom-call Gelu: backend_config {text} is not {{\"approximate\":true|false}}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_config_round_trips() {
        for approximate in [true, false] {
            let a = Activation::Gelu { approximate };
            let config = a.backend_config();
            assert_eq!(
                Activation::from_custom_call("Gelu", config.as_deref()),
                Some(Ok(a))
            );
        }
        assert!(matches!(
            Activation::from_custom_call("Gelu", Some("{\"approximate\":2}")),
            Some(Err(_))
        ));
        assert_eq!(Activation::from_custom_call("TopK", None), None);
    }

    #[test]
    fn formulas_match_their_definitions() {
        let g = Activation::Gelu { approximate: false };
        assert!((g.apply_f64(1.0) - 0.841_344_746_068_543).abs() < 1e-12);
        let t = Activation::Gelu { approximate: true };
        assert!((t.apply_f64(1.0) - 0.841_191_990_607_477_2).abs() < 1e-12);
        assert!((Activation::Swish.apply_f32(2.0) - 1.761_594_2).abs() < 1e-6);
        assert_eq!(Activation::HardSigmoid.apply_f32(10.0), 1.0);
        assert_eq!(Activation::HardSigmoid.apply_f32(0.0), 0.5);
    }
}
