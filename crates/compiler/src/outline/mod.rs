//! Outlining: identical work shares one body of code. On the IPU every byte of code, vertex
//! state and exchange code sits in the same tile memory as the data, so a model of twelve
//! identical layers should hold one layer's code and call it twelve times, copying each
//! call's inputs into the function's fixed locations (Graphcore's `OutlineInstructions` and
//! `SubcomputationGraphCache`; the seed's `enable_graph_outlining` and
//! `outlined_function`).
//!
//! - `signature`: when two instructions are interchangeable, and which ops have effects;
//! - `regions`: growing isomorphic regions in lockstep from a seed, and convexity;
//! - `rewrite`: the function of a group of regions, and the caller with calls in their place.
//!
//! The lowering (`lower/control.rs`) compiles a function call once per IPU when its call
//! is marked as a function ([`FUNCTION_CALL_CONFIG`]) and the callee has no effects.

pub(crate) mod regions;
mod rewrite;
pub(crate) mod signature;

pub(crate) use signature::computation_has_effects;
pub use xla_ir::call_config::{FUNCTION_CALL_CONFIG, is_function_call};

use regions::{Grower, RegionGroup, Users, convex, signatures_of};
use std::collections::{HashMap, HashSet};
use xla_ir::ids::{CompId, InstrId};
use xla_ir::{Module, Op};

/// Fewest instructions in a region worth a function, unless it holds a matrix product or
/// convolution (Graphcore outlines those alone: they are the heaviest code). A few
/// element-wise ops save less code than the copies of their inputs and results add: on
/// `bench_transformer_fwd_bwd` a 4-instruction region called 4 times, copying 1.5 MB per
/// call, raised the peak tile memory.
pub const MIN_REGION_INSTRUCTIONS: usize = 8;

/// One function the outliner made.
#[derive(Debug, Clone)]
pub struct OutlinedFunction {
    /// The computation's name.
    pub name: String,
    /// The computation it was found in.
    pub caller: String,
    /// Regions replaced by a call of it.
    pub calls: usize,
    /// Instructions per region.
    pub instructions: usize,
    /// Matrix products and convolutions per region.
    pub heavy_ops: usize,
    /// Bytes each call copies into the function's inputs.
    pub bytes_in_per_call: u64,
    /// Bytes each call copies out of its results.
    pub bytes_out_per_call: u64,
}

impl std::fmt::Display for OutlinedFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} calls in {} of one body of {} instructions ({} matrix products or convolutions): {} bodies of code saved; each call copies {} B in and {} B out",
            self.name,
            self.calls,
            self.caller,
            self.instructions,
            self.heavy_ops,
            self.calls - 1,
            self.bytes_in_per_call,
            self.bytes_out_per_call
        )
    }
}

fn is_heavy(op: &Op) -> bool {
    matches!(op, Op::Dot { .. } | Op::Convolution { .. })
}

/// Finds repeated regions in `comp` and replaces them with calls of new functions.
pub fn outline_computation(
    module: &mut Module,
    comp: CompId,
) -> Result<Vec<OutlinedFunction>, String> {
    let c = module.computation(comp);
    let signatures = signatures_of(module, c);
    let users = Users::of(c);
    let mut classes: HashMap<u64, Vec<InstrId>> = HashMap::new();
    for &id in c.order() {
        if signature::outlinable(c.instr(id)) {
            classes.entry(signatures[&id]).or_default().push(id);
        }
    }
    // In program order of their first member: the same choices on every run.
    let mut seeds: Vec<Vec<InstrId>> = classes.into_values().filter(|m| m.len() > 1).collect();
    let position = c.positions();
    seeds.sort_by_key(|m| position[&m[0]]);
    // Best first: of every seed's regions, take the group saving most code (bodies saved
    // times their instructions), then grow the rest again around it.
    let mut claimed: HashSet<InstrId> = HashSet::new();
    let mut groups: Vec<RegionGroup> = Vec::new();
    loop {
        let mut best: Option<(usize, RegionGroup)> = None;
        for seed in &seeds {
            let free: Vec<InstrId> = seed
                .iter()
                .copied()
                .filter(|x| !claimed.contains(x))
                .collect();
            if free.len() < 2 {
                continue;
            }
            let grower = Grower {
                comp: c,
                users: &users,
                signatures: &signatures,
                claimed: &claimed,
            };
            let group = grower.grow(&free);
            let heavy = group.members[0].iter().any(|&x| is_heavy(&c.instr(x).op));
            if group.len() == 0 || (group.len() < MIN_REGION_INSTRUCTIONS && !heavy) {
                continue;
            }
            // Regions nothing reads (dead code, kept when the e-graph is off) stay as they
            // are, free for other groups: a call of them would stand for no value (seed
            // 224820).
            if rewrite::interface(c, &users, &group).1.is_empty() {
                continue;
            }
            let saved = (group.members.len() - 1) * group.len();
            if best.as_ref().is_some_and(|(s, _)| *s >= saved) || !convex(&users, &group) {
                continue;
            }
            groups.push(group);
            let fits = rewrite::acyclic(c, &groups);
            let group = groups.pop().expect("just pushed");
            if fits {
                best = Some((saved, group));
            }
        }
        let Some((_, group)) = best else { break };
        claimed.extend(group.members.concat());
        groups.push(group);
    }
    if groups.is_empty() {
        return Ok(Vec::new());
    }
    let caller = c.name.clone();
    let mut reports = Vec::new();
    let mut outlined = Vec::new();
    for group in groups {
        let c = module.computation(comp);
        let (inputs, outputs) = rewrite::interface(c, &users, &group);
        let bytes = |ids: &mut dyn Iterator<Item = InstrId>| -> u64 {
            ids.map(|id| c.instr(id).shape.byte_size()).sum()
        };
        let bytes_in = bytes(&mut inputs.iter().map(|v| v[0]));
        let bytes_out = bytes(&mut outputs.iter().map(|&t| group.members[0][t]));
        let heavy_ops = group.members[0]
            .iter()
            .filter(|&&x| is_heavy(&c.instr(x).op))
            .count();
        let name = fresh_name(module, "outlined");
        let f = rewrite::add_function(module, comp, &name, &group, inputs, outputs);
        reports.push(OutlinedFunction {
            name,
            caller: caller.clone(),
            calls: group.members.len(),
            instructions: group.len(),
            heavy_ops,
            bytes_in_per_call: bytes_in,
            bytes_out_per_call: bytes_out,
        });
        outlined.push((group, f));
    }
    if outlined.is_empty() {
        return Ok(Vec::new());
    }
    rewrite::replace_regions(module, comp, &outlined)?;
    Ok(reports)
}

/// `base.N` for the first N no computation is named.
fn fresh_name(module: &Module, base: &str) -> String {
    (0..)
        .map(|n| format!("{base}.{n}"))
        .find(|name| module.find_computation(name).is_none())
        .expect("some name is free")
}

/// Outlines the entry computation and every control-flow body (loop bodies, branches,
/// called computations) of `module`. A module placed on several IPUs (`sharding`, or
/// pipeline stages) is left as it is: its placement and stages decide where code lives,
/// and a function is shared only on one IPU.
pub fn outline_module(module: &mut Module) -> Result<Vec<OutlinedFunction>, String> {
    let placed = module.computations().any(|(_, c)| {
        c.instructions().any(|(_, i)| {
            i.sharding.is_some()
                || i.frontend_attributes
                    .contains_key(crate::lower::STAGE_ATTRIBUTE)
        })
    });
    if placed {
        return Ok(Vec::new());
    }
    let mut bodies: Vec<CompId> = vec![module.entry];
    let mut seen: HashSet<CompId> = bodies.iter().copied().collect();
    let mut k = 0;
    while k < bodies.len() {
        let c = module.computation(bodies[k]);
        for &id in c.order() {
            let op = &c.instr(id).op;
            if matches!(
                op,
                Op::While { .. } | Op::Conditional { .. } | Op::Call { .. }
            ) {
                for callee in op.called_computations() {
                    if seen.insert(callee) {
                        bodies.push(callee);
                    }
                }
            }
        }
        k += 1;
    }
    let mut reports = Vec::new();
    for comp in bodies {
        reports.extend(outline_computation(module, comp)?);
    }
    Ok(reports)
}
