//! Measuring a corpus case as XLA's own benchmark did: compile (parse to a loaded
//! executable, JIT included) once, then run repeatedly and take the median, and set the
//! figures beside what XLA on the CPU recorded in `case.json` (`xla_cpu`).

use crate::corpus::{Case, compare_output};
use crate::device::LoadedModule;
use crate::roofline::Roofline;
use compiler::{IpuConfig, PassOptions};
use std::path::Path;
use std::time::Instant;
use xla_ir::literal::{ArrayData, ArrayLiteral};
use xla_ir::{ElementType, Literal, Module};

/// How to measure.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Timed runs (the median and minimum are reported).
    pub runs: usize,
    /// Untimed runs first (kernel and page warm-up), as XLA's benchmark does.
    pub warmup_runs: usize,
    /// The module file in each case directory.
    pub file: String,
    /// The device and compiler options.
    pub config: IpuConfig,
}

impl Default for BenchOptions {
    fn default() -> BenchOptions {
        BenchOptions {
            runs: 5,
            warmup_runs: 1,
            file: "module.hlo".into(),
            config: IpuConfig::default(),
        }
    }
}

/// What XLA on the CPU recorded for a case.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct XlaFigures {
    /// `xla_cpu.compile_ms`.
    pub compile_ms: f64,
    /// `xla_cpu.run_ms_median`.
    pub run_ms_median: f64,
}

/// Whether the run's results matched the case's stored outputs.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputCheck {
    /// Every stored output matched within the corpus tolerance.
    Matched(usize),
    /// The case stores no inputs or outputs (generated inputs were used).
    NotChecked,
    /// An output differs: which and how.
    Mismatch(String),
}

impl OutputCheck {
    /// A short word for tables.
    pub fn word(&self) -> String {
        match self {
            OutputCheck::Matched(n) => format!("ok ({n})"),
            OutputCheck::NotChecked => "unchecked".into(),
            OutputCheck::Mismatch(_) => "MISMATCH".into(),
        }
    }
}

/// One case measured.
#[derive(Debug, Clone)]
pub struct BenchResult {
    /// The case's name.
    pub name: String,
    /// Instructions in the module, all computations.
    pub instructions: usize,
    /// Parse to loaded executable, ms: `parse_ms + lower_ms + load_ms`.
    pub compile_ms: f64,
    /// Parsing and verifying the HLO text, ms.
    pub parse_ms: f64,
    /// The pass pipeline and lowering to an executable, ms.
    pub lower_ms: f64,
    /// Loading: checks, JIT compilation of the kernels, tile memory, ms.
    pub load_ms: f64,
    /// Where loading's time went, by phase (`load_checks_ms`, `load_costs_ms`, ... in the
    /// JSON; the phases overlap, see [`runtime::LoadTimes`], and the rest of `load_ms` is
    /// moving the executable into the engine).
    pub load_times: runtime::LoadTimes,
    /// Median host time of one run (feeding inputs to reading results), ms.
    pub run_ms_median: f64,
    /// Fastest run, ms.
    pub run_ms_min: f64,
    /// Timed runs.
    pub runs: usize,
    /// Where a timed run's host time went, ms (mean over the timed runs): running compute
    /// sets, carrying out the exchange, host streams.
    pub host_compute_ms: f64,
    /// See `host_compute_ms`.
    pub host_exchange_ms: f64,
    /// See `host_compute_ms`.
    pub host_streams_ms: f64,
    /// The same by family of steps (a compute set's, rearrangement's or stream's name
    /// without its instruction numbers), slowest first.
    pub host_steps: Vec<HostStepFamily>,
    /// Estimating the same executable's profile without running it
    /// ([`LoadedModule::estimate`]: checks and costs), ms.
    pub estimate_ms: f64,
    /// IPU Model cycles of one run.
    pub simulated_cycles: u64,
    /// Bytes used on the fullest tile.
    pub peak_tile_bytes: u64,
    /// Bytes moved between tiles in one run (the host copies each of them).
    pub bytes_exchanged: u64,
    /// Compute sets and vertices in the executable.
    pub compute_sets: usize,
    /// Vertices in the executable.
    pub vertices: usize,
    /// FLOPs, the AMP peak and the exchange's lower bound against the simulated run.
    pub roofline: Roofline,
    /// Whether the outputs matched XLA's.
    pub outputs: OutputCheck,
    /// XLA's figures, when the case records them.
    pub xla: Option<XlaFigures>,
}

/// Host time a run spent on one family of steps: every compute set, rearrangement or
/// stream whose name is the same but for its instructions' numbers (the encoder's 72
/// `dot_general.N.result` rearrangements are one family, `dot_general.result`).
#[derive(Debug, Clone, PartialEq)]
pub struct HostStepFamily {
    /// What kind of steps.
    pub kind: runtime::HostStepKind,
    /// The names without their numbers (streams: `stream in`, `stream out`).
    pub family: String,
    /// Mean host time a run, ms.
    pub ms: f64,
    /// Executions a run (mean).
    pub per_run: f64,
    /// Bytes a run moves on the host in these steps (mean): exchange steps' windows
    /// gathered and bytes written (each byte copied counted once), streams' bytes; compute
    /// sets' bytes read plus bytes written (their regions in tile memory, inputs from kept
    /// windows and scratches, batched products' operands and results).
    pub bytes: f64,
    /// Compute sets that sum a product's K parts inside the op reading them (a vertex reads
    /// two or more parts of one `.parts` tensor: the sum fused with its one element-wise
    /// reader), kept apart from the op's own family. Work only an IPU run does, with the
    /// reader's op (a bias or residual add) counted in it.
    pub k_part_sums: bool,
}

impl HostStepFamily {
    /// `times` (added over `runs` runs of `exe`) by family, slowest first.
    pub fn of(times: &runtime::HostTimes, exe: &runtime::Executable, runs: usize) -> Vec<Self> {
        let runs = runs.max(1) as f64;
        let summing = k_part_sums(exe);
        let mut families: Vec<HostStepFamily> = Vec::new();
        let mut index = std::collections::HashMap::new();
        for step in times.by_step(exe) {
            let family = step_family(step.kind, &step.name);
            let sums = step.kind == runtime::HostStepKind::Compute && summing.contains(&*step.name);
            let i = *index
                .entry((step.kind, family.clone(), sums))
                .or_insert_with(|| {
                    families.push(HostStepFamily {
                        kind: step.kind,
                        family,
                        ms: 0.0,
                        per_run: 0.0,
                        bytes: 0.0,
                        k_part_sums: sums,
                    });
                    families.len() - 1
                });
            families[i].ms += ms(step.time.time) / runs;
            families[i].per_run += f64::from(step.time.runs) / runs;
            families[i].bytes += step.time.bytes as f64 / runs;
        }
        families.sort_by(|a, b| b.ms.total_cmp(&a.ms));
        families
    }

    /// As JSON: `{"kind", "step", "ms", "per_run", "bytes", "k_part_sums"}`.
    pub fn to_json(&self) -> serde_json::Value {
        let kind = match self.kind {
            runtime::HostStepKind::Compute => "compute",
            runtime::HostStepKind::Exchange => "exchange",
            runtime::HostStepKind::Stream => "stream",
        };
        serde_json::json!({
            "kind": kind,
            "step": self.family,
            "ms": self.ms,
            "per_run": self.per_run,
            "bytes": self.bytes,
            "k_part_sums": self.k_part_sums,
        })
    }
}

/// The names of `exe`'s compute sets that sum a product's K parts in the op reading them:
/// some vertex reads two or more regions of one tensor the lowering named `….parts` (a
/// product's K parts stacked). The `….sum` compute sets summing parts alone are not among
/// them (their family's name says what they are).
fn k_part_sums(exe: &runtime::Executable) -> std::collections::HashSet<&str> {
    let parts = |r: &runtime::Region| exe.tensors[r.tensor.0 as usize].name.ends_with(".parts");
    (exe.compute_sets.iter())
        .filter(|cs| !cs.name.ends_with(".sum"))
        .filter(|cs| {
            cs.vertices.iter().any(|v| {
                let mut read = v.inputs.iter().filter(|r| parts(r)).map(|r| r.tensor);
                read.next().is_some_and(|first| read.any(|t| t == first))
            })
        })
        .map(|cs| cs.name.as_str())
        .collect()
}

/// A step's name without the instruction numbers the lowering put in it: every `.N` (a dot
/// and digits up to a dot, a space or the end) dropped (`dot_general.72.result` →
/// `dot_general.result`, `copy slice.150 -> outlined.0.arg7` → `copy slice ->
/// outlined.arg7`); a stream's trailing number dropped (`in7` → `stream in`).
fn step_family(kind: runtime::HostStepKind, name: &str) -> String {
    if kind == runtime::HostStepKind::Stream {
        return format!(
            "stream {}",
            name.trim_end_matches(|c: char| c.is_ascii_digit())
        );
    }
    let bytes = name.as_bytes();
    let mut family = String::with_capacity(name.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'.' {
            let digits = bytes[i + 1..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
            let end = i + 1 + digits;
            if digits > 0 && matches!(bytes.get(end), None | Some(b'.' | b' ')) {
                i = end;
                continue;
            }
        }
        // Whole characters: a name may hold any UTF-8.
        let c = name[i..].chars().next().expect("i is a character boundary");
        family.push(c);
        i += c.len_utf8();
    }
    family
}

/// A duration in milliseconds.
fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl BenchResult {
    /// compile_ms over XLA's.
    pub fn compile_ratio(&self) -> Option<f64> {
        self.xla.map(|x| self.compile_ms / x.compile_ms)
    }

    /// run_ms_median over XLA's.
    pub fn run_ratio(&self) -> Option<f64> {
        self.xla.map(|x| self.run_ms_median / x.run_ms_median)
    }

    /// The result as one JSON object (what `ipuxla bench --json` prints).
    pub fn to_json(&self) -> serde_json::Value {
        let mut json = serde_json::json!({
            "name": self.name,
            "instructions": self.instructions,
            "compile_ms": self.compile_ms,
            "parse_ms": self.parse_ms,
            "lower_ms": self.lower_ms,
            "load_ms": self.load_ms,
            "load_checks_ms": ms(self.load_times.checks),
            "load_costs_ms": ms(self.load_times.costs),
            "load_kernels_ms": ms(self.load_times.kernels),
            "load_host_plan_ms": ms(self.load_times.host_plan),
            "load_rearrangements_ms": ms(self.load_times.rearrangements),
            "load_memory_ms": ms(self.load_times.memory),
            "run_ms_median": self.run_ms_median,
            "run_ms_min": self.run_ms_min,
            "runs": self.runs,
            "host_compute_ms": self.host_compute_ms,
            "host_exchange_ms": self.host_exchange_ms,
            "host_streams_ms": self.host_streams_ms,
            "host_steps": self.host_steps.iter().map(HostStepFamily::to_json).collect::<Vec<_>>(),
            "estimate_ms": self.estimate_ms,
            "simulated_cycles": self.simulated_cycles,
            "peak_tile_bytes": self.peak_tile_bytes,
            "bytes_exchanged": self.bytes_exchanged,
            "compute_sets": self.compute_sets,
            "vertices": self.vertices,
            "outputs": match &self.outputs {
                OutputCheck::Matched(_) => "matched".to_string(),
                OutputCheck::NotChecked => "not checked".to_string(),
                OutputCheck::Mismatch(m) => format!("mismatch: {m}"),
            },
            "xla_compile_ms": self.xla.map(|x| x.compile_ms),
            "xla_run_ms_median": self.xla.map(|x| x.run_ms_median),
            "compile_ratio": self.compile_ratio(),
            "run_ratio": self.run_ratio(),
        });
        with_fields(&mut json, self.roofline.to_json());
        json
    }
}

/// XLA's figures from `case.json`, when recorded.
pub fn xla_figures(info: &serde_json::Value) -> Option<XlaFigures> {
    let x = &info["xla_cpu"];
    Some(XlaFigures {
        compile_ms: x["compile_ms"].as_f64()?,
        run_ms_median: x["run_ms_median"].as_f64()?,
    })
}

/// Instructions in every computation of `module`.
pub fn instruction_count(module: &Module) -> usize {
    module.computations().map(|(_, c)| c.order().len()).sum()
}

/// Measures the case in `dir`.
pub fn bench_case(dir: &Path, options: &BenchOptions) -> anyhow::Result<BenchResult> {
    let t0 = Instant::now();
    let case = Case::read(dir, &options.file)?;
    let parse_ms = ms(t0.elapsed());
    let stored = case.stored_inputs()?;
    let inputs = match &stored {
        Some(inputs) => inputs.clone(),
        None => generated_inputs(&case.module),
    };
    let (mut loaded, timings) =
        LoadedModule::load(&case.module, &options.config, &PassOptions::default())?;
    let lower_ms = timings.compile_seconds * 1e3;
    let load_ms = timings.load_seconds * 1e3;
    // Converted once, as XLA's timed runs take arrays already on the device; each run
    // still streams them onto the tiles.
    let prepared = loaded.prepare(&inputs)?;
    let mut outputs_and_profile = loaded.run_prepared(&prepared)?;
    for _ in 1..options.warmup_runs {
        loaded.run_prepared(&prepared)?;
    }
    let mut times = Vec::with_capacity(options.runs);
    let mut host = runtime::HostTimes::default();
    for _ in 0..options.runs.max(1) {
        let t = Instant::now();
        outputs_and_profile = loaded.run_prepared(&prepared)?;
        times.push(ms(t.elapsed()));
        host.add(&loaded.host_times());
    }
    let runs = times.len() as f64;
    let per_run = |d| ms(d) / runs;
    let host_steps = HostStepFamily::of(&host, loaded.engine().executable(), times.len());
    times.sort_by(f64::total_cmp);
    let (outputs, profile) = outputs_and_profile;
    let t = Instant::now();
    let estimate = loaded.estimate(&profile.decisions)?;
    let estimate_ms = ms(t.elapsed());
    if estimate != profile {
        anyhow::bail!(
            "the model's estimate ({} cycles) differs from the run's profile ({} cycles)",
            estimate.total_cycles,
            profile.total_cycles
        );
    }
    let check = match stored {
        Some(_) => check_outputs(&case, &outputs)?,
        None => OutputCheck::NotChecked,
    };
    Ok(BenchResult {
        name: case.name(),
        instructions: instruction_count(&case.module),
        compile_ms: parse_ms + lower_ms + load_ms,
        parse_ms,
        lower_ms,
        load_ms,
        load_times: loaded.load_times(),
        run_ms_median: median(&times),
        run_ms_min: times[0],
        runs: times.len(),
        host_compute_ms: per_run(host.compute),
        host_exchange_ms: per_run(host.exchange),
        host_streams_ms: per_run(host.streams),
        host_steps,
        estimate_ms,
        simulated_cycles: profile.total_cycles,
        bytes_exchanged: profile.totals.bytes_exchanged,
        peak_tile_bytes: profile
            .tiles
            .iter()
            .map(|t| t.bytes_used)
            .max()
            .unwrap_or(0),
        compute_sets: loaded.compute_sets,
        vertices: loaded.vertices,
        roofline: Roofline::of(&case.module, &profile, &options.config.target()?),
        outputs: check,
        xla: xla_figures(&case.info),
    })
}

/// What `ipuxla bench --estimate-only` measures of a case: compiling it and estimating its
/// run without running (no inputs, no kernels, no tile memory).
#[derive(Debug, Clone)]
pub struct EstimateResult {
    /// The case's name.
    pub name: String,
    /// Instructions in the module, all computations.
    pub instructions: usize,
    /// Parsing and compiling to an executable, ms.
    pub compile_ms: f64,
    /// Estimating (checks and costs), ms.
    pub estimate_ms: f64,
    /// The profile a run would record.
    pub profile: runtime::Profile,
    /// FLOPs, the AMP peak and the exchange's lower bound against the estimate.
    pub roofline: Roofline,
}

impl EstimateResult {
    /// The figures as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        let p = &self.profile;
        let mut json = serde_json::json!({
            "name": self.name,
            "instructions": self.instructions,
            "compile_ms": self.compile_ms,
            "estimate_ms": self.estimate_ms,
            "simulated_cycles": p.total_cycles,
            "bytes_exchanged": p.totals.bytes_exchanged,
            "peak_tile_bytes": p.tiles.iter().map(|t| t.bytes_used).max().unwrap_or(0),
            "data_dependent": p.data_dependent.len(),
        });
        with_fields(&mut json, self.roofline.to_json());
        json
    }
}

/// `more`'s fields added to the object `json`.
fn with_fields(json: &mut serde_json::Value, more: serde_json::Value) {
    if let (Some(object), serde_json::Value::Object(more)) = (json.as_object_mut(), more) {
        object.extend(more);
    }
}

/// Compiles the case in `dir` and estimates its run without running it.
pub fn estimate_case(dir: &Path, options: &BenchOptions) -> anyhow::Result<EstimateResult> {
    let t0 = Instant::now();
    let case = Case::read(dir, &options.file)?;
    let parse_ms = ms(t0.elapsed());
    let e = crate::device::estimate_on_ipu_model(
        &case.module,
        &options.config,
        &PassOptions::default(),
    )?;
    Ok(EstimateResult {
        name: case.name(),
        instructions: instruction_count(&case.module),
        compile_ms: parse_ms + e.compile_seconds * 1e3,
        estimate_ms: e.estimate_seconds * 1e3,
        roofline: Roofline::of(&case.module, &e.profile, &options.config.target()?),
        profile: e.profile,
    })
}

fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

fn check_outputs(case: &Case, outputs: &[ArrayLiteral]) -> anyhow::Result<OutputCheck> {
    let mut matched = 0;
    for (k, got) in outputs.iter().enumerate() {
        let Some((want, spec)) = case.expected_output(k)? else {
            continue;
        };
        if let Err(e) = compare_output(got, &want, &spec) {
            return Ok(OutputCheck::Mismatch(format!("output {k}: {e}")));
        }
        matched += 1;
    }
    Ok(if matched == 0 {
        OutputCheck::NotChecked
    } else {
        OutputCheck::Matched(matched)
    })
}

/// Deterministic inputs for the entry parameters of `module`: floats spread over
/// [-1, 1), integers 0..4 (valid as indices of any dimension of at least 4), alternating
/// predicates.
pub fn generated_inputs(module: &Module) -> Vec<Literal> {
    let entry = module.entry_computation();
    entry
        .parameters()
        .iter()
        .enumerate()
        .map(|(k, &p)| generated(&entry.instr(p).shape, k as u64))
        .collect()
}

fn generated(shape: &xla_ir::Shape, seed: u64) -> Literal {
    match shape {
        xla_ir::Shape::Array(a) => {
            let n = a.element_count() as usize;
            let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let mut next = move || {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state
            };
            let mut unit = || (next() >> 11) as f64 / (1u64 << 52) as f64 - 1.0;
            let data = match a.element_type {
                ElementType::F32 => ArrayData::F32((0..n).map(|_| unit() as f32).collect()),
                ElementType::F64 => ArrayData::F64((0..n).map(|_| unit()).collect()),
                ElementType::F16 => {
                    ArrayData::F16((0..n).map(|_| half::f16::from_f64(unit())).collect())
                }
                ElementType::Bf16 => {
                    ArrayData::Bf16((0..n).map(|_| half::bf16::from_f64(unit())).collect())
                }
                ElementType::Pred => ArrayData::Pred((0..n).map(|i| i % 2 == 0).collect()),
                t => {
                    let mut d = ArrayData::zeros(t, n);
                    small_integers(&mut d);
                    d
                }
            };
            Literal::Array(ArrayLiteral {
                shape: a.clone(),
                data,
            })
        }
        xla_ir::Shape::Tuple(items) => Literal::Tuple(
            items
                .iter()
                .enumerate()
                .map(|(i, s)| generated(s, seed * 31 + i as u64))
                .collect(),
        ),
        xla_ir::Shape::Token => Literal::Token,
    }
}

fn small_integers(d: &mut ArrayData) {
    macro_rules! fill {
        ($v:expr) => {
            for (i, x) in $v.iter_mut().enumerate() {
                *x = (i % 4) as _;
            }
        };
    }
    match d {
        ArrayData::S8(v) => fill!(v),
        ArrayData::S16(v) => fill!(v),
        ArrayData::S32(v) => fill!(v),
        ArrayData::S64(v) => fill!(v),
        ArrayData::U8(v) => fill!(v),
        ArrayData::U16(v) => fill!(v),
        ArrayData::U32(v) => fill!(v),
        ArrayData::U64(v) => fill!(v),
        _ => {}
    }
}

/// Compile time of a builder-made encoder stack of some number of layers.
#[derive(Debug, Clone, Copy)]
pub struct ScalingPoint {
    /// Encoder layers.
    pub layers: usize,
    /// Instructions in the module.
    pub instructions: usize,
    /// Parse to loaded executable, ms (the module is printed to HLO text first).
    pub compile_ms: f64,
}

/// Compiles encoder stacks of each number of `layers` (see [`crate::encoder`]) and times
/// each from HLO text to a loaded executable: how compile time grows with module size.
pub fn compile_scaling(layers: &[usize], config: &IpuConfig) -> anyhow::Result<Vec<ScalingPoint>> {
    let mut out = Vec::new();
    for &n in layers {
        let module = crate::encoder::encoder_stack(n, crate::encoder::EncoderSizes::default())?;
        let text = module.to_string();
        let t = Instant::now();
        let parsed = xla_ir::parse_module(&text)?;
        LoadedModule::load(&parsed, config, &PassOptions::default())?;
        out.push(ScalingPoint {
            layers: n,
            instructions: instruction_count(&parsed),
            compile_ms: ms(t.elapsed()),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use runtime::HostStepKind::{Compute, Exchange, Stream};

    #[test]
    fn a_step_family_is_its_name_without_instruction_numbers() {
        assert_eq!(
            step_family(Exchange, "dot_general.72.result"),
            "dot_general.result"
        );
        assert_eq!(step_family(Compute, "add.363"), "add");
        assert_eq!(
            step_family(Compute, "reduce_sum.4.partials"),
            "reduce_sum.partials"
        );
        assert_eq!(
            step_family(Exchange, "copy outlined.arg1 -> outlined.arg1.relayout"),
            "copy outlined.arg1 -> outlined.arg1.relayout"
        );
        assert_eq!(
            step_family(Exchange, "copy slice.150 -> outlined.0.arg7"),
            "copy slice -> outlined.arg7"
        );
        assert_eq!(step_family(Compute, "x.5e.2 é.3"), "x.5e é");
        assert_eq!(step_family(Stream, "in12"), "stream in");
    }
}
