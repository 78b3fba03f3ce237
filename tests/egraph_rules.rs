//! The e-graph optimiser's rule tables, "start ⇒ goal": each fixture in `fixtures/egraph/`
//! is optimised (the pipeline stopped after `egraph-optimiser`) and the module is pinned as
//! an insta snapshot; every optimised module evaluates to what the original does.

use ipuxla::compiler::{self, IpuConfig, PassOptions};
use std::path::Path;
use xla_ir::literal::{ArrayData, ArrayLiteral};
use xla_ir::{Literal, Module, Shape};

mod common;

fn module(name: &str) -> Module {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/egraph")
        .join(name);
    xla_ir::parse_module(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn optimised(m: &Module, config: &IpuConfig) -> Module {
    let options = PassOptions {
        stop_after: Some("egraph-optimiser".into()),
        ..PassOptions::default()
    };
    compiler::optimise(m, config, &options).unwrap().0
}

/// Deterministic arguments in [-3, 3) for every parameter of the entry.
fn arguments(m: &Module) -> Vec<Literal> {
    m.entry_computation()
        .parameter_shapes()
        .iter()
        .enumerate()
        .map(|(p, shape)| {
            let Shape::Array(a) = shape else {
                panic!("array parameters")
            };
            let n = a.element_count() as usize;
            let value = |i: usize| ((i * 7 + p * 3) % 23) as f64 * 6.0 / 23.0 - 3.0;
            let data = match a.element_type {
                xla_ir::ElementType::S32 => {
                    ArrayData::S32((0..n).map(|i| value(i) as i32).collect())
                }
                _ => ArrayData::F32((0..n).map(|i| value(i) as f32).collect()),
            };
            Literal::Array(ArrayLiteral {
                shape: a.clone(),
                data,
            })
        })
        .collect()
}

/// The optimised module computes what the original does (to f32 rounding: the activation
/// kernels evaluate the same formulas in one expression).
fn assert_same_values(before: &Module, after: &Module) {
    let args = arguments(before);
    let want = common::leaves(xla_ir::eval::evaluate(before, &args).unwrap());
    let got = common::leaves(xla_ir::eval::evaluate(after, &args).unwrap());
    let spec = serde_json::json!({"rtol": 1e-5, "atol": 1e-6});
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        common::check_output(&format!("{} output {k}", before.name), g, w, &spec);
    }
}

fn opcodes(m: &Module, opcode: &str) -> usize {
    m.entry_computation()
        .instructions()
        .filter(|(_, i)| i.op.name() == opcode)
        .count()
}

#[test]
fn algebra_table() {
    let m = module("algebra.hlo");
    let out = optimised(&m, &IpuConfig::default());
    insta::assert_snapshot!("algebra", out.to_string());
    assert_same_values(&m, &out);
}

#[test]
fn transposes_fold_into_dots() {
    let m = module("dot_transpose.hlo");
    let out = optimised(&m, &IpuConfig::default());
    insta::assert_snapshot!("dot_transpose", out.to_string());
    assert_eq!(opcodes(&out, "transpose"), 0);
    assert_same_values(&m, &out);
}

#[test]
fn activations_table() {
    let m = module("activations.hlo");
    let out = optimised(&m, &IpuConfig::default());
    insta::assert_snapshot!("activations", out.to_string());
    assert_eq!(opcodes(&out, "custom-call"), 4);
    for op in ["tanh", "erf", "logistic", "clamp", "multiply"] {
        assert_eq!(opcodes(&out, op), 0, "{op} left");
    }
    assert_same_values(&m, &out);
}

#[test]
fn dots_sharing_an_input_combine_only_when_asked() {
    let m = module("combine_matmuls.hlo");
    let off = optimised(&m, &IpuConfig::default());
    assert_eq!(opcodes(&off, "dot"), 2);
    let mut config = IpuConfig::default();
    config.optimizations.combine_matmuls = true;
    let on = optimised(&m, &config);
    insta::assert_snapshot!("combine_matmuls", on.to_string());
    assert_eq!(opcodes(&on, "dot"), 1);
    assert_eq!(opcodes(&on, "slice"), 2);
    assert_eq!(opcodes(&on, "concatenate"), 1);
    assert_same_values(&m, &on);
}

#[test]
fn a_dot_feeding_another_is_not_combined_with_it() {
    // b's right operand is computed from a: one dot over both would feed itself.
    let text = r#"HloModule chained

ENTRY main {
  x = f32[8,8]{1,0} parameter(0)
  w = f32[8,8]{1,0} parameter(1)
  a = f32[8,8]{1,0} dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = f32[8,8]{1,0} tanh(a)
  b = f32[8,8]{1,0} dot(x, t), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT r = (f32[8,8]{1,0}, f32[8,8]{1,0}) tuple(a, b)
}
"#;
    let m = xla_ir::parse_module(text).unwrap();
    let mut config = IpuConfig::default();
    config.optimizations.combine_matmuls = true;
    let out = optimised(&m, &config);
    assert_eq!(opcodes(&out, "dot"), 2);
    assert_same_values(&m, &out);
}

#[test]
fn the_pass_can_be_switched_off_and_reports_its_egraph() {
    let m = module("activations.hlo");
    let mut config = IpuConfig::default();
    config.optimizations.egraph.enabled = false;
    let options = PassOptions {
        stop_after: Some("egraph-optimiser".into()),
        ..PassOptions::default()
    };
    let egraph_notes = |report: &compiler::passes::PipelineReport| {
        let pass = report.passes.iter().find(|p| p.name == "egraph-optimiser");
        pass.expect("the e-graph pass ran").notes.clone()
    };
    let (out, report) = compiler::optimise(&m, &config, &options).unwrap();
    assert_eq!(opcodes(&out, "custom-call"), 0);
    assert!(egraph_notes(&report)[0].contains("off"));
    let (_, report) = compiler::optimise(&m, &IpuConfig::default(), &options).unwrap();
    let notes = &egraph_notes(&report);
    assert!(
        notes[0].starts_with("limits: 50000 nodes, 16 iterations"),
        "{notes:?}"
    );
    assert!(
        notes[1].starts_with("main: 34 -> 6 instructions, e-graph "),
        "{notes:?}"
    );
}

/// The activation custom-calls and combined dots run on the IPU Model (each activation
/// one fused kernel) and match the reference evaluator on the unoptimised module.
#[test]
fn optimised_fixtures_run_on_the_ipu_model() {
    let mut config = IpuConfig::default();
    config.ipu_model.tiles_per_ipu = 16;
    config.optimizations.combine_matmuls = true;
    for name in ["activations.hlo", "combine_matmuls.hlo", "algebra.hlo"] {
        let m = module(name);
        let args = arguments(&m);
        let want = common::leaves(xla_ir::eval::evaluate(&m, &args).unwrap());
        let run = ipuxla::device::run_on_ipu_model(&m, &config, &args)
            .unwrap_or_else(|e| panic!("{name}: {e:#}"));
        let spec = serde_json::json!({"rtol": 1e-5, "atol": 1e-6});
        assert_eq!(run.outputs.len(), want.len(), "{name}");
        for (k, (g, w)) in run.outputs.iter().zip(&want).enumerate() {
            common::check_output(&format!("{name} output {k}"), g, w, &spec);
        }
    }
}

#[test]
fn a_gelu_with_a_malformed_flag_is_a_clear_error() {
    let text = r#"HloModule bad_gelu

ENTRY main {
  x = f32[4]{0} parameter(0)
  ROOT g = f32[4]{0} custom-call(x), custom_call_target="Gelu", backend_config={"approximate":2}
}
"#;
    let m = xla_ir::parse_module(text).unwrap();
    let err =
        ipuxla::device::run_on_ipu_model(&m, &IpuConfig::default(), &arguments(&m)).unwrap_err();
    let message = format!("{err:#}");
    assert!(
        message.contains("'g'") && message.contains("approximate"),
        "{message}"
    );
    let err = xla_ir::eval::evaluate(&m, &arguments(&m)).unwrap_err();
    assert!(err.to_string().contains("approximate"), "{err}");
}

/// XLA's simplifier turns a division by a constant into a multiplication by its
/// reciprocal; so does ours, so results round as XLA's do. A division by a variable, or
/// of a constant, stays.
#[test]
fn division_by_a_constant_multiplies_by_the_reciprocal_as_xla_does() {
    let text = "HloModule div\n\nENTRY main {\n  x = f32[4]{0} parameter(0)\n  y = f32[4]{0} parameter(1)\n  c = f32[] constant(0.8)\n  b = f32[4]{0} broadcast(c), dimensions={}\n  by_constant = f32[4]{0} divide(x, b)\n  by_variable = f32[4]{0} divide(x, y)\n  of_constant = f32[4]{0} divide(b, y)\n  ROOT t = (f32[4]{0}, f32[4]{0}, f32[4]{0}) tuple(by_constant, by_variable, of_constant)\n}\n";
    let m = xla_ir::parse_module(text).unwrap();
    let out = optimised(&m, &IpuConfig::default());
    assert_eq!(opcodes(&out, "divide"), 2, "{out}");
    assert_eq!(opcodes(&out, "multiply"), 1, "{out}");
    assert!(out.to_string().contains("constant(1.25)"), "{out}");
    assert_same_values(&m, &out);
}
