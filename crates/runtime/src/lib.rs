//! The IPU Model: a bulk-synchronous simulation of IPUs, their tiles, the on-chip exchange
//! and the IPU-Links between chips.
//!
//! Like Poplar under the XLA backend, this crate is a device API that knows nothing of HLO:
//! targets ([`Target`]), multi-IPU systems ([`System`], [`SelectionOrder`]), and (as the
//! issues land) executables of tensors, compute sets and programs that an engine runs,
//! counting cycles and bytes per tile.
#![warn(missing_docs)]

pub mod error;
pub mod selection;
pub mod system;
pub mod target;

pub use error::RuntimeError;
pub use selection::{DeviceId, SelectionOrder, device_ids};
pub use system::{Hop, LinkKind, System};
pub use target::{IpuVersion, Target};
