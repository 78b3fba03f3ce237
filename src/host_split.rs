//! Excluded nodes (the converter's `--excluded-nodes`, the seed's "nodes that will not be
//! placed on the IPU"): entry instructions marked `frontend_attributes={ipuxla.host="true"}`
//! run on the host, on the reference evaluator — before the device program when they are
//! computed from parameters and other host instructions alone, after it when only host
//! instructions and the result read them. A host instruction between device instructions
//! is an error naming it. A module splits into up to three modules, each fed by the
//! parameters and the values of the parts before it.

use std::collections::{HashMap, HashSet};
use xla_ir::ids::InstrId;
use xla_ir::literal::ArrayLiteral;
use xla_ir::{Computation, Instruction, Literal, Module, Op, Shape};

/// The frontend attribute that places an instruction on the host.
pub const HOST_ATTRIBUTE: &str = "ipuxla.host";

/// Where a part's parameter comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The module's parameter `k`.
    Parameter(usize),
    /// Result `k` of the host part before the device.
    Before(usize),
    /// Result `k` of the device part.
    Device(usize),
}

/// One part: a module and where each of its parameters comes from.
#[derive(Debug, Clone)]
pub struct Part {
    /// The part's module.
    pub module: Module,
    /// Per parameter, its source.
    pub inputs: Vec<Source>,
}

/// A module split at its host instructions.
#[derive(Debug, Clone)]
pub struct HostSplit {
    /// Host instructions before the device program.
    pub before: Option<Part>,
    /// The device program (None when every instruction runs on the host).
    pub device: Option<Part>,
    /// Host instructions after it.
    pub after: Option<Part>,
}

/// Whether an instruction is marked to run on the host.
pub fn on_host(instr: &Instruction) -> bool {
    instr
        .frontend_attributes
        .get(HOST_ATTRIBUTE)
        .map(String::as_str)
        == Some("true")
}

/// Splits `module` at its host instructions; None when it has none.
pub fn split(module: &Module) -> Result<Option<HostSplit>, String> {
    let entry = module.entry_computation();
    let order = entry.order().to_vec();
    if !order.iter().any(|&i| on_host(entry.instr(i))) {
        return Ok(None);
    }
    let mut users: HashMap<InstrId, Vec<InstrId>> = HashMap::new();
    for &i in &order {
        for &o in &entry.instr(i).operands {
            users.entry(o).or_default().push(i);
        }
    }
    // Before: host instructions computed from parameters and host-before values alone.
    let mut before: HashSet<InstrId> = HashSet::new();
    for &i in &order {
        let instr = entry.instr(i);
        if on_host(instr)
            && instr
                .operands
                .iter()
                .all(|o| matches!(entry.instr(*o).op, Op::Parameter { .. }) || before.contains(o))
        {
            before.insert(i);
        }
    }
    // After: host instructions (and a root tuple gathering them) read only by after ones.
    let mut after: HashSet<InstrId> = HashSet::new();
    for &i in order.iter().rev() {
        if before.contains(&i) {
            continue;
        }
        let instr = entry.instr(i);
        let read_after = users
            .get(&i)
            .is_none_or(|us| us.iter().all(|u| after.contains(u)));
        let root_tuple = i == entry.root
            && matches!(instr.op, Op::Tuple)
            && instr.operands.iter().any(|o| on_host(entry.instr(*o)));
        if (on_host(instr) || root_tuple) && read_after {
            after.insert(i);
        }
    }
    if let Some(&stuck) = order
        .iter()
        .find(|&&i| on_host(entry.instr(i)) && !before.contains(&i) && !after.contains(&i))
    {
        return Err(format!(
            "instruction '{}' is marked to run on the host (excluded from the IPU) but sits between device instructions: host instructions must be computed from parameters and other host instructions alone (before the device program) or read only by host instructions and the result (after it)",
            entry.instr(stuck).name
        ));
    }
    let part_of = |i: InstrId| {
        if before.contains(&i) {
            0
        } else if after.contains(&i) {
            2
        } else {
            1
        }
    };
    let params: Vec<InstrId> = entry.parameters();
    let param_index: HashMap<InstrId, usize> = params
        .iter()
        .map(|&p| match entry.instr(p).op {
            Op::Parameter { number } => (p, number as usize),
            _ => unreachable!("parameters() lists parameters"),
        })
        .collect();
    // The values each part hands on: read by a later part (or the result).
    let exported = |part: usize| -> Vec<InstrId> {
        order
            .iter()
            .copied()
            .filter(|&i| part_of(i) == part && !param_index.contains_key(&i))
            .filter(|&i| {
                users
                    .get(&i)
                    .is_some_and(|us| us.iter().any(|&u| part_of(u) > part))
            })
            .collect()
    };
    let before_out = exported(0);
    let device_out = exported(1);
    let source = |v: InstrId| -> Source {
        if let Some(&k) = param_index.get(&v) {
            Source::Parameter(k)
        } else if let Some(k) = before_out.iter().position(|&x| x == v) {
            Source::Before(k)
        } else {
            Source::Device(device_out.iter().position(|&x| x == v).expect("exported"))
        }
    };
    let build = |part: usize, root: Option<InstrId>, out: &[InstrId]| -> Result<Part, String> {
        let mut comp = Computation::new(entry.name.clone());
        let mut value: HashMap<InstrId, InstrId> = HashMap::new();
        let mut inputs = Vec::new();
        for &i in &order {
            if part_of(i) != part || param_index.contains_key(&i) {
                continue;
            }
            let mut instr = entry.instr(i).clone();
            for o in instr.operands.iter_mut() {
                if !value.contains_key(o) {
                    let outside = entry.instr(*o);
                    let p = comp.push(Instruction::new(
                        outside.name.clone(),
                        Op::Parameter {
                            number: inputs.len() as u64,
                        },
                        &[],
                        outside.shape.clone(),
                    ));
                    inputs.push(source(*o));
                    value.insert(*o, p);
                }
                *o = value[o];
            }
            instr.control_predecessors.clear();
            instr.frontend_attributes.remove(HOST_ATTRIBUTE);
            value.insert(i, comp.push(instr));
        }
        comp.root = match root {
            Some(r) => value[&r],
            None => {
                let items: Vec<InstrId> = out.iter().map(|o| value[o]).collect();
                let shape =
                    Shape::Tuple(items.iter().map(|&i| comp.instr(i).shape.clone()).collect());
                comp.push(Instruction::new(
                    format!("{}.handed_on", entry.name),
                    Op::Tuple,
                    &items,
                    shape,
                ))
            }
        };
        let mut m = module.clone();
        *m.computation_mut(m.entry) = comp;
        m.retain_reachable();
        Ok(Part { module: m, inputs })
    };
    let root_part = part_of(entry.root);
    if root_part == 0 {
        // Everything runs on the host (the seed's `no_ipu_placement`).
        return Ok(Some(HostSplit {
            before: Some(build(0, Some(entry.root), &[])?),
            device: None,
            after: None,
        }));
    }
    let before_part = if before.is_empty() {
        None
    } else {
        Some(build(0, None, &before_out)?)
    };
    let device = Some(build(
        1,
        (root_part == 1).then_some(entry.root),
        &device_out,
    )?);
    let after_part = if after.is_empty() {
        None
    } else {
        Some(build(2, Some(entry.root), &[])?)
    };
    Ok(Some(HostSplit {
        before: before_part,
        device,
        after: after_part,
    }))
}

/// The tuple leaves of a part's result.
fn results(l: Literal) -> Vec<Literal> {
    match l {
        Literal::Tuple(items) => items,
        other => vec![other],
    }
}

/// Runs a split module: the host parts on the evaluator, the device part through
/// `device` (its module and inputs in, its results out; not called when everything runs
/// on the host). Returns the results' leaves.
pub fn run(
    split: &HostSplit,
    inputs: &[Literal],
    device: impl FnOnce(&Module, &[Literal]) -> anyhow::Result<Vec<ArrayLiteral>>,
) -> anyhow::Result<Vec<ArrayLiteral>> {
    let gather = |part: &Part, before: &[Literal], on_device: &[Literal]| -> Vec<Literal> {
        part.inputs
            .iter()
            .map(|s| match *s {
                Source::Parameter(k) => inputs[k].clone(),
                Source::Before(k) => before[k].clone(),
                Source::Device(k) => on_device[k].clone(),
            })
            .collect()
    };
    let Some(device_part) = &split.device else {
        let all = split
            .before
            .as_ref()
            .expect("a split without a device part is all host");
        let out = xla_ir::eval::evaluate(&all.module, &gather(all, &[], &[]))
            .map_err(|e| anyhow::anyhow!("on the host: {e}"))?;
        return Ok(crate::device_loop::leaves(out));
    };
    let before: Vec<Literal> = match &split.before {
        Some(p) => results(
            xla_ir::eval::evaluate(&p.module, &gather(p, &[], &[]))
                .map_err(|e| anyhow::anyhow!("the host instructions before the device: {e}"))?,
        ),
        None => Vec::new(),
    };
    let on_device = device(&device_part.module, &gather(device_part, &before, &[]))?;
    let Some(after) = &split.after else {
        return Ok(on_device);
    };
    let handed: Vec<Literal> = on_device.into_iter().map(Literal::Array).collect();
    let out = xla_ir::eval::evaluate(&after.module, &gather(after, &before, &handed))
        .map_err(|e| anyhow::anyhow!("the host instructions after the device: {e}"))?;
    Ok(crate::device_loop::leaves(out))
}
