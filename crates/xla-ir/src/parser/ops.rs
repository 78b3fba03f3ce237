//! Builds a typed [`Op`] from an opcode name and its raw attributes.

use super::ParseError;
use super::cursor::Cursor;
use super::values;
use crate::attributes::{DotDims, GatherDims, ScatterDims};
use crate::ids::CompId;
use crate::op::{BinaryOp, Op, UnaryOp};

type Result<T> = std::result::Result<T, ParseError>;

/// One `name=value` attribute as written: positions of the name and the value text.
#[derive(Clone, Copy)]
pub(crate) struct RawAttr<'a> {
    pub name: &'a str,
    pub name_pos: usize,
    pub start: usize,
    pub end: usize,
}

/// The attributes of one instruction, consumed as the op builder asks for them.
pub(crate) struct Attrs<'a> {
    pub(crate) list: Vec<RawAttr<'a>>,
}

impl<'a> Attrs<'a> {
    pub(crate) fn new() -> Attrs<'a> {
        Attrs { list: Vec::new() }
    }

    /// Adds an attribute; a repeated name is an error.
    pub(crate) fn push(&mut self, c: &Cursor<'a>, attr: RawAttr<'a>) -> Result<()> {
        if self.list.iter().any(|a| a.name == attr.name) {
            return Err(c.error_at(
                attr.name_pos,
                format!("attribute '{}' is given twice", attr.name),
            ));
        }
        self.list.push(attr);
        Ok(())
    }

    /// Removes and returns the attribute with this name.
    pub(crate) fn take(&mut self, name: &str) -> Option<RawAttr<'a>> {
        let i = self.list.iter().position(|a| a.name == name)?;
        Some(self.list.remove(i))
    }

    /// Everything not taken yet.
    pub(crate) fn drain(&mut self) -> Vec<RawAttr<'a>> {
        std::mem::take(&mut self.list)
    }

    /// Fails on the first attribute nobody took.
    pub(crate) fn finish(self, c: &Cursor<'a>, opcode: &str, known: &[&str]) -> Result<()> {
        match self.list.first() {
            None => Ok(()),
            Some(a) => {
                let hint = if known.is_empty() {
                    format!("'{opcode}' takes no attributes")
                } else {
                    format!("'{opcode}' takes {}", known.join(", "))
                };
                Err(c.error_at(
                    a.name_pos,
                    format!("unknown attribute '{}' for {opcode}: {hint}", a.name),
                ))
            }
        }
    }
}

/// Parses an attribute's value with `parse`, requiring that it consumes all of it.
pub(crate) fn value<'a, T>(
    c: &Cursor<'a>,
    attr: RawAttr<'a>,
    parse: impl FnOnce(&mut Cursor<'a>) -> Result<T>,
) -> Result<T> {
    let mut sub = c.sub(attr.start, attr.end);
    let v = parse(&mut sub)?;
    sub.expect_end(&format!("the value of '{}'", attr.name))?;
    Ok(v)
}

/// Resolves a computation name to an id (allocating one on first reference).
pub(crate) trait ComputationRefs {
    fn reference(&mut self, name: &str, pos: usize) -> CompId;
    /// A computation written in place (`to_apply={ ... }`): the byte span of its braces,
    /// parsed once the current instruction is done.
    fn inline(&mut self, start: usize, end: usize) -> CompId;
}

/// Opcodes XLA defines that ipuxla reads, checks and prints but does not model
/// ([`Op::Foreign`]).
const KNOWN_UNSUPPORTED: &[&str] = &[
    "add-dependency",
    "all-gather-start",
    "all-gather-done",
    "all-reduce-start",
    "all-reduce-done",
    "async-start",
    "async-update",
    "async-done",
    "batch-norm-grad",
    "batch-norm-inference",
    "batch-norm-training",
    "cholesky",
    "collective-broadcast",
    "collective-permute-start",
    "collective-permute-done",
    "complex",
    "composite",
    "copy-start",
    "copy-done",
    "domain",
    "dynamic-reshape",
    "fft",
    "get-dimension-size",
    "imag",
    "scan",
    "ragged-all-to-all",
    "real",
    "recv",
    "recv-done",
    "rng",
    "rng-get-and-update-state",
    "send",
    "send-done",
    "set-dimension-size",
    "stochastic-convert",
    "triangular-solve",
];

struct Builder<'c, 'a> {
    c: &'c Cursor<'a>,
    attrs: Attrs<'a>,
    opcode: &'a str,
    opcode_pos: usize,
    known: Vec<&'static str>,
}

impl<'a> Builder<'_, 'a> {
    fn optional<T>(
        &mut self,
        name: &'static str,
        parse: impl FnOnce(&mut Cursor<'a>) -> Result<T>,
    ) -> Result<Option<T>> {
        self.known.push(name);
        match self.attrs.take(name) {
            Some(a) => value(self.c, a, parse).map(Some),
            None => Ok(None),
        }
    }

    fn required<T>(
        &mut self,
        name: &'static str,
        parse: impl FnOnce(&mut Cursor<'a>) -> Result<T>,
    ) -> Result<T> {
        let opcode = self.opcode;
        let pos = self.opcode_pos;
        self.optional(name, parse)?.ok_or_else(|| {
            self.c
                .error_at(pos, format!("{opcode} needs the attribute {name}="))
        })
    }

    fn dims(&mut self, name: &'static str) -> Result<Vec<i64>> {
        self.required(name, values::int_list)
    }

    fn dims_or_empty(&mut self, name: &'static str) -> Result<Vec<i64>> {
        Ok(self.optional(name, values::int_list)?.unwrap_or_default())
    }

    fn single_dim(&mut self, name: &'static str) -> Result<i64> {
        let pos = self.opcode_pos;
        let dims = self.dims(name)?;
        match dims[..] {
            [d] => Ok(d),
            _ => Err(self.c.error_at(
                pos,
                format!(
                    "{} needs exactly one entry in {name}=, found {}",
                    self.opcode,
                    dims.len()
                ),
            )),
        }
    }

    fn int(&mut self, name: &'static str) -> Result<i64> {
        self.required(name, |c| c.int())
    }

    fn flag(&mut self, name: &'static str) -> Result<bool> {
        Ok(self.optional(name, values::boolean)?.unwrap_or(false))
    }

    fn comp(&mut self, name: &'static str, comps: &mut dyn ComputationRefs) -> Result<CompId> {
        self.required(name, |c| computation_ref(c, comps))
    }

    /// `channel_id`, `replica_groups` (default: one group of every replica),
    /// `use_global_device_ids`, `constrain_layout`.
    fn collective(&mut self) -> Result<crate::collective::CollectiveAttrs> {
        Ok(crate::collective::CollectiveAttrs {
            channel_id: self.optional("channel_id", |c| c.int())?,
            replica_groups: self
                .optional("replica_groups", values::replica_groups)?
                .unwrap_or(crate::collective::ReplicaGroups::Listed(Vec::new())),
            use_global_device_ids: self.flag("use_global_device_ids")?,
            constrain_layout: self.flag("constrain_layout")?,
        })
    }

    fn precision(&mut self) -> Result<Vec<crate::attributes::Precision>> {
        let a = self.optional("operand_precision", values::precision_list)?;
        let b = self.optional("precision_config", values::precision_list)?;
        Ok(a.or(b).unwrap_or_default())
    }
}

fn computation_ref(c: &mut Cursor<'_>, comps: &mut dyn ComputationRefs) -> Result<CompId> {
    if c.peek() == Some(b'{') {
        let (start, end) = c.raw_value()?;
        return Ok(comps.inline(start, end));
    }
    c.skip_trivia();
    let pos = c.pos();
    let name = c.name("a computation name")?;
    Ok(comps.reference(name, pos))
}

fn computation_list(c: &mut Cursor<'_>, comps: &mut dyn ComputationRefs) -> Result<Vec<CompId>> {
    c.expect(b'{')?;
    let mut out = Vec::new();
    while !c.eat(b'}') {
        out.push(computation_ref(c, comps)?);
        if !c.eat(b',') && c.peek() != Some(b'}') {
            return Err(c.expected("',' or '}' in a computation list"));
        }
    }
    Ok(out)
}

/// Attributes that name computations; a foreign op keeps them as computation ids.
const COMPUTATION_ATTRIBUTES: &[&str] = &[
    "calls",
    "to_apply",
    "called_computations",
    "branch_computations",
    "condition",
    "body",
    "true_computation",
    "false_computation",
    "select",
    "scatter",
];

/// Unary ops XLA lets carry `result_accuracy` (its transcendental functions).
const RESULT_ACCURACY_OPS: &[&str] = &[
    "exponential",
    "exponential-minus-one",
    "log",
    "log-plus-one",
    "rsqrt",
    "sqrt",
    "cbrt",
    "tanh",
    "logistic",
    "sine",
    "cosine",
    "tan",
    "erf",
];

/// True for XLA's async sugar: `X-start`, `X-update`, `X-done` for an op `X`
/// (`custom-call-start` is an `async-start` wrapping a custom call). Ops with their own
/// start/done pairs (`copy-start`, `all-reduce-start`, ...) are not sugar.
pub(crate) fn async_sugar(opcode: &str) -> Option<(&str, &str)> {
    if KNOWN_UNSUPPORTED.contains(&opcode) {
        return None;
    }
    ["-start", "-update", "-done"]
        .into_iter()
        .find_map(|suffix| {
            let wrapped = opcode.strip_suffix(suffix)?;
            let known = UnaryOp::ALL.iter().any(|u| u.name() == wrapped)
                || BinaryOp::ALL.iter().any(|b| b.name() == wrapped)
                || matches!(
                    wrapped,
                    "custom-call"
                        | "compare"
                        | "select"
                        | "convert"
                        | "reduce"
                        | "dot"
                        | "convolution"
                        | "fusion"
                        | "call"
                        | "sort"
                        | "scatter"
                        | "gather"
                        | "reduce-scatter"
                        | "all-to-all"
                        | "ragged-all-to-all"
                );
            known.then_some((wrapped, &suffix[1..]))
        })
}

/// Takes the attributes XLA prints that never change the value, checking what XLA checks:
/// `origin`, `statistics`; `result_accuracy` on transcendental ops; a parameter's
/// `parameter_replication`; a call's `is_composite`, a dot's `algorithm`, a collective's
/// `mode`, a convolution's `conv_kind`, a fusion's `output_to_operand_aliasing`.
pub(crate) fn extra_attributes<'a>(
    c: &Cursor<'a>,
    opcode: &str,
    attrs: &mut Attrs<'a>,
    shape: Option<&crate::Shape>,
) -> Result<Vec<(String, String)>> {
    let mut names: Vec<&str> = vec!["origin", "statistics"];
    if RESULT_ACCURACY_OPS.contains(&opcode) {
        names.push("result_accuracy");
    }
    match opcode {
        "parameter" => names.push("parameter_replication"),
        "call" => names.push("is_composite"),
        "dot" => names.push("algorithm"),
        "all-reduce" | "reduce-scatter" | "all-gather" | "all-to-all" => names.push("mode"),
        "convolution" => names.push("conv_kind"),
        "fusion" => names.push("output_to_operand_aliasing"),
        _ => {}
    }
    let mut out = Vec::new();
    for name in names {
        let Some(a) = attrs.take(name) else { continue };
        match name {
            "result_accuracy" => value(c, a, values::result_accuracy)?,
            "parameter_replication" => {
                let flags = value(c, a, values::bool_list)?;
                if let Some(shape) = shape {
                    let leaves = shape.leaf_arrays().len();
                    if flags.len() != leaves && flags.len() != 1 {
                        return Err(c.error_at(
                            a.name_pos,
                            format!(
                                "parameter has {leaves} leaf buffers, but parameter_replication has {} elements",
                                flags.len()
                            ),
                        ));
                    }
                }
            }
            "is_composite" => {
                value(c, a, values::boolean)?;
            }
            _ => {}
        }
        out.push((name.to_string(), c.slice(a.start, a.end).to_string()));
    }
    Ok(out)
}

/// Builds an op ipuxla does not model: computations resolved, everything else verbatim.
fn foreign<'a>(
    c: &Cursor<'a>,
    opcode: &str,
    mut attrs: Attrs<'a>,
    comps: &mut dyn ComputationRefs,
) -> Result<Op> {
    let mut called = Vec::new();
    let mut attributes = Vec::new();
    // Which computation attributes the op takes (sugar takes its wrapped op's).
    let takes: &[&str] = match opcode {
        "async-start" | "async-update" | "async-done" => &["calls"],
        "all-reduce-start" | "scan" => &["to_apply"],
        _ if async_sugar(opcode).is_some() => COMPUTATION_ATTRIBUTES,
        _ => &[],
    };
    for a in attrs.drain() {
        if COMPUTATION_ATTRIBUTES.contains(&a.name) && !takes.contains(&a.name) {
            return Err(c.error_at(
                a.name_pos,
                format!("unexpected attribute \"{}\" for {opcode}", a.name),
            ));
        }
        if COMPUTATION_ATTRIBUTES.contains(&a.name) {
            let list = value(c, a, |c| {
                if c.peek() == Some(b'{') {
                    computation_list(c, comps)
                } else {
                    computation_ref(c, comps).map(|id| vec![id])
                }
            })?;
            called.push((a.name.to_string(), list));
        } else {
            attributes.push((a.name.to_string(), c.slice(a.start, a.end).to_string()));
        }
    }
    Ok(Op::Foreign {
        opcode: opcode.to_string(),
        called,
        attributes,
    })
}

/// Builds the op for `opcode` from `attrs` (common annotations already taken out).
pub(crate) fn build_op<'a>(
    c: &Cursor<'a>,
    opcode: &'a str,
    opcode_pos: usize,
    attrs: Attrs<'a>,
    comps: &mut dyn ComputationRefs,
    operand_count: usize,
) -> Result<Op> {
    if KNOWN_UNSUPPORTED.contains(&opcode) || async_sugar(opcode).is_some() {
        return foreign(c, opcode, attrs, comps);
    }
    // In-place (`slice_sizes`, four operands) and combined (several operands)
    // collective-permutes are read and printed but not modelled.
    if opcode == "collective-permute"
        && (operand_count != 1 || attrs.list.iter().any(|a| a.name == "slice_sizes"))
    {
        return foreign(c, opcode, attrs, comps);
    }
    let mut b = Builder {
        c,
        attrs,
        opcode,
        opcode_pos,
        known: Vec::new(),
    };
    if let Some(u) = UnaryOp::ALL.into_iter().find(|u| u.name() == opcode) {
        return finish(b, Op::Unary(u));
    }
    if let Some(bin) = BinaryOp::ALL.into_iter().find(|x| x.name() == opcode) {
        return finish(b, Op::Binary(bin));
    }
    let op = match opcode {
        "compare" => Op::Compare {
            direction: b.required("direction", values::direction)?,
            compare_type: b.optional("type", values::compare_type)?,
        },
        "select" => Op::Select,
        "clamp" => Op::Clamp,
        "convert" => Op::Convert,
        "bitcast-convert" => Op::BitcastConvert,
        "bitcast" => Op::Bitcast,
        "reshape" => Op::Reshape,
        "tuple" => Op::Tuple,
        "dynamic-update-slice" => Op::DynamicUpdateSlice,
        "after-all" => Op::AfterAll,
        "all-reduce" => Op::AllReduce {
            attrs: b.collective()?,
            to_apply: b.comp("to_apply", comps)?,
        },
        "all-gather" => Op::AllGather {
            attrs: b.collective()?,
            dimension: b.single_dim("dimensions")?,
        },
        "reduce-scatter" => Op::ReduceScatter {
            attrs: b.collective()?,
            dimension: b.single_dim("dimensions")?,
            to_apply: b.comp("to_apply", comps)?,
        },
        "all-to-all" => {
            let attrs = b.collective()?;
            let dims = b.dims_or_empty("dimensions")?;
            let dimension = match dims[..] {
                [] => None,
                [d] => Some(d),
                _ => {
                    return Err(c.error_at(
                        opcode_pos,
                        "all-to-all takes at most one entry in dimensions=",
                    ));
                }
            };
            Op::AllToAll { attrs, dimension }
        }
        "collective-permute" => Op::CollectivePermute {
            channel_id: b.optional("channel_id", |c| c.int())?,
            pairs: b.required("source_target_pairs", values::pairs)?,
        },
        "replica-id" => Op::ReplicaId,
        "rng-bit-generator" => Op::RngBitGenerator {
            algorithm: b.required("algorithm", |c| {
                let pos = c.pos();
                match c.word() {
                    Some("rng_default") => Ok(crate::op::RngAlgorithm::Default),
                    Some("rng_philox") => Ok(crate::op::RngAlgorithm::Philox),
                    Some("rng_three_fry") => Ok(crate::op::RngAlgorithm::ThreeFry),
                    _ => {
                        Err(c
                            .error_at(pos, "algorithm is rng_default, rng_philox or rng_three_fry"))
                    }
                }
            })?,
        },
        "partition-id" => Op::PartitionId,
        "infeed" => Op::Infeed {
            config: b
                .optional("infeed_config", |c| c.string())?
                .unwrap_or_default(),
        },
        "outfeed" => Op::Outfeed {
            shape: b.optional("outfeed_shape", values::shape)?,
            config: b
                .optional("outfeed_config", |c| c.string())?
                .unwrap_or_default(),
        },
        "opt-barrier" => Op::OptimizationBarrier,
        "reduce-precision" => Op::ReducePrecision {
            exponent_bits: b.int("exponent_bits")?,
            mantissa_bits: b.int("mantissa_bits")?,
        },
        "broadcast" => Op::Broadcast {
            // XLA lets a scalar's broadcast leave out `dimensions={}`.
            dimensions: b.dims_or_empty("dimensions")?,
        },
        "transpose" => Op::Transpose {
            dimensions: b.dims("dimensions")?,
        },
        "reverse" => Op::Reverse {
            dimensions: b.dims("dimensions")?,
        },
        "slice" => Op::Slice {
            slices: b.required("slice", values::slices)?,
        },
        "concatenate" => Op::Concatenate {
            dimension: b.single_dim("dimensions")?,
        },
        "pad" => Op::Pad {
            padding: b.required("padding", values::padding)?,
        },
        "iota" => Op::Iota {
            dimension: b.int("iota_dimension")?,
        },
        "dynamic-slice" => Op::DynamicSlice {
            sizes: b.dims("dynamic_slice_sizes")?,
        },
        "gather" => Op::Gather {
            dims: GatherDims {
                offset_dims: b.dims("offset_dims")?,
                collapsed_slice_dims: b.dims_or_empty("collapsed_slice_dims")?,
                start_index_map: b.dims("start_index_map")?,
                operand_batching_dims: b.dims_or_empty("operand_batching_dims")?,
                start_indices_batching_dims: b.dims_or_empty("start_indices_batching_dims")?,
                index_vector_dim: b.int("index_vector_dim")?,
            },
            slice_sizes: b.dims("slice_sizes")?,
            indices_are_sorted: b.flag("indices_are_sorted")?,
        },
        "scatter" => Op::Scatter {
            dims: ScatterDims {
                update_window_dims: b.dims("update_window_dims")?,
                inserted_window_dims: b.dims_or_empty("inserted_window_dims")?,
                scatter_dims_to_operand_dims: b.dims("scatter_dims_to_operand_dims")?,
                input_batching_dims: b.dims_or_empty("input_batching_dims")?,
                scatter_indices_batching_dims: b.dims_or_empty("scatter_indices_batching_dims")?,
                index_vector_dim: b.int("index_vector_dim")?,
            },
            indices_are_sorted: b.flag("indices_are_sorted")?,
            unique_indices: b.flag("unique_indices")?,
            to_apply: b.comp("to_apply", comps)?,
        },
        "sort" => Op::Sort {
            dimension: b.single_dim("dimensions")?,
            is_stable: b.flag("is_stable")?,
            comparator: b.comp("to_apply", comps)?,
        },
        "reduce" => Op::Reduce {
            dimensions: b.dims("dimensions")?,
            to_apply: b.comp("to_apply", comps)?,
        },
        "reduce-window" => Op::ReduceWindow {
            // A scalar's window is empty and XLA leaves it out.
            window: b.optional("window", values::window)?.unwrap_or_default(),
            to_apply: b.comp("to_apply", comps)?,
        },
        "select-and-scatter" => Op::SelectAndScatter {
            window: b.optional("window", values::window)?.unwrap_or_default(),
            select: b.comp("select", comps)?,
            scatter: b.comp("scatter", comps)?,
        },
        "convolution" => Op::Convolution {
            window: b.optional("window", values::window)?.unwrap_or_default(),
            dims: b.required("dim_labels", values::conv_dims)?,
            feature_group_count: b.optional("feature_group_count", |c| c.int())?.unwrap_or(1),
            batch_group_count: b.optional("batch_group_count", |c| c.int())?.unwrap_or(1),
            precision: b.precision()?,
        },
        "dot" => Op::Dot {
            dims: DotDims {
                lhs_batch: b.dims_or_empty("lhs_batch_dims")?,
                lhs_contracting: b.dims_or_empty("lhs_contracting_dims")?,
                rhs_batch: b.dims_or_empty("rhs_batch_dims")?,
                rhs_contracting: b.dims_or_empty("rhs_contracting_dims")?,
            },
            precision: b.precision()?,
        },
        "get-tuple-element" => Op::GetTupleElement {
            index: b.int("index")?,
        },
        "while" => Op::While {
            condition: b.comp("condition", comps)?,
            body: b.comp("body", comps)?,
        },
        "conditional" => {
            let listed = b.optional("branch_computations", |c| computation_list(c, comps))?;
            let on_true = b.optional("true_computation", |c| computation_ref(c, comps))?;
            let on_false = b.optional("false_computation", |c| computation_ref(c, comps))?;
            let branches = match (listed, on_true, on_false) {
                (Some(list), None, None) => list,
                (None, Some(t), Some(f)) => vec![t, f],
                _ => {
                    return Err(c.error_at(
                        opcode_pos,
                        "conditional needs either branch_computations={..} or both true_computation= and false_computation=",
                    ));
                }
            };
            Op::Conditional { branches }
        }
        "call" => Op::Call {
            to_apply: b.comp("to_apply", comps)?,
        },
        "fusion" => Op::Fusion {
            kind: b.required("kind", values::fusion_kind)?,
            calls: b.comp("calls", comps)?,
        },
        "map" => Op::Map {
            dimensions: b.dims_or_empty("dimensions")?,
            to_apply: b.comp("to_apply", comps)?,
        },
        "topk" => Op::TopK {
            k: b.int("k")?,
            largest: b.optional("largest", values::boolean)?.unwrap_or(true),
        },
        "custom-call" => {
            let target = b.required("custom_call_target", |c| c.string())?;
            if let Some(a) = b.attrs.list.iter().find(|a| a.name == "api_version") {
                let version = c.slice(a.start, a.end);
                match version {
                    "API_VERSION_ORIGINAL"
                    | "API_VERSION_STATUS_RETURNING"
                    | "API_VERSION_STATUS_RETURNING_UNIFIED"
                    | "API_VERSION_TYPED_FFI" => {}
                    "API_VERSION_UNSPECIFIED" => {
                        return Err(
                            c.error_at(a.start, "Invalid API version API_VERSION_UNSPECIFIED")
                        );
                    }
                    other => {
                        return Err(c.error_at(a.start, format!("Unknown API version {other}")));
                    }
                }
            }
            if let Some(a) = b
                .attrs
                .list
                .iter()
                .find(|a| a.name == "operand_layout_constraints")
            {
                let given = value(c, *a, values::shape_list)?.len();
                if given != operand_count {
                    return Err(c.error_at(
                        a.start,
                        format!(
                            "Expected {operand_count} operand layout constraints, {given} given"
                        ),
                    ));
                }
            }
            let called_computations = b
                .optional("called_computations", |c| computation_list(c, comps))?
                .unwrap_or_default();
            // Custom calls are open-ended: keep every other attribute verbatim.
            let attributes = b
                .attrs
                .drain()
                .into_iter()
                .map(|a| (a.name.to_string(), c.slice(a.start, a.end).to_string()))
                .collect();
            Op::CustomCall {
                target,
                called_computations,
                attributes,
            }
        }
        "parameter" | "constant" => {
            return Err(c.error_at(
                opcode_pos,
                format!("{opcode} takes its value in parentheses"),
            ));
        }
        _ => return Err(c.error_at(opcode_pos, format!("unknown opcode '{opcode}'"))),
    };
    finish(b, op)
}

fn finish(b: Builder<'_, '_>, op: Op) -> Result<Op> {
    let known = b.known.clone();
    b.attrs.finish(b.c, b.opcode, &known)?;
    Ok(op)
}
