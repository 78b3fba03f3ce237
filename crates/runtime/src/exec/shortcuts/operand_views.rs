//! Matrix-product operands, and codelets' f32 inputs, read in place from a rearrangement's
//! gathered window.
//!
//! A planned matrix product copies an operand block to every tile that multiplies it, and
//! only those vertices read the blocks. The IPU must move those bytes (the cost model
//! charges every one of them when the rearrangement is loaded), but the host need not: when
//! a rearrangement's destination is written by nothing else and read only by
//! matrix-product vertices with f32 partials (f32 operands, or f16 ones) whose blocks are
//! strided matrices of one gathered source window, the engine keeps the window (as f32: an
//! f16 window is widened once, as each vertex would widen its block) instead of writing
//! the blocks, and each vertex multiplies its block straight from it. The vertices multiply
//! the same elements; gemm may sum them in another order for a strided operand (the last
//! bits of a result can differ from the plain path's), and host copies disappear. A codelet
//! vertex's f32 input that is one contiguous piece of such a window (a convolution part's
//! copy of its input, say) is read from it the same way, byte for byte what the tile would
//! hold; one that is no contiguous piece but that several codelets copy alike (a reversed
//! kernel sent to every part) is gathered once a run into a buffer of its own, which they
//! all read ([`SharedPiece`]). [`Engine::read_tensor`] still returns what such a
//! destination would hold.
//!
//! [`Engine::read_tensor`]: crate::exec::engine::Engine::read_tensor

use crate::model::layout::source_ranges;
use crate::program::executable::{Executable, Rearrange, Region, RunSource};
use crate::program::runs::RunBlock;
use crate::program::walk::uses_beside_vertices;
use codegen::{DType, KernelSpec};
use rayon::prelude::*;
use rustc_hash::FxHashMap;

/// Where a vertex's matrix operand lies in a kept window: element `(r, c)` is window element
/// `at + r * rs + c * cs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct View {
    /// The rearrangement whose window it reads.
    pub rearrange: u32,
    /// The source of that rearrangement (its window).
    pub source: u32,
    pub at: usize,
    pub rs: isize,
    pub cs: isize,
}

/// Which rearrangements keep their windows instead of writing, and the views their readers
/// take.
#[derive(Debug, Default)]
pub(crate) struct OperandViews {
    /// By rearrangement index: the destination is never written; the windows are kept.
    pub kept: Vec<bool>,
    /// The view each vertex input reads.
    views: FxHashMap<VertexInput, View>,
    /// By rearrangement: the pieces gathered into buffers of their own, after its sources'
    /// windows (see [`SharedPiece`]).
    pub shared: Vec<Vec<SharedPiece>>,
}

/// A codelet input that is no one contiguous piece of its rearrangement's window, but that
/// several vertices read alike (the bench CNN's reversed kernel, copied to 896 tiles a
/// run): gathered from the window once a run into a buffer of its own, the bytes each tile
/// would hold, which every such vertex reads in place of its tile's copy. The buffer is the
/// rearrangement's window number `sources + i` for the rearrangement's `i`-th piece.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct SharedPiece {
    /// The piece's elements in order, run by run.
    pub runs: Vec<PieceRun>,
}

/// Elements `at, at + stride, ...` (`len` of them) of window `source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct PieceRun {
    pub source: u32,
    pub at: usize,
    pub len: usize,
    pub stride: isize,
}

impl SharedPiece {
    /// Its number of elements.
    pub(crate) fn len(&self) -> usize {
        self.runs.iter().map(|r| r.len).sum()
    }

    /// Gathers the piece from the rearrangement's `windows` into `out` (its length).
    pub(crate) fn gather(&self, windows: &[Vec<f32>], out: &mut [f32]) {
        let mut o = 0;
        for r in &self.runs {
            let window = &windows[r.source as usize];
            let out = &mut out[o..o + r.len];
            match r.stride {
                1 => out.copy_from_slice(&window[r.at..r.at + r.len]),
                stride => {
                    for (i, x) in out.iter_mut().enumerate() {
                        *x = window[(r.at as isize + i as isize * stride) as usize];
                    }
                }
            }
            o += r.len;
        }
    }
}

/// A rearrangement's readers' views and the pieces they share.
type Readings = (Vec<(VertexInput, View)>, Vec<SharedPiece>);

/// How a vertex input reads a kept window: in place, or through a shared piece.
enum Reading {
    View(View),
    Shared(SharedPiece),
}

/// `(compute set, vertex, input)`; a compute set's codelet vertices are numbered after its
/// kernel vertices (see [`OperandViews::get`]).
type VertexInput = (u32, u32, u8);

/// A matrix operand of a vertex, or a codelet's input, that might be read in place.
struct Candidate {
    key: VertexInput,
    region: Region,
    rows: usize,
    cols: usize,
    /// A codelet's input: read as bytes, so only one contiguous piece of a window will do.
    contiguous: bool,
}

impl OperandViews {
    /// No rearrangement keeps its window: every operand is read from tile memory.
    pub(crate) fn none(exe: &Executable) -> OperandViews {
        OperandViews {
            kept: vec![false; exe.rearranges.len()],
            views: FxHashMap::default(),
            shared: vec![Vec::new(); exe.rearranges.len()],
        }
    }

    /// Finds the rearrangements of `exe` (validated) whose destinations need not be written.
    pub(crate) fn plan(exe: &Executable) -> OperandViews {
        let (mut writes, mut other_reads) = uses_beside_vertices(exe, |_| true);
        let mut candidates: FxHashMap<u32, Vec<Candidate>> = FxHashMap::default();
        for (ci, cs) in exe.compute_sets.iter().enumerate() {
            for (vi, v) in cs.vertices.iter().enumerate() {
                v.outputs
                    .iter()
                    .for_each(|r| writes[r.tensor.0 as usize] += 1);
                let f32_product = match &*v.kernel {
                    KernelSpec::MatMul(k) if viewable(k) => Some((k.m, k.k, k.n)),
                    _ => None,
                };
                for (i, r) in v.inputs.iter().enumerate() {
                    let shape = match (f32_product, i) {
                        (Some((m, k, _)), 0) => Some((m, k)),
                        (Some((_, k, n)), 1) => Some((k, n)),
                        _ => None,
                    };
                    match shape {
                        Some((rows, cols)) => {
                            candidates.entry(r.tensor.0).or_default().push(Candidate {
                                key: (ci as u32, vi as u32, i as u8),
                                region: *r,
                                rows,
                                cols,
                                contiguous: false,
                            })
                        }
                        None => other_reads[r.tensor.0 as usize] = true,
                    }
                }
            }
            for (k, v) in cs.codelet_vertices.iter().enumerate() {
                let vi = (cs.vertices.len() + k) as u32;
                v.outputs
                    .iter()
                    .for_each(|r| writes[r.tensor.0 as usize] += 1);
                for (i, r) in v.inputs.iter().enumerate() {
                    // An f32 window holds the tile's bytes; an f16 one is widened.
                    match exe.tensors[r.tensor.0 as usize].dtype {
                        DType::F32 => candidates.entry(r.tensor.0).or_default().push(Candidate {
                            key: (ci as u32, vi, i as u8),
                            region: *r,
                            rows: 1,
                            cols: r.len,
                            contiguous: true,
                        }),
                        _ => other_reads[r.tensor.0 as usize] = true,
                    }
                }
            }
        }
        // Each rearrangement's readers are matched independently: in parallel.
        let matched: Vec<Option<Readings>> = exe
            .rearranges
            .par_iter()
            .enumerate()
            .map(|(ri, r)| {
                let d = r.dst.0 as usize;
                let dtype = exe.tensors[d].dtype;
                let eligible = cfg!(target_endian = "little")
                    && writes[d] == 1
                    && !other_reads[d]
                    && matches!(dtype, DType::F32 | DType::F16)
                    && r.sources
                        .iter()
                        .all(|s| exe.tensors[s.0 as usize].dtype == dtype);
                let readers = candidates.get(&r.dst.0).filter(|_| eligible)?;
                let runs = SortedRuns::new(r)?;
                let readings: Vec<(VertexInput, Reading)> = readers
                    .iter()
                    .map(|c| {
                        let view = runs.view(c.region.start, c.rows, c.cols);
                        let reading = match view {
                            Some((source, at, rs, cs))
                                if !c.contiguous || c.cols == 1 || cs == 1 =>
                            {
                                Reading::View(View {
                                    rearrange: ri as u32,
                                    source,
                                    at,
                                    rs,
                                    cs,
                                })
                            }
                            _ if c.contiguous => {
                                Reading::Shared(runs.piece(c.region.start, c.cols)?)
                            }
                            _ => return None,
                        };
                        Some((c.key, reading))
                    })
                    .collect::<Option<_>>()?;
                shared_pieces(ri as u32, r.sources.len(), readings)
            })
            .collect();
        let mut plan = OperandViews {
            kept: matched.iter().map(Option::is_some).collect(),
            views: FxHashMap::default(),
            shared: Vec::with_capacity(matched.len()),
        };
        for m in matched {
            let (views, shared) = m.unwrap_or_default();
            plan.views.extend(views);
            plan.shared.push(shared);
        }
        plan
    }

    /// The view input `input` of vertex `vertex` of compute set `cs` reads, if it reads one;
    /// codelet vertex `k` is vertex `vertices.len() + k` here.
    pub(crate) fn get(&self, cs: u32, vertex: u32, input: u8) -> Option<View> {
        self.views.get(&(cs, vertex, input)).copied()
    }

    /// True when no rearrangement keeps its window.
    pub(crate) fn is_empty(&self) -> bool {
        self.views.is_empty()
    }
}

/// True for the matrix products whose operands may be views: f32 results from f32 or f16
/// operands (read as f32 from a kept window).
fn viewable(k: &codegen::MatMulKernel) -> bool {
    k.partials == DType::F32 && matches!(k.input, DType::F32 | DType::F16)
}

/// A rearrangement's runs in destination order, none overlapping another, kept as the
/// executable's blocks (a dot's operand gather is a few blocks of many runs: walking blocks
/// spares materialising and sorting a million runs).
struct SortedRuns {
    /// Sorted by destination; each block's runs ascend and its span (first run's start to
    /// last run's end) overlaps no other block's.
    blocks: Vec<RunBlock>,
    lo: Vec<usize>,
}

/// Where a block's runs end in the destination.
fn span_end(b: &RunBlock) -> usize {
    let last = b.last();
    last.dst_start + last.len
}

impl SortedRuns {
    fn new(r: &Rearrange) -> Option<SortedRuns> {
        let ascending = |b: &RunBlock| b.count == 1 || b.dst_step >= b.first.len as isize;
        let mut blocks: Vec<RunBlock> = Vec::with_capacity(r.runs.blocks().len());
        for b in r
            .runs
            .blocks()
            .iter()
            .filter(|b| b.first.len > 0 && b.count > 0)
        {
            match (
                ascending(b),
                b.count > 1 && b.dst_step <= -(b.first.len as isize),
            ) {
                (true, _) => blocks.push(*b),
                // A descending block is the same runs walked from its last.
                (false, true) => blocks.push(RunBlock {
                    first: b.last(),
                    count: b.count,
                    dst_step: -b.dst_step,
                    src_step: -b.src_step,
                }),
                // Runs overlapping each other would need "the last one wins": not a view.
                (false, false) => return None,
            }
        }
        blocks.sort_by_key(|b| b.first.dst_start);
        if blocks
            .windows(2)
            .any(|w| span_end(&w[0]) > w[1].first.dst_start)
        {
            // Interleaved blocks: walk their runs one by one.
            let mut runs: Vec<RunBlock> = blocks
                .iter()
                .flat_map(RunBlock::runs)
                .map(RunBlock::single)
                .collect();
            runs.sort_by_key(|b| b.first.dst_start);
            if runs
                .windows(2)
                .any(|w| span_end(&w[0]) > w[1].first.dst_start)
            {
                return None;
            }
            blocks = runs;
        }
        let lo = source_ranges(r).into_iter().map(|(lo, _)| lo).collect();
        Some(SortedRuns { blocks, lo })
    }

    /// The run holding destination element `e`, as (block, run in it), if any.
    fn run_at(&self, e: usize) -> Option<(usize, usize)> {
        let i = self.blocks.partition_point(|b| span_end(b) <= e);
        let b = self.blocks.get(i).filter(|b| b.first.dst_start <= e)?;
        let r = match b.count {
            1 => 0,
            _ => (e - b.first.dst_start) / b.dst_step as usize,
        };
        let run = b.run(r);
        (e < run.dst_start + run.len).then_some((i, r))
    }

    /// Destination element `e`: its source and window element, and how many elements from
    /// it on come from the same run (with the run's stride).
    fn locate(&self, e: usize) -> Option<(u32, isize, usize, isize)> {
        let (i, r) = self.run_at(e)?;
        let run = self.blocks[i].run(r);
        let RunSource::Tensor { k, start, stride } = run.source else {
            return None;
        };
        let off = (e - run.dst_start) as isize;
        let at = start as isize + off * stride - self.lo[k as usize] as isize;
        Some((k, at, run.len - off as usize, stride))
    }

    /// The destination elements `start..start + len` as runs of window elements, when every
    /// one is read from a source.
    fn piece(&self, start: usize, len: usize) -> Option<SharedPiece> {
        let mut runs: Vec<PieceRun> = Vec::new();
        let mut e = 0;
        while e < len {
            let (source, at, rest, stride) = self.locate(start + e)?;
            let (at, n) = (usize::try_from(at).ok()?, rest.min(len - e));
            let stride = if n == 1 { 1 } else { stride };
            match runs.last_mut() {
                Some(r)
                    if r.source == source
                        && (r.stride == stride || n == 1)
                        && r.at as isize + r.len as isize * r.stride == at as isize =>
                {
                    r.len += n
                }
                _ => runs.push(PieceRun {
                    source,
                    at,
                    len: n,
                    stride,
                }),
            }
            e += n;
        }
        Some(SharedPiece { runs })
    }

    /// The destination elements `start..start + rows * cols`, a row-major `rows × cols`
    /// matrix, as a strided matrix of one window: `(source, at, row step, column step)`.
    fn view(&self, start: usize, rows: usize, cols: usize) -> Option<(u32, usize, isize, isize)> {
        if rows == 0 || cols == 0 {
            return None;
        }
        let (source, base, _, _) = self.locate(start)?;
        let step = |e: usize| -> Option<isize> {
            let (k, at, _, _) = self.locate(start + e)?;
            (k == source).then_some(at - base)
        };
        let cs = if cols > 1 { step(1)? } else { 0 };
        let rs = if rows > 1 { step(cols)? } else { 0 };
        // Every run piece of every row must follow (base, rs, cs): walk the runs in order.
        let (mut i, mut r) = self.run_at(start)?;
        let mut e = 0;
        // The first whole run walked in block `i` (`(block, run)`).
        let mut whole_from = (usize::MAX, 0);
        while e < rows * cols {
            let block = self.blocks.get(i)?;
            let run = block.run(r);
            if whole_from.0 != i {
                whole_from = (i, r + usize::from(run.dst_start < start + e));
            }
            // Runs of a block that follow one another without gaps repeat their columns
            // every `period` runs, `period * len / cols` rows on: once a period of them
            // follows the matrix, the rest of the block does if a period moves the source
            // by that many rows.
            let len = block.first.len;
            if block.dst_step == len as isize && r >= whole_from.1 {
                let period = cols / gcd(len, cols);
                if r - whole_from.1 >= period
                    && period as isize * block.src_step == (period * len / cols) as isize * rs
                {
                    e += ((block.count - r) * len).min(rows * cols - e);
                    (i, r) = (i + 1, 0);
                    continue;
                }
            }
            (i, r) = match r + 1 < block.count {
                true => (i, r + 1),
                false => (i + 1, 0),
            };
            let RunSource::Tensor {
                k,
                start: s0,
                stride,
            } = run.source
            else {
                return None;
            };
            let off = (start + e).checked_sub(run.dst_start)?;
            if k != source || off >= run.len {
                return None;
            }
            let lo = self.lo[k as usize] as isize;
            let end = (run.len - off).min(rows * cols - e);
            let mut j = 0;
            while j < end {
                let (r, c) = ((e + j) / cols, (e + j) % cols);
                let take = (end - j).min(cols - c);
                let at = s0 as isize + (off + j) as isize * stride - lo;
                if at != base + r as isize * rs + c as isize * cs || (take > 1 && stride != cs) {
                    return None;
                }
                j += take;
            }
            e += end;
        }
        Some((source, usize::try_from(base).ok()?, rs, cs))
    }
}

/// The views of rearrangement `ri`'s readers (`sources` windows) and the pieces shared
/// among them, each reader of a piece viewing its buffer (window `sources + i`) whole.
/// None (the destination is written as before) when pieces are not shared: a buffer per
/// reader would copy what the rearrangement writes, only elsewhere.
fn shared_pieces(
    ri: u32,
    sources: usize,
    readings: Vec<(VertexInput, Reading)>,
) -> Option<Readings> {
    let mut index: FxHashMap<SharedPiece, usize> = FxHashMap::default();
    let mut pieces = Vec::new();
    let mut readers = 0;
    let views = (readings.into_iter())
        .map(|(key, reading)| {
            let view = match reading {
                Reading::View(v) => v,
                Reading::Shared(piece) => {
                    readers += 1;
                    let i = *index.entry(piece.clone()).or_insert_with(|| {
                        pieces.push(piece);
                        pieces.len() - 1
                    });
                    View {
                        rearrange: ri,
                        source: (sources + i) as u32,
                        at: 0,
                        rs: 0,
                        cs: 1,
                    }
                }
            };
            (key, view)
        })
        .collect();
    (2 * pieces.len() <= readers).then_some((views, pieces))
}

/// The greatest common divisor of two counts (`gcd(0, n) = n`).
fn gcd(mut a: usize, mut b: usize) -> usize {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::program::executable::{Run, TensorId};

    fn rearrange(runs: Vec<Run>) -> Rearrange {
        Rearrange {
            name: "r".into(),
            dst: TensorId(1),
            sources: vec![TensorId(0)],
            fill: Vec::new(),
            runs: runs.into(),
        }
    }

    fn run(start: usize, stride: isize, dst_start: usize, len: usize) -> Run {
        Run::reading(0, (start, stride), dst_start, len)
    }

    #[test]
    fn a_piece_follows_its_runs_and_joins_those_that_continue_it() {
        // Destination 0..6: source 5, 4, 3 (reversed), then 0, 1 and 2, 3 (one run).
        let r = rearrange(vec![run(5, -1, 0, 3), run(0, 1, 3, 2), run(2, 1, 5, 2)]);
        let runs = SortedRuns::new(&r).unwrap();
        let piece = |at, len, stride| PieceRun {
            source: 0,
            at,
            len,
            stride,
        };
        let p = runs.piece(1, 6).unwrap();
        assert_eq!(p.runs, vec![piece(4, 2, -1), piece(0, 4, 1)]);
        let windows = vec![(0..6).map(|i| i as f32).collect::<Vec<f32>>()];
        let mut out = vec![0.0; p.len()];
        p.gather(&windows, &mut out);
        assert_eq!(out, [4.0, 3.0, 0.0, 1.0, 2.0, 3.0]);
        // An element no run writes is no piece.
        let gap = rearrange(vec![run(0, 1, 0, 2), run(2, 1, 3, 2)]);
        assert_eq!(SortedRuns::new(&gap).unwrap().piece(0, 5), None);
    }

    #[test]
    fn pieces_are_kept_only_when_readers_share_them() {
        let piece = |at| SharedPiece {
            runs: vec![PieceRun {
                source: 0,
                at,
                len: 4,
                stride: -1,
            }],
        };
        let reading = |v: u32, at| ((0, v, 0), Reading::Shared(piece(at)));
        let (views, pieces) = shared_pieces(3, 2, vec![reading(0, 7), reading(1, 7)]).unwrap();
        assert_eq!(pieces, vec![piece(7)]);
        for (_, v) in views {
            // The buffer after the rearrangement's two windows, read whole.
            assert_eq!((v.rearrange, v.source, v.at, v.cs), (3, 2, 0, 1));
        }
        assert!(shared_pieces(3, 2, vec![reading(0, 7), reading(1, 5)]).is_none());
    }

    #[test]
    fn a_block_of_rows_is_a_row_major_view() {
        // Rows 2..4 of a 6-column source, columns 1..4, one run per row.
        let r = rearrange(vec![run(13, 1, 0, 3), run(19, 1, 3, 3)]);
        let runs = SortedRuns::new(&r).unwrap();
        // The window starts at source element 13.
        assert_eq!(runs.view(0, 2, 3), Some((0, 0, 6, 1)));
        assert_eq!(runs.view(3, 1, 3), Some((0, 6, 0, 1)));
    }

    #[test]
    fn a_transposed_block_has_a_column_step() {
        // The 3x2 transpose of a 2x3 source: each row a run of stride 3.
        let r = rearrange(vec![run(0, 3, 0, 2), run(1, 3, 2, 2), run(2, 3, 4, 2)]);
        assert_eq!(
            SortedRuns::new(&r).unwrap().view(0, 3, 2),
            Some((0, 0, 1, 3))
        );
    }

    #[test]
    fn one_merged_run_over_contiguous_rows_is_a_view() {
        let r = rearrange(vec![run(4, 1, 0, 8)]);
        assert_eq!(
            SortedRuns::new(&r).unwrap().view(0, 2, 4),
            Some((0, 0, 4, 1))
        );
    }

    #[test]
    fn irregular_rows_fills_gaps_and_overlaps_are_not_views() {
        let uneven = rearrange(vec![run(0, 1, 0, 2), run(5, 1, 2, 2), run(7, 1, 4, 2)]);
        assert_eq!(SortedRuns::new(&uneven).unwrap().view(0, 3, 2), None);
        let gap = rearrange(vec![run(0, 1, 0, 2), run(2, 1, 3, 2)]);
        assert_eq!(SortedRuns::new(&gap).unwrap().view(0, 2, 2), None);
        let mut filled = rearrange(vec![run(0, 1, 0, 2)]);
        filled.runs.push(Run {
            source: RunSource::Fill,
            dst_start: 2,
            len: 2,
        });
        assert_eq!(SortedRuns::new(&filled).unwrap().view(0, 2, 2), None);
        let overlap = rearrange(vec![run(0, 1, 0, 3), run(5, 1, 2, 2)]);
        assert!(SortedRuns::new(&overlap).is_none());
    }

    /// `x` (2×2 on tile 0) → blocks (its transpose, on tile 1) → a product on tile 1 with `w`;
    /// with `stream_blocks`, the blocks are also streamed to the host.
    fn product(stream_blocks: bool) -> Executable {
        use crate::device::target::Target;
        use crate::program::builder::ExecutableBuilder;
        use crate::program::executable::{Direction, Program};
        let mut b = ExecutableBuilder::new(Target::ipu2().with_tiles_per_ipu(4), 1);
        let x = b.tensor("x", DType::F32, &[(0, 0, 4)]);
        let (r, cs, blocks) = transposed_times_w(&mut b, x);
        let mut program = vec![Program::Rearrange(r), Program::Execute(cs)];
        if stream_blocks {
            let s = b.stream("blocks", Direction::DeviceToHost, DType::F32, 4);
            program.push(Program::StreamCopy {
                stream: s,
                tensor: blocks,
            });
        }
        b.finish(Program::Sequence(program))
    }

    /// Adds to `b`: `w` (2×2, tile 1), the transpose of `x` (2×2) as `blocks` on tile 1,
    /// and a product on tile 1 of the blocks by `w`. Returns the rearrangement, the compute
    /// set and `blocks`.
    pub(crate) fn transposed_times_w(
        b: &mut crate::program::builder::ExecutableBuilder,
        x: crate::program::executable::TensorId,
    ) -> (
        crate::program::executable::RearrangeId,
        crate::program::executable::ComputeSetId,
        crate::program::executable::TensorId,
    ) {
        use crate::program::executable::Vertex;
        let w = b.tensor("w", DType::F32, &[(0, 1, 4)]);
        let blocks = b.tensor("blocks", DType::F32, &[(0, 1, 4)]);
        let c = b.tensor("c", DType::F32, &[(0, 1, 4)]);
        let r = b.rearrange(Rearrange {
            name: "blocks".into(),
            dst: blocks,
            sources: vec![x],
            fill: vec![],
            runs: vec![run(0, 2, 0, 2), run(1, 2, 2, 2)].into(),
        });
        let region = |tensor| Region {
            tensor,
            start: 0,
            len: 4,
        };
        let cs = b.compute_set(
            "product",
            vec![Vertex {
                kernel: KernelSpec::MatMul(codegen::MatMulKernel {
                    m: 2,
                    k: 2,
                    n: 2,
                    input: DType::F32,
                    partials: codegen::DType::F32,
                })
                .into(),
                ipu: 0,
                tile: 1,
                inputs: smallvec::smallvec![region(blocks), region(w)],
                outputs: smallvec::smallvec![region(c)],
                run_length: 0,
                grain: 0,
            }],
        );
        (r, cs, blocks)
    }

    #[test]
    fn blocks_only_a_product_reads_keep_their_window() {
        let plan = OperandViews::plan(&product(false));
        assert_eq!(plan.kept, vec![true]);
        let v = plan.get(0, 0, 0).unwrap();
        assert_eq!((v.rearrange, v.source, v.at, v.rs, v.cs), (0, 0, 0, 1, 2));
        assert_eq!(plan.get(0, 0, 1), None, "w is tile memory, not a window");
    }

    #[test]
    fn blocks_anything_else_reads_are_written() {
        let plan = OperandViews::plan(&product(true));
        assert_eq!(plan.kept, vec![false]);
        assert!(plan.is_empty());
    }

    #[test]
    fn a_row_with_the_wrong_column_step_is_not_a_view() {
        // Row 0 contiguous, row 1 strided by 2.
        let r = rearrange(vec![run(0, 1, 0, 3), run(10, 2, 3, 3)]);
        assert_eq!(SortedRuns::new(&r).unwrap().view(0, 2, 3), None);
    }

    /// The view read element by element from the runs (the definition `view` must meet):
    /// every element of the matrix read from one source at `base + r * rs + c * cs`.
    fn view_by_elements(
        r: &Rearrange,
        start: usize,
        rows: usize,
        cols: usize,
    ) -> Option<(u32, usize, isize, isize)> {
        let lo = source_ranges(r);
        let at = |e: usize| -> Option<(u32, isize)> {
            let mut found = r
                .runs
                .iter()
                .filter(|x| x.dst_start <= e && e < x.dst_start + x.len);
            let run = found.next()?;
            let RunSource::Tensor { k, start, stride } = run.source else {
                return None;
            };
            let off = (e - run.dst_start) as isize;
            Some((k, start as isize + off * stride - lo[k as usize].0 as isize))
        };
        let (source, base) = at(start)?;
        let step = |e: usize| at(start + e).filter(|a| a.0 == source).map(|a| a.1 - base);
        let cs = if cols > 1 { step(1)? } else { 0 };
        let rs = if rows > 1 { step(cols)? } else { 0 };
        for e in 0..rows * cols {
            let (row, col) = ((e / cols) as isize, (e % cols) as isize);
            if step(e)? != row * rs + col * cs {
                return None;
            }
        }
        Some((source, usize::try_from(base).ok()?, rs, cs))
    }

    #[test]
    fn views_walked_by_blocks_match_the_views_read_element_by_element() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let (mut views, mut shapes) = (0, [0; 3]);
        for _ in 0..400 {
            // Rows of a source matrix (some transposed, some reversed, some from a second
            // source), pushed in destination order or shuffled, so that they make blocks of
            // many runs, descending blocks and interleaved ones.
            let (rows, cols) = (1 + next(12), 1 + next(5));
            let width = cols + next(4);
            let mut runs = Vec::new();
            let (mode, shift) = (next(3), next(2));
            for row in 0..rows {
                // Mostly the matrix's own pattern (its rows make one block), now and then not.
                let odd = next(8) == 0;
                let k = u32::from(odd && next(2) == 0);
                let (first, stride) = match if odd { next(3) } else { mode } {
                    0 => (row + 3 * width * shift, width as isize),
                    1 => (40 + row * width + cols - 1, -1),
                    _ => (row * width + shift, 1),
                };
                runs.push(Run::reading(k, (first, stride), row * cols, cols));
            }
            match next(3) {
                0 => runs.reverse(),
                1 => {
                    let (a, b) = (next(rows), next(rows));
                    runs.swap(a, b);
                }
                _ => {}
            }
            let mut r = rearrange(runs);
            r.sources.push(TensorId(2));
            let blocks = r.runs.blocks();
            shapes[0] += usize::from(blocks.iter().any(|b| b.count > 1 && b.dst_step > 0));
            shapes[1] += usize::from(blocks.iter().any(|b| b.count > 1 && b.dst_step < 0));
            shapes[2] += usize::from(blocks.len() > 1);
            let sorted = SortedRuns::new(&r).expect("rows never overlap");
            for _ in 0..6 {
                let (m, n) = (1 + next(rows), 1 + next(cols * 2));
                let at = next(rows * cols);
                if at + m * n > rows * cols {
                    continue;
                }
                let want = view_by_elements(&r, at, m, n);
                views += usize::from(want.is_some());
                assert_eq!(sorted.view(at, m, n), want, "{:?} at {at}: {m}x{n}", r.runs);
            }
        }
        assert!(views > 300, "only {views} views found");
        // Ascending and descending blocks of several runs, and several blocks, all met.
        assert!(shapes.iter().all(|&n| n > 40), "{shapes:?}");
    }
}
