//! What each kind of program step costs, computed once from the executable and the system
//! ([`StepCosts`]), and the profile each step records. To add a kind of step: give it a
//! cost here, computed from the executable alone, and a `StepProfile` constructor; the
//! timeline then records it for estimates and runs alike.

use crate::device::system::System;
use crate::error::RuntimeError;
use crate::model::code::{self, StepTiles, TakingPart};
use crate::model::collective::{self, CollectiveCost, PhaseCost};
use crate::model::cost::{self, KernelRate, VertexCost};
use crate::model::exchange::{CopyCost, Traffic, rearrangement_cost};
use crate::model::layout;
use crate::model::paging;
use crate::model::profile::{Beside, StepKind, StepProfile, TileMemory};
use crate::program::executable::{Executable, Region, StreamId, TensorId};
use crate::program::walk::{copies, copy_as_rearrangement, each_node, programs};
use codegen::KernelSpec;
use rayon::prelude::*;
use std::collections::HashMap;

/// What a compute set costs: its slowest tile, and out of core the paging of what its
/// vertices read and write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ComputeCost {
    /// The slowest tile's cycles (out of core: the physical tile whose virtual tiles take
    /// longest together).
    pub compute_cycles: u64,
    /// Out of core: cycles paging between Streaming Memory and the tiles (else 0).
    pub paging_cycles: u64,
    /// Out of core: bytes paged (else 0).
    pub bytes_paged: u64,
    /// The cycles of every tile that runs vertices, `(ipu * tiles_per_ipu + tile, cycles)`
    /// in tile order (what an engine weighs its host threads' shares by).
    pub tile_cycles: Vec<(usize, u64)>,
}

/// A `Copy` step: its name in profiles and its cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CopyStep {
    /// `copy SRC -> DST`.
    pub name: String,
    /// What it costs.
    pub cost: CopyCost,
    /// The IPUs and tiles it reads or writes.
    pub reach: Reach,
    /// The tiles taking part.
    pub taking_part: TakingPart,
}

/// What a host stream transfer costs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StreamCost {
    /// The step's name in profiles (`stream NAME`).
    pub name: String,
    /// Cycles moving the bytes: the host link, or the busiest receiving (or sending) tile at
    /// exchange bandwidth, whichever is slower.
    pub transfer_cycles: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// The IPUs and tiles the tensor lives on.
    pub reach: Reach,
}

/// The cost of every step an executable's programs can run.
#[derive(Debug)]
pub(crate) struct StepCosts {
    /// One sync: on-chip, or across every IPU of the system.
    pub sync_cycles: u64,
    /// By compute set.
    pub compute_sets: Vec<ComputeCost>,
    /// By rearrangement.
    pub rearranges: Vec<CopyCost>,
    /// By `Copy` (source, destination).
    pub copies: HashMap<(TensorId, TensorId), CopyStep>,
    /// By `StreamCopy` (stream, tensor).
    pub streams: HashMap<(StreamId, TensorId), StreamCost>,
    /// The memory of every tile that holds data, as every profile reports it.
    pub tile_memory: Vec<TileMemory>,
    /// The largest tensors, as every profile reports them.
    pub largest_tensors: Vec<crate::model::profile::TensorSize>,
    /// What the busiest tile holds at its peak, as every profile reports it.
    pub peak_tile_contents: Option<crate::model::profile::TileAtPeak>,
    /// By collective.
    pub collectives: Vec<CollectiveCost>,
    /// The IPUs and tiles each compute set runs vertices on.
    pub compute_set_reach: Vec<Reach>,
    /// The IPUs and tiles each rearrangement reads or writes.
    pub rearrange_reach: Vec<Reach>,
}

/// The IPUs (in order) and the number of tiles a step touches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Reach {
    pub ipus: Vec<usize>,
    pub tiles: usize,
}

/// The IPUs and tiles `tensors` (validated: on the executable's tiles) live on.
pub(crate) fn reach_of(exe: &Executable, tensors: impl IntoIterator<Item = TensorId>) -> Reach {
    let tpi = exe.target.tiles_per_ipu;
    let mut on = vec![false; exe.num_ipus * tpi];
    for t in tensors {
        for i in &exe.tensors[t.0 as usize].mapping {
            if let Some(o) = on.get_mut(i.ipu * tpi + i.tile) {
                *o = true;
            }
        }
    }
    let mut ipus: Vec<usize> = Vec::new();
    let mut tiles = 0;
    for (t, _) in on.iter().enumerate().filter(|&(_, &o)| o) {
        tiles += 1;
        if ipus.last() != Some(&(t / tpi)) {
            ipus.push(t / tpi);
        }
    }
    Reach { ipus, tiles }
}

/// The cost of every compute set of `exe` (validated), in parallel.
pub(crate) fn compute_set_costs(exe: &Executable) -> Vec<ComputeCost> {
    (0..exe.compute_sets.len())
        .into_par_iter()
        .map(|cs| compute_set_cost(exe, cs))
        .collect()
}

impl StepCosts {
    /// Costs every step of `exe` (validated) on `system`; compute sets and rearrangements
    /// are costed in parallel.
    pub(crate) fn of(exe: &Executable, system: &System) -> Result<StepCosts, RuntimeError> {
        StepCosts::given(exe, system, compute_set_costs(exe))
    }

    /// [`StepCosts::of`], the compute sets' costs already found ([`compute_set_costs`]):
    /// loading weighs its host threads' shares by them while the other steps are costed.
    pub(crate) fn given(
        exe: &Executable,
        system: &System,
        compute_sets: Vec<ComputeCost>,
    ) -> Result<StepCosts, RuntimeError> {
        let (rearranges, rearrange_tiles): (Vec<CopyCost>, Vec<TakingPart>) = exe
            .rearranges
            .par_iter()
            .map_init(
                || Traffic::new(system),
                |traffic, r| rearrangement_cost(traffic, system, &exe.tensors, r),
            )
            .collect::<Result<Vec<_>, RuntimeError>>()?
            .into_iter()
            .unzip();
        let copies = copies(exe)
            .into_par_iter()
            .map_init(
                || Traffic::new(system),
                |traffic, (src, dst)| {
                    let r = copy_as_rearrangement(exe, src, dst);
                    let (cost, taking_part) =
                        rearrangement_cost(traffic, system, &exe.tensors, &r)?;
                    let reach = reach_of(exe, [src, dst]);
                    Ok((
                        (src, dst),
                        CopyStep {
                            name: r.name,
                            cost,
                            reach,
                            taking_part,
                        },
                    ))
                },
            )
            .collect::<Result<HashMap<_, _>, RuntimeError>>()?;
        let mut streams = HashMap::new();
        for p in programs(exe) {
            each_node(p, &mut |q| {
                if let crate::program::executable::Program::StreamCopy { stream, tensor } = q {
                    streams
                        .entry((*stream, *tensor))
                        .or_insert_with(|| stream_cost(exe, *stream, *tensor));
                }
            });
        }
        let collectives = if exe.collectives.is_empty() {
            Vec::new()
        } else {
            let whole = collective::replicated_system(exe)?;
            exe.collectives
                .iter()
                .map(|c| collective::collective_cost(exe, &whole, c))
                .collect::<Result<Vec<_>, RuntimeError>>()?
        };
        let tpi = exe.target.tiles_per_ipu.max(1);
        let compute_set_reach = compute_sets_reach(&compute_sets, tpi);
        let rearrange_reach = exe
            .rearranges
            .par_iter()
            .map(|r| reach_of(exe, r.sources.iter().copied().chain([r.dst])))
            .collect();
        let step_tiles = StepTiles {
            compute_sets: compute_sets
                .iter()
                .map(|c| c.tile_cycles.iter().map(|&(t, _)| t as u32).collect())
                .collect(),
            rearranges: &rearrange_tiles,
            copies: copies.iter().map(|(k, c)| (*k, &c.taking_part)).collect(),
        };
        let code = code::code_memory(exe, &step_tiles);
        let tile_memory = layout::tile_memory(exe, &code);
        layout::check_memory(exe, &tile_memory)?;
        let peak_tile_contents = crate::model::profile::busiest(&tile_memory)
            .and_then(|t| layout::tile_at_peak(exe, t.ipu, t.tile));
        Ok(StepCosts {
            compute_set_reach,
            rearrange_reach,
            collectives,
            sync_cycles: sync_cycles(system),
            compute_sets,
            rearranges,
            copies,
            streams,
            tile_memory,
            largest_tensors: layout::largest_tensors(exe, 20),
            peak_tile_contents,
        })
    }
}

/// The IPUs and tiles each compute set runs vertices on.
fn compute_sets_reach(costs: &[ComputeCost], tiles_per_ipu: usize) -> Vec<Reach> {
    costs
        .iter()
        .map(|c| {
            let mut ipus: Vec<usize> = c
                .tile_cycles
                .iter()
                .map(|&(t, _)| t / tiles_per_ipu)
                .collect();
            ipus.dedup();
            Reach {
                ipus,
                tiles: c.tile_cycles.len(),
            }
        })
        .collect()
}

/// Cycles of one sync on `system`: on-chip for one IPU, across the ladder for several.
pub(crate) fn sync_cycles(system: &System) -> u64 {
    if system.num_ipus() > 1 {
        system.global_sync_cycles()
    } else {
        system.target.internal_sync_cycles
    }
}

/// The cost of compute set `cs_index` of `exe` (validated): each tile's vertices spread over
/// its worker contexts, the slowest tile, and out of core the bytes its vertices touch.
pub(crate) fn compute_set_cost(exe: &Executable, cs_index: usize) -> ComputeCost {
    let cs = &exe.compute_sets[cs_index];
    let target = &exe.target;
    let region_size = |r: &Region| (r.len * exe.tensors[r.tensor.0 as usize].dtype.size()) as u64;
    let touched_by =
        |inputs: &[Region], outputs: &[Region]| inputs.iter().chain(outputs).map(region_size).sum();
    // Every vertex's tile, cost and the bytes it reads and writes (what paging moves, out
    // of core), then grouped by tile (stable: a tile's vertices stay in order).
    let mut placed: Vec<(usize, VertexCost, u64)> =
        Vec::with_capacity(cs.vertices.len() + cs.codelet_vertices.len());
    // A compute set's vertices mostly run one kernel: its rate is found once per run of them.
    let mut rate: Option<(&std::sync::Arc<KernelSpec>, KernelRate)> = None;
    for v in &cs.vertices {
        let (elements, runs) = match &*v.kernel {
            KernelSpec::Elementwise(_) | KernelSpec::MatMul(_) => (v.outputs[0].len, 0),
            KernelSpec::Reduce(_) => (v.inputs[0].len, v.outputs[0].len),
        };
        let of_kernel = match rate {
            Some((k, r)) if std::sync::Arc::ptr_eq(k, &v.kernel) => r,
            _ => {
                rate.insert((&v.kernel, KernelRate::of(&v.kernel, target)))
                    .1
            }
        };
        let tile = v.ipu * target.tiles_per_ipu + v.tile;
        let touched = touched_by(&v.inputs, &v.outputs);
        if v.grain == 0 {
            placed.push((tile, of_kernel.vertex_cost(elements, runs), touched));
            continue;
        }
        let shares = of_kernel.multi_vertex_costs(elements, v.grain, target.worker_contexts);
        for (k, c) in shares.into_iter().enumerate() {
            // The bytes it touches (what paging moves) are counted once.
            placed.push((tile, c, if k == 0 { touched } else { 0 }));
        }
    }
    for v in &cs.codelet_vertices {
        let c = exe.codelets[v.codelet.0 as usize].0.cost(target);
        let tile = v.ipu * target.tiles_per_ipu + v.tile;
        placed.push((tile, c, touched_by(&v.inputs, &v.outputs)));
    }
    if !placed.is_sorted_by_key(|p| p.0) {
        placed.sort_by_key(|p| p.0);
    }
    let mut tile_cycles = Vec::new();
    let mut touched = Vec::new();
    let mut costs: Vec<VertexCost> = Vec::new();
    for group in placed.chunk_by(|a, b| a.0 == b.0) {
        costs.clear();
        costs.extend(group.iter().map(|p| p.1));
        let tile = group[0].0;
        tile_cycles.push((tile, cost::tile_cycles(&costs, target.worker_contexts)));
        touched.push((tile, group.iter().map(|p| p.2).sum::<u64>()));
    }
    let (paging_cycles, bytes_paged) = paging::paging(target, exe.num_ipus, touched);
    ComputeCost {
        compute_cycles: paging::busiest_physical(target, exe.num_ipus, tile_cycles.iter().copied()),
        paging_cycles,
        bytes_paged,
        tile_cycles,
    }
}

/// The cost of streaming `tensor` to or from the host: the host link, or the busiest tile
/// at exchange bandwidth, limits a transfer.
fn stream_cost(exe: &Executable, stream: StreamId, tensor: TensorId) -> StreamCost {
    let t = &exe.tensors[tensor.0 as usize];
    let bytes = (t.elements * t.dtype.size()) as u64;
    let tiles = exe.target.tiles_per_ipu;
    let mut per_tile = vec![0u64; exe.num_ipus * tiles];
    for iv in &t.mapping {
        per_tile[iv.ipu * tiles + iv.tile] += (iv.len * t.dtype.size()) as u64;
    }
    let busiest = per_tile.iter().copied().max().unwrap_or(0);
    let target = &exe.target;
    StreamCost {
        name: format!("stream {}", exe.streams[stream.0 as usize].name),
        transfer_cycles: cost::host_cycles(target, bytes)
            .max(cost::exchange_cycles(target, busiest)),
        bytes,
        reach: reach_of(exe, [tensor]),
    }
}

impl StepProfile {
    /// A compute set's step: its compute phase, one sync, and out of core its paging.
    pub(crate) fn execute(name: String, c: &ComputeCost, sync_cycles: u64) -> StepProfile {
        StepProfile {
            name,
            kind: StepKind::Execute,
            cycles: c.compute_cycles + sync_cycles + c.paging_cycles,
            compute_cycles: c.compute_cycles,
            sync_cycles,
            exchange_cycles: 0,
            bytes_moved: 0,
            bytes_over_links: 0,
            paging_cycles: c.paging_cycles,
            bytes_paged: c.bytes_paged,
            ipus: Vec::new(),
            tiles: 0,
            beside: None,
        }
    }

    /// A copy's or rearrangement's step.
    pub(crate) fn copy(name: String, c: &CopyCost) -> StepProfile {
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
            ipus: Vec::new(),
            tiles: 0,
            beside: None,
        }
    }

    /// A host stream transfer's step: one sync, then the transfer.
    pub(crate) fn stream(name: String, c: &StreamCost, sync_cycles: u64) -> StepProfile {
        StepProfile {
            name,
            kind: StepKind::StreamCopy,
            cycles: sync_cycles + c.transfer_cycles,
            compute_cycles: 0,
            sync_cycles,
            exchange_cycles: c.transfer_cycles,
            bytes_moved: c.bytes,
            bytes_over_links: 0,
            paging_cycles: 0,
            bytes_paged: 0,
            ipus: Vec::new(),
            tiles: 0,
            beside: None,
        }
    }

    /// One phase of a collective: its links (or the tiles' exchange), combining, syncs.
    pub(crate) fn collective(p: &PhaseCost) -> StepProfile {
        StepProfile {
            name: p.name.clone(),
            kind: StepKind::Collective,
            cycles: p.compute_cycles + p.sync_cycles + p.exchange_cycles,
            compute_cycles: p.compute_cycles,
            sync_cycles: p.sync_cycles,
            exchange_cycles: p.exchange_cycles,
            bytes_moved: p.bytes_over_links,
            bytes_over_links: p.bytes_over_links,
            paging_cycles: 0,
            bytes_paged: 0,
            ipus: Vec::new(),
            tiles: 0,
            beside: None,
        }
    }

    /// The steps of branches that run side by side, each on its own IPUs: the slowest
    /// branch's steps as they are (its cycles are the `Parallel`'s), then every other
    /// branch's with their bytes but no cycles of their own, named `NAME (beside branch
    /// K)`, so the totals count every byte once and the slowest branch's cycles only; each
    /// of those keeps its own cycles and its start (the `Parallel` began at cycle `start`)
    /// in [`StepProfile::beside`].
    pub(crate) fn side_by_side(branches: Vec<Vec<StepProfile>>, start: u64) -> Vec<StepProfile> {
        let total = |l: &Vec<StepProfile>| l.iter().map(|s| s.cycles).sum::<u64>();
        let Some(slowest) =
            (0..branches.len()).max_by_key(|&i| (total(&branches[i]), usize::MAX - i))
        else {
            return Vec::new();
        };
        let mut out = branches[slowest].clone();
        for (_, list) in branches
            .into_iter()
            .enumerate()
            .filter(|(b, _)| *b != slowest)
        {
            let mut at = start;
            out.extend(list.into_iter().map(|s| {
                let beside = Beside {
                    slowest_branch: slowest,
                    start: at,
                    cycles: s.cycles,
                    compute_cycles: s.compute_cycles + s.paging_cycles,
                    exchange_cycles: s.exchange_cycles,
                    sync_cycles: s.sync_cycles,
                };
                at += s.cycles;
                StepProfile {
                    name: format!("{} (beside branch {slowest})", s.name),
                    cycles: 0,
                    compute_cycles: 0,
                    sync_cycles: 0,
                    exchange_cycles: 0,
                    paging_cycles: 0,
                    beside: Some(beside),
                    ..s
                }
            }));
        }
        out
    }

    /// A sync step: a `Sync` program, or the sync a branch decision costs.
    pub(crate) fn sync(name: String, sync_cycles: u64) -> StepProfile {
        StepProfile {
            name,
            kind: StepKind::Sync,
            cycles: sync_cycles,
            compute_cycles: 0,
            sync_cycles,
            exchange_cycles: 0,
            bytes_moved: 0,
            bytes_over_links: 0,
            paging_cycles: 0,
            bytes_paged: 0,
            ipus: Vec::new(),
            tiles: 0,
            beside: None,
        }
    }
}
