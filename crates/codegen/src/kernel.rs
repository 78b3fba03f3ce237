//! The vertex-kernel IR: what a tile runs. Element-wise expression trees over typed inputs
//! and outputs, and reductions over runs. Kernels are values (hashable, serialisable) so a
//! cache can key on them and executables can carry them.

use serde::{Deserialize, Serialize};

/// How elements are stored in tile memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DType {
    /// IEEE single.
    F32,
    /// IEEE half: stored in 2 bytes, computed in f32.
    F16,
    /// Signed 32-bit integer.
    S32,
    /// Unsigned 32-bit integer.
    U32,
    /// Boolean, one byte (0 or 1).
    Pred,
}

impl DType {
    /// Bytes per element in memory.
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::S32 | DType::U32 => 4,
            DType::F16 => 2,
            DType::Pred => 1,
        }
    }

    /// The type values of this storage type are computed in (f16 computes in f32).
    pub fn compute(self) -> DType {
        match self {
            DType::F16 => DType::F32,
            other => other,
        }
    }

    /// True for F32 and F16.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16)
    }
}

/// Operations of one operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum UnaryOp {
    /// |x| (wrapping for integers).
    Abs,
    /// -x (wrapping for integers).
    Neg,
    /// -1, 0 or 1 (NaN and ±0 kept for floats).
    Sign,
    /// Round down.
    Floor,
    /// Round up.
    Ceil,
    /// Round half away from zero.
    RoundAfz,
    /// Round half to even.
    RoundEven,
    /// e^x.
    Exp,
    /// e^x - 1.
    Expm1,
    /// ln x.
    Log,
    /// ln(1 + x).
    Log1p,
    /// tanh x.
    Tanh,
    /// 1 / (1 + e^-x).
    Logistic,
    /// √x.
    Sqrt,
    /// 1 / √x.
    Rsqrt,
    /// ∛x.
    Cbrt,
    /// sin x.
    Sin,
    /// cos x.
    Cos,
    /// tan x.
    Tan,
    /// The error function.
    Erf,
    /// Logical not (pred) or bitwise not (integers).
    Not,
    /// Finite (float in, pred out).
    IsFinite,
    /// Set bits.
    Popcnt,
    /// Leading zero bits.
    Clz,
    /// x rounded to the nearest f16 value (ties to even), still held as f32: the result of
    /// an f16 op inside a fused expression, which the IPU's f16 arithmetic rounds as it
    /// computes (see [`crate::math::round_to_f16`]).
    RoundF16,
}

/// Operations of two operands of one type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BinaryOp {
    /// a + b.
    Add,
    /// a - b.
    Sub,
    /// a * b.
    Mul,
    /// a / b (XLA's rules for integer division by zero).
    Div,
    /// Remainder with the sign of a (XLA's rules for zero).
    Rem,
    /// a^b.
    Pow,
    /// atan2(a, b).
    Atan2,
    /// Maximum (NaN propagates).
    Max,
    /// Minimum (NaN propagates).
    Min,
    /// Bitwise / logical and.
    And,
    /// Bitwise / logical or.
    Or,
    /// Bitwise / logical xor.
    Xor,
    /// Shift left (0 past the width).
    Shl,
    /// Arithmetic shift right (sign fill past the width).
    ShrArithmetic,
    /// Logical shift right (0 past the width).
    ShrLogical,
}

/// Comparisons (IEEE: NaN compares unordered, so only `Ne` holds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CmpOp {
    /// Equal.
    Eq,
    /// Not equal.
    Ne,
    /// Less than.
    Lt,
    /// Less or equal.
    Le,
    /// Greater than.
    Gt,
    /// Greater or equal.
    Ge,
}

/// An element-wise expression. `Input(k)` is element i of input k; everything is computed
/// per element i.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Expr {
    /// Element i of input k.
    Input(u32),
    /// A constant f32, by its bits (so the expression stays hashable).
    F32(u32),
    /// A constant s32.
    S32(i32),
    /// A constant u32.
    U32(u32),
    /// A constant pred.
    Pred(bool),
    /// One-operand op.
    Unary(UnaryOp, Box<Expr>),
    /// Two-operand op.
    Binary(BinaryOp, Box<Expr>, Box<Expr>),
    /// Comparison, producing pred.
    Compare(CmpOp, Box<Expr>, Box<Expr>),
    /// `pred ? a : b`.
    Select(Box<Expr>, Box<Expr>, Box<Expr>),
    /// `clamp(lo, x, hi)` = min(max(x, lo), hi).
    Clamp(Box<Expr>, Box<Expr>, Box<Expr>),
    /// Conversion to a storage type's compute type (float→int saturates, NaN → 0).
    Convert(DType, Box<Expr>),
}

/// An addition or subtraction of a product, computed as one fused multiply-add:
/// `±(a · b) ± c` rounded once.
#[derive(Debug, Clone, Copy)]
pub struct MultiplyAdd<'e> {
    /// The product's factors.
    pub a: &'e Expr,
    /// The product's factors.
    pub b: &'e Expr,
    /// The addend.
    pub c: &'e Expr,
    /// `c - a · b`: the product is subtracted.
    pub negate_product: bool,
    /// `a · b - c`: the addend is subtracted.
    pub negate_addend: bool,
}

impl Expr {
    /// This expression as a fused multiply-add, if it adds a product to or subtracts it from
    /// another value (or subtracts a value from a product): floating-point kernels contract
    /// these as XLA's CPU backend does (LLVM contracts an `fadd`/`fsub` of an `fmul` with one
    /// use; a fused expression's nodes have one use each), the left operand's product
    /// first. Whether it applies depends on the operands' type (floats only), which the
    /// caller knows.
    pub fn multiply_add(&self) -> Option<MultiplyAdd<'_>> {
        let Expr::Binary(op @ (BinaryOp::Add | BinaryOp::Sub), x, y) = self else {
            return None;
        };
        let sub = *op == BinaryOp::Sub;
        if let Expr::Binary(BinaryOp::Mul, a, b) = &**x {
            return Some(MultiplyAdd {
                a,
                b,
                c: y,
                negate_product: false,
                negate_addend: sub,
            });
        }
        if let Expr::Binary(BinaryOp::Mul, a, b) = &**y {
            return Some(MultiplyAdd {
                a,
                b,
                c: x,
                negate_product: sub,
                negate_addend: false,
            });
        }
        None
    }

    /// A constant f32.
    pub fn f32(v: f32) -> Expr {
        Expr::F32(v.to_bits())
    }

    /// Input k.
    pub fn input(k: u32) -> Expr {
        Expr::Input(k)
    }

    /// `op(x)`.
    pub fn unary(op: UnaryOp, x: Expr) -> Expr {
        Expr::Unary(op, Box::new(x))
    }

    /// `op(a, b)`.
    pub fn binary(op: BinaryOp, a: Expr, b: Expr) -> Expr {
        Expr::Binary(op, Box::new(a), Box::new(b))
    }

    /// `a op b`.
    pub fn compare(op: CmpOp, a: Expr, b: Expr) -> Expr {
        Expr::Compare(op, Box::new(a), Box::new(b))
    }
}

/// An element-wise kernel: every output element i is its expression at element i.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ElementwiseKernel {
    /// Storage type of each input.
    pub inputs: Vec<DType>,
    /// Storage type and expression of each output.
    pub outputs: Vec<(DType, Expr)>,
    /// Per input, how many consecutive elements read one element of it: element i reads
    /// element i / R of an input repeated R times (a broadcast read in place, as PopLibs'
    /// `BroadcastVectorInner` vertices read theirs), element i of the others. Empty: every
    /// input read element by element.
    #[serde(default)]
    pub repeats: Vec<u32>,
}

impl ElementwiseKernel {
    /// How many consecutive elements read one element of input `k` (1: one each).
    pub fn repeat(&self, k: usize) -> usize {
        self.repeats.get(k).map_or(1, |&r| r.max(1) as usize)
    }

    /// True when some input is read repeated ([`ElementwiseKernel::repeats`]).
    pub fn repeats_any(&self) -> bool {
        self.repeats.iter().any(|&r| r > 1)
    }

    /// Elements of input `k` a vertex of `n` elements reads.
    pub fn input_len(&self, k: usize, n: usize) -> usize {
        n.div_ceil(self.repeat(k))
    }
}

/// Combining operations of a reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReduceOp {
    /// Sum.
    Sum,
    /// Product.
    Product,
    /// Maximum (NaN propagates).
    Max,
    /// Minimum (NaN propagates).
    Min,
    /// Logical / bitwise and.
    And,
    /// Logical / bitwise or.
    Or,
}

/// Reduces `runs` consecutive runs of `run_length` elements each to one partial per run.
/// Float inputs accumulate in f32 partials (what the IPU's vertices do).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ReduceKernel {
    /// The combining op.
    pub op: ReduceOp,
    /// Storage type of the input.
    pub input: DType,
    /// A value combined into each run's result after the run's elements, as the bits of
    /// the partial type (f32 bits; s32 and u32 as u32; pred 0 or 1): XLA's init value,
    /// folded into the vertex that finishes a reduction. `None`: the run's elements alone.
    /// It costs no instruction: a vertex starts its accumulator from it instead of the
    /// identity (for a sum from +0, the result is the same bits either way).
    pub init: Option<u32>,
}

impl ReduceKernel {
    /// `op` over runs of `input`, the runs' elements alone.
    pub fn new(op: ReduceOp, input: DType) -> ReduceKernel {
        ReduceKernel {
            op,
            input,
            init: None,
        }
    }

    /// The storage type of the partials: f32 for float inputs, else the input's type.
    pub fn partial_type(&self) -> DType {
        if self.input.is_float() {
            DType::F32
        } else {
            self.input
        }
    }
}

/// A dense matrix-product partial, what the IPU's AMP units compute: C (m×n) = A (m×k) ·
/// B (k×n), all row-major. f16 operands are multiplied in f32; the partials C are f32, or
/// f16 (`partialsType: half`) rounded as they are stored.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MatMulKernel {
    /// Rows of A and C.
    pub m: usize,
    /// Columns of A, rows of B.
    pub k: usize,
    /// Columns of B and C.
    pub n: usize,
    /// Storage type of A and B (F32 or F16).
    pub input: DType,
    /// Storage type of C, the partials (`partialsType`): F32, or F16 for f16 operands.
    #[serde(default = "f32_partials")]
    pub partials: DType,
}

fn f32_partials() -> DType {
    DType::F32
}

/// Any kernel.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum KernelSpec {
    /// Element-wise expressions.
    Elementwise(ElementwiseKernel),
    /// Reductions over runs.
    Reduce(ReduceKernel),
    /// Matrix-product partials.
    MatMul(MatMulKernel),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mul(a: Expr, b: Expr) -> Expr {
        Expr::Binary(BinaryOp::Mul, Box::new(a), Box::new(b))
    }

    #[test]
    fn products_added_or_subtracted_are_multiply_adds_left_first() {
        let (a, b, c, d) = (
            Expr::Input(0),
            Expr::Input(1),
            Expr::Input(2),
            Expr::Input(3),
        );
        let sum = |op, x, y| Expr::Binary(op, Box::new(x), Box::new(y));
        let e = sum(BinaryOp::Add, c.clone(), mul(a.clone(), b.clone()));
        let m = e.multiply_add().unwrap();
        assert_eq!((m.a, m.b, m.c), (&a, &b, &c));
        assert!(!m.negate_product && !m.negate_addend);
        // c - a·b and a·b - c.
        let e = sum(BinaryOp::Sub, c.clone(), mul(a.clone(), b.clone()));
        let m = e.multiply_add().unwrap();
        assert!(m.negate_product && !m.negate_addend);
        let e = sum(BinaryOp::Sub, mul(a.clone(), b.clone()), c.clone());
        let m = e.multiply_add().unwrap();
        assert!(!m.negate_product && m.negate_addend);
        // Two products: the left one is contracted.
        let e = sum(
            BinaryOp::Add,
            mul(a.clone(), b.clone()),
            mul(c.clone(), d.clone()),
        );
        let m = e.multiply_add().unwrap();
        assert_eq!((m.a, m.b), (&a, &b));
        assert!(sum(BinaryOp::Mul, a, b).multiply_add().is_none());
    }
}
