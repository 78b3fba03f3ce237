//! Ops the kernel IR does not express (convolutions, sorts, gathers, scatters, dynamic
//! slices, windowed reductions with general reducers, narrow-integer arithmetic) run as
//! native codelets on tiles: each vertex computes the op with the reference semantics on
//! the slices its tile holds, on the tile's bytes where `native_ops` has the op (gathers,
//! one-op scatters, dynamic slices, sorts by one operand, integer products), else through
//! the evaluator. Where the op splits (`codelet_split`: along several result dimensions at
//! once) the work is spread over tiles, each receiving its operand slices by exchange, and
//! the parts write the result in place or have it assembled; element-wise ops split like
//! any element-wise kernel. Ops that do not split run on one tile.

use super::codelet_split::{self, Cut, FineRuns, PartCost, Room, Split, split_of};
use super::conv_codelet::{ConvCodelet, ConvPlans, SharedPatches};
use super::mapping::{self, Piece};
use super::movement::{Src, affine_runs, flat, runs_of};
use super::native_ops::NativeOp;
use super::{Arr, Here, Lowerer, Scope, Value};
use crate::CompileError;
use crate::device_data::{f32_slice, from_device, to_device, write_f32s};
use runtime::cost::VertexCost;
use runtime::{Codelet, CodeletRef, CodeletVertex, Program, Region, Target};
use std::collections::HashMap;
use std::sync::Arc;
use xla_ir::ids::CompId;
use xla_ir::literal::Literal;
use xla_ir::{ArrayShape, Computation, Instruction, Module, Op, Shape};

/// Operands of more than this many bytes that parts read whole (or a gather's table blocks)
/// are copied to at most [`MOST_COPIES`] parts.
const LARGE_OPERAND: u64 = 64 * 1024;

/// See [`LARGE_OPERAND`].
const MOST_COPIES: usize = 16;

/// The proportion of a tile's memory the parts of a gather, dynamic slice or dynamic
/// update may fill with the blocks of the operand they hold: popops' embedding plan option
/// `availableMemoryProportion`, whose default is 0.6 (poplibs
/// `include/popops/DynamicSlice.hpp`, "Embedding plan options"). An operand larger than
/// that is cut into column blocks.
const SLICE_MEMORY_PROPORTION: f64 = 0.6;

/// What a codelet is built from: the single-op module it evaluates on its tile's slices,
/// the slices' shapes and the vertex's cost. An executable on disk stores it and builds
/// the codelet again from it ([`codelet_of`]), so it holds everything a codelet is.
#[derive(Debug, Clone)]
pub(crate) struct CodeletSource {
    /// A name for errors and profiles.
    pub name: String,
    /// The op, as the entry computation of a module of its own.
    pub module: Module,
    /// The shapes of the module's parameters (the vertex's input regions).
    pub inputs: Vec<ArrayShape>,
    /// What one instance costs.
    pub cost: VertexCost,
    /// A convolution with `partialsType: half`: accumulates in f16 (see [`ConvCodelet`]).
    pub half_partials: bool,
}

/// A vertex that evaluates one HLO op on the slices its tile holds.
pub(crate) struct EvalCodelet {
    source: Arc<CodeletSource>,
    /// The source's module, checked once.
    prepared: xla_ir::eval::Prepared,
    /// An f32 pool or pool gradient with its windows planned once: run on the tile's
    /// bytes directly, with the evaluator's results (a host-side speed-up only).
    window: Option<xla_ir::eval::WindowOp>,
    /// A gather, scatter, dynamic slice, sort or integer product run on the tile's bytes
    /// directly, with the evaluator's results (a host-side speed-up only).
    native: Option<NativeOp>,
}

impl EvalCodelet {
    /// What it was built from.
    pub(crate) fn source(&self) -> &Arc<CodeletSource> {
        &self.source
    }
}

/// The codelet `source` describes: an f32 convolution vertex (or f16 with half partials)
/// when the op is one (sharing its patch matrix through `shared`, its plan through `plans`),
/// else one evaluating the op with the reference semantics. An error when half partials
/// are asked of a convolution the vertex does not take.
pub(crate) fn codelet_of(
    source: CodeletSource,
    shared: Option<&Arc<SharedPatches>>,
    plans: &mut ConvPlans,
) -> Result<CodeletRef, String> {
    let root = source.module.entry_computation().root_instr();
    if let ([input, kernel], Some(output)) = (&source.inputs[..], root.shape.as_array())
        && let Some(c) = ConvCodelet::planned(
            source.name.clone(),
            &root.op,
            input,
            kernel,
            output,
            source.cost,
            source.half_partials,
            plans,
        )
    {
        let c = c.with_source(Arc::new(source.clone()));
        let c = match shared {
            Some(shared) => c.sharing(Arc::clone(shared)),
            None => c,
        };
        return Ok(CodeletRef::new(c));
    }
    if source.half_partials {
        return Err(
            "convolutions.poplar_options.partialsType half applies to f16 convolutions without feature or batch groups (this one accumulates in f32: use partialsType float)".into(),
        );
    }
    let prepared =
        xla_ir::eval::Prepared::new(&source.module).map_err(|e| format!("{}: {e}", source.name))?;
    let window = xla_ir::eval::WindowOp::of(&source.module);
    let native = NativeOp::of(&source.module, &source.inputs);
    Ok(CodeletRef::new(EvalCodelet {
        source: Arc::new(source),
        prepared,
        window,
        native,
    }))
}

fn leaves(l: Literal, out: &mut Vec<xla_ir::literal::ArrayLiteral>) {
    match l {
        Literal::Array(a) => out.push(a),
        Literal::Tuple(items) => items.into_iter().for_each(|x| leaves(x, out)),
        Literal::Token => {}
    }
}

impl Codelet for EvalCodelet {
    fn name(&self) -> &str {
        &self.source.name
    }

    fn run(&self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<(), String> {
        let source = &*self.source;
        if let Some(native) = &self.native {
            return native
                .run(inputs, outputs)
                .map_err(|e| format!("{}: {e}", source.name));
        }
        if let (Some(window), [out]) = (&self.window, &mut *outputs) {
            let values: Vec<_> = inputs.iter().map(|b| f32_slice(b)).collect();
            let values: Vec<&[f32]> = values.iter().map(|v| &v[..]).collect();
            return write_f32s(out, |result| window.run(&values, result))
                .map_err(|e| format!("{}: {e}", source.name));
        }
        let args: Vec<Literal> = source
            .inputs
            .iter()
            .zip(inputs)
            .map(|(s, b)| Literal::Array(from_device(s, b)))
            .collect();
        let result = (self.prepared)
            .evaluate(&args)
            .map_err(|e| format!("{}: {e}", source.name))?;
        let mut outs = Vec::new();
        leaves(result, &mut outs);
        for (o, a) in outputs.iter_mut().zip(&outs) {
            let bytes = to_device(&a.data);
            if bytes.len() != o.len() {
                return Err(format!(
                    "{}: result of {} bytes for a region of {}",
                    source.name,
                    bytes.len(),
                    o.len()
                ));
            }
            o.copy_from_slice(&bytes);
        }
        Ok(())
    }

    fn cost(&self, _target: &Target) -> VertexCost {
        self.source.cost
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

/// A module whose entry applies `instr`'s op (or `op` instead) to parameters of
/// `operand_shapes`, producing `shape` (or the instruction's own).
pub(crate) fn single_op_module(
    module: &Module,
    instr: &Instruction,
    operand_shapes: &[Shape],
    replace: Option<(Shape, Op)>,
) -> Module {
    let mut m = Module::new(format!("{}.codelet", instr.name));
    let (shape, mut op) = replace.unwrap_or_else(|| (instr.shape.clone(), instr.op.clone()));
    let mut done = HashMap::new();
    let called = op.called_computations();
    let mapped: Vec<(CompId, CompId)> = called
        .into_iter()
        .map(|c| (c, m.import_computation(module, c, &mut done)))
        .collect();
    op.map_called_computations(|c| mapped.iter().find(|(f, _)| *f == c).map_or(c, |(_, t)| *t));
    let mut entry = Computation::new("entry");
    let params: Vec<_> = operand_shapes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            entry.push(Instruction::new(
                format!("p{i}"),
                Op::Parameter { number: i as u64 },
                &[],
                s.clone(),
            ))
        })
        .collect();
    let mut root = Instruction::new(instr.name.clone(), op, &params, shape);
    root.backend_config = instr.backend_config.clone();
    entry.root = entry.push(root);
    m.entry = m.add_computation(entry);
    m
}

/// True for ops whose result and operands are all one shape (so any 1-D slice of them is
/// the same op on slices).
fn is_elementwise(here: &Here, operands: &[Arr]) -> bool {
    let Some(out) = here.instr.shape.as_array() else {
        return false;
    };
    let same = operands.iter().all(|a| a.shape.dims == out.dims);
    let widths = operands
        .iter()
        .all(|a| a.shape.element_type.bit_width() == out.element_type.bit_width());
    same && match &here.instr.op {
        Op::Unary(_)
        | Op::Binary(_)
        | Op::Compare { .. }
        | Op::Select
        | Op::Clamp
        | Op::Convert
        | Op::ReducePrecision { .. }
        | Op::Map { .. } => true,
        Op::BitcastConvert => widths,
        _ => false,
    }
}

/// An estimate of one part's cost.
fn estimate(
    module: &Module,
    op: &Op,
    in_shapes: &[Shape],
    out: &Shape,
    target: &Target,
) -> VertexCost {
    let out_elems: u64 = out.leaf_arrays().iter().map(|a| a.element_count()).sum();
    let in_elems: u64 = in_shapes
        .iter()
        .flat_map(|s| s.leaf_arrays())
        .map(|a| a.element_count())
        .sum();
    match op {
        Op::Convolution { dims, .. } => {
            // Each output element is a dot of the kernel's per-output-feature slice.
            let k = in_shapes[1].as_array().map_or(1, |a| a.element_count());
            let kof = in_shapes[1]
                .as_array()
                .map_or(1, |a| a.dims[dims.kernel_output_feature as usize] as u64)
                .max(1);
            let macs = out_elems * (k / kof);
            // The AMP runs convolutions as it runs matrix products: at the target's f16
            // rate for f16 operands (`runtime::cost::vertex_cost`).
            let f16 = in_shapes[0]
                .as_array()
                .is_some_and(|a| a.element_type == xla_ir::ElementType::F16);
            let rate = if f16 {
                target.f16_macs_per_cycle
            } else {
                target.f32_macs_per_cycle
            };
            VertexCost::Supervisor(macs.div_ceil(rate) + 72)
        }
        Op::Gather { slice_sizes, .. } => gather_cost(slice_sizes, out, target),
        Op::DynamicSlice { .. } => dynamic_slice_cost(&in_shapes[0], out, false),
        Op::DynamicUpdateSlice => dynamic_slice_cost(&in_shapes[0], &in_shapes[1], true),
        Op::Sort { dimension, .. } => sort_cost(*dimension, out, target),
        Op::Scatter { .. } => {
            let workers = target.worker_contexts.max(1) as u64;
            super::scatter::batched_part_cost(module, op, in_shapes, workers)
                .unwrap_or(VertexCost::Worker(12 + (out_elems + in_elems) * 4))
        }
        // Each result element of these is computed on its own (a window's max, the
        // scatter into one operand element from the windows over it): the part's elements
        // are spread over the tile's worker contexts, as PopLibs' pooling vertices spread
        // theirs. Each worker's share costs the overhead and its elements.
        Op::ReduceWindow { .. } | Op::SelectAndScatter { .. }
            if out_elems >= target.worker_contexts as u64 =>
        {
            let workers = target.worker_contexts as u64;
            let share = ((out_elems + in_elems) * 4).div_ceil(workers);
            VertexCost::Supervisor((12 + share) * workers)
        }
        _ => VertexCost::Worker(12 + (out_elems + in_elems) * 4),
    }
}

/// A gather part's cost, as PopLibs estimates its `MultiSlice` vertices (poplibs
/// `lib/popops/PerformanceEstimation.cpp`, `getMultiSliceCycleEstimate`): a worker takes 13
/// cycles of prologue and epilogue and, per offset (an index vector: one slice copied), 19
/// cycles and 2 per 64-bit vector of the slice (2 elements of 4 or 2 bytes; 4 one-byte
/// elements at 3 cycles). The offsets are spread over the tile's workers. What the part's
/// table holds beyond the slices it copies costs nothing here (its exchange is charged).
fn gather_cost(slice_sizes: &[i64], out: &Shape, target: &Target) -> VertexCost {
    let Some(out) = out.as_array() else {
        return VertexCost::Worker(13);
    };
    let slice = slice_sizes.iter().product::<i64>().max(1) as u64;
    let offsets = out.element_count().div_ceil(slice);
    let per_offset = multi_slice_offset_cycles(slice, out.element_type.byte_size() as u64);
    spread_over_workers(offsets, per_offset, 13, target)
}

/// PopLibs' `MultiSlice` cycles for one offset copying a slice of `elements` elements of
/// `bytes` bytes: 19, and 2 per 64-bit vector (2 elements of 4 or 2 bytes), 3 per 4
/// one-byte elements (see [`gather_cost`]; scatters that assign are charged it too).
pub(super) fn multi_slice_offset_cycles(elements: u64, bytes: u64) -> u64 {
    let (width, cycles_per_vector) = if bytes == 1 { (4, 3) } else { (2, 2) };
    19 + elements.div_ceil(width) * cycles_per_vector
}

/// `items` of `per_item` cycles each spread over the tile's workers, each worker first
/// taking `overhead`: one worker vertex when there are fewer items than workers, else the
/// whole tile for the busiest worker's share.
fn spread_over_workers(items: u64, per_item: u64, overhead: u64, target: &Target) -> VertexCost {
    let workers = target.worker_contexts.max(1) as u64;
    if items < workers {
        return VertexCost::Worker(overhead + items * per_item);
    }
    VertexCost::Supervisor((overhead + items.div_ceil(workers) * per_item) * workers)
}

/// A dynamic slice's (or update's) cost, as PopLibs estimates its `DynamicSlice2D` and
/// `DynamicUpdateSlice2D` vertices (poplibs `lib/popops/popopsCycleEstimators.cpp`):
/// 23 cycles, and per region of the base
/// (the runs before the first dimension sliced) 13 cycles and, per sub-element (an index
/// along the sliced dimensions), 29 cycles and one per 64-bit vector of the region's
/// elements (f32; f16: 31 and 2 per vector; one-byte types: 50 and 2 per 4 elements, 23
/// when updating). `slice` is the slice read, or the update written; what the operand
/// holds beyond it costs nothing here.
fn dynamic_slice_cost(operand: &Shape, slice: &Shape, update: bool) -> VertexCost {
    let (Some(operand), Some(slice)) = (operand.as_array(), slice.as_array()) else {
        return VertexCost::Worker(23);
    };
    let sliced: Vec<bool> = (slice.dims.iter().zip(&operand.dims))
        .map(|(s, o)| s < o)
        .collect();
    let first = sliced.iter().position(|&s| s).unwrap_or(slice.dims.len());
    let regions = slice.dims[..first].iter().product::<i64>().max(1) as u64;
    let subs = (slice.dims.iter().zip(&sliced))
        .filter(|(_, s)| **s)
        .map(|(d, _)| *d)
        .product::<i64>()
        .max(1) as u64;
    let region = (slice.element_count() / (regions * subs)).max(1);
    let (base, per_vector, width) = match slice.element_type.byte_size() {
        1 => (50, if update { 23 } else { 2 }, 4),
        2 => (31, 2, 4),
        _ => (29, 1, 2),
    };
    let per_sub = base + region.div_ceil(width) * per_vector;
    VertexCost::Worker(23 + regions * (per_sub * subs + 13))
}

/// A sort part's cost, as PopLibs estimates its `HeapSortVertex` (keys alone) and
/// `HeapSortVertexKV` (keys moving values) (poplibs `lib/popops/popopsCycleEstimators.cpp`):
/// 8 x (19 n floor(log2 n) + 6 n + 2) cycles a row of n keys, twice that when values move
/// with them (any number of them: the source has one); the part's rows spread over the
/// tile's workers.
fn sort_cost(dimension: i64, out: &Shape, target: &Target) -> VertexCost {
    let leaves = out.leaf_arrays();
    let Some(keys) = leaves.first() else {
        return VertexCost::Worker(16);
    };
    let n = keys
        .dims
        .get(dimension as usize)
        .copied()
        .unwrap_or(1)
        .max(1) as u64;
    let rows = keys.element_count() / n;
    if rows == 0 {
        return VertexCost::Worker(16);
    }
    let log = 63 - u64::from(n.leading_zeros());
    let values = if leaves.len() > 1 { 2 } else { 1 };
    let per_row = 8 * (19 * n * log + 6 * n + 2) * values;
    spread_over_workers(rows, per_row, 0, target)
}

/// What makes two parts of an op run one codelet: their operands' shapes, their result's
/// shape, their op (padding differs between bands of rows) and the patch matrix they share.
type PartKey = (Vec<ArrayShape>, Shape, Op, Option<usize>);

/// `shape` cut to the block `cut` (row-major: its layout dropped).
pub(crate) fn cut_shape(shape: &ArrayShape, cut: &Cut) -> ArrayShape {
    let mut s = shape.clone();
    for &(d, _, len) in cut {
        s.dims[d] = len as i64;
    }
    s.layout = None;
    s
}

/// The first element and the elements of the block `cut` of an array of `dims`, which is
/// one run of its elements ([`Split::contiguous`]).
fn block_run(dims: &[usize], cut: &Cut) -> (usize, usize) {
    let mut first = vec![0; dims.len()];
    for &(d, s, _) in cut {
        first[d] = s;
    }
    let len = (0..dims.len()).map(|d| codelet_split::cut_len(dims, cut, d));
    (flat(dims, &first), len.product())
}

/// Part `p` of `split`: its operands' shapes, its result's shape and its op.
fn part_shapes(
    here: &Here,
    split: &Split,
    p: usize,
    operands: &[Arr],
    out_leaves: &[ArrayShape],
) -> (Vec<ArrayShape>, Shape, Op) {
    let ins = operands
        .iter()
        .enumerate()
        .map(|(k, a)| cut_shape(&a.shape, &split.operand_cut(k, p, &a.dims())))
        .collect();
    let outs: Vec<ArrayShape> = out_leaves
        .iter()
        .map(|s| {
            let dims: Vec<usize> = s.dims.iter().map(|&d| d as usize).collect();
            cut_shape(s, &split.out_cut(p, &dims))
        })
        .collect();
    let out = if here.instr.shape.is_tuple() {
        Shape::Tuple(outs.into_iter().map(Shape::Array).collect())
    } else {
        Shape::Array(outs.into_iter().next().expect("one leaf"))
    };
    let mut op = here.instr.op.clone();
    if let Op::Gather {
        slice_sizes: sizes, ..
    }
    | Op::DynamicSlice { sizes } = &mut op
    {
        // A column block of the table: its slices are the block's width (a block of a
        // batching dimension keeps its slices of one).
        let dims = operands[0].dims();
        for (d, _, len) in split.operand_cut(0, p, &dims) {
            if sizes[d] as usize == dims[d] {
                sizes[d] = len as i64;
            }
        }
    }
    if let Op::Convolution {
        batch_group_count,
        window,
        ..
    } = &mut op
    {
        if split.ungroup {
            *batch_group_count = 1;
        }
        for (w, low, high) in split.window_pads(0, p, &operands[0].dims()) {
            window.dims[w].pad_low = low;
            window.dims[w].pad_high = high;
        }
    }
    (ins, out, op)
}

/// A convolution part's temporaries: its patch matrix (output positions x window x input
/// features, f32). Zero for other ops.
fn patch_bytes(op: &Op, ins: &[ArrayShape], out: &Shape) -> u64 {
    let (Op::Convolution { dims, .. }, Some(out), Some(kernel)) = (op, out.as_array(), ins.get(1))
    else {
        return 0;
    };
    let out_features = out.dims[dims.output_feature as usize].max(1) as u64;
    let kernel_out = kernel.dims[dims.kernel_output_feature as usize].max(1) as u64;
    let positions = out.element_count() / out_features;
    let window = kernel.element_count() / kernel_out;
    positions * window * 4
}

impl Lowerer<'_> {
    pub(crate) fn add_eval_codelet(
        &mut self,
        here: &Here,
        module: Module,
        inputs: Vec<ArrayShape>,
        cost: VertexCost,
        shared: Option<&Arc<SharedPatches>>,
    ) -> Result<runtime::CodeletId, CompileError> {
        let convolution = matches!(here.instr.op, Op::Convolution { .. });
        let source = CodeletSource {
            name: format!("{} ({})", here.instr.name, here.instr.op.name()),
            module,
            inputs,
            cost,
            half_partials: convolution && self.conv.partials == crate::config::PartialsType::Half,
        };
        let codelet = codelet_of(source, shared, &mut self.conv_plans)
            .map_err(|reason| here.unsupported(reason))?;
        Ok(self.b.codelet(codelet))
    }

    /// True when `a` is already all on `tile`: a part reading all of it needs no copy.
    fn all_on_tile(&self, a: &Arr, tile: usize) -> bool {
        let pieces = self.mapping(a.tensor);
        pieces.len() <= 1 && pieces.first().is_none_or(|p| p.tile == tile)
    }

    /// Operand `a` on each part's tile (part `p` on `tiles[p]`, reading the block `cuts[p]`
    /// of `a`, all of it when the cut is empty): its shape there and its region. The
    /// copies are one tensor whose part `p` lies on `tiles[p]`, filled by one
    /// rearrangement, as Poplar copies a tensor to many tiles in one exchange; a part that
    /// reads all of `a` where it already lies all on the part's tile reads it there.
    pub(crate) fn operand_on_tiles(
        &mut self,
        a: &Arr,
        cuts: &[Cut],
        tiles: &[usize],
        name: &str,
    ) -> Vec<(ArrayShape, Region)> {
        // A part reading all of `a` where `a` already lies all on its tile reads it there.
        let in_place: Vec<bool> = cuts
            .iter()
            .zip(tiles)
            .map(|(c, &t)| c.is_empty() && self.all_on_tile(a, t))
            .collect();
        if cuts.len() == 1 || in_place.iter().all(|&b| b) {
            return cuts
                .iter()
                .zip(tiles)
                .enumerate()
                .map(|(p, (cut, &tile))| {
                    let arr = self.slice_on_tile(a, cut, tile, &format!("{name}.p{p}"));
                    (arr.shape.clone(), arr.whole())
                })
                .collect();
        }
        let dims = a.dims();
        let mut pieces = Vec::with_capacity(tiles.len());
        let mut shapes = Vec::with_capacity(tiles.len());
        let mut runs = runtime::Runs::new();
        let mut start = 0;
        for ((cut, &tile), _) in cuts.iter().zip(tiles).zip(&in_place).filter(|(_, i)| !**i) {
            let shape = cut_shape(&a.shape, cut);
            let part_dims: Vec<usize> = shape.dims.iter().map(|&d| d as usize).collect();
            let len: usize = part_dims.iter().product();
            let mut src = vec![0; dims.len()];
            let part = affine_runs(&part_dims, 1, |o| {
                src.copy_from_slice(o);
                for &(d, first, _) in cut {
                    src[d] += first;
                }
                (0, flat(&dims, &src))
            });
            for mut run in part.iter() {
                run.dst_start += start;
                runs.push(run);
            }
            pieces.push(Piece { tile, start, len });
            shapes.push(shape);
            start += len;
        }
        let mut all = a.shape.clone();
        all.dims = [start as i64].into_iter().collect();
        all.layout = None;
        let t = self.arr_mapped(name, &all, pieces.clone());
        self.rearrange_into(t.tensor, vec![a.tensor], runs, Vec::new(), name);
        let mut copies = shapes.into_iter().zip(&pieces);
        in_place
            .iter()
            .map(|&here| {
                if here {
                    return (a.shape.clone(), a.whole());
                }
                let (shape, piece) = copies.next().expect("a copy per part not in place");
                let region = Region {
                    tensor: t.tensor,
                    start: piece.start,
                    len: piece.len,
                };
                (shape, region)
            })
            .collect()
    }

    /// A copy of the block `cut` of `a` (all of it when the cut is empty) on one tile,
    /// unless `a` is already all there.
    pub(crate) fn slice_on_tile(
        &mut self,
        a: &Arr,
        cut: &[(usize, usize, usize)],
        tile: usize,
        name: &str,
    ) -> Arr {
        if cut.is_empty() && self.all_on_tile(a, tile) {
            return a.clone();
        }
        let dims = a.dims();
        let shape = cut_shape(&a.shape, &cut.iter().copied().collect());
        let part_dims: Vec<usize> = shape.dims.iter().map(|&d| d as usize).collect();
        let n: usize = part_dims.iter().product();
        let t = self.arr_mapped(name, &shape, mapping::single(n, tile));
        let mut src = vec![0; dims.len()];
        let runs = affine_runs(&part_dims, 1, |o| {
            src.copy_from_slice(o);
            for &(d, start, _) in cut {
                src[d] += start;
            }
            (0, flat(&dims, &src))
        });
        self.rearrange_into(t.tensor, vec![a.tensor], runs, Vec::new(), name);
        t
    }

    /// Lowers an op as codelets: split over tiles where it splits, else on one tile.
    pub(crate) fn codelet_op(
        &mut self,
        scope: &mut Scope,
        here: Here,
    ) -> Result<Value, CompileError> {
        if let Op::CustomCall { target, .. } = &here.instr.op
            && let Some(Err(reason)) =
                xla_ir::Activation::from_custom_call(target, here.instr.backend_config.as_deref())
        {
            return Err(here.unsupported(reason));
        }
        if let Op::CustomCall { target, .. } = &here.instr.op
            && target != "TopK"
        {
            return Err(here.unsupported(format!(
                "custom-call target '{target}' is unknown to the IPU lowering"
            )));
        }
        if matches!(
            here.instr.op,
            Op::Parameter { .. } | Op::OptimizationBarrier
        ) && here.instr.operands.is_empty()
        {
            return Err(here.unsupported("no lowering"));
        }
        let ids: Vec<_> = here.instr.operands.to_vec();
        let mut operands = Vec::new();
        for i in &ids {
            match self.value(scope, *i)? {
                Value::Array(a) => operands.push(a),
                _ => {
                    return Err(here.unsupported("tuple operands are not supported on the IPU yet"));
                }
            }
        }
        if let Op::OptimizationBarrier = here.instr.op {
            return self.value(scope, ids[0]);
        }
        if is_elementwise(&here, &operands) {
            return self.elementwise_codelet(&here, &operands);
        }
        if let Some(v) = self.split_scatter(&here, &operands)? {
            return Ok(v);
        }
        let out_leaves: Vec<ArrayShape> = here
            .instr
            .shape
            .leaf_arrays()
            .into_iter()
            .cloned()
            .collect();
        if out_leaves.is_empty() {
            return Err(here.unsupported("an op with no array result"));
        }
        let convolution = matches!(here.instr.op, Op::Convolution { .. });
        let gather = matches!(here.instr.op, Op::Gather { .. });
        // Ops that read a few slices of an operand each part holds a block of.
        let slices = gather
            || matches!(
                here.instr.op,
                Op::DynamicSlice { .. } | Op::DynamicUpdateSlice
            );
        let out_dims: Vec<usize> = out_leaves[0].dims.iter().map(|&d| d as usize).collect();
        let min_per_tile = mapping::min_elements_per_tile(self.dtype(&out_leaves[0]));
        let operand_dims: Vec<Vec<usize>> = operands.iter().map(Arr::dims).collect();
        let budget =
            (self.conv.available_memory_proportion * self.target.bytes_per_tile as f64) as u64;
        let mut split = split_of(&here, &operand_dims, &out_dims);
        if let Some(s) = split.as_mut() {
            // Operands every part reads whole: past LARGE_OPERAND, at most MOST_COPIES
            // copies of them.
            let whole: u64 = (operands.iter().enumerate())
                .filter(|(k, _)| s.axes.iter().all(|a| a.operands[*k].is_none()))
                .map(|(_, a)| a.shape.byte_size())
                .sum();
            let table_bytes = operands[0].shape.byte_size();
            let room = Room {
                tiles: self.tiles,
                workers: self.target.worker_contexts,
                bytes_per_cycle: self.target.exchange_bytes_per_cycle,
                // availableMemoryProportion bounds a convolution's temporaries per tile, as
                // it bounds a matrix product's (the finest split is taken when none fits),
                // and the operand blocks of gathers and dynamic slices, as it bounds
                // PopLibs' embedding plans.
                budget: if convolution {
                    budget
                } else if slices {
                    (SLICE_MEMORY_PROPORTION * self.target.bytes_per_tile as f64) as u64
                } else {
                    u64::MAX
                },
                most_parts: if whole > LARGE_OPERAND && !s.ungroup {
                    MOST_COPIES
                } else {
                    usize::MAX
                },
                fine_runs: if convolution {
                    FineRuns::Allowed
                } else if slices {
                    FineRuns::LastResort
                } else {
                    FineRuns::Refused
                },
            };
            let cost_of = |s: &Split| {
                let p = s.parts() - 1;
                let (ins, outs, op) = part_shapes(&here, s, p, &operands, &out_leaves);
                let in_shapes: Vec<Shape> = ins.iter().cloned().map(Shape::Array).collect();
                let large = |bytes: u64| bytes >= codelet_split::LARGE;
                let operand_runs = (operands.iter().enumerate())
                    .filter(|(_, a)| large(a.shape.byte_size()))
                    .map(|(k, a)| {
                        let dims = a.dims();
                        codelet_split::run_length(&dims, &s.operand_cut(k, p, &dims))
                    });
                let result_runs = (out_leaves.iter())
                    .filter(|l| large(l.byte_size()))
                    .map(|_| codelet_split::run_length(&out_dims, &s.out_cut(p, &out_dims)));
                // A part holds a block of the table (all of it unless the columns are
                // cut), and a gather's blocks go to the parts of every range of indices.
                let table_block = if slices { ins[0].byte_size() } else { 0 };
                let block_copies = s.parts()
                    / (s.axes.iter())
                        .filter(|a| a.operands[0].is_some())
                        .map(|a| a.parts)
                        .product::<usize>();
                PartCost {
                    shortest_run: operand_runs.chain(result_runs).min().unwrap_or(usize::MAX),
                    vertex: estimate(self.module, &op, &in_shapes, &outs, &self.target),
                    bytes_in: ins.iter().map(ArrayShape::byte_size).sum(),
                    bytes_out: outs.leaf_arrays().iter().map(|a| a.byte_size()).sum(),
                    temporaries: patch_bytes(&op, &ins, &outs) + table_block,
                    refused: gather && table_bytes > LARGE_OPERAND && block_copies > MOST_COPIES,
                }
            };
            let in_place = |s: &Split| self.writes_in_place(s, &out_dims, min_per_tile);
            codelet_split::choose(s, &room, cost_of, in_place);
        }
        let parts = split.as_ref().map_or(1, Split::parts);
        let in_place = split
            .as_ref()
            .is_some_and(|s| self.writes_in_place(s, &out_dims, min_per_tile));
        let start = self.next_tile();
        let name = here.instr.name.clone();
        if convolution {
            let (ins, outs, op) = match &split {
                Some(s) => part_shapes(&here, s, parts - 1, &operands, &out_leaves),
                None => (
                    operands.iter().map(|a| a.shape.clone()).collect(),
                    here.instr.shape.clone(),
                    here.instr.op.clone(),
                ),
            };
            let bytes = patch_bytes(&op, &ins, &outs);
            let ways: Vec<usize> = split
                .iter()
                .flat_map(|s| s.axes.iter().map(|a| a.parts))
                .collect();
            tracing::debug!(
                target: "ipuxla::plan",
                "convolution {name}: direct kernel split {ways:?} ways, ~{bytes} B of patches per tile (budget {budget})"
            );
        }
        let per_tile = codelet_split::parts_per_tile(parts, self.tiles);
        if let Some(s) = &split {
            let ways: Vec<String> = (s.axes.iter())
                .map(|a| match a.sums {
                    true => format!("sum x {}", a.parts),
                    false => format!("dimension {} x {}", a.out_dim, a.parts),
                })
                .collect();
            tracing::debug!(
                target: "ipuxla::plan",
                "codelet {name}: split {}, {per_tile} parts per tile, result {}",
                ways.join(", "),
                if in_place { "written in place" } else { "assembled" }
            );
        }
        let tiles: Vec<usize> = (0..parts)
            .map(|p| self.tile_at(start + p / per_tile))
            .collect();
        let cut_of = |k: usize, p: usize| -> Cut {
            split
                .as_ref()
                .map_or_else(Cut::new, |s| s.operand_cut(k, p, &operand_dims[k]))
        };
        // Parts of a convolution that read the same input slice share one patch matrix.
        let mut shared: HashMap<Cut, Option<Arc<SharedPatches>>> = HashMap::new();
        if convolution && parts > 1 {
            for p in 0..parts {
                shared
                    .entry(cut_of(0, p))
                    .and_modify(|s| *s = Some(Arc::new(SharedPatches::default())))
                    .or_insert(None);
            }
        }
        // Operand k of part p: its shape and region on the part's tile.
        let mut part_ins: Vec<Vec<(ArrayShape, Region)>> = vec![Vec::new(); parts];
        for (k, a) in operands.iter().enumerate() {
            let cuts: Vec<Cut> = (0..parts).map(|p| cut_of(k, p)).collect();
            let placed = self.operand_on_tiles(a, &cuts, &tiles, &format!("{name}.in{k}"));
            for (ins, x) in part_ins.iter_mut().zip(placed) {
                ins.push(x);
            }
        }
        // The results written in place: each part's block of every leaf is a piece on its tile.
        let whole_outs: Vec<Arr> = if in_place {
            let s = split.as_ref().expect("in place only when split");
            out_leaves
                .iter()
                .enumerate()
                .map(|(j, leaf)| {
                    let pieces = (0..parts)
                        .map(|p| {
                            let cut = s.out_cut(p, &out_dims);
                            let (first, len) = block_run(&out_dims, &cut);
                            Piece {
                                tile: tiles[p],
                                start: first,
                                len,
                            }
                        })
                        .collect();
                    let name = if out_leaves.len() == 1 {
                        name.clone()
                    } else {
                        format!("{name}.{j}")
                    };
                    self.arr_mapped(&name, leaf, mapping::merged(pieces))
                })
                .collect()
        } else {
            Vec::new()
        };
        let mut part_outputs: Vec<Vec<Arr>> = Vec::new();
        let mut vertices = Vec::new();
        let mut reads = Vec::new();
        // Parts of equal op and shapes (and patch matrix) run one codelet.
        let mut codelets: Vec<(PartKey, runtime::CodeletId)> = Vec::new();
        let tpi = self.target.tiles_per_ipu;
        for (p, ins) in part_ins.into_iter().enumerate() {
            let tile = tiles[p];
            let in_shapes: Vec<ArrayShape> = ins.iter().map(|(s, _)| s.clone()).collect();
            let (out_shape, op) = match &split {
                Some(s) => {
                    let (_, outs, op) = part_shapes(&here, s, p, &operands, &out_leaves);
                    (outs, op)
                }
                None => (here.instr.shape.clone(), here.instr.op.clone()),
            };
            let share = shared.get(&cut_of(0, p)).cloned().flatten();
            let key = (
                in_shapes.clone(),
                out_shape.clone(),
                op.clone(),
                share.as_ref().map(|s| Arc::as_ptr(s) as usize),
            );
            let id = match codelets.iter().find(|(k, _)| *k == key) {
                Some((_, id)) => *id,
                None => {
                    let shapes: Vec<Shape> = in_shapes.iter().cloned().map(Shape::Array).collect();
                    let cost = estimate(self.module, &op, &shapes, &out_shape, &self.target);
                    let module = single_op_module(
                        self.module,
                        here.instr,
                        &shapes,
                        Some((out_shape.clone(), op)),
                    );
                    let id =
                        self.add_eval_codelet(&here, module, in_shapes, cost, share.as_ref())?;
                    codelets.push((key, id));
                    id
                }
            };
            let outs: Vec<ArrayShape> = out_shape.leaf_arrays().into_iter().cloned().collect();
            let out_regions: Vec<Region> = if in_place {
                let s = split.as_ref().expect("in place only when split");
                let (first, len) = block_run(&out_dims, &s.out_cut(p, &out_dims));
                whole_outs
                    .iter()
                    .map(|a| Region {
                        tensor: a.tensor,
                        start: first,
                        len,
                    })
                    .collect()
            } else {
                let arrs: Vec<Arr> = outs
                    .iter()
                    .enumerate()
                    .map(|(j, s)| {
                        self.arr_mapped(
                            &format!("{name}.out{j}.p{p}"),
                            s,
                            mapping::single(s.element_count() as usize, tile),
                        )
                    })
                    .collect();
                let regions = arrs.iter().map(Arr::whole).collect();
                part_outputs.push(arrs);
                regions
            };
            vertices.push(CodeletVertex {
                codelet: id,
                ipu: tile / tpi,
                tile: tile % tpi,
                inputs: ins.iter().map(|(_, r)| *r).collect(),
                outputs: out_regions,
            });
            reads.extend(ins.iter().map(|(_, r)| r.tensor));
        }
        for t in reads {
            self.use_tensor(t);
        }
        let cs = self
            .b
            .compute_set_with_codelets(&name, Vec::new(), vertices);
        self.emit(Program::Execute(cs));
        // Each result leaf: written in place, or assembled from its parts.
        let mut results = Vec::new();
        for (j, s) in out_leaves.iter().enumerate() {
            let arr = if in_place {
                whole_outs[j].clone()
            } else {
                match &split {
                    None => part_outputs[0][j].clone(),
                    Some(sp) => {
                        let parts_j: Vec<Arr> = part_outputs.iter().map(|o| o[j].clone()).collect();
                        self.assembled(&format!("{name}.{j}"), s, &parts_j, sp)
                    }
                }
            };
            results.push(Value::Array(Arr {
                tensor: arr.tensor,
                shape: s.clone(),
            }));
        }
        Ok(if here.instr.shape.is_tuple() {
            Value::Tuple(results)
        } else {
            results.pop().expect("one leaf")
        })
    }

    /// Whether the parts of `split` write the result (of `dims`) where it is to lie: their
    /// blocks are runs of it, and they spread it over at least a quarter of the tiles a
    /// linear mapping would (else the result is gathered and spread, so that the ops that
    /// read it do not run on a few tiles).
    fn writes_in_place(&self, split: &Split, dims: &[usize], min_per_tile: usize) -> bool {
        let n: usize = dims.iter().product();
        let linear_tiles = n.div_ceil(min_per_tile).min(self.tiles);
        split.parts() > 1
            && split.parts().min(self.tiles) * 4 >= linear_tiles
            && split.contiguous(dims)
    }

    /// The result of `shape` from the parts' results of `split`, each part's block where
    /// its cut says, in one rearrangement; when a contracted dimension is cut, the partial
    /// results are stacked (each laid out as the result) and summed on-tile.
    pub(crate) fn assembled(
        &mut self,
        name: &str,
        shape: &ArrayShape,
        parts: &[Arr],
        split: &Split,
    ) -> Arr {
        let dims: Vec<usize> = shape.dims.iter().map(|&d| d as usize).collect();
        let starts = split.starts(&dims);
        let part_dims: Vec<Vec<usize>> = parts.iter().map(Arr::dims).collect();
        let mut local = Vec::new();
        let mut locate = |o: &[usize], sum: usize| {
            let k = split.locate(o, sum, &starts, &mut local);
            (k as u32, flat(&part_dims[k], &local))
        };
        // Built a row at a time when no row crosses parts (each row then reads one part's
        // consecutive elements), else element by element.
        let whole_rows = split.rows_whole(dims.len());
        let mut runs_for = |dims: &[usize], stacked: bool| {
            let mut at = |o: &[usize]| match stacked {
                true => locate(&o[1..], o[0]),
                false => locate(o, 0),
            };
            match whole_rows {
                true => affine_runs(dims, 1, at),
                false => runs_of(dims, |o| {
                    let (k, i) = at(o);
                    Src::At(k, i)
                }),
            }
        };
        let sources: Vec<runtime::TensorId> = parts.iter().map(|a| a.tensor).collect();
        let sums = split.sum_parts();
        if sums == 1 {
            let out = self.linear_arr(name, shape);
            let runs = runs_for(&dims, false);
            self.rearrange_into(out.tensor, sources, runs, Vec::new(), name);
            return out;
        }
        // Every tile receives `sums` partials of each of its elements: spread the result
        // in grains of 16 rather than the usual 128 bytes a tile, so that a small result (a
        // weight gradient) is received by many tiles.
        let total = shape.element_count() as usize;
        let grains = mapping::linear_grain(total, self.tiles, mapping::GRAIN, mapping::GRAIN);
        let linear = self.placed(grains);
        let stacked_pieces: Vec<Piece> = (0..sums)
            .flat_map(|i| {
                linear.iter().map(move |q| Piece {
                    start: q.start + i * total,
                    ..*q
                })
            })
            .collect();
        let stacked_dims: Vec<usize> = std::iter::once(sums).chain(dims.iter().copied()).collect();
        let stacked_shape = ArrayShape::new(
            shape.element_type,
            &stacked_dims.iter().map(|&d| d as i64).collect::<Vec<_>>(),
        );
        let stacked = self.arr_mapped(&format!("{name}.parts"), &stacked_shape, stacked_pieces);
        let runs = runs_for(&stacked_dims, true);
        self.rearrange_into(stacked.tensor, sources, runs, Vec::new(), name);
        let partials = self.dtype(shape);
        self.sum_of_parts(name, stacked.tensor, shape, sums, &linear, partials)
    }

    /// An element-wise op the JIT does not compute (narrow integers, total-order
    /// comparisons, bitcasts): one codelet per tile on that tile's elements.
    fn elementwise_codelet(
        &mut self,
        here: &Here,
        operands: &[Arr],
    ) -> Result<Value, CompileError> {
        let shape = here.array()?.clone();
        let n = shape.element_count() as usize;
        let pieces: Vec<Piece> = self.follow_mapping(operands, n, self.dtype(&shape));
        let ins: Vec<Arr> = operands
            .iter()
            .map(|a| self.with_mapping(a, &pieces))
            .collect();
        let out = self.arr_mapped(&here.instr.name, &shape, pieces.clone());
        let tpi = self.target.tiles_per_ipu;
        let mut vertices = Vec::new();
        for p in &pieces {
            let one = |s: &ArrayShape| ArrayShape::new(s.element_type, &[p.len as i64]);
            let in_shapes: Vec<ArrayShape> = ins.iter().map(|a| one(&a.shape)).collect();
            let out_shape = Shape::Array(one(&shape));
            let shapes: Vec<Shape> = in_shapes.iter().cloned().map(Shape::Array).collect();
            let cost = estimate(
                self.module,
                &here.instr.op,
                &shapes,
                &out_shape,
                &self.target,
            );
            let module = single_op_module(
                self.module,
                here.instr,
                &shapes,
                Some((out_shape, here.instr.op.clone())),
            );
            let id = self.add_eval_codelet(here, module, in_shapes, cost, None)?;
            let region = |t| Region {
                tensor: t,
                start: p.start,
                len: p.len,
            };
            vertices.push(CodeletVertex {
                codelet: id,
                ipu: p.tile / tpi,
                tile: p.tile % tpi,
                inputs: ins.iter().map(|a| region(a.tensor)).collect(),
                outputs: vec![region(out.tensor)],
            });
        }
        for a in &ins {
            self.use_tensor(a.tensor);
        }
        let cs = self
            .b
            .compute_set_with_codelets(&here.instr.name, Vec::new(), vertices);
        self.emit(Program::Execute(cs));
        Ok(Value::Array(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xla_ir::ElementType;

    /// PopLibs' MultiSlice estimate at a point worked by hand: 12 offsets of 64 f32
    /// elements over 6 workers: 6 x (13 + 2 x (19 + 32 x 2)) = 1 074 cycles; a table
    /// (the operand) of any size costs the same, and 4 offsets take one worker.
    #[test]
    fn a_gather_costs_its_offsets_and_slices_not_its_table() {
        let target = Target::ipu2();
        let out = Shape::array(ElementType::F32, &[12, 64]);
        assert_eq!(
            gather_cost(&[1, 64], &out, &target),
            VertexCost::Supervisor(1_074)
        );
        let gather = || Op::Gather {
            dims: Default::default(),
            slice_sizes: vec![1, 64],
            indices_are_sorted: false,
        };
        let table = |rows: i64| Shape::array(ElementType::F32, &[rows, 64]);
        let ids = Shape::array(ElementType::S32, &[12, 1]);
        let module = Module::new("gathers");
        assert_eq!(
            estimate(&module, &gather(), &[table(10), ids.clone()], &out, &target),
            estimate(&module, &gather(), &[table(100_000), ids], &out, &target),
        );
        let few = Shape::array(ElementType::U8, &[4, 8]);
        assert_eq!(
            gather_cost(&[1, 8], &few, &target),
            VertexCost::Worker(13 + 4 * (19 + 2 * 3))
        );
    }

    /// PopLibs' DynamicSlice2D estimate at points worked by hand: one row of 256 f32 from
    /// a [30000, 256] table: 23 + (29 + 128) + 13; four rows of it, and rows of a
    /// [4, 100, 8] array sliced along its middle dimension (4 regions of 8 elements); the
    /// table's size does not count.
    #[test]
    fn a_dynamic_slice_costs_its_slice_not_its_operand() {
        let f32s = |dims: &[i64]| Shape::array(ElementType::F32, dims);
        let cost = |o: &[i64], s: &[i64]| dynamic_slice_cost(&f32s(o), &f32s(s), false);
        assert_eq!(
            cost(&[30_000, 256], &[1, 256]),
            VertexCost::Worker(23 + 157 + 13)
        );
        assert_eq!(
            cost(&[30, 256], &[1, 256]),
            VertexCost::Worker(23 + 157 + 13)
        );
        assert_eq!(
            cost(&[30_000, 256], &[4, 256]),
            VertexCost::Worker(23 + 157 * 4 + 13)
        );
        assert_eq!(
            cost(&[4, 100, 8], &[4, 1, 8]),
            VertexCost::Worker(23 + 4 * (29 + 4 + 13))
        );
        let bytes = |d: &[i64]| Shape::array(ElementType::U8, d);
        assert_eq!(
            dynamic_slice_cost(&bytes(&[10, 8]), &bytes(&[1, 8]), true),
            VertexCost::Worker(23 + (50 + 2 * 23) + 13)
        );
    }

    /// PopLibs' heap sort estimate at points worked by hand: a row of 1 024 f32 keys,
    /// 8 x (19 x 1024 x 10 + 6 x 1024 + 2); with values moving, twice; 12 rows of 8 over six
    /// workers, two rows a worker.
    #[test]
    fn a_sort_costs_its_rows_as_poplibs_heap_sort() {
        let target = Target::ipu2();
        let keys = |dims: &[i64]| Shape::array(ElementType::F32, dims);
        let row = 8 * (19 * 1024 * 10 + 6 * 1024 + 2);
        assert_eq!(
            sort_cost(0, &keys(&[1024]), &target),
            VertexCost::Worker(row)
        );
        let pair = Shape::Tuple(vec![keys(&[1024]), Shape::array(ElementType::S32, &[1024])]);
        assert_eq!(sort_cost(0, &pair, &target), VertexCost::Worker(2 * row));
        let short = 8 * (19 * 8 * 3 + 6 * 8 + 2);
        assert_eq!(
            sort_cost(1, &keys(&[12, 8]), &target),
            VertexCost::Supervisor(2 * short * 6)
        );
    }
}
