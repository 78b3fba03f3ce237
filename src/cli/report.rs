//! `ipuxla report`: a profile (`ipuxla run --profile`) as one self-contained HTML page.

use anyhow::Context;
use clap::Args;
use std::path::PathBuf;

/// Arguments of `ipuxla report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A profile written by `ipuxla run --profile` (one profile, or a list of a replicated
    /// run's: a section each).
    pub profile: PathBuf,
    /// The page to write (one file: styles and charts inline, nothing fetched).
    #[arg(short, long, value_name = "FILE.html")]
    pub output: PathBuf,
    /// The page's title (default: the profile's file name).
    #[arg(long)]
    pub title: Option<String>,
}

/// Runs `ipuxla report`.
pub fn run(args: ReportArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.profile)
        .with_context(|| format!("reading {}", args.profile.display()))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{}: not JSON", args.profile.display()))?;
    let read = |v: serde_json::Value| -> anyhow::Result<runtime::Profile> {
        serde_json::from_value(v).with_context(|| {
            format!(
                "{}: not a profile written by ipuxla run --profile",
                args.profile.display()
            )
        })
    };
    let profiles: Vec<runtime::Profile> = match value {
        serde_json::Value::Array(items) => items.into_iter().map(read).collect::<Result<_, _>>()?,
        one => vec![read(one)?],
    };
    let runs: Vec<(String, &runtime::Profile)> = profiles
        .iter()
        .enumerate()
        .map(|(r, p)| (format!("replica {r}"), p))
        .collect();
    let title = args
        .title
        .clone()
        .unwrap_or_else(|| format!("ipuxla profile: {}", args.profile.display()));
    std::fs::write(&args.output, crate::report::html(&title, &runs))
        .with_context(|| format!("writing {}", args.output.display()))?;
    outln!("report written to {}", args.output.display());
    Ok(())
}
