//! `ipuxla dump`: parse, verify and print a module (after the pass pipeline with
//! `--passes`), or summarise it as JSON.

use clap::Args;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use xla_ir::Module;

/// Arguments of `ipuxla dump`.
#[derive(Debug, Args)]
pub struct DumpArgs {
    /// The HLO text file to read (as printed by XLA, or by JAX's `.as_text("hlo")`).
    pub file: PathBuf,
    /// Print a JSON summary instead of the module text: every computation with its
    /// instruction count, instruction counts per opcode, and the entry's parameter and
    /// result shapes.
    #[arg(long)]
    pub json: bool,
    /// Run the pass pipeline (the passes `run` compiles with) and print the result, with
    /// the shard (`sharding={maximal device=K}`) and pipeline stage (`ipu_stage`) of every
    /// instruction of a sharded or staged computation as lowering places it (propagated
    /// from the annotated instructions: operands first, then users).
    #[arg(long)]
    pub passes: bool,
    /// An IpuConfig as JSON for `--passes` (`{"scheduling": {"algorithm": "LOOK_AHEAD"}}`).
    #[arg(long, value_name = "FILE.json", requires = "passes")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub pass_flags: super::PassFlags,
}

/// Runs `ipuxla dump`.
pub fn run(args: DumpArgs) -> anyhow::Result<()> {
    let mut module = super::load_module(&args.file)?;
    let flags = &args.pass_flags;
    let asks_for_passes =
        flags.dump_to.is_some() || flags.stop_after.is_some() || flags.scheduler.is_some();
    if asks_for_passes && !args.passes {
        anyhow::bail!("--dump-to, --stop-after and --scheduler need --passes");
    }
    if args.passes {
        let mut config = super::load_config(args.config.as_deref())?;
        flags.apply(&mut config);
        let (optimised, report) = compiler::optimise(&module, &config, &flags.options())
            .map_err(|e| anyhow::anyhow!("{}: {e}", args.file.display()))?;
        module = optimised;
        // Every instruction's shard and stage as lowering will place it.
        compiler::placement::annotate_placement(&mut module);
        for w in &report.warnings {
            eprintln!("warning: {w}");
        }
        for p in &report.passes {
            eprintln!("pass {:<24} {:>9.3} ms", p.name, p.seconds * 1e3);
            for note in &p.notes {
                eprintln!("  {note}");
            }
        }
        for d in &report.dumps {
            eprintln!("wrote {}", d.display());
        }
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &summary(&module))?;
        writeln!(out)?;
    } else {
        write!(out, "{module}")?;
    }
    Ok(())
}

/// The structural summary printed by `--json`.
pub fn summary(module: &Module) -> Value {
    let mut opcode_counts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut instruction_count = 0;
    let computations: Vec<Value> = module
        .post_order()
        .into_iter()
        .map(|id| {
            let comp = module.computation(id);
            let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
            for (_, instr) in comp.instructions() {
                *counts.entry(instr.op.name()).or_default() += 1;
                *opcode_counts.entry(instr.op.name()).or_default() += 1;
            }
            instruction_count += comp.len();
            json!({
                "name": comp.name,
                "is_entry": id == module.entry,
                "instruction_count": comp.len(),
                "parameters": comp.parameter_shapes().iter().map(ToString::to_string).collect::<Vec<_>>(),
                "result": comp.root_instr().shape.to_string(),
                "opcode_counts": counts,
            })
        })
        .collect();
    let entry = module.entry_program_shape();
    json!({
        "name": module.name,
        "entry": module.entry_computation().name,
        "parameters": entry.parameters.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "result": entry.result.to_string(),
        "computation_count": module.computation_count(),
        "instruction_count": instruction_count,
        "opcode_counts": opcode_counts,
        "computations": computations,
    })
}
