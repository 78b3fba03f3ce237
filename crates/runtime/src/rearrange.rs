//! Carrying out a rearrangement (or a copy) on the IPU Model's tile memories.
//!
//! What the exchange delivers does not depend on which tile holds which element; only its
//! cost does (see [`crate::exchange`], computed once at load). So the host gathers the
//! window of each source the runs read into one contiguous buffer, applies the runs there,
//! and scatters the destination to its tiles: the work grows with the bytes and the runs,
//! not with the pieces that cross tiles (a transpose of a tensor spread over every tile
//! has one piece per element). Every source byte is read before any is written, so a
//! destination may overlap its sources.

use crate::exchange::CopyCost;
use crate::executable::{Rearrange, RunSource, Tensor};

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

/// A run in byte terms: `len` elements written from byte `dst` of the destination buffer.
#[derive(Debug, Clone, Copy)]
struct ByteRun {
    /// `(window, first byte in it, byte step)`, or `None` for the fill value.
    source: Option<(usize, usize, isize)>,
    dst: usize,
    len: usize,
}

/// The source elements a rearrangement reads, gathered into one buffer.
struct Window {
    gather: Vec<Segment>,
    bytes: usize,
}

/// A rearrangement ready to run, with its (static) cost.
pub(crate) struct LoadedRearrange {
    /// A name for profiles.
    pub name: String,
    /// What it costs on the device.
    pub cost: CopyCost,
    windows: Vec<Window>,
    runs: Vec<ByteRun>,
    fill: Vec<u8>,
    scatter: Vec<Segment>,
    dst_bytes: usize,
    /// The destination is exactly this window: scatter it without applying runs.
    direct: Option<usize>,
    size: usize,
}

/// Host buffers reused from one rearrangement to the next.
#[derive(Default)]
pub(crate) struct Scratch {
    windows: Vec<Vec<u8>>,
    dst: Vec<u8>,
}

impl LoadedRearrange {
    /// Prepares `r` (already validated) over `tensors`.
    pub(crate) fn new(
        tensors: &[Tensor],
        r: &Rearrange,
        tiles_per_ipu: usize,
        cost: CopyCost,
    ) -> LoadedRearrange {
        let dst = &tensors[r.dst.0 as usize];
        let size = dst.dtype.size();
        // The elements each source's runs read: lo..hi.
        let mut range = vec![(usize::MAX, 0usize); r.sources.len()];
        for run in &r.runs {
            if let (RunSource::Tensor { k, start, stride }, true) = (run.source, run.len > 0) {
                let last = (start as isize + (run.len as isize - 1) * stride) as usize;
                let w = &mut range[k as usize];
                *w = (w.0.min(start.min(last)), w.1.max(start.max(last) + 1));
            }
        }
        let windows: Vec<Window> = r
            .sources
            .iter()
            .zip(&range)
            .map(|(s, &(lo, hi))| {
                let t = &tensors[s.0 as usize];
                if lo >= hi {
                    return Window {
                        gather: Vec::new(),
                        bytes: 0,
                    };
                }
                Window {
                    gather: segments(t, lo, hi, tiles_per_ipu),
                    bytes: (hi - lo) * size,
                }
            })
            .collect();
        let runs: Vec<ByteRun> = r
            .runs
            .iter()
            .map(|run| ByteRun {
                source: match run.source {
                    RunSource::Fill => None,
                    RunSource::Tensor { k, start, stride } => Some((
                        k as usize,
                        (start - range[k as usize].0) * size,
                        stride * size as isize,
                    )),
                },
                dst: run.dst_start * size,
                len: run.len,
            })
            .collect();
        let dst_bytes = dst.elements * size;
        let direct = match runs[..] {
            [
                ByteRun {
                    source: Some((k, 0, step)),
                    dst: 0,
                    len,
                },
            ] if step == size as isize && windows[k].bytes == dst_bytes && len > 0 => Some(k),
            _ => None,
        };
        LoadedRearrange {
            name: r.name.clone(),
            cost,
            windows,
            runs,
            fill: r.fill.clone(),
            scatter: segments(dst, 0, dst.elements, tiles_per_ipu),
            dst_bytes,
            direct,
            size,
        }
    }

    /// Carries it out on `memory` (one byte vector per tile).
    pub(crate) fn apply(&self, memory: &mut [Vec<u8>], scratch: &mut Scratch) {
        scratch
            .windows
            .resize_with(self.windows.len().max(scratch.windows.len()), Vec::new);
        for (w, buf) in self.windows.iter().zip(&mut scratch.windows) {
            buf.resize(w.bytes, 0);
            for s in &w.gather {
                buf[s.at..s.at + s.bytes]
                    .copy_from_slice(&memory[s.tile][s.offset..s.offset + s.bytes]);
            }
        }
        let out: &[u8] = match self.direct {
            Some(k) => &scratch.windows[k],
            None => {
                scratch.dst.resize(self.dst_bytes, 0);
                for run in &self.runs {
                    let dst = &mut scratch.dst[run.dst..run.dst + run.len * self.size];
                    match run.source {
                        None => dst
                            .chunks_exact_mut(self.size)
                            .for_each(|e| e.copy_from_slice(&self.fill)),
                        Some((k, at, step)) => {
                            copy_run(dst, &scratch.windows[k], at, step, self.size)
                        }
                    }
                }
                &scratch.dst
            }
        };
        for s in &self.scatter {
            memory[s.tile][s.offset..s.offset + s.bytes]
                .copy_from_slice(&out[s.at..s.at + s.bytes]);
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
    for (i, e) in dst.chunks_exact_mut(N).enumerate() {
        let from = (at as isize + i as isize * step) as usize;
        let bytes: [u8; N] = src[from..from + N]
            .try_into()
            .expect("a slice of N bytes is an [u8; N]");
        e.copy_from_slice(&bytes);
    }
}
