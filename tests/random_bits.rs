//! `rng-bit-generator` produces XLA's bits exactly (`fixtures/conformance-rng`, JAX's `rbg`
//! PRNG: key splitting, raw bits, randint, dropout, uniform and normal samples) on the
//! reference evaluator and on the IPU Model at 1472 and at 4 tiles, in both forms: the
//! plain form through the rng-bit-generator expander, XLA's optimised form (the generator
//! already expanded into `u64` arithmetic) through the int64 conversion's word pairs.

mod common;
use common::{check_output, leaves, load};

use ipuxla::compiler::{IpuConfig, PassOptions};
use ipuxla::device::LoadedModule;
use std::path::{Path, PathBuf};
use xla_ir::literal::{ArrayData, ArrayLiteral};

fn case(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/conformance-rng")
        .join(name)
}

/// The case's outputs on the IPU Model with `tiles` tiles.
fn on_ipu_model(case: &Path, file: &str, tiles: usize) -> Vec<ArrayLiteral> {
    let (_, module, inputs) = load(case, file);
    let mut config = IpuConfig::default();
    config.ipu_model.tiles_per_ipu = tiles;
    let what = format!("{}/{file} on {tiles} tiles", case.display());
    let (mut loaded, _) = LoadedModule::load(&module, &config, &PassOptions::default())
        .unwrap_or_else(|e| panic!("{what}: {e:#}"));
    loaded
        .run(&inputs)
        .unwrap_or_else(|e| panic!("{what}: {e:#}"))
        .0
}

fn expected(case: &Path, file: &str, k: usize) -> (ArrayLiteral, serde_json::Value) {
    let c = ipuxla::corpus::Case::read(case, file).unwrap();
    c.expected_output(k).unwrap().expect("stored")
}

#[test]
fn rbg_bits_and_ints_match_xla_bit_for_bit_on_the_evaluator() {
    let case = case("rng_bits_and_ints");
    for file in ["module.hlo", "module.opt.hlo"] {
        let (_, module, inputs) = load(&case, file);
        let got = leaves(xla_ir::eval::evaluate(&module, &inputs).unwrap());
        for (k, g) in got.iter().enumerate() {
            let (want, spec) = expected(&case, file, k);
            assert_eq!(spec["rtol"].as_f64().unwrap_or(0.0), 0.0, "bits are exact");
            check_output(&format!("{file} output {k}"), g, &want, &spec);
            assert_eq!(g.data, want.data, "{file} output {k}: bit for bit");
        }
    }
}

#[test]
fn rbg_bits_and_ints_match_xla_bit_for_bit_on_the_ipu_model() {
    let case = case("rng_bits_and_ints");
    for file in ["module.hlo", "module.opt.hlo"] {
        for tiles in [1472, 4] {
            let got = on_ipu_model(&case, file, tiles);
            for (k, g) in got.iter().enumerate() {
                let (want, _) = expected(&case, file, k);
                assert_eq!(g.data, want.data, "{file} output {k} on {tiles} tiles");
            }
        }
    }
}

/// Dropout, uniform and normal samples match XLA bit for bit: the random bits decide which
/// elements are kept and the uniform samples; the kept elements are `x * 1.25` (the
/// e-graph multiplies by the reciprocal, as XLA's simplifier does) and the normal samples
/// an inverse error function of a uniform, whose `log1p`, log and fused multiply-adds
/// follow XLA's CPU backend (`codegen::math::log1p`, `Expr::multiply_add`).
#[test]
fn rbg_dropout_uniform_and_normal_samples_match_xla_bit_for_bit_on_the_ipu_model() {
    let case = case("rng_dropout_uniform_normal");
    for file in ["module.hlo", "module.opt.hlo"] {
        for tiles in [1472, 4] {
            let got = on_ipu_model(&case, file, tiles);
            for (k, g) in got.iter().enumerate() {
                let (want, _) = expected(&case, file, k);
                assert_eq!(g.data, want.data, "{file} output {k} on {tiles} tiles");
            }
        }
    }
}

fn run_text(text: &str, inputs: &[xla_ir::Literal]) -> (Vec<ArrayLiteral>, Vec<ArrayLiteral>) {
    let module = xla_ir::parse_module(text).unwrap();
    let want = leaves(xla_ir::eval::evaluate(&module, inputs).unwrap());
    let mut config = IpuConfig::default();
    config.ipu_model.tiles_per_ipu = 4;
    let (mut loaded, _) = LoadedModule::load(&module, &config, &PassOptions::default()).unwrap();
    (loaded.run(inputs).unwrap().0, want)
}

fn u64s(v: &[u64]) -> xla_ir::Literal {
    xla_ir::Literal::Array(ArrayLiteral {
        shape: xla_ir::ArrayShape::new(xla_ir::ElementType::U64, &[v.len() as i64]),
        data: ArrayData::U64(v.to_vec()),
    })
}

/// A generator's `u64` state passed in from the host and back out stays exact on the IPU
/// Model: the host streams carry 64-bit integers as word pairs.
#[test]
fn generator_state_crosses_the_host_streams_exactly() {
    let text = "HloModule state\n\nENTRY main {\n  state = u64[2]{0} parameter(0)\n  ROOT r = (u64[2]{0}, u32[4,3]{1,0}) rng-bit-generator(state), algorithm=rng_philox\n}\n";
    let state = u64s(&[0xDEAD_BEEF_0000_0005, u64::MAX - 2]);
    let (got, want) = run_text(text, &[state]);
    assert_eq!(got, want);
    // A 2-word state keeps its key (word 0); the counter advances by the 3 blocks made
    // and wraps (only its low word is kept).
    assert_eq!(got[0].data, ArrayData::U64(vec![0xDEAD_BEEF_0000_0005, 0]));
}

/// A module that does not need exact 64-bit integers narrows them (the seed's int64
/// conversion): 64-bit inputs and outputs still cross the host streams.
#[test]
fn narrowed_64_bit_integers_still_cross_the_host_streams() {
    let text = "HloModule narrow\n\nENTRY main {\n  a = u64[3]{0} parameter(0)\n  ROOT s = u64[3]{0} add(a, a)\n}\n";
    let (got, want) = run_text(text, &[u64s(&[1, 2, 40])]);
    assert_eq!(got, want);
}
