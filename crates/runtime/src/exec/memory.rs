//! The tiles' memories on the host: one byte vector per tile, sized by the model's layout,
//! and reading or writing a tensor through its mapping. Every other way the engine reads a
//! tensor (from a shortcut's host buffer) must agree with these.

use crate::error::RuntimeError;
use crate::model::layout::tile_extents;
use crate::program::executable::{Executable, Tensor, TensorId};

/// One byte vector per tile (`ipu * tiles_per_ipu + tile`), as long as the model says the
/// tile's tensors span, with every tensor's initial contents written.
pub(crate) fn allocate(exe: &Executable) -> Vec<Vec<u8>> {
    let mut memory: Vec<Vec<u8>> = tile_extents(exe)
        .into_iter()
        .map(|bytes| vec![0u8; bytes as usize])
        .collect();
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
pub(crate) fn write(exe: &Executable, memory: &mut [Vec<u8>], id: TensorId, bytes: &[u8]) {
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
