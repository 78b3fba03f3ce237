//! Sums whose value depends on the order of their terms, moved to either end of their
//! rounding error, so that a comparison can tell a different order from a wrong result.
//!
//! The evaluator sums floats in f64 in row-major order; the IPU sums dots, convolutions and
//! reductions in f32 in the order of its plan (K parts on different tiles, then their sum).
//! Both are right: XLA promises no order. They differ by rounding error, which the
//! tolerance absorbs, except where a discontinuous op (floor, compare, convert to an
//! integer, sign) sits behind the sum and the sum lies on its step: a sum of terms that
//! cancels exactly in f64 can come out as -1.5e-8 in f32 and `floor` then gives -1 for 0
//! (the campaign's seed 284087).
//!
//! [`perturbed`] rewrites a module so that every such float sum `s` of `n` terms `t_i`
//! becomes `s ± γ(n+1) Σ|t_i|`, where `γ(k) = k u / (1 - k u)` and `u = 2^-24`: the
//! classic bound on the error of summing in f32 in any order (Higham, "Accuracy and
//! Stability of Numerical Algorithms", 2nd ed., §4.2; one more term for the product's own
//! rounding). `Σ|t_i|` is the same op on the operands' absolute values. An element of the
//! IPU's result that misses the evaluator's value but matches what the module gives with
//! every sum at its lower or upper end is a summation order's doing, not a defect.

use xla_ir::literal::ArrayLiteral;
use xla_ir::{
    ArrayShape, BinaryOp, CompId, ElementType, InstrId, Instruction, Literal, Module, Op, Shape,
    UnaryOp,
};

/// f32's unit roundoff: the IPU's partials are f32.
const UNIT_ROUNDOFF: f64 = 1.0 / (1u64 << 24) as f64;

/// Which end of its error bound every order-dependent sum is moved to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Each sum minus its bound.
    Lower,
    /// Each sum plus its bound.
    Upper,
}

/// `module` with every float dot, convolution and single-input add-reduction moved to
/// `end` of its rounding error bound (see the module's doc), and every function the
/// kernels approximate to `end` of its ulp bound ([`super::functions`]); other
/// instructions unchanged.
pub fn perturbed(module: &Module, end: End) -> Result<Module, String> {
    let mut out = super::functions::perturbed(module, end)?;
    let ids: Vec<CompId> = module.computations().map(|(id, _)| id).collect();
    for id in ids {
        let targets: Vec<(InstrId, u64)> = {
            let comp = module.computation(id);
            comp.order()
                .iter()
                .filter_map(|&i| terms(module, comp.instr(i), comp).map(|n| (i, n)))
                .collect()
        };
        for (target, n) in targets {
            move_sum(&mut out, id, target, n, end)?;
        }
    }
    Ok(out)
}

/// How many terms each element of `instr` sums, if it is a float sum whose order the
/// IPU may choose.
fn terms(module: &Module, instr: &Instruction, comp: &xla_ir::Computation) -> Option<u64> {
    let shape = instr.shape.as_array()?;
    if !matches!(
        shape.element_type,
        ElementType::F32 | ElementType::F16 | ElementType::Bf16
    ) {
        return None;
    }
    let dims_of = |k: usize| {
        comp.instr(instr.operands[k])
            .shape
            .as_array()
            .map(|s| s.dims.clone())
    };
    let product = |dims: &[i64], which: &[i64]| -> u64 {
        which
            .iter()
            .map(|&d| dims[d as usize].max(0) as u64)
            .product()
    };
    match &instr.op {
        Op::Dot { dims, .. } => Some(product(&dims_of(0)?, &dims.lhs_contracting)),
        Op::Convolution { dims, .. } => {
            let kernel = dims_of(1)?;
            let mut summed = dims.kernel_spatial.clone();
            summed.push(dims.kernel_input_feature);
            Some(product(&kernel, &summed))
        }
        Op::Reduce {
            dimensions,
            to_apply,
        } if instr.operands.len() == 2 && adds(module, *to_apply) => {
            Some(product(&dims_of(0)?, dimensions) + 1)
        }
        _ => None,
    }
}

/// Whether `comp` is `add(parameter(0), parameter(1))`.
fn adds(module: &Module, comp: CompId) -> bool {
    let comp = module.computation(comp);
    let root = comp.root_instr();
    matches!(root.op, Op::Binary(BinaryOp::Add))
        && root
            .operands
            .iter()
            .all(|&o| matches!(comp.instr(o).op, Op::Parameter { .. }))
}

/// Replaces the value of `target` (each element a sum of `n` terms) in computation `id` by the
/// same sum computed in f32, moved to `end` of its bound, converted back to its type; its
/// readers read the moved value.
fn move_sum(
    module: &mut Module,
    id: CompId,
    target: InstrId,
    n: u64,
    end: End,
) -> Result<(), String> {
    let adder = match module.computation(id).instr(target).op {
        Op::Reduce { .. } => Some(f32_adder(module)),
        _ => None,
    };
    let comp = module.computation_mut(id);
    let instr = comp.instr(target).clone();
    let result = instr
        .shape
        .as_array()
        .expect("a sum's result is an array (terms checked it)")
        .clone();
    let mut added = Added::new(format!("{}.ordered", instr.name));
    let mut push =
        |comp: &mut xla_ir::Computation,
         what: &str,
         op: Op,
         operands: &[InstrId],
         shape: ArrayShape| added.push(comp, what, op, operands, shape);
    // The operands in f32, and their absolute values.
    let mut wide = Vec::new();
    let mut magnitudes = Vec::new();
    for &operand in &instr.operands {
        let shape = comp
            .instr(operand)
            .shape
            .as_array()
            .ok_or_else(|| format!("{}: an operand is not an array", instr.name))?
            .with_element_type(ElementType::F32);
        let w = if comp.instr(operand).shape.as_array().map(|s| s.element_type)
            == Some(ElementType::F32)
        {
            operand
        } else {
            push(comp, "wide", Op::Convert, &[operand], shape.clone())
        };
        wide.push(w);
        magnitudes.push(push(comp, "abs", Op::Unary(UnaryOp::Abs), &[w], shape));
    }
    let f32_result = result.with_element_type(ElementType::F32);
    let mut op = instr.op.clone();
    if let (Op::Reduce { to_apply, .. }, Some(adder)) = (&mut op, adder) {
        *to_apply = adder;
    }
    let sum = match result.element_type {
        ElementType::F32 => target,
        _ => push(comp, "sum", op.clone(), &wide, f32_result.clone()),
    };
    let bound = push(comp, "bound", op, &magnitudes, f32_result.clone());
    let k = (n + 1) as f64 * UNIT_ROUNDOFF;
    let gamma = k / (1.0 - k);
    let signed = match end {
        End::Lower => -gamma,
        End::Upper => gamma,
    } as f32;
    let mut moved = added.plus_scaled(comp, sum, bound, signed, &f32_result);
    if result.element_type != ElementType::F32 {
        moved = added.push(comp, "narrow", Op::Convert, &[moved], result);
    }
    redirect(comp, target, moved, &added.ids)
}

/// Instructions added to move a value, named after it.
pub(super) struct Added {
    base: String,
    /// The instructions added so far, in order.
    pub ids: Vec<InstrId>,
}

impl Added {
    /// None yet; their names begin with `base`.
    pub(super) fn new(base: String) -> Added {
        Added {
            base,
            ids: Vec::new(),
        }
    }

    /// Adds one instruction to `comp`.
    pub(super) fn push(
        &mut self,
        comp: &mut xla_ir::Computation,
        what: &str,
        op: Op,
        operands: &[InstrId],
        shape: ArrayShape,
    ) -> InstrId {
        let id = comp.push(Instruction::new(
            format!("{}.{what}.{}", self.base, self.ids.len()),
            op,
            operands,
            Shape::Array(shape),
        ));
        self.ids.push(id);
        id
    }

    /// Adds `a + b · c` (c a constant, `shape` an f32 array's).
    pub(super) fn plus_scaled(
        &mut self,
        comp: &mut xla_ir::Computation,
        a: InstrId,
        b: InstrId,
        c: f32,
        shape: &ArrayShape,
    ) -> InstrId {
        let scalar = ArrayShape::new(ElementType::F32, &[]);
        let c = self.push(
            comp,
            "scale",
            Op::Constant {
                literal: Literal::Array(ArrayLiteral::scalar_f32(c)),
            },
            &[],
            scalar,
        );
        let cs = self.push(
            comp,
            "scales",
            Op::Broadcast { dimensions: vec![] },
            &[c],
            shape.clone(),
        );
        let scaled = self.push(
            comp,
            "error",
            Op::Binary(BinaryOp::Multiply),
            &[b, cs],
            shape.clone(),
        );
        self.push(
            comp,
            "moved",
            Op::Binary(BinaryOp::Add),
            &[a, scaled],
            shape.clone(),
        )
    }
}

/// Readers of `target` read `moved` instead, and `added` (the instructions computing it,
/// `moved` among them) follow `target` in the schedule.
pub(super) fn redirect(
    comp: &mut xla_ir::Computation,
    target: InstrId,
    moved: InstrId,
    added: &[InstrId],
) -> Result<(), String> {
    let readers: Vec<InstrId> = comp.order().to_vec();
    for reader in readers {
        if added.contains(&reader) {
            continue;
        }
        for operand in comp.instr_mut(reader).operands.iter_mut() {
            if *operand == target {
                *operand = moved;
            }
        }
    }
    if comp.root == target {
        comp.root = moved;
    }
    let mut order = Vec::with_capacity(comp.order().len());
    for &i in comp.order() {
        if added.contains(&i) {
            continue;
        }
        order.push(i);
        if i == target {
            order.extend(added);
        }
    }
    comp.set_schedule(order)
}

/// The module's `f32` adder for moved reductions (reducers are typed; a reduction of f16
/// values is summed again in f32), added on first use.
fn f32_adder(module: &mut Module) -> CompId {
    const NAME: &str = "ordered.f32_add";
    if let Some((id, _)) = module.computations().find(|(_, c)| c.name == NAME) {
        return id;
    }
    let scalar = Shape::array(ElementType::F32, &[]);
    let mut comp = xla_ir::Computation::new(NAME);
    let a = comp.push(Instruction::new(
        format!("{NAME}.a"),
        Op::Parameter { number: 0 },
        &[],
        scalar.clone(),
    ));
    let b = comp.push(Instruction::new(
        format!("{NAME}.b"),
        Op::Parameter { number: 1 },
        &[],
        scalar.clone(),
    ));
    comp.root = comp.push(Instruction::new(
        format!("{NAME}.sum"),
        Op::Binary(BinaryOp::Add),
        &[a, b],
        scalar,
    ));
    module.add_computation(comp)
}
