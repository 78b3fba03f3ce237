//! Building HLO that computes on 32-bit words: what the passes that take apart wider
//! integer arithmetic (64-bit integers as word pairs, random-number generators) emit.
//!
//! An [`Emitter`] rebuilds one computation: every instruction of the original is either
//! copied (operands renamed) or replaced by what a rewrite emits. Values emitted are
//! `u32` arrays; a 64-bit value is a `u32[dims..., 2]` array whose last dimension holds
//! the low word then the high word (the bytes of the 64-bit value, little-endian).

use crate::CompileError;
use std::collections::{HashMap, HashSet};
use xla_ir::attributes::{ComparisonDirection, SliceDim};
use xla_ir::literal::{ArrayData, ArrayLiteral, Literal};
use xla_ir::shape_inference::infer_shape;
use xla_ir::{
    ArrayShape, BinaryOp, CompId, Computation, ElementType, InstrId, Instruction, Module, Op,
    Shape, UnaryOp,
};

/// Rebuilds one computation, instruction by instruction.
pub(super) struct Emitter<'a> {
    /// The module, for the shapes of called computations.
    module: &'a Module,
    /// The computation being built.
    pub out: Computation,
    /// Every instruction name in use in the module.
    taken: &'a mut HashSet<String>,
    /// The instruction being replaced: new instructions take its name (numbered), its
    /// location, metadata and sharding.
    source: Option<Instruction>,
    /// The first arena slot emitted for `source`.
    first_new: usize,
    /// The pass emitting (for its errors).
    pass: &'static str,
    /// The words of each pair array made by [`Emitter::pair`], read back without slicing.
    pairs: HashMap<InstrId, [InstrId; 2]>,
}

impl<'a> Emitter<'a> {
    /// An emitter for `pass` building a new computation called `name`.
    pub fn new(
        pass: &'static str,
        module: &'a Module,
        name: &str,
        taken: &'a mut HashSet<String>,
    ) -> Emitter<'a> {
        Emitter {
            module,
            out: Computation::new(name),
            taken,
            source: None,
            first_new: 0,
            pass,
            pairs: HashMap::new(),
        }
    }

    /// Starts replacing `source`: what is emitted until [`Emitter::finish`] stands for it.
    pub fn begin(&mut self, source: &Instruction) {
        self.source = Some(source.clone());
        self.first_new = self.out.len();
    }

    /// Ends replacing the current instruction with `value`: a value emitted for it takes
    /// its name (values that already existed keep theirs).
    pub fn finish(&mut self, value: InstrId) {
        if let Some(source) = self.source.take()
            && value.index() >= self.first_new
        {
            let old = std::mem::replace(&mut self.out.instr_mut(value).name, source.name.clone());
            if old != source.name {
                self.taken.remove(&old);
            }
        }
    }

    /// Copies `instr` with its operands (and control predecessors) renamed by `map`.
    pub fn copy(&mut self, instr: &Instruction, map: &[Option<InstrId>]) -> InstrId {
        let mut copy = instr.clone();
        copy.operands = instr.operands.iter().map(|o| renamed(map, *o)).collect();
        copy.control_predecessors = instr
            .control_predecessors
            .iter()
            .map(|o| renamed(map, *o))
            .collect();
        self.out.push(copy)
    }

    /// The shape of an emitted value.
    pub fn shape(&self, value: InstrId) -> &Shape {
        &self.out.instr(value).shape
    }

    /// The dimensions of an emitted array value.
    pub fn dims(&self, value: InstrId) -> Vec<i64> {
        self.shape(value)
            .as_array()
            .map(|a| a.dims.to_vec())
            .unwrap_or_default()
    }

    fn fresh_name(&mut self, opcode: &str) -> String {
        let base = match &self.source {
            Some(s) => s.name.clone(),
            None => opcode.replace('-', "_"),
        };
        let mut k = self.out.len();
        loop {
            let name = format!("{base}.w{k}");
            if self.taken.insert(name.clone()) {
                return name;
            }
            k += 1;
        }
    }

    /// Adds an instruction with the given shape (or the inferred one).
    pub fn add(
        &mut self,
        op: Op,
        operands: &[InstrId],
        declared: Option<Shape>,
    ) -> Result<InstrId, CompileError> {
        let shapes: Vec<&Shape> = operands.iter().map(|o| self.shape(*o)).collect();
        let shape = match declared {
            Some(s) => s,
            None => infer_shape(&op, &shapes, None, self.module).map_err(|message| {
                CompileError::Pass {
                    pass: self.pass.to_string(),
                    reason: format!("{} in computation {}: {message}", op.name(), self.out.name),
                }
            })?,
        };
        let name = self.fresh_name(op.name());
        let mut instr = Instruction::new(name, op, operands, shape);
        if let Some(s) = &self.source {
            instr.location = s.location;
            instr.metadata = s.metadata.clone();
            instr.sharding = s.sharding.clone();
        }
        Ok(self.out.push(instr))
    }

    /// A `u32` constant broadcast to `dims`.
    pub fn splat(&mut self, value: u32, dims: &[i64]) -> Result<InstrId, CompileError> {
        let scalar = ArrayShape::new(ElementType::U32, &[]);
        let c = self.add(
            Op::Constant {
                literal: Literal::Array(ArrayLiteral {
                    shape: scalar,
                    data: ArrayData::U32(vec![value]),
                }),
            },
            &[],
            None,
        )?;
        if dims.is_empty() {
            return Ok(c);
        }
        self.broadcast(c, &[], dims, ElementType::U32)
    }

    /// `broadcast(x)` into `dims`, operand dimension i going to `mapped[i]`.
    pub fn broadcast(
        &mut self,
        x: InstrId,
        mapped: &[i64],
        dims: &[i64],
        t: ElementType,
    ) -> Result<InstrId, CompileError> {
        self.add(
            Op::Broadcast {
                dimensions: mapped.to_vec(),
            },
            &[x],
            Some(Shape::array(t, dims)),
        )
    }

    /// Element-wise `op(a, b)`.
    pub fn binary(
        &mut self,
        op: BinaryOp,
        a: InstrId,
        b: InstrId,
    ) -> Result<InstrId, CompileError> {
        self.add(Op::Binary(op), &[a, b], None)
    }

    /// Element-wise `op(x)`.
    pub fn unary(&mut self, op: UnaryOp, x: InstrId) -> Result<InstrId, CompileError> {
        self.add(Op::Unary(op), &[x], None)
    }

    /// `op(x, splat(c))`.
    pub fn binary_const(
        &mut self,
        op: BinaryOp,
        x: InstrId,
        c: u32,
    ) -> Result<InstrId, CompileError> {
        let dims = self.dims(x);
        let c = self.splat(c, &dims)?;
        self.binary(op, x, c)
    }

    /// `compare(a, b)` in the operands' own order (unsigned for `u32`, signed for `s32`).
    pub fn compare(
        &mut self,
        direction: ComparisonDirection,
        a: InstrId,
        b: InstrId,
    ) -> Result<InstrId, CompileError> {
        self.add(
            Op::Compare {
                direction,
                compare_type: None,
            },
            &[a, b],
            None,
        )
    }

    /// `select(p, a, b)`.
    pub fn select(&mut self, p: InstrId, a: InstrId, b: InstrId) -> Result<InstrId, CompileError> {
        self.add(Op::Select, &[p, a, b], None)
    }

    /// `convert(x)` to `t`.
    pub fn convert(&mut self, x: InstrId, t: ElementType) -> Result<InstrId, CompileError> {
        let dims = self.dims(x);
        self.add(Op::Convert, &[x], Some(Shape::array(t, &dims)))
    }

    /// `bitcast-convert(x)` to `t` (same width).
    pub fn reinterpret(&mut self, x: InstrId, t: ElementType) -> Result<InstrId, CompileError> {
        let dims = self.dims(x);
        self.add(Op::BitcastConvert, &[x], Some(Shape::array(t, &dims)))
    }

    /// `reshape(x)` to `dims`.
    pub fn reshape(&mut self, x: InstrId, dims: &[i64]) -> Result<InstrId, CompileError> {
        let t = self.element_type(x);
        self.add(Op::Reshape, &[x], Some(Shape::array(t, dims)))
    }

    /// The element type of an emitted array value.
    pub fn element_type(&self, x: InstrId) -> ElementType {
        self.shape(x)
            .as_array()
            .map_or(ElementType::U32, |a| a.element_type)
    }

    /// `slice(x)` taking `[start, limit)` of dimension `dim` and all of the others.
    pub fn slice_dim(
        &mut self,
        x: InstrId,
        dim: usize,
        start: i64,
        limit: i64,
    ) -> Result<InstrId, CompileError> {
        let slices = self
            .dims(x)
            .iter()
            .enumerate()
            .map(|(d, &n)| {
                let (start, limit) = if d == dim { (start, limit) } else { (0, n) };
                SliceDim {
                    start,
                    limit,
                    stride: 1,
                }
            })
            .collect();
        self.add(Op::Slice { slices }, &[x], None)
    }

    /// Word `k` (0 low, 1 high) of a pair array `u32[dims..., 2]`, as `u32[dims...]`.
    pub fn word(&mut self, pair: InstrId, k: i64) -> Result<InstrId, CompileError> {
        if let Some(words) = self.pairs.get(&pair) {
            return Ok(words[k as usize]);
        }
        let dims = self.dims(pair);
        let rank = dims.len() - 1;
        let w = self.slice_dim(pair, rank, k, k + 1)?;
        self.reshape(w, &dims[..rank])
    }

    /// The pair array of two `u32[dims...]` words.
    pub fn pair(&mut self, lo: InstrId, hi: InstrId) -> Result<InstrId, CompileError> {
        let mut dims = self.dims(lo);
        let rank = dims.len();
        dims.push(1);
        let lo_column = self.reshape(lo, &dims)?;
        let hi_column = self.reshape(hi, &dims)?;
        let pair = self.add(
            Op::Concatenate {
                dimension: rank as i64,
            },
            &[lo_column, hi_column],
            None,
        )?;
        self.pairs.insert(pair, [lo, hi]);
        Ok(pair)
    }

    /// The full 64-bit product of two `u32` arrays as `(low, high)` words, from 16-bit
    /// halves (the IPU multiplies 32-bit integers to a 32-bit result).
    pub fn mul_wide(&mut self, x: InstrId, y: InstrId) -> Result<(InstrId, InstrId), CompileError> {
        use BinaryOp::{Add, And, Multiply, Or, ShiftLeft, ShiftRightLogical};
        let xl = self.binary_const(And, x, 0xFFFF)?;
        let xh = self.binary_const(ShiftRightLogical, x, 16)?;
        let yl = self.binary_const(And, y, 0xFFFF)?;
        let yh = self.binary_const(ShiftRightLogical, y, 16)?;
        let p0 = self.binary(Multiply, xl, yl)?;
        let p1 = self.binary(Multiply, xl, yh)?;
        let p2 = self.binary(Multiply, xh, yl)?;
        let p3 = self.binary(Multiply, xh, yh)?;
        // mid < 3 * 2^16: the sum of three 16-bit pieces cannot overflow.
        let p0h = self.binary_const(ShiftRightLogical, p0, 16)?;
        let p1l = self.binary_const(And, p1, 0xFFFF)?;
        let p2l = self.binary_const(And, p2, 0xFFFF)?;
        let mid = self.binary(Add, p0h, p1l)?;
        let mid = self.binary(Add, mid, p2l)?;
        let p0l = self.binary_const(And, p0, 0xFFFF)?;
        let mid_up = self.binary_const(ShiftLeft, mid, 16)?;
        let lo = self.binary(Or, p0l, mid_up)?;
        let p1h = self.binary_const(ShiftRightLogical, p1, 16)?;
        let p2h = self.binary_const(ShiftRightLogical, p2, 16)?;
        let mid_h = self.binary_const(ShiftRightLogical, mid, 16)?;
        let hi = self.binary(Add, p3, p1h)?;
        let hi = self.binary(Add, hi, p2h)?;
        let hi = self.binary(Add, hi, mid_h)?;
        Ok((lo, hi))
    }

    /// `a + b` of `u32` arrays and the carry out (`u32` 0 or 1).
    pub fn add_carry(
        &mut self,
        a: InstrId,
        b: InstrId,
    ) -> Result<(InstrId, InstrId), CompileError> {
        let sum = self.binary(BinaryOp::Add, a, b)?;
        let wrapped = self.compare(ComparisonDirection::Lt, sum, a)?;
        let carry = self.convert(wrapped, ElementType::U32)?;
        Ok((sum, carry))
    }

    /// Adds `b` (`u32` words, least significant first) to the multi-word number `a`,
    /// carrying through every word of `a`; `b` may have fewer words.
    pub fn add_words(
        &mut self,
        a: &[InstrId],
        b: &[InstrId],
    ) -> Result<Vec<InstrId>, CompileError> {
        let mut out = Vec::with_capacity(a.len());
        let mut carry: Option<InstrId> = None;
        for (k, &w) in a.iter().enumerate() {
            let mut w = w;
            let mut carries = Vec::new();
            if let Some(&bk) = b.get(k) {
                let (s, c) = self.add_carry(w, bk)?;
                w = s;
                carries.push(c);
            }
            if let Some(c) = carry {
                let (s, c2) = self.add_carry(w, c)?;
                w = s;
                carries.push(c2);
            }
            out.push(w);
            // At most one of the two carries is 1: their sum is the next carry.
            carry = match carries.as_slice() {
                [] => None,
                [c] => Some(*c),
                [c1, c2] => Some(self.binary(BinaryOp::Add, *c1, *c2)?),
                _ => unreachable!("at most two carries per word"),
            };
        }
        Ok(out)
    }
}

/// What a rewrite makes of one instruction: the value standing for it, or `None` to copy
/// it as it is.
pub(super) type Rewrite<'r> = dyn FnMut(
        &mut Emitter,
        &Computation,
        &Instruction,
        &[Option<InstrId>],
    ) -> Result<Option<InstrId>, CompileError>
    + 'r;

/// Rebuilds computation `id` of `module` instruction by instruction, in program order,
/// through `rewrite`.
pub(super) fn rebuild(
    pass: &'static str,
    module: &Module,
    id: CompId,
    taken: &mut HashSet<String>,
    rewrite: &mut Rewrite<'_>,
) -> Result<Computation, CompileError> {
    let old = module.computation(id);
    let mut e = Emitter::new(pass, module, &old.name, taken);
    let slots = old.order().iter().map(|i| i.index() + 1).max().unwrap_or(0);
    let mut map: Vec<Option<InstrId>> = vec![None; slots];
    for &i in old.order() {
        let instr = old.instr(i);
        e.begin(instr);
        let new = match rewrite(&mut e, old, instr, &map)? {
            Some(v) => {
                e.finish(v);
                v
            }
            None => {
                e.source = None;
                e.copy(instr, &map)
            }
        };
        map[i.index()] = Some(new);
    }
    e.out.root = renamed(&map, old.root);
    Ok(e.out)
}

/// `map[old]`, the value emitted for an original instruction.
pub(super) fn renamed(map: &[Option<InstrId>], old: InstrId) -> InstrId {
    map[old.index()].expect("operands are emitted before their users (program order)")
}

/// Every instruction name used in `module`.
pub(super) fn names_in(module: &Module) -> HashSet<String> {
    module
        .computations()
        .flat_map(|(_, c)| c.instructions().map(|(_, i)| i.name.clone()))
        .collect()
}
