//! Reductions and scatters: reduce, reduce-window, select-and-scatter, scatter.
//!
//! A reduction visits its elements in row-major order. When the reducer is a single
//! binary op of one input, a typed loop folds directly (float sums and products in f64);
//! otherwise the reducer computation runs on scalars.

use super::array::{
    self, count, for_each_index, index_value, linear, scalar_at, strides, zip_same,
};
use super::calls::SimpleScalarFn;
use super::element::{Element, Num};
use super::groups::{Groups, Reduction, WindowPositions};
use super::movement::{set_batching_starts, start_vector, with_vector_dim};
use super::{Evaluator, OpError, OpResult, literal, one_or_tuple};
use crate::Shape;
use crate::attributes::{ScatterDims, Window};
use crate::ids::CompId;
use crate::literal::{ArrayData, ArrayLiteral};
use crate::op::BinaryOp;

/// For f32 select-and-scatter with a plain comparison selecting and `add` scattering (max
/// or min pooling's gradient): runs the loop on the values directly, with the comparison
/// compiled in, and returns true; false (nothing done) for other computations. Its results
/// are the scalar computations' exactly (one f32 compare, one f32 add per element).
pub(super) fn f32_select_add(
    select: Option<SimpleScalarFn>,
    scatter: Option<SimpleScalarFn>,
    windows: &WindowPositions,
    (x, src, out): (&[f32], &[f32], &mut [f32]),
) -> bool {
    use crate::attributes::ComparisonDirection as D;
    let Some(SimpleScalarFn::Binary {
        op: BinaryOp::Add, ..
    }) = scatter
    else {
        return false;
    };
    let Some(SimpleScalarFn::Compare {
        direction,
        total: false,
        swapped,
    }) = select
    else {
        return false;
    };
    match (direction, swapped) {
        (D::Ge, false) | (D::Le, true) => select_add(windows, x, src, out, |a, b| a >= b),
        (D::Gt, false) | (D::Lt, true) => select_add(windows, x, src, out, |a, b| a > b),
        (D::Le, false) | (D::Ge, true) => select_add(windows, x, src, out, |a, b| a <= b),
        (D::Lt, false) | (D::Gt, true) => select_add(windows, x, src, out, |a, b| a < b),
        (D::Eq, _) => select_add(windows, x, src, out, |a, b| a == b),
        (D::Ne, _) => select_add(windows, x, src, out, |a, b| a != b),
    }
    true
}

/// Adds each source element to the operand position its window selects: the first kept
/// against each later one by `keep_first(x[kept], x[later])`.
fn select_add(
    windows: &WindowPositions,
    x: &[f32],
    src: &[f32],
    out: &mut [f32],
    keep_first: impl Fn(f32, f32) -> bool,
) {
    let mut k = 0;
    let (mut chosen, mut kept): (Vec<usize>, Vec<f32>) = (Vec::new(), Vec::new());
    // A run of windows at a time, offsets outermost: each window still compares its
    // positions in order (against the value it keeps), and the sources are added in
    // window order.
    let done = windows.each_run(|run, offsets| {
        if let Some((&r0, rest)) = offsets.split_first() {
            chosen.clear();
            chosen.extend((0..run.count).map(|j| run.at(j) + r0));
            kept.clear();
            kept.extend(chosen.iter().map(|&c| x[c]));
            for &r in rest {
                for (j, (c, v)) in chosen.iter_mut().zip(&mut kept).enumerate() {
                    let later = run.at(j) + r;
                    let w = x[later];
                    // Which value a pooling window keeps is a coin toss to the branch
                    // predictor: chosen without a branch (the bench CNN's pooling
                    // gradients 1.05 -> 0.46 ms a run).
                    let keep = keep_first(*v, w);
                    *c = std::hint::select_unpredictable(keep, *c, later);
                    // As bits: a float select compiles to a branch again.
                    *v = f32::from_bits(std::hint::select_unpredictable(
                        keep,
                        v.to_bits(),
                        w.to_bits(),
                    ));
                }
            }
            for (&c, s) in chosen.iter().zip(&src[k..k + run.count]) {
                out[c] += s;
            }
        }
        k += run.count;
        Ok::<(), std::convert::Infallible>(())
    });
    let Ok(()) = done;
}

/// Whether a reducer `op(acc, x)` (`op(x, acc)` when `swapped`) folds in a typed loop
/// ([`fast_fold`]): the loop applies `op(acc, x)`, so a swapped reducer must commute.
pub(super) fn folds_directly(op: BinaryOp, swapped: bool) -> bool {
    let commutes = matches!(
        op,
        BinaryOp::Add
            | BinaryOp::Multiply
            | BinaryOp::Maximum
            | BinaryOp::Minimum
            | BinaryOp::And
            | BinaryOp::Or
            | BinaryOp::Xor
    );
    !swapped || commutes
}

/// Folds `xs[p]` for the positions of each group into `init` with a binary op.
pub(super) fn fast_fold<T: Element>(
    op: BinaryOp,
    xs: &[T],
    init: T,
    groups: &impl Groups,
    n: usize,
) -> Option<Vec<T>> {
    let wide = matches!(T::to_num(init), Num::Float(_))
        && matches!(op, BinaryOp::Add | BinaryOp::Multiply);
    if wide {
        let as_f64 = |x: T| match T::to_num(x) {
            Num::Float(f) => f,
            _ => unreachable!("wide folds are only chosen for float types"),
        };
        let narrow = |acc: f64| Some(T::from_num(Num::Float(acc)));
        let (xs, init) = (xs, as_f64(init));
        return match op {
            BinaryOp::Add => fold_each(xs, init, groups, n, |a, x| Some(a + as_f64(x)), narrow),
            _ => fold_each(xs, init, groups, n, |a, x| Some(a * as_f64(x)), narrow),
        };
    }
    // The op fixed per call: each loop below is compiled for one op, no dispatch per element.
    macro_rules! with_op {
        ($($op:ident),*) => {
            match op {
                $(BinaryOp::$op => fold_each(xs, init, groups, n, |a, x| T::binary(BinaryOp::$op, a, x), Some),)*
                _ => fold_each(xs, init, groups, n, |a, x| T::binary(op, a, x), Some),
            }
        };
    }
    with_op!(Add, Multiply, Maximum, Minimum)
}

/// For each of the `n` groups, folds `xs` at the group's positions into `init` with `step`,
/// and finishes the accumulator with `done`.
fn fold_each<T: Copy, A: Copy, R>(
    xs: &[T],
    init: A,
    groups: &impl Groups,
    n: usize,
    step: impl Fn(A, T) -> Option<A>,
    done: impl Fn(A) -> Option<R>,
) -> Option<Vec<R>> {
    let mut out = Vec::with_capacity(n);
    let mut accs: Vec<A> = Vec::new();
    groups
        .each_run(|run, offsets| {
            if run.count == 1 {
                let mut acc = init;
                for &r in offsets {
                    acc = step(acc, xs[run.first + r]).ok_or(())?;
                }
                out.push(done(acc).ok_or(())?);
                return Ok(());
            }
            // Offsets outermost: each group still folds its positions in order, and
            // neighbouring groups read neighbouring elements together.
            accs.clear();
            accs.resize(run.count, init);
            for &r in offsets {
                if run.step == 1 {
                    let from = &xs[run.first + r..run.first + r + run.count];
                    for (a, &x) in accs.iter_mut().zip(from) {
                        *a = step(*a, x).ok_or(())?;
                    }
                } else {
                    for (j, a) in accs.iter_mut().enumerate() {
                        *a = step(*a, xs[run.at(j) + r]).ok_or(())?;
                    }
                }
            }
            for &a in &accs {
                out.push(done(a).ok_or(())?);
            }
            Ok::<(), ()>(())
        })
        .ok()?;
    Some(out)
}

impl Evaluator<'_> {
    /// For each of `n` outputs, folds the input elements at the positions `groups` yields
    /// into the initial values with `reducer`; returns one data vector per input.
    fn fold(
        &self,
        inputs: &[&ArrayLiteral],
        inits: &[&ArrayLiteral],
        reducer: CompId,
        n: usize,
        groups: &impl Groups,
    ) -> Result<Vec<ArrayData>, OpError> {
        let simple = self.simple_scalar_fn(reducer);
        if let (Some(SimpleScalarFn::Binary { op, swapped }), [input], [init]) =
            (simple, inputs, inits)
            && folds_directly(op, swapped)
            && input.data.element_type() == init.data.element_type()
        {
            let undefined = || {
                OpError::Message(format!(
                    "{} is not defined for {}",
                    op.name(),
                    init.data.element_type()
                ))
            };
            let mismatch = Err(undefined());
            let data = zip_same!(&input.data, &init.data, x, i => fast_fold(op, x, i[0], groups, n).ok_or_else(undefined)?, mismatch);
            return Ok(vec![data]);
        }
        if let Some(results) = self.fold_in_lockstep(inputs, inits, reducer, n, groups)? {
            return Ok(results);
        }
        let mut results: Vec<Vec<ArrayData>> = vec![Vec::with_capacity(n); inits.len()];
        groups.each(|first, offsets| {
            let mut acc: Vec<ArrayLiteral> = inits.iter().map(|i| (*i).clone()).collect();
            for &r in offsets {
                let mut args = acc;
                args.extend(inputs.iter().map(|x| scalar_at(&x.data, first + r)));
                acc = self.apply_scalar(reducer, simple, args)?;
            }
            for (k, a) in acc.into_iter().enumerate() {
                results[k].push(a.data);
            }
            Ok::<(), OpError>(())
        })?;
        Ok(results
            .into_iter()
            .zip(inits)
            .map(|(parts, init)| {
                if parts.is_empty() {
                    ArrayData::zeros(init.data.element_type(), 0)
                } else {
                    array::concat(&parts.iter().collect::<Vec<_>>())
                }
            })
            .collect())
    }

    pub(super) fn reduce(
        &self,
        operands: &[&ArrayLiteral],
        dimensions: &[i64],
        to_apply: CompId,
    ) -> OpResult {
        let n = operands.len() / 2;
        let (inputs, inits) = operands.split_at(n);
        let dims = &inputs[0].shape.dims;
        let s = strides(dims);
        let kept: Vec<usize> = (0..dims.len())
            .filter(|d| !dimensions.contains(&(*d as i64)))
            .collect();
        let out_dims: Vec<i64> = kept.iter().map(|&d| dims[d]).collect();
        let reduced_dims: Vec<i64> = dimensions.iter().map(|&d| dims[d as usize]).collect();
        let mut reduced_offsets = Vec::with_capacity(count(&reduced_dims));
        for_each_index(&reduced_dims, |r| {
            reduced_offsets.push(
                r.iter()
                    .zip(dimensions)
                    .map(|(&i, &d)| i as usize * s[d as usize])
                    .sum::<usize>(),
            );
        });
        let mut bases = Vec::with_capacity(count(&out_dims));
        for_each_index(&out_dims, |o| {
            bases.push(
                o.iter()
                    .zip(&kept)
                    .map(|(&i, &d)| i as usize * s[d])
                    .sum::<usize>(),
            )
        });
        let groups = Reduction {
            bases,
            offsets: reduced_offsets,
        };
        let results = self.fold(inputs, inits, to_apply, groups.bases.len(), &groups)?;
        Ok(outputs(&out_dims, results))
    }

    pub(super) fn reduce_window(
        &self,
        operands: &[&ArrayLiteral],
        shape: &Shape,
        window: &Window,
        to_apply: CompId,
    ) -> OpResult {
        let n = operands.len() / 2;
        let (inputs, inits) = operands.split_at(n);
        let dims = &inputs[0].shape.dims;
        let out_dims: Vec<i64> = first_array(shape).dims.to_vec();
        let total = count(&out_dims);
        let windows = WindowPositions::new(dims, &out_dims, window, true);
        let results = self.fold(inputs, inits, to_apply, total, &windows)?;
        Ok(outputs(&out_dims, results))
    }

    pub(super) fn select_and_scatter(
        &self,
        operands: &[&ArrayLiteral],
        window: &Window,
        select: CompId,
        scatter: CompId,
    ) -> OpResult {
        let (operand, source, init) = (operands[0], operands[1], operands[2]);
        let dims = &operand.shape.dims;
        let n = operand.data.len();
        let mut result = array::take(&init.data, &vec![0; n]);
        let select_fn = self.simple_scalar_fn(select);
        let scatter_fn = self.simple_scalar_fn(scatter);
        let windows = WindowPositions::new(dims, &source.shape.dims, window, false);
        if let (ArrayData::F32(x), ArrayData::F32(src), ArrayData::F32(out)) =
            (&operand.data, &source.data, &mut result)
            && f32_select_add(select_fn, scatter_fn, &windows, (x, src, out))
        {
            return Ok(literal(result.element_type(), dims, result));
        }
        let mut k = 0;
        windows.each(|first, offsets| {
            let Some((&r0, rest)) = offsets.split_first() else {
                k += 1;
                return Ok(());
            };
            let mut chosen = first + r0;
            for &r in rest {
                let keep = self.apply_scalar(
                    select,
                    select_fn,
                    vec![
                        scalar_at(&operand.data, chosen),
                        scalar_at(&operand.data, first + r),
                    ],
                )?;
                if matches!(&keep[0].data, ArrayData::Pred(p) if !p[0]) {
                    chosen = first + r;
                }
            }
            let combined = self.apply_scalar(
                scatter,
                scatter_fn,
                vec![scalar_at(&result, chosen), scalar_at(&source.data, k)],
            )?;
            array::copy_element(&mut result, chosen, &combined[0].data, 0);
            k += 1;
            Ok::<(), OpError>(())
        })?;
        Ok(literal(result.element_type(), dims, result))
    }

    pub(super) fn scatter(
        &self,
        operands: &[&ArrayLiteral],
        dn: &ScatterDims,
        to_apply: CompId,
    ) -> OpResult {
        let n = (operands.len() - 1) / 2;
        let (targets, rest) = operands.split_at(n);
        let (indices, updates) = (rest[0], &rest[1..]);
        let dims = &targets[0].shape.dims;
        let rank = dims.len();
        let s = strides(dims);
        let ivd = dn.index_vector_dim as usize;
        let mut results: Vec<ArrayData> = targets.iter().map(|t| t.data.clone()).collect();
        let simple = self.simple_scalar_fn(to_apply).filter(|_| n == 1);
        let update_dims = &updates[0].shape.dims;
        let window_operand_dims: Vec<usize> = (0..rank as i64)
            .filter(|d| !dn.inserted_window_dims.contains(d) && !dn.input_batching_dims.contains(d))
            .map(|d| d as usize)
            .collect();
        let mut window_size = vec![1i64; rank];
        for (j, &d) in window_operand_dims.iter().enumerate() {
            window_size[d] = update_dims[dn.update_window_dims[j] as usize];
        }
        if let (1, Some(f @ (SimpleScalarFn::Binary { .. } | SimpleScalarFn::Second))) = (n, simple)
            && dn.input_batching_dims.is_empty()
        {
            let index = |i: usize| index_value(&indices.data, i);
            let at = scatter_targets(
                dims,
                &indices.shape.dims,
                &index,
                update_dims,
                dn,
                &window_size,
            );
            let mismatch = Err(OpError::Message(format!(
                "scatter of {} into {}",
                updates[0].shape, targets[0].shape
            )));
            let undefined = || {
                OpError::Message(format!(
                    "the scatter's combiner is not defined for {}",
                    targets[0].data.element_type()
                ))
            };
            let data = zip_same!(&targets[0].data, &updates[0].data, x, u => scatter_into(x.clone(), u, &at, f).ok_or_else(undefined)?, mismatch);
            return Ok(literal(data.element_type(), dims, data));
        }
        let mut update_index = Vec::with_capacity(updates[0].data.len());
        for_each_index(update_dims, |u| update_index.push(u.to_vec()));
        for (k, u) in update_index.iter().enumerate() {
            let batch: Vec<i64> = (0..u.len())
                .filter(|d| !dn.update_window_dims.contains(&(*d as i64)))
                .map(|d| u[d])
                .collect();
            let mut full = with_vector_dim(&batch, ivd, indices.shape.rank());
            let starts = start_vector(
                &indices.shape.dims,
                &|i| index_value(&indices.data, i),
                &mut full,
                ivd,
                dn.scatter_dims_to_operand_dims.len(),
            );
            let mut start = vec![0i64; rank];
            for (j, &d) in dn.scatter_dims_to_operand_dims.iter().enumerate() {
                start[d as usize] = starts[j];
            }
            set_batching_starts(
                &mut start,
                &dn.input_batching_dims,
                &dn.scatter_indices_batching_dims,
                &batch,
                ivd,
                indices.shape.rank(),
            );
            // A window that does not fit entirely is skipped, as XLA does.
            if (0..rank).any(|d| start[d] < 0 || start[d] + window_size[d] > dims[d]) {
                continue;
            }
            let mut target = start;
            for (j, &d) in window_operand_dims.iter().enumerate() {
                target[d] += u[dn.update_window_dims[j] as usize];
            }
            let at = linear(&target, &s);
            let mut args: Vec<ArrayLiteral> = results.iter().map(|r| scalar_at(r, at)).collect();
            args.extend(updates.iter().map(|up| scalar_at(&up.data, k)));
            let combined = self.apply_scalar(to_apply, simple, args)?;
            for (r, c) in results.iter_mut().zip(&combined) {
                array::copy_element(r, at, &c.data, 0);
            }
        }
        let values = results
            .into_iter()
            .map(|d| literal(d.element_type(), dims, d))
            .collect();
        Ok(one_or_tuple(values))
    }
}

/// For each update element in row-major order, the flat operand position a scatter
/// without batching dimensions combines it into; `None` where its window does not fit in
/// the operand (XLA skips those windows). The index array of `idims` is read through
/// `index` (its row-major element `i`); `window_size`: the update window's extent along
/// each operand dimension (1 where inserted).
pub(super) fn scatter_targets(
    dims: &[i64],
    idims: &[i64],
    index: &dyn Fn(usize) -> i64,
    update_dims: &[i64],
    dn: &ScatterDims,
    window_size: &[i64],
) -> Vec<Option<usize>> {
    let s = strides(dims);
    let is = strides(idims);
    let ivd = dn.index_vector_dim as usize;
    // The index dimensions the updates' scatter (batch) dimensions walk, in order.
    let index_batch: Vec<usize> = (0..idims.len()).filter(|&d| d != ivd).collect();
    let vector_stride = if ivd < idims.len() { is[ivd] } else { 0 };
    let window_operand_dims: Vec<usize> = (0..dims.len() as i64)
        .filter(|d| !dn.inserted_window_dims.contains(d))
        .map(|d| d as usize)
        .collect();
    let mut start = vec![0i64; dims.len()];
    let mut at = Vec::with_capacity(count(update_dims));
    for_each_index(update_dims, |u| {
        let (mut base, mut b) = (0usize, 0);
        for (d, &c) in u.iter().enumerate() {
            if !dn.update_window_dims.contains(&(d as i64)) {
                base += c as usize * is[index_batch[b]];
                b += 1;
            }
        }
        start.fill(0);
        for (j, &d) in dn.scatter_dims_to_operand_dims.iter().enumerate() {
            start[d as usize] = index(base + j * vector_stride);
        }
        if (0..dims.len()).any(|d| start[d] < 0 || start[d] + window_size[d] > dims[d]) {
            at.push(None);
            return;
        }
        for (j, &d) in window_operand_dims.iter().enumerate() {
            start[d] += u[dn.update_window_dims[j] as usize];
        }
        let target = start.iter().zip(&s).map(|(&x, &st)| x as usize * st).sum();
        at.push(Some(target));
    });
    at
}

/// `target` with each update combined into its position (`at`, from [`scatter_targets`])
/// by `f` (a binary op of the old value and the update, or the update alone), in order;
/// `None` when the op is not defined for the type.
fn scatter_into<T: Element>(
    mut target: Vec<T>,
    updates: &[T],
    at: &[Option<usize>],
    f: SimpleScalarFn,
) -> Option<Vec<T>> {
    scatter_in_place(&mut target, updates, at, f)?;
    Some(target)
}

/// [`scatter_into`] in place.
pub(super) fn scatter_in_place<T: Element>(
    target: &mut [T],
    updates: &[T],
    at: &[Option<usize>],
    f: SimpleScalarFn,
) -> Option<()> {
    for (&u, &p) in updates.iter().zip(at) {
        let Some(p) = p else { continue };
        target[p] = match f {
            SimpleScalarFn::Binary { op, swapped: false } => T::binary(op, target[p], u)?,
            SimpleScalarFn::Binary { op, swapped: true } => T::binary(op, u, target[p])?,
            _ => u,
        };
    }
    Some(())
}

fn first_array(shape: &Shape) -> &crate::ArrayShape {
    match shape {
        Shape::Tuple(t) => t[0]
            .as_array()
            .expect("verified: reduce results are arrays"),
        other => other
            .as_array()
            .expect("verified: reduce results are arrays"),
    }
}

fn outputs(out_dims: &[i64], results: Vec<ArrayData>) -> crate::Literal {
    one_or_tuple(
        results
            .into_iter()
            .map(|d| literal(d.element_type(), out_dims, d))
            .collect(),
    )
}
