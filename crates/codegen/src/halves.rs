//! f16 values in tile memory (little-endian bytes, any alignment) to f32 and back, as the
//! kernels' f16 operands and results need on every call. With the F16C instructions (eight
//! values per instruction, unaligned loads) when the CPU has them, else with `half`'s
//! conversions; both round f32 to f16 to nearest even and give the same bits.

use half::f16;

/// Converts the f16 values in `bytes` (two per value, little-endian) to f32 in `out`.
///
/// # Panics
/// When `bytes` holds fewer than `out.len()` values.
pub fn widen_into(bytes: &[u8], out: &mut [f32]) {
    let bytes = &bytes[..out.len() * 2];
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("f16c") && std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: the CPU has F16C and AVX (checked above); lengths match (sliced above).
        unsafe { x86::widen(bytes, out) };
        return;
    }
    for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *o = f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32();
    }
}

/// The f16 values in `bytes`, `n` of them, as f32.
pub fn widened(bytes: &[u8], n: usize) -> Vec<f32> {
    let mut out = vec![0f32; n];
    widen_into(bytes, &mut out);
    out
}

/// Writes `values` as f16 (rounded to nearest even) into `bytes`, two bytes each.
///
/// # Panics
/// When `bytes` is shorter than two bytes per value.
pub fn narrow_into(values: &[f32], bytes: &mut [u8]) {
    let bytes = &mut bytes[..values.len() * 2];
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("f16c") && std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: the CPU has F16C and AVX (checked above); lengths match (sliced above).
        unsafe { x86::narrow(values, bytes) };
        return;
    }
    for (c, v) in bytes.chunks_exact_mut(2).zip(values) {
        c.copy_from_slice(&f16::from_f32(*v).to_bits().to_le_bytes());
    }
}

/// Rounds each value to the nearest f16 (ties to even) and back to f32, in place: what
/// storing it as f16 and reading it again gives ([`narrow_into`] then [`widen_into`]).
pub fn round_in_place(values: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("f16c") && std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: the CPU has F16C and AVX (checked above).
        unsafe { x86::round(values) };
        return;
    }
    for v in values {
        *v = f16::from_f32(*v).to_f32();
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use half::f16;
    use std::arch::x86_64::{
        __m128i, _MM_FROUND_TO_NEAREST_INT, _mm_loadu_si128, _mm_storeu_si128, _mm256_cvtph_ps,
        _mm256_cvtps_ph, _mm256_loadu_ps, _mm256_storeu_ps,
    };

    /// `bytes.len() == 2 * out.len()`; the CPU must have F16C and AVX.
    #[target_feature(enable = "f16c,avx")]
    pub(super) unsafe fn widen(bytes: &[u8], out: &mut [f32]) {
        let n = out.len();
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: values i..i + 8 lie in both slices (bytes holds 2 per value); the
            // loads and stores are unaligned.
            unsafe {
                let h = _mm_loadu_si128(bytes.as_ptr().add(i * 2) as *const __m128i);
                _mm256_storeu_ps(out.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
            }
            i += 8;
        }
        for j in i..n {
            out[j] = f16::from_bits(u16::from_le_bytes([bytes[2 * j], bytes[2 * j + 1]])).to_f32();
        }
    }

    /// The CPU must have F16C and AVX.
    #[target_feature(enable = "f16c,avx")]
    pub(super) unsafe fn round(values: &mut [f32]) {
        let n = values.len();
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: values i..i + 8 lie in the slice; the loads and stores are unaligned.
            unsafe {
                let at = values.as_mut_ptr().add(i);
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(at));
                _mm256_storeu_ps(at, _mm256_cvtph_ps(h));
            }
            i += 8;
        }
        for v in &mut values[i..] {
            *v = f16::from_f32(*v).to_f32();
        }
    }

    /// `bytes.len() == 2 * values.len()`; the CPU must have F16C and AVX.
    #[target_feature(enable = "f16c,avx")]
    pub(super) unsafe fn narrow(values: &[f32], bytes: &mut [u8]) {
        let n = values.len();
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: values i..i + 8 lie in both slices; the loads and stores are unaligned.
            unsafe {
                let v = _mm256_loadu_ps(values.as_ptr().add(i));
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
                _mm_storeu_si128(bytes.as_mut_ptr().add(i * 2) as *mut __m128i, h);
            }
            i += 8;
        }
        for j in i..n {
            let b = f16::from_f32(values[j]).to_bits().to_le_bytes();
            bytes[2 * j..2 * j + 2].copy_from_slice(&b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every f16 bit pattern, and f32 values around every rounding boundary, convert as
    /// `half`'s scalar conversions do, at every length and byte offset.
    #[test]
    fn conversions_give_halfs_bits_at_any_length_and_alignment() {
        let all: Vec<u16> = (0..=u16::MAX).collect();
        let bytes: Vec<u8> = all.iter().flat_map(|b| b.to_le_bytes()).collect();
        let wide = widened(&bytes, all.len());
        for (&b, w) in all.iter().zip(&wide) {
            let want = f16::from_bits(b).to_f32();
            assert!(
                want.to_bits() == w.to_bits() || (want.is_nan() && w.is_nan()),
                "{b:#06x}"
            );
        }
        let mut values: Vec<f32> = Vec::new();
        for b in (0..=u16::MAX).step_by(7) {
            let x = f16::from_bits(b).to_f32();
            let bits = x.to_bits();
            values.extend([
                x,
                f32::from_bits(bits + 0x1000),
                f32::from_bits(bits + 0xfff),
            ]);
            values.extend([
                f32::from_bits(bits + 0x1001),
                f32::from_bits(bits.wrapping_sub(1)),
            ]);
        }
        values.extend([1e9, -1e9, 65520.0, 65519.0, 1e-9, f32::INFINITY, f32::NAN]);
        for offset in 0..3 {
            for len in [0, 1, 7, 8, 9, 15, 17, values.len()] {
                let mut out = vec![0u8; offset + 2 * len];
                narrow_into(&values[..len], &mut out[offset..]);
                for (i, v) in values[..len].iter().enumerate() {
                    let got = u16::from_le_bytes([out[offset + 2 * i], out[offset + 2 * i + 1]]);
                    let want = f16::from_f32(*v);
                    assert!(
                        got == want.to_bits() || (want.is_nan() && f16::from_bits(got).is_nan()),
                        "{v:e}: {got:#06x} against {:#06x}",
                        want.to_bits()
                    );
                }
                let mut back = vec![0f32; len];
                widen_into(&out[offset..], &mut back);
                for (i, b) in back.iter().enumerate() {
                    let h = u16::from_le_bytes([out[offset + 2 * i], out[offset + 2 * i + 1]]);
                    assert_eq!(b.to_bits(), f16::from_bits(h).to_f32().to_bits());
                }
                // Rounding in place is the narrowing and widening back, bit for bit.
                let mut rounded = values[..len].to_vec();
                round_in_place(&mut rounded);
                assert_eq!(
                    rounded.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    back.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
                );
            }
        }
    }
}
