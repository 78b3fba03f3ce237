//! Matrix products: a planner splits batch, M, N and K over tiles (bounded by
//! `availableMemoryProportion` of tile memory for the operand blocks and partials), the
//! operand blocks are exchanged onto their tiles, each tile runs AMP matrix-product
//! vertices, and the blocks come back as the result (K splits summed by one kernel).

use super::elementwise::WORKER_GRAIN;
use super::mapping::Piece;
use super::movement::{RunWriter, Src, push_run, push_strided_run};
use super::{Arr, Here, Lowerer, Scope, Value};
use crate::CompileError;
use crate::config::PartialsType;
use codegen::{BinaryOp as KB, DType, ElementwiseKernel, Expr, KernelSpec, MatMulKernel};
use runtime::cost::{KernelRate, tile_cycles};
use runtime::{Program, Region, Vertex};
use std::collections::HashMap;
use std::sync::Arc;
use xla_ir::{ArrayShape, ElementType, Op};

/// A plan: how many parts each dimension is split into, and its estimated cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct DotPlan {
    pub pb: usize,
    pub pm: usize,
    pub pn: usize,
    pub pk: usize,
    pub cycles: u64,
    pub temp_bytes: u64,
}

/// The part counts worth trying for a dimension of `n` split at most `cap` ways: for each
/// block length `ceil(n / p)`, the fewest parts that give it (more parts of that length
/// would only take tiles from the other dimensions).
fn part_counts(n: usize, cap: usize) -> Vec<usize> {
    let cap = n.min(cap).max(1);
    let mut counts = Vec::new();
    let mut p = 1;
    while p <= cap {
        counts.push(p);
        let len = n.div_ceil(p);
        if len <= 1 {
            break;
        }
        p = n.div_ceil(len - 1);
    }
    counts
}

/// Most parts K is split into (each part's partials are summed after the products).
const MAX_K_PARTS: usize = 16;

/// `i`-th of `p` near-equal parts of `n`: (start, len).
pub(crate) fn part(n: usize, p: usize, i: usize) -> (usize, usize) {
    let s = i * n / p;
    (s, (i + 1) * n / p - s)
}

/// Chooses the plan with the fewest estimated cycles whose per-tile temporaries fit in
/// `budget` bytes (the smallest-footprint plan when none fits). `sum_cycles(pk)` is what
/// finishing the result costs a tile when K is split into `pk` parts (the sum of the parts
/// and the conversion to the result type: [`Lowerer::sum_of_parts`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn plan(
    b: usize,
    m: usize,
    k: usize,
    n: usize,
    in_bytes: u64,
    macs: u64,
    tiles: usize,
    budget: u64,
    sum_cycles: impl Fn(usize) -> u64,
) -> DotPlan {
    let mut best: Option<DotPlan> = None;
    let mut smallest: Option<DotPlan> = None;
    for pk in part_counts(k, MAX_K_PARTS.min(tiles)) {
        let sum = sum_cycles(pk);
        for pb in part_counts(b, tiles / pk) {
            for pm in part_counts(m, tiles / (pk * pb)) {
                // More parts of N only shrink every block, so N takes the tiles left over
                // (as few parts as give that block length).
                let most = n.min(tiles / (pk * pb * pm)).max(1);
                let pn = n.max(1).div_ceil(n.div_ceil(most).max(1));
                let (bb, mb, nb, kb) = (
                    b.div_ceil(pb) as u64,
                    m.div_ceil(pm) as u64,
                    n.div_ceil(pn) as u64,
                    k.div_ceil(pk) as u64,
                );
                let operands = (bb * mb * kb + bb * kb * nb) * in_bytes;
                let partials = bb * mb * nb * 4;
                let temp = operands + partials;
                let compute = bb * ((mb * nb * kb).div_ceil(macs) + 72);
                let exchange = (operands + partials).div_ceil(4);
                let cycles = compute + exchange + sum;
                let p = DotPlan {
                    pb,
                    pm,
                    pn,
                    pk,
                    cycles,
                    temp_bytes: temp,
                };
                if temp <= budget && best.is_none_or(|x| cycles < x.cycles) {
                    best = Some(p);
                }
                if smallest.is_none_or(|x| temp < x.temp_bytes) {
                    smallest = Some(p);
                }
            }
        }
    }
    best.or(smallest).expect("the 1x1x1x1 plan always exists")
}

/// Offsets of each index of the grouped dimensions `dims` of an operand of `shape`.
fn offsets(shape: &[usize], dims: &[usize]) -> Vec<usize> {
    let strides: Vec<usize> = (0..shape.len())
        .map(|d| shape[d + 1..].iter().product())
        .collect();
    let n: usize = dims.iter().map(|&d| shape[d]).product();
    (0..n)
        .map(|mut i| {
            let mut off = 0;
            for &d in dims.iter().rev() {
                off += (i % shape[d]) * strides[d];
                i /= shape[d];
            }
            off
        })
        .collect()
}

/// The `len` offsets from `first` of `offsets`, for `(first, len)`: a block's share of one
/// dimension.
fn span(offsets: &[usize], (first, len): (usize, usize)) -> &[usize] {
    &offsets[first..first + len]
}

/// Offsets as one strided run when they step evenly (an operand row or column): the step.
fn even_step(offsets: &[usize]) -> Option<isize> {
    let [first, second, ..] = offsets else {
        return Some(1);
    };
    let step = *second as isize - *first as isize;
    offsets
        .windows(2)
        .all(|w| w[1] as isize - w[0] as isize == step)
        .then_some(step)
}

/// Appends destination elements `dst..` read from source elements `base + offsets[i]`:
/// one strided run when the offsets step evenly (`step`, from [`even_step`] of the same
/// offsets, checked once for every row that shares them), else one element at a time.
fn push_offsets(
    runs: &mut RunWriter,
    base: usize,
    (offsets, step): (&[usize], Option<isize>),
    dst: usize,
) {
    match (offsets.first(), step) {
        (None, _) => {}
        (Some(&first), Some(step)) => {
            push_strided_run(runs, 0, base + first, step, dst, offsets.len())
        }
        (Some(_), None) => {
            for (i, &o) in offsets.iter().enumerate() {
                push_run(runs, Src::At(0, base + o), dst + i, 1);
            }
        }
    }
}

/// [`push_offsets`] for each row of `rows`, from `base + rows[i]`, packed from `dst`;
/// returns where the next destination element goes. Evenly stepped rows of evenly stepped
/// offsets go in as one [`RunWriter::push_rows`] (a dot operand block's rows).
fn push_offset_rows(
    runs: &mut RunWriter,
    base: usize,
    (rows, rows_step): (&[usize], Option<isize>),
    (offsets, step): (&[usize], Option<isize>),
    dst: usize,
) -> usize {
    match (rows.first(), rows_step, offsets.first(), step) {
        (Some(&row), Some(rows_step), Some(&first), Some(step)) => {
            let at = (base + row + first, rows_step);
            runs.push_rows(
                0,
                at,
                (step, offsets.len()),
                (dst, offsets.len()),
                rows.len(),
            );
        }
        _ => {
            for (i, &row) in rows.iter().enumerate() {
                push_offsets(runs, base + row, (offsets, step), dst + i * offsets.len());
            }
        }
    }
    dst + rows.len() * offsets.len()
}

/// One tile's share of a plan.
struct Block {
    tile: usize,
    b: (usize, usize),
    m: (usize, usize),
    n: (usize, usize),
    k: (usize, usize),
    ik: usize,
}

impl Lowerer<'_> {
    /// Lowers `dot`.
    pub(crate) fn dot(
        &mut self,
        scope: &mut Scope,
        here: Here,
        id: xla_ir::ids::InstrId,
    ) -> Result<Value, CompileError> {
        let Op::Dot { dims, .. } = &here.instr.op else {
            unreachable!("dispatched: dot")
        };
        let shape = here.array()?.clone();
        let lhs = self.array(scope, here.instr.operands[0])?;
        let rhs = self.array(scope, here.instr.operands[1])?;
        let float = |t: ElementType| matches!(t, ElementType::F32 | ElementType::F16);
        if lhs.shape.element_type != rhs.shape.element_type
            || !float(lhs.shape.element_type)
            || !float(shape.element_type)
        {
            return self.codelet_op(scope, here);
        }
        let name = here.instr.name.clone();
        let (ld, rd) = (lhs.dims(), rhs.dims());
        let u = |v: &[i64]| v.iter().map(|&d| d as usize).collect::<Vec<_>>();
        let (lb, rb, lc, rc) = (
            u(&dims.lhs_batch),
            u(&dims.rhs_batch),
            u(&dims.lhs_contracting),
            u(&dims.rhs_contracting),
        );
        let lf: Vec<usize> = (0..ld.len())
            .filter(|d| !lb.contains(d) && !lc.contains(d))
            .collect();
        let rf: Vec<usize> = (0..rd.len())
            .filter(|d| !rb.contains(d) && !rc.contains(d))
            .collect();
        let size = |s: &[usize], ds: &[usize]| ds.iter().map(|&d| s[d]).product::<usize>();
        let (b, m, k, n) = (
            size(&ld, &lb),
            size(&ld, &lf),
            size(&ld, &lc),
            size(&rd, &rf),
        );
        let in_type = self.dtype(&lhs.shape);
        let in_bytes = in_type.size() as u64;
        let half = self.matmul.partials == PartialsType::Half;
        if half && in_type != DType::F16 {
            return Err(here.unsupported(
                "matmuls.poplar_options.partialsType half applies to f16 operands (the AMP's f16-accumulating mode); this dot's operands are f32, so keep partialsType float for it",
            ));
        }
        let partials = if half { DType::F16 } else { DType::F32 };
        let partial_type = if half {
            ElementType::F16
        } else {
            ElementType::F32
        };
        let macs = if in_type == DType::F16 {
            self.target.f16_macs_per_cycle
        } else {
            self.target.f32_macs_per_cycle
        };
        let budget =
            (self.matmul.available_memory_proportion * self.target.bytes_per_tile as f64) as u64;
        let out_type = self.dtype(&shape);
        let total = shape.element_count() as usize;
        let linear = self.linear_pieces(total, out_type);
        let widest = linear.iter().map(|q| q.len).max().unwrap_or(0);
        let (target, workers) = (&self.target, self.target.worker_contexts);
        let sum_cycles = |pk: usize| {
            if pk == 1 && out_type == partials {
                return 0;
            }
            let rate = KernelRate::of(&sum_kernel(pk, partials, out_type), target);
            let costs = rate.multi_vertex_costs(widest, WORKER_GRAIN, workers);
            tile_cycles(&costs, workers) + target.internal_sync_cycles
        };
        let p = plan(b, m, k, n, in_bytes, macs, self.tiles, budget, sum_cycles);
        tracing::debug!(
            target: "ipuxla::plan",
            "dot {name}: B={b} M={m} K={k} N={n} ({in_type:?}{}) -> split batch {} x M {} x N {} x K {} on {} tiles, ~{} cycles, {} B temporaries per tile (budget {budget})",
            if half { ", half partials" } else { "" },
            p.pb, p.pm, p.pn, p.pk, p.pb * p.pm * p.pn * p.pk, p.cycles, p.temp_bytes
        );
        if b * m * n == 0 || k == 0 {
            let zero = vec![0u8; out_type.size()];
            return Ok(Value::Array(self.rearranged(
                &name,
                &shape,
                &[],
                zero,
                |_| super::movement::Src::Fill,
            )));
        }
        // An operand that many tiles read rows of with a stride (its contracting
        // dimensions, for the left, or free ones, for the right, not innermost: a
        // transposed activation, say) is first copied into [batch, free, contracting]
        // (left) or [batch, contracting, free] (right) order, as PopLibs pre-arranges a
        // matmul's operands: each block then reads runs that every tile reading the same
        // elements shares in one send (a strided read is sent to each receiver alone).
        // The copy and the shared send move each element about twice, and the copy is
        // one more superstep: measured on the corpus, it pays when at least eight tiles
        // read each element (at 4 the batched-dot case lost 672 cycles, at 2-3 BERT's
        // attention 898; at 4-7 the MLPs' optimised forms gain ~280).
        const SHARED_READERS: usize = 8;
        let strided = |d: &[usize], along: &[usize]| even_step(&offsets(d, along)) != Some(1);
        let (lhs, ld, [lb, lf, lc]) = if p.pn >= SHARED_READERS && strided(&ld, &lc) {
            self.arranged(&format!("{name}.lhs_arranged"), &lhs, [lb, lf, lc])
        } else {
            (lhs, ld, [lb, lf, lc])
        };
        let (rhs, rd, [rb, rc, rf]) = if p.pm >= SHARED_READERS && strided(&rd, &rf) {
            self.arranged(&format!("{name}.rhs_arranged"), &rhs, [rb, rc, rf])
        } else {
            (rhs, rd, [rb, rc, rf])
        };
        let (l_b, l_m, l_k) = (offsets(&ld, &lb), offsets(&ld, &lf), offsets(&ld, &lc));
        let (r_b, r_k, r_n) = (offsets(&rd, &rb), offsets(&rd, &rc), offsets(&rd, &rf));
        let start = self.next_tile();
        let mut blocks = Vec::new();
        let mut idx = 0;
        for ib in 0..p.pb {
            for im in 0..p.pm {
                for in_ in 0..p.pn {
                    for ik in 0..p.pk {
                        blocks.push(Block {
                            tile: self.tile_at(start + idx),
                            b: part(b, p.pb, ib),
                            m: part(m, p.pm, im),
                            n: part(n, p.pn, in_),
                            k: part(k, p.pk, ik),
                            ik,
                        });
                        idx += 1;
                    }
                }
            }
        }
        // Operand blocks, each tile's contiguous on that tile.
        let (mut a_runs, mut b_runs) = (RunWriter::default(), RunWriter::default());
        let (mut a_pieces, mut b_pieces, mut c_pieces) = (Vec::new(), Vec::new(), Vec::new());
        let (mut a_at, mut b_at, mut c_at) = (0, 0, 0);
        let mut starts = Vec::new();
        for blk in &blocks {
            starts.push((a_at, b_at, c_at));
            let (a0, b0, c0) = (a_at, b_at, c_at);
            let (ms, ks, ns) = (span(&l_m, blk.m), span(&l_k, blk.k), span(&r_n, blk.n));
            let rks = span(&r_k, blk.k);
            let (row, col) = ((ks, even_step(ks)), (ns, even_step(ns)));
            let (a_rows, b_rows) = ((ms, even_step(ms)), (rks, even_step(rks)));
            for bi in blk.b.0..blk.b.0 + blk.b.1 {
                a_at = push_offset_rows(&mut a_runs, l_b[bi], a_rows, row, a_at);
                b_at = push_offset_rows(&mut b_runs, r_b[bi], b_rows, col, b_at);
                c_at += blk.m.1 * blk.n.1;
            }
            a_pieces.push(Piece {
                tile: blk.tile,
                start: a0,
                len: a_at - a0,
            });
            b_pieces.push(Piece {
                tile: blk.tile,
                start: b0,
                len: b_at - b0,
            });
            c_pieces.push(Piece {
                tile: blk.tile,
                start: c0,
                len: c_at - c0,
            });
        }
        let et = lhs.shape.element_type;
        let a_t = self.arr_mapped(
            &format!("{name}.lhs_blocks"),
            &ArrayShape::new(et, &[a_at as i64]),
            a_pieces,
        );
        self.rearrange_into(
            a_t.tensor,
            vec![lhs.tensor],
            a_runs.finish(),
            Vec::new(),
            &format!("{name}.lhs_blocks"),
        );
        let b_t = self.arr_mapped(
            &format!("{name}.rhs_blocks"),
            &ArrayShape::new(et, &[b_at as i64]),
            b_pieces,
        );
        self.rearrange_into(
            b_t.tensor,
            vec![rhs.tensor],
            b_runs.finish(),
            Vec::new(),
            &format!("{name}.rhs_blocks"),
        );
        let c_t = self.arr_mapped(
            &format!("{name}.partials"),
            &ArrayShape::new(partial_type, &[c_at as i64]),
            c_pieces,
        );
        let tpi = self.target.tiles_per_ipu;
        let mut vertices = Vec::new();
        // Blocks of one shape share their kernel: the IPU holds its code once per tile, and
        // the model and the engine work a kernel out once per run of vertices sharing it.
        let mut kernels: HashMap<(usize, usize, usize), Arc<KernelSpec>> = HashMap::new();
        for (blk, &(a0, b0, c0)) in blocks.iter().zip(&starts) {
            let (mb, nb, kb) = (blk.m.1, blk.n.1, blk.k.1);
            if mb * nb == 0 {
                continue;
            }
            let kernel = kernels.entry((mb, kb, nb)).or_insert_with(|| {
                Arc::new(KernelSpec::MatMul(MatMulKernel {
                    m: mb,
                    k: kb,
                    n: nb,
                    input: in_type,
                    partials,
                }))
            });
            for j in 0..blk.b.1 {
                vertices.push(Vertex {
                    kernel: kernel.clone(),
                    ipu: blk.tile / tpi,
                    tile: blk.tile % tpi,
                    inputs: smallvec::smallvec![
                        Region {
                            tensor: a_t.tensor,
                            start: a0 + j * mb * kb,
                            len: mb * kb,
                        },
                        Region {
                            tensor: b_t.tensor,
                            start: b0 + j * kb * nb,
                            len: kb * nb,
                        },
                    ],
                    outputs: smallvec::smallvec![Region {
                        tensor: c_t.tensor,
                        start: c0 + j * mb * nb,
                        len: mb * nb,
                    }],
                    run_length: 0,
                    grain: 0,
                });
            }
        }
        self.use_tensor(a_t.tensor);
        self.use_tensor(b_t.tensor);
        let cs = self.b.compute_set(&name, vertices);
        self.emit(Program::Execute(cs));
        // Blocks back into [batch, M, N] order in one rearrangement (one exchange phase,
        // every tile sending at once): K part `ik` at `ik * total` of a stacked tensor, each
        // part mapped as the result is, so the sum reads its parts on-tile.
        let mut runs = RunWriter::default();
        for (blk, &(_, _, c0)) in blocks.iter().zip(&starts) {
            let mut at = c0;
            for bi in blk.b.0..blk.b.0 + blk.b.1 {
                let dst = blk.ik * total + (bi * m + blk.m.0) * n + blk.n.0;
                let (row, rows) = ((1, blk.n.1), blk.m.1);
                runs.push_rows(0, (at, blk.n.1 as isize), row, (dst, n), rows);
                at += blk.m.1 * blk.n.1;
            }
        }
        let stacked_shape = if p.pk == 1 {
            shape.with_element_type(partial_type)
        } else {
            let dims: Vec<i64> = std::iter::once(p.pk as i64)
                .chain(shape.dims.iter().copied())
                .collect();
            xla_ir::ArrayShape::new(partial_type, &dims)
        };
        let stacked_pieces: Vec<Piece> = (0..p.pk)
            .flat_map(|ik| {
                linear.iter().map(move |q| Piece {
                    start: q.start + ik * total,
                    ..*q
                })
            })
            .collect();
        let stacked = self.arr_mapped(&format!("{name}.parts"), &stacked_shape, stacked_pieces);
        self.rearrange_into(
            stacked.tensor,
            vec![c_t.tensor],
            runs.finish(),
            Vec::new(),
            &format!("{name}.result"),
        );
        if p.pk == 1 && out_type == partials {
            return Ok(Value::Array(Arr {
                tensor: stacked.tensor,
                shape,
            }));
        }
        // The sum of the K parts (and the conversion to the result type), or, when the
        // product's one reader is element-wise, the parts left for its kernel to sum.
        if scope.defer_sums.contains(&id) {
            let sum = super::deferred_sums::PendingSum {
                name,
                stacked: stacked.tensor,
                shape,
                parts: p.pk,
                linear,
                partials,
            };
            return Ok(self.defer_sum(scope, id, sum));
        }
        let sum = self.sum_of_parts(&name, stacked.tensor, &shape, p.pk, &linear, partials);
        Ok(Value::Array(sum))
    }

    /// `a` copied with its dimensions in the order of `groups` (each a list of `a`'s
    /// dimensions), with its dimensions and each group's dimensions in the copy.
    fn arranged(
        &mut self,
        name: &str,
        a: &Arr,
        groups: [Vec<usize>; 3],
    ) -> (Arr, Vec<usize>, [Vec<usize>; 3]) {
        let order = groups.concat();
        let copy = self.transposed(name, a, &order);
        let dims = copy.dims();
        let mut at = 0;
        let renumbered = groups.map(|g| {
            let r = (at..at + g.len()).collect();
            at += g.len();
            r
        });
        (copy, dims, renumbered)
    }

    /// The sum of `parts` arrays of `shape` stacked in `stacked` (part `i` at element
    /// `i * total`, each laid out over `linear` as the result is, so the sum reads them
    /// on-tile), read as `partials` and converted to `shape`'s type.
    pub(crate) fn sum_of_parts(
        &mut self,
        name: &str,
        stacked: runtime::TensorId,
        shape: &ArrayShape,
        parts: usize,
        linear: &[Piece],
        partials: DType,
    ) -> Arr {
        let total = shape.element_count() as usize;
        let out_type = self.dtype(shape);
        let tpi = self.target.tiles_per_ipu;
        let kernel = Arc::new(sum_kernel(parts, partials, out_type));
        let out = self.arr_mapped(&format!("{name}.sum"), shape, linear.to_vec());
        // One multi-vertex a piece, its elements shared between the tile's workers.
        let vertices = linear
            .iter()
            .map(|q| {
                let part = |ik: usize| Region {
                    tensor: stacked,
                    start: ik * total + q.start,
                    len: q.len,
                };
                Vertex {
                    kernel: Arc::clone(&kernel),
                    ipu: q.tile / tpi,
                    tile: q.tile % tpi,
                    inputs: (0..parts).map(part).collect(),
                    outputs: smallvec::smallvec![Region {
                        tensor: out.tensor,
                        start: q.start,
                        len: q.len,
                    }],
                    run_length: 0,
                    grain: WORKER_GRAIN,
                }
            })
            .collect();
        self.use_tensor(stacked);
        let cs = self.b.compute_set(&format!("{name}.sum"), vertices);
        self.emit(Program::Execute(cs));
        out
    }
}

/// The kernel summing `parts` K parts of type `partials` into `out_type`.
fn sum_kernel(parts: usize, partials: DType, out_type: DType) -> KernelSpec {
    let mut expr = Expr::Input(0);
    for i in 1..parts {
        expr = Expr::binary(KB::Add, expr, Expr::Input(i as u32));
    }
    if out_type != partials {
        expr = Expr::Convert(out_type, Box::new(expr));
    }
    KernelSpec::Elementwise(ElementwiseKernel {
        inputs: vec![partials; parts],
        outputs: vec![(out_type, expr)],
        repeats: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_fit_the_budget_and_use_the_tiles() {
        let p = plan(1, 512, 512, 512, 4, 16, 1472, 370_000, |pk| 300 * pk as u64);
        assert!(p.temp_bytes <= 370_000, "{p:?}");
        assert!(p.pb * p.pm * p.pn * p.pk > 512, "{p:?}");
        // a tiny budget forces smaller blocks, so more parts
        let q = plan(1, 512, 512, 512, 4, 16, 4, 100_000, |pk| 300 * pk as u64);
        assert!(q.pm * q.pn * q.pk >= 4, "{q:?}");
    }

    #[test]
    fn part_counts_are_the_fewest_parts_for_each_block_length() {
        assert_eq!(part_counts(10, 10), vec![1, 2, 3, 4, 5, 10]);
        assert_eq!(part_counts(10, 7), vec![1, 2, 3, 4, 5]);
        assert_eq!(part_counts(0, 4), vec![1]);
        assert_eq!(part_counts(1, 4), vec![1]);
    }

    #[test]
    fn a_cheaper_sum_of_k_parts_buys_more_k_parts() {
        let dear = plan(1, 2048, 2048, 2048, 2, 64, 1472, 383_385, |pk| {
            20_000 * pk as u64
        });
        let cheap = plan(1, 2048, 2048, 2048, 2, 64, 1472, 383_385, |pk| {
            100 * pk as u64
        });
        assert!(cheap.pk > dear.pk, "{cheap:?} {dear:?}");
        assert!(
            cheap.pb * cheap.pm * cheap.pn * cheap.pk <= 1472,
            "{cheap:?}"
        );
        // never more parts than tiles, K's included
        let few = plan(1, 8, 384, 384, 4, 16, 4, 383_385, |_| 0);
        assert!(few.pb * few.pm * few.pn * few.pk <= 4, "{few:?}");
    }

    #[test]
    fn parts_cover_evenly() {
        let total: usize = (0..7).map(|i| part(100, 7, i).1).sum();
        assert_eq!(total, 100);
        assert_eq!(part(100, 7, 0).0, 0);
    }
}
