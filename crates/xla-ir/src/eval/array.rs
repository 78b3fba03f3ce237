//! Type-generic helpers over [`ArrayData`]: taking elements by index, reading and writing
//! single elements, converting, and walking multi-dimensional indices.

use super::element::{Element, Num};
use crate::ElementType;
use crate::literal::{ArrayData, ArrayLiteral, with_data};
use crate::shape::ArrayShape;

/// Runs `$body` on the vector inside `$data` (bound to `$v`) and wraps the resulting vector
/// back into the same variant.
macro_rules! map_same {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            ArrayData::Pred($v) => ArrayData::Pred($body),
            ArrayData::S8($v) => ArrayData::S8($body),
            ArrayData::S16($v) => ArrayData::S16($body),
            ArrayData::S32($v) => ArrayData::S32($body),
            ArrayData::S64($v) => ArrayData::S64($body),
            ArrayData::U8($v) => ArrayData::U8($body),
            ArrayData::U16($v) => ArrayData::U16($body),
            ArrayData::U32($v) => ArrayData::U32($body),
            ArrayData::U64($v) => ArrayData::U64($body),
            ArrayData::F16($v) => ArrayData::F16($body),
            ArrayData::Bf16($v) => ArrayData::Bf16($body),
            ArrayData::F32($v) => ArrayData::F32($body),
            ArrayData::F64($v) => ArrayData::F64($body),
            ArrayData::C64(_) | ArrayData::C128(_) | ArrayData::Narrow { .. } => {
                unreachable!(
                    "the evaluator refuses element types it does not compute before computing"
                )
            }
        }
    };
}
pub(crate) use map_same;

/// Builds data of `element_type` from a function producing each element as a [`Num`].
pub(crate) fn from_nums(
    element_type: ElementType,
    count: usize,
    f: impl Fn(usize) -> Num,
) -> ArrayData {
    fn build<T: Element>(count: usize, f: impl Fn(usize) -> Num) -> Vec<T> {
        (0..count).map(|i| T::from_num(f(i))).collect()
    }
    match element_type {
        ElementType::Pred => ArrayData::Pred(build(count, f)),
        ElementType::S8 => ArrayData::S8(build(count, f)),
        ElementType::S16 => ArrayData::S16(build(count, f)),
        ElementType::S32 => ArrayData::S32(build(count, f)),
        ElementType::S64 => ArrayData::S64(build(count, f)),
        ElementType::U8 => ArrayData::U8(build(count, f)),
        ElementType::U16 => ArrayData::U16(build(count, f)),
        ElementType::U32 => ArrayData::U32(build(count, f)),
        ElementType::U64 => ArrayData::U64(build(count, f)),
        ElementType::F16 => ArrayData::F16(build(count, f)),
        ElementType::Bf16 => ArrayData::Bf16(build(count, f)),
        ElementType::F32 => ArrayData::F32(build(count, f)),
        ElementType::F64 => ArrayData::F64(build(count, f)),
        t => unreachable!("the evaluator refuses {t} values before computing any"),
    }
}

/// Element `i` as a [`Num`].
pub(crate) fn num(data: &ArrayData, i: usize) -> Num {
    with_data!(data, v => Element::to_num(v[i]))
}

/// Element `i` of an integer (or pred) array as an i64 index value.
pub(crate) fn index_value(data: &ArrayData, i: usize) -> i64 {
    match num(data, i) {
        Num::Bool(b) => b as i64,
        Num::Int(x) => x as i64,
        Num::Float(f) => f as i64,
    }
}

/// The elements at `indices`, in that order.
pub(crate) fn take(data: &ArrayData, indices: &[usize]) -> ArrayData {
    data.take(indices)
}

/// The elements of several arrays of one type, one after another.
pub(crate) fn concat(parts: &[&ArrayData]) -> ArrayData {
    let mut out = ArrayData::zeros(parts[0].element_type(), 0);
    for part in parts {
        append(&mut out, part);
    }
    out
}

fn append(out: &mut ArrayData, part: &ArrayData) {
    macro_rules! extend {
        ($($variant:ident),*) => {
            match (out, part) {
                $((ArrayData::$variant(o), ArrayData::$variant(p)) => o.extend_from_slice(p),)*
                (o, p) => panic!("append of {} to {}: operand types are checked by the verifier", p.element_type(), o.element_type()),
            }
        };
    }
    extend!(
        Pred, S8, S16, S32, S64, U8, U16, U32, U64, F16, Bf16, F32, F64, C64, C128
    );
}

/// Copies element `from` of `src` into element `to` of `dst` (same element type).
pub(crate) fn copy_element(dst: &mut ArrayData, to: usize, src: &ArrayData, from: usize) {
    macro_rules! copy {
        ($($variant:ident),*) => {
            match (dst, src) {
                $((ArrayData::$variant(d), ArrayData::$variant(s)) => d[to] = s[from],)*
                (d, s) => panic!("copy of {} into {}: operand types are checked by the verifier", s.element_type(), d.element_type()),
            }
        };
    }
    copy!(
        Pred, S8, S16, S32, S64, U8, U16, U32, U64, F16, Bf16, F32, F64
    );
}

/// Row-major strides of `dims`.
pub(crate) fn strides(dims: &[i64]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * dims[d + 1].max(0) as usize;
    }
    s
}

/// Linear position of a multi-index.
pub(crate) fn linear(index: &[i64], strides: &[usize]) -> usize {
    index
        .iter()
        .zip(strides)
        .map(|(&i, &s)| i as usize * s)
        .sum()
}

/// Calls `f` with every multi-index of `dims` in row-major order.
pub(crate) fn for_each_index(dims: &[i64], mut f: impl FnMut(&[i64])) {
    if dims.iter().any(|&d| d <= 0) {
        return;
    }
    let mut index = vec![0i64; dims.len()];
    loop {
        f(&index);
        let mut d = dims.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            index[d] += 1;
            if index[d] < dims[d] {
                break;
            }
            index[d] = 0;
        }
    }
}

/// Number of elements of `dims`.
pub(crate) fn count(dims: &[i64]) -> usize {
    dims.iter().map(|&d| d.max(0) as usize).product()
}

/// A scalar literal holding element `i` of `data`.
pub(crate) fn scalar_at(data: &ArrayData, i: usize) -> ArrayLiteral {
    ArrayLiteral {
        shape: ArrayShape::new(data.element_type(), &[]),
        data: take(data, &[i]),
    }
}

/// For each position of the physical (memory) order of `shape`, the logical row-major
/// index of the element stored there. Identity for the default layout.
pub(crate) fn physical_order(shape: &ArrayShape) -> Option<Vec<usize>> {
    let layout = shape.layout.as_ref()?;
    let rank = shape.rank();
    let major_to_minor: Vec<usize> = layout
        .minor_to_major
        .iter()
        .rev()
        .map(|&d| d as usize)
        .collect();
    if major_to_minor.iter().copied().eq(0..rank) {
        return None;
    }
    let logical_strides = strides(&shape.dims);
    let physical_dims: Vec<i64> = major_to_minor.iter().map(|&d| shape.dims[d]).collect();
    let mut order = Vec::with_capacity(count(&shape.dims));
    for_each_index(&physical_dims, |p| {
        order.push(
            p.iter()
                .zip(&major_to_minor)
                .map(|(&i, &d)| i as usize * logical_strides[d])
                .sum(),
        );
    });
    Some(order)
}

/// Runs `$body` on the vectors inside two arrays of the same element type (bound to `$x`
/// and `$y`) and wraps the resulting vector back into that variant; `$mismatch` is returned
/// (with `return`) when the types differ.
macro_rules! zip_same {
    ($a:expr, $b:expr, $x:ident, $y:ident => $body:expr, $mismatch:expr) => {
        match ($a, $b) {
            (ArrayData::Pred($x), ArrayData::Pred($y)) => ArrayData::Pred($body),
            (ArrayData::S8($x), ArrayData::S8($y)) => ArrayData::S8($body),
            (ArrayData::S16($x), ArrayData::S16($y)) => ArrayData::S16($body),
            (ArrayData::S32($x), ArrayData::S32($y)) => ArrayData::S32($body),
            (ArrayData::S64($x), ArrayData::S64($y)) => ArrayData::S64($body),
            (ArrayData::U8($x), ArrayData::U8($y)) => ArrayData::U8($body),
            (ArrayData::U16($x), ArrayData::U16($y)) => ArrayData::U16($body),
            (ArrayData::U32($x), ArrayData::U32($y)) => ArrayData::U32($body),
            (ArrayData::U64($x), ArrayData::U64($y)) => ArrayData::U64($body),
            (ArrayData::F16($x), ArrayData::F16($y)) => ArrayData::F16($body),
            (ArrayData::Bf16($x), ArrayData::Bf16($y)) => ArrayData::Bf16($body),
            (ArrayData::F32($x), ArrayData::F32($y)) => ArrayData::F32($body),
            (ArrayData::F64($x), ArrayData::F64($y)) => ArrayData::F64($body),
            _ => return $mismatch,
        }
    };
}
pub(crate) use zip_same;

/// The little-endian bytes of every element, in order.
pub(crate) fn to_le_bytes(data: &ArrayData) -> Vec<u8> {
    match data {
        ArrayData::Pred(v) => v.iter().map(|&b| b as u8).collect(),
        ArrayData::S8(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ArrayData::S16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ArrayData::S32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ArrayData::S64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ArrayData::U8(v) => v.clone(),
        ArrayData::U16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ArrayData::U32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ArrayData::U64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ArrayData::F16(v) => v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect(),
        ArrayData::Bf16(v) => v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect(),
        ArrayData::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ArrayData::F64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ArrayData::C64(v) => v.iter().flatten().flat_map(|x| x.to_le_bytes()).collect(),
        ArrayData::C128(v) => v.iter().flatten().flat_map(|x| x.to_le_bytes()).collect(),
        ArrayData::Narrow { bits, .. } => bits.clone(),
    }
}

/// Reads elements of `element_type` from little-endian bytes.
pub(crate) fn from_le_bytes(element_type: ElementType, bytes: &[u8]) -> ArrayData {
    macro_rules! read {
        ($t:ty, $conv:expr) => {
            bytes
                .chunks_exact(std::mem::size_of::<$t>())
                .map(|c| {
                    $conv(<$t>::from_le_bytes(
                        c.try_into().expect("chunks_exact gives whole elements"),
                    ))
                })
                .collect()
        };
    }
    match element_type {
        ElementType::Pred => ArrayData::Pred(bytes.iter().map(|&b| b != 0).collect()),
        ElementType::S8 => ArrayData::S8(read!(i8, |x| x)),
        ElementType::S16 => ArrayData::S16(read!(i16, |x| x)),
        ElementType::S32 => ArrayData::S32(read!(i32, |x| x)),
        ElementType::S64 => ArrayData::S64(read!(i64, |x| x)),
        ElementType::U8 => ArrayData::U8(bytes.to_vec()),
        ElementType::U16 => ArrayData::U16(read!(u16, |x| x)),
        ElementType::U32 => ArrayData::U32(read!(u32, |x| x)),
        ElementType::U64 => ArrayData::U64(read!(u64, |x| x)),
        ElementType::F16 => ArrayData::F16(read!(u16, half::f16::from_bits)),
        ElementType::Bf16 => ArrayData::Bf16(read!(u16, half::bf16::from_bits)),
        ElementType::F32 => ArrayData::F32(read!(f32, |x| x)),
        ElementType::F64 => ArrayData::F64(read!(f64, |x| x)),
        t => unreachable!("the evaluator refuses {t} values before computing any"),
    }
}
