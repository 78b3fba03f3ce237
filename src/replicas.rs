//! Running a replicated module on the IPU Model: the module's header says how many devices
//! it runs on (`replica_count × num_partitions`); each is a replica on its own IPU, all
//! running the one compiled program and meeting at every collective.

use crate::device::{DeviceRun, LoadedModule, LoopFacts};
use crate::device_loop::OutfeedMode;
use compiler::{DeviceLoop, IpuConfig, PassOptions};
use runtime::{EngineOptions, Profile, Transport};
use std::ops::Range;
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
    /// Host seconds compiling, or reading the stored executable.
    pub compile_seconds: f64,
    /// The stored executable read instead of compiling.
    pub read_from: Option<std::path::PathBuf>,
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
            read_from: self.read_from.clone(),
            load_seconds: self.load_seconds,
            run_seconds: self.run_seconds,
            device_loop: self.device_loop,
            pipeline: None,
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
        None,
    )
}

/// How a run is shared among processes: this process runs its share of the replicas
/// (process `p` of `P` runs replicas `p·N/P .. (p+1)·N/P`) and reaches the others through
/// `transport` (MPI, with the `mpi` feature).
#[derive(Clone, Copy)]
pub struct Processes<'t> {
    /// The other processes.
    pub transport: &'t dyn Transport,
}

impl Processes<'_> {
    /// The replicas this process runs, of `replicas`; an error when the processes do not
    /// divide them.
    pub fn share(&self, replicas: usize) -> anyhow::Result<Range<usize>> {
        let (p, size) = (self.transport.rank(), self.transport.size());
        if size == 0 || !replicas.is_multiple_of(size) {
            anyhow::bail!(
                "{size} processes cannot share {replicas} replicas equally: give mpirun -np a divisor of {replicas}"
            );
        }
        let each = replicas / size;
        Ok(p * each..(p + 1) * each)
    }
}

/// [`run_replicated_on_ipu_model`] with the engines' host options (threads per replica,
/// shortcuts), which change neither a byte nor a cycle, optionally as a device loop (`lp`,
/// its per-iteration outputs kept as `mode` says) on every replica, and optionally shared
/// among processes (`processes`: every process gets every replica's outputs and profile;
/// `inputs` still holds every replica's).
pub fn run_replicated_with(
    module: &Module,
    config: &IpuConfig,
    options: &PassOptions,
    inputs: &[Vec<Literal>],
    engine: EngineOptions,
    device_loop: Option<(DeviceLoop, OutfeedMode)>,
    processes: Option<Processes<'_>>,
) -> anyhow::Result<ReplicatedRun> {
    let (replicas, _) = compiler::replication(module);
    if inputs.len() != replicas {
        anyhow::bail!(
            "the module runs on {replicas} devices (replica_count x num_partitions) but inputs for {} replicas were given",
            inputs.len()
        );
    }
    let local = match &processes {
        Some(p) => p.share(replicas)?,
        None => 0..replicas,
    };
    let (lp, mode) = match device_loop {
        Some((lp, mode)) => (Some(lp), mode),
        None => (None, OutfeedMode::default()),
    };
    let (mut loaded, timings) =
        LoadedModule::load_local(module, config, options, engine, lp, local.clone())?;
    loaded.outfeed_mode = mode;
    let t = Instant::now();
    let transport = processes.map(|p| p.transport);
    let (mut outputs, mut profiles) =
        loaded.run_replicas_across(&inputs[local.clone()], transport)?;
    if let Some(t) = transport {
        (outputs, profiles) = gather(t, module, &outputs, &profiles)?;
    }
    let run_seconds = t.elapsed().as_secs_f64();
    Ok(ReplicatedRun {
        outputs,
        profiles,
        compute_sets: loaded.compute_sets,
        vertices: loaded.vertices,
        warnings: std::mem::take(&mut loaded.warnings),
        compile_seconds: timings.compile_seconds,
        read_from: timings.read_from,
        load_seconds: timings.load_seconds,
        run_seconds,
        selection_order: loaded.engine().executable().replication.order,
        device_loop: loaded.loop_facts(),
    })
}

/// The tag of the exchange that gathers every process's results (collectives use their
/// round numbers).
pub const RESULTS_TAG: u64 = u64::MAX;

/// Every replica's outputs and profile, from this process's and the others'.
fn gather(
    t: &dyn Transport,
    module: &Module,
    outputs: &[Vec<ArrayLiteral>],
    profiles: &[Profile],
) -> anyhow::Result<(Vec<Vec<ArrayLiteral>>, Vec<Profile>)> {
    let mut mine = Vec::new();
    let put = |out: &mut Vec<u8>, bytes: &[u8]| {
        out.extend((bytes.len() as u64).to_le_bytes());
        out.extend(bytes);
    };
    mine.extend((outputs.len() as u64).to_le_bytes());
    for (leaves, profile) in outputs.iter().zip(profiles) {
        put(&mut mine, &serde_json::to_vec(profile)?);
        mine.extend((leaves.len() as u64).to_le_bytes());
        for leaf in leaves {
            let dims: Vec<u8> = leaf
                .shape
                .dims
                .iter()
                .flat_map(|d| d.to_le_bytes())
                .collect();
            put(&mut mine, &dims);
            put(&mut mine, &compiler::device_data::to_device(&leaf.data));
        }
    }
    let parts = t
        .all_gather(RESULTS_TAG, &mine)
        .map_err(|e| anyhow::anyhow!("gathering the replicas' results: {e}"))?;
    let declared = crate::device::result_leaves(module);
    let (mut all_outputs, mut all_profiles) = (Vec::new(), Vec::new());
    for (p, bytes) in parts.iter().enumerate() {
        let mut r = Reader { bytes, at: 0 };
        let bad = || anyhow::anyhow!("process {p} sent results that do not parse");
        let count = r.word().ok_or_else(bad)?;
        for _ in 0..count {
            all_profiles.push(serde_json::from_slice(r.chunk().ok_or_else(bad)?)?);
            let leaves = r.word().ok_or_else(bad)? as usize;
            let mut list = Vec::with_capacity(leaves);
            for k in 0..leaves {
                let dims: Vec<i64> = r
                    .chunk()
                    .ok_or_else(bad)?
                    .chunks_exact(8)
                    .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
                    .collect();
                let element = declared.get(k).ok_or_else(bad)?.element_type;
                let shape = xla_ir::ArrayShape::new(element, &dims);
                list.push(compiler::device_data::from_device(
                    &shape,
                    r.chunk().ok_or_else(bad)?,
                ));
            }
            all_outputs.push(list);
        }
    }
    Ok((all_outputs, all_profiles))
}

/// Reads the length-prefixed pieces [`gather`] writes.
struct Reader<'b> {
    bytes: &'b [u8],
    at: usize,
}

impl<'b> Reader<'b> {
    fn word(&mut self) -> Option<u64> {
        let w = self.bytes.get(self.at..self.at + 8)?;
        self.at += 8;
        Some(u64::from_le_bytes(w.try_into().ok()?))
    }

    fn chunk(&mut self) -> Option<&'b [u8]> {
        let len = self.word()? as usize;
        let c = self.bytes.get(self.at..self.at + len)?;
        self.at += len;
        Some(c)
    }
}
