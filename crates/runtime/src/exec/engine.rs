//! The engine: loads an executable (checking it, costing its steps with the model,
//! JIT-compiling its kernels, planning the host shortcuts) and runs its program on the host's
//! copy of the tiles' memories. The model's timeline walks the program and records the
//! profile; the engine is the [`Host`] that carries each step out.

use crate::device::system::System;
use crate::error::RuntimeError;
use crate::exec::collective;
use crate::exec::compute::LoadedComputeSet;
use crate::exec::copy::{LoadedRearrange, Scratch};
use crate::exec::host_times::HostTimes;
use crate::exec::memory::{self, f32_bytes, f32_bytes_mut};
use crate::exec::rendezvous::{Arrival, Rendezvous};
use crate::exec::shortcuts::HostPlan;
use crate::exec::shortcuts::forwarded_copies::PendingCopies;
use crate::exec::shortcuts::operand_views::OperandViews;
use crate::model::profile::Profile;
use crate::model::steps::{StepCosts, compute_set_costs};
use crate::model::timeline::{self, Host};
use crate::model::validate::validate;
use crate::program::collective::CollectiveKind;
use crate::program::executable::{Direction, Executable, RunSource, TensorId};
use crate::program::walk::{copies, copy_as_rearrangement};
use codegen::{DType, KernelCache};
use rayon::prelude::*;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Buffers exchanged with the host, by stream name.
#[derive(Debug, Clone, Default)]
pub struct HostIo {
    inputs: HashMap<String, VecDeque<Arc<[u8]>>>,
    /// By input stream: buffers the device has consumed.
    consumed: HashMap<String, usize>,
    outputs: HashMap<String, Vec<Vec<u8>>>,
}

impl HostIo {
    /// No buffers yet.
    pub fn new() -> HostIo {
        HostIo::default()
    }

    /// Queues one buffer for a host-to-device stream (consumed by one StreamCopy). A
    /// buffer already shared (`Arc<[u8]>`) is queued without copying, so the same inputs can
    /// feed many runs.
    pub fn feed(&mut self, stream: &str, bytes: impl Into<Arc<[u8]>>) {
        self.inputs
            .entry(stream.to_string())
            .or_default()
            .push_back(bytes.into());
    }

    /// The buffers a device-to-host stream produced, in order (and forgets them).
    pub fn take(&mut self, stream: &str) -> Vec<Vec<u8>> {
        self.outputs.remove(stream).unwrap_or_default()
    }

    /// How many buffers of a host-to-device stream the device has consumed.
    pub fn consumed(&self, stream: &str) -> usize {
        self.consumed.get(stream).copied().unwrap_or(0)
    }
}

/// How an engine runs on the host. Neither option changes a byte or a cycle of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineOptions {
    /// Host threads the tiles run on (0: one per core).
    pub threads: usize,
    /// Whether the host shortcuts run (operand views, product batches, kept results,
    /// scratch reads); off, every step runs the plain path.
    pub shortcuts: bool,
}

impl Default for EngineOptions {
    fn default() -> EngineOptions {
        EngineOptions {
            threads: 0,
            shortcuts: true,
        }
    }
}

/// Host time loading an executable spent, by phase (where a bench case's `load_ms` goes).
/// The phases overlap: the kernels are compiled beside the operand views and the compute
/// sets' costs, and the other steps' costs are found beside the rest of the host plan and
/// the rearrangements; the load takes less than their sum.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LoadTimes {
    /// Checking the executable (`validate`).
    pub checks: Duration,
    /// The IPU Model's costs of every step (what an estimate also computes): the compute
    /// sets', then the others' beside the host plan.
    pub costs: Duration,
    /// JIT-compiling the kernels (beside the operand views and the compute sets' costs).
    pub kernels: Duration,
    /// The host's plan: operand views, loading the compute sets, kept results, scratch
    /// reads.
    pub host_plan: Duration,
    /// Loading the rearrangements and copies (where each writes), beside the costs.
    pub rearrangements: Duration,
    /// Allocating tile memory.
    pub memory: Duration,
}

/// `f()` and the time it took.
fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    (f(), t.elapsed())
}

/// What loading the tiles (everything but the costs) reads.
struct TilesLoad<'a> {
    exe: &'a Executable,
    system: &'a System,
    shortcuts: bool,
    pool: &'a rayon::ThreadPool,
}

impl TilesLoad<'_> {
    /// Plans the host's shortcuts into the loaded `compute_sets` (with the operand `views`
    /// planned before) and loads the rearrangements and copies, timing each phase in
    /// `load` (adding to its `host_plan`). Returns what makes the tiles (with `kernels`)
    /// from their memory, allocated once the costs have found that it fits.
    fn load(
        &self,
        views: OperandViews,
        compute_sets: Vec<LoadedComputeSet>,
        kernels: KernelCache,
        load: &mut LoadTimes,
    ) -> Result<impl FnOnce(memory::HostTiles) -> Tiles + use<>, RuntimeError> {
        let (exe, system) = (self.exe, self.system);
        let started = Instant::now();
        let (compute_sets, plan) =
            HostPlan::plan(exe, views, compute_sets, self.shortcuts, self.pool);
        load.host_plan += started.elapsed();
        let started = Instant::now();
        // Planning a rearrangement's writes walks every piece it writes: in parallel.
        let rearranges = self.pool.install(|| {
            exe.rearranges
                .par_iter()
                .zip(&plan.kept_windows)
                .zip(&plan.scratch_reads.skipped)
                .map(|((r, &kept), &skipped)| {
                    let writes = !kept && !skipped;
                    LoadedRearrange::with_writes(system, &exe.tensors, r, writes, &plan.results)
                })
                .collect::<Result<Vec<_>, RuntimeError>>()
        })?;
        // Kept windows hold f32 values, an f16 window widened (see `operand_views`).
        let kept = rearranges
            .iter()
            .zip(&exe.rearranges)
            .zip(&plan.kept_windows)
            .zip(&plan.shared_pieces)
            .map(|(((r, rearrange), &kept), shared)| match kept {
                true => {
                    let size = exe.tensors[rearrange.dst.0 as usize].dtype.size();
                    let pieces = shared.iter().map(|p| vec![0f32; p.len()]);
                    (r.window_bytes().map(|b| vec![0f32; b / size]))
                        .chain(pieces)
                        .collect()
                }
                false => Vec::new(),
            })
            .collect();
        let kept_dst = exe
            .rearranges
            .iter()
            .enumerate()
            .filter(|(i, _)| plan.kept_windows[*i])
            .map(|(i, r)| (r.dst, i))
            .collect();
        let copies = copies(exe)
            .into_iter()
            .map(|(src, dst)| {
                let r = copy_as_rearrangement(exe, src, dst);
                Ok(((src, dst), LoadedRearrange::new(system, &exe.tensors, &r)?))
            })
            .collect::<Result<HashMap<_, _>, RuntimeError>>()?;
        let deferred = PendingCopies::load(exe, system.target.tiles_per_ipu, &plan.forwarded);
        load.rearrangements = started.elapsed();
        let compute_bytes = (compute_sets.iter())
            .map(|cs| cs.host_bytes(kernels.table()))
            .collect();
        Ok(move |memory| Tiles {
            memory,
            kernels,
            compute_sets,
            compute_bytes,
            rearranges,
            copies,
            scratch: Scratch::default(),
            plan,
            kept,
            kept_dst,
            deferred,
            write_plans: HashMap::new(),
        })
    }
}

/// A loaded executable with its device memory.
pub struct Engine {
    exe: Executable,
    system: System,
    costs: StepCosts,
    tiles: Tiles,
    host: HostTimes,
    load: LoadTimes,
    pool: Arc<rayon::ThreadPool>,
    progress: Option<Progress>,
}

/// Told `(done, of)` after each iteration of the program's outermost loops (a device
/// loop's iterations): for progress indicators. It changes nothing a run computes.
pub type Progress = Arc<dyn Fn(u64, u64) + Send + Sync>;

/// The host's copy of the device: tile memories, loaded steps and the shortcuts' buffers.
struct Tiles {
    memory: memory::HostTiles,
    kernels: KernelCache,
    compute_sets: Vec<LoadedComputeSet>,
    /// By compute set: the bytes one run of it reads and writes on the host.
    compute_bytes: Vec<u64>,
    rearranges: Vec<LoadedRearrange>,
    /// Every `Copy` of the program, as a rearrangement of one run.
    copies: HashMap<(TensorId, TensorId), LoadedRearrange>,
    scratch: Scratch,
    plan: HostPlan,
    /// By rearrangement: its kept windows (empty for the others), as f32 values.
    kept: Vec<Vec<Vec<f32>>>,
    /// The rearrangement each unwritten destination tensor would be written by.
    kept_dst: HashMap<TensorId, usize>,
    /// Copies deferred until a kept window reads their destination (see `forwarded_copies`).
    deferred: PendingCopies,
    /// By tensor a host stream writes: how its writes are cut among host threads (`None`:
    /// on one), planned at its first write.
    write_plans: HashMap<TensorId, Option<memory::WritePlan>>,
}

/// Refuses tiles of 4 GiB or more (`extents`: each tile's bytes): the host addresses a
/// tile's bytes with 32 bits ([`crate::exec::compute`]'s spans). An IPU tile holds
/// 624 KiB; only a made-up target comes near.
fn host_addressable(exe: &Executable, extents: &[u64]) -> Result<(), RuntimeError> {
    let tiles = exe.target.tiles_per_ipu.max(1);
    match extents.iter().position(|&b| b > u64::from(u32::MAX)) {
        None => Ok(()),
        Some(t) => Err(RuntimeError::InvalidExecutable(format!(
            "IPU {} tile {} holds {} bytes: the IPU Model's host engine runs tiles of under 4 GiB",
            t / tiles,
            t % tiles,
            extents[t]
        ))),
    }
}

fn run_error(m: String) -> RuntimeError {
    RuntimeError::Run(m)
}

impl Engine {
    /// Checks the executable, compiles its kernels and allocates tile memory. Runs use all
    /// cores and the host shortcuts; see [`Engine::load_with`].
    pub fn load(exe: Executable) -> Result<Engine, RuntimeError> {
        Engine::load_with(exe, EngineOptions::default())
    }

    /// Like [`Engine::load`], running tiles on `threads` host threads (0: one per core).
    pub fn load_with_threads(exe: Executable, threads: usize) -> Result<Engine, RuntimeError> {
        let options = EngineOptions {
            threads,
            ..EngineOptions::default()
        };
        Engine::load_with(exe, options)
    }

    /// Like [`Engine::load`], with `options`.
    pub fn load_with(exe: Executable, options: EngineOptions) -> Result<Engine, RuntimeError> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(options.threads)
            .build()
            .map_err(|e| run_error(format!("cannot start host threads: {e}")))?;
        let mut load = LoadTimes::default();
        let mut clock = Instant::now();
        // The time since the last lap.
        let mut lap = || {
            let now = Instant::now();
            std::mem::replace(&mut clock, now).elapsed()
        };
        pool.install(|| validate(&exe))?;
        // Each tile's bytes: checked here, allocated below.
        let extents = crate::model::layout::tile_extents(&exe);
        host_addressable(&exe, &extents)?;
        load.checks = lap();
        let system = crate::model::collective::replica_system(&exe)?;
        let mut kernels = KernelCache::shared().map_err(|e| run_error(e.to_string()))?;
        // Loading's phases overlap where their serial stretches leave a host thread free:
        // the kernels (compiled one after another into the process's shared JIT module,
        // where most are found, compiled by engines loaded before) beside the operand views
        // and the compute sets' costs; then the compute sets load (their tiles weighed by
        // those costs); then the other steps' costs (the exchange's: most of the costing)
        // beside the rest of the host plan and the rearrangements.
        let (kernel_ids, ((views, views_took), (compute_costs, compute_costs_took))) = pool
            .install(|| {
                rayon::join(
                    || {
                        let (ids, took) = timed(|| {
                            (0..exe.compute_sets.len())
                                .map(|cs| LoadedComputeSet::compile_kernels(&exe, cs, &mut kernels))
                                .collect::<Result<Vec<_>, RuntimeError>>()
                        });
                        load.kernels = took;
                        ids
                    },
                    || {
                        rayon::join(
                            || timed(|| HostPlan::views(&exe, options.shortcuts)),
                            || timed(|| compute_set_costs(&exe)),
                        )
                    },
                )
            });
        let kernel_ids = kernel_ids?;
        lap();
        let compute_sets = pool
            .install(|| HostPlan::load_compute_sets(&exe, &views, &compute_costs, &kernel_ids))?;
        load.host_plan = views_took + lap();
        let ((costs, costs_took), tiles) = pool.install(|| {
            rayon::join(
                || timed(|| StepCosts::given(&exe, &system, compute_costs)),
                || {
                    let loading = TilesLoad {
                        exe: &exe,
                        system: &system,
                        shortcuts: options.shortcuts,
                        pool: &pool,
                    };
                    loading.load(views, compute_sets, kernels, &mut load)
                },
            )
        });
        let (costs, tiles) = (costs?, tiles?);
        load.costs = compute_costs_took + costs_took;
        lap();
        let tiles = tiles(memory::allocate(&exe, &extents));
        load.memory = lap();
        Ok(Engine {
            exe,
            system,
            costs,
            tiles,
            host: HostTimes::default(),
            load,
            pool: Arc::new(pool),
            progress: None,
        })
    }

    /// Calls `tell(done, of)` after each iteration of the program's outermost loops in every
    /// later run (None: stop): a progress indicator's hook.
    pub fn set_progress(&mut self, tell: Option<Progress>) {
        self.progress = tell;
    }

    /// Where the host's time went loading the executable.
    pub fn load_times(&self) -> LoadTimes {
        self.load
    }

    /// Where the host's time went in the last run (the simulator's own cost, not the
    /// device's: that is the profile).
    pub fn host_times(&self) -> HostTimes {
        self.host.clone()
    }

    /// The executable being run.
    pub fn executable(&self) -> &Executable {
        &self.exe
    }

    /// The system it runs on.
    pub fn system(&self) -> &System {
        &self.system
    }

    /// Tensors the host does not keep in tile memory, read back (by
    /// [`Engine::read_tensor`]) as they would have been written: destinations of
    /// rearrangements whose windows matrix products read in place, products' results left in
    /// the batch scratch, and K parts summed straight from it. The IPU Model charges their
    /// moves as for any tensor; only the host skips them.
    pub fn host_only_tensors(&self) -> Vec<TensorId> {
        let t = &self.tiles;
        let mut out: Vec<TensorId> = t
            .kept_dst
            .keys()
            .chain(t.plan.results.keys())
            .chain(t.plan.scratch_reads.dst.keys())
            .chain(t.plan.forwarded.readers.keys())
            .copied()
            .collect();
        out.sort_unstable_by_key(|t| t.0);
        out
    }

    /// How many matrix-product vertices the host multiplies from operands seen in place
    /// (operand views, and the batches made of them). `gemm` sums a product's terms in an
    /// order that follows its operands' shape and strides, so such a result can differ from
    /// the plain path's in its last bits; nothing else a shortcut does changes a byte, and
    /// none changes a cycle.
    pub fn viewed_products(&self) -> usize {
        self.tiles
            .compute_sets
            .iter()
            .map(LoadedComputeSet::viewed_products)
            .sum()
    }

    /// How many copies the host defers until a kept window reads their destination,
    /// gathering it through them (see `shortcuts::forwarded_copies`; the same bytes).
    pub fn deferred_copies(&self) -> usize {
        let deferred = &self.tiles.plan.forwarded.deferred;
        deferred.iter().filter(|d| **d).count()
    }

    /// How many codelet inputs the host reads in place from a rearrangement's gathered
    /// window instead of the tile's copy (the same bytes: no output changes).
    pub fn windowed_codelet_inputs(&self) -> usize {
        self.tiles
            .compute_sets
            .iter()
            .map(LoadedComputeSet::windowed_inputs)
            .sum()
    }

    /// How many codelet vertices the host runs in groups that share work
    /// ([`crate::Codelet::group`]: a convolution's parts multiplying one patch matrix by
    /// all their kernels at once; each output the same bytes as the vertex's own run).
    pub fn grouped_codelets(&self) -> usize {
        self.tiles
            .compute_sets
            .iter()
            .map(LoadedComputeSet::grouped_codelets)
            .sum()
    }

    /// The bytes of a tensor in element order.
    pub fn read_tensor(&self, id: TensorId) -> Vec<u8> {
        self.tiles.read_tensor(&self.exe, &self.system, id)
    }

    /// Writes a tensor's bytes (element order); the length must match.
    pub fn write_tensor(&mut self, id: TensorId, bytes: &[u8]) -> Result<(), RuntimeError> {
        memory::check_size(&self.exe.tensors[id.0 as usize], bytes.len())?;
        let tiles = &mut self.tiles;
        (tiles.deferred).settle(id, &tiles.plan.forwarded, &tiles.memory, &self.pool);
        memory::write(&self.exe, &mut tiles.memory, id, bytes);
        Ok(())
    }

    /// Runs the main program once.
    pub fn run(&mut self, io: &mut HostIo) -> Result<Profile, RuntimeError> {
        let replicas = self.exe.replication.replicas;
        if replicas > 1 {
            return Err(run_error(format!(
                "the executable is replicated {replicas} times; run it on a ReplicatedEngine"
            )));
        }
        self.run_seated(io, None)
    }

    /// Runs the main program once as one replica of several, meeting the others at every
    /// collective (`seat`), or alone.
    pub(crate) fn run_seated(
        &mut self,
        io: &mut HostIo,
        seat: Option<Seat<'_>>,
    ) -> Result<Profile, RuntimeError> {
        self.host = HostTimes::for_executable(&self.exe);
        // The steps run on a pool thread: each superstep's parallel work then starts where
        // it is, instead of being handed from this thread to the pool and back (two context
        // switches per superstep, thousands per run).
        let Engine {
            exe,
            system,
            costs,
            tiles,
            host,
            load: _,
            pool,
            progress,
        } = self;
        let mut running = Running {
            exe,
            system,
            tiles,
            io,
            times: host,
            pool,
            seat,
            progress: progress.as_ref(),
        };
        pool.install(|| timeline::run(exe, costs, &mut running))
    }
}

/// A loaded rearrangement or copy that writes its destination on the tiles.
enum Written {
    Rearrange(usize),
    Copy(TensorId, TensorId),
}

impl Tiles {
    /// Carries out a rearrangement or copy on the plain path: gathered from the tiles (or
    /// a batch scratch), written to the destination tiles.
    fn apply(&mut self, which: Written, pool: &rayon::ThreadPool) {
        let r = match which {
            Written::Rearrange(id) => &self.rearranges[id],
            Written::Copy(src, dst) => &self.copies[&(src, dst)],
        };
        let sets = &self.compute_sets;
        r.apply(&mut self.memory, &mut self.scratch, pool, |c| {
            sets[c].batched().0.scratch_bytes()
        });
    }

    fn read_tensor(&self, exe: &Executable, system: &System, id: TensorId) -> Vec<u8> {
        let t = &exe.tensors[id.0 as usize];
        let size = t.dtype.size();
        // A destination of a pending copy: as the copy would have written it.
        if let Some(bytes) = self.deferred.read(id, &self.memory) {
            return bytes;
        }
        // A result left in a batch scratch is read there.
        if let Some(kept) = self.plan.results.get(&id) {
            let mut out = vec![0u8; t.elements * size];
            let scratch = self.compute_sets[kept.compute_set]
                .batched()
                .0
                .scratch_bytes();
            for &(start, len, at) in &kept.pieces {
                out[start * size..(start + len) * size]
                    .copy_from_slice(&scratch[at * size..(at + len) * size]);
            }
            return out;
        }
        // A destination whose readers read the scratch: its rearrangement applied to its
        // source.
        if let Some(&r) = self.plan.scratch_reads.dst.get(&id) {
            let mut out = vec![0u8; t.elements * size];
            let r = &exe.rearranges[r];
            let source = self.read_tensor(exe, system, r.sources[0]);
            for run in r.runs.iter() {
                let RunSource::Tensor { start, stride, .. } = run.source else {
                    unreachable!("scratch_reads: every run reads the source");
                };
                for i in 0..run.len {
                    let from = (start as isize + i as isize * stride) as usize * size;
                    let to = (run.dst_start + i) * size;
                    out[to..to + size].copy_from_slice(&source[from..from + size]);
                }
            }
            return out;
        }
        // A destination left unwritten is read as its rearrangement would have written it.
        let written: Vec<(usize, Vec<u8>)> = match self.kept_dst.get(&id) {
            Some(&r) => {
                let rearrange = &exe.rearranges[r];
                let f16 = exe.tensors[rearrange.dst.0 as usize].dtype == DType::F16;
                // An f16 window holds widened f16 values: narrowing gives the bytes back.
                // Its sources' windows, not the shared pieces after them.
                let kept = &self.kept[r][..rearrange.sources.len()];
                let narrowed: Vec<Vec<u8>> = match f16 {
                    true => (kept.iter())
                        .map(|w| {
                            let mut bytes = vec![0u8; w.len() * 2];
                            codegen::halves::narrow_into(w, &mut bytes);
                            bytes
                        })
                        .collect(),
                    false => Vec::new(),
                };
                let windows: Vec<&[u8]> = match f16 {
                    true => narrowed.iter().map(Vec::as_slice).collect(),
                    false => kept.iter().map(|w| f32_bytes(w)).collect(),
                };
                LoadedRearrange::new(system, &exe.tensors, rearrange)
                    .expect("loaded once already")
                    .written_tiles(&self.memory, &windows)
            }
            None => Vec::new(),
        };
        memory::read(exe, t, |tile| {
            written
                .iter()
                .find(|(t, _)| *t == tile)
                .map_or(&self.memory[tile], |(_, m)| m.as_slice())
        })
    }
}

/// A replica's place among the others: its number, where they meet, and how many
/// collectives it has run.
pub(crate) struct Seat<'r> {
    /// The replica's number.
    pub replica: usize,
    /// Where the replicas meet.
    pub rendezvous: &'r Rendezvous<'r>,
    /// Collectives run so far (the next one's round).
    pub round: u64,
}

/// The engine carrying out one run's steps.
struct Running<'a> {
    exe: &'a Executable,
    system: &'a System,
    tiles: &'a mut Tiles,
    io: &'a mut HostIo,
    times: &'a mut HostTimes,
    pool: &'a rayon::ThreadPool,
    seat: Option<Seat<'a>>,
    progress: Option<&'a Progress>,
}

impl Host for Running<'_> {
    fn repeated(&mut self, done: u64, of: u64) {
        if let Some(tell) = self.progress {
            tell(done, of);
        }
    }

    /// One superstep: every tile runs its vertices (tiles in parallel).
    fn execute(&mut self, cs: usize) -> Result<(), RuntimeError> {
        let t = Instant::now();
        let tiles = &mut *self.tiles;
        // The compute set runs mutably (its own batches) beside the others' scratches.
        let (before, rest) = tiles.compute_sets.split_at_mut(cs);
        let (this, after) = rest
            .split_first_mut()
            .expect("validated: compute set exists");
        let results = |c: usize| -> &[u8] {
            match c.cmp(&cs) {
                std::cmp::Ordering::Less => before[c].batched().0.scratch_bytes(),
                std::cmp::Ordering::Greater => after[c - cs - 1].batched().0.scratch_bytes(),
                std::cmp::Ordering::Equal => unreachable!("scratch_reads: a sum reads another set"),
            }
        };
        this.run(
            &mut tiles.memory,
            tiles.kernels.table(),
            &self.exe.codelets,
            &tiles.kept,
            &results,
            self.pool,
        )?;
        self.times
            .compute_set(cs, t.elapsed(), tiles.compute_bytes[cs]);
        Ok(())
    }

    fn rearrange(&mut self, id: usize) -> Result<(), RuntimeError> {
        let t = Instant::now();
        let tiles = &mut *self.tiles;
        let r = &tiles.rearranges[id];
        // A skipped one's readers read the scratch (see `scratch_reads`), a deferred one's
        // destination is read through it (see `forwarded_copies`): only its cost counts.
        let rearrange = &self.exe.rearranges[id];
        let bytes = if tiles.plan.forwarded.deferred[id] {
            tiles.deferred.defer(id, rearrange.dst);
            0
        } else if tiles.plan.kept_windows[id] {
            let f16 = self.exe.tensors[rearrange.dst.0 as usize].dtype == DType::F16;
            let sources = rearrange.sources.len();
            let (windows, pieces) = tiles.kept[id].split_at_mut(sources);
            for (k, window) in windows.iter_mut().enumerate() {
                let memory = &tiles.memory;
                let size = if f16 { 2 } else { 4 };
                match (tiles.deferred).window(rearrange.sources[k], (id, k), size) {
                    Some(pending) => pending.fill(memory, window, f16, self.pool),
                    None if f16 => r.gather_widened(memory, k, window, self.pool),
                    None => r.gather(memory, k, f32_bytes_mut(window), self.pool),
                }
            }
            let shared = &tiles.plan.shared_pieces[id];
            for (piece, out) in shared.iter().zip(pieces.iter_mut()) {
                piece.gather(windows, out);
            }
            let pieces_bytes: usize = pieces.iter().map(|p| p.len() * 4).sum();
            r.gathered_bytes() + pieces_bytes as u64
        } else if !tiles.plan.scratch_reads.skipped[id] {
            tiles.apply(Written::Rearrange(id), self.pool);
            tiles.rearranges[id].host_bytes()
        } else {
            0
        };
        self.times.rearrange(id, t.elapsed(), bytes);
        Ok(())
    }

    fn copy(&mut self, src: TensorId, dst: TensorId) -> Result<(), RuntimeError> {
        let t = Instant::now();
        self.tiles.apply(Written::Copy(src, dst), self.pool);
        let bytes = self.tiles.copies[&(src, dst)].host_bytes();
        self.times.copy((src, dst), t.elapsed(), bytes);
        Ok(())
    }

    fn stream(&mut self, stream: usize, tensor: TensorId) -> Result<(), RuntimeError> {
        let t0 = Instant::now();
        let s = &self.exe.streams[stream];
        let t = &self.exe.tensors[tensor.0 as usize];
        match s.direction {
            Direction::HostToDevice => {
                let consumed = self.io.consumed.entry(s.name.clone()).or_default();
                let buffer = self
                    .io
                    .inputs
                    .get_mut(&s.name)
                    .and_then(VecDeque::pop_front)
                    .ok_or_else(|| RuntimeError::StreamDry {
                        stream: s.name.clone(),
                        tensor: t.name.clone(),
                        wanted: *consumed + 1,
                        fed: *consumed,
                    })?;
                *consumed += 1;
                let bytes = t.elements * t.dtype.size();
                if buffer.len() != bytes {
                    return Err(run_error(format!(
                        "stream {} was fed {} bytes but carries {bytes} ({} x {:?})",
                        s.name,
                        buffer.len(),
                        s.elements,
                        s.dtype
                    )));
                }
                let tiles = &mut *self.tiles;
                let plan = &tiles.plan.forwarded;
                (tiles.deferred).settle(tensor, plan, &tiles.memory, self.pool);
                let threads = self.pool.current_num_threads();
                let plan = (tiles.write_plans.entry(tensor)).or_insert_with(|| {
                    memory::WritePlan::new(self.exe, tensor, threads, tiles.memory.len())
                });
                match plan {
                    Some(plan) => memory::write_parallel(
                        self.exe,
                        &mut tiles.memory,
                        (tensor, plan),
                        &buffer,
                        self.pool,
                    ),
                    None => memory::write(self.exe, &mut tiles.memory, tensor, &buffer),
                }
            }
            Direction::DeviceToHost => {
                let data = self.tiles.read_tensor(self.exe, self.system, tensor);
                self.io
                    .outputs
                    .entry(s.name.clone())
                    .or_default()
                    .push(data);
            }
        }
        self.times
            .stream(stream, t0.elapsed(), (t.elements * t.dtype.size()) as u64);
        Ok(())
    }

    /// Reads the inputs, meets the other replicas (if any), and writes what the collective
    /// gives this replica.
    fn collective(&mut self, c: usize, arrival: u64) -> Result<u64, RuntimeError> {
        let t0 = Instant::now();
        let col = &self.exe.collectives[c];
        if let CollectiveKind::ReplicaIndex { .. } = col.kind {
            // A value of the replica's own: nobody to meet.
            let me = self.seat.as_ref().map_or(0, |s| s.replica);
            let outputs = collective::outputs(self.exe, col, me, &[]);
            memory::write(
                self.exe,
                &mut self.tiles.memory,
                col.outputs[0],
                &outputs[0],
            );
            return Ok(arrival);
        }
        let inputs: Vec<Vec<u8>> = col
            .inputs
            .iter()
            .map(|&t| self.tiles.read_tensor(self.exe, self.system, t))
            .collect();
        let mine = Arrival {
            collective: c as u32,
            cycle: arrival,
            inputs: Arc::new(inputs),
        };
        let (me, all) = match &mut self.seat {
            None => (0, Arc::new(vec![mine])),
            Some(seat) => {
                let round = seat.round;
                seat.round += 1;
                let all = seat.rendezvous.meet(round, seat.replica, &col.name, mine)?;
                (seat.replica, all)
            }
        };
        let latest = all.iter().map(|a| a.cycle).max().unwrap_or(arrival);
        let given: Vec<&[Vec<u8>]> = all.iter().map(|a| a.inputs.as_slice()).collect();
        let outputs = collective::outputs(self.exe, col, me, &given);
        for (&t, bytes) in col.outputs.iter().zip(&outputs) {
            memory::write(self.exe, &mut self.tiles.memory, t, bytes);
        }
        self.times.exchange += t0.elapsed();
        Ok(latest)
    }

    fn decide(&mut self, t: TensorId) -> Result<Option<i64>, RuntimeError> {
        let bytes = self.tiles.read_tensor(self.exe, self.system, t);
        Ok(Some(match bytes.len() {
            1 => bytes[0] as i64,
            _ => i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as i64,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::builder::ExecutableBuilder;
    use crate::program::executable::Interval;
    use codegen::DType;

    /// A tile holding bytes at 4 GiB or beyond is refused, named; below, it loads.
    #[test]
    fn tiles_the_host_cannot_address_with_32_bits_are_refused_by_name() {
        let with_offset = |offset: u64| {
            let mut b = ExecutableBuilder::new(crate::Target::ipu2(), 1);
            let mapping = vec![Interval {
                ipu: 0,
                tile: 3,
                start: 0,
                len: 4,
                offset,
            }];
            b.tensor_mapped("far", DType::F32, &[4], mapping);
            b.executable().clone()
        };
        let check =
            |exe: Executable| host_addressable(&exe, &crate::model::layout::tile_extents(&exe));
        assert_eq!(check(with_offset(1 << 20)), Ok(()));
        let err = check(with_offset(u64::from(u32::MAX) - 8)).unwrap_err();
        assert!(
            err.to_string()
                .contains("IPU 0 tile 3 holds 4294967303 bytes"),
            "{err}"
        );
    }
}
