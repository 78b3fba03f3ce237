//! From a computation into an e-graph and back: each instruction becomes a node (so a
//! repeated identical instruction becomes one class, as CSE would make it), and the
//! extracted nodes become instructions again, keeping the name, metadata and location of
//! every instruction that survives unchanged. A new node takes the name of the instruction
//! its class replaces when that name is free.

use super::analysis::{HloEGraph, canonical};
use super::language::{HloNode, Signature, node};
use egg::Id;
use std::collections::{HashMap, HashSet};
use xla_ir::{Activation, CompId, Computation, InstrId, Instruction, Module, Op};

/// A computation loaded into an e-graph.
pub struct Loaded {
    /// The class of each instruction, by arena index (`None` outside the program order).
    pub classes: Vec<Option<Id>>,
    /// The node each instruction became, by arena index.
    pub nodes: Vec<Option<HloNode>>,
    /// The root's class.
    pub root: Id,
    /// The parameters' classes (they survive even when unused).
    pub parameters: Vec<Id>,
}

/// Why a computation is left as it is.
pub fn unsupported(module: &Module, comp: &Computation) -> Option<String> {
    comp.instructions().find_map(|(_, i)| {
        if !i.control_predecessors.is_empty() {
            return Some(format!("'{}' has control predecessors", i.name));
        }
        if matches!(i.op, Op::Infeed { .. } | Op::Outfeed { .. }) {
            // Feeds act on the host: none may merge with another or vanish unused.
            return Some(format!("'{}' is an {}", i.name, i.op.name()));
        }
        // Two calls of a computation that reads an infeed read two values.
        let calls_feeds =
            i.op.called_computations()
                .into_iter()
                .find(|&c| uses_feeds(module, c, &mut HashSet::new()))?;
        Some(format!(
            "'{}' calls {}, which uses a feed",
            i.name,
            module.computation(calls_feeds).name
        ))
    })
}

/// Whether computation `id`, or one it calls, has an infeed or outfeed.
fn uses_feeds(module: &Module, id: CompId, seen: &mut HashSet<CompId>) -> bool {
    if !seen.insert(id) {
        return false;
    }
    module.computation(id).instructions().any(|(_, i)| {
        matches!(i.op, Op::Infeed { .. } | Op::Outfeed { .. })
            || i.op
                .called_computations()
                .into_iter()
                .any(|c| uses_feeds(module, c, seen))
    })
}

/// Adds every instruction of `comp` to `egraph`.
pub fn load(egraph: &mut HloEGraph, comp: &Computation) -> Loaded {
    let n = comp
        .order()
        .iter()
        .map(|i| i.index() + 1)
        .max()
        .unwrap_or(0);
    let mut classes = vec![None; n];
    let mut nodes = vec![None; n];
    let mut parameters = Vec::new();
    for (id, instr) in comp.instructions() {
        let children: Vec<Id> = instr
            .operands
            .iter()
            .map(|o| classes[o.index()].expect("operands come first in program order"))
            .collect();
        let opaque = matches!(&instr.op, Op::CustomCall { target, .. }
            if Activation::from_custom_call(target, instr.backend_config.as_deref()).is_none());
        let sig = Signature {
            op: instr.op.clone(),
            shape: instr.shape.clone(),
            frontend_attributes: instr.frontend_attributes.clone(),
            backend_config: instr.backend_config.clone(),
            sharding: instr.sharding.clone(),
            unique: opaque.then_some(id.0),
        };
        let is_dot = matches!(sig.op, Op::Dot { .. });
        let n = node(&mut egraph.analysis.sigs, sig, &children);
        if is_dot {
            egraph.analysis.input_dots.insert(n.clone());
        }
        let class = egraph.add(n.clone());
        if matches!(instr.op, Op::Parameter { .. }) {
            parameters.push(class);
        }
        classes[id.index()] = Some(class);
        nodes[id.index()] = Some(n);
    }
    Loaded {
        root: classes[comp.root.index()].expect("the root is in the program order"),
        classes,
        nodes,
        parameters,
    }
}

/// Builds the computation of the chosen nodes (`choice[class]`), reachable from the root
/// and the parameters, in a post order. `taken` holds every instruction name of the module
/// outside this computation; names stay unique.
pub fn rebuild(
    egraph: &HloEGraph,
    original: &Computation,
    loaded: &Loaded,
    choice: &HashMap<Id, HloNode>,
    taken: &mut HashSet<String>,
) -> Computation {
    // Which instruction each surviving node was, and which instruction each class replaces.
    let mut origin: HashMap<HloNode, InstrId> = HashMap::new();
    let mut class_origin: HashMap<Id, InstrId> = HashMap::new();
    for (id, _) in original.instructions() {
        if let Some(n) = &loaded.nodes[id.index()] {
            origin.entry(canonical(egraph, n)).or_insert(id);
            let class = egraph.find(loaded.classes[id.index()].expect("loaded with its node"));
            class_origin.entry(class).or_insert(id);
        }
    }
    let mut out = Computation::new(original.name.clone());
    let mut emitted: HashMap<Id, InstrId> = HashMap::new();
    let mut starts: Vec<Id> = loaded.parameters.iter().map(|&p| egraph.find(p)).collect();
    starts.push(egraph.find(loaded.root));
    for start in starts {
        // Iterative post order: a class is emitted after its chosen node's children.
        let mut stack = vec![(start, false)];
        while let Some((class, expanded)) = stack.pop() {
            if emitted.contains_key(&class) {
                continue;
            }
            let n = &choice[&class];
            if !expanded {
                stack.push((class, true));
                for &c in n.children.iter().rev() {
                    let c = egraph.find(c);
                    if !emitted.contains_key(&c) {
                        stack.push((c, false));
                    }
                }
                continue;
            }
            let operands: Vec<InstrId> = n
                .children
                .iter()
                .map(|c| emitted[&egraph.find(*c)])
                .collect();
            let instr = match origin.get(n) {
                Some(&was) if taken.insert(original.instr(was).name.clone()) => {
                    let mut i = original.instr(was).clone();
                    i.operands = operands.into_iter().collect();
                    i
                }
                _ => new_instruction(
                    egraph,
                    original,
                    n,
                    operands,
                    class_origin.get(&class),
                    taken,
                ),
            };
            let id = out.push(instr);
            emitted.insert(class, id);
        }
    }
    out.root = emitted[&egraph.find(loaded.root)];
    out
}

fn new_instruction(
    egraph: &HloEGraph,
    original: &Computation,
    n: &HloNode,
    operands: Vec<InstrId>,
    replaces: Option<&InstrId>,
    taken: &mut HashSet<String>,
) -> Instruction {
    let sig = egraph.analysis.sig(n);
    let replaced = replaces.map(|&r| original.instr(r));
    let base = match replaced {
        Some(r) if !taken.contains(&r.name) => r.name.clone(),
        _ => sig.op.name().replace('-', "_"),
    };
    let reserved = |name: &str| {
        original.find(name).is_some() && Some(name) != replaced.map(|r| r.name.as_str())
    };
    let mut name = base.clone();
    let mut k = 1;
    while reserved(&name) || !taken.insert(name.clone()) {
        name = format!("{base}.{k}");
        k += 1;
    }
    let mut instr = Instruction::new(name, sig.op.clone(), &operands, sig.shape.clone());
    instr.frontend_attributes = sig.frontend_attributes.clone();
    instr.backend_config = sig.backend_config.clone();
    instr.sharding = sig.sharding.clone();
    if let Some(r) = replaced {
        instr.metadata = r.metadata.clone();
        instr.location = r.location;
    }
    instr
}
