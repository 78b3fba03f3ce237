//! Code in tile memory: what every tile holds beside its tensors, always live, as PopVision
//! splits it — the code of the vertex kernels and codelets it runs, the state of each of
//! its vertices, and the control code of every program step it runs. A function's steps are
//! code once however often it is called (what outlining saves); a step written twice in
//! the program is code twice.
//!
//! The sizes, and where they come from (the seeds say that "control code and vertex state"
//! are always-live memory, `001_6fa0c3467019d7f9.txt:935`, but give no byte counts):
//! - an instruction is [`INSTRUCTION_BYTES`] = 4 bytes: the Colossus ISA encodes its
//!   instructions in 32-bit words (dual-issue bundles are two of them). Stated as our
//!   assumption; the architecture summaries in ANCHORS.md §3 do not give it.
//! - a kernel's code is the instructions the cost model charges it ([`cost::VERTEX_OVERHEAD`]
//!   to start, and one element's worth of its loop body: `cost::expr_instructions`), so
//!   the two never disagree about what a kernel is; a matrix product's AMP loop is
//!   [`MATMUL_INSTRUCTIONS`], a reduction's [`REDUCE_INSTRUCTIONS`]; sizes live in vertex
//!   state, so one body serves every vertex of that kind on the tile. A native codelet
//!   states its own (`Codelet::code_instructions`).
//! - vertex state: [`VERTEX_HEADER_BYTES`] per vertex (its entry in the compute set's
//!   vertex list) and [`FIELD_BYTES`] per connected region: PopLibs declares vertex fields
//!   as `Vector<T, VectorLayout::SPAN>`, a 32-bit pointer and a 32-bit size
//!   (graphcore/poplibs codelets, in the code index).
//! - control code: [`CONTROL_STEP_INSTRUCTIONS`] per step a tile takes part in (call the
//!   compute set or exchange, sync), and per `Call` on the tiles its function runs on.
//!   Loops, branches and collectives between replicas are not counted.
//! - exchange code is not counted: its size depends on how Poplar compiles an exchange
//!   (unrolled sends, loops over strided runs), for which we have no figure. Counted at two
//!   instructions per piece a tile moves, our rearrangements would hold 380-470 KB per
//!   tile on the bench cases, more than Graphcore's programs of that size hold.

use crate::model::cost;
use crate::program::executable::{Executable, FunctionId, Program, TensorId};
use crate::program::walk::{each_node, programs};
use codegen::KernelSpec;
use std::collections::HashMap;
use std::sync::Arc;

/// Bytes of one instruction.
pub const INSTRUCTION_BYTES: u64 = 4;
/// Instructions of a matrix-product vertex (the AMP loop and its setup).
pub const MATMUL_INSTRUCTIONS: u64 = 64;
/// Instructions of a reduction vertex (the accumulate loop over runs).
pub const REDUCE_INSTRUCTIONS: u64 = 24;
/// Bytes of a vertex's entry in its compute set's vertex list.
pub const VERTEX_HEADER_BYTES: u64 = 4;
/// Bytes of one connected region in vertex state (pointer and size).
pub const FIELD_BYTES: u64 = 8;
/// Instructions of one program step (or call) in a tile's control code.
pub const CONTROL_STEP_INSTRUCTIONS: u64 = 2;

/// The tiles (`ipu * tiles_per_ipu + tile`, in order) that take part in a copy step: each
/// holds its control code.
pub(crate) type TakingPart = Vec<u32>;

/// The always-live bytes of one tile that are not tensors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TileCode {
    /// Code of the kernels and codelets its vertices run, each once.
    pub kernel_code: u64,
    /// State of its vertices.
    pub vertex_state: u64,
    /// Control code of the steps it runs.
    pub control_code: u64,
}

impl TileCode {
    /// All of it.
    pub fn total(&self) -> u64 {
        self.kernel_code + self.vertex_state + self.control_code
    }
}

/// The code of one kind of kernel: what is shared by every vertex of that kind on a tile.
/// Sizes are vertex state, so matrix products of any shape share a body.
fn code_identity(k: &KernelSpec) -> KernelSpec {
    match k {
        KernelSpec::MatMul(m) => KernelSpec::MatMul(codegen::MatMulKernel {
            m: 0,
            k: 0,
            n: 0,
            ..m.clone()
        }),
        other => other.clone(),
    }
}

/// Numbers the kernel bodies ([`code_identity`]) of the vertices' kernels. Vertices share
/// their kernel's `Arc`, so each `Arc` is looked at once: a body is hashed per distinct
/// kernel, not per vertex (a kernel is an expression tree).
#[derive(Default)]
struct KernelBodies {
    by_arc: HashMap<*const KernelSpec, u32>,
    by_body: HashMap<KernelSpec, u32>,
    last: Option<(*const KernelSpec, u32)>,
}

impl KernelBodies {
    /// The number of `kernel`'s body.
    fn of(&mut self, kernel: &Arc<KernelSpec>) -> u32 {
        let at = Arc::as_ptr(kernel);
        if let Some((arc, body)) = self.last
            && arc == at
        {
            return body;
        }
        let by_body = &mut self.by_body;
        let body = *self.by_arc.entry(at).or_insert_with(|| {
            let next = by_body.len() as u32;
            *by_body.entry(code_identity(kernel)).or_insert(next)
        });
        self.last = Some((at, body));
        body
    }
}

/// Which tiles already hold each of some numbered things (kernel bodies, codelets): a bit
/// per thing and tile (a hash set of pairs was most of the costing of code on large
/// programs: every compute set asks again for every tile).
struct HeldOn {
    tiles: usize,
    bits: Vec<Vec<u64>>,
}

impl HeldOn {
    fn new(tiles: usize) -> HeldOn {
        HeldOn {
            tiles,
            bits: Vec::new(),
        }
    }

    /// Marks `thing` held on `tile` (< the tiles given to `new`); whether it was not yet.
    fn insert(&mut self, thing: u32, tile: usize) -> bool {
        let thing = thing as usize;
        if self.bits.len() <= thing {
            self.bits.resize_with(thing + 1, Vec::new);
        }
        let words = &mut self.bits[thing];
        if words.is_empty() {
            words.resize(self.tiles.div_ceil(64), 0);
        }
        let (word, bit) = (&mut words[tile / 64], 1u64 << (tile % 64));
        let fresh = *word & bit == 0;
        *word |= bit;
        fresh
    }
}

/// Instructions of a kernel's code.
pub fn kernel_instructions(k: &KernelSpec) -> u64 {
    cost::VERTEX_OVERHEAD
        + match k {
            KernelSpec::Elementwise(e) => e
                .outputs
                .iter()
                .map(|(_, x)| cost::expr_instructions(x) + 1)
                .sum(),
            KernelSpec::Reduce(_) => REDUCE_INSTRUCTIONS,
            KernelSpec::MatMul(_) => MATMUL_INSTRUCTIONS,
        }
}

/// What the model knows of each step's tiles, from its costing.
pub(crate) struct StepTiles<'a> {
    /// Per compute set, the tiles that run its vertices (global index, tile order).
    pub compute_sets: Vec<Vec<u32>>,
    /// Per rearrangement, the tiles taking part.
    pub rearranges: &'a [TakingPart],
    /// Per `Copy` (source, destination), the tiles taking part.
    pub copies: HashMap<(TensorId, TensorId), &'a TakingPart>,
}

/// The code each tile holds (indexed `ipu * tiles_per_ipu + tile`); none when the target
/// does not compile IPU code (`Target::compile_ipu_code`).
pub(crate) fn code_memory(exe: &Executable, steps: &StepTiles) -> Vec<TileCode> {
    let tpi = exe.target.tiles_per_ipu;
    let mut code = vec![TileCode::default(); exe.num_ipus * tpi];
    if !exe.target.compile_ipu_code {
        return code;
    }
    let all_tiles = code.len();
    let inside = |t: usize| t < all_tiles;
    let mut bodies = KernelBodies::default();
    // (tile, body) pairs already counted; the last one, as a tile's vertices come together.
    let mut kernels = HeldOn::new(all_tiles);
    let mut last = (usize::MAX, u32::MAX);
    let mut codelets = HeldOn::new(all_tiles);
    for cs in &exe.compute_sets {
        for v in &cs.vertices {
            let t = v.ipu * tpi + v.tile;
            if !inside(t) {
                continue;
            }
            let fields = (v.inputs.len() + v.outputs.len()) as u64;
            code[t].vertex_state += VERTEX_HEADER_BYTES + FIELD_BYTES * fields;
            let held = (t, bodies.of(&v.kernel));
            if held != last && kernels.insert(held.1, t) {
                code[t].kernel_code += INSTRUCTION_BYTES * kernel_instructions(&v.kernel);
            }
            last = held;
        }
        for v in &cs.codelet_vertices {
            let t = v.ipu * tpi + v.tile;
            if !inside(t) {
                continue;
            }
            let fields = (v.inputs.len() + v.outputs.len()) as u64;
            code[t].vertex_state += VERTEX_HEADER_BYTES + FIELD_BYTES * fields;
            if codelets.insert(v.codelet.0, t) {
                let c = &exe.codelets[v.codelet.0 as usize].0;
                code[t].kernel_code += INSTRUCTION_BYTES * c.code_instructions();
            }
        }
    }
    let control = INSTRUCTION_BYTES * CONTROL_STEP_INSTRUCTIONS;
    let function_tiles = function_tiles(exe, steps);
    for p in programs(exe) {
        each_node(p, &mut |q| {
            for t in step_tiles(exe, steps, q, &function_tiles) {
                if inside(t as usize) {
                    code[t as usize].control_code += control;
                }
            }
        });
    }
    code
}

/// The tiles a program node runs on itself (a `Call`: its function's tiles; control flow
/// and collectives: none).
fn step_tiles(
    exe: &Executable,
    steps: &StepTiles,
    q: &Program,
    functions: &[Vec<u32>],
) -> Vec<u32> {
    let tpi = exe.target.tiles_per_ipu;
    match q {
        Program::Execute(cs) => steps.compute_sets[cs.0 as usize].clone(),
        Program::Rearrange(r) => steps.rearranges[r.0 as usize].clone(),
        Program::Copy { src, dst } => steps
            .copies
            .get(&(*src, *dst))
            .map(|&t| t.clone())
            .unwrap_or_default(),
        Program::StreamCopy { tensor, .. } => {
            let t = &exe.tensors[tensor.0 as usize];
            let mut tiles: Vec<u32> = t
                .mapping
                .iter()
                .map(|iv| (iv.ipu * tpi + iv.tile) as u32)
                .collect();
            tiles.sort_unstable();
            tiles.dedup();
            tiles
        }
        Program::Call(f) => functions.get(f.0 as usize).cloned().unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// Per function, the tiles its steps (and the functions it calls) run on, sorted.
fn function_tiles(exe: &Executable, steps: &StepTiles) -> Vec<Vec<u32>> {
    let n = exe.functions.len();
    let mut memo: Vec<Option<Vec<u32>>> = vec![None; n];
    let mut visiting = vec![false; n];
    // Resolved on demand: a function may call one defined after it. A cycle (which
    // validation rejects) counts the inner call as no tiles.
    fn tiles_of(
        f: usize,
        exe: &Executable,
        steps: &StepTiles,
        memo: &mut Vec<Option<Vec<u32>>>,
        visiting: &mut Vec<bool>,
    ) -> Vec<u32> {
        if let Some(t) = &memo[f] {
            return t.clone();
        }
        if visiting[f] {
            return Vec::new();
        }
        visiting[f] = true;
        // A bit per tile: a function's steps run on the same tiles again and again.
        let mut on = vec![0u64; (exe.num_ipus * exe.target.tiles_per_ipu).div_ceil(64)];
        let mut mark = |tiles: &[u32]| {
            for &t in tiles {
                if let Some(w) = on.get_mut(t as usize / 64) {
                    *w |= 1 << (t % 64);
                }
            }
        };
        let mut called: Vec<FunctionId> = Vec::new();
        each_node(&exe.functions[f], &mut |q| match q {
            Program::Call(g) => called.push(*g),
            _ => mark(&step_tiles(exe, steps, q, &[])),
        });
        for g in called {
            if (g.0 as usize) < memo.len() {
                mark(&tiles_of(g.0 as usize, exe, steps, memo, visiting));
            }
        }
        let tiles: Vec<u32> = (on.iter().enumerate())
            .flat_map(|(i, &w)| {
                (0..64)
                    .filter(move |b| w & (1 << b) != 0)
                    .map(move |b| (i * 64 + b) as u32)
            })
            .collect();
        memo[f] = Some(tiles.clone());
        tiles
    }
    (0..n)
        .map(|f| tiles_of(f, exe, steps, &mut memo, &mut visiting))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::HeldOn;
    use std::collections::HashSet;

    /// A thing is new on a tile once, whatever order things and tiles come in.
    #[test]
    fn held_on_says_fresh_once_per_thing_and_tile() {
        let mut held = HeldOn::new(130);
        let mut seen = HashSet::new();
        let mut next = crate::model::test_numbers::numbers(3);
        for _ in 0..2_000 {
            let (thing, tile) = (next(9) as u32, next(130));
            assert_eq!(held.insert(thing, tile), seen.insert((thing, tile)));
        }
        assert!(seen.len() > 500, "the test reaches many pairs");
    }
}
