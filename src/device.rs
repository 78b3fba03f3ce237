//! Running a module on the IPU Model: compile, load (checking memory), feed the inputs,
//! run, and read the results back as host values of the module's own result types.

use compiler::{Compiled, IpuConfig, PassOptions};
use runtime::{Engine, HostIo, Profile};
use xla_ir::literal::ArrayLiteral;
use xla_ir::{Literal, Module};

/// What a run on the IPU Model produced.
#[derive(Debug)]
pub struct DeviceRun {
    /// The result leaves, in order, in the module's declared types.
    pub outputs: Vec<ArrayLiteral>,
    /// Cycles, bytes and memory per tile.
    pub profile: Profile,
    /// Compute sets and vertices in the executable.
    pub compute_sets: usize,
    /// Vertices (JIT and codelet) in the executable.
    pub vertices: usize,
    /// Compiler warnings (conversions the device needed).
    pub warnings: Vec<String>,
    /// Host seconds compiling (HLO to executable).
    pub compile_seconds: f64,
    /// Host seconds loading (checks, JIT compilation of kernels, tile memory).
    pub load_seconds: f64,
    /// Host seconds simulating the run.
    pub run_seconds: f64,
}

fn leaves(l: &Literal, out: &mut Vec<ArrayLiteral>) {
    match l {
        Literal::Array(a) => out.push(a.clone()),
        Literal::Tuple(items) => items.iter().for_each(|x| leaves(x, out)),
        Literal::Token => {}
    }
}

/// Compiles `module` for `config`, runs it once on `inputs` (one literal per parameter).
pub fn run_on_ipu_model(
    module: &Module,
    config: &IpuConfig,
    inputs: &[Literal],
) -> anyhow::Result<DeviceRun> {
    run_on_ipu_model_with(module, config, &PassOptions::default(), inputs)
}

/// [`run_on_ipu_model`] with pass-pipeline options (dumps, stopping early).
pub fn run_on_ipu_model_with(
    module: &Module,
    config: &IpuConfig,
    options: &PassOptions,
    inputs: &[Literal],
) -> anyhow::Result<DeviceRun> {
    let t0 = std::time::Instant::now();
    let Compiled {
        executable,
        inputs: streams_in,
        outputs: streams_out,
        warnings,
    } = compiler::compile_with_options(module, config, options)?;
    let compute_sets = executable.compute_sets.len();
    let vertices = executable
        .compute_sets
        .iter()
        .map(|c| c.vertices.len() + c.codelet_vertices.len())
        .sum();
    let t1 = std::time::Instant::now();
    let mut engine = Engine::load(executable)?;
    let t2 = std::time::Instant::now();
    let mut io = HostIo::new();
    let mut flat = Vec::new();
    for l in inputs {
        leaves(l, &mut flat);
    }
    if flat.len() != streams_in.len() {
        anyhow::bail!(
            "the module takes {} input arrays, {} were given",
            streams_in.len(),
            flat.len()
        );
    }
    for (s, a) in streams_in.iter().zip(&flat) {
        io.feed(&s.stream, compiler::device_data::to_device(&a.data));
    }
    let t3 = std::time::Instant::now();
    let profile = engine.run(&mut io)?;
    let run_seconds = t3.elapsed().as_secs_f64();
    let entry = module.entry_computation();
    let declared = entry.root_instr().shape.leaf_arrays();
    let mut outputs = Vec::new();
    for (s, shape) in streams_out.iter().zip(declared) {
        let bytes = io
            .take(&s.stream)
            .pop()
            .ok_or_else(|| anyhow::anyhow!("the device produced nothing on stream {}", s.stream))?;
        outputs.push(compiler::device_data::from_device(shape, &bytes));
    }
    Ok(DeviceRun {
        outputs,
        profile,
        compute_sets,
        vertices,
        warnings,
        compile_seconds: (t1 - t0).as_secs_f64(),
        load_seconds: (t2 - t1).as_secs_f64(),
        run_seconds,
    })
}
