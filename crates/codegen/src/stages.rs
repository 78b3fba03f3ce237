//! Fused kernels split where a chunk of values is best finished outside the generated code.
//!
//! Two kinds of node end a stage. A fused f16 chain holds each f16 op's result as
//! `RoundF16(x)` ([`UnaryOp::RoundF16`]); Cranelift 0.135 has no f16 conversion
//! instructions, so rounding inside the generated code takes a dozen vector operations
//! ([`crate::math::round_to_f16`]) and made the fused GELU slower than the unfused ops; a
//! stage's chunk is instead rounded in place with F16C ([`crate::halves::round_in_place`]:
//! eight values per instruction, the narrowing and widening of a store and load). And a
//! transcendental op (`exp`, `tanh`, `log`, ...) is compute-bound on Cranelift's four-lane
//! vectors; where the host has AVX-512 (or AVX2 with FMA), its operand's chunk is finished
//! by the same routine on sixteen lanes (or eight) ([`crate::wide_math`]). Each such node's operand is a kernel of
//! its own writing an f32 chunk, which the run wrapper finishes in place, and later stages
//! read it as an input. The values are the unsplit kernel's, bit for bit; the chunk stays
//! in the cache between stages.

use crate::kernel::{DType, ElementwiseKernel, Expr, UnaryOp};

/// What the run wrapper does to a stage's chunk before later stages read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Finish {
    /// Rounds it to f16 values (held as f32) with F16C.
    RoundF16,
    /// Applies this op with [`crate::wide_math`].
    Wide(UnaryOp),
}

impl Finish {
    /// How a node ends a stage, if it does: roundings always, wide ops when `wide`.
    fn of(e: &Expr, wide: bool) -> Option<(Finish, &Expr)> {
        match e {
            Expr::Unary(UnaryOp::RoundF16, x) => Some((Finish::RoundF16, x)),
            Expr::Unary(op, x) if wide && crate::wide_math::has(*op) => {
                Some((Finish::Wide(*op), x))
            }
            _ => None,
        }
    }

    /// Finishes the chunk `xs` in place.
    pub(crate) fn apply(self, xs: &mut [f32]) {
        match self {
            Finish::RoundF16 => crate::halves::round_in_place(xs),
            Finish::Wide(op) => crate::wide_math::apply_in_place(op, xs),
        }
    }
}

/// A kernel split at its finishing nodes: `stages[s]` computes the operand of the `s`-th
/// such node (in evaluation order) as one f32 output from the kernel's inputs and the
/// finished values of the stages before it (inputs `n..n + s`, where `n` is the kernel's
/// own input count), finished by `finishes[s]`; `last` computes the kernel's outputs from
/// its inputs and every stage (inputs `n..n + stages.len()`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Staged {
    /// One kernel per finishing node, each with a single f32 output.
    pub(crate) stages: Vec<ElementwiseKernel>,
    /// What finishes each stage's chunk.
    pub(crate) finishes: Vec<Finish>,
    /// The kernel's outputs, reading the stages' finished values as inputs.
    pub(crate) last: ElementwiseKernel,
}

/// `kernel` split at its `RoundF16` nodes and, with `wide`, at its [`crate::wide_math`]
/// ops; `None` when it has none.
pub(crate) fn split(kernel: &ElementwiseKernel, wide: bool) -> Option<Staged> {
    if !kernel.outputs.iter().any(|(_, e)| has_finish(e, wide)) {
        return None;
    }
    let n = kernel.inputs.len() as u32;
    let mut bodies = Vec::new();
    let outputs: Vec<(DType, Expr)> = (kernel.outputs.iter())
        .map(|(t, e)| (*t, cut(e, n, wide, &mut bodies)))
        .collect();
    let inputs = |stages: usize| -> Vec<DType> {
        let mut inputs = kernel.inputs.clone();
        inputs.extend(std::iter::repeat_n(DType::F32, stages));
        inputs
    };
    let (bodies, finishes): (Vec<Expr>, Vec<Finish>) = bodies.into_iter().unzip();
    let stages = (bodies.into_iter().enumerate())
        .map(|(s, body)| ElementwiseKernel {
            inputs: inputs(s),
            outputs: vec![(DType::F32, body)],
            repeats: Vec::new(),
        })
        .collect::<Vec<_>>();
    let last = ElementwiseKernel {
        inputs: inputs(stages.len()),
        outputs,
        repeats: Vec::new(),
    };
    Some(Staged {
        stages,
        finishes,
        last,
    })
}

/// True when `e` holds a node that ends a stage.
fn has_finish(e: &Expr, wide: bool) -> bool {
    if Finish::of(e, wide).is_some() {
        return true;
    }
    match e {
        Expr::Unary(_, x) | Expr::Convert(_, x) => has_finish(x, wide),
        Expr::Binary(_, a, b) | Expr::Compare(_, a, b) => {
            has_finish(a, wide) || has_finish(b, wide)
        }
        Expr::Select(a, b, c) | Expr::Clamp(a, b, c) => {
            has_finish(a, wide) || has_finish(b, wide) || has_finish(c, wide)
        }
        Expr::Input(_) | Expr::F32(_) | Expr::S32(_) | Expr::U32(_) | Expr::Pred(_) => false,
    }
}

/// `e` with every node that ends a stage replaced by an input reading its stage; the
/// stages' bodies (with their finishes) are pushed to `bodies` operands first, so a stage
/// reads only earlier ones.
fn cut(e: &Expr, n: u32, wide: bool, bodies: &mut Vec<(Expr, Finish)>) -> Expr {
    if let Some((finish, x)) = Finish::of(e, wide) {
        let body = cut(x, n, wide, bodies);
        bodies.push((body, finish));
        return Expr::Input(n + bodies.len() as u32 - 1);
    }
    let mut cut_box = |x: &Expr| Box::new(cut(x, n, wide, bodies));
    match e {
        Expr::Unary(op, x) => Expr::Unary(*op, cut_box(x)),
        Expr::Convert(t, x) => Expr::Convert(*t, cut_box(x)),
        Expr::Binary(op, a, b) => {
            let a = cut_box(a);
            Expr::Binary(*op, a, cut_box(b))
        }
        Expr::Compare(op, a, b) => {
            let a = cut_box(a);
            Expr::Compare(*op, a, cut_box(b))
        }
        Expr::Select(a, b, c) => {
            let (a, b) = (cut_box(a), cut_box(b));
            Expr::Select(a, b, cut_box(c))
        }
        Expr::Clamp(a, b, c) => {
            let (a, b) = (cut_box(a), cut_box(b));
            Expr::Clamp(a, b, cut_box(c))
        }
        leaf => leaf.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::BinaryOp;

    fn round(x: Expr) -> Expr {
        Expr::unary(UnaryOp::RoundF16, x)
    }

    /// `tanh(round(round(a · b) + c))` on f16 inputs: the product is the first stage, the
    /// sum (reading it) the second, the tanh the last; a kernel without roundings is not
    /// split.
    #[test]
    fn a_chain_splits_at_each_rounding_innermost_first() {
        let (a, b, c) = (Expr::input(0), Expr::input(1), Expr::input(2));
        let product = round(Expr::binary(BinaryOp::Mul, a.clone(), b.clone()));
        let sum = round(Expr::binary(BinaryOp::Add, product, c.clone()));
        let kernel = ElementwiseKernel {
            inputs: vec![DType::F16; 3],
            outputs: vec![(DType::F16, Expr::unary(UnaryOp::Tanh, sum))],
            repeats: Vec::new(),
        };
        let staged = split(&kernel, false).expect("the kernel rounds twice");
        let f16x3 = vec![DType::F16; 3];
        assert_eq!(
            staged.stages,
            vec![
                ElementwiseKernel {
                    inputs: f16x3.clone(),
                    outputs: vec![(DType::F32, Expr::binary(BinaryOp::Mul, a.clone(), b))],
                    repeats: Vec::new()
                },
                ElementwiseKernel {
                    inputs: [f16x3.clone(), vec![DType::F32]].concat(),
                    outputs: vec![(DType::F32, Expr::binary(BinaryOp::Add, Expr::input(3), c))],
                    repeats: Vec::new()
                },
            ]
        );
        assert_eq!(
            staged.last,
            ElementwiseKernel {
                inputs: [f16x3, vec![DType::F32; 2]].concat(),
                outputs: vec![(DType::F16, Expr::unary(UnaryOp::Tanh, Expr::input(4)))],
                repeats: Vec::new()
            }
        );
        let plain = ElementwiseKernel {
            inputs: vec![DType::F16],
            outputs: vec![(DType::F16, Expr::unary(UnaryOp::Exp, a))],
            repeats: Vec::new(),
        };
        assert_eq!(split(&plain, false), None);
    }

    /// With `wide`, `tanh(exp(a) · b) + a` on f32 inputs splits at both ops, innermost
    /// first, each stage finished by its op; without, it runs whole.
    #[test]
    fn transcendental_ops_end_stages_only_when_wide() {
        let (a, b) = (Expr::input(0), Expr::input(1));
        let product = Expr::binary(
            BinaryOp::Mul,
            Expr::unary(UnaryOp::Exp, a.clone()),
            b.clone(),
        );
        let kernel = ElementwiseKernel {
            inputs: vec![DType::F32; 2],
            outputs: vec![(
                DType::F32,
                Expr::binary(
                    BinaryOp::Add,
                    Expr::unary(UnaryOp::Tanh, product),
                    a.clone(),
                ),
            )],
            repeats: Vec::new(),
        };
        assert_eq!(split(&kernel, false), None);
        let staged = split(&kernel, true).expect("two wide ops");
        assert_eq!(
            staged.finishes,
            vec![Finish::Wide(UnaryOp::Exp), Finish::Wide(UnaryOp::Tanh)]
        );
        assert_eq!(staged.stages[0].outputs, vec![(DType::F32, a.clone())]);
        assert_eq!(
            staged.stages[1].outputs,
            vec![(DType::F32, Expr::binary(BinaryOp::Mul, Expr::input(2), b))]
        );
        assert_eq!(
            staged.last.outputs,
            vec![(DType::F32, Expr::binary(BinaryOp::Add, Expr::input(3), a))]
        );
        assert_eq!(staged.last.inputs, vec![DType::F32; 4]);
    }

    /// Every f16 value through a fused chain (products, a sum, `exp`, `tanh`, a quotient,
    /// each rounded): the stages rounded with F16C give the bits of the same kernel compiled
    /// whole with its roundings inline (`math::round_to_f16`, which floating-point modes
    /// with a status use), NaNs as NaNs.
    #[test]
    fn stages_give_the_bits_of_the_roundings_inline() {
        use crate::jit::{Compiler, KernelCache};
        use crate::kernel::KernelSpec;
        let x = || Expr::input(0);
        let square = round(Expr::binary(BinaryOp::Mul, x(), x()));
        let e = round(Expr::unary(UnaryOp::Exp, square.clone()));
        let t = round(Expr::unary(
            UnaryOp::Tanh,
            round(Expr::binary(BinaryOp::Add, x(), square)),
        ));
        let quotient = Expr::binary(BinaryOp::Div, t, round(Expr::binary(BinaryOp::Add, e, x())));
        let kernel = ElementwiseKernel {
            inputs: vec![DType::F16],
            outputs: vec![(DType::F16, quotient)],
            repeats: Vec::new(),
        };
        let n = 1 << 16;
        let bytes: Vec<u8> = (0..=u16::MAX).flat_map(|b| b.to_le_bytes()).collect();
        let wide = crate::halves::widened(&bytes, n);
        let mut compiler = Compiler::new().unwrap();
        let inline = compiler.elementwise(&kernel).unwrap();
        let mut out = vec![0f32; n];
        // SAFETY: the code was generated for this kernel (one input, one output, f16 seen
        // as f32, no status); both buffers hold n f32 values.
        unsafe {
            let f: extern "C" fn(*const *const u8, *const *mut u8, u64) =
                std::mem::transmute(inline);
            f(
                [wide.as_ptr() as *const u8].as_ptr(),
                [out.as_mut_ptr() as *mut u8].as_ptr(),
                n as u64,
            );
        }
        let mut want = vec![0u8; 2 * n];
        crate::halves::narrow_into(&out, &mut want);
        let mut cache = KernelCache::new().unwrap();
        let id = cache.compile(&KernelSpec::Elementwise(kernel)).unwrap();
        let mut got = vec![0u8; 2 * n];
        (cache.table().get(id))
            .run_elementwise(&[&bytes], &mut [&mut got], n)
            .unwrap();
        let half =
            |b: &[u8], i: usize| half::f16::from_bits(u16::from_le_bytes([b[2 * i], b[2 * i + 1]]));
        for i in 0..n {
            let (g, w) = (half(&got, i), half(&want, i));
            assert!(
                g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                "x = {}: staged {g}, inline {w}",
                half(&bytes, i)
            );
        }
    }
}
