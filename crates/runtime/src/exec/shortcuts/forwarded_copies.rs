//! Copies whose destination only kept windows read, left undone until a window needs them.
//!
//! A function's arguments are copied in before each call (the encoder's twelve layers copy
//! a slice of each stacked weight into the one layer function's argument tensors), and
//! inside it a matrix product's operand rearrangement gathers that argument into its kept
//! window ([`crate::exec::shortcuts::operand_views`]): the host copies each weight twice.
//! When an argument `S` is written only by such copies (rearrangements reading one source
//! `P` element after element) and read only by kept-window rearrangements, the engine skips
//! the copy and remembers it as pending; a window of `S` is then gathered straight from `P`
//! through the pending copy ([`Window::through`]), one copy of each byte instead of two.
//!
//! This holds while `P` is unchanged since the pending copy ran. `P` must be written only
//! by host streams (an input, such as a weight) and hold bytes no other tensor shares (the
//! memory planner gives a tensor's bytes to another once it is dead, and the pending copy
//! reads `P` after its last reader on the device); before a stream (or
//! [`Engine::write_tensor`]) writes `P`, the copies pending from it keep their bytes.
//! [`Engine::read_tensor`] reads a pending `S` through its copy. The IPU Model charges
//! every copy as before; only the host defers it.
//!
//! [`Window::through`]: crate::exec::copy::Window::through
//! [`Engine::write_tensor`]: crate::exec::engine::Engine::write_tensor
//! [`Engine::read_tensor`]: crate::exec::engine::Engine::read_tensor

use crate::exec::copy::{Window, forwardable};
use crate::exec::memory::{HostTiles, f32_bytes_mut};
use crate::exec::shortcuts::kept_results::KeptResult;
use crate::exec::shortcuts::scratch_reads::ScratchReads;
use crate::model::layout::read_intervals;
use crate::program::executable::{Direction, Executable, Program, TensorId};
use crate::program::walk::{each_node, programs, uses_beside_kernel_vertices};
use rayon::prelude::*;
use rustc_hash::FxHashMap;

/// The copies the host defers, and where their destinations are read.
#[derive(Debug, Default)]
pub(crate) struct ForwardedCopies {
    /// By rearrangement: a copy left pending when it runs (its destination unwritten).
    pub deferred: Vec<bool>,
    /// Each deferred copy's destination: the `(rearrangement, source)` windows reading it.
    pub readers: FxHashMap<TensorId, Vec<(usize, usize)>>,
    /// Each source of deferred copies: the destinations they write from it.
    pub from: FxHashMap<TensorId, Vec<TensorId>>,
}

impl ForwardedCopies {
    /// Nothing deferred.
    pub(crate) fn none(exe: &Executable) -> ForwardedCopies {
        ForwardedCopies {
            deferred: vec![false; exe.rearranges.len()],
            ..ForwardedCopies::default()
        }
    }
}

/// Finds the copies of `exe` the host can defer, given the rearrangements whose windows
/// are kept, the products' results left in a batch scratch and the K parts read from it.
/// The cheap conditions (on rearrangements alone) come first: most executables have no
/// candidate, and the rest walk every tensor's tiles.
pub(crate) fn plan(
    exe: &Executable,
    kept_windows: &[bool],
    results: &FxHashMap<TensorId, KeptResult>,
    scratch_reads: &ScratchReads,
    pool: &rayon::ThreadPool,
) -> ForwardedCopies {
    let mut out = ForwardedCopies::none(exe);
    let n = exe.tensors.len();
    // Windows of each tensor, by the kept rearrangements reading it.
    let mut windows: FxHashMap<usize, Vec<(usize, usize)>> = FxHashMap::default();
    for (ri, r) in exe.rearranges.iter().enumerate() {
        if kept_windows[ri] {
            for (k, s) in r.sources.iter().enumerate() {
                windows.entry(s.0 as usize).or_default().push((ri, k));
            }
        }
    }
    let mut writers: FxHashMap<usize, Vec<usize>> = FxHashMap::default();
    for (ri, r) in exe.rearranges.iter().enumerate() {
        if windows.contains_key(&(r.dst.0 as usize)) {
            writers.entry(r.dst.0 as usize).or_default().push(ri);
        }
    }
    // Destinations every writer of which is a copy that could be deferred.
    writers.retain(|&s, ws| {
        ws.iter().all(|&w| {
            let r = &exe.rearranges[w];
            forwardable(r)
                && !kept_windows[w]
                && !scratch_reads.skipped[w]
                && r.sources[0].0 as usize != s
                && !results.contains_key(&r.sources[0])
        })
    });
    if writers.is_empty() {
        return out;
    }
    // Writes and reads beside kernel vertices (a kept window's gather is no such read).
    let (writes, reads) = uses_beside_kernel_vertices(exe, |ri| !kept_windows[ri]);
    let mut by_vertices = vec![false; n];
    for v in exe.compute_sets.iter().flat_map(|cs| &cs.vertices) {
        let used = v.inputs.iter().chain(&v.outputs);
        used.for_each(|r| by_vertices[r.tensor.0 as usize] = true);
    }
    let mut streamed = vec![0u32; n];
    for p in programs(exe) {
        each_node(p, &mut |q| {
            if let Program::StreamCopy { stream, tensor } = q
                && exe.streams[stream.0 as usize].direction == Direction::HostToDevice
            {
                streamed[tensor.0 as usize] += 1;
            }
        });
    }
    // A source only host streams (or initial data) write.
    let input = |p: usize| {
        let init = u32::from(exe.tensors[p].init.is_some());
        writes[p] == streamed[p] + init && !by_vertices[p]
    };
    writers.retain(|&s, ws| {
        let alone = writes[s] == ws.len() as u32 && !reads[s] && !by_vertices[s];
        alone
            && ws
                .iter()
                .all(|&w| input(exe.rearranges[w].sources[0].0 as usize))
    });
    let mut sources = vec![false; n];
    for &w in writers.values().flatten() {
        sources[exe.rearranges[w].sources[0].0 as usize] = true;
    }
    let shared = sharing_bytes(exe, &sources, pool);
    let mut kept: Vec<(usize, Vec<usize>)> = writers
        .into_iter()
        .filter(|(_, ws)| {
            ws.iter()
                .all(|&w| !shared[exe.rearranges[w].sources[0].0 as usize])
        })
        .collect();
    kept.sort_unstable();
    for (s, ws) in kept {
        let s_id = TensorId(s as u32);
        for &w in &ws {
            out.deferred[w] = true;
            let from = out.from.entry(exe.rearranges[w].sources[0]).or_default();
            if !from.contains(&s_id) {
                from.push(s_id);
            }
        }
        out.readers
            .insert(s_id, windows.remove(&s).unwrap_or_default());
    }
    out
}

/// Of the tensors `of` marks: which share a byte of a tile with another tensor. Every
/// tensor's every interval is looked at (the encoder's 37 ms on one thread): in parallel
/// on `pool`.
fn sharing_bytes(exe: &Executable, of: &[bool], pool: &rayon::ThreadPool) -> Vec<bool> {
    let tiles_per_ipu = exe.target.tiles_per_ipu;
    // The marked tensors' byte ranges by tile.
    let mut by_tile: Vec<Vec<(u64, u64, usize)>> =
        vec![Vec::new(); exe.num_ipus.max(1) * tiles_per_ipu];
    for (t, tensor) in exe.tensors.iter().enumerate().filter(|(t, _)| of[*t]) {
        let size = tensor.dtype.size() as u64;
        for iv in &tensor.mapping {
            let tile = iv.ipu * tiles_per_ipu + iv.tile;
            if tile >= by_tile.len() {
                by_tile.resize(tile + 1, Vec::new());
            }
            by_tile[tile].push((iv.offset, iv.offset + iv.len as u64 * size, t));
        }
    }
    // Each tensor's marked neighbours: the marked tensors whose bytes it overlaps.
    let overlapping = |(t, tensor): (usize, &crate::program::executable::Tensor)| {
        let size = tensor.dtype.size() as u64;
        let mut found = Vec::new();
        for iv in &tensor.mapping {
            let Some(marked) = by_tile.get(iv.ipu * tiles_per_ipu + iv.tile) else {
                continue;
            };
            let (a, b) = (iv.offset, iv.offset + iv.len as u64 * size);
            for &(x, y, m) in marked {
                if m != t && a < y && x < b && !found.contains(&m) {
                    found.push(m);
                }
            }
        }
        found
    };
    let found: Vec<usize> = pool.install(|| {
        (exe.tensors.par_iter().enumerate())
            .flat_map_iter(overlapping)
            .collect()
    });
    let mut out = vec![false; exe.tensors.len()];
    found.into_iter().for_each(|m| out[m] = true);
    out
}

/// The deferred copies at run time: the windows gathered through each, and those pending.
#[derive(Default)]
pub(crate) struct PendingCopies {
    /// By `(copy, reading rearrangement, source)`: the reader's window taken through the copy.
    through: FxHashMap<(usize, usize, usize), Window>,
    /// By copy: its whole destination taken through it.
    whole: FxHashMap<usize, Window>,
    /// By `(reading rearrangement, source)`: the first element its window holds.
    starts: FxHashMap<(usize, usize), usize>,
    /// Each destination whose tiles are stale: what it holds instead.
    pending: FxHashMap<TensorId, Pending>,
    /// Buffers of held bytes no longer pending, kept for the next (no page faults a run).
    spare: FxHashMap<TensorId, Vec<u8>>,
}

/// What a destination of deferred copies holds while its tiles are stale.
enum Pending {
    /// What the copy would have written from its source, unchanged since.
    Copy(usize),
    /// Its bytes in element order: a pending copy taken before its source changed.
    Held(Vec<u8>),
}

/// Where a window of a pending destination comes from.
pub(crate) enum PendingWindow<'p> {
    /// Gathered from the tiles through the copy.
    Through(&'p Window),
    /// The destination's held bytes, the window's first from this byte.
    Held(&'p [u8]),
}

impl PendingWindow<'_> {
    /// Fills a kept window (f32 values; with `f16`, of a source of halves, widened) from
    /// here, a large one on `pool`.
    pub(crate) fn fill(
        &self,
        memory: &HostTiles,
        window: &mut [f32],
        f16: bool,
        pool: &rayon::ThreadPool,
    ) {
        match (self, f16) {
            (PendingWindow::Through(w), true) => w.gather_widened(memory, window, pool),
            (PendingWindow::Through(w), false) => w.gather(memory, f32_bytes_mut(window), pool),
            (PendingWindow::Held(bytes), true) => {
                codegen::halves::widen_into(&bytes[..window.len() * 2], window)
            }
            (PendingWindow::Held(bytes), false) => {
                let window = f32_bytes_mut(window);
                window.copy_from_slice(&bytes[..window.len()]);
            }
        }
    }
}

impl PendingCopies {
    /// The windows through every copy `plan` defers, for `exe` on `tiles_per_ipu` tiles.
    pub(crate) fn load(
        exe: &Executable,
        tiles_per_ipu: usize,
        plan: &ForwardedCopies,
    ) -> PendingCopies {
        let mut out = PendingCopies::default();
        let mut reads: FxHashMap<usize, Vec<Vec<(usize, usize)>>> = FxHashMap::default();
        let through = |read: &[(usize, usize)], writer| {
            Window::through(&exe.tensors, tiles_per_ipu, read, writer)
                .expect("planned: every deferred copy is forwardable")
        };
        for (w, _) in plan.deferred.iter().enumerate().filter(|(_, d)| **d) {
            let writer = &exe.rearranges[w];
            let elements = exe.tensors[writer.dst.0 as usize].elements;
            out.whole.insert(w, through(&[(0, elements)], writer));
            for &(r, k) in &plan.readers[&writer.dst] {
                let read = reads
                    .entry(r)
                    .or_insert_with(|| read_intervals(&exe.rearranges[r]));
                out.through.insert((w, r, k), through(&read[k], writer));
                out.starts
                    .insert((r, k), read[k].first().map_or(0, |iv| iv.0));
            }
        }
        out
    }

    /// Copy `w` (writing `dst`) ran without writing: `dst` is what it would have written.
    pub(crate) fn defer(&mut self, w: usize, dst: TensorId) {
        if let Some(Pending::Held(bytes)) = self.pending.insert(dst, Pending::Copy(w)) {
            self.spare.insert(dst, bytes);
        }
    }

    /// Where the window rearrangement `r` gathers from `source` (its `k`-th, of elements of
    /// `size` bytes) comes from when `source` is pending.
    pub(crate) fn window(
        &self,
        source: TensorId,
        (r, k): (usize, usize),
        size: usize,
    ) -> Option<PendingWindow<'_>> {
        Some(match self.pending.get(&source)? {
            Pending::Copy(w) => PendingWindow::Through(&self.through[&(*w, r, k)]),
            Pending::Held(bytes) => PendingWindow::Held(&bytes[self.starts[&(r, k)] * size..]),
        })
    }

    /// The bytes of pending `t` (element order), gathered from `memory` if its copy is
    /// pending; `None` when `t` is not pending (its tiles hold it).
    pub(crate) fn read(&self, t: TensorId, memory: &HostTiles) -> Option<Vec<u8>> {
        Some(match self.pending.get(&t)? {
            Pending::Copy(w) => {
                let whole = &self.whole[w];
                let mut bytes = vec![0u8; whole.bytes()];
                whole.gather_here(memory, &mut bytes);
                bytes
            }
            Pending::Held(bytes) => bytes.clone(),
        })
    }

    /// Before `t` is written (by a host stream, or whole): the copies pending from it take
    /// their bytes now, from `memory`; one pending into it is forgotten (its tiles will hold
    /// it).
    pub(crate) fn settle(
        &mut self,
        t: TensorId,
        plan: &ForwardedCopies,
        memory: &HostTiles,
        pool: &rayon::ThreadPool,
    ) {
        if let Some(Pending::Held(bytes)) = self.pending.remove(&t) {
            self.spare.insert(t, bytes);
        }
        for d in plan.from.get(&t).into_iter().flatten() {
            if let Some(Pending::Copy(w)) = self.pending.get(d) {
                let whole = &self.whole[w];
                let mut bytes = self.spare.remove(d).unwrap_or_default();
                bytes.resize(whole.bytes(), 0);
                whole.gather(memory, &mut bytes, pool);
                self.pending.insert(*d, Pending::Held(bytes));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::target::Target;
    use crate::exec::shortcuts::operand_views::OperandViews;
    use crate::exec::shortcuts::operand_views::tests::transposed_times_w;
    use crate::program::builder::ExecutableBuilder;
    use crate::program::executable::{Rearrange, Run, RunSource};
    use codegen::DType;

    /// How the copy into `x` reads `p`, and what else touches them.
    #[derive(Clone, Copy)]
    enum Case {
        /// `p` streamed in, copied whole, element after element.
        Streamed,
        /// `p` also written by a rearrangement (from `q`).
        Rearranged,
        /// The copy reverses `p`.
        Reversed,
        /// `x` also streamed out.
        Read,
        /// `q` given `p`'s bytes (as the memory planner gives a dead tensor's).
        Shared,
    }

    /// `p` (4 f32s on tile 0) → copied to `x` (tile 0) → `x`'s transpose as blocks on tile
    /// 1 → a product on tile 1 with `w` ([`transposed_times_w`]), as `case` varies it. Returns the executable and
    /// the copy's rearrangement.
    fn copied(case: Case) -> (Executable, usize) {
        let mut b = ExecutableBuilder::new(Target::ipu2().with_tiles_per_ipu(4), 1);
        let p = b.tensor("p", DType::F32, &[(0, 0, 4)]);
        let q = b.tensor("q", DType::F32, &[(0, 0, 4)]);
        let x = b.tensor("x", DType::F32, &[(0, 0, 4)]);
        if let Case::Shared = case {
            b.tensor_mut(q).mapping[0].offset = b.tensor_mut(p).mapping[0].offset + 8;
        }
        let run = |start, stride, dst_start, len| Run {
            source: RunSource::Tensor {
                k: 0,
                start,
                stride,
            },
            dst_start,
            len,
        };
        let rearrange = |name: &str, dst, src, runs: Vec<Run>| Rearrange {
            name: name.into(),
            dst,
            sources: vec![src],
            fill: vec![],
            runs: runs.into(),
        };
        let copy_runs = match case {
            Case::Reversed => vec![run(3, -1, 0, 4)],
            _ => vec![run(0, 1, 0, 4)],
        };
        let copy = b.rearrange(rearrange("copy", x, p, copy_runs));
        let (r, cs, _) = transposed_times_w(&mut b, x);
        let sp = b.stream("p", Direction::HostToDevice, DType::F32, 4);
        let mut program = vec![Program::StreamCopy {
            stream: sp,
            tensor: p,
        }];
        if let Case::Rearranged = case {
            program.push(Program::Rearrange(b.rearrange(rearrange(
                "q -> p",
                p,
                q,
                vec![run(0, 1, 0, 4)],
            ))));
        }
        program.extend([
            Program::Rearrange(copy),
            Program::Rearrange(r),
            Program::Execute(cs),
        ]);
        if let Case::Read = case {
            let sx = b.stream("x", Direction::DeviceToHost, DType::F32, 4);
            program.push(Program::StreamCopy {
                stream: sx,
                tensor: x,
            });
        }
        (b.finish(Program::Sequence(program)), copy.0 as usize)
    }

    fn deferred(case: Case) -> bool {
        let (exe, copy) = copied(case);
        let views = OperandViews::plan(&exe);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let plan = plan(
            &exe,
            &views.kept,
            &FxHashMap::default(),
            &ScratchReads::none(&exe),
            &pool,
        );
        plan.deferred[copy]
    }

    #[test]
    fn a_copy_from_a_streamed_input_only_a_kept_window_reads_is_deferred() {
        assert!(deferred(Case::Streamed));
    }

    #[test]
    fn copies_from_a_computed_or_shared_source_reversed_or_read_otherwise_are_written() {
        assert!(!deferred(Case::Rearranged), "p changes on the device");
        assert!(
            !deferred(Case::Reversed),
            "no window sees through a reversal"
        );
        assert!(!deferred(Case::Read), "x is streamed out");
        assert!(!deferred(Case::Shared), "q may overwrite p");
    }
}
