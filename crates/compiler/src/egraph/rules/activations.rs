//! Activation patterns become one activation custom-call each (`xla_ir::Activation`):
//! GELU in its tanh form (`x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x³)))`) and its
//! erf form (`x * 0.5 * (1 + erf(x / sqrt 2))`), in the operand orders and groupings JAX
//! and TensorFlow emit; swish (`x * logistic(x)`); and popnn's hard sigmoid
//! (`clamp(0, 0.2 x + 0.5, 1)`). Each rule retires the matched root, so the old chain is
//! not extracted; its inner nodes disappear unless something else uses them.
//!
//! Not recognised (left as they are): JAX's exact GELU, which expands `erfc` into a
//! polynomial with no `erf` op, and `relu6(x + 3) / 6`, a different hard sigmoid.

use super::{
    Match, RuleOptions, derived, element_type, is_splat, operands_of, pairs, retire, rule,
};
use crate::egraph::analysis::{HloAnalysis, HloEGraph, add};
use crate::egraph::language::HloNode;
use egg::{Id, Rewrite};
use xla_ir::activation::{
    GELU_ERF_SCALE, GELU_TANH_CUBIC, GELU_TANH_SCALE, HARD_SIGMOID_OFFSET, HARD_SIGMOID_SLOPE,
};
use xla_ir::{Activation, ElementType, Op};

/// The activations table.
pub fn rules() -> Vec<Rewrite<HloNode, HloAnalysis>> {
    let o = RuleOptions::default();
    vec![
        rule("gelu-tanh", "(multiply ?a ?b)", gelu_tanh, o),
        rule("gelu-erf", "(multiply ?a ?b)", gelu_erf, o),
        rule("gelu-erf-halved", "(divide ?a ?b)", gelu_erf_halved, o),
        rule("swish", "(multiply ?a ?b)", swish, o),
        rule("hard-sigmoid", "(clamp ?lo ?y ?hi)", hard_sigmoid, o),
    ]
}

/// `x * x`.
fn is_square(eg: &HloEGraph, s: Id, x: Id) -> bool {
    pairs(eg, s, "multiply").contains(&(x, x))
}

/// `x * x * x` in either grouping, or `x ** 3`.
fn is_cube(eg: &HloEGraph, c: Id, x: Id) -> bool {
    pairs(eg, c, "multiply")
        .into_iter()
        .any(|(a, b)| a == x && is_square(eg, b, x))
        || pairs(eg, c, "power")
            .into_iter()
            .any(|(a, b)| a == x && is_splat(eg, b, 3.0))
}

/// `x * k` for a splat `k` of `value` (either order), or `x / (1 / value)`.
fn is_scaled(eg: &HloEGraph, class: Id, x: Id, value: f64) -> bool {
    pairs(eg, class, "multiply")
        .into_iter()
        .any(|(a, k)| a == x && is_splat(eg, k, value))
        || pairs(eg, class, "divide")
            .into_iter()
            .any(|(a, k)| a == x && is_splat(eg, k, 1.0 / value))
}

/// The tanh GELU's argument: `(x + 0.044715 x³) * sqrt(2/pi)`.
fn is_tanh_argument(eg: &HloEGraph, u: Id, x: Id) -> bool {
    pairs(eg, u, "multiply").into_iter().any(|(s, k)| {
        is_splat(eg, k, GELU_TANH_SCALE)
            && pairs(eg, s, "add").into_iter().any(|(a, cubic)| {
                a == x
                    && pairs(eg, cubic, "multiply")
                        .into_iter()
                        .any(|(c, k)| is_splat(eg, k, GELU_TANH_CUBIC) && is_cube(eg, c, x))
            })
    })
}

/// The erf GELU's argument: `x / sqrt 2` or `x * (1 / sqrt 2)`.
fn is_erf_argument(eg: &HloEGraph, u: Id, x: Id) -> bool {
    is_scaled(eg, u, x, GELU_ERF_SCALE)
}

/// The `φ` (tanh or erf) arguments `u` of `1 + φ(u)`.
fn one_plus(eg: &HloEGraph, class: Id, phi: &str) -> Vec<Id> {
    pairs(eg, class, "add")
        .into_iter()
        .filter(|&(one, _)| is_splat(eg, one, 1.0))
        .flat_map(|(_, t)| operands_of(eg, t, phi))
        .collect()
}

/// The arguments `u` of `0.5 * (1 + φ(u))` or `(1 + φ(u)) / 2`.
fn half_one_plus(eg: &HloEGraph, class: Id, phi: &str) -> Vec<Id> {
    let mut out = Vec::new();
    for (h, k) in pairs(eg, class, "multiply") {
        if is_splat(eg, k, 0.5) {
            out.extend(one_plus(eg, h, phi));
        }
    }
    for (h, k) in pairs(eg, class, "divide") {
        if is_splat(eg, k, 2.0) {
            out.extend(one_plus(eg, h, phi));
        }
    }
    out
}

/// Finds `x` in `root = a * b` where the product is `x * 0.5 * (1 + φ(u(x)))`, grouped as
/// `x * [0.5 (1 + φ)]` or `[0.5 x] * (1 + φ)`; returns `x` and the matched operands.
fn gelu_operand(
    eg: &HloEGraph,
    root: Id,
    phi: &str,
    argument: fn(&HloEGraph, Id, Id) -> bool,
) -> Option<(Id, [Id; 2])> {
    for (a, b) in pairs(eg, root, "multiply") {
        if half_one_plus(eg, b, phi)
            .into_iter()
            .any(|u| argument(eg, u, a))
        {
            return Some((a, [a, b]));
        }
        for (x, k) in pairs(eg, a, "multiply") {
            if is_splat(eg, k, 0.5) && one_plus(eg, b, phi).into_iter().any(|u| argument(eg, u, x))
            {
                return Some((x, [a, b]));
            }
        }
    }
    None
}

fn is_float(eg: &HloEGraph, class: Id) -> bool {
    element_type(eg, class).is_some_and(ElementType::is_float)
}

/// Adds the custom-call of `activation` over `x`, in place of `class`.
fn activation_call(eg: &mut HloEGraph, class: Id, activation: Activation, x: Id) -> Id {
    let op = Op::CustomCall {
        target: activation.target().into(),
        called_computations: Vec::new(),
        attributes: Vec::new(),
    };
    let shape = eg[class].data.shape.clone();
    let mut sig = derived(eg, class, op, shape);
    sig.backend_config = activation.backend_config();
    add(eg, sig, &[x])
}

fn gelu(eg: &mut HloEGraph, m: &Match, phi: &str, approximate: bool) -> Option<Id> {
    if !is_float(eg, m.class) {
        return None;
    }
    let argument = if approximate {
        is_tanh_argument
    } else {
        is_erf_argument
    };
    let (x, matched) = gelu_operand(eg, m.class, phi, argument)?;
    retire(eg, m.class, "multiply", &matched);
    Some(activation_call(
        eg,
        m.class,
        Activation::Gelu { approximate },
        x,
    ))
}

fn gelu_tanh(eg: &mut HloEGraph, m: &Match, _: RuleOptions) -> Option<Id> {
    gelu(eg, m, "tanh", true)
}

fn gelu_erf(eg: &mut HloEGraph, m: &Match, _: RuleOptions) -> Option<Id> {
    gelu(eg, m, "erf", false)
}

/// TensorFlow's `x * (1 + erf(x / sqrt 2)) / 2`.
fn gelu_erf_halved(eg: &mut HloEGraph, m: &Match, _: RuleOptions) -> Option<Id> {
    let (a, b) = (m.var("?a"), m.var("?b"));
    if !is_float(eg, m.class) || !is_splat(eg, b, 2.0) {
        return None;
    }
    let x = pairs(eg, a, "multiply").into_iter().find_map(|(x, h)| {
        one_plus(eg, h, "erf")
            .into_iter()
            .any(|u| is_erf_argument(eg, u, x))
            .then_some(x)
    })?;
    retire(eg, m.class, "divide", &[a, b]);
    Some(activation_call(
        eg,
        m.class,
        Activation::Gelu { approximate: false },
        x,
    ))
}

fn swish(eg: &mut HloEGraph, m: &Match, _: RuleOptions) -> Option<Id> {
    if !is_float(eg, m.class) {
        return None;
    }
    let (x, s) = pairs(eg, m.class, "multiply")
        .into_iter()
        .find(|&(x, s)| operands_of(eg, s, "logistic").contains(&x))?;
    retire(eg, m.class, "multiply", &[x, s]);
    Some(activation_call(eg, m.class, Activation::Swish, x))
}

fn hard_sigmoid(eg: &mut HloEGraph, m: &Match, _: RuleOptions) -> Option<Id> {
    let (lo, y, hi) = (m.var("?lo"), m.var("?y"), m.var("?hi"));
    if !is_float(eg, m.class) || !is_splat(eg, lo, 0.0) || !is_splat(eg, hi, 1.0) {
        return None;
    }
    let x = pairs(eg, y, "add").into_iter().find_map(|(s, k)| {
        if !is_splat(eg, k, HARD_SIGMOID_OFFSET) {
            return None;
        }
        pairs(eg, s, "multiply")
            .into_iter()
            .find(|&(_, slope)| is_splat(eg, slope, HARD_SIGMOID_SLOPE))
            .map(|(x, _)| x)
    })?;
    retire(eg, m.class, "clamp", &[lo, y, hi]);
    Some(activation_call(eg, m.class, Activation::HardSigmoid, x))
}
