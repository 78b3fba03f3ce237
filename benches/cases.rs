//! Compile (HLO text to a loaded executable, JIT included) and run of each bench case of
//! the corpus on the full ipu2 IPU Model, on generated inputs (the fixtures keep only the
//! modules). `ipuxla bench` prints the same figures beside XLA's; see BENCHMARKS.md.
//!
//! Run with `cargo bench --bench cases`.

use compiler::{IpuConfig, PassOptions};
use divan::Bencher;
use ipuxla::bench::generated_inputs;
use ipuxla::device::LoadedModule;
use std::path::Path;

fn main() {
    divan::main();
}

const CASES: [&str; 4] = [
    "bench_cnn_train_b32",
    "bench_encoder_stack12_fwd",
    "bench_mlp_train_b256",
    "bench_transformer_fwd_bwd",
];

fn text(case: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/conformance")
        .join(case)
        .join("module.hlo");
    std::fs::read_to_string(path).unwrap()
}

#[divan::bench(args = CASES, sample_count = 5, sample_size = 1)]
fn compile(bencher: Bencher, case: &str) {
    let text = text(case);
    let config = IpuConfig::default();
    bencher.bench(|| {
        let module = xla_ir::parse_module(&text).unwrap();
        LoadedModule::load(&module, &config, &PassOptions::default()).unwrap()
    });
}

#[divan::bench(args = CASES, sample_count = 5, sample_size = 1)]
fn run(bencher: Bencher, case: &str) {
    let module = xla_ir::parse_module(&text(case)).unwrap();
    let inputs = generated_inputs(&module);
    let (mut loaded, _) =
        LoadedModule::load(&module, &IpuConfig::default(), &PassOptions::default()).unwrap();
    let prepared = loaded.prepare(&inputs).unwrap();
    bencher.bench_local(|| loaded.run_prepared(&prepared).unwrap());
}
