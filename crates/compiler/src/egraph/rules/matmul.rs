//! Matrix products: transposes folded into the dot's dimension numbers, and matmul
//! combining (the seed's `optimizations.combine_matmuls`, off by default): dots of the
//! input that share an operand (the same input or the same weights) become one dot over
//! the other operands concatenated, followed by one slice per original dot. Combining
//! needs identical dimension numbers, precision, frontend attributes and element types,
//! exactly one free dimension on the concatenated side, and no dot of the group feeding
//! another; it retires the original dots, so the combined form is what is extracted.

use super::{Match, RuleOptions, derived, nodes, rule};
use crate::egraph::analysis::{HloAnalysis, HloEGraph, add, canonical};
use crate::egraph::language::{HloNode, Signature};
use egg::{Id, Rewrite};
use std::collections::HashSet;
use xla_ir::attributes::{DotDims, SliceDim};
use xla_ir::{Op, Shape};

/// The matmul table.
pub fn rules(o: RuleOptions) -> Vec<Rewrite<HloNode, HloAnalysis>> {
    let mut table = vec![
        rule(
            "dot-transpose-lhs",
            "(dot (transpose ?x) ?b)",
            dot_transpose_lhs,
            o,
        ),
        rule(
            "dot-transpose-rhs",
            "(dot ?a (transpose ?x))",
            dot_transpose_rhs,
            o,
        ),
    ];
    if o.combine_matmuls {
        table.push(rule("combine-matmuls", "(dot ?a ?b)", combine_matmuls, o));
    }
    table
}

/// The dot node of `class` over exactly `a`, `b`.
fn dot_over(eg: &HloEGraph, class: Id, a: Id, b: Id) -> Option<HloNode> {
    nodes(eg, class, "dot")
        .into_iter()
        .find(|n| eg.find(n.children[0]) == a && eg.find(n.children[1]) == b)
        .cloned()
}

/// Every transpose of `x`: its class and its permutation.
fn transpose_of(eg: &HloEGraph, x: Id) -> Vec<(Id, Vec<i64>)> {
    let mut out = Vec::new();
    for p in eg[x].parents() {
        let p = eg.find(p);
        for n in nodes(eg, p, "transpose") {
            if eg.find(n.children[0]) == eg.find(x)
                && let Op::Transpose { dimensions } = &eg.analysis.sig(n).op
            {
                out.push((p, dimensions.clone()));
            }
        }
    }
    out
}

/// Dimension numbers with one operand's dimensions seen through a transpose `perm`
/// (operand dimension `d` of the transposed value is dimension `perm[d]` of its input).
/// `None` when the free dimensions would come out in another order.
fn through_transpose(
    contracting: &[i64],
    batch: &[i64],
    perm: &[i64],
) -> Option<(Vec<i64>, Vec<i64>)> {
    let free: Vec<i64> = (0..perm.len() as i64)
        .filter(|d| !contracting.contains(d) && !batch.contains(d))
        .map(|d| perm[d as usize])
        .collect();
    if free.windows(2).any(|w| w[0] > w[1]) {
        return None;
    }
    let map = |ds: &[i64]| ds.iter().map(|&d| perm[d as usize]).collect();
    Some((map(contracting), map(batch)))
}

fn dot_transpose(eg: &mut HloEGraph, m: &Match, lhs: bool) -> Option<Id> {
    let x = m.var("?x");
    let other = if lhs { m.var("?b") } else { m.var("?a") };
    for (t, perm) in transpose_of(eg, x) {
        let (a, b) = if lhs { (t, other) } else { (other, t) };
        let Some(dot) = dot_over(eg, m.class, eg.find(a), eg.find(b)) else {
            continue;
        };
        let sig = eg.analysis.sig(&dot).clone();
        let Op::Dot { dims, precision } = &sig.op else {
            continue;
        };
        let mut new = dims.clone();
        if lhs {
            let (c, bt) = through_transpose(&dims.lhs_contracting, &dims.lhs_batch, &perm)?;
            (new.lhs_contracting, new.lhs_batch) = (c, bt);
        } else {
            let (c, bt) = through_transpose(&dims.rhs_contracting, &dims.rhs_batch, &perm)?;
            (new.rhs_contracting, new.rhs_batch) = (c, bt);
        }
        let op = Op::Dot {
            dims: new,
            precision: precision.clone(),
        };
        let children = if lhs { [x, other] } else { [other, x] };
        let mut s = sig.clone();
        s.op = op;
        return Some(add(eg, s, &children));
    }
    None
}

fn dot_transpose_lhs(eg: &mut HloEGraph, m: &Match, _: RuleOptions) -> Option<Id> {
    dot_transpose(eg, m, true)
}

fn dot_transpose_rhs(eg: &mut HloEGraph, m: &Match, _: RuleOptions) -> Option<Id> {
    dot_transpose(eg, m, false)
}

/// A dot of a combinable group.
struct Member {
    class: Id,
    /// The operand that is not shared.
    other: Id,
    node: HloNode,
}

fn is_input_dot(eg: &HloEGraph, n: &HloNode) -> bool {
    let c = canonical(eg, n);
    eg.analysis.input_dots.iter().any(|d| canonical(eg, d) == c)
}

/// The input dots sharing `shared` on the same side (`side` 0: lhs, 1: rhs) with the same
/// signature apart from shape, ordered by class.
fn group(eg: &HloEGraph, shared: Id, side: usize, like: &Signature) -> Vec<Member> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for p in eg[shared].parents() {
        let p = eg.find(p);
        for n in nodes(eg, p, "dot") {
            let sig = eg.analysis.sig(n);
            let same = sig.op == like.op
                && sig.frontend_attributes == like.frontend_attributes
                && sig.shape.as_array().map(|a| a.element_type)
                    == like.shape.as_array().map(|a| a.element_type);
            if eg.find(n.children[side]) == shared && same && is_input_dot(eg, n) && seen.insert(p)
            {
                out.push(Member {
                    class: p,
                    other: eg.find(n.children[1 - side]),
                    node: n.clone(),
                });
            }
        }
    }
    out.sort_by_key(|m| m.class);
    out
}

/// True when `from`'s value may depend on a class in `targets` (any node of any class
/// reached counts; a search over `LIMIT` classes answers yes).
fn may_depend(eg: &HloEGraph, from: Id, targets: &HashSet<Id>) -> bool {
    const LIMIT: usize = 100_000;
    let mut stack = vec![eg.find(from)];
    let mut seen = HashSet::new();
    while let Some(c) = stack.pop() {
        if targets.contains(&c) {
            return true;
        }
        if !seen.insert(c) {
            continue;
        }
        if seen.len() > LIMIT {
            return true;
        }
        for n in &eg[c].nodes {
            stack.extend(n.children.iter().map(|&k| eg.find(k)));
        }
    }
    false
}

/// The one free dimension of an operand of `rank` (neither contracting nor batch).
fn single_free(rank: usize, contracting: &[i64], batch: &[i64]) -> Option<i64> {
    let free: Vec<i64> = (0..rank as i64)
        .filter(|d| !contracting.contains(d) && !batch.contains(d))
        .collect();
    (free.len() == 1).then(|| free[0])
}

fn with_dim(shape: &Shape, dim: usize, size: i64) -> Option<Shape> {
    let mut a = shape.as_array()?.clone();
    a.dims[dim] = size;
    Some(Shape::Array(a))
}

fn combine_matmuls(eg: &mut HloEGraph, m: &Match, _: RuleOptions) -> Option<Id> {
    let (a, b) = (m.var("?a"), m.var("?b"));
    let dot = dot_over(eg, m.class, a, b).filter(|d| is_input_dot(eg, d))?;
    let like = eg.analysis.sig(&dot).clone();
    let Op::Dot { dims, .. } = &like.op else {
        return None;
    };
    for (side, shared) in [(0, a), (1, b)] {
        let members = group(eg, shared, side, &like);
        if members.len() < 2 || members[0].class != m.class {
            continue;
        }
        let classes: HashSet<Id> = members.iter().map(|m| m.class).collect();
        if members.iter().any(|m| may_depend(eg, m.other, &classes)) {
            continue;
        }
        if let Some(slice) = combine(eg, &members, side, dims, &like) {
            return Some(slice);
        }
    }
    None
}

/// Builds the combined dot and the slices; unions every member but the first with its
/// slice and returns the first's slice.
fn combine(
    eg: &mut HloEGraph,
    members: &[Member],
    side: usize,
    dims: &DotDims,
    like: &Signature,
) -> Option<Id> {
    let (contracting, batch) = if side == 0 {
        (&dims.rhs_contracting, &dims.rhs_batch)
    } else {
        (&dims.lhs_contracting, &dims.lhs_batch)
    };
    let other_shape = eg[members[0].other].data.shape.clone();
    let concat_dim = single_free(other_shape.as_array()?.dims.len(), contracting, batch)?;
    let out_shape = &like.shape;
    let out_dim = if side == 0 {
        out_shape.as_array()?.dims.len() - 1
    } else {
        dims.lhs_batch.len()
    };
    let sizes: Vec<i64> = members
        .iter()
        .map(|m| Some(eg[m.other].data.shape.as_array()?.dims[concat_dim as usize]))
        .collect::<Option<_>>()?;
    let total: i64 = sizes.iter().sum();
    let concat_shape = with_dim(&other_shape, concat_dim as usize, total)?;
    let others: Vec<Id> = members.iter().map(|m| m.other).collect();
    let concat = add(
        eg,
        Signature::new(
            Op::Concatenate {
                dimension: concat_dim,
            },
            concat_shape,
        ),
        &others,
    );
    let shared = eg.find(members[0].node.children[side]);
    let operands = if side == 0 {
        [shared, concat]
    } else {
        [concat, shared]
    };
    let combined_shape = with_dim(out_shape, out_dim, total)?;
    let combined = add(
        eg,
        like.derived(like.op.clone(), combined_shape.clone()),
        &operands,
    );
    let mut first = None;
    let mut offset = 0;
    for (member, size) in members.iter().zip(&sizes) {
        let full = combined_shape.as_array()?.dims.clone();
        let slices = full
            .iter()
            .enumerate()
            .map(|(d, &n)| {
                if d == out_dim {
                    SliceDim {
                        start: offset,
                        limit: offset + size,
                        stride: 1,
                    }
                } else {
                    SliceDim {
                        start: 0,
                        limit: n,
                        stride: 1,
                    }
                }
            })
            .collect();
        offset += size;
        let shape = eg[member.class].data.shape.clone();
        let sig = derived(eg, member.class, Op::Slice { slices }, shape);
        let slice = add(eg, sig, &[combined]);
        eg.analysis.subsumed.push(member.node.clone());
        match first {
            None => first = Some(slice),
            Some(_) => {
                eg.union(member.class, slice);
            }
        }
    }
    first
}
