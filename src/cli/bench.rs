//! `ipuxla bench`: compile and run corpus cases on the IPU Model and set the host times
//! beside XLA's on the CPU (from each `case.json`).

use crate::bench::{
    BenchOptions, BenchResult, EstimateResult, OutputCheck, bench_case, estimate_case,
};
use crate::roofline::Roofline;
use anyhow::bail;
use clap::Args;
use std::path::{Path, PathBuf};

/// Arguments of `ipuxla bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Case directories (each with `case.json` and the module; `inputs/` and `outputs/`
    /// when stored, else generated inputs are used and outputs are not checked). Default:
    /// every `fixtures/conformance/bench_*` (XLA's) and `fixtures/builder/bench_*` (made
    /// with the HLO builder) under the current directory.
    pub cases: Vec<PathBuf>,
    /// Print JSON: one object per case, an array for several; it adds where the host time of
    /// loading and of a run went, by phase (`load_costs_ms`, `host_compute_ms`, ...), and a
    /// run's by family of steps (`host_steps`: each compute set, rearrangement or stream
    /// name without its instruction numbers, slowest first; `bytes`: what a run moves on the
    /// host in them, copied by the exchange and streams, read and written by compute sets;
    /// `k_part_sums` marks compute sets that sum a product's K parts inside the
    /// element-wise op reading them).
    #[arg(long)]
    pub json: bool,
    /// Timed runs per case; the median and minimum are reported.
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// Untimed runs before the timed ones.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// The module file in each case directory (`module.opt.hlo`: XLA's optimised form).
    #[arg(long, default_value = "module.hlo")]
    pub file: String,
    /// An IpuConfig as JSON (`{"ipu_model": {"tiles_per_ipu": 4}, ...}`).
    #[arg(long, value_name = "FILE.json")]
    pub config: Option<PathBuf>,
    /// Instead of cases: compile encoder stacks of these numbers of layers (built with the
    /// HLO builder, the bench encoder's layer) and report how compile time grows, e.g.
    /// `--scaling 1,12` (no cases, `--file`, `--runs` or `--warmup`: it compiles only,
    /// and the stacks are built, not read).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "LAYERS",
        conflicts_with_all = ["cases", "file", "runs", "warmup"]
    )]
    pub scaling: Vec<usize>,
    /// Compile each case and estimate its run without running it: compile and estimate
    /// times, simulated cycles, bytes exchanged and peak tile memory, and the roofline
    /// table (no inputs read, no outputs checked; `--runs` and `--warmup` do not apply).
    #[arg(long, conflicts_with_all = ["scaling", "runs", "warmup"])]
    pub estimate_only: bool,
    /// Instead of benching: write the builder-made bench cases (a 2048³ f16 matmul, one
    /// BERT-base layer in f16) as case directories under DIR (`module.hlo`, `case.json`)
    /// and print their paths. `fixtures/builder/` holds what this writes.
    #[arg(
        long,
        value_name = "DIR",
        conflicts_with_all = ["scaling", "estimate_only", "cases", "runs", "warmup", "json", "file", "config"]
    )]
    pub write_builder_cases: Option<PathBuf>,
}

/// `--estimate-only`: a row (or JSON object) per case.
fn estimates(cases: &[PathBuf], options: &BenchOptions, json: bool) -> anyhow::Result<()> {
    let mut results: Vec<EstimateResult> = Vec::new();
    let mut failed = Vec::new();
    if !json {
        outln!(
            "{:<28} {:>7} {:>11} {:>12} {:>12} {:>14} {:>12}",
            "case",
            "instrs",
            "compile ms",
            "estimate ms",
            "cycles",
            "exchanged B",
            "peak tile B"
        );
    }
    for dir in cases {
        match estimate_case(dir, options) {
            Ok(r) => {
                if !json {
                    let peak = r.profile.tiles.iter().map(|t| t.bytes_used).max();
                    outln!(
                        "{:<28} {:>7} {:>11.1} {:>12.1} {:>12} {:>14} {:>12}{}",
                        r.name,
                        r.instructions,
                        r.compile_ms,
                        r.estimate_ms,
                        r.profile.total_cycles,
                        r.profile.totals.bytes_exchanged,
                        peak.unwrap_or(0),
                        match r.profile.data_dependent.len() {
                            0 => String::new(),
                            n => format!("  ({n} data-dependent loops or branches)"),
                        }
                    );
                }
                results.push(r);
            }
            Err(e) => failed.push(format!("{}: {e:#}", dir.display())),
        }
    }
    if json {
        let objects: Vec<serde_json::Value> = results.iter().map(EstimateResult::to_json).collect();
        let value = match (cases.len(), <[_; 1]>::try_from(objects)) {
            (1, Ok([one])) => one,
            (_, Ok([one])) => serde_json::Value::Array(vec![one]),
            (_, Err(all)) => serde_json::Value::Array(all),
        };
        outln!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print_rooflines(results.iter().map(|r| (r.name.as_str(), &r.roofline)))?;
    }
    if !failed.is_empty() {
        bail!("{}", failed.join("\n"));
    }
    Ok(())
}

/// The roofline table below the cases' table: FLOPs, the host streams' share of the cycles,
/// then over the cycles on the device (the rest): simulated TFLOP/s, the share of the AMP
/// peak, the exchange's share and its cycles against their lower bound.
fn print_rooflines<'a>(rows: impl Iterator<Item = (&'a str, &'a Roofline)>) -> std::io::Result<()> {
    let rows: Vec<_> = rows.collect();
    if rows.is_empty() {
        return Ok(());
    }
    outln!();
    outln!(
        "{:<28} {:>14} {:>9} {:>12} {:>9} {:>10} {:>11} {:>12} {:>12} {:>9}",
        "case",
        "FLOPs",
        "streams %",
        "device cyc",
        "TFLOP/s",
        "% AMP peak",
        "exchange %",
        "exchange cyc",
        "lower bound",
        "x bound"
    );
    for (name, r) in rows {
        outln!(
            "{:<28} {:>14} {:>9.1} {:>12} {:>9.3} {:>10.2} {:>11.1} {:>12} {:>12} {:>9}",
            name,
            r.flops.total(),
            100.0 * r.stream_share,
            r.device_cycles,
            r.tflops_per_s,
            100.0 * r.peak_fraction,
            100.0 * r.exchange_share,
            r.exchange_cycles,
            r.exchange_lower_bound,
            ratio(r.exchange_over_bound())
        );
    }
    Ok(())
}

/// The bench cases of the fixtures, when run from the repository: XLA's, then the
/// builder's.
fn default_cases() -> anyhow::Result<Vec<PathBuf>> {
    let mut all = Vec::new();
    for root in ["fixtures/conformance", "fixtures/builder"].map(Path::new) {
        let mut cases: Vec<PathBuf> = std::fs::read_dir(root)
            .map_err(|_| {
                anyhow::anyhow!(
                    "no case directories given and {} is not here; name the cases to run",
                    root.display()
                )
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("bench_"))
            })
            .collect();
        cases.sort();
        all.extend(cases);
    }
    Ok(all)
}

/// `--write-builder-cases DIR`.
fn write_builder_cases(dir: &Path) -> anyhow::Result<()> {
    for case in crate::bench_modules::builder_cases()? {
        let at = crate::bench_modules::write_case(dir, &case)?;
        outln!("{}", at.display());
    }
    Ok(())
}

/// Runs `ipuxla bench`.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    if !args.scaling.is_empty() {
        return scaling(&args);
    }
    if let Some(dir) = &args.write_builder_cases {
        return write_builder_cases(dir);
    }
    let cases = if args.cases.is_empty() {
        default_cases()?
    } else {
        args.cases.clone()
    };
    let options = BenchOptions {
        runs: args.runs,
        warmup_runs: args.warmup,
        file: args.file.clone(),
        config: super::load_config(args.config.as_deref())?,
    };
    if args.estimate_only {
        return estimates(&cases, &options, args.json);
    }
    let mut results = Vec::new();
    let mut failed = Vec::new();
    if !args.json {
        outln!("{}", header());
    }
    let progress = crate::progress::Progress::bar(cases.len() as u64, "bench");
    for dir in &cases {
        progress.set_message(dir.display().to_string());
        let result = bench_case(dir, &options);
        progress.inc();
        match result {
            Ok(r) => {
                if !args.json {
                    progress.suspend(|| -> std::io::Result<()> {
                        outln!("{}", row(&r));
                        Ok(())
                    })?;
                }
                if let OutputCheck::Mismatch(m) = &r.outputs {
                    failed.push(format!("{}: outputs differ from XLA's: {m}", dir.display()));
                }
                results.push(r);
            }
            Err(e) => failed.push(format!("{}: {e:#}", dir.display())),
        }
    }
    if args.json {
        let objects: Vec<serde_json::Value> = results.iter().map(BenchResult::to_json).collect();
        let value = match <[_; 1]>::try_from(objects) {
            Ok([one]) if cases.len() == 1 => one,
            Ok([one]) => serde_json::Value::Array(vec![one]),
            Err(all) => serde_json::Value::Array(all),
        };
        outln!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print_rooflines(results.iter().map(|r| (r.name.as_str(), &r.roofline)))?;
    }
    if !failed.is_empty() {
        bail!("{}", failed.join("\n"));
    }
    Ok(())
}

/// `--scaling`: compile time per number of layers, and its ratio to the first's.
fn scaling(args: &BenchArgs) -> anyhow::Result<()> {
    if args.scaling.contains(&0) {
        bail!("--scaling: a stack needs at least one layer");
    }
    let config = super::load_config(args.config.as_deref())?;
    let points = crate::bench::compile_scaling(&args.scaling, &config)?;
    let first = points[0];
    if args.json {
        let rows: Vec<serde_json::Value> = points
            .iter()
            .map(|p| {
                serde_json::json!({
                    "layers": p.layers,
                    "instructions": p.instructions,
                    "compile_ms": p.compile_ms,
                    "ratio_to_first": p.compile_ms / first.compile_ms,
                })
            })
            .collect();
        outln!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    outln!(
        "{:>7} {:>7} {:>11} {:>14} {:>14}",
        "layers",
        "instrs",
        "compile ms",
        "x first",
        "layers ratio"
    );
    for p in &points {
        outln!(
            "{:>7} {:>7} {:>11.1} {:>14.2} {:>14.2}",
            p.layers,
            p.instructions,
            p.compile_ms,
            p.compile_ms / first.compile_ms,
            p.layers as f64 / first.layers as f64
        );
    }
    Ok(())
}

fn header() -> String {
    format!(
        "{:<28} {:>7} {:>11} {:>7} {:>9} {:>7} {:>12} {:>12} {:>10}",
        "case",
        "instrs",
        "compile ms",
        "x XLA",
        "run ms",
        "x XLA",
        "cycles",
        "peak tile B",
        "outputs"
    )
}

fn ratio(r: Option<f64>) -> String {
    r.map_or("-".into(), |r| format!("{r:.2}"))
}

fn row(r: &BenchResult) -> String {
    format!(
        "{:<28} {:>7} {:>11.1} {:>7} {:>9.2} {:>7} {:>12} {:>12} {:>10}",
        r.name,
        r.instructions,
        r.compile_ms,
        ratio(r.compile_ratio()),
        r.run_ms_median,
        ratio(r.run_ratio()),
        r.simulated_cycles,
        r.peak_tile_bytes,
        r.outputs.word()
    )
}
