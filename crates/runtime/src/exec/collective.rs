//! The bytes a collective gives one replica, from the bytes every replica gave (each
//! tensor in element order). Values combine in group order, element by element, as the
//! device's reduce vertices combine a run, so the result does not depend on how many host
//! threads run the replicas.

use crate::program::collective::{Blocks, Collective, CollectiveKind};
use crate::program::executable::Executable;
use codegen::{DType, ReduceKernel, ReduceOp, reference};

/// Replica `me`'s outputs of `c`, given every replica's inputs (`given[r][k]`: replica
/// `r`'s input `k`).
pub(crate) fn outputs(
    exe: &Executable,
    c: &Collective,
    me: usize,
    given: &[&[Vec<u8>]],
) -> Vec<Vec<u8>> {
    let replicas = exe.replication.replicas;
    let groups = c.groups_of(replicas);
    let (group, at) = groups
        .iter()
        .find_map(|g| g.iter().position(|&r| r == me).map(|at| (g.as_slice(), at)))
        .unwrap_or((&[], 0));
    let dtype = |k: usize| exe.tensors[c.outputs[k].0 as usize].dtype;
    match &c.kind {
        CollectiveKind::AllReduce { op } => (0..c.inputs.len())
            .map(|k| reduce(dtype(k), *op, group.iter().map(|&r| given[r][k].as_slice())))
            .collect(),
        CollectiveKind::AllGather { blocks } => {
            let parts: Vec<&[u8]> = group.iter().map(|&r| given[r][0].as_slice()).collect();
            vec![join(&parts, *blocks)]
        }
        CollectiveKind::ReduceScatter { op, blocks } => {
            let all = reduce(dtype(0), *op, group.iter().map(|&r| given[r][0].as_slice()));
            vec![block(&all, *blocks, group.len(), at)]
        }
        CollectiveKind::AllToAll { blocks: Some(b) } => {
            let parts: Vec<Vec<u8>> = group
                .iter()
                .map(|&r| block(&given[r][0], *b, group.len(), at))
                .collect();
            let parts: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
            vec![join(&parts, *b)]
        }
        CollectiveKind::AllToAll { blocks: None } => {
            group.iter().map(|&r| given[r][at].clone()).collect()
        }
        CollectiveKind::Permute { pairs } => {
            let mine = &given[me][0];
            vec![match pairs.iter().find(|&&(_, t)| t == me) {
                Some(&(s, _)) => given[s][0].clone(),
                None => vec![0; mine.len()],
            }]
        }
        CollectiveKind::ReplicaIndex { stride, modulo } => {
            let index = (me / (*stride).max(1)) % (*modulo).max(1);
            vec![(index as u32).to_le_bytes().to_vec()]
        }
    }
}

/// The values combined by `op`, element by element, as a reduce vertex combines a run of
/// them (`codegen::reference::run_reduce`: f32 partials for floats, four interleaved lanes,
/// the tail in order), so a sum across replicas rounds exactly as the device's own
/// reduction of the same values in the same order (a gathered copy, say) does.
fn reduce<'a>(dtype: DType, op: ReduceOp, values: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    let values: Vec<&[u8]> = values.collect();
    let n = values.len();
    let size = dtype.size();
    let elements = values.first().map_or(0, |v| v.len() / size);
    // Element i's run: the members' values of element i, in group order.
    let mut runs = vec![0u8; n * elements * size];
    for (m, v) in values.iter().enumerate() {
        for i in 0..elements {
            let at = (i * n + m) * size;
            runs[at..at + size].copy_from_slice(&v[i * size..(i + 1) * size]);
        }
    }
    // An f32 sum from +0, as the reference evaluator folds replicas from its identity +0.
    let init = (op == ReduceOp::Sum && dtype.is_float()).then_some(0f32.to_bits());
    let kernel = ReduceKernel {
        op,
        input: dtype,
        init,
    };
    let partial = kernel.partial_type();
    let mut partials = vec![0u8; elements * partial.size()];
    reference::run_reduce(&kernel, &runs, &mut partials, n, elements);
    if partial == dtype {
        return partials;
    }
    let mut out = vec![0u8; elements * size];
    for i in 0..elements {
        let v = reference::convert(dtype, reference::load(partial, &partials, i));
        reference::store(dtype, &mut out, i, v);
    }
    out
}

/// Block `j` of `parts` blocks of a tensor viewed as `blocks.outer` rows.
fn block(bytes: &[u8], blocks: Blocks, parts: usize, j: usize) -> Vec<u8> {
    let row = bytes.len() / blocks.outer.max(1);
    let len = row / parts.max(1);
    bytes
        .chunks_exact(row.max(1))
        .flat_map(|r| &r[j * len..(j + 1) * len])
        .copied()
        .collect()
}

/// The parts joined as blocks `0..n` of every row.
fn join(parts: &[&[u8]], blocks: Blocks) -> Vec<u8> {
    let outer = blocks.outer.max(1);
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let mut out = Vec::with_capacity(total);
    for o in 0..outer {
        for p in parts {
            let len = p.len() / outer;
            out.extend_from_slice(&p[o * len..(o + 1) * len]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_split_and_join_rows() {
        // Two rows of [a a b b]: block 1 of 2 is [b b] from each row.
        let bytes = [1u8, 1, 2, 2, 3, 3, 4, 4];
        let b = Blocks { outer: 2 };
        assert_eq!(block(&bytes, b, 2, 1), vec![2, 2, 4, 4]);
        assert_eq!(block(&bytes, b, 2, 0), vec![1, 1, 3, 3]);
        assert_eq!(join(&[&[1, 1, 3, 3], &[2, 2, 4, 4]], b), bytes.to_vec());
    }

    #[test]
    fn values_combine_in_their_own_type() {
        let f = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let sum = reduce(
            DType::F32,
            ReduceOp::Sum,
            [f(&[1.0, 2.0]), f(&[0.5, f32::NAN])]
                .iter()
                .map(Vec::as_slice),
        );
        assert_eq!(f32::from_le_bytes(sum[0..4].try_into().unwrap()), 1.5);
        assert!(f32::from_le_bytes(sum[4..8].try_into().unwrap()).is_nan());
        let i = |v: i32| v.to_le_bytes().to_vec();
        let max = reduce(
            DType::S32,
            ReduceOp::Max,
            [i(-3), i(-7)].iter().map(Vec::as_slice),
        );
        assert_eq!(max, i(-3));
        let wrapped = reduce(
            DType::S32,
            ReduceOp::Sum,
            [i(i32::MAX), i(1)].iter().map(Vec::as_slice),
        );
        assert_eq!(wrapped, i(i32::MIN));
        // Eight values sum as a reduce vertex's run: lanes (x0+x4), (x1+x5), ... then
        // ((l0+l1)+(l2+l3)).
        let xs = [1e8f32, 1.0, 1.0, 1.0, -1e8, 1.0, 1.0, 1.0];
        let parts: Vec<Vec<u8>> = xs.iter().map(|x| f(&[*x])).collect();
        let sum = reduce(DType::F32, ReduceOp::Sum, parts.iter().map(Vec::as_slice));
        assert_eq!(f32::from_le_bytes(sum[..].try_into().unwrap()), 6.0);
    }
}
