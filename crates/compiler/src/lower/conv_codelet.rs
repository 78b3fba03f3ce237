//! An f32 convolution vertex as the IPU runs one: the input patches gathered into a matrix
//! (im2col), multiplied by the kernel with f32 products and sums (as the AMP does), the
//! products written back in the output's dimension order. It replaces the reference
//! evaluator (which sums in f64, one output element at a time) for convolutions without
//! feature or batch groups; the vertex's cycles are estimated the same either way.

mod group;

use crate::device_data::f32_slice;
use codegen::MatRef;
use runtime::cost::VertexCost;
use runtime::{Codelet, GroupMember, SameBytes, Target};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use xla_ir::attributes::{ConvDims, Window, WindowDim};
use xla_ir::{ArrayShape, ElementType, Op};

/// No element: padding, or a hole of base dilation.
const NONE: u32 = u32::MAX;

/// The gathers and scatters of one convolution of fixed shapes.
struct Plan {
    /// Output positions (batch x spatial).
    rows: usize,
    /// Products summed per output element (kernel positions x input features).
    depth: usize,
    /// Output features.
    cols: usize,
    /// The (row, depth index) patch matrix, row-major, as runs of input elements.
    patches: Vec<PatchRun>,
    /// How the kernel reads as a (depth × output feature) matrix: in place with strides, or
    /// gathered.
    kernel: KernelMatrix,
    /// Output element of (row, 0), and the step between output features.
    out_rows: Vec<u32>,
    out_feature_stride: usize,
    /// Row `r`'s output elements are `out_rows[0] + r * cols ..`: the product is the output's
    /// piece as it stands.
    out_rows_follow: bool,
    input_len: usize,
    kernel_len: usize,
    output_len: usize,
    /// Depth indices per kernel position (the input features): with positions outermost,
    /// position `p`'s products are depth indices `p * chunk ..`.
    chunk: usize,
}

/// `len` consecutive patch-matrix elements read from input elements `src`, `src + stride`,
/// ... (`src == NONE`: zeros, padding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PatchRun {
    src: u32,
    stride: i32,
    len: u32,
}

/// Compresses a list of input elements (`NONE`: zero) into runs of one stride.
fn patch_runs(indices: &[u32]) -> Vec<PatchRun> {
    let mut runs: Vec<PatchRun> = Vec::new();
    for &i in indices {
        if let Some(last) = runs.last_mut() {
            let next = last.src as i64 + last.len as i64 * last.stride as i64;
            let fits = match (last.src == NONE, i == NONE) {
                (true, true) => true,
                (false, false) if last.len == 1 => {
                    let step = i as i64 - last.src as i64;
                    if i32::try_from(step).is_ok() {
                        last.stride = step as i32;
                        true
                    } else {
                        false
                    }
                }
                (false, false) => next == i as i64,
                _ => false,
            };
            if fits {
                last.len += 1;
                continue;
            }
        }
        runs.push(PatchRun {
            src: i,
            stride: 1,
            len: 1,
        });
    }
    runs
}

/// The kernel as the product's right-hand matrix.
enum KernelMatrix {
    /// Element (d, f) is kernel element `at + d * rs + f * cs`: read in place.
    View { at: usize, rs: isize, cs: isize },
    /// The kernel elements of each (depth index, output feature), row-major, as runs:
    /// gathered; and, for two to eight output features, of each (output feature, depth
    /// index), column by column, the columns the product reads
    /// ([`codegen::gemm_f32_narrow_columns`]: gathered straight, not gathered twice).
    Gather {
        rows: Vec<PatchRun>,
        columns: Option<Vec<PatchRun>>,
    },
}

fn strides(dims: &[i64]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * dims[d + 1] as usize;
    }
    s
}

/// Every index of `dims`, row-major, flattened.
fn indices(dims: &[i64]) -> Vec<Vec<i64>> {
    let mut out = vec![vec![]];
    for &d in dims {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                (0..d).map(move |i| {
                    let mut p = prefix.clone();
                    p.push(i);
                    p
                })
            })
            .collect();
    }
    out
}

impl Plan {
    fn new(
        input: &ArrayShape,
        kernel: &ArrayShape,
        output: &ArrayShape,
        window: &Window,
        dn: &ConvDims,
        positions_outer: bool,
    ) -> Option<Plan> {
        let (id, kd, od) = (&input.dims, &kernel.dims, &output.dims);
        let (is, ks, os) = (strides(id), strides(kd), strides(od));
        let spatial = dn.spatial_rank();
        let window: Vec<WindowDim> = if window.dims.is_empty() {
            dn.kernel_spatial
                .iter()
                .map(|&d| WindowDim::of_size(kd[d as usize]))
                .collect()
        } else {
            window.dims.clone()
        };
        let in_features = kd[dn.kernel_input_feature as usize] as usize;
        let cols = od[dn.output_feature as usize] as usize;
        let kernel_sizes: Vec<i64> = dn.kernel_spatial.iter().map(|&d| kd[d as usize]).collect();
        let out_sizes: Vec<i64> = std::iter::once(od[dn.output_batch as usize])
            .chain(dn.output_spatial.iter().map(|&d| od[d as usize]))
            .collect();
        let (positions, outs) = (indices(&kernel_sizes), indices(&out_sizes));
        let (rows, depth) = (outs.len(), positions.len() * in_features);
        let total = [id, kd, od].map(|d| d.iter().map(|&x| x as usize).product::<usize>());
        if total.iter().any(|&n| n >= NONE as usize) || rows * depth >= NONE as usize {
            return None;
        }
        // Kernel element of kernel position k, input feature 0, output feature 0.
        let position_at: Vec<usize> = positions
            .iter()
            .map(|k| {
                (0..spatial)
                    .map(|d| {
                        let kk = if window[d].window_reversal {
                            kernel_sizes[d] - 1 - k[d]
                        } else {
                            k[d]
                        };
                        kk as usize * ks[dn.kernel_spatial[d] as usize]
                    })
                    .sum()
            })
            .collect();
        let (k_in, k_out) = (
            ks[dn.kernel_input_feature as usize],
            ks[dn.kernel_output_feature as usize],
        );
        // The depth index runs over (kernel position, input feature): positions outer or
        // input features outer, whichever lets the kernel be read in place as a strided
        // matrix (one step per depth index); positions outer when neither does.
        let order = |features_outer: bool| -> Vec<(usize, usize)> {
            let (np, nf) = (positions.len(), in_features);
            match features_outer {
                false => (0..np).flat_map(|p| (0..nf).map(move |i| (p, i))).collect(),
                true => (0..nf).flat_map(|i| (0..np).map(move |p| (p, i))).collect(),
            }
        };
        let linear = |items: &[(usize, usize)]| -> Option<isize> {
            let at = |j: usize| (position_at[items[j].0] + items[j].1 * k_in) as isize;
            let step = if items.len() > 1 { at(1) - at(0) } else { 0 };
            (0..items.len())
                .all(|j| at(j) == at(0) + j as isize * step)
                .then_some(step)
        };
        let orders: &[bool] = if positions_outer {
            &[false]
        } else {
            &[false, true]
        };
        let (items, kernel) = orders
            .iter()
            .copied()
            .find_map(|outer| {
                let items = order(outer);
                let rs = linear(&items)?;
                let at = position_at[items[0].0] + items[0].1 * k_in;
                let view = KernelMatrix::View {
                    at,
                    rs,
                    cs: k_out as isize,
                };
                Some((items, view))
            })
            .unwrap_or_else(|| {
                let items = order(false);
                let at = |&(p, i): &(usize, usize), f: usize| {
                    (position_at[p] + i * k_in + f * k_out) as u32
                };
                let rows: Vec<u32> = (items.iter())
                    .flat_map(|item| (0..cols).map(move |f| at(item, f)))
                    .collect();
                let columns = (2..=8).contains(&cols).then(|| {
                    let columns: Vec<u32> = (0..cols)
                        .flat_map(|f| items.iter().map(move |item| at(item, f)))
                        .collect();
                    patch_runs(&columns)
                });
                let kernel = KernelMatrix::Gather {
                    rows: patch_runs(&rows),
                    columns,
                };
                (items, kernel)
            });
        let mut patches = Vec::with_capacity(rows * depth);
        let mut out_rows = Vec::with_capacity(rows);
        let mut input_at: Vec<Option<usize>> = vec![None; positions.len()];
        for o in &outs {
            let (b, o_sp) = (o[0] as usize, &o[1..]);
            out_rows.push(
                (b * os[dn.output_batch as usize]
                    + (0..spatial)
                        .map(|d| o_sp[d] as usize * os[dn.output_spatial[d] as usize])
                        .sum::<usize>()) as u32,
            );
            // Input element of each kernel position at input feature 0 (None: padding).
            for (slot, k) in input_at.iter_mut().zip(&positions) {
                let mut at = Some(b * is[dn.input_batch as usize]);
                for d in 0..spatial {
                    let w = &window[d];
                    let p = o_sp[d] * w.stride - w.pad_low + k[d] * w.window_dilation;
                    let q = p / w.base_dilation;
                    at = match at {
                        Some(a)
                            if p >= 0
                                && p % w.base_dilation == 0
                                && q < id[dn.input_spatial[d] as usize] =>
                        {
                            Some(a + q as usize * is[dn.input_spatial[d] as usize])
                        }
                        _ => None,
                    };
                }
                *slot = at;
            }
            let i_in = is[dn.input_feature as usize];
            patches.extend(
                items
                    .iter()
                    .map(|&(p, i)| input_at[p].map_or(NONE, |a| (a + i * i_in) as u32)),
            );
        }
        let out_feature_stride = os[dn.output_feature as usize];
        let first = out_rows.first().copied().unwrap_or(0) as usize;
        let out_rows_follow = (out_feature_stride == 1 || cols == 1)
            && (out_rows.iter().enumerate()).all(|(r, &b)| b as usize == first + r * cols);
        Some(Plan {
            rows,
            depth,
            cols,
            patches: patch_runs(&patches),
            kernel,
            out_rows,
            out_feature_stride,
            out_rows_follow,
            input_len: total[0],
            kernel_len: total[1],
            output_len: total[2],
            chunk: in_features,
        })
    }
}

thread_local! {
    /// Per host thread: a convolution part's gathered kernel matrix and its product,
    /// reused from one part to the next (a CNN step runs thousands of parts).
    static BUFFERS: std::cell::Cell<[Vec<f32>; 2]> = Default::default();
}

/// A vertex computing one f32 convolution of fixed shapes.
pub(crate) struct ConvCodelet {
    name: String,
    plan: Arc<Plan>,
    cost: VertexCost,
    shared: Option<Arc<SharedPatches>>,
    /// f16 operands and result with f16 partials (`partialsType: half`): each kernel
    /// position's products are summed in f32 (inside the AMP) and added to the running sum
    /// stored in f16, as PopLibs' convolution vertices accumulate over kernel positions in
    /// the partials type. Otherwise f32 throughout.
    half_partials: bool,
    /// What it was built from, when it was built from a codelet source (an executable on
    /// disk stores it).
    source: Option<Arc<super::codelet::CodeletSource>>,
}

/// The patch matrix of the parts of one convolution that read the same whole input (a
/// split over output features): each tile holds a copy of the input, so every part would
/// build the same matrix. The host builds it once and the other parts reuse it when their
/// input bytes are identical to the ones it was built from: named the same by the engine
/// (read from one place in the same run, [`runtime::SameBytes`]), else compared. What each
/// part computes is unchanged; the IPU Model still charges every part its own work.
#[derive(Default)]
pub(crate) struct SharedPatches(Mutex<Option<Arc<BuiltPatches>>>);

/// A patch matrix, the input bytes it was built from, and their name if they had one.
type BuiltPatches = (Vec<u8>, Arc<Vec<f32>>, Option<SameBytes>);

impl SharedPatches {
    fn cached(&self) -> std::sync::MutexGuard<'_, Option<Arc<BuiltPatches>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The patches built from exactly these input bytes (named `name`), if any. Unless the
    /// names agree, the bytes are compared, outside the lock: parts on other host threads
    /// check theirs at the same time.
    fn get(&self, input: &[u8], name: Option<SameBytes>) -> Option<Arc<Vec<f32>>> {
        let built = self.cached().clone()?;
        let same = (name.is_some() && built.2 == name) || built.0.as_slice() == input;
        same.then(|| Arc::clone(&built.1))
    }

    fn put(&self, input: &[u8], patches: Arc<Vec<f32>>, name: Option<SameBytes>) {
        *self.cached() = Some(Arc::new((input.to_vec(), patches, name)));
    }
}

/// Convolution plans already made, by op and shapes (a plan is the same for equal ones).
#[derive(Default)]
pub(crate) struct ConvPlans(HashMap<String, Option<Arc<Plan>>>);

impl ConvCodelet {
    /// The vertex for `op` on operands and result of these shapes, when it is an f32
    /// convolution without groups (else `None`: the reference evaluator runs it).
    #[cfg(test)]
    pub(crate) fn new(
        name: String,
        op: &Op,
        input: &ArrayShape,
        kernel: &ArrayShape,
        output: &ArrayShape,
        cost: VertexCost,
    ) -> Option<ConvCodelet> {
        ConvCodelet::planned(
            name,
            op,
            input,
            kernel,
            output,
            cost,
            false,
            &mut ConvPlans::default(),
        )
    }

    /// [`ConvCodelet::new`], reusing the plan of an earlier part of the same shapes from
    /// `plans` (the parts of one convolution split over tiles mostly have one plan); with
    /// `half_partials`, the vertex of an f16 convolution with f16 partials instead.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn planned(
        name: String,
        op: &Op,
        input: &ArrayShape,
        kernel: &ArrayShape,
        output: &ArrayShape,
        cost: VertexCost,
        half_partials: bool,
        plans: &mut ConvPlans,
    ) -> Option<ConvCodelet> {
        let Op::Convolution {
            window,
            dims,
            feature_group_count: 1,
            batch_group_count: 1,
            ..
        } = op
        else {
            return None;
        };
        let element = if half_partials {
            ElementType::F16
        } else {
            ElementType::F32
        };
        if [input, kernel, output]
            .iter()
            .any(|s| s.element_type != element)
        {
            return None;
        }
        let key = format!("{op:?} {input} {kernel} {output} {half_partials}");
        let plan = plans
            .0
            .entry(key)
            .or_insert_with(|| {
                Plan::new(input, kernel, output, window, dims, half_partials).map(Arc::new)
            })
            .clone()?;
        Some(ConvCodelet {
            name,
            plan,
            cost,
            shared: None,
            half_partials,
            source: None,
        })
    }

    /// The same vertex, knowing the source it was built from.
    pub(crate) fn with_source(mut self, source: Arc<super::codelet::CodeletSource>) -> ConvCodelet {
        self.source = Some(source);
        self
    }

    /// What it was built from, and the patches it shares with other parts.
    pub(crate) fn source(
        &self,
    ) -> Option<(
        &Arc<super::codelet::CodeletSource>,
        Option<&Arc<SharedPatches>>,
    )> {
        Some((self.source.as_ref()?, self.shared.as_ref()))
    }

    /// The same vertex, sharing its patch matrix with the other parts that hold `shared`
    /// (parts of one convolution whose input is not split, so their plans' patches agree).
    pub(crate) fn sharing(mut self, shared: Arc<SharedPatches>) -> ConvCodelet {
        self.shared = Some(shared);
        self
    }

    /// The patch matrix of the input bytes `input` (named `name`, if the engine named
    /// them): the one the parts sharing it built from the same bytes, else built (and
    /// shared).
    fn patches_of(&self, input: &[u8], name: Option<SameBytes>) -> Arc<Vec<f32>> {
        let build = || Arc::new(self.patches(&values_of(input, self.half_partials)));
        let Some(shared) = &self.shared else {
            return build();
        };
        shared.get(input, name).unwrap_or_else(|| {
            let patches = build();
            shared.put(input, Arc::clone(&patches), name);
            patches
        })
    }

    /// The patch matrix of input `x` (`rows × depth`, row-major).
    fn patches(&self, x: &[f32]) -> Vec<f32> {
        let p = &self.plan;
        let mut patches: Vec<f32> = Vec::with_capacity(p.rows * p.depth);
        gather_runs(&p.patches, x, &mut patches);
        patches
    }
}

/// Appends the elements `runs` read from `x` (zeros for padding) to `out`.
fn gather_runs(runs: &[PatchRun], x: &[f32], out: &mut Vec<f32>) {
    for r in runs {
        let (src, len) = (r.src as usize, r.len as usize);
        let start = out.len();
        match (r.src, r.stride) {
            (NONE, _) => out.resize(start + len, 0.0),
            (_, 1) => out.extend_from_slice(&x[src..src + len]),
            (_, stride) => {
                // Written by index into a sized slice: an `extend` of indexed reads keeps the
                // vector's length in memory across every element.
                out.resize(start + len, 0.0);
                for (j, e) in out[start..].iter_mut().enumerate() {
                    *e = x[(src as isize + j as isize * stride as isize) as usize];
                }
            }
        }
    }
}

/// The bytes as f32s: in place when aligned (and the host is little-endian, the device's
/// byte order), else converted.
/// The operand bytes as f32s: f16 elements widened, or f32 ones as they are.
fn values_of(bytes: &[u8], f16: bool) -> std::borrow::Cow<'_, [f32]> {
    if f16 {
        std::borrow::Cow::Owned(f16s(bytes))
    } else {
        f32_slice(bytes)
    }
}

fn f16s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(2)
        .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect()
}

/// Writes the product (`rows × cols`, row-major) to the output's elements: in one pass when
/// the plan's rows follow one another in the output (an f32 output with its features
/// innermost), else element by element.
fn write_output(p: &Plan, product: &[f32], half: bool, out: &mut [u8]) {
    if p.out_rows_follow && !half {
        let first = p.out_rows.first().copied().unwrap_or(0) as usize;
        let dst = &mut out[first * 4..(first + product.len()) * 4];
        for (d, v) in dst.chunks_exact_mut(4).zip(product) {
            d.copy_from_slice(&v.to_le_bytes());
        }
        return;
    }
    let size = if half { 2 } else { 4 };
    for (row, &base) in product.chunks_exact(p.cols).zip(&p.out_rows) {
        for (f, &v) in row.iter().enumerate() {
            let at = (base as usize + f * p.out_feature_stride) * size;
            if half {
                out[at..at + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
            } else {
                out[at..at + 4].copy_from_slice(&v.to_le_bytes());
            }
        }
    }
}

impl Codelet for ConvCodelet {
    fn name(&self) -> &str {
        &self.name
    }

    fn run(&self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<(), String> {
        self.run_named(inputs, outputs, &[])
    }

    fn run_named(
        &self,
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
        same: &[Option<SameBytes>],
    ) -> Result<(), String> {
        let p = &self.plan;
        let sizes = [inputs[0].len(), inputs[1].len(), outputs[0].len()];
        let bytes = if self.half_partials { 2 } else { 4 };
        if sizes != [p.input_len, p.kernel_len, p.output_len].map(|n| n * bytes) {
            return Err(format!(
                "{}: regions of {sizes:?} bytes for a convolution of {:?} elements",
                self.name,
                [p.input_len, p.kernel_len, p.output_len]
            ));
        }
        let half = self.half_partials;
        let values = |b| values_of(b, half);
        let w = values(inputs[1]);
        let name = same.first().copied().flatten();
        let patches = self.patches_of(inputs[0], name);
        // The gathered kernel and the product reuse this host thread's buffers.
        let [mut gathered, mut product] = BUFFERS.take();
        product.clear();
        product.resize(p.rows * p.cols, 0.0);
        gathered.clear();
        let patches_matrix = MatRef::row_major(&patches, p.depth);
        match (&p.kernel, self.half_partials) {
            (
                KernelMatrix::Gather {
                    columns: Some(columns),
                    ..
                },
                false,
            ) => {
                gather_runs(columns, &w, &mut gathered);
                codegen::gemm_f32_narrow_columns(
                    p.rows,
                    p.depth,
                    p.cols,
                    patches_matrix,
                    &gathered,
                    &mut product,
                );
            }
            (kernel, half) => {
                let kernel = match kernel {
                    KernelMatrix::View { at, rs, cs } => MatRef {
                        data: &w,
                        at: *at,
                        rs: *rs,
                        cs: *cs,
                    },
                    KernelMatrix::Gather { rows, .. } => {
                        gather_runs(rows, &w, &mut gathered);
                        MatRef::row_major(&gathered, p.cols)
                    }
                };
                if half {
                    // One kernel position at a time, its sum added to the f16 running sum.
                    let mut part = vec![0f32; p.rows * p.cols];
                    for c in 0..p.depth / p.chunk.max(1) {
                        let d0 = c * p.chunk;
                        let a = MatRef {
                            at: d0,
                            ..patches_matrix
                        };
                        let b = MatRef {
                            at: (kernel.at as isize + d0 as isize * kernel.rs) as usize,
                            ..kernel
                        };
                        codegen::gemm_f32_refs(p.rows, p.chunk, p.cols, a, b, &mut part);
                        for (s, q) in product.iter_mut().zip(&part) {
                            *s = half::f16::from_f32(*s + q).to_f32();
                        }
                    }
                } else {
                    codegen::gemm_f32_refs(
                        p.rows,
                        p.depth,
                        p.cols,
                        patches_matrix,
                        kernel,
                        &mut product,
                    );
                }
            }
        }
        write_output(p, &product, self.half_partials, &mut *outputs[0]);
        BUFFERS.set([gathered, product]);
        Ok(())
    }

    fn group(&self) -> Option<usize> {
        self.group_key()
    }

    fn run_group(&self, members: &mut [GroupMember<'_>]) -> Result<(), String> {
        group::run_group(members)
    }

    fn cost(&self, _target: &Target) -> VertexCost {
        self.cost
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xla_ir::Literal;
    use xla_ir::literal::{ArrayData, ArrayLiteral};

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 20) as f32 / 2048.0
                    - 1.0
            })
            .collect()
    }

    /// The codelet against the reference evaluator on one convolution; whether its product
    /// was written to the output in one pass (`Plan::out_rows_follow`).
    fn check(text: &str) -> bool {
        let m = xla_ir::parse_module(text).unwrap();
        let entry = m.entry_computation();
        let root = entry.root_instr();
        let shapes: Vec<ArrayShape> = entry
            .parameters()
            .iter()
            .map(|&p| entry.instr(p).shape.as_array().unwrap().clone())
            .collect();
        let out = root.shape.as_array().unwrap();
        let codelet = ConvCodelet::new(
            "c".into(),
            &root.op,
            &shapes[0],
            &shapes[1],
            out,
            VertexCost::Worker(1),
        )
        .expect("an f32 convolution without groups");
        let data: Vec<Vec<f32>> = shapes
            .iter()
            .enumerate()
            .map(|(k, s)| values(s.element_count() as usize, k as u32 * 77))
            .collect();
        let args: Vec<Literal> = shapes
            .iter()
            .zip(&data)
            .map(|(s, d)| {
                Literal::Array(ArrayLiteral {
                    shape: s.clone(),
                    data: ArrayData::F32(d.clone()),
                })
            })
            .collect();
        let Literal::Array(want) = xla_ir::eval::evaluate(&m, &args).unwrap() else {
            panic!("an array result")
        };
        let ArrayData::F32(want) = want.data else {
            panic!("f32")
        };
        let bytes: Vec<Vec<u8>> = data
            .iter()
            .map(|d| d.iter().flat_map(|x| x.to_le_bytes()).collect())
            .collect();
        let mut got = vec![0u8; want.len() * 4];
        codelet
            .run(&[&bytes[0], &bytes[1]], &mut [got.as_mut_slice()])
            .unwrap();
        for (i, (g, w)) in crate::device_data::f32_slice(&got)
            .iter()
            .zip(&want)
            .enumerate()
        {
            assert!(
                (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                "element {i}: {g} vs {w}"
            );
        }
        codelet.plan.out_rows_follow
    }

    /// An output with its features innermost takes the product's rows as they stand; one
    /// with its spatial dimensions innermost is written element by element.
    #[test]
    fn outputs_with_features_innermost_are_written_in_one_pass() {
        let text = |out: &str, labels: &str| {
            format!(
                "HloModule t
ENTRY e {{
  x = f32[2,6,6,3]{{3,2,1,0}} parameter(0)
  k = f32[3,3,3,4]{{3,2,1,0}} parameter(1)
  ROOT c = f32[{out}]{{3,2,1,0}} convolution(x, k), window={{size=3x3 pad=1_1x1_1}}, dim_labels=b01f_01io->{labels}
}}"
            )
        };
        assert!(check(&text("2,6,6,4", "b01f")));
        assert!(!check(&text("2,4,6,6", "bf01")));
    }

    /// Parts sharing a patch matrix compute, bit for bit, what each computes alone: when
    /// the input repeats (the matrix is reused) and when it changes (it is rebuilt).
    #[test]
    fn parts_sharing_patches_compute_what_each_computes_alone() {
        let m = xla_ir::parse_module(
            "HloModule t
ENTRY e {
  x = f32[2,6,6,3]{3,2,1,0} parameter(0)
  k = f32[3,3,3,4]{3,2,1,0} parameter(1)
  ROOT c = f32[2,6,6,4]{3,2,1,0} convolution(x, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
}",
        )
        .unwrap();
        let root = m.entry_computation().root_instr();
        let a = |d: &[i64]| ArrayShape::new(ElementType::F32, d);
        let (xs, ks, os) = (a(&[2, 6, 6, 3]), a(&[3, 3, 3, 4]), a(&[2, 6, 6, 4]));
        let make = || {
            ConvCodelet::new("c".into(), &root.op, &xs, &ks, &os, VertexCost::Worker(1)).unwrap()
        };
        let shared = Arc::new(SharedPatches::default());
        let parts = [
            make().sharing(shared.clone()),
            make().sharing(shared.clone()),
        ];
        let alone = make();
        let bytes = |v: Vec<f32>| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
        for input_seed in [1, 1, 2] {
            let x = bytes(values(xs.element_count() as usize, input_seed));
            for kernel_seed in [5, 9] {
                let k = bytes(values(ks.element_count() as usize, kernel_seed));
                let run = |c: &ConvCodelet| {
                    let mut out = vec![0u8; os.element_count() as usize * 4];
                    c.run(&[&x, &k], &mut [out.as_mut_slice()]).unwrap();
                    out
                };
                let want = run(&alone);
                for part in &parts {
                    assert_eq!(run(part), want, "input {input_seed}, kernel {kernel_seed}");
                }
            }
        }
    }

    /// A kernel read neither in place nor whole (the bench CNN's input gradient: `01oi`,
    /// reversed) with two to eight output features is gathered column by column; the
    /// product is bit for bit the one from the kernel gathered row by row (as
    /// `gemm_f32_refs` multiplies it), and matches the evaluator.
    #[test]
    fn kernels_gathered_column_by_column_give_the_row_gathers_bits() {
        let text = "HloModule t
ENTRY e {
  x = f32[2,5,5,6]{3,2,1,0} parameter(0)
  k = f32[3,3,4,6]{3,2,1,0} parameter(1)
  ROOT c = f32[2,5,5,4]{3,2,1,0} convolution(x, k), window={size=3x3 pad=1_1x1_1 rhs_reversal=1x1}, dim_labels=b01f_01oi->b01f
}";
        check(text);
        let m = xla_ir::parse_module(text).unwrap();
        let root = m.entry_computation().root_instr();
        let a = |d: &[i64]| ArrayShape::new(ElementType::F32, d);
        let (xs, ks, os) = (a(&[2, 5, 5, 6]), a(&[3, 3, 4, 6]), a(&[2, 5, 5, 4]));
        let c =
            ConvCodelet::new("c".into(), &root.op, &xs, &ks, &os, VertexCost::Worker(1)).unwrap();
        let KernelMatrix::Gather {
            rows,
            columns: Some(_),
        } = &c.plan.kernel
        else {
            panic!("a kernel gathered by columns")
        };
        let (x, k) = (
            values(xs.element_count() as usize, 3),
            values(ks.element_count() as usize, 4),
        );
        let bytes = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
        let mut got = vec![0u8; os.element_count() as usize * 4];
        c.run(&[&bytes(&x), &bytes(&k)], &mut [got.as_mut_slice()])
            .unwrap();
        let p = &c.plan;
        let (patches, mut gathered) = (c.patches(&x), Vec::new());
        gather_runs(rows, &k, &mut gathered);
        let mut product = vec![0f32; p.rows * p.cols];
        codegen::gemm_f32_refs(
            p.rows,
            p.depth,
            p.cols,
            MatRef::row_major(&patches, p.depth),
            MatRef::row_major(&gathered, p.cols),
            &mut product,
        );
        let mut want = vec![0u8; got.len()];
        write_output(p, &product, false, &mut want);
        assert_eq!(got, want);
    }

    #[test]
    fn matches_the_evaluator_with_strides_padding_dilations_and_reversal() {
        check(
            "HloModule t
ENTRY e {
  x = f32[2,5,6,3]{3,2,1,0} parameter(0)
  k = f32[3,2,3,4]{3,2,1,0} parameter(1)
  ROOT c = f32[2,4,2,11]{3,2,1,0} convolution(x, k), window={size=3x2 stride=2x1 pad=1_1x0_1 lhs_dilate=1x2 rhs_dilate=2x1 rhs_reversal=1x0}, dim_labels=b01f_01io->bf01
}",
        );
    }

    #[test]
    fn matches_the_evaluator_for_a_weight_gradient_layout() {
        // The cnn's backward convolution: batch as the contracted feature.
        check(
            "HloModule t
ENTRY e {
  x = f32[4,6,6,2]{3,2,1,0} parameter(0)
  g = f32[4,6,6,3]{3,2,1,0} parameter(1)
  ROOT c = f32[3,3,2,3]{3,2,1,0} convolution(x, g), window={size=6x6 pad=1_1x1_1}, dim_labels=f01b_i01o->01bf
}",
        );
    }

    #[test]
    fn patch_indices_compress_into_strided_runs_and_zero_runs() {
        let runs = patch_runs(&[3, 4, 5, NONE, NONE, 10, 7, 4, 9]);
        let run = |src, stride, len| PatchRun { src, stride, len };
        assert_eq!(
            runs,
            vec![run(3, 1, 3), run(NONE, 1, 2), run(10, -3, 3), run(9, 1, 1)]
        );
    }

    #[test]
    fn grouped_convolutions_are_left_to_the_evaluator() {
        let m = xla_ir::parse_module(
            "HloModule t
ENTRY e {
  x = f32[1,4,4,4]{3,2,1,0} parameter(0)
  k = f32[3,3,2,4]{3,2,1,0} parameter(1)
  ROOT c = f32[1,4,4,4]{3,2,1,0} convolution(x, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=2
}",
        )
        .unwrap();
        let root = m.entry_computation().root_instr();
        let a = |d: &[i64]| ArrayShape::new(ElementType::F32, d);
        let c = ConvCodelet::new(
            "c".into(),
            &root.op,
            &a(&[1, 4, 4, 4]),
            &a(&[3, 3, 2, 4]),
            &a(&[1, 4, 4, 4]),
            VertexCost::Worker(1),
        );
        assert!(c.is_none());
    }

    /// f16 partials: the running sum over kernel positions is rounded to f16 after each
    /// position. Checked against that rule computed plainly (per output element, per kernel
    /// position, an f64 sum over input features added to an f16 running sum), which the
    /// vertex must match to the f32 rounding of a position's sum: at most one f16 step per
    /// position apart. Rounding once at the end (f32 partials) is closer to the exact sum.
    #[test]
    fn half_partials_round_the_running_sum_after_each_kernel_position() {
        let m = xla_ir::parse_module(
            "HloModule t
ENTRY e {
  x = f16[1,5,5,8]{3,2,1,0} parameter(0)
  k = f16[3,3,8,4]{3,2,1,0} parameter(1)
  ROOT c = f16[1,5,5,4]{3,2,1,0} convolution(x, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
}",
        )
        .unwrap();
        let root = m.entry_computation().root_instr();
        let a = |d: &[i64]| ArrayShape::new(ElementType::F16, d);
        let (xs, ks, os) = (a(&[1, 5, 5, 8]), a(&[3, 3, 8, 4]), a(&[1, 5, 5, 4]));
        let mut plans = ConvPlans::default();
        let c = ConvCodelet::planned(
            "c".into(),
            &root.op,
            &xs,
            &ks,
            &os,
            VertexCost::Worker(1),
            true,
            &mut plans,
        )
        .expect("an f16 convolution takes half partials");
        let h =
            |v: Vec<f32>| -> Vec<half::f16> { v.into_iter().map(half::f16::from_f32).collect() };
        // Values near 1 so that sums grow past f16's fine steps.
        let x = h(values(200, 3).iter().map(|v| 4.0 + v).collect());
        let k = h(values(288, 7).iter().map(|v| 1.0 + v).collect());
        let bytes =
            |v: &[half::f16]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
        let mut out = vec![0u8; 100 * 2];
        c.run(&[&bytes(&x), &bytes(&k)], &mut [out.as_mut_slice()])
            .unwrap();
        let got: Vec<f64> = out
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f64())
            .collect();
        let (mut worst_rule, mut differs_from_once, mut exactly) = (0f64, 0, 0);
        for (oy, ox, f) in (0..5usize)
            .flat_map(|y| (0..5usize).flat_map(move |x| (0..4usize).map(move |f| (y, x, f))))
        {
            let (mut running, mut exact) = (half::f16::ZERO, 0f64);
            for (ky, kx) in (0..3usize).flat_map(|y| (0..3usize).map(move |x| (y, x))) {
                // Input row and column (padding 1 on each side).
                let (iy, ix) = ((oy + ky).wrapping_sub(1), (ox + kx).wrapping_sub(1));
                let mut sum = 0f64;
                if iy < 5 && ix < 5 {
                    for i in 0..8 {
                        let xv = x[(iy * 5 + ix) * 8 + i].to_f64();
                        let kv = k[((ky * 3 + kx) * 8 + i) * 4 + f].to_f64();
                        sum += xv * kv;
                    }
                }
                exact += sum;
                running = half::f16::from_f64(running.to_f64() + sum);
            }
            let g = got[(oy * 5 + ox) * 4 + f];
            let step = running.to_f64().abs() * 2f64.powi(-10);
            worst_rule = worst_rule.max((g - running.to_f64()).abs() / (9.0 * step));
            exactly += usize::from(g == running.to_f64());
            if half::f16::from_f64(exact) != half::f16::from_f64(g) {
                differs_from_once += 1;
            }
        }
        assert!(
            worst_rule <= 1.0,
            "{worst_rule} of the allowance from the rule"
        );
        assert!(differs_from_once > 0, "f16 partials changed no element");
        assert!(
            exactly >= 90,
            "{exactly} of 100 elements follow the rule exactly"
        );
    }
}
