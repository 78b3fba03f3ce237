//! The [`crate::math`] approximations on sixteen lanes at once with AVX-512 (eight with
//! AVX2 and FMA on hosts without it), run in place on a chunk of f32 values. The JIT
//! computes them on Cranelift's four-lane vectors, where the transcendental ops of a softmax
//! or a GELU are compute-bound (`tanh` and `exp` took about a nanosecond an element, two on
//! an AVX2 host); a staged kernel ([`crate::stages`]) instead computes such an op's operand
//! into a chunk and runs the op here. The routines are the same generic code instantiated
//! for [`Avx512`](avx512::Avx512) and [`Avx2`](avx2::Avx2), each operation one instruction
//! (or a few) of the same IEEE meaning as the JIT's (fused multiply-adds fused, comparisons
//! ordered, conversions saturating), so the values are the JIT's bit for bit, a NaN as a
//! NaN (checked against [`crate::math::HostEmitter`] on special values and 800 000 random
//! inputs below, and against the reference evaluator through compiled kernels in
//! `tests/jit_vs_reference.rs`).

use crate::kernel::UnaryOp;

/// True when `op` has a wide version here (a transcendental [`crate::math`] routine).
pub(crate) fn has(op: UnaryOp) -> bool {
    crate::math::TRANSCENDENTAL.contains(&op)
}

/// The widest routines this host runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Width {
    /// Sixteen lanes (AVX-512F).
    Sixteen,
    /// Eight lanes (AVX2 with FMA: the fused multiply-adds must stay fused).
    Eight,
}

/// The widest routines this host runs, if any.
fn width() -> Option<Width> {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            Some(Width::Sixteen)
        } else if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
        {
            Some(Width::Eight)
        } else {
            None
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// True when this host runs the wide versions (AVX-512F, or AVX2 with FMA); else kernels
/// keep the JIT's.
pub(crate) fn available() -> bool {
    width().is_some()
}

/// Replaces each value of `xs` by `op` of it. The caller has checked [`has`] and
/// [`available`].
pub(crate) fn apply_in_place(op: UnaryOp, xs: &mut [f32]) {
    debug_assert!(has(op) && available());
    #[cfg(target_arch = "x86_64")]
    match width() {
        // SAFETY: the host has AVX-512F.
        Some(Width::Sixteen) => unsafe { avx512::apply(op, xs) },
        // SAFETY: the host has AVX2 and FMA.
        Some(Width::Eight) => unsafe { avx2::apply(op, xs) },
        None => unreachable!("wide math is not available here, checked by the caller: {op:?}"),
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!(
        "wide math is available only on x86_64, checked by the caller: {op:?} on {} values",
        xs.len()
    )
}

/// The body of a width's `apply`: one function per op with `$feature` enabled, each
/// running that op's routine through the width's `run` and `lanes` (one routine inlined
/// once per function: an unoptimised build gives a function every inlined routine's
/// locals, and all eleven in one overflowed a thread's stack), and the match calling it.
#[cfg(target_arch = "x86_64")]
macro_rules! per_op {
    ($feature:literal, $op:expr, $xs:expr) => {
        per_op!(@ $feature, $op, $xs;
            Exp => exp, Expm1 => expm1, Log => log, Log1p => log1p, Tanh => tanh,
            Logistic => logistic, Cbrt => cbrt, Sin => sin, Cos => cos, Tan => tan, Erf => erf)
    };
    (@ $feature:literal, $op:expr, $xs:expr; $($name:ident => $f:ident),*) => {{
        $(
            #[target_feature(enable = $feature)]
            fn $f(xs: &mut [f32]) {
                run(xs, |x| lanes(UnaryOp::$name, x))
            }
        )*
        match $op {
            // SAFETY: the caller checked that the host has the features.
            $(UnaryOp::$name => unsafe { $f($xs) },)*
            op => unreachable!("wide_math::has({op:?}) is false: the caller checked it"),
        }
    }};
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use crate::kernel::UnaryOp;
    use crate::math::{self, Emitter};
    use std::arch::x86_64::*;

    /// [`Emitter`] on sixteen f32 lanes: every method one AVX-512F instruction (a few for
    /// the saturating `to_int`), inlined into each op's loop in [`apply`].
    pub(super) struct Avx512;

    const LANES: usize = 16;

    // SAFETY (every method): values of these types exist only inside `apply`'s per-op
    // functions, which run with AVX-512F enabled and are called only when the host has it.
    impl Emitter for Avx512 {
        type F = __m512;
        type I = __m512i;
        type M = __mmask16;

        #[inline(always)]
        fn f(&mut self, v: f32) -> __m512 {
            unsafe { _mm512_set1_ps(v) }
        }
        #[inline(always)]
        fn i(&mut self, v: i32) -> __m512i {
            unsafe { _mm512_set1_epi32(v) }
        }
        #[inline(always)]
        fn add(&mut self, a: __m512, b: __m512) -> __m512 {
            unsafe { _mm512_add_ps(a, b) }
        }
        #[inline(always)]
        fn sub(&mut self, a: __m512, b: __m512) -> __m512 {
            unsafe { _mm512_sub_ps(a, b) }
        }
        #[inline(always)]
        fn mul(&mut self, a: __m512, b: __m512) -> __m512 {
            unsafe { _mm512_mul_ps(a, b) }
        }
        #[inline(always)]
        fn fma(&mut self, a: __m512, b: __m512, c: __m512) -> __m512 {
            unsafe { _mm512_fmadd_ps(a, b, c) }
        }
        #[inline(always)]
        fn div(&mut self, a: __m512, b: __m512) -> __m512 {
            unsafe { _mm512_div_ps(a, b) }
        }
        #[inline(always)]
        fn abs(&mut self, a: __m512) -> __m512 {
            unsafe { _mm512_abs_ps(a) }
        }
        #[inline(always)]
        fn nearest(&mut self, a: __m512) -> __m512 {
            unsafe { _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(a) }
        }
        #[inline(always)]
        fn lt(&mut self, a: __m512, b: __m512) -> __mmask16 {
            unsafe { _mm512_cmp_ps_mask::<_CMP_LT_OQ>(a, b) }
        }
        #[inline(always)]
        fn eq(&mut self, a: __m512, b: __m512) -> __mmask16 {
            unsafe { _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(a, b) }
        }
        #[inline(always)]
        fn ieq(&mut self, a: __m512i, b: __m512i) -> __mmask16 {
            unsafe { _mm512_cmpeq_epi32_mask(a, b) }
        }
        #[inline(always)]
        fn select(&mut self, m: __mmask16, a: __m512, b: __m512) -> __m512 {
            // A blend takes its second operand where the mask is set.
            unsafe { _mm512_mask_blend_ps(m, b, a) }
        }
        #[inline(always)]
        fn float_to_bits(&mut self, a: __m512) -> __m512i {
            unsafe { _mm512_castps_si512(a) }
        }
        #[inline(always)]
        fn bits_to_float(&mut self, a: __m512i) -> __m512 {
            unsafe { _mm512_castsi512_ps(a) }
        }
        #[inline(always)]
        fn iadd(&mut self, a: __m512i, b: __m512i) -> __m512i {
            unsafe { _mm512_add_epi32(a, b) }
        }
        #[inline(always)]
        fn isub(&mut self, a: __m512i, b: __m512i) -> __m512i {
            unsafe { _mm512_sub_epi32(a, b) }
        }
        #[inline(always)]
        fn iand(&mut self, a: __m512i, b: __m512i) -> __m512i {
            unsafe { _mm512_and_si512(a, b) }
        }
        #[inline(always)]
        fn ior(&mut self, a: __m512i, b: __m512i) -> __m512i {
            unsafe { _mm512_or_si512(a, b) }
        }
        #[inline(always)]
        fn ixor(&mut self, a: __m512i, b: __m512i) -> __m512i {
            unsafe { _mm512_xor_si512(a, b) }
        }
        #[inline(always)]
        fn ishl(&mut self, a: __m512i, s: u8) -> __m512i {
            // Shifts of 32 or more give 0, as `wrapping_shl` does not, but the routines shift
            // by constants below 32.
            unsafe { _mm512_sll_epi32(a, _mm_cvtsi32_si128(i32::from(s))) }
        }
        #[inline(always)]
        fn isra(&mut self, a: __m512i, s: u8) -> __m512i {
            unsafe { _mm512_sra_epi32(a, _mm_cvtsi32_si128(i32::from(s))) }
        }
        #[inline(always)]
        fn imax(&mut self, a: __m512i, b: __m512i) -> __m512i {
            unsafe { _mm512_max_epi32(a, b) }
        }
        #[inline(always)]
        fn imin(&mut self, a: __m512i, b: __m512i) -> __m512i {
            unsafe { _mm512_min_epi32(a, b) }
        }
        #[inline(always)]
        fn to_int(&mut self, a: __m512) -> __m512i {
            // Truncation saturating as Cranelift's `fcvt_to_sint_sat` (and Rust's `as`):
            // the instruction gives i32::MIN for NaN and for either overflow, so NaN lanes
            // become 0 and lanes at or above 2^31 i32::MAX.
            unsafe {
                let t = _mm512_cvttps_epi32(a);
                let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(a, a);
                let high = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(a, _mm512_set1_ps(2_147_483_648.0));
                let t = _mm512_mask_mov_epi32(t, high, _mm512_set1_epi32(i32::MAX));
                _mm512_mask_mov_epi32(t, nan, _mm512_setzero_si512())
            }
        }
        #[inline(always)]
        fn to_float(&mut self, a: __m512i) -> __m512 {
            unsafe { _mm512_cvtepi32_ps(a) }
        }
    }

    /// One op on sixteen lanes.
    #[inline(always)]
    fn lanes(op: UnaryOp, x: __m512) -> __m512 {
        math::unary(&mut Avx512, op, x)
            .unwrap_or_else(|| unreachable!("{op:?} is not a math routine: the caller checked"))
    }

    /// `op` on every value of `xs`, sixteen at a time.
    ///
    /// # Safety
    /// The host has AVX-512F.
    pub(super) unsafe fn apply(op: UnaryOp, xs: &mut [f32]) {
        per_op!("avx512f", op, xs)
    }

    /// `f` over `xs` in place, sixteen lanes at a time, the last lanes through a masked
    /// load and store (one call site, so `f` is inlined once).
    #[inline(always)]
    fn run(xs: &mut [f32], f: impl Fn(__m512) -> __m512) {
        let p = xs.as_mut_ptr();
        let mut at = 0;
        while at < xs.len() {
            let rest = xs.len() - at;
            let mask: __mmask16 = if rest >= LANES {
                u16::MAX
            } else {
                ((1u32 << rest) - 1) as u16
            };
            // SAFETY: the masked lanes are the values from `at` on inside `xs` (at most
            // sixteen); the others are neither read nor written.
            unsafe {
                let x = _mm512_maskz_loadu_ps(mask, p.add(at));
                _mm512_mask_storeu_ps(p.add(at), mask, f(x));
            }
            at += LANES;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use crate::kernel::UnaryOp;
    use crate::math::{self, Emitter};
    use std::arch::x86_64::*;

    /// [`Emitter`] on eight f32 lanes: every method one AVX2 or FMA instruction (a few for
    /// `abs` and the saturating `to_int`), inlined into each op's loop in [`apply`]. A
    /// lane mask is a vector whose set lanes are all ones.
    pub(super) struct Avx2;

    const LANES: usize = 8;

    // SAFETY (every method): values of these types exist only inside `apply`'s per-op
    // functions, which run with AVX2 and FMA enabled and are called only when the host has
    // them.
    impl Emitter for Avx2 {
        type F = __m256;
        type I = __m256i;
        type M = __m256;

        #[inline(always)]
        fn f(&mut self, v: f32) -> __m256 {
            unsafe { _mm256_set1_ps(v) }
        }
        #[inline(always)]
        fn i(&mut self, v: i32) -> __m256i {
            unsafe { _mm256_set1_epi32(v) }
        }
        #[inline(always)]
        fn add(&mut self, a: __m256, b: __m256) -> __m256 {
            unsafe { _mm256_add_ps(a, b) }
        }
        #[inline(always)]
        fn sub(&mut self, a: __m256, b: __m256) -> __m256 {
            unsafe { _mm256_sub_ps(a, b) }
        }
        #[inline(always)]
        fn mul(&mut self, a: __m256, b: __m256) -> __m256 {
            unsafe { _mm256_mul_ps(a, b) }
        }
        #[inline(always)]
        fn fma(&mut self, a: __m256, b: __m256, c: __m256) -> __m256 {
            unsafe { _mm256_fmadd_ps(a, b, c) }
        }
        #[inline(always)]
        fn div(&mut self, a: __m256, b: __m256) -> __m256 {
            unsafe { _mm256_div_ps(a, b) }
        }
        #[inline(always)]
        fn abs(&mut self, a: __m256) -> __m256 {
            // The sign bit cleared, a NaN's payload kept.
            unsafe { _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(i32::MAX))) }
        }
        #[inline(always)]
        fn nearest(&mut self, a: __m256) -> __m256 {
            unsafe { _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(a) }
        }
        #[inline(always)]
        fn lt(&mut self, a: __m256, b: __m256) -> __m256 {
            unsafe { _mm256_cmp_ps::<_CMP_LT_OQ>(a, b) }
        }
        #[inline(always)]
        fn eq(&mut self, a: __m256, b: __m256) -> __m256 {
            unsafe { _mm256_cmp_ps::<_CMP_EQ_OQ>(a, b) }
        }
        #[inline(always)]
        fn ieq(&mut self, a: __m256i, b: __m256i) -> __m256 {
            unsafe { _mm256_castsi256_ps(_mm256_cmpeq_epi32(a, b)) }
        }
        #[inline(always)]
        fn select(&mut self, m: __m256, a: __m256, b: __m256) -> __m256 {
            // A blend takes its second operand where the mask's sign bit is set.
            unsafe { _mm256_blendv_ps(b, a, m) }
        }
        #[inline(always)]
        fn float_to_bits(&mut self, a: __m256) -> __m256i {
            unsafe { _mm256_castps_si256(a) }
        }
        #[inline(always)]
        fn bits_to_float(&mut self, a: __m256i) -> __m256 {
            unsafe { _mm256_castsi256_ps(a) }
        }
        #[inline(always)]
        fn iadd(&mut self, a: __m256i, b: __m256i) -> __m256i {
            unsafe { _mm256_add_epi32(a, b) }
        }
        #[inline(always)]
        fn isub(&mut self, a: __m256i, b: __m256i) -> __m256i {
            unsafe { _mm256_sub_epi32(a, b) }
        }
        #[inline(always)]
        fn iand(&mut self, a: __m256i, b: __m256i) -> __m256i {
            unsafe { _mm256_and_si256(a, b) }
        }
        #[inline(always)]
        fn ior(&mut self, a: __m256i, b: __m256i) -> __m256i {
            unsafe { _mm256_or_si256(a, b) }
        }
        #[inline(always)]
        fn ixor(&mut self, a: __m256i, b: __m256i) -> __m256i {
            unsafe { _mm256_xor_si256(a, b) }
        }
        #[inline(always)]
        fn ishl(&mut self, a: __m256i, s: u8) -> __m256i {
            // As the AVX-512 version: the routines shift by constants below 32.
            unsafe { _mm256_sll_epi32(a, _mm_cvtsi32_si128(i32::from(s))) }
        }
        #[inline(always)]
        fn isra(&mut self, a: __m256i, s: u8) -> __m256i {
            unsafe { _mm256_sra_epi32(a, _mm_cvtsi32_si128(i32::from(s))) }
        }
        #[inline(always)]
        fn imax(&mut self, a: __m256i, b: __m256i) -> __m256i {
            unsafe { _mm256_max_epi32(a, b) }
        }
        #[inline(always)]
        fn imin(&mut self, a: __m256i, b: __m256i) -> __m256i {
            unsafe { _mm256_min_epi32(a, b) }
        }
        #[inline(always)]
        fn to_int(&mut self, a: __m256) -> __m256i {
            // Truncation saturating as Cranelift's `fcvt_to_sint_sat`: the instruction gives
            // i32::MIN for NaN and for either overflow, so NaN lanes become 0 and lanes at
            // or above 2^31 i32::MAX.
            unsafe {
                let t = _mm256_castsi256_ps(_mm256_cvttps_epi32(a));
                let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(a, a);
                let high = _mm256_cmp_ps::<_CMP_GE_OQ>(a, _mm256_set1_ps(2_147_483_648.0));
                let max = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MAX));
                let t = _mm256_blendv_ps(t, max, high);
                _mm256_castps_si256(_mm256_blendv_ps(t, _mm256_setzero_ps(), nan))
            }
        }
        #[inline(always)]
        fn to_float(&mut self, a: __m256i) -> __m256 {
            unsafe { _mm256_cvtepi32_ps(a) }
        }
    }

    /// One op on eight lanes.
    #[inline(always)]
    fn lanes(op: UnaryOp, x: __m256) -> __m256 {
        math::unary(&mut Avx2, op, x)
            .unwrap_or_else(|| unreachable!("{op:?} is not a math routine: the caller checked"))
    }

    /// `op` on every value of `xs`, eight at a time.
    ///
    /// # Safety
    /// The host has AVX2 and FMA.
    pub(super) unsafe fn apply(op: UnaryOp, xs: &mut [f32]) {
        per_op!("avx2,fma", op, xs)
    }

    /// `f` over `xs` in place, eight lanes at a time, the last lanes through a buffer of
    /// eight (one call site each way, so `f` is inlined twice).
    #[inline(always)]
    fn run(xs: &mut [f32], f: impl Fn(__m256) -> __m256) {
        let mut chunks = xs.chunks_exact_mut(LANES);
        for chunk in &mut chunks {
            // SAFETY: the chunk holds eight values.
            unsafe { _mm256_storeu_ps(chunk.as_mut_ptr(), f(_mm256_loadu_ps(chunk.as_ptr()))) }
        }
        let tail = chunks.into_remainder();
        if !tail.is_empty() {
            let mut lanes = [0f32; LANES];
            lanes[..tail.len()].copy_from_slice(tail);
            // SAFETY: `lanes` holds eight values.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), f(_mm256_loadu_ps(lanes.as_ptr()))) }
            tail.copy_from_slice(&lanes[..tail.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::math::{self, HostEmitter};

    fn host(op: UnaryOp, x: f32) -> f32 {
        math::unary(&mut HostEmitter, op, x).expect("a math routine")
    }

    /// Special values, every binade's edges, and random bit patterns (NaNs, infinities,
    /// subnormals included); a length that is not a multiple of sixteen, so the masked
    /// tail runs too.
    fn inputs() -> Vec<f32> {
        let mut xs = vec![
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            f32::MIN_POSITIVE,
            f32::MAX,
            f32::MIN,
            1e-45,
            -1e-45,
            88.72,
            -103.97,
            -104.5,
            -200.0,
            2_147_483_648.0,
            -2_147_483_648.0,
            1e30,
        ];
        for e in -149..128 {
            let x = 2f32.powi(e);
            xs.extend([
                x,
                -x,
                x * 1.5,
                -x * 1.5,
                f32::from_bits(x.to_bits().saturating_sub(1)),
            ]);
        }
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..400_000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            xs.push(f32::from_bits(s as u32));
            // Small magnitudes, where most of the routines' polynomials work.
            xs.push((s >> 40) as f32 / (1u64 << 20) as f32 - 8.0);
        }
        xs.push(0.5);
        xs
    }

    /// Every op through `apply` (a width's routines) gives the host routines' bits.
    fn check(width: &str, apply: impl Fn(UnaryOp, &mut [f32])) {
        let xs = inputs();
        assert_ne!(xs.len() % 16, 0, "the tail must be exercised");
        assert_ne!(xs.len() % 8, 0, "the tail must be exercised");
        for op in math::TRANSCENDENTAL {
            assert!(has(op));
            let mut wide = xs.clone();
            apply(op, &mut wide);
            for (&x, &w) in xs.iter().zip(&wide) {
                let want = host(op, x);
                assert!(
                    w.to_bits() == want.to_bits() || (w.is_nan() && want.is_nan()),
                    "{width} {op:?}({x:e} = {:#x}): wide {w:e} ({:#x}), host {want:e} ({:#x})",
                    x.to_bits(),
                    w.to_bits(),
                    want.to_bits()
                );
            }
        }
    }

    #[test]
    fn the_wide_routines_give_the_host_routines_bits() {
        if width() != Some(Width::Sixteen) {
            eprintln!("skipped: this host has no AVX-512F");
            return;
        }
        // SAFETY: the host has AVX-512F (checked above).
        check("avx512", |op, xs| unsafe { avx512::apply(op, xs) });
    }

    #[test]
    fn the_eight_lane_routines_give_the_host_routines_bits() {
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            // SAFETY: the host has AVX2 and FMA (checked above).
            check("avx2", |op, xs| unsafe { avx2::apply(op, xs) });
            return;
        }
        eprintln!("skipped: this host has no AVX2 with FMA");
    }

    #[test]
    fn only_the_math_routines_are_wide() {
        assert!(!has(UnaryOp::Sqrt) && !has(UnaryOp::Abs) && !has(UnaryOp::RoundF16));
    }
}
