//! Scatter spread over tiles, as popops' multi-update does it: the operand is split along
//! one index-addressed dimension (each tile owns a slice), the indices and updates are
//! broadcast to the owning tiles in chunks, and each tile applies the updates that land in
//! its slice (indices shifted by the slice's start; XLA skips windows out of bounds, so
//! updates for other slices fall away). Chunks run one compute set after another.

use super::{Arr, Here, Lowerer, Value};
use crate::CompileError;
use runtime::cost::VertexCost;
use runtime::{CodeletVertex, Program};
use xla_ir::literal::{ArrayData, ArrayLiteral, Literal};
use xla_ir::{ArrayShape, BinaryOp, Computation, ElementType, Instruction, Module, Op, Shape};

/// Bytes of indices and updates a tile receives per chunk.
const CHUNK_BYTES: u64 = 96 * 1024;

impl Lowerer<'_> {
    /// Lowers a single-operand scatter split over tiles; `None` when it does not split
    /// (the caller then runs it on one tile).
    pub(crate) fn split_scatter(
        &mut self,
        here: &Here,
        operands: &[Arr],
    ) -> Result<Option<Value>, CompileError> {
        let Op::Scatter { dims, .. } = &here.instr.op else {
            return Ok(None);
        };
        if operands.len() != 3 || !dims.input_batching_dims.is_empty() {
            return Ok(None);
        }
        let (op, idx, upd) = (&operands[0], &operands[1], &operands[2]);
        let od = op.dims();
        let (idims, udims) = (idx.dims(), upd.dims());
        let ivd = dims.index_vector_dim as usize;
        if ivd >= idims.len() || idims.is_empty() {
            return Ok(None);
        }
        // Window size of each operand dim: 1 where inserted, else the update window's.
        let window_dims: Vec<usize> = (0..od.len())
            .filter(|d| !dims.inserted_window_dims.contains(&(*d as i64)))
            .collect();
        let window = |d: usize| match window_dims.iter().position(|&w| w == d) {
            Some(j) => udims[dims.update_window_dims[j] as usize],
            None => 1,
        };
        let Some(d) = dims
            .scatter_dims_to_operand_dims
            .iter()
            .map(|&d| d as usize)
            .filter(|&d| window(d) == 1 && od[d] > 1)
            .max_by_key(|&d| od[d])
        else {
            return Ok(None);
        };
        let column = dims
            .scatter_dims_to_operand_dims
            .iter()
            .position(|&x| x as usize == d)
            .expect("chosen from the list");
        let parts = od[d].min(self.tiles);
        // Chunks along the first index batch dim and its updates dim.
        let ib = (0..idims.len()).find(|&i| i != ivd).expect("rank >= 2");
        let ub = (0..udims.len())
            .find(|u| !dims.update_window_dims.contains(&(*u as i64)))
            .ok_or_else(|| here.unsupported("updates with no scatter dimension"))?;
        let row_bytes = idx.shape.byte_size() / idims[ib].max(1) as u64
            + upd.shape.byte_size() / udims[ub].max(1) as u64;
        let chunk_rows = ((CHUNK_BYTES / row_bytes.max(1)) as usize).clamp(1, idims[ib].max(1));
        let chunks = idims[ib].div_ceil(chunk_rows).max(1);
        let name = here.instr.name.clone();
        let start_tile = self.next_tile();
        let tpi = self.target.tiles_per_ipu;
        // Each part's slice of the operand, on its tile.
        let mut slices: Vec<Arr> = Vec::new();
        for p in 0..parts {
            let (s, len) = super::dot::part(od[d], parts, p);
            let tile = self.tile_at(start_tile + p);
            slices.push(self.slice_on_tile(op, &[(d, s, len)], tile, &format!("{name}.slice{p}")));
        }
        for c in 0..chunks {
            let (r0, rn) = (c * chunk_rows, chunk_rows.min(idims[ib] - c * chunk_rows));
            let mut vertices = Vec::new();
            let mut next = Vec::new();
            let mut reads = Vec::new();
            for (p, slice) in slices.iter().enumerate() {
                let tile = self.tile_at(start_tile + p);
                let ic =
                    self.slice_on_tile(idx, &[(ib, r0, rn)], tile, &format!("{name}.idx{c}.p{p}"));
                let uc =
                    self.slice_on_tile(upd, &[(ub, r0, rn)], tile, &format!("{name}.upd{c}.p{p}"));
                let (start, _) = super::dot::part(od[d], parts, p);
                let module = shifted_scatter(
                    self.module,
                    here.instr,
                    &slice.shape,
                    &ic.shape,
                    &uc.shape,
                    column,
                    start as i32,
                );
                let elems = ic.shape.element_count() + uc.shape.element_count();
                let cost = VertexCost::Worker(12 + elems * 6);
                let shapes = vec![slice.shape.clone(), ic.shape.clone(), uc.shape.clone()];
                let id = self.add_eval_codelet(here, module, shapes, cost, None)?;
                let out = self.arr_mapped(
                    &format!("{name}.c{c}.p{p}"),
                    &slice.shape,
                    super::mapping::single(slice.elements(), tile),
                );
                vertices.push(CodeletVertex {
                    codelet: id,
                    ipu: tile / tpi,
                    tile: tile % tpi,
                    inputs: vec![slice.whole(), ic.whole(), uc.whole()],
                    outputs: vec![out.whole()],
                });
                reads.extend([slice.tensor, ic.tensor, uc.tensor]);
                next.push(out);
            }
            for t in reads {
                self.use_tensor(t);
            }
            let cs =
                self.b
                    .compute_set_with_codelets(&format!("{name}.chunk{c}"), Vec::new(), vertices);
            self.emit(Program::Execute(cs));
            slices = next;
        }
        let shape = here.array()?.clone();
        let out = self.concatenated(&name, &shape, &slices, d);
        Ok(Some(Value::Array(out)))
    }
}

/// `scatter(slice, indices - start in `column`, updates)` as a module.
fn shifted_scatter(
    module: &Module,
    instr: &Instruction,
    slice: &ArrayShape,
    indices: &ArrayShape,
    updates: &ArrayShape,
    column: usize,
    start: i32,
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
    let cols = indices.dims[ivd as usize] as usize;
    let mut offsets = vec![0i32; cols];
    offsets[column] = start;
    let mut e = Computation::new("entry");
    let p = |i: usize, s: &ArrayShape| {
        Instruction::new(
            format!("p{i}"),
            Op::Parameter { number: i as u64 },
            &[],
            Shape::Array(s.clone()),
        )
    };
    let p0 = e.push(p(0, slice));
    let p1 = e.push(p(1, indices));
    let p2 = e.push(p(2, updates));
    let lit = ArrayLiteral::new(
        ArrayShape::new(ElementType::S32, &[cols as i64]),
        ArrayData::S32(offsets),
    )
    .expect("shape matches data");
    let c = e.push(Instruction::new(
        "offsets",
        Op::Constant {
            literal: Literal::Array(lit),
        },
        &[],
        Shape::array(ElementType::S32, &[cols as i64]),
    ));
    let idx_shape = Shape::Array(ArrayShape::new(ElementType::S32, &indices.dims));
    let b = e.push(Instruction::new(
        "offsets.b",
        Op::Broadcast {
            dimensions: vec![ivd],
        },
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
        &[p0, shifted, p2],
        Shape::Array(ArrayShape::new(slice.element_type, &slice.dims)),
    ));
    m.entry = m.add_computation(e);
    m
}
