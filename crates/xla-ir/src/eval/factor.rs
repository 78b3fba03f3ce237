//! `cholesky` and `triangular-solve` (XLA ops ipuxla reads as foreign; the evaluator runs
//! them, the compiler refuses them by name). Batched over leading dimensions, computed in
//! f64 and rounded to the element type once.

use super::element::{Element, Num};
use super::{OpError, OpResult, literal};
use crate::literal::{ArrayData, ArrayLiteral, with_data};

fn values(a: &ArrayLiteral) -> Vec<f64> {
    with_data!(&a.data, v => v.iter().map(|&x| match Element::to_num(x) {
        Num::Float(f) => f,
        Num::Int(i) => i as f64,
        Num::Bool(b) => b as u8 as f64,
    }).collect())
}

fn result(like: &ArrayLiteral, out: Vec<f64>) -> OpResult {
    let t = like.shape.element_type;
    let data = super::array::from_nums(t, out.len(), |i| Num::Float(out[i]));
    Ok(literal(t, &like.shape.dims, data))
}

/// The batch count and the trailing `[rows, cols]` of a matrix operand.
fn matrices(a: &ArrayLiteral, what: &str) -> Result<(usize, usize, usize), OpError> {
    let d = &a.shape.dims;
    if d.len() < 2 || !a.shape.element_type.is_float() {
        return Err(OpError::Message(format!(
            "{what} takes float matrices, found {}",
            a.shape
        )));
    }
    let (r, c) = (d[d.len() - 2] as usize, d[d.len() - 1] as usize);
    let batch = d[..d.len() - 2].iter().product::<i64>() as usize;
    Ok((batch, r, c))
}

/// `cholesky(a), lower=..`: `l` with `a = l l^T` (lower) or `u` with `a = u^T u`; the other
/// triangle is zero; a matrix that is not positive definite gives NaNs from its first
/// failing pivot on, as XLA's does.
pub(super) fn cholesky(a: &ArrayLiteral, lower: bool) -> OpResult {
    let (batch, n, cols) = matrices(a, "cholesky")?;
    if n != cols {
        return Err(OpError::Message(format!(
            "cholesky takes square matrices, found {}",
            a.shape
        )));
    }
    let x = values(a);
    let mut out = vec![0.0; x.len()];
    for b in 0..batch {
        let base = b * n * n;
        // Read the triangle the attribute names (a is symmetric in exact arithmetic).
        let at = |i: usize, j: usize| {
            if lower {
                x[base + i * n + j]
            } else {
                x[base + j * n + i]
            }
        };
        let mut l = vec![0.0; n * n];
        for j in 0..n {
            let mut d = at(j, j);
            for k in 0..j {
                d -= l[j * n + k] * l[j * n + k];
            }
            let pivot = if d > 0.0 { d.sqrt() } else { f64::NAN };
            l[j * n + j] = pivot;
            for i in j + 1..n {
                let mut s = at(i, j);
                for k in 0..j {
                    s -= l[i * n + k] * l[j * n + k];
                }
                l[i * n + j] = s / pivot;
            }
        }
        for i in 0..n {
            for j in 0..=i {
                let (r, c) = if lower { (i, j) } else { (j, i) };
                out[base + r * n + c] = l[i * n + j];
            }
        }
    }
    result(a, out)
}

/// How `triangular-solve` uses `a`.
#[derive(Debug, Clone, Copy)]
pub(super) struct SolveOptions {
    /// Solve `op(a) x = b` (else `x op(a) = b`).
    pub left_side: bool,
    /// `a` is lower triangular (else upper); the other triangle is not read.
    pub lower: bool,
    /// `a`'s diagonal is taken as ones.
    pub unit_diagonal: bool,
    /// `op(a)` is `a^T` (`TRANSPOSE` or `ADJOINT`, the same for real matrices).
    pub transpose: bool,
}

/// `triangular-solve(a, b)`: `x` with `op(a) x = b` or `x op(a) = b`.
pub(super) fn triangular_solve(a: &ArrayLiteral, b: &ArrayLiteral, o: SolveOptions) -> OpResult {
    let (batch, n, n2) = matrices(a, "triangular-solve")?;
    let (batch_b, rows, cols) = matrices(b, "triangular-solve")?;
    let k = if o.left_side { rows } else { cols };
    if n != n2 || batch != batch_b || k != n {
        return Err(OpError::Message(format!(
            "triangular-solve of {} by {} does not fit (left_side={})",
            a.shape, b.shape, o.left_side
        )));
    }
    let (av, bv) = (values(a), values(b));
    let mut out = vec![0.0; bv.len()];
    for t in 0..batch {
        let (abase, bbase) = (t * n * n, t * rows * cols);
        // The element of op(a), reading only a's named triangle.
        let op_a = |i: usize, j: usize| -> f64 {
            let (r, c) = if o.transpose { (j, i) } else { (i, j) };
            if r == c {
                return if o.unit_diagonal {
                    1.0
                } else {
                    av[abase + r * n + c]
                };
            }
            let inside = if o.lower { r > c } else { r < c };
            if inside { av[abase + r * n + c] } else { 0.0 }
        };
        // op(a) is lower triangular when a is lower and not transposed, or upper and
        // transposed: solve forwards; else backwards.
        let forward = o.lower != o.transpose;
        let order: Vec<usize> = if forward {
            (0..n).collect()
        } else {
            (0..n).rev().collect()
        };
        if o.left_side {
            // op(a) x = b, one column of b at a time.
            for col in 0..cols {
                let mut x = vec![0.0; n];
                for &i in &order {
                    let mut s = bv[bbase + i * cols + col];
                    for (j, xj) in x.iter().enumerate() {
                        if j != i {
                            s -= op_a(i, j) * xj;
                        }
                    }
                    x[i] = s / op_a(i, i);
                }
                for i in 0..n {
                    out[bbase + i * cols + col] = x[i];
                }
            }
        } else {
            // x op(a) = b, i.e. op(a)^T x^T = b^T, one row of b at a time.
            let order: Vec<usize> = order.into_iter().rev().collect();
            for row in 0..rows {
                let mut x = vec![0.0; n];
                for &j in &order {
                    let mut s = bv[bbase + row * cols + j];
                    for (i, xi) in x.iter().enumerate() {
                        if i != j {
                            s -= xi * op_a(i, j);
                        }
                    }
                    x[j] = s / op_a(j, j);
                }
                out[bbase + row * cols..bbase + (row + 1) * cols].copy_from_slice(&x);
            }
        }
    }
    result(b, out)
}
