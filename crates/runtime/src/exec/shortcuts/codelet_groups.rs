//! Codelet vertices of one compute set run together on the host ([`Codelet::group`]): the
//! parts of a convolution split over output features, which share their input's patch
//! matrix, multiply it by all their kernels in one product where each part made its own
//! (a product of one column streams the whole patch matrix for one output feature). Each
//! member's outputs hold what its own run writes (the codelet's `run_group` says how); the
//! IPU Model charges every vertex its own cost as before.
//!
//! [`Codelet::group`]: crate::Codelet::group

use crate::exec::memory::HostTiles;
use crate::program::codelet::GroupMember;
use rayon::prelude::*;
use rustc_hash::{FxHashMap, FxHashSet};

/// Codelet vertices (`V`: a compute set's loaded vertex) run as one piece of work, each on
/// its own tile.
pub(crate) struct CodeletGroup<V> {
    /// Each member's tile (`ipu * tiles_per_ipu + tile`) and vertex.
    members: Vec<(usize, V)>,
}

impl<V> CodeletGroup<V> {
    /// Number of vertices in the group.
    pub(crate) fn len(&self) -> usize {
        self.members.len()
    }

    /// The members' vertices.
    pub(crate) fn vertices(&self) -> impl Iterator<Item = &V> {
        self.members.iter().map(|(_, v)| v)
    }
}

/// The groups of one compute set's `vertices` (`(tile, vertex)`, in tile order; `key`: the
/// group a vertex's codelet names, if any) and the group keys they take. A group needs two
/// members or more; the compute set's grouped vertices must all lie on distinct tiles
/// (groups run in parallel, each member on its tile's memory alone), else none is grouped.
pub(crate) fn plan<'v, V: Clone + 'v>(
    vertices: impl Iterator<Item = (usize, &'v V)>,
    key: impl Fn(&V) -> Option<usize>,
) -> (Vec<CodeletGroup<V>>, FxHashSet<usize>) {
    let mut by_key: FxHashMap<usize, Vec<(usize, V)>> = FxHashMap::default();
    let mut order = Vec::new();
    for (tile, v) in vertices {
        let Some(key) = key(v) else {
            continue;
        };
        let members = by_key.entry(key).or_insert_with(|| {
            order.push(key);
            Vec::new()
        });
        members.push((tile, v.clone()));
    }
    let groups: Vec<(usize, Vec<(usize, V)>)> = (order.into_iter())
        .filter_map(|key| Some((key, by_key.remove(&key)?)))
        .filter(|(_, members)| members.len() >= 2)
        .collect();
    let mut tiles = FxHashSet::default();
    let distinct = (groups.iter())
        .flat_map(|(_, members)| members.iter().map(|&(t, _)| t))
        .all(|t| tiles.insert(t));
    if !distinct {
        return (Vec::new(), FxHashSet::default());
    }
    let keys = groups.iter().map(|&(key, _)| key).collect();
    let groups = (groups.into_iter())
        .map(|(_, members)| CodeletGroup { members })
        .collect();
    (groups, keys)
}

/// Runs every group of a compute set (in parallel on `pool`, unless `inline`): each
/// member's `member(vertex, its tile's memory)` handed to the first member's codelet.
pub(crate) fn run<'a, V: Sync>(
    groups: &'a [CodeletGroup<V>],
    memory: &'a mut HostTiles,
    inline: bool,
    pool: &rayon::ThreadPool,
    member: impl Fn(&'a V, &'a mut [u8]) -> GroupMember<'a> + Sync,
) -> Result<(), String> {
    let (base, starts, ends) = memory.raw_parts();
    // The allocation's address, shared by the parallel groups (a pointer is not `Sync`).
    let base = base as usize;
    let one = |group: &'a CodeletGroup<V>| -> Result<(), String> {
        let mut members = Vec::with_capacity(group.members.len());
        for (tile, v) in &group.members {
            let len = ends[*tile] - starts[*tile];
            // SAFETY: tile memories are disjoint ranges of the one allocation, and every
            // grouped vertex of the compute set lies on a tile of its own (`plan`), so each
            // tile's bytes are borrowed by one member of one group only, for this call.
            let mem = unsafe {
                std::slice::from_raw_parts_mut((base as *mut u8).add(starts[*tile]), len)
            };
            members.push(member(v, mem));
        }
        let first = members[0].codelet;
        first.run_group(&mut members)
    };
    if inline {
        return groups.iter().try_for_each(one);
    }
    pool.install(|| groups.par_iter().try_for_each(one))
}
