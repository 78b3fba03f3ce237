//! Sorts whose comparator compares one operand's pair of elements (`compare(p2i, p2i+1)`,
//! either way round, any direction, total order or not, the pair as it is or in the
//! canonical form JAX's float comparator gives it), planned once for codelets that
//! run on a tile's bytes: the evaluator's own stable merge sort and comparison, on typed
//! slices, so such a codelet never builds a literal per comparison.

use super::array::num;
use super::element::{Element, Num};
use super::elementwise::compare_elements;
use super::sort::{merge_sort, rows};
use crate::attributes::{CompareType, ComparisonDirection};
use crate::literal::Literal;
use crate::{Computation, ElementType, InstrId, Module, Op};
use half::f16;

/// A sort of the entry's parameters, in order, along one dimension, ordered by one of them.
#[derive(Debug, Clone)]
pub struct SortOp {
    dims: Vec<i64>,
    dimension: usize,
    key: usize,
    key_type: ElementType,
    direction: ComparisonDirection,
    total: bool,
    swapped: bool,
    /// Keys compared in JAX's canonical form for sorting floats (see [`key_operand`]):
    /// the select's zero and NaN.
    canonical: Option<(Num, Num)>,
}

/// A float's bits, to compare constants (NaNs included).
fn bits(n: Num) -> Option<u64> {
    match n {
        Num::Float(f) => Some(f.to_bits()),
        _ => None,
    }
}

/// A comparator's operand: parameter `number` itself, or JAX's canonical form of it for
/// sorting floats, `select(ne(p, p), NaN, select(eq(p, 0), 0, p))` (every NaN the
/// constant NaN, both zeros the constant zero), with the constants (zero, NaN).
fn key_operand(comp: &Computation, id: InstrId) -> Option<(usize, Option<(Num, Num)>)> {
    let param = |id: InstrId| match comp.instr(id).op {
        Op::Parameter { number } => Some(number as usize),
        _ => None,
    };
    if let Some(number) = param(id) {
        return Some((number, None));
    }
    let select = |id: InstrId| {
        let i = comp.instr(id);
        match (&i.op, i.operands.as_slice()) {
            (Op::Select, &[c, t, f]) => Some((c, t, f)),
            _ => None,
        }
    };
    let compare = |id: InstrId, want: ComparisonDirection| {
        let i = comp.instr(id);
        match (&i.op, i.operands.as_slice()) {
            (
                Op::Compare {
                    direction,
                    compare_type: None,
                },
                &[a, b],
            ) if *direction == want => Some((a, b)),
            _ => None,
        }
    };
    let constant = |id: InstrId| match &comp.instr(id).op {
        Op::Constant {
            literal: Literal::Array(a),
        } if a.shape.dims.is_empty() => match num(&a.data, 0) {
            Num::Float(f) => Some(f),
            _ => None,
        },
        _ => None,
    };
    let (is_nan, nan, rest) = select(id)?;
    let (is_zero, zero, p) = select(rest)?;
    let number = param(p)?;
    let (x, y) = compare(is_nan, ComparisonDirection::Ne)?;
    let (z, c) = compare(is_zero, ComparisonDirection::Eq)?;
    let (nan, zero, c) = (constant(nan)?, constant(zero)?, constant(c)?);
    let fits = x == p && y == p && z == p && nan.is_nan() && zero == 0.0 && c == 0.0;
    fits.then_some((number, Some((Num::Float(zero), Num::Float(nan)))))
}

impl SortOp {
    /// The plan of `module`'s entry when its root sorts the entry's parameters (all of
    /// them, in order) with such a comparator.
    pub fn of(module: &Module) -> Option<SortOp> {
        let entry = module.entry_computation();
        let root = entry.root_instr();
        let Op::Sort {
            dimension,
            comparator,
            ..
        } = &root.op
        else {
            return None;
        };
        let params = entry.parameters();
        let in_order = params.len() == root.operands.len()
            && root.operands.iter().enumerate().all(|(i, &p)| {
                matches!(entry.instr(p).op, Op::Parameter { number } if number == i as u64)
            });
        let first = entry.instr(*root.operands.first()?).shape.as_array()?;
        let comp = module.computation(*comparator);
        let cparams = comp.parameters();
        let compare = comp.root_instr();
        if !in_order || cparams.len() != 2 * params.len() {
            return None;
        }
        let Op::Compare {
            direction,
            compare_type,
        } = &compare.op
        else {
            return None;
        };
        let [a, b] = compare.operands.as_slice() else {
            return None;
        };
        let ((a, canonical), (b, other)) = (key_operand(comp, *a)?, key_operand(comp, *b)?);
        let same = |x: Option<(Num, Num)>, y: Option<(Num, Num)>| match (x, y) {
            (None, None) => true,
            (Some(x), Some(y)) => bits(x.0) == bits(y.0) && bits(x.1) == bits(y.1),
            _ => false,
        };
        if !same(canonical, other) {
            return None;
        }
        let (low, swapped) = match a < b {
            true => (a, false),
            false => (b, true),
        };
        if low % 2 != 0 || a.abs_diff(b) != 1 {
            return None;
        }
        let key = low / 2;
        let key_type = entry.instr(params[key]).shape.as_array()?.element_type;
        if canonical.is_some() && !matches!(key_type, ElementType::F32 | ElementType::F16) {
            return None;
        }
        let scalar = |id| {
            comp.instr(id)
                .shape
                .as_array()
                .is_some_and(|s| s.dims.is_empty())
        };
        if !cparams.iter().all(|&p| scalar(p)) || !scalar(comp.root) {
            return None;
        }
        Some(SortOp {
            dims: first.dims.to_vec(),
            dimension: usize::try_from(*dimension).ok()?,
            key,
            key_type,
            direction: *direction,
            total: *compare_type == Some(CompareType::TotalOrder),
            swapped,
            canonical,
        })
    }

    /// The operand whose elements order the sort.
    pub fn key(&self) -> usize {
        self.key
    }

    /// Its element type.
    pub fn key_type(&self) -> ElementType {
        self.key_type
    }

    /// For each element of the results (row-major), the operands' element it takes: the
    /// evaluator's stable sort of each row by `keys` (the key operand's elements).
    pub fn permutation_f32(&self, keys: &[f32]) -> Vec<usize> {
        self.permutation(keys)
    }

    /// [`SortOp::permutation_f32`] for f16 keys.
    pub fn permutation_f16(&self, keys: &[f16]) -> Vec<usize> {
        self.permutation(keys)
    }

    /// [`SortOp::permutation_f32`] for s32 keys.
    pub fn permutation_s32(&self, keys: &[i32]) -> Vec<usize> {
        self.permutation(keys)
    }

    /// [`SortOp::permutation_f32`] for u32 keys.
    pub fn permutation_u32(&self, keys: &[u32]) -> Vec<usize> {
        self.permutation(keys)
    }

    fn permutation<T: Element>(&self, keys: &[T]) -> Vec<usize> {
        let canonical: Vec<T>;
        let keys = match self.canonical {
            Some((zero, nan)) => {
                let (zero, nan) = (T::from_num(zero), T::from_num(nan));
                let canon = |k: T| match T::partial(k, zero) {
                    None => nan,
                    Some(std::cmp::Ordering::Equal) => zero,
                    Some(_) => k,
                };
                canonical = keys.iter().map(|&k| canon(k)).collect();
                &canonical[..]
            }
            None => keys,
        };
        let mut permutation = vec![0usize; keys.len()];
        for row in rows(&self.dims, self.dimension) {
            let mut order: Vec<usize> = (0..row.len()).collect();
            let mut less = |a: usize, b: usize| -> Result<bool, ()> {
                let (x, y) = (keys[row[a]], keys[row[b]]);
                let (x, y) = if self.swapped { (y, x) } else { (x, y) };
                Ok(compare_elements(self.direction, self.total, x, y))
            };
            let sorted = merge_sort(&mut order, &mut less);
            debug_assert!(sorted.is_ok(), "the comparison never fails");
            for (k, &o) in order.iter().enumerate() {
                permutation[row[k]] = row[o];
            }
        }
        permutation
    }
}
