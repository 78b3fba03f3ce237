//! How long estimating a module's profile takes beside one warm run of it (issue 19's
//! measure): the module is compiled for `runtime::estimate` and loaded for runs, as
//! `cargo bench --bench cases -- estimate run` does, then an estimate and a run alternate,
//! so both see the same minute of a noisy machine, and the ratio is taken pair by pair.
//!
//! `cargo run --release --example estimate_vs_run -- fixtures/conformance/bench_encoder_stack12_fwd [PAIRS]`
//! (a case directory holding `module.hlo`, or an HLO file; 20 pairs unless given; inputs
//! generated as `ipuxla bench` generates them).

use anyhow::Context;
use ipuxla::compiler::{IpuConfig, PassOptions};
use ipuxla::device::LoadedModule;
use std::path::Path;
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .context("usage: estimate_vs_run CASE_DIR_OR_HLO [PAIRS]")?;
    let pairs: usize = match args.next() {
        Some(n) => n.parse().context("PAIRS is a number")?,
        None => 20,
    };
    anyhow::ensure!(pairs > 0, "PAIRS must be at least 1");
    let file = match Path::new(&path).is_dir() {
        true => Path::new(&path).join("module.hlo"),
        false => path.into(),
    };
    let text = std::fs::read_to_string(&file).with_context(|| format!("{}", file.display()))?;
    let module = xla_ir::parse_module(&text)?;
    let (config, passes) = (IpuConfig::default(), PassOptions::default());
    let obtained = ipuxla::executable_cache::compile(&module, &config, &passes, None)?;
    let exe = &obtained.compiled.executable;
    let system = ipuxla::runtime::System::new(exe.target.clone(), exe.num_ipus)?;
    let (mut loaded, _) = LoadedModule::load(&module, &config, &passes)?;
    let prepared = loaded.prepare(&ipuxla::bench::generated_inputs(&module))?;
    let (mut estimates, mut runs, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..pairs {
        let start = Instant::now();
        std::hint::black_box(ipuxla::runtime::estimate(exe, &system)?);
        let estimate = start.elapsed().as_secs_f64() * 1e3;
        let start = Instant::now();
        std::hint::black_box(loaded.run_prepared(&prepared)?);
        let run = start.elapsed().as_secs_f64() * 1e3;
        estimates.push(estimate);
        runs.push(run);
        ratios.push(estimate / run);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "{}: estimate {:.1} ms, run {:.1} ms, estimate / run {:.1} % (medians of {pairs} pairs; the ratio's quartiles {:.1} % and {:.1} %)",
        file.display(),
        median(&mut estimates),
        median(&mut runs),
        100.0 * median(&mut ratios),
        100.0 * ratios[pairs / 4],
        100.0 * ratios[(3 * pairs / 4).min(pairs - 1)],
    );
    Ok(())
}
