//! Differential checks of generated modules (`xla_ir::generate`): each prints and parses
//! back to itself, and its outputs on the IPU Model (a full ipu2 and 4 tiles) match the
//! reference evaluator's. `IPUXLA_FUZZ_CASES` sets how many seeds (default 48; the long
//! campaign: `IPUXLA_FUZZ_CASES=100000 IPUXLA_FUZZ_FIRST=N IPUXLA_FUZZ_SIZE=24 cargo test
//! --release --test differential`). A failure prints its seed and module.

mod common;

use xla_ir::generate;
use xla_ir::literal::ArrayLiteral;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The generator's options: `IPUXLA_FUZZ_SIZE` instructions (default 12), f16 arrays too
/// unless `IPUXLA_FUZZ_F16=0`.
fn options() -> generate::Options {
    generate::Options {
        instructions: env("IPUXLA_FUZZ_SIZE", 12) as usize,
        f16: env("IPUXLA_FUZZ_F16", 1) == 1,
        ..Default::default()
    }
}

fn check(seed: u64) -> Result<(), String> {
    let module = generate::module(seed, &options())
        .map_err(|e| format!("the generator built an invalid module: {e}"))?;
    let text = module.to_string();
    let again = xla_ir::parse_module(&text).map_err(|e| format!("does not parse back: {e}"))?;
    if again.to_string() != text {
        return Err("prints differently after a round trip".into());
    }
    let inputs = generate::inputs(&module, seed);
    let want: Vec<ArrayLiteral> = common::leaves(
        xla_ir::eval::evaluate(&module, &inputs).map_err(|e| format!("evaluator: {e}"))?,
    );
    // f16 results: to a few f16 ulps (the device computes chains in f32, as XLA's CPU does).
    let spec = |a: &ArrayLiteral| match a.shape.element_type {
        xla_ir::ElementType::F16 => serde_json::json!({"rtol": 4e-3, "atol": 4e-3}),
        _ => serde_json::json!({"rtol": 1e-4, "atol": 1e-4}),
    };
    for tiles in [0, 4] {
        let mut config = compiler::IpuConfig::default();
        config.ipu_model.tiles_per_ipu = tiles;
        let run = ipuxla::device::run_on_ipu_model(&module, &config, &inputs)
            .map_err(|e| format!("IPU Model ({tiles} tiles): {e:#}"))?;
        for (k, (got, want)) in run.outputs.iter().zip(&want).enumerate() {
            ipuxla::corpus::compare_output(got, want, &spec(want))
                .map_err(|e| format!("IPU Model ({tiles} tiles), output {k}: {e}"))?;
        }
    }
    Ok(())
}

#[test]
fn generated_modules_match_the_evaluator_on_the_ipu_model() {
    let first = env("IPUXLA_FUZZ_FIRST", 0);
    let cases = env("IPUXLA_FUZZ_CASES", 48);
    let mut failures = Vec::new();
    for seed in first..first + cases {
        if let Err(e) = check(seed) {
            let module = generate::module(seed, &options())
                .map(|m| m.to_string())
                .unwrap_or_default();
            failures.push(format!("seed {seed}: {e}\n{module}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {cases} generated modules failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
#[ignore = "prints a generated module: IPUXLA_FUZZ_FIRST=SEED cargo test --test differential -- --ignored --nocapture"]
fn print_a_generated_module() {
    let seed = env("IPUXLA_FUZZ_FIRST", 0);
    println!("{}", generate::module(seed, &options()).unwrap());
}
