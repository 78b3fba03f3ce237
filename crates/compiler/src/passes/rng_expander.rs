//! The rng-bit-generator expander (XLA's `RngBitGeneratorExpander`): each
//! `rng-bit-generator` becomes the 32-bit arithmetic of its generator, so the random
//! bits are ordinary element-wise work on the tiles, every element computed from its own
//! index (the same bits whatever the tile count) and exactly the bits the reference
//! evaluator (`xla_ir::eval`) and XLA produce.
//!
//! The `u64` state is read and written through `bitcast-convert`s to `u32` words, which
//! the int64 conversion then keeps exact (it sees the words are needed and keeps 64-bit
//! integers as word pairs instead of narrowing them).

use super::words::{Emitter, names_in, rebuild, renamed};
use super::{Pass, PassContext};
use crate::CompileError;
use xla_ir::op::RngAlgorithm;
use xla_ir::{BinaryOp, CompId, Computation, ElementType, InstrId, Instruction, Module, Op, Shape};

const PASS: &str = "rng-bit-generator-expander";

/// The pass (`rng-bit-generator-expander`).
pub struct RngBitGeneratorExpander;

impl Pass for RngBitGeneratorExpander {
    fn name(&self) -> &'static str {
        PASS
    }

    fn run(&self, module: &mut Module, cx: &mut PassContext) -> Result<(), CompileError> {
        let with_rng: Vec<CompId> = module
            .computations()
            .filter(|(_, c)| {
                c.instructions()
                    .any(|(_, i)| matches!(i.op, Op::RngBitGenerator { .. }))
            })
            .map(|(id, _)| id)
            .collect();
        let mut taken = names_in(module);
        let mut expanded = 0;
        for id in with_rng {
            let new = rebuild(PASS, module, id, &mut taken, &mut |e, old, instr, map| {
                let Op::RngBitGenerator { algorithm } = instr.op else {
                    return Ok(None);
                };
                expanded += 1;
                expand(e, old, instr, algorithm, renamed(map, instr.operands[0])).map(Some)
            })?;
            *module.computation_mut(id) = new;
        }
        if expanded > 0 {
            cx.notes.push(format!(
                "{expanded} rng-bit-generator(s) expanded into 32-bit arithmetic"
            ));
        }
        Ok(())
    }
}

fn unsupported(comp: &Computation, instr: &Instruction, reason: String) -> CompileError {
    CompileError::Unsupported {
        at: crate::types::location(comp, instr),
        instruction: instr.name.clone(),
        opcode: instr.op.name().to_string(),
        reason,
    }
}

/// The `(new state, bits)` tuple computed from `state` (the `u64[k]` value).
fn expand(
    e: &mut Emitter,
    comp: &Computation,
    instr: &Instruction,
    algorithm: RngAlgorithm,
    state: InstrId,
) -> Result<InstrId, CompileError> {
    let Some([Shape::Array(state_shape), Shape::Array(bits)]) = instr.shape.as_tuple() else {
        return Err(unsupported(
            comp,
            instr,
            "its result is not (state, bits)".into(),
        ));
    };
    let k = state_shape.element_count() as i64;
    if state_shape.element_type != ElementType::U64 || state_shape.rank() != 1 || k < 2 {
        return Err(unsupported(
            comp,
            instr,
            format!("its state must be u64[k] with k >= 2, not {state_shape}"),
        ));
    }
    let wide = matches!(bits.element_type, ElementType::U64 | ElementType::S64);
    if !wide && !matches!(bits.element_type, ElementType::U32 | ElementType::S32) {
        return Err(unsupported(
            comp,
            instr,
            format!(
                "random bits of type {} are not supported (32- and 64-bit integers are)",
                bits.element_type
            ),
        ));
    }
    let words = e.add(
        Op::BitcastConvert,
        &[state],
        Some(Shape::array(ElementType::U32, &[k, 2])),
    )?;
    let w = |e: &mut Emitter, i: i64, j: i64| -> Result<InstrId, CompileError> {
        let row = e.slice_dim(words, 0, i, i + 1)?;
        let word = e.slice_dim(row, 1, j, j + 1)?;
        e.reshape(word, &[])
    };
    let key = [w(e, 0, 0)?, w(e, 0, 1)?];
    let dims: Vec<i64> = bits.dims.to_vec();
    let n = bits.element_count() as i64;
    let (flat, counter, advanced, updated_rows) = match algorithm {
        RngAlgorithm::Default | RngAlgorithm::Philox => {
            let counter = if k >= 3 {
                vec![w(e, 1, 0)?, w(e, 1, 1)?, w(e, 2, 0)?, w(e, 2, 1)?]
            } else {
                vec![w(e, 1, 0)?, w(e, 1, 1)?, w(e, 0, 0)?, w(e, 0, 1)?]
            };
            let words32 = if wide { 2 * n } else { n };
            let blocks = (words32 + 3) / 4;
            let flat = philox_words(e, key, &counter, blocks, words32)?;
            (flat, counter, blocks as u64, if k >= 3 { 2 } else { 1 })
        }
        RngAlgorithm::ThreeFry => {
            let counter = vec![w(e, 1, 0)?, w(e, 1, 1)?];
            let (flat, advanced) = threefry_words(e, key, &counter, &dims, wide)?;
            (flat, counter, advanced, 1)
        }
    };
    // The bits in the declared type.
    let bits_value = if wide {
        let mut pair_dims = dims.clone();
        pair_dims.push(2);
        let pairs = e.reshape(flat, &pair_dims)?;
        e.add(
            Op::BitcastConvert,
            &[pairs],
            Some(Shape::Array(bits.clone())),
        )?
    } else {
        let shaped = e.reshape(flat, &dims)?;
        if bits.element_type == ElementType::U32 {
            shaped
        } else {
            e.reinterpret(shaped, bits.element_type)?
        }
    };
    // The new state: the key kept, the counter advanced (rows 1.. of the state it spans).
    let step = [
        e.splat(advanced as u32, &[])?,
        e.splat((advanced >> 32) as u32, &[])?,
    ];
    let next = e.add_words(&counter, &step)?;
    let mut rows = Vec::new();
    for i in 0..k {
        let row = if (1..=updated_rows).contains(&i) {
            let j = 2 * (i as usize - 1);
            let pair = e.pair(next[j], next[j + 1])?;
            e.reshape(pair, &[1, 2])?
        } else {
            e.slice_dim(words, 0, i, i + 1)?
        };
        rows.push(row);
    }
    let new_words = e.add(Op::Concatenate { dimension: 0 }, &rows, None)?;
    let new_state = e.add(
        Op::BitcastConvert,
        &[new_words],
        Some(Shape::Array(state_shape.clone())),
    )?;
    e.add(
        Op::Tuple,
        &[new_state, bits_value],
        Some(instr.shape.clone()),
    )
}

/// The counters `counter + j` for `j < blocks`, word by word (least significant first),
/// as `u32[blocks]` arrays.
fn counters(
    e: &mut Emitter,
    counter: &[InstrId],
    blocks: i64,
) -> Result<Vec<InstrId>, CompileError> {
    let d = [blocks];
    let j = e.add(
        Op::Iota { dimension: 0 },
        &[],
        Some(Shape::array(ElementType::U32, &d)),
    )?;
    let spread_counter: Vec<InstrId> = counter
        .iter()
        .map(|&c| spread(e, c, &d))
        .collect::<Result<_, _>>()?;
    e.add_words(&spread_counter, &[j])
}

/// `u32[blocks]` broadcast of a scalar.
fn spread(e: &mut Emitter, x: InstrId, dims: &[i64]) -> Result<InstrId, CompileError> {
    e.broadcast(x, &[], dims, ElementType::U32)
}

/// Philox 4x32-10 over `blocks` counters (`counter + j`): the blocks' words in order,
/// the first `count` of them, as `u32[count]`.
fn philox_words(
    e: &mut Emitter,
    key: [InstrId; 2],
    counter: &[InstrId],
    blocks: i64,
    count: i64,
) -> Result<InstrId, CompileError> {
    const W: [u32; 2] = [0x9E37_79B9, 0xBB67_AE85];
    const M: [u32; 2] = [0xD251_1F53, 0xCD9E_8D57];
    let d = [blocks];
    let mut x = counters(e, counter, blocks)?;
    let mut k = [spread(e, key[0], &d)?, spread(e, key[1], &d)?];
    let m = [e.splat(M[0], &d)?, e.splat(M[1], &d)?];
    for round in 0..10 {
        let (lo0, hi0) = e.mul_wide(m[0], x[0])?;
        let (lo1, hi1) = e.mul_wide(m[1], x[2])?;
        let a = e.binary(BinaryOp::Xor, hi1, x[1])?;
        let a = e.binary(BinaryOp::Xor, a, k[0])?;
        let c = e.binary(BinaryOp::Xor, hi0, x[3])?;
        let c = e.binary(BinaryOp::Xor, c, k[1])?;
        x = vec![a, lo1, c, lo0];
        if round < 9 {
            k = [
                e.binary_const(BinaryOp::Add, k[0], W[0])?,
                e.binary_const(BinaryOp::Add, k[1], W[1])?,
            ];
        }
    }
    interleave(e, &x, count)
}

/// The words of several `u32[n]` arrays interleaved (`a0 b0 a1 b1 ...`), the first
/// `count` of them.
fn interleave(e: &mut Emitter, parts: &[InstrId], count: i64) -> Result<InstrId, CompileError> {
    let n = e.dims(parts[0])[0];
    let columns: Vec<InstrId> = parts
        .iter()
        .map(|&p| e.reshape(p, &[n, 1]))
        .collect::<Result<_, _>>()?;
    let table = e.add(Op::Concatenate { dimension: 1 }, &columns, None)?;
    let all = e.reshape(table, &[n * parts.len() as i64])?;
    if count == n * parts.len() as i64 {
        return Ok(all);
    }
    e.slice_dim(all, 0, 0, count)
}

/// ThreeFry 2x32-20's words for a result of `dims` (see `xla_ir::eval`'s generator for
/// the arrangement), as a flat `u32` array of the result's words, and how far the
/// counter advances.
fn threefry_words(
    e: &mut Emitter,
    key: [InstrId; 2],
    counter: &[InstrId],
    dims: &[i64],
    wide: bool,
) -> Result<(InstrId, u64), CompileError> {
    let n: i64 = dims.iter().product();
    if wide || dims.is_empty() {
        // One block per element: a 64-bit element is the block's two words; a scalar
        // 32-bit result is block 0's first word.
        let blocks = n.max(1);
        let [x0, x1] = threefry_blocks(e, key, counter, blocks)?;
        let flat = if wide {
            interleave(e, &[x0, x1], 2 * n)?
        } else {
            x0
        };
        return Ok((flat, blocks as u64));
    }
    // Halves along the first even dimension (else the first largest), interleaved.
    let split = dims.iter().position(|&d| d % 2 == 0).unwrap_or_else(|| {
        let max = dims.iter().copied().max().unwrap_or(1);
        dims.iter().position(|&d| d == max).unwrap_or(0)
    });
    let mut half = dims.to_vec();
    half[split] = (dims[split] + 1) / 2;
    let half_count: i64 = half.iter().product();
    let [x0, x1] = threefry_blocks(e, key, counter, half_count)?;
    // [.., half_s, 1, ..] twice -> [.., half_s, 2, ..] -> [.., 2 half_s, ..].
    let mut column = half.clone();
    column.insert(split + 1, 1);
    let a = e.reshape(x0, &column)?;
    let b = e.reshape(x1, &column)?;
    let both = e.add(
        Op::Concatenate {
            dimension: split as i64 + 1,
        },
        &[a, b],
        None,
    )?;
    let mut doubled = half.clone();
    doubled[split] *= 2;
    let mut words = e.reshape(both, &doubled)?;
    if doubled[split] != dims[split] {
        words = e.slice_dim(words, split, 0, dims[split])?;
    }
    Ok((e.reshape(words, &[n])?, half_count as u64))
}

/// ThreeFry 2x32-20 of counters `counter + j` for `j < blocks`: the blocks' two words.
fn threefry_blocks(
    e: &mut Emitter,
    key: [InstrId; 2],
    counter: &[InstrId],
    blocks: i64,
) -> Result<[InstrId; 2], CompileError> {
    use BinaryOp::{Add, Or, ShiftLeft, ShiftRightLogical, Xor};
    const R: [u32; 8] = [13, 15, 26, 6, 17, 29, 16, 24];
    let d = [blocks];
    let c = counters(e, counter, blocks)?;
    let parity = e.binary(Xor, key[0], key[1])?;
    let parity = e.binary_const(Xor, parity, 0x1BD1_1BDA)?;
    let ks = [
        spread(e, key[0], &d)?,
        spread(e, key[1], &d)?,
        spread(e, parity, &d)?,
    ];
    let mut x0 = e.binary(Add, c[0], ks[0])?;
    let mut x1 = e.binary(Add, c[1], ks[1])?;
    for group in 0..5usize {
        for r in 0..4 {
            let rot = R[(group % 2) * 4 + r];
            x0 = e.binary(Add, x0, x1)?;
            let up = e.binary_const(ShiftLeft, x1, rot)?;
            let down = e.binary_const(ShiftRightLogical, x1, 32 - rot)?;
            let rotated = e.binary(Or, up, down)?;
            x1 = e.binary(Xor, rotated, x0)?;
        }
        let g = group + 1;
        x0 = e.binary(Add, x0, ks[g % 3])?;
        x1 = e.binary(Add, x1, ks[(g + 1) % 3])?;
        x1 = e.binary_const(Add, x1, g as u32)?;
    }
    Ok([x0, x1])
}

#[cfg(test)]
mod tests {
    //! The expansion against the evaluator's generators (which match XLA's bits, see
    //! `xla_ir::eval`): the same module evaluated as written and after expansion.
    use super::*;
    use crate::IpuConfig;
    use xla_ir::builder::ModuleBuilder;
    use xla_ir::literal::{ArrayData, ArrayLiteral, Literal};

    fn check(algorithm: RngAlgorithm, state: &[u64], bits: ElementType, dims: &[i64]) {
        let k = state.len() as i64;
        let state_shape = Shape::array(ElementType::U64, &[k]);
        let mut m = ModuleBuilder::new("rng");
        let mut main = m.computation("main");
        let s = main.parameter(0, state_shape.clone(), "state").unwrap();
        let shape = Shape::Tuple(vec![state_shape.clone(), Shape::array(bits, dims)]);
        let r = main
            .add_instruction(Op::RngBitGenerator { algorithm }, &[s], Some(shape))
            .unwrap();
        let entry = main.finish(r).unwrap();
        let module = m.finish(entry).unwrap();
        let input = Literal::Array(ArrayLiteral {
            shape: state_shape.as_array().unwrap().clone(),
            data: ArrayData::U64(state.to_vec()),
        });
        let want = xla_ir::eval::evaluate(&module, std::slice::from_ref(&input)).unwrap();
        let mut expanded = module.clone();
        let config = IpuConfig::default();
        let mut cx = PassContext {
            config: &config,
            warnings: Vec::new(),
            notes: Vec::new(),
        };
        RngBitGeneratorExpander.run(&mut expanded, &mut cx).unwrap();
        xla_ir::verify(&expanded).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            !expanded.to_string().contains("rng-bit-generator("),
            "expanded:\n{expanded}"
        );
        let got = xla_ir::eval::evaluate(&expanded, &[input]).unwrap();
        assert_eq!(
            got, want,
            "{algorithm:?} state {state:x?} -> {bits}{dims:?}"
        );
    }

    const NEAR_CARRY: u64 = u64::MAX - 1;

    #[test]
    fn philox_expansion_gives_the_generators_bits_and_state() {
        for algorithm in [RngAlgorithm::Default, RngAlgorithm::Philox] {
            for state in [
                &[7u64, 11][..],
                &[0xDEAD_BEEF_0123_4567, NEAR_CARRY],
                &[1, NEAR_CARRY, u64::MAX],
            ] {
                for (bits, dims) in [
                    (ElementType::U32, &[3i64, 5][..]),
                    (ElementType::S32, &[17]),
                    (ElementType::U32, &[]),
                    (ElementType::U64, &[5]),
                    (ElementType::S64, &[2, 3]),
                ] {
                    check(algorithm, state, bits, dims);
                }
            }
        }
    }

    #[test]
    fn threefry_expansion_gives_the_generators_bits_and_state() {
        for state in [&[7u64, 11][..], &[0xDEAD_BEEF_0123_4567, NEAR_CARRY, 5]] {
            for (bits, dims) in [
                (ElementType::U32, &[3i64, 4][..]),
                (ElementType::U32, &[5]),
                (ElementType::U32, &[3, 5]),
                (ElementType::S32, &[]),
                (ElementType::U64, &[3]),
            ] {
                check(RngAlgorithm::ThreeFry, state, bits, dims);
            }
        }
    }
}
