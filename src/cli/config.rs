//! `ipuxla config`: every `IpuConfig` option with its type, default, value (from
//! `--config FILE`, else the defaults) and what it does, as a table or as JSON (the seed's
//! IPUConfig metadata listing).

use clap::Args;
use compiler::config_docs::{OptionRow, rows};
use std::io::Write;
use std::path::PathBuf;

/// Arguments of `ipuxla config`.
#[derive(Debug, Args)]
pub struct ConfigArgs {
    /// Show the values of this IpuConfig JSON file (checked as `run` checks it); without
    /// it, the defaults.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print a JSON list of `{key, type, default, value, description}` objects.
    #[arg(long)]
    pub json: bool,
}

/// Runs `ipuxla config`.
pub fn run(args: ConfigArgs) -> anyhow::Result<()> {
    let config = super::load_config(args.config.as_deref())?;
    if let Some(path) = &args.config {
        config
            .check()
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    }
    let rows = rows(&config);
    let mut out = std::io::stdout().lock();
    if args.json {
        let list: Vec<serde_json::Value> = rows.iter().map(json_row).collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&list)?)?;
        return Ok(());
    }
    for r in &rows {
        let changed = if r.value != r.default {
            format!(" (default {})", r.default)
        } else {
            String::new()
        };
        writeln!(out, "{} = {}{}", r.doc.key, r.value, changed)?;
        writeln!(out, "    {}: {}", r.doc.kind, r.doc.description)?;
    }
    Ok(())
}

fn json_row(r: &OptionRow) -> serde_json::Value {
    serde_json::json!({
        "key": r.doc.key,
        "type": r.doc.kind,
        "default": r.default,
        "value": r.value,
        "description": r.doc.description,
    })
}
