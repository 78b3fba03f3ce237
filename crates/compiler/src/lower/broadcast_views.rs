//! Broadcasts read in place. A broadcast that repeats each element of its operand over
//! the result's innermost dimensions (a softmax's row maxima and sums, a LayerNorm's row
//! statistics: `[rows] -> [rows, R]`) and is read only by element-wise kernels is never
//! made: each reader's vertex reads the rows it covers, one element a row, and its kernel
//! reads that input repeated R times (`ElementwiseKernel::repeats`), as PopLibs'
//! `BroadcastVectorInner` vertices read a broadcast operand (Poplar's broadcast is a view,
//! not a copy). The rows a tile needs are sent to it once (one rearrangement from the
//! operand: R times fewer bytes than the broadcast held), and the broadcast's tile memory
//! is never taken.

use super::elementwise::{Readers, scalar_constant, sole_kernel_reader};
use super::mapping::Piece;
use super::movement::{RunWriter, Src, push_run};
use super::{Arr, Lowerer, Scope};
use crate::CompileError;
use codegen::{ElementwiseKernel, Expr};
use std::collections::HashMap;
use xla_ir::ids::InstrId;
use xla_ir::{ArrayShape, Computation, Module, Op};

/// The broadcasts in `comp` read in place, each with its repeat: a broadcast of a
/// non-constant whose dimensions are the result's leading ones in order (each operand
/// element repeated over the rest, R > 1 times), not the root, read once, by a JIT
/// element-wise instruction that is not an activation (whose formula reads its operand
/// several times). A broadcast several instructions read stays one tensor: each reader
/// would fetch its rows again.
pub(crate) fn broadcast_views(
    module: &Module,
    comp: &Computation,
    readers: &Readers,
) -> HashMap<InstrId, usize> {
    let mut views = HashMap::new();
    for &i in comp.order() {
        let instr = comp.instr(i);
        let Op::Broadcast { dimensions } = &instr.op else {
            continue;
        };
        let (Some(out), Some(src)) = (
            instr.shape.as_array(),
            comp.instr(instr.operands[0]).shape.as_array(),
        ) else {
            continue;
        };
        let k = src.dims.len();
        let leading = dimensions.iter().enumerate().all(|(j, &d)| d as usize == j)
            && dimensions.len() == k
            && src.dims[..] == out.dims[..k];
        let repeat: i64 = out.dims[k..].iter().product();
        if !leading
            || repeat < 2
            || scalar_constant(comp, i).is_some()
            || sole_kernel_reader(module, comp, readers, i).is_none()
        {
            continue;
        }
        views.insert(i, repeat as usize);
    }
    views
}

/// `piece` cut where rows of `repeat` elements begin, so each part lies in one row or
/// starts a row: the part before the first row start, the whole rows, the part after.
fn row_parts(piece: &Piece, repeat: usize) -> impl Iterator<Item = Piece> + '_ {
    let (start, end) = (piece.start, piece.start + piece.len);
    let first = start.next_multiple_of(repeat).min(end);
    let last = (end / repeat * repeat).max(first);
    [(start, first), (first, last), (last, end)]
        .into_iter()
        .filter(|(b, e)| b < e)
        .map(move |(b, e)| Piece {
            tile: piece.tile,
            start: b,
            len: e - b,
        })
}

impl Lowerer<'_> {
    /// Whether reading a broadcast in place over `pieces` (elements of `size` bytes) costs
    /// less than making it: made, the busiest piece's tile copies its share of the
    /// broadcast on-tile (the multicast rule, `runtime::model::multicast`); read in place,
    /// each piece is cut where rows begin into up to three vertices, each extra one a
    /// vertex's fixed instructions on a worker.
    fn views_pay(&self, pieces: &[Piece], repeat: usize, size: usize) -> bool {
        let extra = (pieces.iter())
            .map(|p| row_parts(p, repeat).count() - 1)
            .max()
            .unwrap_or(0) as u64;
        let longest = pieces.iter().map(|p| p.len).max().unwrap_or(0);
        let copied = runtime::cost::on_tile_copy_cycles((longest * size) as u64);
        let workers = self.target.worker_contexts as u64;
        extra == 0 || copied > extra * runtime::cost::VERTEX_OVERHEAD * workers
    }

    /// An element-wise kernel `expr` over the instructions `inputs`, some of them
    /// broadcasts read in place ([`broadcast_views`]): those of one repeat (the first
    /// one's) are read as their operand's rows; the kernel follows the other inputs'
    /// layout, its vertices cut at row starts. `None` when no input is such a broadcast not
    /// yet made, every input is one, or reading in place would cost more
    /// ([`Lowerer::views_pay`]): the broadcasts are then made.
    pub(crate) fn kernel_with_views(
        &mut self,
        scope: &mut Scope,
        name: &str,
        shape: &ArrayShape,
        expr: Expr,
        inputs: &[InstrId],
    ) -> Result<Option<Arr>, CompileError> {
        let view_of = |i: &InstrId| {
            scope
                .views
                .get(i)
                .copied()
                .filter(|_| !scope.env.contains_key(i))
        };
        let Some(repeat) = inputs.iter().find_map(view_of) else {
            return Ok(None);
        };
        let viewed: Vec<bool> = inputs.iter().map(|i| view_of(i) == Some(repeat)).collect();
        if viewed.iter().all(|&v| v) || shape.element_count() == 0 {
            return Ok(None);
        }
        // The other inputs' arrays (other broadcasts made), and the layout they give.
        let mut arrays: Vec<Option<Arr>> = Vec::with_capacity(inputs.len());
        for (&i, &v) in inputs.iter().zip(&viewed) {
            arrays.push(match v {
                true => None,
                false => Some(self.array(scope, i)?),
            });
        }
        let n = shape.element_count() as usize;
        let pieces = {
            let mappings = arrays.iter().flatten().map(|a| self.mapping(a.tensor));
            self.follow_mappings(mappings, n, self.dtype(shape))
        };
        let parts: Vec<Piece> = pieces.iter().flat_map(|p| row_parts(p, repeat)).collect();
        if !self.views_pay(&pieces, repeat, self.dtype(shape).size()) {
            return Ok(None);
        }
        // Each input's tensor and, per part, its region's start and length.
        let comp = self.module.computation(scope.comp);
        let mut operands: Vec<(runtime::TensorId, Vec<(usize, usize)>)> = Vec::new();
        let mut types = Vec::new();
        let mut repeats = Vec::new();
        for ((&i, array), &v) in inputs.iter().zip(arrays).zip(&viewed) {
            match array {
                Some(a) => {
                    let a = self.with_mapping(&a, &pieces);
                    types.push(self.dtype(&a.shape));
                    repeats.push(1);
                    operands.push((a.tensor, parts.iter().map(|p| (p.start, p.len)).collect()));
                }
                None => {
                    debug_assert!(v);
                    let broadcast = comp.instr(i);
                    let src = self.array(scope, broadcast.operands[0])?;
                    // The rows each part reads, side by side in part order, each part's on
                    // its tile.
                    let mut runs = RunWriter::default();
                    let (mut rows, mut regions) = (Vec::new(), Vec::new());
                    let mut at = 0;
                    for p in &parts {
                        let (lo, hi) = (p.start / repeat, (p.start + p.len - 1) / repeat + 1);
                        push_run(&mut runs, Src::At(0, lo), at, hi - lo);
                        rows.push(Piece {
                            tile: p.tile,
                            start: at,
                            len: hi - lo,
                        });
                        regions.push((at, hi - lo));
                        at += hi - lo;
                    }
                    let et = src.shape.element_type;
                    let read = self.arr_mapped(
                        &format!("{}.rows", broadcast.name),
                        &ArrayShape::new(et, &[at as i64]),
                        rows,
                    );
                    self.rearrange_into(
                        read.tensor,
                        vec![src.tensor],
                        runs.finish(),
                        Vec::new(),
                        &broadcast.name,
                    );
                    types.push(self.dtype(&read.shape));
                    repeats.push(repeat as u32);
                    operands.push((read.tensor, regions));
                }
            }
        }
        let kernel = ElementwiseKernel {
            inputs: types,
            outputs: vec![(self.dtype(shape), expr)],
            repeats,
        };
        let out = self.kernel_on_parts(name, shape, pieces, &parts, &operands, kernel);
        Ok(Some(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_are_cut_where_rows_begin() {
        let cut = |start, len| -> Vec<(usize, usize)> {
            let piece = Piece {
                tile: 3,
                start,
                len,
            };
            row_parts(&piece, 8).map(|p| (p.start, p.len)).collect()
        };
        // Inside one row; starting a row; across rows with parts before and after.
        assert_eq!(cut(2, 5), [(2, 5)]);
        assert_eq!(cut(8, 20), [(8, 16), (24, 4)]);
        assert_eq!(cut(5, 20), [(5, 3), (8, 16), (24, 1)]);
        assert_eq!(cut(6, 2), [(6, 2)]);
    }
}
