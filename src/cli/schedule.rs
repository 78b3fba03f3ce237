//! `ipuxla schedule`: the instruction order each scheduling algorithm gives a module, and
//! its peak live bytes.

use clap::Args;
use compiler::schedule::{Algorithm, Limits, schedule_module};
use std::path::PathBuf;
use std::time::Instant;

/// Arguments of `ipuxla schedule`.
#[derive(Debug, Args)]
pub struct ScheduleArgs {
    /// The HLO text file.
    pub file: PathBuf,
    /// choose-best (default), post-order, clustering, shortest-path, look-ahead, xla-list,
    /// xla-dfs, xla-post-order or optimal (exact, computations of at most 24 instructions).
    #[arg(long, default_value = "choose-best", value_parser = parse_algorithm)]
    pub algorithm: Algorithm,
    /// One row per algorithm: peak live bytes and scheduling time.
    #[arg(long, conflicts_with = "algorithm")]
    pub compare: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// LOOK_AHEAD's depth (`maximum_scheduler_lookahead_depth`; default 5). Acts on
    /// look-ahead, choose-best and optimal (which falls back to choose-best).
    #[arg(long)]
    pub lookahead_depth: Option<usize>,
    /// LOOK_AHEAD's node budget (`maximum_scheduler_search_space_size`; default 64). Acts
    /// where `--lookahead-depth` does.
    #[arg(long)]
    pub search_space_size: Option<usize>,
}

/// An algorithm from its command-line name, or an error listing the names.
pub fn parse_algorithm(s: &str) -> Result<Algorithm, String> {
    Algorithm::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = Algorithm::ALL.iter().map(|a| a.name()).collect();
        format!("unknown algorithm '{s}'; use one of {}", names.join(", "))
    })
}

/// Runs `ipuxla schedule`.
pub fn run(args: ScheduleArgs) -> anyhow::Result<()> {
    let given = args.lookahead_depth.is_some() || args.search_space_size.is_some();
    if given && !args.compare && !args.algorithm.uses_limits() {
        anyhow::bail!(
            "--lookahead-depth, --search-space-size: {} does not search; they act on look-ahead, choose-best and optimal",
            args.algorithm.name()
        );
    }
    let module = super::load_module(&args.file)?;
    let defaults = Limits::default();
    let limits = Limits {
        depth: args.lookahead_depth.unwrap_or(defaults.depth),
        search_size: args.search_space_size.unwrap_or(defaults.search_size),
    };
    if args.compare {
        let mut rows = Vec::new();
        for a in Algorithm::ALL {
            let t = Instant::now();
            let s = schedule_module(&module, a, limits);
            rows.push((
                a.name(),
                s.peak_liveness_bytes,
                t.elapsed().as_secs_f64() * 1e3,
            ));
        }
        if args.json {
            let v: Vec<_> = rows
                .iter()
                .map(|(n, p, ms)| serde_json::json!({"algorithm": n, "peak_liveness_bytes": p, "ms": ms}))
                .collect();
            outln!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            outln!(
                "{:<16} {:>20} {:>10}",
                "algorithm",
                "peak_liveness_bytes",
                "ms"
            );
            for (n, p, ms) in rows {
                outln!("{n:<16} {p:>20} {ms:>10.2}");
            }
        }
        return Ok(());
    }
    let s = schedule_module(&module, args.algorithm, limits);
    if args.json {
        let comps: Vec<_> = s
            .computations
            .iter()
            .map(|c| {
                let comp = module.computation(*c);
                let order: Vec<&str> = s.orders[c].iter().map(|&i| comp.instr(i).name.as_str()).collect();
                serde_json::json!({"computation": comp.name, "order": order, "peak_liveness_bytes": s.peaks[c]})
            })
            .collect();
        let v = serde_json::json!({"algorithm": args.algorithm.name(), "computations": comps, "peak_liveness_bytes": s.peak_liveness_bytes});
        outln!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        out!("{}", s.to_text(&module));
    }
    Ok(())
}
