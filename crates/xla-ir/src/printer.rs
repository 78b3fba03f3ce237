//! The canonical HLO text printer: what snapshot tests compare and what `ipuxla dump` prints.
//!
//! The form follows XLA's own printer (`jax ... as_text("hlo")`): names without `%`,
//! computations after the computations they call, signatures omitted, op attributes in
//! XLA's order, then `sharding`, `frontend_attributes`, `control-predecessors`, `metadata`
//! and `backend_config`. `parse(print(m))` prints identically.

use crate::attributes::{Precision, write_dim_list};
use crate::ids::CompId;
use crate::metadata::frontend_attributes_text;
use crate::shape::write_indexed_list;
use crate::{Computation, Instruction, Module, Op, Shape};
use std::fmt::{self, Write};

impl fmt::Display for Module {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HloModule {}", self.name)?;
        if self.is_scheduled {
            f.write_str(", is_scheduled=true")?;
        }
        if !self.input_output_alias.is_empty() {
            let aliases = crate::alias::aliases_text(&self.input_output_alias);
            write!(f, ", input_output_alias={aliases}")?;
        }
        if let Some(layout) = &self.entry_computation_layout {
            f.write_str(", entry_computation_layout={(")?;
            write_indexed_list(f, &layout.parameters, |f, s| write!(f, "{s}"))?;
            write!(f, ")->{}}}", layout.result)?;
        }
        if let Some(n) = self.replica_count {
            write!(f, ", replica_count={n}")?;
        }
        if let Some(n) = self.num_partitions {
            write!(f, ", num_partitions={n}")?;
        }
        for (key, value) in &self.header_attributes {
            write!(f, ", {key}={value}")?;
        }
        f.write_str("\n\n")?;
        if !self.debug_tables.is_empty() {
            write!(f, "{}", self.debug_tables)?;
        }
        for id in self.post_order() {
            print_computation(f, self, id)?;
            f.write_str("\n")?;
        }
        Ok(())
    }
}

/// Prints one computation, `ENTRY` marked, as it appears in a module.
pub fn print_computation(f: &mut impl Write, module: &Module, id: CompId) -> fmt::Result {
    let comp = module.computation(id);
    if id == module.entry {
        f.write_str("ENTRY ")?;
    }
    writeln!(f, "{} {{", comp.name)?;
    for (instr_id, instr) in comp.instructions() {
        f.write_str("  ")?;
        if instr_id == comp.root {
            f.write_str("ROOT ")?;
        }
        print_instruction(f, module, comp, instr)?;
        f.write_str("\n")?;
    }
    f.write_str("}\n")
}

/// Prints one instruction (without indentation or `ROOT`).
pub fn print_instruction(
    f: &mut impl Write,
    module: &Module,
    comp: &Computation,
    instr: &Instruction,
) -> fmt::Result {
    write!(f, "{} = {} {}(", instr.name, instr.shape, instr.op.name())?;
    match &instr.op {
        Op::Parameter { number } => write!(f, "{number}")?,
        Op::Constant { literal } => write!(f, "{literal}")?,
        Op::ElidedConstant => f.write_str("{...}")?,
        _ => {
            let names: Vec<&str> = instr
                .operands
                .iter()
                .map(|id| comp.instr(*id).name.as_str())
                .collect();
            f.write_str(&names.join(", "))?;
        }
    }
    f.write_str(")")?;
    let mut attrs = AttrWriter { f };
    write_op_attributes(&mut attrs, module, comp, instr)?;
    if let Some(sharding) = &instr.sharding {
        attrs.attr("sharding", sharding)?;
    }
    if !instr.frontend_attributes.is_empty() {
        attrs.attr(
            "frontend_attributes",
            frontend_attributes_text(&instr.frontend_attributes),
        )?;
    }
    if !instr.control_predecessors.is_empty() {
        let names: Vec<&str> = instr
            .control_predecessors
            .iter()
            .map(|id| comp.instr(*id).name.as_str())
            .collect();
        attrs.attr("control-predecessors", format!("{{{}}}", names.join(", ")))?;
    }
    if !instr.metadata.is_empty() {
        attrs.attr("metadata", &instr.metadata)?;
    }
    if let Some(config) = &instr.backend_config {
        attrs.attr("backend_config", config)?;
    }
    for (key, value) in &instr.extra_attributes {
        attrs.attr(key, value)?;
    }
    Ok(())
}

/// Writes `, key=value` pairs.
struct AttrWriter<'a, W: Write> {
    f: &'a mut W,
}

impl<W: Write> AttrWriter<'_, W> {
    fn attr(&mut self, key: &str, value: impl fmt::Display) -> fmt::Result {
        write!(self.f, ", {key}={value}")
    }

    fn dims(&mut self, key: &str, values: &[i64]) -> fmt::Result {
        write!(self.f, ", {key}=")?;
        write_dim_list(self.f, values)
    }

    fn comp(&mut self, key: &str, module: &Module, id: CompId) -> fmt::Result {
        self.attr(key, &module.computation(id).name)
    }

    /// A collective's attributes in XLA's order (`dimensions` after the groups).
    fn collective(
        &mut self,
        attrs: &crate::collective::CollectiveAttrs,
        dimension: Option<i64>,
    ) -> fmt::Result {
        if let Some(id) = attrs.channel_id {
            self.attr("channel_id", id)?;
        }
        self.attr("replica_groups", &attrs.replica_groups)?;
        if let Some(d) = dimension {
            self.attr("dimensions", format!("{{{d}}}"))?;
        }
        if attrs.use_global_device_ids {
            self.attr("use_global_device_ids", true)?;
        }
        if attrs.constrain_layout {
            self.attr("constrain_layout", true)?;
        }
        Ok(())
    }

    fn precision(&mut self, precision: &[Precision]) -> fmt::Result {
        if precision.iter().all(|p| *p == Precision::Default) {
            return Ok(());
        }
        let names: Vec<&str> = precision.iter().map(|p| p.name()).collect();
        self.attr("operand_precision", format!("{{{}}}", names.join(",")))
    }
}

fn write_op_attributes<W: Write>(
    a: &mut AttrWriter<'_, W>,
    module: &Module,
    comp: &Computation,
    instr: &Instruction,
) -> fmt::Result {
    match &instr.op {
        Op::Compare {
            direction,
            compare_type,
        } => {
            a.attr("direction", direction.name())?;
            if let Some(t) = compare_type {
                a.attr("type", t.name())?;
            }
        }
        Op::ReducePrecision {
            exponent_bits,
            mantissa_bits,
        } => {
            a.attr("exponent_bits", exponent_bits)?;
            a.attr("mantissa_bits", mantissa_bits)?;
        }
        Op::Broadcast { dimensions }
        | Op::Transpose { dimensions }
        | Op::Reverse { dimensions } => a.dims("dimensions", dimensions)?,
        Op::Slice { slices } => {
            let parts: Vec<String> = slices
                .iter()
                .map(|s| {
                    if s.stride == 1 {
                        format!("[{}:{}]", s.start, s.limit)
                    } else {
                        format!("[{}:{}:{}]", s.start, s.limit, s.stride)
                    }
                })
                .collect();
            a.attr("slice", format!("{{{}}}", parts.join(", ")))?;
        }
        Op::Concatenate { dimension } => a.dims("dimensions", &[*dimension])?,
        Op::Pad { padding } => {
            // XLA prints the interior part on every dimension once any has one.
            let any_interior = padding.iter().any(|p| p.interior != 0);
            let parts: Vec<String> = padding
                .iter()
                .map(|p| {
                    if !any_interior {
                        format!("{}_{}", p.low, p.high)
                    } else {
                        format!("{}_{}_{}", p.low, p.high, p.interior)
                    }
                })
                .collect();
            a.attr("padding", parts.join("x"))?;
        }
        Op::Iota { dimension } => a.attr("iota_dimension", dimension)?,
        Op::DynamicSlice { sizes } => a.dims("dynamic_slice_sizes", sizes)?,
        Op::Gather {
            dims,
            slice_sizes,
            indices_are_sorted,
        } => {
            a.dims("offset_dims", &dims.offset_dims)?;
            a.dims("collapsed_slice_dims", &dims.collapsed_slice_dims)?;
            a.dims("start_index_map", &dims.start_index_map)?;
            if !dims.operand_batching_dims.is_empty() {
                a.dims("operand_batching_dims", &dims.operand_batching_dims)?;
                a.dims(
                    "start_indices_batching_dims",
                    &dims.start_indices_batching_dims,
                )?;
            }
            a.attr("index_vector_dim", dims.index_vector_dim)?;
            a.dims("slice_sizes", slice_sizes)?;
            if *indices_are_sorted {
                a.attr("indices_are_sorted", true)?;
            }
        }
        Op::Scatter {
            dims,
            to_apply,
            indices_are_sorted,
            unique_indices,
        } => {
            a.dims("update_window_dims", &dims.update_window_dims)?;
            a.dims("inserted_window_dims", &dims.inserted_window_dims)?;
            a.dims(
                "scatter_dims_to_operand_dims",
                &dims.scatter_dims_to_operand_dims,
            )?;
            if !dims.input_batching_dims.is_empty() {
                a.dims("input_batching_dims", &dims.input_batching_dims)?;
                a.dims(
                    "scatter_indices_batching_dims",
                    &dims.scatter_indices_batching_dims,
                )?;
            }
            a.attr("index_vector_dim", dims.index_vector_dim)?;
            if *indices_are_sorted {
                a.attr("indices_are_sorted", true)?;
            }
            if *unique_indices {
                a.attr("unique_indices", true)?;
            }
            a.comp("to_apply", module, *to_apply)?;
        }
        Op::Sort {
            dimension,
            is_stable,
            comparator,
        } => {
            a.dims("dimensions", &[*dimension])?;
            if *is_stable {
                a.attr("is_stable", true)?;
            }
            a.comp("to_apply", module, *comparator)?;
        }
        Op::Reduce {
            dimensions,
            to_apply,
        } => {
            a.dims("dimensions", dimensions)?;
            a.comp("to_apply", module, *to_apply)?;
        }
        Op::ReduceWindow { window, to_apply } => {
            if !window.dims.is_empty() {
                a.attr("window", window)?;
            }
            a.comp("to_apply", module, *to_apply)?;
        }
        Op::SelectAndScatter {
            window,
            select,
            scatter,
        } => {
            if !window.dims.is_empty() {
                a.attr("window", window)?;
            }
            a.comp("select", module, *select)?;
            a.comp("scatter", module, *scatter)?;
        }
        Op::Convolution {
            window,
            dims,
            feature_group_count,
            batch_group_count,
            precision,
        } => {
            if !window.dims.is_empty() {
                a.attr("window", window)?;
            }
            a.attr("dim_labels", dims)?;
            if *feature_group_count != 1 {
                a.attr("feature_group_count", feature_group_count)?;
            }
            if *batch_group_count != 1 {
                a.attr("batch_group_count", batch_group_count)?;
            }
            a.precision(precision)?;
        }
        Op::Dot { dims, precision } => {
            if !dims.lhs_batch.is_empty() {
                a.dims("lhs_batch_dims", &dims.lhs_batch)?;
            }
            a.dims("lhs_contracting_dims", &dims.lhs_contracting)?;
            if !dims.rhs_batch.is_empty() {
                a.dims("rhs_batch_dims", &dims.rhs_batch)?;
            }
            a.dims("rhs_contracting_dims", &dims.rhs_contracting)?;
            a.precision(precision)?;
        }
        Op::GetTupleElement { index } => a.attr("index", index)?,
        Op::While { condition, body } => {
            a.comp("condition", module, *condition)?;
            a.comp("body", module, *body)?;
        }
        Op::Conditional { branches } => {
            let selector_is_pred = instr
                .operands
                .first()
                .and_then(|id| comp.instr(*id).shape.as_array())
                .is_some_and(|s| s.element_type == crate::ElementType::Pred);
            if selector_is_pred && branches.len() == 2 {
                a.comp("true_computation", module, branches[0])?;
                a.comp("false_computation", module, branches[1])?;
            } else {
                let names: Vec<&str> = branches
                    .iter()
                    .map(|b| module.computation(*b).name.as_str())
                    .collect();
                a.attr("branch_computations", format!("{{{}}}", names.join(", ")))?;
            }
        }
        Op::Call { to_apply } => a.comp("to_apply", module, *to_apply)?,
        Op::Fusion { kind, calls } => {
            a.attr("kind", kind.name())?;
            a.comp("calls", module, *calls)?;
        }
        Op::Map {
            dimensions,
            to_apply,
        } => {
            a.dims("dimensions", dimensions)?;
            a.comp("to_apply", module, *to_apply)?;
        }
        Op::TopK { k, largest } => {
            a.attr("k", k)?;
            a.attr("largest", largest)?;
        }
        Op::CustomCall {
            target,
            called_computations,
            attributes,
        } => {
            a.attr(
                "custom_call_target",
                format!("\"{}\"", crate::metadata::escape_string(target)),
            )?;
            if !called_computations.is_empty() {
                let names: Vec<&str> = called_computations
                    .iter()
                    .map(|c| module.computation(*c).name.as_str())
                    .collect();
                a.attr("called_computations", format!("{{{}}}", names.join(", ")))?;
            }
            for (key, value) in attributes {
                a.attr(key, value)?;
            }
        }
        Op::AllReduce { attrs, to_apply } => {
            a.collective(attrs, None)?;
            a.comp("to_apply", module, *to_apply)?;
        }
        Op::AllGather { attrs, dimension } => a.collective(attrs, Some(*dimension))?,
        Op::ReduceScatter {
            attrs,
            dimension,
            to_apply,
        } => {
            a.collective(attrs, Some(*dimension))?;
            a.comp("to_apply", module, *to_apply)?;
        }
        Op::AllToAll { attrs, dimension } => a.collective(attrs, *dimension)?,
        Op::CollectivePermute { channel_id, pairs } => {
            if let Some(id) = channel_id {
                a.attr("channel_id", id)?;
            }
            let inner: Vec<String> = pairs.iter().map(|(s, t)| format!("{{{s},{t}}}")).collect();
            a.attr("source_target_pairs", format!("{{{}}}", inner.join(",")))?;
        }
        Op::RngBitGenerator { algorithm } => a.attr("algorithm", algorithm.name())?,
        Op::Foreign {
            called, attributes, ..
        } => {
            for (key, comps) in called {
                let names: Vec<&str> = comps
                    .iter()
                    .map(|c| module.computation(*c).name.as_str())
                    .collect();
                if key == "called_computations" || key == "branch_computations" {
                    a.attr(key, format!("{{{}}}", names.join(", ")))?;
                } else {
                    a.attr(key, names.join(", "))?;
                }
            }
            for (key, value) in attributes {
                a.attr(key, value)?;
            }
        }
        Op::Infeed { config } => {
            if !config.is_empty() {
                a.attr(
                    "infeed_config",
                    format!("\"{}\"", crate::metadata::escape_string(config)),
                )?;
            }
        }
        Op::Outfeed { config, shape } => {
            if let Some(shape) = shape {
                a.attr("outfeed_shape", shape)?;
            }
            if !config.is_empty() {
                a.attr(
                    "outfeed_config",
                    format!("\"{}\"", crate::metadata::escape_string(config)),
                )?;
            }
        }
        Op::Parameter { .. }
        | Op::Constant { .. }
        | Op::Unary(_)
        | Op::Binary(_)
        | Op::Select
        | Op::Clamp
        | Op::Convert
        | Op::BitcastConvert
        | Op::Bitcast
        | Op::Reshape
        | Op::DynamicUpdateSlice
        | Op::Tuple
        | Op::ReplicaId
        | Op::PartitionId
        | Op::AfterAll
        | Op::ElidedConstant
        | Op::OptimizationBarrier => {}
    }
    Ok(())
}

/// Prints a shape list as a computation signature would (used in error messages).
pub fn shapes_text(shapes: &[Shape]) -> String {
    let mut s = String::new();
    let _ = write_indexed_list(&mut s, shapes, |f, x| write!(f, "{x}"));
    s
}
