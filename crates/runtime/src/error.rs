//! The runtime's error type: everything a user needs to fix a system, a program or its
//! inputs (which tile, how many bytes, which tensor).

/// What went wrong in the IPU Model.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RuntimeError {
    /// A system that cannot be built (IPU count, routes).
    #[error("invalid system: {0}")]
    InvalidSystem(String),
}
