//! Matrix products with one to eight columns, as dot products along the left operand's
//! rows. gemm packs the left operand into panels for its register tiles before multiplying;
//! with so few columns the packing costs as much as the arithmetic, and much of each tile
//! is unused. Here each row is read once, in place, against the columns gathered once into
//! contiguous vectors, several rows at a time so that their sums run side by side. (A
//! convolution's weight gradient split over output features is such a product: 144 × 6272
//! × 2 per tile in the bench CNN; its forward convolution makes 14 × 288 × 8 ones.)
//! Measured against gemm on this machine's AVX-512 (warm caches): 14 × 288 × 8 1.9 µs
//! against 2.7, 64 × 256 × 4 2.5 against 5.6, 1024 × 256 × 6 41 against 73; with eight
//! columns and many rows the two are alike. With one column gemm's own matrix-vector path
//! is faster when the column is contiguous (144 × 196 × 1: 1.3 µs against 1.9), and 3-7×
//! slower when it is strided (1 × 256 × 1 reading every 128th element: 2.0 µs against
//! 0.3 µs here; the bench MLP's bias gradients make 2 560 such products a run).

use crate::jit::MatRef;

/// The most columns computed here; wider products go to gemm.
pub(crate) const MAX_COLUMNS: usize = 8;

/// Lanes summed side by side, so the compiler can keep them in one vector register.
const LANES: usize = 8;

/// `c = a × b` (c row-major m×n) when `n ≤ MAX_COLUMNS`, a's rows are contiguous and b is
/// not one contiguous column; false (nothing written) otherwise. The caller has checked
/// that every element lies in its slice.
pub(crate) fn narrow_product(
    m: usize,
    k: usize,
    n: usize,
    a: &MatRef,
    b: &MatRef,
    c: &mut [f32],
) -> bool {
    let contiguous_column = n == 1 && b.rs == 1;
    if !(1..=MAX_COLUMNS).contains(&n) || contiguous_column || a.cs != 1 || k == 0 {
        return false;
    }
    // The gathered columns go in a per-thread buffer, reused from one call to the next:
    // a run makes thousands of these products.
    let mut columns = COLUMNS.take();
    columns.clear();
    columns.resize(n * k, 0.0);
    for (j, column) in columns.chunks_exact_mut(k).enumerate() {
        let first = b.at as isize + j as isize * b.cs;
        for (d, x) in column.iter_mut().enumerate() {
            *x = b.data[(first + d as isize * b.rs) as usize];
        }
    }
    product_of_columns(m, k, n, a, &columns, c);
    COLUMNS.set(columns);
    true
}

/// `c = a × b` (c row-major m×n) where b's `n` columns, `k` values each, are stored one
/// after another in `columns`: what [`narrow_product`] computes once it has gathered them,
/// the same sums in the same order, for a caller holding the columns already. The caller
/// has checked `1 ≤ n ≤ MAX_COLUMNS`, that a's rows are contiguous and that every element
/// lies in its slice.
pub(crate) fn product_of_columns(
    m: usize,
    k: usize,
    n: usize,
    a: &MatRef,
    columns: &[f32],
    c: &mut [f32],
) {
    let row = |r: usize| {
        let start = (a.at as isize + r as isize * a.rs) as usize;
        &a.data[start..start + k]
    };
    product(m, n, row, &columns[..n * k], &mut c[..m * n]);
}

thread_local! {
    /// [`narrow_product`]'s gathered columns.
    static COLUMNS: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// `out` (m × n, row-major) = the `m` rows `row(r)` against the `n` columns stored one
/// after another.
fn product<'a>(
    m: usize,
    n: usize,
    row: impl Fn(usize) -> &'a [f32],
    columns: &[f32],
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        match n {
            1 => blocked::<4, 1>(m, row, columns, out),
            2 => blocked::<4, 2>(m, row, columns, out),
            3 => blocked::<3, 3>(m, row, columns, out),
            4 => blocked::<2, 4>(m, row, columns, out),
            5 => blocked::<2, 5>(m, row, columns, out),
            6 => blocked::<2, 6>(m, row, columns, out),
            7 => blocked::<1, 7>(m, row, columns, out),
            _ => blocked::<1, 8>(m, row, columns, out),
        }
        return;
    }
    for (r, out) in out.chunks_exact_mut(n).enumerate() {
        dots(row(r), columns, out);
    }
}

/// [`dots_fma`] over the `m` rows `row(r)`, `R` at a time, then one at a time; `out` holds
/// `m × N`.
#[cfg(target_arch = "x86_64")]
fn blocked<'a, const R: usize, const N: usize>(
    m: usize,
    row: impl Fn(usize) -> &'a [f32],
    columns: &[f32],
    out: &mut [f32],
) {
    let whole = m / R * R;
    for (first, out) in (0..whole).step_by(R).zip(out.chunks_exact_mut(R * N)) {
        let block: [&[f32]; R] = std::array::from_fn(|i| row(first + i));
        // SAFETY: the caller detected AVX2 and FMA.
        unsafe { dots_fma::<R, N>(&block, columns, out) };
    }
    for (r, out) in (whole..m).zip(out[whole * N..].chunks_exact_mut(N)) {
        // SAFETY: as above.
        unsafe { dots_fma::<1, N>(&[row(r)], columns, out) };
    }
}

/// `R` rows against `N` columns with AVX2 vectors and fused multiply-adds: eight lanes per
/// row and column, each row's and each column's vector loaded once for all of their
/// `R × N` sums, which run side by side (one sum alone waits on each of its additions).
/// Each sum adds its terms in the order [`dots`] does, whatever `R`.
// The loops over the constants `R` and `N` unroll fully, so the accumulators stay in
// registers; their indices also address the columns, which iterators would obscure.
#[allow(clippy::needless_range_loop)]
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dots_fma<const R: usize, const N: usize>(
    rows: &[&[f32]],
    columns: &[f32],
    out: &mut [f32],
) {
    use std::arch::x86_64::*;
    let k = rows[0].len();
    let whole = k / LANES * LANES;
    let mut acc = [[_mm256_setzero_ps(); N]; R];
    for at in (0..whole).step_by(LANES) {
        // SAFETY: at + LANES <= whole <= k, every row holds k elements and column j holds
        // k elements at j*k.
        unsafe {
            let mut x = [_mm256_setzero_ps(); R];
            for (x, row) in x.iter_mut().zip(rows) {
                *x = _mm256_loadu_ps(row.as_ptr().add(at));
            }
            for j in 0..N {
                let y = _mm256_loadu_ps(columns.as_ptr().add(j * k + at));
                for r in 0..R {
                    acc[r][j] = _mm256_fmadd_ps(x[r], y, acc[r][j]);
                }
            }
        }
    }
    for (r, row) in rows.iter().enumerate().take(R) {
        for j in 0..N {
            let mut lanes = [0f32; LANES];
            // SAFETY: lanes holds LANES f32s.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), acc[r][j]) };
            let mut sum = lanes.iter().sum::<f32>();
            for d in whole..k {
                sum = row[d].mul_add(columns[j * k + d], sum);
            }
            out[r * N + j] = sum;
        }
    }
}

/// `out[j] = row · columns[j]` for each of the `out.len()` columns stored one after another,
/// each `row.len()` long, with `LANES` partial sums per column.
fn dots(row: &[f32], columns: &[f32], out: &mut [f32]) {
    let k = row.len();
    let whole = k / LANES * LANES;
    for (j, out) in out.iter_mut().enumerate() {
        let col = &columns[j * k..(j + 1) * k];
        let mut acc = [0f32; LANES];
        for (x, y) in row[..whole]
            .chunks_exact(LANES)
            .zip(col.chunks_exact(LANES))
        {
            for l in 0..LANES {
                acc[l] += x[l] * y[l];
            }
        }
        let tail: f32 = (whole..k).map(|d| row[d] * col[d]).sum();
        *out = acc.iter().sum::<f32>() + tail;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| ((i as u32).wrapping_mul(2_654_435_761) ^ seed) as f32 / u32::MAX as f32 - 0.5)
            .collect()
    }

    #[test]
    fn narrow_products_match_sums_in_f64_for_every_width_and_a_strided_right_operand() {
        for (m, k, n) in [
            (5, 37, 2),
            (3, 8, 2),
            (7, 100, 3),
            (1, 1, 2),
            (9, 37, 4),
            (5, 300, 5),
            (3, 17, 6),
            (4, 64, 7),
            (14, 288, 8),
            (2, 3, 8),
        ] {
            let a = values(m * k + 3, 1);
            // b stored transposed (column j at j*k), read with row step 1, column step k.
            let b = values(k * n, 2);
            let (am, bm) = (
                MatRef {
                    data: &a,
                    at: 3,
                    rs: k as isize,
                    cs: 1,
                },
                MatRef {
                    data: &b,
                    at: 0,
                    rs: 1,
                    cs: k as isize,
                },
            );
            let mut c = vec![f32::NAN; m * n];
            assert!(narrow_product(m, k, n, &am, &bm, &mut c));
            for r in 0..m {
                for j in 0..n {
                    let want: f64 = (0..k)
                        .map(|d| a[3 + r * k + d] as f64 * b[j * k + d] as f64)
                        .sum();
                    assert!(
                        (c[r * n + j] as f64 - want).abs() < 1e-4,
                        "{m}x{k}x{n} ({r},{j})"
                    );
                }
            }
        }
    }

    /// One column read every `stride`-th element (a bias gradient's `1 × 256 × 1` reading
    /// every 128th): computed here, against the sum in f64.
    #[test]
    fn a_single_strided_column_is_computed_here() {
        for (m, k, stride) in [(1, 256, 128), (4, 37, 3), (9, 1, 2)] {
            let a = values(m * k, 3);
            let b = values(k * stride + 5, 4);
            let am = MatRef::row_major(&a, k);
            let bm = MatRef {
                data: &b,
                at: 5,
                rs: stride as isize,
                cs: 0,
            };
            let mut c = vec![f32::NAN; m];
            assert!(narrow_product(m, k, 1, &am, &bm, &mut c));
            for r in 0..m {
                let want: f64 = (0..k)
                    .map(|d| a[r * k + d] as f64 * b[5 + d * stride] as f64)
                    .sum();
                assert!((c[r] as f64 - want).abs() < 1e-4, "{m}x{k} by {stride}");
            }
        }
    }

    #[test]
    fn contiguous_single_and_wide_products_and_strided_rows_are_left_to_gemm() {
        let data = vec![1.0; 64];
        let row_major = MatRef::row_major(&data, 4);
        let column_major = MatRef {
            data: &data,
            at: 0,
            rs: 1,
            cs: 4,
        };
        let mut c = vec![0.0; 16];
        assert!(!narrow_product(2, 2, 9, &row_major, &row_major, &mut c));
        assert!(!narrow_product(4, 4, 1, &row_major, &column_major, &mut c));
        assert!(!narrow_product(4, 4, 2, &column_major, &row_major, &mut c));
        assert_eq!(c, vec![0.0; 16]);
    }
}
