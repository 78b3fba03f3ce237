//! A matrix product's K-part sum folded into its one element-wise user. A product split
//! over K ends in a compute set summing the parts (and converting them to the result type);
//! when the product's only reader is an element-wise op (a bias add, a scale, a residual
//! add), the sum waits for that op and becomes part of its kernel: one compute set instead
//! of two, and the result is neither written nor read back (PopLibs likewise lets the
//! reduction of a matmul's partials write straight into the op that follows when the two
//! are fused). The values are unchanged: the parts are added in the same order in f32 (or
//! the partials' type), and an f16 result is rounded as it would have been stored
//! (`RoundF16`).

use super::elementwise::{Readers, sole_kernel_reader};
use super::mapping::Piece;
use super::{Arr, Lowerer, Scope, Value};
use crate::CompileError;
use codegen::{BinaryOp as KB, DType, Expr, UnaryOp as KU};
use runtime::TensorId;
use std::collections::HashSet;
use xla_ir::ids::InstrId;
use xla_ir::{ArrayShape, Computation, Module, Op};

/// A product's K parts, stacked and not yet summed.
#[derive(Debug, Clone)]
pub(crate) struct PendingSum {
    /// The product's name, for the sum made on its own when something else asks for it.
    pub name: String,
    /// The parts, part `i` at element `i * total`, each laid out as `linear`.
    pub stacked: TensorId,
    /// The product's result shape.
    pub shape: ArrayShape,
    /// How many K parts.
    pub parts: usize,
    /// The result's linear mapping, which each part follows.
    pub linear: Vec<Piece>,
    /// The parts' type.
    pub partials: DType,
}

/// The products in `comp` whose K-part sum may wait for their user: read by exactly one
/// element-wise instruction (once, not an activation, whose formula reads its operand
/// several times), and not the root. Only unsharded computations and without a
/// floating-point mode (`plain`): its checks act where results are stored.
pub(crate) fn sums_to_defer(
    module: &Module,
    comp: &Computation,
    readers: &Readers,
    plain: bool,
) -> HashSet<InstrId> {
    if !plain {
        return HashSet::new();
    }
    (comp.order().iter().copied())
        .filter(|&i| {
            matches!(comp.instr(i).op, Op::Dot { .. })
                && sole_kernel_reader(module, comp, readers, i).is_some()
        })
        .collect()
}

impl Lowerer<'_> {
    /// Holds `sum` back for the product `id`'s reader; the value returned stands for the
    /// product until then ([`Lowerer::value`] makes the sum if anything else asks).
    pub(crate) fn defer_sum(&mut self, scope: &mut Scope, id: InstrId, sum: PendingSum) -> Value {
        let placeholder = Arr {
            tensor: sum.stacked,
            shape: sum.shape.clone(),
        };
        scope.pending_sums.insert(id, sum);
        Value::Array(placeholder)
    }

    /// Makes a pending sum on its own, as the product would have.
    pub(crate) fn finish_sum(&mut self, sum: PendingSum) -> Arr {
        self.sum_of_parts(
            &sum.name,
            sum.stacked,
            &sum.shape,
            sum.parts,
            &sum.linear,
            sum.partials,
        )
    }

    /// An element-wise kernel `expr` over the instructions `inputs`, some of them products
    /// whose sums wait for it: when the kernel is laid out as such a sum would have been
    /// (the layout it follows, [`Lowerer::follow_mapping`], is the one it would follow with
    /// the sums made), it reads their K parts instead and sums them itself. `None` when no
    /// input's sum waits or the layouts differ (the sums are then made on their own).
    pub(crate) fn kernel_with_sums(
        &mut self,
        scope: &mut Scope,
        name: &str,
        shape: &ArrayShape,
        expr: Expr,
        inputs: &[InstrId],
    ) -> Result<Option<Arr>, CompileError> {
        if !inputs.iter().any(|i| scope.pending_sums.contains_key(i)) {
            return Ok(None);
        }
        // The other inputs' arrays, made first as the kernel would make them.
        let mut arrays: Vec<Option<Arr>> = Vec::with_capacity(inputs.len());
        for &i in inputs {
            arrays.push(match scope.pending_sums.contains_key(&i) {
                true => None,
                false => Some(self.array(scope, i)?),
            });
        }
        let mappings: Vec<&[Piece]> = (inputs.iter().zip(&arrays))
            .map(|(i, a)| match a {
                Some(a) => self.mapping(a.tensor),
                None => &scope.pending_sums[i].linear[..],
            })
            .collect();
        let pieces = self.follow_mappings(
            mappings.into_iter(),
            shape.element_count() as usize,
            self.dtype(shape),
        );
        if !(inputs.iter()).any(|i| {
            scope
                .pending_sums
                .get(i)
                .is_some_and(|s| s.linear == pieces)
        }) {
            return Ok(None);
        }
        // (tensor, first element, type) of each kernel input, and what each instruction
        // input becomes in terms of them.
        let mut operands: Vec<(TensorId, usize, DType)> = Vec::new();
        let mut read_as: Vec<Expr> = Vec::new();
        for (&i, array) in inputs.iter().zip(arrays) {
            match scope.pending_sums.get(&i) {
                // A sum laid out otherwise (a result of another type) is made on its own.
                Some(s) if s.linear == pieces => {
                    let s = scope.pending_sums.remove(&i).expect("just found");
                    // The placeholder goes: were the product asked for again, it would be
                    // lowered again rather than read as its unsummed parts.
                    scope.env.remove(&i);
                    let total = s.shape.element_count() as usize;
                    let first = operands.len() as u32;
                    operands.extend((0..s.parts).map(|k| (s.stacked, k * total, s.partials)));
                    let mut sum = Expr::Input(first);
                    for k in 1..s.parts as u32 {
                        sum = Expr::binary(KB::Add, sum, Expr::Input(first + k));
                    }
                    let out_type = self.dtype(&s.shape);
                    if out_type != s.partials {
                        sum = Expr::Convert(out_type, Box::new(sum));
                    }
                    if out_type == DType::F16 {
                        sum = Expr::unary(KU::RoundF16, sum);
                    }
                    read_as.push(sum);
                }
                _ => {
                    let a = match array {
                        Some(a) => a,
                        None => self.array(scope, i)?,
                    };
                    let a = self.with_mapping(&a, &pieces);
                    operands.push((a.tensor, 0, self.dtype(&a.shape)));
                    read_as.push(Expr::Input(operands.len() as u32 - 1));
                }
            }
        }
        let expr = substitute(&expr, &read_as);
        let out_type = self.dtype(shape);
        Ok(Some(self.kernel_on(
            name,
            shape,
            pieces,
            &operands,
            vec![(out_type, expr)],
        )))
    }
}

/// `e` with each `Input(k)` replaced by `read_as[k]`.
fn substitute(e: &Expr, read_as: &[Expr]) -> Expr {
    let s = |x: &Expr| Box::new(substitute(x, read_as));
    match e {
        Expr::Input(k) => read_as[*k as usize].clone(),
        Expr::Unary(op, x) => Expr::Unary(*op, s(x)),
        Expr::Convert(t, x) => Expr::Convert(*t, s(x)),
        Expr::Binary(op, a, b) => Expr::Binary(*op, s(a), s(b)),
        Expr::Compare(op, a, b) => Expr::Compare(*op, s(a), s(b)),
        Expr::Select(a, b, c) => Expr::Select(s(a), s(b), s(c)),
        Expr::Clamp(a, b, c) => Expr::Clamp(s(a), s(b), s(c)),
        leaf => leaf.clone(),
    }
}
