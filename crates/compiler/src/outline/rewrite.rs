//! Turning a group of isomorphic regions into one computation and a call per region: the
//! body is the first region's instructions (with their names: the region leaves the
//! caller), its parameters the values the regions read from outside, its result the values
//! read after them; the caller is rebuilt with each region replaced by a `call` and
//! `get-tuple-element`s, in an order that keeps every operand before its users.

use super::regions::{RegionGroup, Users};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use xla_ir::call_config::FUNCTION_CALL_CONFIG;
use xla_ir::ids::{CompId, InstrId};
use xla_ir::{Computation, Instruction, Module, Op, Shape};

/// One group as outlined: the function, its parameters and results.
#[derive(Debug, Clone)]
pub(crate) struct Outlined {
    /// The new computation.
    pub callee: CompId,
    /// Per parameter, the value each region reads (`inputs[i][j]`).
    pub inputs: Vec<Vec<InstrId>>,
    /// Indices (into `members[0]`) of the values the function returns.
    pub outputs: Vec<usize>,
}

/// The parameters and results of a group of regions in `comp`.
pub(crate) fn interface(
    comp: &Computation,
    users: &Users,
    group: &RegionGroup,
) -> (Vec<Vec<InstrId>>, Vec<usize>) {
    let k = group.members.len();
    let regions: Vec<HashSet<InstrId>> = group
        .members
        .iter()
        .map(|m| m.iter().copied().collect())
        .collect();
    let mut inputs: Vec<Vec<InstrId>> = Vec::new();
    let mut known: HashSet<Vec<InstrId>> = HashSet::new();
    for t in in_order(comp, &group.members[0]) {
        for q in 0..comp.instr(group.members[0][t]).operands.len() {
            let values: Vec<InstrId> = (0..k)
                .map(|j| comp.instr(group.members[j][t]).operands[q])
                .collect();
            // A constant every region reads is built in the body, not passed.
            let shared_constant =
                values.iter().all(|&v| v == values[0]) && constant_expression(comp, values[0]);
            if !regions[0].contains(&values[0]) && !shared_constant && known.insert(values.clone())
            {
                inputs.push(values);
            }
        }
    }
    let outputs = (0..group.len())
        .filter(|&t| {
            (0..k).any(|j| {
                let x = group.members[j][t];
                x == comp.root || users.get(x).iter().any(|(u, _)| !regions[j].contains(u))
            })
        })
        .collect();
    (inputs, outputs)
}

/// Whether `id` is computed from constants alone by a few data-movement ops (a constant
/// broadcast, say): cheap to build again inside a function.
fn constant_expression(comp: &Computation, id: InstrId) -> bool {
    let instr = comp.instr(id);
    match instr.op {
        Op::Constant { .. } | Op::Iota { .. } => true,
        Op::Broadcast { .. } | Op::Reshape | Op::Convert | Op::Transpose { .. } => {
            instr.operands.iter().all(|&o| constant_expression(comp, o))
        }
        _ => false,
    }
}

/// Indices of `members` in the computation's order.
fn in_order(comp: &Computation, members: &[InstrId]) -> Vec<usize> {
    let position = comp.positions();
    let mut idx: Vec<usize> = (0..members.len()).collect();
    idx.sort_by_key(|&t| position[&members[t]]);
    idx
}

/// Adds the function of `group` (named `name`) to `module`.
pub(crate) fn add_function(
    module: &mut Module,
    comp: CompId,
    name: &str,
    group: &RegionGroup,
    inputs: Vec<Vec<InstrId>>,
    outputs: Vec<usize>,
) -> Outlined {
    let c = module.computation(comp);
    let k = group.members.len();
    let mut body = Computation::new(name);
    // A parameter per tuple of values the regions read (the first region may read one
    // value where another reads two: keyed by the first region's value alone, they would
    // merge).
    let mut param: HashMap<&[InstrId], InstrId> = HashMap::new();
    for (i, values) in inputs.iter().enumerate() {
        let p = body.push(Instruction::new(
            format!("{name}.arg.{i}"),
            Op::Parameter { number: i as u64 },
            &[],
            c.instr(values[0]).shape.clone(),
        ));
        param.insert(values.as_slice(), p);
    }
    let inside: HashSet<InstrId> = group.members[0].iter().copied().collect();
    let mut value: HashMap<InstrId, InstrId> = HashMap::new();
    for t in in_order(c, &group.members[0]) {
        let old = c.instr(group.members[0][t]);
        let mut instr = old.clone();
        instr.location = None;
        for (q, o) in instr.operands.iter_mut().enumerate() {
            if inside.contains(o) {
                *o = value[o];
                continue;
            }
            let values: Vec<InstrId> = (0..k)
                .map(|j| c.instr(group.members[j][t]).operands[q])
                .collect();
            *o = match param.get(values.as_slice()) {
                Some(&p) => p,
                // A constant every region reads, built in the body.
                None => clone_constant(c, *o, name, &mut body, &mut value),
            };
        }
        let id = body.push(instr);
        value.insert(group.members[0][t], id);
    }
    body.root = if outputs.len() == 1 {
        value[&group.members[0][outputs[0]]]
    } else {
        let items: Vec<InstrId> = outputs
            .iter()
            .map(|&t| value[&group.members[0][t]])
            .collect();
        let shape = Shape::Tuple(items.iter().map(|&i| body.instr(i).shape.clone()).collect());
        body.push(Instruction::new(
            format!("{name}.result"),
            Op::Tuple,
            &items,
            shape,
        ))
    };
    let callee = module.add_computation(body);
    Outlined {
        callee,
        inputs,
        outputs,
    }
}

/// A step of the rebuilt caller: an instruction outside every region, or region `j` of
/// group `g`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Unit {
    Instr(InstrId),
    Region(usize, usize),
}

/// The caller's steps in an order that keeps every operand before its users, each region
/// where its last instruction was, or None when the regions depend on each other in a
/// cycle.
fn unit_order(c: &Computation, groups: &[&RegionGroup]) -> Option<Vec<Unit>> {
    let mut unit_of: HashMap<InstrId, Unit> = HashMap::new();
    for (g, group) in groups.iter().enumerate() {
        for (j, m) in group.members.iter().enumerate() {
            for &x in m {
                unit_of.insert(x, Unit::Region(g, j));
            }
        }
    }
    let unit = |x: InstrId| unit_of.get(&x).copied().unwrap_or(Unit::Instr(x));
    let mut units: Vec<Unit> = Vec::new();
    let mut rank: HashMap<Unit, usize> = HashMap::new();
    for (k, &id) in c.order().iter().enumerate() {
        let u = unit(id);
        if rank.insert(u, k).is_none() {
            units.push(u);
        }
    }
    let mut succs: HashMap<Unit, Vec<Unit>> = HashMap::new();
    let mut preds: HashMap<Unit, usize> = units.iter().map(|&u| (u, 0)).collect();
    let mut edges: HashSet<(Unit, Unit)> = HashSet::new();
    for &id in c.order() {
        let to = unit(id);
        let instr = c.instr(id);
        for &o in instr.operands.iter().chain(&instr.control_predecessors) {
            let from = unit(o);
            if from != to && edges.insert((from, to)) {
                succs.entry(from).or_default().push(to);
                *preds.get_mut(&to)? += 1;
            }
        }
    }
    let mut ready: BinaryHeap<Reverse<(usize, Unit)>> = units
        .iter()
        .filter(|u| preds[u] == 0)
        .map(|&u| Reverse((rank[&u], u)))
        .collect();
    let mut order: Vec<Unit> = Vec::with_capacity(units.len());
    while let Some(Reverse((_, u))) = ready.pop() {
        order.push(u);
        for &s in succs.get(&u).map_or(&[][..], Vec::as_slice) {
            let p = preds.get_mut(&s)?;
            *p -= 1;
            if *p == 0 {
                ready.push(Reverse((rank[&s], s)));
            }
        }
    }
    (order.len() == units.len()).then_some(order)
}

/// Whether replacing these groups' regions by calls leaves the caller without a cycle.
pub(crate) fn acyclic(c: &Computation, groups: &[RegionGroup]) -> bool {
    let refs: Vec<&RegionGroup> = groups.iter().collect();
    unit_order(c, &refs).is_some()
}

/// Builds the constant expression `id` of `c` into `body` (named `PREFIX.NAME`), unless
/// it is there already.
fn clone_constant(
    c: &Computation,
    id: InstrId,
    prefix: &str,
    body: &mut Computation,
    value: &mut HashMap<InstrId, InstrId>,
) -> InstrId {
    if let Some(&done) = value.get(&id) {
        return done;
    }
    let old = c.instr(id);
    let mut instr = old.clone();
    instr.name = format!("{prefix}.{}", old.name);
    instr.location = None;
    for o in instr.operands.iter_mut() {
        *o = clone_constant(c, *o, prefix, body, value);
    }
    let new = body.push(instr);
    value.insert(id, new);
    new
}

/// Rebuilds `comp` with every region of `groups` replaced by a call of its function.
pub(crate) fn replace_regions(
    module: &mut Module,
    comp: CompId,
    groups: &[(RegionGroup, Outlined)],
) -> Result<(), String> {
    let c = module.computation(comp);
    let refs: Vec<&RegionGroup> = groups.iter().map(|(g, _)| g).collect();
    let order = unit_order(c, &refs).ok_or_else(|| {
        format!(
            "{}: the outlined regions depend on each other in a cycle",
            c.name
        )
    })?;
    let mut new = Computation::new(c.name.clone());
    let mut value: HashMap<InstrId, InstrId> = HashMap::new();
    let mut call_of: HashMap<InstrId, InstrId> = HashMap::new();
    for u in order {
        match u {
            Unit::Instr(id) => {
                let mut instr = c.instr(id).clone();
                for o in instr.operands.iter_mut() {
                    *o = value[o];
                }
                for o in instr.control_predecessors.iter_mut() {
                    *o = call_of.get(o).copied().unwrap_or_else(|| value[o]);
                }
                value.insert(id, new.push(instr));
            }
            Unit::Region(g, j) => {
                let (group, outlined) = &groups[g];
                let callee = module.computation(outlined.callee);
                let fname = callee.name.clone();
                let result_shape = callee.root_instr().shape.clone();
                let args: Vec<InstrId> = outlined.inputs.iter().map(|v| value[&v[j]]).collect();
                let mut call = Instruction::new(
                    format!("{fname}.call.{j}"),
                    Op::Call {
                        to_apply: outlined.callee,
                    },
                    &args,
                    result_shape.clone(),
                );
                call.backend_config = Some(FUNCTION_CALL_CONFIG.to_string());
                let call = new.push(call);
                match &result_shape {
                    Shape::Tuple(items) if outlined.outputs.len() > 1 => {
                        for (i, &t) in outlined.outputs.iter().enumerate() {
                            let gte = new.push(Instruction::new(
                                format!("{fname}.call.{j}.{i}"),
                                Op::GetTupleElement { index: i as i64 },
                                &[call],
                                items[i].clone(),
                            ));
                            value.insert(group.members[j][t], gte);
                        }
                    }
                    _ => {
                        value.insert(group.members[j][outlined.outputs[0]], call);
                    }
                }
                for &x in &group.members[j] {
                    call_of.insert(x, call);
                }
            }
        }
    }
    new.root = value[&c.root];
    remove_unread(&mut new)?;
    *module.computation_mut(comp) = new;
    Ok(())
}

/// Removes what nothing reads any more (constants the functions now build themselves),
/// keeping parameters and ops with effects.
fn remove_unread(c: &mut Computation) -> Result<(), String> {
    let mut read: HashSet<InstrId> = HashSet::from([c.root]);
    for &id in c.order().iter().rev() {
        let instr = c.instr(id);
        if read.contains(&id)
            || matches!(instr.op, Op::Parameter { .. })
            || super::signature::has_effects(&instr.op)
        {
            read.insert(id);
            read.extend(instr.operands.iter().chain(&instr.control_predecessors));
        }
    }
    let unread: Vec<InstrId> = c
        .order()
        .iter()
        .copied()
        .filter(|i| !read.contains(i))
        .collect();
    c.remove(&unread)
}
