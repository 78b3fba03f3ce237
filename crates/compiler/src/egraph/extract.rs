//! DAG-aware extraction: picks one node per e-class so that the whole computation costs
//! least, counting a producer shared by several users once (a tree cost would count it
//! once per use and never combine two matmuls). This is the "greedy DAG" extractor of
//! extraction-gym: each class's best node carries the set of classes its choice pulls in,
//! with their costs; a node's cost is the sum over its own class and the union of its
//! children's sets. A node whose children's sets contain its own class would close a
//! cycle and is skipped. Classes are revisited through a parent index whenever a child's
//! choice improves. Retired (subsumed) nodes are never picked.

use super::analysis::{HloEGraph, is_subsumed, subsumed_set};
use super::cost::IpuCostModel;
use super::language::HloNode;
use egg::Id;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

/// A class's best choice so far.
struct Best {
    node: HloNode,
    total: f64,
    /// Classes this choice pulls in (its own included) with their node costs, sorted.
    set: Rc<Vec<(Id, f64)>>,
}

/// Unions sorted `(class, cost)` lists.
fn union(sets: &[&[(Id, f64)]]) -> Vec<(Id, f64)> {
    let mut all: Vec<(Id, f64)> = sets.iter().flat_map(|s| s.iter().copied()).collect();
    all.sort_by_key(|e| e.0);
    all.dedup_by_key(|e| e.0);
    all
}

/// Chooses a node for every class reachable from `roots`; an error names a class with no
/// acyclic, unretired node (a rule bug).
pub fn extract(
    egraph: &HloEGraph,
    roots: &[Id],
    model: &IpuCostModel,
) -> Result<HashMap<Id, HloNode>, String> {
    let subsumed = subsumed_set(egraph);
    let mut parents: HashMap<Id, Vec<Id>> = HashMap::new();
    let mut queue: VecDeque<Id> = VecDeque::new();
    for class in egraph.classes() {
        for n in &class.nodes {
            if n.children.is_empty() {
                queue.push_back(class.id);
            }
            for &c in &n.children {
                parents.entry(egraph.find(c)).or_default().push(class.id);
            }
        }
    }
    let mut best: HashMap<Id, Best> = HashMap::new();
    let mut queued: std::collections::HashSet<Id> = queue.iter().copied().collect();
    while let Some(class) = queue.pop_front() {
        queued.remove(&class);
        let mut improved = false;
        for n in &egraph[class].nodes {
            if is_subsumed(egraph, n, &subsumed) {
                continue;
            }
            let children: Option<Vec<&Best>> = n
                .children
                .iter()
                .map(|&c| best.get(&egraph.find(c)))
                .collect();
            let Some(children) = children else { continue };
            if children
                .iter()
                .any(|b| b.set.binary_search_by_key(&class, |e| e.0).is_ok())
            {
                continue;
            }
            let shapes: Vec<&xla_ir::Shape> =
                n.children.iter().map(|&c| &egraph[c].data.shape).collect();
            let own = model.cost(egraph.analysis.sig(n), &shapes);
            let mut set = union(
                &children
                    .iter()
                    .map(|b| b.set.as_slice())
                    .collect::<Vec<_>>(),
            );
            let at = set.partition_point(|e| e.0 < class);
            set.insert(at, (class, own));
            let total: f64 = set.iter().map(|e| e.1).sum();
            let better = best.get(&class).is_none_or(|b| total < b.total - 1e-9);
            if better {
                best.insert(
                    class,
                    Best {
                        node: n.clone(),
                        total,
                        set: Rc::new(set),
                    },
                );
                improved = true;
            }
        }
        if improved {
            for &p in parents.get(&class).into_iter().flatten() {
                let p = egraph.find(p);
                if queued.insert(p) {
                    queue.push_back(p);
                }
            }
        }
    }
    // The chosen nodes from the roots; a class met again while its operands are being
    // visited would close a cycle (choices made at different times can disagree).
    let mut choice = HashMap::new();
    let mut done: std::collections::HashSet<Id> = std::collections::HashSet::new();
    let mut on_path: std::collections::HashSet<Id> = std::collections::HashSet::new();
    let mut stack: Vec<(Id, bool)> = roots.iter().map(|&r| (egraph.find(r), false)).collect();
    while let Some((class, expanded)) = stack.pop() {
        if expanded {
            on_path.remove(&class);
            done.insert(class);
            continue;
        }
        if done.contains(&class) {
            continue;
        }
        if !on_path.insert(class) {
            return Err(format!(
                "the cheapest nodes form a cycle through e-class {class}"
            ));
        }
        let b = best
            .get(&class)
            .ok_or_else(|| format!("e-class {class} has no node extraction can pick"))?;
        stack.push((class, true));
        for &c in &b.node.children {
            let c = egraph.find(c);
            if on_path.contains(&c) {
                return Err(format!(
                    "the cheapest nodes form a cycle through e-class {c}"
                ));
            }
            stack.push((c, false));
        }
        choice.insert(class, b.node.clone());
    }
    Ok(choice)
}

/// The DAG cost of a choice: every chosen class once.
pub fn dag_cost(egraph: &HloEGraph, choice: &HashMap<Id, HloNode>, model: &IpuCostModel) -> f64 {
    choice
        .values()
        .map(|n| {
            let shapes: Vec<&xla_ir::Shape> =
                n.children.iter().map(|&c| &egraph[c].data.shape).collect();
            model.cost(egraph.analysis.sig(n), &shapes)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egraph::analysis::{HloAnalysis, add};
    use crate::egraph::language::Signature;
    use xla_ir::{BinaryOp, Op, Shape, UnaryOp};

    /// `add(t, t)` and `add(t, e)` are equal; with `t = tanh(x)` dearer than
    /// `e = exp(x)`, a tree cost prefers `add(t, e)` (it counts `t` twice), the DAG cost
    /// `add(t, t)`: `t` runs once.
    #[test]
    fn a_shared_producer_is_counted_once() {
        let shape = Shape::array(xla_ir::ElementType::F32, &[1024]);
        let mut eg = HloEGraph::new(HloAnalysis::default());
        let x = add(
            &mut eg,
            Signature::new(Op::Parameter { number: 0 }, shape.clone()),
            &[],
        );
        let t = add(
            &mut eg,
            Signature::new(Op::Unary(UnaryOp::Tanh), shape.clone()),
            &[x],
        );
        let e = add(
            &mut eg,
            Signature::new(Op::Unary(UnaryOp::Exp), shape.clone()),
            &[x],
        );
        let sum = Signature::new(Op::Binary(BinaryOp::Add), shape.clone());
        let tt = add(&mut eg, sum.clone(), &[t, t]);
        let te = add(&mut eg, sum, &[t, e]);
        eg.union(tt, te);
        eg.rebuild();
        let model = IpuCostModel::new(runtime::Target::ipu2().with_tiles_per_ipu(4));
        let choice = extract(&eg, &[tt], &model).unwrap();
        let root = &choice[&eg.find(tt)];
        assert_eq!(root.children.as_slice(), [eg.find(t), eg.find(t)]);
        assert!(!choice.contains_key(&eg.find(e)));
    }
}
