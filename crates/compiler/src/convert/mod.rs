//! The model converter's transformations (the seed's `ipu_saved_model_cli convert`), each
//! HLO to HLO: what `ipuxla convert` applies before writing the converted module.

pub mod gelu;
pub mod precision;

pub use gelu::{GeluRule, replace_gelu};
pub use precision::{PrecisionError, state_updates, to_fp16};
