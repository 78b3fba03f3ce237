//! Native codelets: vertices written in Rust rather than JIT-compiled from the kernel IR,
//! as Poplar's codelets are C++. A compiler supplies them for work whose shape the kernel IR
//! does not express (sorting, gathering by computed indices, convolution windows).

use crate::device::target::Target;
use smallvec::SmallVec;
use std::any::Any;
use std::fmt;
use std::sync::Arc;

/// What a vertex costs: instructions on one worker context, or cycles of the whole tile for
/// supervisor vertices (matrix products drive the AMP units from all workers). A codelet
/// states its own (as Poplar codelets come with cycle estimators); the model's formulas
/// give the kernels' (`cost::vertex_cost`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VertexCost {
    /// Instructions issued by one worker.
    Worker(u64),
    /// Cycles occupying the tile.
    Supervisor(u64),
}

/// A vertex implementation. `run` sees only the bytes of its connected regions on one tile,
/// like any vertex: inputs read-only, outputs to fill.
pub trait Codelet: Send + Sync {
    /// A name for errors and profiles.
    fn name(&self) -> &str;
    /// Computes the outputs from the inputs.
    fn run(&self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<(), String>;
    /// [`Codelet::run`], told which inputs are known to be the same bytes as other
    /// vertices' inputs: `same[i]`, when given, names input `i`'s bytes, and inputs named
    /// alike hold the same bytes (the host reads them from one place), so work derived from
    /// one serves the other without comparing them. `same` may be shorter than `inputs`.
    /// The default ignores the names.
    fn run_named(
        &self,
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
        same: &[Option<SameBytes>],
    ) -> Result<(), String> {
        let _ = same;
        self.run(inputs, outputs)
    }
    /// Vertices the host may run as one piece of work: the codelet vertices of one compute
    /// set that name the same group run together through the first one's
    /// [`Codelet::run_group`] (parts of one convolution sharing their input's patches make
    /// one product). `None` (the default): the vertex runs alone. Host-side only: the IPU
    /// Model charges every vertex its own [`Codelet::cost`] either way.
    fn group(&self) -> Option<usize> {
        None
    }
    /// Runs the vertices of one group (see [`Codelet::group`]), `members[0]` being this
    /// codelet's; each member's outputs hold what its own [`Codelet::run_named`] writes. The
    /// default runs them one by one.
    fn run_group(&self, members: &mut [GroupMember<'_>]) -> Result<(), String> {
        members.iter_mut().try_for_each(GroupMember::run_alone)
    }
    /// What one instance costs on `target`.
    fn cost(&self, target: &Target) -> VertexCost;
    /// Instructions of its code (held once on every tile that runs it). The default is a
    /// PopLibs-sized codelet: a hand-written loop of a few hundred instructions.
    fn code_instructions(&self) -> u64 {
        DEFAULT_CODELET_INSTRUCTIONS
    }
    /// The codelet as its concrete type, for the code that made it: a compiler writing an
    /// executable to disk downcasts its own codelets to store how to build them again.
    /// `None` (the default): the codelet cannot be stored.
    fn as_any(&self) -> Option<&dyn Any> {
        None
    }
}

/// The name of some input bytes during one run of one compute set (see
/// [`Codelet::run_named`]): equal names, equal bytes. Names are never reused in a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SameBytes {
    /// Which run of which compute set, unique in the process.
    pub(crate) phase: u64,
    /// Where the bytes are on the host, and how many.
    pub(crate) at: usize,
    pub(crate) len: usize,
}

/// One vertex of a group run together ([`Codelet::run_group`]): its codelet and the bytes
/// its own run would see (inline for the usual few regions: a run makes thousands).
pub struct GroupMember<'a> {
    /// The vertex's codelet.
    pub codelet: &'a dyn Codelet,
    /// Its input regions' bytes.
    pub inputs: SmallVec<[&'a [u8]; 4]>,
    /// Its output regions' bytes, to fill.
    pub outputs: SmallVec<[&'a mut [u8]; 2]>,
    /// The names of its inputs' bytes, as [`Codelet::run_named`] takes them.
    pub same: SmallVec<[Option<SameBytes>; 4]>,
}

impl GroupMember<'_> {
    /// Runs the member by itself, as if it were not in a group.
    pub fn run_alone(&mut self) -> Result<(), String> {
        (self.codelet).run_named(&self.inputs, &mut self.outputs, &self.same)
    }
}

/// Instructions of a codelet that does not state its own code size.
pub const DEFAULT_CODELET_INSTRUCTIONS: u64 = 256;

/// A shared codelet, as an executable holds it.
#[derive(Clone)]
pub struct CodeletRef(pub Arc<dyn Codelet>);

impl CodeletRef {
    /// Wraps a codelet.
    pub fn new(c: impl Codelet + 'static) -> CodeletRef {
        CodeletRef(Arc::new(c))
    }
}

impl fmt::Debug for CodeletRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Codelet({})", self.0.name())
    }
}

impl PartialEq for CodeletRef {
    fn eq(&self, other: &CodeletRef) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
