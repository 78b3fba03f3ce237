//! Element-wise chains fused into one expression kernel per tile (the `popops::map` idea):
//! an element-wise instruction with a single element-wise user is inlined into that user's
//! expression; scalar constants (and their broadcasts) become literals in the expression.

use super::mapping::{self, Piece};
use super::{Arr, Here, Lowerer, Scope, Value};
use crate::CompileError;
use crate::types::is_native;
use codegen::{BinaryOp as KB, CmpOp, DType, ElementwiseKernel, Expr, KernelSpec, UnaryOp as KU};
use runtime::{Program, Region, Vertex};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use xla_ir::attributes::{CompareType, ComparisonDirection};
use xla_ir::ids::InstrId;
use xla_ir::literal::ArrayData;
use xla_ir::{Activation, BinaryOp, Computation, ElementType, Module, Op, UnaryOp};

/// The grain of an element-wise multi-vertex (`Vertex::grain`): its elements go to the
/// tile's workers in runs of whole grains, at least two a worker, as PopLibs splits a
/// tile's element-wise work in grains of `max(vector width, atomic store granularity)`
/// (popops `ElementWise.cpp` and the mapped expressions' `executeCodelet`). The IPU's
/// atomic store is one 32-bit word (PopLibs' `DynamicSlice.cpp` counts
/// `getAtomicStoreGranularity() / typeSize` atoms per word), and PopLibs uses that byte
/// count as an element count here: 4, at least every type's vector width (2 for f32, 4
/// for f16).
pub(crate) const WORKER_GRAIN: usize = 4;

/// The kernel op of an HLO unary op (`copy` has none: it is a view).
pub(crate) fn unary(op: UnaryOp) -> Option<KU> {
    Some(match op {
        UnaryOp::Abs => KU::Abs,
        UnaryOp::Negate => KU::Neg,
        UnaryOp::Sign => KU::Sign,
        UnaryOp::Exp => KU::Exp,
        UnaryOp::Expm1 => KU::Expm1,
        UnaryOp::Log => KU::Log,
        UnaryOp::Log1p => KU::Log1p,
        UnaryOp::Sqrt => KU::Sqrt,
        UnaryOp::Rsqrt => KU::Rsqrt,
        UnaryOp::Cbrt => KU::Cbrt,
        UnaryOp::Tanh => KU::Tanh,
        UnaryOp::Logistic => KU::Logistic,
        UnaryOp::Sine => KU::Sin,
        UnaryOp::Cosine => KU::Cos,
        UnaryOp::Tan => KU::Tan,
        UnaryOp::Erf => KU::Erf,
        UnaryOp::Floor => KU::Floor,
        UnaryOp::Ceil => KU::Ceil,
        UnaryOp::RoundNearestAfz => KU::RoundAfz,
        UnaryOp::RoundNearestEven => KU::RoundEven,
        UnaryOp::Not => KU::Not,
        UnaryOp::IsFinite => KU::IsFinite,
        UnaryOp::Popcnt => KU::Popcnt,
        UnaryOp::Clz => KU::Clz,
        UnaryOp::Copy => return None,
    })
}

/// The kernel op of an HLO binary op.
pub(crate) fn binary(op: BinaryOp) -> KB {
    match op {
        BinaryOp::Add => KB::Add,
        BinaryOp::Subtract => KB::Sub,
        BinaryOp::Multiply => KB::Mul,
        BinaryOp::Divide => KB::Div,
        BinaryOp::Remainder => KB::Rem,
        BinaryOp::Power => KB::Pow,
        BinaryOp::Atan2 => KB::Atan2,
        BinaryOp::Maximum => KB::Max,
        BinaryOp::Minimum => KB::Min,
        BinaryOp::And => KB::And,
        BinaryOp::Or => KB::Or,
        BinaryOp::Xor => KB::Xor,
        BinaryOp::ShiftLeft => KB::Shl,
        BinaryOp::ShiftRightArithmetic => KB::ShrArithmetic,
        BinaryOp::ShiftRightLogical => KB::ShrLogical,
    }
}

fn compare(d: ComparisonDirection) -> CmpOp {
    match d {
        ComparisonDirection::Eq => CmpOp::Eq,
        ComparisonDirection::Ne => CmpOp::Ne,
        ComparisonDirection::Lt => CmpOp::Lt,
        ComparisonDirection::Le => CmpOp::Le,
        ComparisonDirection::Gt => CmpOp::Gt,
        ComparisonDirection::Ge => CmpOp::Ge,
    }
}

fn element_type(comp: &Computation, id: InstrId) -> Option<ElementType> {
    comp.instr(id).shape.as_array().map(|a| a.element_type)
}

/// True for instructions a JIT expression kernel computes: element-wise ops on natively
/// stored types (others run as codelets).
pub(crate) fn is_jit_elementwise(_module: &Module, comp: &Computation, id: InstrId) -> bool {
    let instr = comp.instr(id);
    let types_ok = element_type(comp, id).is_some_and(is_native)
        && instr
            .operands
            .iter()
            .all(|&o| element_type(comp, o).is_some_and(is_native));
    types_ok
        && match &instr.op {
            Op::Unary(u) => unary(*u).is_some(),
            Op::Binary(_) | Op::Select | Op::Clamp | Op::Convert => true,
            Op::Compare { compare_type, .. } => {
                !matches!(compare_type, Some(CompareType::TotalOrder))
            }
            Op::CustomCall { .. } => activation(instr).is_some_and(|a| a.is_ok()),
            _ => false,
        }
}

/// The activation an activation custom-call (GELU, swish, hard sigmoid) computes.
fn activation(instr: &xla_ir::Instruction) -> Option<Result<Activation, String>> {
    match &instr.op {
        Op::CustomCall { target, .. } => {
            Activation::from_custom_call(target, instr.backend_config.as_deref())
        }
        _ => None,
    }
}

/// An activation's formula over `x` as one expression (f32 arithmetic), the same formula
/// the evaluator uses ([`Activation::apply_f32`]).
fn activation_expr(a: Activation, x: Expr) -> Expr {
    let mul = |p, q| Expr::binary(KB::Mul, p, q);
    let add = |p, q| Expr::binary(KB::Add, p, q);
    let half_x_times = |x: Expr, phi| mul(mul(Expr::f32(0.5), x), add(Expr::f32(1.0), phi));
    match a {
        Activation::Gelu { approximate: true } => {
            let cube = mul(mul(x.clone(), x.clone()), x.clone());
            let cubic = mul(Expr::f32(xla_ir::activation::GELU_TANH_CUBIC as f32), cube);
            let inner = mul(
                Expr::f32(xla_ir::activation::GELU_TANH_SCALE as f32),
                add(x.clone(), cubic),
            );
            half_x_times(x, Expr::unary(KU::Tanh, inner))
        }
        Activation::Gelu { approximate: false } => {
            let scaled = mul(
                x.clone(),
                Expr::f32(xla_ir::activation::GELU_ERF_SCALE as f32),
            );
            half_x_times(x, Expr::unary(KU::Erf, scaled))
        }
        Activation::Swish => mul(x.clone(), Expr::unary(KU::Logistic, x)),
        Activation::HardSigmoid => Expr::Clamp(
            Box::new(Expr::f32(0.0)),
            Box::new(add(
                mul(Expr::f32(xla_ir::activation::HARD_SIGMOID_SLOPE as f32), x),
                Expr::f32(xla_ir::activation::HARD_SIGMOID_OFFSET as f32),
            )),
            Box::new(Expr::f32(1.0)),
        ),
    }
}

/// A scalar constant, directly or broadcast: it becomes a literal in expressions.
pub(crate) fn scalar_constant(comp: &Computation, id: InstrId) -> Option<&ArrayData> {
    match &comp.instr(id).op {
        Op::Constant {
            literal: xla_ir::Literal::Array(a),
        } if a.data.len() == 1 => Some(&a.data),
        Op::Broadcast { .. } => {
            let o = comp.instr(id).operands[0];
            match &comp.instr(o).op {
                Op::Constant {
                    literal: xla_ir::Literal::Array(a),
                } if a.data.len() == 1 => Some(&a.data),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Constants and broadcasts of scalar constants are materialised only when something other
/// than an expression kernel reads them.
pub(crate) fn is_lazy_constant(comp: &Computation, id: InstrId) -> bool {
    matches!(comp.instr(id).op, Op::Constant { .. }) || scalar_constant(comp, id).is_some()
}

/// Element-wise instructions that fold into their single element-wise user. An f16 result
/// folds as its value rounded to f16 (`RoundF16`: each f16 op rounds its result, as XLA
/// computes them and as the IPU's f16 arithmetic does), only with `f16` (no floating-point
/// mode: exceptions and stochastic rounding are checked where results are stored). Nor are
/// operands of activations folded: an activation's formula reads its operand several times,
/// which would repeat a fused operand's whole expression.
pub(crate) fn fusion_candidates(
    module: &Module,
    comp: &Computation,
    readers: &Readers,
    f16: bool,
) -> HashSet<InstrId> {
    comp.order()
        .iter()
        .copied()
        .filter(|&i| {
            (f16 || element_type(comp, i) != Some(ElementType::F16))
                && is_jit_elementwise(module, comp, i)
                && sole_kernel_reader(module, comp, readers, i).is_some()
        })
        .collect()
}

/// Each instruction's readers in `comp`, once per operand that reads it.
pub(crate) type Readers = HashMap<InstrId, Vec<InstrId>>;

/// The readers of every instruction of `comp`.
pub(crate) fn readers(comp: &Computation) -> Readers {
    let mut readers: Readers = HashMap::new();
    for &i in comp.order() {
        for &o in &comp.instr(i).operands {
            readers.entry(o).or_default().push(i);
        }
    }
    readers
}

/// The one instruction reading `id` (once), when `id` is not the root and that reader is a
/// JIT element-wise instruction other than an activation (whose formula reads its operand
/// several times): a value such a kernel can take in (fused ops, K-part sums, broadcasts
/// read in place).
pub(crate) fn sole_kernel_reader(
    module: &Module,
    comp: &Computation,
    readers: &Readers,
    id: InstrId,
) -> Option<InstrId> {
    match readers.get(&id).map(Vec::as_slice) {
        Some(&[u])
            if id != comp.root
                && is_jit_elementwise(module, comp, u)
                && activation(comp.instr(u)).is_none() =>
        {
            Some(u)
        }
        _ => None,
    }
}

pub(crate) fn literal_expr(data: &ArrayData, t: DType) -> Expr {
    let f = match data {
        ArrayData::Pred(v) => return Expr::Pred(v[0]),
        ArrayData::S32(v) => return Expr::S32(v[0]),
        ArrayData::U32(v) => return Expr::U32(v[0]),
        ArrayData::F32(v) => v[0],
        ArrayData::F16(v) => v[0].to_f32(),
        ArrayData::S8(v) => v[0] as f32,
        _ => 0.0,
    };
    match t {
        DType::S32 => Expr::S32(f as i32),
        DType::U32 => Expr::U32(f as u32),
        DType::Pred => Expr::Pred(f != 0.0),
        DType::F32 | DType::F16 => Expr::f32(f),
    }
}

/// Builds the expression of `id`, inlining fused operands and literal constants, and
/// collecting the tensors read as inputs.
struct ExprBuilder<'a> {
    comp: &'a Computation,
    fused: &'a HashSet<InstrId>,
    inputs: Vec<InstrId>,
}

impl ExprBuilder<'_> {
    fn input(&mut self, id: InstrId) -> Expr {
        let k = match self.inputs.iter().position(|&x| x == id) {
            Some(k) => k,
            None => {
                self.inputs.push(id);
                self.inputs.len() - 1
            }
        };
        Expr::Input(k as u32)
    }

    fn operand(&mut self, id: InstrId, t: DType) -> Expr {
        if let Some(data) = scalar_constant(self.comp, id) {
            return literal_expr(data, t);
        }
        if self.fused.contains(&id) {
            let value = self.build(id);
            return match element_type(self.comp, id) {
                Some(ElementType::F16) => Expr::unary(KU::RoundF16, value),
                _ => value,
            };
        }
        self.input(id)
    }

    fn build(&mut self, id: InstrId) -> Expr {
        let comp = self.comp;
        let instr = comp.instr(id);
        let ty = |i: InstrId| {
            crate::types::device_type(element_type(comp, i).expect("checked: arrays"))
                .expect("checked: native")
        };
        let ops = &instr.operands;
        match &instr.op {
            Op::Unary(u) => {
                let x = self.operand(ops[0], ty(ops[0]));
                Expr::unary(unary(*u).expect("checked: jit unary"), x)
            }
            Op::Binary(b) => {
                let t = ty(ops[0]);
                let (x, y) = (self.operand(ops[0], t), self.operand(ops[1], t));
                Expr::binary(binary(*b), x, y)
            }
            Op::Compare { direction, .. } => {
                let t = ty(ops[0]);
                let (x, y) = (self.operand(ops[0], t), self.operand(ops[1], t));
                Expr::compare(compare(*direction), x, y)
            }
            Op::Select => {
                let p = self.operand(ops[0], DType::Pred);
                let t = ty(id);
                let (a, b) = (self.operand(ops[1], t), self.operand(ops[2], t));
                Expr::Select(Box::new(p), Box::new(a), Box::new(b))
            }
            Op::Clamp => {
                let t = ty(id);
                let lo = self.operand(ops[0], t);
                let x = self.operand(ops[1], t);
                let hi = self.operand(ops[2], t);
                Expr::Clamp(Box::new(lo), Box::new(x), Box::new(hi))
            }
            Op::Convert => {
                let x = self.operand(ops[0], ty(ops[0]));
                Expr::Convert(ty(id), Box::new(x))
            }
            Op::CustomCall { .. } => {
                let a = activation(instr)
                    .and_then(Result::ok)
                    .expect("checked: a valid activation");
                activation_expr(a, self.operand(ops[0], ty(ops[0])))
            }
            _ => unreachable!("checked: element-wise"),
        }
    }
}

impl Lowerer<'_> {
    /// Lowers an element-wise instruction and the chain fused into it.
    pub(crate) fn elementwise(
        &mut self,
        scope: &mut Scope,
        here: Here,
        id: InstrId,
    ) -> Result<Value, CompileError> {
        let shape = here.array()?.clone();
        let mut eb = ExprBuilder {
            comp: here.comp,
            fused: &scope.fused,
            inputs: Vec::new(),
        };
        let expr = eb.build(id);
        let input_ids = eb.inputs;
        let name = &here.instr.name;
        if let Some(arr) = self.kernel_with_views(scope, name, &shape, expr.clone(), &input_ids)? {
            return Ok(Value::Array(arr));
        }
        if let Some(arr) = self.kernel_with_sums(scope, name, &shape, expr.clone(), &input_ids)? {
            return Ok(Value::Array(arr));
        }
        let mut inputs = Vec::new();
        for i in input_ids {
            inputs.push(self.array(scope, i)?);
        }
        let out_type = self.dtype(&shape);
        let arr = self.map_kernel(&here.instr.name, &shape, &inputs, vec![(out_type, expr)]);
        Ok(Value::Array(arr))
    }

    /// The mapping element-wise work follows: the most spread input's, or linear (for
    /// elements of `dtype`) when that spreads wider.
    pub(crate) fn follow_mapping(
        &self,
        inputs: &[Arr],
        elements: usize,
        dtype: DType,
    ) -> Vec<Piece> {
        let mappings = inputs.iter().map(|a| self.mapping(a.tensor));
        self.follow_mappings(mappings, elements, dtype)
    }

    /// [`Lowerer::follow_mapping`] of inputs mapped as `mappings`, in input order.
    pub(crate) fn follow_mappings<'p>(
        &self,
        mappings: impl Iterator<Item = &'p [Piece]>,
        elements: usize,
        dtype: DType,
    ) -> Vec<Piece> {
        let linear = self.linear_pieces(elements, dtype);
        let best = mappings
            .filter(|m| self.within_placement(m))
            .max_by_key(|m| mapping::tile_count(m));
        match best {
            Some(m) if mapping::tile_count(m) >= mapping::tile_count(&linear) => m.to_vec(),
            _ => linear,
        }
    }

    /// Runs an element-wise kernel of `outputs` expressions over `inputs` (all of
    /// `shape`'s element count) into a new tensor.
    pub(crate) fn map_kernel(
        &mut self,
        name: &str,
        shape: &xla_ir::ArrayShape,
        inputs: &[Arr],
        outputs: Vec<(DType, Expr)>,
    ) -> Arr {
        let n = shape.element_count() as usize;
        let pieces = self.follow_mapping(inputs, n, self.dtype(shape));
        let operands: Vec<(runtime::TensorId, usize, DType)> = inputs
            .iter()
            .map(|a| {
                let a = self.with_mapping(a, &pieces);
                (a.tensor, 0, self.dtype(&a.shape))
            })
            .collect();
        self.kernel_on(name, shape, pieces, &operands, outputs)
    }

    /// Runs an element-wise kernel of `outputs` expressions into a new tensor mapped as
    /// `pieces`, its input `k` read from `operands[k]`: a tensor laid out as `pieces` from
    /// its element `start` on, of the type given.
    pub(crate) fn kernel_on(
        &mut self,
        name: &str,
        shape: &xla_ir::ArrayShape,
        pieces: Vec<Piece>,
        operands: &[(runtime::TensorId, usize, DType)],
        outputs: Vec<(DType, Expr)>,
    ) -> Arr {
        let regions: Vec<(runtime::TensorId, Vec<(usize, usize)>)> = operands
            .iter()
            .map(|&(t, s, _)| (t, pieces.iter().map(|p| (s + p.start, p.len)).collect()))
            .collect();
        let kernel = ElementwiseKernel {
            inputs: operands.iter().map(|&(_, _, t)| t).collect(),
            outputs,
            repeats: Vec::new(),
        };
        self.kernel_on_parts(name, shape, pieces.clone(), &pieces, &regions, kernel)
    }

    /// Runs `kernel` into a new tensor of `shape` mapped as `pieces`, one multi-vertex (its
    /// elements shared between the tile's workers) a part of `parts` (the pieces, or the
    /// pieces cut smaller): part `j` writes its elements and reads input `k` from tensor
    /// `inputs[k].0` at `inputs[k].1[j]` (start, length).
    pub(crate) fn kernel_on_parts(
        &mut self,
        name: &str,
        shape: &xla_ir::ArrayShape,
        pieces: Vec<Piece>,
        parts: &[Piece],
        inputs: &[(runtime::TensorId, Vec<(usize, usize)>)],
        kernel: ElementwiseKernel,
    ) -> Arr {
        let out = self.arr_mapped(name, shape, pieces);
        if shape.element_count() == 0 {
            return out;
        }
        let kernel = Arc::new(KernelSpec::Elementwise(kernel));
        let tpi = self.target.tiles_per_ipu;
        let vertices = (parts.iter().enumerate())
            .map(|(j, p)| Vertex {
                kernel: Arc::clone(&kernel),
                ipu: p.tile / tpi,
                tile: p.tile % tpi,
                inputs: (inputs.iter())
                    .map(|(t, regions)| Region {
                        tensor: *t,
                        start: regions[j].0,
                        len: regions[j].1,
                    })
                    .collect(),
                outputs: smallvec::smallvec![Region {
                    tensor: out.tensor,
                    start: p.start,
                    len: p.len,
                }],
                run_length: 0,
                grain: WORKER_GRAIN,
            })
            .collect();
        for (t, _) in inputs {
            self.use_tensor(*t);
        }
        let cs = self.b.compute_set(name, vertices);
        self.emit(Program::Execute(cs));
        out
    }
}
