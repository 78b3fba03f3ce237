//! Scatter spread over tiles, as popops' multi-update does it. The operand is cut into
//! slices along the dimensions the indices address with one-element windows (a window
//! then lies wholly in one slice or in none); each slice's tile receives the indices and
//! updates in chunks and applies those that land in its slice (indices shifted by the
//! slice's start: XLA skips windows out of bounds, so updates for other slices fall away).
//! When the combiner adds, the updates are also cut into groups: the tiles of group `g`
//! apply only its updates, group 0 onto the operand's slice and the others onto slices of
//! the additive identity, and the groups' partial results are summed after (as popops'
//! multiUpdateAdd splits its indices and reduces the partials). A window dimension the
//! updates cover whole (an embedding's columns) may be cut too, each part receiving only
//! its block of every update row, as popops' embedding plan splits the unsliced
//! dimension. Chunks run one compute set after another.

use super::codelet_split::{Along, Axis, Cut, Split};
use super::mapping::Piece;
use super::{Arr, Here, Lowerer, Value};
use crate::CompileError;
use codegen::ReduceOp;
use runtime::cost::VertexCost;
use runtime::{CodeletVertex, Program, Region, Run, RunSource};
use xla_ir::literal::{ArrayData, ArrayLiteral, Literal};
use xla_ir::{ArrayShape, BinaryOp, Computation, ElementType, Instruction, Module, Op, Shape};

/// Bytes of indices and updates a tile receives per chunk.
const CHUNK_BYTES: u64 = 96 * 1024;

/// How a scatter's windows meet the operand: PopLibs costs its two vertices differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Combine {
    /// The window replaces the operand's elements (`MultiUpdate`).
    Assign,
    /// An op combines them (`MultiUpdateOp`: add, max, ...).
    Op,
}

/// Tile cycles of one part applying `offsets` windows of `window` elements of `bytes`
/// bytes each to a slice of `slots` windows. The slots are shared among the `workers`:
/// each checks every offset and applies those landing in its share (the offsets assumed
/// spread evenly). As PopLibs estimates its vertices (poplibs
/// `lib/popops/PerformanceEstimation.cpp`): combining, `getMultiUpdateOpCycleEstimate` (a
/// worker takes 27 cycles, 28 for other than 4-byte elements, then per offset in its share
/// 11 cycles (12) and 3 per further 4-byte store of the window, per offset outside it 5;
/// the workers' cycles and 25 of the supervisor); assigning, `getMultiSliceCycleEstimate`
/// (13, then 19 per offset in its share and 2 per 64-bit vector of the window (3 per 4
/// one-byte elements), 8 per offset outside it).
fn vertex_cycles(
    offsets: u64,
    window: u64,
    slots: u64,
    bytes: u64,
    combine: Combine,
    workers: u64,
) -> u64 {
    let slots = slots.max(1);
    let share = slots.div_ceil(workers.max(1));
    let inside = (offsets * share).div_ceil(slots).min(offsets);
    let outside = offsets - inside;
    let word = bytes == 4;
    let per_worker = match combine {
        Combine::Op => {
            let per_store = (4 / bytes.clamp(1, 4)).max(1);
            let per_offset = 11 + u64::from(!word) + (window.div_ceil(per_store) - 1) * 3;
            27 + u64::from(!word) + inside * per_offset + outside * 5
        }
        Combine::Assign => {
            13 + inside * super::codelet::multi_slice_offset_cycles(window, bytes) + outside * 8
        }
    };
    per_worker * workers
        + match combine {
            Combine::Op => 25,
            Combine::Assign => 0,
        }
}

/// One part's vertex: `indices` (`columns` to an index vector) placing windows of
/// `update_elements` in all into a slice of `slice_elements` elements of `bytes` bytes,
/// charged by [`vertex_cycles`].
fn part_vertex(
    slice_elements: u64,
    indices: &ArrayShape,
    columns: u64,
    update_elements: u64,
    bytes: u64,
    combine: Combine,
    workers: u64,
) -> VertexCost {
    let offsets = indices.element_count() / columns.max(1);
    let window = update_elements / offsets.max(1);
    VertexCost::Supervisor(vertex_cycles(
        offsets,
        window,
        slice_elements / window.max(1),
        bytes,
        combine,
        workers,
    ))
}

/// A part of a scatter with batching dimensions, split by blocks of them
/// (`codelet_split::split_of`): charged as the parts planned here are ([`part_vertex`]).
pub(super) fn batched_part_cost(
    module: &Module,
    op: &Op,
    in_shapes: &[Shape],
    workers: u64,
) -> Option<VertexCost> {
    let Op::Scatter { dims, to_apply, .. } = op else {
        return None;
    };
    let [operand, indices, updates] = in_shapes else {
        return None;
    };
    let (operand, indices, updates) = (
        operand.as_array()?,
        indices.as_array()?,
        updates.as_array()?,
    );
    let columns = (indices.dims.get(dims.index_vector_dim as usize)).map_or(1, |&n| n as u64);
    let combine = match assigns(module, *to_apply) {
        true => Combine::Assign,
        false => Combine::Op,
    };
    Some(part_vertex(
        operand.element_count(),
        indices,
        columns,
        updates.element_count(),
        operand.element_type.byte_size() as u64,
        combine,
        workers,
    ))
}

/// How a scatter is spread: the operand dimensions cut (with the index column addressing
/// each and its slices), the blocks of a window dimension taken whole, and the groups its
/// updates are cut into.
#[derive(Debug, Clone, PartialEq)]
struct Plan {
    cuts: Vec<(usize, usize, usize)>,
    /// `(operand dimension, update dimension, blocks)`: a window dimension the updates
    /// cover whole, cut into blocks alongside the updates' (`None`: not cut).
    columns: Option<(usize, usize, usize)>,
    groups: usize,
}

impl Plan {
    fn slices(&self) -> usize {
        self.cuts.iter().map(|c| c.2).product::<usize>() * self.blocks()
    }

    /// Blocks of the window dimension cut (1 when none is).
    fn blocks(&self) -> usize {
        self.columns.map_or(1, |c| c.2)
    }
}

/// A window dimension the updates cover whole, which a plan may cut into blocks.
#[derive(Debug, Clone, Copy)]
struct Columns {
    operand_dim: usize,
    update_dim: usize,
    /// Its elements.
    width: usize,
    /// The most blocks: blocks at least [`super::mapping::GRAIN`] wide when the operand or
    /// the updates are large (as [`super::codelet_split::LARGE`] holds other codelets to).
    most_blocks: usize,
}

/// The sizes a plan is weighed by.
struct Sizes {
    operand_bytes: u64,
    rows: usize,
    /// Elements and bytes of one row of indices (an index vector).
    index_row: (u64, u64),
    /// Elements and bytes of one row of updates.
    update_row: (u64, u64),
    /// Windows per row (index vectors per row of indices).
    offsets_per_row: u64,
    /// Windows the operand holds: its elements over a window's.
    slots: u64,
    /// Bytes of an element.
    element_bytes: u64,
    combine: Combine,
    tiles: usize,
    /// Exchange bytes a tile receives per cycle.
    bytes_per_cycle: u64,
    /// Worker contexts: a vertex on one of them issues every `workers` cycles (as
    /// [`VertexCost::Worker`] is charged).
    workers: u64,
    /// The most bytes a plan may hold on a tile at once.
    budget: u64,
}

/// Elements and bytes of one row of indices and updates as a part receives it: the index
/// vector and its block of the window.
fn part_row(plan: &Plan, z: &Sizes) -> (u64, u64) {
    let blocks = plan.blocks() as u64;
    (
        z.index_row.0 + z.update_row.0.div_ceil(blocks),
        z.index_row.1 + z.update_row.1.div_ceil(blocks),
    )
}

/// Rows of indices and updates a part receives and applies at once.
fn chunk_rows(plan: &Plan, z: &Sizes) -> usize {
    ((CHUNK_BYTES / part_row(plan, z).1.max(1)) as usize).clamp(1, z.rows)
}

/// The cycles of the busiest tile under `plan`: applying its group's rows chunk by chunk,
/// receiving them and its slice (or filling it with the identity), and, with groups,
/// receiving and adding its share of the stacked partial results.
fn estimate(plan: &Plan, z: &Sizes) -> u64 {
    let rows = z.rows.div_ceil(plan.groups) as u64;
    let chunk = (chunk_rows(plan, z) as u64).min(rows);
    let chunks = rows.div_ceil(chunk);
    let row_bytes = part_row(plan, z).1;
    let offsets = chunk * z.offsets_per_row;
    let window = (z.update_row.0 / z.offsets_per_row.max(1)).div_ceil(plan.blocks() as u64);
    let row_slices = (plan.slices() / plan.blocks()) as u64;
    let slots = z.slots.div_ceil(row_slices);
    let cycles = vertex_cycles(
        offsets,
        window,
        slots,
        z.element_bytes,
        z.combine,
        z.workers,
    );
    let work = chunks * cycles;
    // The slice arrives (group 0) or is filled (the others).
    let received = (rows * row_bytes + slice_bytes(plan, z)) / z.bytes_per_cycle;
    // The stacked partials arrive, then are added (about a word a cycle).
    let share = stacked_share(plan, z);
    let sums = share / z.bytes_per_cycle + share / 4;
    work + received + sums
}

/// Bytes of one slice of the operand under `plan`.
fn slice_bytes(plan: &Plan, z: &Sizes) -> u64 {
    z.operand_bytes.div_ceil(plan.slices() as u64)
}

/// Bytes of the stacked partial results each tile receives to sum (none without groups).
fn stacked_share(plan: &Plan, z: &Sizes) -> u64 {
    match plan.groups > 1 {
        true => z.operand_bytes * plan.groups as u64 / z.tiles as u64,
        false => 0,
    }
}

/// Bytes a tile holds at once under `plan`: its slice and the next, a chunk of rows and
/// its share of the stacked partial results.
fn held_bytes(plan: &Plan, z: &Sizes) -> u64 {
    let rows = z.rows.div_ceil(plan.groups) as u64;
    let chunk = rows.min(chunk_rows(plan, z) as u64) * part_row(plan, z).1;
    2 * slice_bytes(plan, z) + chunk + stacked_share(plan, z)
}

/// The cheapest plan: for each number of groups (powers of two up to the rows, 1 unless
/// the combiner adds) and of blocks of `columns` (powers of two up to its most, and that
/// most), the slices the remaining tiles allow, cut outermost dimension first (so slices
/// are runs of the operand where they can be). Plans with groups must hold at most
/// `budget` bytes on a tile; one group is the fallback whatever it holds.
fn choose(
    cuttable: &[(usize, usize)],
    columns: Option<Columns>,
    od: &[usize],
    adds: bool,
    z: &Sizes,
) -> Plan {
    let most_groups = if adds { z.rows.min(z.tiles) } else { 1 };
    let most_blocks = columns.map_or(1, |c| c.most_blocks.clamp(1, c.width));
    let mut block_counts: Vec<usize> = std::iter::successors(Some(1), |b| Some(b * 2))
        .take_while(|&b| b <= most_blocks)
        .collect();
    if block_counts.last() != Some(&most_blocks) {
        block_counts.push(most_blocks);
    }
    let mut best: Option<(u64, Plan)> = None;
    let mut groups = 1;
    while groups <= most_groups {
        for &blocks in block_counts.iter().filter(|&&b| b * groups <= z.tiles) {
            let mut room = z.tiles / groups / blocks;
            let cuts = cuttable
                .iter()
                .map(|&(d, column)| {
                    let parts = od[d].min(room).max(1);
                    room /= parts;
                    (d, column, parts)
                })
                .collect();
            let columns = columns
                .filter(|_| blocks > 1)
                .map(|c| (c.operand_dim, c.update_dim, blocks));
            let plan = Plan {
                cuts,
                columns,
                groups,
            };
            let cost = estimate(&plan, z);
            let fits = groups == 1 || held_bytes(&plan, z) <= z.budget;
            if fits && best.as_ref().is_none_or(|(c, _)| cost < *c) {
                best = Some((cost, plan));
            }
        }
        groups *= 2;
    }
    best.expect("one group is always weighed").1
}

impl Lowerer<'_> {
    /// Lowers a single-operand scatter split over tiles; `None` when it does not split
    /// (the caller then runs it on one tile).
    pub(crate) fn split_scatter(
        &mut self,
        here: &Here,
        operands: &[Arr],
    ) -> Result<Option<Value>, CompileError> {
        let Op::Scatter { dims, to_apply, .. } = &here.instr.op else {
            return Ok(None);
        };
        if operands.len() != 3 || !dims.input_batching_dims.is_empty() {
            return Ok(None);
        }
        let (op, idx, upd) = (&operands[0], &operands[1], &operands[2]);
        let od = op.dims();
        let (idims, udims) = (idx.dims(), upd.dims());
        let ivd = dims.index_vector_dim as usize;
        // Parts shift the indices by their slice's start, in the indices' type.
        let shiftable = matches!(idx.shape.element_type, ElementType::S32 | ElementType::U32);
        if ivd > idims.len() || !shiftable {
            return Ok(None);
        }
        // Index columns: an index vector dimension past the last is an implicit one.
        let columns_of_index = idims.get(ivd).copied().unwrap_or(1).max(1) as u64;
        // Window size of each operand dim: 1 where inserted, else the update window's.
        let window_dims: Vec<usize> = (0..od.len())
            .filter(|d| !dims.inserted_window_dims.contains(&(*d as i64)))
            .collect();
        let window = |d: usize| match window_dims.iter().position(|&w| w == d) {
            Some(j) => udims[dims.update_window_dims[j] as usize],
            None => 1,
        };
        // (operand dimension, index column) pairs a slice may be cut along, outermost first.
        let mut cuttable: Vec<(usize, usize)> = (dims.scatter_dims_to_operand_dims.iter())
            .enumerate()
            .map(|(j, &d)| (d as usize, j))
            .filter(|&(d, _)| window(d) == 1 && od[d] > 1)
            .collect();
        cuttable.sort_unstable();
        if cuttable.is_empty() {
            return Ok(None);
        }
        // Chunks along the first index batch dim and its updates dim. Indices of no batch
        // dim (one scatter index, updates all window) are one row, never grouped.
        let batch = (0..idims.len()).find(|&i| i != ivd);
        let (ib, ub) = match batch {
            Some(ib) => {
                let ub = (0..udims.len())
                    .find(|u| !dims.update_window_dims.contains(&(*u as i64)))
                    .ok_or_else(|| here.unsupported("updates with no scatter dimension"))?;
                if idims[ib] == 0 || udims[ub] == 0 {
                    return Ok(None);
                }
                (ib, ub)
            }
            None => (usize::MAX, usize::MAX),
        };
        let rows = batch.map_or(1, |ib| idims[ib]);
        let per_row = |a: &Arr| {
            let r = rows as u64;
            (a.shape.element_count() / r, a.shape.byte_size() / r)
        };
        // The innermost window dimension the updates cover whole may be cut into blocks.
        let large = |a: &Arr| a.shape.byte_size() >= super::codelet_split::LARGE;
        let columns = (window_dims.iter().enumerate().rev())
            .find(|&(_, &d)| window(d) == od[d] && od[d] > 1)
            .map(|(j, &d)| Columns {
                operand_dim: d,
                update_dim: dims.update_window_dims[j] as usize,
                width: od[d],
                most_blocks: match large(op) || large(upd) {
                    true => od[d] / super::mapping::GRAIN,
                    false => od[d],
                },
            });
        let offsets_per_row = (idx.shape.element_count() / columns_of_index)
            .div_ceil(rows as u64)
            .max(1);
        let window_elements = (upd.shape.element_count() / rows as u64 / offsets_per_row).max(1);
        let combine = match assigns(self.module, *to_apply) {
            true => Combine::Assign,
            false => Combine::Op,
        };
        let element_bytes = op.shape.element_type.byte_size() as u64;
        let sizes = Sizes {
            operand_bytes: op.shape.byte_size(),
            rows,
            index_row: per_row(idx),
            update_row: per_row(upd),
            offsets_per_row,
            slots: (op.shape.element_count() / window_elements).max(1),
            element_bytes,
            combine,
            tiles: self.tiles,
            bytes_per_cycle: self.target.exchange_bytes_per_cycle.max(1),
            workers: self.target.worker_contexts.max(1) as u64,
            // A policy, as the memory proportion is for products: half a tile.
            budget: self.target.bytes_per_tile / 2,
        };
        // Partial results may be summed after when the combiner adds (f32 partials start
        // at -0, addition's identity, so untouched elements keep their sign).
        let adds = super::reduce::simple_reducer(self.module, *to_apply) == Some(ReduceOp::Sum)
            && matches!(
                op.shape.element_type,
                ElementType::F32 | ElementType::S32 | ElementType::U32
            );
        let plan = choose(&cuttable, columns, &od, adds, &sizes);
        if plan.slices() * plan.groups < 2 {
            return Ok(None);
        }
        let split = split_of(&plan, &od, rows, ib, ub);
        let name = here.instr.name.clone();
        let chunk_rows = chunk_rows(&plan, &sizes);
        tracing::debug!(
            target: "ipuxla::plan",
            "scatter {name}: slices {:?}, {} blocks of dimension {:?}, {} groups of updates, {chunk_rows} rows a chunk, ~{} cycles",
            plan.cuts.iter().map(|c| (c.0, c.2)).collect::<Vec<_>>(),
            plan.blocks(),
            plan.columns.map(|c| c.0),
            plan.groups,
            estimate(&plan, &sizes)
        );
        let parts = split.parts();
        let start_tile = self.next_tile();
        let tpi = self.target.tiles_per_ipu;
        // Per part: its tile, its slice's cut, its rows and the shift of each index column.
        let tiles: Vec<usize> = (0..parts).map(|p| self.tile_at(start_tile + p)).collect();
        let mut slice_shapes = Vec::with_capacity(parts);
        let mut row_ranges = Vec::with_capacity(parts);
        let mut shifts: Vec<Vec<(usize, i32)>> = Vec::with_capacity(parts);
        // Each part's slice as it stands: group 0's from the operand, the others' from one
        // tensor of the identity (a slice on each of their tiles, filled in one go).
        let mut identity_pieces = Vec::new();
        let mut cuts = Vec::with_capacity(parts);
        for (p, &tile) in tiles.iter().enumerate() {
            let cut = split.operand_cut(0, p, &od);
            let rows_cut = split.operand_cut(1, p, &idims);
            let (r0, rn) = rows_cut.first().map_or((0, rows), |c| (c.1, c.2));
            row_ranges.push((r0, rn));
            let at = |d: usize| cut.iter().find(|c| c.0 == d).map_or(0, |c| c.1);
            shifts.push(
                plan.cuts
                    .iter()
                    .map(|&(d, col, _)| (col, at(d) as i32))
                    .collect(),
            );
            let shape = super::codelet::cut_shape(&op.shape, &cut);
            let len = shape.element_count() as usize;
            if r0 != 0 {
                let start = identity_pieces
                    .last()
                    .map_or(0, |q: &Piece| q.start + q.len);
                identity_pieces.push(Piece { tile, start, len });
            }
            cuts.push(cut);
            slice_shapes.push(shape);
        }
        let firsts: Vec<usize> = (0..parts).filter(|&p| row_ranges[p].0 == 0).collect();
        let placed = self.operand_on_tiles(
            op,
            &firsts.iter().map(|&p| cuts[p].clone()).collect::<Vec<_>>(),
            &firsts.iter().map(|&p| tiles[p]).collect::<Vec<_>>(),
            &format!("{name}.slices"),
        );
        let mut states: Vec<Option<Region>> = vec![None; parts];
        for (&p, (_, region)) in firsts.iter().zip(placed) {
            states[p] = Some(region);
        }
        if let Some(last) = identity_pieces.last() {
            let total = last.start + last.len;
            let shape = ArrayShape::new(op.shape.element_type, &[total as i64]);
            let identity =
                self.arr_mapped(&format!("{name}.identity"), &shape, identity_pieces.clone());
            let fill = match op.shape.element_type {
                ElementType::F32 => (-0.0f32).to_le_bytes().to_vec(),
                _ => vec![0; 4],
            };
            let mut runs = runtime::Runs::new();
            runs.push(Run {
                source: RunSource::Fill,
                dst_start: 0,
                len: total,
            });
            self.rearrange_into(
                identity.tensor,
                Vec::new(),
                runs,
                fill,
                &format!("{name}.identity"),
            );
            let mut pieces = identity_pieces.iter();
            for state in states.iter_mut().filter(|s| s.is_none()) {
                let q = pieces.next().expect("a piece per identity slice");
                *state = Some(Region {
                    tensor: identity.tensor,
                    start: q.start,
                    len: q.len,
                });
            }
        }
        let mut states: Vec<Region> = states
            .into_iter()
            .map(|s| s.expect("every slice is the operand's or the identity's"))
            .collect();
        let mut finals: Vec<Option<Arr>> = vec![None; parts];
        let chunks = row_ranges
            .iter()
            .map(|&(_, n)| n.div_ceil(chunk_rows))
            .max()
            .unwrap_or(0);
        type Key = (Vec<ArrayShape>, Vec<(usize, i32)>);
        let mut codelets: Vec<(Key, runtime::CodeletId)> = Vec::new();
        for c in 0..chunks {
            let mut vertices = Vec::new();
            let mut reads = Vec::new();
            // The parts with rows left, and this chunk of their rows on each one's tile.
            let active: Vec<usize> = (0..parts)
                .filter(|&p| c * chunk_rows < row_ranges[p].1)
                .collect();
            let rows_cut = |p: usize, dim: usize| -> Cut {
                if batch.is_none() {
                    return Cut::new();
                }
                let (r0, rn) = row_ranges[p];
                let first = c * chunk_rows;
                smallvec::smallvec![(dim, r0 + first, chunk_rows.min(rn - first))]
            };
            let active_tiles: Vec<usize> = active.iter().map(|&p| tiles[p]).collect();
            let idx_cuts: Vec<Cut> = active.iter().map(|&p| rows_cut(p, ib)).collect();
            // The updates' rows, and their block of the window when it is cut.
            let upd_cuts: Vec<Cut> = (active.iter())
                .map(|&p| {
                    let mut cut = rows_cut(p, ub);
                    cut.extend((split.operand_cut(2, p, &udims).into_iter()).filter(|c| c.0 != ub));
                    cut
                })
                .collect();
            let ics =
                self.operand_on_tiles(idx, &idx_cuts, &active_tiles, &format!("{name}.idx{c}"));
            let ucs =
                self.operand_on_tiles(upd, &upd_cuts, &active_tiles, &format!("{name}.upd{c}"));
            for ((&p, ic), uc) in active.iter().zip(ics).zip(ucs) {
                let tile = tiles[p];
                let slice = &slice_shapes[p];
                let state = states[p];
                let mut in_shapes = vec![slice.clone(), ic.0, uc.0];
                let inputs = [state, ic.1, uc.1];
                // Parts of equal shapes and shifts run one codelet.
                let key = (std::mem::take(&mut in_shapes), shifts[p].clone());
                let id = match codelets.iter().find(|(k, _)| *k == key) {
                    Some((_, id)) => *id,
                    None => {
                        let (in_shapes, shifts) = &key;
                        let [.., indices, updates] = &in_shapes[..] else {
                            unreachable!("the indices and updates are the last inputs")
                        };
                        let module = shifted_scatter(
                            self.module,
                            here.instr,
                            slice,
                            indices,
                            updates,
                            shifts,
                        );
                        let cost = part_vertex(
                            slice.element_count(),
                            indices,
                            columns_of_index,
                            updates.element_count(),
                            element_bytes,
                            combine,
                            sizes.workers,
                        );
                        let id =
                            self.add_eval_codelet(here, module, in_shapes.clone(), cost, None)?;
                        codelets.push((key, id));
                        id
                    }
                };
                let out = self.arr_mapped(
                    &format!("{name}.c{c}.p{p}"),
                    slice,
                    super::mapping::single(slice.element_count() as usize, tile),
                );
                vertices.push(CodeletVertex {
                    codelet: id,
                    ipu: tile / tpi,
                    tile: tile % tpi,
                    inputs: inputs.to_vec(),
                    outputs: vec![out.whole()],
                });
                reads.extend(inputs.iter().map(|r| r.tensor));
                states[p] = out.whole();
                finals[p] = Some(out);
            }
            for t in reads {
                self.use_tensor(t);
            }
            let cs =
                self.b
                    .compute_set_with_codelets(&format!("{name}.chunk{c}"), Vec::new(), vertices);
            self.emit(Program::Execute(cs));
        }
        let finals: Vec<Arr> = finals
            .into_iter()
            .map(|s| s.expect("every part ran at least one chunk (groups <= rows)"))
            .collect();
        let shape = here.array()?.clone();
        let out = self.assembled(&name, &shape, &finals, &split);
        Ok(Some(Value::Array(out)))
    }
}

/// Whether the combiner `comp` returns its second parameter (the update), as an assigning
/// scatter's does, directly or through a copy.
fn assigns(module: &Module, comp: xla_ir::ids::CompId) -> bool {
    let c = module.computation(comp);
    let mut at = c.instr(c.root);
    while let (Op::Unary(xla_ir::UnaryOp::Copy), [x]) = (&at.op, &at.operands[..]) {
        at = c.instr(*x);
    }
    matches!(at.op, Op::Parameter { number: 1 })
}

/// `plan` as a [`Split`]: an axis per cut operand dimension (the indices and updates read
/// whole along it, but along a window dimension cut into blocks, where the updates are
/// cut alike) and, with groups, a summed axis cutting the indices' and updates' rows.
fn split_of(plan: &Plan, od: &[usize], rows: usize, ib: usize, ub: usize) -> Split {
    let scaled = |dim| Some(Along::Scaled { dim, scale: 1 });
    let mut axes: Vec<Axis> = plan
        .cuts
        .iter()
        .filter(|c| c.2 > 1)
        .map(|&(d, _, parts)| (d, parts, None))
        .chain(plan.columns.map(|(d, u, blocks)| (d, blocks, scaled(u))))
        .map(|(d, parts, updates)| Axis {
            out_dim: d,
            units: od[d],
            parts,
            out_scale: 1,
            operands: vec![scaled(d), None, updates],
            fixed: false,
            sums: false,
        })
        .collect();
    axes.sort_by_key(|a| a.out_dim);
    if plan.groups > 1 {
        axes.push(Axis {
            out_dim: usize::MAX,
            units: rows,
            parts: plan.groups,
            out_scale: 1,
            operands: vec![
                None,
                Some(Along::Scaled { dim: ib, scale: 1 }),
                Some(Along::Scaled { dim: ub, scale: 1 }),
            ],
            fixed: false,
            sums: true,
        });
    }
    Split {
        axes,
        ungroup: false,
    }
}

/// `scatter(slice, indices - shifts, updates)` as a module of those three parameters.
/// `shifts`: (index column, start of the slice along the dimension it addresses).
fn shifted_scatter(
    module: &Module,
    instr: &Instruction,
    slice: &ArrayShape,
    indices: &ArrayShape,
    updates: &ArrayShape,
    shifts: &[(usize, i32)],
) -> Module {
    let mut m = Module::new(format!("{}.codelet", instr.name));
    let Op::Scatter {
        dims,
        to_apply,
        indices_are_sorted,
        unique_indices,
    } = &instr.op
    else {
        unreachable!("called for a scatter")
    };
    let reducer = m.import_computation(module, *to_apply, &mut Default::default());
    let op = Op::Scatter {
        dims: dims.clone(),
        to_apply: reducer,
        indices_are_sorted: *indices_are_sorted,
        unique_indices: *unique_indices,
    };
    let ivd = dims.index_vector_dim;
    // An index vector dimension past the last is an implicit one of one column.
    let implicit = ivd as usize == indices.dims.len();
    let cols = indices.dims.get(ivd as usize).map_or(1, |&n| n as usize);
    let mut offsets = vec![0i32; cols];
    for &(column, start) in shifts {
        offsets[column] = start;
    }
    // The shifts in the indices' own type (s32 or u32: `split_scatter` takes no other).
    let index_type = indices.element_type;
    let offsets = match index_type {
        ElementType::U32 => ArrayData::U32(offsets.iter().map(|&o| o as u32).collect()),
        _ => ArrayData::S32(offsets),
    };
    let mut e = Computation::new("entry");
    let mut number = 0;
    let mut param = |e: &mut Computation, s: &ArrayShape| {
        let id = e.push(Instruction::new(
            format!("p{number}"),
            Op::Parameter { number },
            &[],
            Shape::Array(s.clone()),
        ));
        number += 1;
        id
    };
    let slice_shape = Shape::Array(ArrayShape::new(slice.element_type, &slice.dims));
    let base = param(&mut e, slice);
    let p1 = param(&mut e, indices);
    let p2 = param(&mut e, updates);
    let (offsets_dims, along): (&[i64], Vec<i64>) = match implicit {
        true => (&[], vec![]),
        false => (&[cols as i64], vec![ivd]),
    };
    let lit = ArrayLiteral::new(ArrayShape::new(index_type, offsets_dims), offsets)
        .expect("shape matches data");
    let c = e.push(Instruction::new(
        "offsets",
        Op::Constant {
            literal: Literal::Array(lit),
        },
        &[],
        Shape::array(index_type, offsets_dims),
    ));
    let idx_shape = Shape::Array(ArrayShape::new(index_type, &indices.dims));
    let b = e.push(Instruction::new(
        "offsets.b",
        Op::Broadcast { dimensions: along },
        &[c],
        idx_shape.clone(),
    ));
    let shifted = e.push(Instruction::new(
        "shifted",
        Op::Binary(BinaryOp::Subtract),
        &[p1, b],
        idx_shape,
    ));
    e.root = e.push(Instruction::new(
        instr.name.clone(),
        op,
        &[base, shifted, p2],
        slice_shape,
    ));
    m.entry = m.add_computation(e);
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(rows: usize, tiles: usize) -> Sizes {
        Sizes {
            operand_bytes: 32 * 14 * 14 * 32 * 4,
            rows,
            index_row: (4, 16),
            update_row: (1, 4),
            offsets_per_row: 1,
            slots: 32 * 14 * 14 * 32,
            element_bytes: 4,
            combine: Combine::Op,
            tiles,
            bytes_per_cycle: 4,
            workers: 6,
            budget: 312 * 1024,
        }
    }

    /// XLA's rewritten pool gradient (50 176 one-element updates into a [32,14,14,32]
    /// operand): adding, the updates are cut into groups and the cycles fall by orders of
    /// magnitude against slices alone; assigning, only slices.
    #[test]
    fn added_updates_are_cut_into_groups() {
        let od = [32, 14, 14, 32];
        let cuttable = [(0, 0), (1, 1), (2, 2), (3, 3)];
        let z = sizes(50_176, 1472);
        let adding = choose(&cuttable, None, &od, true, &z);
        let assigning = choose(&cuttable, None, &od, false, &z);
        assert!(adding.groups > 1, "{adding:?}");
        assert_eq!(assigning.groups, 1);
        assert!(adding.slices() * adding.groups <= 1472, "{adding:?}");
        assert!(
            assigning.slices() <= 1472 && assigning.slices() > 32,
            "{assigning:?}"
        );
        assert!(estimate(&adding, &z) * 10 < estimate(&assigning, &z));
        let tight = Sizes { budget: 4096, ..z };
        assert_eq!(
            choose(&cuttable, None, &od, true, &tight).groups,
            1,
            "groups must fit the budget"
        );
    }

    #[test]
    fn groups_never_outnumber_rows_and_outer_dimensions_are_cut_first() {
        let od = [4, 1000];
        let z = Sizes {
            operand_bytes: 16_000,
            ..sizes(3, 1472)
        };
        let plan = choose(&[(0, 0), (1, 1)], None, &od, true, &z);
        assert!(plan.groups <= 3, "{plan:?}");
        assert_eq!(plan.cuts[0], (0, 0, 4), "{plan:?}");
    }

    /// An embedding's gradient (2 048 rows of 256 into a 30000x256 table): each part
    /// receiving every whole row scans all of them; blocks of the columns cut that work, no
    /// narrower than 16 elements for arrays this large.
    #[test]
    fn a_window_dimension_taken_whole_is_cut_into_blocks() {
        let od = [30_000, 256];
        let z = Sizes {
            operand_bytes: 30_000 * 256 * 4,
            index_row: (1, 4),
            update_row: (256, 1024),
            slots: 30_000,
            ..sizes(2048, 1472)
        };
        let columns = Columns {
            operand_dim: 1,
            update_dim: 1,
            width: 256,
            most_blocks: 16,
        };
        let rows_only = choose(&[(0, 0)], None, &od, true, &z);
        let plan = choose(&[(0, 0)], Some(columns), &od, true, &z);
        assert_eq!(plan.columns, Some((1, 1, 16)), "{plan:?}");
        assert!(plan.slices() * plan.groups <= 1472, "{plan:?}");
        assert!(estimate(&plan, &z) * 4 < estimate(&rows_only, &z));
    }

    /// PopLibs' estimates at a point worked by hand: 12 windows of 64 f32 elements onto a
    /// slice of 60 slots, 10 per worker, so 2 offsets land in a worker's share and 10 do
    /// not. Adding: 6 x (27 + 2 x (11 + 63 x 3) + 10 x 5) + 25; assigning:
    /// 6 x (13 + 2 x (19 + 32 x 2) + 10 x 8).
    #[test]
    fn vertices_cost_what_poplibs_estimates() {
        assert_eq!(vertex_cycles(12, 64, 60, 4, Combine::Op, 6), 2_887);
        assert_eq!(vertex_cycles(12, 64, 60, 4, Combine::Assign, 6), 1_554);
        // Fewer slots than workers: every offset lands in the one share there is.
        assert_eq!(
            vertex_cycles(3, 2, 1, 2, Combine::Op, 6),
            6 * (28 + 3 * 12) + 25
        );
    }
}
