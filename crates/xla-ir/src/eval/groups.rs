//! The groups of input elements a reduction folds, one group per output, visited in output
//! order as a first position and offsets from it. A reduce's groups all share one list of
//! offsets; so do a windowed op's windows that lie wholly inside the input, which is
//! nearly all of them: the loops that fold them run without building a position list per
//! output.

use super::array::strides;
use crate::attributes::Window;

/// Groups of input positions, one per output in row-major output order.
pub(super) trait Groups {
    /// Calls `visit(first, offsets)` for each group in turn (its positions are `first + r`
    /// for each `r` of `offsets`, in fold order), stopping at the first error.
    fn each<E>(&self, visit: impl FnMut(usize, &[usize]) -> Result<(), E>) -> Result<(), E>;

    /// [`Groups::each`] a run of consecutive groups at a time: `visit(run, offsets)`, group
    /// `j` of the run at `run.first + j * run.step` (a loop over a run's groups inside a
    /// loop over the shared offsets reads neighbouring elements together). The default
    /// gives every group a run of its own.
    fn each_run<E>(&self, mut visit: impl FnMut(Run, &[usize]) -> Result<(), E>) -> Result<(), E> {
        self.each(|first, offsets| {
            let run = Run {
                first,
                step: 0,
                count: 1,
            };
            visit(run, offsets)
        })
    }
}

/// Consecutive groups with the same offsets, their first positions evenly stepped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Run {
    pub first: usize,
    pub step: usize,
    pub count: usize,
}

impl Run {
    /// Group `j`'s first position.
    pub fn at(&self, j: usize) -> usize {
        self.first + j * self.step
    }
}

/// A reduce's groups: the same offsets (the reduced dimensions) from each output's base.
pub(super) struct Reduction {
    pub bases: Vec<usize>,
    pub offsets: Vec<usize>,
}

impl Groups for Reduction {
    fn each<E>(&self, mut visit: impl FnMut(usize, &[usize]) -> Result<(), E>) -> Result<(), E> {
        self.bases
            .iter()
            .try_for_each(|&base| visit(base, &self.offsets))
    }
}

/// The input elements each output of a windowed op reads, tabulated per dimension: for
/// coordinate `o` of output dimension `d`, the flat-offset contributions of the window
/// elements that land inside the input (padding and base-dilation holes skipped).
#[derive(Debug, Clone)]
pub(super) struct WindowPositions {
    tables: Vec<Vec<Vec<usize>>>,
    out_dims: Vec<usize>,
    /// Per dimension and output coordinate: whether the whole window lies inside the input
    /// there (no padding, no base-dilation holes).
    full: Vec<Vec<bool>>,
    /// Per dimension and output coordinate: the offset contribution of the window's first
    /// position (0 where the window reads nothing there).
    firsts: Vec<Vec<usize>>,
    /// The positions of a window lying wholly inside, relative to its first position, in
    /// the same order as the tables give them.
    interior: Vec<usize>,
    /// Along the last dimension: the ranges of coordinates whose windows lie wholly inside,
    /// their first positions evenly stepped, as `(start, end, step)`.
    spans: Vec<(usize, usize, usize)>,
}

impl WindowPositions {
    /// `dilations`: apply the window's dilations (reduce-window) or not (select-and-scatter).
    pub(super) fn new(
        dims: &[i64],
        out_dims: &[i64],
        window: &Window,
        dilations: bool,
    ) -> WindowPositions {
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
        let firsts: Vec<Vec<usize>> = tables
            .iter()
            .map(|t| t.iter().map(|p| p.first().copied().unwrap_or(0)).collect())
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
        let spans = match (full.last(), firsts.last()) {
            (Some(full), Some(firsts)) => spans(full, firsts),
            _ => Vec::new(),
        };
        WindowPositions {
            tables,
            out_dims: out_dims.iter().map(|&d| d as usize).collect(),
            full,
            firsts,
            interior,
            spans,
        }
    }

    /// The input positions of the output at `coords`, in row-major window order, built from
    /// the tables into `buf` (`tmp` is scratch).
    fn positions_at(&self, coords: &[usize], buf: &mut Vec<usize>, tmp: &mut Vec<usize>) {
        buf.clear();
        buf.push(0);
        for (table, &c) in self.tables.iter().zip(coords) {
            tmp.clear();
            for &b in buf.iter() {
                tmp.extend(table[c].iter().map(|&x| b + x));
            }
            std::mem::swap(buf, tmp);
        }
    }
}

/// The maximal ranges of coordinates `c` with `full[c]` whose `firsts[c]` step evenly:
/// `(start, end, step)`.
fn spans(full: &[bool], firsts: &[usize]) -> Vec<(usize, usize, usize)> {
    let mut out: Vec<(usize, usize, usize)> = Vec::new();
    for c in (0..full.len()).filter(|&c| full[c]) {
        if let Some(last) = out.last_mut()
            && last.1 == c
            && firsts[c] >= firsts[c - 1]
            && (last.1 - last.0 == 1 || firsts[c] - firsts[c - 1] == last.2)
        {
            last.2 = firsts[c] - firsts[c - 1];
            last.1 += 1;
            continue;
        }
        out.push((c, c + 1, 0));
    }
    out
}

impl Groups for WindowPositions {
    /// [`Groups::each_run`]'s walk, a window at a time.
    fn each<E>(&self, mut visit: impl FnMut(usize, &[usize]) -> Result<(), E>) -> Result<(), E> {
        self.each_run(|run, offsets| (0..run.count).try_for_each(|j| visit(run.at(j), offsets)))
    }

    /// Walks the outputs row by row along the last dimension: a row's windows wholly inside
    /// come as runs (their first positions plus the shared interior offsets); others one by
    /// one, built from the tables.
    fn each_run<E>(&self, mut visit: impl FnMut(Run, &[usize]) -> Result<(), E>) -> Result<(), E> {
        let Some(last) = self.out_dims.len().checked_sub(1) else {
            return visit(
                Run {
                    first: 0,
                    step: 0,
                    count: 1,
                },
                &self.interior,
            );
        };
        if self.out_dims.contains(&0) {
            return Ok(());
        }
        let (mut buf, mut tmp) = (Vec::new(), Vec::new());
        let mut coords = vec![0usize; self.out_dims.len()];
        loop {
            let outer = &coords[..last];
            let prefix: usize = outer.iter().zip(&self.firsts).map(|(&c, f)| f[c]).sum();
            let outer_full = outer.iter().zip(&self.full).all(|(&c, f)| f[c]);
            let mut spans = self.spans.iter().filter(|_| outer_full).peekable();
            let mut c = 0;
            while c < self.out_dims[last] {
                if let Some(&&(start, end, step)) = spans.peek()
                    && start == c
                {
                    let first = prefix + self.firsts[last][c];
                    visit(
                        Run {
                            first,
                            step,
                            count: end - start,
                        },
                        &self.interior,
                    )?;
                    spans.next();
                    c = end;
                    continue;
                }
                coords[last] = c;
                self.positions_at(&coords, &mut buf, &mut tmp);
                visit(
                    Run {
                        first: 0,
                        step: 0,
                        count: 1,
                    },
                    &buf,
                )?;
                c += 1;
            }
            if !self.next_row(&mut coords[..last]) {
                return Ok(());
            }
        }
    }
}

impl WindowPositions {
    /// Steps the outer coordinates to the next row, last first; false after the last row.
    fn next_row(&self, outer: &mut [usize]) -> bool {
        let mut d = outer.len();
        loop {
            if d == 0 {
                return false;
            }
            d -= 1;
            outer[d] += 1;
            if outer[d] < self.out_dims[d] {
                return true;
            }
            outer[d] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::complex::unravel;
    use super::*;
    use crate::attributes::WindowDim;
    use std::convert::Infallible;

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

    fn walked(groups: &impl Groups) -> Vec<Vec<usize>> {
        let mut out = Vec::new();
        groups
            .each(|first, offsets| {
                out.push(offsets.iter().map(|r| first + r).collect());
                Ok::<(), Infallible>(())
            })
            .unwrap();
        out
    }

    /// The walk (interior shortcut, row stepping) yields for every output what the
    /// per-dimension tables yield for its coordinates, in the same order, for windows
    /// inside, across the padding and across base-dilation holes.
    #[test]
    fn walked_windows_read_the_positions_the_tables_give() {
        let dims = [2, 7, 9, 3];
        let window = Window {
            dims: vec![
                dim(1, 1, (0, 0), 1, 1),
                dim(3, 2, (1, 1), 1, 1),
                dim(2, 1, (0, 2), 2, 2),
                dim(2, 1, (0, 0), 1, 1),
            ],
        };
        let out_dims = [2usize, 4, 16, 2];
        for dilations in [true, false] {
            let w = WindowPositions::new(&dims, &out_dims.map(|d| d as i64), &window, dilations);
            assert_eq!(walked(&w), tabled(&w, &out_dims), "dilations {dilations}");
            let inside = (0..out_dims.iter().product())
                .filter(|&o| {
                    let coords = unravel(o, &out_dims);
                    coords.iter().zip(&w.full).all(|(&c, f)| f[c])
                })
                .count();
            assert!(inside > 0, "some windows lie wholly inside");
        }
    }

    /// Every output's positions as the per-dimension tables give them.
    fn tabled(w: &WindowPositions, out_dims: &[usize]) -> Vec<Vec<usize>> {
        let (mut want, mut tmp) = (Vec::new(), Vec::new());
        (0..out_dims.iter().product())
            .map(|o| {
                w.positions_at(&unravel(o, out_dims), &mut want, &mut tmp);
                want.clone()
            })
            .collect()
    }

    /// Every group of every run, expanded, and the longest run.
    fn walked_in_runs(groups: &impl Groups) -> (Vec<Vec<usize>>, usize) {
        let (mut out, mut longest) = (Vec::new(), 0);
        groups
            .each_run(|run, offsets| {
                longest = longest.max(run.count);
                for j in 0..run.count {
                    out.push(offsets.iter().map(|r| run.at(j) + r).collect());
                }
                Ok::<(), Infallible>(())
            })
            .unwrap();
        (out, longest)
    }

    /// Runs of windows, expanded, are what the tables give for each output, in order: a
    /// pool over NHWC (runs along the features, step 1), windows across padding (runs
    /// stepped by the stride, broken where a window leaves the input) and base dilation;
    /// a reduction's runs are its groups one by one.
    #[test]
    fn runs_of_groups_are_the_groups_one_by_one() {
        let pool = Window {
            dims: vec![
                dim(1, 1, (0, 0), 1, 1),
                dim(2, 2, (0, 0), 1, 1),
                dim(2, 2, (0, 1), 1, 1),
                dim(1, 1, (0, 0), 1, 1),
            ],
        };
        let strided = Window {
            dims: vec![
                dim(1, 1, (0, 0), 1, 1),
                dim(3, 2, (1, 1), 1, 1),
                dim(2, 3, (2, 2), 2, 2),
            ],
        };
        let cases = [
            (vec![2i64, 6, 7, 5], vec![2i64, 3, 4, 5], pool, true, 5),
            // Base dilation: every other window lands on holes, so runs of one.
            (vec![2, 7, 20], vec![2, 4, 14], strided.clone(), true, 1),
            (vec![2, 7, 20], vec![2, 4, 7], strided, false, 5),
        ];
        for (dims, out_dims, window, dilations, longest) in cases {
            let w = WindowPositions::new(&dims, &out_dims, &window, dilations);
            let (runs, most) = walked_in_runs(&w);
            let sizes: Vec<usize> = out_dims.iter().map(|&d| d as usize).collect();
            assert_eq!(runs, tabled(&w, &sizes), "{out_dims:?}");
            assert!(most >= longest, "{out_dims:?}: runs of at most {most}");
        }
        let r = Reduction {
            bases: vec![0, 1],
            offsets: vec![0, 2, 4],
        };
        assert_eq!(walked_in_runs(&r), (walked(&r), 1));
    }

    #[test]
    fn a_scalar_window_and_an_empty_output_walk_one_and_no_groups() {
        let scalar = WindowPositions::new(&[], &[], &Window { dims: vec![] }, true);
        assert_eq!(walked(&scalar), vec![vec![0]]);
        let window = Window {
            dims: vec![dim(2, 1, (0, 0), 1, 1)],
        };
        let empty = WindowPositions::new(&[1], &[0], &window, true);
        assert!(walked(&empty).is_empty());
    }

    #[test]
    fn a_reduction_visits_each_base_with_the_shared_offsets() {
        let r = Reduction {
            bases: vec![0, 1],
            offsets: vec![0, 2, 4],
        };
        assert_eq!(walked(&r), vec![vec![0, 2, 4], vec![1, 3, 5]]);
    }
}
