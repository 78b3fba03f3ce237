//! How a codelet op splits over tiles: along one or more result dimensions at once (the
//! parts are every combination of the dimensions' ranges), each part the same op on slices
//! of its operands. A dimension of a window op splits where its windows do not overlap
//! (the operand slice is the windows' elements); a convolution splits by batch, by bands of
//! output rows (each reading the input rows its windows cover, its padding recomputed), by
//! output features and, when its result is smaller than its operands (a weight gradient),
//! by input features with the partial results summed after, as PopLibs' convolution
//! planner splits them. How many parts each dimension gets is chosen by the cycles a part
//! would take on its tile: its compute, the operand bytes it receives and, when the parts'
//! results are not runs of the whole, the copy that assembles them.

use super::Here;
use super::dot::part;
use runtime::cost::{VertexCost, tile_cycles};
use smallvec::SmallVec;
use xla_ir::Op;
use xla_ir::attributes::WindowDim;

/// The slices one part reads or writes of one array: `(dimension, start, length)` for each
/// dimension that is cut (none: the whole array).
pub(crate) type Cut = SmallVec<[(usize, usize, usize); 2]>;

/// How an operand is cut along an axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Along {
    /// `scale` of its elements per unit (the last part also takes what follows the last
    /// whole unit).
    Scaled { dim: usize, scale: usize },
    /// What the windows of the part's units read: unit `u`'s window starts at
    /// `u * stride - pad_low` and spans `span` elements. The slice is clipped to the
    /// operand; the part's op pads the rest (a convolution's input along its spatial
    /// dimension `window`).
    Windows {
        dim: usize,
        stride: usize,
        pad_low: usize,
        span: usize,
        window: usize,
    },
}

/// One result dimension cut into ranges, and what each operand reads along it. The cut is
/// made in units (result elements, or windows of a window op), `parts` ranges of them.
#[derive(Debug, Clone)]
pub(crate) struct Axis {
    /// The result dimension cut.
    pub out_dim: usize,
    /// Units along it.
    pub units: usize,
    /// Ranges of units: one per part along this axis.
    pub parts: usize,
    /// Result elements per unit.
    pub out_scale: usize,
    /// Per operand, how it is cut alongside; `None`: every part reads the whole operand
    /// along this axis.
    pub operands: Vec<Option<Along>>,
    /// The parts are fixed at one per unit (a grouped convolution's groups).
    pub fixed: bool,
    /// The axis cuts a contracted dimension (a convolution's input features): the parts
    /// along it compute partial results of the whole block, summed after. `out_dim` is
    /// `usize::MAX` (it cuts no result dimension; it sorts last).
    pub sums: bool,
}

impl Axis {
    fn free(out_dim: usize, units: usize, out_scale: usize, operands: Vec<Option<Along>>) -> Axis {
        Axis {
            out_dim,
            units,
            parts: 1,
            out_scale,
            operands,
            fixed: false,
            sums: false,
        }
    }

    /// Range `(start, length)` of part `i` along a dimension of `size` elements holding
    /// `scale` elements per unit; the last part also takes the elements after the last
    /// whole unit (those no window reads).
    fn range(&self, i: usize, size: usize, scale: usize) -> (usize, usize) {
        let (u0, ulen) = part(self.units, self.parts, i);
        let start = u0 * scale;
        let end = if i + 1 == self.parts {
            size
        } else {
            (u0 + ulen) * scale
        };
        (start, end - start)
    }

    /// Part `i`'s slice of an operand cut `along`, whose dimension has `size` elements:
    /// `(dimension, start, length)`, and the padding its op needs before and after it
    /// (zero but for windows).
    fn operand_range(
        &self,
        i: usize,
        along: Along,
        size: usize,
    ) -> ((usize, usize, usize), (i64, i64)) {
        match along {
            Along::Scaled { dim, scale } => {
                let (s, len) = self.range(i, size, scale);
                ((dim, s, len), (0, 0))
            }
            Along::Windows {
                dim,
                stride,
                pad_low,
                span,
                ..
            } => {
                let (u0, ulen) = part(self.units, self.parts, i);
                let lo = (u0 * stride) as i64 - pad_low as i64;
                let hi = ((u0 + ulen - 1) * stride + span) as i64 - pad_low as i64;
                let start = lo.clamp(0, size as i64);
                let end = hi.clamp(start, size as i64);
                let slice = (dim, start as usize, (end - start) as usize);
                (slice, (start - lo, hi - end))
            }
        }
    }
}

/// How an op splits over tiles.
#[derive(Debug, Clone)]
pub(crate) struct Split {
    /// The axes, the first outermost (in the order of their result dimensions).
    pub axes: Vec<Axis>,
    /// Applied to each part's op (a grouped convolution's groups become parts).
    pub ungroup: bool,
}

impl Split {
    /// Parts in all.
    pub fn parts(&self) -> usize {
        self.axes.iter().map(|a| a.parts).product()
    }

    /// Part `p`'s index along each axis (the first axis outermost).
    fn indices(&self, mut p: usize) -> SmallVec<[usize; 4]> {
        let mut idx: SmallVec<[usize; 4]> = SmallVec::from_elem(0, self.axes.len());
        for (i, a) in self.axes.iter().enumerate().rev() {
            idx[i] = p % a.parts;
            p /= a.parts;
        }
        idx
    }

    /// What part `p` reads of operand `k`, whose dimensions are `dims`.
    pub fn operand_cut(&self, k: usize, p: usize, dims: &[usize]) -> Cut {
        let idx = self.indices(p);
        self.axes
            .iter()
            .zip(&idx)
            .filter(|(a, _)| a.parts > 1 || a.fixed)
            .filter_map(|(a, &i)| {
                let along = a.operands[k]?;
                Some(a.operand_range(i, along, dims[dim_of(along)]).0)
            })
            .collect()
    }

    /// The padding part `p`'s op needs along each window dimension of operand `k` (of
    /// `dims`) that is cut in windows: `(window dimension, low, high)`.
    pub fn window_pads(
        &self,
        k: usize,
        p: usize,
        dims: &[usize],
    ) -> SmallVec<[(usize, i64, i64); 2]> {
        let idx = self.indices(p);
        self.axes
            .iter()
            .zip(&idx)
            .filter(|(a, _)| a.parts > 1)
            .filter_map(|(a, &i)| match a.operands[k]? {
                along @ Along::Windows { dim, window, .. } => {
                    let (_, (low, high)) = a.operand_range(i, along, dims[dim]);
                    Some((window, low, high))
                }
                Along::Scaled { .. } => None,
            })
            .collect()
    }

    /// What part `p` computes of a result leaf whose dimensions are `dims`.
    pub fn out_cut(&self, p: usize, dims: &[usize]) -> Cut {
        let idx = self.indices(p);
        self.axes
            .iter()
            .zip(&idx)
            .filter(|(a, _)| (a.parts > 1 || a.fixed) && !a.sums)
            .map(|(a, &i)| {
                let (s, len) = a.range(i, dims[a.out_dim], a.out_scale);
                (a.out_dim, s, len)
            })
            .collect()
    }

    /// Per axis, where each of its ranges starts along its result dimension (`dims`: the
    /// result's).
    pub fn starts(&self, dims: &[usize]) -> Vec<Vec<usize>> {
        self.axes
            .iter()
            .map(|a| {
                if a.sums {
                    return vec![0; a.parts];
                }
                (0..a.parts)
                    .map(|i| a.range(i, dims[a.out_dim], a.out_scale).0)
                    .collect()
            })
            .collect()
    }

    /// The part that computes result element `o` (its partial sum `sum` of it, when a
    /// contracted dimension is cut), given [`Split::starts`]; `local` becomes `o`'s
    /// coordinates within that part's block.
    pub fn locate(
        &self,
        o: &[usize],
        sum: usize,
        starts: &[Vec<usize>],
        local: &mut Vec<usize>,
    ) -> usize {
        local.clear();
        local.extend_from_slice(o);
        self.axes.iter().zip(starts).fold(0, |p, (a, st)| {
            let i = if a.sums {
                sum
            } else {
                let i = st.partition_point(|&s| s <= o[a.out_dim]) - 1;
                local[a.out_dim] -= st[i];
                i
            };
            p * a.parts + i
        })
    }

    /// Whether no part boundary falls inside a row (the last dimension) of a result of
    /// `rank` dimensions: each row of it is read from one part.
    pub fn rows_whole(&self, rank: usize) -> bool {
        rank == 0
            || !self
                .axes
                .iter()
                .any(|a| !a.sums && a.parts > 1 && a.out_dim == rank - 1)
    }

    /// How many partial results each result element is the sum of.
    pub fn sum_parts(&self) -> usize {
        self.axes
            .iter()
            .filter(|a| a.sums)
            .map(|a| a.parts)
            .product()
    }

    /// Whether every part's result is one run of the whole result's elements (row-major),
    /// so the parts can write the result in place.
    pub fn contiguous(&self, dims: &[usize]) -> bool {
        self.sum_parts() == 1
            && (0..self.parts()).all(|p| is_block_contiguous(dims, &self.out_cut(p, dims)))
    }
}

fn dim_of(along: Along) -> usize {
    match along {
        Along::Scaled { dim, .. } | Along::Windows { dim, .. } => dim,
    }
}

fn scaled(dim: usize, scale: usize) -> Option<Along> {
    Some(Along::Scaled { dim, scale })
}

/// Whether the block `cut` of an array of `dims` is one run of its row-major elements:
/// every dimension before the first of more than one element has one, every one after it
/// is whole.
fn is_block_contiguous(dims: &[usize], cut: &Cut) -> bool {
    let len = |d: usize| cut_len(dims, cut, d);
    let Some(first) = (0..dims.len()).find(|&d| len(d) > 1) else {
        return true;
    };
    (first + 1..dims.len()).all(|d| len(d) == dims[d])
}

/// The length of dimension `d` in the block `cut` of an array of `dims`.
pub(crate) fn cut_len(dims: &[usize], cut: &Cut, d: usize) -> usize {
    cut.iter().find(|c| c.0 == d).map_or(dims[d], |c| c.2)
}

/// Elements per unit along a window dimension when its windows do not overlap and read
/// only the operand (no padding or dilation): the stride. `None` otherwise.
fn disjoint_windows(w: &WindowDim) -> Option<usize> {
    (w.size >= 1
        && w.size <= w.stride
        && w.pad_low == 0
        && w.pad_high == 0
        && w.window_dilation == 1
        && w.base_dilation == 1)
        .then_some(w.stride as usize)
}

/// The axes `here`'s op can split along (one part each; fixed axes at their units), if
/// any. `operands` are the operands' dimensions, `out` the (first) result's.
pub(crate) fn split_of(here: &Here, operands: &[Vec<usize>], out: &[usize]) -> Option<Split> {
    let n_ops = operands.len();
    let half = n_ops / 2;
    let mut axes: Vec<Axis> = Vec::new();
    let mut ungroup = false;
    match &here.instr.op {
        Op::Convolution {
            window,
            dims,
            batch_group_count,
            feature_group_count,
            ..
        } => {
            let (ib, of, ob, kof) = (
                dims.input_batch as usize,
                dims.output_feature as usize,
                dims.output_batch as usize,
                dims.kernel_output_feature as usize,
            );
            if *batch_group_count > 1 {
                let g = *batch_group_count as usize;
                ungroup = true;
                axes.push(Axis {
                    fixed: true,
                    parts: g,
                    ..Axis::free(
                        of,
                        g,
                        out[of] / g,
                        vec![
                            scaled(ib, operands[0][ib] / g),
                            scaled(kof, operands[1][kof] / g),
                        ],
                    )
                });
            } else {
                axes.push(Axis::free(ob, out[ob], 1, vec![scaled(ib, 1), None]));
                // Output rows (along each spatial dimension) read the input rows their
                // windows cover, padding the rest, when every window reads some input and
                // a window spans at most a quarter of the input (else every part would
                // copy most of it: a weight gradient's window is the whole image).
                for (i, w) in window.dims.iter().enumerate() {
                    let (os, is) = (
                        dims.output_spatial[i] as usize,
                        dims.input_spatial[i] as usize,
                    );
                    let span = (w.size - 1) * w.window_dilation + 1;
                    let reads_input = w.base_dilation == 1
                        && span * 4 <= operands[0][is] as i64
                        && w.stride >= 1
                        && (0..span).contains(&w.pad_low)
                        && (0..span).contains(&w.pad_high);
                    if reads_input {
                        let windows = Along::Windows {
                            dim: is,
                            stride: w.stride as usize,
                            pad_low: w.pad_low as usize,
                            span: span as usize,
                            window: i,
                        };
                        axes.push(Axis::free(os, out[os], 1, vec![Some(windows), None]));
                    }
                }
                // Output features split apart only without feature groups (each group's
                // features read only its group's input features).
                if *feature_group_count == 1 {
                    axes.push(Axis::free(of, out[of], 1, vec![None, scaled(kof, 1)]));
                }
                // Input features (the sum over them) split with the partial results summed
                // after, as PopLibs splits a convolution's input channels, for f32 results
                // (the parts sum in f32, as the whole would: only the order of the sum
                // changes) smaller than either operand: a weight gradient, whose input
                // features are the batch. (A larger result would be copied and summed once
                // per part.)
                let elements = |d: &[usize]| d.iter().product::<usize>();
                let f32 = (here.instr.shape.as_array())
                    .is_some_and(|a| a.element_type == xla_ir::ElementType::F32);
                let reduces = operands.iter().all(|d| elements(d) > elements(out));
                if *feature_group_count == 1 && f32 && reduces {
                    let (fi, kfi) = (
                        dims.input_feature as usize,
                        dims.kernel_input_feature as usize,
                    );
                    axes.push(Axis {
                        sums: true,
                        ..Axis::free(
                            usize::MAX,
                            operands[0][fi],
                            0,
                            vec![scaled(fi, 1), scaled(kfi, 1)],
                        )
                    });
                }
            }
        }
        Op::Sort { dimension, .. } => {
            for d in (0..out.len()).filter(|&d| d != *dimension as usize) {
                axes.push(Axis::free(d, out[d], 1, vec![scaled(d, 1); n_ops]));
            }
        }
        Op::Gather {
            dims, slice_sizes, ..
        } => {
            // The result's batch dimensions pair, in order, with the indices' dimensions
            // other than the index vector's. Along a batching dimension a part takes a
            // block of the indices and the same block of the operand's paired dimension
            // (so each index still reads its own batch); along the first other, a block of
            // the indices, reading the operand whole.
            let out_batch = (0..out.len()).filter(|d| !dims.offset_dims.contains(&(*d as i64)));
            let index_batch = (0..operands[1].len()).filter(|&i| i as i64 != dims.index_vector_dim);
            let mut indices_only = false;
            for (d, i) in out_batch.zip(index_batch) {
                let mut batching = dims.start_indices_batching_dims.iter();
                match batching.position(|&b| b == i as i64) {
                    Some(j) => {
                        let od = dims.operand_batching_dims[j] as usize;
                        axes.push(Axis::free(d, out[d], 1, vec![scaled(od, 1), scaled(i, 1)]));
                    }
                    None if !indices_only => {
                        indices_only = true;
                        axes.push(Axis::free(d, out[d], 1, vec![None, scaled(i, 1)]));
                    }
                    None => {}
                }
            }
            // A slice dimension taken whole (an embedding's columns): its start is always
            // 0, so a part may gather from a block of the operand's columns, as PopLibs'
            // embedding plan splits the table's unsliced dimension.
            let window = (0..operands[0].len()).filter(|d| {
                let d = *d as i64;
                !dims.collapsed_slice_dims.contains(&d) && !dims.operand_batching_dims.contains(&d)
            });
            for (&out_d, od) in dims.offset_dims.iter().zip(window) {
                if slice_sizes[od] as usize == operands[0][od] {
                    let out_d = out_d as usize;
                    axes.push(Axis::free(out_d, out[out_d], 1, vec![scaled(od, 1), None]));
                }
            }
        }
        // A scatter with batching dimensions (the others are planned in `scatter.rs`):
        // parts take blocks of a batching dimension of the operand (and result), of the
        // indices' paired dimension and of the updates' scatter dimension paired with it,
        // so each update still lands in its own batch.
        Op::Scatter { dims, .. } if n_ops == 3 && !dims.input_batching_dims.is_empty() => {
            let ivd = dims.index_vector_dim;
            let index_batch = (0..operands[1].len()).filter(|&i| i as i64 != ivd);
            let update_scatter =
                (0..operands[2].len()).filter(|u| !dims.update_window_dims.contains(&(*u as i64)));
            for (i, u) in index_batch.zip(update_scatter) {
                let mut batching = dims.scatter_indices_batching_dims.iter();
                if let Some(j) = batching.position(|&b| b == i as i64) {
                    let od = dims.input_batching_dims[j] as usize;
                    let cuts = vec![scaled(od, 1), scaled(i, 1), scaled(u, 1)];
                    axes.push(Axis::free(od, out[od], 1, cuts));
                }
            }
        }
        // A dimension a dynamic slice takes whole, or a dynamic update covers whole: its
        // start is always 0, so parts may take blocks of it (the operand's, and the
        // update's), reading the start indices whole.
        Op::DynamicSlice { sizes } => {
            for d in (0..out.len()).filter(|&d| sizes[d] as usize == operands[0][d]) {
                let mut cuts = vec![None; n_ops];
                cuts[0] = scaled(d, 1);
                axes.push(Axis::free(d, out[d], 1, cuts));
            }
        }
        Op::DynamicUpdateSlice => {
            for d in (0..out.len()).filter(|&d| operands[1][d] == operands[0][d]) {
                let mut cuts = vec![None; n_ops];
                cuts[0] = scaled(d, 1);
                cuts[1] = scaled(d, 1);
                axes.push(Axis::free(d, out[d], 1, cuts));
            }
        }
        Op::ReduceWindow { window, .. } => {
            for (d, w) in window.dims.iter().enumerate() {
                if let Some(scale) = disjoint_windows(w) {
                    let cuts = (0..n_ops)
                        .map(|i| if i < half { scaled(d, scale) } else { None })
                        .collect();
                    axes.push(Axis::free(d, out[d], 1, cuts));
                }
            }
        }
        Op::SelectAndScatter { window, .. } => {
            // Units are the source's elements (windows); the result has the operand's shape.
            for (d, w) in window.dims.iter().enumerate() {
                if let Some(scale) = disjoint_windows(w) {
                    let cuts = vec![scaled(d, scale), scaled(d, 1), None];
                    axes.push(Axis::free(d, operands[1][d], scale, cuts));
                }
            }
        }
        Op::Reduce { dimensions, .. } => {
            let kept = (0..operands[0].len()).filter(|d| !dimensions.contains(&(*d as i64)));
            for (pos, d) in kept.enumerate() {
                let cuts = (0..n_ops)
                    .map(|i| if i < half { scaled(d, 1) } else { None })
                    .collect();
                axes.push(Axis::free(pos, out[pos], 1, cuts));
            }
        }
        Op::Dot { dims, .. } => {
            let batch = dims.lhs_batch.len();
            let d = (0..operands[0].len()).find(|d| {
                !dims.lhs_batch.contains(&(*d as i64))
                    && !dims.lhs_contracting.contains(&(*d as i64))
            })?;
            axes.push(Axis::free(batch, out[batch], 1, vec![scaled(d, 1), None]));
        }
        _ => return None,
    }
    axes.retain(|a| a.fixed || a.units > 1);
    axes.sort_by_key(|a| a.out_dim);
    (!axes.is_empty()).then_some(Split { axes, ungroup })
}

/// What one candidate split would cost a tile, as the chooser weighs it.
pub(crate) struct PartCost {
    /// One part's vertex.
    pub vertex: VertexCost,
    /// Bytes of operands one part receives.
    pub bytes_in: u64,
    /// Bytes of one part's result.
    pub bytes_out: u64,
    /// Bytes of temporaries one part needs on its tile beyond its operands and result.
    pub temporaries: u64,
    /// The shortest run of consecutive elements a part reads of an operand, or writes of
    /// the result, of at least [`LARGE`] bytes.
    pub shortest_run: usize,
    /// The split breaks a rule of the op's own (a gather's parts copying a large table
    /// more often than [`super::codelet`] allows).
    pub refused: bool,
}

/// Whether parts may cut large operands and results into runs shorter than
/// [`super::mapping::GRAIN`] elements (see [`LARGE`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FineRuns {
    /// Freely (convolutions: their AMP parts cut the kernel by output feature).
    Allowed,
    /// Only when no split of coarser runs keeps the temporaries as far within the budget
    /// (a gather or dynamic slice from a table too large for a tile, cut into column
    /// blocks).
    LastResort,
    /// Never.
    Refused,
}

/// Codelets other than convolutions cut operands and results of at least this many bytes
/// into runs of at least [`super::mapping::GRAIN`] elements: copying a large array element
/// by element for vertices that each do little would cost the host (and the program, in
/// exchange pieces) more than the split saves. (Convolutions' AMP parts are not held to
/// it: their kernel is cut by output feature, the innermost dimension, as PopLibs
/// partitions weights.)
pub(crate) const LARGE: u64 = 64 * 1024;

/// The run of consecutive elements the block `cut` of an array of `dims` is made of.
pub(crate) fn run_length(dims: &[usize], cut: &Cut) -> usize {
    let mut run = 1;
    for d in (0..dims.len()).rev() {
        let len = cut_len(dims, cut, d);
        run *= len;
        if len < dims[d] {
            break;
        }
    }
    run
}

/// The limits the chooser works within.
pub(crate) struct Room {
    /// Tiles the parts may use.
    pub tiles: usize,
    /// Worker contexts per tile (worker vertices of one tile run on them at once).
    pub workers: usize,
    /// Exchange bytes a tile receives per cycle.
    pub bytes_per_cycle: u64,
    /// Bytes of temporaries a tile may hold (`availableMemoryProportion`).
    pub budget: u64,
    /// The most parts in all.
    pub most_parts: usize,
    /// Whether parts may cut large operands and results into runs shorter than
    /// [`super::mapping::GRAIN`] elements.
    pub fine_runs: FineRuns,
}

/// Parts per tile when `parts` parts share `tiles` tiles.
pub(crate) fn parts_per_tile(parts: usize, tiles: usize) -> usize {
    parts.div_ceil(tiles.max(1)).max(1)
}

/// Chooses each free axis's parts: from one part, doubles (or takes whole) the axis whose
/// change lowers the estimate most, while one does. The estimate of a split is (bytes of
/// temporaries over the budget, whether it cuts runs finer than a last resort allows,
/// cycles): a tile runs its parts, receives their operands and,
/// unless `in_place` says the parts write the result where it lies, sends their results to
/// be assembled. Worker vertices may share a tile up to its worker contexts; supervisor
/// vertices (the AMP's) take a tile each.
pub(crate) fn choose(
    split: &mut Split,
    room: &Room,
    cost_of: impl Fn(&Split) -> PartCost,
    in_place: impl Fn(&Split) -> bool,
) {
    let score = |s: &Split| -> (u64, bool, u64) {
        let parts = s.parts();
        let c = cost_of(s);
        let per_tile = parts_per_tile(parts, room.tiles);
        let fits = match c.vertex {
            VertexCost::Worker(_) => per_tile <= room.workers,
            VertexCost::Supervisor(_) => per_tile == 1,
        };
        let fine = c.shortest_run < super::mapping::GRAIN;
        let refused = c.refused || (fine && room.fine_runs == FineRuns::Refused);
        if parts > room.most_parts || !fits || refused {
            return (u64::MAX, true, u64::MAX);
        }
        let k = per_tile as u64;
        let compute = tile_cycles(&vec![c.vertex; per_tile], room.workers);
        let out = if in_place(s) { 0 } else { c.bytes_out };
        let exchange = (k * (c.bytes_in + out)).div_ceil(room.bytes_per_cycle);
        (
            (k * c.temporaries).saturating_sub(room.budget),
            fine && room.fine_runs == FineRuns::LastResort,
            compute + exchange,
        )
    };
    let mut best = score(split);
    loop {
        let mut improved: Option<(usize, usize, (u64, bool, u64))> = None;
        for i in 0..split.axes.len() {
            let a = &split.axes[i];
            if a.fixed || a.parts == a.units {
                continue;
            }
            let (now, units) = (a.parts, a.units);
            for next in [(now * 2).min(units), units] {
                split.axes[i].parts = next;
                let s = score(split);
                split.axes[i].parts = now;
                if s < improved.map_or(best, |(_, _, b)| b) {
                    improved = Some((i, next, s));
                }
            }
        }
        let Some((i, next, s)) = improved else {
            return;
        };
        split.axes[i].parts = next;
        best = s;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn axis(out_dim: usize, units: usize, parts: usize, scale: usize) -> Axis {
        Axis {
            parts,
            ..Axis::free(out_dim, units, 1, vec![scaled(out_dim, scale)])
        }
    }

    #[test]
    fn parts_cover_the_result_and_operand_once() {
        // 3 x 7 units over dims 0 and 2 of a [3, 5, 15] operand read in windows of 2 along
        // dim 2 (the 15th element belongs to no window), result [3, 5, 7].
        let split = Split {
            axes: vec![axis(0, 3, 2, 1), axis(2, 7, 3, 2)],
            ungroup: false,
        };
        let (out, input) = ([3usize, 5, 7], [3usize, 5, 15]);
        let mut seen_out = [0; 3 * 7];
        let mut seen_in = [0; 3 * 15];
        for p in 0..split.parts() {
            let oc = split.out_cut(p, &out);
            let ic = split.operand_cut(0, p, &input);
            let (o0, i0) = (oc[0], ic[0]);
            assert_eq!((o0.1, o0.2), (i0.1, i0.2));
            let (o2, i2) = (oc[1], ic[1]);
            assert_eq!(i2.1, o2.1 * 2, "part {p} starts at its first window");
            for b in o0.1..o0.1 + o0.2 {
                for j in o2.1..o2.1 + o2.2 {
                    seen_out[b * 7 + j] += 1;
                }
                for j in i2.1..i2.1 + i2.2 {
                    seen_in[b * 15 + j] += 1;
                }
            }
        }
        assert!(seen_out.iter().all(|&n| n == 1));
        assert!(seen_in.iter().all(|&n| n == 1));
    }

    #[test]
    fn blocks_are_contiguous_when_outer_dims_take_one_element() {
        let cut = |c: &[(usize, usize, usize)]| -> Cut { c.iter().copied().collect() };
        let dims = [4, 6, 8];
        assert!(is_block_contiguous(&dims, &cut(&[(0, 1, 1), (1, 2, 3)])));
        assert!(is_block_contiguous(&dims, &cut(&[(0, 1, 2)])));
        assert!(!is_block_contiguous(&dims, &cut(&[(1, 2, 3)])));
        assert!(!is_block_contiguous(&dims, &cut(&[(0, 0, 1), (2, 0, 4)])));
        assert!(is_block_contiguous(
            &dims,
            &cut(&[(0, 3, 1), (1, 5, 1), (2, 0, 4)])
        ));
    }

    #[test]
    fn the_chooser_splits_worker_parts_over_the_tiles_and_their_workers() {
        // A [64, 64] op whose part costs its elements: with 16 tiles of 6 workers the
        // chooser goes past one part per tile.
        let mut split = Split {
            axes: vec![axis(0, 64, 1, 1), axis(1, 64, 1, 1)],
            ungroup: false,
        };
        let room = Room {
            tiles: 16,
            workers: 6,
            bytes_per_cycle: 4,
            budget: u64::MAX,
            most_parts: usize::MAX,
            fine_runs: FineRuns::Allowed,
        };
        let cost = |s: &Split| {
            let elems = (64 * 64 / s.parts()) as u64;
            PartCost {
                vertex: VertexCost::Worker(12 + elems * 4),
                bytes_in: elems * 4,
                bytes_out: elems * 4,
                temporaries: 0,
                shortest_run: usize::MAX,
                refused: false,
            }
        };
        choose(&mut split, &room, cost, |_| true);
        let parts = split.parts();
        assert!(parts > 16 && parts <= 96, "{parts} parts");
    }
}
