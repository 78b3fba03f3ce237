//! The executable's two bulkiest parts packed by hand: compute sets (tens of thousands of
//! vertices, whose kernels repeat on every tile: each distinct kernel is stored once) and
//! rearrangements (hundreds of thousands of element runs), as LEB128 numbers. Reading them
//! back allocates every vector at its final size; through serde the encoder's 800,000 runs
//! took 27 ms to decode, packed they take a few.

use super::StoreError;
use codegen::KernelSpec;
use runtime::{
    CodeletId, CodeletVertex, ComputeSet, Rearrange, Region, Run, RunBlock, RunSource, Runs,
    TensorId, Vertex,
};
use std::collections::HashMap;
use std::sync::Arc;

/// Packs numbers and strings.
#[derive(Default)]
pub(super) struct Writer(pub Vec<u8>);

impl Writer {
    fn uint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn int(&mut self, v: i64) {
        self.uint(((v << 1) ^ (v >> 63)) as u64);
    }

    fn str(&mut self, s: &str) {
        self.uint(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
    }

    fn regions(&mut self, regions: &[Region]) {
        self.uint(regions.len() as u64);
        for r in regions {
            self.uint(u64::from(r.tensor.0));
            self.uint(r.start as u64);
            self.uint(r.len as u64);
        }
    }
}

/// Unpacks what [`Writer`] packed.
pub(super) struct Reader<'a> {
    bytes: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub(super) fn new(bytes: &'a [u8], what: &'static str) -> Reader<'a> {
        Reader { bytes, what }
    }

    fn bad(&self, why: &str) -> StoreError {
        StoreError::Undecodable(format!("the {}: {why}", self.what))
    }

    fn uint(&mut self) -> Result<u64, StoreError> {
        let mut v = 0u64;
        for (i, &b) in self.bytes.iter().enumerate().take(10) {
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                self.bytes = &self.bytes[i + 1..];
                return Ok(v);
            }
        }
        Err(self.bad("a number runs past its end"))
    }

    fn usize(&mut self) -> Result<usize, StoreError> {
        let v = self.uint()?;
        usize::try_from(v).map_err(|_| self.bad("a number too large for this host"))
    }

    fn u32(&mut self) -> Result<u32, StoreError> {
        let v = self.uint()?;
        u32::try_from(v).map_err(|_| self.bad("an index past 32 bits"))
    }

    fn int(&mut self) -> Result<i64, StoreError> {
        let v = self.uint()?;
        Ok((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    /// A count of items each at least `min_bytes` long: bounded by the bytes left, so a
    /// forged count cannot make a huge allocation.
    fn count(&mut self, min_bytes: usize) -> Result<usize, StoreError> {
        let n = self.usize()?;
        if n.saturating_mul(min_bytes) > self.bytes.len() {
            return Err(self.bad("a count larger than the bytes left"));
        }
        Ok(n)
    }

    fn str(&mut self) -> Result<String, StoreError> {
        let n = self.count(1)?;
        let (s, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        String::from_utf8(s.to_vec()).map_err(|_| self.bad("a name that is not UTF-8"))
    }

    /// A list of regions (a vertex's `Regions` or a codelet vertex's vector).
    fn regions<C: Default + Extend<Region>>(&mut self) -> Result<C, StoreError> {
        let n = self.count(3)?;
        let mut out = C::default();
        for _ in 0..n {
            let region = Region {
                tensor: TensorId(self.u32()?),
                start: self.usize()?,
                len: self.usize()?,
            };
            out.extend([region]);
        }
        Ok(out)
    }

    pub(super) fn finish(self) -> Result<(), StoreError> {
        match self.bytes.len() {
            0 => Ok(()),
            n => Err(self.bad(&format!("{n} bytes left over"))),
        }
    }
}

/// The compute sets packed, and their distinct kernels in order of first use.
pub(super) fn pack_compute_sets(sets: &[ComputeSet]) -> (Vec<u8>, Vec<KernelSpec>) {
    let mut w = Writer::default();
    let mut kernels: Vec<KernelSpec> = Vec::new();
    let mut index: HashMap<&KernelSpec, u64> = HashMap::new();
    // A kernel's vertices share its `Arc`: its address finds it without hashing the whole
    // expression tree again (the sets are borrowed, so no address is reused meanwhile).
    let mut by_address: HashMap<*const KernelSpec, u64> = HashMap::new();
    w.uint(sets.len() as u64);
    for set in sets {
        w.str(&set.name);
        w.uint(set.vertices.len() as u64);
        for v in &set.vertices {
            let k = *by_address.entry(Arc::as_ptr(&v.kernel)).or_insert_with(|| {
                *index.entry(&v.kernel).or_insert_with(|| {
                    kernels.push(KernelSpec::clone(&v.kernel));
                    kernels.len() as u64 - 1
                })
            });
            w.uint(k);
            w.uint(v.ipu as u64);
            w.uint(v.tile as u64);
            w.regions(&v.inputs);
            w.regions(&v.outputs);
            w.uint(v.run_length as u64);
            w.uint(v.grain as u64);
        }
        w.uint(set.codelet_vertices.len() as u64);
        for v in &set.codelet_vertices {
            w.uint(u64::from(v.codelet.0));
            w.uint(v.ipu as u64);
            w.uint(v.tile as u64);
            w.regions(&v.inputs);
            w.regions(&v.outputs);
        }
    }
    (w.0, kernels)
}

/// The compute sets [`pack_compute_sets`] packed, with its kernels.
pub(super) fn unpack_compute_sets(
    r: &mut Reader<'_>,
    kernels: &[KernelSpec],
) -> Result<Vec<ComputeSet>, StoreError> {
    // Every vertex of one kernel shares it again.
    let kernels: Vec<Arc<KernelSpec>> = kernels.iter().cloned().map(Arc::new).collect();
    let n = r.count(3)?;
    let mut sets = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.str()?;
        let count = r.count(7)?;
        let mut vertices = Vec::with_capacity(count);
        for _ in 0..count {
            let k = r.usize()?;
            let kernel = kernels
                .get(k)
                .map(Arc::clone)
                .ok_or_else(|| r.bad(&format!("kernel {k} of {}", kernels.len())))?;
            vertices.push(Vertex {
                kernel,
                ipu: r.usize()?,
                tile: r.usize()?,
                inputs: r.regions()?,
                outputs: r.regions()?,
                run_length: r.usize()?,
                grain: r.usize()?,
            });
        }
        let count = r.count(5)?;
        let mut codelet_vertices = Vec::with_capacity(count);
        for _ in 0..count {
            codelet_vertices.push(CodeletVertex {
                codelet: CodeletId(r.u32()?),
                ipu: r.usize()?,
                tile: r.usize()?,
                inputs: r.regions()?,
                outputs: r.regions()?,
            });
        }
        sets.push(ComputeSet {
            name,
            vertices,
            codelet_vertices,
        });
    }
    Ok(sets)
}

/// The rearrangements packed. A run's source is its source number plus one (0: the fill),
/// its destination the distance from where the previous run ended.
pub(super) fn pack_rearranges(rearranges: &[Rearrange]) -> Vec<u8> {
    let mut w = Writer::default();
    w.uint(rearranges.len() as u64);
    for r in rearranges {
        w.str(&r.name);
        w.uint(u64::from(r.dst.0));
        w.uint(r.sources.len() as u64);
        for s in &r.sources {
            w.uint(u64::from(s.0));
        }
        w.uint(r.fill.len() as u64);
        w.0.extend_from_slice(&r.fill);
        // Blocks: the first run (its destination start as the gap after the block before
        // ends), then the count and, for more than one run, the two steps.
        w.uint(r.runs.blocks().len() as u64);
        let mut end = 0i64;
        for b in r.runs.blocks() {
            let run = b.first;
            match run.source {
                RunSource::Fill => w.uint(0),
                RunSource::Tensor { k, start, stride } => {
                    w.uint(u64::from(k) + 1);
                    w.uint(start as u64);
                    w.int(stride as i64);
                }
            }
            w.int(run.dst_start as i64 - end);
            w.uint(run.len as u64);
            w.uint(b.count as u64);
            if b.count > 1 {
                w.int(b.dst_step as i64);
                w.int(b.src_step as i64);
            }
            let last = b.last();
            end = (last.dst_start + last.len) as i64;
        }
    }
    w.0
}

/// The rearrangements [`pack_rearranges`] packed.
pub(super) fn unpack_rearranges(r: &mut Reader<'_>) -> Result<Vec<Rearrange>, StoreError> {
    let n = r.count(5)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.str()?;
        let dst = TensorId(r.u32()?);
        let count = r.count(1)?;
        let mut sources = Vec::with_capacity(count);
        for _ in 0..count {
            sources.push(TensorId(r.u32()?));
        }
        let fill_len = r.count(1)?;
        let (fill, rest) = r.bytes.split_at(fill_len);
        let fill = fill.to_vec();
        r.bytes = rest;
        let count = r.count(4)?;
        let mut blocks = Vec::with_capacity(count);
        let mut end = 0i64;
        for _ in 0..count {
            let source = match r.u32()? {
                0 => RunSource::Fill,
                k => RunSource::Tensor {
                    k: k - 1,
                    start: r.usize()?,
                    stride: r.int()? as isize,
                },
            };
            let gap = r.int()?;
            let len = r.usize()?;
            let dst_start = end
                .checked_add(gap)
                .and_then(|d| usize::try_from(d).ok())
                .ok_or_else(|| r.bad("a run outside the destination"))?;
            let runs = r.usize()?;
            let (dst_step, src_step) = match runs {
                0 | 1 => (0, 0),
                _ => (r.int()? as isize, r.int()? as isize),
            };
            // The last run's end, exactly (validation rejects a block outside its tensors).
            let last = dst_start as i128 + (runs.max(1) as i128 - 1) * dst_step as i128;
            end = i64::try_from(last + len as i128)
                .map_err(|_| r.bad("a run outside the destination"))?;
            blocks.push(RunBlock {
                first: Run {
                    source,
                    dst_start,
                    len,
                },
                count: runs,
                dst_step,
                src_step,
            });
        }
        let runs = Runs::from_blocks(blocks);
        out.push(Rearrange {
            name,
            dst,
            sources,
            fill,
            runs,
        });
    }
    Ok(out)
}
