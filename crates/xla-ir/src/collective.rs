//! What collectives share: which replicas take part together (`replica_groups`, as lists
//! `{{0,1},{2,3}}` or in XLA's iota form `[2,2]<=[4]`, `[2,2]<=[2,2]T(1,0)`), the channel,
//! and how device ids are read.

use std::fmt;

/// `replica_groups`: the groups of replicas a collective runs within.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ReplicaGroups {
    /// `{{0,1},{2,3}}`; empty (`{}`): every replica in one group.
    Listed(Vec<Vec<i64>>),
    /// `[G,S]<=[dims]T(perm)`: `iota(product(dims))` reshaped to `dims`, transposed by
    /// `perm` (identity when empty), read row-major as G groups of S.
    Iota {
        /// `[G, S]`: groups and replicas per group.
        groups: [i64; 2],
        /// The iota's shape before the transpose.
        reshape: Vec<i64>,
        /// The transpose (empty: none).
        transpose: Vec<i64>,
    },
}

impl ReplicaGroups {
    /// The groups, each a list of replica ids, for `replicas` replicas in all.
    pub fn groups(&self, replicas: i64) -> Vec<Vec<i64>> {
        match self {
            ReplicaGroups::Listed(g) if g.is_empty() => vec![(0..replicas).collect()],
            ReplicaGroups::Listed(g) => g.clone(),
            ReplicaGroups::Iota {
                groups,
                reshape,
                transpose,
            } => {
                let total: i64 = reshape.iter().product();
                let perm: Vec<usize> = if transpose.is_empty() {
                    (0..reshape.len()).collect()
                } else {
                    transpose.iter().map(|&p| p as usize).collect()
                };
                let out_dims: Vec<i64> = perm.iter().map(|&p| reshape[p]).collect();
                // Row-major strides of the iota before the transpose.
                let mut strides = vec![1i64; reshape.len()];
                for d in (0..reshape.len().saturating_sub(1)).rev() {
                    strides[d] = strides[d + 1] * reshape[d + 1];
                }
                let mut flat = Vec::with_capacity(total.max(0) as usize);
                let mut index = vec![0i64; out_dims.len()];
                for _ in 0..total {
                    let value: i64 = index.iter().zip(&perm).map(|(&i, &p)| i * strides[p]).sum();
                    flat.push(value);
                    for d in (0..index.len()).rev() {
                        index[d] += 1;
                        if index[d] < out_dims[d] {
                            break;
                        }
                        index[d] = 0;
                    }
                }
                flat.chunks(groups[1].max(1) as usize)
                    .map(<[i64]>::to_vec)
                    .collect()
            }
        }
    }

    /// The group holding `replica` and its position there, if any.
    pub fn group_of(&self, replicas: i64, replica: i64) -> Option<(Vec<i64>, usize)> {
        self.groups(replicas).into_iter().find_map(|g| {
            let at = g.iter().position(|&r| r == replica)?;
            Some((g, at))
        })
    }

    /// Checks the groups against `replicas`: ids in range, none twice, groups of one size.
    pub fn check(&self, replicas: i64) -> Result<(), String> {
        if let ReplicaGroups::Iota {
            groups, reshape, ..
        } = self
            && groups[0] * groups[1] != reshape.iter().product::<i64>()
        {
            return Err(format!(
                "replica_groups {self}: {} x {} groups do not hold the iota's {} ids",
                groups[0],
                groups[1],
                reshape.iter().product::<i64>()
            ));
        }
        let groups = self.groups(replicas);
        let mut seen = vec![false; replicas.max(0) as usize];
        for g in &groups {
            if g.len() != groups[0].len() {
                return Err(format!(
                    "replica_groups {self}: groups of different sizes ({} and {})",
                    groups[0].len(),
                    g.len()
                ));
            }
            for &r in g {
                let slot = usize::try_from(r)
                    .ok()
                    .and_then(|r| seen.get_mut(r))
                    .ok_or_else(|| {
                        format!(
                            "replica_groups {self}: replica {r} does not exist ({replicas} replicas)"
                        )
                    })?;
                if *slot {
                    return Err(format!(
                        "replica_groups {self}: replica {r} is in more than one place"
                    ));
                }
                *slot = true;
            }
        }
        Ok(())
    }
}

impl fmt::Display for ReplicaGroups {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |v: &[i64]| {
            v.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        match self {
            ReplicaGroups::Listed(groups) => {
                let inner: Vec<String> =
                    groups.iter().map(|g| format!("{{{}}}", list(g))).collect();
                write!(f, "{{{}}}", inner.join(","))
            }
            ReplicaGroups::Iota {
                groups,
                reshape,
                transpose,
            } => {
                write!(f, "[{},{}]<=[{}]", groups[0], groups[1], list(reshape))?;
                if !transpose.is_empty() {
                    write!(f, "T({})", list(transpose))?;
                }
                Ok(())
            }
        }
    }
}

/// The attributes every replica-group collective carries.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CollectiveAttrs {
    /// `channel_id=N` (cross-module collectives have one).
    pub channel_id: Option<i64>,
    /// `replica_groups=...`.
    pub replica_groups: ReplicaGroups,
    /// `use_global_device_ids=true`: the groups name global device ids (as SPMD programs
    /// write them); with one partition per replica they are the replica ids.
    pub use_global_device_ids: bool,
    /// `constrain_layout=true`.
    pub constrain_layout: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iota_groups_expand_as_xla_reads_them() {
        let plain = ReplicaGroups::Iota {
            groups: [2, 2],
            reshape: vec![4],
            transpose: vec![],
        };
        assert_eq!(plain.groups(4), vec![vec![0, 1], vec![2, 3]]);
        assert_eq!(plain.to_string(), "[2,2]<=[4]");
        let transposed = ReplicaGroups::Iota {
            groups: [2, 2],
            reshape: vec![2, 2],
            transpose: vec![1, 0],
        };
        assert_eq!(transposed.groups(4), vec![vec![0, 2], vec![1, 3]]);
        assert_eq!(transposed.to_string(), "[2,2]<=[2,2]T(1,0)");
        assert_eq!(ReplicaGroups::Listed(vec![]).groups(3), vec![vec![0, 1, 2]]);
        assert_eq!(transposed.group_of(4, 3), Some((vec![1, 3], 1)));
    }

    #[test]
    fn bad_groups_are_named() {
        let twice = ReplicaGroups::Listed(vec![vec![0, 1], vec![1, 2]]);
        assert!(
            twice
                .check(4)
                .unwrap_err()
                .contains("replica 1 is in more than one place")
        );
        let missing = ReplicaGroups::Listed(vec![vec![0, 5]]);
        assert!(
            missing
                .check(4)
                .unwrap_err()
                .contains("replica 5 does not exist (4 replicas)")
        );
        let uneven = ReplicaGroups::Listed(vec![vec![0, 1, 2], vec![3]]);
        assert!(uneven.check(4).unwrap_err().contains("different sizes"));
    }
}
