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

/// The profile a run would record, without running (`runtime::estimate`): the executable
/// compiled outside, beside [`run`] (issue 19 sets the one against the other).
#[divan::bench(args = CASES, sample_count = 5, sample_size = 1)]
fn estimate(bencher: Bencher, case: &str) {
    let module = xla_ir::parse_module(&text(case)).unwrap();
    let obtained = ipuxla::executable_cache::compile(
        &module,
        &IpuConfig::default(),
        &PassOptions::default(),
        None,
    )
    .unwrap();
    let exe = &obtained.compiled.executable;
    let system = runtime::System::new(exe.target.clone(), exe.num_ipus).unwrap();
    bencher.bench_local(|| runtime::estimate(exe, &system).unwrap());
}

/// The compile phase alone (passes and lowering; the module parsed outside), beside
/// [`read_cached`], the same phase answered from the executable cache.
#[divan::bench(args = CASES, sample_count = 5, sample_size = 1)]
fn compile_only(bencher: Bencher, case: &str) {
    let module = xla_ir::parse_module(&text(case)).unwrap();
    let config = IpuConfig::default();
    bencher.bench(|| {
        ipuxla::executable_cache::compile(&module, &config, &PassOptions::default(), None).unwrap()
    });
}

/// The compile phase when the executable cache holds the module: read, checked, decoded.
#[divan::bench(args = CASES, sample_count = 5, sample_size = 1)]
fn read_cached(bencher: Bencher, case: &str) {
    let module = xla_ir::parse_module(&text(case)).unwrap();
    let dir = std::env::temp_dir().join(format!("ipuxla-bench-cache-{}", std::process::id()));
    let config = IpuConfig {
        executable_cache_path: dir.to_string_lossy().into_owned(),
        ..IpuConfig::default()
    };
    let options = PassOptions::default();
    ipuxla::executable_cache::compile(&module, &config, &options, None).unwrap();
    bencher.bench(|| {
        let obtained = ipuxla::executable_cache::compile(&module, &config, &options, None).unwrap();
        assert!(obtained.read_from.is_some(), "the cache answers");
        obtained
    });
}
