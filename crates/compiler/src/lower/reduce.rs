//! Reductions as the IPU does them: the operand laid out with reduced dimensions innermost,
//! per-tile partials over each tile's runs (on every worker, long stretches in pieces
//! combined on the tile), then a cross-tile stage that gathers each row's partials onto
//! the tile of its result and reduces them; a constant init value is combined by the
//! vertices that finish a row, any other init and a conversion to the output type by an
//! element-wise step after. Reducers other than one binary op (argmax's pair reductions,
//! say) run as codelets.

use super::mapping::{self, Piece};
use super::movement::{Src, flat};
use super::{Arr, Here, Lowerer, Scope, Value};
use crate::CompileError;
use codegen::{BinaryOp as KB, DType, Expr, KernelSpec, ReduceKernel, ReduceOp};
use runtime::cost::{VertexCost, tile_cycles, vertex_cost};
use runtime::{Program, Region, Target, TensorId, Vertex};
use std::sync::Arc;
use xla_ir::ids::CompId;
use xla_ir::{ArrayShape, BinaryOp, Module, Op};

/// The reduce op of a reducer computation that is one binary op of its two parameters.
pub(crate) fn simple_reducer(module: &Module, to_apply: CompId) -> Option<ReduceOp> {
    let c = module.computation(to_apply);
    let root = c.root_instr();
    let params = c.parameters();
    if params.len() != 2 || root.operands.len() != 2 {
        return None;
    }
    let is_param = |i| matches!(c.instr(i).op, Op::Parameter { .. });
    if !root.operands.iter().all(|&o| is_param(o)) || root.operands[0] == root.operands[1] {
        return None;
    }
    match root.op {
        Op::Binary(BinaryOp::Add) => Some(ReduceOp::Sum),
        Op::Binary(BinaryOp::Multiply) => Some(ReduceOp::Product),
        Op::Binary(BinaryOp::Maximum) => Some(ReduceOp::Max),
        Op::Binary(BinaryOp::Minimum) => Some(ReduceOp::Min),
        Op::Binary(BinaryOp::And) => Some(ReduceOp::And),
        Op::Binary(BinaryOp::Or) => Some(ReduceOp::Or),
        _ => None,
    }
}

fn combine(op: ReduceOp) -> KB {
    match op {
        ReduceOp::Sum => KB::Add,
        ReduceOp::Product => KB::Mul,
        ReduceOp::Max => KB::Max,
        ReduceOp::Min => KB::Min,
        ReduceOp::And => KB::And,
        ReduceOp::Or => KB::Or,
    }
}

/// The bits [`ReduceKernel::init`] holds for a literal scalar expression.
fn literal_bits(e: &Expr) -> Option<u32> {
    match *e {
        Expr::F32(bits) => Some(bits),
        Expr::S32(v) => Some(v as u32),
        Expr::U32(v) => Some(v),
        Expr::Pred(v) => Some(v as u32),
        _ => None,
    }
}

/// One tile's stretch of a row: (tile, row, first element, elements).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Segment {
    tile: usize,
    row: usize,
    len: usize,
}

/// The fewest elements a piece of a split stretch keeps: below it a vertex's overhead is
/// most of its work.
const MIN_PIECE: usize = 16;

/// How many pieces each of `segments` (in element order) is cut into so that the tiles
/// with fewer stretches than `workers` use their idle workers: PopLibs splits a tile's
/// reductions between free workers and combines the pieces on the tile
/// (`splitTwoStageReductionsBetweenWorkers`, graphcore/poplibs lib/popops/reduction/
/// ReductionConnection.cpp), the longest first, pieces of at least [`MIN_PIECE`].
fn pieces_for_workers(segments: &[Segment], workers: usize) -> Vec<usize> {
    let mut pieces = Vec::with_capacity(segments.len());
    for tile_segments in segments.chunk_by(|a, b| a.tile == b.tile) {
        let mut n = vec![1usize; tile_segments.len()];
        for _ in tile_segments.len()..workers {
            let (k, longest) = (0..n.len())
                .map(|k| (k, tile_segments[k].len.div_ceil(n[k])))
                .max_by_key(|&(k, len)| (len, std::cmp::Reverse(k)))
                .expect("a tile has a stretch");
            if longest < 2 * MIN_PIECE {
                break;
            }
            n[k] += 1;
        }
        pieces.extend(n);
    }
    pieces
}

/// Stage-1 work: `len` input elements on `tile` reduced into partial `out` (of the
/// segments), or into piece `piece` when its stretch is cut into pieces.
struct Item {
    tile: usize,
    len: usize,
    piece: Option<usize>,
    out: usize,
}

/// A stage vertex as planned: costed, and made into a [`Vertex`] only when its stage is
/// chosen (the transformer's reductions plan 180 000 of them, for two candidate stages).
#[derive(Clone, Copy)]
struct Planned {
    /// `ipu * tiles_per_ipu + tile`.
    tile: usize,
    /// Whether it writes a piece of a stretch (the plain kernel) rather than a partial (the
    /// kernel that may finish a row).
    piece: bool,
    input: Region,
    output: Region,
    run_length: usize,
}

impl Planned {
    /// The vertex, with the kernels `(finishing, plain)`, on IPUs of `tpi` tiles.
    fn made(&self, kernels: (&Arc<KernelSpec>, &Arc<KernelSpec>), tpi: usize) -> Vertex {
        Vertex {
            kernel: Arc::clone(if self.piece { kernels.1 } else { kernels.0 }),
            ipu: self.tile / tpi,
            tile: self.tile % tpi,
            inputs: smallvec::smallvec![self.input],
            outputs: smallvec::smallvec![self.output],
            run_length: self.run_length,
            grain: 0,
        }
    }
}

/// The vertices reducing `items` (consecutive in the input `tensors.0`) into the partials
/// `tensors.1` or the pieces `tensors.2` (pieces take the plain kernel: only their
/// combination finishes a row): consecutive items on one tile with one length and one
/// destination form the runs of vertices spread over the tile's workers, a run each while
/// workers remain (PopLibs' `distributeReductionsBetweenWorkers`,
/// lib/popops/reduction/ReductionConnection.cpp). Made as they are read: a candidate stage
/// is costed without being stored (the transformer's reductions plan 180 000 vertices).
fn stage_vertices(
    items: &[Item],
    tensors: (TensorId, TensorId, Option<TensorId>),
    workers: usize,
) -> impl Iterator<Item = Planned> + '_ {
    let (input, partials, pieces) = tensors;
    let slot = move |it: &Item| match it.piece {
        Some(p) => (pieces.expect("pieces have a tensor"), p),
        None => (partials, it.out),
    };
    // Each run of items: its first, how many, and its first input element.
    let (mut i, mut elem) = (0, 0);
    let runs = std::iter::from_fn(move || {
        let first = items.get(i)?;
        let (dst, at) = slot(first);
        let mut j = i + 1;
        while j < items.len()
            && items[j].tile == first.tile
            && items[j].len == first.len
            && slot(&items[j]) == (dst, at + (j - i))
        {
            j += 1;
        }
        let run = (first, j - i, elem);
        elem += (j - i) * first.len;
        i = j;
        Some(run)
    });
    runs.flat_map(move |(first, count, elem)| {
        let (dst, at) = slot(first);
        let len = first.len;
        let tile = first.tile;
        mapping::worker_split(count, workers, 1)
            .into_iter()
            .map(move |(a, c)| Planned {
                tile,
                piece: dst != partials,
                input: Region {
                    tensor: input,
                    start: elem + a * len,
                    len: c * len,
                },
                output: Region {
                    tensor: dst,
                    start: at + a,
                    len: c,
                },
                run_length: len,
            })
    })
}

/// The cycles a compute set of reduce vertices takes: its busiest tile's. `vertices()`
/// gives `(tile, kernel, input elements, output elements)` of each.
fn compute_cycles<'k, I>(vertices: impl Fn() -> I, target: &Target) -> u64
where
    I: Iterator<Item = (usize, &'k KernelSpec, usize, usize)>,
{
    let cost = |(tile, kernel, ins, outs)| (tile, vertex_cost(kernel, ins, outs, target));
    let workers = target.worker_contexts;
    // Stage vertices come in tile order: each tile's are costed as they come.
    let mut on_tile: Vec<VertexCost> = Vec::new();
    let (mut tile, mut busiest) = (None, 0);
    for (t, c) in vertices().map(cost) {
        if tile != Some(t) {
            if tile.is_some_and(|last| t < last) {
                return unordered_cycles(vertices().map(cost), workers);
            }
            if !on_tile.is_empty() {
                busiest = busiest.max(tile_cycles(&on_tile, workers));
                on_tile.clear();
            }
            tile = Some(t);
        }
        on_tile.push(c);
    }
    if !on_tile.is_empty() {
        busiest = busiest.max(tile_cycles(&on_tile, workers));
    }
    busiest
}

/// [`compute_cycles`] of vertices not in tile order: each tile's in the order given (a
/// stable sort by tile).
fn unordered_cycles(vertices: impl Iterator<Item = (usize, VertexCost)>, workers: usize) -> u64 {
    let mut costs: Vec<(usize, VertexCost)> = vertices.collect();
    costs.sort_by_key(|&(tile, _)| tile);
    let mut on_tile: Vec<VertexCost> = Vec::new();
    (costs.chunk_by(|a, b| a.0 == b.0))
        .map(|tile| {
            on_tile.clear();
            on_tile.extend(tile.iter().map(|&(_, cost)| cost));
            tile_cycles(&on_tile, workers)
        })
        .max()
        .unwrap_or(0)
}

/// [`compute_cycles`] of planned stage vertices with the kernels `(finishing, plain)`.
fn planned_cycles<I: Iterator<Item = Planned>>(
    vertices: impl Fn() -> I,
    kernels: (&KernelSpec, &KernelSpec),
    target: &Target,
) -> u64 {
    let kernel = move |v: &Planned| if v.piece { kernels.1 } else { kernels.0 };
    compute_cycles(
        || vertices().map(move |v| (v.tile, kernel(&v), v.input.len, v.output.len)),
        target,
    )
}

/// [`compute_cycles`] of vertices made.
fn vertex_cycles(vertices: &[Vertex], target: &Target) -> u64 {
    let tpi = target.tiles_per_ipu;
    compute_cycles(
        || {
            vertices.iter().map(|v| {
                let tile = v.ipu * tpi + v.tile;
                (tile, &*v.kernel, v.inputs[0].len, v.outputs[0].len)
            })
        },
        target,
    )
}

impl Lowerer<'_> {
    /// Lowers `reduce`.
    pub(crate) fn reduce(&mut self, scope: &mut Scope, here: Here) -> Result<Value, CompileError> {
        let Op::Reduce {
            dimensions,
            to_apply,
        } = &here.instr.op
        else {
            unreachable!("dispatched: reduce")
        };
        let op = match (
            here.instr.operands.len(),
            simple_reducer(self.module, *to_apply),
        ) {
            (2, Some(op)) if here.instr.shape.as_array().is_some() => op,
            _ => return self.codelet_op(scope, here),
        };
        let shape = here.array()?.clone();
        let x = self.array(scope, here.instr.operands[0])?;
        let dims = x.dims();
        let reduced: Vec<usize> = dimensions.iter().map(|&d| d as usize).collect();
        let kept: Vec<usize> = (0..dims.len()).filter(|d| !reduced.contains(d)).collect();
        let rows: usize = kept.iter().map(|&d| dims[d]).product();
        let run: usize = reduced.iter().map(|&d| dims[d]).product();
        let init_id = here.instr.operands[1];
        let name = here.instr.name.clone();
        // Lay the operand out as [kept..., reduced...], rows kept whole on tiles.
        let perm: Vec<usize> = kept.iter().chain(&reduced).copied().collect();
        let permuted_dims: Vec<usize> = perm.iter().map(|&d| dims[d]).collect();
        let t = if perm.iter().enumerate().all(|(i, &p)| i == p) {
            x.clone()
        } else {
            let pshape = ArrayShape::new(
                x.shape.element_type,
                &permuted_dims.iter().map(|&d| d as i64).collect::<Vec<_>>(),
            );
            let mut src = vec![0; dims.len()];
            let grain = if rows >= self.tiles {
                run
            } else {
                mapping::GRAIN
            };
            let out = self.arr_mapped(
                &format!("{name}.layout"),
                &pshape,
                self.placed(mapping::linear_grain(
                    rows * run,
                    self.tiles,
                    grain.max(1),
                    mapping::min_elements_per_tile(self.dtype(&x.shape)),
                )),
            );
            let stride = perm
                .last()
                .map_or(1, |&p| super::movement::strides(&dims)[p] as isize);
            let runs = super::movement::affine_runs(&permuted_dims, stride, |o| {
                for (k, &p) in perm.iter().enumerate() {
                    src[p] = o[k];
                }
                (0, flat(&dims, &src))
            });
            self.rearrange_into(
                out.tensor,
                vec![x.tensor],
                runs,
                Vec::new(),
                &format!("{name}.layout"),
            );
            out
        };
        let partial_type = ReduceKernel::new(op, self.dtype(&x.shape)).partial_type();
        let out_type = self.dtype(&shape);
        let constant_init = super::elementwise::scalar_constant(here.comp, init_id)
            .map(|data| super::elementwise::literal_expr(data, partial_type));
        // A constant init folds into the vertices that finish the reduction when their
        // partials are the result's type (else a conversion follows anyway).
        let folded = constant_init
            .as_ref()
            .and_then(literal_bits)
            .filter(|_| out_type == partial_type && rows > 0 && run > 0);
        let total = self.reduce_rows(&name, &t, rows, run, op, folded)?;
        if folded.is_some() {
            return Ok(Value::Array(Arr {
                tensor: total.tensor,
                shape,
            }));
        }
        // Combine with the init value and convert to the result type.
        let mut inputs = vec![total.clone()];
        let init = match constant_init {
            Some(init) => init,
            None => {
                let init = self.array(scope, init_id)?;
                let b = self.rearranged(
                    &format!("{name}.init"),
                    &total.shape.with_element_type(init.shape.element_type),
                    &[init],
                    Vec::new(),
                    |_| Src::At(0, 0),
                );
                inputs.push(b);
                Expr::Convert(partial_type, Box::new(Expr::Input(1)))
            }
        };
        let mut expr = Expr::binary(combine(op), Expr::Input(0), init);
        if out_type != partial_type {
            expr = Expr::Convert(out_type, Box::new(expr));
        }
        let result = self.map_kernel(&name, &shape, &inputs, vec![(out_type, expr)]);
        Ok(Value::Array(result))
    }

    /// Reduces each of `rows` runs of `run` consecutive elements of `t`, in the partial
    /// type, combining `init` (bits of the partial type) into each row's result last;
    /// returns a `[rows]` tensor. `init` needs rows and runs that are not empty.
    pub(crate) fn reduce_rows(
        &mut self,
        name: &str,
        t: &Arr,
        rows: usize,
        run: usize,
        op: ReduceOp,
        init: Option<u32>,
    ) -> Result<Arr, CompileError> {
        let kernel = ReduceKernel::new(op, self.dtype(&t.shape));
        let partial_type = kernel.partial_type();
        let pshape = |n: usize| {
            ArrayShape::new(
                match partial_type {
                    DType::F32 => xla_ir::ElementType::F32,
                    DType::S32 => xla_ir::ElementType::S32,
                    DType::U32 => xla_ir::ElementType::U32,
                    DType::Pred => xla_ir::ElementType::Pred,
                    DType::F16 => xla_ir::ElementType::F16,
                },
                &[n as i64],
            )
        };
        if run == 0 || rows == 0 {
            debug_assert!(init.is_none(), "an init folds into a vertex");
            let mut identity = vec![0; partial_type.size()];
            codegen::reference::store(
                partial_type,
                &mut identity,
                0,
                codegen::reference::identity(op, partial_type),
            );
            return Ok(self.rearranged(
                &format!("{name}.empty"),
                &pshape(rows),
                &[],
                identity,
                |_| Src::Fill,
            ));
        }
        // Stage 1: every tile reduces its stretch of each row it holds.
        let mut pieces: Vec<Piece> = self.mapping(t.tensor).to_vec();
        pieces.sort_by_key(|p| p.start);
        let mut segments: Vec<Segment> = Vec::new();
        for p in &pieces {
            let mut at = p.start;
            while at < p.start + p.len {
                let row = at / run;
                let end = ((row + 1) * run).min(p.start + p.len);
                segments.push(Segment {
                    tile: p.tile,
                    row,
                    len: end - at,
                });
                at = end;
            }
        }
        let mut part_pieces: Vec<Piece> = Vec::new();
        for (i, s) in segments.iter().enumerate() {
            match part_pieces.last_mut() {
                Some(last) if last.tile == s.tile => last.len += 1,
                _ => part_pieces.push(Piece {
                    tile: s.tile,
                    start: i,
                    len: 1,
                }),
            }
        }
        // One stretch per row: the partials are the results, and the init goes in here.
        let finishing = ReduceKernel {
            init: init.filter(|_| segments.len() == rows),
            ..kernel.clone()
        };
        let last = Arc::new(KernelSpec::Reduce(finishing.clone()));
        let plain = Arc::new(KernelSpec::Reduce(kernel));
        let partials = self.arr_mapped(
            &format!("{name}.partials"),
            &pshape(segments.len()),
            part_pieces,
        );
        let whole: Vec<Item> = (segments.iter().enumerate())
            .map(|(i, s)| Item {
                tile: s.tile,
                len: s.len,
                piece: None,
                out: i,
            })
            .collect();
        let into = |pieces| (t.tensor, partials.tensor, pieces);
        let kernels = (&last, &plain);
        // Tiles with idle workers cut their stretches into pieces, combined on the tile in a
        // compute set of their own, when that is faster than leaving the workers idle.
        let pieces = pieces_for_workers(&segments, self.target.worker_contexts);
        let mut items = Vec::new();
        let mut piece_tiles: Vec<Piece> = Vec::new();
        let mut combines = Vec::new();
        let mut first = 0;
        for (i, (s, &n)) in segments.iter().zip(&pieces).enumerate() {
            for k in 0..n {
                items.push(Item {
                    tile: s.tile,
                    len: (k + 1) * s.len / n - k * s.len / n,
                    piece: (n > 1).then_some(first + k),
                    out: i,
                });
            }
            if n > 1 {
                match piece_tiles.last_mut() {
                    Some(p) if p.tile == s.tile => p.len += n,
                    _ => piece_tiles.push(Piece {
                        tile: s.tile,
                        start: first,
                        len: n,
                    }),
                }
                combines.push((s.tile, first, n, i));
                first += n;
            }
        }
        let on_tile = Arc::new(KernelSpec::Reduce(ReduceKernel {
            input: partial_type,
            ..finishing
        }));
        let tpi = self.target.tiles_per_ipu;
        let combine = |pieces: TensorId| -> Vec<Vertex> {
            (combines.iter())
                .map(|&(tile, first, n, i)| Vertex {
                    kernel: Arc::clone(&on_tile),
                    ipu: tile / tpi,
                    tile: tile % tpi,
                    inputs: smallvec::smallvec![Region {
                        tensor: pieces,
                        start: first,
                        len: n,
                    }],
                    outputs: smallvec::smallvec![Region {
                        tensor: partials.tensor,
                        start: i,
                        len: 1,
                    }],
                    run_length: n,
                    grain: 0,
                })
                .collect()
        };
        // Costed before the pieces' tensor exists: only the regions' lengths count.
        let unmade = TensorId(u32::MAX);
        let workers = self.target.worker_contexts;
        let cycles = |items: &[Item], pieces| {
            let vertices = || stage_vertices(items, into(pieces), workers);
            planned_cycles(vertices, (&**kernels.0, &**kernels.1), &self.target)
        };
        let split = !combines.is_empty()
            && cycles(&items, Some(unmade))
                + self.target.internal_sync_cycles
                + vertex_cycles(&combine(unmade), &self.target)
                < cycles(&whole, None);
        let made = |items: &[Item], pieces| -> Vec<Vertex> {
            let vertices = || stage_vertices(items, into(pieces), workers);
            let mut made = Vec::with_capacity(vertices().count());
            made.extend(vertices().map(|v| v.made(kernels, tpi)));
            made
        };
        let (vertices, stage) = if split {
            let piece_arr = self.arr_mapped(&format!("{name}.pieces"), &pshape(first), piece_tiles);
            let split = made(&items, Some(piece_arr.tensor));
            self.use_tensor(t.tensor);
            let cs = self.b.compute_set(&format!("{name}.partials"), split);
            self.emit(Program::Execute(cs));
            self.use_tensor(piece_arr.tensor);
            (combine(piece_arr.tensor), "pieces")
        } else {
            (made(&whole, None), "partials")
        };
        self.use_tensor(t.tensor);
        let cs = self.b.compute_set(&format!("{name}.{stage}"), vertices);
        self.emit(Program::Execute(cs));
        if segments.len() == rows {
            return Ok(partials);
        }
        // Stage 2: each row's partials gathered onto the tile that holds the row's result.
        let counts: Vec<usize> = {
            let mut c = vec![0usize; rows];
            for s in &segments {
                c[s.row] += 1;
            }
            c
        };
        let first: Vec<usize> = counts
            .iter()
            .scan(0, |acc, &c| {
                let f = *acc;
                *acc += c;
                Some(f)
            })
            .collect();
        // The results spread as PopLibs' final reduction stage maps an output it creates
        // (`intermediateToOutput`, graphcore/poplibs lib/popops/reduction/
        // ReductionStages.cpp): linearly, in grains of the partials' vector width and at
        // least four vectors a tile, so a LayerNorm's 128 row statistics take 16 tiles.
        let vector = (8 / partial_type.size()).max(1);
        let out_pieces = self.placed(mapping::linear_grain(rows, self.tiles, vector, 4 * vector));
        let gathered_pieces: Vec<Piece> = out_pieces
            .iter()
            .map(|p| {
                let start = first[p.start];
                let end = if p.start + p.len < rows {
                    first[p.start + p.len]
                } else {
                    segments.len()
                };
                Piece {
                    tile: p.tile,
                    start,
                    len: end - start,
                }
            })
            .collect();
        let gathered = self.arr_mapped(
            &format!("{name}.gathered"),
            &partials.shape,
            gathered_pieces,
        );
        self.use_tensor(partials.tensor);
        self.emit(Program::Copy {
            src: partials.tensor,
            dst: gathered.tensor,
        });
        let result = self.arr_mapped(
            &format!("{name}.reduced"),
            &pshape(rows),
            out_pieces.clone(),
        );
        let tpi = self.target.tiles_per_ipu;
        let stage2 = Arc::new(KernelSpec::Reduce(ReduceKernel {
            op,
            input: partial_type,
            init,
        }));
        let mut vertices = Vec::new();
        for p in &out_pieces {
            let mut r = p.start;
            while r < p.start + p.len {
                let mut s = r + 1;
                while s < p.start + p.len && counts[s] == counts[r] {
                    s += 1;
                }
                // Rows with as many partials each, shared by the tile's worker contexts
                // (at least 32 partials a vertex, where its overhead stops dominating).
                let per_row = counts[r];
                for (a, c) in mapping::worker_split(
                    s - r,
                    self.target.worker_contexts,
                    (32 / per_row.max(1)).max(1),
                ) {
                    vertices.push(Vertex {
                        kernel: Arc::clone(&stage2),
                        ipu: p.tile / tpi,
                        tile: p.tile % tpi,
                        inputs: smallvec::smallvec![Region {
                            tensor: gathered.tensor,
                            start: first[r + a],
                            len: c * per_row,
                        }],
                        outputs: smallvec::smallvec![Region {
                            tensor: result.tensor,
                            start: r + a,
                            len: c,
                        }],
                        run_length: per_row,
                        grain: 0,
                    });
                }
                r = s;
            }
        }
        self.use_tensor(gathered.tensor);
        let cs = self.b.compute_set(&format!("{name}.combine"), vertices);
        self.emit(Program::Execute(cs));
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(tile: usize, row: usize, len: usize) -> Segment {
        Segment { tile, row, len }
    }

    #[test]
    fn idle_workers_take_pieces_of_the_longest_stretches() {
        // A lone 128-element stretch: pieces while they stay at least 32 long before a cut.
        assert_eq!(pieces_for_workers(&[segment(0, 0, 128)], 6), [5]);
        // Two stretches share the four idle workers, the longer first.
        let two = [segment(3, 0, 300), segment(3, 1, 100)];
        assert_eq!(pieces_for_workers(&two, 6), [4, 2]);
        // Short stretches, or as many stretches as workers, are left whole.
        assert_eq!(pieces_for_workers(&[segment(1, 0, 31)], 6), [1]);
        let busy: Vec<Segment> = (0..6).map(|r| segment(2, r, 1000)).collect();
        assert_eq!(pieces_for_workers(&busy, 6), [1; 6]);
        // Tiles are counted apart.
        let tiles = [segment(0, 0, 64), segment(1, 0, 64), segment(1, 1, 64)];
        assert_eq!(pieces_for_workers(&tiles, 2), [2, 1, 1]);
    }
}
