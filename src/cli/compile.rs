//! `ipuxla compile`: compile a module once and write the executable to a file
//! (pre-compilation), so `ipuxla run FILE.ipux` runs it without compiling.

use anyhow::{anyhow, bail};
use clap::Args;
use compiler::stored::{self, Source};
use std::path::PathBuf;
use std::time::Instant;

/// Arguments of `ipuxla compile`.
#[derive(Debug, Args)]
pub struct CompileArgs {
    /// The HLO text file to compile.
    pub file: PathBuf,
    /// Where to write the executable (by convention `.ipux`): the compiled program, its host
    /// streams and the module and config it was compiled from. `ipuxla run FILE.ipux` runs it
    /// without compiling, with the same flags that choose the config (or none). The file is
    /// read only by the ipuxla build that wrote it; another build, or a damaged file, is
    /// reported and the module it holds is compiled again.
    #[arg(long, short)]
    pub output: PathBuf,
    #[command(flatten)]
    pub target: super::TargetFlags,
}

/// Runs `ipuxla compile`.
pub fn run(args: CompileArgs) -> anyhow::Result<()> {
    let _progress = crate::progress::Progress::spinner(format!("{}", args.file.display()));
    let file = args.file.display();
    let module = super::load_module(&args.file)?;
    let mut config = args.target.config()?;
    args.target
        .apply_module_options(&args.file, &module, &mut config)?;
    config.check()?;
    if let Some(n) = config.device_loop.iterations_per_loop {
        bail!(
            "{file}: the config asks for a device loop of {n} iterations (device_loop.iterations_per_loop or ipuxla.batch_per_step); which parameters are fed per iteration depends on the inputs, so a device loop is compiled by `ipuxla run --iterations` (with --executable-cache-dir to keep it)"
        );
    }
    if crate::host_split::split(&module)
        .map_err(|e| anyhow!("{file}: {e}"))?
        .is_some()
    {
        bail!(
            "{file}: instructions excluded from the IPU (ipuxla.host) run on the host around the device part; compile the device part alone (`ipuxla convert --remove-excluded-nodes`)"
        );
    }
    let options = args.target.passes.options();
    let start = Instant::now();
    crate::progress::phase("compiling (passes, lowering)");
    let compiled = compiler::compile_with_options(&module, &config, &options)
        .map_err(|e| anyhow!("{file}: {e}"))?;
    let compile_seconds = start.elapsed().as_secs_f64();
    let source = Source::new(&module, &config, &options, None);
    stored::write(&args.output, &source, &compiled)
        .map_err(|e| anyhow!("{}: {e}", args.output.display()))?;
    crate::progress::finish();
    for w in &compiled.warnings {
        eprintln!("warning: {w}");
    }
    let exe = &compiled.executable;
    let bytes = std::fs::metadata(&args.output).map_or(0, |m| m.len());
    outln!(
        "compiled {file} in {:.1} ms: {} IPU(s) of {} tiles, {} compute sets, {} vertices; wrote {} ({:.1} MB)",
        compile_seconds * 1e3,
        exe.num_ipus,
        exe.target.tiles_per_ipu,
        exe.compute_sets.len(),
        exe.compute_sets
            .iter()
            .map(|c| c.vertices.len() + c.codelet_vertices.len())
            .sum::<usize>(),
        args.output.display(),
        bytes as f64 / 1e6
    );
    Ok(())
}
