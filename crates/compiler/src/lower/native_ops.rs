//! Codelets that run on their tile's bytes instead of through the reference evaluator's
//! literals: gathers, dynamic slices and dynamic update slices move elements by the
//! evaluator's own index maps (`xla_ir::eval::gather_sources` and its neighbours),
//! scatters combining by one binary op ([`ScatterOp`]) and sorts ordered by one operand
//! ([`SortOp`]) use the evaluator's targets, combination, merge sort and comparison on
//! typed slices, and integer products multiply device words in wrapping 32-bit
//! arithmetic. A vertex reads only the elements it moves, where the evaluator converted
//! its whole operands (an embedding table's slice for every lookup) and built a literal
//! per comparison of a sort. A host-side speed-up only: the vertex's cost is its
//! source's, and every result is the evaluator's, bit for bit (the tests below and the
//! differential tests compare them).

use xla_ir::attributes::{DotDims, GatherDims};
use xla_ir::eval::{ScatterOp, SortOp};
use xla_ir::{ArrayShape, ElementType, Module, Op};

/// An op a codelet runs natively.
#[derive(Debug, Clone)]
pub(crate) enum NativeOp {
    /// `gather(operand, indices)`.
    Gather(Box<Gather>),
    /// `dynamic-slice(operand, starts...)`.
    DynamicSlice {
        operand: ArrayShape,
        starts: Vec<ElementType>,
        sizes: Vec<i64>,
    },
    /// `dynamic-update-slice(operand, update, starts...)`.
    DynamicUpdateSlice {
        operand: ArrayShape,
        update: ArrayShape,
        starts: Vec<ElementType>,
    },
    /// A scatter combining by one binary op (or assigning), of f32, f16, s32 or u32
    /// elements, with the indices' shape.
    Scatter(Box<ScatterOp>, ArrayShape),
    /// A sort ordered by one f32, f16, s32 or u32 operand, with every operand's shape.
    Sort(Box<SortOp>, Vec<ArrayShape>),
    /// An integer `dot` with a 32-bit result.
    IntegerDot(IntegerDot),
}

impl NativeOp {
    /// The native form of the single-op `module` (its entry's root applied to the
    /// parameters `inputs`, in order; a scatter's indices may be shifted first, see
    /// [`ScatterOp::of`]), when it has one.
    pub(crate) fn of(module: &Module, inputs: &[ArrayShape]) -> Option<NativeOp> {
        use ElementType::{F16, F32, S32, U32};
        let entry = module.entry_computation();
        let root = entry.root_instr();
        let in_order = root.operands.len() == inputs.len()
            && root.operands.iter().enumerate().all(|(i, &p)| {
                matches!(entry.instr(p).op, Op::Parameter { number } if number == i as u64)
            });
        if !in_order && !matches!(root.op, Op::Scatter { .. }) {
            return None;
        }
        if let Op::Sort { .. } = root.op {
            let op = SortOp::of(module)?;
            let word = matches!(op.key_type(), F32 | F16 | S32 | U32);
            return word.then(|| NativeOp::Sort(Box::new(op), inputs.to_vec()));
        }
        let out = root.shape.as_array()?;
        let index_types = |shapes: &[ArrayShape]| {
            let types: Vec<ElementType> = shapes.iter().map(|s| s.element_type).collect();
            types.iter().all(|&t| is_index_type(t)).then_some(types)
        };
        match (&root.op, inputs) {
            (
                Op::Gather {
                    dims, slice_sizes, ..
                },
                [operand, indices],
            ) => {
                is_index_type(indices.element_type).then_some(())?;
                Some(NativeOp::Gather(Box::new(Gather {
                    operand: operand.clone(),
                    indices: indices.clone(),
                    out: out.clone(),
                    dims: dims.clone(),
                    slice_sizes: slice_sizes.clone(),
                })))
            }
            (Op::DynamicSlice { sizes }, [operand, starts @ ..]) => Some(NativeOp::DynamicSlice {
                operand: operand.clone(),
                starts: index_types(starts)?,
                sizes: sizes.clone(),
            }),
            (Op::DynamicUpdateSlice, [operand, update, starts @ ..]) => {
                Some(NativeOp::DynamicUpdateSlice {
                    operand: operand.clone(),
                    update: update.clone(),
                    starts: index_types(starts)?,
                })
            }
            (Op::Scatter { .. }, [_, indices, _]) => {
                is_index_type(indices.element_type).then_some(())?;
                let op = ScatterOp::of(module)?;
                let word = matches!(op.element_type(), F32 | F16 | S32 | U32);
                word.then(|| NativeOp::Scatter(Box::new(op), indices.clone()))
            }
            (Op::Dot { dims, .. }, [lhs, rhs]) => {
                IntegerDot::of(lhs, rhs, out, dims).map(NativeOp::IntegerDot)
            }
            _ => None,
        }
    }

    /// Computes the outputs from the inputs' device bytes.
    pub(crate) fn run(&self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<(), String> {
        if let NativeOp::Sort(op, shapes) = self {
            return NativeOp::sort(op, shapes, inputs, outputs);
        }
        let [out] = outputs else {
            return Err(format!("{} outputs for one result", outputs.len()));
        };
        match self {
            NativeOp::Gather(g) => {
                let Gather {
                    operand,
                    indices,
                    out: shape,
                    dims,
                    slice_sizes,
                } = &**g;
                let sizes = (
                    (out.len(), elements(shape)),
                    (inputs[0].len(), elements(operand)),
                );
                let Some(width) = element_width(sizes.0, sizes.1, operand)? else {
                    return Ok(());
                };
                let index = IndexReader::new(indices, inputs[1])?;
                let read = |i: usize| index.get(i);
                let sources = xla_ir::eval::gather_sources(
                    &operand.dims,
                    &indices.dims,
                    &read,
                    &shape.dims,
                    dims,
                    slice_sizes,
                );
                within(&sources, elements(operand), operand)?;
                move_elements(out, inputs[0], width, sources.iter().copied().enumerate());
                Ok(())
            }
            NativeOp::DynamicSlice {
                operand,
                starts,
                sizes,
            } => {
                let starts = read_starts(starts, &inputs[1..])?;
                let sources = xla_ir::eval::dynamic_slice_sources(&operand.dims, &starts, sizes);
                let sizes = (
                    (out.len(), sources.len()),
                    (inputs[0].len(), elements(operand)),
                );
                let Some(width) = element_width(sizes.0, sizes.1, operand)? else {
                    return Ok(());
                };
                within(&sources, elements(operand), operand)?;
                move_elements(out, inputs[0], width, sources.iter().copied().enumerate());
                Ok(())
            }
            NativeOp::DynamicUpdateSlice {
                operand,
                update,
                starts,
            } => {
                if out.len() != inputs[0].len() {
                    return Err(mismatch(operand, inputs[0].len(), out.len()));
                }
                out.copy_from_slice(inputs[0]);
                let starts = read_starts(starts, &inputs[2..])?;
                let targets =
                    xla_ir::eval::dynamic_update_targets(&operand.dims, &starts, &update.dims);
                let sizes = (
                    (inputs[1].len(), targets.len()),
                    (out.len(), elements(operand)),
                );
                let Some(width) = element_width(sizes.0, sizes.1, operand)? else {
                    return Ok(());
                };
                within(&targets, elements(operand), operand)?;
                let pairs = targets.iter().enumerate().map(|(k, &to)| (to, k));
                move_elements(out, inputs[1], width, pairs);
                Ok(())
            }
            NativeOp::Scatter(op, indices) => {
                if out.len() != inputs[0].len() {
                    return Err(format!(
                        "a scatter's operand of {} bytes into a region of {}",
                        inputs[0].len(),
                        out.len()
                    ));
                }
                out.copy_from_slice(inputs[0]);
                let index = IndexReader::new(indices, inputs[1])?;
                let at = op.targets(&|i| index.get(i));
                let updates = inputs[2];
                match op.element_type() {
                    ElementType::F32 => in_words(out, updates, |t, u| op.apply_f32(t, u, &at)),
                    ElementType::F16 => in_words(out, updates, |t, u| op.apply_f16(t, u, &at)),
                    ElementType::S32 => in_words(out, updates, |t, u| op.apply_s32(t, u, &at)),
                    _ => in_words(out, updates, |t, u| op.apply_u32(t, u, &at)),
                }
            }
            NativeOp::IntegerDot(dot) => dot.run(inputs[0], inputs[1], out),
            NativeOp::Sort(..) => unreachable!("sorts return before"),
        }
    }

    /// A sort: every operand's elements moved by the key operand's permutation.
    fn sort(
        op: &SortOp,
        shapes: &[ArrayShape],
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
    ) -> Result<(), String> {
        if inputs.len() != shapes.len() || outputs.len() != shapes.len() {
            return Err(format!(
                "{} inputs and {} outputs for a sort of {} operands",
                inputs.len(),
                outputs.len(),
                shapes.len()
            ));
        }
        let keys = inputs[op.key()];
        let permutation = match op.key_type() {
            ElementType::F32 => op.permutation_f32(&read_words(keys)?),
            ElementType::F16 => op.permutation_f16(&read_words(keys)?),
            ElementType::S32 => op.permutation_s32(&read_words(keys)?),
            _ => op.permutation_u32(&read_words(keys)?),
        };
        for ((shape, input), out) in shapes.iter().zip(inputs).zip(outputs.iter_mut()) {
            let sizes = (
                (out.len(), permutation.len()),
                (input.len(), elements(shape)),
            );
            let Some(width) = element_width(sizes.0, sizes.1, shape)? else {
                continue;
            };
            move_elements(out, input, width, permutation.iter().copied().enumerate());
        }
        Ok(())
    }
}

/// The words of `bytes`, an error unless they are whole words.
fn read_words<T: Word>(bytes: &[u8]) -> Result<Vec<T>, String> {
    if !bytes.len().is_multiple_of(T::SIZE) {
        return Err(format!(
            "{} bytes of {}-byte elements",
            bytes.len(),
            T::SIZE
        ));
    }
    Ok(bytes.chunks_exact(T::SIZE).map(T::read).collect())
}

/// An element type whose device bytes are its little-endian bytes and every bit pattern
/// is a value.
trait Word: Copy {
    const SIZE: usize;
    fn read(bytes: &[u8]) -> Self;
    fn write(self, bytes: &mut [u8]);
}

macro_rules! word {
    ($($t:ty),*) => {$(
        impl Word for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn read(bytes: &[u8]) -> Self {
                <$t>::from_le_bytes(bytes.try_into().expect("one element's bytes"))
            }
            fn write(self, bytes: &mut [u8]) {
                bytes.copy_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}
word!(f32, i32, u32, half::f16);

/// Runs `apply` on `target`'s bytes as words (in place when aligned on a little-endian
/// host, else through a copy written back) and on `updates`' words.
fn in_words<T: Word>(
    target: &mut [u8],
    updates: &[u8],
    apply: impl FnOnce(&mut [T], &[T]) -> Result<(), String>,
) -> Result<(), String> {
    if !target.len().is_multiple_of(T::SIZE) || !updates.len().is_multiple_of(T::SIZE) {
        return Err(format!(
            "regions of {} and {} bytes for {}-byte elements",
            target.len(),
            updates.len(),
            T::SIZE
        ));
    }
    let updates: Vec<T> = read_words(updates)?;
    // SAFETY: every bit pattern of the 4-byte and 2-byte numbers `Word` is implemented for
    // is a value, and align_to_mut yields only the aligned middle.
    if let ([], words, []) = unsafe { target.align_to_mut::<T>() }
        && cfg!(target_endian = "little")
    {
        return apply(words, &updates);
    }
    let mut words: Vec<T> = target.chunks_exact(T::SIZE).map(T::read).collect();
    apply(&mut words, &updates)?;
    for (bytes, w) in target.chunks_exact_mut(T::SIZE).zip(words) {
        w.write(bytes);
    }
    Ok(())
}

fn elements(shape: &ArrayShape) -> usize {
    shape.element_count() as usize
}

fn mismatch(shape: &ArrayShape, input: usize, output: usize) -> String {
    format!("regions of {input} and {output} bytes for an operand {shape}")
}

/// Bytes per element of two regions of one element type, `(bytes, elements)` each:
/// `None` when the first holds no elements (nothing to move), an error when the two
/// disagree.
fn element_width(
    (a_bytes, a_count): (usize, usize),
    (b_bytes, b_count): (usize, usize),
    shape: &ArrayShape,
) -> Result<Option<usize>, String> {
    if a_count == 0 {
        return Ok(None);
    }
    let width = a_bytes / a_count;
    if width == 0 || width * a_count != a_bytes || width * b_count != b_bytes {
        return Err(mismatch(shape, b_bytes, a_bytes));
    }
    Ok(Some(width))
}

/// An error unless every position in `positions` is below `count`.
fn within(positions: &[usize], count: usize, shape: &ArrayShape) -> Result<(), String> {
    match positions.iter().max() {
        Some(&p) if p >= count => Err(format!("element {p} of an operand {shape}")),
        _ => Ok(()),
    }
}

/// Writes element `from` of `src` to element `to` of `dst` for each `(to, from)`, every
/// element `width` bytes.
fn move_elements(
    dst: &mut [u8],
    src: &[u8],
    width: usize,
    pairs: impl Iterator<Item = (usize, usize)>,
) {
    match width {
        4 => {
            for (to, from) in pairs {
                let v: [u8; 4] = src[4 * from..4 * from + 4].try_into().expect("4 bytes");
                dst[4 * to..4 * to + 4].copy_from_slice(&v);
            }
        }
        2 => {
            for (to, from) in pairs {
                dst[2 * to] = src[2 * from];
                dst[2 * to + 1] = src[2 * from + 1];
            }
        }
        1 => pairs.for_each(|(to, from)| dst[to] = src[from]),
        w => {
            for (to, from) in pairs {
                dst[w * to..w * (to + 1)].copy_from_slice(&src[w * from..w * (from + 1)]);
            }
        }
    }
}

/// Whether indices of element type `t` can be read from device bytes ([`IndexReader`]: 4
/// bytes an index for narrow and 32-bit integers and narrowed 64-bit ones, 8 for 64-bit
/// ones kept exact): integers only.
fn is_index_type(t: ElementType) -> bool {
    use ElementType::*;
    matches!(t, S8 | S16 | S32 | S64 | U8 | U16 | U32 | U64)
}

/// Reads the elements of an integer array from its device bytes as the evaluator reads
/// them (`device_data::from_device`, then the element's value as an i64).
struct IndexReader<'a> {
    element_type: ElementType,
    bytes: &'a [u8],
    wide: bool,
}

impl<'a> IndexReader<'a> {
    fn new(shape: &ArrayShape, bytes: &'a [u8]) -> Result<IndexReader<'a>, String> {
        let n = elements(shape);
        let wide = n > 0 && bytes.len() == 8 * n;
        if !wide && bytes.len() != 4 * n {
            return Err(mismatch(shape, bytes.len(), 0));
        }
        Ok(IndexReader {
            element_type: shape.element_type,
            bytes,
            wide,
        })
    }

    fn get(&self, i: usize) -> i64 {
        use ElementType::*;
        if self.wide {
            let b: [u8; 8] = self.bytes[8 * i..8 * i + 8].try_into().expect("8 bytes");
            return i64::from_le_bytes(b);
        }
        let b: [u8; 4] = self.bytes[4 * i..4 * i + 4].try_into().expect("4 bytes");
        let (s, u) = (i32::from_le_bytes(b), u32::from_le_bytes(b));
        match self.element_type {
            S8 => s as i8 as i64,
            S16 => s as i16 as i64,
            U8 => u as u8 as i64,
            U16 => u as u16 as i64,
            U32 | U64 => u as i64,
            _ => s as i64,
        }
    }
}

/// The scalar start indices of a dynamic slice, from their device bytes.
fn read_starts(types: &[ElementType], bytes: &[&[u8]]) -> Result<Vec<i64>, String> {
    types
        .iter()
        .zip(bytes)
        .map(|(&t, b)| {
            let shape = ArrayShape::new(t, &[]);
            Ok(IndexReader::new(&shape, b)?.get(0))
        })
        .collect()
}

/// A gather's shapes and attributes.
#[derive(Debug, Clone)]
pub(crate) struct Gather {
    operand: ArrayShape,
    indices: ArrayShape,
    out: ArrayShape,
    dims: GatherDims,
    slice_sizes: Vec<i64>,
}

/// An integer product with an s32 or u32 result: its operands' words read as the evaluator
/// reads them, products and sums wrapping at 32 bits (the evaluator sums exactly and
/// wraps the total, which leaves the same low 32 bits).
#[derive(Debug, Clone)]
pub(crate) struct IntegerDot {
    lhs: ArrayShape,
    rhs: ArrayShape,
    /// The left operand's dimensions as batch, free, contracting; the right's as batch,
    /// contracting, free.
    lhs_order: Vec<usize>,
    rhs_order: Vec<usize>,
    /// Batch, left free, contracting and right free sizes.
    bmkn: (usize, usize, usize, usize),
}

impl IntegerDot {
    fn of(lhs: &ArrayShape, rhs: &ArrayShape, out: &ArrayShape, dn: &DotDims) -> Option<Self> {
        use ElementType::*;
        let word = |t: ElementType| matches!(t, S8 | S16 | S32 | U8 | U16 | U32);
        if !matches!(out.element_type, S32 | U32)
            || !word(lhs.element_type)
            || !word(rhs.element_type)
        {
            return None;
        }
        let order = |rank: usize, first: &[i64], last: &[i64], free_first: bool| {
            let listed = |d: &usize| first.contains(&(*d as i64)) || last.contains(&(*d as i64));
            let free: Vec<usize> = (0..rank).filter(|d| !listed(d)).collect();
            let (a, b): (Vec<usize>, Vec<usize>) = (
                first.iter().map(|&d| d as usize).collect(),
                last.iter().map(|&d| d as usize).collect(),
            );
            match free_first {
                true => [a, free, b].concat(),
                false => [a, b, free].concat(),
            }
        };
        let size = |dims: &[i64], which: &[i64]| {
            which
                .iter()
                .map(|&d| dims[d as usize].max(0) as usize)
                .product::<usize>()
        };
        let all = |s: &ArrayShape| elements(s);
        let (b, k) = (
            size(&lhs.dims, &dn.lhs_batch),
            size(&lhs.dims, &dn.lhs_contracting),
        );
        let m = all(lhs) / (b * k).max(1);
        let n = all(rhs) / (b * k).max(1);
        Some(IntegerDot {
            lhs: lhs.clone(),
            rhs: rhs.clone(),
            lhs_order: order(lhs.rank(), &dn.lhs_batch, &dn.lhs_contracting, true),
            rhs_order: order(rhs.rank(), &dn.rhs_batch, &dn.rhs_contracting, false),
            bmkn: (b, m, k, n),
        })
    }

    fn run(&self, lhs: &[u8], rhs: &[u8], out: &mut [u8]) -> Result<(), String> {
        let (b, m, k, n) = self.bmkn;
        if out.len() != 4 * b * m * n {
            return Err(mismatch(&self.lhs, lhs.len(), out.len()));
        }
        if b * m * n == 0 {
            return Ok(());
        }
        let l = words(&self.lhs, lhs, &self.lhs_order)?;
        let r = words(&self.rhs, rhs, &self.rhs_order)?;
        let mut acc = vec![0u32; n];
        for bi in 0..b {
            for mi in 0..m {
                acc.fill(0);
                for ki in 0..k {
                    let a = l[(bi * m + mi) * k + ki];
                    let row = &r[(bi * k + ki) * n..(bi * k + ki + 1) * n];
                    for (o, &x) in acc.iter_mut().zip(row) {
                        *o = o.wrapping_add(a.wrapping_mul(x));
                    }
                }
                let at = 4 * (bi * m + mi) * n;
                for (o, v) in out[at..at + 4 * n].chunks_exact_mut(4).zip(&acc) {
                    o.copy_from_slice(&v.to_le_bytes());
                }
            }
        }
        Ok(())
    }
}

/// The 32-bit words of an integer array's device bytes, each the value the evaluator reads
/// (narrow types truncated as `from_device` does), with the dimensions put in `order`.
fn words(shape: &ArrayShape, bytes: &[u8], order: &[usize]) -> Result<Vec<u32>, String> {
    use ElementType::*;
    if bytes.len() != 4 * elements(shape) {
        return Err(mismatch(shape, bytes.len(), 0));
    }
    let value = |i: usize| {
        let w = u32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().expect("4 bytes"));
        match shape.element_type {
            S8 => w as i8 as i32 as u32,
            S16 => w as i16 as i32 as u32,
            U8 => w as u8 as u32,
            U16 => w as u16 as u32,
            _ => w,
        }
    };
    let dims: Vec<usize> = shape.dims.iter().map(|&d| d.max(0) as usize).collect();
    let mut strides = vec![1usize; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * dims[d + 1];
    }
    let (sizes, steps): (Vec<usize>, Vec<usize>) =
        order.iter().map(|&d| (dims[d], strides[d])).unzip();
    let mut out = Vec::with_capacity(elements(shape));
    let mut index = vec![0usize; sizes.len()];
    let mut at = 0usize;
    for _ in 0..elements(shape) {
        out.push(value(at));
        // Odometer over the permuted dimensions, keeping `at` the source position.
        for d in (0..sizes.len()).rev() {
            index[d] += 1;
            at += steps[d];
            if index[d] < sizes[d] {
                break;
            }
            at -= steps[d] * sizes[d];
            index[d] = 0;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    //! Each native op against the reference evaluator on the same bytes.

    use super::*;
    use crate::device_data::to_device;
    use xla_ir::literal::Literal;

    fn check(text: &str, args: Vec<Literal>) {
        let m = xla_ir::parse_module(text).expect("parses");
        let inputs: Vec<ArrayShape> = args
            .iter()
            .map(|a| match a {
                Literal::Array(a) => a.shape.clone(),
                _ => unreachable!("array arguments"),
            })
            .collect();
        let native = NativeOp::of(&m, &inputs).expect("a native op");
        let wants = match xla_ir::eval::evaluate(&m, &args).expect("evaluates") {
            Literal::Array(want) => vec![want],
            Literal::Tuple(items) => items
                .into_iter()
                .map(|l| match l {
                    Literal::Array(a) => a,
                    _ => unreachable!("array results"),
                })
                .collect(),
            Literal::Token => unreachable!("no tokens"),
        };
        let bytes: Vec<Vec<u8>> = args
            .iter()
            .map(|a| match a {
                Literal::Array(a) => to_device(&a.data),
                _ => unreachable!(),
            })
            .collect();
        let ins: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
        let mut outs: Vec<Vec<u8>> = wants
            .iter()
            .map(|w| vec![0xAAu8; to_device(&w.data).len()])
            .collect();
        let mut refs: Vec<&mut [u8]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
        native.run(&ins, &mut refs).expect("runs");
        for (want, out) in wants.iter().zip(&outs) {
            assert_eq!(out, &to_device(&want.data), "{text}");
        }
    }

    fn s32(dims: &[i64], f: impl Fn(i64) -> i32) -> Literal {
        let n: i64 = dims.iter().product();
        Literal::Array(
            xla_ir::ArrayLiteral::new(
                ArrayShape::new(ElementType::S32, dims),
                xla_ir::ArrayData::S32((0..n).map(f).collect()),
            )
            .expect("s32 data for an s32 shape"),
        )
    }

    fn lit(t: ElementType, dims: &[i64], data: xla_ir::ArrayData) -> Literal {
        Literal::Array(xla_ir::ArrayLiteral::new(ArrayShape::new(t, dims), data).expect("data"))
    }

    #[test]
    fn narrow_elements_and_indices() {
        use xla_ir::ArrayData::{F16, Pred, S8, U8};
        let f16s = |n: usize| {
            F16((0..n)
                .map(|i| half::f16::from_f32(i as f32 * 0.5 - 3.0))
                .collect())
        };
        let gather = "HloModule g\nENTRY e {\n  p0 = f16[9,2]{1,0} parameter(0)\n  p1 = u8[3]{0} parameter(1)\n  ROOT g = f16[3,2]{1,0} gather(p0, p1), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,2}\n}\n";
        let indices = lit(ElementType::U8, &[3], U8(vec![200, 4, 0]));
        check(
            gather,
            vec![lit(ElementType::F16, &[9, 2], f16s(18)), indices],
        );
        let slice = "HloModule d\nENTRY e {\n  p0 = pred[7]{0} parameter(0)\n  p1 = s8[] parameter(1)\n  ROOT d = pred[3]{0} dynamic-slice(p0, p1), dynamic_slice_sizes={3}\n}\n";
        let bits = Pred((0..7).map(|i| i % 3 == 1).collect());
        for start in [-100i8, 2, 6] {
            let at = lit(ElementType::S8, &[], S8(vec![start]));
            check(slice, vec![lit(ElementType::Pred, &[7], bits.clone()), at]);
        }
        let dot = "HloModule p\nENTRY e {\n  p0 = u8[2,3]{1,0} parameter(0)\n  p1 = s8[3,2]{1,0} parameter(1)\n  ROOT d = s32[2,2]{1,0} dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
        let (a, b) = (
            U8(vec![255, 7, 128, 0, 1, 200]),
            S8(vec![-128, 5, 127, -1, 3, -77]),
        );
        check(
            dot,
            vec![
                lit(ElementType::U8, &[2, 3], a),
                lit(ElementType::S8, &[3, 2], b),
            ],
        );
    }

    #[test]
    fn gathers_with_clamped_and_batched_indices() {
        let text = "HloModule g\nENTRY e {\n  p0 = s32[5,7]{1,0} parameter(0)\n  p1 = s32[4,1]{1,0} parameter(1)\n  ROOT g = s32[4,5,3]{2,1,0} gather(p0, p1), offset_dims={1,2}, collapsed_slice_dims={}, start_index_map={1}, index_vector_dim=1, slice_sizes={5,3}\n}\n";
        check(
            text,
            vec![
                s32(&[5, 7], |i| i as i32 * 3 - 7),
                s32(&[4, 1], |i| [-2, 0, 3, 9][i as usize]),
            ],
        );
        let batched = "HloModule g\nENTRY e {\n  p0 = s32[3,6]{1,0} parameter(0)\n  p1 = s32[3,2]{1,0} parameter(1)\n  ROOT g = s32[3,2]{1,0} gather(p0, p1), offset_dims={}, collapsed_slice_dims={1}, start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={1,1}\n}\n";
        check(
            batched,
            vec![
                s32(&[3, 6], |i| i as i32),
                s32(&[3, 2], |i| (i as i32 * 5) % 8 - 1),
            ],
        );
    }

    #[test]
    fn dynamic_slices_and_updates_clamp_their_starts() {
        let slice = "HloModule d\nENTRY e {\n  p0 = s32[6,4]{1,0} parameter(0)\n  p1 = s32[] parameter(1)\n  p2 = s32[] parameter(2)\n  ROOT d = s32[3,2]{1,0} dynamic-slice(p0, p1, p2), dynamic_slice_sizes={3,2}\n}\n";
        let update = "HloModule d\nENTRY e {\n  p0 = s32[6,4]{1,0} parameter(0)\n  p1 = s32[3,2]{1,0} parameter(1)\n  p2 = s32[] parameter(2)\n  p3 = s32[] parameter(3)\n  ROOT d = s32[6,4]{1,0} dynamic-update-slice(p0, p1, p2, p3)\n}\n";
        for (a, b) in [(0, 0), (5, -3), (2, 1), (-1, 9)] {
            let operand = s32(&[6, 4], |i| i as i32 * 7);
            check(
                slice,
                vec![operand.clone(), s32(&[], |_| a), s32(&[], |_| b)],
            );
            let upd = s32(&[3, 2], |i| -(i as i32) - 1);
            check(update, vec![operand, upd, s32(&[], |_| a), s32(&[], |_| b)]);
        }
    }

    #[test]
    fn scatters_combine_in_order_and_skip_windows_out_of_bounds() {
        use xla_ir::ArrayData::{F16, F32};
        let text = |t: &str, root: &str| {
            let combine = match root {
                "assign" => format!("a = {t}[] parameter(0)\n  ROOT b = {t}[] parameter(1)"),
                op => format!(
                    "a = {t}[] parameter(0)\n  b = {t}[] parameter(1)\n  ROOT r = {t}[] {op}"
                ),
            };
            format!(
                "HloModule s\n\
                 combine {{\n  {combine}\n}}\n\
                 ENTRY e {{\n  p0 = {t}[6,3]{{1,0}} parameter(0)\n  p1 = s32[4,1]{{1,0}} parameter(1)\n  p2 = {t}[4,2]{{1,0}} parameter(2)\n  \
                 ROOT s = {t}[6,3]{{1,0}} scatter(p0, p1, p2), update_window_dims={{1}}, inserted_window_dims={{0}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=combine\n}}\n"
            )
        };
        let indices = || s32(&[4, 1], |i| [2, -1, 5, 2][i as usize]);
        for root in ["add(a, b)", "subtract(b, a)", "maximum(a, b)", "assign"] {
            let f = |n: usize, k: f32| F32((0..n).map(|i| i as f32 * k - 2.5).collect());
            let args = vec![
                lit(ElementType::F32, &[6, 3], f(18, 0.75)),
                indices(),
                lit(ElementType::F32, &[4, 2], f(8, -1.25)),
            ];
            check(&text("f32", root), args);
            let h = |n: usize, k: f32| {
                F16((0..n)
                    .map(|i| half::f16::from_f32(i as f32 * k + 0.1))
                    .collect())
            };
            let args = vec![
                lit(ElementType::F16, &[6, 3], h(18, 0.3)),
                indices(),
                lit(ElementType::F16, &[4, 2], h(8, 7.9)),
            ];
            check(&text("f16", root), args);
            let args = vec![
                s32(&[6, 3], |i| (i as i32).wrapping_mul(1_000_000_007)),
                indices(),
                s32(&[4, 2], |i| i32::MAX - i as i32),
            ];
            check(&text("s32", root), args);
        }
    }

    #[test]
    fn scatters_into_a_slice_shift_their_indices() {
        let text = "HloModule s\nadd {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n  ROOT r = s32[] add(a, b)\n}\nENTRY e {\n  p0 = s32[3,4,2]{2,1,0} parameter(0)\n  p1 = s32[5,2]{1,0} parameter(1)\n  p2 = s32[5,2]{1,0} parameter(2)\n  offsets = s32[2]{0} constant({4, 1})\n  offsets.b = s32[5,2]{1,0} broadcast(offsets), dimensions={1}\n  shifted = s32[5,2]{1,0} subtract(p1, offsets.b)\n  ROOT s = s32[3,4,2]{2,1,0} scatter(p0, shifted, p2), update_window_dims={1}, inserted_window_dims={0,1}, scatter_dims_to_operand_dims={0,1}, index_vector_dim=1, to_apply=add\n}\n";
        let indices = s32(&[5, 2], |i| {
            [4, 1, 6, 4, 5, 2, 7, 0, i32::MIN, 3][i as usize]
        });
        let args = vec![
            s32(&[3, 4, 2], |i| i as i32),
            indices,
            s32(&[5, 2], |i| 100 * i as i32),
        ];
        check(text, args);
    }

    /// u32 indices shift wrapping in u32 (an index below the slice's start lands far out
    /// of range, as `subtract` gives it), and a scalar index, its vector dimension the
    /// implicit one past the last, shifts by one value broadcast with no dimensions.
    #[test]
    fn unsigned_and_scalar_indices_shift_in_their_own_type() {
        let unsigned = "HloModule s\nadd {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n  ROOT r = s32[] add(a, b)\n}\nENTRY e {\n  p0 = s32[3,4]{1,0} parameter(0)\n  p1 = u32[5,1]{1,0} parameter(1)\n  p2 = s32[5,4]{1,0} parameter(2)\n  offsets = u32[1]{0} constant({4})\n  offsets.b = u32[5,1]{1,0} broadcast(offsets), dimensions={1}\n  shifted = u32[5,1]{1,0} subtract(p1, offsets.b)\n  ROOT s = s32[3,4]{1,0} scatter(p0, shifted, p2), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n}\n";
        let indices = lit(
            ElementType::U32,
            &[5, 1],
            xla_ir::ArrayData::U32(vec![4, 6, 3, u32::MAX, 5]),
        );
        let args = vec![
            s32(&[3, 4], |i| i as i32),
            indices,
            s32(&[5, 4], |i| 100 * i as i32),
        ];
        check(unsigned, args);
        let scalar = "HloModule s\nadd {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n  ROOT r = s32[] add(a, b)\n}\nENTRY e {\n  p0 = s32[3,4]{1,0} parameter(0)\n  p1 = s32[] parameter(1)\n  p2 = s32[4]{0} parameter(2)\n  offsets = s32[] constant(4)\n  offsets.b = s32[] broadcast(offsets), dimensions={}\n  shifted = s32[] subtract(p1, offsets.b)\n  ROOT s = s32[3,4]{1,0} scatter(p0, shifted, p2), update_window_dims={0}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=0, to_apply=add\n}\n";
        for at in [3, 4, 6, 7, i32::MIN] {
            let args = vec![
                s32(&[3, 4], |i| i as i32),
                s32(&[], |_| at),
                s32(&[4], |i| 100 * i as i32),
            ];
            check(scalar, args);
        }
    }

    #[test]
    fn sorts_are_stable_and_move_every_operand() {
        use xla_ir::ArrayData::{F16, F32};
        let one = |t: &str, dir: &str, total: &str, swap: bool| {
            let (a, b) = if swap { ("b", "a") } else { ("a", "b") };
            format!(
                "HloModule s\nlt {{\n  a = {t}[] parameter(0)\n  b = {t}[] parameter(1)\n  ROOT r = pred[] compare({a}, {b}), direction={dir}{total}\n}}\nENTRY e {{\n  p0 = {t}[3,7]{{1,0}} parameter(0)\n  ROOT s = {t}[3,7]{{1,0}} sort(p0), dimensions={{1}}, is_stable=true, to_apply=lt\n}}\n"
            )
        };
        let values = [
            3.0,
            -0.0,
            f32::NAN,
            1.0,
            0.0,
            -2.5,
            3.0,
            f32::INFINITY,
            -f32::NAN,
            7.0,
            -1.0,
        ];
        let f = |i: usize| values[(i * 7) % values.len()];
        for (dir, total, swap) in [
            ("LT", "", false),
            ("GT", ", type=TOTALORDER", false),
            ("LT", ", type=TOTALORDER", true),
            ("GE", "", false),
        ] {
            let x = lit(ElementType::F32, &[3, 7], F32((0..21).map(f).collect()));
            check(&one("f32", dir, total, swap), vec![x]);
            let h = lit(
                ElementType::F16,
                &[3, 7],
                F16((0..21).map(|i| half::f16::from_f32(f(i))).collect()),
            );
            check(&one("f16", dir, total, swap), vec![h]);
            check(
                &one("s32", dir, "", swap),
                vec![s32(&[3, 7], |i| (i as i32 * 5) % 4 - 2)],
            );
        }
        // Sorted by the second operand, along the first dimension: the others follow.
        let argsort = "HloModule s\nlt {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  c = s32[] parameter(2)\n  d = s32[] parameter(3)\n  ROOT r = pred[] compare(c, d), direction=LT\n}\nENTRY e {\n  p0 = f32[6,2]{1,0} parameter(0)\n  p1 = s32[6,2]{1,0} parameter(1)\n  ROOT s = (f32[6,2]{1,0}, s32[6,2]{1,0}) sort(p0, p1), dimensions={0}, is_stable=true, to_apply=lt\n}\n";
        let x = lit(
            ElementType::F32,
            &[6, 2],
            F32((0..12).map(|i| i as f32).collect()),
        );
        check(
            argsort,
            vec![
                x,
                s32(&[6, 2], |i| {
                    [4, 1, 1, 0, 4, 1, -3, 2, 1, 0, 4, 9][i as usize]
                }),
            ],
        );
    }

    #[test]
    fn sorts_by_jaxs_canonical_float_comparator() {
        use xla_ir::ArrayData::F32;
        // JAX's `lax.sort` comparator for floats (from the corpus's sort_ops), argsort form.
        let text = "HloModule s\nlt {\n  a = f32[] parameter(0)\n  ne.a = pred[] compare(a, a), direction=NE\n  nan = f32[] constant(nan)\n  zero = f32[] constant(0)\n  eq.a = pred[] compare(a, zero), direction=EQ\n  s.a = f32[] select(eq.a, zero, a)\n  c.a = f32[] select(ne.a, nan, s.a)\n  b = f32[] parameter(1)\n  ne.b = pred[] compare(b, b), direction=NE\n  eq.b = pred[] compare(b, zero), direction=EQ\n  s.b = f32[] select(eq.b, zero, b)\n  c.b = f32[] select(ne.b, nan, s.b)\n  i = s32[] parameter(2)\n  j = s32[] parameter(3)\n  ROOT r = pred[] compare(c.a, c.b), direction=LT, type=TOTALORDER\n}\nENTRY e {\n  p0 = f32[2,9]{1,0} parameter(0)\n  p1 = s32[2,9]{1,0} parameter(1)\n  ROOT s = (f32[2,9]{1,0}, s32[2,9]{1,0}) sort(p0, p1), dimensions={1}, is_stable=true, to_apply=lt\n}\n";
        let values = [
            0.0,
            f32::NAN,
            -0.0,
            1.5,
            -f32::NAN,
            -1.0,
            0.0,
            f32::INFINITY,
            -0.0,
        ];
        let x = lit(
            ElementType::F32,
            &[2, 9],
            F32((0..18).map(|i| values[(i * 5) % 9]).collect()),
        );
        check(text, vec![x, s32(&[2, 9], |i| i as i32)]);
    }

    #[test]
    fn integer_products_wrap_as_the_evaluator_does() {
        let text = "HloModule p\nENTRY e {\n  p0 = s32[2,3,5]{2,1,0} parameter(0)\n  p1 = s32[2,4,5]{2,1,0} parameter(1)\n  ROOT d = s32[2,3,4]{2,1,0} dot(p0, p1), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={2}\n}\n";
        let big = |i: i64| (i as i32).wrapping_mul(0x3B9A_CA07) ^ (i as i32 * 977);
        check(
            text,
            vec![s32(&[2, 3, 5], big), s32(&[2, 4, 5], |i| big(i + 40))],
        );
        let transposed = "HloModule p\nENTRY e {\n  p0 = s32[5,3]{1,0} parameter(0)\n  p1 = s32[4,5]{1,0} parameter(1)\n  ROOT d = s32[3,4]{1,0} dot(p0, p1), lhs_contracting_dims={0}, rhs_contracting_dims={1}\n}\n";
        check(
            transposed,
            vec![s32(&[5, 3], big), s32(&[4, 5], |i| i as i32 - 9)],
        );
    }
}
