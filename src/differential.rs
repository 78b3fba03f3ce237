//! The differential check of a generated module (`xla_ir::generate`): it prints and parses
//! back to itself, and its outputs on the IPU Model (a full ipu2, 4 tiles, 4 tiles with
//! `allow_recompute`, and 4 tiles with one [`VARIANTS`] entry chosen by the seed; outlining
//! is on by default) match the reference evaluator's (rtol and atol 1e-4; 4e-3 for f16
//! results). Shared by `tests/differential.rs` and the `fuzz/` differential target.

use crate::corpus::compare_output;
use xla_ir::generate;
use xla_ir::literal::ArrayLiteral;

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
    let want: Vec<ArrayLiteral> = crate::device_loop::leaves(
        xla_ir::eval::evaluate(&module, &inputs).map_err(|e| format!("evaluator: {e}"))?,
    );
    // The full IPU, 4 tiles, 4 tiles recomputing and 4 tiles with the seed's variant
    // (outlining is on by default).
    let variant = VARIANTS[(seed % VARIANTS.len() as u64) as usize];
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
        let run = crate::device::run_on_ipu_model(&module, &config, &inputs)
            .map_err(|e| format!("{what}: {e:#}"))?;
        compare(&what, &run.outputs, &want)?;
    }
    Ok(())
}

/// Checks the module of `seed` on `options.replicas` devices, collectives among them: each
/// device's outputs on the IPU Model (one IPU of 4, then of 16 tiles, per device) match the
/// evaluator's, which runs the devices in lockstep.
pub fn check_replicated(seed: u64, options: &generate::Options) -> Result<(), String> {
    let module = generated(seed, options)?;
    let inputs = generate::device_inputs(&module, seed, options.replicas);
    let want: Vec<Vec<ArrayLiteral>> = xla_ir::eval::evaluate_replicated(&module, &inputs)
        .map_err(|e| format!("evaluator: {e}"))?
        .into_iter()
        .map(crate::device_loop::leaves)
        .collect();
    for tiles in [4, 16] {
        let mut config = compiler::IpuConfig::default();
        config.ipu_model.tiles_per_ipu = tiles;
        let run = crate::replicas::run_replicated_on_ipu_model(
            &module,
            &config,
            &compiler::PassOptions::default(),
            &inputs,
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
            compare(&format!("IPU Model ({tiles} tiles), device {d}"), got, want)?;
        }
    }
    Ok(())
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

/// `got` against `want`, output by output (rtol and atol 1e-4; f16 results to a few f16
/// ulps, as the device computes chains in f32, as XLA's CPU does); `what` names the run.
fn compare(what: &str, got: &[ArrayLiteral], want: &[ArrayLiteral]) -> Result<(), String> {
    for (k, (got, want)) in got.iter().zip(want).enumerate() {
        let spec = match want.shape.element_type {
            xla_ir::ElementType::F16 => serde_json::json!({"rtol": 4e-3, "atol": 4e-3}),
            _ => serde_json::json!({"rtol": 1e-4, "atol": 1e-4}),
        };
        compare_output(got, want, &spec).map_err(|e| format!("{what}, output {k}: {e}"))?;
    }
    Ok(())
}
