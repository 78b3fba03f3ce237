//! What the e-graph knows about each e-class: its shape (every node of a class computes
//! the same value, so they share it; rewrites are guarded by it), and, for constants, the
//! value: `splat` when every element is the same number (the conditions `x + 0`, `x * 1`
//! test it), and the literal itself for one-element values, which folding evaluates
//! element-wise ops over.

use super::language::{HloNode, Signature, Signatures, node};
use egg::{Analysis, DidMerge, EGraph, Id};
use std::collections::HashSet;
use xla_ir::literal::ArrayData;
use xla_ir::{Computation, Instruction, Literal, Module, Op, Shape};

/// The e-graph ipuxla optimises in.
pub type HloEGraph = EGraph<HloNode, HloAnalysis>;

/// The analysis: the signature table and the nodes rules have retired.
#[derive(Debug, Default)]
pub struct HloAnalysis {
    /// The signatures nodes refer to.
    pub sigs: Signatures,
    /// Nodes a rule replaced while dropping uses (a fused GELU's multiply, combined dots):
    /// extraction never picks them. Stored as added; compare after canonicalising.
    pub subsumed: Vec<HloNode>,
    /// The dots of the input computation (matmul combining combines only those).
    pub input_dots: HashSet<HloNode>,
}

/// Per-class facts.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassData {
    /// The value's shape.
    pub shape: Shape,
    /// The number every element equals, when the value is a constant splat.
    pub splat: Option<f64>,
    /// The value, when it is a one-element constant.
    pub constant: Option<Literal>,
}

impl HloAnalysis {
    /// The signature of a node.
    pub fn sig(&self, n: &HloNode) -> &Signature {
        self.sigs.get(n.sig)
    }
}

/// Adds the node of `sig` over `children` and returns its class.
pub fn add(egraph: &mut HloEGraph, sig: Signature, children: &[Id]) -> Id {
    let n = node(&mut egraph.analysis.sigs, sig, children);
    egraph.add(n)
}

fn splat_of(data: &ArrayData) -> Option<f64> {
    let values: Vec<f64> = match data {
        ArrayData::Pred(v) => v.iter().map(|&b| b as u8 as f64).collect(),
        ArrayData::S8(v) => v.iter().map(|&x| x as f64).collect(),
        ArrayData::S16(v) => v.iter().map(|&x| x as f64).collect(),
        ArrayData::S32(v) => v.iter().map(|&x| x as f64).collect(),
        ArrayData::S64(v) => v.iter().map(|&x| x as f64).collect(),
        ArrayData::U8(v) => v.iter().map(|&x| x as f64).collect(),
        ArrayData::U16(v) => v.iter().map(|&x| x as f64).collect(),
        ArrayData::U32(v) => v.iter().map(|&x| x as f64).collect(),
        ArrayData::U64(v) => v.iter().map(|&x| x as f64).collect(),
        ArrayData::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
        ArrayData::Bf16(v) => v.iter().map(|x| x.to_f64()).collect(),
        ArrayData::F32(v) => v.iter().map(|&x| x as f64).collect(),
        ArrayData::F64(v) => v.clone(),
        ArrayData::C64(_) | ArrayData::C128(_) | ArrayData::Narrow { .. } => return None,
    };
    let first = *values.first()?;
    // Bitwise equality: -0.0 is not a splat of 0.0, NaN is no splat.
    values
        .iter()
        .all(|v| v.to_bits() == first.to_bits())
        .then_some(first)
        .filter(|v| !v.is_nan())
}

/// Element-wise ops folding evaluates when every operand is a one-element constant.
fn folds(op: &Op) -> bool {
    matches!(
        op,
        Op::Unary(_) | Op::Binary(_) | Op::Compare { .. } | Op::Select | Op::Clamp | Op::Convert
    )
}

/// Evaluates `sig` over constant operands with the reference evaluator.
fn fold(sig: &Signature, operands: &[&Literal]) -> Option<Literal> {
    let mut comp = Computation::new("fold");
    let mut ids = Vec::new();
    for (k, lit) in operands.iter().enumerate() {
        let shape = match lit {
            Literal::Array(a) => Shape::Array(a.shape.clone()),
            _ => return None,
        };
        let op = Op::Constant {
            literal: (*lit).clone(),
        };
        ids.push(comp.push(Instruction::new(format!("c{k}"), op, &[], shape)));
    }
    comp.root = comp.push(Instruction::new(
        "r",
        sig.op.clone(),
        &ids,
        sig.shape.clone(),
    ));
    let mut module = Module::new("fold");
    module.entry = module.add_computation(comp);
    xla_ir::eval::evaluate(&module, &[]).ok()
}

impl Analysis<HloNode> for HloAnalysis {
    type Data = ClassData;

    fn make(egraph: &mut HloEGraph, enode: &HloNode, _id: Id) -> ClassData {
        let sig = egraph.analysis.sig(enode);
        let child = |k: usize| &egraph[enode.children[k]].data;
        let one_element = sig.shape.as_array().is_some_and(|a| a.element_count() == 1);
        let (splat, constant) = match &sig.op {
            Op::Constant {
                literal: Literal::Array(a),
            } => (
                splat_of(&a.data),
                (a.data.len() == 1).then(|| Literal::Array(a.clone())),
            ),
            Op::Broadcast { .. } | Op::Reshape | Op::Bitcast | Op::Unary(xla_ir::UnaryOp::Copy) => {
                (child(0).splat, None)
            }
            op if folds(op) && one_element => {
                let operands: Option<Vec<&Literal>> = enode
                    .children
                    .iter()
                    .map(|&c| egraph[c].data.constant.as_ref())
                    .collect();
                let folded = operands.and_then(|ops| fold(sig, &ops));
                let splat = match &folded {
                    Some(Literal::Array(a)) => splat_of(&a.data),
                    _ => None,
                };
                (splat, folded)
            }
            _ => (None, None),
        };
        ClassData {
            shape: sig.shape.clone(),
            splat,
            constant,
        }
    }

    fn merge(&mut self, a: &mut ClassData, b: ClassData) -> DidMerge {
        let mut changed_a = false;
        if a.splat.is_none() && b.splat.is_some() {
            a.splat = b.splat;
            changed_a = true;
        }
        if a.constant.is_none() && b.constant.is_some() {
            a.constant = b.constant.clone();
            changed_a = true;
        }
        let b_lacks = (b.splat.is_none() && a.splat.is_some())
            || (b.constant.is_none() && a.constant.is_some());
        DidMerge(changed_a, b_lacks)
    }

    fn modify(egraph: &mut HloEGraph, id: Id) {
        // A folded class gets its constant as a node, which costs less than the op.
        let Some(literal) = egraph[id].data.constant.clone() else {
            return;
        };
        let has_constant = egraph[id]
            .nodes
            .iter()
            .any(|n| n.opcode.as_str() == "constant");
        if !has_constant {
            let shape = egraph[id].data.shape.clone();
            let c = add(egraph, Signature::new(Op::Constant { literal }, shape), &[]);
            egraph.union(id, c);
        }
    }
}

/// True when `n` (canonicalised) is a node a rule retired.
pub fn is_subsumed(egraph: &HloEGraph, n: &HloNode, subsumed: &HashSet<HloNode>) -> bool {
    !subsumed.is_empty() && subsumed.contains(&canonical(egraph, n))
}

/// `n` with its children replaced by their classes' canonical ids.
pub fn canonical(egraph: &HloEGraph, n: &HloNode) -> HloNode {
    let mut c = n.clone();
    for child in c.children.iter_mut() {
        *child = egraph.find(*child);
    }
    c
}

/// The retired nodes, canonicalised.
pub fn subsumed_set(egraph: &HloEGraph) -> HashSet<HloNode> {
    egraph
        .analysis
        .subsumed
        .iter()
        .map(|n| canonical(egraph, n))
        .collect()
}
