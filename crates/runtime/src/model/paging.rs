//! Out of core ([`Target::out_of_core`]), a program laid out on virtual tiles runs on the
//! physical ones: each physical tile runs the virtual tiles `v ≡ p (mod physical)` one
//! after another, so a step's per-tile work adds up per physical tile, and the bytes a step
//! reads and writes on a virtual tile are paged between Streaming Memory and the tile over
//! the IPU's stream bandwidth, shared by all its tiles.
//!
//! On the physical tiles (the usual case) both folds are the identity: the busiest tile's
//! work and no paging.

use crate::device::target::Target;
use crate::model::cost;

/// The busiest physical tile's work: `per_tile` gives work by (virtual) tile, indexed
/// `ipu * tiles_per_ipu + tile`; out of core, the work of the virtual tiles a physical tile
/// runs is summed.
pub(crate) fn busiest_physical(
    target: &Target,
    num_ipus: usize,
    per_tile: impl IntoIterator<Item = (usize, u64)>,
) -> u64 {
    if !target.is_out_of_core() {
        return per_tile.into_iter().map(|(_, w)| w).max().unwrap_or(0);
    }
    let physical = target.physical_tiles_per_ipu;
    let mut sums = vec![0u64; num_ipus * physical];
    for (t, w) in per_tile {
        let (ipu, tile) = (t / target.tiles_per_ipu, t % target.tiles_per_ipu);
        sums[ipu * physical + target.physical_tile(tile)] += w;
    }
    sums.into_iter().max().unwrap_or(0)
}

/// What paging costs a step: `per_tile` gives the bytes the step reads and writes on each
/// (virtual) tile, indexed `ipu * tiles_per_ipu + tile`. Returns the cycles of the IPU
/// that pages most, and the bytes paged on all IPUs; `(0, 0)` on the physical tiles.
pub(crate) fn paging(
    target: &Target,
    num_ipus: usize,
    per_tile: impl IntoIterator<Item = (usize, u64)>,
) -> (u64, u64) {
    if !target.is_out_of_core() {
        return (0, 0);
    }
    let mut per_ipu = vec![0u64; num_ipus];
    for (t, bytes) in per_tile {
        per_ipu[t / target.tiles_per_ipu] += bytes;
    }
    let busiest = per_ipu.iter().copied().max().unwrap_or(0);
    (cost::paging_cycles(target, busiest), per_ipu.iter().sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_the_physical_tiles_the_busiest_tile_counts_and_nothing_is_paged() {
        let t = Target::ipu2().with_tiles_per_ipu(4);
        let work = [(0, 10), (1, 30), (2, 20), (5, 5)];
        assert_eq!(busiest_physical(&t, 2, work), 30);
        assert_eq!(paging(&t, 2, work), (0, 0));
    }

    #[test]
    fn out_of_core_each_physical_tile_runs_its_virtual_tiles_in_turn() {
        // 8 virtual tiles on 4 physical ones, 2 IPUs: virtual 1 and 5 share physical 1.
        let t = Target::ipu2().with_tiles_per_ipu(4).out_of_core(8);
        let work = [(1, 30), (5, 25), (2, 40), (8 + 1, 50)];
        assert_eq!(busiest_physical(&t, 2, work), 55);
        let (cycles, bytes) = paging(&t, 2, [(1, 640_000), (5, 640_000), (9, 64_000)]);
        assert_eq!(bytes, 1_344_000);
        // The first IPU pages 1.28 MB at 64 GB/s and 1.325 GHz: 26,500 cycles (rounded up).
        assert_eq!(cycles, cost::paging_cycles(&t, 1_280_000));
        assert!((26_500..=26_501).contains(&cycles), "{cycles}");
    }
}
