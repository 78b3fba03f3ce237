//! Reductions as the IPU does them: the operand laid out with reduced dimensions innermost,
//! per-tile partials over each tile's runs, then a cross-tile stage that gathers each
//! row's partials onto one tile and reduces them, then the init value and output type.
//! Reducers other than one binary op (argmax's pair reductions, say) run as codelets.

use super::mapping::{self, Piece};
use super::movement::{Src, flat};
use super::{Arr, Here, Lowerer, Scope, Value};
use crate::CompileError;
use codegen::{BinaryOp as KB, DType, Expr, KernelSpec, ReduceKernel, ReduceOp};
use runtime::{Program, Region, Vertex};
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
struct Segment {
    tile: usize,
    row: usize,
    len: usize,
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
                    mapping::MIN_ELEMENTS_PER_TILE,
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
        let mut segments = Vec::new();
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
        let kernel = Arc::new(KernelSpec::Reduce(ReduceKernel {
            init: init.filter(|_| segments.len() == rows),
            ..kernel
        }));
        let partials = self.arr_mapped(
            &format!("{name}.partials"),
            &pshape(segments.len()),
            part_pieces,
        );
        let tpi = self.target.tiles_per_ipu;
        let mut vertices = Vec::new();
        let (mut i, mut elem) = (0, 0);
        while i < segments.len() {
            // Consecutive segments on one tile with one length form one vertex's runs.
            let mut j = i + 1;
            while j < segments.len()
                && segments[j].tile == segments[i].tile
                && segments[j].len == segments[i].len
            {
                j += 1;
            }
            let len = segments[i].len;
            let count = j - i;
            for (a, c) in mapping::worker_split(
                count,
                self.target.worker_contexts,
                (256 / len.max(1)).max(1),
            ) {
                vertices.push(Vertex {
                    kernel: Arc::clone(&kernel),
                    ipu: segments[i].tile / tpi,
                    tile: segments[i].tile % tpi,
                    inputs: vec![Region {
                        tensor: t.tensor,
                        start: elem + a * len,
                        len: c * len,
                    }],
                    outputs: vec![Region {
                        tensor: partials.tensor,
                        start: i + a,
                        len: c,
                    }],
                    run_length: len,
                });
            }
            elem += count * len;
            i = j;
        }
        self.use_tensor(t.tensor);
        let cs = self.b.compute_set(&format!("{name}.partials"), vertices);
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
        let out_pieces = self.linear_pieces(rows);
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
                        inputs: vec![Region {
                            tensor: gathered.tensor,
                            start: first[r + a],
                            len: c * per_row,
                        }],
                        outputs: vec![Region {
                            tensor: result.tensor,
                            start: r + a,
                            len: c,
                        }],
                        run_length: per_row,
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
