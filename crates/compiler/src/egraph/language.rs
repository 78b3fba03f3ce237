//! The e-graph's language: one node kind for every HLO op. A node is an opcode, a
//! [`SigId`] naming everything else that defines the op (attributes, result shape,
//! frontend attributes, backend config) in the e-graph's [`Signatures`] table, and its
//! operands as children. Patterns parsed from text (`"(multiply ?x ?y)"`) carry
//! [`SigId::ANY`] and match an opcode with any attributes; they only search, new nodes are
//! built by the rules' appliers with real signatures.

use egg::{FromOp, Id, Language, Symbol};
use smallvec::SmallVec;
use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};
use xla_ir::metadata::FrontendAttributes;
use xla_ir::{Op, Shape, Sharding};

/// Index of a [`Signature`] in the e-graph's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SigId(pub u32);

impl SigId {
    /// Any signature (patterns only).
    pub const ANY: SigId = SigId(u32::MAX);
}

/// An e-node: an HLO op applied to e-classes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HloNode {
    /// The HLO opcode (`add`, `dot`, `custom-call`, ...); nodes sort by it first, as egg's
    /// matching of large classes needs.
    pub opcode: Symbol,
    /// The attributes, shape and annotations.
    pub sig: SigId,
    /// The operands' e-classes, in order.
    pub children: SmallVec<[Id; 3]>,
}

impl Language for HloNode {
    type Discriminant = Symbol;

    fn discriminant(&self) -> Symbol {
        self.opcode
    }

    fn matches(&self, other: &Self) -> bool {
        self.opcode == other.opcode
            && self.children.len() == other.children.len()
            && (self.sig == other.sig || self.sig == SigId::ANY || other.sig == SigId::ANY)
    }

    fn children(&self) -> &[Id] {
        &self.children
    }

    fn children_mut(&mut self) -> &mut [Id] {
        &mut self.children
    }
}

impl FromOp for HloNode {
    type Error = Infallible;

    fn from_op(op: &str, children: Vec<Id>) -> Result<HloNode, Infallible> {
        Ok(HloNode {
            opcode: Symbol::from(op),
            sig: SigId::ANY,
            children: children.into(),
        })
    }
}

impl fmt::Display for HloNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.opcode.as_str())
    }
}

/// Everything that defines an instruction except its operands and name.
#[derive(Debug, Clone, PartialEq, Hash)]
pub struct Signature {
    /// The op and its attributes.
    pub op: Op,
    /// The result shape.
    pub shape: Shape,
    /// `frontend_attributes={...}`.
    pub frontend_attributes: FrontendAttributes,
    /// `backend_config=...`.
    pub backend_config: Option<String>,
    /// `sharding={...}`.
    pub sharding: Option<Sharding>,
    /// Set for instructions that must never merge with an identical one (opaque
    /// custom-calls): the instruction's arena index.
    pub unique: Option<u32>,
}

impl Signature {
    /// A signature with no annotations.
    pub fn new(op: Op, shape: Shape) -> Signature {
        Signature {
            op,
            shape,
            frontend_attributes: FrontendAttributes::new(),
            backend_config: None,
            sharding: None,
            unique: None,
        }
    }

    /// The same annotations as `self` for another op and shape (derived instructions keep
    /// the frontend attributes and sharding of what they replace).
    pub fn derived(&self, op: Op, shape: Shape) -> Signature {
        Signature {
            op,
            shape,
            frontend_attributes: self.frontend_attributes.clone(),
            backend_config: None,
            sharding: self.sharding.clone(),
            unique: None,
        }
    }
}

/// The signatures of an e-graph, each stored once.
#[derive(Debug, Default)]
pub struct Signatures {
    list: Vec<Signature>,
    /// The signatures with each [`Signature::hash_bits`], by id.
    index: HashMap<u64, SmallVec<[SigId; 1]>>,
}

impl Signature {
    /// A hash of everything, constants by their bits: [identical](Signature::identical)
    /// signatures hash alike.
    fn hash_bits(&self) -> u64 {
        let mut state = DefaultHasher::new();
        self.hash(&mut state);
        if let Op::Constant { literal } = &self.op {
            literal.hash_bits(&mut state);
        }
        state.finish()
    }

    /// Equal in every part, constants bit for bit (`-0.0` is not `0.0`; a NaN is itself).
    fn identical(&self, other: &Signature) -> bool {
        let Signature {
            op,
            shape,
            frontend_attributes,
            backend_config,
            sharding,
            unique,
        } = self;
        let same_op = match (op, &other.op) {
            (Op::Constant { literal: a }, Op::Constant { literal: b }) => a.same_bits(b),
            (a, b) => a == b,
        };
        same_op
            && *shape == other.shape
            && *frontend_attributes == other.frontend_attributes
            && *backend_config == other.backend_config
            && *sharding == other.sharding
            && *unique == other.unique
    }
}

impl Signatures {
    /// The id of `sig`, adding it if new. [Identical](Signature::identical) signatures get
    /// equal ids, so equal nodes hash-cons.
    pub fn intern(&mut self, sig: Signature) -> SigId {
        let ids = self.index.entry(sig.hash_bits()).or_default();
        if let Some(&id) = ids
            .iter()
            .find(|id| self.list[id.0 as usize].identical(&sig))
        {
            return id;
        }
        let id = SigId(self.list.len() as u32);
        self.list.push(sig);
        ids.push(id);
        id
    }

    /// The signature with this id.
    pub fn get(&self, id: SigId) -> &Signature {
        assert!(id != SigId::ANY, "pattern nodes never enter the e-graph");
        &self.list[id.0 as usize]
    }

    /// How many distinct signatures there are.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

/// The node of a signature over `children`.
pub fn node(sigs: &mut Signatures, sig: Signature, children: &[Id]) -> HloNode {
    let opcode = Symbol::from(sig.op.name());
    HloNode {
        opcode,
        sig: sigs.intern(sig),
        children: children.iter().copied().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xla_ir::ArrayLiteral;

    fn constant(value: f32) -> Signature {
        let literal: xla_ir::Literal = ArrayLiteral::scalar_f32(value).into();
        Signature::new(
            Op::Constant { literal },
            Shape::scalar(xla_ir::ElementType::F32),
        )
    }

    #[test]
    fn constants_are_one_signature_exactly_when_their_bits_are_equal() {
        let mut sigs = Signatures::default();
        let zero = sigs.intern(constant(0.0));
        assert_eq!(sigs.intern(constant(0.0)), zero);
        assert_ne!(sigs.intern(constant(-0.0)), zero);
        let nan = sigs.intern(constant(f32::NAN));
        assert_eq!(sigs.intern(constant(f32::NAN)), nan);
        assert_ne!(sigs.intern(constant(-f32::NAN)), nan);
        let mut tagged = constant(0.0);
        tagged.backend_config = Some("x".into());
        assert_ne!(sigs.intern(tagged), zero);
        assert_eq!(sigs.len(), 5);
    }
}
