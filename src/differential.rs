//! The differential check of a generated module (`xla_ir::generate`): it prints and parses
//! back to itself, and its outputs on the IPU Model (a full ipu2, 4 tiles, 4 tiles with
//! `allow_recompute`, and 4 tiles with one [`VARIANTS`] entry chosen by the seed; outlining
//! is on by default) match the reference evaluator's (rtol and atol 1e-4; 4e-3 for f16
//! results and results an f16 value flows into, [`f16_reaches`]); an element that misses
//! may instead match the evaluator's value with every order-dependent sum ([`sums`]) and
//! every function the kernels approximate ([`functions`]) at either end of its error bound,
//! or with every product added to a value rounded once, as a fused multiply-add
//! ([`contractions`]).
//! Shared by `tests/differential.rs` and the `fuzz/` differential target.

mod contractions;
mod functions;
pub mod shrink;
mod sums;

use crate::corpus::differing_elements;
use std::collections::HashMap;
use xla_ir::literal::ArrayLiteral;
use xla_ir::{CompId, ElementType, InstrId, Module, Op, Shape, generate};

/// What each seed also compiles with, one per seed in turn (seed modulo the count): the
/// e-graph optimiser off, or one of the seed's scheduling algorithms in place of the
/// default CHOOSE_BEST. Over a campaign every variant sees as many modules.
pub const VARIANTS: [&str; 5] = [
    "egraph off",
    "POST_ORDER",
    "CLUSTERING",
    "SHORTEST_PATH",
    "LOOK_AHEAD",
];

/// Checks the module of `seed` under `options`; the error says what differed and where.
pub fn check(seed: u64, options: &generate::Options) -> Result<(), String> {
    let module = generated(seed, options)?;
    let inputs = generate::inputs(&module, seed);
    check_module(&module, &inputs, variant_of(seed))
}

/// The [`VARIANTS`] entry seed `seed` compiles with.
pub fn variant_of(seed: u64) -> &'static str {
    VARIANTS[(seed % VARIANTS.len() as u64) as usize]
}

/// Checks `module` on `inputs` as [`check`] checks a generated one, the fourth compile
/// with `variant` (one of [`VARIANTS`]).
pub fn check_module(
    module: &Module,
    inputs: &[xla_ir::Literal],
    variant: &str,
) -> Result<(), String> {
    let want: Vec<ArrayLiteral> = crate::device_loop::leaves(
        xla_ir::eval::evaluate(module, inputs).map_err(|e| format!("evaluator: {e}"))?,
    );
    let halves = f16_reaches(module);
    let evaluate = |m: &Module| xla_ir::eval::evaluate(m, inputs).map(crate::device_loop::leaves);
    let mut ends = Ends::default();
    // The full IPU, 4 tiles, 4 tiles recomputing and 4 tiles with `variant` (outlining is
    // on by default). The four compiles schedule alike computations alike: each is
    // scheduled once.
    compiler::schedule::remembering(|| {
        for (tiles, recompute, varied) in [
            (0, false, false),
            (4, false, false),
            (4, true, false),
            (4, false, true),
        ] {
            let mut config = compiler::IpuConfig::default();
            config.ipu_model.tiles_per_ipu = tiles;
            config.allow_recompute = recompute;
            if varied {
                match variant {
                    "egraph off" => config.optimizations.egraph.enabled = false,
                    algorithm => config.scheduling.algorithm = algorithm.into(),
                }
            }
            let what = format!(
                "IPU Model ({tiles} tiles{}{})",
                if recompute { ", allow_recompute" } else { "" },
                if varied {
                    format!(", {variant}")
                } else {
                    String::new()
                }
            );
            let run = crate::device::run_on_ipu_model(module, &config, inputs)
                .map_err(|e| format!("{what}: {e:#}"))?;
            compare(&what, &run.outputs, &want, &halves, || {
                ends.of(module, |m| evaluate(m).map(|o| vec![o]))
                    .map(|e| e.iter().map(|end| end[0].clone()).collect())
            })?;
        }
        Ok(())
    })
}

/// Checks the module of `seed` on `options.replicas` devices, collectives among them: each
/// device's outputs on the IPU Model (one IPU of 4, then of 16 tiles, per device) match the
/// evaluator's, which runs the devices in lockstep.
pub fn check_replicated(seed: u64, options: &generate::Options) -> Result<(), String> {
    let module = generated(seed, options)?;
    let inputs = generate::device_inputs(&module, seed, options.replicas);
    check_replicated_module(&module, &inputs)
}

/// Checks `module` on as many devices as `inputs` has lists (each device's arguments) as
/// [`check_replicated`] checks a generated one.
pub fn check_replicated_module(
    module: &Module,
    inputs: &[Vec<xla_ir::Literal>],
) -> Result<(), String> {
    let want: Vec<Vec<ArrayLiteral>> = xla_ir::eval::evaluate_replicated(module, inputs)
        .map_err(|e| format!("evaluator: {e}"))?
        .into_iter()
        .map(crate::device_loop::leaves)
        .collect();
    let halves = f16_reaches(module);
    let mut ends = Ends::default();
    // Both compiles schedule alike computations alike: each is scheduled once.
    compiler::schedule::remembering(|| {
        for tiles in [4, 16] {
            let mut config = compiler::IpuConfig::default();
            config.ipu_model.tiles_per_ipu = tiles;
            let run = crate::replicas::run_replicated_on_ipu_model(
                module,
                &config,
                &compiler::PassOptions::default(),
                inputs,
            )
            .map_err(|e| format!("IPU Model ({tiles} tiles per device): {e:#}"))?;
            if run.outputs.len() != want.len() {
                return Err(format!(
                    "IPU Model ({tiles} tiles per device): {} devices' outputs, the evaluator has {}",
                    run.outputs.len(),
                    want.len()
                ));
            }
            for (d, (got, want)) in run.outputs.iter().zip(&want).enumerate() {
                compare(
                    &format!("IPU Model ({tiles} tiles), device {d}"),
                    got,
                    want,
                    &halves,
                    || {
                        let on_devices = |m: &Module| {
                            xla_ir::eval::evaluate_replicated(m, inputs).map(|devices| {
                                devices
                                    .into_iter()
                                    .map(crate::device_loop::leaves)
                                    .collect()
                            })
                        };
                        ends.of(module, on_devices)
                            .map(|e| e.iter().map(|end| end[d].clone()).collect())
                    },
                )?;
            }
        }
        Ok(())
    })
}

/// The module of `seed`, checked to print and parse back to itself.
fn generated(seed: u64, options: &generate::Options) -> Result<xla_ir::Module, String> {
    let module = generate::module(seed, options)
        .map_err(|e| format!("the generator built an invalid module: {e}"))?;
    let text = module.to_string();
    let again = xla_ir::parse_module(&text).map_err(|e| format!("does not parse back: {e}"))?;
    if again.to_string() != text {
        return Err("prints differently after a round trip".into());
    }
    Ok(module)
}

/// The evaluator's results (per device) for the module's other admissible roundings: every
/// order-dependent sum and approximated function at its lower, then its upper end
/// ([`sums::perturbed`]), then every product added to a value fused
/// ([`contractions::contracted`]); computed once a check needs them.
#[derive(Default)]
struct Ends(Option<Vec<Vec<Vec<ArrayLiteral>>>>);

/// What each of [`Ends`]' results is, for messages.
const ENDS: [&str; 3] = [
    "every order-dependent sum and approximated function at the lower end of its error bound",
    "every order-dependent sum and approximated function at the upper end of its error bound",
    "every product added to a value rounded once (a fused multiply-add)",
];

impl Ends {
    /// The results of [`ENDS`] in order, `evaluate` giving each device's outputs for a module.
    fn of<E: std::fmt::Display>(
        &mut self,
        module: &Module,
        evaluate: impl Fn(&Module) -> Result<Vec<Vec<ArrayLiteral>>, E>,
    ) -> Result<&[Vec<Vec<ArrayLiteral>>], String> {
        if self.0.is_none() {
            let modules = [
                sums::perturbed(module, sums::End::Lower)?,
                sums::perturbed(module, sums::End::Upper)?,
                contractions::contracted(module)?,
            ];
            let mut ends = Vec::new();
            for (moved, what) in modules.iter().zip(ENDS) {
                ends.push(evaluate(moved).map_err(|e| format!("evaluator, {what}: {e}"))?);
            }
            self.0 = Some(ends);
        }
        Ok(self.0.as_deref().expect("just filled"))
    }
}

/// `got` against `want`, output by output (rtol and atol 1e-4; to a few f16 ulps, 4e-3, an
/// f16 result or one f16 arithmetic reaches (`halves[k]`, see [`f16_reaches`]): the device
/// computes f16 chains in f32, as XLA's CPU does, and divides by an f16 constant as XLA's
/// simplifier does, by its reciprocal rounded to f16); `what` names the run. An element that
/// misses is also held against `ends()`, the evaluator's outputs under [`ENDS`]' other
/// admissible roundings, and passes if it matches one.
fn compare(
    what: &str,
    got: &[ArrayLiteral],
    want: &[ArrayLiteral],
    halves: &[bool],
    mut ends: impl FnMut() -> Result<Vec<Vec<ArrayLiteral>>, String>,
) -> Result<(), String> {
    let mut moved: Option<Vec<Vec<ArrayLiteral>>> = None;
    for (k, (got, want)) in got.iter().zip(want).enumerate() {
        let half = want.shape.element_type == ElementType::F16 || halves.get(k) == Some(&true);
        let spec = match half {
            true => serde_json::json!({"rtol": 4e-3, "atol": 4e-3}),
            false => serde_json::json!({"rtol": 1e-4, "atol": 1e-4}),
        };
        let differing =
            differing_elements(got, want, &spec).map_err(|e| format!("{what}, output {k}: {e}"))?;
        if differing.is_empty() {
            continue;
        }
        if moved.is_none() {
            moved = Some(ends()?);
        }
        let ends = moved.as_deref().expect("just filled");
        // Elements that miss every end too (each list is in element order).
        let misses = (ends.iter())
            .map(|end| {
                differing_elements(got, &end[k], &spec)
                    .map_err(|e| format!("{what}, output {k}: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let matches_an_end = |i: usize| misses.iter().any(|m| m.binary_search(&i).is_err());
        if let Some(&i) = differing.iter().find(|&&i| !matches_an_end(i)) {
            let text = |a: &ArrayLiteral| a.data.element_text(i);
            let alternatives: Vec<String> = (ends.iter().zip(ENDS))
                .map(|(end, what)| format!("{} with {what}", text(&end[k])))
                .collect();
            return Err(format!(
                "{what}, output {k}: element {i} is {}, expected {} ({spec}; {})",
                text(got),
                text(want),
                alternatives.join("; ")
            ));
        }
    }
    Ok(())
}

/// For each leaf of the entry computation's result, in order, whether an f16 value flows
/// into it: an instruction with an f16 result among its operands, transitively, or in a
/// computation one of them calls. Such a leaf carries f16 roundings even when it is f32 (an
/// f16 quotient converted), so it is held to f16's tolerance, not f32's.
pub fn f16_reaches(module: &Module) -> Vec<bool> {
    let mut calls_f16: HashMap<CompId, bool> = HashMap::new();
    for id in module.post_order() {
        let c = module.computation(id);
        let f16 = c.instructions().any(|(_, i)| {
            has_f16(&i.shape) || i.op.called_computations().iter().any(|k| calls_f16[k])
        });
        calls_f16.insert(id, f16);
    }
    let entry = module.entry_computation();
    let mut reached: HashMap<InstrId, bool> = HashMap::new();
    // Operands come before their users in the computation's order.
    for &id in entry.order() {
        let i = entry.instr(id);
        let f16 = has_f16(&i.shape)
            || i.op.called_computations().iter().any(|k| calls_f16[k])
            || i.operands.iter().any(|o| reached[o]);
        reached.insert(id, f16);
    }
    let mut out = Vec::new();
    leaf_flags(entry, entry.root, &reached, &mut out);
    out
}

/// Appends a flag per array leaf of `id`'s result: a tuple instruction's per operand.
fn leaf_flags(
    c: &xla_ir::Computation,
    id: InstrId,
    reached: &HashMap<InstrId, bool>,
    out: &mut Vec<bool>,
) {
    let i = c.instr(id);
    match i.op {
        Op::Tuple => {
            for &o in &i.operands {
                leaf_flags(c, o, reached, out);
            }
        }
        _ => out.extend(std::iter::repeat_n(reached[&id], array_leaves(&i.shape))),
    }
}

fn array_leaves(shape: &Shape) -> usize {
    match shape {
        Shape::Array(_) => 1,
        Shape::Tuple(elems) => elems.iter().map(array_leaves).sum(),
        Shape::Token => 0,
    }
}

fn has_f16(shape: &Shape) -> bool {
    match shape {
        Shape::Array(a) => a.element_type == ElementType::F16,
        Shape::Tuple(elems) => elems.iter().any(has_f16),
        Shape::Token => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seed 270320 of the campaign, reduced: an f16 division by the constant 1.5 becomes a
    /// multiplication by its reciprocal rounded to f16 (XLA's simplifier), one f16 ulp from
    /// the division for -1.75; converted to f32, that output is held to f16's tolerance,
    /// while an f32 output beside it keeps f32's.
    #[test]
    fn outputs_f16_arithmetic_reaches_are_held_to_f16s_tolerance() {
        let text = "HloModule m
ENTRY main {
  p = f16[] parameter(0)
  k = f16[] constant(1.5)
  d = f16[] divide(p, k)
  c = f32[] convert(d)
  x = f32[] parameter(1)
  y = f32[] constant(1.5)
  e = f32[] divide(x, y)
  ROOT t = (f32[], f32[]) tuple(c, e)
}";
        let module = xla_ir::parse_module(text).unwrap();
        assert_eq!(f16_reaches(&module), [true, false]);
        let half = ArrayLiteral {
            shape: xla_ir::ArrayShape::new(ElementType::F16, &[]),
            data: xla_ir::literal::ArrayData::F16(vec![half::f16::from_f32(-1.75)]),
        };
        let inputs = [half, ArrayLiteral::scalar_f32(-1.75)].map(xla_ir::Literal::Array);
        let want = crate::device_loop::leaves(xla_ir::eval::evaluate(&module, &inputs).unwrap());
        let config = compiler::IpuConfig::default();
        let run = crate::device::run_on_ipu_model(&module, &config, &inputs).unwrap();
        let f32_of = |a: &ArrayLiteral| match &a.data {
            xla_ir::literal::ArrayData::F32(v) => v[0],
            other => panic!("an f32 output, not {other:?}"),
        };
        // The rewrite is XLA's: the IPU Model gives its result, the evaluator the division's.
        assert_eq!(f32_of(&run.outputs[0]), -1.166_015_6);
        assert_eq!(f32_of(&want[0]), -1.166_992_2);
        let no_sums = || Ok(vec![want.clone(), want.clone()]);
        compare("IPU Model", &run.outputs, &want, &[true, false], no_sums).unwrap();
        assert!(compare("IPU Model", &run.outputs, &want, &[false, false], no_sums).is_err());
    }

    /// Seed 284087 of the campaign, reduced: a dot whose terms cancel exactly in the
    /// evaluator's f64 but leave -1e-8 when summed in order in f32, under `floor`. The IPU's
    /// -1 is one end of the sum's rounding error; 1 is no order's result.
    #[test]
    fn a_sum_on_a_step_may_land_on_either_side() {
        let text = "HloModule m
ENTRY main {
  p = f32[4] parameter(0)
  q = f32[4] parameter(1)
  d = f32[] dot(p, q), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  ROOT f = f32[] floor(d)
}";
        let module = xla_ir::parse_module(text).unwrap();
        let inputs = [
            ArrayLiteral::vector_f32(&[1.0, 1e-8, -1.0, -1e-8]),
            ArrayLiteral::vector_f32(&[1.0; 4]),
        ]
        .map(xla_ir::Literal::Array);
        let evaluate = |m: &Module| {
            xla_ir::eval::evaluate(m, &inputs).map(|o| vec![crate::device_loop::leaves(o)])
        };
        let want = evaluate(&module).unwrap().remove(0);
        assert_eq!(want, [ArrayLiteral::scalar_f32(0.0)]);
        let mut ends = Ends::default();
        let moved = ends.of(&module, evaluate).unwrap();
        let floors: Vec<&ArrayLiteral> = moved.iter().map(|end| &end[0][0]).collect();
        assert_eq!(
            floors,
            [
                &ArrayLiteral::scalar_f32(-1.0),
                &ArrayLiteral::scalar_f32(0.0),
                &ArrayLiteral::scalar_f32(0.0)
            ]
        );
        let ends = || Ok(moved.iter().map(|end| end[0].clone()).collect());
        let got = |v: f32| [ArrayLiteral::scalar_f32(v)];
        compare("IPU", &got(-1.0), &want, &[false], ends).unwrap();
        let wrong = compare("IPU", &got(1.0), &want, &[false], ends).unwrap_err();
        assert!(wrong.contains("element 0 is 1, expected 0"), "{wrong}");
    }
}
