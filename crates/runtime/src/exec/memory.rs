//! The tiles' memories on the host ([`HostTiles`]: one allocation holding every tile's
//! bytes, sized by the model's layout), and reading or writing a tensor through its
//! mapping. Every other way the engine reads a tensor (from a shortcut's host buffer) must
//! agree with these.

use crate::error::RuntimeError;
use crate::model::layout::tile_extents;
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
        HostTiles {
            bytes: vec![0u8; at],
            starts,
            ends,
        }
    }

    /// Number of tiles.
    pub(crate) fn len(&self) -> usize {
        self.starts.len()
    }

    /// Every tile's memory, to change several at once (in parallel).
    pub(crate) fn tiles_mut(&mut self) -> Vec<&mut [u8]> {
        let mut tiles = Vec::with_capacity(self.len());
        let (mut rest, mut at) = (self.bytes.as_mut_slice(), 0);
        for (&start, &end) in self.starts.iter().zip(&self.ends) {
            let (_, from) = std::mem::take(&mut rest).split_at_mut(start - at);
            let (tile, after) = from.split_at_mut(end - start);
            tiles.push(tile);
            (rest, at) = (after, end);
        }
        tiles
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

/// The tiles' memories, as long as the model says each tile's tensors span, with every
/// tensor's initial contents written.
pub(crate) fn allocate(exe: &Executable) -> HostTiles {
    let mut memory = HostTiles::zeroed(tile_extents(exe).into_iter().map(|b| b as usize));
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
