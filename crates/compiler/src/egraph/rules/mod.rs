//! The rewrite tables, one file per topic. Every rule has a name and follows the charter
//! (Cranelift's mid-end rules, `STYLE.md`): a rule never makes the cost worse, a rule that
//! drops uses retires the old form so it cannot be extracted, and there is no blanket
//! commutativity or associativity (a pattern over `add`/`multiply` tries both operand
//! orders itself). A rule is a left-hand pattern that finds candidates (`"(multiply ?a ?b)"`)
//! and a Rust applier that checks shapes, types and constants through the e-graph's
//! analysis and builds the replacement with real signatures.

pub mod activations;
pub mod algebra;
pub mod matmul;

use super::analysis::{HloAnalysis, HloEGraph};
use super::language::{HloNode, Signature};
use egg::{Applier, Id, Pattern, PatternAst, Rewrite, Subst, Symbol, Var};
use xla_ir::{ElementType, Op};

/// What the rule tables are built for.
#[derive(Debug, Clone, Copy, Default)]
pub struct RuleOptions {
    /// `optimizations.combine_matmuls`: combine dots that share an operand.
    pub combine_matmuls: bool,
    /// `optimizations.enable_fast_math`: float rewrites that ignore NaN and infinities
    /// (`x * 0 = 0`).
    pub enable_fast_math: bool,
}

/// Every rule for these options, in table order.
pub fn rules(options: RuleOptions) -> Vec<Rewrite<HloNode, HloAnalysis>> {
    let mut all = algebra::rules(options);
    all.extend(matmul::rules(options));
    all.extend(activations::rules());
    all
}

/// A match of a rule's pattern: the class it matched and the pattern's variables.
pub struct Match<'a> {
    /// The matched class.
    pub class: Id,
    subst: &'a Subst,
}

impl Match<'_> {
    /// The class bound to `?name`.
    pub fn var(&self, name: &str) -> Id {
        let v: Var = name.parse().expect("rule variables are written ?name");
        self.subst[v]
    }
}

/// Builds the replacement for a match: a class to union with the matched one, or `None`
/// when the match does not qualify (or the applier made its own unions).
pub type ApplyFn = fn(&mut HloEGraph, &Match<'_>, RuleOptions) -> Option<Id>;

/// A Rust applier.
struct FnApplier {
    apply: ApplyFn,
    options: RuleOptions,
}

impl Applier<HloNode, HloAnalysis> for FnApplier {
    fn apply_one(
        &self,
        egraph: &mut HloEGraph,
        eclass: Id,
        subst: &Subst,
        _ast: Option<&PatternAst<HloNode>>,
        _rule: Symbol,
    ) -> Vec<Id> {
        let m = Match {
            class: eclass,
            subst,
        };
        match (self.apply)(egraph, &m, self.options) {
            Some(new) if egraph.union(eclass, new) => vec![eclass],
            _ => vec![],
        }
    }
}

/// A named rule: `lhs` finds candidates, `apply` checks and rewrites them.
pub fn rule(
    name: &str,
    lhs: &str,
    apply: ApplyFn,
    options: RuleOptions,
) -> Rewrite<HloNode, HloAnalysis> {
    let searcher: Pattern<HloNode> = lhs.parse().expect("rule patterns are valid");
    Rewrite::new(name, searcher, FnApplier { apply, options })
        .expect("rule names are unique and appliers bind no unknown variable")
}

// ---- Reading the e-graph -------------------------------------------------------------

/// The nodes of `class` with this opcode.
pub fn nodes<'a>(eg: &'a HloEGraph, class: Id, opcode: &str) -> Vec<&'a HloNode> {
    eg[class]
        .nodes
        .iter()
        .filter(|n| n.opcode.as_str() == opcode)
        .collect()
}

/// Binary opcodes whose operands may swap (the only ones [`pairs`] and [`retire`] read in
/// both orders; there is no commutativity rule).
fn is_commutative(opcode: &str) -> bool {
    matches!(opcode, "add" | "multiply" | "maximum" | "minimum")
}

/// The operand pairs of `opcode` nodes in `class`, both orders for `add`, `multiply`,
/// `maximum` and `minimum` (so patterns need not be written twice).
pub fn pairs(eg: &HloEGraph, class: Id, opcode: &str) -> Vec<(Id, Id)> {
    let commutative = is_commutative(opcode);
    let mut out = Vec::new();
    for n in nodes(eg, class, opcode) {
        let (a, b) = (eg.find(n.children[0]), eg.find(n.children[1]));
        out.push((a, b));
        if commutative && a != b {
            out.push((b, a));
        }
    }
    out
}

/// The operands of one-operand `opcode` nodes in `class`.
pub fn operands_of(eg: &HloEGraph, class: Id, opcode: &str) -> Vec<Id> {
    nodes(eg, class, opcode)
        .into_iter()
        .map(|n| eg.find(n.children[0]))
        .collect()
}

/// The number every element of `class` equals, when it is a constant splat.
pub fn splat(eg: &HloEGraph, class: Id) -> Option<f64> {
    eg[class].data.splat
}

/// True when `class` is a splat of `value`, to the precision of its element type.
pub fn is_splat(eg: &HloEGraph, class: Id, value: f64) -> bool {
    splat(eg, class).is_some_and(|v| close(v, value, element_type(eg, class)))
}

/// `a` and `b` agree to the precision of `t` (exactly for integers).
pub fn close(a: f64, b: f64, t: Option<ElementType>) -> bool {
    let tolerance = match t {
        Some(ElementType::F16 | ElementType::Bf16) => 1e-2,
        Some(ElementType::F32) => 1e-6,
        Some(ElementType::F64) => 1e-12,
        _ => 0.0,
    };
    (a - b).abs() <= tolerance * b.abs().max(1e-30)
}

/// The element type of an array class.
pub fn element_type(eg: &HloEGraph, class: Id) -> Option<ElementType> {
    eg[class].data.shape.as_array().map(|a| a.element_type)
}

/// The first signature of an `opcode` node in `class` (for attributes).
pub fn sig_of<'a>(eg: &'a HloEGraph, class: Id, opcode: &str) -> Option<&'a Signature> {
    nodes(eg, class, opcode).first().map(|n| eg.analysis.sig(n))
}

/// A signature for a new node that replaces `class` (annotations from its first node).
pub fn derived(eg: &HloEGraph, class: Id, op: Op, shape: xla_ir::Shape) -> Signature {
    match eg[class].nodes.first() {
        Some(n) => eg.analysis.sig(n).derived(op, shape),
        None => Signature::new(op, shape),
    }
}

/// Retires the `opcode` nodes of `class` whose operands are exactly `children`.
pub fn retire(eg: &mut HloEGraph, class: Id, opcode: &str, children: &[Id]) {
    let found: Vec<HloNode> = nodes(eg, class, opcode)
        .into_iter()
        .filter(|n| {
            let ch: Vec<Id> = n.children.iter().map(|&c| eg.find(c)).collect();
            let commutative = is_commutative(opcode);
            let swapped =
                ch.len() == 2 && commutative && ch[0] == children[1] && ch[1] == children[0];
            ch == children || swapped
        })
        .cloned()
        .collect();
    eg.analysis.subsumed.extend(found);
}
