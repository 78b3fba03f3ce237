//! What a node costs on the IPU, for extraction: estimated cycles of the compute set it
//! lowers to, plus a charge for the bytes per tile its result occupies. The figures come
//! from the IPU Model's own cost model (`runtime::cost`, `runtime::Target`): every op that
//! runs is a superstep (a sync), element-wise work spreads over all tiles' worker contexts,
//! matrix products run at the AMP rate, data movement pays exchange. Views and literals
//! (parameters, scalar constants and their broadcasts, reshapes, tuples) cost almost
//! nothing, so extraction prefers fewer of them only as a tie-break.

use super::language::Signature;
use runtime::Target;
use xla_ir::{Activation, BinaryOp, Op, Shape, UnaryOp};

/// Cycles charged per byte a tile holds: a value that stays resident costs about what
/// loading it once does (the 64-bit load path moves 8 bytes a cycle).
const CYCLES_PER_RESIDENT_BYTE: f64 = 1.0 / 8.0;

/// The cost of views and literals.
const FREE: f64 = 1.0;

/// The IPU cost model extraction uses.
#[derive(Debug, Clone)]
pub struct IpuCostModel {
    target: Target,
}

fn elements(shape: &Shape) -> f64 {
    shape.as_array().map_or(0.0, |a| a.element_count() as f64)
}

/// Instructions per element of a unary op, as the IPU Model counts them.
fn unary_instructions(op: UnaryOp) -> f64 {
    crate::lower::elementwise::unary(op).map_or(1.0, |k| runtime::cost::unary_cost(k) as f64)
}

/// Instructions per element of a binary op, as the IPU Model counts them.
fn binary_instructions(op: BinaryOp) -> f64 {
    runtime::cost::binary_cost(crate::lower::elementwise::binary(op)) as f64
}

/// Instructions per element of an activation kernel (its formula's ops, one read).
fn activation_instructions(a: Activation) -> f64 {
    match a {
        Activation::Gelu { approximate: true } => 20.0 + 7.0,
        Activation::Gelu { approximate: false } => 30.0 + 4.0,
        Activation::Swish => 20.0 + 1.0,
        Activation::HardSigmoid => 4.0,
    }
}

impl IpuCostModel {
    /// The cost model of a target.
    pub fn new(target: Target) -> IpuCostModel {
        IpuCostModel { target }
    }

    fn tiles(&self) -> f64 {
        self.target.tiles_per_ipu.max(1) as f64
    }

    /// Cycles of an element-wise compute set of `instructions` per element over `n`
    /// elements spread over every tile (f32 arithmetic does 2 elements an instruction).
    fn elementwise(&self, n: f64, instructions: f64) -> f64 {
        self.target.internal_sync_cycles as f64 + (n / self.tiles()).ceil() * instructions / 2.0
    }

    /// Cycles to rearrange `bytes` through the exchange.
    fn movement(&self, bytes: f64) -> f64 {
        self.target.internal_sync_cycles as f64
            + (bytes / self.tiles()).ceil() / self.target.exchange_bytes_per_cycle as f64
    }

    /// The cost of a node with this signature whose operands have `operand_shapes`.
    pub fn cost(&self, sig: &Signature, operand_shapes: &[&Shape]) -> f64 {
        let n = elements(&sig.shape);
        let bytes = sig.shape.byte_size() as f64;
        let resident = (bytes / self.tiles()).ceil() * CYCLES_PER_RESIDENT_BYTE;
        let operand_bytes: f64 = operand_shapes.iter().map(|s| s.byte_size() as f64).sum();
        let cycles = match &sig.op {
            Op::Parameter { .. }
            | Op::Tuple
            | Op::GetTupleElement { .. }
            | Op::Reshape
            | Op::Bitcast
            | Op::AfterAll
            | Op::OptimizationBarrier => return FREE,
            Op::Constant { .. } if n <= 1.0 => return FREE,
            Op::Constant { .. } => return FREE + resident,
            // A broadcast scalar is a literal in the kernels that read it.
            Op::Broadcast { .. } if operand_shapes.iter().all(|s| elements(s) <= 1.0) => {
                return FREE;
            }
            Op::Unary(UnaryOp::Copy) => self.movement(bytes),
            Op::Unary(u) => self.elementwise(n, unary_instructions(*u) + 1.0),
            Op::Binary(b) => self.elementwise(n, binary_instructions(*b) + 2.0),
            Op::Compare { .. } | Op::Convert => self.elementwise(n, 3.0),
            Op::Select | Op::Clamp => self.elementwise(n, 5.0),
            Op::CustomCall { target, .. } => {
                match Activation::from_custom_call(target, sig.backend_config.as_deref()) {
                    Some(Ok(a)) => self.elementwise(n, activation_instructions(a) + 1.0),
                    _ => self.movement(bytes + operand_bytes) * 4.0,
                }
            }
            Op::Dot { .. } | Op::Convolution { .. } => {
                let macs = match &sig.op {
                    Op::Dot { dims, .. } => {
                        let lhs = operand_shapes.first().and_then(|s| s.as_array());
                        let k: f64 = lhs.map_or(1.0, |a| {
                            dims.lhs_contracting
                                .iter()
                                .map(|&d| a.dims[d as usize] as f64)
                                .product()
                        });
                        n * k
                    }
                    _ => n * operand_shapes.get(1).map_or(1.0, |s| elements(s)),
                };
                let rate = self.tiles() * self.target.f32_macs_per_cycle as f64;
                // Operands are broadcast to the tiles that need them.
                self.movement(operand_bytes) + macs / rate
            }
            Op::Broadcast { .. }
            | Op::Transpose { .. }
            | Op::Slice { .. }
            | Op::Concatenate { .. }
            | Op::Pad { .. }
            | Op::Reverse { .. }
            | Op::DynamicSlice { .. }
            | Op::DynamicUpdateSlice
            | Op::Gather { .. } => self.movement(bytes),
            Op::Reduce { .. } | Op::ReduceWindow { .. } => {
                self.movement(operand_bytes) + self.elementwise(operand_bytes / 4.0, 2.0)
            }
            _ => self.movement(bytes + operand_bytes) * 2.0,
        };
        cycles + resident
    }
}
