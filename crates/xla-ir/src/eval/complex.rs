//! Complex values (`c64`, `c128`) on the evaluator: element-wise arithmetic, `real`,
//! `imag`, `complex`, converts into complex, and `fft` (FFT, IFFT, RFFT, IRFFT over up to
//! three trailing dimensions, as a direct DFT in f64). Which ops take complex values is
//! [`computes_complex`]; the evaluator refuses the others before computing.

use super::{OpError, OpResult, literal};
use crate::literal::{ArrayData, ArrayLiteral};
use crate::op::{BinaryOp, UnaryOp};
use crate::{ArrayShape, ElementType, Op, Shape};

/// A complex number in f64.
#[derive(Debug, Clone, Copy, PartialEq)]
struct C {
    re: f64,
    im: f64,
}

impl C {
    fn new(re: f64, im: f64) -> C {
        C { re, im }
    }
    fn add(self, o: C) -> C {
        C::new(self.re + o.re, self.im + o.im)
    }
    fn sub(self, o: C) -> C {
        C::new(self.re - o.re, self.im - o.im)
    }
    fn mul(self, o: C) -> C {
        C::new(
            self.re * o.re - self.im * o.im,
            self.re * o.im + self.im * o.re,
        )
    }
    fn div(self, o: C) -> C {
        let d = o.re * o.re + o.im * o.im;
        C::new(
            (self.re * o.re + self.im * o.im) / d,
            (self.im * o.re - self.re * o.im) / d,
        )
    }
    fn abs(self) -> f64 {
        self.re.hypot(self.im)
    }
    fn exp(self) -> C {
        let m = self.re.exp();
        C::new(m * self.im.cos(), m * self.im.sin())
    }
    fn log(self) -> C {
        C::new(self.abs().ln(), self.im.atan2(self.re))
    }
    fn sqrt(self) -> C {
        let r = self.abs();
        let re = ((r + self.re) / 2.0).sqrt();
        let im = ((r - self.re) / 2.0).sqrt().copysign(self.im);
        C::new(re, im)
    }
}

/// True when the evaluator computes `op` with complex operands or results.
pub(super) fn computes_complex(op: &Op) -> bool {
    match op {
        Op::Parameter { .. }
        | Op::Constant { .. }
        | Op::Tuple
        | Op::GetTupleElement { .. }
        | Op::Reshape
        | Op::Transpose { .. }
        | Op::Broadcast { .. }
        | Op::Slice { .. }
        | Op::Concatenate { .. }
        | Op::Reverse { .. }
        | Op::Convert
        | Op::Select
        | Op::Call { .. } => true,
        Op::Unary(u) => matches!(
            u,
            UnaryOp::Negate
                | UnaryOp::Exp
                | UnaryOp::Log
                | UnaryOp::Sqrt
                | UnaryOp::Abs
                | UnaryOp::Copy
        ),
        Op::Binary(b) => matches!(
            b,
            BinaryOp::Add | BinaryOp::Subtract | BinaryOp::Multiply | BinaryOp::Divide
        ),
        Op::Compare { direction, .. } => matches!(
            direction,
            crate::attributes::ComparisonDirection::Eq | crate::attributes::ComparisonDirection::Ne
        ),
        Op::Foreign { opcode, .. } => {
            matches!(opcode.as_str(), "real" | "imag" | "complex" | "fft")
        }
        _ => false,
    }
}

fn values(a: &ArrayLiteral) -> Option<Vec<C>> {
    Some(match &a.data {
        ArrayData::C64(v) => v.iter().map(|x| C::new(x[0] as f64, x[1] as f64)).collect(),
        ArrayData::C128(v) => v.iter().map(|x| C::new(x[0], x[1])).collect(),
        _ => return None,
    })
}

/// Real values of a real float array.
fn reals(a: &ArrayLiteral) -> Vec<f64> {
    (0..a.data.len())
        .map(|i| match super::array::num(&a.data, i) {
            super::element::Num::Float(f) => f,
            super::element::Num::Int(i) => i as f64,
            super::element::Num::Bool(b) => b as u8 as f64,
        })
        .collect()
}

fn complex_literal(t: ElementType, dims: &[i64], v: &[C]) -> OpResult {
    let data = match t {
        ElementType::C64 => ArrayData::C64(v.iter().map(|c| [c.re as f32, c.im as f32]).collect()),
        ElementType::C128 => ArrayData::C128(v.iter().map(|c| [c.re, c.im]).collect()),
        other => return Err(OpError::Message(format!("{other} is not complex"))),
    };
    Ok(literal(t, dims, data))
}

fn real_literal(t: ElementType, dims: &[i64], v: &[f64]) -> OpResult {
    let data = super::array::from_nums(t, v.len(), |i| super::element::Num::Float(v[i]));
    Ok(literal(t, dims, data))
}

fn out_array(shape: &Shape) -> Result<&ArrayShape, OpError> {
    shape
        .as_array()
        .ok_or_else(|| OpError::Message(format!("expected an array result, found {shape}")))
}

/// A unary op on a complex operand.
pub(super) fn unary(op: UnaryOp, x: &ArrayLiteral, out: &Shape) -> OpResult {
    let v = values(x).expect("called for complex operands");
    let out = out_array(out)?;
    if op == UnaryOp::Abs {
        let m: Vec<f64> = v.iter().map(|c| c.abs()).collect();
        return real_literal(out.element_type, &out.dims, &m);
    }
    let f: fn(C) -> C = match op {
        UnaryOp::Negate => |c| C::new(-c.re, -c.im),
        UnaryOp::Exp => C::exp,
        UnaryOp::Log => C::log,
        UnaryOp::Sqrt => C::sqrt,
        UnaryOp::Copy => |c| c,
        other => {
            return Err(OpError::Message(format!(
                "Unsupported: {} of complex values",
                other.name()
            )));
        }
    };
    let r: Vec<C> = v.into_iter().map(f).collect();
    complex_literal(out.element_type, &out.dims, &r)
}

/// A binary op on complex operands.
pub(super) fn binary(op: BinaryOp, a: &ArrayLiteral, b: &ArrayLiteral) -> OpResult {
    let (x, y) = (
        values(a).expect("called for complex operands"),
        values(b).ok_or_else(|| {
            OpError::Message(format!("{} of {} and {}", op.name(), a.shape, b.shape))
        })?,
    );
    let f: fn(C, C) -> C = match op {
        BinaryOp::Add => C::add,
        BinaryOp::Subtract => C::sub,
        BinaryOp::Multiply => C::mul,
        BinaryOp::Divide => C::div,
        other => {
            return Err(OpError::Message(format!(
                "Unsupported: {} of complex values",
                other.name()
            )));
        }
    };
    let r: Vec<C> = x.into_iter().zip(y).map(|(p, q)| f(p, q)).collect();
    complex_literal(a.shape.element_type, &a.shape.dims, &r)
}

/// `compare` of complex values (`EQ`, `NE`).
pub(super) fn compare(equal: bool, a: &ArrayLiteral, b: &ArrayLiteral) -> OpResult {
    let (x, y) = (values(a).unwrap_or_default(), values(b).unwrap_or_default());
    let flags: Vec<bool> = x.iter().zip(&y).map(|(p, q)| (p == q) == equal).collect();
    Ok(literal(
        ElementType::Pred,
        &a.shape.dims,
        ArrayData::Pred(flags),
    ))
}

/// `convert` into a complex type (from a real or complex array).
pub(super) fn convert(x: &ArrayLiteral, out: &ArrayShape) -> OpResult {
    let v = match values(x) {
        Some(v) => v,
        None => reals(x).into_iter().map(|r| C::new(r, 0.0)).collect(),
    };
    complex_literal(out.element_type, &out.dims, &v)
}

/// `real`, `imag` (of complex or real operands) and `complex(re, im)`.
pub(super) fn parts(opcode: &str, operands: &[&ArrayLiteral], out: &Shape) -> OpResult {
    let out = out_array(out)?;
    match opcode {
        "complex" => {
            let (re, im) = (reals(operands[0]), reals(operands[1]));
            let v: Vec<C> = re.into_iter().zip(im).map(|(r, i)| C::new(r, i)).collect();
            complex_literal(out.element_type, &out.dims, &v)
        }
        _ => {
            let x = operands[0];
            let v: Vec<f64> = match values(x) {
                Some(v) => v
                    .iter()
                    .map(|c| if opcode == "real" { c.re } else { c.im })
                    .collect(),
                None if opcode == "real" => reals(x),
                None => vec![0.0; x.data.len()],
            };
            real_literal(out.element_type, &out.dims, &v)
        }
    }
}

/// `fft(x), fft_type=.., fft_length={..}` over the trailing `fft_length.len()` dimensions.
pub(super) fn fft(x: &ArrayLiteral, fft_type: &str, lengths: &[i64], out: &Shape) -> OpResult {
    let out = out_array(out)?.clone();
    let rank = lengths.len();
    if rank == 0 || rank > 3 || rank > out.dims.len() {
        return Err(OpError::Message(format!(
            "fft_length {lengths:?} does not fit {}",
            out
        )));
    }
    // Work on the complex array of the full (un-halved) transform shape.
    let mut dims: Vec<usize> = out.dims.iter().map(|&d| d as usize).collect();
    let fft_dims: Vec<usize> = (dims.len() - rank..dims.len()).collect();
    for (k, &d) in fft_dims.iter().enumerate() {
        dims[d] = lengths[k] as usize;
    }
    let input = match fft_type {
        "RFFT" => reals(x).into_iter().map(|r| C::new(r, 0.0)).collect(),
        "IRFFT" => {
            // Rebuild the full spectrum from the half the input holds (Hermitian symmetry).
            let half =
                values(x).ok_or_else(|| OpError::Message("IRFFT takes complex values".into()))?;
            let in_dims: Vec<usize> = x.shape.dims.iter().map(|&d| d as usize).collect();
            let last = *dims.last().expect("rank >= 1");
            let mut full = vec![C::new(0.0, 0.0); dims.iter().product()];
            for (i, slot) in full.iter_mut().enumerate() {
                let index = unravel(i, &dims);
                let j = index[dims.len() - 1];
                let (source, conj) = if j < in_dims[dims.len() - 1] {
                    (index.clone(), false)
                } else {
                    // X[k] = conj(X[-k]) over every transformed dimension.
                    let mut s = index.clone();
                    for &d in &fft_dims {
                        s[d] = (dims[d] - index[d]) % dims[d];
                    }
                    (s, true)
                };
                let _ = last;
                let v = half[ravel(&source, &in_dims)];
                *slot = if conj { C::new(v.re, -v.im) } else { v };
            }
            full
        }
        _ => {
            values(x).ok_or_else(|| OpError::Message(format!("{fft_type} takes complex values")))?
        }
    };
    let inverse = matches!(fft_type, "IFFT" | "IRFFT");
    let mut data = input;
    for &d in &fft_dims {
        data = dft_along(&data, &dims, d, inverse);
    }
    match fft_type {
        "RFFT" => {
            // Keep the first n/2 + 1 entries of the last dimension.
            let out_dims: Vec<usize> = out.dims.iter().map(|&d| d as usize).collect();
            let kept: Vec<C> = (0..out_dims.iter().product())
                .map(|i| data[ravel(&unravel(i, &out_dims), &dims)])
                .collect();
            complex_literal(out.element_type, &out.dims, &kept)
        }
        "IRFFT" => {
            let r: Vec<f64> = data.iter().map(|c| c.re).collect();
            real_literal(out.element_type, &out.dims, &r)
        }
        _ => complex_literal(out.element_type, &out.dims, &data),
    }
}

/// The row-major coordinates of element `i` of an array of `dims`.
pub(super) fn unravel(mut i: usize, dims: &[usize]) -> Vec<usize> {
    let mut index = vec![0; dims.len()];
    for d in (0..dims.len()).rev() {
        index[d] = i % dims[d];
        i /= dims[d];
    }
    index
}

fn ravel(index: &[usize], dims: &[usize]) -> usize {
    index.iter().zip(dims).fold(0, |acc, (&i, &d)| acc * d + i)
}

/// The DFT along dimension `axis` of a row-major array (inverse: conjugate twiddles,
/// divided by the length, as XLA's IFFT).
fn dft_along(data: &[C], dims: &[usize], axis: usize, inverse: bool) -> Vec<C> {
    let n = dims[axis];
    let stride: usize = dims[axis + 1..].iter().product();
    let sign = if inverse { 1.0 } else { -1.0 };
    let mut out = vec![C::new(0.0, 0.0); data.len()];
    for (i, slot) in out.iter_mut().enumerate() {
        let k = (i / stride) % n;
        let base = i - k * stride;
        let mut acc = C::new(0.0, 0.0);
        for j in 0..n {
            let angle = sign * 2.0 * std::f64::consts::PI * ((j * k) % n) as f64 / n as f64;
            acc = acc.add(data[base + j * stride].mul(C::new(angle.cos(), angle.sin())));
        }
        *slot = if inverse {
            C::new(acc.re / n as f64, acc.im / n as f64)
        } else {
            acc
        };
    }
    out
}
