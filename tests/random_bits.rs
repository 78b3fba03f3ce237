//! `rng-bit-generator` on the reference evaluator produces XLA's bits exactly
//! (`fixtures/conformance-rng/rng_bits_and_ints`, JAX's `rbg` PRNG: key splitting, raw
//! bits, randint), in both forms; on the IPU Model both forms are `Unsupported` errors for
//! now, never wrong bits.

mod common;
use common::{check_output, load};

use std::path::Path;

#[test]
fn rbg_bits_and_ints_match_xla_bit_for_bit_on_the_evaluator() {
    let case =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/conformance-rng/rng_bits_and_ints");
    for file in ["module.hlo", "module.opt.hlo"] {
        let (_, module, inputs) = load(&case, file);
        let c = ipuxla::corpus::Case::read(&case, file).unwrap();
        let got = common::leaves(xla_ir::eval::evaluate(&module, &inputs).unwrap());
        for (k, g) in got.iter().enumerate() {
            let (want, spec) = c.expected_output(k).unwrap().expect("stored");
            assert_eq!(spec["rtol"].as_f64().unwrap_or(0.0), 0.0, "bits are exact");
            check_output(&format!("{file} output {k}"), g, &want, &spec);
            assert_eq!(g.data, want.data, "{file} output {k}: bit for bit");
        }
        let e = ipuxla::compiler::compile(&module, &ipuxla::compiler::IpuConfig::default())
            .unwrap_err()
            .to_string();
        // XLA's optimised form has the generator expanded into 64-bit integer arithmetic,
        // which the IPU's 32-bit conversion cannot keep: an error, not wrong bits.
        let want = match file {
            "module.hlo" => "random bits on the IPU Model are not built yet",
            _ => "which needs 64-bit integers",
        };
        assert!(e.contains(want), "{file}: {e}");
    }
}
