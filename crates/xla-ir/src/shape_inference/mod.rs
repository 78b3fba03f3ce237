//! Shape inference: the result shape of every opcode from its operands and attributes.
//!
//! One function, [`infer_shape`], serves both the verifier (which compares the result with
//! the declared shape) and the builder (which uses it as the instruction's shape). Ops
//! whose result is not determined by their operands (`reshape`, `convert`, `iota`, ...)
//! take it from `declared` and check that it is consistent. Errors are sentences that say
//! what was expected; the caller adds the instruction's name and location.

pub mod collective;
mod control;
mod data_movement;

pub use data_movement::vector_start_indices;
mod elementwise;
mod gather_scatter;
mod linalg;
mod reductions;

use crate::{ArrayShape, ElementType, Module, Op, Shape};

/// What inference found wrong, as a sentence.
pub type InferResult<T> = Result<T, String>;

/// The result shape of `op` applied to operands of shapes `operands`.
///
/// `declared` is the result shape written in the text (or chosen by the builder); it is
/// required for ops whose result cannot be inferred and supplies the element type of
/// `dot` and `convolution` (`preferred_element_type`). `module` resolves called
/// computations.
pub fn infer_shape(
    op: &Op,
    operands: &[&Shape],
    declared: Option<&Shape>,
    module: &Module,
) -> InferResult<Shape> {
    let ctx = Ctx {
        op,
        operands,
        declared,
        module,
    };
    match op {
        Op::Parameter { .. } => ctx.operand_count(0).and_then(|_| ctx.declared()).cloned(),
        Op::ElidedConstant => ctx.operand_count(0).and_then(|_| ctx.declared()).cloned(),
        Op::Foreign { .. } => ctx.declared().cloned(),
        Op::Constant { literal } => {
            ctx.operand_count(0)?;
            Ok(literal.shape())
        }
        Op::Unary(u) => elementwise::unary(&ctx, *u),
        Op::Binary(b) => elementwise::binary(&ctx, *b),
        Op::Compare { .. } => elementwise::compare(&ctx),
        Op::Select => elementwise::select(&ctx),
        Op::Clamp => elementwise::clamp(&ctx),
        Op::Convert => elementwise::convert(&ctx),
        Op::BitcastConvert => elementwise::bitcast_convert(&ctx),
        Op::ReducePrecision {
            exponent_bits,
            mantissa_bits,
        } => elementwise::reduce_precision(&ctx, *exponent_bits, *mantissa_bits),
        Op::Bitcast => data_movement::bitcast(&ctx),
        Op::Broadcast { dimensions } => data_movement::broadcast(&ctx, dimensions),
        Op::Reshape => data_movement::reshape(&ctx),
        Op::Transpose { dimensions } => data_movement::transpose(&ctx, dimensions),
        Op::Slice { slices } => data_movement::slice(&ctx, slices),
        Op::Concatenate { dimension } => data_movement::concatenate(&ctx, *dimension),
        Op::Pad { padding } => data_movement::pad(&ctx, padding),
        Op::Reverse { dimensions } => data_movement::reverse(&ctx, dimensions),
        Op::Iota { dimension } => data_movement::iota(&ctx, *dimension),
        Op::DynamicSlice { sizes } => data_movement::dynamic_slice(&ctx, sizes),
        Op::DynamicUpdateSlice => data_movement::dynamic_update_slice(&ctx),
        Op::Gather {
            dims, slice_sizes, ..
        } => gather_scatter::gather(&ctx, dims, slice_sizes),
        Op::Scatter { dims, to_apply, .. } => gather_scatter::scatter(&ctx, dims, *to_apply),
        Op::Sort {
            dimension,
            comparator,
            ..
        } => reductions::sort(&ctx, *dimension, *comparator),
        Op::Reduce {
            dimensions,
            to_apply,
        } => reductions::reduce(&ctx, dimensions, *to_apply),
        Op::ReduceWindow { window, to_apply } => reductions::reduce_window(&ctx, window, *to_apply),
        Op::SelectAndScatter {
            window,
            select,
            scatter,
        } => reductions::select_and_scatter(&ctx, window, *select, *scatter),
        Op::TopK { k, .. } => reductions::top_k(&ctx, *k),
        Op::Convolution {
            window,
            dims,
            feature_group_count,
            batch_group_count,
            ..
        } => linalg::convolution(&ctx, window, dims, *feature_group_count, *batch_group_count),
        Op::Dot { dims, .. } => linalg::dot(&ctx, dims),
        Op::Tuple => Ok(Shape::Tuple(
            operands.iter().map(|s| (*s).clone()).collect(),
        )),
        Op::GetTupleElement { index } => control::get_tuple_element(&ctx, *index),
        Op::While { condition, body } => control::while_loop(&ctx, *condition, *body),
        Op::Conditional { branches } => control::conditional(&ctx, branches),
        Op::Call { to_apply } => control::call(&ctx, *to_apply),
        Op::Fusion { calls, .. } => control::call(&ctx, *calls),
        Op::Map {
            dimensions,
            to_apply,
        } => control::map(&ctx, dimensions, *to_apply),
        Op::CustomCall { target, .. } => control::custom_call(&ctx, target),
        Op::AfterAll => control::after_all(&ctx),
        Op::AllReduce { attrs, to_apply } => {
            collective::all_reduce(&ctx, &attrs.replica_groups, *to_apply)
        }
        Op::AllGather { attrs, dimension } => {
            collective::all_gather(&ctx, &attrs.replica_groups, *dimension)
        }
        Op::ReduceScatter {
            attrs,
            dimension,
            to_apply,
        } => collective::reduce_scatter(&ctx, &attrs.replica_groups, *dimension, *to_apply),
        Op::AllToAll { attrs, dimension } => {
            collective::all_to_all(&ctx, &attrs.replica_groups, *dimension)
        }
        Op::CollectivePermute { pairs, .. } => collective::collective_permute(&ctx, pairs),
        Op::ReplicaId | Op::PartitionId => collective::device_id(&ctx),
        Op::RngBitGenerator { .. } => control::rng_bit_generator(&ctx),
        Op::Infeed { .. } => control::infeed(&ctx),
        Op::Outfeed { shape, .. } => control::outfeed(&ctx, shape.as_ref()),
        Op::OptimizationBarrier => {
            ctx.operand_count(1)?;
            Ok(operands[0].clone())
        }
    }
}

/// Everything an inference rule looks at.
pub(crate) struct Ctx<'a> {
    pub op: &'a Op,
    pub operands: &'a [&'a Shape],
    pub declared: Option<&'a Shape>,
    pub module: &'a Module,
}

impl<'a> Ctx<'a> {
    pub fn operand_count(&self, n: usize) -> InferResult<()> {
        if self.operands.len() == n {
            Ok(())
        } else {
            Err(format!(
                "{} takes {n} operand{}, found {}",
                self.op.name(),
                if n == 1 { "" } else { "s" },
                self.operands.len()
            ))
        }
    }

    pub fn min_operands(&self, n: usize) -> InferResult<()> {
        if self.operands.len() >= n {
            Ok(())
        } else {
            Err(format!(
                "{} takes at least {n} operands, found {}",
                self.op.name(),
                self.operands.len()
            ))
        }
    }

    /// Operand `i` as an array.
    pub fn array(&self, i: usize) -> InferResult<&'a ArrayShape> {
        match self.operands.get(i) {
            Some(Shape::Array(a)) => Ok(a),
            Some(other) => Err(format!(
                "operand {i} of {} must be an array, found {other}",
                self.op.name()
            )),
            None => Err(format!("{} is missing operand {i}", self.op.name())),
        }
    }

    /// The declared result shape, which this op needs.
    pub fn declared(&self) -> InferResult<&'a Shape> {
        self.declared
            .ok_or_else(|| format!("{} needs its result shape to be given", self.op.name()))
    }

    /// The declared result shape as an array.
    pub fn declared_array(&self) -> InferResult<&'a ArrayShape> {
        match self.declared()? {
            Shape::Array(a) => Ok(a),
            other => Err(format!(
                "the result of {} must be an array, found {other}",
                self.op.name()
            )),
        }
    }
}

/// An array shape with the default layout.
pub(crate) fn array(element_type: ElementType, dims: &[i64]) -> Shape {
    Shape::array(element_type, dims)
}

/// Checks that `dims` are distinct and within `0..rank`.
pub(crate) fn check_dimension_list(what: &str, dims: &[i64], rank: usize) -> InferResult<()> {
    let mut seen = vec![false; rank];
    for &d in dims {
        if d < 0 || d as usize >= rank {
            return Err(format!("{what} {d} is out of range for rank {rank}"));
        }
        if std::mem::replace(&mut seen[d as usize], true) {
            return Err(format!("{what} {d} appears twice"));
        }
    }
    Ok(())
}

/// Output size of one windowed dimension (reduce-window, convolution).
pub(crate) fn window_output_size(base: i64, w: &crate::attributes::WindowDim) -> InferResult<i64> {
    if w.stride < 1 || w.window_dilation < 1 || w.base_dilation < 1 {
        return Err(format!(
            "window strides and dilations must be at least 1, found stride {} lhs_dilate {} rhs_dilate {}",
            w.stride, w.base_dilation, w.window_dilation
        ));
    }
    if w.size < 0 {
        return Err(format!("window size {} is negative", w.size));
    }
    let overflow = || "window arithmetic overflows".to_string();
    let dilate = |size: i64, dilation: i64| -> InferResult<i64> {
        if size <= 0 {
            return Ok(0);
        }
        (size - 1)
            .checked_mul(dilation)
            .map(|s| s + 1)
            .ok_or_else(overflow)
    };
    let padded = dilate(base, w.base_dilation)?
        .checked_add(w.pad_low)
        .and_then(|p| p.checked_add(w.pad_high))
        .ok_or_else(overflow)?;
    let window = dilate(w.size, w.window_dilation)?;
    if padded < window {
        return Ok(0);
    }
    Ok((padded - window) / w.stride + 1)
}

/// The scalar element types of a computation's parameters and its result, checked to be
/// `expected_params` scalars. Used for reducers, comparators and scatter combiners.
pub(crate) fn scalar_signature(
    module: &Module,
    comp: crate::CompId,
    role: &str,
    expected_params: &[ElementType],
) -> InferResult<Shape> {
    if comp.index() >= module.computation_count() {
        return Err(format!(
            "{role} refers to a computation that does not exist"
        ));
    }
    let c = module.computation(comp);
    let params = c.parameter_shapes();
    if params.len() != expected_params.len() {
        return Err(format!(
            "{role} {} must take {} scalar parameters, it takes {}",
            c.name,
            expected_params.len(),
            params.len()
        ));
    }
    for (i, (p, t)) in params.iter().zip(expected_params).enumerate() {
        let ok = p
            .as_array()
            .is_some_and(|a| a.dims.is_empty() && a.element_type == *t);
        if !ok {
            return Err(format!(
                "{role} {}: parameter {i} must be {t}[], found {p}",
                c.name
            ));
        }
    }
    Ok(c.root_instr().shape.clone())
}

/// Checks that `shape` is the scalar (N = 1) or tuple of scalars with these element types.
pub(crate) fn check_scalars_result(
    role: &str,
    comp_name: &str,
    shape: &Shape,
    types: &[ElementType],
) -> InferResult<()> {
    let expected: Shape = if types.len() == 1 {
        Shape::scalar(types[0])
    } else {
        Shape::Tuple(types.iter().map(|t| Shape::scalar(*t)).collect())
    };
    if shape.same_ignoring_layout(&expected) {
        Ok(())
    } else {
        Err(format!(
            "{role} {comp_name} must return {expected}, it returns {shape}"
        ))
    }
}
