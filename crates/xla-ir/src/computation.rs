//! A computation: an arena of instructions, their program order and a root.

use crate::ids::InstrId;
use crate::{Instruction, Op, Shape};

/// A computation (the entry, a fused body, a reducer, a loop body, ...).
///
/// Instructions live in an arena indexed by [`InstrId`]; `order` lists them so that every
/// operand comes before its users. Removing an instruction from the order leaves its slot
/// unused rather than renumbering.
#[derive(Debug, Clone, PartialEq)]
pub struct Computation {
    /// The name, unique within the module.
    pub name: String,
    arena: Vec<Instruction>,
    order: Vec<InstrId>,
    /// The instruction whose value the computation returns.
    pub root: InstrId,
}

impl Computation {
    /// An empty computation; add instructions with [`Computation::push`] and set the root.
    pub fn new(name: impl Into<String>) -> Computation {
        Computation {
            name: name.into(),
            arena: Vec::new(),
            order: Vec::new(),
            root: InstrId(0),
        }
    }

    /// Makes room for `additional` more instructions (a caller that knows how many it
    /// will push saves the arena's regrowth).
    pub fn reserve(&mut self, additional: usize) {
        self.arena.reserve(additional);
        self.order.reserve(additional);
    }

    /// Appends an instruction at the end of the program order.
    pub fn push(&mut self, instr: Instruction) -> InstrId {
        let id = self.allocate(instr);
        self.order.push(id);
        id
    }

    /// Adds an instruction to the arena without placing it in the program order.
    pub(crate) fn allocate(&mut self, instr: Instruction) -> InstrId {
        let id = InstrId(self.arena.len() as u32);
        self.arena.push(instr);
        id
    }

    /// Replaces the program order (callers keep it topological).
    pub(crate) fn set_order(&mut self, order: Vec<InstrId>) {
        self.order = order;
    }

    /// Takes `dead` out of the program order (their arena slots stay unused); refused when
    /// one is the root or a kept instruction reads it.
    pub fn remove(&mut self, dead: &[InstrId]) -> Result<(), String> {
        let gone: std::collections::HashSet<InstrId> = dead.iter().copied().collect();
        if gone.contains(&self.root) {
            return Err(format!("{}: the root cannot be removed", self.name));
        }
        for &id in &self.order {
            if gone.contains(&id) {
                continue;
            }
            let instr = &self.arena[id.index()];
            if let Some(d) = instr
                .operands
                .iter()
                .chain(&instr.control_predecessors)
                .find(|o| gone.contains(o))
            {
                return Err(format!(
                    "{}: '{}' still reads '{}'",
                    self.name,
                    instr.name,
                    self.arena[d.index()].name
                ));
            }
        }
        self.order.retain(|id| !gone.contains(id));
        Ok(())
    }

    /// Replaces the program order with a schedule: `order` must list the instructions of
    /// the current order once each, every one after its operands and control predecessors.
    /// On error (naming the first instruction out of place) nothing changes.
    pub fn set_schedule(&mut self, order: Vec<InstrId>) -> Result<(), String> {
        let mut placed = vec![false; self.arena.len()];
        let mut current = vec![false; self.arena.len()];
        for &id in &self.order {
            current[id.index()] = true;
        }
        for &id in &order {
            let instr = self.arena.get(id.index()).filter(|_| current[id.index()]);
            let Some(instr) = instr else {
                return Err(format!(
                    "{}: %{} is not in the computation",
                    self.name, id.0
                ));
            };
            if placed[id.index()] {
                return Err(format!(
                    "{}: '{}' is scheduled twice",
                    self.name, instr.name
                ));
            }
            if let Some(p) = instr
                .operands
                .iter()
                .chain(&instr.control_predecessors)
                .find(|p| !placed[p.index()])
            {
                return Err(format!(
                    "{}: '{}' is scheduled before its predecessor '{}'",
                    self.name,
                    instr.name,
                    self.instr(*p).name
                ));
            }
            placed[id.index()] = true;
        }
        if order.len() != self.order.len() {
            return Err(format!(
                "{}: the schedule lists {} of {} instructions",
                self.name,
                order.len(),
                self.order.len()
            ));
        }
        self.order = order;
        Ok(())
    }

    /// The instruction with this id.
    pub fn instr(&self, id: InstrId) -> &Instruction {
        &self.arena[id.index()]
    }

    /// The instruction with this id, mutably.
    pub fn instr_mut(&mut self, id: InstrId) -> &mut Instruction {
        &mut self.arena[id.index()]
    }

    /// The ids in program order (operands before users).
    pub fn order(&self) -> &[InstrId] {
        &self.order
    }

    /// Each instruction's index in program order, by id.
    pub fn positions(&self) -> std::collections::HashMap<InstrId, usize> {
        self.order
            .iter()
            .enumerate()
            .map(|(k, &id)| (id, k))
            .collect()
    }

    /// The instructions in program order with their ids.
    pub fn instructions(&self) -> impl Iterator<Item = (InstrId, &Instruction)> {
        self.order.iter().map(|&id| (id, self.instr(id)))
    }

    /// Number of instructions in the program order.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// True when the computation has no instructions.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The root instruction.
    pub fn root_instr(&self) -> &Instruction {
        self.instr(self.root)
    }

    /// The parameters, ordered by parameter number.
    pub fn parameters(&self) -> Vec<InstrId> {
        let mut params: Vec<(u64, InstrId)> = self
            .instructions()
            .filter_map(|(id, i)| match i.op {
                Op::Parameter { number } => Some((number, id)),
                _ => None,
            })
            .collect();
        params.sort();
        params.into_iter().map(|(_, id)| id).collect()
    }

    /// The parameter shapes in parameter order.
    pub fn parameter_shapes(&self) -> Vec<Shape> {
        self.parameters()
            .into_iter()
            .map(|id| self.instr(id).shape.clone())
            .collect()
    }

    /// The id of the instruction with this name, if any.
    pub fn find(&self, name: &str) -> Option<InstrId> {
        self.instructions()
            .find(|(_, i)| i.name == name)
            .map(|(id, _)| id)
    }
}
