//! What an IPU holds and what each step costs, computed from the executable and the target
//! alone: no host buffers, no JIT, nothing run.
//!
//! - `code`: the code, vertex state, exchange and control code each tile holds;
//! - `layout`: where a tensor's elements live, the regions of vertices, tile extents;
//! - `cost`: the cycle formulas (vertices, tiles, exchange, host link, paging);
//! - `collective`: what a collective costs over the IPU-Links, and the replication checks;
//! - `exchange`: the traffic of a rearrangement or copy, piece by piece, and its cost;
//! - `read_once`: whether each destination tile reads a source element once, which bounds
//!   what a tile sends (and spares costing the multicast of most gathers);
//! - `shifted_reads`: strided reads that repeat the last one moved up, costed once;
//! - `paging`: out of core, how virtual tiles fold onto physical ones;
//! - `steps`: one cost per kind of program step (`StepCosts`) and the step profiles;
//! - `timeline`: the walk of the program tree in the order steps run, which both an
//!   estimate and an engine run drive, so both record the same profile;
//! - `estimate`: the profile of a run, without running;
//! - `profile`: the profile format;
//! - `validate`: the load-time checks (mappings, memory per tile, regions, dataflow), which
//!   every cost above relies on.

pub mod code;
pub(crate) mod collective;
pub mod cost;
pub(crate) mod estimate;
pub(crate) mod exchange;
pub(crate) mod layout;
pub(crate) mod multicast;
pub(crate) mod paging;
pub(crate) mod profile;
pub(crate) mod read_once;
pub(crate) mod read_tiles;
pub(crate) mod shifted_reads;
pub(crate) mod steps;
pub(crate) mod strided_blocks;
#[cfg(test)]
pub(crate) mod test_numbers;
pub(crate) mod timeline;
pub(crate) mod validate;
