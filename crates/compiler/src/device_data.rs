//! Host values to device bytes and back: every element in its device storage type
//! (see [`crate::types::device_type`]), little-endian, row-major.

use half::f16;
use xla_ir::literal::{ArrayData, ArrayLiteral};
use xla_ir::{ArrayShape, ElementType};

/// The device bytes of a literal (s64/u64 values wrap to 32 bits, as the int64 conversion
/// does; f64 and bf16 have no device form and panic: callers check types first).
pub fn to_device(data: &ArrayData) -> Vec<u8> {
    fn words<T: Copy>(v: &[T], f: impl Fn(T) -> [u8; 4]) -> Vec<u8> {
        v.iter().flat_map(|&x| f(x)).collect()
    }
    match data {
        ArrayData::Pred(v) => v.iter().map(|&b| b as u8).collect(),
        ArrayData::S8(v) => words(v, |x| (x as i32).to_le_bytes()),
        ArrayData::S16(v) => words(v, |x| (x as i32).to_le_bytes()),
        ArrayData::S32(v) => words(v, |x| x.to_le_bytes()),
        ArrayData::S64(v) => words(v, |x| (x as i32).to_le_bytes()),
        ArrayData::U8(v) => words(v, |x| (x as u32).to_le_bytes()),
        ArrayData::U16(v) => words(v, |x| (x as u32).to_le_bytes()),
        ArrayData::U32(v) => words(v, |x| x.to_le_bytes()),
        ArrayData::U64(v) => words(v, |x| (x as u32).to_le_bytes()),
        ArrayData::F16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ArrayData::F32(v) => words(v, |x| x.to_le_bytes()),
        ArrayData::F64(_)
        | ArrayData::Bf16(_)
        | ArrayData::C64(_)
        | ArrayData::C128(_)
        | ArrayData::Narrow { .. } => {
            unreachable!("types without a device form are rejected before lowering")
        }
    }
}

/// Device bytes of f32 elements as f32s: in place when aligned (and the host is
/// little-endian, the device's byte order), else converted.
pub(crate) fn f32_slice(bytes: &[u8]) -> std::borrow::Cow<'_, [f32]> {
    // SAFETY: every bit pattern is a valid f32; align_to yields only the aligned middle.
    match unsafe { bytes.align_to::<f32>() } {
        ([], v, []) if cfg!(target_endian = "little") => std::borrow::Cow::Borrowed(v),
        _ => std::borrow::Cow::Owned(
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        ),
    }
}

/// Fills device bytes of f32 elements with `fill`'s f32s: in place when the bytes are
/// aligned (on a little-endian host), else through a buffer copied in afterwards.
pub(crate) fn write_f32s<E>(
    bytes: &mut [u8],
    fill: impl FnOnce(&mut [f32]) -> Result<(), E>,
) -> Result<(), E> {
    // SAFETY: every bit pattern is a valid f32; align_to_mut yields only the aligned middle.
    match unsafe { bytes.align_to_mut::<f32>() } {
        ([], v, []) if cfg!(target_endian = "little") => fill(v),
        _ => {
            let mut buf = vec![0f32; bytes.len() / 4];
            fill(&mut buf)?;
            for (b, v) in bytes.chunks_exact_mut(4).zip(&buf) {
                b.copy_from_slice(&v.to_le_bytes());
            }
            Ok(())
        }
    }
}

/// The device bytes of a 64-bit integer literal kept exact as word pairs (see the int64
/// conversion): each value's 8 bytes, little-endian (low word first). Other literals as
/// [`to_device`].
pub fn to_device_words(data: &ArrayData) -> Vec<u8> {
    match data {
        ArrayData::S64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ArrayData::U64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        other => to_device(other),
    }
}

/// How a host array of `host` type travels in a device stream of `stream` shape: `Some`
/// of the bytes when the stream takes it (the same type; a 64-bit integer narrowed to 32
/// bits; or kept exact as `u32[dims..., 2]` word pairs), `None` when it does not.
pub fn stream_bytes(data: &ArrayData, host: &ArrayShape, stream: &ArrayShape) -> Option<Vec<u8>> {
    let wide = matches!(host.element_type, ElementType::S64 | ElementType::U64);
    let count = host.element_count();
    if wide
        && stream.element_type == ElementType::U32
        && stream.element_count() == 2 * count
        && stream.dims.last() == Some(&2)
    {
        return Some(to_device_words(data));
    }
    let narrowed = match host.element_type {
        ElementType::S64 => ElementType::S32,
        ElementType::U64 => ElementType::U32,
        t => t,
    };
    let same = stream.element_type == host.element_type || stream.element_type == narrowed;
    (same && stream.element_count() == count).then(|| to_device(data))
}

/// A literal of `shape` from device bytes (`bytes.len()` must be the device size; a 64-bit
/// integer array comes narrowed to 4 bytes per element or exact in 8).
pub fn from_device(shape: &ArrayShape, bytes: &[u8]) -> ArrayLiteral {
    let exact = bytes.len() as u64 == 8 * shape.element_count() && !bytes.is_empty();
    let w = |c: &[u8]| [c[0], c[1], c[2], c[3]];
    let w8 = |c: &[u8]| [c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]];
    let i32s = || bytes.chunks_exact(4).map(|c| i32::from_le_bytes(w(c)));
    let u32s = || bytes.chunks_exact(4).map(|c| u32::from_le_bytes(w(c)));
    let data = match shape.element_type {
        ElementType::Pred => ArrayData::Pred(bytes.iter().map(|&b| b != 0).collect()),
        ElementType::S8 => ArrayData::S8(i32s().map(|x| x as i8).collect()),
        ElementType::S16 => ArrayData::S16(i32s().map(|x| x as i16).collect()),
        ElementType::S32 => ArrayData::S32(i32s().collect()),
        ElementType::S64 if exact => ArrayData::S64(
            bytes
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(w8(c)))
                .collect(),
        ),
        ElementType::S64 => ArrayData::S64(i32s().map(i64::from).collect()),
        ElementType::U8 => ArrayData::U8(u32s().map(|x| x as u8).collect()),
        ElementType::U16 => ArrayData::U16(u32s().map(|x| x as u16).collect()),
        ElementType::U32 => ArrayData::U32(u32s().collect()),
        ElementType::U64 if exact => ArrayData::U64(
            bytes
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(w8(c)))
                .collect(),
        ),
        ElementType::U64 => ArrayData::U64(u32s().map(u64::from).collect()),
        ElementType::F16 => ArrayData::F16(
            bytes
                .chunks_exact(2)
                .map(|c| f16::from_le_bytes([c[0], c[1]]))
                .collect(),
        ),
        // A copy of the bytes when they are aligned: element by element took 2.5 % of the
        // bench MLP's runs (its 1.8 MB of updated weights read back).
        ElementType::F32 => ArrayData::F32(f32_slice(bytes).into_owned()),
        _ => unreachable!("types without a device form are rejected before lowering"),
    };
    ArrayLiteral {
        shape: shape.clone(),
        data,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrow_integers_round_trip_through_widened_storage() {
        let shape = ArrayShape::new(ElementType::S8, &[3]);
        let data = ArrayData::S8(vec![-128, 0, 127]);
        let bytes = to_device(&data);
        assert_eq!(bytes.len(), 12);
        assert_eq!(from_device(&shape, &bytes).data, data);
        let shape = ArrayShape::new(ElementType::U16, &[2]);
        let data = ArrayData::U16(vec![65535, 1]);
        assert_eq!(from_device(&shape, &to_device(&data)).data, data);
    }

    #[test]
    fn wide_integers_travel_narrowed_or_as_exact_words() {
        let host = ArrayShape::new(ElementType::U64, &[2]);
        let data = ArrayData::U64(vec![1 << 40 | 5, 7]);
        let words = ArrayShape::new(ElementType::U32, &[2, 2]);
        let bytes = stream_bytes(&data, &host, &words).unwrap();
        assert_eq!(bytes.len(), 16);
        assert_eq!(from_device(&host, &bytes).data, data);
        let narrow = ArrayShape::new(ElementType::U32, &[2]);
        let bytes = stream_bytes(&data, &host, &narrow).unwrap();
        assert_eq!(from_device(&host, &bytes).data, ArrayData::U64(vec![5, 7]));
        let other = ArrayShape::new(ElementType::F32, &[2]);
        assert_eq!(stream_bytes(&data, &host, &other), None);
    }
}
