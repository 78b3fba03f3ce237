//! Matrix-product vertices of one compute set run as a few large products on the host.
//!
//! A planned matrix product splits M, N and K over the tiles, so one operand block is
//! multiplied on many tiles: an lhs block by every rhs block of its K part (one per N part),
//! each a vertex with its own small gemm call (its own packing, its own dispatch). When both
//! operands are read in place from kept windows ([`crate::exec::shortcuts::operand_views`]) and the blocks
//! that share one operand are side by side in the other operand's window, the host
//! multiplies the shared block by all of them at once (one gemm over the concatenated
//! columns, or rows) into a scratch matrix, and each vertex's result is copied from it to its
//! tile. Every vertex's result holds the same products over the same K range as before (summed in
//! gemm's order for the batch's shape, so the last bits can differ from a lone vertex's); the
//! IPU Model's cycles are charged per vertex exactly as before (the host's batching is not
//! the IPU's).

use crate::exec::memory::f32_bytes;
use crate::exec::shortcuts::operand_views::View;
use crate::program::executable::TensorId;
use codegen::{MatRef, gemm_f32_refs};
use rayon::prelude::*;
use rustc_hash::FxHashMap;

/// A matrix-product vertex whose operands are both kept-window views.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ViewedProduct {
    /// Its tile's slot in the compute set.
    pub slot: usize,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub a: View,
    pub b: View,
    /// Byte offset of its m×n f32 row-major result in the tile's memory.
    pub out: usize,
    /// Its result's tensor and first element there.
    pub dst: (TensorId, usize),
}

/// One host gemm: `rows × k` (a) by `k × cols` (b) into `scratch[offset..]`, row-major.
#[derive(Debug, Clone, Copy)]
struct Batch {
    rows: usize,
    k: usize,
    cols: usize,
    a: View,
    b: View,
    offset: usize,
}

/// A vertex's result inside a batch's scratch matrix, and where it goes on its tile.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scatter {
    /// The batch (by index) whose scratch matrix holds it.
    pub batch: u32,
    row0: usize,
    col0: usize,
    rows: usize,
    cols: usize,
    /// Byte offset in the tile's memory.
    out: usize,
    /// The result's tensor and first element there.
    pub dst: (TensorId, usize),
}

impl Scatter {
    /// Elements of the vertex's result.
    pub(crate) fn elements(&self) -> usize {
        self.rows * self.cols
    }
}

/// The batches of one compute set and their scratch results.
#[derive(Debug, Default)]
pub(crate) struct ProductBatches {
    batches: Vec<Batch>,
    scratch: Vec<f32>,
}

/// Which operand the members of a batch share.
#[derive(Clone, Copy, PartialEq)]
enum Shared {
    /// One lhs block, rhs blocks side by side: columns concatenate.
    Lhs,
    /// One rhs block, lhs blocks stacked: rows concatenate.
    Rhs,
}

type ViewKey = (u32, u32, usize, isize, isize);

/// What members of one batch have in common: the shared operand's view, its two extents,
/// and the other operand's window and strides.
type BatchKey = (ViewKey, usize, usize, u32, u32, isize, isize);

fn key(v: View) -> ViewKey {
    (v.rearrange, v.source, v.at, v.rs, v.cs)
}

/// Stands in a batch key for the step between a block's rows (or columns) when the block
/// is one row (or column): that step is never read, and a view may carry any value there
/// (the bench MLP's one-element products of a [128, 10] weight gradient carry 0). Such
/// blocks join at the step their places show.
const ANY_STEP: isize = isize::MIN;

/// `step` as a batch key holds it for a block `extent` long along the joined dimension.
fn key_step(extent: usize, step: isize) -> isize {
    if extent == 1 { ANY_STEP } else { step }
}

/// Splits `members` (of one group: one key, so one step or all [`ANY_STEP`]) into runs
/// whose blocks continue each other along the joined dimension, `place` giving a member's
/// `(start, extent, step)` there. Each run comes with the step between its blocks (`None`
/// for a lone one-long block, whose view's step stands).
fn continuing(
    mut members: Vec<usize>,
    place: impl Fn(usize) -> (isize, isize, isize),
) -> Vec<(Vec<usize>, Option<isize>)> {
    let step = place(members[0]).2;
    let fixed = (step != ANY_STEP).then_some(step);
    if fixed.is_some_and(|s| s <= 0) {
        return members.into_iter().map(|i| (vec![i], None)).collect();
    }
    members.sort_by_key(|&i| place(i).0);
    let mut out = Vec::new();
    let mut run = vec![members[0]];
    let mut run_step = fixed;
    for &i in &members[1..] {
        let (at, len, _) = place(*run.last().expect("runs start non-empty"));
        let next = place(i).0;
        // One-long blocks (len 1) take the step from the first two of a run.
        let s = run_step.unwrap_or(next - at);
        if s > 0 && next == at + len * s {
            run_step = Some(s);
            run.push(i);
        } else {
            out.push((std::mem::replace(&mut run, vec![i]), run_step));
            run_step = fixed;
        }
    }
    out.push((run, run_step));
    out
}

/// Groups `products` (indices) into runs that one gemm computes when `shared` is shared,
/// each with the step between its members' blocks (see [`continuing`]).
fn runs(products: &[ViewedProduct], shared: Shared) -> Vec<(Vec<usize>, Option<isize>)> {
    let mut groups: FxHashMap<BatchKey, Vec<usize>> = FxHashMap::default();
    for (i, p) in products.iter().enumerate() {
        // The shared operand exactly, the K extent, the other's fixed extent and layout.
        let k = match shared {
            Shared::Lhs => (
                key(p.a),
                p.m,
                p.k,
                p.b.rearrange,
                p.b.source,
                p.b.rs,
                key_step(p.n, p.b.cs),
            ),
            Shared::Rhs => (
                key(p.b),
                p.n,
                p.k,
                p.a.rearrange,
                p.a.source,
                key_step(p.m, p.a.rs),
                p.a.cs,
            ),
        };
        groups.entry(k).or_default().push(i);
    }
    // In order of each group's first vertex: the same batches every load.
    let mut groups: Vec<Vec<usize>> = groups.into_values().collect();
    groups.sort_unstable_by_key(|g| g[0]);
    // Where each member's block starts along the concatenated dimension, its extent and
    // step.
    let place = |i: usize| {
        let p = &products[i];
        match shared {
            Shared::Lhs => (p.b.at as isize, p.n as isize, key_step(p.n, p.b.cs)),
            Shared::Rhs => (p.a.at as isize, p.m as isize, key_step(p.m, p.a.rs)),
        }
    };
    (groups.into_iter())
        .flat_map(|members| continuing(members, place))
        .collect()
}

/// Joins batches whose shared blocks continue each other in their window and that
/// multiply them by the same concatenated other operand: a K part's lhs blocks of every M
/// part (stacked rows) by its rhs blocks of every N part is one gemm, not one per M part
/// (each packing the same rhs again). Member results move with their batch (`scatters`).
fn merge_grid(batches: Vec<Batch>, scatters: &mut [Option<Scatter>], shared: Shared) -> Vec<Batch> {
    let group_key = |b: &Batch| -> BatchKey {
        match shared {
            Shared::Lhs => (
                key(b.b),
                b.cols,
                b.k,
                b.a.rearrange,
                b.a.source,
                key_step(b.rows, b.a.rs),
                b.a.cs,
            ),
            Shared::Rhs => (
                key(b.a),
                b.rows,
                b.k,
                b.b.rearrange,
                b.b.source,
                b.b.rs,
                key_step(b.cols, b.b.cs),
            ),
        }
    };
    // Where a batch's shared block starts in its window, its extent and step.
    let place = |i: usize| {
        let b = &batches[i];
        match shared {
            Shared::Lhs => (b.a.at as isize, b.rows as isize, key_step(b.rows, b.a.rs)),
            Shared::Rhs => (b.b.at as isize, b.cols as isize, key_step(b.cols, b.b.cs)),
        }
    };
    let mut groups: FxHashMap<BatchKey, Vec<usize>> = FxHashMap::default();
    for (i, b) in batches.iter().enumerate() {
        groups.entry(group_key(b)).or_default().push(i);
    }
    let mut groups: Vec<Vec<usize>> = groups.into_values().collect();
    groups.sort_unstable_by_key(|g| g[0]);
    // Per old batch: its new batch and how far along the joined dimension it starts.
    let mut moved = vec![(0u32, 0usize); batches.len()];
    let mut merged: Vec<Batch> = Vec::new();
    for (run, step) in groups.into_iter().flat_map(|g| continuing(g, place)) {
        let mut joined = batches[run[0]];
        let mut along = 0;
        for &i in &run {
            moved[i] = (merged.len() as u32, along);
            along += match shared {
                Shared::Lhs => batches[i].rows,
                Shared::Rhs => batches[i].cols,
            };
        }
        match shared {
            Shared::Lhs => {
                joined.rows = along;
                joined.a.rs = step.unwrap_or(joined.a.rs);
            }
            Shared::Rhs => {
                joined.cols = along;
                joined.b.cs = step.unwrap_or(joined.b.cs);
            }
        }
        merged.push(joined);
    }
    for s in scatters.iter_mut().flatten() {
        let (batch, shift) = moved[s.batch as usize];
        s.batch = batch;
        match shared {
            Shared::Lhs => s.row0 += shift,
            Shared::Rhs => s.col0 += shift,
        }
    }
    merged
}

impl ProductBatches {
    /// Batches `products`, sharing whichever operand needs fewer gemms. Returns the batches
    /// and, per product, where its result lies in them (`None`: run it as a vertex).
    pub(crate) fn plan(products: &[ViewedProduct]) -> (ProductBatches, Vec<Option<Scatter>>) {
        let by_lhs = runs(products, Shared::Lhs);
        let by_rhs = runs(products, Shared::Rhs);
        let (groups, shared) = if by_rhs.len() < by_lhs.len() {
            (by_rhs, Shared::Rhs)
        } else {
            (by_lhs, Shared::Lhs)
        };
        let mut blocks = Vec::new();
        let mut scatters = vec![None; products.len()];
        for (members, step) in groups.into_iter().filter(|g| g.0.len() > 1) {
            let mut first = products[members[0]];
            match shared {
                Shared::Lhs => first.b.cs = step.unwrap_or(first.b.cs),
                Shared::Rhs => first.a.rs = step.unwrap_or(first.a.rs),
            }
            let extent: usize = members
                .iter()
                .map(|&i| match shared {
                    Shared::Lhs => products[i].n,
                    Shared::Rhs => products[i].m,
                })
                .sum();
            let (rows, cols) = match shared {
                Shared::Lhs => (first.m, extent),
                Shared::Rhs => (extent, first.n),
            };
            let batch = blocks.len() as u32;
            let mut along = 0;
            for &i in &members {
                let p = products[i];
                let (row0, col0) = match shared {
                    Shared::Lhs => (0, along),
                    Shared::Rhs => (along, 0),
                };
                along += if shared == Shared::Lhs { p.n } else { p.m };
                scatters[i] = Some(Scatter {
                    batch,
                    row0,
                    col0,
                    rows: p.m,
                    cols: p.n,
                    out: p.out,
                    dst: p.dst,
                });
            }
            blocks.push(Batch {
                rows,
                k: first.k,
                cols,
                a: first.a,
                b: first.b,
                offset: 0,
            });
        }
        let mut batches = ProductBatches {
            batches: merge_grid(blocks, &mut scatters, shared),
            scratch: Vec::new(),
        };
        let mut offset = 0;
        for b in &mut batches.batches {
            b.offset = offset;
            offset += b.rows * b.cols;
        }
        batches.scratch = vec![0.0; offset];
        (batches, scatters)
    }

    /// How many batches there are.
    pub(crate) fn len(&self) -> usize {
        self.batches.len()
    }

    /// True when there is nothing to batch.
    pub(crate) fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// Bytes one run of the batches reads and writes: each gemm's operands from the kept
    /// windows and its result in the scratch (f32).
    pub(crate) fn host_bytes(&self) -> u64 {
        let elements: usize = (self.batches.iter())
            .map(|b| b.rows * b.k + b.k * b.cols + b.rows * b.cols)
            .sum();
        4 * elements as u64
    }

    /// Computes every batch into the scratch (in parallel on `pool` unless `small`).
    pub(crate) fn compute(
        &mut self,
        windows: &[Vec<Vec<f32>>],
        small: bool,
        pool: &rayon::ThreadPool,
    ) {
        // Batches tile the scratch (in offset order, see `relayout`): split it among them.
        let mut order: Vec<&Batch> = self.batches.iter().collect();
        order.sort_unstable_by_key(|b| b.offset);
        let mut outs: Vec<(&Batch, &mut [f32])> = Vec::with_capacity(order.len());
        let mut rest = self.scratch.as_mut_slice();
        for b in order {
            let (out, tail) = rest.split_at_mut(b.rows * b.cols);
            outs.push((b, out));
            rest = tail;
        }
        let view = |v: View, first_row: usize| MatRef {
            data: &windows[v.rearrange as usize][v.source as usize],
            at: (v.at as isize + first_row as isize * v.rs) as usize,
            rs: v.rs,
            cs: v.cs,
        };
        let run = |(b, first_row, out): (&Batch, usize, &mut [f32])| {
            let rows = out.len() / b.cols;
            gemm_f32_refs(rows, b.k, b.cols, view(b.a, first_row), view(b.b, 0), out)
        };
        if small {
            outs.into_iter().for_each(|(b, out)| run((b, 0, out)));
            return;
        }
        // Bands of rows of about equal work, several per thread: a product of three K
        // parts is three batches, which alone would leave a thread idle.
        let work = |b: &Batch| (b.rows * b.k * b.cols).max(1);
        let total: usize = outs.iter().map(|(b, _)| work(b)).sum();
        let band = total.div_ceil(4 * pool.current_num_threads()).max(1);
        let mut tasks = Vec::new();
        for (b, out) in outs {
            let bands = work(b).div_ceil(band).clamp(1, b.rows.max(1));
            let rows = b.rows.div_ceil(bands).max(1);
            for (i, part) in out.chunks_mut(rows * b.cols.max(1)).enumerate() {
                tasks.push((b, i * rows, part));
            }
        }
        pool.install(|| tasks.into_par_iter().for_each(run));
    }

    /// Places the batches in the scratch in the order `first` names them (each at most
    /// once), the others after them in their own order: results read together then lie
    /// together.
    pub(crate) fn relayout(&mut self, first: &[u32]) {
        let mut placed = vec![false; self.batches.len()];
        let mut offset = 0;
        let rest: Vec<u32> = (0..self.batches.len() as u32).collect();
        for &b in first.iter().chain(&rest) {
            let b = b as usize;
            if !std::mem::replace(&mut placed[b], true) {
                self.batches[b].offset = offset;
                offset += self.batches[b].rows * self.batches[b].cols;
            }
        }
    }

    /// The rows of one vertex's result: `(first element in its tensor, elements, first
    /// scratch element)`, one per row.
    pub(crate) fn rows(&self, s: &Scatter) -> impl Iterator<Item = (usize, usize, usize)> {
        let b = self.batches[s.batch as usize];
        (0..s.rows).map(move |r| {
            let from = b.offset + (s.row0 + r) * b.cols + s.col0;
            (s.dst.1 + r * s.cols, s.cols, from)
        })
    }

    /// Every batch's results, as bytes (f32 in device order: kept windows and batches exist
    /// only on little-endian hosts).
    pub(crate) fn scratch_bytes(&self) -> &[u8] {
        f32_bytes(&self.scratch)
    }

    /// Copies one vertex's result from the scratch to its tile's memory.
    pub(crate) fn scatter(&self, s: &Scatter, mem: &mut [u8]) {
        let b = &self.batches[s.batch as usize];
        let row_bytes = s.cols * 4;
        for r in 0..s.rows {
            let from = b.offset + (s.row0 + r) * b.cols + s.col0;
            let src = &self.scratch[from..from + s.cols];
            let at = s.out + r * row_bytes;
            // Kept windows exist only on little-endian hosts: f32 bytes are device bytes.
            mem[at..at + row_bytes].copy_from_slice(f32_bytes(src));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(source: u32, at: usize, rs: isize) -> View {
        View {
            rearrange: 0,
            source,
            at,
            rs,
            cs: 1,
        }
    }

    /// A 6×3 lhs (source 0) by a 3×6 rhs (source 1), split into M × N blocks (either
    /// operand shared, by which needs fewer gemms): the blocks form one grid, so one gemm
    /// computes them all, and every vertex's result is its block of the whole product.
    #[test]
    fn batched_blocks_hold_their_part_of_the_product() {
        let a: Vec<f32> = (0..18).map(|i| i as f32 * 0.5 - 2.0).collect();
        let b: Vec<f32> = (0..18).map(|i| (i % 7) as f32 - 3.0).collect();
        let windows = vec![vec![a, b]];
        for (pm, pn) in [(2, 3), (3, 2), (6, 1)] {
            let (m, n) = (6 / pm, 6 / pn);
            let mut products = Vec::new();
            for im in 0..pm {
                for jn in 0..pn {
                    let v = im * pn + jn;
                    products.push(ViewedProduct {
                        slot: v,
                        m,
                        k: 3,
                        n,
                        a: view(0, im * m * 3, 3),
                        b: view(1, jn * n, 6),
                        out: 4 * m * n * v,
                        dst: (TensorId(0), m * n * v),
                    });
                }
            }
            let (batches, scatters) = ProductBatches::plan(&products);
            assert_eq!(batches.batches.len(), 1, "{pm}x{pn}: one gemm for the grid");
            assert_each_holds_its_product(batches, &scatters, &products, &windows);
        }
    }

    /// Every product's result, computed by its batch and scattered, is its operands'
    /// product as its views read them (on one thread and on two).
    fn assert_each_holds_its_product(
        mut batches: ProductBatches,
        scatters: &[Option<Scatter>],
        products: &[ViewedProduct],
        windows: &[Vec<Vec<f32>>],
    ) {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .expect("a pool of two threads");
        let at = |v: View, i: usize, j: usize| {
            windows[0][v.source as usize]
                [(v.at as isize + i as isize * v.rs + j as isize * v.cs) as usize]
        };
        let bytes: usize = products
            .iter()
            .map(|p| p.out + 4 * p.m * p.n)
            .max()
            .unwrap_or(0);
        for small in [false, true] {
            batches.compute(windows, small, &pool);
            let mut mem = vec![0u8; bytes];
            for s in scatters.iter().map(|s| s.expect("every block is batched")) {
                batches.scatter(&s, &mut mem);
            }
            for p in products {
                for r in 0..p.m {
                    for c in 0..p.n {
                        let want: f32 = (0..p.k).map(|t| at(p.a, r, t) * at(p.b, t, c)).sum();
                        let o = p.out + (r * p.n + c) * 4;
                        let got = f32::from_le_bytes(mem[o..o + 4].try_into().expect("4 bytes"));
                        assert!(
                            (got - want).abs() < 1e-5,
                            "block {p:?} ({r},{c}): {got} vs {want}"
                        );
                    }
                }
            }
        }
    }

    /// One-element products (a row of a 3×4 lhs by a column of a 4×5 rhs each, as the bench
    /// MLP's weight gradient makes them) carry a step of 0 across their one row and column:
    /// they still join, at the step their places show, into one gemm.
    #[test]
    fn one_row_and_one_column_blocks_join_at_the_step_their_places_show() {
        let a: Vec<f32> = (0..12).map(|i| i as f32 * 0.25 - 1.0).collect();
        let b: Vec<f32> = (0..20).map(|i| (i % 6) as f32 - 2.5).collect();
        let windows = vec![vec![a, b]];
        let mut products = Vec::new();
        for r in 0..3 {
            for c in 0..5 {
                let v = r * 5 + c;
                products.push(ViewedProduct {
                    slot: v,
                    m: 1,
                    k: 4,
                    n: 1,
                    a: View {
                        rearrange: 0,
                        source: 0,
                        at: r * 4,
                        rs: 0,
                        cs: 1,
                    },
                    b: View {
                        rearrange: 0,
                        source: 1,
                        at: c,
                        rs: 5,
                        cs: 0,
                    },
                    out: 4 * v,
                    dst: (TensorId(0), v),
                });
            }
        }
        let (batches, scatters) = ProductBatches::plan(&products);
        assert_eq!(batches.batches.len(), 1, "one gemm for the 3×5 results");
        assert_each_holds_its_product(batches, &scatters, &products, &windows);
    }

    #[test]
    fn blocks_that_are_not_side_by_side_stay_vertices() {
        let p = |at| ViewedProduct {
            slot: 0,
            m: 2,
            k: 3,
            n: 2,
            a: view(0, 0, 3),
            b: view(1, at, 6),
            out: 0,
            dst: (TensorId(0), 0),
        };
        // rhs blocks at columns 0 and 3 of a 6-wide window: a gap of one column.
        let (batches, scatters) = ProductBatches::plan(&[p(0), p(3)]);
        assert!(batches.is_empty());
        assert!(scatters.iter().all(Option::is_none));
    }
}
