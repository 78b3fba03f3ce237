//! The reference evaluator: runs any verified module on host literals with XLA's semantics.
//!
//! It is the oracle every compiled result is compared with, so it favours plain code:
//! data-movement ops build an index map and take elements through it; element-wise ops
//! apply [`element::Element`] per element; reductions walk their windows in row-major
//! order. Floating-point sums and products accumulate in f64 (at least as accurate as
//! XLA's f32 accumulation, and well inside the corpus tolerances). Layouts never change
//! values, except for `bitcast`, which reinterprets memory and so follows them.

mod array;
mod calls;
mod complex;
mod element;
mod elementwise;
mod factor;
mod feeds;
mod groups;
mod linalg;
mod lockstep;
mod movement;
mod random;
mod reduce;
mod replicas;
mod scatter_op;
mod sort;
mod sort_op;
mod window_op;

use crate::ids::{CompId, InstrId};
use crate::literal::{ArrayData, ArrayLiteral};
use crate::{Activation, Computation, Literal, Module, Op, Shape};
use std::cell::RefCell;
use std::fmt;

pub use feeds::{FeedNames, Feeds};
pub use movement::{dynamic_slice_sources, dynamic_update_targets, gather_sources};
pub use scatter_op::ScatterOp;
pub use sort_op::SortOp;
pub use window_op::WindowOp;

/// An evaluation failure, naming the instruction (and the calls that led to it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct EvalError {
    /// The computation of the failing instruction.
    pub computation: String,
    /// The failing instruction.
    pub instruction: String,
    /// What went wrong.
    pub message: String,
    /// The calling instructions, innermost first (`computation/instruction`).
    pub called_from: Vec<String>,
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "in computation {}, instruction {}: {}",
            self.computation, self.instruction, self.message
        )?;
        for caller in &self.called_from {
            write!(f, " (called from {caller})")?;
        }
        Ok(())
    }
}

/// Problems found before evaluation starts: the module or the arguments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvaluateError {
    /// The module does not verify.
    #[error(transparent)]
    Invalid(#[from] crate::VerifyError),
    /// Wrong number of arguments.
    #[error("the entry computation takes {expected} arguments, {given} were given")]
    ArgumentCount {
        /// Parameters of the entry computation.
        expected: usize,
        /// Arguments given.
        given: usize,
    },
    /// An argument of the wrong shape.
    #[error("argument {index} ({name}) must be {expected}, found {found}")]
    ArgumentShape {
        /// Parameter number.
        index: usize,
        /// Parameter name.
        name: String,
        /// The parameter's shape.
        expected: String,
        /// The argument's shape.
        found: String,
    },
    /// A value too large for host memory.
    #[error(
        "in computation {computation}, instruction {instruction}: the value {shape} needs {bytes} bytes, more than the evaluator's limit of {limit} bytes"
    )]
    TooLarge {
        /// The computation.
        computation: String,
        /// The instruction producing the value.
        instruction: String,
        /// Its shape.
        shape: String,
        /// Bytes it needs.
        bytes: u64,
        /// The limit ([`MAX_VALUE_BYTES`]).
        limit: u64,
    },
    /// A value of an element type ipuxla reads but does not compute with.
    #[error(
        "Unsupported: in computation {computation}, instruction {instruction}: {element_type} values are read, checked and printed by ipuxla but not computed"
    )]
    UncomputedType {
        /// The computation.
        computation: String,
        /// The instruction producing the value.
        instruction: String,
        /// The element type.
        element_type: crate::ElementType,
    },
    /// A foreign op whose meaning could not be given in ops the evaluator runs.
    #[error(transparent)]
    Expand(#[from] crate::expand::ExpandError),
    /// An instruction the evaluator does not compute.
    #[error("Unsupported: in computation {computation}, instruction {instruction}: {reason}")]
    Unsupported {
        /// The computation.
        computation: String,
        /// The instruction.
        instruction: String,
        /// Why.
        reason: String,
    },
    /// Calls nested deeper than the evaluator's recursion allows.
    #[error(
        "calls nest {depth} computations deep from the entry; the limit is {limit} (the evaluator recurses through them)"
    )]
    TooDeep {
        /// The module's call depth ([`Module::call_depth`]).
        depth: usize,
        /// The limit ([`MAX_CALL_DEPTH`]).
        limit: usize,
    },
    /// Evaluation failed at an instruction.
    #[error(transparent)]
    Failed(#[from] EvalError),
}

/// How deep calls (and loops, fusions, reducers) may nest: the evaluator, the compiler's
/// lowering and the IPU Model's program walks recurse through them on the caller's stack
/// (32 levels run on a 2 MiB thread in an unoptimised build; JAX's modules nest a handful).
pub const MAX_CALL_DEPTH: usize = 32;

/// The largest single value the evaluator will materialise (8 GiB).
pub const MAX_VALUE_BYTES: u64 = 8 << 30;

/// Evaluates the entry computation of `module` on `args` (one literal per parameter).
/// Infeeds find no values (a module that reads one fails naming it); what outfeeds send is
/// dropped: [`evaluate_with_feeds`] gives and keeps them.
pub fn evaluate(module: &Module, args: &[Literal]) -> Result<Literal, EvaluateError> {
    evaluate_with_feeds(module, args, &mut Feeds::default())
}

/// [`evaluate`], with `feeds` holding the values the module's infeeds dequeue (by feed
/// name, see [`FeedNames`]) and receiving what its outfeeds send.
pub fn evaluate_with_feeds(
    module: &Module,
    args: &[Literal],
    feeds: &mut Feeds,
) -> Result<Literal, EvaluateError> {
    evaluate_within(module, args, feeds, u64::MAX)
}

/// [`evaluate_with_feeds`] holding at most `max_live` bytes of values at once (the values
/// computed and not yet dropped after their last use, through every call): the
/// instruction whose value would pass it fails, naming the bytes, before it allocates
/// (`ipuxla run --engine reference --max-host-memory`).
pub fn evaluate_within(
    module: &Module,
    args: &[Literal],
    feeds: &mut Feeds,
    max_live: u64,
) -> Result<Literal, EvaluateError> {
    let expanded = crate::expand::expand_foreign_ops(module)?;
    let module = expanded.as_ref().unwrap_or(module);
    check_module_and_args(module, args)?;
    let evaluator = Evaluator {
        module,
        names: FeedNames::of(module),
        feeds: RefCell::new(std::mem::take(feeds)),
        replica: None,
        live: std::cell::Cell::new(0),
        max_live,
    };
    let result = evaluator.computation(module.entry, args);
    *feeds = evaluator.feeds.into_inner();
    Ok(result?)
}

/// A module checked (and its foreign ops expanded) once, to evaluate many times on
/// arguments of its parameters' shapes: a codelet evaluating one op per tile runs it once
/// per vertex, and the checks would cost more than the op.
#[derive(Debug, Clone)]
pub struct Prepared {
    module: Module,
    names: FeedNames,
}

impl Prepared {
    /// `module`, checked as [`evaluate`] checks it.
    pub fn new(module: &Module) -> Result<Prepared, EvaluateError> {
        let module = crate::expand::expand_foreign_ops(module)?.unwrap_or_else(|| module.clone());
        check_module(&module)?;
        let names = FeedNames::of(&module);
        Ok(Prepared { module, names })
    }

    /// [`evaluate`] on `args` (only their shapes are checked again).
    pub fn evaluate(&self, args: &[Literal]) -> Result<Literal, EvaluateError> {
        check_args(&self.module, args)?;
        let evaluator = Evaluator {
            module: &self.module,
            names: self.names.clone(),
            feeds: RefCell::new(Feeds::default()),
            replica: None,
            live: std::cell::Cell::new(0),
            max_live: u64::MAX,
        };
        Ok(evaluator.computation(self.module.entry, args)?)
    }
}

/// Evaluates `module` on `args.len()` replicas in lockstep, replica `r` on `args[r]` (one
/// literal per parameter each): `replica-id` and `partition-id` give `r`, and collectives
/// exchange values between the replicas as XLA's do (a replica no `collective-permute`
/// pair sends to receives zeros). Returns each replica's result. The replicas run on
/// threads; infeeds find no values.
pub fn evaluate_replicated(
    module: &Module,
    args: &[Vec<Literal>],
) -> Result<Vec<Literal>, EvaluateError> {
    if args.is_empty() {
        return Err(EvaluateError::ArgumentCount {
            expected: module.entry_computation().parameters().len(),
            given: 0,
        });
    }
    let expanded = crate::expand::expand_foreign_ops(module)?;
    let module = expanded.as_ref().unwrap_or(module);
    // Checks (verification, argument shapes) once, on replica 0's arguments.
    check_module_and_args(module, &args[0])?;
    for a in &args[1..] {
        check_args(module, a)?;
    }
    let names = FeedNames::of(module);
    let results = replicas::in_lockstep(args.len(), |ctx| {
        let id = ctx.id;
        let evaluator = Evaluator {
            module,
            names: names.clone(),
            feeds: RefCell::new(Feeds::default()),
            replica: Some(ctx),
            live: std::cell::Cell::new(0),
            max_live: u64::MAX,
        };
        evaluator
            .computation(module.entry, &args[id])
            .map_err(|mut e| {
                e.message = format!("replica {id}: {}", e.message);
                e
            })
    });
    // The failure that stopped the others is the one to report.
    let first_cause = results.iter().find_map(|r| match r {
        Err(e) if !e.message.contains("another replica failed") => Some(e.clone()),
        _ => None,
    });
    if let Some(e) = first_cause {
        return Err(e.into());
    }
    results
        .into_iter()
        .map(|r| r.map_err(EvaluateError::from))
        .collect()
}

/// Verifies `module`, bounds its values' sizes and checks `args` against its parameters.
fn check_module_and_args(module: &Module, args: &[Literal]) -> Result<(), EvaluateError> {
    check_module(module)?;
    check_args(module, args)
}

/// Checks that the evaluator can run `module`: its call depth, that it verifies, and that
/// it computes only types and forms the evaluator computes, values of at most
/// `MAX_VALUE_BYTES`.
fn check_module(module: &Module) -> Result<(), EvaluateError> {
    let depth = module.call_depth();
    if depth > MAX_CALL_DEPTH {
        return Err(EvaluateError::TooDeep {
            depth,
            limit: MAX_CALL_DEPTH,
        });
    }
    crate::verify(module)?;
    for (_, comp) in module.computations() {
        for (_, instr) in comp.instructions() {
            // Complex values are computed by the ops `complex::computes_complex` names;
            // other types the evaluator does not compute are refused here.
            let types = std::iter::once(&instr.shape)
                .chain(instr.operands.iter().map(|o| &comp.instr(*o).shape))
                .flat_map(|s| s.leaf_arrays())
                .map(|a| a.element_type);
            let complex_ok = complex::computes_complex(&instr.op);
            if let Some(t) = types
                .into_iter()
                .find(|t| !(t.is_computed() || (t.is_complex() && complex_ok)))
            {
                return Err(EvaluateError::UncomputedType {
                    computation: comp.name.clone(),
                    instruction: instr.name.clone(),
                    element_type: t,
                });
            }
            let dynamic = matches!(instr.op, Op::DynamicSlice { .. } | Op::DynamicUpdateSlice);
            if dynamic
                && crate::shape_inference::vector_start_indices(
                    &instr.op,
                    &instr
                        .operands
                        .iter()
                        .map(|o| &comp.instr(*o).shape)
                        .collect::<Vec<_>>(),
                )
            {
                return Err(EvaluateError::Unsupported {
                    computation: comp.name.clone(),
                    instruction: instr.name.clone(),
                    reason: "start indices given as one vector (XLA's older form) are read but not evaluated; give one scalar per dimension".into(),
                });
            }
            let bytes = instr.shape.byte_size();
            if bytes > MAX_VALUE_BYTES {
                return Err(EvaluateError::TooLarge {
                    computation: comp.name.clone(),
                    instruction: instr.name.clone(),
                    shape: instr.shape.to_string(),
                    bytes,
                    limit: MAX_VALUE_BYTES,
                });
            }
        }
    }
    Ok(())
}

/// Checks `args` against the entry computation's parameters.
fn check_args(module: &Module, args: &[Literal]) -> Result<(), EvaluateError> {
    let entry = module.entry_computation();
    let params = entry.parameters();
    if params.len() != args.len() {
        return Err(EvaluateError::ArgumentCount {
            expected: params.len(),
            given: args.len(),
        });
    }
    for (index, (&param, arg)) in params.iter().zip(args).enumerate() {
        let expected = &entry.instr(param).shape;
        let found = arg.shape();
        if !expected.same_ignoring_layout(&found) {
            return Err(EvaluateError::ArgumentShape {
                index,
                name: entry.instr(param).name.clone(),
                expected: expected.to_string(),
                found: found.to_string(),
            });
        }
    }
    Ok(())
}

/// Walks computations; holds the module for called computations and the host feeds.
pub(crate) struct Evaluator<'m> {
    pub module: &'m Module,
    names: FeedNames,
    feeds: RefCell<Feeds>,
    /// Among replicas in lockstep (none: a lone evaluator, replica 0 of 1).
    replica: Option<replicas::ReplicaContext<'m>>,
    /// Bytes of the values held now, and the most they may reach.
    live: std::cell::Cell<u64>,
    max_live: u64,
}

/// What an op implementation returns: a value or a message (the caller adds where).
pub(crate) type OpResult = Result<Literal, OpError>;

/// An op-level failure: either a message about this instruction, or an error already
/// located in a called computation.
#[derive(Debug)]
pub(crate) enum OpError {
    Message(String),
    Nested(EvalError),
}

impl From<String> for OpError {
    fn from(m: String) -> OpError {
        OpError::Message(m)
    }
}

impl From<EvalError> for OpError {
    fn from(e: EvalError) -> OpError {
        OpError::Nested(e)
    }
}

impl<'m> Evaluator<'m> {
    /// An evaluator of `module`, a computation rewritten on the side (no feeds, no
    /// replicas), holding to this one's host memory limit.
    pub(crate) fn nested<'n>(&self, module: &'n Module) -> Evaluator<'n> {
        Evaluator {
            module,
            names: FeedNames::of(module),
            feeds: RefCell::new(Feeds::default()),
            replica: None,
            live: std::cell::Cell::new(self.live.get()),
            max_live: self.max_live,
        }
    }

    /// Evaluates computation `id` with `args` bound to its parameters.
    pub fn computation(&self, id: CompId, args: &[Literal]) -> Result<Literal, EvalError> {
        let comp = self.module.computation(id);
        let order = comp.order();
        // Values are dropped after their last use to bound memory on large programs.
        let mut last_use = vec![usize::MAX; slot_count(comp)];
        for (pos, &instr_id) in order.iter().enumerate() {
            for operand in &comp.instr(instr_id).operands {
                last_use[operand.index()] = pos;
            }
        }
        last_use[comp.root.index()] = usize::MAX;
        let mut values: Vec<Option<Literal>> = vec![None; last_use.len()];
        for (pos, &instr_id) in order.iter().enumerate() {
            let instr = comp.instr(instr_id);
            let bytes = instr.shape.byte_size();
            let live = self.live.get().saturating_add(bytes);
            if live > self.max_live {
                return Err(EvalError {
                    computation: comp.name.clone(),
                    instruction: instr.name.clone(),
                    message: format!(
                        "its value {} ({bytes} bytes) would bring the values held to {live} bytes, over the host memory limit of {} bytes",
                        instr.shape, self.max_live
                    ),
                    called_from: Vec::new(),
                });
            }
            let value = {
                let operands: Vec<&Literal> = instr
                    .operands
                    .iter()
                    .map(|o| {
                        values[o.index()]
                            .as_ref()
                            .expect("operands precede users in program order")
                    })
                    .collect();
                self.instruction(comp, instr_id, &operands, args)
            };
            let value = value.map_err(|e| match e {
                OpError::Message(message) => EvalError {
                    computation: comp.name.clone(),
                    instruction: instr.name.clone(),
                    message,
                    called_from: Vec::new(),
                },
                OpError::Nested(mut inner) => {
                    inner
                        .called_from
                        .push(format!("{}/{}", comp.name, instr.name));
                    inner
                }
            })?;
            self.live.set(self.live.get().saturating_add(bytes));
            values[instr_id.index()] = Some(value);
            for operand in &instr.operands {
                if last_use[operand.index()] == pos
                    && let Some(v) = values[operand.index()].take()
                {
                    self.release(&v);
                }
            }
        }
        // What is still held (results nothing read, and the root, which the caller
        // counts as its own value) is released here.
        let root = values[comp.root.index()]
            .take()
            .expect("the root is evaluated");
        self.release(&root);
        for v in values.iter().flatten() {
            self.release(v);
        }
        Ok(root)
    }

    /// Stops counting a value that is dropped (or handed to the caller).
    fn release(&self, value: &Literal) {
        self.live
            .set(self.live.get().saturating_sub(value.shape().byte_size()));
    }

    /// The feed an infeed or outfeed instruction uses.
    fn feed_name(&self, comp: &Computation, id: InstrId) -> Result<&str, OpError> {
        self.names
            .name(&comp.name, id)
            .ok_or_else(|| OpError::Message("the feed of this instruction is unknown".into()))
    }

    fn instruction(
        &self,
        comp: &Computation,
        id: InstrId,
        operands: &[&Literal],
        args: &[Literal],
    ) -> OpResult {
        let instr = comp.instr(id);
        let shape = &instr.shape;
        match &instr.op {
            Op::Parameter { number } => args
                .get(*number as usize)
                .cloned()
                .ok_or_else(|| OpError::Message(format!("parameter {number} was not given"))),
            Op::Constant { literal } => Ok(literal.clone()),
            Op::ElidedConstant => Err(OpError::Message(
                "the constant's data was elided as {...} in the dump; re-dump the module with large constants printed".into(),
            )),
            Op::Foreign { opcode, .. } if opcode == "cholesky" => {
                factor::cholesky(array(operands[0])?, instr.op.attribute("lower") == Some("true"))
            }
            Op::Foreign { opcode, .. } if opcode == "triangular-solve" => {
                let flag = |name: &str| instr.op.attribute(name) == Some("true");
                let transpose = match instr.op.attribute("transpose_a") {
                    None | Some("NO_TRANSPOSE") => false,
                    Some("TRANSPOSE" | "ADJOINT") => true,
                    Some(other) => {
                        return Err(OpError::Message(format!(
                            "transpose_a={other} is not NO_TRANSPOSE, TRANSPOSE or ADJOINT"
                        )));
                    }
                };
                factor::triangular_solve(
                    array(operands[0])?,
                    array(operands[1])?,
                    factor::SolveOptions {
                        left_side: flag("left_side"),
                        lower: flag("lower"),
                        unit_diagonal: flag("unit_diagonal"),
                        transpose,
                    },
                )
            }
            Op::Unary(op) if is_complex(operands[0]) => {
                complex::unary(*op, array(operands[0])?, shape)
            }
            Op::Unary(op) => elementwise::unary(*op, array(operands[0])?, shape),
            Op::Binary(op) if is_complex(operands[0]) => {
                complex::binary(*op, array(operands[0])?, array(operands[1])?)
            }
            Op::Binary(op) => elementwise::binary(*op, array(operands[0])?, array(operands[1])?),
            Op::Compare { direction, .. } if is_complex(operands[0]) => complex::compare(
                *direction == crate::attributes::ComparisonDirection::Eq,
                array(operands[0])?,
                array(operands[1])?,
            ),
            Op::Convert if shape.as_array().is_some_and(|a| a.element_type.is_complex()) => {
                complex::convert(array(operands[0])?, out_array(shape)?)
            }
            Op::Foreign { opcode, .. } if matches!(opcode.as_str(), "real" | "imag" | "complex") => {
                complex::parts(opcode, &arrays(operands)?, shape)
            }
            Op::Foreign { opcode, .. } if opcode == "fft" => {
                let fft_type = instr.op.attribute("fft_type").unwrap_or("FFT");
                let lengths: Vec<i64> = instr
                    .op
                    .attribute("fft_length")
                    .unwrap_or("{}")
                    .trim_matches(['{', '}'])
                    .split(',')
                    .filter(|s| !s.trim().is_empty())
                    .map(|s| s.trim().parse::<i64>())
                    .collect::<Result<_, _>>()
                    .map_err(|_| OpError::Message("fft_length is not a list of integers".into()))?;
                complex::fft(array(operands[0])?, fft_type, &lengths, shape)
            }
            Op::Foreign { opcode, .. } => Err(OpError::Message(format!(
                "Unsupported: {opcode} is read, checked and printed by ipuxla but not evaluated"
            ))),
            Op::Compare {
                direction,
                compare_type,
            } => elementwise::compare(
                *direction,
                *compare_type,
                array(operands[0])?,
                array(operands[1])?,
            ),
            Op::Select => elementwise::select(
                array(operands[0])?,
                array(operands[1])?,
                array(operands[2])?,
            ),
            Op::Clamp => elementwise::clamp(
                array(operands[0])?,
                array(operands[1])?,
                array(operands[2])?,
            ),
            Op::Convert => elementwise::convert(array(operands[0])?, out_array(shape)?),
            Op::BitcastConvert => {
                elementwise::bitcast_convert(array(operands[0])?, out_array(shape)?)
            }
            Op::ReducePrecision {
                exponent_bits,
                mantissa_bits,
            } => elementwise::reduce_precision(array(operands[0])?, *exponent_bits, *mantissa_bits),
            Op::Bitcast => {
                // Literals are logical; the layouts that give bitcast its meaning are the IR's.
                let declared = out_array(&comp.instr(instr.operands[0]).shape)?;
                movement::bitcast(array(operands[0])?, declared, out_array(shape)?)
            }
            Op::Reshape => movement::reshape(array(operands[0])?, out_array(shape)?),
            Op::Broadcast { dimensions } => {
                movement::broadcast(array(operands[0])?, out_array(shape)?, dimensions)
            }
            Op::Transpose { dimensions } => {
                movement::transpose(array(operands[0])?, out_array(shape)?, dimensions)
            }
            Op::Slice { slices } => movement::slice(array(operands[0])?, out_array(shape)?, slices),
            Op::Concatenate { dimension } => {
                movement::concatenate(&arrays(operands)?, out_array(shape)?, *dimension)
            }
            Op::Pad { padding } => movement::pad(
                array(operands[0])?,
                array(operands[1])?,
                out_array(shape)?,
                padding,
            ),
            Op::Reverse { dimensions } => movement::reverse(array(operands[0])?, dimensions),
            Op::Iota { dimension } => movement::iota(out_array(shape)?, *dimension),
            Op::DynamicSlice { sizes } => {
                movement::dynamic_slice(&arrays(operands)?, out_array(shape)?, sizes)
            }
            Op::DynamicUpdateSlice => movement::dynamic_update_slice(&arrays(operands)?),
            Op::Gather {
                dims, slice_sizes, ..
            } => movement::gather(
                array(operands[0])?,
                array(operands[1])?,
                out_array(shape)?,
                dims,
                slice_sizes,
            ),
            Op::Scatter { dims, to_apply, .. } => self.scatter(&arrays(operands)?, dims, *to_apply),
            Op::Sort {
                dimension,
                comparator,
                ..
            } => self.sort(&arrays(operands)?, *dimension, *comparator),
            Op::TopK { k, largest } => sort::top_k(array(operands[0])?, *k, *largest),
            Op::Reduce {
                dimensions,
                to_apply,
            } => self.reduce(&arrays(operands)?, dimensions, *to_apply),
            Op::ReduceWindow { window, to_apply } => {
                self.reduce_window(&arrays(operands)?, shape, window, *to_apply)
            }
            Op::SelectAndScatter {
                window,
                select,
                scatter,
            } => self.select_and_scatter(&arrays(operands)?, window, *select, *scatter),
            Op::Dot { dims, .. } => linalg::dot(
                array(operands[0])?,
                array(operands[1])?,
                out_array(shape)?,
                dims,
            ),
            Op::Convolution {
                window,
                dims,
                feature_group_count,
                batch_group_count,
                ..
            } => linalg::convolution(
                array(operands[0])?,
                array(operands[1])?,
                out_array(shape)?,
                window,
                dims,
                *feature_group_count,
                *batch_group_count,
            ),
            Op::Tuple => Ok(Literal::Tuple(
                operands.iter().map(|l| (*l).clone()).collect(),
            )),
            Op::GetTupleElement { index } => match operands[0] {
                Literal::Tuple(elems) => elems
                    .get(*index as usize)
                    .cloned()
                    .ok_or_else(|| OpError::Message(format!("tuple has no element {index}"))),
                _ => Err(OpError::Message("get-tuple-element of a non-tuple".into())),
            },
            Op::While { condition, body } => self.while_loop(operands[0], *condition, *body),
            Op::Conditional { branches } => self.conditional(operands, branches),
            Op::Call { to_apply } => self.call(*to_apply, operands),
            Op::Fusion { calls, .. } => self.call(*calls, operands),
            Op::Map { to_apply, .. } => self.map(&arrays(operands)?, shape, *to_apply),
            Op::CustomCall { target, .. }
                if let Some(activation) =
                    Activation::from_custom_call(target, instr.backend_config.as_deref()) =>
            {
                elementwise::activation(activation.map_err(OpError::Message)?, array(operands[0])?)
            }
            Op::CustomCall { target, .. } => match target.as_str() {
                crate::call_config::CHECKPOINT_TARGET => Ok(Literal::Array(array(operands[0])?.clone())),
                "TopK" => {
                    let k = shape
                        .as_tuple()
                        .and_then(|t| t[0].as_array())
                        .and_then(|a| a.dims.last().copied())
                        .unwrap_or(0);
                    sort::top_k(array(operands[0])?, k, true)
                }
                other => Err(OpError::Message(format!(
                    "Unsupported: custom-call target \"{other}\" cannot be evaluated (TopK, RecomputationCheckpoint, Gelu, Swish and HardSigmoid are known)"
                ))),
            },
            Op::AfterAll => Ok(Literal::Token),
            Op::ReplicaId => self.device_id(true),
            Op::PartitionId => self.device_id(false),
            Op::RngBitGenerator { algorithm } => {
                random::rng_bit_generator(*algorithm, array(operands[0])?, shape)
            }
            Op::AllReduce { attrs, to_apply } => {
                self.all_reduce(operands, &attrs.replica_groups, *to_apply)
            }
            Op::AllGather { attrs, dimension } => {
                let gathered = self.all_gather(operands[0], &attrs.replica_groups, *dimension)?;
                if !gathered.shape().same_ignoring_layout(shape) {
                    return Err(OpError::Message(format!(
                        "gathering over this run's replicas gives {}, but the instruction declares {shape} (run it on as many replicas as it was written for)",
                        gathered.shape()
                    )));
                }
                Ok(gathered)
            }
            Op::ReduceScatter {
                attrs,
                dimension,
                to_apply,
            } => self.reduce_scatter(operands[0], &attrs.replica_groups, *dimension, *to_apply),
            Op::AllToAll { attrs, dimension } => {
                self.all_to_all(operands, &attrs.replica_groups, *dimension)
            }
            Op::CollectivePermute { pairs, .. } => self.collective_permute(operands[0], pairs),
            Op::Infeed { .. } => {
                let name = self.feed_name(comp, id)?;
                let value = self.feeds.borrow_mut().next_value(name)?;
                let want = instr.shape.as_tuple().and_then(|t| t.first());
                if want.is_none_or(|w| !w.same_ignoring_layout(&value.shape())) {
                    return Err(OpError::Message(format!(
                        "infeed {name} was given {} but reads {}",
                        value.shape(),
                        want.map_or("a value".to_string(), |w| w.to_string())
                    )));
                }
                Ok(Literal::Tuple(vec![value, Literal::Token]))
            }
            Op::Outfeed { .. } => {
                let name = self.feed_name(comp, id)?;
                self.feeds.borrow_mut().send(name, operands[0].clone());
                Ok(Literal::Token)
            }
            Op::OptimizationBarrier => Ok(operands[0].clone()),
        }
    }
}

fn slot_count(comp: &Computation) -> usize {
    comp.order()
        .iter()
        .map(|id| id.index() + 1)
        .max()
        .unwrap_or(0)
}

/// The operand as an array literal.
pub(crate) fn array(l: &Literal) -> Result<&ArrayLiteral, OpError> {
    match l {
        Literal::Array(a) => Ok(a),
        other => Err(OpError::Message(format!(
            "expected an array operand, found {}",
            other.shape()
        ))),
    }
}

fn arrays<'a>(ls: &[&'a Literal]) -> Result<Vec<&'a ArrayLiteral>, OpError> {
    ls.iter().map(|l| array(l)).collect()
}

fn out_array(shape: &Shape) -> Result<&crate::ArrayShape, OpError> {
    shape
        .as_array()
        .ok_or_else(|| OpError::Message(format!("expected an array result, found {shape}")))
}

/// Wraps data in a literal of `shape`'s dimensions with a default layout.
/// True when a value is a complex array.
fn is_complex(value: &Literal) -> bool {
    matches!(value, Literal::Array(a) if a.shape.element_type.is_complex())
}

pub(crate) fn literal(element_type: crate::ElementType, dims: &[i64], data: ArrayData) -> Literal {
    Literal::Array(ArrayLiteral {
        shape: crate::ArrayShape::new(element_type, dims),
        data,
    })
}

/// Wraps several results as one value: the array itself, or a tuple.
pub(crate) fn one_or_tuple(mut values: Vec<Literal>) -> Literal {
    if values.len() == 1 {
        values.pop().expect("one value")
    } else {
        Literal::Tuple(values)
    }
}
