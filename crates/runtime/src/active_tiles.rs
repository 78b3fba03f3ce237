//! Running one superstep's per-tile work over the tiles that have some: on the calling
//! thread when the whole step is small (waking host threads would cost more), else in
//! chunks of tiles on the pool.

use rayon::prelude::*;

/// Calls `f(tile memory, slot)` for every tile whose `slot` is not `u32::MAX`, stopping at
/// the first error.
pub(crate) fn for_each_active<E: Send>(
    memory: &mut [Vec<u8>],
    slot: &[u32],
    small: bool,
    pool: &rayon::ThreadPool,
    f: impl Fn(&mut Vec<u8>, usize) -> Result<(), E> + Sync,
) -> Result<(), E> {
    if small {
        return memory
            .iter_mut()
            .zip(slot)
            .filter(|(_, s)| **s != u32::MAX)
            .try_for_each(|(mem, &s)| f(mem, s as usize));
    }
    let chunk = memory.len() / (4 * pool.current_num_threads()).max(1);
    pool.install(|| {
        memory
            .par_iter_mut()
            .zip(slot.par_iter())
            .with_min_len(chunk.max(1))
            .filter(|(_, s)| **s != u32::MAX)
            .try_for_each(|(mem, &s)| f(mem, s as usize))
    })
}
