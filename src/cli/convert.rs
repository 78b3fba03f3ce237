//! `ipuxla convert`: the seed's model converter (`ipu_saved_model_cli convert`) for HLO:
//! reads a module, applies the conversions asked for, writes the converted module, which
//! `ipuxla run` executes. Options follow the seed's names, hyphenated; each is also read
//! from `--config-file` in the seed's JSON layout (command-line values win).

use clap::{Args, ValueEnum};
use regex::Regex;
use serde_json::Value;
use std::path::{Path, PathBuf};
use xla_ir::{ElementType, Instruction, Module};

/// `--precision-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PrecisionMode {
    /// Keep the module's precision (the seed's default).
    #[value(name = "FP32")]
    Fp32,
    /// Compute in f16: f32 instructions become f16 (the entry's parameters and results keep
    /// their types, converted at the edges).
    #[value(name = "FP16")]
    Fp16,
}

/// Arguments of `ipuxla convert`.
#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// The HLO text module to convert.
    pub file: PathBuf,
    /// Where to write the converted module (HLO text).
    #[arg(short = 'o', long, value_name = "OUT.hlo")]
    pub output: PathBuf,
    /// Replace OUT.hlo if it exists.
    #[arg(long)]
    pub overwrite: bool,
    /// FP16 converts the model to compute in f16, FP32 (the default) keeps it. Parameters
    /// and results keep their types; ops tied to f32 bits (bitcast-convert,
    /// reduce-precision, custom calls, feeds) stay f32, and so do state updates: a result
    /// computed element-wise from a parameter of its shape (a weight or optimiser-state
    /// update) keeps that element-wise expression f32, as mixed-precision training does.
    #[arg(long, value_enum, ignore_case = true, value_name = "MODE")]
    pub precision_mode: Option<PrecisionMode>,
    /// With --precision-mode FP16: instructions whose name or metadata op_name a regex
    /// matches (anywhere; anchor with ^...$) stay f32, with converts around them.
    #[arg(long, num_args = 1.., value_name = "REGEX")]
    pub precision_conversion_excluded_nodes: Vec<String>,
    /// Convert 64-bit integers to 32-bit ones (values wrap as the IPU's int64 conversion
    /// does).
    #[arg(long)]
    pub int64_to_int32_conversion: bool,
    /// Replace hand-written GELUs with one fused GELU: a JSON object with `nodes` (the
    /// GELU's nodes), `node_as_gelu_input` (its input) and `node_use_gelu_output` (the nodes
    /// that use its output), each a list of regexes on names or op_names (the seed's form,
    /// also wrapped as `{"gelu_replacement": {...}}`, `//` comments allowed). The tanh or
    /// erf form is the one the replaced nodes compute.
    #[arg(long, value_name = "JSON")]
    pub gelu_replacement: Option<String>,
    /// Iterations of the device loop each `run` executes (the seed's `batch_per_step`),
    /// written into the module (`ipuxla.batch_per_step`) so `ipuxla run` loops without
    /// `--iterations`; 0 (the seed's default) writes none.
    #[arg(long, value_name = "N")]
    pub batch_per_step: Option<u64>,
    /// Split the model into pipeline stages (the seed's `pipeline_cfg` JSON): `{"converter":
    /// "manual", "manual_pipeline_config": [[regexes of stage 0], ...], "device_info":
    /// [IPU of each stage], "solution_dir": DIR}` places every entry instruction on the first
    /// stage whose regexes match it (unmatched: stage 0) and writes the solution file
    /// `DIR/pipeline.pipeconfig` (without `solution_dir`: `OUT.pipeconfig`);
    /// `{"converter": "auto", "priority": "cycle"|"memory", "min_ipu_quantity": 2,
    /// "max_ipu_quantity": 64, "fine_tune_iter": N}` cuts the model into stages of equal
    /// estimated cycles (or result bytes), as many as --num-ipus or, without it, the fewest
    /// IPUs from min_ipu_quantity to max_ipu_quantity (the seed's defaults 2 and 64; whole
    /// cards of 2) on which every stage fits in tile memory (--ipu-config's IPU, no
    /// Streaming Memory); fine_tune_iter (default 0) re-weights the instructions by what
    /// each stage took in the pipeline's estimate and splits again up to N times, keeping
    /// the fastest pipeline; the solution is written the same way; `{"converter": "load",
    /// "solution_path": FILE}` applies a
    /// solution file (`device_info`, `pipeline_mapping` instruction to stage). The stages run
    /// as a pipeline under `run --iterations`. `"profiling_enable": true` or
    /// `"profiling_root_dir": DIR` (any converter) writes the profile of the split, estimated
    /// as a pipeline of 2 micro-batches per stage, to `DIR/profile.json` (default DIR:
    /// `pipeline-profiling` beside OUT.hlo).
    #[arg(long, value_name = "JSON")]
    pub pipeline_cfg: Option<String>,
    /// availableMemoryProportion for matrix multiplications (0.0 to 1.0; default 0.6),
    /// written into the module for `ipuxla run`.
    #[arg(long, value_name = "F")]
    pub matmul_amp: Option<f64>,
    /// availableMemoryProportion for convolutions (0.0 to 1.0; default 0.6), written into
    /// the module for `ipuxla run`.
    #[arg(long, value_name = "F")]
    pub conv_amp: Option<f64>,
    /// Partial sums of matrix multiplications (default float), written into the module.
    #[arg(long, value_enum, ignore_case = true)]
    pub matmul_partial_type: Option<super::target_flags::PartialType>,
    /// Partial sums of convolutions (default float), written into the module.
    #[arg(long, value_enum, ignore_case = true)]
    pub conv_partial_type: Option<super::target_flags::PartialType>,
    /// The IPUs the model runs on, written into the module (`frontend_attributes=
    /// {ipuxla.num_ipus="N"}` in its header) so `ipuxla run` uses them without
    /// `--num-ipus`.
    #[arg(long, value_name = "N")]
    pub num_ipus: Option<usize>,
    /// One regex per IPU, in IPU order: instructions of the entry computation whose name or
    /// metadata op_name one matches are placed on that IPU (`sharding={maximal device=K}`;
    /// the first match wins), the others on IPU 0. As many regexes as --num-ipus.
    #[arg(long, num_args = 1.., value_name = "REGEX")]
    pub manual_sharding: Vec<String>,
    /// Instructions of the entry computation whose name or metadata op_name a regex matches
    /// are not placed on the IPU: they run on the host (the reference evaluator), before the
    /// device program when computed from parameters and other excluded instructions alone,
    /// after it when read only by excluded instructions and the result (marked
    /// `frontend_attributes={ipuxla.host="true"}`; `run` does this around a plain run). An
    /// excluded instruction between device instructions is an error naming it.
    #[arg(long, num_args = 1.., value_name = "REGEX")]
    pub excluded_nodes: Vec<String>,
    /// Place no instruction on the IPU (the seed's `no_ipu_placement`): every instruction
    /// is excluded (as --excluded-nodes '.*'), so `run` computes the module on the host.
    #[arg(long, conflicts_with_all = ["excluded_nodes", "manual_sharding", "pipeline_cfg"])]
    pub no_ipu_placement: bool,
    /// With --excluded-nodes: remove the excluded instructions instead. What they computed
    /// for the device becomes a parameter of the module (named as the instruction), and
    /// the values they read from it become its results.
    #[arg(long, requires = "excluded_nodes")]
    pub remove_excluded_nodes: bool,
    /// The micro-batch size the model uses (the seed's `batch_size`; its shapes are fixed,
    /// so some parameter must have a leading dimension of N): written into the module
    /// (`ipuxla.batch_size`) so `ipuxla run --iterations K` takes an input of `[K * N,
    /// ...]` for a parameter of `[N, ...]` as K micro-batches, one per iteration.
    #[arg(long, value_name = "N")]
    pub batch_size: Option<u64>,
    /// Read these options from a JSON file in the seed's layout (`precision_mode`,
    /// `precision_conversion_excluded_nodes`, `int64_to_int32_conversion`, `num_ipus`,
    /// `manual_sharding` as one list of regexes per IPU, `excluded_nodes`,
    /// `remove_excluded_nodes`; `//` comments allowed). Options
    /// ipuxla convert does not implement yet are refused by name.
    #[arg(long, value_name = "FILE.json")]
    pub config_file: Option<PathBuf>,
    /// The IPU system the auto pipeline converter estimates and fits the stages on: an
    /// IpuConfig as JSON, as `ipuxla run --config` takes (`{"ipu_model": {"tiles_per_ipu":
    /// 16}}`); default the standard ipu2.
    #[arg(long, value_name = "FILE.json")]
    pub ipu_config: Option<PathBuf>,
}

/// The options after merging the config file and the command line.
#[derive(Debug, Default)]
struct Options {
    precision_mode: Option<PrecisionMode>,
    excluded: Vec<String>,
    int64_to_int32: bool,
    num_ipus: Option<usize>,
    /// Per IPU, the regexes that place an instruction on it.
    manual_sharding: Vec<Vec<String>>,
    /// Regexes of the instructions that run on the host.
    excluded_nodes: Vec<String>,
    /// The model's micro-batch size.
    batch_size: Option<u64>,
    /// Remove the excluded instructions rather than run them on the host.
    remove_excluded_nodes: bool,
    /// The pipeline configuration, as JSON.
    pipeline: Option<Value>,
    /// `(module option, value)` for the planners: `matmul_amp`, `conv_amp`,
    /// `matmul_partial_type`, `conv_partial_type`.
    planner: Vec<(&'static str, String)>,
    /// Device-loop iterations per run (0: none).
    batch_per_step: Option<u64>,
    /// `nodes`, `node_as_gelu_input`, `node_use_gelu_output`.
    gelu: Option<[Vec<String>; 3]>,
}

/// The seed's config keys ipuxla convert does not act on yet.
const NOT_YET: &[&str] = &["merge_subgraphs", "embedded_runtime_save_config"];

/// Runs `ipuxla convert`.
pub fn run(args: ConvertArgs) -> anyhow::Result<()> {
    let mut options = match &args.config_file {
        Some(path) => read_config(path)?,
        None => Options::default(),
    };
    if args.precision_mode.is_some() {
        options.precision_mode = args.precision_mode;
    }
    if !args.precision_conversion_excluded_nodes.is_empty() {
        options.excluded = args.precision_conversion_excluded_nodes.clone();
    }
    options.int64_to_int32 |= args.int64_to_int32_conversion;
    if !args.excluded_nodes.is_empty() {
        options.excluded_nodes = args.excluded_nodes.clone();
    }
    options.remove_excluded_nodes |= args.remove_excluded_nodes;
    if args.batch_size.is_some() {
        options.batch_size = args.batch_size;
    }
    if args.no_ipu_placement {
        options.excluded_nodes = vec![".*".into()];
    }
    if args.num_ipus.is_some() {
        options.num_ipus = args.num_ipus;
    }
    if args.batch_per_step.is_some() {
        options.batch_per_step = args.batch_per_step;
    }
    for (key, amp) in [("matmul_amp", args.matmul_amp), ("conv_amp", args.conv_amp)] {
        if let Some(a) = amp {
            set_planner(&mut options, key, amp_value(a, key)?);
        }
    }
    for (key, pt) in [
        ("matmul_partial_type", args.matmul_partial_type),
        ("conv_partial_type", args.conv_partial_type),
    ] {
        if let Some(pt) = pt {
            let v = match pt {
                super::target_flags::PartialType::Float => "float",
                super::target_flags::PartialType::Half => "half",
            };
            set_planner(&mut options, key, v.to_string());
        }
    }
    if !args.manual_sharding.is_empty() {
        options.manual_sharding = args
            .manual_sharding
            .iter()
            .map(|r| vec![r.clone()])
            .collect();
    }
    let shards: Vec<Vec<Regex>> = options
        .manual_sharding
        .iter()
        .map(|list| regexes(list, "--manual-sharding"))
        .collect::<anyhow::Result<_>>()?;
    if let Some(json) = &args.gelu_replacement {
        let value: Value = serde_json::from_str(&strip_line_comments(json))
            .map_err(|e| anyhow::anyhow!("--gelu-replacement: not JSON: {e}"))?;
        options.gelu =
            Some(gelu_rule(&value).map_err(|e| anyhow::anyhow!("--gelu-replacement: {e}"))?);
    }
    let gelu: Option<[Vec<Regex>; 3]> = match &options.gelu {
        Some(lists) => Some([
            regexes(&lists[0], "gelu_replacement.nodes")?,
            regexes(&lists[1], "gelu_replacement.node_as_gelu_input")?,
            regexes(&lists[2], "gelu_replacement.node_use_gelu_output")?,
        ]),
        None => None,
    };
    if let Some(json) = &args.pipeline_cfg {
        options.pipeline = Some(
            serde_json::from_str(&strip_line_comments(json))
                .map_err(|e| anyhow::anyhow!("--pipeline-cfg: not JSON: {e}"))?,
        );
    }
    if let Some(0) = options.num_ipus {
        anyhow::bail!("--num-ipus must be at least 1");
    }
    if !shards.is_empty() && options.num_ipus != Some(shards.len()) {
        anyhow::bail!(
            "--manual-sharding gives {} regex(es) but the model runs on {} IPU(s): give one per IPU (and --num-ipus)",
            shards.len(),
            options
                .num_ipus
                .map_or("an unspecified number of".to_string(), |n| n.to_string())
        );
    }
    let excluded = regexes(&options.excluded, "--precision-conversion-excluded-nodes")?;
    if !excluded.is_empty() && options.precision_mode != Some(PrecisionMode::Fp16) {
        anyhow::bail!(
            "--precision-conversion-excluded-nodes needs --precision-mode FP16 (there is nothing to exclude from)"
        );
    }
    if args.output.exists() && !args.overwrite {
        anyhow::bail!(
            "{} exists; pass --overwrite to replace it",
            args.output.display()
        );
    }
    let ipu_config = super::load_config(args.ipu_config.as_deref())?;
    if args.ipu_config.is_some() && options.pipeline.is_none() {
        anyhow::bail!(
            "--ipu-config is the system the auto pipeline converter works on; without --pipeline-cfg nothing reads it"
        );
    }
    let mut module = super::load_module(&args.file)?;
    let mut report = Vec::new();
    if let Some([nodes, input, users]) = &gelu {
        let rule = compiler::convert::GeluRule {
            nodes: &|i: &Instruction| matches_any(nodes, i),
            input: &|i: &Instruction| matches_any(input, i),
            output_user: &|i: &Instruction| matches_any(users, i),
        };
        let n = compiler::convert::replace_gelu(&mut module, &rule)
            .map_err(|e| anyhow::anyhow!("{}: --gelu-replacement: {e}", args.file.display()))?;
        if n == 0 {
            anyhow::bail!(
                "{}: --gelu-replacement names no GELU (no node_use_gelu_output reads one of its nodes)",
                args.file.display()
            );
        }
        report.push(format!("{n} GELU(s) replaced by the fused GELU"));
    }
    if options.int64_to_int32 {
        let changed = compiler::passes::narrow_int64(&mut module);
        report.push(format!(
            "{} instruction(s) narrowed from 64 to 32 bits",
            changed.len()
        ));
    }
    if options.precision_mode == Some(PrecisionMode::Fp16) {
        let matches = |instr: &Instruction| matches_any(&excluded, instr);
        let kept = count(&module, &matches);
        let state = compiler::convert::state_updates(module.entry_computation()).len();
        module = compiler::convert::to_fp16(&module, &matches)
            .map_err(|e| anyhow::anyhow!("{}: {e}", args.file.display()))?;
        report.push(format!(
            "{} instruction(s) compute in f16, {kept} kept f32 by the excluded-nodes regexes, {state} in state updates",
            f16_count(&module)
        ));
    }
    let host = regexes(&options.excluded_nodes, "--excluded-nodes")?;
    if options.remove_excluded_nodes && host.is_empty() {
        anyhow::bail!(
            "--remove-excluded-nodes needs --excluded-nodes (there is nothing to remove)"
        );
    }
    if !host.is_empty() {
        let entry = module.entry;
        let mut marked = 0;
        let ids: Vec<_> = module.computation(entry).order().to_vec();
        for id in ids {
            let instr = module.computation_mut(entry).instr_mut(id);
            if !matches!(instr.op, xla_ir::Op::Parameter { .. }) && matches_any(&host, instr) {
                instr
                    .frontend_attributes
                    .insert(crate::host_split::HOST_ATTRIBUTE.into(), "true".into());
                marked += 1;
            }
        }
        if marked == 0 {
            anyhow::bail!(
                "{}: --excluded-nodes matches no instruction of the entry computation",
                args.file.display()
            );
        }
        let split = crate::host_split::split(&module)
            .map_err(|e| anyhow::anyhow!("{}: --excluded-nodes: {e}", args.file.display()))?
            .expect("instructions were marked");
        if options.remove_excluded_nodes {
            let Some(device) = split.device else {
                anyhow::bail!(
                    "{}: --remove-excluded-nodes would remove every instruction",
                    args.file.display()
                );
            };
            module = device.module;
            report.push(format!(
                "{marked} excluded instruction(s) removed: the module takes {} parameter(s)",
                module.entry_computation().parameters().len()
            ));
        } else {
            let when = match (
                split.device.is_some(),
                split.before.is_some(),
                split.after.is_some(),
            ) {
                (false, ..) => "all of the module (nothing on the IPU)",
                (true, true, true) => "before and after the device program",
                (true, true, false) => "before the device program",
                _ => "after the device program",
            };
            report.push(format!(
                "{marked} excluded instruction(s) run on the host, {when}"
            ));
        }
    }
    if !shards.is_empty() {
        let placed = place(&mut module, &shards);
        report.push(format!(
            "placed by --manual-sharding: {}",
            placed
                .iter()
                .enumerate()
                .map(|(ipu, n)| format!("{n} on IPU {ipu}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if let Some(cfg) = &options.pipeline {
        let (mapping, devices) =
            pipeline_stages(&module, cfg, options.num_ipus, &ipu_config, &mut report)?;
        let stages = devices.len();
        let entry = module.entry;
        stage_entry(module.computation_mut(entry), &mapping);
        // The solution file: in `solution_dir`, else beside the output (`OUT.pipeconfig`);
        // a loaded solution is not written again.
        let converter = cfg.get("converter").and_then(Value::as_str);
        let solution_file = match cfg.get("solution_dir").and_then(Value::as_str) {
            Some(dir) => {
                std::fs::create_dir_all(dir)
                    .map_err(|e| anyhow::anyhow!("cannot create {dir}: {e}"))?;
                Some(Path::new(dir).join("pipeline.pipeconfig"))
            }
            None if converter != Some("load") => Some(args.output.with_extension("pipeconfig")),
            None => None,
        };
        if let Some(file) = solution_file {
            let solution = serde_json::json!({
                "device_info": devices,
                "pipeline_mapping": mapping,
            });
            std::fs::write(&file, serde_json::to_string_pretty(&solution)?)
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", file.display()))?;
            report.push(format!("solution written to {}", file.display()));
        }
        let ipus = devices.iter().max().map_or(1, |m| m + 1);
        let profiling = cfg.get("profiling_enable").and_then(Value::as_bool) == Some(true)
            || cfg.get("profiling_root_dir").is_some();
        if profiling {
            let dir = match cfg.get("profiling_root_dir").and_then(Value::as_str) {
                Some(dir) => PathBuf::from(dir),
                None => args
                    .output
                    .parent()
                    .unwrap_or(Path::new("."))
                    .join("pipeline-profiling"),
            };
            let file = write_pipeline_profile(&module, &devices, &ipu_config, &dir)?;
            report.push(format!(
                "profile of the split written to {}",
                file.display()
            ));
        }
        match options.num_ipus {
            Some(n) if n < ipus => anyhow::bail!(
                "--pipeline-cfg: device_info places stages on {ipus} IPU(s) but --num-ipus is {n}"
            ),
            Some(_) => {}
            None => options.num_ipus = Some(ipus),
        }
        let list: Vec<String> = devices.iter().map(|d| d.to_string()).collect();
        module.set_frontend_attribute("ipuxla.device_mapping", &list.join(","));
        report.push(format!(
            "{} instruction(s) split into {stages} pipeline stage(s) on IPUs {}",
            mapping.len(),
            list.join(",")
        ));
    }
    if let Some(n) = options.num_ipus {
        module.set_frontend_attribute("ipuxla.num_ipus", &n.to_string());
    }
    for (key, value) in &options.planner {
        module.set_frontend_attribute(&format!("ipuxla.{key}"), value);
    }
    if let Some(b) = options.batch_size {
        let entry = module.entry_computation();
        let batched = entry
            .parameters()
            .iter()
            .filter(|&&p| {
                entry
                    .instr(p)
                    .shape
                    .as_array()
                    .and_then(|a| a.dims.first().copied())
                    == Some(b as i64)
            })
            .count();
        if b == 0 || batched == 0 {
            anyhow::bail!(
                "{}: --batch-size {b}: no parameter has a leading dimension of {b} (an HLO module's shapes are fixed: convert the model at the batch size it was written for)",
                args.file.display()
            );
        }
        module.set_frontend_attribute("ipuxla.batch_size", &b.to_string());
        report.push(format!(
            "micro-batch size {b}: {batched} parameter(s) are batched"
        ));
    }
    if let Some(n) = options.batch_per_step.filter(|&n| n > 0) {
        module.set_frontend_attribute("ipuxla.batch_per_step", &n.to_string());
    }
    std::fs::write(&args.output, module.to_string())
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", args.output.display()))?;
    if !crate::progress::is_quiet() {
        for line in &report {
            eprintln!("{line}");
        }
        eprintln!("wrote {}", args.output.display());
    }
    Ok(())
}

/// Each entry instruction's pipeline stage and each stage's IPU, from a `pipeline_cfg`.
fn pipeline_stages(
    module: &Module,
    cfg: &Value,
    num_ipus: Option<usize>,
    ipu_config: &compiler::IpuConfig,
    notes: &mut Vec<String>,
) -> anyhow::Result<(std::collections::BTreeMap<String, usize>, Vec<usize>)> {
    let what = "--pipeline-cfg";
    let field = |key: &str| cfg.get(key);
    let device_info = |v: Option<&Value>, key: &str| -> anyhow::Result<Vec<usize>> {
        v.and_then(Value::as_array)
            .and_then(|a| a.iter().map(|x| x.as_u64().map(|n| n as usize)).collect())
            .ok_or_else(|| {
                anyhow::anyhow!("{what}: {key} must be a list of IPU numbers, one per stage")
            })
    };
    // Every key acts or is refused: the seed's keys ipuxla does not implement yet are named.
    let Value::Object(keys) = cfg else {
        anyhow::bail!("{what}: expected a JSON object");
    };
    let converter = field("converter").and_then(Value::as_str).unwrap_or("");
    for (key, value) in keys {
        let acts = match key.as_str() {
            "converter" | "solution_dir" => true,
            "priority" | "min_ipu_quantity" | "max_ipu_quantity" | "fine_tune_iter" => {
                converter == "auto"
            }
            "manual_pipeline_config" | "device_info" => converter == "manual",
            "solution_path" => converter == "load",
            // The IPU Model is the only device here.
            "ipu_model" => value.as_bool() == Some(true),
            "profiling_enable" => value.is_boolean(),
            "profiling_root_dir" => value.is_string(),
            _ => false,
        };
        if !acts {
            anyhow::bail!(
                "{what}: {key}={value} is not implemented for the {converter:?} converter (ipuxla acts on converter, solution_dir, priority, min_ipu_quantity, max_ipu_quantity and fine_tune_iter (auto), manual_pipeline_config and device_info (manual), solution_path (load), ipu_model=true, profiling_enable, profiling_root_dir)"
            );
        }
    }
    let entry = module.entry_computation();
    let mut mapping = std::collections::BTreeMap::new();
    let devices = match field("converter").and_then(Value::as_str) {
        Some("manual") => {
            let stages: Vec<Vec<Regex>> = field("manual_pipeline_config")
                .and_then(Value::as_array)
                .ok_or_else(|| anyhow::anyhow!("{what}: the manual converter needs manual_pipeline_config (one list of regexes per stage)"))?
                .iter()
                .map(|list| {
                    let strings: Vec<String> = list
                        .as_array()
                        .and_then(|l| l.iter().map(|x| x.as_str().map(String::from)).collect())
                        .ok_or_else(|| anyhow::anyhow!("{what}: manual_pipeline_config holds lists of regex strings"))?;
                    regexes(&strings, "manual_pipeline_config")
                })
                .collect::<anyhow::Result<_>>()?;
            let devices = device_info(
                field("device_info"),
                "device_info (required by the manual converter)",
            )?;
            if devices.len() != stages.len() {
                anyhow::bail!(
                    "{what}: manual_pipeline_config has {} stage(s) but device_info {}",
                    stages.len(),
                    devices.len()
                );
            }
            for (_, instr) in entry.instructions() {
                let stage = stages
                    .iter()
                    .position(|list| matches_any(list, instr))
                    .unwrap_or(0);
                mapping.insert(instr.name.clone(), stage);
            }
            devices
        }
        Some("load") => {
            let path = field("solution_path")
                .and_then(Value::as_str)
                .ok_or_else(|| anyhow::anyhow!("{what}: the load converter needs solution_path"))?;
            let text = std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("{what}: cannot read {path}: {e}"))?;
            let solution: Value = serde_json::from_str(&text)
                .map_err(|e| anyhow::anyhow!("{path}: not JSON: {e}"))?;
            let devices = device_info(solution.get("device_info"), "device_info")?;
            let Some(Value::Object(map)) = solution.get("pipeline_mapping") else {
                anyhow::bail!("{path}: pipeline_mapping must map instruction names to stages");
            };
            for (name, stage) in map {
                if entry.find(name).is_none() {
                    anyhow::bail!(
                        "{path}: pipeline_mapping names {name}, which is not an instruction of the entry computation"
                    );
                }
                let stage = stage
                    .as_u64()
                    .map(|s| s as usize)
                    .filter(|&s| s < devices.len())
                    .ok_or_else(|| anyhow::anyhow!("{path}: {name}'s stage {stage} is not one of the {} stage(s) device_info lists", devices.len()))?;
                mapping.insert(name.clone(), stage);
            }
            if let Some((_, instr)) = entry
                .instructions()
                .find(|(_, i)| !mapping.contains_key(&i.name))
            {
                anyhow::bail!("{path}: pipeline_mapping gives no stage for {}", instr.name);
            }
            devices
        }
        Some("auto") => {
            let by_memory = match field("priority").and_then(Value::as_str) {
                None | Some("cycle") => false,
                Some("memory") => true,
                Some(other) => {
                    anyhow::bail!("{what}: priority must be cycle or memory, found {other}")
                }
            };
            let quantity = |key: &str, default: usize| -> anyhow::Result<usize> {
                match field(key) {
                    None => Ok(default),
                    Some(v) => v
                        .as_u64()
                        .filter(|&n| n >= 1)
                        .map(|n| n as usize)
                        .ok_or_else(|| {
                            anyhow::anyhow!("{what}: {key} must be a positive integer, found {v}")
                        }),
                }
            };
            let (min, max) = (
                quantity("min_ipu_quantity", MIN_IPU_QUANTITY)?,
                quantity("max_ipu_quantity", MAX_IPU_QUANTITY)?,
            );
            if min > max {
                anyhow::bail!("{what}: min_ipu_quantity {min} is more than max_ipu_quantity {max}");
            }
            // Estimated once: the search, the split and the fine tuning all start from it.
            let costs = instruction_costs(module, by_memory, ipu_config)?;
            let stages = match num_ipus {
                Some(n) => n,
                None => fewest_ipus(module, min..=max, &costs, ipu_config)?,
            };
            let tune = match field("fine_tune_iter") {
                None => 0,
                Some(v) => v.as_u64().map(|n| n as usize).ok_or_else(|| {
                    anyhow::anyhow!(
                        "{what}: fine_tune_iter must be a non-negative integer, found {v}"
                    )
                })?,
            };
            if tune > 0 {
                let (tuned, before, after) = fine_tune(module, stages, costs, tune, ipu_config)?;
                notes.push(format!(
                    "fine tuning ({tune} iteration(s) at most): the pipeline of {} micro-batches {before} -> {after} cycles",
                    2 * stages
                ));
                mapping = tuned;
            } else {
                mapping = split_by_cost(module, stages, &costs)?;
            }
            (0..stages).collect()
        }
        other => anyhow::bail!("{what}: converter must be auto, manual or load, found {other:?}"),
    };
    Ok((mapping, devices))
}

/// The profile of the staged `module` (stage `k` on IPU `devices[k]`) run as a pipeline of
/// `2 × stages` micro-batches on the IPU Model of `config`, estimated without running
/// (every parameter the same each micro-batch: only costs and memory matter here).
fn estimate_staged(
    module: &Module,
    devices: &[usize],
    config: &compiler::IpuConfig,
) -> anyhow::Result<runtime::Profile> {
    let ipus = devices.iter().max().map_or(1, |m| m + 1);
    let mut cfg = config.clone();
    cfg.auto_select_ipus = compiler::config::AutoSelectIpus::Count(ipus);
    cfg.pipelining.device_mapping = devices.to_vec();
    let device_loop = compiler::DeviceLoop {
        iterations: 2 * devices.len() as u64,
        fed: vec![false; module.entry_computation().parameters().len()],
        resident: false,
    };
    let compiled = compiler::compile_device_loop(
        module,
        &cfg,
        &compiler::passes::PassOptions::default(),
        &device_loop,
    )?;
    let exe = &compiled.executable;
    let system = runtime::System::new(exe.target.clone(), exe.num_ipus)?;
    Ok(runtime::estimate(exe, &system)?)
}

/// [`estimate_staged`] of `module` split by `mapping` into `stages` stages on IPUs 0.. .
fn estimate_split(
    module: &Module,
    mapping: &std::collections::BTreeMap<String, usize>,
    stages: usize,
    config: &compiler::IpuConfig,
) -> anyhow::Result<runtime::Profile> {
    let mut staged = module.clone();
    let entry = staged.entry;
    stage_entry(staged.computation_mut(entry), mapping);
    estimate_staged(&staged, &(0..stages).collect::<Vec<_>>(), config)
}

/// Writes the profile of the staged `module` ([`estimate_staged`]) to `DIR/profile.json`
/// (what `ipuxla report` renders): the seed's `profiling_enable` / `profiling_root_dir`.
fn write_pipeline_profile(
    module: &Module,
    devices: &[usize],
    config: &compiler::IpuConfig,
    dir: &Path,
) -> anyhow::Result<PathBuf> {
    let profile = estimate_staged(module, devices, config)
        .map_err(|e| e.context("--pipeline-cfg: profiling the split"))?;
    std::fs::create_dir_all(dir)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
    let file = dir.join("profile.json");
    std::fs::write(&file, serde_json::to_string_pretty(&profile)?)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", file.display()))?;
    Ok(file)
}

/// Re-weights the instructions' costs by what each stage of `mapping` really took (the
/// cycles of the steps on its IPU alone in the pipeline's estimate: its compute sets and
/// on-IPU copies, against the sum of its instructions' costs) and splits again,
/// `iterations` times; the split whose pipeline takes fewest cycles wins (the seed's
/// `fine_tune_iter`). Returns it and the pipeline's cycles before and after.
fn fine_tune(
    module: &Module,
    stages: usize,
    mut costs: std::collections::HashMap<String, f64>,
    iterations: usize,
    config: &compiler::IpuConfig,
) -> anyhow::Result<(std::collections::BTreeMap<String, usize>, u64, u64)> {
    let total = |p: &runtime::Profile| p.total_cycles;
    let mut mapping = split_by_cost(module, stages, &costs)?;
    let mut profile = estimate_split(module, &mapping, stages, config)?;
    let first = total(&profile);
    let mut best = (first, mapping.clone());
    for _ in 0..iterations {
        let mut predicted = vec![0.0f64; stages];
        for (name, &s) in &mapping {
            predicted[s] += costs.get(name).copied().unwrap_or(0.0);
        }
        let work = stage_work(&profile, stages);
        for (name, cost) in costs.iter_mut() {
            let Some(&s) = mapping.get(name) else {
                continue;
            };
            if predicted[s] > 0.0 && work[s] > 0.0 {
                *cost *= work[s] / predicted[s];
            }
        }
        let next = split_by_cost(module, stages, &costs)?;
        if next == mapping {
            break;
        }
        mapping = next;
        profile = estimate_split(module, &mapping, stages, config)?;
        if total(&profile) < best.0 {
            best = (total(&profile), mapping.clone());
        }
    }
    Ok((best.1, first, best.0))
}

/// Per stage (stage `k` on IPU `k`), the cycles of the steps that ran on its IPU alone
/// (a step beside the slowest branch of a `Parallel` counts its own cycles).
fn stage_work(p: &runtime::Profile, stages: usize) -> Vec<f64> {
    let mut work = vec![0.0; stages];
    for step in &p.steps {
        if let [ipu] = step.ipus[..]
            && ipu < stages
        {
            work[ipu] += step.beside.map_or(step.cycles, |b| b.cycles) as f64;
        }
    }
    work
}

/// The seed's defaults for the auto converter's IPU search (`min_ipu_quantity`,
/// `max_ipu_quantity`).
const MIN_IPU_QUANTITY: usize = 2;
const MAX_IPU_QUANTITY: usize = 64;

/// The fewest IPUs in `range` on which the auto split's stages all fit in tile memory
/// (the seed's search "for the minimum number of IPUs that model should use"): each count
/// a system can have (whole cards of 2) is split, staged and compiled as a pipeline on the IPU Model of `config` (without
/// Streaming Memory: a stage must fit on its tiles), its memory checked; the error of the
/// largest count says which tile of which stage does not fit, and by how much.
fn fewest_ipus(
    module: &Module,
    range: std::ops::RangeInclusive<usize>,
    costs: &std::collections::HashMap<String, f64>,
    config: &compiler::IpuConfig,
) -> anyhow::Result<usize> {
    let mut last_error = None;
    let target = config.target()?;
    for n in range.clone() {
        // Systems come in whole cards: a count the ladder cannot have is skipped.
        if runtime::System::new(target.clone(), n).is_err() {
            continue;
        }
        let mapping = split_by_cost(module, n, costs)?;
        let mut cfg = config.clone();
        cfg.ipu_model.streaming_memory = false;
        let fits = estimate_split(module, &mapping, n, &cfg).map(|_| ());
        match fits {
            Ok(()) => return Ok(n),
            Err(e) if is_out_of_memory(&e) => last_error = Some((n, e)),
            Err(e) => return Err(e.context(format!("--pipeline-cfg: compiling {n} stages"))),
        }
    }
    let Some((n, e)) = last_error else {
        anyhow::bail!(
            "--pipeline-cfg: no system has {} to {} IPUs (a system has 1 IPU or whole cards of 2)",
            range.start(),
            range.end()
        );
    };
    anyhow::bail!(
        "--pipeline-cfg: the model does not fit on {} to {} IPUs; with {n} stages: {e:#}",
        range.start(),
        range.end()
    )
}

/// Whether `e` says a tile ran out of memory (the compiler's or the IPU Model's report).
fn is_out_of_memory(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        matches!(
            c.downcast_ref::<compiler::CompileError>(),
            Some(compiler::CompileError::OutOfMemory(_))
        ) || matches!(
            c.downcast_ref::<runtime::RuntimeError>(),
            Some(runtime::RuntimeError::OutOfMemory { .. })
        )
    })
}

/// Writes each entry instruction's stage (`ipu_stage`). A constant value (constants, iotas
/// and what is computed from them alone) that stages after its own read gets a copy in each
/// of them, since a stage reads only values of the stage before it.
fn stage_entry(
    comp: &mut xla_ir::Computation,
    mapping: &std::collections::BTreeMap<String, usize>,
) {
    use std::collections::HashMap;
    use xla_ir::{InstrId, Op};
    let order = comp.order().to_vec();
    let mut stage: HashMap<InstrId, usize> = order
        .iter()
        .map(|&i| (i, mapping[&comp.instr(i).name]))
        .collect();
    let mut constant: HashMap<InstrId, bool> = HashMap::new();
    for &i in &order {
        let instr = comp.instr(i);
        // Copies must compute the same value: no inputs, feeds, random bits, or ops with
        // effects or unknown meaning.
        let c = !matches!(
            instr.op,
            Op::Parameter { .. }
                | Op::Infeed { .. }
                | Op::Outfeed { .. }
                | Op::RngBitGenerator { .. }
                | Op::CustomCall { .. }
                | Op::Foreign { .. }
                | Op::AfterAll
        ) && instr.operands.iter().all(|o| constant[o]);
        constant.insert(i, c);
    }
    let mut copies: HashMap<(InstrId, usize), InstrId> = HashMap::new();
    fn copy_for(
        comp: &mut xla_ir::Computation,
        i: InstrId,
        s: usize,
        stage: &mut HashMap<InstrId, usize>,
        copies: &mut HashMap<(InstrId, usize), InstrId>,
    ) -> InstrId {
        if stage[&i] == s {
            return i;
        }
        if let Some(&c) = copies.get(&(i, s)) {
            return c;
        }
        let mut copy = comp.instr(i).clone();
        copy.name = format!("{}.stage{s}", copy.name);
        copy.control_predecessors.clear();
        copy.operands = copy
            .operands
            .iter()
            .map(|&o| copy_for(comp, o, s, stage, copies))
            .collect();
        let id = comp.push(copy);
        stage.insert(id, s);
        copies.insert((i, s), id);
        id
    }
    for &user in &order {
        let s = stage[&user];
        for k in 0..comp.instr(user).operands.len() {
            let o = comp.instr(user).operands[k];
            if constant[&o] && stage[&o] != s {
                let c = copy_for(comp, o, s, &mut stage, &mut copies);
                comp.instr_mut(user).operands[k] = c;
            }
        }
    }
    // Each copy right before the first instruction that reads it (its own operands first).
    let original: std::collections::HashSet<InstrId> = order.iter().copied().collect();
    let mut placed: Vec<InstrId> = Vec::new();
    let mut seen: std::collections::HashSet<InstrId> = std::collections::HashSet::new();
    fn place(
        comp: &xla_ir::Computation,
        c: InstrId,
        original: &std::collections::HashSet<InstrId>,
        placed: &mut Vec<InstrId>,
        seen: &mut std::collections::HashSet<InstrId>,
    ) {
        if original.contains(&c) || !seen.insert(c) {
            return;
        }
        for &o in &comp.instr(c).operands {
            place(comp, o, original, placed, seen);
        }
        placed.push(c);
    }
    for &i in &order {
        for &o in &comp.instr(i).operands {
            place(comp, o, &original, &mut placed, &mut seen);
        }
        placed.push(i);
    }
    comp.set_schedule(placed)
        .expect("copies placed after their operands and before their users");
    for &i in comp.order().to_vec().iter() {
        let s = stage[&i];
        comp.instr_mut(i)
            .frontend_attributes
            .insert("ipu_stage".to_string(), s.to_string());
    }
}

/// Each entry instruction's cost for balancing stages: its result bytes (`memory`) or the
/// cycles the IPU Model estimates for the steps it lowers to (`cycle`).
fn instruction_costs(
    module: &Module,
    by_memory: bool,
    ipu_config: &compiler::IpuConfig,
) -> anyhow::Result<std::collections::HashMap<String, f64>> {
    let entry = module.entry_computation();
    let order: Vec<xla_ir::InstrId> = entry.order().to_vec();
    let mut cost: std::collections::HashMap<&str, f64> = std::collections::HashMap::new();
    if by_memory {
        for &i in &order {
            cost.insert(
                &entry.instr(i).name,
                entry.instr(i).shape.byte_size() as f64,
            );
        }
    } else {
        // Without outlining, every step belongs to one instruction of its own (a shared
        // function's steps would carry the first region's names for every call).
        let mut config = ipu_config.clone();
        config.optimizations.enable_graph_outlining = false;
        let estimate = crate::device::estimate_on_ipu_model(
            module,
            &config,
            &compiler::passes::PassOptions::default(),
        )?;
        // A step is named after the instruction it lowers (`dot.3`, `dot.3.result`).
        let names: std::collections::HashSet<&str> = order
            .iter()
            .map(|&i| entry.instr(i).name.as_str())
            .collect();
        for step in &estimate.profile.steps {
            let mut name = step.name.as_str();
            loop {
                if let Some(&known) = names.get(name) {
                    *cost.entry(known).or_default() += step.cycles as f64;
                    break;
                }
                match name.rsplit_once('.') {
                    Some((head, _)) => name = head,
                    None => break,
                }
            }
        }
    }
    Ok(cost.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

/// The auto converter's split: the entry computation's instructions, in program order, cut
/// into runs of about equal cost ([`instruction_costs`]); parameters and constants go with
/// their first user.
/// Cuts the entry's order into `stages` stages of about equal total `cost`.
fn split_by_cost(
    module: &Module,
    stages: usize,
    cost: &std::collections::HashMap<String, f64>,
) -> anyhow::Result<std::collections::BTreeMap<String, usize>> {
    let entry = module.entry_computation();
    let order: Vec<xla_ir::InstrId> = entry.order().to_vec();
    let is_input = |i: xla_ir::InstrId| {
        matches!(
            entry.instr(i).op,
            xla_ir::Op::Parameter { .. } | xla_ir::Op::Constant { .. }
        )
    };
    let work: Vec<xla_ir::InstrId> = order.iter().copied().filter(|&i| !is_input(i)).collect();
    if work.len() < stages {
        anyhow::bail!(
            "--pipeline-cfg: {} instruction(s) cannot make {stages} stages",
            work.len()
        );
    }
    let total: f64 = work
        .iter()
        .map(|i| {
            cost.get(entry.instr(*i).name.as_str())
                .copied()
                .unwrap_or(0.0)
        })
        .sum();
    let mut mapping = std::collections::BTreeMap::new();
    let mut done = 0.0;
    for (k, &i) in work.iter().enumerate() {
        let c = cost
            .get(entry.instr(i).name.as_str())
            .copied()
            .unwrap_or(0.0);
        // The stage whose share of the total the middle of this instruction's cost falls in,
        // kept so that every stage gets at least one instruction.
        let by_cost = if total > 0.0 {
            ((done + c / 2.0) / total * stages as f64) as usize
        } else {
            0
        };
        let remaining = work.len() - k;
        let stage = by_cost
            .min(stages - 1)
            .max(stages.saturating_sub(remaining));
        mapping.insert(entry.instr(i).name.clone(), stage);
        done += c;
    }
    // Stages never go backwards along the order.
    let mut last = 0;
    for &i in &work {
        let s = mapping.get_mut(&entry.instr(i).name).expect("set above");
        *s = (*s).max(last);
        last = *s;
    }
    for &i in order.iter().filter(|&&i| is_input(i)) {
        let first_user = order
            .iter()
            .find(|&&u| entry.instr(u).operands.contains(&i))
            .map(|&u| mapping.get(&entry.instr(u).name).copied().unwrap_or(0))
            .unwrap_or(0);
        mapping.insert(entry.instr(i).name.clone(), first_user);
    }
    Ok(mapping)
}

fn set_planner(options: &mut Options, key: &'static str, value: String) {
    options.planner.retain(|(k, _)| *k != key);
    options.planner.push((key, value));
}

/// An availableMemoryProportion, checked as the seed checks it.
fn amp_value(a: f64, key: &str) -> anyhow::Result<String> {
    if !(0.0..=1.0).contains(&a) {
        anyhow::bail!("{key} is {a}; availableMemoryProportion must be between 0.0 and 1.0");
    }
    Ok(a.to_string())
}

/// True when a regex matches the instruction's name or metadata op_name.
fn matches_any(regexes: &[Regex], instr: &Instruction) -> bool {
    regexes.iter().any(|r| {
        r.is_match(&instr.name)
            || instr
                .metadata
                .op_name
                .as_deref()
                .is_some_and(|n| r.is_match(n))
    })
}

fn regexes(list: &[String], what: &str) -> anyhow::Result<Vec<Regex>> {
    list.iter()
        .map(|r| Regex::new(r).map_err(|e| anyhow::anyhow!("{what}: '{r}' is not a regex: {e}")))
        .collect()
}

/// The three regex lists of a GELU replacement (`{"gelu_replacement": {...}}` or the object).
fn gelu_rule(value: &Value) -> Result<[Vec<String>; 3], String> {
    let object = value.get("gelu_replacement").unwrap_or(value);
    let list = |key: &str| -> Result<Vec<String>, String> {
        object
            .get(key)
            .and_then(Value::as_array)
            .and_then(|a| a.iter().map(|x| x.as_str().map(String::from)).collect())
            .ok_or_else(|| format!("{key} must be a list of regex strings"))
    };
    Ok([
        list("nodes")?,
        list("node_as_gelu_input")?,
        list("node_use_gelu_output")?,
    ])
}

/// Places every instruction of the entry computation on the IPU whose regexes match its
/// name or op_name first (IPU 0 when none does); returns the count per IPU.
fn place(module: &mut Module, shards: &[Vec<Regex>]) -> Vec<usize> {
    let mut placed = vec![0; shards.len()];
    let entry = module.entry;
    let comp = module.computation_mut(entry);
    for id in comp.order().to_vec() {
        let instr = comp.instr_mut(id);
        let ipu = shards
            .iter()
            .position(|list| matches_any(list, instr))
            .unwrap_or(0);
        instr.sharding = Some(xla_ir::Sharding::Maximal { device: ipu as i64 });
        placed[ipu] += 1;
    }
    placed
}

fn count(module: &Module, matches: &dyn Fn(&Instruction) -> bool) -> usize {
    module
        .computations()
        .flat_map(|(_, c)| c.instructions().map(|(_, i)| i))
        .filter(|i| matches(i))
        .count()
}

fn f16_count(module: &Module) -> usize {
    count(module, &|i: &Instruction| {
        i.shape
            .leaf_arrays()
            .iter()
            .any(|a| a.element_type == ElementType::F16)
    })
}

/// The seed's config file: JSON with `//` comments.
fn read_config(path: &Path) -> anyhow::Result<Options> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    let value: Value = serde_json::from_str(&strip_line_comments(&text))
        .map_err(|e| anyhow::anyhow!("{}: not JSON: {e}", path.display()))?;
    let Value::Object(map) = value else {
        anyhow::bail!("{}: expected a JSON object of options", path.display());
    };
    let mut options = Options::default();
    for (key, v) in &map {
        let bad = |want: &str| anyhow::anyhow!("{}: {key} must be {want}", path.display());
        match key.as_str() {
            "precision_mode" => {
                options.precision_mode = Some(match v.as_str() {
                    Some(s) if s.eq_ignore_ascii_case("fp16") => PrecisionMode::Fp16,
                    Some(s) if s.eq_ignore_ascii_case("fp32") => PrecisionMode::Fp32,
                    _ => return Err(bad("\"FP16\" or \"FP32\"")),
                })
            }
            "precision_conversion_excluded_nodes" => {
                options.excluded = v
                    .as_array()
                    .and_then(|a| a.iter().map(|x| x.as_str().map(String::from)).collect())
                    .ok_or_else(|| bad("a list of regex strings"))?
            }
            "int64_to_int32_conversion" => {
                options.int64_to_int32 = v.as_bool().ok_or_else(|| bad("true or false"))?
            }
            "excluded_nodes" => {
                options.excluded_nodes = v
                    .as_array()
                    .and_then(|a| a.iter().map(|x| x.as_str().map(String::from)).collect())
                    .ok_or_else(|| bad("a list of regex strings"))?
            }
            "batch_size" => options.batch_size = Some(v.as_u64().ok_or_else(|| bad("a count"))?),
            "remove_excluded_nodes" => {
                options.remove_excluded_nodes = v.as_bool().ok_or_else(|| bad("true or false"))?
            }
            "no_ipu_placement" => {
                if v.as_bool().ok_or_else(|| bad("true or false"))? {
                    options.excluded_nodes = vec![".*".into()];
                }
            }
            "gelu_replacement" => {
                options.gelu =
                    Some(gelu_rule(v).map_err(|e| {
                        anyhow::anyhow!("{}: gelu_replacement: {e}", path.display())
                    })?)
            }
            "pipeline_cfg" => options.pipeline = Some(v.clone()),
            "matmul_amp" | "conv_amp" => {
                let a = v
                    .as_f64()
                    .ok_or_else(|| bad("a number between 0.0 and 1.0"))?;
                let key = if key == "matmul_amp" {
                    "matmul_amp"
                } else {
                    "conv_amp"
                };
                set_planner(&mut options, key, amp_value(a, key)?);
            }
            "matmul_partial_type" | "conv_partial_type" => {
                let pt = match v.as_str() {
                    Some(p) if p.eq_ignore_ascii_case("float") => "float",
                    Some(p) if p.eq_ignore_ascii_case("half") => "half",
                    _ => return Err(bad("\"float\" or \"half\"")),
                };
                let key = if key == "matmul_partial_type" {
                    "matmul_partial_type"
                } else {
                    "conv_partial_type"
                };
                set_planner(&mut options, key, pt.to_string());
            }
            "batch_per_step" => {
                options.batch_per_step = Some(
                    v.as_u64()
                        .ok_or_else(|| bad("a count (0: no device loop)"))?,
                )
            }
            "num_ipus" => {
                options.num_ipus =
                    Some(v.as_u64().ok_or_else(|| bad("a positive integer"))? as usize)
            }
            "manual_sharding" => {
                options.manual_sharding = v
                    .as_array()
                    .and_then(|ipus| {
                        ipus.iter()
                            .map(|list| {
                                list.as_array().and_then(|l| {
                                    l.iter().map(|x| x.as_str().map(String::from)).collect()
                                })
                            })
                            .collect()
                    })
                    .ok_or_else(|| bad("a list of regex lists, one per IPU"))?
            }
            other if NOT_YET.contains(&other) => anyhow::bail!(
                "{}: option {other} is not implemented by ipuxla convert yet",
                path.display()
            ),
            other => anyhow::bail!("{}: unknown option {other}", path.display()),
        }
    }
    Ok(options)
}

/// `text` without `//` comments (outside strings), as the seed's sample config has them.
fn strip_line_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let mut in_string = false;
        let mut escaped = false;
        let mut cut = line.len();
        let bytes = line.as_bytes();
        for (i, &b) in bytes.iter().enumerate() {
            match b {
                _ if escaped => escaped = false,
                b'\\' if in_string => escaped = true,
                b'"' => in_string = !in_string,
                b'/' if !in_string && bytes.get(i + 1) == Some(&b'/') => {
                    cut = i;
                    break;
                }
                _ => {}
            }
        }
        out.push_str(&line[..cut]);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_go_and_strings_stay() {
        let text =
            "{\n  // a comment\n  \"precision_mode\": \"FP16\", // trailing\n  \"x\": \"a//b\"\n}";
        let v: Value = serde_json::from_str(&strip_line_comments(text)).unwrap();
        assert_eq!(v["precision_mode"], "FP16");
        assert_eq!(v["x"], "a//b");
    }
}
