//! `ipuxla run`: run a module on `.npy` inputs and write `.npy` outputs, in the style of
//! `saved_model_cli run` (`--inputs "0=a.npy;1=b.npy" --outdir DIR`).

use crate::device_loop::OutfeedMode;
use crate::npy::{numpy_name, read_npy, write_npy};
use anyhow::{Context, anyhow, bail};
use clap::{Args, ValueEnum};
use std::path::{Path, PathBuf};
use std::time::Instant;
use xla_ir::eval::Feeds;
use xla_ir::literal::ArrayLiteral;
use xla_ir::{Literal, Module, Shape};

/// Which engine computes the results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Engine {
    /// Compile for an IPU and run on the IPU Model (cycles, memory per tile).
    IpuModel,
    /// The reference evaluator: plain host code with XLA's semantics (the oracle).
    Reference,
}

impl Engine {
    /// The name `--engine` takes, as the run's last line says it.
    fn name(self) -> &'static str {
        match self {
            Engine::Reference => "reference",
            Engine::IpuModel => "ipu-model",
        }
    }
}

/// What is kept of an output produced every iteration of a device loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutfeedModeArg {
    /// Every iteration's value, stacked `[N, *shape]` (the seed's IPUOutfeedMode.ALL).
    All,
    /// Only the last iteration's value (IPUOutfeedMode.LAST).
    Last,
}

/// A pipeline schedule, as the seed names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PipelineScheduleArg {
    /// Every stage at once, each on its own micro-batch (the default).
    Grouped,
    /// Forward and backward stages alternating (training pipelines, built with the
    /// library; a module's forward pipeline has no backward stages and refuses it).
    Interleaved,
    /// One stage at a time (the seed's debugging schedule).
    Sequential,
}

/// How a training pipeline recomputes, as the seed names the modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RecomputationModeArg {
    /// RecomputeThenBackpropagate for Grouped and Interleaved, the other for Sequential.
    Auto,
    /// Recompute a stage's saved values, then run its backward pass.
    #[value(name = "RecomputeThenBackpropagate")]
    RecomputeThenBackpropagate,
    /// Recompute and backpropagate as one computation (lower liveness).
    #[value(name = "RecomputeAndBackpropagateInterleaved")]
    RecomputeAndBackpropagateInterleaved,
}

/// Arguments of `ipuxla run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The HLO text file to run.
    pub file: PathBuf,
    /// Inputs as `KEY=FILE.npy` pairs separated by `;`. A key is a parameter number
    /// (`0`), a parameter name (`pa.1`), or the name without its `.N` suffix (`pa`).
    /// Every parameter of the entry computation needs one.
    #[arg(long, default_value = "")]
    pub inputs: String,
    /// Directory for the results: `output_0.npy`, `output_1.npy`, ... (the result tuple,
    /// flattened). Created if missing. Required unless `--estimate-only`.
    #[arg(long, required_unless_present = "estimate_only")]
    pub outdir: Option<PathBuf>,
    /// Allow writing into an existing non-empty `--outdir`.
    #[arg(long)]
    pub overwrite: bool,
    /// Compile for the IPU Model and print the profile a run would record (cycles per step,
    /// bytes, memory per tile) without running anything: no inputs are read and no outputs
    /// written. Loops whose trip count depends on data count one iteration, branches on
    /// data their costliest branch (the summary says which). `--profile` writes it.
    #[arg(long, conflicts_with_all = ["inputs", "outdir", "overwrite", "engine"])]
    pub estimate_only: bool,
    /// The engine that computes the results. The reference engine compiles nothing: the
    /// compile's flags, --profile and --trace are refused with it.
    #[arg(long, value_enum, ignore_case = true, default_value_t = Engine::IpuModel)]
    pub engine: Engine,
    /// The reference engine: the most bytes of values it holds at once (`512M`, `4G`, or
    /// bytes; default: no limit but 8 GiB per value). The instruction whose value would
    /// pass it fails, naming the bytes, before allocating. Refused with the ipu-model
    /// engine (its limit is per value) and with --replicas or --iterations (not yet).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_host_memory: Option<u64>,
    /// Steps per execution: run the entry computation N times in one device execution (the
    /// seed's `iterations_per_loop`, Keras `steps_per_execution`). A parameter the module's
    /// `input_output_alias` names stays on the device, each iteration reading what the last
    /// wrote (its input is the first value); an input with one more leading dimension, of
    /// N, is fed one slice per iteration; any other input is the same every iteration.
    /// Aliased outputs are written once (their final value), every other output stacked
    /// `[N, *shape]` (see --outfeed-mode). A module whose instructions carry
    /// `frontend_attributes={ipu_stage="K"}` runs as a pipeline over the N micro-batches,
    /// stage K on IPU K (--num-ipus). Overrides `device_loop.iterations_per_loop` in
    /// --config.
    #[arg(long, visible_alias = "batch-per-step", value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..), conflicts_with = "estimate_only")]
    pub iterations: Option<u64>,
    /// Run N replicas of the module in lockstep (data parallelism: `replica-id` and
    /// `partition-id` give each its number, collectives exchange between them). An input
    /// with one more leading dimension, of N, gives replica r its slice r; any other input
    /// goes to every replica. Every output is written stacked `[N, *shape]`, replica first.
    /// On the IPU Model each replica runs on its own IPU (placed by `selection_order` in
    /// --config; AUTO is HOOF), collectives cross the IPU-Links, and --profile writes a
    /// JSON list of the replicas' profiles. The module's header must say it runs on N
    /// devices (`replica_count` x `num_partitions`). With --iterations (the IPU Model),
    /// every replica runs the device loop; a file may then hold the value, one per replica
    /// `[N, ...]`, one per iteration `[I, ...]`, or both, replica first `[N, I, ...]`
    /// (when N = I, a single leading dimension is the replicas'). Built with the `mpi`
    /// feature and started by `mpirun -np P`, the P processes share the replicas (P must
    /// divide N) and process 0 writes the outputs.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..),
          conflicts_with_all = ["estimate_only", "infeed"])]
    pub replicas: Option<u64>,
    /// What is kept of a value produced again and again: each outfeed's values and, with
    /// --iterations, each output stacked over iterations (default all; overrides
    /// `device_loop.outfeed_mode` in --config). Refused when the module has neither.
    #[arg(long, value_enum, ignore_case = true)]
    pub outfeed_mode: Option<OutfeedModeArg>,
    /// Values for the module's infeeds as `NAME=FILE.npy` pairs separated by `;`: NAME is
    /// an infeed's `infeed_config`, or its number among the unnamed infeeds in program
    /// order; each slice of the file's leading dimension is one value, dequeued in order.
    /// Outfeeds are written as `DIR/outfeed_NAME.npy` (values stacked, or the last with
    /// `--outfeed-mode last`).
    #[arg(long, default_value = "")]
    pub infeed: String,
    /// How a module with `ipu_stage` attributes pipelines under --iterations
    /// (`pipelining.pipeline_schedule`; default grouped); refused where no pipeline is
    /// built (no stages, or no --iterations, and no --optimizer).
    #[arg(long, value_enum, ignore_case = true)]
    pub pipeline_schedule: Option<PipelineScheduleArg>,
    /// The IPU of each pipeline stage, e.g. `3,2,1,0` (`pipelining.device_mapping`;
    /// default: stage K on IPU K).
    #[arg(long, value_delimiter = ',', value_name = "IPU,IPU,...")]
    pub device_mapping: Option<Vec<usize>>,
    /// With --optimizer and --allow-recompute: how stages recompute
    /// (`pipelining.recomputation_mode`; default Auto). Only training pipelines have modes.
    #[arg(
        long,
        value_enum,
        ignore_case = true,
        value_name = "MODE",
        requires = "optimizer"
    )]
    pub recomputation_mode: Option<RecomputationModeArg>,
    /// Train the module as a training pipeline: FILE is a loss module, `(weights...,
    /// micro-batch inputs...) -> loss` (a float scalar). A parameter given once (its own
    /// shape) is a weight; one given per micro-batch (a leading dimension of --iterations)
    /// is data. Its `ipu_stage` stages become the pipeline's stages (none: one stage), and
    /// ipuxla differentiates each stage: no gradient is written by hand. `sgd:LR` updates
    /// the weights by `LR` times the mean gradient of every --gradient-accumulation
    /// micro-batches. Writes `output_0.npy`, the micro-batches' losses `[N]`, then one
    /// `output_K.npy` per weight (in parameter order), trained. --pipeline-schedule and
    /// --device-mapping act on it; the reference engine runs the same pipeline's
    /// arithmetic.
    #[arg(long, value_name = "sgd:LR", conflicts_with_all = ["replicas", "infeed", "outfeed_mode", "estimate_only"])]
    pub optimizer: Option<String>,
    /// With --optimizer: micro-batches per weight update (the seed's
    /// `gradient_accumulation_count`; default: all --iterations, one update per execution;
    /// --iterations must be a multiple). Grouped and Interleaved need at least one
    /// micro-batch per stage.
    #[arg(long, value_name = "M", requires = "optimizer",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub gradient_accumulation: Option<u64>,
    /// Keep compiled executables in DIR (`executable_cache_path`; created if missing): a
    /// run compiles the module once for its config and later runs read `DIR/KEY.ipux`
    /// instead of compiling. A truncated, corrupt or other-build entry is reported as a
    /// warning, compiled again and replaced. Training pipelines (--optimizer) are cached
    /// by their stages' modules and options.
    #[arg(long, value_name = "DIR")]
    pub executable_cache_dir: Option<PathBuf>,
    /// Write the run's profile (cycles and bytes per step, memory per tile) as JSON (the
    /// IPU Model's: refused before running when nothing would run on it).
    #[arg(long, value_name = "FILE.json")]
    pub profile: Option<PathBuf>,
    /// Write the run as a Chrome/Perfetto trace (open in ui.perfetto.dev): one process per
    /// replica, tracks for compute, exchange, sync, IPU-Links and host streams, a slice per
    /// step in simulated time.
    #[arg(long, value_name = "FILE.json")]
    pub trace: Option<PathBuf>,
    #[command(flatten)]
    pub target: super::TargetFlags,
}

/// The IpuConfig the flags describe, over `base` (the defaults, or the config a stored
/// executable was compiled for) when `--config` is not given.
fn config_of(args: &RunArgs, base: compiler::IpuConfig) -> anyhow::Result<compiler::IpuConfig> {
    let mut c = args.target.config_over(base)?;
    if let Some(s) = args.pipeline_schedule {
        c.pipelining.pipeline_schedule = match s {
            PipelineScheduleArg::Grouped => "Grouped",
            PipelineScheduleArg::Interleaved => "Interleaved",
            PipelineScheduleArg::Sequential => "Sequential",
        }
        .into();
    }
    if let Some(m) = &args.device_mapping {
        c.pipelining.device_mapping = m.clone();
    }
    if let Some(m) = args.recomputation_mode {
        c.pipelining.recomputation_mode = match m {
            RecomputationModeArg::Auto => "Auto",
            RecomputationModeArg::RecomputeThenBackpropagate => "RecomputeThenBackpropagate",
            RecomputationModeArg::RecomputeAndBackpropagateInterleaved => {
                "RecomputeAndBackpropagateInterleaved"
            }
        }
        .into();
    }
    if let Some(n) = args.iterations {
        c.device_loop.iterations_per_loop = Some(n);
    }
    if let Some(m) = args.outfeed_mode {
        c.device_loop.outfeed_mode = match m {
            OutfeedModeArg::All => "ALL",
            OutfeedModeArg::Last => "LAST",
        }
        .into();
    }
    if let Some(dir) = &args.executable_cache_dir {
        c.executable_cache_path = dir
            .to_str()
            .ok_or_else(|| anyhow!("--executable-cache-dir {}: not UTF-8", dir.display()))?
            .to_string();
    }
    c.check()?;
    Ok(c)
}

/// Runs `ipuxla run`.
pub fn run(mut args: RunArgs) -> anyhow::Result<()> {
    let _progress = crate::progress::Progress::spinner(format!("{}", args.file.display()));
    let (module, mut stored) = match super::load::load_stored(&args.file)? {
        Some((module, stored)) => (module, Some(stored)),
        None => (super::load_module(&args.file)?, None),
    };
    // A stored executable's flags start from the config it was compiled for.
    let base = stored
        .as_ref()
        .map_or_else(compiler::IpuConfig::default, |s| s.config.clone());
    let mut config = config_of(&args, base)?;
    args.target
        .apply_module_options(&args.file, &module, &mut config)?;
    // The config's device loop, unless the flags set it (they are in the config now).
    args.iterations = config.device_loop.iterations_per_loop;
    if let Some(stored) = &stored {
        check_stored(&args, &config, stored)?;
    }
    let pipelining = super::given(&[
        ("--pipeline-schedule", args.pipeline_schedule.is_some()),
        ("--device-mapping", args.device_mapping.is_some()),
    ]);
    let staged = compiler::has_pipeline_stages(module.entry_computation());
    if !pipelining.is_empty() && args.optimizer.is_none() && (!staged || args.iterations.is_none())
    {
        bail!(
            "{}: pipelining acts on a module with `ipu_stage` attributes run with --iterations, or on a loss module trained with --optimizer; {} {}",
            pipelining.join(", "),
            args.file.display(),
            if staged {
                "has stages but runs without --iterations"
            } else {
                "has no stages"
            }
        );
    }
    if args.estimate_only && args.iterations.is_some() {
        bail!(
            "--estimate-only estimates one run of the module as written; the config's device_loop.iterations_per_loop asks for a device loop (run it, or leave the key out)"
        );
    }
    if args.outfeed_mode.is_none() && config.device_loop.keeps_last_only()? {
        args.outfeed_mode = Some(OutfeedModeArg::Last);
    }
    let host =
        crate::host_split::split(&module).map_err(|e| anyhow!("{}: {e}", args.file.display()))?;
    if args.estimate_only {
        return match &host {
            // Instructions excluded from the IPU run on the host: the device part is what
            // the IPU Model estimates.
            Some(split) if args.engine == Engine::IpuModel => match &split.device {
                Some(device) => {
                    eprintln!(
                        "note: the instructions excluded from the IPU run on the host; estimating the device part"
                    );
                    estimate(&args, &device.module, &config)
                }
                None => bail!(
                    "{}: every instruction is excluded from the IPU (no_ipu_placement): there is nothing to estimate",
                    args.file.display()
                ),
            },
            _ => estimate(&args, &module, &config),
        };
    }
    if host.is_some()
        && args.engine == Engine::IpuModel
        && (args.iterations.is_some() || args.replicas.is_some() || args.optimizer.is_some())
    {
        bail!(
            "{}: instructions excluded from the IPU (ipuxla.host) run on the host around one plain run; --iterations, --replicas and --optimizer do not take them yet (remove them with `convert --remove-excluded-nodes`, or run on the reference engine)",
            args.file.display()
        );
    }
    if args.max_host_memory.is_some()
        && (args.engine != Engine::Reference
            || args.iterations.is_some()
            || args.replicas.is_some())
    {
        bail!(
            "--max-host-memory bounds the reference engine's values on a plain run; the ipu-model engine limits each value to 8 GiB, and runs with --replicas or --iterations do not take it yet"
        );
    }
    // Before anything runs: a run with nothing on the IPU Model would write its outputs,
    // then have no profile to write.
    if args.profile.is_some() || args.trace.is_some() {
        if args.engine == Engine::Reference {
            bail!(
                "--profile, --trace: the reference engine records no profile; run on the ipu-model engine"
            );
        }
        if host.as_ref().is_some_and(|split| split.device.is_none()) {
            bail!(
                "--profile, --trace: {} places no instruction on the IPU (no_ipu_placement): it runs on the host, with no profile",
                args.file.display()
            );
        }
    }
    let mut compiling = args.target.given_for_compiling();
    compiling.extend(&pipelining);
    if args.engine == Engine::Reference && !compiling.is_empty() {
        bail!(
            "{}: the reference engine compiles nothing, so compile flags would not act (run on the ipu-model engine, or leave them out)",
            compiling.join(", ")
        );
    }
    if args.engine == Engine::Reference && !config.executable_cache_path.is_empty() {
        bail!(
            "executable_cache_path (--executable-cache-dir) keeps the IPU Model's executables; the reference engine compiles nothing (run on the ipu-model engine, or leave it out)"
        );
    }
    if args.engine == Engine::Reference && config.floating_point_behaviour.mode().is_active() {
        bail!(
            "floating_point_behaviour acts on the IPU Model's kernels; the reference engine computes with IEEE defaults (run on the ipu-model engine, or turn the flags off)"
        );
    }
    let outdir = args
        .outdir
        .as_deref()
        .expect("clap: required unless --estimate-only");
    check_outdir(outdir, args.overwrite)?;
    let names = xla_ir::eval::FeedNames::of(&module);
    if args.outfeed_mode.is_some() && args.iterations.is_none() && names.outfeeds.is_empty() {
        bail!(
            "--outfeed-mode: {} has no outfeed and no --iterations, so nothing is produced more than once",
            args.file.display()
        );
    }
    let mut feeds = read_infeeds(&names, &args.infeed)?;
    #[cfg(not(feature = "mpi"))]
    if let Some(size) = std::env::var("OMPI_COMM_WORLD_SIZE")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .filter(|&p| p > 1)
    {
        bail!(
            "started by mpirun as one of {size} processes, but this ipuxla was built without the mpi feature: every process would run every replica (cargo build --release --features mpi)"
        );
    }
    #[cfg(feature = "mpi")]
    let mpi = crate::mpi::Mpi::from_launcher()?.filter(|m| runtime::Transport::size(m) > 1);
    #[cfg(feature = "mpi")]
    if let Some(mpi) = &mpi {
        let Some(n) = args.replicas else {
            bail!(
                "under mpirun ({} processes) ipuxla run needs --replicas N: the processes share the replicas",
                runtime::Transport::size(mpi)
            );
        };
        let processes = crate::replicas::Processes { transport: mpi };
        return match run_replicated(&args, &module, &config, outdir, n, Some(processes)) {
            Ok(()) => Ok(()),
            Err(e) => {
                // The other processes may be waiting at a collective for this one.
                eprintln!("error: process {}: {e:#}", runtime::Transport::rank(mpi));
                mpi.abort(1)
            }
        };
    }
    if let Some(n) = args.replicas {
        return run_replicated(&args, &module, &config, outdir, n, None);
    }
    if let Some(optimizer) = &args.optimizer {
        return run_training(&args, optimizer, &module, &config, outdir);
    }
    let leading: Vec<Leading> = args
        .iterations
        .map(iterations_leading)
        .into_iter()
        .collect();
    let inputs = read_inputs(&module, &args.inputs, &leading)?;
    let start = Instant::now();
    let device_loop = match args.iterations {
        Some(n) => Some(
            crate::device_loop::device_loop_for(&module, n, &inputs)
                .map_err(|e| anyhow!("{}: {e:#}", args.file.display()))?,
        ),
        None => None,
    };
    let mode = match args.outfeed_mode {
        Some(OutfeedModeArg::Last) => OutfeedMode::Last,
        Some(OutfeedModeArg::All) | None => OutfeedMode::All,
    };
    let (outputs, device) = match (args.engine, device_loop) {
        (Engine::Reference, Some(lp)) => (
            crate::device_loop::evaluate_loop(&module, &lp, &inputs, mode, &mut feeds)
                .map_err(|e| anyhow!("{}: {e:#}", args.file.display()))?,
            None,
        ),
        (Engine::IpuModel, Some(lp)) => {
            let options = args.target.passes.options();
            let mut run = crate::device::run_device_loop_on_ipu_model(
                &module, &config, &options, &inputs, lp, mode, &mut feeds,
            )
            .map_err(|e| anyhow!("{}: {e:#}", args.file.display()))?;
            crate::progress::finish();
            for w in &run.warnings {
                eprintln!("warning: {w}");
            }
            (std::mem::take(&mut run.outputs), Some(run))
        }
        (Engine::Reference, None) => (
            crate::device_loop::leaves(
                xla_ir::eval::evaluate_within(
                    &module,
                    &inputs,
                    &mut feeds,
                    args.max_host_memory.unwrap_or(u64::MAX),
                )
                .map_err(|e| anyhow!("{}: {e}", args.file.display()))?,
            ),
            None,
        ),
        (Engine::IpuModel, None) => {
            let options = args.target.passes.options();
            let mut device_run = None;
            let file = &args.file;
            let mut on_device =
                |m: &Module, ins: &[Literal]| -> anyhow::Result<Vec<ArrayLiteral>> {
                    let mut run = match stored.take() {
                        Some(s) => match s.compiled {
                            Ok(compiled) => {
                                run_stored(compiled, s.read_seconds, file, m, ins, &mut feeds)?
                            }
                            Err(e) => {
                                eprintln!(
                                    "warning: {}: {e}; compiling the module it holds again",
                                    file.display()
                                );
                                let options = compiler::PassOptions {
                                    dump_to: None,
                                    stop_after: s.stop_after,
                                };
                                crate::device::run_on_ipu_model_feeding(
                                    m, &config, &options, ins, &mut feeds,
                                )?
                            }
                        },
                        None => crate::device::run_on_ipu_model_feeding(
                            m, &config, &options, ins, &mut feeds,
                        )?,
                    };
                    let outputs = std::mem::take(&mut run.outputs);
                    device_run = Some(run);
                    Ok(outputs)
                };
            let outputs = match &host {
                Some(split) => crate::host_split::run(split, &inputs, on_device),
                None => on_device(&module, &inputs),
            }
            .map_err(|e| anyhow!("{}: {e:#}", args.file.display()))?;
            crate::progress::finish();
            match &device_run {
                Some(run) => {
                    for w in &run.warnings {
                        eprintln!("warning: {w}");
                    }
                }
                None => eprintln!(
                    "note: no instruction is placed on the IPU (no_ipu_placement): the module ran on the host"
                ),
            }
            (outputs, device_run)
        }
    };
    let elapsed = start.elapsed();
    let outfeeds = outfeed_files(&names, &mut feeds, mode)?;
    let named = outputs
        .iter()
        .enumerate()
        .map(|(k, o)| (format!("output_{k}.npy"), o))
        .chain(outfeeds.iter().map(|(f, o)| (f.clone(), o)));
    write_outputs(outdir, named)?;
    crate::progress::finish();
    outln!(
        "ran {} on the {} engine in {:.3} ms",
        args.file.display(),
        args.engine.name(),
        elapsed.as_secs_f64() * 1e3
    );
    report_device_run(&args, device.as_ref())
}

/// Refuses what a stored executable cannot do: a config other than the one it was compiled
/// for, pass flags (they act when compiling), and the runs that compile a module their own
/// way.
fn check_stored(
    args: &RunArgs,
    config: &compiler::IpuConfig,
    stored: &super::load::StoredExecutable,
) -> anyhow::Result<()> {
    let file = args.file.display();
    let compile_it = "compile the module with them (`ipuxla compile`), or run the HLO file";
    if args.target.passes.dump_to.is_some() || args.target.passes.stop_after.is_some() {
        bail!(
            "{file} is compiled: --dump-to and --stop-after act when compiling; give them to `ipuxla compile`"
        );
    }
    if args.executable_cache_dir.is_some() {
        bail!("{file} is compiled already: --executable-cache-dir has nothing to keep");
    }
    let runs = [
        (args.estimate_only, "--estimate-only"),
        (args.iterations.is_some(), "--iterations (a device loop)"),
        (args.replicas.is_some(), "--replicas"),
        (args.optimizer.is_some(), "--optimizer"),
    ];
    if let Some((_, what)) = runs.iter().find(|(on, _)| *on) {
        bail!(
            "{file} is a stored executable of one plain run; {what} is not available for stored executables yet (run the HLO file, with --executable-cache-dir to compile it once)"
        );
    }
    let differences = config_differences(&stored.config, config);
    if !differences.is_empty() {
        bail!(
            "{file} was compiled for another configuration: {}; {compile_it}",
            differences.join(", ")
        );
    }
    Ok(())
}

/// The keys (dotted) where `asked` differs from `compiled`, each with both values; where
/// executables are cached is not a difference.
fn config_differences(compiled: &compiler::IpuConfig, asked: &compiler::IpuConfig) -> Vec<String> {
    fn leaves(prefix: &str, v: &serde_json::Value, out: &mut Vec<(String, String)>) {
        match v {
            serde_json::Value::Object(map) if !map.is_empty() => {
                for (k, v) in map {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    leaves(&key, v, out);
                }
            }
            _ => out.push((prefix.to_string(), v.to_string())),
        }
    }
    let flat = |c: &compiler::IpuConfig| {
        let mut c = c.clone();
        c.executable_cache_path.clear();
        let mut out = Vec::new();
        leaves("", &serde_json::to_value(&c).unwrap_or_default(), &mut out);
        out
    };
    let (was, now) = (flat(compiled), flat(asked));
    let mut keys: Vec<&String> = was.iter().chain(&now).map(|(k, _)| k).collect();
    keys.sort();
    keys.dedup();
    let value = |list: &[(String, String)], k: &String| {
        list.iter()
            .find(|(key, _)| key == k)
            .map_or("(none)".to_string(), |(_, v)| v.clone())
    };
    keys.into_iter()
        .filter_map(|k| {
            let (a, b) = (value(&was, k), value(&now, k));
            (a != b).then(|| format!("{k} is {b} here but {a} in the file"))
        })
        .collect()
}

/// Runs a stored executable once on `inputs`: loaded without compiling.
fn run_stored(
    compiled: compiler::Compiled,
    read_seconds: f64,
    file: &Path,
    module: &Module,
    inputs: &[Literal],
    feeds: &mut Feeds,
) -> anyhow::Result<crate::device::DeviceRun> {
    let declared = crate::device::result_leaves(module);
    let (loaded, load_seconds) = crate::device::LoadedModule::from_compiled(
        compiled,
        declared,
        None,
        runtime::EngineOptions::default(),
        None,
    )?;
    let timings = crate::device::LoadTimings {
        compile_seconds: read_seconds,
        load_seconds,
        read_from: Some(file.to_path_buf()),
    };
    crate::device::run_once(loaded, timings, inputs, feeds)
}

/// `--optimizer`: the loss module trained as a training pipeline over the --iterations
/// micro-batches.
fn run_training(
    args: &RunArgs,
    optimizer: &str,
    module: &Module,
    config: &compiler::IpuConfig,
    outdir: &Path,
) -> anyhow::Result<()> {
    let file = args.file.display();
    let learning_rate: f64 = match optimizer.split_once(':') {
        Some(("sgd", lr)) => lr
            .trim()
            .parse()
            .map_err(|_| anyhow!("--optimizer {optimizer}: '{lr}' is not a learning rate"))?,
        _ => bail!(
            "--optimizer {optimizer}: the optimisers are sgd:LR (training pipelines keep no optimiser state yet)"
        ),
    };
    let Some(n) = args.iterations else {
        bail!(
            "--optimizer trains over micro-batches: give --iterations N (micro-batches per execution)"
        );
    };
    let accumulation = args.gradient_accumulation.unwrap_or(n);
    if !n.is_multiple_of(accumulation) {
        bail!(
            "--iterations {n} is not a multiple of --gradient-accumulation {accumulation}: an execution runs whole weight updates"
        );
    }
    let inputs = read_inputs(module, &args.inputs, &[iterations_leading(n)])?;
    let lp = crate::device_loop::device_loop_for(module, n, &inputs)
        .map_err(|e| anyhow!("{file}: {e:#}"))?;
    let entry = module.entry_computation();
    let mut trained = Vec::with_capacity(lp.fed.len());
    for (k, (&fed, p)) in lp.fed.iter().zip(entry.parameters()).enumerate() {
        let instr = entry.instr(p);
        let float = instr
            .shape
            .as_array()
            .is_some_and(|a| a.element_type.is_float());
        if !fed && !float {
            bail!(
                "{file}: parameter {k} ({}) is given once, so it is a weight, but it is {}: weights are float arrays (give it per micro-batch, a leading dimension of {n}, to make it data)",
                instr.name,
                instr.shape
            );
        }
        trained.push(!fed);
    }
    let mut tp = crate::pipeline::loss::pipeline_from_loss(
        module,
        &trained,
        learning_rate,
        accumulation,
        n / accumulation,
    )
    .map_err(|e| anyhow!("{file}: {e:#}"))?;
    tp.pipeline.schedule = config.pipelining.schedule()?;
    tp.pipeline.recomputation_mode = config.pipelining.recomputation_mode()?;
    tp.pipeline.device_mapping = config.pipelining.device_mapping.clone();
    let weights: Vec<Literal> = tp.weights.iter().map(|&p| inputs[p].clone()).collect();
    let batches: Vec<Literal> = tp.data.iter().map(|&p| inputs[p].clone()).collect();
    let start = Instant::now();
    let (outputs, device) = match args.engine {
        Engine::IpuModel => {
            let mut run = crate::pipeline::run_training_pipeline_on_ipu_model(
                &tp.pipeline,
                config,
                &weights,
                &batches,
            )
            .map_err(|e| anyhow!("{file}: {e:#}"))?;
            crate::progress::finish();
            for w in &run.warnings {
                eprintln!("warning: {w}");
            }
            (std::mem::take(&mut run.outputs), Some(run))
        }
        Engine::Reference => (
            crate::pipeline::evaluate_training_pipeline(&tp.pipeline, &weights, &batches)
                .map_err(|e| anyhow!("{file}: {e:#}"))?,
            None,
        ),
    };
    let elapsed = start.elapsed();
    // The losses, then the trained weights in parameter order.
    let mut order: Vec<(usize, &ArrayLiteral)> = tp
        .weights
        .iter()
        .zip(&outputs[1..])
        .map(|(&p, w)| (p, w))
        .collect();
    order.sort_by_key(|(p, _)| *p);
    let named = std::iter::once(("output_0.npy".to_string(), &outputs[0])).chain(
        order
            .iter()
            .enumerate()
            .map(|(k, (_, w))| (format!("output_{}.npy", k + 1), *w)),
    );
    write_outputs(outdir, named)?;
    crate::progress::finish();
    outln!(
        "trained {file} as a {}-stage pipeline ({} updates of {accumulation} micro-batches) on the {} engine in {:.3} ms",
        tp.pipeline.stages.len(),
        n / accumulation,
        args.engine.name(),
        elapsed.as_secs_f64() * 1e3
    );
    report_device_run(args, device.as_ref())
}

/// Prints the IPU Model's summary of a run and writes its `--profile` and `--trace`
/// (`device`: `None` when nothing ran on the IPU Model, where `run` refused those two
/// options before running).
fn report_device_run(
    args: &RunArgs,
    device: Option<&crate::device::DeviceRun>,
) -> anyhow::Result<()> {
    match device {
        Some(run) => {
            crate::progress::finish();
            out!("{}", super::summary::summary(run));
            write_profile(args.profile.as_deref(), &run.profile)?;
            write_trace(args.trace.as_deref(), &[("IPU Model".into(), &run.profile)])
        }
        None => Ok(()),
    }
}

/// `--replicas N`: the module on N replicas in lockstep, every output stacked replica
/// first.
fn run_replicated(
    args: &RunArgs,
    module: &Module,
    config: &compiler::IpuConfig,
    outdir: &Path,
    n: u64,
    processes: Option<crate::replicas::Processes<'_>>,
) -> anyhow::Result<()> {
    let declared = xla_ir::shape_inference::collective::declared_devices(module);
    if let Some(d) = declared.filter(|&d| d as u64 != n) {
        bail!(
            "--replicas {n}: {} is written for {d} devices (replica_count x num_partitions)",
            args.file.display()
        );
    }
    if declared.is_none() && n > 1 && args.engine == Engine::IpuModel {
        bail!(
            "--replicas {n}: {} declares no replica_count or num_partitions, so it is compiled for one device; give its header num_partitions={n} (as XLA's SPMD partitioner writes it)",
            args.file.display()
        );
    }
    let mut leading = vec![Leading {
        count: n,
        flag: "--replicas",
        each: "replica",
    }];
    leading.extend(args.iterations.map(iterations_leading));
    let inputs = read_inputs(module, &args.inputs, &leading)?;
    let entry = module.entry_computation();
    // A file with the replica dimension (first, when both are there) gives replica r its
    // slice r.
    let per_replica: Vec<Vec<Literal>> = (0..n as usize)
        .map(|r| {
            inputs
                .iter()
                .zip(entry.parameters())
                .map(|(l, p)| match (l, entry.instr(p).shape.as_array()) {
                    (Literal::Array(a), Some(want))
                        if a.shape.dims.len() == want.dims.len() + 2
                            || (a.shape.dims.len() == want.dims.len() + 1
                                && a.shape.dims[0] as u64 == n) =>
                    {
                        Literal::Array(a.index_leading(r))
                    }
                    _ => l.clone(),
                })
                .collect()
        })
        .collect();
    let device_loop = match args.iterations {
        Some(i) => Some(
            crate::device_loop::device_loop_for(module, i, &per_replica[0])
                .map_err(|e| anyhow!("{}: {e:#}", args.file.display()))?,
        ),
        None => None,
    };
    let mode = match args.outfeed_mode {
        Some(OutfeedModeArg::Last) => OutfeedMode::Last,
        Some(OutfeedModeArg::All) | None => OutfeedMode::All,
    };
    let start = Instant::now();
    let (leaves, device) = match (args.engine, device_loop) {
        (Engine::Reference, _) if processes.is_some() => {
            bail!("under mpirun the replicas run on the ipu-model engine only")
        }
        (Engine::Reference, None) => {
            let results = xla_ir::eval::evaluate_replicated(module, &per_replica)
                .map_err(|e| anyhow!("{}: {e}", args.file.display()))?;
            let leaves: Vec<Vec<ArrayLiteral>> = results
                .into_iter()
                .map(crate::device_loop::leaves)
                .collect();
            (leaves, None)
        }
        (Engine::Reference, Some(_)) => bail!(
            "--replicas with --iterations runs on the ipu-model engine only, so far (the reference engine runs either)"
        ),
        (Engine::IpuModel, device_loop) => {
            let options = args.target.passes.options();
            let mut run = crate::replicas::run_replicated_with(
                module,
                config,
                &options,
                &per_replica,
                runtime::EngineOptions::default(),
                device_loop.map(|lp| (lp, mode)),
                processes,
            )
            .map_err(|e| anyhow!("{}: {e:#}", args.file.display()))?;
            crate::progress::finish();
            for w in &run.warnings {
                eprintln!("warning: {w}");
            }
            (std::mem::take(&mut run.outputs), Some(run))
        }
    };
    let elapsed = start.elapsed();
    // Across processes, process 0 writes every replica's results; the others say nothing.
    if let Some(p) = &processes
        && p.transport.rank() != 0
    {
        return Ok(());
    }
    let mut outputs = Vec::new();
    for k in 0..leaves[0].len() {
        let values: Vec<ArrayLiteral> = leaves.iter().map(|l| l[k].clone()).collect();
        outputs.push(ArrayLiteral::stack(&values).map_err(|e| anyhow!("output {k}: {e}"))?);
    }
    let named = outputs
        .iter()
        .enumerate()
        .map(|(k, o)| (format!("output_{k}.npy"), o));
    write_outputs(outdir, named)?;
    let across = processes.map_or(String::new(), |p| {
        format!(" ({} processes)", p.transport.size())
    });
    crate::progress::finish();
    outln!(
        "ran {} on {n} replicas{across} on the {} engine in {:.3} ms",
        args.file.display(),
        args.engine.name(),
        elapsed.as_secs_f64() * 1e3
    );
    if let Some(run) = device {
        crate::progress::finish();
        out!("{}", super::summary::replicated_summary(&run));
        if let Some(path) = args.profile.as_deref() {
            let json = serde_json::to_string_pretty(&run.profiles)?;
            std::fs::write(path, json)
                .with_context(|| format!("{}: cannot write the profile", path.display()))?;
            crate::progress::finish();
            outln!("profiles of the {n} replicas written to {}", path.display());
        }
        let named: Vec<(String, &runtime::Profile)> = run
            .profiles
            .iter()
            .enumerate()
            .map(|(r, p)| (format!("replica {r}"), p))
            .collect();
        write_trace(args.trace.as_deref(), &named)?;
    }
    Ok(())
}

/// Creates `outdir` and writes each `(file name, array)` there as `.npy`, printing a line
/// per file with its type, shape and a preview of its values.
fn write_outputs<'a>(
    outdir: &Path,
    named: impl Iterator<Item = (String, &'a ArrayLiteral)>,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(outdir)
        .with_context(|| format!("{}: cannot create the output directory", outdir.display()))?;
    for (file, output) in named {
        let path = outdir.join(file);
        write_npy(&path, output)?;
        crate::progress::finish();
        outln!(
            "{}  {} {}  {}",
            path.display(),
            numpy_name(output.shape.element_type),
            dims_text(&output.shape.dims),
            preview(output)
        );
    }
    Ok(())
}

/// `--estimate-only`: the profile a run would record, without running.
fn estimate(args: &RunArgs, module: &Module, config: &compiler::IpuConfig) -> anyhow::Result<()> {
    let options = args.target.passes.options();
    let e = crate::device::estimate_on_ipu_model(module, config, &options)
        .map_err(|e| anyhow!("{}: {e:#}", args.file.display()))?;
    crate::progress::finish();
    for w in &e.warnings {
        eprintln!("warning: {w}");
    }
    crate::progress::finish();
    outln!(
        "estimated {} on the ipu-model engine without running it",
        args.file.display()
    );
    crate::progress::finish();
    out!("{}", super::summary::estimate_summary(&e));
    write_trace(
        args.trace.as_deref(),
        &[("IPU Model (estimate)".into(), &e.profile)],
    )?;
    write_profile(args.profile.as_deref(), &e.profile)
}

/// Writes the trace of `runs` to `path`, when given.
fn write_trace(path: Option<&Path>, runs: &[(String, &runtime::Profile)]) -> anyhow::Result<()> {
    if let Some(path) = path {
        let json = serde_json::to_string(&crate::trace::chrome_trace(runs))?;
        std::fs::write(path, json)
            .with_context(|| format!("{}: cannot write the trace", path.display()))?;
        crate::progress::finish();
        outln!("trace written to {}", path.display());
    }
    Ok(())
}

/// Writes `profile` as JSON to `path`, when given.
fn write_profile(path: Option<&Path>, profile: &runtime::Profile) -> anyhow::Result<()> {
    if let Some(path) = path {
        let json = serde_json::to_string_pretty(profile)?;
        std::fs::write(path, json)
            .with_context(|| format!("{}: cannot write the profile", path.display()))?;
        crate::progress::finish();
        outln!("profile written to {}", path.display());
    }
    Ok(())
}

fn check_outdir(dir: &Path, overwrite: bool) -> anyhow::Result<()> {
    if let Ok(mut entries) = std::fs::read_dir(dir)
        && entries.next().is_some()
        && !overwrite
    {
        bail!(
            "{}: the output directory is not empty; pass --overwrite to write into it",
            dir.display()
        );
    }
    if dir.exists() && !dir.is_dir() {
        bail!("{}: exists and is not a directory", dir.display());
    }
    Ok(())
}

/// `--iterations N`'s leading dimension.
fn iterations_leading(count: u64) -> Leading {
    Leading {
        count,
        flag: "--iterations",
        each: "iteration",
    }
}

/// A leading dimension inputs may carry: one value per iteration or per replica.
#[derive(Debug, Clone, Copy)]
struct Leading {
    count: u64,
    /// The flag that set it (`--iterations`).
    flag: &'static str,
    /// What one slice is for (`iteration`).
    each: &'static str,
}

/// Parses `--infeed`: each feed's values, one per slice of its file's leading dimension.
fn read_infeeds(names: &xla_ir::eval::FeedNames, spec: &str) -> anyhow::Result<Feeds> {
    let mut feeds = Feeds::default();
    for item in spec.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, file) = item
            .split_once('=')
            .ok_or_else(|| anyhow!("--infeed: '{item}' is not NAME=FILE.npy"))?;
        let (name, file) = (name.trim(), PathBuf::from(file.trim()));
        if !names.infeeds.iter().any(|n| n == name) {
            bail!(
                "--infeed: the module has no infeed {name}; its infeeds are {}",
                if names.infeeds.is_empty() {
                    "none".to_string()
                } else {
                    names.infeeds.join(", ")
                }
            );
        }
        if feeds.infeeds.contains_key(name) {
            bail!("--infeed: infeed {name} is given twice");
        }
        let all = read_npy(&file)?;
        if all.shape.dims.is_empty() {
            bail!(
                "{}: --infeed {name} needs a leading dimension listing the values; the file holds a scalar",
                file.display()
            );
        }
        let values = (0..all.shape.dims[0] as usize)
            .map(|i| Literal::Array(all.index_leading(i)))
            .collect();
        feeds.infeeds.insert(name.to_string(), values);
    }
    Ok(feeds)
}

/// Each outfeed's values as a file: `outfeed_NAME.npy`, stacked (or the last value).
fn outfeed_files(
    names: &xla_ir::eval::FeedNames,
    feeds: &mut Feeds,
    mode: OutfeedMode,
) -> anyhow::Result<Vec<(String, ArrayLiteral)>> {
    let mut files = Vec::new();
    for name in &names.outfeeds {
        let values = feeds.outfeeds.remove(name).unwrap_or_default();
        let mut arrays = Vec::with_capacity(values.len());
        for v in values {
            match v {
                Literal::Array(a) => arrays.push(a),
                other => bail!(
                    "outfeed {name} sends {}; only array outfeeds can be written as .npy",
                    other.shape()
                ),
            }
        }
        let safe: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "_-.".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let value = match (mode, arrays.last()) {
            (_, None) => continue,
            (OutfeedMode::Last, Some(last)) => last.clone(),
            (OutfeedMode::All, Some(_)) => {
                ArrayLiteral::stack(&arrays).map_err(|e| anyhow!("outfeed {name}: {e}"))?
            }
        };
        files.push((format!("outfeed_{safe}.npy"), value));
    }
    Ok(files)
}

/// Parses `--inputs` and reads each file, checking it against its parameter (with
/// `--iterations N` or `--replicas N`, a file may also hold one value per iteration or per
/// replica: a leading dimension N).
/// With the micro-batch size `ipuxla convert --batch-size B` wrote into the module and a
/// leading count N (--iterations): an input of `[N * B, ...]` for a parameter of `[B, ...]`
/// is N micro-batches of B, one per iteration (`[N, B, ...]`). Anything else is returned
/// as it is.
fn unfold_batches(
    module: &Module,
    shape: &xla_ir::Shape,
    literal: ArrayLiteral,
    leading: &[Leading],
) -> ArrayLiteral {
    let batch = module
        .frontend_attributes()
        .get("ipuxla.batch_size")
        .and_then(|b| b.parse::<i64>().ok());
    let (Some(b), Some(lead), Some(param)) = (batch, leading.first(), shape.as_array()) else {
        return literal;
    };
    let n = lead.count as i64;
    let dims = &literal.shape.dims;
    if param.dims.first() == Some(&b)
        && dims.len() == param.dims.len()
        && dims[0] == n * b
        && dims[1..] == param.dims[1..]
        && n > 1
    {
        let mut unfolded: Vec<i64> = vec![n];
        unfolded.extend_from_slice(&param.dims);
        let shape = xla_ir::ArrayShape::new(literal.shape.element_type, &unfolded);
        return ArrayLiteral::new(shape, literal.data).expect("the same elements, regrouped");
    }
    literal
}

fn read_inputs(module: &Module, spec: &str, leading: &[Leading]) -> anyhow::Result<Vec<Literal>> {
    let entry = module.entry_computation();
    let params = entry.parameters();
    let mut given: Vec<Option<(PathBuf, Literal)>> = vec![None; params.len()];
    for item in spec.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let (key, file) = item
            .split_once('=')
            .ok_or_else(|| anyhow!("--inputs: '{item}' is not KEY=FILE.npy"))?;
        let (key, file) = (key.trim(), PathBuf::from(file.trim()));
        let index = parameter_index(module, key)?;
        if let Some((previous, _)) = &given[index] {
            bail!(
                "--inputs: parameter {index} is given twice ({} and {})",
                previous.display(),
                file.display()
            );
        }
        let param = entry.instr(params[index]);
        let literal = unfold_batches(module, &param.shape, read_npy(&file)?, leading);
        check_input(index, &param.name, &param.shape, &file, &literal, leading)?;
        given[index] = Some((file, Literal::Array(literal)));
    }
    let missing: Vec<String> = params
        .iter()
        .enumerate()
        .filter(|(i, _)| given[*i].is_none())
        .map(|(i, &p)| format!("{i} ({}: {})", entry.instr(p).name, entry.instr(p).shape))
        .collect();
    if !missing.is_empty() {
        bail!("--inputs: no value for parameter {}", missing.join(", "));
    }
    Ok(given
        .into_iter()
        .map(|g| g.expect("checked above").1)
        .collect())
}

/// Resolves an input key to a parameter number.
fn parameter_index(module: &Module, key: &str) -> anyhow::Result<usize> {
    let entry = module.entry_computation();
    let params = entry.parameters();
    if let Ok(n) = key.parse::<usize>() {
        if n < params.len() {
            return Ok(n);
        }
        bail!(
            "--inputs: parameter {n} does not exist; the entry computation has {} parameters (0..{})",
            params.len(),
            params.len()
        );
    }
    let names: Vec<&str> = params
        .iter()
        .map(|&p| entry.instr(p).name.as_str())
        .collect();
    if let Some(i) = names.iter().position(|n| *n == key) {
        return Ok(i);
    }
    let stem_matches: Vec<usize> = names
        .iter()
        .enumerate()
        .filter(|(_, n)| n.split('.').next() == Some(key))
        .map(|(i, _)| i)
        .collect();
    match stem_matches[..] {
        [i] => Ok(i),
        [] => bail!(
            "--inputs: no parameter is called '{key}'; the parameters are {}",
            names.join(", ")
        ),
        _ => bail!("--inputs: '{key}' matches several parameters; use their numbers"),
    }
}

fn check_input(
    index: usize,
    name: &str,
    expected: &Shape,
    file: &Path,
    literal: &ArrayLiteral,
    leading: &[Leading],
) -> anyhow::Result<()> {
    let Some(want) = expected.as_array() else {
        bail!(
            "parameter {index} ({name}) is a tuple {expected}; it cannot be fed from one .npy file"
        );
    };
    let got = &literal.shape;
    // The file may hold the value itself, or one per slice of any of the leading
    // dimensions, in their order (`--replicas` before `--iterations`).
    let prefixes: Vec<Vec<&Leading>> = (0..1usize << leading.len())
        .map(|mask| {
            leading
                .iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .map(|(_, l)| l)
                .collect()
        })
        .collect();
    let fits = |p: &Vec<&Leading>| {
        got.dims.len() == want.dims.len() + p.len()
            && p.iter().zip(&got.dims).all(|(l, &d)| d as u64 == l.count)
            && got.dims[p.len()..] == want.dims[..]
    };
    if want.element_type == got.element_type && prefixes.iter().any(fits) {
        return Ok(());
    }
    if !leading.is_empty() && want.element_type == got.element_type {
        let ways: Vec<String> = prefixes
            .iter()
            .map(|p| {
                let dims: Vec<i64> = p
                    .iter()
                    .map(|l| l.count as i64)
                    .chain(want.dims.iter().copied())
                    .collect();
                let what = match p.as_slice() {
                    [] => format!(
                        "the same every {}",
                        leading
                            .iter()
                            .map(|l| l.each)
                            .collect::<Vec<_>>()
                            .join(" and ")
                    ),
                    some => format!(
                        "one per {}",
                        some.iter()
                            .map(|l| l.each)
                            .collect::<Vec<_>>()
                            .join(" per ")
                    ),
                };
                format!(
                    "{} {} ({what})",
                    numpy_name(want.element_type),
                    dims_text(&dims)
                )
            })
            .collect();
        let flags: Vec<String> = leading
            .iter()
            .map(|l| format!("{} {}", l.flag, l.count))
            .collect();
        bail!(
            "{}: parameter {index} ({name}) is {} {}: with {} its file must hold {}, but it holds {}",
            file.display(),
            numpy_name(want.element_type),
            dims_text(&want.dims),
            flags.join(" and "),
            ways.join(" or "),
            dims_text(&got.dims)
        );
    }
    if want.element_type != literal.shape.element_type || want.dims != literal.shape.dims {
        bail!(
            "{}: parameter {index} ({name}) is {} {} but the file holds {} {}",
            file.display(),
            numpy_name(want.element_type),
            dims_text(&want.dims),
            numpy_name(literal.shape.element_type),
            dims_text(&literal.shape.dims)
        );
    }
    Ok(())
}

fn dims_text(dims: &[i64]) -> String {
    let parts: Vec<String> = dims.iter().map(i64::to_string).collect();
    format!(
        "({})",
        parts.join(", ") + if dims.len() == 1 { "," } else { "" }
    )
}

/// The values, nested like NumPy prints them when small, else the first and last few.
fn preview(a: &ArrayLiteral) -> String {
    let n = a.data.len();
    let value = |i: usize| match &a.data {
        xla_ir::literal::ArrayData::Pred(v) => (if v[i] { "True" } else { "False" }).to_string(),
        data => data.element_text(i),
    };
    if n <= 16 {
        fn nest(dims: &[i64], offset: usize, value: &dyn Fn(usize) -> String) -> String {
            match dims {
                [] => value(offset),
                [d, rest @ ..] => {
                    let stride: usize = rest.iter().map(|&x| x as usize).product();
                    let parts: Vec<String> = (0..*d as usize)
                        .map(|k| nest(rest, offset + k * stride, value))
                        .collect();
                    format!("[{}]", parts.join(", "))
                }
            }
        }
        return nest(&a.shape.dims, 0, &value);
    }
    let head: Vec<String> = (0..4).map(value).collect();
    let tail: Vec<String> = (n - 2..n).map(value).collect();
    format!(
        "[{}, ..., {}] ({n} values)",
        head.join(", "),
        tail.join(", ")
    )
}

/// A byte count: digits with an optional binary suffix (`K`, `M`, `G`, `T`; `512M`).
fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (digits, shift) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 10),
        Some('M') => (&t[..t.len() - 1], 20),
        Some('G') => (&t[..t.len() - 1], 30),
        Some('T') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let n: u64 = digits
        .trim()
        .parse()
        .map_err(|_| format!("'{text}' is not a size (bytes, or a number with K, M, G or T)"))?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("'{text}' is too large"))
}
