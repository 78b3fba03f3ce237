//! The tiles' memories on the host ([`HostTiles`]: one allocation holding every tile's
//! bytes, sized by the model's layout), and reading or writing a tensor through its
//! mapping. Every other way the engine reads a tensor (from a shortcut's host buffer) must
//! agree with these.

use crate::error::RuntimeError;
use crate::program::executable::{Executable, Tensor, TensorId};

/// The tiles' memories on the host: one zeroed allocation holding every tile's bytes (a
/// large one is mapped fresh from the OS, so pages a run never touches are never cleared;
/// a vector per tile was cleared byte by byte whenever the allocator reused freed memory,
/// a quarter of a 2048³ matmul's load), each tile's at a 64-byte boundary.
pub(crate) struct HostTiles {
    bytes: Vec<u8>,
    /// Tile `t`'s bytes are `bytes[starts[t]..ends[t]]`.
    starts: Vec<usize>,
    ends: Vec<usize>,
}

/// Huge pages' size on x86-64 and aarch64 Linux.
#[cfg(target_os = "linux")]
const HUGE_PAGE: usize = 2 << 20;

/// Asks Linux to back the 2 MB-aligned part of `bytes` with transparent huge pages (where
/// they are enabled `madvise`, as on our CI machines). A step reads or writes a few
/// hundred bytes on each of hundreds of tiles, every tile's on its own 4 KB page of tens of
/// MB: with small pages most of those touches miss the TLB. The transformer's and
/// encoder's runs took 3-7 % less with the advice (alternated A/B runs in two minutes; the
/// CNN's and MLP's, whose tiles hold less, within noise); it changes nothing a run
/// computes. Ignored where refused.
#[cfg(target_os = "linux")]
fn advise_huge_pages(bytes: &[u8]) {
    let start = bytes.as_ptr() as usize;
    let lo = start.next_multiple_of(HUGE_PAGE);
    let hi = (start + bytes.len()) / HUGE_PAGE * HUGE_PAGE;
    if hi > lo {
        // SAFETY: `lo..hi` lies inside `bytes`' allocation; the advice changes how its pages
        // are backed, never their contents.
        unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_HUGEPAGE) };
    }
}

/// Elsewhere the pages stay as the allocator gives them.
#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_bytes: &[u8]) {}

impl HostTiles {
    /// Zeroed memories of the given sizes, in tile order.
    pub(crate) fn zeroed(sizes: impl IntoIterator<Item = usize>) -> HostTiles {
        let (mut starts, mut ends) = (Vec::new(), Vec::new());
        let mut at = 0;
        for size in sizes {
            starts.push(at);
            ends.push(at + size);
            at = (at + size).next_multiple_of(64);
        }
        let bytes = vec![0u8; at];
        advise_huge_pages(&bytes);
        HostTiles {
            bytes,
            starts,
            ends,
        }
    }

    /// Number of tiles.
    pub(crate) fn len(&self) -> usize {
        self.starts.len()
    }

    /// The allocation's first byte and each tile's `starts` and `ends` in it, for work that
    /// proves its own disjointness ([`crate::exec::copy`]'s direct writes).
    pub(crate) fn raw_parts(&mut self) -> (*mut u8, &[usize], &[usize]) {
        (self.bytes.as_mut_ptr(), &self.starts, &self.ends)
    }

    /// The tiles cut at `bounds` (ascending tile numbers from 0 to [`HostTiles::len`]) into
    /// ranges that can be changed at once (in parallel): each range's tiles lie together in
    /// the one allocation, so no per-tile slices are built (a parallel step would build
    /// 1 472 of them, active or not).
    pub(crate) fn ranges_mut(&mut self, bounds: &[usize]) -> Vec<TileRange<'_>> {
        debug_assert!(
            bounds
                .windows(2)
                .all(|w| w[0] <= w[1] && w[1] <= self.len())
        );
        let total = self.bytes.len();
        let (starts, ends) = (&self.starts, &self.ends);
        let (mut rest, mut at) = (self.bytes.as_mut_slice(), 0);
        let mut ranges = Vec::with_capacity(bounds.len());
        for w in bounds.windows(2) {
            let end = starts.get(w[1]).copied().unwrap_or(total);
            let (bytes, tail) = std::mem::take(&mut rest).split_at_mut(end - at);
            ranges.push(TileRange {
                bytes,
                base: at,
                tiles: w[0]..w[1],
                starts,
                ends,
            });
            (rest, at) = (tail, end);
        }
        ranges
    }
}

/// Consecutive tiles of a [`HostTiles`] ([`HostTiles::ranges_mut`]), to change on one thread.
pub(crate) struct TileRange<'a> {
    /// The range's bytes, from byte `base` of the whole allocation.
    bytes: &'a mut [u8],
    base: usize,
    /// The tiles in the range.
    pub tiles: std::ops::Range<usize>,
    starts: &'a [usize],
    ends: &'a [usize],
}

impl TileRange<'_> {
    /// Tile `t`'s memory (`t` in [`TileRange::tiles`]).
    pub(crate) fn tile(&mut self, t: usize) -> &mut [u8] {
        debug_assert!(self.tiles.contains(&t), "tile {t} of {:?}", self.tiles);
        &mut self.bytes[self.starts[t] - self.base..self.ends[t] - self.base]
    }
}

impl std::ops::Index<usize> for HostTiles {
    type Output = [u8];

    fn index(&self, t: usize) -> &[u8] {
        &self.bytes[self.starts[t]..self.ends[t]]
    }
}

impl std::ops::IndexMut<usize> for HostTiles {
    fn index_mut(&mut self, t: usize) -> &mut [u8] {
        &mut self.bytes[self.starts[t]..self.ends[t]]
    }
}

/// The tiles' memories, each as long as `extents` (what [`crate::model::layout::tile_extents`] gives) says its
/// tensors span, with every tensor's initial contents written.
pub(crate) fn allocate(exe: &Executable, extents: &[u64]) -> HostTiles {
    let mut memory = HostTiles::zeroed(extents.iter().map(|&b| b as usize));
    for (i, t) in exe.tensors.iter().enumerate() {
        if let Some(init) = &t.init {
            write(exe, &mut memory, TensorId(i as u32), init);
        }
    }
    memory
}

/// `t`'s bytes in element order, read from the tiles (`at(tile)` gives a tile's memory).
pub(crate) fn read<'m>(exe: &Executable, t: &Tensor, at: impl Fn(usize) -> &'m [u8]) -> Vec<u8> {
    let size = t.dtype.size();
    let tiles = exe.target.tiles_per_ipu;
    let mut out = vec![0u8; t.elements * size];
    for iv in &t.mapping {
        let mem = at(iv.ipu * tiles + iv.tile);
        let from = iv.offset as usize;
        out[iv.start * size..(iv.start + iv.len) * size]
            .copy_from_slice(&mem[from..from + iv.len * size]);
    }
    out
}

/// Writes tensor `id`'s bytes (element order, exactly its size) to the tiles.
pub(crate) fn write(exe: &Executable, memory: &mut HostTiles, id: TensorId, bytes: &[u8]) {
    let t = &exe.tensors[id.0 as usize];
    let size = t.dtype.size();
    let tiles = exe.target.tiles_per_ipu;
    for iv in &t.mapping {
        let mem = &mut memory[iv.ipu * tiles + iv.tile];
        let at = iv.offset as usize;
        mem[at..at + iv.len * size]
            .copy_from_slice(&bytes[iv.start * size..(iv.start + iv.len) * size]);
    }
}

/// Tensors of at least this many bytes are written by [`write_parallel`] on several
/// threads (below it, starting them costs more than the copies).
const PARALLEL_WRITE_BYTES: usize = 256 * 1024;

/// How [`write_parallel`] cuts a tensor's writes among host threads: planned once per
/// tensor (sorting a stacked weight's 17 664 intervals took as long as writing them, every
/// run).
#[derive(Debug)]
pub(crate) struct WritePlan {
    /// The tensor's intervals (indices in its mapping) in tile order.
    order: Vec<u32>,
    /// Range `i` holds tiles `bounds[i]..bounds[i + 1]`.
    bounds: Vec<usize>,
    /// Range `i` writes `order[cuts[i]..cuts[i + 1]]`.
    cuts: Vec<usize>,
}

impl WritePlan {
    /// The ranges of about equal bytes, twice as many as `threads`, that tensor `id`'s
    /// writes are cut into over `tiles` tile memories; `None` when it is written on one
    /// thread (under [`PARALLEL_WRITE_BYTES`], or one thread).
    pub(crate) fn new(
        exe: &Executable,
        id: TensorId,
        threads: usize,
        tiles: usize,
    ) -> Option<Self> {
        let t = &exe.tensors[id.0 as usize];
        let size = t.dtype.size();
        let bytes = t.elements * size;
        if bytes < PARALLEL_WRITE_BYTES || threads < 2 {
            return None;
        }
        let per_ipu = exe.target.tiles_per_ipu;
        let tile = |i: u32| {
            let iv = &t.mapping[i as usize];
            iv.ipu * per_ipu + iv.tile
        };
        // Each interval by its tile (`ipu * tiles + tile`), in tile order.
        let mut order: Vec<u32> = (0..t.mapping.len() as u32).collect();
        order.sort_unstable_by_key(|&i| (tile(i), t.mapping[i as usize].offset));
        // Cut between tiles once a range holds its share of the bytes.
        let share = bytes.div_ceil(2 * threads);
        let (mut bounds, mut cuts) = (vec![0], vec![0]);
        let mut held = 0;
        for (k, w) in order.windows(2).enumerate() {
            held += t.mapping[w[0] as usize].len * size;
            if held >= share && tile(w[1]) != tile(w[0]) {
                bounds.push(tile(w[1]));
                cuts.push(k + 1);
                held = 0;
            }
        }
        bounds.push(tiles);
        cuts.push(order.len());
        Some(WritePlan {
            order,
            bounds,
            cuts,
        })
    }
}

/// [`write`] with the tiles cut into ranges of about equal bytes (`plan`, for tensor `id`),
/// written in parallel on `pool`: a stream's tensor spread over a thousand tiles is a
/// thousand small copies to places far apart, which one thread does at a fraction of the
/// memory's speed (the bench encoder streamed 7.5 ms a run).
pub(crate) fn write_parallel(
    exe: &Executable,
    memory: &mut HostTiles,
    (id, plan): (TensorId, &WritePlan),
    bytes: &[u8],
    pool: &rayon::ThreadPool,
) {
    use rayon::prelude::*;
    let t = &exe.tensors[id.0 as usize];
    let size = t.dtype.size();
    let per_ipu = exe.target.tiles_per_ipu;
    let parts: Vec<(TileRange, &[u32])> = (memory.ranges_mut(&plan.bounds).into_iter())
        .zip(plan.cuts.windows(2))
        .map(|(range, cut)| (range, &plan.order[cut[0]..cut[1]]))
        .collect();
    pool.install(|| {
        parts.into_par_iter().for_each(|(mut range, part)| {
            for &i in part {
                let iv = &t.mapping[i as usize];
                let at = iv.offset as usize;
                range.tile(iv.ipu * per_ipu + iv.tile)[at..at + iv.len * size]
                    .copy_from_slice(&bytes[iv.start * size..(iv.start + iv.len) * size]);
            }
        })
    });
}

/// Checks that `bytes` are exactly tensor `t`'s size.
pub(crate) fn check_size(t: &Tensor, bytes: usize) -> Result<(), RuntimeError> {
    let want = t.elements * t.dtype.size();
    match bytes == want {
        true => Ok(()),
        false => Err(RuntimeError::Run(format!(
            "tensor {} holds {want} bytes, {bytes} were given",
            t.name
        ))),
    }
}

/// Bytes of f32 host buffers, to gather into and read from.
pub(crate) fn f32_bytes(v: &[f32]) -> &[u8] {
    // SAFETY: the bytes of `v` are initialised and u8 has no alignment or validity
    // requirements; the length covers exactly `v`'s elements.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

/// Bytes of f32 host buffers, to write into.
pub(crate) fn f32_bytes_mut(v: &mut [f32]) -> &mut [u8] {
    // SAFETY: as `f32_bytes`; any bytes written form a valid f32 (every bit pattern is one).
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

#[cfg(test)]
mod tests {
    use super::HostTiles;

    /// Large memories (advised huge pages) start zeroed and keep what is written, advised
    /// again or not.
    #[test]
    fn advised_memories_keep_their_bytes() {
        let mut tiles = HostTiles::zeroed([3 << 20, 5 << 20, 100]);
        assert!((0..3).all(|t| tiles[t].iter().all(|&b| b == 0)));
        for t in 0..3 {
            let len = tiles[t].len();
            for (i, b) in tiles[t].iter_mut().enumerate() {
                *b = (i * 31 + t + len) as u8;
            }
        }
        super::advise_huge_pages(&tiles.bytes);
        for t in 0..3 {
            let len = tiles[t].len();
            let kept = tiles[t].iter().enumerate();
            assert!(
                kept.into_iter()
                    .all(|(i, &b)| b == (i * 31 + t + len) as u8)
            );
        }
    }

    /// Written in parallel, a tensor's bytes land where [`super::write`] puts them: pieces
    /// out of tile order, several on one tile, tiles between without any, below and above
    /// the size written in parallel, on two IPUs.
    #[test]
    fn parallel_writes_match_serial_ones() {
        use crate::program::builder::ExecutableBuilder;
        use codegen::DType;
        let target = crate::Target::ipu2().with_tiles_per_ipu(64);
        let mut b = ExecutableBuilder::new(target, 2);
        let mut pieces = Vec::new();
        for k in 0..300usize {
            let tile = (k * 37) % 64;
            if tile % 5 != 3 {
                pieces.push((k % 2, tile, 400 + k % 7));
            }
        }
        let big = b.tensor("big", DType::F32, &pieces);
        let small = b.tensor("small", DType::F32, &pieces[..20]);
        let exe = b.finish(crate::program::executable::Program::Sequence(Vec::new()));
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        let extents = crate::model::layout::tile_extents(&exe);
        for id in [big, small] {
            let t = &exe.tensors[id.0 as usize];
            let bytes: Vec<u8> = (0..t.elements * 4).map(|i| (i * 7 % 251) as u8).collect();
            let mut serial = super::allocate(&exe, &extents);
            let mut parallel = super::allocate(&exe, &extents);
            super::write(&exe, &mut serial, id, &bytes);
            let plan = super::WritePlan::new(&exe, id, 3, parallel.len());
            assert_eq!(plan.is_some(), id == big, "only the big tensor is cut");
            match plan {
                Some(plan) => {
                    assert_eq!(plan.bounds.len(), plan.cuts.len());
                    assert!(plan.bounds.len() > 3, "{plan:?}");
                    super::write_parallel(&exe, &mut parallel, (id, &plan), &bytes, &pool)
                }
                None => super::write(&exe, &mut parallel, id, &bytes),
            }
            for tile in 0..serial.len() {
                assert_eq!(serial[tile], parallel[tile], "{} tile {tile}", t.name);
            }
            assert_eq!(super::read(&exe, t, |tile| &parallel[tile]), bytes);
        }
        assert!(exe.tensors[big.0 as usize].elements * 4 >= super::PARALLEL_WRITE_BYTES);
    }

    /// A range's tiles are the tiles `HostTiles` indexes, whatever the cuts: empty ranges,
    /// tiles of no bytes, the last range ending at the last tile.
    #[test]
    fn ranges_hold_the_tiles_they_name() {
        let sizes = [3, 0, 70, 1, 64, 0, 5];
        let mut memory = HostTiles::zeroed(sizes);
        for bounds in [
            vec![0, 7],
            vec![0, 2, 2, 5, 7],
            vec![0, 1, 2, 3, 4, 5, 6, 7],
        ] {
            for mut range in memory.ranges_mut(&bounds) {
                for t in range.tiles.clone() {
                    let tile = range.tile(t);
                    assert_eq!(tile.len(), sizes[t]);
                    tile.iter_mut().for_each(|b| *b = *b + t as u8 + 1);
                }
            }
        }
        for (t, &size) in sizes.iter().enumerate() {
            assert_eq!(memory[t], vec![3 * (t as u8 + 1); size], "tile {t}");
        }
    }
}
