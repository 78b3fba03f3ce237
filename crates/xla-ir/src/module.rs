//! A module: computations in an arena, the entry, header attributes and debug tables.

use crate::alias::OutputAlias;
use crate::ids::{CompId, InstrId};
use crate::metadata::DebugTables;
use crate::{Computation, Shape};

/// Parameter shapes and the result shape of a computation (as in `entry_computation_layout`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProgramShape {
    /// One shape per parameter.
    pub parameters: Vec<Shape>,
    /// The result shape.
    pub result: Shape,
}

/// An HLO module.
#[derive(Debug, Clone, PartialEq)]
pub struct Module {
    /// The module name (`HloModule NAME`).
    pub name: String,
    computations: Vec<Computation>,
    /// The computation run when the module runs.
    pub entry: CompId,
    /// `is_scheduled=true`: instruction order is a schedule.
    pub is_scheduled: bool,
    /// `input_output_alias={...}`: outputs that are new values of parameters (empty: none).
    pub input_output_alias: Vec<OutputAlias>,
    /// `entry_computation_layout={...}`: the layouts the caller sees.
    pub entry_computation_layout: Option<ProgramShape>,
    /// `replica_count=N`.
    pub replica_count: Option<i64>,
    /// `num_partitions=N`.
    pub num_partitions: Option<i64>,
    /// Other header attributes, verbatim (name, value text).
    pub header_attributes: Vec<(String, String)>,
    /// `FileNames`, `FunctionNames`, `FileLocations`, `StackFrames`.
    pub debug_tables: DebugTables,
}

impl Module {
    /// A module with no computations yet; add them with [`Module::add_computation`]
    /// and set [`Module::entry`].
    pub fn new(name: impl Into<String>) -> Module {
        Module {
            name: name.into(),
            computations: Vec::new(),
            entry: CompId(0),
            is_scheduled: false,
            input_output_alias: Vec::new(),
            entry_computation_layout: None,
            replica_count: None,
            num_partitions: None,
            header_attributes: Vec::new(),
            debug_tables: DebugTables::default(),
        }
    }

    /// The header's `frontend_attributes={...}` (empty when there are none): the module's
    /// own options, such as `ipuxla.num_ipus` that `ipuxla convert --num-ipus` writes.
    pub fn frontend_attributes(&self) -> crate::metadata::FrontendAttributes {
        self.header_attributes
            .iter()
            .find(|(k, _)| k == "frontend_attributes")
            .and_then(|(_, v)| crate::parser::parse_frontend_attributes(v).ok())
            .unwrap_or_default()
    }

    /// Sets one of the header's frontend attributes.
    pub fn set_frontend_attribute(&mut self, key: &str, value: &str) {
        let mut attrs = self.frontend_attributes();
        attrs.insert(key.to_string(), value.to_string());
        let text = crate::metadata::frontend_attributes_text(&attrs);
        match self
            .header_attributes
            .iter_mut()
            .find(|(k, _)| k == "frontend_attributes")
        {
            Some((_, v)) => *v = text,
            None => self
                .header_attributes
                .push(("frontend_attributes".to_string(), text)),
        }
    }

    /// Adds a computation and returns its id.
    pub fn add_computation(&mut self, computation: Computation) -> CompId {
        self.computations.push(computation);
        CompId(self.computations.len() as u32 - 1)
    }

    /// The computation with this id.
    pub fn computation(&self, id: CompId) -> &Computation {
        &self.computations[id.index()]
    }

    /// The computation with this id, mutably.
    pub fn computation_mut(&mut self, id: CompId) -> &mut Computation {
        &mut self.computations[id.index()]
    }

    /// The entry computation.
    pub fn entry_computation(&self) -> &Computation {
        self.computation(self.entry)
    }

    /// All computations with their ids, in arena order.
    pub fn computations(&self) -> impl Iterator<Item = (CompId, &Computation)> {
        self.computations
            .iter()
            .enumerate()
            .map(|(i, c)| (CompId(i as u32), c))
    }

    /// Number of computations.
    pub fn computation_count(&self) -> usize {
        self.computations.len()
    }

    /// Drops the computations the entry does not reach (directly or through others),
    /// renumbering the rest in their order.
    pub fn retain_reachable(&mut self) {
        let mut reached = vec![false; self.computations.len()];
        let mut stack = vec![self.entry];
        while let Some(c) = stack.pop() {
            if std::mem::replace(&mut reached[c.index()], true) {
                continue;
            }
            for (_, instr) in self.computation(c).instructions() {
                stack.extend(instr.op.called_computations());
            }
        }
        let mut new_id = vec![CompId(0); self.computations.len()];
        let mut kept = Vec::new();
        for (k, comp) in std::mem::take(&mut self.computations)
            .into_iter()
            .enumerate()
        {
            if reached[k] {
                new_id[k] = CompId(kept.len() as u32);
                kept.push(comp);
            }
        }
        for comp in &mut kept {
            let ids: Vec<InstrId> = comp.order().to_vec();
            for i in ids {
                comp.instr_mut(i)
                    .op
                    .map_called_computations(|c| new_id[c.index()]);
            }
        }
        self.computations = kept;
        self.entry = new_id[self.entry.index()];
    }

    /// Copies computation `id` of `src`, and every computation it calls, into this module,
    /// each under a name not taken here yet (`NAME.1`, ...); `done` maps what was copied
    /// already (pass the same map to share callees between copies). Returns the copy's id.
    pub fn import_computation(
        &mut self,
        src: &Module,
        id: CompId,
        done: &mut std::collections::HashMap<CompId, CompId>,
    ) -> CompId {
        if let Some(&c) = done.get(&id) {
            return c;
        }
        let mut comp = src.computation(id).clone();
        let ids: Vec<InstrId> = comp.order().to_vec();
        for i in ids {
            let called: Vec<(CompId, CompId)> = comp
                .instr(i)
                .op
                .called_computations()
                .into_iter()
                .map(|c| (c, self.import_computation(src, c, done)))
                .collect();
            comp.instr_mut(i).op.map_called_computations(|c| {
                called
                    .iter()
                    .find(|(old, _)| *old == c)
                    .map_or(c, |(_, new)| *new)
            });
        }
        let base = comp.name.clone();
        let mut k = 1;
        while self.find_computation(&comp.name).is_some() {
            comp.name = format!("{base}.{k}");
            k += 1;
        }
        let new = self.add_computation(comp);
        done.insert(id, new);
        new
    }

    /// The id of the computation with this name, if any.
    pub fn find_computation(&self, name: &str) -> Option<CompId> {
        self.computations()
            .find(|(_, c)| c.name == name)
            .map(|(id, _)| id)
    }

    /// The entry's parameter and result shapes, as its instructions declare them.
    pub fn entry_program_shape(&self) -> ProgramShape {
        let entry = self.entry_computation();
        ProgramShape {
            parameters: entry.parameter_shapes(),
            result: entry.root_instr().shape.clone(),
        }
    }

    /// Computations in dependency order: every computation after the ones it calls,
    /// otherwise in arena order. This is the order the printer uses.
    pub fn post_order(&self) -> Vec<CompId> {
        let mut visited = vec![false; self.computations.len()];
        let mut out = Vec::with_capacity(self.computations.len());
        for (id, _) in self.computations() {
            self.visit_post_order(id, &mut visited, &mut out);
        }
        out
    }

    /// How deep calls nest from the entry: 1 for an entry that calls nothing, 2 when it
    /// calls (or loops over, fuses, reduces with) computations that call nothing, ...
    /// Computed without recursion, so any depth is safe to ask about.
    pub fn call_depth(&self) -> usize {
        let mut depth = vec![1usize; self.computations.len()];
        for id in self.post_order() {
            let deepest = self
                .computation(id)
                .instructions()
                .flat_map(|(_, i)| i.op.called_computations())
                .map(|c| depth.get(c.index()).copied().unwrap_or(0))
                .max()
                .unwrap_or(0);
            depth[id.index()] = deepest + 1;
        }
        depth[self.entry.index()]
    }

    fn visit_post_order(&self, root: CompId, visited: &mut [bool], out: &mut Vec<CompId>) {
        // Iterative DFS: call graphs from generated code can be deep.
        let mut stack = vec![(root, false)];
        while let Some((id, expanded)) = stack.pop() {
            if expanded {
                out.push(id);
                continue;
            }
            if visited[id.index()] {
                continue;
            }
            visited[id.index()] = true;
            stack.push((id, true));
            let comp = self.computation(id);
            let callees: Vec<CompId> = comp
                .instructions()
                .flat_map(|(_, i)| i.op.called_computations())
                .collect();
            for callee in callees.into_iter().rev() {
                if !visited[callee.index()] {
                    stack.push((callee, false));
                }
            }
        }
    }
}
