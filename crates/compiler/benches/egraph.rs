//! The e-graph optimiser's time on the corpus's largest programs (the 12-layer encoder,
//! both forms, and the transformer training step). The e-graph sizes are in the pass
//! report: `ipuxla dump FILE --passes`.
//!
//! Run with `cargo bench -p ipuxla-compiler --bench egraph`.

use compiler::IpuConfig;
use compiler::passes::{EgraphOptimiser, Pass, PassContext};
use divan::Bencher;
use std::path::Path;

fn main() {
    divan::main();
}

fn module(case: &str, file: &str) -> xla_ir::Module {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/conformance")
        .join(case)
        .join(file);
    xla_ir::parse_module(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[divan::bench(args = [
    ("bench_encoder_stack12_fwd", "module.hlo"),
    ("bench_encoder_stack12_fwd", "module.opt.hlo"),
    ("bench_transformer_fwd_bwd", "module.hlo"),
])]
fn optimise(bencher: Bencher, (case, file): (&str, &str)) {
    let m = module(case, file);
    let config = IpuConfig::default();
    bencher.bench(|| {
        let mut m = m.clone();
        let mut cx = PassContext {
            config: &config,
            warnings: Vec::new(),
            notes: Vec::new(),
        };
        EgraphOptimiser.run(&mut m, &mut cx).unwrap();
        m
    });
}
