//! Matrix-product results read from the host's batch scratch instead of tile memory.
//!
//! A planned matrix product's partials (one block per tile, per K part) are written by its
//! compute set and read only by the rearrangements that put each K part into result order.
//! When its vertices run as host batches ([`crate::product_batches`]), the partials already
//! sit in the batch scratch, row by row; copying them to the tiles only for the
//! rearrangements to gather them back is two passes over every byte that the IPU Model does
//! not need. So when a tensor is written only by batched vertices of one compute set,
//! covering it exactly, and read only by rearrangements (which do not keep their windows),
//! the engine leaves it unwritten: those rearrangements write their destinations straight
//! from the scratch, and [`Engine::read_tensor`] reads it there. The exchange is costed
//! from the executable as before; the cycles do not change.
//!
//! [`Engine::read_tensor`]: crate::Engine::read_tensor

use crate::compute_set::LoadedComputeSet;
use crate::executable::{Executable, TensorId};
use crate::operand_views::program_uses;
use codegen::DType;
use std::collections::HashMap;

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

/// The tensors of `exe` (validated) that need not be written to the tiles, given its loaded
/// compute sets and which rearrangements keep their windows.
pub(crate) fn plan(
    exe: &Executable,
    compute_sets: &[LoadedComputeSet],
    kept_windows: &[bool],
) -> HashMap<TensorId, KeptResult> {
    let n = exe.tensors.len();
    // Writes other than kernel vertices' and reads other than rearrangements'.
    let mut other_writes = vec![0u32; n];
    let mut other_reads = vec![false; n];
    // Kernel-vertex outputs per tensor, and the one compute set writing it (None: several).
    let mut vertex_writes = vec![0usize; n];
    let mut writer: Vec<Option<Option<usize>>> = vec![None; n];
    for (i, t) in exe.tensors.iter().enumerate() {
        if t.init.is_some() {
            other_writes[i] += 1;
        }
    }
    for (ri, r) in exe.rearranges.iter().enumerate() {
        other_writes[r.dst.0 as usize] += 1;
        if kept_windows[ri] {
            r.sources
                .iter()
                .for_each(|s| other_reads[s.0 as usize] = true);
        }
    }
    for p in std::iter::once(&exe.program).chain(&exe.functions) {
        program_uses(exe, p, &mut other_writes, &mut other_reads);
    }
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
        for v in &cs.codelet_vertices {
            v.inputs
                .iter()
                .for_each(|r| other_reads[r.tensor.0 as usize] = true);
            v.outputs
                .iter()
                .for_each(|r| other_writes[r.tensor.0 as usize] += 1);
        }
    }
    let mut kept: HashMap<TensorId, KeptResult> = HashMap::new();
    let mut batched = vec![0usize; n];
    for (ci, cs) in compute_sets.iter().enumerate() {
        let (batches, scatters) = cs.batched();
        for s in scatters {
            let t = s.dst.0;
            let i = t.0 as usize;
            if writer[i] != Some(Some(ci)) || other_writes[i] > 0 || other_reads[i] {
                continue;
            }
            batched[i] += 1;
            kept.entry(t)
                .or_insert_with(|| KeptResult {
                    compute_set: ci,
                    pieces: Vec::new(),
                })
                .pieces
                .extend(batches.rows(s));
        }
    }
    kept.retain(|t, k| {
        let i = t.0 as usize;
        k.pieces.sort_unstable();
        let mut next = 0;
        let covers = k.pieces.iter().all(|&(start, len, _)| {
            let ok = start == next;
            next = start + len;
            ok
        }) && next == exe.tensors[i].elements;
        // Every vertex writing it is batched, and its rows tile it exactly.
        cfg!(target_endian = "little")
            && exe.tensors[i].dtype == DType::F32
            && batched[i] == vertex_writes[i]
            && covers
    });
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

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
