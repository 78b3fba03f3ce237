//! Running a module on the IPU Model: compile, load (checking memory), feed the inputs,
//! run, and read the results back as host values of the module's own result types.

use crate::device_loop::OutfeedMode;
use compiler::{Compiled, DeviceLoop, IpuConfig, PassOptions};
use runtime::{Engine, EngineOptions, HostIo, Profile, ReplicatedEngine};
use std::sync::Arc;
use xla_ir::eval::Feeds;
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
    /// Host seconds compiling (HLO to executable), or reading the stored executable.
    pub compile_seconds: f64,
    /// The stored executable read instead of compiling (see [`LoadTimings::read_from`]).
    pub read_from: Option<std::path::PathBuf>,
    /// Host seconds loading (checks, JIT compilation of kernels, tile memory).
    pub load_seconds: f64,
    /// Host seconds simulating the run.
    pub run_seconds: f64,
    /// In a device loop: its iterations and what stayed resident.
    pub device_loop: Option<LoopFacts>,
    /// A pipelined program: its phases and its bubble.
    pub pipeline: Option<PipelineReport>,
}

/// What a device loop kept on the device and moved per iteration, from its host streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopFacts {
    /// Iterations in the execution.
    pub iterations: u64,
    /// Bytes of parameters streamed in once and resident for every iteration (carried and
    /// constant).
    pub resident_bytes: u64,
    /// Bytes fed in per iteration.
    pub fed_bytes_per_iteration: u64,
    /// Bytes streamed out per iteration (outputs stacked over iterations).
    pub out_bytes_per_iteration: u64,
}

fn leaves<'a>(l: &'a Literal, out: &mut Vec<&'a ArrayLiteral>) {
    match l {
        Literal::Array(a) => out.push(a),
        Literal::Tuple(items) => items.iter().for_each(|x| leaves(x, out)),
        Literal::Token => {}
    }
}

/// A module's inputs converted to device bytes once (as `jax.device_put` does), ready to
/// feed any number of runs without copying: per input stream, its buffers (one per
/// iteration for a stream fed every iteration of a device loop, else one).
pub struct DeviceInputs(Vec<Vec<Arc<[u8]>>>);

/// Compiles `module` for `config`, runs it once on `inputs` (one literal per parameter).
/// With `device_loop.iterations_per_loop` N in the config, one execution runs it N times
/// ([`run_device_loop_on_ipu_model`], the fed parameters worked out from the inputs).
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
    run_on_ipu_model_feeding(module, config, options, inputs, &mut Feeds::default())
}

/// [`run_on_ipu_model_with`] with host feeds for the module's infeeds and outfeeds
/// ([`LoadedModule::run_with_feeds`]).
pub fn run_on_ipu_model_feeding(
    module: &Module,
    config: &IpuConfig,
    options: &PassOptions,
    inputs: &[Literal],
    feeds: &mut Feeds,
) -> anyhow::Result<DeviceRun> {
    if let Some(n) = config.device_loop.iterations_per_loop {
        // Steps per execution from the config: the inputs say which parameters are fed.
        let lp = crate::device_loop::device_loop_for(module, n, inputs)?;
        let mode = if config.device_loop.keeps_last_only()? {
            OutfeedMode::Last
        } else {
            OutfeedMode::All
        };
        return run_device_loop_on_ipu_model(module, config, options, inputs, lp, mode, feeds);
    }
    let (loaded, timings) = LoadedModule::load(module, config, options)?;
    run_once(loaded, timings, inputs, feeds)
}

/// The array leaves of `module`'s result, in order: the host types its outputs come back in.
pub(crate) fn result_leaves(module: &Module) -> Vec<xla_ir::ArrayShape> {
    module
        .entry_computation()
        .root_instr()
        .shape
        .leaf_arrays()
        .into_iter()
        .cloned()
        .collect()
}

/// Runs a freshly loaded module once on `inputs`, with its load's host times.
pub(crate) fn run_once(
    mut loaded: LoadedModule,
    timings: LoadTimings,
    inputs: &[Literal],
    feeds: &mut Feeds,
) -> anyhow::Result<DeviceRun> {
    let t = std::time::Instant::now();
    crate::progress::phase(match loaded.loop_facts() {
        Some(lp) => format!("simulating {} iterations", lp.iterations),
        None => "simulating".to_string(),
    });
    // Only a command's indicator hears of iterations: a library caller pays nothing.
    if loaded.loop_facts().is_some() && crate::progress::active() {
        let tell: runtime::Progress = std::sync::Arc::new(|done, of| {
            crate::progress::phase(format!("simulating: iteration {done} of {of}"));
        });
        loaded.engine.engine_mut(0).set_progress(Some(tell));
    }
    let (outputs, mut profile) = loaded.run_with_feeds(inputs, feeds)?;
    profile.liveness = loaded.engine().executable().liveness.clone();
    Ok(DeviceRun {
        outputs,
        profile,
        compute_sets: loaded.compute_sets,
        vertices: loaded.vertices,
        warnings: std::mem::take(&mut loaded.warnings),
        compile_seconds: timings.compile_seconds,
        read_from: timings.read_from,
        load_seconds: timings.load_seconds,
        run_seconds: t.elapsed().as_secs_f64(),
        device_loop: loaded.loop_facts(),
        pipeline: loaded.pipeline_report()?,
    })
}

/// Compiles `module` for `config` as a device loop (`lp`: steps per execution) and runs it
/// once on `inputs` (one literal per parameter; fed parameters with their extra leading
/// dimension), keeping per-iteration outputs as `mode` says; `feeds` serve the module's
/// infeeds and outfeeds.
pub fn run_device_loop_on_ipu_model(
    module: &Module,
    config: &IpuConfig,
    options: &PassOptions,
    inputs: &[Literal],
    lp: DeviceLoop,
    mode: OutfeedMode,
    feeds: &mut Feeds,
) -> anyhow::Result<DeviceRun> {
    let (mut loaded, timings) =
        LoadedModule::load_device_loop(module, config, options, EngineOptions::default(), lp)?;
    loaded.outfeed_mode = mode;
    run_once(loaded, timings, inputs, feeds)
}

/// What the IPU Model estimates for a module without running it.
#[derive(Debug)]
pub struct DeviceEstimate {
    /// The profile a run would record ([`runtime::estimate`]).
    pub profile: Profile,
    /// Compute sets in the executable.
    pub compute_sets: usize,
    /// Vertices (JIT and codelet) in the executable.
    pub vertices: usize,
    /// Compiler warnings (conversions the device needed).
    pub warnings: Vec<String>,
    /// Host seconds compiling (HLO to executable), or reading the stored executable.
    pub compile_seconds: f64,
    /// The stored executable read instead of compiling (an executable cache entry).
    pub read_from: Option<std::path::PathBuf>,
    /// Host seconds estimating (checks and costing every step; no JIT, nothing run).
    pub estimate_seconds: f64,
}

/// Compiles `module` for `config` and estimates its run on the IPU Model without running:
/// no inputs, no kernels compiled, no tile memory.
pub fn estimate_on_ipu_model(
    module: &Module,
    config: &IpuConfig,
    options: &PassOptions,
) -> anyhow::Result<DeviceEstimate> {
    let t0 = std::time::Instant::now();
    crate::progress::phase("compiling (passes, lowering)");
    let obtained = crate::executable_cache::compile(module, config, options, None)?;
    let (compiled, read_from) = (obtained.compiled, obtained.read_from);
    let exe = &compiled.executable;
    let t1 = std::time::Instant::now();
    crate::progress::phase("estimating");
    let system = runtime::System::new(exe.target.clone(), exe.num_ipus)?;
    let mut profile = runtime::estimate(exe, &system)?;
    profile.liveness = exe.liveness.clone();
    let t2 = std::time::Instant::now();
    Ok(DeviceEstimate {
        profile,
        compute_sets: exe.compute_sets.len(),
        vertices: exe
            .compute_sets
            .iter()
            .map(|c| c.vertices.len() + c.codelet_vertices.len())
            .sum(),
        warnings: compiled.warnings,
        compile_seconds: (t1 - t0).as_secs_f64(),
        read_from,
        estimate_seconds: (t2 - t1).as_secs_f64(),
    })
}

/// Host seconds spent making a [`LoadedModule`].
#[derive(Debug, Clone)]
pub struct LoadTimings {
    /// Compiling (HLO to executable), or reading the stored executable.
    pub compile_seconds: f64,
    /// Loading (checks, JIT compilation of kernels, tile memory).
    pub load_seconds: f64,
    /// The stored executable read instead of compiling (an executable cache entry, or a
    /// file `ipuxla compile` wrote).
    pub read_from: Option<std::path::PathBuf>,
}

/// A module compiled and loaded on the IPU Model, ready to run any number of times: one
/// engine per replica (one, unless the module's header says it runs on several devices).
pub struct LoadedModule {
    engine: ReplicatedEngine,
    streams_in: Vec<compiler::HostBuffer>,
    streams_out: Vec<compiler::HostBuffer>,
    declared: Vec<xla_ir::ArrayShape>,
    device_loop: Option<DeviceLoop>,
    /// In a device loop, what the host keeps of outputs produced every iteration.
    pub outfeed_mode: OutfeedMode,
    infeeds: Vec<compiler::Feed>,
    outfeeds: Vec<compiler::Feed>,
    /// A resident device loop: whether its carried parameters are on the device.
    uploaded: bool,
    /// Compute sets in the executable.
    pub compute_sets: usize,
    /// Vertices (JIT and codelet) in the executable.
    pub vertices: usize,
    /// Compiler warnings (conversions the device needed).
    pub warnings: Vec<String>,
    /// A pipeline's phases.
    pipeline: Option<compiler::PipelineLayout>,
}

/// How a pipeline's run splits into its phases, and how busy each IPU is in each.
#[derive(Debug, Clone, PartialEq)]
pub struct PipelineReport {
    /// The IPU of each stage.
    pub stage_ipus: Vec<usize>,
    /// Pipeline runs per execution (`repeat_count`); the phases are per run.
    pub runs: u64,
    /// The phases of one run, in order.
    pub phases: Vec<PhaseReport>,
    /// The fraction of the stages' IPUs' time (each IPU once) spent waiting during the
    /// pipeline's steps (ramp-up, steady state, ramp-down): the pipeline's bubble.
    pub bubble_fraction: f64,
}

/// One phase of a pipeline run.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseReport {
    /// "ramp-up", "steady state", "ramp-down", ...
    pub name: String,
    /// Pipeline steps in the phase.
    pub steps: u64,
    /// Per stage: steps of the phase in which it works.
    pub working_steps: Vec<u64>,
    /// The phase's cycles.
    pub cycles: u64,
    /// Per stage: the cycles its IPU is busy in the phase.
    pub busy_cycles: Vec<u64>,
}

impl LoadedModule {
    /// Compiles `module` for `config` and loads it (checks, JIT, tile memory).
    pub fn load(
        module: &Module,
        config: &IpuConfig,
        options: &PassOptions,
    ) -> anyhow::Result<(LoadedModule, LoadTimings)> {
        LoadedModule::load_with(module, config, options, EngineOptions::default())
    }

    /// [`LoadedModule::load`] with the engine's host options (threads, shortcuts), which
    /// change neither a byte nor a cycle of a run.
    pub fn load_with(
        module: &Module,
        config: &IpuConfig,
        options: &PassOptions,
        engine: EngineOptions,
    ) -> anyhow::Result<(LoadedModule, LoadTimings)> {
        LoadedModule::load_inner(module, config, options, engine, None, None)
    }

    /// Compiles `module` as a device loop (`lp`: its entry computation run
    /// `lp.iterations` times in one execution, aliased parameters resident) and loads it.
    /// Every [`LoadedModule::run`] then runs all the iterations.
    pub fn load_device_loop(
        module: &Module,
        config: &IpuConfig,
        options: &PassOptions,
        engine: EngineOptions,
        lp: DeviceLoop,
    ) -> anyhow::Result<(LoadedModule, LoadTimings)> {
        LoadedModule::load_inner(module, config, options, engine, Some(lp), None)
    }

    /// Compiles `module` (as a device loop with `device_loop`) and loads the replicas
    /// `local` of it only: this process's share of a run across processes
    /// ([`LoadedModule::run_replicas_across`]).
    pub fn load_local(
        module: &Module,
        config: &IpuConfig,
        options: &PassOptions,
        engine: EngineOptions,
        device_loop: Option<DeviceLoop>,
        local: std::ops::Range<usize>,
    ) -> anyhow::Result<(LoadedModule, LoadTimings)> {
        LoadedModule::load_inner(module, config, options, engine, device_loop, Some(local))
    }

    fn load_inner(
        module: &Module,
        config: &IpuConfig,
        options: &PassOptions,
        engine: EngineOptions,
        device_loop: Option<DeviceLoop>,
        local: Option<std::ops::Range<usize>>,
    ) -> anyhow::Result<(LoadedModule, LoadTimings)> {
        let t0 = std::time::Instant::now();
        crate::progress::phase("compiling (passes, lowering)");
        let obtained =
            crate::executable_cache::compile(module, config, options, device_loop.as_ref())?;
        let compile_seconds = t0.elapsed().as_secs_f64();
        let declared = result_leaves(module);
        let (loaded, load_seconds) =
            LoadedModule::from_compiled(obtained.compiled, declared, device_loop, engine, local)?;
        let timings = LoadTimings {
            compile_seconds,
            load_seconds,
            read_from: obtained.read_from,
        };
        Ok((loaded, timings))
    }

    /// Loads an executable the compiler built (a module's, or a training pipeline's):
    /// `declared` are the host types of its result leaves, `device_loop` how many
    /// iterations a run feeds and collects. Returns it with the host seconds loading took.
    pub fn from_compiled(
        compiled: Compiled,
        declared: Vec<xla_ir::ArrayShape>,
        device_loop: Option<DeviceLoop>,
        engine: EngineOptions,
        local: Option<std::ops::Range<usize>>,
    ) -> anyhow::Result<(LoadedModule, f64)> {
        let Compiled {
            executable,
            inputs: streams_in,
            outputs: streams_out,
            infeeds,
            outfeeds,
            warnings,
            pipeline,
        } = compiled;
        let compute_sets = executable.compute_sets.len();
        let vertices = executable
            .compute_sets
            .iter()
            .map(|c| c.vertices.len() + c.codelet_vertices.len())
            .sum();
        let t1 = std::time::Instant::now();
        crate::progress::phase("loading (checks, JIT, tile memory)");
        let engine = match local {
            None => ReplicatedEngine::load_with(executable, engine)?,
            Some(local) => ReplicatedEngine::load_local(executable, engine, local)?,
        };
        let loaded = LoadedModule {
            engine,
            streams_in,
            streams_out,
            declared,
            device_loop,
            outfeed_mode: OutfeedMode::default(),
            infeeds,
            outfeeds,
            uploaded: false,
            compute_sets,
            vertices,
            warnings,
            pipeline,
        };
        Ok((loaded, t1.elapsed().as_secs_f64()))
    }

    /// The engine the module is loaded on (its executable, system, tensors); replica 0's
    /// when it is replicated.
    pub fn engine(&self) -> &Engine {
        self.engine.engine(0)
    }

    /// A pipelined program: its phases' cycles and each stage's IPU's busy cycles in them,
    /// estimated from the executable (a run's cycles are the same: the phases hold no
    /// control flow on data).
    pub fn pipeline_report(&self) -> anyhow::Result<Option<PipelineReport>> {
        let Some(layout) = &self.pipeline else {
            return Ok(None);
        };
        let engine = self.engine();
        let parts: Vec<&runtime::Program> = layout.phases.iter().map(|p| &p.program).collect();
        let profiles = runtime::estimate_parts(engine.executable(), engine.system(), &parts)?;
        let busy_of = |p: &runtime::Profile, ipu: usize| {
            p.ipus
                .get(ipu)
                .map_or(p.total_cycles, |a| a.busy_cycles.min(p.total_cycles))
        };
        let phases: Vec<PhaseReport> = layout
            .phases
            .iter()
            .zip(&profiles)
            .map(|(phase, p)| PhaseReport {
                name: phase.name.clone(),
                steps: phase.steps,
                working_steps: phase.working.clone(),
                cycles: p.total_cycles,
                busy_cycles: layout.stage_ipus.iter().map(|&i| busy_of(p, i)).collect(),
            })
            .collect();
        // Over the stages' IPUs, each once (stages may share one).
        let mut ipus = layout.stage_ipus.clone();
        ipus.sort_unstable();
        ipus.dedup();
        let stepping: Vec<(&compiler::PipelinePhase, &runtime::Profile)> = layout
            .phases
            .iter()
            .zip(&profiles)
            .filter(|(p, _)| p.steps > 0)
            .collect();
        let total: u64 = stepping.iter().map(|(_, p)| p.total_cycles).sum();
        let busy: u64 = stepping
            .iter()
            .flat_map(|(_, p)| ipus.iter().map(|&i| busy_of(p, i)))
            .sum();
        let capacity = total as f64 * ipus.len() as f64;
        Ok(Some(PipelineReport {
            stage_ipus: layout.stage_ipus.clone(),
            runs: layout.runs,
            phases,
            bubble_fraction: if capacity > 0.0 {
                1.0 - busy as f64 / capacity
            } else {
                0.0
            },
        }))
    }

    /// How many replicas run the module (its header's `replica_count × num_partitions`).
    pub fn replicas(&self) -> usize {
        self.engine.replicas()
    }

    /// The profile a run would record, without running ([`runtime::estimate`]): loops whose
    /// trip count depends on data count one iteration, data-dependent branches their
    /// costliest branch, unless `decisions` (a run's `Profile::decisions`) say otherwise.
    pub fn estimate(&self, decisions: &[i64]) -> anyhow::Result<Profile> {
        let e = self.engine.engine(0);
        Ok(runtime::estimate_replaying(
            e.executable(),
            e.system(),
            decisions,
        )?)
    }

    /// Where the host's time went loading the executable, by phase (replica 0's).
    pub fn load_times(&self) -> runtime::LoadTimes {
        self.engine.engine(0).load_times()
    }

    /// Where the host's time went in the last run, by kind of step.
    pub fn host_times(&self) -> runtime::HostTimes {
        self.engine.engine(0).host_times()
    }

    /// Converts `inputs` (one literal per parameter) to the device bytes the module's
    /// host streams carry; in a device loop, a fed parameter's input (with its leading
    /// dimension of iterations) becomes one buffer per iteration.
    pub fn prepare(&self, inputs: &[Literal]) -> anyhow::Result<DeviceInputs> {
        let mut flat = Vec::new();
        for l in inputs {
            leaves(l, &mut flat);
        }
        if flat.len() != self.streams_in.len() {
            anyhow::bail!(
                "the module takes {} input arrays, {} were given",
                self.streams_in.len(),
                flat.len()
            );
        }
        let iterations = self.device_loop.as_ref().map_or(1, |lp| lp.iterations);
        let mut buffers = Vec::with_capacity(flat.len());
        for (k, (a, s)) in flat.iter().zip(&self.streams_in).enumerate() {
            // One value's host shape: per iteration, without the leading dimension.
            let value = if s.per_iteration {
                let mut one = a.shape.clone();
                if !one.dims.is_empty() {
                    one.dims.remove(0);
                }
                one
            } else {
                a.shape.clone()
            };
            let bytes = compiler::device_data::stream_bytes(&a.data, &value, &s.shape);
            let per_value = a.shape.element_count() / iterations.max(1);
            let count = if s.per_iteration {
                per_value
            } else {
                a.shape.element_count()
            };
            let Some(bytes) = bytes.filter(|_| count == value.element_count()) else {
                anyhow::bail!(
                    "input array {k} is {} but the module takes {}{}",
                    a.shape,
                    s.shape,
                    if s.per_iteration {
                        " per iteration"
                    } else {
                        ""
                    }
                );
            };
            if !s.per_iteration {
                buffers.push(vec![Arc::from(bytes)]);
                continue;
            }
            let n = iterations as usize;
            if a.shape.dims.first() != Some(&(n as i64)) || !bytes.len().is_multiple_of(n) {
                anyhow::bail!(
                    "input array {k} is fed one value per iteration, so it needs a leading dimension of {n}; it is {}",
                    a.shape
                );
            }
            let chunk = bytes.len() / n;
            buffers.push(bytes.chunks(chunk.max(1)).map(Arc::from).collect());
        }
        Ok(DeviceInputs(buffers))
    }

    /// In a device loop: its iterations and the bytes its streams keep resident or move
    /// per iteration.
    pub fn loop_facts(&self) -> Option<LoopFacts> {
        let lp = self.device_loop.as_ref()?;
        let bytes = |s: &compiler::HostBuffer| {
            let dtype = compiler::types::device_type(s.shape.element_type);
            dtype.map_or(0, |t| t.size() as u64) * s.shape.element_count()
        };
        let sum = |list: &[compiler::HostBuffer], per_iteration: bool| {
            list.iter()
                .filter(|s| s.per_iteration == per_iteration)
                .map(bytes)
                .sum()
        };
        Some(LoopFacts {
            iterations: lp.iterations,
            resident_bytes: sum(&self.streams_in, false),
            fed_bytes_per_iteration: sum(&self.streams_in, true),
            out_bytes_per_iteration: sum(&self.streams_out, true),
        })
    }

    /// Runs the program once on `inputs` (one literal per parameter): the result leaves in
    /// the module's declared types, and the run's profile.
    pub fn run(&mut self, inputs: &[Literal]) -> anyhow::Result<(Vec<ArrayLiteral>, Profile)> {
        let prepared = self.prepare(inputs)?;
        self.run_prepared(&prepared)
    }

    /// [`LoadedModule::run`] on inputs already converted by [`LoadedModule::prepare`].
    pub fn run_prepared(
        &mut self,
        inputs: &DeviceInputs,
    ) -> anyhow::Result<(Vec<ArrayLiteral>, Profile)> {
        self.run_prepared_with_feeds(inputs, &mut Feeds::default())
    }

    /// A resident device loop ([`DeviceLoop::resident`]) streams its carried parameters in
    /// on its first run only; after this, the next run streams them in again (from that
    /// run's inputs), as after loading.
    pub fn reupload(&mut self) {
        self.uploaded = false;
    }

    /// The names of the module's infeeds and outfeeds, in order of first use.
    pub fn feed_names(&self) -> (Vec<&str>, Vec<&str>) {
        fn names(feeds: &[compiler::Feed]) -> Vec<&str> {
            feeds.iter().map(|f| f.name.as_str()).collect()
        }
        (names(&self.infeeds), names(&self.outfeeds))
    }

    /// [`LoadedModule::run`] with host feeds: the module's infeeds dequeue from
    /// `feeds.infeeds` (by feed name; the values the run consumed leave the queue) and its
    /// outfeeds append to `feeds.outfeeds`, as [`xla_ir::eval::evaluate_with_feeds`] does.
    ///
    /// ```
    /// use ipuxla::device::LoadedModule;
    /// use ipuxla::compiler::{IpuConfig, PassOptions};
    /// use ipuxla::xla_ir::{self, eval::Feeds, literal::ArrayLiteral, Literal};
    ///
    /// // A while loop that adds each infeed value to a running sum and outfeeds the sum.
    /// let text = std::fs::read_to_string("fixtures/feeds/accumulate.hlo").unwrap();
    /// let module = xla_ir::parse_module(&text).unwrap();
    /// let (mut loaded, _) =
    ///     LoadedModule::load(&module, &IpuConfig::default(), &PassOptions::default()).unwrap();
    /// let mut feeds = Feeds::default();
    /// let batch = |x: f32| Literal::Array(ArrayLiteral::vector_f32(&[x; 4]));
    /// feeds.feed("batches", [batch(1.0), batch(2.0), batch(3.0)]);
    /// let start = Literal::Array(ArrayLiteral::vector_f32(&[0.0; 4]));
    /// let (outputs, _profile) = loaded.run_with_feeds(&[start], &mut feeds).unwrap();
    /// let sums = feeds.dequeue("sums");
    /// assert_eq!(sums.len(), 3);
    /// assert_eq!(sums[2], Literal::Array(outputs[0].clone()));
    /// ```
    pub fn run_with_feeds(
        &mut self,
        inputs: &[Literal],
        feeds: &mut Feeds,
    ) -> anyhow::Result<(Vec<ArrayLiteral>, Profile)> {
        let prepared = self.prepare(inputs)?;
        self.run_prepared_with_feeds(&prepared, feeds)
    }

    fn run_prepared_with_feeds(
        &mut self,
        inputs: &DeviceInputs,
        feeds: &mut Feeds,
    ) -> anyhow::Result<(Vec<ArrayLiteral>, Profile)> {
        self.single_replica()?;
        let mut ios = vec![self.host_io(inputs, feeds)?];
        let mut profiles = self.run_ios(&mut ios, None)?;
        let mut io = ios.pop().expect("one replica");
        self.take_feeds(&mut io, feeds);
        let outputs = self.outputs(&mut io)?;
        Ok((outputs, profiles.pop().expect("one replica")))
    }

    fn single_replica(&self) -> anyhow::Result<()> {
        let n = self.replicas();
        if n > 1 {
            anyhow::bail!(
                "the module runs on {n} replicas (its replica_count x num_partitions): run it with run_replicated, one set of inputs per replica"
            );
        }
        Ok(())
    }

    /// Runs the program once on every replica, replica `r` taking `inputs[r]` (one literal
    /// per parameter): each replica's result leaves (in the module's declared types) and
    /// profile. A replica that reaches a collective before the others shows the wait.
    pub fn run_replicated(
        &mut self,
        inputs: &[Vec<Literal>],
    ) -> anyhow::Result<(Vec<Vec<ArrayLiteral>>, Vec<Profile>)> {
        let n = self.replicas();
        if inputs.len() != n {
            anyhow::bail!(
                "the module runs on {n} replicas (its replica_count x num_partitions) but inputs for {} were given",
                inputs.len()
            );
        }
        self.run_replicas_across(inputs, None)
    }

    /// Runs this process's replicas ([`LoadedModule::load_local`]) once, local replica `i`
    /// taking `inputs[i]`, their collectives reaching the other processes' replicas
    /// through `transport`: this process's replicas' result leaves and profiles.
    pub fn run_replicas_across(
        &mut self,
        inputs: &[Vec<Literal>],
        transport: Option<&dyn runtime::Transport>,
    ) -> anyhow::Result<(Vec<Vec<ArrayLiteral>>, Vec<Profile>)> {
        let local = self.engine.local();
        let n = local.len();
        if inputs.len() != n {
            anyhow::bail!(
                "this process runs replicas {local:?} but inputs for {} were given",
                inputs.len()
            );
        }
        if !self.infeeds.is_empty() || !self.outfeeds.is_empty() {
            anyhow::bail!("a replicated module with infeeds or outfeeds is not supported yet");
        }
        let mut ios = Vec::with_capacity(n);
        for (r, given) in local.clone().zip(inputs) {
            let prepared = self
                .prepare(given)
                .map_err(|e| anyhow::anyhow!("replica {r}: {e:#}"))?;
            ios.push(self.host_io(&prepared, &Feeds::default())?);
        }
        let profiles = self.run_ios(&mut ios, transport)?;
        let mut outputs = Vec::with_capacity(n);
        for (r, io) in local.zip(ios.iter_mut()) {
            outputs.push(
                self.outputs(io)
                    .map_err(|e| anyhow::anyhow!("replica {r}: {e:#}"))?,
            );
        }
        Ok((outputs, profiles))
    }

    /// The host buffers of one replica's run: its inputs, the feeds' values, and in a
    /// resident device loop whether to upload the carried parameters.
    fn host_io(&self, inputs: &DeviceInputs, feeds: &Feeds) -> anyhow::Result<HostIo> {
        let mut io = HostIo::new();
        for (s, buffers) in self.streams_in.iter().zip(&inputs.0) {
            for bytes in buffers {
                io.feed(&s.stream, Arc::clone(bytes));
            }
        }
        for name in feeds.infeeds.keys() {
            if !self.infeeds.iter().any(|f| &f.name == name) {
                anyhow::bail!(
                    "infeed {name} does not exist; the module's infeeds are {:?}",
                    self.feed_names().0
                );
            }
        }
        for feed in &self.infeeds {
            for (i, value) in feeds
                .infeeds
                .get(&feed.name)
                .into_iter()
                .flatten()
                .enumerate()
            {
                if !value.shape().same_ignoring_layout(&feed.shape) {
                    anyhow::bail!(
                        "infeed {}: value {i} is {} but the feed carries {}",
                        feed.name,
                        value.shape(),
                        feed.shape
                    );
                }
                let mut flat = Vec::new();
                leaves(value, &mut flat);
                for (leaf, buffer) in flat.iter().zip(&feed.leaves) {
                    io.feed(&buffer.stream, compiler::device_data::to_device(&leaf.data));
                }
            }
        }
        if self.device_loop.as_ref().is_some_and(|lp| lp.resident) {
            io.feed(compiler::UPLOAD_STREAM, vec![u8::from(!self.uploaded)]);
        }
        Ok(io)
    }

    /// Runs every replica on its host buffers; a dry infeed is named.
    fn run_ios(
        &mut self,
        ios: &mut [HostIo],
        transport: Option<&dyn runtime::Transport>,
    ) -> anyhow::Result<Vec<Profile>> {
        let profiles = self.engine.run_across(ios, transport).map_err(|e| {
            let dry = match &e {
                runtime::RuntimeError::StreamDry { stream, .. } => self
                    .infeeds
                    .iter()
                    .find(|f| f.leaves.iter().any(|b| &b.stream == stream)),
                _ => None,
            };
            match dry {
                Some(f) => anyhow::anyhow!(
                    "{e}: infeed {} needs more values (`--infeed {}=FILE.npy`, or `Feeds::feed`)",
                    f.name,
                    f.name
                ),
                None => anyhow::Error::from(e),
            }
        })?;
        self.uploaded = self.device_loop.as_ref().is_some_and(|lp| lp.resident);
        Ok(profiles)
    }

    /// What a run consumed of the infeeds leaves their queues; what it sent to the outfeeds
    /// joins theirs.
    fn take_feeds(&self, io: &mut HostIo, feeds: &mut Feeds) {
        for feed in &self.infeeds {
            let used = feed.leaves.first().map_or(0, |b| io.consumed(&b.stream));
            if let Some(queue) = feeds.infeeds.get_mut(&feed.name) {
                queue.drain(..used.min(queue.len()));
            }
            *feeds.dequeued.entry(feed.name.clone()).or_default() += used;
        }
        for feed in &self.outfeeds {
            let per_leaf: Vec<Vec<Vec<u8>>> =
                feed.leaves.iter().map(|b| io.take(&b.stream)).collect();
            let count = per_leaf.first().map_or(0, Vec::len);
            let sent = feeds.outfeeds.entry(feed.name.clone()).or_default();
            for i in 0..count {
                let arrays: Vec<Literal> = feed
                    .leaves
                    .iter()
                    .zip(&per_leaf)
                    .map(|(b, values)| {
                        Literal::Array(compiler::device_data::from_device(&b.shape, &values[i]))
                    })
                    .collect();
                sent.push(match &feed.shape {
                    xla_ir::Shape::Tuple(_) => Literal::Tuple(arrays),
                    _ => arrays
                        .into_iter()
                        .next()
                        .expect("an array feed has one leaf"),
                });
            }
        }
    }

    /// The result leaves a run left in `io`, in the module's declared types (stacked over
    /// iterations where the outfeed mode keeps them all).
    fn outputs(&self, io: &mut HostIo) -> anyhow::Result<Vec<ArrayLiteral>> {
        let mut outputs = Vec::new();
        for (s, shape) in self.streams_out.iter().zip(&self.declared) {
            let mut values = io.take(&s.stream);
            if s.per_iteration && self.outfeed_mode == OutfeedMode::All {
                let items: Vec<ArrayLiteral> = values
                    .iter()
                    .map(|bytes| compiler::device_data::from_device(shape, bytes))
                    .collect();
                outputs.push(
                    ArrayLiteral::stack(&items)
                        .map_err(|e| anyhow::anyhow!("stream {}: {e}", s.stream))?,
                );
                continue;
            }
            let bytes = values.pop().ok_or_else(|| {
                anyhow::anyhow!("the device produced nothing on stream {}", s.stream)
            })?;
            outputs.push(compiler::device_data::from_device(shape, &bytes));
        }
        Ok(outputs)
    }
}
