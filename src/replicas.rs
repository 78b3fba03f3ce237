//! Running a replicated module on the IPU Model: the module's header says how many devices
//! it runs on (`replica_count × num_partitions`); each is a replica on its own IPU, all
//! running the one compiled program and meeting at every collective.

use crate::device::{DeviceRun, LoadedModule, LoopFacts};
use crate::device_loop::OutfeedMode;
use compiler::{DeviceLoop, IpuConfig, PassOptions};
use runtime::{EngineOptions, Profile};
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
    /// In a device loop: its iterations and what stayed resident (per replica).
    pub device_loop: Option<LoopFacts>,
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
            device_loop: self.device_loop,
        }
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
    run_replicated_with(
        module,
        config,
        options,
        inputs,
        EngineOptions::default(),
        None,
    )
}

/// [`run_replicated_on_ipu_model`] with the engines' host options (threads per replica,
/// shortcuts), which change neither a byte nor a cycle, and optionally as a device loop
/// (`lp`, its per-iteration outputs kept as `mode` says) on every replica.
pub fn run_replicated_with(
    module: &Module,
    config: &IpuConfig,
    options: &PassOptions,
    inputs: &[Vec<Literal>],
    engine: EngineOptions,
    device_loop: Option<(DeviceLoop, OutfeedMode)>,
) -> anyhow::Result<ReplicatedRun> {
    let (mut loaded, timings) = match device_loop {
        None => LoadedModule::load_with(module, config, options, engine)?,
        Some((lp, mode)) => {
            let (mut loaded, timings) =
                LoadedModule::load_device_loop(module, config, options, engine, lp)?;
            loaded.outfeed_mode = mode;
            (loaded, timings)
        }
    };
    let t = Instant::now();
    let (outputs, profiles) = loaded.run_replicated(inputs)?;
    let run_seconds = t.elapsed().as_secs_f64();
    Ok(ReplicatedRun {
        outputs,
        profiles,
        compute_sets: loaded.compute_sets,
        vertices: loaded.vertices,
        warnings: std::mem::take(&mut loaded.warnings),
        compile_seconds: timings.compile_seconds,
        load_seconds: timings.load_seconds,
        run_seconds,
        selection_order: loaded.engine().executable().replication.order,
        device_loop: loaded.loop_facts(),
    })
}
