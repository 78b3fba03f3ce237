//! `ipuxla run`: run a module on `.npy` inputs and write `.npy` outputs, in the style of
//! `saved_model_cli run` (`--inputs "0=a.npy;1=b.npy" --outdir DIR`).

use crate::npy::{numpy_name, read_npy, write_npy};
use anyhow::{Context, anyhow, bail};
use clap::{Args, ValueEnum};
use std::path::{Path, PathBuf};
use std::time::Instant;
use xla_ir::literal::ArrayLiteral;
use xla_ir::{Literal, Module, Shape};

/// Which engine computes the results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Engine {
    /// The reference evaluator: plain host code with XLA's semantics (the oracle).
    Reference,
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
    /// flattened). Created if missing.
    #[arg(long)]
    pub outdir: PathBuf,
    /// Allow writing into an existing non-empty `--outdir`.
    #[arg(long)]
    pub overwrite: bool,
    /// The engine that computes the results.
    #[arg(long, value_enum, default_value_t = Engine::Reference)]
    pub engine: Engine,
}

/// Runs `ipuxla run`.
pub fn run(args: RunArgs) -> anyhow::Result<()> {
    let module = super::load_module(&args.file)?;
    check_outdir(&args.outdir, args.overwrite)?;
    let inputs = read_inputs(&module, &args.inputs)?;
    let start = Instant::now();
    let result = match args.engine {
        Engine::Reference => xla_ir::eval::evaluate(&module, &inputs)
            .map_err(|e| anyhow!("{}: {e}", args.file.display()))?,
    };
    let elapsed = start.elapsed();
    let outputs = flatten(result);
    std::fs::create_dir_all(&args.outdir).with_context(|| {
        format!(
            "{}: cannot create the output directory",
            args.outdir.display()
        )
    })?;
    for (k, output) in outputs.iter().enumerate() {
        let path = args.outdir.join(format!("output_{k}.npy"));
        write_npy(&path, output)?;
        println!(
            "{}  {} {}  {}",
            path.display(),
            numpy_name(output.shape.element_type),
            dims_text(&output.shape.dims),
            preview(output)
        );
    }
    println!(
        "ran {} on the {} engine in {:.3} ms",
        args.file.display(),
        match args.engine {
            Engine::Reference => "reference",
        },
        elapsed.as_secs_f64() * 1e3
    );
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

/// Parses `--inputs` and reads each file, checking it against its parameter.
fn read_inputs(module: &Module, spec: &str) -> anyhow::Result<Vec<Literal>> {
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
        let literal = read_npy(&file)?;
        check_input(index, &param.name, &param.shape, &file, &literal)?;
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
) -> anyhow::Result<()> {
    let Some(want) = expected.as_array() else {
        bail!(
            "parameter {index} ({name}) is a tuple {expected}; it cannot be fed from one .npy file"
        );
    };
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

/// The leaves of a (possibly nested) result tuple, in order.
fn flatten(result: Literal) -> Vec<ArrayLiteral> {
    match result {
        Literal::Array(a) => vec![a],
        Literal::Tuple(elems) => elems.into_iter().flat_map(flatten).collect(),
        Literal::Token => vec![],
    }
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
