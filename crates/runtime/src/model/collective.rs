//! What a collective costs, and the checks a replicated executable must pass.
//!
//! Replica `r` sits on IPU `order[r]` of a system of `replicas × num_ipus` IPUs (the
//! selection order; AUTO is HOOF). The algorithms are those of Graphcore's collectives
//! (GCL, summarised in ANCHORS.md): an all-reduce is a ring reduce-scatter then a ring
//! all-gather over the group in its order, `n − 1` steps each, every member sending a
//! `1/n` chunk to the next; an all-gather and a reduce-scatter are one of those rings.
//! Small values go directly instead (every member sending to every other in one step) when
//! that costs fewer cycles than the ring's steps; an all-to-all and a permute always send
//! every part directly. A step costs the slowest transfer
//! over the IPU-Links ([`transfer_cycles`]: store-and-forward per hop, each directed link's
//! bandwidth shared by every transfer crossing it in the step; the link figures are
//! `Target`'s, each cited there), or the busiest tile's exchange if that is slower, plus
//! the combining of what arrived on the busiest tile and one sync across the system.

use crate::device::system::System;
use crate::error::RuntimeError;
use crate::model::cost::{self, VertexCost};
use crate::program::collective::{Collective, CollectiveKind};
use crate::program::executable::{Executable, TensorId};
use codegen::{BinaryOp, DType, ReduceOp};
use std::collections::HashMap;
use std::fmt::Write;

/// One phase of a collective as its profile step shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PhaseCost {
    /// `NAME: reduce-scatter, 3 ring steps of 1024 B; slowest IPU 2 -> 0 (2 hops)`.
    pub name: String,
    /// Combining on the tiles.
    pub compute_cycles: u64,
    /// Syncs between steps.
    pub sync_cycles: u64,
    /// Moving the data (IPU-Links or the tiles' exchange, whichever is slower per step).
    pub exchange_cycles: u64,
    /// Bytes over IPU-Links (each hop counted).
    pub bytes_over_links: u64,
}

/// A collective's cost: its phases in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CollectiveCost {
    /// The phases.
    pub phases: Vec<PhaseCost>,
}

/// One replica's transfer within a step: `bytes` from one IPU to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Transfer {
    /// The sending IPU.
    pub from: usize,
    /// The receiving IPU.
    pub to: usize,
    /// Bytes sent.
    pub bytes: u64,
}

/// What a step of simultaneous transfers costs over the IPU-Links.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct LinkStep {
    /// Cycles until the last transfer has arrived.
    pub cycles: u64,
    /// Bytes over links, each hop counted.
    pub bytes_over_links: u64,
    /// The slowest transfer: `(from, to, hops)`.
    pub slowest: Option<(usize, usize, usize)>,
}

/// The cost of `transfers` made at once: each goes hop by hop (store and forward), every
/// hop its latency plus the bytes of *all* transfers crossing that directed link over its
/// bandwidth; the step lasts until the slowest arrives.
pub(crate) fn transfer_cycles(
    system: &System,
    transfers: &[Transfer],
) -> Result<LinkStep, RuntimeError> {
    let t = &system.target;
    let latency = (t.ipu_link_hop_latency_s * t.clock_hz).ceil() as u64;
    let mut routes = Vec::with_capacity(transfers.len());
    let mut load: HashMap<(usize, usize), u64> = HashMap::new();
    let mut out = LinkStep::default();
    for x in transfers.iter().filter(|x| x.from != x.to && x.bytes > 0) {
        let route = system.route(x.from, x.to)?;
        for hop in &route {
            *load.entry((hop.from, hop.to)).or_default() += x.bytes;
        }
        out.bytes_over_links += x.bytes * route.len() as u64;
        routes.push((x, route));
    }
    for (x, route) in routes {
        let cycles: u64 = route
            .iter()
            .map(|hop| {
                let bandwidth = t.ipu_link_bytes_per_s() * hop.kind.links() as f64;
                latency + (load[&(hop.from, hop.to)] as f64 / bandwidth * t.clock_hz).ceil() as u64
            })
            .sum();
        if cycles > out.cycles {
            out.cycles = cycles;
            out.slowest = Some((x.from, x.to, route.len()));
        }
    }
    Ok(out)
}

/// Where the replicas sit and how a collective's bytes spread over each replica's IPUs:
/// replica `r`'s logical IPU `i` is `ipus[r][i]`, and a replica of several IPUs sends the
/// share of a value its IPU `i` holds to the other replica's IPU `i` (one ring per IPU of
/// a replica, as GCL runs them side by side).
pub(crate) struct Placement {
    /// By replica, its IPUs.
    pub ipus: Vec<Vec<usize>>,
    /// By logical IPU, the bytes of the collective's values it holds.
    share: Vec<u64>,
}

impl Placement {
    /// The placement of `exe`'s replicas, with shares from tensors `values`.
    pub(crate) fn of(exe: &Executable, values: &[TensorId]) -> Placement {
        let k = exe.num_ipus.max(1);
        let order = exe.replication.placement(k);
        let ipus = (0..exe.replication.replicas)
            .map(|r| order[r * k..(r + 1) * k].to_vec())
            .collect();
        let mut share = vec![0u64; k];
        for &v in values {
            let t = &exe.tensors[v.0 as usize];
            for iv in &t.mapping {
                share[iv.ipu] += (iv.len * t.dtype.size()) as u64;
            }
        }
        if share.iter().all(|&b| b == 0) {
            share[0] = 1;
        }
        Placement { ipus, share }
    }

    /// Replica `a` sending `bytes` to replica `b`: one transfer per IPU of a replica, each
    /// carrying that IPU's share.
    fn transfers(&self, a: usize, b: usize, bytes: u64) -> impl Iterator<Item = Transfer> + '_ {
        let total: u64 = self.share.iter().sum();
        self.share
            .iter()
            .enumerate()
            .filter(|(_, s)| **s > 0)
            .map(move |(i, &s)| Transfer {
                from: self.ipus[a][i],
                to: self.ipus[b][i],
                bytes: (bytes as u128 * s as u128).div_ceil(total as u128) as u64,
            })
    }
}

/// The system one replica of `exe` sees: every replica's IPUs, its own logical IPUs placed
/// on them by the selection order (replica 0's place; the model costs every replica's
/// steps as replica 0's).
pub(crate) fn replica_system(exe: &Executable) -> Result<System, RuntimeError> {
    let k = exe.num_ipus;
    let placement = exe.replication.placement(k);
    System::placed(
        exe.target.clone(),
        placement.len(),
        placement.into_iter().take(k).collect(),
    )
}

/// The whole system a replicated executable runs on: every replica's IPUs.
pub(crate) fn replicated_system(exe: &Executable) -> Result<System, RuntimeError> {
    System::new(exe.target.clone(), exe.replication.replicas * exe.num_ipus)
}

fn bytes_of(exe: &Executable, t: TensorId) -> u64 {
    let t = &exe.tensors[t.0 as usize];
    (t.elements * t.dtype.size()) as u64
}

/// The most bytes of `t` any one tile holds.
fn busiest_tile_bytes(exe: &Executable, t: TensorId) -> u64 {
    let t = &exe.tensors[t.0 as usize];
    let mut per_tile: HashMap<(usize, usize), u64> = HashMap::new();
    for iv in &t.mapping {
        *per_tile.entry((iv.ipu, iv.tile)).or_default() += (iv.len * t.dtype.size()) as u64;
    }
    per_tile.into_values().max().unwrap_or(0)
}

/// Cycles a tile takes to combine `elements` pairs of `dtype` values, its worker contexts
/// sharing them (one binary operation per element, as an element-wise vertex).
fn combine_cycles(exe: &Executable, dtype: DType, elements: u64) -> u64 {
    if elements == 0 {
        return 0;
    }
    let target = &exe.target;
    let workers = target.worker_contexts.max(1) as u64;
    let width = if dtype.is_float() { 2 } else { 1 };
    let per_worker = elements.div_ceil(workers);
    let per_element = cost::binary_cost(BinaryOp::Add) + 1;
    let vertex =
        VertexCost::Worker(cost::VERTEX_OVERHEAD + per_worker.div_ceil(width) * per_element);
    cost::tile_cycles(&vec![vertex; workers as usize], target.worker_contexts)
}

/// A ring over each group: `steps` steps, every member sending `chunk` bytes to the next
/// member of its group, combining what arrives (`combine`: elements per busiest tile) when
/// asked.
struct Ring<'a> {
    exe: &'a Executable,
    system: &'a System,
    place: &'a Placement,
    groups: &'a [Vec<usize>],
}

impl Ring<'_> {
    fn phase(
        &self,
        label: String,
        chunk: u64,
        busiest_tile: u64,
        combine: Option<(DType, u64)>,
    ) -> Result<Option<PhaseCost>, RuntimeError> {
        let n = self.groups.first().map_or(1, Vec::len);
        if n <= 1 {
            return Ok(None);
        }
        let steps = (n - 1) as u64;
        let transfers: Vec<Transfer> = self
            .groups
            .iter()
            .flat_map(|g| {
                (0..g.len())
                    .flat_map(move |i| self.place.transfers(g[i], g[(i + 1) % g.len()], chunk))
            })
            .collect();
        let link = transfer_cycles(self.system, &transfers)?;
        let tiles = cost::exchange_cycles(&self.exe.target, busiest_tile.min(chunk));
        let per_step_exchange = link.cycles.max(tiles);
        let compute = combine.map_or(0, |(dtype, elements)| {
            combine_cycles(self.exe, dtype, elements)
        });
        let sync = self.system.global_sync_cycles();
        let mut name = format!("{label}, {steps} ring steps of {chunk} B");
        if let Some((from, to, hops)) = link.slowest {
            let _ = write!(name, "; slowest link IPU {from} -> {to} ({hops} hops)");
        }
        Ok(Some(PhaseCost {
            name,
            compute_cycles: compute * steps,
            sync_cycles: sync * steps,
            exchange_cycles: per_step_exchange * steps,
            bytes_over_links: link.bytes_over_links * steps,
        }))
    }
}

/// The cost of collective `c` of `exe` (checked) on `system` (every replica's IPUs).
pub(crate) fn collective_cost(
    exe: &Executable,
    system: &System,
    c: &Collective,
) -> Result<CollectiveCost, RuntimeError> {
    let replicas = exe.replication.replicas;
    let values: Vec<TensorId> = if c.inputs.is_empty() {
        c.outputs.clone()
    } else {
        c.inputs.clone()
    };
    let place = Placement::of(exe, &values);
    let groups = c.groups_of(replicas);
    let n = groups.first().map_or(1, Vec::len) as u64;
    let ring = Ring {
        exe,
        system,
        place: &place,
        groups: &groups,
    };
    let label = |what: &str| format!("{}: {what}", c.name);
    let input_bytes: u64 = c.inputs.iter().map(|&t| bytes_of(exe, t)).sum();
    let busiest = |ts: &[TensorId]| ts.iter().map(|&t| busiest_tile_bytes(exe, t)).sum::<u64>();
    let dtype = |ts: &[TensorId]| ts.first().map(|t| exe.tensors[t.0 as usize].dtype);
    let elements_of = |bytes: u64, d: DType| bytes / d.size() as u64;
    let mut phases = Vec::new();
    match &c.kind {
        CollectiveKind::AllReduce { op } => {
            let chunk = input_bytes.div_ceil(n);
            let d = dtype(&c.inputs).unwrap_or(DType::F32);
            let whole_tile = busiest(&c.inputs);
            let per_tile = whole_tile.div_ceil(n);
            let mut ring_phases = Vec::new();
            ring_phases.extend(ring.phase(
                label(&format!("reduce-scatter ({})", op_name(*op))),
                chunk,
                per_tile,
                Some((d, elements_of(per_tile.min(chunk), d))),
            )?);
            ring_phases.extend(ring.phase(label("all-gather"), chunk, per_tile, None)?);
            let direct_phase = direct(
                exe,
                system,
                label(&format!("all-reduce ({}), direct", op_name(*op))),
                &pairs(&groups, &place, |_, _| input_bytes),
                whole_tile,
                Some((d, elements_of(whole_tile, d) * (n - 1))),
            )?;
            phases.extend(cheaper(ring_phases, direct_phase));
        }
        CollectiveKind::AllGather { .. } => {
            let ring_phases: Vec<PhaseCost> = ring
                .phase(label("all-gather"), input_bytes, busiest(&c.inputs), None)?
                .into_iter()
                .collect();
            let direct_phase = direct(
                exe,
                system,
                label("all-gather, direct"),
                &pairs(&groups, &place, |_, _| input_bytes),
                busiest(&c.inputs),
                None,
            )?;
            phases.extend(cheaper(ring_phases, direct_phase));
        }
        CollectiveKind::ReduceScatter { op, .. } => {
            let chunk = c.outputs.iter().map(|&t| bytes_of(exe, t)).sum();
            let d = dtype(&c.inputs).unwrap_or(DType::F32);
            let per_tile = busiest(&c.outputs);
            let ring_phases: Vec<PhaseCost> = ring
                .phase(
                    label(&format!("reduce-scatter ({})", op_name(*op))),
                    chunk,
                    per_tile,
                    Some((d, elements_of(per_tile.min(chunk), d))),
                )?
                .into_iter()
                .collect();
            let direct_phase = direct(
                exe,
                system,
                label(&format!("reduce-scatter ({}), direct", op_name(*op))),
                &pairs(&groups, &place, |_, _| chunk),
                per_tile,
                Some((d, elements_of(per_tile.min(chunk), d) * (n - 1))),
            )?;
            phases.extend(cheaper(ring_phases, direct_phase));
        }
        CollectiveKind::AllToAll { .. } => {
            let part = input_bytes.div_ceil(n);
            let transfers = pairs(&groups, &place, |_, _| part);
            phases.extend(direct(
                exe,
                system,
                label("all-to-all, direct"),
                &transfers,
                busiest(&c.inputs),
                None,
            )?);
        }
        CollectiveKind::Permute { pairs } => {
            let transfers: Vec<Transfer> = pairs
                .iter()
                .flat_map(|&(s, t)| place.transfers(s, t, input_bytes))
                .collect();
            phases.extend(direct(
                exe,
                system,
                label("permute, direct"),
                &transfers,
                busiest(&c.inputs),
                None,
            )?);
        }
        CollectiveKind::ReplicaIndex { .. } => {}
    }
    if phases.is_empty() {
        // Nothing crosses a link (a group of one, or the replica's own number): the values
        // are copied on their tiles.
        let bytes = busiest(&c.inputs).max(busiest(&c.outputs));
        phases.push(PhaseCost {
            name: label("on tile"),
            compute_cycles: cost::on_tile_copy_cycles(bytes),
            sync_cycles: 0,
            exchange_cycles: 0,
            bytes_over_links: 0,
        });
    }
    Ok(CollectiveCost { phases })
}

/// One step of simultaneous direct transfers, then (`combine`: type and elements on the
/// busiest tile) combining what arrived.
fn direct(
    exe: &Executable,
    system: &System,
    label: String,
    transfers: &[Transfer],
    busiest_tile: u64,
    combine: Option<(DType, u64)>,
) -> Result<Option<PhaseCost>, RuntimeError> {
    let link = transfer_cycles(system, transfers)?;
    if link.bytes_over_links == 0 {
        return Ok(None);
    }
    let mut name = label;
    let most = transfers.iter().map(|t| t.bytes).max().unwrap_or(0);
    let _ = write!(
        name,
        ", {} sends of up to {most} B",
        transfers.iter().filter(|t| t.from != t.to).count()
    );
    if let Some((from, to, hops)) = link.slowest {
        let _ = write!(name, "; slowest link IPU {from} -> {to} ({hops} hops)");
    }
    Ok(Some(PhaseCost {
        name,
        compute_cycles: combine.map_or(0, |(d, elements)| combine_cycles(exe, d, elements)),
        sync_cycles: system.global_sync_cycles(),
        exchange_cycles: link
            .cycles
            .max(cost::exchange_cycles(&exe.target, busiest_tile)),
        bytes_over_links: link.bytes_over_links,
    }))
}

/// Every member of every group sending `bytes(i, j)` to every other member `j`.
fn pairs(
    groups: &[Vec<usize>],
    place: &Placement,
    bytes: impl Fn(usize, usize) -> u64,
) -> Vec<Transfer> {
    let mut out = Vec::new();
    for g in groups {
        for &i in g {
            for &j in g.iter().filter(|&&j| j != i) {
                out.extend(place.transfers(i, j, bytes(i, j)));
            }
        }
    }
    out
}

/// The ring's phases or the direct exchange, whichever takes fewer cycles (the ring when
/// equal): GCL sends small values directly, where the ring's `2(n - 1)` steps would cost
/// more syncs and link latencies than bandwidth.
fn cheaper(ring: Vec<PhaseCost>, direct: Option<PhaseCost>) -> Vec<PhaseCost> {
    let cycles = |p: &PhaseCost| p.compute_cycles + p.sync_cycles + p.exchange_cycles;
    match direct {
        Some(d) if ring.is_empty() || cycles(&d) < ring.iter().map(cycles).sum() => vec![d],
        _ => ring,
    }
}

fn op_name(op: ReduceOp) -> &'static str {
    match op {
        ReduceOp::Sum => "sum",
        ReduceOp::Product => "product",
        ReduceOp::Max => "max",
        ReduceOp::Min => "min",
        ReduceOp::And => "and",
        ReduceOp::Or => "or",
    }
}

fn invalid(m: String) -> RuntimeError {
    RuntimeError::InvalidExecutable(m)
}

/// Checks the replication and every collective: replicas of one IPU each on a system that
/// exists, groups that hold every replica once in groups of one size, and inputs and
/// outputs of the types and sizes the kind needs.
pub(crate) fn check(exe: &Executable) -> Result<(), RuntimeError> {
    let replicas = exe.replication.replicas;
    if replicas == 0 {
        return Err(invalid("a replication factor of 0".into()));
    }
    if replicas > 1 {
        replicated_system(exe)?;
    }
    for c in &exe.collectives {
        check_one(exe, c, replicas).map_err(|m| invalid(format!("collective {}: {m}", c.name)))?;
    }
    Ok(())
}

fn check_one(exe: &Executable, c: &Collective, replicas: usize) -> Result<(), String> {
    let tensor = |t: TensorId| {
        exe.tensors
            .get(t.0 as usize)
            .ok_or_else(|| format!("tensor {} does not exist", t.0))
    };
    let ins = c
        .inputs
        .iter()
        .map(|&t| tensor(t))
        .collect::<Result<Vec<_>, _>>()?;
    let outs = c
        .outputs
        .iter()
        .map(|&t| tensor(t))
        .collect::<Result<Vec<_>, _>>()?;
    let groups = c.groups_of(replicas);
    let mut seen = vec![false; replicas];
    for g in &groups {
        if g.len() != groups[0].len() || g.is_empty() {
            return Err(format!("groups of different sizes: {groups:?}"));
        }
        for &r in g {
            match seen.get_mut(r) {
                None => return Err(format!("replica {r} does not exist ({replicas} replicas)")),
                Some(true) => return Err(format!("replica {r} is in two groups")),
                Some(s) => *s = true,
            }
        }
    }
    if seen.iter().any(|s| !s)
        && !matches!(
            c.kind,
            CollectiveKind::Permute { .. } | CollectiveKind::ReplicaIndex { .. }
        )
    {
        return Err(format!("the groups {groups:?} leave a replica out"));
    }
    let n = groups[0].len();
    let same = |a: &crate::Tensor, b: &crate::Tensor| {
        if a.dtype != b.dtype || a.elements != b.elements {
            Err(format!(
                "{} ({} x {:?}) and {} ({} x {:?}) do not fit",
                a.name, a.elements, a.dtype, b.name, b.elements, b.dtype
            ))
        } else {
            Ok(())
        }
    };
    let one_each = || {
        if ins.len() == 1 && outs.len() == 1 {
            Ok(())
        } else {
            Err(format!(
                "takes one input and one output, has {} and {}",
                ins.len(),
                outs.len()
            ))
        }
    };
    let split = |t: &crate::Tensor, outer: usize| {
        if outer == 0 || !t.elements.is_multiple_of(outer * n) {
            Err(format!(
                "{} ({} elements) does not split into {outer} rows of {n} blocks",
                t.name, t.elements
            ))
        } else {
            Ok(())
        }
    };
    match &c.kind {
        CollectiveKind::AllReduce { .. } => {
            if ins.len() != outs.len() || ins.is_empty() {
                return Err(format!("{} inputs but {} outputs", ins.len(), outs.len()));
            }
            for (a, b) in ins.iter().zip(&outs) {
                same(a, b)?;
            }
        }
        CollectiveKind::AllGather { blocks } => {
            one_each()?;
            if ins[0].dtype != outs[0].dtype || ins[0].elements * n != outs[0].elements {
                return Err(format!(
                    "gathers {} elements from each of {n} members into {} elements",
                    ins[0].elements, outs[0].elements
                ));
            }
            split(outs[0], blocks.outer)?;
        }
        CollectiveKind::ReduceScatter { blocks, .. } => {
            one_each()?;
            if ins[0].dtype != outs[0].dtype || outs[0].elements * n != ins[0].elements {
                return Err(format!(
                    "scatters {} elements among {n} members into {} elements each",
                    ins[0].elements, outs[0].elements
                ));
            }
            split(ins[0], blocks.outer)?;
        }
        CollectiveKind::AllToAll { blocks } => match blocks {
            Some(b) => {
                one_each()?;
                same(ins[0], outs[0])?;
                split(ins[0], b.outer)?;
                split(outs[0], b.outer)?;
            }
            None => {
                if ins.len() != n || outs.len() != n {
                    return Err(format!(
                        "{} inputs and {} outputs for groups of {n}",
                        ins.len(),
                        outs.len()
                    ));
                }
                for (a, b) in ins.iter().zip(&outs) {
                    same(a, b)?;
                }
            }
        },
        CollectiveKind::Permute { pairs } => {
            one_each()?;
            same(ins[0], outs[0])?;
            let (mut from, mut to) = (vec![false; replicas], vec![false; replicas]);
            for &(s, t) in pairs {
                for (r, list, what) in [(s, &mut from, "source"), (t, &mut to, "target")] {
                    match list.get_mut(r) {
                        None => {
                            return Err(format!(
                                "pair ({s}, {t}) names replica {r}, which does not exist"
                            ));
                        }
                        Some(true) => return Err(format!("replica {r} is a {what} twice")),
                        Some(x) => *x = true,
                    }
                }
            }
        }
        CollectiveKind::ReplicaIndex { stride, modulo } => {
            if *stride == 0 || *modulo == 0 {
                return Err("a replica index with a stride or modulo of 0".into());
            }
            if !ins.is_empty()
                || outs.len() != 1
                || outs[0].dtype != DType::U32
                || outs[0].elements != 1
            {
                return Err("writes one u32 element and reads nothing".into());
            }
        }
    }
    if let CollectiveKind::AllReduce { op } | CollectiveKind::ReduceScatter { op, .. } = &c.kind
        && matches!(op, ReduceOp::And | ReduceOp::Or)
        && ins.iter().any(|t| t.dtype.is_float())
    {
        return Err(format!("{} of floats", op_name(*op)));
    }
    Ok(())
}
