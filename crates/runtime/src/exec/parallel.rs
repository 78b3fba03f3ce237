//! Running one superstep's per-tile work over the tiles that have some: on the calling
//! thread when the whole step is small (waking host threads would cost more), else in
//! ranges of consecutive tiles of about equal work on the pool. The ranges are weighed
//! once, at load: a compute set of 32 heavy vertices on 32 neighbouring tiles is spread
//! over every thread, where ranges of equal tile counts would give it all to one.

use crate::exec::memory::{HostTiles, TileRange};
use rayon::prelude::*;

/// Ranges a step is cut into (the pool's threads steal them from each other).
const RANGES: usize = 16;

/// How a step's tiles are cut into ranges for the host threads: range `i` is tiles
/// `bounds[i]..bounds[i + 1]`, from the first active tile to the last (a step on 16 tiles
/// does not walk the other 1 456 to find them). One range: the tiles run on the calling
/// thread.
#[derive(Debug, Clone)]
pub(crate) struct Spread {
    bounds: Vec<usize>,
}

impl Spread {
    /// The ranges for a step whose tile `t` has `weights[t]` work (an estimate: cycles,
    /// bytes), the tiles active in `slot` counting at least 1; all in one range when
    /// `small`.
    pub(crate) fn new(weights: &[u64], slot: &[u32], small: bool) -> Spread {
        let active = |t: &usize| slot[*t] != u32::MAX;
        let Some(first) = (0..slot.len()).find(active) else {
            return Spread { bounds: vec![0, 0] };
        };
        let end = (0..slot.len()).rfind(active).expect("one is active") + 1;
        let weight = |t: usize| match slot[t] {
            u32::MAX => 0,
            _ => weights[t] + 1,
        };
        let total: u64 = (first..end).map(weight).sum();
        if small {
            return Spread {
                bounds: vec![first, end],
            };
        }
        let mut bounds = vec![first];
        let mut done = 0u64;
        for t in first..end {
            done += weight(t);
            // Cut after the tile that reaches the next share of the total.
            let share = total * bounds.len() as u64 / RANGES as u64;
            if done >= share && bounds.len() < RANGES && t + 1 < end && weight(t) > 0 {
                bounds.push(t + 1);
            }
        }
        bounds.push(end);
        Spread { bounds }
    }

    /// True when the step runs on the calling thread.
    pub(crate) fn is_inline(&self) -> bool {
        self.bounds.len() <= 2
    }
}

/// Calls `f(tile memory, slot)` for every tile whose `slot` is not `u32::MAX`, stopping at
/// the first error; the ranges of `spread` run in parallel on `pool`. Before each tile's
/// `f`, `ahead(tile's memory, its slot)` is called with the active tile two on in the range
/// (and with the second before the first): a hint to fetch what it will read or write (one
/// tile on was too late where tiles have little work: the MLP's and transformer's compute
/// -5 %, three on no better; the transformer's exchange -9 %).
pub(crate) fn for_each_active_ahead<E: Send>(
    memory: &mut HostTiles,
    slot: &[u32],
    spread: &Spread,
    pool: &rayon::ThreadPool,
    ahead: impl Fn(&[u8], usize) + Sync,
    f: impl Fn(&mut [u8], usize) -> Result<(), E> + Sync,
) -> Result<(), E> {
    let run = |mut range: TileRange| {
        let active = (range.tiles.clone()).filter(|&t| slot[t] != u32::MAX);
        if let Some(second) = active.clone().nth(1) {
            ahead(range.tile(second), slot[second] as usize);
        }
        let mut later = active.clone().skip(2);
        for t in active {
            if let Some(next) = later.next() {
                ahead(range.tile(next), slot[next] as usize);
            }
            f(range.tile(t), slot[t] as usize)?;
        }
        Ok(())
    };
    let ranges = memory.ranges_mut(&spread.bounds);
    if spread.is_inline() {
        return ranges.into_iter().try_for_each(run);
    }
    pool.install(|| ranges.into_par_iter().try_for_each(run))
}

/// Calls `f(tiles)` for each range of tiles of `spread`, the ranges in parallel on `pool`
/// (on the calling thread for one range): for work that reaches tile memory its own way.
pub(crate) fn for_each_range(
    spread: &Spread,
    pool: &rayon::ThreadPool,
    f: impl Fn(std::ops::Range<usize>) + Sync + Send,
) {
    let ranges = spread.bounds.windows(2).map(|w| w[0]..w[1]);
    if spread.is_inline() {
        return ranges.for_each(f);
    }
    let ranges: Vec<std::ops::Range<usize>> = ranges.collect();
    pool.install(|| ranges.into_par_iter().for_each(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_few_heavy_neighbouring_tiles_are_cut_into_ranges_of_equal_work() {
        let mut slot = vec![u32::MAX; 1472];
        let mut weights = vec![0; 1472];
        for t in 100..132 {
            slot[t] = (t - 100) as u32;
            weights[t] = 1000;
        }
        let spread = Spread::new(&weights, &slot, false);
        assert_eq!(spread.bounds.len(), RANGES + 1);
        for w in spread.bounds.windows(2).skip(1).take(RANGES - 2) {
            assert_eq!(w[1] - w[0], 2, "{:?}", spread.bounds);
        }
        // From the first active tile to the last.
        assert_eq!((spread.bounds[0], spread.bounds[RANGES]), (100, 132));
    }

    #[test]
    fn small_steps_and_steps_without_work_run_inline_and_every_active_tile_runs_once() {
        let slot: Vec<u32> = (0..64)
            .map(|t| if t % 3 == 0 { t } else { u32::MAX })
            .collect();
        assert!(Spread::new(&[5; 64], &slot, true).is_inline());
        assert!(Spread::new(&[0; 64], &[u32::MAX; 64], false).is_inline());
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let spread = Spread::new(&[5; 64], &slot, false);
        assert!(!spread.is_inline());
        let mut memory = HostTiles::zeroed([1; 64]);
        let Ok(()) = for_each_active_ahead(
            &mut memory,
            &slot,
            &spread,
            &pool,
            |_, _| {},
            |mem, s| {
                mem[0] += 1 + (s % 2) as u8;
                Ok::<(), std::convert::Infallible>(())
            },
        );
        for t in 0..64 {
            let want = if t % 3 == 0 { 1 + (t % 2) as u8 } else { 0 };
            assert_eq!(memory[t], [want], "tile {t}");
        }
    }

    #[test]
    fn ranges_cover_every_tile_once_in_parallel_or_inline() {
        let slot: Vec<u32> = (0..100).collect();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        for small in [false, true] {
            let spread = Spread::new(&[3; 100], &slot, small);
            let seen = std::sync::Mutex::new(Vec::new());
            for_each_range(&spread, &pool, |tiles| seen.lock().unwrap().extend(tiles));
            let mut seen = seen.into_inner().unwrap();
            seen.sort_unstable();
            assert_eq!(seen, (0..100).collect::<Vec<_>>(), "small: {small}");
        }
    }

    #[test]
    fn the_hint_names_each_active_tile_two_on_in_a_range_with_its_memory_before_it_runs() {
        // Tile t's memory holds t; slots count the active tiles (every third).
        let mut slot = vec![u32::MAX; 90];
        for (s, t) in (0..90).step_by(3).enumerate() {
            slot[t] = s as u32;
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        for small in [false, true] {
            let spread = Spread::new(&[5; 90], &slot, small);
            let mut memory = HostTiles::zeroed([1; 90]);
            for t in 0..90 {
                memory[t][0] = t as u8;
            }
            // In order: ("hint", tile) and ("run", tile).
            let events = std::sync::Mutex::new(Vec::new());
            let log = |what: &'static str, mem: &[u8], s: usize| {
                assert_eq!(
                    slot[mem[0] as usize], s as u32,
                    "{what}: memory and slot agree"
                );
                events.lock().unwrap().push((what, mem[0] as usize));
            };
            let Ok(()) = for_each_active_ahead(
                &mut memory,
                &slot,
                &spread,
                &pool,
                |mem, s| log("hint", mem, s),
                |mem, s| {
                    log("run", mem, s);
                    Ok::<(), std::convert::Infallible>(())
                },
            );
            let events = events.into_inner().unwrap();
            let ranges: Vec<_> = spread.bounds.windows(2).map(|w| w[0]..w[1]).collect();
            for range in ranges {
                let active: Vec<usize> = range.filter(|&t| slot[t] != u32::MAX).collect();
                let of_range: Vec<(&str, usize)> = (events.iter().copied())
                    .filter(|e| active.contains(&e.1))
                    .collect();
                // The second tile's hint, then each tile run, preceded by the hint of the
                // one two on (while there is one).
                let mut want: Vec<(&str, usize)> = active
                    .get(1)
                    .map(|&second| ("hint", second))
                    .into_iter()
                    .collect();
                for (i, &t) in active.iter().enumerate() {
                    if let Some(&later) = active.get(i + 2) {
                        want.push(("hint", later));
                    }
                    want.push(("run", t));
                }
                // A range runs on one thread: its events keep their order in the log.
                assert_eq!(of_range, want, "small: {small}");
            }
        }
    }
}
