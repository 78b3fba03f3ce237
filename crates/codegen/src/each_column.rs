//! One matrix multiplied by many columns, each product's values bit for bit what the
//! product of the matrix by that column alone gives ([`gemm_f32_refs`] with one column, or
//! with at most eight narrow ones), but with each block of the matrix read once for a block
//! of columns: the parts of a convolution split over output features each multiply one
//! patch matrix by their own column, which alone streams the whole matrix per column.
//!
//! Why the bits agree: `gemm_f32_refs` with one contiguous column and at most 256 rows runs
//! the `gemm` crate's horizontal kernels, where every output element has its own vector
//! accumulator over the depth (blocks of 1 024), reduced on its own: the element's value
//! does not depend on which rows and columns share its kernel call, so a call over a block
//! of `≤ 256` elements gives each the value a one-column call gives. The narrow product
//! ([`crate::narrow_product`]) sums each element alone in the same order whatever the
//! number of columns.

use crate::jit::{MatRef, gemm_f32_refs, gemm_into};
use crate::narrow_product::{MAX_COLUMNS, product_of_columns};

/// Output elements of one call to `gemm`'s horizontal kernels (its own bound: rows ×
/// columns ≤ 16 × 16).
const HORIZONTAL_ELEMENTS: usize = 256;

/// Columns in one block: a block of rows is read once for this many.
const COLUMN_BLOCK: usize = 16;

/// `c` (m × n, row-major) = `a` (m × k) by the `n` columns stored one after another in
/// `columns` (`k` values each): column `j` of `c` holds, bit for bit, what
/// [`gemm_f32_refs`] gives for `a` by column `j` alone as a contiguous `k × 1` matrix.
pub fn gemm_f32_each_column(
    m: usize,
    k: usize,
    n: usize,
    a: MatRef,
    columns: &[f32],
    c: &mut [f32],
) {
    assert!(
        columns.len() >= n * k && c.len() >= m * n,
        "matrix operands shorter than their shapes"
    );
    let column = |j: usize| MatRef {
        data: columns,
        at: j * k,
        rs: 1,
        cs: 1,
    };
    // One column alone takes the horizontal kernels only from a row-contiguous `a` with at
    // most 256 rows (and some depth); otherwise each column is multiplied alone.
    if m == 0 || k == 0 || a.cs != 1 || a.rs < 0 || m > HORIZONTAL_ELEMENTS || n < 2 {
        let mut alone = vec![0f32; m];
        for j in 0..n {
            gemm_f32_refs(m, k, 1, a, column(j), &mut alone);
            for (row, &x) in c.chunks_exact_mut(n).zip(&alone) {
                row[j] = x;
            }
        }
        return;
    }
    assert!(a.fits(m, k), "matrix operands shorter than their shapes");
    let cols = n.min(COLUMN_BLOCK);
    let rows = (HORIZONTAL_ELEMENTS / cols).min(m);
    let mut block = vec![0f32; rows * cols];
    for c0 in (0..n).step_by(cols) {
        let nb = cols.min(n - c0);
        for r0 in (0..m).step_by(rows) {
            let mb = rows.min(m - r0);
            let rows_here = MatRef {
                at: a.at + r0 * a.rs as usize,
                ..a
            };
            let columns_here = MatRef {
                data: columns,
                at: c0 * k,
                rs: 1,
                cs: k as isize,
            };
            // SAFETY: rows r0..r0+mb of `a` and columns c0..c0+nb lie in their slices
            // (asserted above); `block` holds mb × nb elements, written column-major (row
            // step 1, column step mb), which keeps `gemm` from transposing the product: it
            // runs its horizontal kernels (row-contiguous lhs, column-contiguous rhs,
            // mb × nb ≤ 256) as a one-column call does.
            unsafe {
                gemm_into(
                    mb,
                    k,
                    nb,
                    &rows_here,
                    &columns_here,
                    block.as_mut_ptr(),
                    (1, mb as isize),
                )
            };
            for j in 0..nb {
                for i in 0..mb {
                    // As `gemm_f32_refs`: a sum is never -0.
                    c[(r0 + i) * n + c0 + j] = block[j * mb + i] + 0.0;
                }
            }
        }
    }
}

/// `c` (m × n, row-major) = `a` (m × k, rows contiguous) by the `n` columns stored one after
/// another in `columns` (`k` values each), for any `n ≥ 1`: each column's values bit for
/// bit what the narrow product gives it in a product of at most eight columns, as
/// [`gemm_f32_refs`] multiplies two to eight columns, or one that is not contiguous (which
/// it gathers so itself): for a caller that can gather the columns straight from where
/// they lie (a convolution part's kernel).
pub fn gemm_f32_narrow_columns(
    m: usize,
    k: usize,
    n: usize,
    a: MatRef,
    columns: &[f32],
    c: &mut [f32],
) {
    assert!(a.cs == 1, "contiguous rows, not a column step of {}", a.cs);
    assert!(
        a.fits(m, k) && columns.len() >= n * k && c.len() >= m * n,
        "matrix operands shorter than their shapes"
    );
    if m == 0 {
        return;
    }
    if k == 0 {
        c[..m * n].fill(0.0);
        return;
    }
    if n <= MAX_COLUMNS {
        product_of_columns(m, k, n, &a, columns, c);
        // As `gemm_f32_refs`: a sum is never -0.
        c[..m * n].iter_mut().for_each(|x| *x += 0.0);
        return;
    }
    let mut block = vec![0f32; m * MAX_COLUMNS];
    for c0 in (0..n).step_by(MAX_COLUMNS) {
        let nb = MAX_COLUMNS.min(n - c0);
        let part = &columns[c0 * k..(c0 + nb) * k];
        product_of_columns(m, k, nb, &a, part, &mut block[..m * nb]);
        for (row, out) in block[..m * nb].chunks_exact(nb).zip(c.chunks_exact_mut(n)) {
            for (x, &v) in out[c0..c0 + nb].iter_mut().zip(row) {
                // As `gemm_f32_refs`: a sum is never -0.
                *x = v + 0.0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let h = (i as u32 ^ seed).wrapping_mul(2_654_435_761);
                (h >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
            })
            .collect()
    }

    /// Each column multiplied alone, as a contiguous `k × 1` matrix or as one of a strided
    /// pair (the narrow product), into an m × n row-major matrix.
    fn alone(m: usize, k: usize, n: usize, a: MatRef, columns: &[f32], narrow: bool) -> Vec<f32> {
        let mut c = vec![0f32; m * n];
        let mut one = vec![0f32; m];
        for j in 0..n {
            if narrow {
                // Column j as a 1-column matrix of row step 2 over a spread copy: not
                // contiguous, so `gemm_f32_refs` takes the narrow product.
                let spread: Vec<f32> = columns[j * k..(j + 1) * k]
                    .iter()
                    .flat_map(|&x| [x, 0.0])
                    .collect();
                let b = MatRef {
                    data: &spread,
                    at: 0,
                    rs: 2,
                    cs: 1,
                };
                gemm_f32_refs(m, k, 1, a, b, &mut one);
            } else {
                let b = MatRef::row_major(&columns[j * k..(j + 1) * k], 1);
                gemm_f32_refs(m, k, 1, a, b, &mut one);
            }
            for (row, &x) in c.chunks_exact_mut(n).zip(&one) {
                row[j] = x;
            }
        }
        c
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn each_column_gives_the_bits_of_its_product_alone() {
        for (m, k, n) in [
            (196, 144, 32),
            (144, 196, 32),
            (256, 17, 5),
            (257, 33, 3),
            (1, 1, 2),
            (7, 1030, 20),
            (16, 16, 16),
            (33, 2, 40),
            (5, 0, 3),
            (0, 4, 3),
            (9, 31, 1),
        ] {
            let data = values(m * k + 3, 7);
            let a = MatRef {
                data: &data,
                at: 3,
                rs: k as isize,
                cs: 1,
            };
            let columns = values(n * k, 11);
            let mut c = vec![f32::NAN; m * n];
            gemm_f32_each_column(m, k, n, a, &columns, &mut c);
            assert_eq!(
                bits(&c),
                bits(&alone(m, k, n, a, &columns, false)),
                "{m} × {k} × {n}"
            );
            let mut c = vec![f32::NAN; m * n];
            gemm_f32_narrow_columns(m, k, n, a, &columns, &mut c);
            assert_eq!(
                bits(&c),
                bits(&alone(m, k, n, a, &columns, true)),
                "{m} × {k} × {n}, narrow"
            );
        }
    }

    #[test]
    fn a_sum_of_negative_zeros_is_positive_zero() {
        let a = vec![0.0f32; 4 * 3];
        let columns = vec![-1.0f32; 3 * 2];
        let a = MatRef::row_major(&a, 3);
        let mut c = vec![f32::NAN; 8];
        gemm_f32_each_column(4, 3, 2, a, &columns, &mut c);
        assert!(c.iter().all(|x| x.to_bits() == 0));
        let mut c = vec![f32::NAN; 8];
        gemm_f32_narrow_columns(4, 3, 2, a, &columns, &mut c);
        assert!(c.iter().all(|x| x.to_bits() == 0));
    }
}
