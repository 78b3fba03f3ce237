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
pub(crate) use ops::async_sugar;
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
        single_op: false,
    };
    parser.module()
}

/// Parses a `{key="value",...}` frontend-attributes value (a module header's or an
/// instruction's).
pub fn parse_frontend_attributes(text: &str) -> Result<FrontendAttributes> {
    let lines = LineIndex::new(text);
    let mut c = Cursor::new(text, &lines);
    let attrs = values::frontend_attributes(&mut c)?;
    c.expect_end("the frontend attributes")?;
    Ok(attrs)
}

/// Parses a shape as HLO text writes it (`f32[2,3]{1,0}`, `(s32[], f32[4])`).
pub fn parse_shape(text: &str) -> Result<Shape> {
    let lines = LineIndex::new(text);
    let mut c = Cursor::new(text, &lines);
    let shape = values::shape(&mut c)?;
    c.expect_end("the shape")?;
    Ok(shape)
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

/// The typed op `opcode` with a foreign op's attributes (`called` by attribute, the rest
/// verbatim), as if it had been written so: how an async chain's wrapped op, or a
/// collective's synchronous form, is recovered. `Err` says what does not fit.
pub(crate) fn typed_op(
    opcode: &str,
    called: &[(String, Vec<CompId>)],
    attributes: &[(String, String)],
    operand_count: usize,
) -> std::result::Result<Op, String> {
    struct Fixed(Vec<CompId>);
    impl ComputationRefs for Fixed {
        fn reference(&mut self, name: &str, _pos: usize) -> CompId {
            let i: usize = name
                .trim_start_matches("__c")
                .parse()
                .expect("typed_op names computations __cN");
            self.0[i]
        }
        fn inline(&mut self, _start: usize, _end: usize) -> CompId {
            unreachable!("typed_op writes computations by name")
        }
    }
    let mut ids = Vec::new();
    let mut parts = Vec::new();
    for (name, comps) in called {
        let names: Vec<String> = comps
            .iter()
            .map(|c| {
                ids.push(*c);
                format!("__c{}", ids.len() - 1)
            })
            .collect();
        if comps.len() == 1 && name != "called_computations" && name != "branch_computations" {
            parts.push(format!("{name}={}", names[0]));
        } else {
            parts.push(format!("{name}={{{}}}", names.join(", ")));
        }
    }
    for (name, value) in attributes {
        parts.push(format!("{name}={value}"));
    }
    let text = parts.join(", ");
    let lines = LineIndex::new(&text);
    let mut c = Cursor::new(&text, &lines);
    let mut attrs = Attrs::new();
    while !c.at_end() {
        c.skip_trivia();
        let name_pos = c.pos();
        let name = c
            .word()
            .ok_or_else(|| "expected an attribute name".to_string())?;
        c.expect(b'=').map_err(|e| e.message)?;
        let (start, end) = c.raw_value().map_err(|e| e.message)?;
        attrs
            .push(
                &c,
                RawAttr {
                    name,
                    name_pos,
                    start,
                    end,
                },
            )
            .map_err(|e| e.message)?;
        if !c.eat(b',') {
            break;
        }
    }
    if !c.at_end() {
        return Err(format!(
            "cannot read the attributes of {opcode} back: '{}'",
            &text[c.pos()..]
        ));
    }
    let mut refs = Fixed(ids);
    ops::build_op(&c, opcode, 0, attrs, &mut refs, operand_count).map_err(|e| e.message)
}

/// Computations by name: ids are handed out on first mention and filled in on definition.
#[derive(Default)]
struct CompTable {
    ids: HashMap<String, CompId>,
    slots: Vec<CompSlot>,
    /// Computations written in place, not parsed yet: id and the span of `{ ... }`.
    inline_bodies: Vec<(CompId, usize, usize)>,
}

struct CompSlot {
    name: String,
    first_reference: Option<usize>,
    definition: Option<(usize, Computation)>,
    checks: DeferredChecks,
    is_entry: bool,
}

/// What can only be checked once every computation is known (shapes of called
/// computations): results to infer, operand shapes written in the text, the signature.
#[derive(Default)]
struct DeferredChecks {
    /// Instructions written without a result shape, with their positions.
    infer: Vec<(InstrId, usize)>,
    /// `(instruction, operand index, the shape written, position)`.
    operand_shapes: Vec<(InstrId, usize, Shape, usize)>,
    /// Other checks against operand shapes.
    operand_checks: Vec<(InstrId, OperandCheck)>,
    /// The `(params) -> result` written after the computation's name.
    signature: Option<(usize, ProgramShape)>,
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
            checks: DeferredChecks::default(),
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

    fn inline(&mut self, start: usize, end: usize) -> CompId {
        let mut name = "inline_computation".to_string();
        let mut n = 0;
        while self.ids.contains_key(&name) {
            n += 1;
            name = format!("inline_computation.{n}");
        }
        let id = self.reference(&name, start);
        self.inline_bodies.push((id, start, end));
        id
    }
}

/// An instruction as parsed, before its operand names are resolved.
struct PendingInstr<'a> {
    name: String,
    /// Named by the text (not a nested, anonymous operand).
    named: bool,
    pos: usize,
    is_root: bool,
    /// `None` when the text leaves it to be inferred.
    shape: Option<Shape>,
    op: Op,
    operands: SmallVec<[Operand<'a>; 4]>,
    control_predecessors: Vec<(&'a str, usize)>,
    metadata: Metadata,
    sharding: Option<Sharding>,
    frontend_attributes: FrontendAttributes,
    backend_config: Option<String>,
    extra_attributes: Vec<(String, String)>,
    /// Checks that need the operands' shapes, made once they are known.
    operand_checks: Vec<OperandCheck>,
}

/// A check of an instruction against its operands' shapes, made after inference.
#[derive(Clone)]
enum OperandCheck {
    /// A conditional written with `branch_computations={..}`: its selector must be `s32`
    /// (a `pred` one takes `true_computation=` and `false_computation=`).
    BranchList { pos: usize },
    /// A custom call's `operand_layout_constraints`: one shape per operand, each
    /// compatible with it.
    LayoutConstraints { pos: usize, shapes: Vec<Shape> },
}

/// One operand as written: a name, or a nested instruction (by its index among the
/// computation's pending instructions), with the shape the text gave it, if any.
struct Operand<'a> {
    target: OperandTarget<'a>,
    pos: usize,
    declared: Option<Shape>,
}

enum OperandTarget<'a> {
    Name(&'a str),
    Nested(usize),
}

/// Operands nest at most this deep (`add(f32[] add(...), ...)`), as XLA's parser limits
/// its recursion: deeper text is refused, never a stack overflow.
const MAX_OPERAND_NESTING: usize = 64;

struct Parser<'a> {
    c: Cursor<'a>,
    comps: CompTable,
    /// Parsing a lone instruction (XLA's single-op text): its operands become parameters.
    single_op: bool,
}

const DEBUG_TABLES: [&str; 4] = ["FileNames", "FunctionNames", "FileLocations", "StackFrames"];

impl<'a> Parser<'a> {
    fn module(&mut self) -> Result<Module> {
        if self.c.at_end() {
            return Err(self.c.expected("'HloModule' or a computation"));
        }
        if !self.c.eat_keyword("HloModule") {
            // XLA also reads bare computations (the last, or the ENTRY, is the entry).
            if !self.computation_follows() {
                return self.single_instruction();
            }
            let mut module = Module::new("module");
            module.entry_computation_layout = None;
            while !self.c.at_end() {
                self.computation()?;
            }
            return self.finish_module(module, HeaderPositions::default());
        }
        let name = self.c.name("the module name")?;
        // Older dumps end the name with a colon (`HloModule name:`).
        self.c.eat(b':');
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
                "buffer_donor" => {
                    ops::value(c, attr, buffer_donors)?;
                    module.header_attributes.push((
                        attr.name.to_string(),
                        c.slice(attr.start, attr.end).to_string(),
                    ));
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

    /// True when a computation starts here: `ENTRY`, or `name {`, or `name (..) -> .. {`.
    fn computation_follows(&mut self) -> bool {
        let mut probe = self.c.clone();
        if probe.eat_keyword("ENTRY") {
            return true;
        }
        if probe.name("").is_err() {
            return false;
        }
        match probe.peek() {
            Some(b'{') => true,
            // A signature, `(a: f32[], ...) -> ...`, not an instruction's operands.
            Some(b'(') => {
                probe.eat(b'(');
                probe.peek() == Some(b')') || (probe.name("").is_ok() && probe.peek() == Some(b':'))
            }
            _ => false,
        }
    }

    fn raw_attr(&mut self) -> Result<RawAttr<'a>> {
        self.c.skip_trivia();
        let name_pos = self.c.pos();
        let name = self
            .c
            .word()
            .ok_or_else(|| self.c.expected("an attribute name"))?;
        self.c.expect(b'=')?;
        if name == "literal" && self.c.peek() != Some(b'(') {
            // A custom call's `literal=s32[2]{0} {1, 2}`: a shape, then its value.
            self.c.skip_trivia();
            let start = self.c.pos();
            let shape = values::shape(&mut self.c)?;
            literal::literal(&mut self.c, &shape)?;
            let end = self.c.pos();
            return Ok(RawAttr {
                name,
                name_pos,
                start,
                end,
            });
        }
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
                return Err(self.c.expected(&format!("'}}' closing computation {name}")));
            }
            self.instruction(&mut pending)?;
        }
        if pending.is_empty() {
            return Err(self
                .c
                .error_at(pos, format!("computation {name} has no instructions")));
        }
        self.inline_computations()?;
        // XLA prints computation attributes after the body: `}, execution_thread="main"`.
        while self.c.peek() == Some(b',') {
            let mut probe = self.c.clone();
            probe.eat(b',');
            if probe.peek_word() != Some("execution_thread") {
                break;
            }
            self.c.eat(b',');
            self.raw_attr()?;
        }
        let (computation, mut checks) = self.resolve(name, pending)?;
        checks.signature = signature;
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
        slot.checks = checks;
        slot.is_entry = is_entry;
        Ok(())
    }

    /// XLA's single-instruction text (`%m = f32[2] multiply(f32[2] %a, f32[2] %b)`, or
    /// without the name): a module whose entry computation takes each operand as a
    /// parameter and returns the instruction.
    fn single_instruction(&mut self) -> Result<Module> {
        self.c.skip_trivia();
        let pos = self.c.pos();
        let mut probe = self.c.clone();
        let named = probe.name("").is_ok() && probe.peek() == Some(b'=');
        let name = if named {
            let name = self.c.name("an instruction name")?;
            self.c.expect(b'=')?;
            name.to_string()
        } else if self.shape_follows() {
            "instruction".to_string()
        } else {
            return Err(self.c.expected(
                "'HloModule', a computation, or one instruction (expects '=' in instruction)",
            ));
        };
        let mut pending = Vec::new();
        self.single_op = true;
        let instr = self.instruction_rhs(name, true, pos, true, None, &mut pending, 0);
        self.single_op = false;
        pending.push(instr?);
        if !self.c.at_end() {
            return Err(self
                .c
                .expected("the end of the text after the instruction (Expected eof)"));
        }
        self.inline_computations()?;
        let (computation, checks) = self.resolve("entry", pending)?;
        let id = self.comps.id("entry");
        let slot = &mut self.comps.slots[id.index()];
        slot.definition = Some((pos, computation));
        slot.checks = checks;
        slot.is_entry = true;
        self.finish_module(Module::new("module"), HeaderPositions::default())
    }

    /// Parses the computations written in place so far (`to_apply={ ... }`), and those
    /// written inside them.
    fn inline_computations(&mut self) -> Result<()> {
        while let Some((id, start, end)) = self.comps.inline_bodies.pop() {
            let body = self.c.sub(start, end);
            let outer = std::mem::replace(&mut self.c, body);
            let name = self.comps.slots[id.index()].name.clone();
            self.c.expect(b'{')?;
            let mut pending = Vec::new();
            while !self.c.eat(b'}') {
                if self.c.at_end() {
                    return Err(self
                        .c
                        .error_at(start, "computation is missing its closing '}'"));
                }
                self.instruction(&mut pending)?;
            }
            if pending.is_empty() {
                return Err(self.c.error_at(start, "computation has no instructions"));
            }
            let (computation, checks) = self.resolve(&name, pending)?;
            self.c = outer;
            let slot = &mut self.comps.slots[id.index()];
            slot.definition = Some((start, computation));
            slot.checks = checks;
        }
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

    /// One `[ROOT] name = [shape] opcode(operands), attributes` line; nested operands
    /// are pushed to `pending` before it.
    fn instruction(&mut self, pending: &mut Vec<PendingInstr<'a>>) -> Result<()> {
        let is_root = self.c.eat_keyword("ROOT");
        self.c.skip_trivia();
        let pos = self.c.pos();
        if self.shape_follows() {
            return Err(self.c.error_at(
                pos,
                "expects name: an instruction starts with 'name =' before its shape",
            ));
        }
        let name = self.c.name("an instruction name")?;
        if !self.c.eat(b'=') {
            return Err(self.c.expected("'=' in instruction"));
        }
        let instr = self.instruction_rhs(name.to_string(), true, pos, is_root, None, pending, 0)?;
        pending.push(instr);
        Ok(())
    }

    /// True when a shape comes next (`f32[..]`, `token[]`, `(..)`) rather than a word.
    fn shape_follows(&mut self) -> bool {
        if self.c.peek() == Some(b'(') {
            return true;
        }
        let mut probe = self.c.clone();
        match probe.word() {
            Some(w) => {
                (w == "token" || w == "opaque" || crate::ElementType::from_name(w).is_some())
                    && probe.peek_raw() == Some(b'[')
            }
            None => false,
        }
    }

    /// `[shape] opcode(operands), attributes` after the `=` (`given_shape`: a shape the
    /// caller already read).
    #[allow(clippy::too_many_arguments)]
    fn instruction_rhs(
        &mut self,
        name: String,
        named: bool,
        pos: usize,
        is_root: bool,
        given_shape: Option<Shape>,
        pending: &mut Vec<PendingInstr<'a>>,
        depth: usize,
    ) -> Result<PendingInstr<'a>> {
        let shape = match given_shape {
            Some(shape) => Some(shape),
            None if self.shape_follows() => Some(values::shape(&mut self.c)?),
            None => None,
        };
        self.c.skip_trivia();
        let opcode_pos = self.c.pos();
        let opcode = self.c.word().ok_or_else(|| self.c.expected("an opcode"))?;
        if self.c.peek_raw() == Some(b'[') {
            return Err(self.c.error_at(
                opcode_pos,
                format!("expected a shape, found '{opcode}' (not an element type)"),
            ));
        }
        self.c.expect(b'(')?;
        let mut operands = SmallVec::new();
        let mut fixed_op = None;
        match opcode {
            "parameter" => {
                let number_pos = self.c.pos();
                let number = self.c.int()?;
                let number = u64::try_from(number)
                    .map_err(|_| self.c.error_at(number_pos, "parameter number must be >= 0"))?;
                fixed_op = Some(Op::Parameter { number });
                self.c.expect(b')')?;
            }
            "constant" => {
                let Some(shape) = &shape else {
                    return Err(self
                        .c
                        .error_at(opcode_pos, "a constant needs its shape written"));
                };
                if self.c.eat_str("{...}") {
                    fixed_op = Some(Op::ElidedConstant);
                } else {
                    let literal = literal::literal(&mut self.c, shape)?;
                    fixed_op = Some(Op::Constant { literal });
                }
                self.c.expect(b')')?;
            }
            _ => {
                if !self.c.eat(b')') {
                    loop {
                        operands.push(self.operand(pending, depth)?);
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
        while self.attribute_follows(depth) {
            self.c.expect(b',')?;
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
        let extra_attributes = ops::extra_attributes(c, opcode, &mut attrs, shape.as_ref())?;
        let mut operand_checks = Vec::new();
        for a in &attrs.list {
            match (opcode, a.name) {
                ("conditional", "branch_computations") => {
                    operand_checks.push(OperandCheck::BranchList { pos: a.name_pos })
                }
                ("custom-call", "operand_layout_constraints") => {
                    operand_checks.push(OperandCheck::LayoutConstraints {
                        pos: a.start,
                        shapes: ops::value(c, *a, values::shape_list)?,
                    })
                }
                _ => {}
            }
        }
        let op = match fixed_op {
            Some(op) => {
                attrs.finish(c, opcode, &[])?;
                op
            }
            None => ops::build_op(
                c,
                opcode,
                opcode_pos,
                attrs,
                &mut self.comps,
                operands.len(),
            )?,
        };
        Ok(PendingInstr {
            name,
            named,
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
            extra_attributes,
            operand_checks,
        })
    }

    /// True when `, name=` follows: an attribute. Inside a nested operand list a `,` may
    /// instead start the next operand.
    fn attribute_follows(&mut self, depth: usize) -> bool {
        let mut probe = self.c.clone();
        if !probe.eat(b',') {
            return false;
        }
        if depth == 0 {
            return true;
        }
        probe.word().is_some() && probe.peek() == Some(b'=')
    }

    /// One operand: `[shape] name`, or a nested `[shape] opcode(...)`.
    fn operand(
        &mut self,
        pending: &mut Vec<PendingInstr<'a>>,
        depth: usize,
    ) -> Result<Operand<'a>> {
        self.c.skip_trivia();
        let pos = self.c.pos();
        let declared = if self.shape_follows() {
            Some(values::shape(&mut self.c)?)
        } else {
            None
        };
        self.c.skip_trivia();
        let name_pos = self.c.pos();
        let mut probe = self.c.clone();
        let nested = probe.word().is_some() && probe.peek_raw() == Some(b'(');
        if nested {
            if depth + 1 >= MAX_OPERAND_NESTING {
                return Err(self.c.error_at(
                    name_pos,
                    format!(
                        "maximum recursion depth exceeded: operands nest more than {MAX_OPERAND_NESTING} deep"
                    ),
                ));
            }
            let mut rhs = self.c.clone();
            let opcode = rhs.word().expect("checked: a word is next");
            let name = format!("{opcode}.anon");
            let instr = self.instruction_rhs(
                name,
                false,
                name_pos,
                false,
                declared.clone(),
                pending,
                depth + 1,
            )?;
            pending.push(instr);
            return Ok(Operand {
                target: OperandTarget::Nested(pending.len() - 1),
                pos,
                declared,
            });
        }
        if self.single_op && depth == 0 {
            // A lone instruction's operands are its computation's parameters.
            let Some(shape) = declared.clone() else {
                return Err(self.c.error_at(
                    name_pos,
                    "Operand had no shape in HLO text: a lone instruction's operands need their shapes",
                ));
            };
            let name = match self.c.peek() {
                Some(b',') | Some(b')') => "parameter".to_string(),
                _ => self.c.name("an operand name")?.to_string(),
            };
            let number = pending
                .iter()
                .filter(|p| matches!(p.op, Op::Parameter { .. }))
                .count();
            pending.push(PendingInstr {
                name,
                named: false,
                pos: name_pos,
                is_root: false,
                shape: Some(shape),
                op: Op::Parameter {
                    number: number as u64,
                },
                operands: SmallVec::new(),
                control_predecessors: Vec::new(),
                metadata: Metadata::default(),
                sharding: None,
                frontend_attributes: FrontendAttributes::new(),
                backend_config: None,
                extra_attributes: Vec::new(),
                operand_checks: Vec::new(),
            });
            return Ok(Operand {
                target: OperandTarget::Nested(pending.len() - 1),
                pos: name_pos,
                declared,
            });
        }
        let name = self.c.name("an operand name")?;
        Ok(Operand {
            target: OperandTarget::Name(name),
            pos: name_pos,
            declared,
        })
    }

    /// Resolves operand names, names nested operands, picks the root and orders
    /// instructions operands-first.
    fn resolve(
        &self,
        comp_name: &str,
        mut pending: Vec<PendingInstr<'a>>,
    ) -> Result<(Computation, DeferredChecks)> {
        let c = &self.c;
        let mut ids: HashMap<String, usize> = HashMap::with_capacity(pending.len());
        for (i, p) in pending.iter().enumerate().filter(|(_, p)| p.named) {
            if let Some(&first) = ids.get(&p.name) {
                let (line, _) = c.line_col(pending[first].pos);
                return Err(c.error_at(
                    p.pos,
                    format!(
                        "duplicate instruction name '{}' (first defined at line {line})",
                        p.name
                    ),
                ));
            }
            ids.insert(p.name.clone(), i);
        }
        // Nested operands are named as XLA names them: `add.anon`, `add.anon.1`, ...
        let mut taken: std::collections::HashSet<String> = ids.keys().cloned().collect();
        for p in pending.iter_mut().filter(|p| !p.named) {
            let mut name = p.name.clone();
            let mut n = 0;
            while taken.contains(&name) {
                n += 1;
                name = format!("{}.{n}", p.name);
            }
            taken.insert(name.clone());
            p.name = name;
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
                    format!("computation {comp_name} has more than one ROOT: one computation should have only one ROOT"),
                ));
            }
        };
        let mut comp = Computation::new(comp_name);
        let mut checks = DeferredChecks::default();
        let mut edges: Vec<SmallVec<[usize; 4]>> = Vec::with_capacity(pending.len());
        for (index, p) in pending.iter().enumerate() {
            let mut operands: SmallVec<[usize; 4]> = SmallVec::new();
            for (k, o) in p.operands.iter().enumerate() {
                let target = match o.target {
                    OperandTarget::Name(n) => lookup(n, o.pos)?,
                    OperandTarget::Nested(i) => i,
                };
                if let Some(shape) = &o.declared {
                    checks
                        .operand_shapes
                        .push((InstrId(index as u32), k, shape.clone(), o.pos));
                }
                operands.push(target);
            }
            let preds: Vec<usize> = p
                .control_predecessors
                .iter()
                .map(|(n, pos)| lookup(n, *pos))
                .collect::<Result<_>>()?;
            for check in &p.operand_checks {
                checks
                    .operand_checks
                    .push((InstrId(index as u32), check.clone()));
            }
            let mut e = operands.clone();
            e.extend(preds.iter().copied());
            edges.push(e);
            let (line, column) = c.line_col(p.pos);
            let shape = match &p.shape {
                Some(shape) => shape.clone(),
                None => {
                    checks.infer.push((InstrId(index as u32), p.pos));
                    Shape::Tuple(Vec::new())
                }
            };
            let mut instr = Instruction::new(
                p.name.clone(),
                p.op.clone(),
                &operands
                    .iter()
                    .map(|&i| InstrId(i as u32))
                    .collect::<Vec<_>>(),
                shape,
            );
            instr.control_predecessors = preds.iter().map(|&i| InstrId(i as u32)).collect();
            instr.metadata = p.metadata.clone();
            instr.sharding = p.sharding.clone();
            instr.frontend_attributes = p.frontend_attributes.clone();
            instr.backend_config = p.backend_config.clone();
            instr.extra_attributes = p.extra_attributes.clone();
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
        Ok((comp, checks))
    }

    /// Infers the shapes the text left out (callees first, so a `call` or `conditional`
    /// sees its computations' results), then checks the operand shapes and signatures
    /// that were written against the instructions they name.
    fn deferred_checks(
        &self,
        module: &mut Module,
        checks: Vec<(CompId, DeferredChecks)>,
    ) -> Result<()> {
        let c = &self.c;
        let mut checks: HashMap<CompId, DeferredChecks> = checks.into_iter().collect();
        for comp_id in module.post_order() {
            let Some(deferred) = checks.get(&comp_id) else {
                continue;
            };
            if deferred.infer.is_empty() {
                continue;
            }
            let to_infer: HashMap<InstrId, usize> = deferred.infer.iter().copied().collect();
            let order = module.computation(comp_id).order().to_vec();
            for id in order {
                let Some(&pos) = to_infer.get(&id) else {
                    continue;
                };
                let comp = module.computation(comp_id);
                let instr = comp.instr(id);
                let operand_shapes: Vec<&Shape> = instr
                    .operands
                    .iter()
                    .map(|o| &comp.instr(*o).shape)
                    .collect();
                let shape =
                    crate::infer_shape(&instr.op, &operand_shapes, None, module).map_err(|m| {
                        c.error_at(
                            pos,
                            format!(
                                "cannot infer the shape of {} ({m}); write it before the opcode",
                                instr.name
                            ),
                        )
                    })?;
                module.computation_mut(comp_id).instr_mut(id).shape = shape;
            }
        }
        for (comp_id, deferred) in checks.drain() {
            let comp = module.computation(comp_id);
            for (id, k, written, pos) in &deferred.operand_shapes {
                let operand = comp.instr(comp.instr(*id).operands[*k]);
                if !written.same_ignoring_layout(&operand.shape) {
                    return Err(c.error_at(
                        *pos,
                        format!(
                            "The declared operand shape {written} is not compatible with the shape of the operand instruction {} ({}).",
                            operand.shape, operand.name
                        ),
                    ));
                }
            }
            for (id, check) in &deferred.operand_checks {
                let instr = comp.instr(*id);
                let operand = |k: usize| instr.operands.get(k).map(|o| &comp.instr(*o).shape);
                match check {
                    OperandCheck::BranchList { pos } => {
                        if let Some(Shape::Array(a)) = operand(0)
                            && a.element_type == crate::ElementType::Pred
                        {
                            return Err(c.error_at(
                                *pos,
                                "unexpected attribute \"branch_computations\": a conditional on a pred takes true_computation= and false_computation=",
                            ));
                        }
                    }
                    OperandCheck::LayoutConstraints { pos, shapes } => {
                        for (k, constraint) in shapes.iter().enumerate() {
                            if let Some(shape) = operand(k)
                                && !constraint.same_ignoring_layout(shape)
                            {
                                return Err(c.error_at(
                                    *pos,
                                    format!(
                                        "operand_layout_constraints: the constraint {constraint} for operand {k} is not compatible with operand shape {shape}"
                                    ),
                                ));
                            }
                        }
                    }
                }
            }
            if let Some((pos, sig)) = &deferred.signature {
                self.check_signature(comp, *pos, sig)?;
            }
        }
        Ok(())
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
        let mut deferred = Vec::new();
        let mut slots: Vec<Option<CompSlot>> = slots.into_iter().map(Some).collect();
        for &old in &by_definition {
            let slot = slots[old].take().expect("each slot is moved once");
            deferred.push((new_id[old], slot.checks));
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
            [_, (_, pos), ..] => {
                return Err(c.error_at(
                    pos,
                    "more than one ENTRY computation: a module expects only one ENTRY",
                ));
            }
        };
        self.deferred_checks(&mut module, deferred)?;
        let c = &self.c;
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

/// `{ (0, {0}), (1, {}) }`: parameters (and tuple indices in them) whose buffers the
/// caller donates.
fn buffer_donors(c: &mut Cursor<'_>) -> Result<()> {
    c.expect(b'{')?;
    while !c.eat(b'}') {
        c.expect(b'(')?;
        c.int()?;
        c.expect(b',')?;
        values::int_list(c)?;
        c.expect(b')')?;
        if !c.eat(b',') && c.peek() != Some(b'}') {
            return Err(c.expected("',' or '}'"));
        }
    }
    Ok(())
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
