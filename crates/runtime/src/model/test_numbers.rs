//! Reproducible random numbers for the model's tests.

/// Numbers below `m` (0 for `m` = 0), from `seed`: a linear congruential generator.
pub(crate) fn numbers(mut seed: u64) -> impl FnMut(usize) -> usize {
    move |m| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as usize % m.max(1)
    }
}
