//! Every module under `fixtures/fuzz-regressions/` (bugs the differential campaign found,
//! reduced, inputs as constants) gives the reference evaluator's results bit for bit on the
//! IPU Model, on a full ipu2 and on 4 tiles; every one under its `differential/` (failures
//! shrunk by `differential::shrink`) passes the differential check; every text under its
//! `parser/` is refused as it should be.

mod common;

/// The `.hlo` files under `fixtures/fuzz-regressions/` + `sub`, each with its text (at
/// least one).
fn hlo_files(sub: &str) -> (std::path::PathBuf, Vec<(String, String)>) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/fuzz-regressions")
        .join(sub);
    let files: Vec<(String, String)> = (common::file_names(&dir).into_iter())
        .filter(|f| f.ends_with(".hlo"))
        .map(|f| {
            let text = std::fs::read_to_string(dir.join(&f)).unwrap();
            (f, text)
        })
        .collect();
    assert!(!files.is_empty(), "no .hlo files in {}", dir.display());
    (dir, files)
}

#[test]
fn fuzz_regressions_match_the_evaluator_bit_for_bit() {
    for (file, text) in hlo_files("").1 {
        let module = xla_ir::parse_module(&text).unwrap();
        let want = common::leaves(xla_ir::eval::evaluate(&module, &[]).unwrap());
        for tiles in [0, 4] {
            let mut config = ipuxla::compiler::IpuConfig::default();
            config.ipu_model.tiles_per_ipu = tiles;
            let run = ipuxla::device::run_on_ipu_model(&module, &config, &[])
                .unwrap_or_else(|e| panic!("{file} on {tiles} tiles: {e:#}"));
            for (k, (got, want)) in run.outputs.iter().zip(&want).enumerate() {
                let bits = |a: &xla_ir::literal::ArrayLiteral| {
                    ipuxla::compiler::device_data::to_device(&a.data)
                };
                assert_eq!(
                    bits(got),
                    bits(want),
                    "{file} on {tiles} tiles, output {k}: {got:?} vs {want:?}"
                );
            }
        }
    }
}

/// Every text under `fixtures/fuzz-regressions/parser/` (inputs `cargo fuzz` found to
/// panic the parser or verifier) is refused with the words of its `.error` file.
#[test]
fn parser_fuzz_regressions_are_refused_with_their_errors() {
    let (dir, files) = hlo_files("parser");
    for (file, text) in files {
        let want = std::fs::read_to_string(dir.join(file.replace(".hlo", ".error"))).unwrap();
        let err = match xla_ir::parse_module(&text) {
            Err(e) => e.to_string(),
            Ok(m) => xla_ir::verify(&m).expect_err(&file).to_string(),
        };
        assert!(err.contains(want.trim()), "{file}: {err}");
    }
}

/// Every module under `fixtures/fuzz-regressions/differential/` (failures of the
/// differential check, shrunk by `ipuxla::differential::shrink`; the first line names the
/// seed whose generated inputs it takes, and its devices) passes the check: on one device
/// with each of the check's variants, on several as the replicated check runs it.
#[test]
fn shrunk_differential_failures_pass_the_check() {
    use ipuxla::differential;
    use xla_ir::generate;
    for (file, text) in hlo_files("differential").1 {
        let (seed, devices) = differential::shrink::fixture_origin(&text)
            .unwrap_or_else(|| panic!("{file}: no `/* fuzz seed=S devices=D: ... */` line"));
        let module = xla_ir::parse_module(&text).unwrap();
        if devices == 1 {
            let inputs = generate::inputs(&module, seed);
            for variant in differential::VARIANTS {
                differential::check_module(&module, &inputs, variant)
                    .unwrap_or_else(|e| panic!("{file} ({variant}): {e}"));
            }
        } else {
            let inputs = generate::device_inputs(&module, seed, devices);
            differential::check_replicated_module(&module, &inputs)
                .unwrap_or_else(|e| panic!("{file}: {e}"));
        }
    }
}
