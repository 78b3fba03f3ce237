//! Running a replicated module on the IPU Model: the module's header says how many devices
//! it runs on (`replica_count × num_partitions`); each is a replica on its own IPU, all
//! running the one compiled program and meeting at every collective.

use crate::device::DeviceRun;
use compiler::{Compiled, IpuConfig, PassOptions};
use runtime::{EngineOptions, HostIo, Profile, ReplicatedEngine};
use std::time::Instant;
use xla_ir::literal::ArrayLiteral;
use xla_ir::{Literal, Module};

/// What a replicated run produced.
#[derive(Debug)]
pub struct ReplicatedRun {
    /// Per replica, its result leaves in the module's declared types.
    pub outputs: Vec<Vec<ArrayLiteral>>,
    /// Per replica, its profile (a replica that reached a collective before the others
    /// shows the wait).
    pub profiles: Vec<Profile>,
    /// Compute sets in the (per-replica) executable.
    pub compute_sets: usize,
    /// Vertices in the (per-replica) executable.
    pub vertices: usize,
    /// Compiler warnings.
    pub warnings: Vec<String>,
    /// Host seconds compiling.
    pub compile_seconds: f64,
    /// Host seconds loading every replica.
    pub load_seconds: f64,
    /// Host seconds running every replica.
    pub run_seconds: f64,
    /// The order the replicas sit in on the ladder (as configured; AUTO is HOOF).
    pub selection_order: runtime::SelectionOrder,
}

impl ReplicatedRun {
    /// The replica that took the most cycles (the first of equals): the run's length.
    pub fn slowest(&self) -> usize {
        let mut best = 0;
        for (r, p) in self.profiles.iter().enumerate() {
            if p.total_cycles > self.profiles[best].total_cycles {
                best = r;
            }
        }
        best
    }

    /// Replica `r`'s run as a [`DeviceRun`] (its outputs, its profile, the shared host
    /// times), for summaries.
    pub fn replica(&self, r: usize) -> DeviceRun {
        DeviceRun {
            outputs: self.outputs.get(r).cloned().unwrap_or_default(),
            profile: self.profiles[r].clone(),
            compute_sets: self.compute_sets,
            vertices: self.vertices,
            warnings: Vec::new(),
            compile_seconds: self.compile_seconds,
            load_seconds: self.load_seconds,
            run_seconds: self.run_seconds,
            device_loop: None,
        }
    }
}

fn leaves<'a>(l: &'a Literal, out: &mut Vec<&'a ArrayLiteral>) {
    match l {
        Literal::Array(a) => out.push(a),
        Literal::Tuple(items) => items.iter().for_each(|x| leaves(x, out)),
        Literal::Token => {}
    }
}

/// Compiles `module` for `config` and runs it on every device its header names, replica `r`
/// taking `inputs[r]` (one literal per parameter).
pub fn run_replicated_on_ipu_model(
    module: &Module,
    config: &IpuConfig,
    options: &PassOptions,
    inputs: &[Vec<Literal>],
) -> anyhow::Result<ReplicatedRun> {
    run_replicated_with(module, config, options, inputs, EngineOptions::default())
}

/// [`run_replicated_on_ipu_model`] with the engines' host options (threads per replica,
/// shortcuts), which change neither a byte nor a cycle.
pub fn run_replicated_with(
    module: &Module,
    config: &IpuConfig,
    options: &PassOptions,
    inputs: &[Vec<Literal>],
    engine: EngineOptions,
) -> anyhow::Result<ReplicatedRun> {
    let (replicas, _) = compiler::replication(module);
    if inputs.len() != replicas {
        anyhow::bail!(
            "the module runs on {replicas} devices (replica_count x num_partitions) but inputs for {} replicas were given",
            inputs.len()
        );
    }
    let t0 = Instant::now();
    let Compiled {
        executable,
        inputs: streams_in,
        outputs: streams_out,
        infeeds,
        outfeeds,
        warnings,
    } = compiler::compile_with_options(module, config, options)?;
    if !infeeds.is_empty() || !outfeeds.is_empty() {
        anyhow::bail!("a replicated module with infeeds or outfeeds is not supported yet");
    }
    let compute_sets = executable.compute_sets.len();
    let vertices = executable
        .compute_sets
        .iter()
        .map(|c| c.vertices.len() + c.codelet_vertices.len())
        .sum();
    let selection_order = executable.replication.order;
    let t1 = Instant::now();
    let mut engine = ReplicatedEngine::load_with(executable, engine)?;
    let t2 = Instant::now();
    let mut ios = Vec::with_capacity(replicas);
    for (r, given) in inputs.iter().enumerate() {
        let mut flat = Vec::new();
        given.iter().for_each(|l| leaves(l, &mut flat));
        if flat.len() != streams_in.len() {
            anyhow::bail!(
                "replica {r}: the module takes {} input arrays, {} were given",
                streams_in.len(),
                flat.len()
            );
        }
        let mut io = HostIo::new();
        for (a, s) in flat.iter().zip(&streams_in) {
            if a.shape.dims != s.shape.dims || a.shape.element_type != s.shape.element_type {
                anyhow::bail!(
                    "replica {r}: input {} is {} but the module takes {}",
                    s.stream,
                    a.shape,
                    s.shape
                );
            }
            io.feed(&s.stream, compiler::device_data::to_device(&a.data));
        }
        ios.push(io);
    }
    let profiles = engine.run(&mut ios)?;
    let t3 = Instant::now();
    let declared: Vec<xla_ir::ArrayShape> = module
        .entry_computation()
        .root_instr()
        .shape
        .leaf_arrays()
        .into_iter()
        .cloned()
        .collect();
    let mut outputs = Vec::with_capacity(replicas);
    for (r, io) in ios.iter_mut().enumerate() {
        let mut leaves = Vec::with_capacity(streams_out.len());
        for (s, shape) in streams_out.iter().zip(&declared) {
            let bytes = io.take(&s.stream).pop().ok_or_else(|| {
                anyhow::anyhow!("replica {r} produced nothing on stream {}", s.stream)
            })?;
            leaves.push(compiler::device_data::from_device(shape, &bytes));
        }
        outputs.push(leaves);
    }
    Ok(ReplicatedRun {
        outputs,
        profiles,
        compute_sets,
        vertices,
        warnings,
        compile_seconds: (t1 - t0).as_secs_f64(),
        load_seconds: (t2 - t1).as_secs_f64(),
        run_seconds: (t3 - t2).as_secs_f64(),
        selection_order,
    })
}
