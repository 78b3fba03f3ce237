//! Non-default layouts in generated modules, as XLA's layout assignment leaves them: a
//! layout never changes what an op computes, except for `bitcast`, which reads its operand
//! in memory order and writes its result in memory order. So the generator makes copies
//! into other layouts and bitcasts between shapes that hold the same elements in another
//! order ([`Gen::relayout`]), and gives some values and parameters layouts of their own
//! ([`scatter_layouts`]); whatever layouts a bitcast's operand ends up with, the module is
//! valid and the evaluator defines what it computes.

use super::{Gen, Rng};
use crate::builder::BuildError;
use crate::ids::InstrId;
use crate::shape::Layout;
use crate::{ArrayShape, Module};

/// A layout of `rank` dimensions in a random order.
pub fn random_layout(rng: &mut Rng, rank: usize) -> Layout {
    Layout {
        minor_to_major: rng.permutation(rank).into_iter().collect(),
        ..Layout::default()
    }
}

/// Opcodes whose results [`scatter_layouts`] may give another layout: those whose shape no
/// other instruction must repeat exactly (tuples, loops and calls are left alone).
const RELAID: [&str; 18] = [
    "parameter",
    "add",
    "subtract",
    "multiply",
    "maximum",
    "minimum",
    "negate",
    "abs",
    "tanh",
    "convert",
    "broadcast",
    "transpose",
    "reshape",
    "slice",
    "concatenate",
    "pad",
    "reverse",
    "select",
];

/// Gives about one in five arrays of rank 2 or more in the entry computation (parameters
/// included) a random layout.
pub(super) fn scatter_layouts(module: &mut Module, rng: &mut Rng) {
    let entry = module.entry;
    let comp = module.computation_mut(entry);
    let ids: Vec<InstrId> = comp.order().to_vec();
    for id in ids {
        let instr = comp.instr_mut(id);
        if !RELAID.contains(&instr.op.name()) {
            continue;
        }
        if let Some(a) = instr.shape.as_array_mut()
            && a.rank() >= 2
            && rng.chance(0.2)
        {
            a.layout = Some(random_layout(rng, a.rank()));
        }
    }
}

impl Gen<'_, '_> {
    /// `x` copied into another layout (the same values), or bitcast into another shape of
    /// the same elements in memory order, and sometimes bitcast back to `x`'s dimensions
    /// (in yet another layout), so the reordered values flow on into the module.
    pub(super) fn relayout(&mut self, x: InstrId, dims: &[i64]) -> Result<InstrId, BuildError> {
        let s = self.shape_of(x);
        if s.rank() >= 2 && self.rng.chance(0.3) {
            let layout = random_layout(self.rng, s.rank());
            return self.c.copy_with_layout(x, layout);
        }
        let elements: i64 = dims.iter().product();
        let to = self.factorisation(elements);
        let layout = random_layout(self.rng, to.len());
        let shape = ArrayShape {
            layout: Some(layout),
            ..ArrayShape::new(s.element_type, &to)
        };
        let b = self.c.bitcast(x, shape)?;
        if !self.rng.chance(0.5) {
            return Ok(b);
        }
        self.push(b);
        self.used.insert(b);
        let layout = random_layout(self.rng, dims.len());
        let back = ArrayShape {
            layout: Some(layout),
            ..ArrayShape::new(s.element_type, dims)
        };
        self.c.bitcast(b, back)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::{Options, module};
    use crate::{Op, Shape};

    /// Whether `shape` is an array stored in another order than row-major.
    fn reordered(shape: &Shape) -> bool {
        shape.as_array().is_some_and(|a| {
            a.layout
                .as_ref()
                .is_some_and(|l| *l != Layout::row_major(a.rank()))
        })
    }

    #[test]
    fn random_layouts_are_orders_of_every_dimension() {
        let mut rng = Rng::new(7);
        for rank in 0..5 {
            for _ in 0..20 {
                let mut dims = random_layout(&mut rng, rank).minor_to_major.to_vec();
                dims.sort_unstable();
                assert!(dims.iter().copied().eq(0..rank as i64));
            }
        }
    }

    /// Generated modules hold parameters and values in other layouts, and bitcasts that
    /// read an operand stored out of row-major order; without `layouts`, none of that.
    #[test]
    fn modules_carry_other_layouts_and_bitcasts_of_them() {
        let (mut parameters, mut values, mut bitcasts) = (0, 0, 0);
        for seed in 0..60 {
            let options = Options {
                instructions: 24,
                ..Options::default()
            };
            let m = module(seed, &options).expect("a generated module builds");
            let comp = m.entry_computation();
            for (_, instr) in comp.instructions() {
                match &instr.op {
                    Op::Parameter { .. } if reordered(&instr.shape) => parameters += 1,
                    Op::Bitcast if reordered(&comp.instr(instr.operands[0]).shape) => bitcasts += 1,
                    _ if reordered(&instr.shape) => values += 1,
                    _ => {}
                }
            }
            let plain = module(
                seed,
                &Options {
                    layouts: false,
                    ..options
                },
            )
            .expect("a generated module builds");
            for (_, c) in plain.computations() {
                for (_, instr) in c.instructions() {
                    assert!(!reordered(&instr.shape), "seed {seed}: {instr:?}");
                    assert!(!matches!(instr.op, Op::Bitcast), "seed {seed}");
                }
            }
        }
        assert!(parameters > 0 && values > 0 && bitcasts > 0);
    }
}
