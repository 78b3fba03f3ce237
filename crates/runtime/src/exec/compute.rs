//! Compute sets ready to run: each tile's vertices with the byte ranges of their regions in
//! that tile's memory, and running them (tiles in parallel, weighed by the model's cycles).

use crate::error::RuntimeError;
use crate::exec::buckets::Buckets;
use crate::exec::memory::{HostTiles, f32_bytes};
use crate::exec::parallel::{Spread, for_each_active_ahead};
use crate::exec::prefetch;
use crate::exec::shortcuts::codelet_groups::{self, CodeletGroup};
use crate::exec::shortcuts::operand_views::{OperandViews, View};
use crate::exec::shortcuts::product_batches::{ProductBatches, Scatter, ViewedProduct};
use crate::model::layout::RegionFinder;
use crate::model::steps::ComputeCost;
use crate::program::codelet::{CodeletRef, GroupMember, SameBytes};
use crate::program::executable::{Executable, Region, TensorId};
use codegen::slots::slots;
use codegen::{
    KernelCache, KernelId, KernelSpec, KernelTable, MatRef, PlainElementwise, PlainReduce,
};
use rustc_hash::FxHashSet;
use smallvec::SmallVec;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// What a loaded vertex runs.
#[derive(Clone, Copy)]
enum Work {
    /// A JIT-compiled kernel.
    Kernel(KernelId),
    /// A native codelet, by index in the executable.
    Codelet(u32),
}

/// A byte range `start..end` in a tile's memory. Tile memories are under 4 GiB (the engine
/// refuses larger ones at load), and a run reads hundreds of thousands of these: half the
/// bytes of a `usize` pair.
pub(crate) type Span = (u32, u32);

/// The bytes of `span` as an index range.
fn range((b, e): Span) -> std::ops::Range<usize> {
    b as usize..e as usize
}

/// Byte ranges of a vertex's input regions in its tile's memory, inline for the usual few
/// (a run reads hundreds of thousands of vertices: no pointer to chase per vertex).
type Inputs = SmallVec<[Span; 3]>;

/// Byte ranges of a vertex's output regions (two fit where one `usize` pair did).
type Outputs = SmallVec<[Span; 2]>;

/// What a kernel does with its regions, as far as joining neighbouring vertices goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// Element `j` of each output from element `j` of each input.
    Elementwise,
    /// Output `r` from input run `r` of this many elements.
    Reduce(u32),
    /// Anything else: never joined.
    Other,
}

/// A vertex ready to run: its kernel and the byte ranges of its regions in tile memory.
/// Small (96 bytes): a run walks every one of them, so the rare parts live in `extra`.
#[derive(Clone)]
pub(crate) struct LoadedVertex {
    work: Work,
    shape: Shape,
    inputs: Inputs,
    outputs: Outputs,
    elements: u32,
    runs: u32,
    /// Some output overlaps an input or another output: the vertex runs on copies.
    overlaps: bool,
    /// What few vertices have: operands read from elsewhere than tile memory, or a place
    /// to name.
    extra: Option<Box<Extra>>,
}

/// The rare parts of a [`LoadedVertex`]. An input read elsewhere has an empty range in the
/// vertex's `inputs`.
#[derive(Default, Clone)]
struct Extra {
    /// For a matrix product: operands read in place from kept windows instead of tile
    /// memory.
    views: Option<[Option<View>; 2]>,
    /// Inputs read from another compute set's batch scratch instead of tile memory:
    /// `(input, compute set, byte range there)`. See
    /// [`crate::exec::shortcuts::scratch_reads`]. Inline: read at every run, and a vector's
    /// own allocation was a second miss after the box's.
    scratch: SmallVec<[ScratchInput; 2]>,
    /// For a codelet: inputs read from kept windows instead of tile memory. See
    /// [`crate::exec::shortcuts::operand_views`].
    windowed: Box<[WindowInput]>,
    /// Under a floating-point mode: where the vertex sits, to name an exception's element
    /// and to seed stochastic rounding (such vertices are never joined).
    origin: Option<Origin>,
}

/// A codelet input read from a kept window: elements `at..at + len` of window `source` of
/// rearrangement `rearrange`, the bytes the tile would hold.
#[derive(Debug, Clone, Copy)]
struct WindowInput {
    input: usize,
    rearrange: u32,
    source: u32,
    at: usize,
    len: usize,
}

impl WindowInput {
    fn bytes<'w>(&self, windows: &'w [Vec<Vec<f32>>]) -> &'w [u8] {
        let window = &windows[self.rearrange as usize][self.source as usize];
        f32_bytes(&window[self.at..self.at + self.len])
    }
}

/// An element-wise vertex's place, for floating-point exceptions and rounding.
#[derive(Debug, Clone)]
struct Origin {
    /// Distinct per vertex of the executable (compute set and vertex index).
    salt: u64,
    ipu: usize,
    tile: usize,
    /// Each output's tensor and the region's first element there.
    outputs: Vec<(String, usize)>,
}

impl Origin {
    /// A kernel's error, a floating-point exception named by tile, tensor and element.
    fn explain(&self, e: codegen::CodegenError) -> String {
        let codegen::CodegenError::FloatingPoint {
            exception,
            output,
            element,
        } = e
        else {
            return e.to_string();
        };
        let (tensor, start) = &self.outputs[output.min(self.outputs.len() - 1)];
        format!(
            "IPU {} tile {}: floating-point exception: {exception} computing element {} of '{tensor}' (floating_point_behaviour.{})",
            self.ipu,
            self.tile,
            start + element,
            exception.flag()
        )
    }
}

/// A vertex's tile, index and input byte ranges (see [`LoadedComputeSet::input_ranges`]).
pub(crate) type VertexInputs<'a> = (usize, usize, &'a [Span]);

/// An input read from compute set `cs`'s batch scratch, bytes `bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ScratchInput {
    pub input: usize,
    pub cs: usize,
    pub bytes: (usize, usize),
}

fn overlap(a: Span, b: Span) -> bool {
    a.0 < b.1 && b.0 < a.1 && a.0 < a.1 && b.0 < b.1
}

/// True when some output range overlaps an input range or another output range.
fn overlapping(inputs: &[Span], outputs: &[Span]) -> bool {
    outputs.iter().enumerate().any(|(i, &o)| {
        inputs.iter().any(|&r| overlap(o, r)) || outputs[i + 1..].iter().any(|&p| overlap(o, p))
    })
}

impl LoadedVertex {
    fn new(
        work: Work,
        shape: Shape,
        inputs: Inputs,
        outputs: Outputs,
        (elements, runs): (u32, u32),
    ) -> LoadedVertex {
        let overlaps = overlapping(&inputs, &outputs);
        LoadedVertex {
            work,
            shape,
            inputs,
            outputs,
            elements,
            runs,
            overlaps,
            extra: None,
        }
    }

    /// The matrix product's operands read from kept windows, if any.
    fn views(&self) -> Option<&[Option<View>; 2]> {
        self.extra.as_ref()?.views.as_ref()
    }

    /// The inputs read from batch scratches.
    fn scratch(&self) -> &[ScratchInput] {
        self.extra.as_ref().map_or(&[], |x| &x.scratch)
    }

    /// The codelet inputs read from kept windows.
    fn windowed(&self) -> &[WindowInput] {
        self.extra.as_ref().map_or(&[], |x| &x.windowed)
    }

    /// Where the vertex sits, under a floating-point mode.
    fn origin(&self) -> Option<&Origin> {
        self.extra.as_ref()?.origin.as_ref()
    }

    /// The rare parts, made when first needed.
    fn extra_mut(&mut self) -> &mut Extra {
        self.extra.get_or_insert_with(Box::default)
    }

    /// The codelet it runs, when it runs one alone on its tile's memory and the kept
    /// windows (no output over an input, no batch scratch read): one that may join a group
    /// ([`crate::exec::shortcuts::codelet_groups`]).
    pub(crate) fn groupable_codelet(&self) -> Option<u32> {
        match self.work {
            Work::Codelet(c) if !self.overlaps && self.scratch().is_empty() => Some(c),
            _ => None,
        }
    }

    /// The vertex as a member of a codelet group: its codelet and its regions' bytes in its
    /// tile's memory `mem` (inputs read from kept windows named for this run, `phase`, as
    /// [`LoadedVertex::run`] names them). For vertices [`LoadedVertex::groupable_codelet`]
    /// accepts.
    pub(crate) fn member<'m>(
        &self,
        mem: &'m mut [u8],
        codelets: &'m [CodeletRef],
        windows: &'m [Vec<Vec<f32>>],
        phase: u64,
    ) -> GroupMember<'m> {
        let Some(c) = self.groupable_codelet() else {
            unreachable!("only groupable codelet vertices join groups")
        };
        self.assert_in(mem);
        let base = mem.as_mut_ptr();
        // SAFETY: every range lies within `mem` (asserted above) and no output range
        // overlaps an input or another output (`overlaps` is false), so the shared and
        // mutable slices below never alias; `mem` stays borrowed mutably for their lifetime.
        let mut inputs: SmallVec<[&'m [u8]; 4]> = (self.inputs.iter())
            .map(|&r| unsafe { std::slice::from_raw_parts(base.add(r.0 as usize), range(r).len()) })
            .collect();
        let mut same = SmallVec::new();
        for w in self.windowed() {
            same.resize(same.len().max(w.input + 1), None);
            let bytes = w.bytes(windows);
            inputs[w.input] = bytes;
            same[w.input] = Some(SameBytes {
                phase,
                at: bytes.as_ptr() as usize,
                len: bytes.len(),
            });
        }
        let outputs = (self.outputs.iter())
            .map(|&r| unsafe {
                std::slice::from_raw_parts_mut(base.add(r.0 as usize), range(r).len())
            })
            .collect();
        GroupMember {
            codelet: &*codelets[c as usize].0,
            inputs,
            outputs,
            same,
        }
    }

    /// The reduction's input run length (0 for other kernels).
    fn run_length(&self) -> usize {
        match self.shape {
            Shape::Reduce(l) => l as usize,
            _ => 0,
        }
    }

    /// Runs the kernel or codelet; `step` counts the compute set's runs (stochastic
    /// rounding differs from one run of a compute set to the next); `same` names the
    /// codelet inputs read from kept windows.
    fn call(
        &self,
        ins: &[&[u8]],
        outs: &mut [&mut [u8]],
        table: &KernelTable,
        codelets: &[CodeletRef],
        (step, same): (u64, &[Option<SameBytes>]),
    ) -> Result<(), String> {
        match self.work {
            Work::Codelet(c) => codelets[c as usize].0.run_named(ins, outs, same),
            Work::Kernel(k) => {
                let kernel = table.get(k);
                let elements = self.elements as usize;
                match kernel.spec() {
                    KernelSpec::Elementwise(_) => match self.origin() {
                        None => kernel.run_elementwise(ins, outs, elements),
                        Some(o) => {
                            let salt = o.salt.wrapping_mul(0x0000_0100_0000_01B3) ^ step;
                            return kernel
                                .run_elementwise_at(ins, outs, elements, salt)
                                .map_err(|e| o.explain(e));
                        }
                    },
                    KernelSpec::Reduce(_) => {
                        kernel.run_reduce(ins[0], outs[0], self.run_length(), self.runs as usize)
                    }
                    KernelSpec::MatMul(_) => kernel.run_matmul(ins[0], ins[1], outs[0]),
                }
                .map_err(|e| e.to_string())
            }
        }
    }

    /// Runs the vertex on its tile's memory (and the kept windows its views read, and the
    /// batch scratches, `results(cs)`, its scratch inputs read); `phase` is this run of
    /// the compute set's number in the process (see [`SameBytes`]).
    fn run<'r>(
        &self,
        mem: &mut [u8],
        table: &KernelTable,
        codelets: &[CodeletRef],
        windows: &[Vec<Vec<f32>>],
        results: &(dyn Fn(usize) -> &'r [u8] + Sync),
        (step, phase): (u64, u64),
    ) -> Result<(), String> {
        if let Some(plain) = self.plain(table) {
            self.run_plain(plain, mem, results);
            return Ok(());
        }
        if let (Some(views), Work::Kernel(k)) = (self.views(), self.work) {
            return self.run_viewed(views, k, mem, table, windows);
        }
        if self.overlaps {
            // A vertex that updates in place writes its results aside, copied over its
            // inputs once it has read them all.
            let mut ins: Vec<&[u8]> = self.inputs.iter().map(|&r| &mem[range(r)]).collect();
            for s in self.scratch() {
                ins[s.input] = &results(s.cs)[s.bytes.0..s.bytes.1];
            }
            for w in self.windowed() {
                ins[w.input] = w.bytes(windows);
            }
            let mut outputs: Vec<Vec<u8>> = self
                .outputs
                .iter()
                .map(|&r| vec![0u8; range(r).len()])
                .collect();
            let mut outs: Vec<&mut [u8]> = outputs.iter_mut().map(Vec::as_mut_slice).collect();
            self.call(&ins, &mut outs, table, codelets, (step, &[]))?;
            for (&r, out) in self.outputs.iter().zip(&outputs) {
                mem[range(r)].copy_from_slice(out);
            }
            return Ok(());
        }
        self.assert_in(mem);
        let base = mem.as_mut_ptr();
        // SAFETY: every range lies within `mem` (asserted above) and no output range
        // overlaps an input or another output (`overlaps` is false), so the shared and
        // mutable slices below never alias; `mem` stays borrowed mutably for their lifetime.
        let (mut on_stack, mut on_heap) = ([&[][..]; INLINE_INPUTS], Vec::new());
        let ins = slots(&mut on_stack, &mut on_heap, self.inputs.len(), || &[][..]);
        for (slot, &r) in ins.iter_mut().zip(&self.inputs) {
            *slot = unsafe { std::slice::from_raw_parts(base.add(r.0 as usize), range(r).len()) };
        }
        for s in self.scratch() {
            ins[s.input] = &results(s.cs)[s.bytes.0..s.bytes.1];
        }
        let mut same: SmallVec<[Option<SameBytes>; 16]> = SmallVec::new();
        for w in self.windowed() {
            let bytes = w.bytes(windows);
            ins[w.input] = bytes;
            same.resize(same.len().max(w.input + 1), None);
            same[w.input] = Some(SameBytes {
                phase,
                at: bytes.as_ptr() as usize,
                len: bytes.len(),
            });
        }
        let (mut on_stack, mut on_heap): ([&mut [u8]; 4], Vec<&mut [u8]>) = Default::default();
        let outs = slots(
            &mut on_stack,
            &mut on_heap,
            self.outputs.len(),
            Default::default,
        );
        for (slot, &r) in outs.iter_mut().zip(&self.outputs) {
            *slot =
                unsafe { std::slice::from_raw_parts_mut(base.add(r.0 as usize), range(r).len()) };
        }
        self.call(ins, outs, table, codelets, (step, &same))
    }
}

/// A vertex's inputs kept on the stack when it has at most this many (every kernel of the
/// bench cases).
const INLINE_INPUTS: usize = 16;

/// Outputs a plain element-wise call takes on the stack ([`LoadedVertex::run_plain`]).
const INLINE_OUTPUTS: usize = 4;

impl LoadedVertex {
    /// This vertex and `next` (on the same tile) as one host call, when `next` continues
    /// every region of this one in tile memory with the same element-wise or reduction
    /// kernel: the IPU's six workers' shares of a tile's elements are neighbours, and one
    /// call for them all spares the host five dispatches. Cycles are charged per vertex
    /// before joining, so the model does not change.
    fn joined(&self, next: &LoadedVertex) -> Option<LoadedVertex> {
        let same_kernel = match (self.work, next.work) {
            (Work::Kernel(a), Work::Kernel(b)) => a == b,
            _ => false,
        };
        let continues =
            |a: &[Span], b: &[Span]| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.1 == y.0);
        let plain = |v: &LoadedVertex| v.extra.is_none() && !v.overlaps;
        if !same_kernel
            || self.shape != next.shape
            || self.shape == Shape::Other
            || !plain(self)
            || !plain(next)
            || !continues(&self.inputs, &next.inputs)
            || !continues(&self.outputs, &next.outputs)
        {
            return None;
        }
        fn span<const N: usize>(a: &[Span], b: &[Span]) -> SmallVec<[Span; N]> {
            a.iter().zip(b).map(|(x, y)| (x.0, y.1)).collect()
        }
        let joined = LoadedVertex::new(
            self.work,
            self.shape,
            span(&self.inputs, &next.inputs),
            span(&self.outputs, &next.outputs),
            (self.elements + next.elements, self.runs + next.runs),
        );
        (!joined.overlaps).then_some(joined)
    }

    /// The kernel to call straight ([`PlainElementwise`]): an element-wise vertex on its
    /// tile's memory and batch scratches alone (no kept window, no place to name, no output
    /// over an input) whose kernel has no f16 operand, status or stochastic rounding.
    fn plain<'t>(&self, table: &'t KernelTable) -> Option<PlainElementwise<'t>> {
        table.get(self.plain_kernel()?).plain_elementwise()
    }

    /// The kernel [`LoadedVertex::plain`] calls straight if the kernel allows it: the
    /// vertex's side of the conditions.
    fn plain_kernel(&self) -> Option<KernelId> {
        let elsewhere =
            |x: &Extra| x.views.is_some() || !x.windowed.is_empty() || x.origin.is_some();
        match self.work {
            // Element-wise kernels only (`plain_elementwise`), repeated inputs and all.
            Work::Kernel(k)
                if !matches!(self.shape, Shape::Reduce(_))
                    && !self.extra.as_deref().is_some_and(elsewhere)
                    && !self.overlaps
                    && self.inputs.len() <= INLINE_INPUTS
                    && self.outputs.len() <= INLINE_OUTPUTS =>
            {
                Some(k)
            }
            _ => None,
        }
    }

    /// Runs the vertex through its plain kernel ([`LoadedVertex::plain`]); `results(cs)`
    /// is compute set `cs`'s batch scratch, which its scratch inputs read.
    fn run_plain<'r>(
        &self,
        plain: PlainElementwise<'_>,
        mem: &mut [u8],
        results: &(dyn Fn(usize) -> &'r [u8] + Sync),
    ) {
        self.assert_in(mem);
        let base = mem.as_mut_ptr();
        let mut ins = [std::ptr::null::<u8>(); INLINE_INPUTS];
        for (slot, &(b, _)) in ins.iter_mut().zip(&self.inputs) {
            // SAFETY: `b` lies within `mem` (asserted above).
            *slot = unsafe { base.add(b as usize) };
        }
        for s in self.scratch() {
            ins[s.input] = results(s.cs)[s.bytes.0..s.bytes.1].as_ptr();
        }
        let mut outs = [std::ptr::null_mut::<u8>(); INLINE_OUTPUTS];
        for (slot, &(b, _)) in outs.iter_mut().zip(&self.outputs) {
            // SAFETY: as above.
            *slot = unsafe { base.add(b as usize) };
        }
        // SAFETY: every range lies within `mem` (asserted) or is a scratch input's slice of
        // another compute set's scratch (which no output can overlap); no output overlaps
        // an input or another output (`overlaps` is false); each range holds `elements`
        // elements of its operand's type, a repeated input its `input_len` (validation: an
        // element-wise vertex's regions are as long as its output, or as the repeat says,
        // and a joined vertex's ranges are its parts' side by side; a scratch input's bytes
        // are its region's, `scratch_reads`); `mem` is borrowed mutably for the call.
        unsafe {
            plain.call(
                &ins[..self.inputs.len()],
                &outs[..self.outputs.len()],
                self.elements as usize,
            )
        };
    }

    /// Bytes one run of the vertex reads and writes on the host: its regions in tile
    /// memory, its inputs read from batch scratches and kept windows, and a matrix
    /// product's operands read in place from kept windows (f32, as the views hold them).
    fn host_bytes(&self, table: &KernelTable) -> u64 {
        let spans: u64 = (self.inputs.iter().chain(&self.outputs))
            .map(|&(b, e)| u64::from(e - b))
            .sum();
        let scratch: usize = self.scratch().iter().map(|s| s.bytes.1 - s.bytes.0).sum();
        let windowed: usize = self.windowed().iter().map(|w| 4 * w.len).sum();
        let viewed = match (self.views(), self.work) {
            (Some(views), Work::Kernel(k)) => match table.get(k).spec() {
                KernelSpec::MatMul(spec) => {
                    let elements = [spec.m * spec.k, spec.k * spec.n];
                    (views.iter().zip(elements))
                        .filter_map(|(v, n)| v.map(|_| 4 * n))
                        .sum()
                }
                _ => 0,
            },
            _ => 0,
        };
        spans + (scratch + windowed + viewed) as u64
    }

    /// The reduction this vertex calls straight, if the kernel allows it
    /// ([`codegen::CompiledKernel::plain_reduce`]): a reduction on its tile's memory alone,
    /// its output apart from its input.
    fn plain_reduce_kernel(&self) -> Option<KernelId> {
        match (self.work, self.shape) {
            (Work::Kernel(k), Shape::Reduce(_))
                if self.extra.is_none()
                    && !self.overlaps
                    && self.inputs.len() == 1
                    && self.outputs.len() == 1 =>
            {
                Some(k)
            }
            _ => None,
        }
    }

    /// Runs the vertex through its plain reduction ([`LoadedVertex::plain_reduce_kernel`]).
    fn run_reduce(&self, plain: PlainReduce<'_>, mem: &mut [u8]) {
        self.assert_in(mem);
        let base = mem.as_mut_ptr();
        // SAFETY: both ranges lie within `mem` (asserted) and do not overlap (`overlaps` is
        // false); validation sized the input `run_length × runs` elements of the kernel's
        // input type and the output `runs` partials (a joined vertex's parts side by side);
        // `mem` is borrowed mutably for the call.
        unsafe {
            plain.call(
                base.add(self.inputs[0].0 as usize),
                base.add(self.outputs[0].0 as usize),
                self.run_length(),
                self.runs as usize,
            )
        }
    }

    /// The invariant the raw-pointer slices below rely on.
    fn assert_in(&self, mem: &[u8]) {
        assert!(
            self.inputs
                .iter()
                .chain(&self.outputs)
                .all(|&(b, e)| b <= e && e as usize <= mem.len()),
            "validated: every region lies in its tile's memory"
        );
    }

    /// Runs a matrix product whose operands are kept windows or tile memory.
    fn run_viewed(
        &self,
        views: &[Option<View>; 2],
        k: KernelId,
        mem: &mut [u8],
        table: &KernelTable,
        windows: &[Vec<Vec<f32>>],
    ) -> Result<(), String> {
        let kernel = table.get(k);
        let KernelSpec::MatMul(spec) = kernel.spec() else {
            return Err("operand views on a vertex that is not a matrix product".into());
        };
        let cols = [spec.k, spec.n];
        let out_range = range(self.outputs[0]);
        self.assert_in(mem);
        // Operands on the tile are read as f32 in place unless misaligned, overlapping the
        // output or f16; then they are copied (f16 widened).
        let f16 = spec.input == codegen::DType::F16;
        let mut owned: [Vec<f32>; 2] = Default::default();
        for i in 0..2 {
            let std::ops::Range { start: b, end: e } = range(self.inputs[i]);
            let in_place = !self.overlaps
                && !f16
                // SAFETY: every bit pattern is a valid f32; align_to yields the aligned middle.
                && matches!(unsafe { mem[b..e].align_to::<f32>() }, ([], _, []));
            if views[i].is_none() && !in_place {
                owned[i] = match f16 {
                    true => codegen::halves::widened(&mem[b..e], (e - b) / 2),
                    false => (mem[b..e].chunks_exact(4))
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .collect(),
                };
            }
        }
        let base = mem.as_mut_ptr();
        let operand = |i: usize| match views[i] {
            Some(v) => MatRef {
                data: &windows[v.rearrange as usize][v.source as usize],
                at: v.at,
                rs: v.rs,
                cs: v.cs,
            },
            None if owned[i].is_empty() && self.inputs[i].0 < self.inputs[i].1 => {
                let std::ops::Range { start: b, end: e } = range(self.inputs[i]);
                // SAFETY: b..e lies in `mem` (asserted), is 4-aligned (checked above) and
                // does not overlap the output (`overlaps` is false); every bit pattern is a
                // valid f32.
                let data =
                    unsafe { std::slice::from_raw_parts(base.add(b) as *const f32, (e - b) / 4) };
                MatRef::row_major(data, cols[i])
            }
            None => MatRef::row_major(&owned[i], cols[i]),
        };
        let (a, b) = (operand(0), operand(1));
        // SAFETY: `out_range` lies in `mem` (asserted) and overlaps no operand read in place
        // (views are host buffers; tile operands overlapping it were copied above).
        let out =
            unsafe { std::slice::from_raw_parts_mut(base.add(out_range.start), out_range.len()) };
        kernel.run_matmul_refs(a, b, out).map_err(|e| e.to_string())
    }
}

/// What every vertex of a compute set calls, when it is one kernel called straight.
#[derive(Clone, Copy)]
enum Uniform {
    /// Element-wise ([`LoadedVertex::plain_kernel`]).
    Elementwise(KernelId),
    /// A reduction ([`LoadedVertex::plain_reduce_kernel`]).
    Reduce(KernelId),
    /// Vertices of several kernels, or some not called straight: each finds its way.
    Mixed,
}

/// A [`Uniform`] kernel's code, ready to call.
#[derive(Clone, Copy)]
enum Straight<'t> {
    Elementwise(PlainElementwise<'t>),
    Reduce(PlainReduce<'t>),
}

impl Uniform {
    /// What `vertices` call.
    fn of(vertices: &[LoadedVertex]) -> Uniform {
        let same = |kernel: fn(&LoadedVertex) -> Option<KernelId>| {
            let mut kernels = vertices.iter().map(kernel);
            let first = kernels.next().flatten();
            first.filter(|&k| kernels.all(|other| other == Some(k)))
        };
        if let Some(k) = same(LoadedVertex::plain_kernel) {
            Uniform::Elementwise(k)
        } else if let Some(k) = same(LoadedVertex::plain_reduce_kernel) {
            Uniform::Reduce(k)
        } else {
            Uniform::Mixed
        }
    }

    /// The code to call, if the kernel allows it.
    fn straight(self, table: &KernelTable) -> Option<Straight<'_>> {
        match self {
            Uniform::Elementwise(k) => table.get(k).plain_elementwise().map(Straight::Elementwise),
            Uniform::Reduce(k) => table.get(k).plain_reduce().map(Straight::Reduce),
            Uniform::Mixed => None,
        }
    }
}

/// The next compute-set run's number: unique in the process, so that codelets shared by
/// several engines never mistake one run's inputs for another's.
static PHASES: AtomicU64 = AtomicU64::new(0);

/// Below this many cycles summed over its tiles (the model's estimate of its work), a
/// compute set runs on one host thread.
const SMALL_CYCLES: u64 = 20_000;

/// A compute set grouped by tile.
pub(crate) struct LoadedComputeSet {
    /// Its name, for errors.
    name: String,
    /// Matrix-product vertices reading an operand in place from a kept window (batched or
    /// not).
    viewed_products: usize,
    /// Codelet inputs read in place from a kept window.
    windowed_inputs: usize,
    /// How the tiles are cut among host threads (weighed by cycles; one range when so
    /// little work that waking host threads costs more than it saves).
    spread: Spread,
    /// Vertices by tile slot (those run in batches excepted).
    tiles: Buckets<LoadedVertex>,
    /// Matrix products the host runs as a few large ones ([`crate::exec::shortcuts::product_batches`]).
    batches: ProductBatches,
    /// By slot: the batched results to copy to that tile.
    scatters: Buckets<Scatter>,
    /// Codelet vertices run together, before the tiles' own
    /// ([`crate::exec::shortcuts::codelet_groups`]).
    groups: Vec<CodeletGroup<LoadedVertex>>,
    /// Each tile's index in `tiles` (`u32::MAX`: no vertices).
    slot: Vec<u32>,
    /// The one kernel every vertex calls straight, if so: looked up once a run instead of
    /// once a vertex. Found at the first run, once the host plan has changed the vertices
    /// for the last time.
    uniform: Option<Uniform>,
    /// How many times the compute set has run (stochastic rounding's step).
    runs: u64,
}

impl LoadedComputeSet {
    /// Compiles the kernels of compute set `cs_index`: each vertex's, in order.
    pub(crate) fn compile_kernels(
        exe: &Executable,
        cs_index: usize,
        kernels: &mut KernelCache,
    ) -> Result<Vec<KernelId>, RuntimeError> {
        let cs = &exe.compute_sets[cs_index];
        // Vertices of one compute set mostly share a kernel, most often one `Arc`: compare
        // before hashing (`Arc`'s equality tries the pointers first).
        let mut last: Option<(&Arc<KernelSpec>, KernelId)> = None;
        let mut ids = Vec::with_capacity(cs.vertices.len());
        for (i, v) in cs.vertices.iter().enumerate() {
            let kernel = match last {
                Some((spec, id)) if *spec == v.kernel => id,
                _ => kernels
                    .compile_with(&v.kernel, exe.floating_point)
                    .map_err(|e| RuntimeError::Kernel {
                        compute_set: cs.name.clone(),
                        vertex: i,
                        message: e.to_string(),
                    })?,
            };
            last = Some((&v.kernel, kernel));
            ids.push(kernel);
        }
        Ok(ids)
    }

    /// Finds the regions of compute set `cs_index` (validated; `kernels` from
    /// [`LoadedComputeSet::compile_kernels`]) in tile memory; its host threads' shares are
    /// weighed by the model's `cost` of each tile.
    pub(crate) fn load(
        exe: &Executable,
        cs_index: usize,
        views: &OperandViews,
        kernels: &[KernelId],
        cost: &ComputeCost,
    ) -> Result<LoadedComputeSet, RuntimeError> {
        let cs = &exe.compute_sets[cs_index];
        let tiles_per_ipu = exe.target.tiles_per_ipu;
        let mut slot = vec![u32::MAX; exe.num_ipus * tiles_per_ipu];
        // Vertices run one by one, with their tiles' slots.
        let mut singles: Vec<(usize, LoadedVertex)> = Vec::new();
        let mut slots = 0;
        let mut viewed_products = 0;
        let mut windowed_inputs = 0;
        // Matrix products with both operands in kept windows, by vertex: batched below.
        let mut viewed: Vec<(LoadedVertex, ViewedProduct)> = Vec::new();
        // The slot of a vertex's tile, given in the order tiles first appear.
        let mut place = |tile: usize| {
            if slot[tile] == u32::MAX {
                slot[tile] = slots;
                slots += 1;
            }
            slot[tile] as usize
        };
        // Vertices come in tile order, and so do the intervals they read: each search
        // starts where the last one in that tensor ended.
        let mut finder = RegionFinder::default();
        let mut bytes = |r: &Region, slot: usize, ipu: usize, tile: usize| {
            let (b, e) = finder
                .bytes(&exe.tensors[r.tensor.0 as usize], (r, slot), ipu, tile)
                .expect("validated: regions lie on the vertex's tile");
            // Tile memories are under 4 GiB (`Engine::load_with` checks).
            (b as u32, e as u32)
        };
        for (i, (v, &kernel)) in cs.vertices.iter().zip(kernels).enumerate() {
            let (elements, runs) = match &*v.kernel {
                KernelSpec::Elementwise(_) | KernelSpec::MatMul(_) => (v.outputs[0].len, 0),
                KernelSpec::Reduce(_) => (v.inputs[0].len, v.outputs[0].len),
            };
            let mut operand_views = [None; 2];
            if !views.is_empty() && matches!(*v.kernel, KernelSpec::MatMul(_)) {
                for (j, slot) in operand_views.iter_mut().enumerate() {
                    *slot = views.get(cs_index as u32, i as u32, j as u8);
                }
            }
            let inputs = v
                .inputs
                .iter()
                .enumerate()
                .map(|(j, r)| match operand_views.get(j) {
                    Some(Some(_)) => (0, 0),
                    _ => bytes(r, j, v.ipu, v.tile),
                })
                .collect();
            let shape = match &*v.kernel {
                // A repeated input is not element for element: such vertices stay apart (a
                // joined one would read the second part's input at the first's repeat).
                KernelSpec::Elementwise(k) if k.repeats_any() => Shape::Other,
                KernelSpec::Elementwise(_) => Shape::Elementwise,
                KernelSpec::Reduce(_) => Shape::Reduce(v.run_length as u32),
                KernelSpec::MatMul(_) => Shape::Other,
            };
            let mut loaded = LoadedVertex::new(
                Work::Kernel(kernel),
                shape,
                inputs,
                (v.outputs.iter().enumerate())
                    .map(|(j, r)| bytes(r, v.inputs.len() + j, v.ipu, v.tile))
                    .collect(),
                // Counts of elements in a tile's memory: under 4 GiB, as above.
                (elements as u32, runs as u32),
            );
            if exe.floating_point.is_active() && matches!(*v.kernel, KernelSpec::Elementwise(_)) {
                loaded.extra_mut().origin = Some(Origin {
                    salt: (cs_index as u64) << 32 | i as u64,
                    ipu: v.ipu,
                    tile: v.tile,
                    outputs: v
                        .outputs
                        .iter()
                        .map(|r| (exe.tensors[r.tensor.0 as usize].name.clone(), r.start))
                        .collect(),
                });
            }
            let s = place(v.ipu * tiles_per_ipu + v.tile);
            if operand_views.iter().any(Option::is_some) {
                viewed_products += 1;
                loaded.extra_mut().views = Some(operand_views);
            }
            match (&*v.kernel, operand_views) {
                (KernelSpec::MatMul(mm), [Some(a), Some(b)]) => {
                    let product = ViewedProduct {
                        slot: s,
                        m: mm.m,
                        k: mm.k,
                        n: mm.n,
                        a,
                        b,
                        out: loaded.outputs[0].0 as usize,
                        dst: (v.outputs[0].tensor, v.outputs[0].start),
                    };
                    viewed.push((loaded, product));
                }
                _ => singles.push((s, loaded)),
            }
        }
        for (k, v) in cs.codelet_vertices.iter().enumerate() {
            let vi = (cs.vertices.len() + k) as u32;
            let windowed: Vec<WindowInput> = (v.inputs.iter().enumerate())
                .filter_map(|(j, r)| {
                    let view = views.get(cs_index as u32, vi, j as u8)?;
                    Some(WindowInput {
                        input: j,
                        rearrange: view.rearrange,
                        source: view.source,
                        at: view.at,
                        len: r.len,
                    })
                })
                .collect();
            let mut loaded = LoadedVertex::new(
                Work::Codelet(v.codelet.0),
                Shape::Other,
                (v.inputs.iter().enumerate())
                    .map(|(j, r)| match windowed.iter().any(|w| w.input == j) {
                        true => (0, 0),
                        false => bytes(r, j, v.ipu, v.tile),
                    })
                    .collect(),
                (v.outputs.iter().enumerate())
                    .map(|(j, r)| bytes(r, v.inputs.len() + j, v.ipu, v.tile))
                    .collect(),
                (0, 0),
            );
            if !windowed.is_empty() {
                windowed_inputs += windowed.len();
                loaded.extra_mut().windowed = windowed.into_boxed_slice();
            }
            let s = place(v.ipu * tiles_per_ipu + v.tile);
            singles.push((s, loaded));
        }
        let products: Vec<ViewedProduct> = viewed.iter().map(|(_, p)| *p).collect();
        let (batches, placed) = ProductBatches::plan(&products);
        let mut scatters = Vec::new();
        for ((loaded, p), placed) in viewed.into_iter().zip(placed) {
            match placed {
                Some(s) => scatters.push((p.slot, s)),
                None => singles.push((p.slot, loaded)),
            }
        }
        let slots = slots as usize;
        let mut weights = vec![0u64; slot.len()];
        for &(t, cycles) in &cost.tile_cycles {
            weights[t] = cycles;
        }
        let total: u64 = cost.tile_cycles.iter().map(|&(_, c)| c).sum();
        Ok(LoadedComputeSet {
            name: cs.name.clone(),
            viewed_products,
            windowed_inputs,
            spread: Spread::new(&weights, &slot, total < SMALL_CYCLES),
            tiles: {
                let mut tiles = Buckets::new(slots, singles);
                tiles.merge_neighbours(LoadedVertex::joined);
                tiles
            },
            batches,
            scatters: Buckets::new(slots, scatters),
            groups: Vec::new(),
            slot,
            uniform: None,
            runs: 0,
        })
    }

    /// How many matrix-product vertices read an operand in place from a kept window.
    pub(crate) fn viewed_products(&self) -> usize {
        self.viewed_products
    }

    /// How many codelet inputs are read in place from a kept window.
    pub(crate) fn windowed_inputs(&self) -> usize {
        self.windowed_inputs
    }

    /// The batched matrix products and every vertex result they copy to a tile.
    pub(crate) fn batched(&self) -> (&ProductBatches, &[Scatter]) {
        (&self.batches, self.scatters.all())
    }

    /// Places the batches in the scratch in the order `first` names them (the others after).
    pub(crate) fn relayout_batches(&mut self, first: &[u32]) {
        self.batches.relayout(first);
    }

    /// Runs the codelet vertices `codelets` lets share work as groups
    /// ([`codelet_groups::plan`]), apart from their tiles' other vertices.
    pub(crate) fn group_codelets(&mut self, codelets: &[CodeletRef]) {
        self.uniform = None;
        let mut tile_of = vec![0; self.tiles.slots()];
        for (t, &s) in self.slot.iter().enumerate() {
            if s != u32::MAX {
                tile_of[s as usize] = t;
            }
        }
        let vertices = (0..self.tiles.slots())
            .flat_map(|s| self.tiles.get(s).iter().map(move |v| (s, v)))
            .map(|(s, v)| (tile_of[s], v));
        let key =
            |v: &LoadedVertex| (v.groupable_codelet()).and_then(|c| codelets[c as usize].0.group());
        let (groups, grouped) = codelet_groups::plan(vertices, key);
        if groups.is_empty() {
            return;
        }
        self.tiles
            .retain(|v| key(v).is_none_or(|key| !grouped.contains(&key)));
        self.groups = groups;
    }

    /// How many codelet vertices run in groups.
    pub(crate) fn grouped_codelets(&self) -> usize {
        self.groups.iter().map(CodeletGroup::len).sum()
    }

    /// Stops copying batched results into `tensors` to the tiles: they are read from the
    /// batch scratch instead ([`crate::exec::shortcuts::kept_results`]).
    pub(crate) fn keep_results(&mut self, tensors: &FxHashSet<TensorId>) {
        self.uniform = None;
        self.scatters.retain(|s| !tensors.contains(&s.dst.0));
    }

    /// The tile (`ipu * tiles_per_ipu + tile`) and tile-memory input byte ranges of every
    /// vertex run one by one: `(tile, vertex, ranges)`, vertex being its index for
    /// [`LoadedComputeSet::read_from_scratch`].
    pub(crate) fn input_ranges(&self) -> Vec<VertexInputs<'_>> {
        let mut tile_of = vec![0; self.slot.iter().filter(|&&s| s != u32::MAX).count()];
        for (t, &s) in self.slot.iter().enumerate() {
            if s != u32::MAX {
                tile_of[s as usize] = t;
            }
        }
        let mut out = Vec::new();
        let mut index = 0;
        for (s, &tile) in tile_of.iter().enumerate() {
            for v in self.tiles.get(s) {
                if v.views().is_none() && matches!(v.shape, Shape::Elementwise | Shape::Reduce(_)) {
                    out.push((tile, index, v.inputs.as_slice()));
                }
                index += 1;
            }
        }
        out
    }

    /// Makes vertex `vertex` (as [`LoadedComputeSet::input_ranges`] numbers it) read these
    /// inputs from batch scratches instead of tile memory.
    pub(crate) fn read_from_scratch(&mut self, vertex: usize, inputs: Vec<ScratchInput>) {
        self.uniform = None;
        let v = &mut self.tiles.all_mut()[vertex];
        for s in &inputs {
            v.inputs[s.input] = (0, 0);
        }
        v.overlaps = overlapping(&v.inputs, &v.outputs);
        v.extra_mut().scratch.extend(inputs);
    }

    /// Bytes one run of the compute set reads and writes on the host: every vertex's (see
    /// [`LoadedVertex::host_bytes`]), grouped codelets' included, and the batched
    /// products' operands, results and the results' copies to their tiles.
    pub(crate) fn host_bytes(&self, table: &KernelTable) -> u64 {
        let vertices = (self.tiles.all().iter())
            .chain(self.groups.iter().flat_map(CodeletGroup::vertices))
            .map(|v| v.host_bytes(table))
            .sum::<u64>();
        let scattered: usize = self.scatters.all().iter().map(Scatter::elements).sum();
        vertices + self.batches.host_bytes() + 4 * scattered as u64
    }

    /// One superstep's compute phase: every tile runs its vertices, tiles in parallel on
    /// `pool`.
    pub(crate) fn run<'r>(
        &mut self,
        memory: &mut HostTiles,
        table: &KernelTable,
        codelets: &[CodeletRef],
        windows: &[Vec<Vec<f32>>],
        results: &(dyn Fn(usize) -> &'r [u8] + Sync),
        pool: &rayon::ThreadPool,
    ) -> Result<(), RuntimeError> {
        if !self.batches.is_empty() {
            self.batches.compute(windows, self.spread.is_inline(), pool);
        }
        let step = self.runs;
        self.runs += 1;
        let phase = PHASES.fetch_add(1, Ordering::Relaxed);
        if !self.groups.is_empty() {
            let inline = self.spread.is_inline();
            let member = |v: &LoadedVertex, mem| v.member(mem, codelets, windows, phase);
            codelet_groups::run(&self.groups, memory, inline, pool, member)
                .map_err(|e| RuntimeError::Run(format!("compute set {}: {e}", self.name)))?;
        }
        let tiles = &self.tiles;
        let uniform = *self.uniform.get_or_insert_with(|| Uniform::of(tiles.all()));
        let straight = uniform.straight(table);
        let run_tile = |mem: &mut [u8], s: usize| -> Result<(), RuntimeError> {
            match straight {
                Some(Straight::Elementwise(plain)) => {
                    for v in self.tiles.get(s) {
                        v.run_plain(plain, mem, results);
                    }
                }
                Some(Straight::Reduce(plain)) => {
                    for v in self.tiles.get(s) {
                        v.run_reduce(plain, mem);
                    }
                }
                None => {
                    for v in self.tiles.get(s) {
                        v.run(mem, table, codelets, windows, results, (step, phase))
                            .map_err(|e| {
                                RuntimeError::Run(format!("compute set {}: {e}", self.name))
                            })?;
                    }
                }
            }
            for scatter in self.scatters.get(s) {
                self.batches.scatter(scatter, mem);
            }
            Ok(())
        };
        // A later tile's regions are asked for while this tile's vertices run (see
        // `prefetch`): its first reads would otherwise each wait on memory.
        let ahead = |mem: &[u8], s: usize| {
            for v in self.tiles.get(s) {
                for &r in v.inputs.iter().chain(&v.outputs) {
                    prefetch::lines(mem, range(r));
                }
                // Read before anything else the vertex does: a miss each otherwise.
                if let Some(extra) = &v.extra {
                    prefetch::object::<Extra>(extra);
                }
            }
        };
        for_each_active_ahead(memory, &self.slot, &self.spread, pool, ahead, run_tile)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vertex(kernel: u32, shape: Shape, inputs: &[Span], output: Span) -> LoadedVertex {
        let elements = (output.1 - output.0) / 4;
        LoadedVertex::new(
            Work::Kernel(KernelId(kernel)),
            shape,
            Inputs::from_slice(inputs),
            Outputs::from_slice(&[output]),
            (elements, 0),
        )
    }

    #[test]
    fn neighbouring_workers_shares_join_into_one_call() {
        let a = vertex(0, Shape::Elementwise, &[(0, 16), (100, 116)], (200, 216));
        let b = vertex(0, Shape::Elementwise, &[(16, 24), (116, 124)], (216, 224));
        let j = a.joined(&b).expect("every region continues");
        assert_eq!(j.inputs.as_slice(), [(0, 24), (100, 124)]);
        assert_eq!(j.outputs.as_slice(), [(200, 224)]);
        assert_eq!(j.elements, 6);
    }

    #[test]
    fn vertices_that_do_not_continue_each_other_stay_apart() {
        let a = vertex(0, Shape::Elementwise, &[(0, 16)], (200, 216));
        // A gap in the input, another kernel, a product, an output running into an input.
        let gap = vertex(0, Shape::Elementwise, &[(20, 24)], (216, 220));
        let other = vertex(1, Shape::Elementwise, &[(16, 24)], (216, 224));
        let product = vertex(0, Shape::Other, &[(16, 24)], (216, 224));
        assert!(a.joined(&gap).is_none());
        assert!(a.joined(&other).is_none());
        assert!(
            vertex(0, Shape::Other, &[(0, 16)], (200, 216))
                .joined(&product)
                .is_none()
        );
        let chained_a = vertex(0, Shape::Elementwise, &[(0, 16)], (16, 32));
        let chained_b = vertex(0, Shape::Elementwise, &[(16, 32)], (32, 48));
        assert!(
            chained_a.joined(&chained_b).is_none(),
            "the joined output would overlap its input"
        );
        let run4 = vertex(0, Shape::Reduce(4), &[(0, 16)], (200, 204));
        assert!(
            run4.joined(&vertex(0, Shape::Reduce(2), &[(16, 24)], (204, 208)))
                .is_none()
        );
    }

    #[test]
    fn a_compute_set_calls_straight_only_one_kernel_every_vertex_may_call_so() {
        let ew = |k| vertex(k, Shape::Elementwise, &[(0, 16)], (16, 32));
        let reduce = |k| vertex(k, Shape::Reduce(4), &[(0, 16)], (16, 20));
        let kinds = |vs: &[LoadedVertex]| match Uniform::of(vs) {
            Uniform::Elementwise(k) => ("elementwise", k.0),
            Uniform::Reduce(k) => ("reduce", k.0),
            Uniform::Mixed => ("mixed", 0),
        };
        assert_eq!(kinds(&[ew(3), ew(3)]), ("elementwise", 3));
        assert_eq!(kinds(&[reduce(2), reduce(2)]), ("reduce", 2));
        assert_eq!(kinds(&[ew(3), ew(4)]), ("mixed", 0));
        assert_eq!(kinds(&[reduce(2), ew(2)]), ("mixed", 0));
        assert_eq!(kinds(&[]), ("mixed", 0));
        let reading_scratch = |mut v: LoadedVertex| {
            v.extra_mut().scratch.push(ScratchInput {
                input: 0,
                cs: 1,
                bytes: (0, 16),
            });
            v
        };
        // A reduction reading a scratch, or a vertex writing over its input, finds its own
        // way.
        assert_eq!(
            kinds(&[reduce(2), reading_scratch(reduce(2))]),
            ("mixed", 0)
        );
        let in_place = vertex(3, Shape::Elementwise, &[(0, 16)], (0, 16));
        assert!(in_place.overlaps);
        assert_eq!(kinds(&[ew(3), in_place]), ("mixed", 0));
        // An element-wise vertex may read a scratch straight; a codelet never runs so.
        assert_eq!(kinds(&[ew(3), reading_scratch(ew(3))]), ("elementwise", 3));
        let mut codelet = ew(3);
        codelet.work = Work::Codelet(3);
        assert_eq!(kinds(&[ew(3), codelet]), ("mixed", 0));
    }

    #[test]
    fn a_loaded_vertex_stays_small() {
        // A run walks every vertex of every compute set (hundreds of thousands): the rare
        // parts belong in `Extra`.
        assert!(std::mem::size_of::<LoadedVertex>() <= 96);
    }
}
