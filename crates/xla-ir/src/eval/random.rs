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
//! - **ThreeFry 2x32-20** (`rng_three_fry`): word 1 is a 64-bit counter; element i of a
//!   64-bit result is ThreeFry(counter + i, key) as one word; a 32-bit result is split in
//!   halves along its first even dimension (else its largest), element j of the half shape
//!   giving the two words at positions 2j and 2j+1 of that dimension. The new state keeps
//!   the key and advances the counter by the elements generated.

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

/// One ThreeFry 2x32 block: 20 rounds, the key injected every 4.
fn threefry2x32(x: [u32; 2], key: [u32; 2]) -> [u32; 2] {
    const R: [u32; 8] = [13, 15, 26, 6, 17, 29, 16, 24];
    let ks = [key[0], key[1], 0x1BD1_1BDA ^ key[0] ^ key[1]];
    let mut x = [x[0].wrapping_add(ks[0]), x[1].wrapping_add(ks[1])];
    for group in 0..5 {
        for r in 0..4 {
            let rot = R[(group % 2) * 4 + r];
            x[0] = x[0].wrapping_add(x[1]);
            x[1] = x[1].rotate_left(rot) ^ x[0];
        }
        let g = group + 1;
        x[0] = x[0].wrapping_add(ks[g % 3]);
        x[1] = x[1].wrapping_add(ks[(g + 1) % 3]).wrapping_add(g as u32);
    }
    x
}

/// ThreeFry's 32-bit words for a result of `dims`, from `counter` under `key`; returns
/// the words in row-major order and how far the counter advanced.
fn threefry_words32(key: u64, counter: u64, dims: &[i64]) -> (Vec<u32>, u64) {
    let key = [key as u32, (key >> 32) as u32];
    let block = |i: u64| {
        let c = counter.wrapping_add(i);
        threefry2x32([c as u32, (c >> 32) as u32], key)
    };
    if dims.is_empty() {
        return (vec![block(0)[0]], 1);
    }
    // The dimension split in halves: the first even one, else the (first) largest.
    let split = dims.iter().position(|&d| d % 2 == 0).unwrap_or_else(|| {
        let max = *dims.iter().max().expect("rank >= 1");
        dims.iter()
            .position(|&d| d == max)
            .expect("the max is there")
    });
    let mut half = dims.to_vec();
    half[split] = (dims[split] + 1) / 2;
    let half_count: u64 = half.iter().map(|&d| d as u64).product();
    let total: usize = dims.iter().map(|&d| d as usize).product();
    let mut out = Vec::with_capacity(total);
    let mut index = vec![0i64; dims.len()];
    for _ in 0..total {
        let mut flat = 0u64;
        for (d, &i) in index.iter().enumerate() {
            let i = if d == split { i / 2 } else { i };
            flat = flat * half[d] as u64 + i as u64;
        }
        out.push(block(flat)[(index[split] % 2) as usize]);
        for d in (0..dims.len()).rev() {
            index[d] += 1;
            if index[d] < dims[d] {
                break;
            }
            index[d] = 0;
        }
    }
    (out, half_count)
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
    if words.len() < 2 {
        return Err(OpError::Message(
            "rng-bit-generator's state needs at least 2 words".into(),
        ));
    }
    let key = words[0];
    let n = bits_shape.element_count() as usize;
    let wide = matches!(bits_shape.element_type, ElementType::U64 | ElementType::S64);
    let mut new_words = words.clone();
    // Each generator's words in row-major order: 32-bit words, or 64-bit ones as pairs.
    let (flat32, flat64): (Vec<u32>, Vec<u64>) = match algorithm {
        RngAlgorithm::ThreeFry => {
            let counter = words[1];
            if wide {
                let key32 = [key as u32, (key >> 32) as u32];
                let words64 = (0..n as u64)
                    .map(|i| {
                        let c = counter.wrapping_add(i);
                        let [lo, hi] = threefry2x32([c as u32, (c >> 32) as u32], key32);
                        lo as u64 | (hi as u64) << 32
                    })
                    .collect();
                new_words[1] = counter.wrapping_add(n as u64);
                (Vec::new(), words64)
            } else {
                let (w, advanced) = threefry_words32(key, counter, &bits_shape.dims);
                new_words[1] = counter.wrapping_add(advanced);
                (w, Vec::new())
            }
        }
        RngAlgorithm::Default | RngAlgorithm::Philox => {
            let counter = if words.len() >= 3 {
                words[1] as u128 | (words[2] as u128) << 64
            } else {
                words[1] as u128 | (words[0] as u128) << 64
            };
            let words32 = if wide { 2 * n } else { n };
            let blocks = words32.div_ceil(4);
            let flat: Vec<u32> = philox_blocks(key, counter, blocks)
                .into_iter()
                .flatten()
                .collect();
            let advanced = counter.wrapping_add(blocks as u128);
            new_words[1] = advanced as u64;
            if words.len() >= 3 {
                new_words[2] = (advanced >> 64) as u64;
            }
            let pairs = flat
                .chunks(2)
                .take(if wide { n } else { 0 })
                .map(|p| p[0] as u64 | (p[1] as u64) << 32)
                .collect();
            (flat, pairs)
        }
    };
    let data = match bits_shape.element_type {
        ElementType::U32 => ArrayData::U32(flat32[..n].to_vec()),
        ElementType::S32 => ArrayData::S32(flat32[..n].iter().map(|&w| w as i32).collect()),
        ElementType::U64 => ArrayData::U64(flat64),
        ElementType::S64 => ArrayData::S64(flat64.into_iter().map(|w| w as i64).collect()),
        other => {
            return Err(OpError::Message(format!(
                "rng-bit-generator makes 32- or 64-bit integers, not {other}"
            )));
        }
    };
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
    /// The Random123 known-answer test for ThreeFry 2x32-20.
    #[test]
    fn threefry_matches_the_random123_known_answer() {
        assert_eq!(threefry2x32([0, 0], [0, 0]), [0x6b20_0159, 0x99ba_4efe]);
        assert_eq!(
            threefry2x32([u32::MAX; 2], [u32::MAX; 2]),
            [0x1cb9_96fc, 0xbb00_2be7]
        );
    }

    /// A 32-bit result of odd and even dimensions: the halves interleave along the first
    /// even dimension, and the counter advances by the half shape's elements.
    #[test]
    fn threefry_words_interleave_halves_along_the_first_even_dimension() {
        let (w, advanced) = threefry_words32(7, 100, &[3, 4]);
        assert_eq!(advanced, 6);
        let b = |i: u64| threefry2x32([100 + i as u32, 0], [7, 0]);
        // Row 1, columns 2 and 3: half element (1, 1) = 3, words 0 and 1.
        assert_eq!(w[4 + 2], b(3)[0]);
        assert_eq!(w[4 + 3], b(3)[1]);
        let (odd, advanced) = threefry_words32(7, 100, &[5]);
        assert_eq!(advanced, 3);
        assert_eq!(odd, vec![b(0)[0], b(0)[1], b(1)[0], b(1)[1], b(2)[0]]);
    }

    #[test]
    fn philox_matches_the_random123_known_answer() {
        let out = philox4x32([u32::MAX; 4], [u32::MAX; 2]);
        assert_eq!(out, [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]);
        let zero = philox4x32([0; 4], [0; 2]);
        assert_eq!(zero, [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]);
    }
}
