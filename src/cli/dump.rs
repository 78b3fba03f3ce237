//! `ipuxla dump`: parse, verify and print a module, or summarise it as JSON.

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
}

/// Runs `ipuxla dump`.
pub fn run(args: DumpArgs) -> anyhow::Result<()> {
    let module = super::load_module(&args.file)?;
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
