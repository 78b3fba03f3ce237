//! Where things live on the tiles: the bytes each tile's tensors span, the byte range of a
//! vertex's region in its tile's memory, the pieces (one tile, one stride) a run of a
//! tensor's elements falls into, and the source elements a rearrangement reads.

use crate::error::{CodeSplit, RuntimeError};
use crate::model::code::TileCode;
use crate::model::profile::{TensorSize, TileAtPeak, TileMemory, TileTensor};
use crate::program::executable::{Executable, Rearrange, Region, Run, RunSource, Tensor, TensorId};
use crate::program::runs::RunBlock;
use std::cell::Cell;

/// Bytes each tile needs (`ipu * tiles_per_ipu + tile`): the end of the last tensor
/// interval there, 0 where nothing is. Intervals outside the system (which validation
/// rejects) are left out.
pub(crate) fn tile_extents(exe: &Executable) -> Vec<u64> {
    let tiles = exe.target.tiles_per_ipu;
    let mut extents = vec![0u64; exe.num_ipus * tiles];
    for t in &exe.tensors {
        let size = t.dtype.size() as u64;
        for iv in &t.mapping {
            if iv.tile < tiles
                && let Some(e) = extents.get_mut(iv.ipu * tiles + iv.tile)
            {
                *e = (*e).max(iv.offset + iv.len as u64 * size);
            }
        }
    }
    extents
}

/// The memory of every tile that holds data or code, in tile order (`ipu`, then `tile`):
/// what a profile reports. `code` is indexed like [`tile_extents`].
pub(crate) fn tile_memory(exe: &Executable, code: &[TileCode]) -> Vec<TileMemory> {
    let tiles = exe.target.tiles_per_ipu;
    let mut always = vec![0u64; exe.num_ipus * tiles];
    for t in exe
        .tensors
        .iter()
        .filter(|t| t.always_live || t.init.is_some())
    {
        let size = t.dtype.size() as u64;
        for iv in &t.mapping {
            if iv.tile < tiles
                && let Some(a) = always.get_mut(iv.ipu * tiles + iv.tile)
            {
                *a += iv.len as u64 * size;
            }
        }
    }
    tile_extents(exe)
        .into_iter()
        .enumerate()
        .map(|(t, data)| (t, data, code.get(t).copied().unwrap_or_default()))
        .filter(|&(_, data, c)| data > 0 || c.total() > 0)
        .map(|(t, data, c)| {
            let bytes = data + c.total();
            TileMemory {
                ipu: t / tiles,
                tile: t % tiles,
                bytes_used: bytes,
                bytes_free: exe.target.bytes_per_tile.saturating_sub(bytes),
                always_live_bytes: always[t].min(data) + c.total(),
                code_bytes: c.kernel_code,
                vertex_state_bytes: c.vertex_state,
                control_code_bytes: c.control_code,
            }
        })
        .collect()
}

/// Fails naming the first tile whose tensors and code together exceed its memory, with
/// what is always live there (code, vertex state, constants) and what is not (variables,
/// activations). Tensors alone were checked at validation.
pub(crate) fn check_memory(exe: &Executable, memory: &[TileMemory]) -> Result<(), RuntimeError> {
    let capacity = exe.target.bytes_per_tile;
    let Some(m) = memory.iter().find(|m| m.bytes_used > capacity) else {
        return Ok(());
    };
    Err(RuntimeError::OutOfMemory {
        ipu: m.ipu,
        tile: m.tile,
        needed: m.bytes_used,
        available: capacity,
        largest: largest_on_tile(exe, m.ipu, m.tile, 3),
        code: Some(CodeSplit {
            code: m.code_bytes,
            vertex_state: m.vertex_state_bytes,
            control: m.control_code_bytes,
            always_live_tensors: m.always_live_bytes - m.all_code_bytes(),
        }),
    })
}

/// Bytes of `t` on one tile.
fn bytes_on_tile(t: &Tensor, ipu: usize, tile: usize) -> u64 {
    (t.mapping.iter())
        .filter(|iv| iv.ipu == ipu && iv.tile == tile)
        .map(|iv| (iv.len * t.dtype.size()) as u64)
        .sum()
}

/// The `count` largest tensors on one tile (name, bytes there), largest first.
pub(crate) fn largest_on_tile(
    exe: &Executable,
    ipu: usize,
    tile: usize,
    count: usize,
) -> Vec<(String, u64)> {
    let mut largest: Vec<(String, u64)> = exe
        .tensors
        .iter()
        .map(|t| (t.name.clone(), bytes_on_tile(t, ipu, tile)))
        .filter(|(_, b)| *b > 0)
        .collect();
    largest.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    largest.truncate(count);
    largest
}

/// The tensors of `exe` live on one tile at one step of [`Executable::liveness`], with
/// their bytes there, largest first (ties by name): what the tile holds at that moment.
/// Tensors the compiler gave no live steps are left out.
pub fn live_on_tile(exe: &Executable, ipu: usize, tile: usize, step: u64) -> Vec<TileTensor> {
    let mut live: Vec<TileTensor> = exe
        .tensors
        .iter()
        .filter(|t| t.live_at(step))
        .filter_map(|t| {
            let bytes = bytes_on_tile(t, ipu, tile);
            (bytes > 0).then(|| TileTensor {
                name: t.name.clone(),
                bytes,
                always_live: t.always_live || t.init.is_some(),
            })
        })
        .collect();
    live.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.name.cmp(&b.name)));
    live
}

/// What one tile holds when its tensors reach their extent: the step, while the tensor
/// placed highest in its memory is live, at which the tile holds the most bytes (the
/// first of equals), and the tensors live then. `None` when the tile holds no tensor or
/// the compiler gave that tensor no live steps.
pub fn tile_at_peak(exe: &Executable, ipu: usize, tile: usize) -> Option<TileAtPeak> {
    let mut top: Option<(u64, &Tensor)> = None;
    let mut here: Vec<(&Tensor, u64)> = Vec::new();
    for t in &exe.tensors {
        let size = t.dtype.size() as u64;
        for iv in (t.mapping.iter()).filter(|iv| iv.ipu == ipu && iv.tile == tile) {
            let end = iv.offset + iv.len as u64 * size;
            if top.is_none_or(|(highest, _)| end > highest) {
                top = Some((end, t));
            }
        }
        let bytes = bytes_on_tile(t, ipu, tile);
        if bytes > 0 {
            here.push((t, bytes));
        }
    }
    let highest = top?.1;
    highest.live_steps.first()?;
    // What is live changes only where a tensor's span begins: the candidates are those
    // beginnings while the highest tensor is live, and its own.
    let mut steps: Vec<u64> = (here.iter())
        .flat_map(|(t, _)| t.live_steps.iter().map(|s| s.0))
        .chain(highest.live_steps.iter().map(|s| s.0))
        .filter(|&s| highest.live_at(s))
        .collect();
    steps.sort_unstable();
    steps.dedup();
    let live_bytes = |s: u64| -> u64 {
        here.iter()
            .filter(|(t, _)| t.live_at(s))
            .map(|(_, b)| b)
            .sum()
    };
    let step = steps
        .iter()
        .copied()
        .max_by_key(|&s| (live_bytes(s), std::cmp::Reverse(s)))?;
    let mut tensors = live_on_tile(exe, ipu, tile, step);
    let others = tensors.split_off(tensors.len().min(TileAtPeak::LISTED));
    Some(TileAtPeak {
        ipu,
        tile,
        step: (exe.liveness.get(step as usize))
            .map_or_else(|| format!("step {step}"), |p| p.step.clone()),
        tensors,
        others: others.len(),
        others_bytes: others.iter().map(|t| t.bytes).sum(),
    })
}

/// The `count` largest tensors of `exe`, largest first (ties by name).
pub(crate) fn largest_tensors(exe: &Executable, count: usize) -> Vec<TensorSize> {
    let order = |a: &&Tensor, b: &&Tensor| {
        let bytes = |t: &Tensor| t.elements * t.dtype.size();
        // Equal sizes and names keep the tensors' order, as a stable sort would.
        (bytes(b).cmp(&bytes(a)))
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| std::ptr::from_ref(*a).cmp(&std::ptr::from_ref(*b)))
    };
    let mut all: Vec<&Tensor> = exe.tensors.iter().collect();
    // Only the largest need their tiles counted and their names copied.
    if all.len() > count {
        all.select_nth_unstable_by(count, order);
        all.truncate(count);
    }
    all.sort_by(order);
    all.into_iter()
        .map(|t| {
            let mut tiles: Vec<(usize, usize)> =
                t.mapping.iter().map(|i| (i.ipu, i.tile)).collect();
            tiles.sort_unstable();
            tiles.dedup();
            TensorSize {
                name: t.name.clone(),
                bytes: (t.elements * t.dtype.size()) as u64,
                tiles: tiles.len(),
                always_live: t.always_live || t.init.is_some(),
            }
        })
        .collect()
}

/// The byte range of a region in its vertex's tile memory, if the region lies entirely in
/// one interval on that tile; the search starts at interval `hint` and leaves there the
/// interval found (a compute set's vertices come in tile order, and so do the intervals
/// they read).
fn region_bytes_from(
    t: &Tensor,
    r: &Region,
    ipu: usize,
    tile: usize,
    hint: &mut usize,
) -> Option<(u64, u64)> {
    let holds = |iv: &crate::program::executable::Interval| {
        iv.ipu == ipu
            && iv.tile == tile
            && iv.start <= r.start
            && r.start + r.len <= iv.start + iv.len
    };
    let near = (*hint..t.mapping.len().min(*hint + 2)).find(|&k| holds(&t.mapping[k]));
    // Mappings are usually in element order: try a binary search before a scan.
    let k = near
        .or_else(|| {
            let guess = t.mapping.partition_point(|iv| iv.start + iv.len <= r.start);
            t.mapping.get(guess).filter(|iv| holds(iv)).map(|_| guess)
        })
        .or_else(|| t.mapping.iter().position(holds))?;
    *hint = k;
    let iv = &t.mapping[k];
    let size = t.dtype.size() as u64;
    let begin = iv.offset + (r.start - iv.start) as u64 * size;
    Some((begin, begin + r.len as u64 * size))
}

/// Finds the byte ranges of many regions, remembering where in each tensor the last was,
/// for each of a vertex's regions apart (a reduction's vertex reads its partials from
/// intervals far apart in one tensor: one hint would jump between them).
#[derive(Default)]
pub(crate) struct RegionFinder {
    /// `(tensor, which region of its vertex, interval)`.
    hints: smallvec::SmallVec<[(TensorId, usize, usize); 8]>,
}

impl RegionFinder {
    /// The byte range of `r` (region `slot` of its vertex) in `t` (the tensor `r` names)
    /// in the memory of tile `tile`, if it lies entirely in one interval there.
    pub(crate) fn bytes(
        &mut self,
        t: &Tensor,
        (r, slot): (&Region, usize),
        ipu: usize,
        tile: usize,
    ) -> Option<(u64, u64)> {
        let key = (r.tensor, slot);
        let at = match self.hints.iter().position(|&(id, s, _)| (id, s) == key) {
            Some(at) => at,
            None => {
                // A compute set reading very many tensors: forget the old hints.
                if self.hints.len() == 32 {
                    self.hints.clear();
                }
                self.hints.push((r.tensor, slot, 0));
                self.hints.len() - 1
            }
        };
        region_bytes_from(t, r, ipu, tile, &mut self.hints[at].2)
    }
}

/// The elements `lo..hi` each source's runs read (`lo >= hi`: none): the window gathered
/// from that source, whose element `i` is source element `lo + i`.
pub(crate) fn source_ranges(r: &Rearrange) -> Vec<(usize, usize)> {
    let mut range = vec![(usize::MAX, 0usize); r.sources.len()];
    // The spans of a block's runs move by a fixed step from one run to the next: the first
    // and last runs' spans bound them all.
    let ends = r.runs.blocks().iter().filter(|b| b.count > 0);
    for (k, a, b) in ends.flat_map(|b| [b.first, b.last()]).filter_map(span_read) {
        let w = &mut range[k];
        *w = (w.0.min(a), w.1.max(b));
    }
    range
}

/// The source a run reads and the elements `a..b` it steps over (a strided run: the whole
/// span between its first and last element); none for a fill or an empty run.
fn span_read(run: Run) -> Option<(usize, usize, usize)> {
    match (run.source, run.len > 0) {
        (RunSource::Tensor { k, start, stride }, true) => {
            let last = (start as isize + (run.len as isize - 1) * stride) as usize;
            Some((k as usize, start.min(last), start.max(last) + 1))
        }
        _ => None,
    }
}

/// The spans `r`'s runs read, `(source, a, b)`, as spans and strided blocks of them: a
/// block whose runs' spans overlap or touch is one span (a K part's rows, a copy in long
/// runs); the others are strided blocks, those of one source, step and count lying side by
/// side made one (a transpose's blocks, a column of runs each, together read whole rows:
/// a BERT layer's operand gathers step through 3 million runs' spans in a few thousand
/// blocks), and one whose spans then touch is a span too.
fn read_spans(r: &Rearrange) -> (Vec<(usize, usize, usize)>, Vec<Strided>) {
    let mut spans = Vec::new();
    let mut strided = Vec::new();
    for b in r.runs.blocks() {
        let Some((k, a, e)) = span_read(b.first) else {
            continue;
        };
        if runs_join(b, e - a) {
            let (_, a1, e1) = span_read(b.last()).expect("a block's runs read one source");
            spans.push((k, a.min(a1), e.max(e1)));
            continue;
        }
        let step = b.src_step.unsigned_abs();
        let start = match b.src_step < 0 {
            true => a - (b.count - 1) * step,
            false => a,
        };
        strided.push(Strided {
            k,
            step,
            count: b.count,
            start,
            width: e - a,
        });
    }
    // Blocks of one source, step and count by where they start: a block that starts
    // within or right after the one before widens it.
    strided.sort_unstable();
    let mut joined: Vec<Strided> = Vec::with_capacity(strided.len());
    for s in strided {
        match joined.last_mut() {
            Some(j)
                if (j.k, j.step, j.count) == (s.k, s.step, s.count)
                    && s.start <= j.start + j.width =>
            {
                j.width = j.width.max(s.start - j.start + s.width);
            }
            _ => joined.push(s),
        }
    }
    joined.retain(|j| {
        let whole = j.width >= j.step;
        if whole {
            spans.push((j.k, j.start, j.start + (j.count - 1) * j.step + j.width));
        }
        !whole
    });
    (spans, joined)
}

/// Spans of one source that do not touch: `count` of `width` elements, the first at
/// `start`, each `step` elements after the one before (`step > width`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Strided {
    k: usize,
    step: usize,
    count: usize,
    start: usize,
    width: usize,
}

impl Strided {
    /// Its spans, `(source, a, b)`.
    fn spans(self) -> impl Iterator<Item = (usize, usize, usize)> {
        (0..self.count).map(move |i| {
            let a = self.start + i * self.step;
            (self.k, a, a + self.width)
        })
    }
}

/// Whether the spans of `b`'s runs, each `width` elements, overlap or touch one after the
/// other (so they read one span).
fn runs_join(b: &RunBlock, width: usize) -> bool {
    b.count == 1 || b.src_step.unsigned_abs() <= width
}

/// Per source, the element ranges its runs read, sorted and merged (a strided run counts
/// as the whole span it steps over; ranges that touch are one).
pub(crate) fn read_intervals(r: &Rearrange) -> Vec<Vec<(usize, usize)>> {
    let range = source_ranges(r);
    let (whole, strided) = read_spans(r);
    let mut spans = vec![0usize; r.sources.len()];
    whole.iter().for_each(|&(k, ..)| spans[k] += 1);
    strided.iter().for_each(|s| spans[s.k] += s.count);
    // A source whose window is dense in spans marks them in a bitmap (a few words a span);
    // a sparse one sorts its spans.
    let mut reads: Vec<Reads> = range
        .iter()
        .zip(&spans)
        .map(|(&(lo, hi), &n)| match hi.saturating_sub(lo).div_ceil(64) {
            words if words > 0 && words <= 4 * n + 64 => Reads::Marked(Marks::new(lo, hi)),
            _ => Reads::Spans(Vec::with_capacity(n)),
        })
        .collect();
    let each = strided.into_iter().flat_map(Strided::spans);
    for (k, a, b) in whole.into_iter().chain(each) {
        match &mut reads[k] {
            Reads::Marked(m) => m.mark(a, b),
            Reads::Spans(s) => s.push((a, b)),
        }
    }
    reads
        .into_iter()
        .map(|reads| match reads {
            Reads::Marked(m) => m.intervals(),
            Reads::Spans(s) => merged(s),
        })
        .collect()
}

/// `spans` sorted, those that overlap or touch joined.
pub(crate) fn merged(mut spans: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
    spans.sort_unstable();
    let mut out: Vec<(usize, usize)> = Vec::with_capacity(spans.len());
    for (a, b) in spans {
        match out.last_mut() {
            Some(m) if a <= m.1 => m.1 = m.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// What one source's runs read, gathered for [`read_intervals`].
enum Reads {
    Marked(Marks),
    Spans(Vec<(usize, usize)>),
}

/// Elements `lo..hi` of a source, one bit each: set where a run reads.
struct Marks {
    lo: usize,
    words: Vec<u64>,
}

impl Marks {
    fn new(lo: usize, hi: usize) -> Marks {
        Marks {
            lo,
            words: vec![0; (hi - lo).div_ceil(64)],
        }
    }

    /// Marks elements `a..b` (within `lo..hi`).
    fn mark(&mut self, a: usize, b: usize) {
        let (a, b) = (a - self.lo, b - self.lo);
        let (first, last) = (a / 64, (b - 1) / 64);
        let from = |bit: usize| u64::MAX << (bit % 64);
        let upto = |bit: usize| u64::MAX >> (63 - (bit - 1) % 64);
        if first == last {
            self.words[first] |= from(a) & upto(b);
        } else {
            self.words[first] |= from(a);
            self.words[first + 1..last].fill(u64::MAX);
            self.words[last] |= upto(b);
        }
    }

    /// The marked elements as sorted, separate ranges.
    fn intervals(&self) -> Vec<(usize, usize)> {
        let mut out: Vec<(usize, usize)> = Vec::new();
        for (w, &word) in self.words.iter().enumerate() {
            let mut bits = word;
            let mut at = 0;
            while bits != 0 {
                let skip = bits.trailing_zeros() as usize;
                at += skip;
                bits = bits.checked_shr(skip as u32).unwrap_or(0);
                let ones = bits.trailing_ones() as usize;
                let (a, b) = (self.lo + w * 64 + at, self.lo + w * 64 + at + ones);
                match out.last_mut() {
                    Some(m) if m.1 == a => m.1 = b,
                    _ => out.push((a, b)),
                }
                at += ones;
                bits = bits.checked_shr(ones as u32).unwrap_or(0);
            }
        }
        out
    }
}

/// Finds where elements of a tensor live.
pub(crate) struct Locator {
    /// The tensor's intervals in element order, copied side by side (a rearrangement's
    /// costing looks one up for every run).
    spans: Vec<TileSpan>,
    /// The span holding element `b * bucket` for each `b`: a lookup starts there and walks
    /// forward, so finding an element costs O(1) when intervals are of similar size (a
    /// strided read of a tensor spread over every tile lands in a new interval at almost
    /// every element).
    first_in_bucket: Vec<u32>,
    /// log2 of the bucket size (a power of two: a lookup shifts rather than divides).
    bucket_shift: u32,
    /// The span of the last lookup: runs mostly continue where the previous one ended.
    last: Cell<usize>,
    /// The IPU holding every interval, if one does.
    one_ipu: Option<usize>,
}

/// One interval of a tensor, as a [`Locator`] holds it: elements `start..end` on tile
/// `(ipu, tile)` from byte `offset` of its memory.
#[derive(Clone, Copy)]
pub(crate) struct TileSpan {
    pub start: usize,
    pub end: usize,
    pub ipu: usize,
    pub tile: usize,
    pub offset: u64,
}

/// Elements that live on one tile and are read with one stride: `(ipu, tile, byte offset of
/// the first, elements)`.
pub(crate) type Piece = (usize, usize, u64, usize);

impl Locator {
    pub(crate) fn new(t: &Tensor) -> Locator {
        let mut spans: Vec<TileSpan> = t
            .mapping
            .iter()
            .map(|iv| TileSpan {
                start: iv.start,
                end: iv.start + iv.len,
                ipu: iv.ipu,
                tile: iv.tile,
                offset: iv.offset,
            })
            .collect();
        if !spans.is_sorted_by_key(|s| s.start) {
            spans.sort_by_key(|s| s.start);
        }
        // At most the average interval's length, so a bucket starts in one of few spans.
        let average = t.elements.div_ceil(spans.len().max(1)).max(1);
        let bucket_shift = average.ilog2();
        let bucket = 1usize << bucket_shift;
        let mut first_in_bucket = Vec::with_capacity(t.elements.div_ceil(bucket));
        let mut k = 0;
        for b in 0..t.elements.div_ceil(bucket) {
            while spans[k].end <= b * bucket {
                k += 1;
            }
            first_in_bucket.push(k as u32);
        }
        let one_ipu = match spans.first() {
            Some(first) if spans.iter().all(|s| s.ipu == first.ipu) => Some(first.ipu),
            _ => None,
        };
        Locator {
            spans,
            first_in_bucket,
            bucket_shift,
            last: Cell::new(0),
            one_ipu,
        }
    }

    /// The IPU holding every interval of the tensor, if one does.
    pub(crate) fn one_ipu(&self) -> Option<usize> {
        self.one_ipu
    }

    /// Each tile's intervals `(start, end)`, sorted, by tile (on [`Locator::one_ipu`]'s
    /// IPU: the tile indices of several IPUs would mix).
    pub(crate) fn intervals_by_tile(
        &self,
    ) -> std::collections::HashMap<usize, Vec<(usize, usize)>> {
        let mut by_tile: std::collections::HashMap<usize, Vec<(usize, usize)>> =
            std::collections::HashMap::new();
        // Spans are sorted by start, so each tile's list is too.
        for s in &self.spans {
            by_tile.entry(s.tile).or_default().push((s.start, s.end));
        }
        by_tile
    }

    /// The index in `spans` of the span holding element `at`.
    fn find(&self, at: usize) -> usize {
        let last = self.last.get();
        let k = match self.spans.get(last) {
            Some(s) if s.start <= at && at < s.end => return last,
            Some(s) if s.end == at && self.spans.get(last + 1).is_some_and(|n| at < n.end) => {
                last + 1
            }
            _ => {
                let mut k = self.first_in_bucket[at >> self.bucket_shift] as usize;
                while self.spans[k].end <= at {
                    k += 1;
                }
                k
            }
        };
        self.last.set(k);
        k
    }

    /// How many intervals the tensor has.
    pub(crate) fn intervals(&self) -> usize {
        self.spans.len()
    }

    /// Calls `f` with the tile (`ipu * tiles_per_ipu + tile`) of each interval holding
    /// any of elements `lo..hi` (which the tensor has), taking one from `budget` per
    /// interval; `false` if the budget ran out first.
    pub(crate) fn tiles_holding(
        &self,
        lo: usize,
        hi: usize,
        tiles_per_ipu: usize,
        budget: &mut usize,
        mut f: impl FnMut(usize),
    ) -> bool {
        let mut k = self.find(lo);
        while let Some(s) = self.spans.get(k).filter(|s| s.start < hi) {
            if *budget == 0 {
                return false;
            }
            *budget -= 1;
            f(s.ipu * tiles_per_ipu + s.tile);
            k += 1;
        }
        true
    }

    /// The interval holding element `at` (which the tensor has).
    pub(crate) fn span_at(&self, at: usize) -> TileSpan {
        self.spans[self.find(at)]
    }

    /// Calls `f` with the pieces covering elements `start + i * stride` for `i` in
    /// `0..len`, in order. Within one interval, consecutive elements stay on its tile, so a
    /// piece is as long as the stride allows.
    pub(crate) fn pieces(
        &self,
        start: usize,
        stride: isize,
        len: usize,
        size: u64,
        mut f: impl FnMut(Piece),
    ) {
        if stride != 1 {
            return self.pieces_with_room(start, stride, len, size, |piece, _| f(piece));
        }
        // Contiguous (every destination, most sources): a piece per interval crossed.
        let (mut at, end) = (start, start + len);
        while at < end {
            let iv = self.spans[self.find(at)];
            let stop = iv.end.min(end);
            f((
                iv.ipu,
                iv.tile,
                iv.offset + (at - iv.start) as u64 * size,
                stop - at,
            ));
            at = stop;
        }
    }

    /// [`Locator::pieces`], each piece given with its room: how many places every element
    /// of the piece could move up and stay in its interval (so the same read moved up by
    /// at most that many elements falls into the same pieces).
    pub(crate) fn pieces_with_room(
        &self,
        start: usize,
        stride: isize,
        len: usize,
        size: u64,
        mut f: impl FnMut(Piece, usize),
    ) {
        let mut i = 0;
        while i < len {
            let at = (start as isize + i as isize * stride) as usize;
            let iv = self.spans[self.find(at)];
            let left = len - i;
            // A stride past the interval's end leaves one element here: no division.
            let count = match stride {
                0 => left,
                1 => (iv.end - at).min(left),
                s if s > 0 && at + s as usize >= iv.end => 1,
                s if s > 0 => (iv.end - at).div_ceil(s as usize).min(left),
                s if at - iv.start < s.unsigned_abs() => 1,
                s => ((at - iv.start) / s.unsigned_abs() + 1).min(left),
            };
            let highest = match stride {
                s if s > 0 => at + (count - 1) * s as usize,
                _ => at,
            };
            f(
                (
                    iv.ipu,
                    iv.tile,
                    iv.offset + (at - iv.start) as u64 * size,
                    count,
                ),
                iv.end - 1 - highest,
            );
            i += count;
        }
    }
}

/// Calls `f(piece, done)` for every piece (one destination tile) of `run`, in order;
/// `done` is how many of the run's elements come before the piece. `dst` locates the
/// run's destination, whose elements are `size` bytes.
pub(crate) fn destination_pieces(
    run: &Run,
    dst: &Locator,
    size: usize,
    mut f: impl FnMut(Piece, usize),
) {
    let mut done = 0;
    dst.pieces(run.dst_start, 1, run.len, size as u64, |piece| {
        f(piece, done);
        done += piece.3;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tile's peak is the step, while the tensor placed highest in its memory is live,
    /// at which the tile holds the most, and what it holds then is every tensor live at
    /// that step (a tensor of several spans too), not the tensors that shared the space at
    /// other steps.
    #[test]
    fn a_tile_at_its_peak_holds_the_tensors_live_at_the_highest_ones_step() {
        use crate::program::builder::ExecutableBuilder;
        use crate::program::executable::Interval;
        let mut b = ExecutableBuilder::new(crate::Target::ipu2(), 1);
        let mut add =
            |name: &str, elements: usize, offset: u64, tile: usize, spans: &[(u64, u64)]| {
                let mapping = vec![Interval {
                    ipu: 0,
                    tile,
                    start: 0,
                    len: elements,
                    offset,
                }];
                let id = b.tensor_mapped(name, DType::F32, &[elements], mapping);
                b.tensor_mut(id).live_steps = spans.to_vec();
            };
        add("early", 4, 0, 0, &[(0, 1)]);
        add("middle", 8, 16, 0, &[(1, 2)]);
        add("reuses_early", 2, 0, 0, &[(2, 2)]);
        add("twice", 4, 48, 0, &[(0, 0), (5, 6)]);
        add("elsewhere", 100, 0, 1, &[(0, 9)]);
        let exe = b.executable();
        let at = tile_at_peak(exe, 0, 0).unwrap();
        assert_eq!(at.step, "step 0");
        let names: Vec<(&str, u64)> = at
            .tensors
            .iter()
            .map(|t| (t.name.as_str(), t.bytes))
            .collect();
        assert_eq!(names, [("early", 16), ("twice", 16)]);
        let at_two: Vec<String> = live_on_tile(exe, 0, 0, 2)
            .into_iter()
            .map(|t| t.name)
            .collect();
        assert_eq!(at_two, ["middle", "reuses_early"]);
        assert!(live_on_tile(exe, 0, 0, 5).iter().any(|t| t.name == "twice"));
        assert!(live_on_tile(exe, 0, 0, 4).is_empty());
        assert_eq!(tile_at_peak(exe, 0, 2), None);
    }
    use crate::model::test_numbers::numbers;
    use crate::program::executable::Interval;
    use codegen::DType;

    /// A tensor of `lens.len()` intervals of those lengths on tiles 0, 1, 2, ... in element
    /// order, the mapping listed in `order`.
    fn tensor(lens: &[usize], order: &[usize]) -> Tensor {
        let mut start = 0;
        let mut mapping: Vec<Interval> = lens
            .iter()
            .enumerate()
            .map(|(tile, &len)| {
                let iv = Interval {
                    ipu: 0,
                    tile,
                    start,
                    len,
                    offset: 100 * tile as u64,
                };
                start += len;
                iv
            })
            .collect();
        mapping = order.iter().map(|&i| mapping[i]).collect();
        Tensor {
            name: "t".into(),
            dtype: DType::F32,
            shape: vec![start],
            elements: start,
            mapping,
            init: None,
            always_live: false,
            live_steps: Vec::new(),
        }
    }

    /// Pieces found element by element: each element's interval by a scan, consecutive
    /// elements on one interval joined.
    fn slow_pieces(t: &Tensor, start: usize, stride: isize, len: usize) -> Vec<Piece> {
        let mut out: Vec<(Piece, usize)> = Vec::new();
        for i in 0..len {
            let at = (start as isize + i as isize * stride) as usize;
            let (k, iv) = t
                .mapping
                .iter()
                .enumerate()
                .find(|(_, iv)| iv.start <= at && at < iv.start + iv.len)
                .expect("every element is mapped");
            match out.last_mut() {
                Some((p, last)) if *last == k => p.3 += 1,
                _ => out.push((
                    (iv.ipu, iv.tile, iv.offset + 4 * (at - iv.start) as u64, 1),
                    k,
                )),
            }
        }
        out.into_iter().map(|(p, _)| p).collect()
    }

    #[test]
    fn pieces_match_an_element_by_element_walk_for_any_stride_and_mapping_order() {
        let lens = [3, 1, 7, 2, 9, 4, 4, 1, 6];
        let t = tensor(&lens, &[4, 0, 8, 2, 1, 3, 7, 5, 6]);
        let n = t.elements;
        let at = Locator::new(&t);
        let mut next = numbers(12345);
        for _ in 0..2000 {
            let stride = next(9) as isize - 4;
            let start = next(n);
            // As many elements as fit from `start` with this stride.
            let room = match stride {
                0 => 1 + next(5),
                s if s > 0 => (n - 1 - start) / s as usize + 1,
                s => start / s.unsigned_abs() + 1,
            };
            let len = next(room + 1);
            let mut got = Vec::new();
            at.pieces(start, stride, len, 4, |p| got.push(p));
            assert_eq!(
                got,
                slow_pieces(&t, start, stride, len),
                "start {start} stride {stride} len {len}"
            );
        }
    }

    /// The bitmap and the sorted spans give the same ranges, for dense and sparse reads.
    #[test]
    fn read_intervals_are_the_merged_spans_of_the_runs() {
        let mut next = numbers(99);
        for case in 0..300 {
            // Source 0 dense (many runs over a short window), source 1 sparse.
            let (width, count) = if case % 2 == 0 {
                (300, 80)
            } else {
                (100_000, 5)
            };
            let runs: Vec<Run> = (0..count)
                .flat_map(|_| [0u32, 1])
                .map(|k| {
                    let stride = [1isize, 1, 3, -1, 0][next(5)];
                    let len = next(70);
                    let reach = (len.max(1) - 1) * stride.unsigned_abs();
                    let start = reach + next(width);
                    Run {
                        source: RunSource::Tensor {
                            k,
                            start: if stride < 0 { start } else { start - reach },
                            stride,
                        },
                        dst_start: 0,
                        len,
                    }
                })
                .collect();
            let r = Rearrange {
                name: "r".into(),
                dst: TensorId(0),
                sources: vec![TensorId(1), TensorId(2)],
                fill: Vec::new(),
                runs: runs.into(),
            };
            let want = read_one_by_one(&r.runs.iter().collect::<Vec<_>>());
            assert_eq!(read_intervals(&r), want, "case {case}");
        }
    }

    /// What `runs` read of sources 0 and 1, run by run, merged.
    fn read_one_by_one(runs: &[Run]) -> Vec<Vec<(usize, usize)>> {
        (0..2)
            .map(|k| {
                let s: Vec<(usize, usize)> = (runs.iter().copied().filter_map(span_read))
                    .filter(|&(j, ..)| j == k)
                    .map(|(_, a, b)| (a, b))
                    .collect();
                merged(s)
            })
            .collect()
    }

    /// Blocks of runs stepping through a source (overlapping, touching, apart, backwards)
    /// read what their runs read one by one.
    #[test]
    fn blocks_read_what_their_runs_read() {
        let mut next = numbers(7);
        for case in 0..400 {
            let mut runs = Vec::new();
            for _ in 0..1 + next(4) {
                let stride = [1isize, 3, -1, -2, 0][next(5)];
                let len = 1 + next(20);
                let reach = (len - 1) * stride.unsigned_abs();
                let count = 1 + next(30);
                let width = reach as isize + 1;
                let step = [0, 1, width / 2, width - 1, width, width + 1, 3 * width][next(7)]
                    * if next(3) == 0 { -1 } else { 1 };
                let span = count as isize * step.abs() + width;
                let base = (span + reach as isize) as usize + next(500);
                for i in 0..count as isize {
                    let start = (base as isize + i * step) as usize;
                    runs.push(Run {
                        source: RunSource::Tensor {
                            k: next(2) as u32 * u32::from(case % 2 == 0),
                            start,
                            stride,
                        },
                        dst_start: 7 * i as usize,
                        len,
                    });
                }
            }
            let r = Rearrange {
                name: "r".into(),
                dst: TensorId(0),
                sources: vec![TensorId(1), TensorId(2)],
                fill: Vec::new(),
                runs: runs.clone().into(),
            };
            let want = read_one_by_one(&runs);
            assert_eq!(read_intervals(&r), want, "case {case}");
        }
    }

    /// Blocks of one step and count side by side (a transpose's columns of runs), apart,
    /// overlapping and backwards, read what their runs read one by one; side by side,
    /// they are made one block, and one span once they cover their rows.
    #[test]
    fn strided_blocks_side_by_side_read_as_one() {
        let mut next = numbers(17);
        let rearrange = |runs: &[Run]| Rearrange {
            name: "r".into(),
            dst: TensorId(0),
            sources: vec![TensorId(1), TensorId(2)],
            fill: Vec::new(),
            runs: runs.to_vec().into(),
        };
        // A column of `rows` runs of `width` elements of source `k`, the first at `start`,
        // each `step` after the last (backwards: the last first).
        let column = |k: u32, start: usize, width, step: usize, rows: usize, backwards| {
            (0..rows)
                .map(|i| {
                    let i = if backwards { rows - 1 - i } else { i };
                    Run::reading(k, (start + i * step, 1), 0, width)
                })
                .collect::<Vec<Run>>()
        };
        // A transpose of a 300 x 64 source in columns of 8: one span.
        let runs: Vec<Run> = (0..8)
            .flat_map(|c| column(0, c * 8, 8, 64, 300, c % 2 == 1))
            .collect();
        let r = rearrange(&runs);
        let (spans, strided) = read_spans(&r);
        assert_eq!((spans, strided), (vec![(0, 0, 300 * 64)], vec![]));
        assert_eq!(read_intervals(&r), read_one_by_one(&runs));
        for case in 0..300 {
            let step = 8 + next(40);
            let rows = 1 + next(20);
            let mut runs = Vec::new();
            for _ in 0..1 + next(6) {
                let k = next(2) as u32;
                let width = 1 + next(step - 1);
                let start = next(2 * step);
                let rows = if next(4) == 0 { 1 + next(20) } else { rows };
                let step = if next(5) == 0 { step + 1 } else { step };
                runs.extend(column(k, start, width, step, rows, next(2) == 0));
            }
            let r = rearrange(&runs);
            assert_eq!(read_intervals(&r), read_one_by_one(&runs), "case {case}");
        }
    }

    #[test]
    fn regions_are_found_with_and_without_hints() {
        let t = tensor(&[4, 4, 4, 4], &[0, 1, 2, 3]);
        let region = |start, len| Region {
            tensor: TensorId(0),
            start,
            len,
        };
        let mut finder = RegionFinder::default();
        // Forward, backward and skipping: the hint never changes the answer.
        for (r, tile, want) in [
            (region(0, 4), 0, Some((0, 16))),
            (region(5, 2), 1, Some((104, 112))),
            (region(13, 3), 3, Some((304, 316))),
            (region(1, 2), 0, Some((4, 12))),
            (region(9, 2), 2, Some((204, 212))),
            (region(3, 2), 0, None),
            (region(9, 2), 1, None),
        ] {
            assert_eq!(
                finder.bytes(&t, (&r, 0), 0, tile),
                want,
                "{r:?} on tile {tile}"
            );
            let fresh = RegionFinder::default().bytes(&t, (&r, 0), 0, tile);
            assert_eq!(fresh, want, "{r:?} on tile {tile}");
        }
    }

    #[test]
    fn source_ranges_from_block_ends_bound_every_runs_span() {
        use crate::program::executable::TensorId;
        // Blocks whose source starts rise and fall, runs reading backwards and with gaps,
        // a fill, and runs of a second source.
        let mut runs = Vec::new();
        for i in 0..5 {
            runs.push(Run::reading(0, (100 + 7 * i, -2), 4 * i, 4));
        }
        for i in 0..6 {
            runs.push(Run::reading(0, (90 - 3 * i, 3), 20 + 5 * i, 5));
        }
        runs.push(Run {
            source: RunSource::Fill,
            dst_start: 50,
            len: 3,
        });
        for i in 0..4 {
            runs.push(Run::reading(1, (40 - 10 * i, 1), 53 + 2 * i, 2));
        }
        let r = Rearrange {
            name: "r".into(),
            dst: TensorId(2),
            sources: vec![TensorId(0), TensorId(1)],
            fill: Vec::new(),
            runs: runs.into(),
        };
        assert!(r.runs.blocks().len() < 6, "the runs make blocks");
        let mut want = vec![(usize::MAX, 0usize); 2];
        for (k, a, b) in r.runs.iter().filter_map(span_read) {
            want[k] = (want[k].0.min(a), want[k].1.max(b));
        }
        assert_eq!(source_ranges(&r), want);
        assert_eq!(want, [(75, 129), (10, 42)]);
    }
}
