//! The HLO text parser: everything XLA prints (`module.hlo` from JAX, XLA's optimised dumps).
//!
//! Parsing is one pass over the text with a context-driven [`cursor::Cursor`]. Names are
//! resolved when a computation (or the module) is complete, so operands and computations
//! may be referenced before they are defined; instructions are then put in an order where
//! every operand precedes its users, and cycles are errors. Shapes are not checked here:
//! that is the verifier's job ([`crate::verify`]).

mod cursor;
mod literal;
mod ops;
mod values;

use crate::alias::{AliasKind, OutputAlias};
use crate::ids::{CompId, InstrId};
use crate::instruction::SourceLocation;
use crate::metadata::{FrontendAttributes, Metadata};
use crate::module::ProgramShape;
use crate::{Computation, Instruction, Module, Op, Shape, Sharding};
use cursor::{Cursor, LineIndex};
use ops::{Attrs, ComputationRefs, RawAttr};
use smallvec::SmallVec;
use std::collections::{BinaryHeap, HashMap};

/// A syntax or name-resolution error, with the 1-based line and column it was found at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{line}:{column}: {message}")]
pub struct ParseError {
    /// 1-based line.
    pub line: u32,
    /// 1-based column, in characters.
    pub column: u32,
    /// What was wrong and what was expected.
    pub message: String,
}

type Result<T> = std::result::Result<T, ParseError>;

/// Parses HLO text into a module.
pub fn parse_module(text: &str) -> Result<Module> {
    let lines = LineIndex::new(text);
    let mut parser = Parser {
        c: Cursor::new(text, &lines),
        comps: CompTable::default(),
    };
    parser.module()
}

/// Parses HLO text given as bytes, reporting invalid UTF-8 with its line and column.
pub fn parse_module_bytes(bytes: &[u8]) -> Result<Module> {
    match std::str::from_utf8(bytes) {
        Ok(text) => parse_module(text),
        Err(e) => {
            let valid = std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or_default();
            let lines = LineIndex::new(valid);
            let (line, column) = lines.line_col(valid, valid.len());
            Err(ParseError {
                line,
                column,
                message: format!(
                    "invalid UTF-8 (byte 0x{:02x}); HLO text must be UTF-8",
                    bytes[e.valid_up_to()]
                ),
            })
        }
    }
}

/// Computations by name: ids are handed out on first mention and filled in on definition.
#[derive(Default)]
struct CompTable {
    ids: HashMap<String, CompId>,
    slots: Vec<CompSlot>,
}

struct CompSlot {
    name: String,
    first_reference: Option<usize>,
    definition: Option<(usize, Computation)>,
    is_entry: bool,
}

impl CompTable {
    fn id(&mut self, name: &str) -> CompId {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = CompId(self.slots.len() as u32);
        self.slots.push(CompSlot {
            name: name.to_string(),
            first_reference: None,
            definition: None,
            is_entry: false,
        });
        self.ids.insert(name.to_string(), id);
        id
    }
}

impl ComputationRefs for CompTable {
    fn reference(&mut self, name: &str, pos: usize) -> CompId {
        let id = self.id(name);
        self.slots[id.index()].first_reference.get_or_insert(pos);
        id
    }
}

/// An instruction as parsed, before its operand names are resolved.
struct PendingInstr<'a> {
    name: &'a str,
    pos: usize,
    is_root: bool,
    shape: Shape,
    op: Op,
    operands: SmallVec<[(&'a str, usize); 4]>,
    control_predecessors: Vec<(&'a str, usize)>,
    metadata: Metadata,
    sharding: Option<Sharding>,
    frontend_attributes: FrontendAttributes,
    backend_config: Option<String>,
}

struct Parser<'a> {
    c: Cursor<'a>,
    comps: CompTable,
}

const DEBUG_TABLES: [&str; 4] = ["FileNames", "FunctionNames", "FileLocations", "StackFrames"];

impl<'a> Parser<'a> {
    fn module(&mut self) -> Result<Module> {
        if !self.c.eat_keyword("HloModule") {
            return Err(self.c.expected("'HloModule' at the start of the module"));
        }
        let name = self.c.name("the module name")?;
        let mut module = Module::new(name);
        let mut positions = HeaderPositions::default();
        while self.c.eat(b',') {
            let attr = self.raw_attr()?;
            let c = &self.c;
            match attr.name {
                "is_scheduled" => module.is_scheduled = ops::value(c, attr, values::boolean)?,
                "input_output_alias" => {
                    positions.aliases = attr.start;
                    module.input_output_alias = ops::value(c, attr, output_aliases)?;
                }
                "entry_computation_layout" => {
                    positions.entry_layout = attr.start;
                    module.entry_computation_layout = Some(ops::value(c, attr, program_shape)?);
                }
                "replica_count" => module.replica_count = Some(ops::value(c, attr, |c| c.int())?),
                "num_partitions" => module.num_partitions = Some(ops::value(c, attr, |c| c.int())?),
                _ => module.header_attributes.push((
                    attr.name.to_string(),
                    c.slice(attr.start, attr.end).to_string(),
                )),
            }
        }
        self.debug_tables(&mut module)?;
        while !self.c.at_end() {
            self.computation()?;
        }
        self.finish_module(module, positions)
    }

    fn raw_attr(&mut self) -> Result<RawAttr<'a>> {
        self.c.skip_trivia();
        let name_pos = self.c.pos();
        let name = self
            .c
            .word()
            .ok_or_else(|| self.c.expected("an attribute name"))?;
        self.c.expect(b'=')?;
        let (start, end) = self.c.raw_value()?;
        Ok(RawAttr {
            name,
            name_pos,
            start,
            end,
        })
    }

    fn debug_tables(&mut self, module: &mut Module) -> Result<()> {
        while let Some(table) = self.c.peek_word().filter(|w| DEBUG_TABLES.contains(w)) {
            self.c.word();
            while matches!(self.c.peek(), Some(b'0'..=b'9')) {
                let id = self.c.int()?;
                let t = &mut module.debug_tables;
                match table {
                    "FileNames" => t.file_names.push((id, self.c.string()?)),
                    "FunctionNames" => t.function_names.push((id, self.c.string()?)),
                    "FileLocations" => t
                        .file_locations
                        .push((id, values::file_location(&mut self.c)?)),
                    _ => t.stack_frames.push((id, values::stack_frame(&mut self.c)?)),
                }
            }
        }
        Ok(())
    }

    fn computation(&mut self) -> Result<()> {
        let is_entry = self.c.eat_keyword("ENTRY");
        self.c.skip_trivia();
        let pos = self.c.pos();
        let name = self.c.name("a computation name")?;
        let mut signature = None;
        if self.c.peek() == Some(b'(') {
            let sig_pos = self.c.pos();
            signature = Some((sig_pos, self.signature()?));
        }
        // Optional computation attributes, such as execution_thread="main".
        while self.c.eat(b',') {
            let attr = self.raw_attr()?;
            if attr.name != "execution_thread" {
                return Err(self.c.error_at(
                    attr.name_pos,
                    format!("unknown computation attribute '{}'", attr.name),
                ));
            }
        }
        self.c.expect(b'{')?;
        let mut pending = Vec::new();
        while !self.c.eat(b'}') {
            if self.c.at_end() {
                return Err(self.c.error_at(
                    pos,
                    format!("computation {name} is missing its closing '}}'"),
                ));
            }
            pending.push(self.instruction()?);
        }
        if pending.is_empty() {
            return Err(self
                .c
                .error_at(pos, format!("computation {name} has no instructions")));
        }
        let computation = self.resolve(name, pending)?;
        if let Some((sig_pos, sig)) = signature {
            self.check_signature(&computation, sig_pos, &sig)?;
        }
        let id = self.comps.id(name);
        let slot = &mut self.comps.slots[id.index()];
        if let Some((first, _)) = &slot.definition {
            let (line, _) = self.c.line_col(*first);
            return Err(self.c.error_at(
                pos,
                format!("computation {name} is defined twice (first at line {line})"),
            ));
        }
        slot.definition = Some((pos, computation));
        slot.is_entry = is_entry;
        Ok(())
    }

    /// `(a: f32[2], b: s32[]) -> f32[2]`.
    fn signature(&mut self) -> Result<ProgramShape> {
        self.c.expect(b'(')?;
        let mut parameters = Vec::new();
        if !self.c.eat(b')') {
            loop {
                self.c.name("a parameter name")?;
                self.c.expect(b':')?;
                parameters.push(values::shape(&mut self.c)?);
                if self.c.eat(b')') {
                    break;
                }
                self.c.expect(b',')?;
            }
        }
        if !self.c.eat_str("->") {
            return Err(self.c.expected("'->' and the result shape"));
        }
        let result = values::shape(&mut self.c)?;
        Ok(ProgramShape { parameters, result })
    }

    fn check_signature(&self, comp: &Computation, pos: usize, sig: &ProgramShape) -> Result<()> {
        let params = comp.parameter_shapes();
        if params.len() != sig.parameters.len() {
            return Err(self.c.error_at(
                pos,
                format!(
                    "signature of {} lists {} parameters but the body has {}",
                    comp.name,
                    sig.parameters.len(),
                    params.len()
                ),
            ));
        }
        for (i, (declared, actual)) in sig.parameters.iter().zip(&params).enumerate() {
            if !declared.same_ignoring_layout(actual) {
                return Err(self.c.error_at(
                    pos,
                    format!("signature of {} says parameter {i} is {declared} but parameter({i}) is {actual}", comp.name),
                ));
            }
        }
        let root = &comp.root_instr().shape;
        if !sig.result.same_ignoring_layout(root) {
            return Err(self.c.error_at(
                pos,
                format!(
                    "signature of {} returns {} but the root is {root}",
                    comp.name, sig.result
                ),
            ));
        }
        Ok(())
    }

    fn instruction(&mut self) -> Result<PendingInstr<'a>> {
        let is_root = self.c.eat_keyword("ROOT");
        self.c.skip_trivia();
        let pos = self.c.pos();
        let name = self.c.name("an instruction name")?;
        self.c.expect(b'=')?;
        let shape = values::shape(&mut self.c)?;
        self.c.skip_trivia();
        let opcode_pos = self.c.pos();
        let opcode = self.c.word().ok_or_else(|| self.c.expected("an opcode"))?;
        self.c.expect(b'(')?;
        let mut operands = SmallVec::new();
        let mut fixed_op = None;
        match opcode {
            "parameter" => {
                let number_pos = self.c.pos();
                let number = self.c.int()?;
                let number = u64::try_from(number).map_err(|_| {
                    self.c
                        .error_at(number_pos, "parameter number must not be negative")
                })?;
                fixed_op = Some(Op::Parameter { number });
                self.c.expect(b')')?;
            }
            "constant" => {
                let literal = literal::literal(&mut self.c, &shape)?;
                fixed_op = Some(Op::Constant { literal });
                self.c.expect(b')')?;
            }
            _ => {
                if !self.c.eat(b')') {
                    loop {
                        // Older dumps print each operand's shape before its name.
                        if matches!(self.c.peek(), Some(b'(')) || self.operand_shape_follows() {
                            values::shape(&mut self.c)?;
                        }
                        self.c.skip_trivia();
                        let operand_pos = self.c.pos();
                        operands.push((self.c.name("an operand name")?, operand_pos));
                        if self.c.eat(b')') {
                            break;
                        }
                        if !self.c.eat(b',') {
                            return Err(self.c.expected("',' or ')' after an operand"));
                        }
                    }
                }
            }
        }
        let mut attrs = Attrs::new();
        while self.c.eat(b',') {
            let attr = self.raw_attr()?;
            attrs.push(&self.c, attr)?;
        }
        let c = &self.c;
        let metadata = match attrs.take("metadata") {
            Some(a) => ops::value(c, a, values::metadata)?,
            None => Metadata::default(),
        };
        let sharding = attrs
            .take("sharding")
            .map(|a| ops::value(c, a, values::sharding))
            .transpose()?;
        let frontend_attributes = match attrs.take("frontend_attributes") {
            Some(a) => ops::value(c, a, values::frontend_attributes)?,
            None => FrontendAttributes::new(),
        };
        let backend_config = attrs
            .take("backend_config")
            .map(|a| c.slice(a.start, a.end).to_string());
        let control_predecessors = match attrs.take("control-predecessors") {
            Some(a) => ops::value(c, a, name_list)?,
            None => Vec::new(),
        };
        let op = match fixed_op {
            Some(op) => {
                attrs.finish(c, opcode, &[])?;
                op
            }
            None => ops::build_op(c, opcode, opcode_pos, attrs, &mut self.comps)?,
        };
        Ok(PendingInstr {
            name,
            pos,
            is_root,
            shape,
            op,
            operands,
            control_predecessors,
            metadata,
            sharding,
            frontend_attributes,
            backend_config,
        })
    }

    /// True when the next operand starts with a shape (`f32[2] %x`) rather than a name.
    fn operand_shape_follows(&mut self) -> bool {
        let mut probe = self.c.clone();
        match probe.word() {
            Some(w) => {
                (w == "token" || crate::ElementType::from_name(w).is_some())
                    && probe.peek_raw() == Some(b'[')
            }
            None => false,
        }
    }

    /// Resolves operand names, picks the root and orders instructions operands-first.
    fn resolve(&self, comp_name: &str, pending: Vec<PendingInstr<'a>>) -> Result<Computation> {
        let c = &self.c;
        let mut ids: HashMap<&str, usize> = HashMap::with_capacity(pending.len());
        for (i, p) in pending.iter().enumerate() {
            if let Some(&first) = ids.get(p.name) {
                let (line, _) = c.line_col(pending[first].pos);
                return Err(c.error_at(
                    p.pos,
                    format!(
                        "duplicate instruction name '{}' (first defined at line {line})",
                        p.name
                    ),
                ));
            }
            ids.insert(p.name, i);
        }
        let lookup = |name: &str, pos: usize| -> Result<usize> {
            ids.get(name).copied().ok_or_else(|| {
                c.error_at(
                    pos,
                    format!("undefined instruction '{name}' in computation {comp_name}"),
                )
            })
        };
        let mut roots = pending.iter().enumerate().filter(|(_, p)| p.is_root);
        let root = match (roots.next(), roots.next()) {
            (Some((i, _)), None) => i,
            (None, _) => pending.len() - 1,
            (Some(_), Some((_, second))) => {
                return Err(c.error_at(
                    second.pos,
                    format!("computation {comp_name} has more than one ROOT"),
                ));
            }
        };
        let mut comp = Computation::new(comp_name);
        let mut edges: Vec<SmallVec<[usize; 4]>> = Vec::with_capacity(pending.len());
        for p in &pending {
            let operands: SmallVec<[usize; 4]> = p
                .operands
                .iter()
                .map(|(n, pos)| lookup(n, *pos))
                .collect::<Result<_>>()?;
            let preds: Vec<usize> = p
                .control_predecessors
                .iter()
                .map(|(n, pos)| lookup(n, *pos))
                .collect::<Result<_>>()?;
            let mut e = operands.clone();
            e.extend(preds.iter().copied());
            edges.push(e);
            let (line, column) = c.line_col(p.pos);
            let mut instr = Instruction::new(
                p.name,
                p.op.clone(),
                &operands
                    .iter()
                    .map(|&i| InstrId(i as u32))
                    .collect::<Vec<_>>(),
                p.shape.clone(),
            );
            instr.control_predecessors = preds.iter().map(|&i| InstrId(i as u32)).collect();
            instr.metadata = p.metadata.clone();
            instr.sharding = p.sharding.clone();
            instr.frontend_attributes = p.frontend_attributes.clone();
            instr.backend_config = p.backend_config.clone();
            instr.location = Some(SourceLocation { line, column });
            comp.allocate(instr);
        }
        comp.root = InstrId(root as u32);
        let order = operands_first_order(&edges).map_err(|stuck| {
            c.error_at(
                pending[stuck].pos,
                format!(
                    "instruction '{}' depends on itself through a cycle",
                    pending[stuck].name
                ),
            )
        })?;
        comp.set_order(order.into_iter().map(|i| InstrId(i as u32)).collect());
        Ok(comp)
    }

    fn finish_module(&mut self, mut module: Module, positions: HeaderPositions) -> Result<Module> {
        if self.comps.slots.is_empty() {
            return Err(self
                .c
                .expected("at least one computation after the module header"));
        }
        let c = &self.c;
        let slots = std::mem::take(&mut self.comps.slots);
        for slot in &slots {
            if slot.definition.is_none() {
                let pos = slot.first_reference.unwrap_or(0);
                return Err(c.error_at(pos, format!("undefined computation '{}'", slot.name)));
            }
        }
        // Renumber computations in the order they were defined.
        let mut by_definition: Vec<usize> = (0..slots.len()).collect();
        by_definition.sort_by_key(|&i| slots[i].definition.as_ref().map(|(pos, _)| *pos));
        let mut new_id = vec![CompId(0); slots.len()];
        for (new, &old) in by_definition.iter().enumerate() {
            new_id[old] = CompId(new as u32);
        }
        let mut entries = Vec::new();
        let mut slots: Vec<Option<CompSlot>> = slots.into_iter().map(Some).collect();
        for &old in &by_definition {
            let slot = slots[old].take().expect("each slot is moved once");
            let (pos, mut comp) = slot.definition.expect("checked above");
            for id in comp.order().to_vec() {
                comp.instr_mut(id)
                    .op
                    .map_called_computations(|c| new_id[c.index()]);
            }
            let id = module.add_computation(comp);
            if slot.is_entry {
                entries.push((id, pos));
            }
        }
        module.entry = match entries[..] {
            [] => CompId(module.computation_count() as u32 - 1),
            [(id, _)] => id,
            [_, (_, pos), ..] => return Err(c.error_at(pos, "more than one ENTRY computation")),
        };
        if let Some(layout) = &module.entry_computation_layout {
            let actual = module.entry_program_shape();
            let same = layout.parameters.len() == actual.parameters.len()
                && layout
                    .parameters
                    .iter()
                    .zip(&actual.parameters)
                    .all(|(a, b)| a.same_ignoring_layout(b))
                && layout.result.same_ignoring_layout(&actual.result);
            if !same {
                return Err(c.error_at(
                    positions.entry_layout,
                    format!(
                        "entry_computation_layout does not match the ENTRY computation: it has ({})->{}",
                        crate::printer::shapes_text(&actual.parameters),
                        actual.result
                    ),
                ));
            }
        }
        crate::alias::check_aliases(&module).map_err(|m| c.error_at(positions.aliases, m))?;
        Ok(module)
    }
}

/// Where header attributes checked against the whole module were written.
#[derive(Default)]
struct HeaderPositions {
    entry_layout: usize,
    aliases: usize,
}

/// `{ {0}: (0, {}, may-alias), {1}: (2, {}, must-alias) }` (entries may also be empty).
fn output_aliases(c: &mut Cursor<'_>) -> Result<Vec<OutputAlias>> {
    c.expect(b'{')?;
    let mut out = Vec::new();
    while !c.eat(b'}') {
        let output = values::int_list(c)?;
        c.expect(b':')?;
        c.expect(b'(')?;
        let parameter = c.int()?;
        c.expect(b',')?;
        let parameter_index = values::int_list(c)?;
        let kind = if c.eat(b',') {
            match c.word() {
                Some("may-alias") => AliasKind::MayAlias,
                Some("must-alias") => AliasKind::MustAlias,
                _ => return Err(c.expected("'may-alias' or 'must-alias'")),
            }
        } else {
            AliasKind::MayAlias
        };
        c.expect(b')')?;
        out.push(OutputAlias {
            output,
            parameter,
            parameter_index,
            kind,
        });
        if !c.eat(b',') && c.peek() != Some(b'}') {
            return Err(c.expected("',' or '}'"));
        }
    }
    Ok(out)
}

/// `{a, b}`: instruction names (for control-predecessors), with their positions.
fn name_list<'a>(c: &mut Cursor<'a>) -> Result<Vec<(&'a str, usize)>> {
    c.expect(b'{')?;
    let mut out = Vec::new();
    while !c.eat(b'}') {
        c.skip_trivia();
        let pos = c.pos();
        out.push((c.name("an instruction name")?, pos));
        if !c.eat(b',') && c.peek() != Some(b'}') {
            return Err(c.expected("',' or '}'"));
        }
    }
    Ok(out)
}

/// `{(f32[2]{0}, s32[])->f32[2]{0}}`.
fn program_shape(c: &mut Cursor<'_>) -> Result<ProgramShape> {
    c.expect(b'{')?;
    let Shape::Tuple(parameters) = values::shape(c)? else {
        return Err(c.expected("'(' and the parameter shapes"));
    };
    if !c.eat_str("->") {
        return Err(c.expected("'->' and the result shape"));
    }
    let result = values::shape(c)?;
    c.expect(b'}')?;
    Ok(ProgramShape { parameters, result })
}

/// An order of `0..edges.len()` where every node follows the nodes it points at, as close to
/// the given order as possible; `Err(node)` names a node on a cycle.
fn operands_first_order(edges: &[SmallVec<[usize; 4]>]) -> std::result::Result<Vec<usize>, usize> {
    let n = edges.len();
    if edges
        .iter()
        .enumerate()
        .all(|(i, e)| e.iter().all(|&d| d < i))
    {
        return Ok((0..n).collect());
    }
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut waiting: Vec<usize> = vec![0; n];
    for (i, e) in edges.iter().enumerate() {
        for &d in e {
            users[d].push(i);
            waiting[i] += 1;
        }
    }
    let mut ready: BinaryHeap<std::cmp::Reverse<usize>> = (0..n)
        .filter(|&i| waiting[i] == 0)
        .map(std::cmp::Reverse)
        .collect();
    let mut order = Vec::with_capacity(n);
    while let Some(std::cmp::Reverse(i)) = ready.pop() {
        order.push(i);
        for &u in &users[i] {
            waiting[u] -= 1;
            if waiting[u] == 0 {
                ready.push(std::cmp::Reverse(u));
            }
        }
    }
    if order.len() == n {
        Ok(order)
    } else {
        Err((0..n).find(|&i| waiting[i] > 0).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests;
