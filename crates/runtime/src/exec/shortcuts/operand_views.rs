//! Matrix-product operands read in place from a rearrangement's gathered window.
//!
//! A planned matrix product copies an operand block to every tile that multiplies it, and
//! only those vertices read the blocks. The IPU must move those bytes (the cost model
//! charges every one of them when the rearrangement is loaded), but the host need not: when
//! a rearrangement's destination is written by nothing else and read only by
//! matrix-product vertices with f32 partials (f32 operands, or f16 ones) whose blocks are
//! strided matrices of one gathered source window, the engine keeps the window (as f32: an
//! f16 window is widened once, as each vertex would widen its block) instead of writing
//! the blocks, and each vertex multiplies its block straight from it. The vertices multiply the same elements; gemm may sum them in
//! another order for a strided operand (the last bits of a result can differ from the plain
//! path's), and host copies disappear. [`Engine::read_tensor`] still returns what
//! such a destination would hold.
//!
//! [`Engine::read_tensor`]: crate::exec::engine::Engine::read_tensor

use crate::model::layout::source_ranges;
use crate::program::executable::{Executable, Rearrange, Region, Run, RunSource};
use crate::program::walk::uses_beside_kernel_vertices;
use codegen::{DType, KernelSpec};
use rayon::prelude::*;
use std::collections::HashMap;

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
    views: HashMap<VertexInput, View>,
}

/// `(compute set, vertex, input)`.
type VertexInput = (u32, u32, u8);

/// A matrix operand of a vertex that might be read in place.
struct Candidate {
    key: VertexInput,
    region: Region,
    rows: usize,
    cols: usize,
}

impl OperandViews {
    /// No rearrangement keeps its window: every operand is read from tile memory.
    pub(crate) fn none(exe: &Executable) -> OperandViews {
        OperandViews {
            kept: vec![false; exe.rearranges.len()],
            views: HashMap::new(),
        }
    }

    /// Finds the rearrangements of `exe` (validated) whose destinations need not be written.
    pub(crate) fn plan(exe: &Executable) -> OperandViews {
        let (mut writes, mut other_reads) = uses_beside_kernel_vertices(exe, |_| true);
        let mut candidates: HashMap<u32, Vec<Candidate>> = HashMap::new();
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
                            })
                        }
                        None => other_reads[r.tensor.0 as usize] = true,
                    }
                }
            }
        }
        // Each rearrangement's readers are matched independently: in parallel.
        let matched: Vec<Option<Vec<(VertexInput, View)>>> = exe
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
                readers
                    .iter()
                    .map(|c| {
                        let (source, at, rs, cs) = runs.view(c.region.start, c.rows, c.cols)?;
                        let v = View {
                            rearrange: ri as u32,
                            source,
                            at,
                            rs,
                            cs,
                        };
                        Some((c.key, v))
                    })
                    .collect()
            })
            .collect();
        let mut plan = OperandViews {
            kept: matched.iter().map(Option::is_some).collect(),
            views: HashMap::new(),
        };
        plan.views.extend(matched.into_iter().flatten().flatten());
        plan
    }

    /// The view input `input` of vertex `vertex` of compute set `cs` reads, if it reads one.
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

/// A rearrangement's runs in destination order, none overlapping another.
struct SortedRuns {
    runs: Vec<Run>,
    lo: Vec<usize>,
}

impl SortedRuns {
    fn new(r: &Rearrange) -> Option<SortedRuns> {
        let mut runs: Vec<Run> = r.runs.iter().filter(|x| x.len > 0).collect();
        runs.sort_by_key(|x| x.dst_start);
        // Overlapping runs would need "the last one wins": not a plain view.
        if runs
            .windows(2)
            .any(|w| w[0].dst_start + w[0].len > w[1].dst_start)
        {
            return None;
        }
        let lo = source_ranges(r).into_iter().map(|(lo, _)| lo).collect();
        Some(SortedRuns { runs, lo })
    }

    /// Destination element `e`: its source and window element, and how many elements from
    /// it on come from the same run (with the run's stride).
    fn locate(&self, e: usize) -> Option<(u32, isize, usize, isize)> {
        let i = self.runs.partition_point(|x| x.dst_start + x.len <= e);
        let run = self.runs.get(i).filter(|x| x.dst_start <= e)?;
        let RunSource::Tensor { k, start, stride } = run.source else {
            return None;
        };
        let off = (e - run.dst_start) as isize;
        let at = start as isize + off * stride - self.lo[k as usize] as isize;
        Some((k, at, run.len - off as usize, stride))
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
        let mut i = self.runs.partition_point(|x| x.dst_start + x.len <= start);
        let mut e = 0;
        while e < rows * cols {
            let run = self.runs.get(i)?;
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
            i += 1;
        }
        Some((source, usize::try_from(base).ok()?, rs, cs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::executable::TensorId;

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
        use crate::program::executable::{Direction, Program, Vertex};
        let mut b = ExecutableBuilder::new(Target::ipu2().with_tiles_per_ipu(4), 1);
        let x = b.tensor("x", DType::F32, &[(0, 0, 4)]);
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
                inputs: vec![region(blocks), region(w)],
                outputs: vec![region(c)],
                run_length: 0,
            }],
        );
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
}
