//! Carrying out a rearrangement (or a copy) on the IPU Model's tile memories.
//!
//! What the exchange delivers does not depend on which tile holds which element; only its
//! cost does, and that is the model's (`model::exchange`). So the host gathers the
//! window of each source the runs read into one contiguous buffer, then every destination
//! tile writes its share of the runs straight from those buffers (tiles in parallel): the
//! work grows with the bytes and the runs, not with the pieces that cross tiles (a
//! transpose of a tensor spread over every tile has one piece per element). Every source
//! byte is gathered before any is written, so a destination may overlap its sources.
//! When no byte a rearrangement writes is one it reads, and every write reads one piece of
//! one source tile's memory, the window is skipped: each destination tile copies straight
//! from the source tiles (one copy of each byte instead of two).

use crate::device::system::System;
use crate::error::RuntimeError;
use crate::exec::buckets::Buckets;
use crate::exec::memory::HostTiles;
use crate::exec::parallel::{Spread, for_each_active_ahead, for_each_range};
use crate::exec::prefetch;
use crate::exec::shortcuts::kept_results::KeptResult;
use crate::model::layout::{Locator, destination_pieces, merged, read_intervals};
use crate::program::executable::{Rearrange, Run, RunSource, Tensor, TensorId};
use rayon::prelude::*;
use rustc_hash::FxHashMap;

/// A contiguous byte range of one tile's memory and where it sits in a host buffer.
#[derive(Debug, Clone, Copy)]
struct Segment {
    /// `ipu * tiles_per_ipu + tile`.
    tile: usize,
    /// Byte offset in the tile's memory.
    offset: usize,
    /// Byte offset in the buffer.
    at: usize,
    bytes: usize,
}

/// The segments holding elements `lo..hi` of `t`, placed from byte 0 of a buffer.
fn segments(t: &Tensor, lo: usize, hi: usize, tiles_per_ipu: usize) -> Vec<Segment> {
    let size = t.dtype.size();
    let mut out: Vec<Segment> = t
        .mapping
        .iter()
        .filter(|iv| iv.start < hi && iv.start + iv.len > lo)
        .map(|iv| {
            let (a, b) = (iv.start.max(lo), (iv.start + iv.len).min(hi));
            Segment {
                tile: iv.ipu * tiles_per_ipu + iv.tile,
                offset: iv.offset as usize + (a - iv.start) * size,
                at: (a - lo) * size,
                bytes: (b - a) * size,
            }
        })
        .collect();
    out.sort_by_key(|s| s.at);
    out
}

/// Part of a run that lands on one destination tile: `len` elements written from byte
/// `offset` of the tile's memory. Kept small (24 bytes): a large module's rearrangements
/// hold millions, all read once per run.
#[derive(Debug, Clone, Copy)]
struct Write {
    /// First byte in the window.
    at: u64,
    offset: u32,
    len: u32,
    /// Byte step in the window.
    step: i32,
    /// The window read, or [`FILL`] for the fill value.
    window: u32,
}

impl Write {
    /// This write followed by `next` as one write, when `next` continues it both on the
    /// tile and in the window (element by element, `size` bytes each).
    fn extended(&self, next: &Write, size: usize) -> Option<Write> {
        let bytes = self.len as u64 * size as u64;
        let contiguous_source = self.window == FILL
            || (self.step as i64 == size as i64
                && next.step == self.step
                && self.at + bytes == next.at);
        let continues = next.window == self.window
            && self.offset as u64 + bytes == next.offset as u64
            && contiguous_source;
        let len = u32::try_from(self.len as u64 + next.len as u64).ok()?;
        continues.then_some(Write { len, ..*self })
    }
}

/// [`Write::window`] of a write of the fill value.
const FILL: u32 = u32::MAX;

impl Write {
    /// A write, or why its numbers do not fit the compact form.
    fn new(
        source: Option<(usize, usize, isize)>,
        offset: usize,
        len: usize,
    ) -> Result<Write, String> {
        let (window, at, step) = source.unwrap_or((FILL as usize, 0, 0));
        let fits = |what: &str, ok: bool| match ok {
            true => Ok(()),
            false => Err(format!(
                "{what} exceeds what the IPU Model's exchange handles"
            )),
        };
        fits("a tile offset above 4 GiB", u32::try_from(offset).is_ok())?;
        fits("a run of 2^32 elements or more", u32::try_from(len).is_ok())?;
        fits("a step of 2 GiB or more", i32::try_from(step).is_ok())?;
        fits("a window index", u32::try_from(window).is_ok())?;
        Ok(Write {
            at: at as u64,
            offset: offset as u32,
            len: len as u32,
            step: step as i32,
            window: window as u32,
        })
    }
}

/// The source elements a rearrangement reads, gathered into one buffer.
pub(crate) struct Window {
    gather: Vec<Segment>,
    bytes: usize,
}

/// The parts of `segments` (a window from element `lo`, elements of `size` bytes) that hold
/// elements in `read` (sorted, disjoint): a window whose runs skip most of it (one K part
/// of a product's partials) gathers only what they read.
fn restrict(
    segments: Vec<Segment>,
    read: &[(usize, usize)],
    lo: usize,
    size: usize,
) -> Vec<Segment> {
    let mut out = Vec::with_capacity(segments.len());
    let mut i = 0;
    for s in segments {
        let (a, b) = (lo + s.at / size, lo + (s.at + s.bytes) / size);
        while i < read.len() && read[i].1 <= a {
            i += 1;
        }
        let mut j = i;
        while j < read.len() && read[j].0 < b {
            let (x, y) = (read[j].0.max(a), read[j].1.min(b));
            out.push(Segment {
                tile: s.tile,
                offset: s.offset + (x - a) * size,
                at: (x - lo) * size,
                bytes: (y - x) * size,
            });
            j += 1;
        }
    }
    out
}

impl Window {
    /// Copies the window out of `memory` into `buf` (at least its bytes long). A large
    /// window is gathered in parallel on `pool`, in chunks of its segments.
    pub(crate) fn gather(&self, memory: &HostTiles, buf: &mut [u8], pool: &rayon::ThreadPool) {
        let copy = |part: &mut [u8], bytes: &[u8]| part.copy_from_slice(bytes);
        self.gather_as(memory, (buf, 1), copy, Some(pool));
    }

    /// [`Window::gather`] on the calling thread alone.
    pub(crate) fn gather_here(&self, memory: &HostTiles, buf: &mut [u8]) {
        let copy = |part: &mut [u8], bytes: &[u8]| part.copy_from_slice(bytes);
        self.gather_as(memory, (buf, 1), copy, None);
    }

    /// [`Window::gather`] of an f16 window into f32 values, each segment widened as it is
    /// read (one pass over the window, on every thread).
    pub(crate) fn gather_widened(
        &self,
        memory: &HostTiles,
        window: &mut [f32],
        pool: &rayon::ThreadPool,
    ) {
        let widen = |part: &mut [f32], bytes: &[u8]| codegen::halves::widen_into(bytes, part);
        self.gather_as(memory, (window, 2), widen, Some(pool));
    }

    /// The window source `k` of `reader` gathers (its elements `read`, sorted and merged,
    /// as [`read_intervals`] gives them), taken instead from the source of `writer`, which
    /// writes all of that source: what the window would hold just after `writer` ran. `None`
    /// unless every run of `writer` reads its one source element after element
    /// ([`forwardable`]).
    pub(crate) fn through(
        tensors: &[Tensor],
        tiles_per_ipu: usize,
        read: &[(usize, usize)],
        writer: &Rearrange,
    ) -> Option<Window> {
        if !forwardable(writer) {
            return None;
        }
        let (Some(&(lo, _)), Some(&(_, hi))) = (read.first(), read.last()) else {
            return Some(Window {
                gather: Vec::new(),
                bytes: 0,
            });
        };
        let from = &tensors[writer.sources[0].0 as usize];
        let size = from.dtype.size();
        let mut runs: Vec<Run> = writer.runs.iter().collect();
        runs.sort_unstable_by_key(|r| r.dst_start);
        let mut gather = Vec::new();
        for &(a, b) in read {
            let first = runs.partition_point(|r| r.dst_start + r.len <= a);
            for run in runs[first..].iter().take_while(|r| r.dst_start < b) {
                let RunSource::Tensor { start, .. } = run.source else {
                    unreachable!("forwardable: every run reads the source");
                };
                let (x, y) = (a.max(run.dst_start), b.min(run.dst_start + run.len));
                let p = start + (x - run.dst_start);
                gather.extend(
                    segments(from, p, p + (y - x), tiles_per_ipu)
                        .into_iter()
                        .map(|s| Segment {
                            at: s.at + (x - lo) * size,
                            ..s
                        }),
                );
            }
        }
        Some(Window {
            gather,
            bytes: (hi - lo) * size,
        })
    }

    /// The bytes of the buffer it fills.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Puts each segment into `buf`, whose element `i` holds the window's bytes from
    /// `i * unit` (`put(part, bytes)` fills `part` from `bytes`); a large window in
    /// parallel on `pool`, if given.
    fn gather_as<T: Send>(
        &self,
        memory: &HostTiles,
        (buf, unit): (&mut [T], usize),
        put: impl Fn(&mut [T], &[u8]) + Sync,
        pool: Option<&rayon::ThreadPool>,
    ) {
        let segments = &self.gather;
        let copy = |part: &mut [T], base: usize, segments: &[Segment]| {
            for s in segments {
                let at = (s.at - base) / unit;
                let bytes = &memory[s.tile][s.offset..s.offset + s.bytes];
                put(&mut part[at..at + s.bytes / unit], bytes);
            }
        };
        let pool = match pool {
            Some(pool) if self.bytes >= PARALLEL_GATHER_BYTES => pool,
            _ => return copy(buf, 0, segments),
        };
        // Segments are sorted by `at` and disjoint: each chunk owns its span of the buffer.
        let per = segments
            .len()
            .div_ceil(4 * pool.current_num_threads())
            .max(1);
        let mut parts = Vec::new();
        let (mut rest, mut base) = (buf, 0);
        for chunk in segments.chunks(per) {
            let last = chunk.last().expect("chunks are not empty");
            let (part, tail) = rest.split_at_mut((last.at + last.bytes - base) / unit);
            parts.push((part, base, chunk));
            (rest, base) = (tail, last.at + last.bytes);
        }
        pool.install(|| {
            parts
                .into_par_iter()
                .for_each(|(part, base, chunk)| copy(part, base, chunk))
        });
    }
}

/// Whether every run of `r` reads its one source element after element (a slice, a
/// reshape, a concatenation's piece): what [`Window::through`] can see through.
pub(crate) fn forwardable(r: &Rearrange) -> bool {
    r.sources.len() == 1
        && r.runs.iter().all(|run| match run.source {
            RunSource::Tensor { k: 0, stride, .. } => stride == 1 || run.len == 1,
            _ => false,
        })
}

/// A rearrangement ready to run.
pub(crate) struct LoadedRearrange {
    windows: Vec<Window>,
    /// `(source, compute set)`: windows that are that compute set's batch scratch.
    scratch_windows: Vec<(usize, usize)>,
    fill: Vec<u8>,
    /// Each destination tile that has writes (`ipu * tiles_per_ipu + tile`), by slot.
    tiles: Vec<usize>,
    /// Each slot's writes.
    writes: Buckets<Write>,
    /// Each tile's index in `tiles` (`u32::MAX`: none).
    slot: Vec<u32>,
    size: usize,
    /// How the tiles are cut among host threads (weighed by bytes written; one range when
    /// so few bytes that the tiles write one after another on the calling thread).
    spread: Spread,
    /// When no written byte is read and every write reads one contiguous piece of one
    /// source tile, the writes read straight from the tiles: no window is gathered.
    direct: Option<Buckets<DirectWrite>>,
    /// Bytes its windows gather from the tiles, and bytes one run writes.
    copied: (u64, u64),
}

/// A write read straight from tile memory: `bytes` bytes from byte `src` of tile
/// `src_tile` (`ipu * tiles_per_ipu + tile`; [`FILL`]: the fill value written instead) to
/// byte `dst` of the writing tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DirectWrite {
    src_tile: u32,
    src: u32,
    dst: u32,
    bytes: u32,
}

/// The writes of every slot (tile `tiles[slot]`) as copies straight from the tiles holding
/// what they read, when each reads one contiguous piece of one window segment and no byte
/// any write reads is written by the rearrangement (so the bytes read are the ones from
/// before it, as a gathered window's are, whatever order the tiles write in). `tile_count`:
/// the system's tiles.
fn direct_writes(
    tiles: &[usize],
    writes: &Buckets<Write>,
    windows: &[Window],
    size: usize,
    tile_count: usize,
) -> Option<Buckets<DirectWrite>> {
    let mut out = Vec::new();
    let mut reads: Vec<Vec<(usize, usize)>> = vec![Vec::new(); tile_count];
    let mut written: Vec<Vec<(usize, usize)>> = vec![Vec::new(); tile_count];
    for (slot, &tile) in tiles.iter().enumerate() {
        for w in writes.get(slot) {
            let bytes = w.len as usize * size;
            let dst = w.offset as usize;
            written[tile].push((dst, dst + bytes));
            let (src_tile, src) = match w.window {
                FILL => (FILL, 0),
                k => {
                    let segments = &windows.get(k as usize)?.gather;
                    let at = w.at as usize;
                    let i = segments.partition_point(|s| s.at + s.bytes <= at);
                    let s = segments.get(i)?;
                    let inside = s.at <= at && at + bytes <= s.at + s.bytes;
                    if w.step as isize != size as isize || !inside {
                        return None;
                    }
                    let src = s.offset + at - s.at;
                    reads[s.tile].push((src, src + bytes));
                    (u32::try_from(s.tile).ok()?, u32::try_from(src).ok()?)
                }
            };
            let bytes = u32::try_from(bytes).ok()?;
            out.push((
                slot,
                DirectWrite {
                    src_tile,
                    src,
                    dst: w.offset,
                    bytes,
                },
            ));
        }
    }
    for (reads, written) in reads.into_iter().zip(&written) {
        if reads.is_empty() || written.is_empty() {
            continue;
        }
        // Disjoint and sorted: their ends ascend with their starts.
        let merged = merged(reads);
        let overwritten = written.iter().any(|&(a, b)| {
            let i = merged.partition_point(|r| r.1 <= a);
            merged.get(i).is_some_and(|r| r.0 < b)
        });
        if overwritten {
            return None;
        }
    }
    Some(Buckets::new(tiles.len(), out))
}

/// The tiles' memory as one pointer, for direct writes from several host threads.
#[derive(Clone, Copy)]
struct SharedBytes(*mut u8);

// SAFETY: the pointer is only used by `LoadedRearrange::apply_direct`, whose threads write
// disjoint destination bytes (each tile's writes on one thread) and read only bytes no
// write touches (`direct_writes`).
unsafe impl Send for SharedBytes {}
unsafe impl Sync for SharedBytes {}

impl SharedBytes {
    /// The pointer (a method, so closures capture the `Sync` wrapper, not the pointer).
    fn get(&self) -> *mut u8 {
        self.0
    }
}

/// From this many bytes on, a window is gathered by several host threads.
const PARALLEL_GATHER_BYTES: usize = 256 * 1024;

/// Below this many bytes written, a rearrangement runs on one host thread.
const SMALL_BYTES: usize = 64 * 1024;

/// Writes of a later tile whose first lines are asked for ahead of it.
const AHEAD_WRITES: usize = 4;

/// A write's cost beside its elements, in elements, when weighing tiles for the threads.
const WRITE_OVERHEAD: u64 = 16;

/// Host buffers reused from one rearrangement to the next.
#[derive(Default)]
pub(crate) struct Scratch {
    windows: Vec<Vec<u8>>,
}

impl LoadedRearrange {
    /// Prepares `r` (already validated) over `tensors`, on `system`'s tiles.
    pub(crate) fn new(
        system: &System,
        tensors: &[Tensor],
        r: &Rearrange,
    ) -> Result<LoadedRearrange, RuntimeError> {
        LoadedRearrange::with_writes(system, tensors, r, true, &FxHashMap::default())
    }

    /// [`LoadedRearrange::new`]; without `plan_writes` it only gathers (its destination is
    /// left unwritten, see `shortcuts::operand_views`) and keeps no write lists. Sources
    /// in `results` are read from their compute set's batch scratch, not gathered from the
    /// tiles (`shortcuts::kept_results`).
    pub(crate) fn with_writes(
        system: &System,
        tensors: &[Tensor],
        r: &Rearrange,
        plan_writes: bool,
        results: &FxHashMap<TensorId, KeptResult>,
    ) -> Result<LoadedRearrange, RuntimeError> {
        let in_scratch: Vec<Option<&KeptResult>> =
            r.sources.iter().map(|s| results.get(s)).collect();
        let tiles_per_ipu = system.target.tiles_per_ipu;
        let dst = &tensors[r.dst.0 as usize];
        let size = dst.dtype.size();
        let read = read_intervals(r);
        // What `source_ranges` gives, from the intervals already merged: no second walk.
        let range: Vec<(usize, usize)> = read
            .iter()
            .map(|iv| match (iv.first(), iv.last()) {
                (Some(first), Some(last)) => (first.0, last.1),
                _ => (usize::MAX, 0),
            })
            .collect();
        let windows: Vec<Window> = r
            .sources
            .iter()
            .zip(&range)
            .zip(&read)
            .zip(&in_scratch)
            .map(
                |(((s, &(lo, hi)), read), scratch)| match lo < hi && scratch.is_none() {
                    true => Window {
                        gather: restrict(
                            segments(&tensors[s.0 as usize], lo, hi, tiles_per_ipu),
                            read,
                            lo,
                            tensors[s.0 as usize].dtype.size(),
                        ),
                        bytes: (hi - lo) * size,
                    },
                    false => Window {
                        gather: Vec::new(),
                        bytes: 0,
                    },
                },
            )
            .collect();
        let mut slot = vec![u32::MAX; system.num_ipus() * tiles_per_ipu];
        // Writes in run order with their destination tile's slot; bucketed by tile below.
        let mut planned: Vec<(usize, Write)> = Vec::new();
        let mut tiles: Vec<usize> = Vec::new();
        // Per slot: its last write in `planned`, which the next may extend.
        let mut last: Vec<Option<usize>> = Vec::new();
        let mut unfit: Option<String> = None;
        let dst_at = Locator::new(dst);
        // Without writes to plan, the runs need no walk.
        if plan_writes {
            for run in r.runs.iter() {
                destination_pieces(&run, &dst_at, size, |(ipu, tile, offset, n), done| {
                    let t = ipu * tiles_per_ipu + tile;
                    let mut write = |source: Option<(usize, usize, isize)>, offset: u64, n| {
                        if slot[t] == u32::MAX {
                            slot[t] = tiles.len() as u32;
                            tiles.push(t);
                            last.push(None);
                        }
                        let s = slot[t] as usize;
                        match Write::new(source, offset as usize, n) {
                            Ok(w) => match last[s].and_then(|i| planned[i].1.extended(&w, size)) {
                                // Contiguous on the tile and in the window: one write.
                                Some(joined) => planned[last[s].expect("just matched")].1 = joined,
                                None => {
                                    last[s] = Some(planned.len());
                                    planned.push((s, w));
                                }
                            },
                            Err(e) => unfit = unfit.take().or(Some(e)),
                        }
                    };
                    match run.source {
                        RunSource::Fill => write(None, offset, n),
                        RunSource::Tensor { k, start, stride } => {
                            let first = (start as isize + done as isize * stride) as usize;
                            let k = k as usize;
                            match in_scratch[k] {
                                None => write(
                                    Some((k, (first - range[k].0) * size, stride * size as isize)),
                                    offset,
                                    n,
                                ),
                                Some(kept) => {
                                    // Split where the elements leave a row of the scratch.
                                    let mut i = 0;
                                    while i < n {
                                        let e = (first as isize + i as isize * stride) as usize;
                                        let (p0, len, at) = kept.pieces[kept.piece_of(e)];
                                        let m = match stride {
                                            1 => (p0 + len - e).min(n - i),
                                            _ => 1,
                                        };
                                        let from = (at + e - p0) * size;
                                        let at = offset + (i * size) as u64;
                                        write(Some((k, from, size as isize)), at, m);
                                        i += m;
                                    }
                                }
                            }
                        }
                    }
                });
            }
        }
        if let Some(e) = unfit {
            return Err(RuntimeError::InvalidExecutable(format!(
                "rearrangement {}: {e}",
                r.name
            )));
        }
        let written: usize = r.runs.elements() * size;
        let mut weights = vec![0u64; slot.len()];
        for (s, w) in &planned {
            weights[tiles[*s]] += u64::from(w.len) + WRITE_OVERHEAD;
        }
        let spread = Spread::new(&weights, &slot, written < SMALL_BYTES || tiles.len() == 1);
        let writes = Buckets::new(tiles.len(), planned);
        let direct = match plan_writes && in_scratch.iter().all(Option::is_none) {
            true => direct_writes(&tiles, &writes, &windows, size, slot.len()),
            false => None,
        };
        let written = match &direct {
            Some(direct) => direct.all().iter().map(|w| u64::from(w.bytes)).sum(),
            None => (writes.all().iter())
                .map(|w| u64::from(w.len) * size as u64)
                .sum(),
        };
        let gathered = windows.iter().map(|w| w.bytes as u64).sum();
        Ok(LoadedRearrange {
            copied: (gathered, written),
            windows,
            scratch_windows: in_scratch
                .iter()
                .enumerate()
                .filter_map(|(k, kept)| kept.map(|kept| (k, kept.compute_set)))
                .collect(),
            fill: r.fill.clone(),
            writes,
            tiles,
            slot,
            size,
            spread,
            direct,
        })
    }

    /// Bytes one run copies on the host: its windows gathered from the tiles (not those
    /// read from a batch scratch) and its writes, or, when it writes straight from tile to
    /// tile, those bytes once.
    pub(crate) fn host_bytes(&self) -> u64 {
        match self.direct {
            Some(_) => self.copied.1,
            None => self.copied.0 + self.copied.1,
        }
    }

    /// Bytes its windows gather (all a run copies when they are kept and nothing is
    /// written).
    pub(crate) fn gathered_bytes(&self) -> u64 {
        self.copied.0
    }

    /// Bytes in the window gathered from each source.
    pub(crate) fn window_bytes(&self) -> impl Iterator<Item = usize> + '_ {
        self.windows.iter().map(|w| w.bytes)
    }

    /// Copies the window of source `k` out of `memory` into `buf` (at least
    /// [`LoadedRearrange::window_bytes`] long).
    /// A large window is gathered in parallel on `pool`, in chunks of its segments.
    pub(crate) fn gather(
        &self,
        memory: &HostTiles,
        k: usize,
        buf: &mut [u8],
        pool: &rayon::ThreadPool,
    ) {
        self.windows[k].gather(memory, buf, pool);
    }

    /// [`LoadedRearrange::gather`] of an f16 window into f32 values, each segment widened
    /// as it is read (one pass over the window, on every thread).
    pub(crate) fn gather_widened(
        &self,
        memory: &HostTiles,
        k: usize,
        window: &mut [f32],
        pool: &rayon::ThreadPool,
    ) {
        self.windows[k].gather_widened(memory, window, pool);
    }

    /// Writes destination tile `slot`'s share (by index in `tiles`) into `mem`, from the
    /// gathered `windows`.
    fn write_tile(&self, mem: &mut [u8], slot: usize, windows: &[&[u8]]) {
        let writes = self.writes.get(slot);
        write_all(mem, writes, windows, self.size, &self.fill);
    }

    /// The tiles this rearrangement writes (`ipu * tiles_per_ipu + tile`), each with a copy
    /// of `memory`'s bytes for that tile after the writes from `windows`: what the
    /// destination would hold had it been written.
    pub(crate) fn written_tiles(
        &self,
        memory: &HostTiles,
        windows: &[&[u8]],
    ) -> Vec<(usize, Vec<u8>)> {
        (0..self.tiles.len())
            .map(|slot| {
                let t = self.tiles[slot];
                let mut mem = memory[t].to_vec();
                self.write_tile(&mut mem, slot, windows);
                (t, mem)
            })
            .collect()
    }

    /// Carries it out on `memory` (the tiles' memories), tiles in parallel on `pool`;
    /// `results(c)` is compute set `c`'s batch scratch.
    pub(crate) fn apply<'a>(
        &self,
        memory: &mut HostTiles,
        scratch: &'a mut Scratch,
        pool: &rayon::ThreadPool,
        results: impl Fn(usize) -> &'a [u8],
    ) {
        if let Some(direct) = &self.direct {
            self.apply_direct(direct, memory, pool);
            return;
        }
        if scratch.windows.len() < self.windows.len() {
            scratch.windows.resize_with(self.windows.len(), Vec::new);
        }
        for (k, (w, buf)) in self.windows.iter().zip(&mut scratch.windows).enumerate() {
            // Buffers only grow: the segments cover every byte of the window.
            if buf.len() < w.bytes {
                buf.resize(w.bytes, 0);
            }
            self.gather(memory, k, buf, pool);
        }
        let mut windows: Vec<&[u8]> = scratch.windows.iter().map(Vec::as_slice).collect();
        for &(k, cs) in &self.scratch_windows {
            windows[k] = results(cs);
        }
        // A later tile's first destination lines are asked for while this tile writes (see
        // `prefetch`): each tile's writes otherwise start with misses.
        let ahead = |mem: &[u8], s: usize| {
            for w in self.writes.get(s).iter().take(AHEAD_WRITES) {
                let at = w.offset as usize;
                prefetch::lines(mem, at..at + w.len as usize * self.size);
            }
        };
        // Writing cannot fail: the error type is uninhabited.
        let spread = &self.spread;
        let Ok(()) = for_each_active_ahead(memory, &self.slot, spread, pool, ahead, |mem, s| {
            self.write_tile(mem, s, &windows);
            Ok::<(), std::convert::Infallible>(())
        });
    }
}

impl LoadedRearrange {
    /// Carries out a rearrangement whose writes read straight from the tiles
    /// ([`direct_writes`]), each destination tile's writes in order on one host thread.
    fn apply_direct(
        &self,
        direct: &Buckets<DirectWrite>,
        memory: &mut HostTiles,
        pool: &rayon::ThreadPool,
    ) {
        let (base, starts, ends) = memory.raw_parts();
        let base = SharedBytes(base);
        let write_slot = |slot: usize| {
            let tile = self.tiles[slot];
            let dst_len = ends[tile] - starts[tile];
            for w in direct.get(slot) {
                let (dst, bytes) = (w.dst as usize, w.bytes as usize);
                assert!(dst + bytes <= dst_len, "validated: writes lie in the tile");
                // SAFETY: in bounds (asserted); only this thread writes this tile's bytes.
                let to = unsafe { base.get().add(starts[tile] + dst) };
                if w.src_tile == FILL {
                    for e in 0..bytes / self.size {
                        // SAFETY: element `e` lies within the write (in bounds, as above).
                        unsafe {
                            let at = to.add(e * self.size);
                            std::ptr::copy_nonoverlapping(self.fill.as_ptr(), at, self.size);
                        }
                    }
                    continue;
                }
                let (t, src) = (w.src_tile as usize, w.src as usize);
                assert!(
                    src + bytes <= ends[t] - starts[t],
                    "validated: reads lie in the tile"
                );
                // SAFETY: both ranges are in bounds (asserted); no write of this
                // rearrangement touches a byte it reads (`direct_writes`), so the source is
                // not being written by any thread and does not overlap the destination.
                unsafe { copy_bytes(base.get().add(starts[t] + src), to, bytes) };
            }
        };
        // Ranges of tiles of about equal bytes written, as the plain path's.
        for_each_range(&self.spread, pool, |tiles| {
            for t in tiles {
                if self.slot[t] != u32::MAX {
                    write_slot(self.slot[t] as usize);
                }
            }
        });
    }
}

/// Copies `bytes` bytes from `from` to `to`, an element of 2, 4 or 8 bytes inline: a
/// layout change writes one element at a time (the bench CNN's convolution results: 200 704
/// writes of 4 bytes a run), where a call to `memcpy` per write costs more than the bytes.
///
/// # Safety
/// As for [`std::ptr::copy_nonoverlapping`].
#[inline]
unsafe fn copy_bytes(from: *const u8, to: *mut u8, bytes: usize) {
    // SAFETY: as the caller promises, `bytes` bytes at each, unaligned.
    unsafe {
        match bytes {
            2 => to
                .cast::<u16>()
                .write_unaligned(from.cast::<u16>().read_unaligned()),
            4 => to
                .cast::<u32>()
                .write_unaligned(from.cast::<u32>().read_unaligned()),
            8 => to
                .cast::<u64>()
                .write_unaligned(from.cast::<u64>().read_unaligned()),
            _ => std::ptr::copy_nonoverlapping(from, to, bytes),
        }
    }
}

/// Carries out `writes` on a tile's memory `mem` from the gathered `windows` (elements of
/// `size` bytes; `fill`: the fill element). Consecutive columns of a transpose go in bands
/// ([`copy_transposed`]), every other write on its own.
fn write_all(mem: &mut [u8], writes: &[Write], windows: &[&[u8]], size: usize, fill: &[u8]) {
    let mut i = 0;
    while i < writes.len() {
        let w = &writes[i];
        let columns = transposed_columns(&writes[i..], size);
        if columns > 1 {
            copy_transposed(
                mem,
                windows[w.window as usize],
                &writes[i..i + columns],
                size,
            );
            i += columns;
            continue;
        }
        i += 1;
        write_one(mem, w, windows, size, fill);
    }
}

/// Carries out the one write `w` (see [`write_all`]).
fn write_one(mem: &mut [u8], w: &Write, windows: &[&[u8]], size: usize, fill: &[u8]) {
    let dst = &mut mem[w.offset as usize..][..w.len as usize * size];
    match w.window {
        FILL => dst
            .chunks_exact_mut(size)
            .for_each(|e| e.copy_from_slice(fill)),
        k => copy_run(
            dst,
            windows[k as usize],
            w.at as usize,
            w.step as isize,
            size,
        ),
    }
}

/// Element sizes whose transposes are written in bands.
const BANDED: [usize; 4] = [1, 2, 4, 8];

/// How many writes from the first are columns of one transpose: strided reads of one
/// window, each starting an element after the last and written right after it on the tile
/// (at least 1 when the first is strided and its elements are [`BANDED`], 0 otherwise).
fn transposed_columns(writes: &[Write], size: usize) -> usize {
    let Some(first) = writes.first() else {
        return 0;
    };
    if first.window == FILL || first.step as isize == size as isize || !BANDED.contains(&size) {
        return 0;
    }
    let bytes = first.len as u64 * size as u64;
    let column = |(j, w): (usize, &Write)| {
        w.window == first.window
            && w.step == first.step
            && w.len == first.len
            && w.at == first.at + (j * size) as u64
            && w.offset as u64 == first.offset as u64 + j as u64 * bytes
    };
    1 + writes
        .iter()
        .enumerate()
        .skip(1)
        .take_while(|&jw| column(jw))
        .count()
}

/// Carries out `columns` (see [`transposed_columns`]) a band of them at a time: each row of
/// the band is read from the window in one piece and its elements written down the band's
/// columns, so the window is read in order rather than a column at a time.
fn copy_transposed(mem: &mut [u8], window: &[u8], columns: &[Write], size: usize) {
    match size {
        1 => transposed::<1>(mem, window, columns),
        2 => transposed::<2>(mem, window, columns),
        4 => transposed::<4>(mem, window, columns),
        8 => transposed::<8>(mem, window, columns),
        _ => unreachable!("transposed_columns groups elements of 1, 2, 4 or 8 bytes only"),
    }
}

/// [`copy_transposed`] for elements of `N` bytes.
fn transposed<const N: usize>(mem: &mut [u8], window: &[u8], columns: &[Write]) {
    // Sixteen columns: a band's rows are 16 elements of the window, its writes 16 streams.
    const BAND: usize = 16;
    let (len, step) = (columns[0].len as usize, columns[0].step as isize);
    for band in columns.chunks(BAND) {
        let offset = band[0].offset as usize;
        let dst = &mut mem[offset..offset + band.len() * len * N];
        for r in 0..len {
            let at = (band[0].at as isize + r as isize * step) as usize;
            let row = &window[at..at + band.len() * N];
            for (j, e) in row.chunks_exact(N).enumerate() {
                let to = (j * len + r) * N;
                dst[to..to + N].copy_from_slice(e);
            }
        }
    }
}

/// Fills `dst` with the elements of `src` from byte `at`, `step` bytes apart.
fn copy_run(dst: &mut [u8], src: &[u8], at: usize, step: isize, size: usize) {
    if step == size as isize {
        dst.copy_from_slice(&src[at..at + dst.len()]);
        return;
    }
    match size {
        1 => strided::<1>(dst, src, at, step),
        2 => strided::<2>(dst, src, at, step),
        4 => strided::<4>(dst, src, at, step),
        8 => strided::<8>(dst, src, at, step),
        _ => {
            for (i, e) in dst.chunks_exact_mut(size).enumerate() {
                let from = (at as isize + i as isize * step) as usize;
                e.copy_from_slice(&src[from..from + size]);
            }
        }
    }
}

fn strided<const N: usize>(dst: &mut [u8], src: &[u8], at: usize, step: isize) {
    if step == 0 && !dst.is_empty() {
        // One element repeated (a broadcast): read once.
        let x: [u8; N] = src[at..at + N]
            .try_into()
            .expect("a slice of N bytes is an [u8; N]");
        dst.chunks_exact_mut(N).for_each(|e| e.copy_from_slice(&x));
        return;
    }
    for (i, e) in dst.chunks_exact_mut(N).enumerate() {
        let from = (at as isize + i as isize * step) as usize;
        let bytes: [u8; N] = src[from..from + N]
            .try_into()
            .expect("a slice of N bytes is an [u8; N]");
        e.copy_from_slice(&bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::executable::{Run, TensorId};

    #[test]
    fn short_copies_copy_every_byte_and_no_other() {
        let src: Vec<u8> = (1..=100).collect();
        for bytes in 0..=20 {
            for offset in [0, 1, 3] {
                let mut dst = vec![0u8; 100];
                // SAFETY: both ranges lie in their buffers, which are distinct.
                unsafe { copy_bytes(src[7..].as_ptr(), dst[offset..].as_mut_ptr(), bytes) };
                let mut want = vec![0u8; 100];
                want[offset..offset + bytes].copy_from_slice(&src[7..7 + bytes]);
                assert_eq!(dst, want, "{bytes} bytes at {offset}");
            }
        }
    }

    fn segment(tile: usize, offset: usize, at: usize, bytes: usize) -> Segment {
        Segment {
            tile,
            offset,
            at,
            bytes,
        }
    }

    /// Writes carried out together (transposes' columns in bands) leave a tile's memory as
    /// each write carried out on its own does: columns of every element size, forwards and
    /// backwards, more of them than a band and fewer, broken by a fill, by a column of
    /// another window, by one that does not follow, and single strided and contiguous writes.
    #[test]
    fn columns_written_in_bands_are_the_writes_one_by_one() {
        let windows: Vec<Vec<u8>> = (0..2)
            .map(|k| (0..9000).map(|i| ((i * 7 + k * 13) % 251) as u8).collect())
            .collect();
        let windows: Vec<&[u8]> = windows.iter().map(Vec::as_slice).collect();
        for size in [1usize, 2, 3, 4, 8] {
            let w = |window: u32, at: usize, offset: usize, len: u32, step: isize| Write {
                at: (at * size) as u64,
                offset: (offset * size) as u32,
                len,
                step: (step * size as isize) as i32,
                window,
            };
            let mut writes = Vec::new();
            // 37 columns of a [5, 40] block (row step 40), then a fill.
            writes.extend((0..37).map(|j| w(0, 3 + j, j * 5, 5, 40)));
            writes.push(w(FILL, 0, 185, 3, 0));
            // Columns read upwards, one from the other window between them.
            writes.extend((0..5).map(|j| w(1, 900 + j, 188 + j * 4, 4, -30)));
            writes.push(w(0, 905, 208, 4, -30));
            writes.extend((6..20).map(|j| w(1, 900 + j, 188 + j * 4, 4, -30)));
            // A column that does not follow (one element further on), a contiguous write,
            // and a single strided one.
            writes.push(w(1, 921, 268, 4, -30));
            writes.push(w(0, 50, 272, 9, 1));
            writes.push(w(1, 60, 281, 6, 3));
            let fill = vec![0xAB; size];
            let mut together = vec![0u8; 300 * size];
            write_all(&mut together, &writes, &windows, size, &fill);
            let mut one_by_one = vec![0u8; 300 * size];
            for w in &writes {
                write_one(&mut one_by_one, w, &windows, size, &fill);
            }
            assert_eq!(together, one_by_one, "elements of {size} bytes");
            let banded = |n| if BANDED.contains(&size) { n } else { 0 };
            assert_eq!(transposed_columns(&writes, size), banded(37));
            assert_eq!(transposed_columns(&writes[38..], size), banded(5));
        }
    }

    /// Strided runs copy what element-by-element indexing copies: every element size, steps
    /// forwards, backwards and repeating, and runs touching either end of the window.
    #[test]
    fn strided_runs_copy_each_element_from_its_place() {
        let src: Vec<u8> = (0..=255).collect();
        for size in [1, 2, 3, 4, 8] {
            for (at, step) in [(0, 5), (200, -7), (16, 0), (40, 24), (248, -8)] {
                for count in 0..8 {
                    let last = at as isize + (count as isize - 1).max(0) * step * size as isize;
                    if last < 0 || last as usize + size > src.len() || at + size > src.len() {
                        continue;
                    }
                    let mut got = vec![0u8; count * size];
                    copy_run(&mut got, &src, at, step * size as isize, size);
                    let want: Vec<u8> = (0..count)
                        .flat_map(|i| {
                            let from = (at as isize + i as isize * step * size as isize) as usize;
                            src[from..from + size].to_vec()
                        })
                        .collect();
                    assert_eq!(got, want, "size {size}, at {at}, step {step}, {count}");
                }
            }
        }
    }

    /// A window from element 10 over two tiles' segments (elements 10..20 and 20..30, f32),
    /// read at 12..14 and 18..25: only those bytes are gathered, from the right tiles.
    #[test]
    fn restricted_segments_hold_exactly_the_elements_read() {
        let segments = vec![segment(0, 100, 0, 40), segment(1, 0, 40, 40)];
        let got = restrict(segments, &[(12, 14), (18, 25)], 10, 4);
        let want = [(0, 108, 8, 8), (0, 132, 32, 8), (1, 0, 40, 20)];
        let got: Vec<_> = got
            .iter()
            .map(|s| (s.tile, s.offset, s.at, s.bytes))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn writes_continuing_on_the_tile_and_in_the_window_join() {
        let w = |window, at, offset, len, step| Write {
            at,
            offset,
            len,
            step,
            window,
        };
        let first = w(1, 40, 8, 3, 4);
        let joined = first.extended(&w(1, 52, 20, 2, 4), 4).expect("continues");
        assert_eq!((joined.at, joined.offset, joined.len), (40, 8, 5));
        // A gap on the tile, a gap in the window, another window, a strided read: apart.
        assert!(first.extended(&w(1, 52, 24, 2, 4), 4).is_none());
        assert!(first.extended(&w(1, 56, 20, 2, 4), 4).is_none());
        assert!(first.extended(&w(2, 52, 20, 2, 4), 4).is_none());
        assert!(w(1, 40, 8, 3, 8).extended(&w(1, 64, 20, 2, 8), 4).is_none());
        // Fill writes join when they continue on the tile.
        let fill = w(FILL, 0, 0, 2, 0).extended(&w(FILL, 0, 8, 1, 0), 4);
        assert_eq!(fill.map(|f| f.len), Some(3));
    }

    #[test]
    fn read_intervals_merge_overlapping_and_strided_runs() {
        let run = |start, stride, len| Run {
            source: RunSource::Tensor {
                k: 0,
                start,
                stride,
            },
            dst_start: 0,
            len,
        };
        let r = Rearrange {
            name: "r".into(),
            dst: TensorId(0),
            sources: vec![TensorId(1)],
            runs: vec![run(20, 1, 5), run(0, 1, 4), run(9, -3, 3), run(24, 1, 2)].into(),
            fill: Vec::new(),
        };
        // 0..4, 3..10 (9, 6, 3) merge; 20..25 and 24..26 merge.
        assert_eq!(read_intervals(&r), vec![vec![(0, 10), (20, 26)]]);
    }

    #[test]
    fn writes_reading_one_piece_of_a_tile_read_it_directly_unless_a_write_overwrites_a_read() {
        let w = |window, at, offset, len| Write {
            at,
            offset,
            len,
            step: 4,
            window,
        };
        // Window 0: 8 elements on tile 3 at byte 100, then 8 on tile 5 at byte 0.
        let windows = vec![Window {
            gather: vec![segment(3, 100, 0, 32), segment(5, 0, 32, 32)],
            bytes: 64,
        }];
        let tiles = [3, 5];
        let plan = |writes: Vec<(usize, Write)>| {
            direct_writes(&tiles, &Buckets::new(2, writes), &windows, 4, 8)
                .map(|b| (b.get(0).to_vec(), b.get(1).to_vec()))
        };
        let direct = |src_tile, src, dst, bytes| DirectWrite {
            src_tile,
            src,
            dst,
            bytes,
        };
        let fill = Write {
            window: FILL,
            step: 0,
            ..w(0, 0, 300, 2)
        };
        assert_eq!(
            plan(vec![
                (0, w(0, 8, 200, 4)),
                (0, fill),
                (1, w(0, 36, 64, 3)),
                (1, w(0, 0, 80, 2))
            ]),
            Some((
                vec![direct(3, 108, 200, 16), direct(FILL, 0, 300, 8)],
                vec![direct(5, 4, 64, 12), direct(3, 100, 80, 8)]
            ))
        );
        // Crossing a segment's end, reading strided: through the window.
        assert_eq!(plan(vec![(0, w(0, 24, 200, 4))]), None);
        assert_eq!(
            plan(vec![(
                0,
                Write {
                    step: 8,
                    ..w(0, 0, 200, 2)
                }
            )]),
            None
        );
        // A write over bytes a write reads, on its own tile or another's: the window keeps
        // the old bytes.
        assert_eq!(
            plan(vec![(0, w(0, 0, 200, 2)), (0, w(0, 16, 104, 2))]),
            None
        );
        assert_eq!(
            plan(vec![(1, w(0, 40, 200, 2)), (0, w(0, 0, 100, 1))]),
            None
        );
        assert_eq!(plan(vec![(0, w(0, 36, 2, 2)), (1, w(0, 16, 4, 2))]), None);
        assert!(plan(vec![(0, w(0, 0, 200, 2)), (0, w(0, 16, 132, 2))]).is_some());
    }
}
