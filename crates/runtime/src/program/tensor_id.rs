//! The index of a tensor, which every part of an executable (and the collectives beside
//! it) names tensors by.

use serde::{Deserialize, Serialize};

/// Index of a tensor in [`crate::Executable::tensors`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TensorId(pub u32);
