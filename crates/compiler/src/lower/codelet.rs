//! Ops the kernel IR does not express (convolutions, sorts, gathers, scatters, dynamic
//! slices, windowed reductions with general reducers, narrow-integer arithmetic) run as
//! native codelets on tiles: each vertex evaluates the op with the reference semantics on
//! the slices its tile holds. Where the op splits along a dimension (batch of a
//! convolution, rows of a sort, indices of a gather, untouched dimensions of a window) the
//! work is spread over tiles, each receiving its operand slices by exchange; element-wise
//! ops split like any element-wise kernel. Ops that do not split run on one tile.

use super::conv_codelet::{ConvCodelet, ConvPlans, SharedPatches};
use super::mapping::{self, Piece};
use super::movement::{affine_runs, flat};
use super::{Arr, Here, Lowerer, Scope, Value};
use crate::CompileError;
use crate::device_data::{from_device, to_device};
use runtime::cost::VertexCost;
use runtime::{Codelet, CodeletRef, CodeletVertex, Program, Region, Target};
use std::collections::HashMap;
use std::sync::Arc;
use xla_ir::ids::CompId;
use xla_ir::literal::Literal;
use xla_ir::{ArrayShape, Computation, Instruction, Module, Op, Shape};

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
    Ok(CodeletRef::new(EvalCodelet {
        source: Arc::new(source),
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
        let args: Vec<Literal> = source
            .inputs
            .iter()
            .zip(inputs)
            .map(|(s, b)| Literal::Array(from_device(s, b)))
            .collect();
        let result = xla_ir::eval::evaluate(&source.module, &args)
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

/// How an op splits: the result dimension split, and per operand the dimension split
/// alongside it (or none: the whole operand goes to every part).
struct Split {
    out_dim: usize,
    operand_dims: Vec<Option<usize>>,
    parts: usize,
    /// Applied to each part's op (a grouped convolution's groups become parts).
    ungroup: bool,
}

fn window_free_dims(w: &xla_ir::attributes::Window) -> Vec<usize> {
    w.dims
        .iter()
        .enumerate()
        .filter(|(_, d)| {
            d.size == 1
                && d.stride == 1
                && d.pad_low == 0
                && d.pad_high == 0
                && d.window_dilation == 1
                && d.base_dilation == 1
        })
        .map(|(i, _)| i)
        .collect()
}

fn largest(dims: &[usize], sizes: &[usize]) -> Option<usize> {
    dims.iter()
        .copied()
        .filter(|&d| sizes[d] > 1)
        .max_by_key(|&d| (sizes[d], usize::MAX - d))
}

/// How `here`'s op splits over tiles, if it does.
fn split_of(here: &Here, operands: &[Arr], tiles: usize) -> Option<Split> {
    let instr = here.instr;
    let out_dims: Vec<usize> = instr
        .shape
        .leaf_arrays()
        .first()?
        .dims
        .iter()
        .map(|&d| d as usize)
        .collect();
    let n_ops = operands.len();
    let simple = |out_dim: usize, operand_dims: Vec<Option<usize>>| {
        Some(Split {
            out_dim,
            operand_dims,
            parts: out_dims[out_dim].min(tiles),
            ungroup: false,
        })
    };
    match &instr.op {
        Op::Convolution {
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
                return Some(Split {
                    out_dim: of,
                    operand_dims: vec![Some(ib), Some(kof)],
                    parts: *batch_group_count as usize,
                    ungroup: true,
                });
            }
            if out_dims[ob] >= out_dims[of] || *feature_group_count > 1 {
                simple(ob, vec![Some(ib), None])
            } else {
                simple(of, vec![None, Some(kof)])
            }
        }
        Op::Sort { dimension, .. } => {
            let d = largest(
                &(0..out_dims.len())
                    .filter(|&d| d != *dimension as usize)
                    .collect::<Vec<_>>(),
                &out_dims,
            )?;
            simple(d, vec![Some(d); n_ops])
        }
        Op::Gather { dims, .. } if dims.operand_batching_dims.is_empty() => {
            let batch: Vec<usize> = (0..out_dims.len())
                .filter(|d| !dims.offset_dims.contains(&(*d as i64)))
                .collect();
            let d = *batch.first()?;
            let idx_rank = operands[1].shape.dims.len();
            let idx_dims: Vec<usize> = (0..idx_rank)
                .filter(|&i| i as i64 != dims.index_vector_dim)
                .collect();
            simple(d, vec![None, Some(*idx_dims.first()?)])
        }
        Op::ReduceWindow { window, .. } => {
            let d = largest(&window_free_dims(window), &out_dims)?;
            let half = n_ops / 2;
            simple(d, (0..n_ops).map(|i| (i < half).then_some(d)).collect())
        }
        Op::SelectAndScatter { window, .. } => {
            let d = largest(&window_free_dims(window), &out_dims)?;
            simple(d, vec![Some(d), Some(d), None])
        }
        Op::Reduce { dimensions, .. } => {
            let in_dims = operands[0].dims();
            let kept: Vec<usize> = (0..in_dims.len())
                .filter(|d| !dimensions.contains(&(*d as i64)))
                .collect();
            let d = largest(&kept, &in_dims)?;
            let pos = kept.iter().position(|&k| k == d)?;
            let half = n_ops / 2;
            simple(pos, (0..n_ops).map(|i| (i < half).then_some(d)).collect())
        }
        Op::Dot { dims, .. } => {
            let ld = operands[0].dims();
            let batch = dims.lhs_batch.len();
            let free: Vec<usize> = (0..ld.len())
                .filter(|d| {
                    !dims.lhs_batch.contains(&(*d as i64))
                        && !dims.lhs_contracting.contains(&(*d as i64))
                })
                .collect();
            let d = *free.first()?;
            simple(batch, vec![Some(d), None])
        }
        _ => None,
    }
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
fn estimate(op: &Op, in_shapes: &[Shape], out: &Shape, target: &Target) -> VertexCost {
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
        Op::Sort { .. } => {
            let n = out_elems.max(2);
            VertexCost::Worker(12 + n * (64 - n.leading_zeros() as u64) * 6)
        }
        _ => VertexCost::Worker(12 + (out_elems + in_elems) * 4),
    }
}

fn sliced(shape: &ArrayShape, dim: usize, len: usize) -> ArrayShape {
    let mut s = shape.clone();
    s.dims[dim] = len as i64;
    s.layout = None;
    s
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

    /// Operand `a` on each part's tile (part `p` on `tiles[p]`, reading all of `a` or the
    /// part `slices[p]` = (dimension, start, length)): its shape there and its region. The
    /// copies are one tensor whose part `p` lies on `tiles[p]`, filled by one
    /// rearrangement, as Poplar copies a tensor to many tiles in one exchange; only when
    /// some part finds `a` already on its tile does each part get its own copy (or none).
    pub(crate) fn operand_on_tiles(
        &mut self,
        a: &Arr,
        slices: &[Option<(usize, usize, usize)>],
        tiles: &[usize],
        name: &str,
    ) -> Vec<(ArrayShape, Region)> {
        let shared = slices.len() > 1
            && slices
                .iter()
                .zip(tiles)
                .all(|(s, &t)| s.is_some() || !self.all_on_tile(a, t));
        if !shared {
            return slices
                .iter()
                .zip(tiles)
                .enumerate()
                .map(|(p, (&slice, &tile))| {
                    let arr = self.slice_on_tile(a, slice, tile, &format!("{name}.p{p}"));
                    (arr.shape.clone(), arr.whole())
                })
                .collect();
        }
        let dims = a.dims();
        let shapes: Vec<ArrayShape> = slices
            .iter()
            .map(|s| match *s {
                Some((d, _, len)) => sliced(&a.shape, d, len),
                None => a.shape.clone(),
            })
            .collect();
        let mut pieces = Vec::with_capacity(tiles.len());
        let mut runs = runtime::Runs::new();
        let mut start = 0;
        for ((shape, slice), &tile) in shapes.iter().zip(slices).zip(tiles) {
            let part_dims: Vec<usize> = shape.dims.iter().map(|&d| d as usize).collect();
            let len: usize = part_dims.iter().product();
            let mut src = vec![0; dims.len()];
            let part = affine_runs(&part_dims, 1, |o| {
                src.copy_from_slice(o);
                if let Some((d, first, _)) = *slice {
                    src[d] += first;
                }
                (0, flat(&dims, &src))
            });
            for mut run in part.iter() {
                run.dst_start += start;
                runs.push(run);
            }
            pieces.push(Piece { tile, start, len });
            start += len;
        }
        let mut all = a.shape.clone();
        all.dims = [start as i64].into_iter().collect();
        all.layout = None;
        let t = self.arr_mapped(name, &all, pieces.clone());
        self.rearrange_into(t.tensor, vec![a.tensor], runs, Vec::new(), name);
        shapes
            .into_iter()
            .zip(&pieces)
            .map(|(shape, piece)| {
                let region = Region {
                    tensor: t.tensor,
                    start: piece.start,
                    len: piece.len,
                };
                (shape, region)
            })
            .collect()
    }

    /// A copy of `a` (or the part `range` of dimension `dim`) on one tile, unless `a` is
    /// already all there.
    pub(crate) fn slice_on_tile(
        &mut self,
        a: &Arr,
        slice: Option<(usize, usize, usize)>,
        tile: usize,
        name: &str,
    ) -> Arr {
        if slice.is_none() && self.all_on_tile(a, tile) {
            return a.clone();
        }
        let dims = a.dims();
        let (shape, part_dims) = match slice {
            Some((d, _, len)) => {
                let mut pd = dims.clone();
                pd[d] = len;
                (sliced(&a.shape, d, len), pd)
            }
            None => (a.shape.clone(), dims.clone()),
        };
        let n: usize = part_dims.iter().product();
        let t = self.arr_mapped(name, &shape, mapping::single(n, tile));
        let mut src = vec![0; dims.len()];
        let runs = affine_runs(&part_dims, 1, |o| {
            src.copy_from_slice(o);
            if let Some((d, start, _)) = slice {
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
        let split = split_of(&here, &operands, self.tiles).filter(|s| s.parts > 1);
        let budget =
            (self.conv.available_memory_proportion * self.target.bytes_per_tile as f64) as u64;
        // A convolution part's temporaries: its patch matrix (output positions x window x
        // input features, f32), fewer positions per part when the batch is split.
        let patches = |s: Option<&Split>, parts: usize| -> u64 {
            let Op::Convolution { dims, .. } = &here.instr.op else {
                return 0;
            };
            let (out, kernel) = (&out_leaves[0], &operands[1].shape);
            let out_features = out.dims[dims.output_feature as usize].max(1) as u64;
            let kernel_out = kernel.dims[dims.kernel_output_feature as usize].max(1) as u64;
            let positions = out.element_count() / out_features;
            let window = kernel.element_count() / kernel_out;
            let batch_split = s.is_some_and(|s| s.operand_dims[0].is_some());
            let per_part = if batch_split {
                positions.div_ceil(parts as u64)
            } else {
                positions
            };
            per_part * window * 4
        };
        let (parts, split) = match split {
            Some(mut s) => {
                let most = s.parts;
                let whole: u64 = operands
                    .iter()
                    .zip(&s.operand_dims)
                    .filter(|(_, d)| d.is_none())
                    .map(|(a, _)| a.shape.byte_size())
                    .sum();
                if whole > 64 * 1024 && !s.ungroup {
                    s.parts = s.parts.min(16);
                }
                // availableMemoryProportion bounds a convolution's temporaries per tile, as
                // it bounds a matrix product's: split further while they are over it (as
                // the matmul planner, the finest split is taken when none fits).
                if convolution && !s.ungroup {
                    while s.parts < most && patches(Some(&s), s.parts) > budget {
                        s.parts = (s.parts * 2).min(most);
                    }
                }
                (s.parts, Some(s))
            }
            None => (1, None),
        };
        let start = self.next_tile();
        let name = here.instr.name.clone();
        if convolution {
            let bytes = patches(split.as_ref(), parts);
            tracing::debug!(
                target: "ipuxla::plan",
                "convolution {name}: direct kernel split {parts} ways, ~{bytes} B of patches per tile (budget {budget})"
            );
        }
        let mut part_outputs: Vec<Vec<Arr>> = Vec::new();
        let mut vertices = Vec::new();
        let mut reads = Vec::new();
        let tpi = self.target.tiles_per_ipu;
        // Parts of a convolution that all read the whole input share one patch matrix.
        let shared = match (&here.instr.op, &split) {
            (Op::Convolution { .. }, Some(s)) if s.operand_dims[0].is_none() => {
                Some(Arc::new(SharedPatches::default()))
            }
            _ => None,
        };
        let tiles: Vec<usize> = (0..parts).map(|p| self.tile_at(start + p)).collect();
        // Operand k of part p: its shape and region on the part's tile.
        let mut part_ins: Vec<Vec<(ArrayShape, Region)>> = vec![Vec::new(); parts];
        for (k, a) in operands.iter().enumerate() {
            let slices: Vec<Option<(usize, usize, usize)>> = (0..parts)
                .map(|p| {
                    let d = split.as_ref().and_then(|s| s.operand_dims[k])?;
                    let (st, len) = super::dot::part(a.dims()[d], parts, p);
                    Some((d, st, len))
                })
                .collect();
            let placed = self.operand_on_tiles(a, &slices, &tiles, &format!("{name}.in{k}"));
            for (ins, x) in part_ins.iter_mut().zip(placed) {
                ins.push(x);
            }
        }
        for (p, ins) in part_ins.into_iter().enumerate() {
            let tile = tiles[p];
            let outs: Vec<ArrayShape> = out_leaves
                .iter()
                .map(|s| match &split {
                    Some(sp) => sliced(
                        s,
                        sp.out_dim,
                        super::dot::part(s.dims[sp.out_dim] as usize, parts, p).1,
                    ),
                    None => s.clone(),
                })
                .collect();
            let out_shape = if here.instr.shape.is_tuple() {
                Shape::Tuple(outs.iter().cloned().map(Shape::Array).collect())
            } else {
                Shape::Array(outs[0].clone())
            };
            let mut op = here.instr.op.clone();
            if let (
                Some(sp),
                Op::Convolution {
                    batch_group_count, ..
                },
            ) = (&split, &mut op)
                && sp.ungroup
            {
                *batch_group_count = 1;
            }
            let in_shapes: Vec<Shape> = ins.iter().map(|(s, _)| Shape::Array(s.clone())).collect();
            let cost = estimate(&op, &in_shapes, &out_shape, &self.target);
            let module =
                single_op_module(self.module, here.instr, &in_shapes, Some((out_shape, op)));
            let id = self.add_eval_codelet(
                &here,
                module,
                ins.iter().map(|(s, _)| s.clone()).collect(),
                cost,
                shared.as_ref(),
            )?;
            let out_arrs: Vec<Arr> = outs
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
            vertices.push(CodeletVertex {
                codelet: id,
                ipu: tile / tpi,
                tile: tile % tpi,
                inputs: ins.iter().map(|(_, r)| *r).collect(),
                outputs: out_arrs.iter().map(Arr::whole).collect(),
            });
            reads.extend(ins.iter().map(|(_, r)| r.tensor));
            part_outputs.push(out_arrs);
        }
        for t in reads {
            self.use_tensor(t);
        }
        let cs = self
            .b
            .compute_set_with_codelets(&name, Vec::new(), vertices);
        self.emit(Program::Execute(cs));
        // Assemble each result leaf from its parts.
        let mut results = Vec::new();
        for (j, s) in out_leaves.iter().enumerate() {
            let arr = match &split {
                None => part_outputs[0][j].clone(),
                Some(sp) => {
                    let parts_j: Vec<Arr> = part_outputs.iter().map(|o| o[j].clone()).collect();
                    self.concatenated(&format!("{name}.{j}"), s, &parts_j, sp.out_dim)
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

    /// An element-wise op the JIT does not compute (narrow integers, total-order
    /// comparisons, bitcasts): one codelet per tile on that tile's elements.
    fn elementwise_codelet(
        &mut self,
        here: &Here,
        operands: &[Arr],
    ) -> Result<Value, CompileError> {
        let shape = here.array()?.clone();
        let n = shape.element_count() as usize;
        let pieces: Vec<Piece> = self.follow_mapping(operands, n);
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
            let cost = estimate(&here.instr.op, &shapes, &out_shape, &self.target);
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
