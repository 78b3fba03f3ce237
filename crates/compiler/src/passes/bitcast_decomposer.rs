//! The bitcast decomposer (XLA's `BitcastDecomposer`): every `bitcast` becomes the
//! transposes and reshape that say in logical terms what it does, so that no later pass
//! depends on layouts.
//!
//! A bitcast reads its operand in memory order (as the operand's layout stores it) and
//! writes its result in memory order (as the result's layout stores it); it is the only op
//! whose value depends on layouts. Every other pass treats two values as the same when
//! their elements are: the e-graph proves `negate(negate(x)) = x` and hands a bitcast `x`
//! in its own layout instead of the negation's, which reorders the bitcast's elements
//! (found by the differential campaign with generated layouts, seed 220146). Spelled as
//! `transpose(operand to memory order)`, `reshape`, `transpose(from memory order)`, the
//! same computation holds whatever layout any value ends up with.
//!
//! A bitcast between element types also reinterprets the bytes: a `bitcast-convert` of
//! the memory-order array (between widths, through the extra minor dimension that
//! `bitcast-convert` gives the narrower side, little-endian as the evaluator's bytes).

use super::words::{Emitter, names_in, rebuild, renamed};
use super::{Pass, PassContext};
use crate::CompileError;
use xla_ir::{ArrayShape, CompId, InstrId, Module, Op, Shape};

const PASS: &str = "bitcast-decomposer";

/// The pass (`bitcast-decomposer`).
pub struct BitcastDecomposer;

impl Pass for BitcastDecomposer {
    fn name(&self) -> &'static str {
        PASS
    }

    fn run(&self, module: &mut Module, cx: &mut PassContext) -> Result<(), CompileError> {
        let with_bitcasts: Vec<CompId> = module
            .computations()
            .filter(|(_, c)| c.instructions().any(|(_, i)| matches!(i.op, Op::Bitcast)))
            .map(|(id, _)| id)
            .collect();
        let mut taken = names_in(module);
        let mut decomposed = 0;
        for id in with_bitcasts {
            let new = rebuild(PASS, module, id, &mut taken, &mut |e, old, instr, map| {
                if !matches!(instr.op, Op::Bitcast) {
                    return Ok(None);
                }
                let (Some(from), Some(to)) = (
                    old.instr(instr.operands[0]).shape.as_array(),
                    instr.shape.as_array(),
                ) else {
                    return Ok(None);
                };
                decomposed += 1;
                decompose(e, renamed(map, instr.operands[0]), from, to).map(Some)
            })?;
            *module.computation_mut(id) = new;
        }
        if decomposed > 0 {
            cx.notes.push(format!(
                "{decomposed} bitcast(s) spelled as transposes and reshapes"
            ));
        }
        Ok(())
    }
}

/// The dimensions of `shape` from the slowest-varying in memory to the fastest (its
/// layout's minor-to-major order reversed; row-major without a layout).
fn major_to_minor(shape: &ArrayShape) -> Vec<i64> {
    match &shape.layout {
        Some(l) if l.minor_to_major.len() == shape.rank() => {
            l.minor_to_major.iter().rev().copied().collect()
        }
        _ => (0..shape.rank() as i64).collect(),
    }
}

/// `x` (of shape `from`) transposed so that its row-major order is `from`'s memory order,
/// reinterpreted as `to`'s element type, reshaped to `to`'s dimensions in memory order and
/// transposed back to `to`'s dimensions.
fn decompose(
    e: &mut Emitter,
    x: InstrId,
    from: &ArrayShape,
    to: &ArrayShape,
) -> Result<InstrId, CompileError> {
    let into_memory_order = major_to_minor(from);
    let mut v = transpose(e, x, &into_memory_order)?;
    let (a, b) = (from.element_type.bit_width(), to.element_type.bit_width());
    if from.element_type != to.element_type {
        let mut dims = e.dims(v);
        if a < b {
            // Narrow to wide: the narrow elements that make one wide one in a minor dimension.
            let ratio = (b / a) as i64;
            let elements = dims.iter().product::<i64>();
            v = e.reshape(v, &[elements / ratio, ratio])?;
            dims = vec![elements / ratio];
        } else if a > b {
            dims.push((a / b) as i64);
        }
        v = e.add(
            Op::BitcastConvert,
            &[v],
            Some(Shape::array(to.element_type, &dims)),
        )?;
    }
    let order = major_to_minor(to);
    let in_memory: Vec<i64> = order.iter().map(|&d| to.dims[d as usize]).collect();
    if e.dims(v) != in_memory {
        v = e.reshape(v, &in_memory)?;
    }
    // Dimension `order[i]` of the result is dimension `i` of the memory-order array.
    let mut back = vec![0i64; order.len()];
    for (i, &d) in order.iter().enumerate() {
        back[d as usize] = i as i64;
    }
    transpose(e, v, &back)
}

/// `transpose(x)` by `permutation`: `x` when the permutation leaves it as it is, a reshape
/// when it moves only dimensions of size 1 (the elements keep their order).
fn transpose(e: &mut Emitter, x: InstrId, permutation: &[i64]) -> Result<InstrId, CompileError> {
    if permutation.iter().copied().eq(0..permutation.len() as i64) {
        return Ok(x);
    }
    let (t, of) = (e.element_type(x), e.dims(x));
    let dims: Vec<i64> = permutation.iter().map(|&d| of[d as usize]).collect();
    let moved: Vec<i64> = permutation
        .iter()
        .copied()
        .filter(|&d| of[d as usize] != 1)
        .collect();
    if moved.is_sorted() {
        return e.reshape(x, &dims);
    }
    e.add(
        Op::Transpose {
            dimensions: permutation.to_vec(),
        },
        &[x],
        Some(Shape::array(t, &dims)),
    )
}

#[cfg(test)]
mod tests {
    //! Decomposed bitcasts against the evaluator's bitcast (which reads memory order): the
    //! same module evaluated as written and after the pass, over random shapes and layouts.
    use super::*;
    use crate::IpuConfig;
    use xla_ir::ElementType;
    use xla_ir::builder::ModuleBuilder;
    use xla_ir::generate::{Rng, random_layout};
    use xla_ir::literal::{ArrayData, ArrayLiteral, Literal};

    /// `n` elements as dimensions of sizes from `sizes` (whatever is left last).
    fn dims_of(rng: &mut Rng, mut n: i64) -> Vec<i64> {
        let mut dims = Vec::new();
        while n > 1 && dims.len() < 3 {
            let f = *rng.pick(&[2, 3, 4, 5, n]);
            if n % f == 0 {
                dims.push(f);
                n /= f;
            }
        }
        if n > 1 || rng.chance(0.3) {
            dims.push(n);
        }
        dims
    }

    fn decomposed(module: &Module) -> Module {
        let mut out = module.clone();
        let config = IpuConfig::default();
        let mut cx = PassContext {
            config: &config,
            warnings: Vec::new(),
            notes: Vec::new(),
        };
        BitcastDecomposer.run(&mut out, &mut cx).unwrap();
        xla_ir::verify(&out).unwrap_or_else(|e| panic!("{e}"));
        out
    }

    #[test]
    fn decomposed_bitcasts_read_and_write_memory_order() {
        let mut rng = Rng::new(5);
        for case in 0..200 {
            let n = *rng.pick(&[1i64, 6, 12, 24, 60, 120]);
            let (from, to) = (dims_of(&mut rng, n), dims_of(&mut rng, n));
            let (t, u) = match rng.below(3) {
                0 => (ElementType::F32, ElementType::S32),
                _ => (ElementType::S32, ElementType::S32),
            };
            let operand = ArrayShape {
                layout: Some(random_layout(&mut rng, from.len())),
                ..ArrayShape::new(t, &from)
            };
            let result = ArrayShape {
                layout: Some(random_layout(&mut rng, to.len())),
                ..ArrayShape::new(u, &to)
            };
            let mut m = ModuleBuilder::new("bitcasts");
            let mut main = m.computation("main");
            let x = main
                .parameter(0, Shape::Array(operand.clone()), "x")
                .unwrap();
            let b = main.bitcast(x, result.clone()).unwrap();
            let entry = main.finish(b).unwrap();
            let module = m.finish(entry).unwrap();
            let data = match t {
                ElementType::F32 => ArrayData::F32((0..n).map(|i| i as f32 + 0.5).collect()),
                _ => ArrayData::S32((0..n as i32).collect()),
            };
            let input = Literal::Array(ArrayLiteral {
                shape: operand.clone(),
                data,
            });
            let want = xla_ir::eval::evaluate(&module, std::slice::from_ref(&input)).unwrap();
            let out = decomposed(&module);
            assert!(!out.to_string().contains("bitcast("), "case {case}:\n{out}");
            let got = xla_ir::eval::evaluate(&out, &[input]).unwrap();
            let values = |l: &Literal| match l {
                Literal::Array(a) => a.data.clone(),
                other => panic!("{other:?}"),
            };
            assert_eq!(
                values(&got),
                values(&want),
                "case {case}: {operand} -> {result}:\n{out}"
            );
        }
    }

    #[test]
    fn bitcasts_between_widths_reinterpret_the_bytes() {
        for (t, dims, u, to) in [
            (
                ElementType::U64,
                vec![2i64],
                ElementType::U32,
                vec![2i64, 2],
            ),
            (ElementType::U32, vec![3, 2], ElementType::U64, vec![3]),
            (ElementType::U64, vec![], ElementType::U32, vec![2]),
        ] {
            let mut m = ModuleBuilder::new("widths");
            let mut main = m.computation("main");
            let x = main.parameter(0, Shape::array(t, &dims), "x").unwrap();
            let b = main.bitcast(x, ArrayShape::new(u, &to)).unwrap();
            let entry = main.finish(b).unwrap();
            let module = m.finish(entry).unwrap();
            let n = dims.iter().product::<i64>() as u64;
            let data = match t {
                ElementType::U64 => ArrayData::U64((0..n).map(|i| i << 32 | (i + 7)).collect()),
                _ => ArrayData::U32((0..n as u32).collect()),
            };
            let input = Literal::Array(ArrayLiteral {
                shape: ArrayShape::new(t, &dims),
                data,
            });
            let want = xla_ir::eval::evaluate(&module, std::slice::from_ref(&input)).unwrap();
            let out = decomposed(&module);
            assert!(!out.to_string().contains("bitcast("), "{out}");
            assert_eq!(
                xla_ir::eval::evaluate(&out, &[input]).unwrap(),
                want,
                "{out}"
            );
        }
    }
}
