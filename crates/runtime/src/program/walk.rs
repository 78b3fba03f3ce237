//! The one structural walker of a program: the programs a node contains, every node of an
//! executable's programs, and the tensors each node reads and writes itself (beside what its
//! compute sets and rearrangements do). Validation, the model and the engine's shortcuts all
//! visit programs through it, so a new kind of step is taught to every layer here.

use crate::program::executable::{
    Direction, Executable, Program, Rearrange, Run, RunSource, TensorId,
};

/// Calls `f` with each program `p` contains directly, in program order.
pub(crate) fn each_child<'p>(p: &'p Program, mut f: impl FnMut(&'p Program)) {
    match p {
        Program::Sequence(ps) => ps.iter().for_each(f),
        Program::Repeat { body, .. } => f(body),
        Program::RepeatWhileTrue {
            condition, body, ..
        } => {
            f(condition);
            f(body);
        }
        Program::If {
            then, otherwise, ..
        } => {
            f(then);
            f(otherwise);
        }
        Program::Switch { cases, default, .. } => {
            cases.iter().for_each(&mut f);
            f(default);
        }
        Program::Parallel(branches) => branches.iter().for_each(f),
        Program::Execute(_)
        | Program::Rearrange(_)
        | Program::Copy { .. }
        | Program::Call(_)
        | Program::StreamCopy { .. }
        | Program::Sync
        | Program::Collective(_) => {}
    }
}

/// Calls `f` with `p` and every program inside it, parents first, in program order (a
/// `Call` is not followed into its function: functions are programs of their own).
pub(crate) fn each_node<'p>(p: &'p Program, f: &mut impl FnMut(&'p Program)) {
    f(p);
    each_child(p, |c| each_node(c, f));
}

/// The main program and every function.
pub(crate) fn programs(exe: &Executable) -> impl Iterator<Item = &Program> {
    std::iter::once(&exe.program).chain(&exe.functions)
}

/// The `(source, destination)` of every distinct `Copy` in the executable's programs, in
/// the order first met.
pub(crate) fn copies(exe: &Executable) -> Vec<(TensorId, TensorId)> {
    let mut out: Vec<(TensorId, TensorId)> = Vec::new();
    for p in programs(exe) {
        each_node(p, &mut |q| {
            if let Program::Copy { src, dst } = q
                && !out.contains(&(*src, *dst))
            {
                out.push((*src, *dst));
            }
        });
    }
    out
}

/// A `Copy` from `src` to `dst` as the rearrangement it is: one run over every element.
pub(crate) fn copy_as_rearrangement(exe: &Executable, src: TensorId, dst: TensorId) -> Rearrange {
    let d = &exe.tensors[dst.0 as usize];
    Rearrange {
        name: format!("copy {} -> {}", exe.tensors[src.0 as usize].name, d.name),
        dst,
        sources: vec![src],
        fill: Vec::new(),
        runs: vec![Run {
            source: RunSource::contiguous(0, 0),
            dst_start: 0,
            len: d.elements,
        }]
        .into(),
    }
}

/// The tensors node `p` itself reads and writes (not its children's, not its compute set's
/// vertices', not its rearrangement's): copies, host streams, branch predicates.
fn direct_uses(
    exe: &Executable,
    p: &Program,
    mut read: impl FnMut(TensorId),
    mut write: impl FnMut(TensorId),
) {
    match p {
        Program::Copy { src, dst } => {
            read(*src);
            write(*dst);
        }
        Program::StreamCopy { stream, tensor } => match exe.streams[stream.0 as usize].direction {
            Direction::HostToDevice => write(*tensor),
            Direction::DeviceToHost => read(*tensor),
        },
        Program::RepeatWhileTrue { predicate, .. } | Program::If { predicate, .. } => {
            read(*predicate)
        }
        Program::Switch { index, .. } => read(*index),
        Program::Collective(id) => {
            let c = &exe.collectives[id.0 as usize];
            c.inputs.iter().copied().for_each(&mut read);
            c.outputs.iter().copied().for_each(&mut write);
        }
        Program::Sequence(_)
        | Program::Parallel(_)
        | Program::Execute(_)
        | Program::Rearrange(_)
        | Program::Repeat { .. }
        | Program::Call(_)
        | Program::Sync => {}
    }
}

/// Per tensor: how many times something other than a kernel vertex writes it (initial
/// data, rearrangements, copies, host streams, codelets), and whether something other than
/// a kernel vertex reads it (codelets, copies, streams, branch predicates, and the
/// rearrangements `reads_of(index)` names).
pub(crate) fn uses_beside_kernel_vertices(
    exe: &Executable,
    reads_of: impl Fn(usize) -> bool,
) -> (Vec<u32>, Vec<bool>) {
    let (mut writes, mut reads) = uses_beside_vertices(exe, reads_of);
    for v in exe.compute_sets.iter().flat_map(|cs| &cs.codelet_vertices) {
        v.inputs
            .iter()
            .for_each(|r| reads[r.tensor.0 as usize] = true);
        v.outputs
            .iter()
            .for_each(|r| writes[r.tensor.0 as usize] += 1);
    }
    (writes, reads)
}

/// [`uses_beside_kernel_vertices`] leaving out codelet vertices too: writes and reads by
/// initial data, rearrangements, copies, streams and predicates only.
pub(crate) fn uses_beside_vertices(
    exe: &Executable,
    reads_of: impl Fn(usize) -> bool,
) -> (Vec<u32>, Vec<bool>) {
    let n = exe.tensors.len();
    let mut writes = vec![0u32; n];
    let mut reads = vec![false; n];
    for (i, t) in exe.tensors.iter().enumerate() {
        writes[i] += u32::from(t.init.is_some());
    }
    for (ri, r) in exe.rearranges.iter().enumerate() {
        writes[r.dst.0 as usize] += 1;
        if reads_of(ri) {
            r.sources.iter().for_each(|s| reads[s.0 as usize] = true);
        }
    }
    for p in programs(exe) {
        each_node(p, &mut |q| {
            direct_uses(
                exe,
                q,
                |t| reads[t.0 as usize] = true,
                |t| writes[t.0 as usize] += 1,
            )
        });
    }
    (writes, reads)
}
