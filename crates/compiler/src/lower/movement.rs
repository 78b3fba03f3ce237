//! Data movement as exchange: broadcast, transpose, slice, concatenate, pad and reverse
//! become one rearrangement each: every destination element names its source element (or
//! the fill value), consecutive ones merge into runs, and the engine turns the runs into
//! exchange moves between tiles. (Bitcasts never reach lowering: the `bitcast-decomposer`
//! pass spells each as transposes and a reshape, so values here have no physical order.)

use super::{Arr, Here, Lowerer, Scope, Value};
use crate::CompileError;
use runtime::{Run, RunSource, Runs, TensorId};
use xla_ir::{ArrayShape, Op};

/// A slice never made: its tensor is not written, and each copy of it into a shared
/// function's argument is its rearrangement writing the argument instead (Poplar's static
/// slice is a view; made and then copied, a layer's weights crossed tile memory twice and
/// every layer's slice lived from the program's start to its call). Only for a slice of a
/// parameter of the entry computation (never written after its stream) read by nothing
/// but shared calls' arguments; the rearrangement keeps the parameter live to each copy.
#[derive(Debug, Clone)]
pub(crate) struct Deferred {
    /// The rearrangement's sources.
    pub sources: Vec<TensorId>,
    /// Its runs (a copy moves element `e` to element `e`, so they fit the argument too).
    pub runs: Runs,
    /// The slice's name.
    pub name: String,
    /// Copied into an argument already (its tensor's life then starts there).
    pub copied: bool,
}

/// Where one destination element comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Src {
    /// Element `index` of source `k`.
    At(u32, usize),
    /// The fill value.
    Fill,
}

/// Runs as lowering writes them: the last run stays open (the next element may extend it),
/// those before it are sealed into the executable's blocks as they come.
#[derive(Debug, Default)]
pub(crate) struct RunWriter {
    sealed: Runs,
    open: Option<Run>,
}

impl RunWriter {
    /// The open run, which the next push may extend.
    fn last_mut(&mut self) -> Option<&mut Run> {
        self.open.as_mut()
    }

    /// Seals the open run and opens `run`.
    fn push(&mut self, run: Run) {
        if let Some(done) = self.open.replace(run) {
            self.sealed.push(done);
        }
    }

    /// Appends `count` rows of `len` destination elements, row `i` written from `dst +
    /// i * dst_step` and read from source `k` at `start + i * src_step`, every `stride`
    /// elements. Writes what `count` calls of [`push_strided_run`] write, without a call per
    /// row when rows cannot merge.
    pub(crate) fn push_rows(
        &mut self,
        k: u32,
        (start, src_step): (usize, isize),
        (stride, len): (isize, usize),
        (dst, dst_step): (usize, usize),
        count: usize,
    ) {
        let row = |i: usize| (start as isize + i as isize * src_step) as usize;
        // A row continues the one before when it is written right after it and its source
        // continues too (a row of one element takes any stride): rows merge into longer
        // runs then, one by one.
        let merging = dst_step == len && (len < 2 || src_step == len as isize * stride);
        if merging || count < 3 {
            for i in 0..count {
                push_strided_run(self, k, row(i), stride, dst + i * dst_step, len);
            }
            return;
        }
        // Row 0 may extend the open run; row 1 opens its own, as does every later row, each
        // sealing the one before: rows 1 to count - 2 are sealed, the last stays open.
        push_strided_run(self, k, row(0), stride, dst, len);
        push_strided_run(self, k, row(1), stride, dst + dst_step, len);
        let sealed = self.open.replace(Run {
            source: RunSource::Tensor {
                k,
                start: row(count - 1),
                stride,
            },
            dst_start: dst + (count - 1) * dst_step,
            len,
        });
        let second = sealed.expect("row 1 is the open run");
        self.sealed
            .push_stepped(second, count - 2, dst_step as isize, src_step);
    }

    /// Every run written, in order.
    pub(crate) fn finish(mut self) -> Runs {
        if let Some(done) = self.open.take() {
            self.sealed.push(done);
        }
        self.sealed
    }
}

/// Runs for a destination of `dims`, given each element's source (row-major walk).
pub(crate) fn runs_of(dims: &[usize], mut f: impl FnMut(&[usize]) -> Src) -> Runs {
    let n: usize = dims.iter().product();
    let mut runs = RunWriter::default();
    let mut idx = vec![0usize; dims.len()];
    for flat in 0..n {
        push_run(&mut runs, f(&idx), flat, 1);
        for d in (0..dims.len()).rev() {
            idx[d] += 1;
            if idx[d] < dims[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    runs.finish()
}

/// [`runs_of`] for a destination whose every row (the last dimension) reads one source
/// with a fixed `stride`: `first` gives the source and element of each row's first
/// element. The same runs as [`runs_of`] with the per-element closure, built a row at a
/// time (after a row's third element the per-element walk only lengthens the last run).
pub(crate) fn affine_runs(
    dims: &[usize],
    stride: isize,
    mut first: impl FnMut(&[usize]) -> (u32, usize),
) -> Runs {
    let Some((&len, outer)) = dims.split_last() else {
        let (k, i) = first(&[]);
        return vec![Run {
            source: RunSource::contiguous(k, i),
            dst_start: 0,
            len: 1,
        }]
        .into();
    };
    let rows: usize = outer.iter().product();
    let mut runs = RunWriter::default();
    if len == 0 {
        return runs.finish();
    }
    let mut idx = vec![0usize; dims.len()];
    for row in 0..rows {
        let (k, start) = first(&idx);
        let dst = row * len;
        for j in 0..len.min(3) {
            let at = (start as isize + j as isize * stride) as usize;
            push_run(&mut runs, Src::At(k, at), dst + j, 1);
        }
        if len > 3 {
            let last = runs
                .last_mut()
                .expect("the row's first elements were pushed");
            last.len += len - 3;
        }
        for d in (0..outer.len()).rev() {
            idx[d] += 1;
            if idx[d] < dims[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    runs.finish()
}

/// Elements between consecutive indices of each dimension of a row-major array.
pub(crate) fn strides(dims: &[usize]) -> Vec<usize> {
    (0..dims.len())
        .map(|d| dims[d + 1..].iter().product())
        .collect()
}

/// Appends `len` destination elements from `dst` taken from `src` onwards (contiguous),
/// extending the last run when it continues: a fill after a fill, and a source element
/// that follows the last run's stride (a run of one element takes any stride, so a
/// transpose's column, a broadcast's repeated element or a reverse is one run).
pub(crate) fn push_run(runs: &mut RunWriter, src: Src, dst: usize, len: usize) {
    if let Some(r) = runs.last_mut()
        && r.dst_start + r.len == dst
    {
        match (&mut r.source, src) {
            (RunSource::Fill, Src::Fill) => {
                r.len += len;
                return;
            }
            (
                RunSource::Tensor {
                    k: rk,
                    start,
                    stride,
                },
                Src::At(k, i),
            ) if *rk == k => {
                let step = i as isize - *start as isize;
                if r.len == 1 && (len == 1 || step == 1) {
                    *stride = step;
                    r.len += len;
                    return;
                }
                let next = *start as isize + r.len as isize * *stride;
                if i as isize == next && (len == 1 || *stride == 1) {
                    r.len += len;
                    return;
                }
            }
            _ => {}
        }
    }
    runs.push(Run {
        source: match src {
            Src::Fill => RunSource::Fill,
            Src::At(k, start) => RunSource::contiguous(k, start),
        },
        dst_start: dst,
        len,
    });
}

/// Appends `len` destination elements from `dst` read from source `k` at `start`,
/// `start + stride`, ...: extends the last run when it continues with the same stride.
pub(crate) fn push_strided_run(
    runs: &mut RunWriter,
    k: u32,
    start: usize,
    stride: isize,
    dst: usize,
    len: usize,
) {
    if len <= 1 || stride == 1 {
        return push_run(runs, Src::At(k, start), dst, len);
    }
    if let Some(r) = runs.last_mut()
        && r.dst_start + r.len == dst
        && let RunSource::Tensor {
            k: rk,
            start: rs,
            stride: rstride,
        } = &mut r.source
        && *rk == k
    {
        let step = start as isize - *rs as isize;
        if r.len == 1 && step == stride {
            *rstride = stride;
            r.len += len;
            return;
        }
        if *rstride == stride && step == r.len as isize * stride {
            r.len += len;
            return;
        }
    }
    runs.push(Run {
        source: RunSource::Tensor { k, start, stride },
        dst_start: dst,
        len,
    });
}

/// Row-major flat index.
pub(crate) fn flat(dims: &[usize], idx: &[usize]) -> usize {
    idx.iter().zip(dims).fold(0, |acc, (&i, &d)| acc * d + i)
}

impl Lowerer<'_> {
    /// A new linearly mapped array filled by a rearrangement of `sources`.
    pub(crate) fn rearranged(
        &mut self,
        name: &str,
        shape: &ArrayShape,
        sources: &[Arr],
        fill: Vec<u8>,
        f: impl FnMut(&[usize]) -> Src,
    ) -> Arr {
        let out = self.linear_arr(name, shape);
        let dims: Vec<usize> = shape.dims.iter().map(|&d| d as usize).collect();
        let runs = runs_of(&dims, f);
        let fill = if (runs.blocks().iter()).any(|b| b.first.source == RunSource::Fill) {
            fill
        } else {
            Vec::new()
        };
        self.rearrange_into(
            out.tensor,
            sources.iter().map(|a| a.tensor).collect(),
            runs,
            fill,
            name,
        );
        out
    }

    /// [`Self::rearranged`] from one source that every row of the result reads with a
    /// fixed `stride` ([`affine_runs`]): broadcasts, transposes, slices and reverses.
    pub(crate) fn affinely_rearranged(
        &mut self,
        name: &str,
        shape: &ArrayShape,
        source: &Arr,
        stride: isize,
        first: impl FnMut(&[usize]) -> (u32, usize),
    ) -> Arr {
        let out = self.linear_arr(name, shape);
        let dims: Vec<usize> = shape.dims.iter().map(|&d| d as usize).collect();
        let runs = affine_runs(&dims, stride, first);
        self.rearrange_into(out.tensor, vec![source.tensor], runs, Vec::new(), name);
        out
    }

    /// `parts` joined along dimension `dim` into a new array of `shape` (a concatenation;
    /// also how split work is put back together).
    pub(crate) fn concatenated(
        &mut self,
        name: &str,
        shape: &ArrayShape,
        parts: &[Arr],
        dim: usize,
    ) -> Arr {
        let dims: Vec<Vec<usize>> = parts.iter().map(Arr::dims).collect();
        let offsets: Vec<usize> = dims
            .iter()
            .scan(0, |acc, d| {
                let o = *acc;
                *acc += d[dim];
                Some(o)
            })
            .collect();
        let mut src = Vec::new();
        self.rearranged(name, shape, parts, Vec::new(), |o| {
            let k = offsets.partition_point(|&off| off <= o[dim]) - 1;
            src.clear();
            src.extend_from_slice(o);
            src[dim] -= offsets[k];
            Src::At(k as u32, flat(&dims[k], &src))
        })
    }

    /// `a` with its dimensions in the order `perm` (result dimension `k` is `a`'s
    /// `perm[k]`), copied into a new linearly mapped tensor.
    pub(crate) fn transposed(&mut self, name: &str, a: &Arr, perm: &[usize]) -> Arr {
        let d0 = a.dims();
        let mut shape = a.shape.clone();
        shape.dims = perm.iter().map(|&p| d0[p] as i64).collect();
        shape.layout = None;
        let stride = perm.last().map_or(1, |&p| strides(&d0)[p] as isize);
        let mut src = vec![0; perm.len()];
        self.affinely_rearranged(name, &shape, a, stride, |o| {
            for (k, &p) in perm.iter().enumerate() {
                src[p] = o[k];
            }
            (0, flat(&d0, &src))
        })
    }

    /// True when the slice `here` is deferred ([`Deferred`]): its operand is a parameter of
    /// the entry computation and every reader of it is a shared function's call.
    fn slice_is_deferred(&self, here: Here) -> bool {
        let comp = here.comp;
        let entry = std::ptr::eq(comp, self.module.computation(self.module.entry));
        let of_parameter = (here.instr.operands.first())
            .is_some_and(|&p| matches!(comp.instr(p).op, Op::Parameter { .. }));
        // Only then the walks over the computation (most slices are of other values).
        if !entry || !of_parameter {
            return false;
        }
        let Some(&id) = (comp.order().iter()).find(|&&i| std::ptr::eq(comp.instr(i), here.instr))
        else {
            return false;
        };
        let mut readers = (comp.order().iter())
            .map(|&i| comp.instr(i))
            .filter(|instr| instr.operands.contains(&id))
            .peekable();
        comp.root != id
            && readers.peek().is_some()
            && readers.all(|instr| match instr.op {
                Op::Call { to_apply } => self.is_shared_call(instr, to_apply),
                _ => false,
            })
    }

    /// Lowers broadcast, transpose, slice, concatenate, pad and reverse.
    pub(crate) fn movement(
        &mut self,
        scope: &mut Scope,
        here: Here,
    ) -> Result<Value, CompileError> {
        let shape = here.array()?.clone();
        let name = &here.instr.name;
        let operands: Vec<Arr> = {
            let ids: Vec<_> = here.instr.operands.to_vec();
            let mut v = Vec::new();
            for i in ids {
                v.push(self.array(scope, i)?);
            }
            v
        };
        let in_dims: Vec<Vec<usize>> = operands.iter().map(Arr::dims).collect();
        let a = match &here.instr.op {
            Op::Broadcast { dimensions } => {
                let d0 = &in_dims[0];
                let map: Vec<usize> = dimensions.iter().map(|&d| d as usize).collect();
                // Along the result's last dimension: the operand dimension it comes from.
                let last = shape.dims.len().checked_sub(1);
                let along = map.iter().position(|&d| Some(d) == last);
                let stride = along.map_or(0, |k| strides(d0)[k] as isize);
                let mut src = vec![0; map.len()];
                self.affinely_rearranged(name, &shape, &operands[0], stride, |o| {
                    for (k, &d) in map.iter().enumerate() {
                        src[k] = o[d];
                    }
                    (0, flat(d0, &src))
                })
            }
            Op::Transpose { dimensions } => {
                let perm: Vec<usize> = dimensions.iter().map(|&d| d as usize).collect();
                self.transposed(name, &operands[0], &perm)
            }
            Op::Slice { slices } => {
                let d0 = &in_dims[0];
                let sl: Vec<(usize, usize)> = slices
                    .iter()
                    .map(|s| (s.start as usize, s.stride as usize))
                    .collect();
                let stride = sl.last().map_or(1, |&(_, s)| s as isize);
                let mut src = vec![0; sl.len()];
                let first = |o: &[usize]| {
                    for (k, &(start, stride)) in sl.iter().enumerate() {
                        src[k] = start + o[k] * stride;
                    }
                    (0, flat(d0, &src))
                };
                if self.slice_is_deferred(here) {
                    let out = self.linear_arr(name, &shape);
                    let dims: Vec<usize> = shape.dims.iter().map(|&d| d as usize).collect();
                    let deferred = Deferred {
                        sources: vec![operands[0].tensor],
                        runs: affine_runs(&dims, stride, first),
                        name: name.clone(),
                        copied: false,
                    };
                    self.deferred.insert(out.tensor, deferred);
                    out
                } else {
                    self.affinely_rearranged(name, &shape, &operands[0], stride, first)
                }
            }
            Op::Concatenate { dimension } => {
                self.concatenated(name, &shape, &operands, *dimension as usize)
            }
            Op::Pad { padding } => {
                let d0 = &in_dims[0];
                let fill =
                    match super::elementwise::scalar_constant(here.comp, here.instr.operands[1]) {
                        Some(data) => crate::device_data::to_device(data),
                        None => Vec::new(),
                    };
                let constant_fill = !fill.is_empty();
                let pads: Vec<(i64, i64)> =
                    padding.iter().map(|p| (p.low, p.interior + 1)).collect();
                let mut src = vec![0; pads.len()];
                self.rearranged(name, &shape, &operands, fill, |o| {
                    for (k, &(low, step)) in pads.iter().enumerate() {
                        let rel = o[k] as i64 - low;
                        if rel < 0 || rel % step != 0 || (rel / step) as usize >= d0[k] {
                            return if constant_fill {
                                Src::Fill
                            } else {
                                Src::At(1, 0)
                            };
                        }
                        src[k] = (rel / step) as usize;
                    }
                    Src::At(0, flat(d0, &src))
                })
            }
            Op::Reverse { dimensions } => {
                let d0 = &in_dims[0];
                let rev: Vec<bool> = (0..d0.len())
                    .map(|d| dimensions.contains(&(d as i64)))
                    .collect();
                let stride = if rev.last() == Some(&true) { -1 } else { 1 };
                let mut src = vec![0; d0.len()];
                self.affinely_rearranged(name, &shape, &operands[0], stride, |o| {
                    for k in 0..o.len() {
                        src[k] = if rev[k] { d0[k] - 1 - o[k] } else { o[k] };
                    }
                    (0, flat(d0, &src))
                })
            }
            _ => unreachable!("dispatched: data movement"),
        };
        Ok(Value::Array(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_runs_extend_only_with_the_same_stride() {
        let mut writer = RunWriter::default();
        push_strided_run(&mut writer, 0, 0, 4, 0, 3); // 0, 4, 8
        push_strided_run(&mut writer, 0, 12, 4, 3, 2); // 12, 16: continues
        assert_eq!(writer.last_mut().map(|r| r.len), Some(5));
        push_strided_run(&mut writer, 0, 20, 2, 5, 2); // 20, 22: another stride
        push_strided_run(&mut writer, 0, 30, 1, 7, 3); // contiguous
        let runs: Vec<Run> = writer.finish().iter().collect();
        assert_eq!(runs.len(), 3);
        assert_eq!(
            runs[1].source,
            RunSource::Tensor {
                k: 0,
                start: 20,
                stride: 2
            }
        );
    }

    /// Rows pushed together write exactly what they write pushed one at a time: rows that
    /// merge and rows that do not, after runs they may or may not continue, of 0 to 3
    /// elements, read forwards, backwards, with a stride or repeated.
    #[test]
    fn rows_pushed_together_are_the_rows_pushed_one_by_one() {
        let befores: [&[(usize, isize, usize, usize)]; 4] = [
            &[],
            &[(0, 1, 0, 3)],
            &[(0, 1, 0, 2), (50, 1, 2, 2)],
            &[(3, 2, 0, 3)],
        ];
        for before in befores {
            for (start, src_step) in [(9, 3), (9, 7), (9, 2), (40, -6), (9, 0)] {
                for (stride, len) in [(1, 3), (2, 3), (-1, 2), (0, 2), (1, 1), (1, 0), (3, 2)] {
                    for (count, gap) in (0..6).flat_map(|c| [(c, 0), (c, 3)]) {
                        let dst = before.iter().map(|b| b.2 + b.3).max().unwrap_or(0);
                        let dst_step = len + gap;
                        let mut one_by_one = RunWriter::default();
                        let mut together = RunWriter::default();
                        for w in [&mut one_by_one, &mut together] {
                            for &(s, st, d, n) in before {
                                push_strided_run(w, 0, s, st, d, n);
                            }
                        }
                        for i in 0..count {
                            let from = (start as isize + i as isize * src_step) as usize;
                            let to = dst + i * dst_step;
                            push_strided_run(&mut one_by_one, 0, from, stride, to, len);
                        }
                        together.push_rows(
                            0,
                            (start, src_step),
                            (stride, len),
                            (dst, dst_step),
                            count,
                        );
                        assert_eq!(
                            together.finish(),
                            one_by_one.finish(),
                            "{before:?}, {count} rows from {start} by {src_step}, {len} by {stride}, to {dst} by {dst_step}"
                        );
                    }
                }
            }
        }
    }

    /// Row by row gives exactly the element-by-element runs: transposes, broadcasts,
    /// slices and reverses of assorted shapes, rows of 0 to 5 elements.
    #[test]
    fn affine_runs_are_the_per_element_runs() {
        for dims in [
            vec![],
            vec![1],
            vec![2],
            vec![3],
            vec![7],
            vec![3, 0],
            vec![4, 1],
            vec![2, 3, 5],
            vec![3, 2, 4],
        ] {
            let r = dims.len();
            let st = strides(&dims);
            let rev: Vec<usize> = (0..r).rev().collect();
            let src_dims: Vec<usize> = rev.iter().map(|&d| dims[d]).collect();
            let src_st = strides(&src_dims);
            // transpose (reversed dimensions), row broadcast, column broadcast, reverse
            type Source<'a> = Box<dyn Fn(&[usize]) -> usize + 'a>;
            let cases: Vec<Source> = vec![
                Box::new(|o: &[usize]| (0..r).map(|k| o[k] * src_st[r - 1 - k]).sum()),
                Box::new(|o: &[usize]| o.first().copied().unwrap_or(0)),
                Box::new(|o: &[usize]| o.last().copied().unwrap_or(0)),
                Box::new(|o: &[usize]| {
                    let n: usize = dims.iter().product();
                    let flat: usize = (0..r).map(|k| o[k] * st[k]).sum();
                    n.saturating_sub(1) - flat
                }),
            ];
            for f in &cases {
                // The stride along a row, as the callers know it from their op.
                let stride = match dims.last() {
                    Some(&n) if n >= 2 && dims.iter().all(|&d| d > 0) => {
                        let mut at = vec![0; r];
                        let a = f(&at) as isize;
                        at[r - 1] = 1;
                        f(&at) as isize - a
                    }
                    _ => 1,
                };
                let want = runs_of(&dims, |o| Src::At(0, f(o)));
                let got = affine_runs(&dims, stride, |o| (0, f(o)));
                assert_eq!(got, want, "{dims:?} stride {stride}");
            }
        }
    }

    #[test]
    fn runs_merge_contiguous_sources_and_fills() {
        // a 2x3 transpose of 3x2: sources 0,2,4 / 1,3,5: a run of stride 2 per row
        let all = |runs: Runs| runs.iter().collect::<Vec<Run>>();
        let runs = all(runs_of(&[2, 3], |o| Src::At(0, o[1] * 2 + o[0])));
        assert_eq!(runs.len(), 2);
        assert_eq!(
            runs[1].source,
            RunSource::Tensor {
                k: 0,
                start: 1,
                stride: 2
            }
        );
        // a column broadcast: one element repeated per row (stride 0)
        let runs = all(runs_of(&[4, 8], |o| Src::At(0, o[0])));
        assert_eq!(runs.len(), 4);
        assert!(
            runs.iter()
                .all(|r| r.len == 8 && matches!(r.source, RunSource::Tensor { stride: 0, .. }))
        );
        // a reverse: one run of stride -1
        let runs = all(runs_of(&[5], |o| Src::At(0, 4 - o[0])));
        assert_eq!(runs.len(), 1);
        assert_eq!(
            runs[0].source,
            RunSource::Tensor {
                k: 0,
                start: 4,
                stride: -1
            }
        );
        // a row broadcast merges rows
        let runs = all(runs_of(&[4, 8], |o| Src::At(0, o[1])));
        assert_eq!(runs.len(), 4);
        assert!(runs.iter().all(|r| r.len == 8));
        // a pad: fill, data, fill
        let runs = all(runs_of(&[6], |o| {
            if (1..5).contains(&o[0]) {
                Src::At(0, o[0] - 1)
            } else {
                Src::Fill
            }
        }));
        assert_eq!(runs.len(), 3);
    }
}
