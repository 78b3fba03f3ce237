//! Finding repeated regions: from a seed of k instructions with one signature, grow k
//! regions in lockstep, adding a tuple of k instructions (one per region) only when they
//! share a signature, are distinct and unclaimed, and are wired to the regions exactly as
//! each other (the same operand positions reach the same region members). The regions are
//! then isomorphic by construction; growth stops where the copies differ (the first layer
//! reads a parameter where the others read the previous layer, each layer slices a
//! different weight). A region must be convex (no path leaves it and comes back) to
//! become a call.

use super::signature::{Fingerprints, outlinable};
use std::collections::{HashMap, HashSet};
use xla_ir::ids::InstrId;
use xla_ir::{Computation, Module};

/// k isomorphic regions: `members[j][t]` is region j's instruction standing for
/// `members[0][t]`.
#[derive(Debug, Clone)]
pub(crate) struct RegionGroup {
    pub members: Vec<Vec<InstrId>>,
}

impl RegionGroup {
    /// Instructions per region.
    pub(crate) fn len(&self) -> usize {
        self.members[0].len()
    }
}

/// The users of every instruction of a computation, with the operand positions they use.
pub(crate) struct Users {
    users: HashMap<InstrId, Vec<(InstrId, usize)>>,
}

impl Users {
    pub(crate) fn of(c: &Computation) -> Users {
        let mut users: HashMap<InstrId, Vec<(InstrId, usize)>> = HashMap::new();
        for &id in c.order() {
            for (q, &o) in c.instr(id).operands.iter().enumerate() {
                users.entry(o).or_default().push((id, q));
            }
        }
        Users { users }
    }

    pub(crate) fn get(&self, id: InstrId) -> &[(InstrId, usize)] {
        self.users.get(&id).map_or(&[], Vec::as_slice)
    }
}

/// Grows regions in lockstep from `seed` (k distinct instructions of one signature).
pub(crate) struct Grower<'a> {
    pub comp: &'a Computation,
    pub users: &'a Users,
    pub signatures: &'a HashMap<InstrId, u64>,
    /// Instructions already in an accepted region.
    pub claimed: &'a HashSet<InstrId>,
}

impl Grower<'_> {
    /// The regions grown from `seed`.
    pub(crate) fn grow(&self, seed: &[InstrId]) -> RegionGroup {
        let k = seed.len();
        let mut members: Vec<Vec<InstrId>> = vec![Vec::new(); k];
        // Instruction -> (region, index in it).
        let mut owner: HashMap<InstrId, (usize, usize)> = HashMap::new();
        let mut queue: Vec<usize> = Vec::new();
        if self.admissible(seed, &members, &owner) {
            self.add(seed, &mut members, &mut owner, &mut queue);
        }
        while let Some(t) = queue.pop() {
            let first = self.comp.instr(members[0][t]);
            for q in 0..first.operands.len() {
                let cand: Vec<InstrId> = (0..k)
                    .map(|j| self.comp.instr(members[j][t]).operands[q])
                    .collect();
                if self.admissible(&cand, &members, &owner) {
                    self.add(&cand, &mut members, &mut owner, &mut queue);
                }
            }
            for &(u0, q) in self.users.get(members[0][t]) {
                let Some(cand) = self.matching_users(t, u0, q, &members) else {
                    continue;
                };
                if self.admissible(&cand, &members, &owner) {
                    self.add(&cand, &mut members, &mut owner, &mut queue);
                }
            }
        }
        RegionGroup { members }
    }

    /// For each region j, its one user of `members[j][t]` at operand `q` with `u0`'s
    /// signature (None when some region has none or several).
    fn matching_users(
        &self,
        t: usize,
        u0: InstrId,
        q: usize,
        members: &[Vec<InstrId>],
    ) -> Option<Vec<InstrId>> {
        let sig = self.signatures.get(&u0)?;
        members
            .iter()
            .map(|m| {
                let mut found = self
                    .users
                    .get(m[t])
                    .iter()
                    .filter(|&&(u, p)| p == q && self.signatures.get(&u) == Some(sig))
                    .map(|&(u, _)| u);
                let one = found.next()?;
                found.next().is_none().then_some(one)
            })
            .collect()
    }

    fn add(
        &self,
        cand: &[InstrId],
        members: &mut [Vec<InstrId>],
        owner: &mut HashMap<InstrId, (usize, usize)>,
        queue: &mut Vec<usize>,
    ) {
        let t = members[0].len();
        for (j, &x) in cand.iter().enumerate() {
            members[j].push(x);
            owner.insert(x, (j, t));
        }
        queue.push(t);
    }

    /// Whether the tuple `cand` may join the regions.
    fn admissible(
        &self,
        cand: &[InstrId],
        members: &[Vec<InstrId>],
        owner: &HashMap<InstrId, (usize, usize)>,
    ) -> bool {
        let k = cand.len();
        // Distinct, unclaimed, not yet in any region, all of one outlinable signature.
        let mut seen = HashSet::new();
        if !cand
            .iter()
            .all(|&x| seen.insert(x) && !self.claimed.contains(&x) && !owner.contains_key(&x))
        {
            return false;
        }
        let sig = self.signatures.get(&cand[0]);
        if sig.is_none()
            || !cand
                .iter()
                .all(|x| self.signatures.get(x) == sig && outlinable(self.comp.instr(*x)))
        {
            return false;
        }
        // Operands: in every region the same member, or outside every region's own (in
        // another region is outside: one region's result is the next one's input).
        let n = self.comp.instr(cand[0]).operands.len();
        for q in 0..n {
            let at = |j: usize| {
                let o = self.comp.instr(cand[j]).operands[q];
                owner.get(&o).filter(|&&(r, _)| r == j).map(|&(_, t)| t)
            };
            let first = at(0);
            if (1..k).any(|j| at(j) != first) {
                return false;
            }
        }
        // Users already in the candidate's region: each region's reads its candidate at
        // the same positions (users in another region read it from outside theirs).
        for (j, &x) in cand.iter().enumerate() {
            for &(u, q) in self.users.get(x) {
                if let Some(&(r, t)) = owner.get(&u)
                    && r == j
                {
                    for (j2, &x2) in cand.iter().enumerate() {
                        if self.comp.instr(members[j2][t]).operands[q] != x2 {
                            return false;
                        }
                    }
                }
            }
        }
        true
    }
}

/// Whether every region of the group is convex: no path from a region's instruction
/// through instructions outside it back into it.
pub(crate) fn convex(users: &Users, group: &RegionGroup) -> bool {
    group.members.iter().all(|region| {
        let inside: HashSet<InstrId> = region.iter().copied().collect();
        // Outside instructions reachable from the region.
        let mut stack: Vec<InstrId> = region
            .iter()
            .flat_map(|&x| users.get(x).iter().map(|&(u, _)| u))
            .filter(|u| !inside.contains(u))
            .collect();
        let mut seen: HashSet<InstrId> = HashSet::new();
        while let Some(x) = stack.pop() {
            if !seen.insert(x) {
                continue;
            }
            for &(u, _) in users.get(x) {
                if inside.contains(&u) {
                    return false;
                }
                stack.push(u);
            }
        }
        true
    })
}

/// The signature of every instruction of `comp`.
pub(crate) fn signatures_of(module: &Module, comp: &Computation) -> HashMap<InstrId, u64> {
    let mut prints = Fingerprints::default();
    comp.order()
        .iter()
        .map(|&id| (id, prints.signature(module, comp, comp.instr(id))))
        .collect()
}
