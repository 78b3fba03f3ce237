//! One HLO instruction: an opcode with attributes, operands, a shape and annotations.

use crate::ids::InstrId;
use crate::metadata::{FrontendAttributes, Metadata};
use crate::{Op, Shape, Sharding};
use smallvec::SmallVec;

/// Where something was read from in HLO text (1-based line and column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SourceLocation {
    /// 1-based line.
    pub line: u32,
    /// 1-based column, in characters.
    pub column: u32,
}

/// An instruction of a computation.
#[derive(Debug, Clone, PartialEq)]
pub struct Instruction {
    /// The name, unique within the module (printed without `%`).
    pub name: String,
    /// The opcode and its attributes.
    pub op: Op,
    /// The operands, in order.
    pub operands: SmallVec<[InstrId; 4]>,
    /// The result shape.
    pub shape: Shape,
    /// Instructions that must run before this one although no data flows.
    pub control_predecessors: Vec<InstrId>,
    /// `metadata={...}` (empty when absent).
    pub metadata: Metadata,
    /// `sharding={...}`.
    pub sharding: Option<Sharding>,
    /// `frontend_attributes={...}`.
    pub frontend_attributes: FrontendAttributes,
    /// `backend_config=...`, verbatim as written (a JSON object or a quoted string).
    pub backend_config: Option<String>,
    /// Where the instruction was parsed from, if it came from text.
    pub location: Option<SourceLocation>,
    /// Attributes XLA prints that never change the value (`origin`, `statistics`,
    /// `result_accuracy`, `parameter_replication`, a call's `is_composite`, a dot's
    /// `algorithm`, ...): `name` and value text as written, in order, printed last.
    pub extra_attributes: Vec<(String, String)>,
}

impl Instruction {
    /// An instruction with no annotations.
    pub fn new(name: impl Into<String>, op: Op, operands: &[InstrId], shape: Shape) -> Instruction {
        Instruction {
            name: name.into(),
            op,
            operands: operands.iter().copied().collect(),
            shape,
            control_predecessors: Vec::new(),
            metadata: Metadata::default(),
            sharding: None,
            frontend_attributes: FrontendAttributes::new(),
            backend_config: None,
            location: None,
            extra_attributes: Vec::new(),
        }
    }
}
