//! The IPU Model's cycle estimates: how many instructions a vertex issues, how a tile's six
//! worker contexts share them, and what exchanges, IPU-Link transfers and host streams cost.
//!
//! A worker context issues one instruction every `worker_contexts` (6) cycles, so a tile
//! with vertices spread over its 6 workers takes `6 × (busiest worker's instructions)`
//! cycles: a lone vertex leaves 5/6 of the tile idle, six balanced ones use all of it.
//! f32 and f16 arithmetic processes 2 elements per instruction (the 64-bit data path);
//! integer and pred arithmetic 1.

use crate::device::target::Target;
pub use crate::program::codelet::VertexCost;
use codegen::{BinaryOp, DType, ElementwiseKernel, Expr, KernelSpec, UnaryOp};
use smallvec::SmallVec;

/// Fixed instructions to start a vertex (loading its connections, loop setup).
pub const VERTEX_OVERHEAD: u64 = 12;

/// Instructions per element of a one-operand op.
pub fn unary_cost(op: UnaryOp) -> u64 {
    match op {
        UnaryOp::Exp | UnaryOp::Log => 15,
        UnaryOp::Tanh | UnaryOp::Sin | UnaryOp::Cos | UnaryOp::Logistic => 20,
        UnaryOp::Tan => 25,
        UnaryOp::Expm1 | UnaryOp::Log1p | UnaryOp::Erf => 30,
        UnaryOp::Cbrt => 35,
        UnaryOp::Sqrt | UnaryOp::Rsqrt => 6,
        // The IPU's f16 arithmetic (`f16v4` instructions, ANCHORS.md §3) rounds every
        // result to f16 as it computes it; the host's kernels hold f16 values as f32 and
        // round an f16 op's result inside a fused expression explicitly, an instruction
        // the IPU does not issue.
        UnaryOp::RoundF16 => 0,
        _ => 1,
    }
}

/// Instructions per element of a two-operand op.
pub fn binary_cost(op: BinaryOp) -> u64 {
    match op {
        BinaryOp::Div | BinaryOp::Rem => 6,
        BinaryOp::Pow | BinaryOp::Atan2 => 40,
        _ => 1,
    }
}

/// Instructions per element of an expression (loads of inputs included).
pub fn expr_instructions(e: &Expr) -> u64 {
    match e {
        Expr::Input(_) => 1,
        Expr::F32(_) | Expr::S32(_) | Expr::U32(_) | Expr::Pred(_) => 0,
        Expr::Unary(op, x) => unary_cost(*op) + expr_instructions(x),
        Expr::Binary(op, a, b) => binary_cost(*op) + expr_instructions(a) + expr_instructions(b),
        Expr::Compare(_, a, b) => 1 + expr_instructions(a) + expr_instructions(b),
        Expr::Select(p, a, b) => {
            1 + expr_instructions(p) + expr_instructions(a) + expr_instructions(b)
        }
        Expr::Clamp(l, x, h) => {
            2 + expr_instructions(l) + expr_instructions(x) + expr_instructions(h)
        }
        Expr::Convert(_, x) => 1 + expr_instructions(x),
    }
}

/// Elements one instruction handles: floats go through the 64-bit data path as vectors
/// (PopLibs' `Target::getVectorWidth(type)` = data path width / type size; the data path
/// is 64 bits, ANCHORS.md §3 [L]: `f32v2`, `f16v4`), as wide as the widest float type
/// allows; a kernel touching integers goes one element at a time.
fn width(kernel: &ElementwiseKernel) -> u64 {
    let types = || {
        kernel
            .inputs
            .iter()
            .chain(kernel.outputs.iter().map(|(t, _)| t))
    };
    if types().all(|t| t.is_float()) {
        types().map(|&t| vector_width(t)).min().unwrap_or(2)
    } else {
        1
    }
}

/// Elements of float type `t` in the 64-bit data path.
fn vector_width(t: DType) -> u64 {
    (8 / t.size() as u64).max(1)
}

/// The cost of one vertex: `n` elements for element-wise kernels, `n` input elements in
/// `runs` runs for reductions; matrix products run at the target's AMP rate
/// (`f32_macs_per_cycle` or `f16_macs_per_cycle` multiply-accumulates per cycle).
pub fn vertex_cost(kernel: &KernelSpec, n: usize, runs: usize, target: &Target) -> VertexCost {
    KernelRate::of(kernel, target).vertex_cost(n, runs)
}

/// What a kernel's vertices cost, but for their sizes: found once for the many vertices of
/// a compute set that run one kernel (an element-wise kernel's expression is walked once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelRate {
    /// An element-wise kernel.
    Elementwise {
        /// Instructions per step of the data path ...
        per_element: u64,
        /// ... which takes this many elements.
        width: u64,
    },
    /// A reduction: two instructions per step of the data path, four per run.
    Reduce {
        /// Input elements per step of the data path.
        width: u64,
    },
    /// A matrix product.
    MatMul {
        /// Its cycles, whatever the vertex (its sizes are the kernel's).
        cycles: u64,
    },
}

impl KernelRate {
    /// The rate of `kernel` on `target`.
    pub fn of(kernel: &KernelSpec, target: &Target) -> KernelRate {
        match kernel {
            KernelSpec::Elementwise(k) => KernelRate::Elementwise {
                per_element: k
                    .outputs
                    .iter()
                    .map(|(_, e)| expr_instructions(e) + 1)
                    .sum(),
                width: width(k),
            },
            KernelSpec::Reduce(k) => KernelRate::Reduce {
                width: match k.input.is_float() {
                    true => vector_width(k.input),
                    false => 1,
                },
            },
            KernelSpec::MatMul(k) => {
                let macs = if k.input == DType::F16 {
                    target.f16_macs_per_cycle
                } else {
                    target.f32_macs_per_cycle
                };
                let products = (k.m * k.n * k.k) as u64;
                KernelRate::MatMul {
                    cycles: VERTEX_OVERHEAD * target.worker_contexts as u64
                        + products.div_ceil(macs),
                }
            }
        }
    }

    /// A vertex of `n` elements (`n` input elements in `runs` runs for a reduction).
    pub fn vertex_cost(&self, n: usize, runs: usize) -> VertexCost {
        match *self {
            KernelRate::Elementwise { per_element, width } => {
                VertexCost::Worker(VERTEX_OVERHEAD + (n as u64).div_ceil(width) * per_element)
            }
            KernelRate::Reduce { width } => VertexCost::Worker(
                VERTEX_OVERHEAD + (n as u64).div_ceil(width) * 2 + runs as u64 * 4,
            ),
            KernelRate::MatMul { cycles } => VertexCost::Supervisor(cycles),
        }
    }

    /// A multi-vertex of `n` elements shared between `workers` in grains of `grain`
    /// ([`worker_shares`]): each share costs what a vertex of its elements does.
    pub fn multi_vertex_costs(
        &self,
        n: usize,
        grain: usize,
        workers: usize,
    ) -> SmallVec<[VertexCost; 6]> {
        worker_shares(n, workers, grain)
            .into_iter()
            .map(|(_, len)| self.vertex_cost(len, 0))
            .collect()
    }
}

/// How `workers` share `len` elements in grains of `grain`: runs starting on multiples of
/// `grain`, at least two grains each (but for a remainder shorter than that), as many as
/// there are workers at most, as PopLibs' `splitRegionsBetweenWorkers(target, regions,
/// grainSize, 2 * grainSize)` shares a tile's element-wise work.
pub fn worker_shares(len: usize, workers: usize, grain: usize) -> SmallVec<[(usize, usize); 6]> {
    let grain = grain.max(1);
    let grains = len.div_ceil(grain);
    let n = (grains / 2).clamp(1, workers.max(1));
    let mut out = SmallVec::new();
    let mut at = 0;
    for k in 0..n {
        let l = ((grains / n + usize::from(k < grains % n)) * grain).min(len - at);
        if l > 0 {
            out.push((at, l));
        }
        at += l;
    }
    out
}

/// Cycles a tile takes for these vertices: supervisor vertices one after another, then the
/// worker vertices longest first onto the least-loaded of the worker contexts, each of which
/// issues every `workers` cycles.
pub fn tile_cycles(costs: &[VertexCost], workers: usize) -> u64 {
    let mut supervisor = 0;
    let (mut count, mut longest) = (0, 0);
    for c in costs {
        match c {
            VertexCost::Supervisor(cycles) => supervisor += cycles,
            VertexCost::Worker(i) => (count, longest) = (count + 1, longest.max(*i)),
        }
    }
    // No more vertices than contexts: each has its own, and the longest decides (most
    // tiles of most compute sets; gathering and sorting them cost more than the rest).
    if count <= workers.max(1) {
        return supervisor + longest * workers as u64;
    }
    let mut sorted: smallvec::SmallVec<[u64; 16]> = (costs.iter())
        .filter_map(|c| match c {
            VertexCost::Worker(i) => Some(*i),
            VertexCost::Supervisor(_) => None,
        })
        .collect();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    let mut load: smallvec::SmallVec<[u64; 8]> = smallvec::smallvec![0; workers.max(1)];
    for i in sorted {
        let least = load.iter_mut().min().expect("at least one worker");
        *least += i;
    }
    supervisor + load.into_iter().max().unwrap_or(0) * workers as u64
}

/// Cycles of an on-tile copy of `bytes` (one 64-bit load and store per cycle).
pub fn on_tile_copy_cycles(bytes: u64) -> u64 {
    bytes.div_ceil(8)
}

/// Cycles of an exchange phase where the busiest tile sends or receives `bytes`.
pub fn exchange_cycles(target: &Target, bytes: u64) -> u64 {
    bytes.div_ceil(target.exchange_bytes_per_cycle)
}

/// Cycles to move `bytes` over the host link.
pub fn host_cycles(target: &Target, bytes: u64) -> u64 {
    (bytes as f64 / target.host_bytes_per_s * target.clock_hz).ceil() as u64
}

/// Cycles to page `bytes` between Streaming Memory and the tiles of one IPU, out of core.
/// Poplar implements remote buffers as a pair of data streams (`poplar::RemoteBuffer`), so
/// paging is charged at the stream (host link) bandwidth, shared by the IPU's tiles.
pub fn paging_cycles(target: &Target, bytes: u64) -> u64 {
    host_cycles(target, bytes)
}

/// Bytes of one element of `t` (re-exported for cost reports).
pub fn element_bytes(t: DType) -> u64 {
    t.size() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::test_numbers::numbers;

    /// Longest first onto the least-loaded context, every vertex placed: what
    /// [`tile_cycles`] must give, its shortcut for few vertices included.
    fn longest_first(costs: &[VertexCost], workers: usize) -> u64 {
        let mut supervisor = 0;
        let mut sorted = Vec::new();
        for c in costs {
            match c {
                VertexCost::Supervisor(cycles) => supervisor += cycles,
                VertexCost::Worker(i) => sorted.push(*i),
            }
        }
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        let mut load = vec![0u64; workers.max(1)];
        for i in sorted {
            *load.iter_mut().min().expect("a context") += i;
        }
        supervisor + load.into_iter().max().unwrap_or(0) * workers as u64
    }

    #[test]
    fn tile_cycles_place_longest_first_on_the_least_loaded_context() {
        let mut next = numbers(25);
        for _ in 0..2000 {
            let workers = next(8);
            let costs: Vec<VertexCost> = (0..next(20))
                .map(|_| match next(4) {
                    0 => VertexCost::Supervisor(next(500) as u64),
                    _ => VertexCost::Worker(next(300) as u64),
                })
                .collect();
            assert_eq!(
                tile_cycles(&costs, workers),
                longest_first(&costs, workers),
                "{costs:?} on {workers} workers"
            );
        }
        // Six vertices on six contexts: the longest decides.
        let six: Vec<VertexCost> = (1..=6).map(VertexCost::Worker).collect();
        assert_eq!(tile_cycles(&six, 6), 36);
        // A seventh of seven equal vertices shares a context: twice the cycles.
        let seven = vec![VertexCost::Worker(10); 7];
        assert_eq!(tile_cycles(&seven, 6), 20 * 6);
    }

    #[test]
    fn workers_share_grains_two_or_more_each() {
        let v = |s: SmallVec<[(usize, usize); 6]>| s.into_vec();
        // 32 elements are 8 grains of 4: four workers of two grains each
        assert_eq!(
            v(worker_shares(32, 6, 4)),
            [(0, 8), (8, 8), (16, 8), (24, 8)]
        );
        // fewer than two grains stay on one worker
        assert_eq!(v(worker_shares(7, 6, 4)), [(0, 7)]);
        // many grains go to all six workers, each starting on a grain, the last one short
        let s = v(worker_shares(1001, 6, 4));
        assert_eq!(s.len(), 6);
        assert!(s.iter().all(|&(at, _)| at % 4 == 0), "{s:?}");
        assert_eq!(s.iter().map(|x| x.1).sum::<usize>(), 1001);
        assert_eq!(s.last(), Some(&(840, 161)));
        assert!(worker_shares(0, 6, 4).is_empty());
    }

    fn exp_of(t: DType) -> KernelSpec {
        KernelSpec::Elementwise(ElementwiseKernel {
            inputs: vec![t],
            outputs: vec![(t, Expr::Unary(UnaryOp::Exp, Box::new(Expr::Input(0))))],
            repeats: Vec::new(),
        })
    }

    /// The 64-bit data path takes four halves or two floats an instruction; integers one.
    #[test]
    fn element_wise_vertices_go_as_wide_as_their_types_allow() {
        let target = Target::ipu2();
        let cycles = |t| match vertex_cost(&exp_of(t), 4096, 1, &target) {
            VertexCost::Worker(c) => c - VERTEX_OVERHEAD,
            VertexCost::Supervisor(_) => unreachable!("element-wise vertices run on workers"),
        };
        assert_eq!(cycles(DType::F32), 2 * cycles(DType::F16));
        assert_eq!(cycles(DType::S32), 2 * cycles(DType::F32));
        // An f16 kernel with an f32 operand goes at the f32 width.
        let mixed = KernelSpec::Elementwise(ElementwiseKernel {
            inputs: vec![DType::F16, DType::F32],
            outputs: vec![(DType::F16, Expr::Input(0))],
            repeats: Vec::new(),
        });
        let mixed = vertex_cost(&mixed, 4096, 1, &target);
        assert_eq!(mixed, VertexCost::Worker(VERTEX_OVERHEAD + 2048 * 2));
    }

    /// An f16 op's rounding inside a fused expression is free: the IPU's f16 arithmetic
    /// rounds as it computes, so a fused chain costs its ops and holds their code only.
    #[test]
    fn f16_roundings_in_a_fused_chain_cost_nothing() {
        let x = || Box::new(Expr::Input(0));
        let exp = Expr::Unary(UnaryOp::Exp, x());
        let rounded = Expr::Unary(UnaryOp::RoundF16, Box::new(exp.clone()));
        let chain = |e: Expr| Expr::Binary(BinaryOp::Mul, Box::new(e), x());
        assert_eq!(
            expr_instructions(&chain(rounded)),
            expr_instructions(&chain(exp))
        );
    }
}
