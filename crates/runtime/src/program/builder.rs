//! Building executables by hand (tests) or from a compiler: tensors get tile-memory offsets
//! from a bump allocator per tile; vertices can be generated per tile interval.

use crate::device::target::Target;
use crate::program::codelet::CodeletRef;
use crate::program::collective::{Collective, CollectiveId, Replication};
use crate::program::executable::{
    CodeletId, CodeletVertex, ComputeSet, ComputeSetId, Direction, Executable, FunctionId,
    Interval, LivePoint, Program, Rearrange, RearrangeId, Region, Stream, StreamId, Tensor,
    TensorId, Vertex,
};
use codegen::{DType, KernelSpec};
use std::collections::HashMap;

/// Offsets in tile memory are aligned to 8 bytes (the 64-bit data path).
const ALIGN: u64 = 8;

/// Accumulates an [`Executable`].
#[derive(Debug, Clone)]
pub struct ExecutableBuilder {
    exe: Executable,
    next_offset: HashMap<(usize, usize), u64>,
}

impl ExecutableBuilder {
    /// An empty executable for `num_ipus` IPUs of `target`.
    pub fn new(target: Target, num_ipus: usize) -> ExecutableBuilder {
        ExecutableBuilder {
            exe: Executable {
                target,
                num_ipus,
                tensors: Vec::new(),
                streams: Vec::new(),
                compute_sets: Vec::new(),
                functions: Vec::new(),
                rearranges: Vec::new(),
                codelets: Vec::new(),
                collectives: Vec::new(),
                replication: Default::default(),
                floating_point: Default::default(),
                liveness: Vec::new(),
                program: Program::Sequence(vec![]),
            },
            next_offset: HashMap::new(),
        }
    }

    /// Sets the IPU's floating-point control for the executable's element-wise vertices.
    pub fn set_floating_point(&mut self, mode: codegen::FloatMode) {
        self.exe.floating_point = mode;
    }

    /// A tensor whose consecutive runs of `len` elements live on `(ipu, tile)` in turn.
    pub fn tensor(
        &mut self,
        name: &str,
        dtype: DType,
        pieces: &[(usize, usize, usize)],
    ) -> TensorId {
        let mut mapping = Vec::with_capacity(pieces.len());
        let mut start = 0;
        for &(ipu, tile, len) in pieces {
            let slot = self.next_offset.entry((ipu, tile)).or_insert(0);
            let offset = *slot;
            *slot = (offset + (len * dtype.size()) as u64).div_ceil(ALIGN) * ALIGN;
            mapping.push(Interval {
                ipu,
                tile,
                start,
                len,
                offset,
            });
            start += len;
        }
        self.exe.tensors.push(Tensor {
            name: name.to_string(),
            dtype,
            shape: vec![start],
            elements: start,
            mapping,
            init: None,
            always_live: false,
            live_steps: Vec::new(),
        });
        TensorId(self.exe.tensors.len() as u32 - 1)
    }

    /// A tensor of `elements` spread as evenly as possible over `tiles` tiles of `ipu`.
    pub fn tensor_spread(
        &mut self,
        name: &str,
        dtype: DType,
        elements: usize,
        ipu: usize,
        tiles: usize,
    ) -> TensorId {
        let tiles = tiles.max(1);
        let pieces: Vec<(usize, usize, usize)> = (0..tiles)
            .map(|t| (ipu, t, elements / tiles + usize::from(t < elements % tiles)))
            .filter(|p| p.2 > 0)
            .collect();
        self.tensor(name, dtype, &pieces)
    }

    /// A host stream.
    pub fn stream(
        &mut self,
        name: &str,
        direction: Direction,
        dtype: DType,
        elements: usize,
    ) -> StreamId {
        self.exe.streams.push(Stream {
            name: name.to_string(),
            direction,
            dtype,
            elements,
        });
        StreamId(self.exe.streams.len() as u32 - 1)
    }

    /// A compute set.
    pub fn compute_set(&mut self, name: &str, vertices: Vec<Vertex>) -> ComputeSetId {
        self.compute_set_with_codelets(name, vertices, Vec::new())
    }

    /// A compute set with codelet vertices as well.
    pub fn compute_set_with_codelets(
        &mut self,
        name: &str,
        vertices: Vec<Vertex>,
        codelet_vertices: Vec<CodeletVertex>,
    ) -> ComputeSetId {
        self.exe.compute_sets.push(ComputeSet {
            name: name.to_string(),
            vertices,
            codelet_vertices,
        });
        ComputeSetId(self.exe.compute_sets.len() as u32 - 1)
    }

    /// A tensor with an explicit mapping (offsets are kept as given: a compiler that plans
    /// tile memory itself sets them, see [`ExecutableBuilder::tensor_mut`]).
    pub fn tensor_mapped(
        &mut self,
        name: &str,
        dtype: DType,
        shape: &[usize],
        mapping: Vec<Interval>,
    ) -> TensorId {
        let elements = shape.iter().product();
        self.exe.tensors.push(Tensor {
            name: name.to_string(),
            dtype,
            shape: shape.to_vec(),
            elements,
            mapping,
            init: None,
            always_live: false,
            live_steps: Vec::new(),
        });
        TensorId(self.exe.tensors.len() as u32 - 1)
    }

    /// A tensor to change (its offsets, its initial contents).
    pub fn tensor_mut(&mut self, id: TensorId) -> &mut Tensor {
        &mut self.exe.tensors[id.0 as usize]
    }

    /// Number of tensors so far.
    pub fn tensor_count(&self) -> usize {
        self.exe.tensors.len()
    }

    /// A rearrangement programs can run with `Program::Rearrange`.
    pub fn rearrange(&mut self, r: Rearrange) -> RearrangeId {
        self.exe.rearranges.push(r);
        RearrangeId(self.exe.rearranges.len() as u32 - 1)
    }

    /// IPUs the executable uses (per replica).
    pub fn num_ipus(&self) -> usize {
        self.exe.num_ipus
    }

    /// A collective programs can run.
    pub fn collective(&mut self, c: Collective) -> CollectiveId {
        self.exe.collectives.push(c);
        CollectiveId(self.exe.collectives.len() as u32 - 1)
    }

    /// Makes the executable run on `replication.replicas` replicas.
    pub fn replicate(&mut self, replication: Replication) {
        self.exe.replication = replication;
    }

    /// A codelet vertices can run.
    pub fn codelet(&mut self, c: CodeletRef) -> CodeletId {
        self.exe.codelets.push(c);
        CodeletId(self.exe.codelets.len() as u32 - 1)
    }

    /// One element-wise vertex per interval of `outputs[0]`, connected to the same element
    /// range of every input and output (which must be mapped alike).
    pub fn elementwise_vertices(
        &self,
        kernel: &KernelSpec,
        inputs: &[TensorId],
        outputs: &[TensorId],
    ) -> Vec<Vertex> {
        let layout = &self.exe.tensors[outputs[0].0 as usize].mapping;
        let kernel = std::sync::Arc::new(kernel.clone());
        layout
            .iter()
            .map(|iv| {
                let region = |t: &TensorId| Region {
                    tensor: *t,
                    start: iv.start,
                    len: iv.len,
                };
                Vertex {
                    kernel: std::sync::Arc::clone(&kernel),
                    ipu: iv.ipu,
                    tile: iv.tile,
                    inputs: inputs.iter().map(region).collect(),
                    outputs: outputs.iter().map(region).collect(),
                    run_length: 0,
                    grain: 0,
                }
            })
            .collect()
    }

    /// A function programs can call.
    pub fn function(&mut self, program: Program) -> FunctionId {
        self.exe.functions.push(program);
        FunctionId(self.exe.functions.len() as u32 - 1)
    }

    /// Gives a tensor its dimensions (their product must be its element count).
    pub fn set_shape(&mut self, id: TensorId, shape: &[usize]) {
        self.exe.tensors[id.0 as usize].shape = shape.to_vec();
    }

    /// The tensor with this id (to inspect mappings).
    pub fn tensor_info(&self, id: TensorId) -> &Tensor {
        &self.exe.tensors[id.0 as usize]
    }

    /// The executable built so far (names of its compute sets, streams, ...).
    pub fn executable(&self) -> &Executable {
        &self.exe
    }

    /// Records the compiler's liveness over the program's steps ([`Executable::liveness`]).
    pub fn set_liveness(&mut self, liveness: Vec<LivePoint>) {
        self.exe.liveness = liveness;
    }

    /// The executable, with `program` as its main program.
    pub fn finish(mut self, program: Program) -> Executable {
        self.exe.program = program;
        self.exe
    }
}
