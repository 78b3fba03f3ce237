//! How HLO element types are stored on the device. The IPU computes in f32, f16, s32, u32
//! and bool; 8- and 16-bit integers are stored widened to 32 bits (sign- or zero-extended)
//! and computed by codelets that narrow them; f64 does not exist on the device.

use crate::CompileError;
use codegen::DType;
use xla_ir::{ElementType, Module, Shape};

/// The storage type of an HLO element type on the device, or `None` where there is none
/// (f64, bf16, complex and sub-16-bit floats and sub-byte integers; s64/u64 are narrowed
/// before lowering).
pub fn device_type(t: ElementType) -> Option<DType> {
    Some(match t {
        ElementType::F32 => DType::F32,
        ElementType::F16 => DType::F16,
        ElementType::S32 | ElementType::S16 | ElementType::S8 => DType::S32,
        ElementType::U32 | ElementType::U16 | ElementType::U8 => DType::U32,
        ElementType::Pred => DType::Pred,
        _ => return None,
    })
}

/// True when the type is stored as itself (JIT kernels handle it directly).
pub fn is_native(t: ElementType) -> bool {
    matches!(
        t,
        ElementType::F32
            | ElementType::F16
            | ElementType::S32
            | ElementType::U32
            | ElementType::Pred
    )
}

/// `computation 'c', line L` for errors.
pub fn location(comp: &xla_ir::Computation, instr: &xla_ir::Instruction) -> String {
    match instr.location {
        Some(l) => format!("line {}:{} (computation '{}')", l.line, l.column, comp.name),
        None => format!("computation '{}'", comp.name),
    }
}

fn has_type(shape: &Shape, t: ElementType) -> bool {
    shape.leaf_arrays().iter().any(|a| a.element_type == t)
}

/// Rejects types the device does not have (f64, with the conversion to make, and bf16),
/// values too big to model and calls nested too deep.
pub fn check_device_limits(module: &Module) -> Result<(), CompileError> {
    let depth = module.call_depth();
    if depth > xla_ir::eval::MAX_CALL_DEPTH {
        return Err(CompileError::TooDeep {
            depth,
            limit: xla_ir::eval::MAX_CALL_DEPTH,
        });
    }
    for (_, comp) in module.computations() {
        for (_, instr) in comp.instructions() {
            if has_type(&instr.shape, ElementType::F64) {
                return Err(CompileError::F64 {
                    at: location(comp, instr),
                    instruction: instr.name.clone(),
                });
            }
            if let Some(t) = instr
                .shape
                .leaf_arrays()
                .iter()
                .map(|a| a.element_type)
                .find(|t| !t.is_computed())
            {
                return Err(CompileError::Unsupported {
                    at: location(comp, instr),
                    instruction: instr.name.clone(),
                    opcode: instr.op.name().to_string(),
                    reason: format!(
                        "{t} values are read, checked and printed by ipuxla but not computed"
                    ),
                });
            }
            let unsupported = |reason: String| CompileError::Unsupported {
                at: location(comp, instr),
                instruction: instr.name.clone(),
                opcode: instr.op.name().to_string(),
                reason,
            };
            match &instr.op {
                xla_ir::Op::Foreign { opcode, .. } => {
                    return Err(unsupported(format!(
                        "{opcode} is read, checked and printed by ipuxla but not compiled (see the README's support table)"
                    )));
                }
                xla_ir::Op::ElidedConstant => {
                    return Err(unsupported(
                        "the constant's data was elided as {...} in the dump; re-dump the module with large constants printed".into(),
                    ));
                }
                op @ (xla_ir::Op::DynamicSlice { .. } | xla_ir::Op::DynamicUpdateSlice) => {
                    let shapes: Vec<&Shape> = instr
                        .operands
                        .iter()
                        .map(|o| &comp.instr(*o).shape)
                        .collect();
                    if xla_ir::shape_inference::vector_start_indices(op, &shapes) {
                        return Err(unsupported(
                            "start indices given as one vector (XLA's older form) are read but not compiled; give one scalar per dimension".into(),
                        ));
                    }
                }
                _ => {}
            }
            if has_type(&instr.shape, ElementType::Bf16) {
                return Err(CompileError::Unsupported {
                    at: location(comp, instr),
                    instruction: instr.name.clone(),
                    opcode: instr.op.name().to_string(),
                    reason: "bf16 values are not supported yet; convert to f16 or f32".into(),
                });
            }
            let bytes = device_bytes(&instr.shape);
            if bytes > MAX_VALUE_BYTES {
                return Err(CompileError::TooBig {
                    at: location(comp, instr),
                    instruction: instr.name.clone(),
                    shape: instr.shape.to_string(),
                    bytes,
                    limit: MAX_VALUE_BYTES,
                });
            }
        }
    }
    Ok(())
}

/// The most bytes one value may take on the device: the IPU Model keeps every tile's (and
/// Streaming Memory's) bytes in host memory, so it refuses, before lowering, what the
/// reference evaluator refuses too.
pub const MAX_VALUE_BYTES: u64 = xla_ir::eval::MAX_VALUE_BYTES;

/// A value's bytes in device storage (narrow integers widened), saturating.
fn device_bytes(shape: &Shape) -> u64 {
    shape
        .leaf_arrays()
        .iter()
        .map(|a| {
            let size = device_type(a.element_type).map_or(8, |t| t.size() as u64);
            a.element_count().saturating_mul(size)
        })
        .fold(0u64, u64::saturating_add)
}

/// Why an `rng-bit-generator` reaching lowering is refused: the expander pass replaces
/// every one with arithmetic, so only a pipeline stopped early leaves one.
pub(crate) const RNG_UNEXPANDED: &str = "rng-bit-generator is lowered as arithmetic by the rng-bit-generator-expander pass, which did not run on it";
