//! `rng-bit-generator`: XLA's bit generators, producing exactly the bits XLA's expander
//! makes of them (`rng_bit_generator_expander.cc` over `prng.cc`), read in our own words:
//!
//! - the state is a `u64` vector; word 0 is the key;
//! - **Philox 4x32-10** (`rng_default` on XLA's CPU backend, `rng_philox`): the counter is a
//!   128-bit number from words 1 and 2 (a 2-word state: word 1 low, word 0 high); block j of
//!   four 32-bit outputs is Philox(counter + j, key), and the outputs are the blocks'
//!   words in order; 64-bit outputs pair words (0,1) and (2,3) of each block. The new state
//!   keeps the key and advances the counter by the number of blocks (a 2-word state keeps
//!   only the counter's low word);
//! - **ThreeFry 2x32-20** (`rng_three_fry`): not built yet (an error says so).

use super::{OpError, OpResult};
use crate::literal::{ArrayData, ArrayLiteral};
use crate::op::RngAlgorithm;
use crate::{ElementType, Literal, Shape};

/// One Philox 4x32 block: ten rounds, the key raised after each.
fn philox4x32(mut x: [u32; 4], mut key: [u32; 2]) -> [u32; 4] {
    const W: [u32; 2] = [0x9E37_79B9, 0xBB67_AE85];
    const M: [u64; 2] = [0xD251_1F53, 0xCD9E_8D57];
    for _ in 0..10 {
        let p0 = M[0] * x[0] as u64;
        let p1 = M[1] * x[2] as u64;
        x = [
            (p1 >> 32) as u32 ^ x[1] ^ key[0],
            p1 as u32,
            (p0 >> 32) as u32 ^ x[3] ^ key[1],
            p0 as u32,
        ];
        key = [key[0].wrapping_add(W[0]), key[1].wrapping_add(W[1])];
    }
    x
}

/// `count` Philox blocks from `counter` (a 128-bit number) under `key`.
fn philox_blocks(key: u64, counter: u128, count: usize) -> Vec<[u32; 4]> {
    let key = [key as u32, (key >> 32) as u32];
    (0..count as u128)
        .map(|j| {
            let c = counter.wrapping_add(j);
            philox4x32(
                [
                    c as u32,
                    (c >> 32) as u32,
                    (c >> 64) as u32,
                    (c >> 96) as u32,
                ],
                key,
            )
        })
        .collect()
}

/// `(new state, bits)` of `rng-bit-generator` on `state` for a result of `shape`.
pub(super) fn rng_bit_generator(
    algorithm: RngAlgorithm,
    state: &ArrayLiteral,
    shape: &Shape,
) -> OpResult {
    let ArrayData::U64(words) = &state.data else {
        return Err(OpError::Message(format!(
            "rng-bit-generator's state must be u64, found {}",
            state.shape
        )));
    };
    let Some([state_shape, Shape::Array(bits_shape)]) = shape.as_tuple() else {
        return Err(OpError::Message(format!(
            "rng-bit-generator returns (state, bits), not {shape}"
        )));
    };
    if algorithm == RngAlgorithm::ThreeFry {
        return Err(OpError::Message(
            "rng-bit-generator with rng_three_fry is not supported yet (rng_default and rng_philox are)"
                .into(),
        ));
    }
    if words.len() < 2 {
        return Err(OpError::Message(
            "rng-bit-generator's state needs at least 2 words".into(),
        ));
    }
    let key = words[0];
    let counter = if words.len() >= 3 {
        words[1] as u128 | (words[2] as u128) << 64
    } else {
        words[1] as u128 | (words[0] as u128) << 64
    };
    let n = bits_shape.element_count() as usize;
    let wide = matches!(bits_shape.element_type, ElementType::U64 | ElementType::S64);
    let words32 = if wide { 2 * n } else { n };
    let blocks = words32.div_ceil(4);
    let outputs = philox_blocks(key, counter, blocks);
    let flat: Vec<u32> = outputs.iter().flatten().copied().collect();
    let data = match bits_shape.element_type {
        ElementType::U32 => ArrayData::U32(flat[..n].to_vec()),
        ElementType::S32 => ArrayData::S32(flat[..n].iter().map(|&w| w as i32).collect()),
        ElementType::U64 | ElementType::S64 => {
            let pairs: Vec<u64> = flat
                .chunks(2)
                .take(n)
                .map(|p| p[0] as u64 | (p[1] as u64) << 32)
                .collect();
            if bits_shape.element_type == ElementType::U64 {
                ArrayData::U64(pairs)
            } else {
                ArrayData::S64(pairs.into_iter().map(|w| w as i64).collect())
            }
        }
        other => {
            return Err(OpError::Message(format!(
                "rng-bit-generator makes 32- or 64-bit integers, not {other}"
            )));
        }
    };
    let advanced = counter.wrapping_add(blocks as u128);
    let mut new_words = words.clone();
    new_words[1] = advanced as u64;
    if words.len() >= 3 {
        new_words[2] = (advanced >> 64) as u64;
    }
    let Shape::Array(state_array) = state_shape else {
        return Err(OpError::Message(
            "rng-bit-generator's state is an array".into(),
        ));
    };
    Ok(Literal::Tuple(vec![
        Literal::Array(ArrayLiteral {
            shape: state_array.clone(),
            data: ArrayData::U64(new_words),
        }),
        Literal::Array(ArrayLiteral {
            shape: bits_shape.clone(),
            data,
        }),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Random123 known-answer test for Philox 4x32-10 (counter and key all ones).
    #[test]
    fn philox_matches_the_random123_known_answer() {
        let out = philox4x32([u32::MAX; 4], [u32::MAX; 2]);
        assert_eq!(out, [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]);
        let zero = philox4x32([0; 4], [0; 2]);
        assert_eq!(zero, [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]);
    }
}
