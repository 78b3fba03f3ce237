//! Element-wise vertices reading a matrix product's K parts straight from its batch scratch.
//!
//! A planned product split over K leaves one partial per K part in its compute set's batch
//! scratch ([`crate::exec::shortcuts::kept_results`]); a rearrangement per K part puts it in result order on
//! the tiles, and the next compute set sums the parts element-wise. When a K part's batches
//! tile its whole result (one gemm per K part, [`crate::exec::shortcuts::product_batches`]), the scratch
//! holds the K part exactly in result order, so every summing vertex's share of it is one
//! scratch range at a fixed offset from its place in the tensor. Then the engine points
//! those inputs at the scratch and skips the host copy of the rearrangement. The
//! rearrangement is still a step of the run, charged its exchange cycles as before;
//! [`Engine::read_tensor`] reads its destination as it would have been written.
//!
//! This is only sound when the scratch still holds what the rearrangement would have read
//! when the summing compute set runs: the product, the rearrangement and the summing
//! compute set each appear once in the program, the sum after the rearrangement in the
//! same sequence, with only rearrangements, copies and other compute sets between them. That
//! sequence may run many times (a loop's body, a function called from several places, as
//! the encoder's layers are): each time, the sum reads what the product wrote last, which
//! is what the rearrangement read just before.
//!
//! [`Engine::read_tensor`]: crate::exec::engine::Engine::read_tensor

use crate::exec::compute::{LoadedComputeSet, ScratchInput};
use crate::exec::shortcuts::kept_results::KeptResult;
use crate::program::executable::{Executable, Program, Rearrange, RunSource, TensorId};
use crate::program::walk::uses_beside_kernel_vertices;
use codegen::KernelSpec;
use rayon::prelude::*;
use rustc_hash::FxHashMap;

/// The rearrangements whose destinations are read from a batch scratch instead.
#[derive(Debug, Default)]
pub(crate) struct ScratchReads {
    /// By rearrangement: skipped on the host (its destination is never written).
    pub skipped: Vec<bool>,
    /// Each unwritten destination's rearrangement.
    pub dst: FxHashMap<TensorId, usize>,
}

impl ScratchReads {
    /// Nothing skipped.
    pub(crate) fn none(exe: &Executable) -> ScratchReads {
        ScratchReads {
            skipped: vec![false; exe.rearranges.len()],
            dst: FxHashMap::default(),
        }
    }
}

/// Finds the K parts the summing vertices can read from the scratch and points their
/// inputs there (in `compute_sets`).
pub(crate) fn plan(
    exe: &Executable,
    compute_sets: &mut [LoadedComputeSet],
    kept_windows: &[bool],
    results: &FxHashMap<TensorId, KeptResult>,
    pool: &rayon::ThreadPool,
) -> ScratchReads {
    let mut out = ScratchReads::none(exe);
    // Rearrangements that copy a kept result to a tensor, and those tensors.
    let n = exe.tensors.len();
    let mut candidate = vec![false; n];
    let copies: Vec<usize> = (0..exe.rearranges.len())
        .filter(|&ri| {
            let r = &exe.rearranges[ri];
            let ok =
                !kept_windows[ri] && r.sources.len() == 1 && results.contains_key(&r.sources[0]);
            candidate[r.dst.0 as usize] |= ok;
            ok
        })
        .collect();
    if copies.is_empty() {
        return out;
    }
    let (other_writes, other_reads) = uses_beside_kernel_vertices(exe, |_| true);
    // Per candidate tensor: written by a kernel vertex; the one compute set whose vertices
    // read it (None inside: several), and whether a matrix-product vertex reads it.
    let mut vertex_writes = vec![false; n];
    let mut reader: Vec<Option<Option<usize>>> = vec![None; n];
    let mut product_reads = vec![false; n];
    for (ci, cs) in exe.compute_sets.iter().enumerate() {
        for v in &cs.vertices {
            for r in v.outputs.iter().filter(|r| candidate[r.tensor.0 as usize]) {
                vertex_writes[r.tensor.0 as usize] = true;
            }
            for r in v.inputs.iter().filter(|r| candidate[r.tensor.0 as usize]) {
                let t = r.tensor.0 as usize;
                product_reads[t] |= matches!(*v.kernel, KernelSpec::MatMul(_));
                reader[t] = match reader[t] {
                    None => Some(Some(ci)),
                    Some(Some(c)) if c == ci => Some(Some(ci)),
                    Some(_) => Some(None),
                };
            }
        }
    }
    let places = Places::of(exe);
    // Each eligible copy, its summing compute set and where the K part lies in the scratch.
    let eligible: Vec<(usize, usize)> = copies
        .into_iter()
        .filter_map(|ri| {
            let r = &exe.rearranges[ri];
            let kept = &results[&r.sources[0]];
            let t = r.dst.0 as usize;
            let Some(Some(s)) = reader[t] else {
                return None;
            };
            let alone = other_writes[t] == 1 && !other_reads[t] && !vertex_writes[t];
            (alone
                && !product_reads[t]
                && s != kept.compute_set
                && places.in_order(kept.compute_set, ri, s))
            .then_some((ri, s))
        })
        .collect::<Vec<_>>();
    // Where each K part lies in the scratch, and the summing vertices' inputs on it,
    // found in parallel (read only).
    let sets: &[LoadedComputeSet] = compute_sets;
    let found: Vec<Redirected> = pool.install(|| {
        eligible
            .par_iter()
            .filter_map(|&(ri, s)| {
                let r = &exe.rearranges[ri];
                let kept = &results[&r.sources[0]];
                let offset = scratch_offset(r, kept, exe.tensors[r.dst.0 as usize].elements)?;
                Some((
                    ri,
                    s,
                    redirects(exe, r.dst, &sets[s], kept.compute_set, offset),
                ))
            })
            .collect()
    });
    // Each summing vertex's scratch inputs, set at once.
    let mut by_vertex: FxHashMap<(usize, usize), Vec<ScratchInput>> = FxHashMap::default();
    for (ri, s, redirects) in found {
        if redirects.is_empty() {
            continue;
        }
        for (vertex, input) in redirects {
            by_vertex.entry((s, vertex)).or_default().push(input);
        }
        out.skipped[ri] = true;
        out.dst.insert(exe.rearranges[ri].dst, ri);
    }
    for ((s, vertex), inputs) in by_vertex {
        compute_sets[s].read_from_scratch(vertex, inputs);
    }
    out
}

/// A copy skipped, its summing compute set, and the (vertex, input) pointed at the scratch.
type Redirected = (usize, usize, Vec<(usize, ScratchInput)>);

/// The inputs of `sum`'s vertices on tensor `t` (vertex, input), each pointed at compute
/// set `cs`'s scratch where `t`'s element 0 lies at `offset`.
fn redirects(
    exe: &Executable,
    t: TensorId,
    sum: &LoadedComputeSet,
    cs: usize,
    offset: usize,
) -> Vec<(usize, ScratchInput)> {
    let tensor = &exe.tensors[t.0 as usize];
    let tiles_per_ipu = exe.target.tiles_per_ipu;
    // The tensor's intervals by tile, sorted.
    let mut by_tile: Vec<(usize, usize)> = tensor
        .mapping
        .iter()
        .enumerate()
        .map(|(i, iv)| (iv.ipu * tiles_per_ipu + iv.tile, i))
        .collect();
    by_tile.sort_unstable();
    let size = tensor.dtype.size();
    let mut out = Vec::new();
    for (tile, vertex, ranges) in sum.input_ranges() {
        let first = by_tile.partition_point(|&(t, _)| t < tile);
        for (input, &(b, e)) in ranges.iter().enumerate() {
            let (b, e) = (b as usize, e as usize);
            let holding = by_tile[first..]
                .iter()
                .take_while(|&&(t, _)| t == tile)
                .map(|&(_, i)| &tensor.mapping[i])
                .find(|iv| {
                    let at = iv.offset as usize;
                    at <= b && e <= at + iv.len * size
                });
            let Some(iv) = holding.filter(|_| b < e) else {
                continue;
            };
            let at = offset + iv.start + (b - iv.offset as usize) / size;
            let bytes = (at * size, at * size + (e - b));
            out.push((vertex, ScratchInput { input, cs, bytes }));
        }
    }
    out
}

/// The first scratch element of `r`'s destination when the destination, all of its
/// `elements` written once, lies in the scratch as it is, element after element: every run
/// reads stride-1 source rows (or single elements) whose scratch places are its
/// destination places shifted by one offset. (Two runs cannot then write one element:
/// distinct source elements have distinct scratch places.)
fn scratch_offset(r: &Rearrange, kept: &KeptResult, elements: usize) -> Option<usize> {
    let mut offset: Option<isize> = None;
    let mut written = 0;
    let mut piece: Option<usize> = None;
    for run in r.runs.iter() {
        let RunSource::Tensor {
            k: 0,
            start,
            stride,
        } = run.source
        else {
            return None;
        };
        if run.len > 1 && stride != 1 {
            return None;
        }
        let (mut p, mut at, mut left) = (start, run.dst_start, run.len);
        while left > 0 {
            // Runs mostly read the rows of one vertex result after another: the piece
            // after the last one.
            let holds = |i: usize| {
                kept.pieces
                    .get(i)
                    .is_some_and(|x| x.0 <= p && p < x.0 + x.1)
            };
            let i = match piece {
                Some(i) if holds(i) => i,
                Some(i) if holds(i + 1) => i + 1,
                _ => kept.piece_of(p),
            };
            let &(p0, plen, s0) = kept.pieces.get(i)?;
            piece = Some(i);
            let shift = (s0 + (p - p0)) as isize - at as isize;
            if *offset.get_or_insert(shift) != shift {
                return None;
            }
            let m = (p0 + plen - p).min(left);
            (p, at, left) = (p + m, at + m, left - m);
        }
        written += run.len;
    }
    let offset = offset?;
    (written == elements && offset >= 0).then_some(offset as usize)
}

/// Where each compute set's executions and each rearrangement stand in the program's
/// sequences: `(sequence, index)` per occurrence.
struct Places<'e> {
    sequences: Vec<&'e [Program]>,
    executions: FxHashMap<usize, Vec<(usize, usize)>>,
    rearranges: FxHashMap<usize, Vec<(usize, usize)>>,
}

impl<'e> Places<'e> {
    fn of(exe: &'e Executable) -> Places<'e> {
        let mut places = Places {
            sequences: Vec::new(),
            executions: FxHashMap::default(),
            rearranges: FxHashMap::default(),
        };
        places.walk(std::slice::from_ref(&exe.program));
        for f in &exe.functions {
            places.walk(std::slice::from_ref(f));
        }
        places
    }

    fn walk(&mut self, list: &'e [Program]) {
        let seq = self.sequences.len();
        self.sequences.push(list);
        let walk = |p: &'e Program, places: &mut Places<'e>| places.walk(std::slice::from_ref(p));
        for (i, p) in list.iter().enumerate() {
            match p {
                Program::Execute(c) => self
                    .executions
                    .entry(c.0 as usize)
                    .or_default()
                    .push((seq, i)),
                Program::Rearrange(r) => self
                    .rearranges
                    .entry(r.0 as usize)
                    .or_default()
                    .push((seq, i)),
                Program::Sequence(ps) => self.walk(ps),
                Program::Repeat { body, .. } => walk(body, self),
                Program::RepeatWhileTrue {
                    condition, body, ..
                } => {
                    walk(condition, self);
                    walk(body, self);
                }
                Program::If {
                    then, otherwise, ..
                } => {
                    walk(then, self);
                    walk(otherwise, self);
                }
                Program::Switch { cases, default, .. } => {
                    cases.iter().for_each(|c| walk(c, self));
                    walk(default, self);
                }
                Program::Parallel(branches) => branches.iter().for_each(|b| walk(b, self)),
                Program::Copy { .. }
                | Program::Call(_)
                | Program::StreamCopy { .. }
                | Program::Sync
                | Program::Collective(_) => {}
            }
        }
    }

    /// True when compute set `product`, rearrangement `r` and compute set `sum` each appear
    /// once in the program (in the main program or a function), `sum` after `r` in the same
    /// sequence with only rearrangements, copies and compute sets other than `product`
    /// between them.
    fn in_order(&self, product: usize, r: usize, sum: usize) -> bool {
        let once = |m: &FxHashMap<usize, Vec<(usize, usize)>>, k: usize| match m.get(&k) {
            Some(v) if v.len() == 1 => Some(v[0]),
            _ => None,
        };
        let (Some(_), Some((rs, ri)), Some((ss, si))) = (
            once(&self.executions, product),
            once(&self.rearranges, r),
            once(&self.executions, sum),
        ) else {
            return false;
        };
        rs == ss
            && ri < si
            && self.sequences[rs][ri + 1..si].iter().all(|p| match p {
                // Copies move tensors' bytes and run nothing: the scratch stays as it is.
                Program::Rearrange(_) | Program::Copy { .. } => true,
                Program::Execute(c) => c.0 as usize != product,
                _ => false,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::executable::Run;

    fn rearrange(runs: Vec<(usize, usize, isize, usize)>) -> Rearrange {
        Rearrange {
            name: "r".into(),
            dst: TensorId(1),
            sources: vec![TensorId(0)],
            fill: Vec::new(),
            runs: runs
                .into_iter()
                .map(|(src, dst_start, stride, len)| Run {
                    source: RunSource::Tensor {
                        k: 0,
                        start: src,
                        stride,
                    },
                    dst_start,
                    len,
                })
                .collect(),
        }
    }

    #[test]
    fn a_destination_lying_in_the_scratch_as_it_is_has_one_offset() {
        // Rows of two blocks (elements 0..4: block 0's two rows, 4..8: block 1's) side by
        // side in the scratch from 10 on, read back in row order.
        let blocks = KeptResult {
            compute_set: 0,
            pieces: vec![(0, 2, 10), (2, 2, 14), (4, 2, 12), (6, 2, 16)],
        };
        let rows = rearrange(vec![(0, 0, 1, 2), (4, 2, 1, 2), (2, 4, 1, 2), (6, 6, 1, 2)]);
        assert_eq!(scratch_offset(&rows, &blocks, 8), Some(10));
        // The blocks one after another instead: the destination is not the scratch order.
        let blocks_in_order = rearrange(vec![(0, 0, 1, 8)]);
        assert_eq!(scratch_offset(&blocks_in_order, &blocks, 8), None);
        // Not all written, or a strided run.
        assert_eq!(scratch_offset(&rows, &blocks, 10), None);
        let strided = rearrange(vec![(0, 0, 2, 4)]);
        assert_eq!(scratch_offset(&strided, &blocks, 4), None);
        // A fill run.
        let mut filled = rows.clone();
        let mut runs: Vec<Run> = rows.runs.iter().collect();
        runs[0].source = RunSource::Fill;
        filled.runs = runs.into();
        assert_eq!(scratch_offset(&filled, &blocks, 8), None);
    }
}
