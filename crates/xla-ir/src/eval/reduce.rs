//! Reductions and scatters: reduce, reduce-window, select-and-scatter, scatter.
//!
//! A reduction visits its elements in row-major order. When the reducer is a single
//! binary op of one input, a typed loop folds directly (float sums and products in f64);
//! otherwise the reducer computation runs on scalars.

use super::array::{self, count, for_each_index, linear, scalar_at, strides, zip_same};
use super::calls::SimpleScalarFn;
use super::element::{Element, Num};
use super::movement::{set_batching_starts, start_vector, with_vector_dim};
use super::{Evaluator, OpError, OpResult, literal, one_or_tuple};
use crate::Shape;
use crate::attributes::{ScatterDims, Window};
use crate::ids::CompId;
use crate::literal::{ArrayData, ArrayLiteral};
use crate::op::BinaryOp;

/// For f32 select-and-scatter with a plain comparison selecting and `add` scattering (max
/// or min pooling's gradient), the comparison as a function: the loop then runs on the
/// values directly. Its results are the scalar computations' exactly (one f32 compare, one
/// f32 add per element).
fn f32_select_add(
    select: Option<SimpleScalarFn>,
    scatter: Option<SimpleScalarFn>,
) -> Option<fn(f32, f32) -> bool> {
    use crate::attributes::ComparisonDirection as D;
    let Some(SimpleScalarFn::Binary {
        op: BinaryOp::Add, ..
    }) = scatter
    else {
        return None;
    };
    let Some(SimpleScalarFn::Compare {
        direction,
        total: false,
        swapped,
    }) = select
    else {
        return None;
    };
    Some(match (direction, swapped) {
        (D::Ge, false) | (D::Le, true) => |a, b| a >= b,
        (D::Gt, false) | (D::Lt, true) => |a, b| a > b,
        (D::Le, false) | (D::Ge, true) => |a, b| a <= b,
        (D::Lt, false) | (D::Gt, true) => |a, b| a < b,
        (D::Eq, _) => |a, b| a == b,
        (D::Ne, _) => |a, b| a != b,
    })
}

/// The input elements each output of a windowed op reads, tabulated per dimension: for
/// coordinate `o` of output dimension `d`, the flat-offset contributions of the window
/// elements that land inside the input (padding and base-dilation holes skipped).
struct WindowPositions {
    tables: Vec<Vec<Vec<usize>>>,
    out_dims: Vec<usize>,
    /// Per dimension and output coordinate: whether the whole window lies inside the input
    /// there (no padding, no base-dilation holes).
    full: Vec<Vec<bool>>,
    /// The positions of a window lying wholly inside, relative to its first position, in
    /// the same order as the tables give them.
    interior: Vec<usize>,
}

impl WindowPositions {
    /// `dilations`: apply the window's dilations (reduce-window) or not (select-and-scatter).
    fn new(dims: &[i64], out_dims: &[i64], window: &Window, dilations: bool) -> WindowPositions {
        let s = strides(dims);
        let tables: Vec<Vec<Vec<usize>>> = window
            .dims
            .iter()
            .enumerate()
            .map(|(d, wd)| {
                let (wdil, bdil) = match dilations {
                    true => (wd.window_dilation, wd.base_dilation),
                    false => (1, 1),
                };
                (0..out_dims[d])
                    .map(|o| {
                        (0..wd.size)
                            .filter_map(|w| {
                                let p = o * wd.stride - wd.pad_low + w * wdil;
                                let inside = p >= 0 && p % bdil == 0 && p / bdil < dims[d];
                                inside.then(|| (p / bdil) as usize * s[d])
                            })
                            .collect()
                    })
                    .collect()
            })
            .collect();
        let full: Vec<Vec<bool>> = window
            .dims
            .iter()
            .zip(&tables)
            .map(|(wd, t)| {
                t.iter()
                    .map(|p| !p.is_empty() && p.len() as i64 == wd.size)
                    .collect()
            })
            .collect();
        // Every full window of a dimension has the same relative offsets: take the first.
        let mut interior = vec![0];
        for (t, f) in tables.iter().zip(&full) {
            let Some(c) = f.iter().position(|&x| x) else {
                interior.clear();
                break;
            };
            let rel: Vec<usize> = t[c].iter().map(|&p| p - t[c][0]).collect();
            interior = interior
                .iter()
                .flat_map(|&b| rel.iter().map(move |&r| b + r))
                .collect();
        }
        WindowPositions {
            tables,
            out_dims: out_dims.iter().map(|&d| d as usize).collect(),
            full,
            interior,
        }
    }

    /// The input positions output `o` (row-major) reads, in row-major window order, into
    /// `buf` (`tmp` is scratch). `at` follows the outputs: called for `o` one past the last,
    /// it steps the coordinates instead of dividing them out again.
    fn fill(&self, o: usize, at: &mut Cursor, buf: &mut Vec<usize>, tmp: &mut Vec<usize>) {
        let rank = self.out_dims.len();
        if at.coords.len() != rank || at.next != o {
            at.coords.resize(rank, 0);
            let mut rest = o;
            for d in (0..rank).rev() {
                at.coords[d] = rest % self.out_dims[d];
                rest /= self.out_dims[d];
            }
        }
        let coords = &at.coords;
        buf.clear();
        if coords.iter().zip(&self.full).all(|(&c, f)| f[c]) {
            let first: usize = coords.iter().zip(&self.tables).map(|(&c, t)| t[c][0]).sum();
            buf.extend(self.interior.iter().map(|&r| first + r));
        } else {
            buf.push(0);
            for (table, &c) in self.tables.iter().zip(coords.iter()) {
                tmp.clear();
                for &b in buf.iter() {
                    tmp.extend(table[c].iter().map(|&x| b + x));
                }
                std::mem::swap(buf, tmp);
            }
        }
        at.next = o + 1;
        for d in (0..rank).rev() {
            at.coords[d] += 1;
            if at.coords[d] < self.out_dims[d] {
                break;
            }
            at.coords[d] = 0;
        }
    }
}

/// Where [`WindowPositions::fill`] left off: the coordinates of output `next`.
#[derive(Default)]
struct Cursor {
    coords: Vec<usize>,
    next: usize,
}

/// Folds `xs[p]` for the positions of each group into `init` with a binary op.
fn fast_fold<T: Element>(
    op: BinaryOp,
    xs: &[T],
    init: T,
    groups: &mut dyn FnMut(usize, &mut Vec<usize>),
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

/// For each of `n` groups, folds `xs` at the group's positions into `init` with `step`, and
/// finishes the accumulator with `done`.
fn fold_each<T: Copy, A: Copy, R>(
    xs: &[T],
    init: A,
    groups: &mut dyn FnMut(usize, &mut Vec<usize>),
    n: usize,
    step: impl Fn(A, T) -> Option<A>,
    done: impl Fn(A) -> Option<R>,
) -> Option<Vec<R>> {
    let mut out = Vec::with_capacity(n);
    let mut positions = Vec::new();
    for o in 0..n {
        positions.clear();
        groups(o, &mut positions);
        let mut acc = init;
        for &p in &positions {
            acc = step(acc, xs[p])?;
        }
        out.push(done(acc)?);
    }
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
        groups: &mut dyn FnMut(usize, &mut Vec<usize>),
    ) -> Result<Vec<ArrayData>, OpError> {
        let simple = self.simple_scalar_fn(reducer);
        if let (Some(SimpleScalarFn::Binary { op, swapped }), [input], [init]) =
            (simple, inputs, inits)
        {
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
            if (!swapped || commutes) && input.data.element_type() == init.data.element_type() {
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
        }
        let mut results: Vec<Vec<ArrayData>> = vec![Vec::with_capacity(n); inits.len()];
        let mut positions = Vec::new();
        for o in 0..n {
            positions.clear();
            groups(o, &mut positions);
            let mut acc: Vec<ArrayLiteral> = inits.iter().map(|i| (*i).clone()).collect();
            for &p in &positions {
                let mut args = acc;
                args.extend(inputs.iter().map(|x| scalar_at(&x.data, p)));
                acc = self.apply_scalar(reducer, simple, args)?;
            }
            for (k, a) in acc.into_iter().enumerate() {
                results[k].push(a.data);
            }
        }
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
        let total = bases.len();
        let mut groups = |o: usize, buf: &mut Vec<usize>| {
            buf.extend(reduced_offsets.iter().map(|r| bases[o] + r))
        };
        let results = self.fold(inputs, inits, to_apply, total, &mut groups)?;
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
        let (mut tmp, mut at) = (Vec::new(), Cursor::default());
        let mut groups = |o: usize, buf: &mut Vec<usize>| windows.fill(o, &mut at, buf, &mut tmp);
        let results = self.fold(inputs, inits, to_apply, total, &mut groups)?;
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
        let fast = f32_select_add(select_fn, scatter_fn);
        let (mut candidates, mut tmp, mut at) = (Vec::new(), Vec::new(), Cursor::default());
        for k in 0..source.data.len() {
            windows.fill(k, &mut at, &mut candidates, &mut tmp);
            let Some((&first, rest)) = candidates.split_first() else {
                continue;
            };
            if let (Some(keep_first), ArrayData::F32(x), ArrayData::F32(src), ArrayData::F32(out)) =
                (fast, &operand.data, &source.data, &mut result)
            {
                let chosen = rest
                    .iter()
                    .fold(first, |c, &d| if keep_first(x[c], x[d]) { c } else { d });
                out[chosen] += src[k];
                continue;
            }
            let mut chosen = first;
            for &c in rest {
                let keep = self.apply_scalar(
                    select,
                    select_fn,
                    vec![
                        scalar_at(&operand.data, chosen),
                        scalar_at(&operand.data, c),
                    ],
                )?;
                if matches!(&keep[0].data, ArrayData::Pred(p) if !p[0]) {
                    chosen = c;
                }
            }
            let combined = self.apply_scalar(
                scatter,
                scatter_fn,
                vec![scalar_at(&result, chosen), scalar_at(&source.data, k)],
            )?;
            array::copy_element(&mut result, chosen, &combined[0].data, 0);
        }
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
        let mut update_index = Vec::with_capacity(updates[0].data.len());
        for_each_index(update_dims, |u| update_index.push(u.to_vec()));
        for (k, u) in update_index.iter().enumerate() {
            let batch: Vec<i64> = (0..u.len())
                .filter(|d| !dn.update_window_dims.contains(&(*d as i64)))
                .map(|d| u[d])
                .collect();
            let mut full = with_vector_dim(&batch, ivd, indices.shape.rank());
            let starts = start_vector(
                indices,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attributes::WindowDim;

    fn dim(size: i64, stride: i64, pad: (i64, i64), wdil: i64, bdil: i64) -> WindowDim {
        WindowDim {
            size,
            stride,
            pad_low: pad.0,
            pad_high: pad.1,
            window_dilation: wdil,
            base_dilation: bdil,
            window_reversal: false,
        }
    }

    /// The interior shortcut and the stepping cursor yield what the per-dimension tables
    /// yield, in the same order, for windows inside, across the padding and across
    /// base-dilation holes.
    #[test]
    fn interior_windows_read_the_positions_the_tables_give() {
        let dims = [2, 7, 9, 3];
        let window = Window {
            dims: vec![
                dim(1, 1, (0, 0), 1, 1),
                dim(3, 2, (1, 1), 1, 1),
                dim(2, 1, (0, 2), 2, 2),
                dim(2, 1, (0, 0), 1, 1),
            ],
        };
        let out_dims = [2, 4, 16, 2];
        for dilations in [true, false] {
            let w = WindowPositions::new(&dims, &out_dims, &window, dilations);
            let mut general = WindowPositions::new(&dims, &out_dims, &window, dilations);
            general.full.iter_mut().flatten().for_each(|f| *f = false);
            let (mut a, mut b, mut tmp) = (Vec::new(), Vec::new(), Vec::new());
            // `w` steps its cursor output after output; `general` divides each one out.
            let mut stepping = Cursor::default();
            let mut shortcuts = 0;
            for o in 0..out_dims.iter().product::<i64>() as usize {
                w.fill(o, &mut stepping, &mut a, &mut tmp);
                general.fill(o, &mut Cursor::default(), &mut b, &mut tmp);
                assert_eq!(a, b, "output {o}, dilations {dilations}");
                shortcuts += usize::from(a.len() == w.interior.len() && !a.is_empty());
            }
            assert!(shortcuts > 0, "some windows lie wholly inside");
        }
    }
}
