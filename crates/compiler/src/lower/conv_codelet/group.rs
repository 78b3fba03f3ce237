//! The parts of one convolution split over output features, run together on the host
//! ([`runtime::Codelet::run_group`]). They share one patch matrix; alone, a part of one
//! output feature streams that whole matrix through a product of one column (the bench
//! CNN's second convolution and its kernel gradient make 2 048 such parts a run). Together, their kernels'
//! columns are gathered side by side and the matrix is read once for a block of them.
//! Every part's output holds, bit for bit, what its own run writes
//! ([`codegen::gemm_f32_each_column`], [`codegen::gemm_f32_narrow_columns`]).

use super::{ConvCodelet, KernelMatrix, Plan, gather_runs, write_output};
use crate::device_data::f32_slice;
use codegen::MatRef;
use runtime::{GroupMember, SameBytes};
use std::sync::Arc;

/// Output features a part may have to join a group: a product of up to this many columns
/// sums each element alone (the narrow product), so a wider product gives the same bits.
const MOST_FEATURES: usize = 8;

impl ConvCodelet {
    /// The group of the parts sharing this part's patch matrix (f32 parts of at most eight
    /// output features), named by their shared matrix.
    pub(super) fn group_key(&self) -> Option<usize> {
        let shared = self.shared.as_ref()?;
        (!self.half_partials && self.plan.cols <= MOST_FEATURES)
            .then_some(Arc::as_ptr(shared) as usize)
    }

    /// True when a part of this codelet's plan and group, with regions of these sizes.
    fn joins(&self, member: &GroupMember) -> bool {
        let Some(c) = (member.codelet.as_any()).and_then(|a| a.downcast_ref::<ConvCodelet>())
        else {
            return false;
        };
        let p = &self.plan;
        Arc::ptr_eq(&c.plan, p)
            && c.group_key().is_some()
            && c.group_key() == self.group_key()
            && member.inputs.len() == 2
            && member.outputs.len() == 1
            && [member.inputs[0].len(), member.inputs[1].len()]
                == [p.input_len, p.kernel_len].map(|n| n * 4)
            && member.outputs[0].len() == p.output_len * 4
    }

    /// The part's kernel as `cols` columns of `depth` values, one after another, appended
    /// to `out`.
    fn kernel_columns(&self, w: &[f32], out: &mut Vec<f32>) {
        let p = &self.plan;
        match &p.kernel {
            KernelMatrix::View { at, rs, cs } => {
                for f in 0..p.cols {
                    let first = *at as isize + f as isize * cs;
                    if *rs == 1 {
                        let first = first as usize;
                        out.extend_from_slice(&w[first..first + p.depth]);
                    } else {
                        out.extend((0..p.depth).map(|d| w[(first + d as isize * rs) as usize]));
                    }
                }
            }
            KernelMatrix::Gather {
                columns: Some(columns),
                ..
            } => gather_runs(columns, w, out),
            KernelMatrix::Gather {
                rows,
                columns: None,
            } => {
                let mut matrix = Vec::with_capacity(p.depth * p.cols);
                gather_runs(rows, w, &mut matrix);
                for f in 0..p.cols {
                    out.extend((0..p.depth).map(|d| matrix[d * p.cols + f]));
                }
            }
        }
    }

    /// True when a part alone multiplies one contiguous column (`gemm_f32_refs` then runs
    /// gemm's kernels), false when it takes the narrow product.
    fn one_contiguous_column(&self) -> bool {
        let p = &self.plan;
        p.cols == 1
            && match p.kernel {
                KernelMatrix::View { rs, .. } => rs == 1,
                // Gathered row by row into a one-column row-major matrix.
                KernelMatrix::Gather { .. } => true,
            }
    }
}

/// Runs a group of parts (`members`): those of one plan reading the same input bytes as
/// one product each, any member that is not such a part alone.
pub(super) fn run_group(members: &mut [GroupMember]) -> Result<(), String> {
    let mut done = vec![false; members.len()];
    for i in 0..members.len() {
        if done[i] {
            continue;
        }
        let lead = (members[i].codelet.as_any()).and_then(|a| a.downcast_ref::<ConvCodelet>());
        let Some(lead) = lead.filter(|c| c.joins(&members[i])) else {
            members[i].run_alone()?;
            done[i] = true;
            continue;
        };
        let (input, name) = (members[i].inputs[0], first_name(&members[i]));
        // A part joins when its input is the lead's bytes: named alike, or compared.
        let parts: Vec<usize> = (i..members.len())
            .filter(|&j| !done[j] && lead.joins(&members[j]))
            .filter(|&j| {
                let m = &members[j];
                (name.is_some() && first_name(m) == name) || m.inputs[0] == input
            })
            .collect();
        parts.iter().for_each(|&j| done[j] = true);
        run_parts(lead, members, &parts);
    }
    Ok(())
}

/// Kernel columns a host thread gathered last, for parts (of several columns, or of one
/// gathered column) whose kernel bytes it sees again: the parts of one feature block on
/// every tile hold the same weights (the bench CNN's input gradient gathers one of two
/// kernels 1 792 times a run, a strided gather of 2 304 elements each time; comparing the
/// 9 KB of bytes costs a fraction of that).
#[derive(Default)]
struct KernelColumns {
    /// The most recent last.
    kept: Vec<KeptKernel>,
}

/// Kernel columns gathered for a plan, with the bytes they were gathered from.
struct KeptKernel {
    /// Held so that its address is not reused while it is a key.
    plan: Arc<Plan>,
    bytes: Vec<u8>,
    /// The bytes' name in the run that kept them, if they had one.
    name: Option<SameBytes>,
    columns: Vec<f32>,
}

/// Kernels kept per host thread: the groups of a compute set read a few distinct ones.
const KEPT_KERNELS: usize = 4;

impl KernelColumns {
    /// The columns gathered from exactly these kernel bytes for `plan`, if kept: bytes of
    /// the name they were last found under (equal names, equal bytes: no comparing), or
    /// equal bytes, which then take the name (a later run names them anew).
    fn find(&mut self, plan: &Arc<Plan>, kernel: &[u8], name: Option<SameBytes>) -> Option<&[f32]> {
        let i = self.kept.iter().position(|k| {
            Arc::ptr_eq(&k.plan, plan)
                && ((name.is_some() && k.name == name) || k.bytes.as_slice() == kernel)
        })?;
        let found = &mut self.kept[i];
        if name.is_some() {
            found.name = name;
        }
        Some(&found.columns)
    }

    /// Keeps `columns`, gathered from `kernel` (named `name`, if at all) for `plan`,
    /// dropping the oldest beyond [`KEPT_KERNELS`].
    fn keep(&mut self, plan: &Arc<Plan>, kernel: &[u8], name: Option<SameBytes>, columns: &[f32]) {
        if self.kept.len() == KEPT_KERNELS {
            self.kept.remove(0);
        }
        self.kept.push(KeptKernel {
            plan: Arc::clone(plan),
            bytes: kernel.to_vec(),
            name,
            columns: columns.to_vec(),
        });
    }
}

thread_local! {
    /// This host thread's [`KernelColumns`].
    static KERNEL_COLUMNS: std::cell::RefCell<KernelColumns> = Default::default();
}

/// The name of a member's first input's bytes, if any.
fn first_name(m: &GroupMember) -> Option<SameBytes> {
    input_name(m, 0)
}

/// The name of a member's input `i`'s bytes, if any.
fn input_name(m: &GroupMember, i: usize) -> Option<SameBytes> {
    m.same.get(i).copied().flatten()
}

/// Runs members `parts` (of `lead`'s plan and group, reading `members[parts[0]]`'s input
/// bytes) as one product.
fn run_parts(lead: &ConvCodelet, members: &mut [GroupMember], parts: &[usize]) {
    let p = &lead.plan;
    let (input, name) = (members[parts[0]].inputs[0], first_name(&members[parts[0]]));
    let patches = lead.patches_of(input, name);
    let n = parts.len() * p.cols;
    let mut columns = Vec::with_capacity(n * p.depth);
    for &i in parts {
        let kernel = members[i].inputs[1];
        if lead.one_contiguous_column() {
            // One contiguous column: a copy, cheaper than looking it up.
            lead.kernel_columns(&f32_slice(kernel), &mut columns);
            continue;
        }
        let name = input_name(&members[i], 1);
        KERNEL_COLUMNS.with_borrow_mut(|cache| match cache.find(&lead.plan, kernel, name) {
            Some(gathered) => columns.extend_from_slice(gathered),
            None => {
                let at = columns.len();
                lead.kernel_columns(&f32_slice(kernel), &mut columns);
                cache.keep(&lead.plan, kernel, name, &columns[at..]);
            }
        });
    }
    let mut product = vec![0f32; p.rows * n];
    let a = MatRef::row_major(&patches, p.depth);
    if lead.one_contiguous_column() {
        codegen::gemm_f32_each_column(p.rows, p.depth, n, a, &columns, &mut product);
    } else {
        codegen::gemm_f32_narrow_columns(p.rows, p.depth, n, a, &columns, &mut product);
    }
    let mut own = Vec::with_capacity(p.rows * p.cols);
    for (j, &i) in parts.iter().enumerate() {
        own.clear();
        for row in product.chunks_exact(n) {
            own.extend_from_slice(&row[j * p.cols..(j + 1) * p.cols]);
        }
        write_output(p, &own, false, &mut *members[i].outputs[0]);
    }
}

#[cfg(test)]
mod tests {
    use super::super::{ConvCodelet, ConvPlans, SharedPatches};
    use super::*;
    use runtime::{Codelet, VertexCost};
    use xla_ir::{ArrayShape, ElementType};

    fn bytes(n: usize, seed: u32) -> Vec<u8> {
        (0..n)
            .flat_map(|i| {
                let h = (i as u32 ^ seed.wrapping_mul(0x9E37_79B9)).wrapping_mul(2_654_435_761);
                ((h >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0).to_le_bytes()
            })
            .collect()
    }

    /// Parts of one convolution (`input`, `kernel`, `output` shapes, dimension labels and
    /// window) run as a group write, bit for bit, what each writes alone; a part whose input
    /// differs runs alone inside the group. Returns whether the parts take one contiguous
    /// column each.
    fn check(input: &[i64], kernel: &[i64], output: &[i64], attributes: &str) -> bool {
        let shape = |d: &[i64]| ArrayShape::new(ElementType::F32, d);
        let (xs, ks, os) = (shape(input), shape(kernel), shape(output));
        let text = format!(
            "HloModule t\nENTRY e {{\n  x = {xs} parameter(0)\n  k = {ks} parameter(1)\n  ROOT c = {os} convolution(x, k), {attributes}\n}}"
        );
        let m = xla_ir::parse_module(&text).unwrap();
        let op = &m.entry_computation().root_instr().op;
        let plans = std::cell::RefCell::new(ConvPlans::default());
        let make = || {
            let cost = VertexCost::Worker(1);
            let mut plans = plans.borrow_mut();
            ConvCodelet::planned("c".into(), op, &xs, &ks, &os, cost, false, &mut plans).unwrap()
        };
        let shared = Arc::new(SharedPatches::default());
        let parts: Vec<ConvCodelet> = (0..5).map(|_| make().sharing(shared.clone())).collect();
        assert!(parts[0].group().is_some() && parts[0].group() == parts[4].group());
        let x = bytes(xs.element_count() as usize, 1);
        let other_x = bytes(xs.element_count() as usize, 2);
        let kernels: Vec<Vec<u8>> = (0..5)
            .map(|i| bytes(ks.element_count() as usize, 10 + i))
            .collect();
        let out_len = os.element_count() as usize * 4;
        let inputs = |i: usize| if i == 3 { &other_x } else { &x };
        let alone: Vec<Vec<u8>> = (0..5)
            .map(|i| {
                let mut out = vec![0u8; out_len];
                make()
                    .run(&[inputs(i), &kernels[i]], &mut [out.as_mut_slice()])
                    .unwrap();
                out
            })
            .collect();
        let mut outs = vec![vec![0xAAu8; out_len]; 5];
        let mut members: Vec<GroupMember> = (parts.iter().zip(&mut outs).enumerate())
            .map(|(i, (part, out))| GroupMember {
                codelet: part,
                inputs: smallvec::smallvec![inputs(i).as_slice(), kernels[i].as_slice()],
                outputs: smallvec::smallvec![out.as_mut_slice()],
                same: smallvec::SmallVec::new(),
            })
            .collect();
        parts[0].run_group(&mut members).unwrap();
        let joined = |m: &GroupMember| parts[0].joins(m);
        assert!(members.iter().all(joined), "parts of one plan join");
        drop(members);
        for (i, (got, want)) in outs.iter().zip(&alone).enumerate() {
            assert!(got == want, "{text}: part {i}");
        }
        parts[0].one_contiguous_column()
    }

    /// Parts whose kernels repeat take the columns a host thread kept for those bytes; a
    /// kernel differing in one element is gathered afresh.
    #[test]
    fn kept_kernel_columns_follow_the_kernel_bytes() {
        let (xs, ks, os) = (
            ArrayShape::new(ElementType::F32, &[2, 5, 5, 6]),
            ArrayShape::new(ElementType::F32, &[3, 3, 4, 6]),
            ArrayShape::new(ElementType::F32, &[2, 5, 5, 4]),
        );
        let text = format!(
            "HloModule t\nENTRY e {{\n  x = {xs} parameter(0)\n  k = {ks} parameter(1)\n  ROOT c = {os} convolution(x, k), window={{size=3x3 pad=1_1x1_1 rhs_reversal=1x1}}, dim_labels=b01f_01oi->b01f\n}}"
        );
        let m = xla_ir::parse_module(&text).unwrap();
        let op = &m.entry_computation().root_instr().op;
        let mut plans = ConvPlans::default();
        let cost = VertexCost::Worker(1);
        let make = |plans: &mut ConvPlans| {
            ConvCodelet::planned("c".into(), op, &xs, &ks, &os, cost, false, plans).unwrap()
        };
        let shared = Arc::new(SharedPatches::default());
        let parts: Vec<ConvCodelet> = (0..4)
            .map(|_| make(&mut plans).sharing(shared.clone()))
            .collect();
        let x = bytes(xs.element_count() as usize, 1);
        let (a, b) = (
            bytes(ks.element_count() as usize, 7),
            bytes(ks.element_count() as usize, 8),
        );
        let mut changed = a.clone();
        changed[40..44].copy_from_slice(&0.5f32.to_le_bytes());
        let out_len = os.element_count() as usize * 4;
        for kernels in [[&a, &b, &a, &b], [&changed, &b, &changed, &a]] {
            let mut outs = vec![vec![0u8; out_len]; 4];
            let mut members: Vec<GroupMember> = (parts.iter().zip(&mut outs).zip(kernels))
                .map(|((part, out), k)| GroupMember {
                    codelet: part,
                    inputs: smallvec::smallvec![x.as_slice(), k.as_slice()],
                    outputs: smallvec::smallvec![out.as_mut_slice()],
                    same: smallvec::SmallVec::new(),
                })
                .collect();
            parts[0].run_group(&mut members).unwrap();
            drop(members);
            for (i, (got, k)) in outs.iter().zip(kernels).enumerate() {
                let mut want = vec![0u8; out_len];
                make(&mut plans)
                    .run(&[&x, k], &mut [want.as_mut_slice()])
                    .unwrap();
                assert!(*got == want, "part {i}");
            }
        }
    }

    #[test]
    fn grouped_parts_write_what_each_writes_alone() {
        let window = "window={size=3x3 pad=1_1x1_1}";
        // One output feature, its kernel column read in place: gemm's kernels alone.
        assert!(check(
            &[2, 6, 6, 3],
            &[3, 3, 3, 1],
            &[2, 6, 6, 1],
            &format!("{window}, dim_labels=b01f_01io->b01f")
        ));
        // More than 256 output positions: each column multiplied alone.
        assert!(check(
            &[8, 6, 6, 3],
            &[3, 3, 3, 1],
            &[8, 6, 6, 1],
            &format!("{window}, dim_labels=b01f_01io->b01f")
        ));
        // One output feature of a reversed `01oi` kernel, gathered row by row.
        assert!(check(
            &[2, 5, 5, 6],
            &[3, 3, 1, 6],
            &[2, 5, 5, 1],
            "window={size=3x3 pad=1_1x1_1 rhs_reversal=1x1}, dim_labels=b01f_01oi->b01f"
        ));
        // Four output features: the narrow product, read in place and gathered by column.
        assert!(!check(
            &[2, 6, 6, 3],
            &[3, 3, 3, 4],
            &[2, 6, 6, 4],
            &format!("{window}, dim_labels=b01f_01io->b01f")
        ));
        assert!(!check(
            &[2, 5, 5, 6],
            &[3, 3, 4, 6],
            &[2, 5, 5, 4],
            "window={size=3x3 pad=1_1x1_1 rhs_reversal=1x1}, dim_labels=b01f_01oi->b01f"
        ));
        // A weight gradient's part (`f01b_i01o->01bf`, as the bench CNN's): one feature.
        check(
            &[2, 6, 6, 3],
            &[2, 6, 6, 1],
            &[3, 3, 3, 1],
            "window={size=6x6 pad=1_1x1_1}, dim_labels=f01b_i01o->01bf",
        );
    }
}
