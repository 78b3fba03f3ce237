//! Matrix-product results read from the host's batch scratch instead of tile memory.
//!
//! A planned matrix product's partials (one block per tile, per K part) are written by its
//! compute set and read only by the rearrangements that put each K part into result order.
//! When its vertices run as host batches ([`crate::exec::shortcuts::product_batches`]), the partials already
//! sit in the batch scratch, row by row; copying them to the tiles only for the
//! rearrangements to gather them back is two passes over every byte that the IPU Model does
//! not need. So when a tensor is written only by batched vertices of one compute set,
//! covering it exactly, and read only by rearrangements (which do not keep their windows),
//! the engine leaves it unwritten: those rearrangements write their destinations straight
//! from the scratch, and [`Engine::read_tensor`] reads it there. The exchange is costed
//! from the executable as before; the cycles do not change.
//!
//! [`Engine::read_tensor`]: crate::exec::engine::Engine::read_tensor

use crate::exec::compute::LoadedComputeSet;
use crate::program::executable::{Executable, RunSource, TensorId};
use crate::program::runs::RunBlock;
use crate::program::walk::uses_beside_kernel_vertices;
use codegen::DType;
use rustc_hash::{FxHashMap, FxHashSet};

/// A tensor held in a compute set's batch scratch.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KeptResult {
    /// The compute set whose scratch holds it.
    pub compute_set: usize,
    /// `(first element, elements, first scratch element)`, by element, covering the tensor.
    pub pieces: Vec<(usize, usize, usize)>,
}

impl KeptResult {
    /// Where element `e` lies: the index of its piece.
    pub(crate) fn piece_of(&self, e: usize) -> usize {
        self.pieces.partition_point(|p| p.0 + p.1 <= e)
    }
}

/// A vertex result in a tensor: `(first element, elements, batch)`.
type VertexResult = (usize, usize, u32);

/// The tensors of `exe` (validated) that need not be written to the tiles, given its loaded
/// compute sets and which rearrangements keep their windows; the compute sets stop copying
/// them to the tiles and lay their batches out in the order they are read.
pub(crate) fn plan(
    exe: &Executable,
    compute_sets: &mut [LoadedComputeSet],
    kept_windows: &[bool],
) -> FxHashMap<TensorId, KeptResult> {
    let n = exe.tensors.len();
    // Writes other than kernel vertices'; reads other than kernel vertices' and unkept
    // rearrangements'.
    let (other_writes, mut other_reads) = uses_beside_kernel_vertices(exe, |ri| kept_windows[ri]);
    // Kernel-vertex outputs per tensor, and the one compute set writing it (None: several).
    let mut vertex_writes = vec![0usize; n];
    let mut writer: Vec<Option<Option<usize>>> = vec![None; n];
    for (ci, cs) in exe.compute_sets.iter().enumerate() {
        for v in &cs.vertices {
            v.inputs
                .iter()
                .for_each(|r| other_reads[r.tensor.0 as usize] = true);
            for r in &v.outputs {
                let t = r.tensor.0 as usize;
                vertex_writes[t] += 1;
                writer[t] = match writer[t] {
                    None => Some(Some(ci)),
                    Some(Some(c)) if c == ci => Some(Some(ci)),
                    Some(_) => Some(None),
                };
            }
        }
    }
    // Tensors every writer of which is a batched vertex of one compute set.
    let mut batched = vec![0usize; n];
    for (ci, cs) in compute_sets.iter().enumerate() {
        for s in cs.batched().1 {
            let i = s.dst.0.0 as usize;
            if writer[i] == Some(Some(ci)) && other_writes[i] == 0 && !other_reads[i] {
                batched[i] += 1;
            }
        }
    }
    let eligible = |t: TensorId| {
        let i = t.0 as usize;
        cfg!(target_endian = "little")
            && exe.tensors[i].dtype == DType::F32
            && batched[i] > 0
            && batched[i] == vertex_writes[i]
    };
    // Each compute set's batches in the order the rearrangements first read them: a
    // K part's results then lie in the scratch as the rearrangement reads them, and its
    // writes run long (see `LoadedRearrange::with_writes`).
    let mut first_read: Vec<Vec<u32>> = vec![Vec::new(); compute_sets.len()];
    // Per eligible tensor: `(first element, elements, batch)` of each vertex result, sorted.
    let mut results_of: FxHashMap<TensorId, Vec<VertexResult>> = FxHashMap::default();
    for cs in compute_sets.iter() {
        for s in cs.batched().1.iter().filter(|s| eligible(s.dst.0)) {
            results_of
                .entry(s.dst.0)
                .or_default()
                .push((s.dst.1, s.elements(), s.batch));
        }
    }
    results_of.values_mut().for_each(|v| v.sort_unstable());
    let mut seen: Vec<Vec<bool>> = compute_sets
        .iter()
        .map(|cs| vec![false; cs.batched().0.len()])
        .collect();
    let mut last: Option<(TensorId, usize)> = None;
    for r in &exe.rearranges {
        let sources: Vec<Option<&Vec<VertexResult>>> =
            r.sources.iter().map(|t| results_of.get(t)).collect();
        if sources.iter().all(Option::is_none) {
            continue;
        }
        for block in r.runs.blocks() {
            let RunSource::Tensor { k, .. } = block.first.source else {
                continue;
            };
            let t = r.sources[k as usize];
            let Some(results) = sources[k as usize] else {
                continue;
            };
            let cs = writer[t.0 as usize]
                .flatten()
                .expect("eligible: one writer");
            let mut hint = last.filter(|&(lt, _)| lt == t).map(|(_, i)| i);
            results_read(block, results, &mut hint, |batch| {
                if !std::mem::replace(&mut seen[cs][batch as usize], true) {
                    first_read[cs].push(batch);
                }
            });
            if let Some(i) = hint {
                last = Some((t, i));
            }
        }
    }
    let mut kept: FxHashMap<TensorId, KeptResult> = FxHashMap::default();
    for (ci, cs) in compute_sets.iter_mut().enumerate() {
        cs.relayout_batches(&first_read[ci]);
        let (batches, scatters) = cs.batched();
        for s in scatters.iter().filter(|s| eligible(s.dst.0)) {
            let pieces = &mut kept
                .entry(s.dst.0)
                .or_insert_with(|| KeptResult {
                    compute_set: ci,
                    pieces: Vec::new(),
                })
                .pieces;
            for row in batches.rows(s) {
                match pieces.last_mut() {
                    Some(piece) if follows(piece, &row) => piece.1 += row.1,
                    _ => pieces.push(row),
                }
            }
        }
    }
    // Only a tensor the batched rows tile exactly; rows that follow each other in the
    // scratch too are one piece (a vertex result as wide as its batch: one piece, not one
    // a row).
    kept.retain(|t, k| {
        k.pieces.sort_unstable();
        let mut next = 0;
        let tiles = k.pieces.iter().all(|&(start, len, _)| {
            let ok = start == next;
            next = start + len;
            ok
        }) && next == exe.tensors[t.0 as usize].elements;
        k.pieces.dedup_by(|row, piece| {
            let joined = follows(piece, row);
            if joined {
                piece.1 += row.1;
            }
            joined
        });
        tiles
    });
    let tensors: FxHashSet<TensorId> = kept.keys().copied().collect();
    for cs in compute_sets.iter_mut() {
        cs.keep_results(&tensors);
    }
    kept
}

/// Whether `row` (`(first element, elements, first scratch element)`) starts where `piece`
/// ends, in the tensor and in the scratch: the two are one piece.
fn follows(piece: &(usize, usize, usize), row: &(usize, usize, usize)) -> bool {
    piece.0 + piece.1 == row.0 && piece.2 + piece.1 == row.2
}

/// Calls `read(batch)` for the result each run of `block` starts in, in order (the result
/// after the start when it falls between two), as looking each run up would: `last` is the
/// index found for the run before (tried first), updated. Runs that start in the result
/// the run before them found call `read` for it again, so they are skipped: a block of a
/// million rows reading a few results costs a few lookups.
fn results_read(
    block: &RunBlock,
    results: &[VertexResult],
    last: &mut Option<usize>,
    mut read: impl FnMut(u32),
) {
    let mut i = 0;
    while i < block.count {
        let RunSource::Tensor { start, .. } = block.run(i).source else {
            return;
        };
        let holds = |at: usize| {
            results
                .get(at)
                .is_some_and(|x| x.0 <= start && start < x.0 + x.1)
        };
        let at = match *last {
            Some(at) if holds(at) => at,
            _ => results.partition_point(|x| x.0 + x.1 <= start),
        };
        *last = Some(at);
        i += 1;
        let Some(&(first, len, batch)) = results.get(at) else {
            continue;
        };
        read(batch);
        if holds(at) {
            // The later runs starting in this result, before one leaves it.
            let left = block.count - i;
            let more = match block.src_step {
                0 => left,
                s if s > 0 => (first + len - 1 - start) / s as usize,
                s => (start - first) / s.unsigned_abs(),
            };
            i += more.min(left);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::executable::Run;

    /// The block walk reads the results looking each run up reads, with the same last
    /// index after: rows stepping forwards, backwards and standing still, over results
    /// with gaps between them, starting before, inside and after them.
    #[test]
    fn a_blocks_results_are_its_runs_results_in_order() {
        let results: Vec<VertexResult> = vec![(0, 10, 3), (10, 5, 1), (20, 7, 0), (27, 30, 2)];
        let one_by_one = |runs: &[Run], last: &mut Option<usize>| {
            let mut out = Vec::new();
            for run in runs {
                let single = RunBlock::single(*run);
                results_read(&single, &results, last, |b| out.push(b));
            }
            out
        };
        for start in [0usize, 3, 9, 14, 17, 26, 40, 56, 60] {
            for step in [-7isize, -3, -1, 0, 1, 2, 4, 9, 25] {
                for count in 1..12 {
                    let first = Run::reading(0, (start, 1), 0, 3);
                    let block = RunBlock {
                        first,
                        count,
                        dst_step: 3,
                        src_step: step,
                    };
                    if block.runs().any(|r| {
                        matches!(r.source,
                        RunSource::Tensor { start, .. } if start > 1000)
                    }) {
                        continue; // stepped below element 0
                    }
                    for hint in [None, Some(0), Some(2)] {
                        let runs: Vec<Run> = block.runs().collect();
                        let (mut a, mut b) = (hint, hint);
                        let mut want = one_by_one(&runs, &mut a);
                        let mut got = Vec::new();
                        results_read(&block, &results, &mut b, |x| got.push(x));
                        // The walk skips the repeats of the result just read.
                        want.dedup();
                        got.dedup();
                        assert_eq!((got, b), (want, a), "{count} from {start} by {step}");
                    }
                }
            }
        }
    }

    #[test]
    fn elements_find_their_piece() {
        let k = KeptResult {
            compute_set: 0,
            pieces: vec![(0, 3, 10), (3, 2, 0), (5, 4, 20)],
        };
        assert_eq!(k.piece_of(0), 0);
        assert_eq!(k.piece_of(2), 0);
        assert_eq!(k.piece_of(3), 1);
        assert_eq!(k.piece_of(8), 2);
    }
}
