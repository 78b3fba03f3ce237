//! Load-time checks: an executable that passes them cannot make the engine touch memory it
//! should not. Mappings cover every element once, tensors fit their tiles, vertices touch
//! only their own tile's memory and do not overlap their writes, streams match their
//! tensors, and no program step reads a tensor nothing has written.

use crate::error::RuntimeError;
use crate::model::layout::{RegionFinder, largest_on_tile, tile_extents};
use crate::program::executable::{
    CodeletVertex, Direction, Executable, Program, Rearrange, Region, Run, RunSource, Tensor,
    TensorId, Vertex,
};
use crate::program::runs::RunBlock;
use codegen::{DType, KernelSpec};
use rayon::prelude::*;
use smallvec::SmallVec;

fn invalid(m: String) -> RuntimeError {
    RuntimeError::InvalidExecutable(m)
}

fn check_tensors(exe: &Executable) -> Result<(), RuntimeError> {
    let target = &exe.target;
    check_each(&exe.tensors, |t| {
        let mut intervals = std::borrow::Cow::Borrowed(&t.mapping);
        if !intervals.is_sorted_by_key(|iv| iv.start) {
            intervals.to_mut().sort_by_key(|iv| iv.start);
        }
        let mut next = 0;
        for iv in intervals.iter() {
            if iv.ipu >= exe.num_ipus || iv.tile >= target.tiles_per_ipu {
                return Err(invalid(format!(
                    "tensor {} is mapped to IPU {} tile {}, outside {} IPUs of {} tiles",
                    t.name, iv.ipu, iv.tile, exe.num_ipus, target.tiles_per_ipu
                )));
            }
            if iv.start != next {
                return Err(invalid(format!(
                    "tensor {}: elements {}..{} are mapped {} (every element exactly once)",
                    t.name,
                    next.min(iv.start),
                    next.max(iv.start),
                    if iv.start > next { "nowhere" } else { "twice" }
                )));
            }
            next = iv.start + iv.len;
        }
        if next != t.elements {
            return Err(invalid(format!(
                "tensor {} maps {next} of its {} elements",
                t.name, t.elements
            )));
        }
        if let Some(init) = &t.init
            && init.len() != t.elements * t.dtype.size()
        {
            return Err(invalid(format!(
                "tensor {} holds {} bytes but its initial contents are {}",
                t.name,
                t.elements * t.dtype.size(),
                init.len()
            )));
        }
        Ok(())
    })?;
    for (t, needed) in tile_extents(exe).into_iter().enumerate() {
        let (ipu, tile) = (t / target.tiles_per_ipu, t % target.tiles_per_ipu);
        if needed > target.bytes_per_tile {
            return Err(RuntimeError::OutOfMemory {
                ipu,
                tile,
                needed,
                available: target.bytes_per_tile,
                largest: largest_on_tile(exe, ipu, tile, 3),
                code: None,
            });
        }
    }
    Ok(())
}

fn tensor<'e>(
    exe: &'e Executable,
    id: TensorId,
    context: &(impl std::fmt::Display + ?Sized),
) -> Result<&'e Tensor, RuntimeError> {
    exe.tensors.get(id.0 as usize).ok_or_else(|| {
        invalid(format!(
            "{context} refers to tensor {} which does not exist",
            id.0
        ))
    })
}

/// Names a vertex in errors; formatted only when there is one (loads check millions).
struct VertexAt<'a> {
    cs: &'a str,
    kind: &'static str,
    index: usize,
    ipu: usize,
    tile: usize,
}

impl std::fmt::Display for VertexAt<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "compute set {}, {} {} (IPU {} tile {})",
            self.cs, self.kind, self.index, self.ipu, self.tile
        )
    }
}

/// The element type of region `k` of a vertex running `kernel`, which takes `ins` inputs
/// (its outputs numbered after them).
fn region_type(kernel: &KernelSpec, ins: usize, k: usize) -> DType {
    match kernel {
        KernelSpec::Elementwise(e) => match e.inputs.get(k) {
            Some(&t) => t,
            None => e.outputs[k - ins].0,
        },
        KernelSpec::Reduce(r) if k < ins => r.input,
        KernelSpec::Reduce(r) => r.partial_type(),
        KernelSpec::MatMul(m) if k < ins => m.input,
        KernelSpec::MatMul(m) => m.partials,
    }
}

/// Checks a vertex's regions against its kernel; adds the byte ranges it writes to `writes`.
fn check_vertex(
    exe: &Executable,
    (cs, index): (&str, usize),
    v: &Vertex,
    regions: &mut RegionFinder,
    writes: &mut Vec<TileWrite>,
) -> Result<(), RuntimeError> {
    let here = VertexAt {
        cs,
        kind: "vertex",
        index,
        ipu: v.ipu,
        tile: v.tile,
    };
    if v.ipu >= exe.num_ipus || v.tile >= exe.target.tiles_per_ipu {
        return Err(invalid(format!("{here} is outside the system")));
    }
    if v.grain > 0 && !matches!(&*v.kernel, KernelSpec::Elementwise(_)) {
        return Err(invalid(format!(
            "{here}: a multi-vertex (grain {}) runs an element-wise kernel only",
            v.grain
        )));
    }
    // How many regions the kernel takes, and whether the vertex's lengths fit it.
    let (ins, outs, lengths_ok) = match &*v.kernel {
        KernelSpec::Elementwise(k) => {
            // Every region as long as the output, but a repeated input's: one element a
            // repeat.
            let n = v.outputs.first().map_or(0, |r| r.len);
            let same = v.outputs.iter().all(|r| r.len == n)
                && (v.inputs.iter().enumerate()).all(|(i, r)| r.len == k.input_len(i, n));
            (k.inputs.len(), k.outputs.len(), same)
        }
        KernelSpec::Reduce(_) => {
            let ok = match (v.inputs.first(), v.outputs.first()) {
                (Some(i), Some(o)) => i.len == v.run_length * o.len,
                _ => false,
            };
            (1, 1, ok)
        }
        KernelSpec::MatMul(k) => {
            let lens = [k.m * k.k, k.k * k.n, k.m * k.n];
            let ok = v.inputs.len() == 2
                && v.outputs.len() == 1
                && v.inputs[0].len == lens[0]
                && v.inputs[1].len == lens[1]
                && v.outputs[0].len == lens[2];
            (2, 1, ok)
        }
    };
    if v.inputs.len() != ins || v.outputs.len() != outs {
        return Err(invalid(format!(
            "{here}: the kernel takes {ins} inputs and {outs} outputs, the vertex connects {} and {}",
            v.inputs.len(),
            v.outputs.len()
        )));
    }
    if !lengths_ok {
        return Err(invalid(format!(
            "{here}: region lengths do not fit the kernel"
        )));
    }
    for (k, r) in v.inputs.iter().chain(&v.outputs).enumerate() {
        let t = region_type(&v.kernel, ins, k);
        let tensor = tensor(exe, r.tensor, &here)?;
        if tensor.dtype != t {
            return Err(invalid(format!(
                "{here}: region {k} is tensor {} of {:?} but the kernel expects {t:?}",
                tensor.name, tensor.dtype
            )));
        }
        if r.start + r.len > tensor.elements {
            return Err(invalid(format!(
                "{here}: region {k} ({}..{}) is outside tensor {} of {} elements",
                r.start,
                r.start + r.len,
                tensor.name,
                tensor.elements
            )));
        }
        let Some((begin, end)) = regions.bytes(tensor, (r, k), v.ipu, v.tile) else {
            return Err(invalid(format!(
                "{here}: region {k} (elements {}..{} of tensor {}) is not in this tile's memory; a vertex reads and writes only its own tile",
                r.start,
                r.start + r.len,
                tensor.name
            )));
        };
        if k >= v.inputs.len() {
            writes.push(TileWrite {
                tile: v.ipu * exe.target.tiles_per_ipu + v.tile,
                begin,
                end,
                vertex: index,
            });
        }
    }
    Ok(())
}

/// Checks a codelet vertex's regions; adds the byte ranges it writes to `writes`, as vertex
/// `vertex` of the compute set.
fn check_codelet_vertex(
    exe: &Executable,
    (cs, index, vertex): (&str, usize, usize),
    v: &CodeletVertex,
    regions: &mut RegionFinder,
    writes: &mut Vec<TileWrite>,
) -> Result<(), RuntimeError> {
    let here = VertexAt {
        cs,
        kind: "codelet vertex",
        index,
        ipu: v.ipu,
        tile: v.tile,
    };
    if v.ipu >= exe.num_ipus || v.tile >= exe.target.tiles_per_ipu {
        return Err(invalid(format!("{here} is outside the system")));
    }
    if v.codelet.0 as usize >= exe.codelets.len() {
        return Err(invalid(format!(
            "{here} runs codelet {} but the executable has {} (codelets do not survive serialisation)",
            v.codelet.0,
            exe.codelets.len()
        )));
    }
    for (k, r) in v.inputs.iter().chain(&v.outputs).enumerate() {
        let t = tensor(exe, r.tensor, &here)?;
        if r.start + r.len > t.elements {
            return Err(invalid(format!(
                "{here}: region {k} is outside tensor {}",
                t.name
            )));
        }
        let (begin, end) = regions.bytes(t, (r, k), v.ipu, v.tile).ok_or_else(|| {
            invalid(format!(
                "{here}: region {k} (elements {}..{} of tensor {}) is not in this tile's memory",
                r.start,
                r.start + r.len,
                t.name
            ))
        })?;
        if k >= v.inputs.len() {
            writes.push(TileWrite {
                tile: v.ipu * exe.target.tiles_per_ipu + v.tile,
                begin,
                end,
                vertex,
            });
        }
    }
    Ok(())
}

/// Checks a rearrangement's runs stay inside their tensors and types agree.
fn check_rearranges(exe: &Executable) -> Result<(), RuntimeError> {
    // The marks of `written_twice`, one buffer per host thread's share.
    check_each_with(&exe.rearranges, Vec::new, |marks, r| {
        let here = format!("rearrangement {}", r.name);
        let d = tensor(exe, r.dst, &here)?;
        for s in &r.sources {
            let t = tensor(exe, *s, &here)?;
            if t.dtype != d.dtype {
                return Err(invalid(format!(
                    "{here}: source {} is {:?}, the destination {} is {:?}",
                    t.name, t.dtype, d.name, d.dtype
                )));
            }
        }
        // One quick pass that only says whether every run is within bounds (the common
        // case, and millions of runs on a large program); the checks below name the first
        // run that is not.
        let source_elements: SmallVec<[usize; 4]> = r
            .sources
            .iter()
            .map(|s| exe.tensors[s.0 as usize].elements)
            .collect();
        let fill_fits = r.fill.len() == d.dtype.size();
        let (mut covered, mut in_order, mut next) = (0usize, true, 0usize);
        let mut fits = true;
        for b in r.runs.blocks().iter().filter(|b| b.count > 0) {
            let len = b.first.len;
            if len == 0 && b.count > 1 {
                // Never written so (`Runs::push`); a file that has one would only make work.
                return Err(invalid(format!(
                    "{here}: a block of {} empty runs",
                    b.count
                )));
            }
            for (dst_start, src_start) in block_ends(b) {
                fits &= writes_within(dst_start, len, d.elements);
                fits &= match b.first.source {
                    RunSource::Tensor { k, stride, .. } => {
                        source_elements.get(k as usize).is_some_and(|&n| {
                            read_span(src_start, stride, len)
                                .is_none_or(|(lo, hi)| lo >= 0 && hi < n as i128)
                        })
                    }
                    RunSource::Fill => fill_fits,
                };
            }
            // In order: each run starts where the one before ended.
            in_order &= b.first.dst_start == next && (b.count == 1 || b.dst_step == len as isize);
            next = b.first.dst_start.wrapping_add(b.count.wrapping_mul(len));
            covered = covered.saturating_add(b.count.saturating_mul(len));
        }
        if !fits {
            return Err(first_bad_run(exe, r, &here, d));
        }
        if covered != d.elements {
            return Err(invalid(format!(
                "{here}: the runs write {covered} elements of {} which has {}",
                d.name, d.elements
            )));
        }
        if !in_order && let Some(twice) = written_twice(r.runs.iter(), d.elements, marks) {
            return Err(invalid(format!(
                "{here}: element {twice} of {} is written by two runs (and so another by none)",
                d.name
            )));
        }
        Ok(())
    })?;
    Ok(())
}

/// The error for the first run of `r` (to destination `d`) that writes or reads out of
/// bounds, or reads a source or fill it does not have.
fn first_bad_run(exe: &Executable, r: &Rearrange, here: &str, d: &Tensor) -> RuntimeError {
    for b in r.runs.blocks().iter().filter(|b| b.count > 0) {
        let len = b.first.len;
        for (dst_start, src_start) in block_ends(b) {
            if !writes_within(dst_start, len, d.elements) {
                return invalid(format!(
                    "{here}: a run writes elements {dst_start}..{} of {} which has {}",
                    dst_start + len as i128,
                    d.name,
                    d.elements
                ));
            }
            let RunSource::Tensor { k, stride, .. } = b.first.source else {
                continue;
            };
            let Some(s) = r.sources.get(k as usize) else {
                return invalid(format!(
                    "{here}: a run reads source {k} of {}",
                    r.sources.len()
                ));
            };
            let t = &exe.tensors[s.0 as usize];
            let Some((lo, hi)) = read_span(src_start, stride, len) else {
                continue;
            };
            if lo < 0 || hi >= t.elements as i128 {
                return invalid(format!(
                    "{here}: a run reads elements {lo}..{} of {} which has {}",
                    hi + 1,
                    t.name,
                    t.elements
                ));
            }
        }
        if b.first.source == RunSource::Fill && r.fill.len() != d.dtype.size() {
            return invalid(format!(
                "{here}: the fill value has {} bytes, an element of {} has {}",
                r.fill.len(),
                d.name,
                d.dtype.size()
            ));
        }
    }
    // Not reached: the quick pass checks what the loop above does.
    invalid(format!(
        "{here}: a run does not fit its destination or sources"
    ))
}

/// A block's first and last runs' starts `(destination, source)`, computed exactly (a
/// malformed block's may lie far outside every tensor); the source start is 0 for a fill.
/// The starts step evenly, so the block stays within bounds when these two do.
fn block_ends(b: &RunBlock) -> [(i128, i128); 2] {
    let src = match b.first.source {
        RunSource::Tensor { start, .. } => start as i128,
        RunSource::Fill => 0,
    };
    let dst = b.first.dst_start as i128;
    let n = b.count.saturating_sub(1) as i128;
    [
        (dst, src),
        (dst + n * b.dst_step as i128, src + n * b.src_step as i128),
    ]
}

/// Whether a run of `len` from `dst_start` writes only elements of a destination of
/// `elements`.
fn writes_within(dst_start: i128, len: usize, elements: usize) -> bool {
    dst_start >= 0 && dst_start + len as i128 <= elements as i128
}

/// The lowest and highest source element a run of `len` from `start` every `stride` reads
/// (its first and last: the stride is fixed); `None` when it reads nothing.
fn read_span(start: i128, stride: isize, len: usize) -> Option<(i128, i128)> {
    (len > 0).then(|| {
        let last = start + (len as i128 - 1) * stride as i128;
        (start.min(last), start.max(last))
    })
}

/// The first destination element that two of `runs` (each within `elements`) write.
/// `marks` is a bit per element, all clear, and left so: each call clears what it set
/// rather than allocating its own (a fresh megabyte or more for each large rearrangement,
/// page faults to fill, and unmapping it interrupted the other cores to flush their TLBs).
fn written_twice(
    runs: impl Iterator<Item = Run>,
    elements: usize,
    marks: &mut Vec<u64>,
) -> Option<usize> {
    let words = elements.div_ceil(64);
    if marks.len() < words {
        marks.resize(words, 0);
    }
    // The words set, to clear.
    let (mut low, mut high) = (usize::MAX, 0);
    let mut twice = None;
    'runs: for run in runs {
        let (mut at, end) = (run.dst_start, run.dst_start + run.len);
        if at < end {
            low = low.min(at / 64);
            high = high.max((end - 1) / 64 + 1);
        }
        while at < end {
            let (word, bit) = (at / 64, at % 64);
            let upto = (end - word * 64).min(64);
            let mask = (u64::MAX >> (64 - (upto - bit))) << bit;
            let already = marks[word] & mask;
            if already != 0 {
                twice = Some(word * 64 + already.trailing_zeros() as usize);
                break 'runs;
            }
            marks[word] |= mask;
            at = word * 64 + upto;
        }
    }
    if low < high {
        marks[low..high].fill(0);
    }
    twice
}

/// Bytes `begin..end` of tile `tile`'s memory (`ipu * tiles_per_ipu + tile`) written by
/// vertex `vertex` of a compute set (codelet vertices numbered after the others).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct TileWrite {
    tile: usize,
    begin: u64,
    end: u64,
    vertex: usize,
}

/// Runs `check` on every item in parallel and returns what each found, or the first error
/// in item order (the same error however the threads ran).
fn check_each<T: Sync, R: Send>(
    items: &[T],
    check: impl Fn(&T) -> Result<R, RuntimeError> + Sync + Send,
) -> Result<Vec<R>, RuntimeError> {
    check_each_with(items, || (), |(), item| check(item))
}

/// [`check_each`] with a scratch value `init` makes for each host thread's share of the
/// items, which every check of that share is given.
fn check_each_with<T: Sync, R: Send, S>(
    items: &[T],
    init: impl Fn() -> S + Sync + Send,
    check: impl Fn(&mut S, &T) -> Result<R, RuntimeError> + Sync + Send,
) -> Result<Vec<R>, RuntimeError> {
    let results: Vec<Result<R, RuntimeError>> = items.par_iter().map_init(init, check).collect();
    results.into_iter().collect()
}

/// The tensors a compute set's vertices read and write, each once: what the dataflow walk
/// needs of it, gathered while its vertices are checked.
struct ComputeSetTensors {
    /// `(vertex, tensor)`: each tensor read, with the first vertex reading it, in vertex
    /// order (so the walk reports the same first unwritten read as a walk over vertices).
    reads: Vec<(usize, TensorId)>,
    writes: Vec<TensorId>,
}

/// Gathers a [`ComputeSetTensors`] vertex by vertex.
#[derive(Default)]
struct TensorUses {
    reads: Distinct,
    first_reader: Vec<(usize, TensorId)>,
    writes: Distinct,
}

impl TensorUses {
    /// Vertex `i` reads `inputs` and writes `outputs`.
    fn add(&mut self, i: usize, inputs: &[Region], outputs: &[Region]) {
        for r in inputs {
            if self.reads.add(r.tensor) {
                self.first_reader.push((i, r.tensor));
            }
        }
        for r in outputs {
            self.writes.add(r.tensor);
        }
    }

    fn done(self) -> ComputeSetTensors {
        ComputeSetTensors {
            reads: self.first_reader,
            writes: self.writes.seen,
        }
    }
}

/// Tensors seen so far, each once, in the order first seen. A compute set touches a few
/// tensors from many vertices: a short list searched from the latest hit, and a set once
/// the list grows long.
#[derive(Default)]
struct Distinct {
    seen: Vec<TensorId>,
    last: usize,
    set: std::collections::HashSet<TensorId>,
}

impl Distinct {
    /// Whether `t` is new.
    fn add(&mut self, t: TensorId) -> bool {
        if self.seen.get(self.last) == Some(&t) {
            return false;
        }
        let known = if self.seen.len() <= 16 {
            self.seen
                .iter()
                .position(|&s| s == t)
                .inspect(|&i| self.last = i)
        } else {
            if self.set.is_empty() {
                self.set.extend(self.seen.iter().copied());
            }
            self.set.contains(&t).then_some(self.last)
        };
        if known.is_some() {
            return false;
        }
        self.last = self.seen.len();
        self.seen.push(t);
        if !self.set.is_empty() {
            self.set.insert(t);
        }
        true
    }
}

fn check_compute_sets(exe: &Executable) -> Result<Vec<ComputeSetTensors>, RuntimeError> {
    check_each(&exe.compute_sets, |cs| {
        let mut writes = Vec::new();
        let mut regions = RegionFinder::default();
        let mut uses = TensorUses::default();
        for (i, v) in cs.vertices.iter().enumerate() {
            check_vertex(exe, (&cs.name, i), v, &mut regions, &mut writes)?;
            uses.add(i, &v.inputs, &v.outputs);
        }
        let first = cs.vertices.len();
        for (i, v) in cs.codelet_vertices.iter().enumerate() {
            let at = (cs.name.as_str(), i, first + i);
            check_codelet_vertex(exe, at, v, &mut regions, &mut writes)?;
            uses.add(first + i, &v.inputs, &v.outputs);
        }
        let tiles = exe.num_ipus * exe.target.tiles_per_ipu;
        let writes = in_tile_and_memory_order(writes, tiles);
        for w in writes.windows(2) {
            if w[0].tile == w[1].tile && w[1].begin < w[0].end && w[0].vertex != w[1].vertex {
                let tiles = exe.target.tiles_per_ipu;
                return Err(invalid(format!(
                    "compute set {}: vertices {} and {} write overlapping memory on IPU {} tile {}",
                    cs.name,
                    w[0].vertex,
                    w[1].vertex,
                    w[0].tile / tiles,
                    w[0].tile % tiles
                )));
            }
        }
        Ok(uses.done())
    })
}

/// `writes` (on tiles `0..tiles`) sorted: by tile in one counting pass, then each tile's
/// few by address (a compute set's vertices need not come in tile order, and a sort of
/// the whole list costs more than the rest of its checks).
fn in_tile_and_memory_order(writes: Vec<TileWrite>, tiles: usize) -> Vec<TileWrite> {
    // Vertices usually come in tile and memory order: then there is nothing to sort.
    if writes.is_sorted() {
        return writes;
    }
    let mut starts = vec![0usize; tiles + 1];
    for w in &writes {
        starts[w.tile + 1] += 1;
    }
    for t in 0..tiles {
        starts[t + 1] += starts[t];
    }
    let mut next = starts.clone();
    let mut sorted = writes.clone();
    for w in writes {
        sorted[next[w.tile]] = w;
        next[w.tile] += 1;
    }
    for t in 0..tiles {
        sorted[starts[t]..starts[t + 1]].sort_unstable();
    }
    sorted
}

/// The tensors written so far, one bit per tensor (the walk asks once per vertex input:
/// millions of times on a large program).
#[derive(Clone)]
struct Written(Vec<u64>);

impl Written {
    fn none(tensors: usize) -> Written {
        Written(vec![0; tensors.div_ceil(64)])
    }

    fn contains(&self, t: TensorId) -> bool {
        let i = t.0 as usize;
        self.0.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    /// Marks `t` written; `t` is a tensor of the executable (checked by the caller).
    fn insert(&mut self, t: TensorId) {
        let i = t.0 as usize;
        if let Some(w) = self.0.get_mut(i / 64) {
            *w |= 1 << (i % 64);
        }
    }

    /// Keeps only what `other` has written too.
    fn intersect(&mut self, other: &Written) {
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a &= b;
        }
    }
}

/// Tracks which tensors have been written while walking the program in order.
struct Dataflow<'e> {
    exe: &'e Executable,
    /// By compute set.
    compute_sets: Vec<ComputeSetTensors>,
    calls: usize,
}

impl Dataflow<'_> {
    fn read(
        &self,
        written: &Written,
        t: TensorId,
        context: impl FnOnce() -> String,
    ) -> Result<(), RuntimeError> {
        if written.contains(t) {
            Ok(())
        } else {
            Err(RuntimeError::UninitialisedRead {
                tensor: self.exe.tensors[t.0 as usize].name.clone(),
                context: context(),
            })
        }
    }

    fn scalar(&self, t: TensorId, dtype: DType, what: &str) -> Result<(), RuntimeError> {
        let tensor = tensor(self.exe, t, what)?;
        if tensor.dtype != dtype || tensor.elements != 1 {
            return Err(invalid(format!(
                "{what} must be a one-element {dtype:?} tensor, {} is {} x {:?}",
                tensor.name, tensor.elements, tensor.dtype
            )));
        }
        Ok(())
    }

    fn walk(&mut self, p: &Program, written: &mut Written) -> Result<(), RuntimeError> {
        let exe = self.exe;
        match p {
            Program::Sequence(steps) => {
                for s in steps {
                    self.walk(s, written)?;
                }
            }
            Program::Execute(id) => {
                let cs = exe.compute_sets.get(id.0 as usize).ok_or_else(|| {
                    invalid(format!(
                        "Execute of compute set {} which does not exist",
                        id.0
                    ))
                })?;
                let uses = &self.compute_sets[id.0 as usize];
                for &(i, t) in &uses.reads {
                    self.read(written, t, || {
                        format!("input of vertex {i} in compute set {}", cs.name)
                    })?;
                }
                for &t in &uses.writes {
                    written.insert(t);
                }
            }
            Program::Rearrange(id) => {
                let r = exe
                    .rearranges
                    .get(id.0 as usize)
                    .ok_or_else(|| invalid(format!("Rearrange {} which does not exist", id.0)))?;
                for s in &r.sources {
                    self.read(written, *s, || format!("rearrangement {}", r.name))?;
                }
                written.insert(r.dst);
            }
            Program::Copy { src, dst } => {
                let (s, d) = (tensor(exe, *src, "a Copy")?, tensor(exe, *dst, "a Copy")?);
                if s.dtype != d.dtype || s.elements != d.elements {
                    return Err(invalid(format!(
                        "Copy from {} ({} x {:?}) to {} ({} x {:?})",
                        s.name, s.elements, s.dtype, d.name, d.elements, d.dtype
                    )));
                }
                self.read(written, *src, || format!("copy to {}", d.name))?;
                written.insert(*dst);
            }
            Program::Repeat { count, body } => {
                if *count > 0 {
                    self.walk(body, written)?;
                }
            }
            Program::RepeatWhileTrue {
                condition,
                predicate,
                body,
            } => {
                self.scalar(*predicate, DType::Pred, "a RepeatWhileTrue predicate")?;
                self.walk(condition, written)?;
                self.read(written, *predicate, || "loop predicate".into())?;
                let mut inner = written.clone();
                self.walk(body, &mut inner)?;
            }
            Program::If {
                predicate,
                then,
                otherwise,
            } => {
                self.scalar(*predicate, DType::Pred, "an If predicate")?;
                self.read(written, *predicate, || "If predicate".into())?;
                let (mut a, mut b) = (written.clone(), written.clone());
                self.walk(then, &mut a)?;
                self.walk(otherwise, &mut b)?;
                a.intersect(&b);
                *written = a;
            }
            Program::Switch {
                index,
                cases,
                default,
            } => {
                self.scalar(*index, DType::S32, "a Switch index")?;
                self.read(written, *index, || "Switch index".into())?;
                let mut after: Option<Written> = None;
                for branch in cases.iter().chain(std::iter::once(&**default)) {
                    let mut w = written.clone();
                    self.walk(branch, &mut w)?;
                    match &mut after {
                        None => after = Some(w),
                        Some(a) => a.intersect(&w),
                    }
                }
                // The default branch always exists, so `after` is set.
                if let Some(a) = after {
                    *written = a;
                }
            }
            Program::Call(f) => {
                let body = exe.functions.get(f.0 as usize).ok_or_else(|| {
                    invalid(format!("Call of function {} which does not exist", f.0))
                })?;
                self.calls += 1;
                if self.calls > 10_000 {
                    return Err(invalid("functions call each other without end".into()));
                }
                self.walk(body, written)?;
            }
            Program::StreamCopy { stream, tensor: t } => {
                let s = exe.streams.get(stream.0 as usize).ok_or_else(|| {
                    invalid(format!(
                        "StreamCopy of stream {} which does not exist",
                        stream.0
                    ))
                })?;
                let tt = tensor(exe, *t, "a StreamCopy")?;
                if s.dtype != tt.dtype || s.elements != tt.elements {
                    return Err(invalid(format!(
                        "stream {} carries {} x {:?} but tensor {} holds {} x {:?}",
                        s.name, s.elements, s.dtype, tt.name, tt.elements, tt.dtype
                    )));
                }
                match s.direction {
                    Direction::HostToDevice => {
                        written.insert(*t);
                    }
                    Direction::DeviceToHost => {
                        self.read(written, *t, || format!("stream {} to the host", s.name))?
                    }
                }
            }
            Program::Sync => {}
            Program::Parallel(branches) => {
                self.check_parallel(branches)?;
                for b in branches {
                    self.walk(b, written)?;
                }
            }
            Program::Collective(id) => {
                let c = exe
                    .collectives
                    .get(id.0 as usize)
                    .ok_or_else(|| invalid(format!("Collective {} which does not exist", id.0)))?;
                for &t in &c.inputs {
                    self.read(written, t, || format!("collective {}", c.name))?;
                }
                for &t in &c.outputs {
                    written.insert(t);
                }
            }
        }
        Ok(())
    }
}

impl Dataflow<'_> {
    /// The branches of a `Parallel`: no data-dependent control flow (its profile notes
    /// could not be merged), and no two running compute sets on one IPU.
    fn check_parallel(&self, branches: &[Program]) -> Result<(), RuntimeError> {
        let exe = self.exe;
        let mut owner: std::collections::HashMap<usize, usize> = std::collections::HashMap::new();
        for (b, branch) in branches.iter().enumerate() {
            let mut problem = None;
            // The branch and every function it calls (each once).
            let mut todo = vec![branch];
            let mut called = std::collections::HashSet::new();
            let mut nodes = Vec::new();
            while let Some(p) = todo.pop() {
                crate::program::walk::each_node(p, &mut |q| {
                    nodes.push(q);
                    if let Program::Call(f) = q
                        && called.insert(f.0)
                        && let Some(body) = exe.functions.get(f.0 as usize)
                    {
                        todo.push(body);
                    }
                });
            }
            nodes.into_iter().for_each(|p| match p {
                Program::RepeatWhileTrue { .. } | Program::If { .. } | Program::Switch { .. } => {
                    problem.get_or_insert_with(|| {
                        format!("branch {b} of a Parallel holds data-dependent control flow")
                    });
                }
                Program::Execute(id) => {
                    let Some(cs) = exe.compute_sets.get(id.0 as usize) else {
                        return;
                    };
                    let ipus = cs
                        .vertices
                        .iter()
                        .map(|v| v.ipu)
                        .chain(cs.codelet_vertices.iter().map(|v| v.ipu));
                    for ipu in ipus {
                        let o = *owner.entry(ipu).or_insert(b);
                        if o != b {
                            problem.get_or_insert_with(|| {
                                format!(
                                    "branches {o} and {b} of a Parallel both run compute sets on IPU {ipu} ({})",
                                    cs.name
                                )
                            });
                        }
                    }
                }
                _ => {}
            });
            if let Some(m) = problem {
                return Err(invalid(m));
            }
        }
        Ok(())
    }
}

/// Every load-time check, in order.
pub fn validate(exe: &Executable) -> Result<(), RuntimeError> {
    crate::model::collective::replica_system(exe)?;
    check_tensors(exe)?;
    let compute_sets = check_compute_sets(exe)?;
    check_rearranges(exe)?;
    crate::model::collective::check(exe)?;
    let mut flow = Dataflow {
        exe,
        compute_sets,
        calls: 0,
    };
    let mut written = Written::none(exe.tensors.len());
    for (i, t) in exe.tensors.iter().enumerate() {
        if t.init.is_some() {
            written.insert(TensorId(i as u32));
        }
    }
    flow.walk(&exe.program, &mut written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_twice_finds_the_first_overlap_and_leaves_its_marks_clear() {
        let fill = |dst_start, len| Run {
            source: RunSource::Fill,
            dst_start,
            len,
        };
        let mut marks = Vec::new();
        // Out of order, each element once: no overlap, across word boundaries.
        let once = [fill(130, 70), fill(0, 63), fill(63, 67)];
        assert_eq!(written_twice(once.into_iter(), 200, &mut marks), None);
        assert!(marks.iter().all(|&w| w == 0), "no mark is left set");
        // The second run writes elements 100-109 again: the first of them is named, and
        // the search stops there with its marks cleared.
        let twice = [fill(90, 30), fill(100, 10), fill(0, 90)];
        assert_eq!(written_twice(twice.into_iter(), 200, &mut marks), Some(100));
        assert!(marks.iter().all(|&w| w == 0), "no mark is left set");
        // The same marks serve a larger destination next.
        let larger = [fill(500, 500), fill(0, 500)];
        assert_eq!(written_twice(larger.into_iter(), 1000, &mut marks), None);
        assert!(marks.len() >= 1000 / 64 && marks.iter().all(|&w| w == 0));
    }

    #[test]
    fn writes_sort_by_tile_then_memory_as_a_whole_sort_would() {
        let mut next = crate::model::test_numbers::numbers(11);
        for _ in 0..200 {
            let n = next(300);
            let writes: Vec<TileWrite> = (0..n)
                .map(|i| {
                    let begin = next(64) as u64;
                    TileWrite {
                        tile: next(7),
                        begin,
                        end: begin + next(16) as u64,
                        vertex: if next(4) == 0 { i / 2 } else { i },
                    }
                })
                .collect();
            let mut whole = writes.clone();
            whole.sort_unstable();
            assert!(in_tile_and_memory_order(writes, 7) == whole);
        }
    }

    #[test]
    fn distinct_keeps_each_tensor_once_in_first_seen_order_past_the_short_list() {
        let mut d = Distinct::default();
        let ids: Vec<u32> = (0..40).map(|i| (i * 7) % 23).collect();
        let fresh: Vec<bool> = ids.iter().map(|&i| d.add(TensorId(i))).collect();
        let mut seen = Vec::new();
        for (&i, &f) in ids.iter().zip(&fresh) {
            assert_eq!(f, !seen.contains(&TensorId(i)), "tensor {i}");
            if f {
                seen.push(TensorId(i));
            }
        }
        assert_eq!(d.seen, seen);
        assert_eq!(seen.len(), 23);
    }

    #[test]
    fn written_sets_intersect_bit_by_bit() {
        let mut a = Written::none(130);
        let mut b = Written::none(130);
        for t in [0, 64, 129] {
            a.insert(TensorId(t));
        }
        for t in [64, 129, 5] {
            b.insert(TensorId(t));
        }
        a.intersect(&b);
        let held: Vec<u32> = (0..131).filter(|&t| a.contains(TensorId(t))).collect();
        assert_eq!(held, vec![64, 129]);
    }
}
