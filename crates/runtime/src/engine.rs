//! The engine: loads an executable (checking it and JIT-compiling its kernels) and runs its
//! program as BSP supersteps over per-tile memories, recording a [`Profile`].

use crate::RuntimeError;
use crate::compute_set::LoadedComputeSet;
use crate::cost;
use crate::exchange;
use crate::executable::{Direction, Executable, Program, Rearrange, Run, RunSource, TensorId};
use crate::kept_results::{self, KeptResult};
use crate::operand_views::OperandViews;
use crate::profile::{OutOfCore, Profile, StepKind, StepProfile, TileMemory, Totals};
use crate::rearrange::{LoadedRearrange, Scratch};
use crate::scratch_reads::{self, ScratchReads};
use crate::system::System;
use crate::validate::{tile_extents, validate};
use codegen::KernelCache;
use rayon::prelude::*;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Buffers exchanged with the host, by stream name.
#[derive(Debug, Clone, Default)]
pub struct HostIo {
    inputs: HashMap<String, VecDeque<Arc<[u8]>>>,
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
}

/// The (source, destination) of every `Copy` in a program tree.
fn copies_in(p: &Program, out: &mut Vec<(TensorId, TensorId)>) {
    match p {
        Program::Copy { src, dst } => out.push((*src, *dst)),
        Program::Sequence(ps) => ps.iter().for_each(|q| copies_in(q, out)),
        Program::Repeat { body, .. } => copies_in(body, out),
        Program::RepeatWhileTrue {
            condition, body, ..
        } => {
            copies_in(condition, out);
            copies_in(body, out);
        }
        Program::If {
            then, otherwise, ..
        } => {
            copies_in(then, out);
            copies_in(otherwise, out);
        }
        Program::Switch { cases, default, .. } => {
            cases.iter().for_each(|q| copies_in(q, out));
            copies_in(default, out);
        }
        Program::Execute(_)
        | Program::Rearrange(_)
        | Program::Call(_)
        | Program::StreamCopy { .. }
        | Program::Sync => {}
    }
}

/// The profile of a copy or rearrangement.
fn copy_step(name: String, c: exchange::CopyCost) -> StepProfile {
    StepProfile {
        name,
        kind: StepKind::Copy,
        cycles: c.on_tile_cycles + c.sync_cycles + c.exchange_cycles + c.paging_cycles,
        compute_cycles: c.on_tile_cycles,
        sync_cycles: c.sync_cycles,
        exchange_cycles: c.exchange_cycles,
        bytes_moved: c.bytes_exchanged + c.bytes_over_links,
        bytes_over_links: c.bytes_over_links,
        paging_cycles: c.paging_cycles,
        bytes_paged: c.bytes_paged,
    }
}

/// A loaded executable with its device memory.
pub struct Engine {
    exe: Executable,
    system: System,
    memory: Vec<Vec<u8>>,
    kernels: KernelCache,
    compute_sets: Vec<LoadedComputeSet>,
    rearranges: Vec<LoadedRearrange>,
    /// Every `Copy` of the program, as a rearrangement of one run.
    copies: HashMap<(TensorId, TensorId), LoadedRearrange>,
    scratch: Scratch,
    /// By rearrangement: its destination is not written; its windows are kept in `kept`.
    /// See [`crate::operand_views`].
    is_kept: Vec<bool>,
    /// By rearrangement: its kept windows (empty for the others).
    kept: Vec<Vec<Vec<f32>>>,
    /// The rearrangement each unwritten destination tensor would be written by.
    kept_dst: HashMap<TensorId, usize>,
    /// Matrix-product results left in a compute set's batch scratch, never written to the
    /// tiles. See [`crate::kept_results`].
    results: HashMap<TensorId, KeptResult>,
    /// Rearrangements skipped on the host: their readers read the batch scratch. See
    /// [`crate::scratch_reads`].
    scratch_reads: ScratchReads,
    host: HostTimes,
    pool: Arc<rayon::ThreadPool>,
}

/// Host time a run spent, by kind of step.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HostTimes {
    /// Running compute sets (vertices).
    pub compute: Duration,
    /// Carrying out copies and rearrangements (the exchange).
    pub exchange: Duration,
    /// Host stream transfers.
    pub streams: Duration,
}

/// Bytes of f32 host buffers, to gather into and read from.
pub(crate) fn f32_bytes(v: &[f32]) -> &[u8] {
    // SAFETY: the bytes of `v` are initialised and u8 has no alignment or validity
    // requirements; the length covers exactly `v`'s elements.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

fn f32_bytes_mut(v: &mut [f32]) -> &mut [u8] {
    // SAFETY: as `f32_bytes`; any bytes written form a valid f32 (every bit pattern is one).
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

fn run_error(m: String) -> RuntimeError {
    RuntimeError::Run(m)
}

impl Engine {
    /// Checks the executable, compiles its kernels and allocates tile memory. Runs use all
    /// cores; see [`Engine::with_threads`].
    pub fn load(exe: Executable) -> Result<Engine, RuntimeError> {
        Engine::load_with_threads(exe, 0)
    }

    /// Like [`Engine::load`], running tiles on `threads` host threads (0: one per core).
    pub fn load_with_threads(exe: Executable, threads: usize) -> Result<Engine, RuntimeError> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(|e| run_error(format!("cannot start host threads: {e}")))?;
        pool.install(|| validate(&exe))?;
        let system = System::new(exe.target.clone(), exe.num_ipus)?;
        let tiles = exe.target.tiles_per_ipu;
        let mut memory = vec![Vec::new(); exe.num_ipus * tiles];
        for ((ipu, tile), bytes) in tile_extents(&exe) {
            memory[ipu * tiles + tile] = vec![0u8; bytes as usize];
        }
        let mut kernels = KernelCache::new().map_err(|e| run_error(e.to_string()))?;
        let views = pool.install(|| OperandViews::plan(&exe));
        // Kernels compile one after another (one JIT module); the compute sets then load
        // in parallel.
        let kernel_ids = (0..exe.compute_sets.len())
            .map(|cs| LoadedComputeSet::compile_kernels(&exe, cs, &mut kernels))
            .collect::<Result<Vec<_>, RuntimeError>>()?;
        let mut compute_sets = pool.install(|| {
            kernel_ids
                .par_iter()
                .enumerate()
                .map(|(cs, ids)| LoadedComputeSet::load(&exe, cs, &views, ids))
                .collect::<Result<Vec<_>, RuntimeError>>()
        })?;
        let results = kept_results::plan(&exe, &mut compute_sets, &views.kept);
        let scratch_reads =
            scratch_reads::plan(&exe, &mut compute_sets, &views.kept, &results, &pool);
        // Loading a rearrangement walks (and costs) every piece that crosses tiles: in
        // parallel.
        let rearranges = pool.install(|| {
            exe.rearranges
                .par_iter()
                .zip(&views.kept)
                .zip(&scratch_reads.skipped)
                .map(|((r, &kept), &skipped)| {
                    let writes = !kept && !skipped;
                    LoadedRearrange::with_writes(&system, &exe.tensors, r, writes, &results)
                })
                .collect::<Result<Vec<_>, RuntimeError>>()
        })?;
        let kept = rearranges
            .iter()
            .zip(&views.kept)
            .map(|(r, &kept)| match kept {
                true => r.window_bytes().map(|b| vec![0f32; b / 4]).collect(),
                false => Vec::new(),
            })
            .collect();
        let kept_dst = exe
            .rearranges
            .iter()
            .enumerate()
            .filter(|(i, _)| views.kept[*i])
            .map(|(i, r)| (r.dst, i))
            .collect();
        let mut pairs = Vec::new();
        for p in std::iter::once(&exe.program).chain(&exe.functions) {
            copies_in(p, &mut pairs);
        }
        let mut copies = HashMap::new();
        for (src, dst) in pairs {
            let d = &exe.tensors[dst.0 as usize];
            let r = Rearrange {
                name: format!("copy {} -> {}", exe.tensors[src.0 as usize].name, d.name),
                dst,
                sources: vec![src],
                fill: Vec::new(),
                runs: vec![Run {
                    source: RunSource::contiguous(0, 0),
                    dst_start: 0,
                    len: d.elements,
                }],
            };
            copies.insert((src, dst), LoadedRearrange::new(&system, &exe.tensors, &r)?);
        }
        for t in &exe.tensors {
            if let Some(init) = &t.init {
                let size = t.dtype.size();
                for iv in &t.mapping {
                    let mem = &mut memory[iv.ipu * tiles + iv.tile];
                    let at = iv.offset as usize;
                    mem[at..at + iv.len * size]
                        .copy_from_slice(&init[iv.start * size..(iv.start + iv.len) * size]);
                }
            }
        }
        Ok(Engine {
            exe,
            system,
            memory,
            kernels,
            compute_sets,
            rearranges,
            copies,
            scratch: Scratch::default(),
            is_kept: views.kept.clone(),
            kept,
            kept_dst,
            results,
            scratch_reads,
            host: HostTimes::default(),
            pool: Arc::new(pool),
        })
    }

    /// Where the host's time went in the last run (the simulator's own cost, not the
    /// device's: that is the profile).
    pub fn host_times(&self) -> HostTimes {
        self.host
    }

    /// The executable being run.
    pub fn executable(&self) -> &Executable {
        &self.exe
    }

    /// Tensors the host does not keep in tile memory, read back (by
    /// [`Engine::read_tensor`]) as they would have been written: destinations of
    /// rearrangements whose windows matrix products read in place, products' results left in
    /// the batch scratch, and K parts summed straight from it. The IPU Model charges their
    /// moves as for any tensor; only the host skips them.
    pub fn host_only_tensors(&self) -> Vec<TensorId> {
        let mut out: Vec<TensorId> = self
            .kept_dst
            .keys()
            .chain(self.results.keys())
            .chain(self.scratch_reads.dst.keys())
            .copied()
            .collect();
        out.sort_unstable_by_key(|t| t.0);
        out
    }

    /// The bytes of a tensor in element order.
    pub fn read_tensor(&self, id: TensorId) -> Vec<u8> {
        let t = &self.exe.tensors[id.0 as usize];
        let size = t.dtype.size();
        let tiles = self.exe.target.tiles_per_ipu;
        let mut out = vec![0u8; t.elements * size];
        // A result left in a batch scratch is read there.
        if let Some(kept) = self.results.get(&id) {
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
        if let Some(&r) = self.scratch_reads.dst.get(&id) {
            let r = &self.exe.rearranges[r];
            let source = self.read_tensor(r.sources[0]);
            for run in &r.runs {
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
                let windows: Vec<&[u8]> = self.kept[r].iter().map(|w| f32_bytes(w)).collect();
                let rearrange = &self.exe.rearranges[r];
                LoadedRearrange::new(&self.system, &self.exe.tensors, rearrange)
                    .expect("loaded once already")
                    .written_tiles(&self.memory, &windows)
            }
            None => Vec::new(),
        };
        for iv in &t.mapping {
            let at = iv.ipu * tiles + iv.tile;
            let mem = written
                .iter()
                .find(|(t, _)| *t == at)
                .map_or(&self.memory[at], |(_, m)| m);
            let from = iv.offset as usize;
            out[iv.start * size..(iv.start + iv.len) * size]
                .copy_from_slice(&mem[from..from + iv.len * size]);
        }
        out
    }

    /// Writes a tensor's bytes (element order); the length must match.
    pub fn write_tensor(&mut self, id: TensorId, bytes: &[u8]) -> Result<(), RuntimeError> {
        let t = &self.exe.tensors[id.0 as usize];
        let size = t.dtype.size();
        if bytes.len() != t.elements * size {
            return Err(run_error(format!(
                "tensor {} holds {} bytes, {} were given",
                t.name,
                t.elements * size,
                bytes.len()
            )));
        }
        let tiles = self.exe.target.tiles_per_ipu;
        for iv in &t.mapping {
            let mem = &mut self.memory[iv.ipu * tiles + iv.tile];
            let at = iv.offset as usize;
            mem[at..at + iv.len * size]
                .copy_from_slice(&bytes[iv.start * size..(iv.start + iv.len) * size]);
        }
        Ok(())
    }

    /// Runs the main program once.
    pub fn run(&mut self, io: &mut HostIo) -> Result<Profile, RuntimeError> {
        self.host = HostTimes::default();
        let program = self.exe.program.clone();
        // The steps run on a pool thread: each superstep's parallel work then starts where
        // it is, instead of being handed from this thread to the pool and back (two context
        // switches per superstep, thousands per run).
        let pool = Arc::clone(&self.pool);
        let steps = pool.install(|| {
            let mut steps = Vec::new();
            self.step(&program, io, &mut steps).map(|()| steps)
        })?;
        Ok(self.profile(steps))
    }

    fn sync_cycles(&self) -> u64 {
        if self.exe.num_ipus > 1 {
            self.system.global_sync_cycles()
        } else {
            self.exe.target.internal_sync_cycles
        }
    }

    fn scalar(&self, id: TensorId) -> i64 {
        let bytes = self.read_tensor(id);
        match bytes.len() {
            1 => bytes[0] as i64,
            _ => i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as i64,
        }
    }

    /// A sync step: a Sync program, or the sync a branch decision costs.
    fn sync_step(&self, name: String) -> StepProfile {
        let sync = self.sync_cycles();
        StepProfile {
            name,
            kind: StepKind::Sync,
            cycles: sync,
            compute_cycles: 0,
            sync_cycles: sync,
            exchange_cycles: 0,
            bytes_moved: 0,
            bytes_over_links: 0,
            paging_cycles: 0,
            bytes_paged: 0,
        }
    }

    fn step(
        &mut self,
        p: &Program,
        io: &mut HostIo,
        steps: &mut Vec<StepProfile>,
    ) -> Result<(), RuntimeError> {
        match p {
            Program::Sequence(ps) => {
                for s in ps {
                    self.step(s, io, steps)?;
                }
            }
            Program::Execute(id) => {
                let t = Instant::now();
                steps.push(self.execute(id.0 as usize)?);
                self.host.compute += t.elapsed();
            }
            Program::Copy { src, dst } => {
                let t = Instant::now();
                steps.push(self.copy(*src, *dst));
                self.host.exchange += t.elapsed();
            }
            Program::Rearrange(id) => {
                let t = Instant::now();
                steps.push(self.rearrange(id.0 as usize));
                self.host.exchange += t.elapsed();
            }
            Program::Repeat { count, body } => {
                for _ in 0..*count {
                    self.step(body, io, steps)?;
                }
            }
            Program::RepeatWhileTrue {
                condition,
                predicate,
                body,
            } => loop {
                self.step(condition, io, steps)?;
                steps.push(self.sync_step(format!(
                    "branch on {}",
                    self.exe.tensors[predicate.0 as usize].name
                )));
                if self.scalar(*predicate) == 0 {
                    break;
                }
                self.step(body, io, steps)?;
            },
            Program::If {
                predicate,
                then,
                otherwise,
            } => {
                steps.push(self.sync_step(format!(
                    "branch on {}",
                    self.exe.tensors[predicate.0 as usize].name
                )));
                let branch = if self.scalar(*predicate) != 0 {
                    then
                } else {
                    otherwise
                };
                self.step(branch, io, steps)?;
            }
            Program::Switch {
                index,
                cases,
                default,
            } => {
                steps.push(self.sync_step(format!(
                    "branch on {}",
                    self.exe.tensors[index.0 as usize].name
                )));
                let i = self.scalar(*index);
                let branch = usize::try_from(i)
                    .ok()
                    .and_then(|i| cases.get(i))
                    .unwrap_or(default);
                self.step(branch, io, steps)?;
            }
            Program::Call(f) => {
                let body = self.exe.functions[f.0 as usize].clone();
                self.step(&body, io, steps)?;
            }
            Program::StreamCopy { stream, tensor } => {
                let t = Instant::now();
                steps.push(self.stream_copy(stream.0 as usize, *tensor, io)?);
                self.host.streams += t.elapsed();
            }
            Program::Sync => steps.push(self.sync_step("sync".into())),
        }
        Ok(())
    }

    /// One superstep: every tile runs its vertices (tiles in parallel), then all sync.
    fn execute(&mut self, cs: usize) -> Result<StepProfile, RuntimeError> {
        // The compute set runs mutably (its own batches) beside the others' scratches.
        let (before, rest) = self.compute_sets.split_at_mut(cs);
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
            &mut self.memory,
            self.kernels.table(),
            &self.exe.codelets,
            &self.kept,
            &results,
            &self.pool,
        )?;
        let loaded = &self.compute_sets[cs];
        let compute = loaded.compute_cycles;
        let (paging_cycles, bytes_paged) = loaded.paging;
        let sync = self.sync_cycles();
        Ok(StepProfile {
            name: loaded.name.clone(),
            kind: StepKind::Execute,
            cycles: compute + sync + paging_cycles,
            compute_cycles: compute,
            sync_cycles: sync,
            exchange_cycles: 0,
            bytes_moved: 0,
            bytes_over_links: 0,
            paging_cycles,
            bytes_paged,
        })
    }

    /// Runs a rearrangement.
    fn rearrange(&mut self, id: usize) -> StepProfile {
        let r = &self.rearranges[id];
        // A skipped one's readers read the scratch (see `scratch_reads`): only its cost counts.
        if self.is_kept[id] {
            for (k, window) in self.kept[id].iter_mut().enumerate() {
                r.gather(&self.memory, k, f32_bytes_mut(window), &self.pool);
            }
        } else if !self.scratch_reads.skipped[id] {
            let sets = &self.compute_sets;
            r.apply(&mut self.memory, &mut self.scratch, &self.pool, |c| {
                sets[c].batched().0.scratch_bytes()
            });
        }
        copy_step(r.name.clone(), r.cost)
    }

    fn copy(&mut self, src: TensorId, dst: TensorId) -> StepProfile {
        let r = &self.copies[&(src, dst)];
        let sets = &self.compute_sets;
        r.apply(&mut self.memory, &mut self.scratch, &self.pool, |c| {
            sets[c].batched().0.scratch_bytes()
        });
        copy_step(r.name.clone(), r.cost)
    }

    fn stream_copy(
        &mut self,
        stream: usize,
        tensor: TensorId,
        io: &mut HostIo,
    ) -> Result<StepProfile, RuntimeError> {
        let s = self.exe.streams[stream].clone();
        let t = &self.exe.tensors[tensor.0 as usize];
        let bytes = (t.elements * t.dtype.size()) as u64;
        // The host link, or the busiest receiving tile at exchange bandwidth, limits a transfer.
        let tiles = self.exe.target.tiles_per_ipu;
        let mut per_tile = vec![0u64; self.memory.len()];
        for iv in &t.mapping {
            per_tile[iv.ipu * tiles + iv.tile] += (iv.len * t.dtype.size()) as u64;
        }
        let busiest = per_tile.iter().copied().max().unwrap_or(0);
        let target = &self.exe.target;
        let transfer = cost::host_cycles(target, bytes).max(cost::exchange_cycles(target, busiest));
        let sync = self.sync_cycles();
        match s.direction {
            Direction::HostToDevice => {
                let buffer = io.inputs.get_mut(&s.name).and_then(VecDeque::pop_front).ok_or_else(|| {
                    run_error(format!("stream {} has no buffer left to copy into tensor {}; feed one with HostIo::feed", s.name, t.name))
                })?;
                if buffer.len() as u64 != bytes {
                    return Err(run_error(format!(
                        "stream {} was fed {} bytes but carries {bytes} ({} x {:?})",
                        s.name,
                        buffer.len(),
                        s.elements,
                        s.dtype
                    )));
                }
                self.write_tensor(tensor, &buffer)?;
            }
            Direction::DeviceToHost => {
                let data = self.read_tensor(tensor);
                io.outputs.entry(s.name.clone()).or_default().push(data);
            }
        }
        Ok(StepProfile {
            name: format!("stream {}", s.name),
            kind: StepKind::StreamCopy,
            cycles: sync + transfer,
            compute_cycles: 0,
            sync_cycles: sync,
            exchange_cycles: transfer,
            bytes_moved: bytes,
            bytes_over_links: 0,
            paging_cycles: 0,
            bytes_paged: 0,
        })
    }

    fn profile(&self, steps: Vec<StepProfile>) -> Profile {
        let mut totals = Totals::default();
        for s in &steps {
            totals.compute_cycles += s.compute_cycles;
            totals.sync_cycles += s.sync_cycles;
            totals.exchange_cycles += s.exchange_cycles;
            totals.paging_cycles += s.paging_cycles;
            totals.bytes_paged += s.bytes_paged;
            match s.kind {
                StepKind::StreamCopy => totals.bytes_streamed += s.bytes_moved,
                StepKind::Copy => {
                    totals.bytes_exchanged += s.bytes_moved - s.bytes_over_links;
                    totals.bytes_over_links += s.bytes_over_links;
                }
                _ => {}
            }
        }
        let total_cycles: u64 = steps.iter().map(|s| s.cycles).sum();
        let target = &self.exe.target;
        let tiles_per_ipu = target.tiles_per_ipu;
        let tiles = self
            .memory
            .iter()
            .enumerate()
            .filter(|(_, m)| !m.is_empty())
            .map(|(i, m)| TileMemory {
                ipu: i / tiles_per_ipu,
                tile: i % tiles_per_ipu,
                bytes_used: m.len() as u64,
                bytes_free: target.bytes_per_tile - m.len() as u64,
            })
            .collect();
        Profile {
            target: target.version.to_string(),
            num_ipus: self.exe.num_ipus,
            clock_hz: target.clock_hz,
            total_cycles,
            seconds: target.seconds(total_cycles),
            totals,
            steps,
            tiles,
            out_of_core: target.is_out_of_core().then_some(OutOfCore {
                virtual_tiles_per_ipu: target.tiles_per_ipu,
                physical_tiles_per_ipu: target.physical_tiles_per_ipu,
            }),
        }
    }
}
