//! The device program: the executable format (tensors mapped to tiles, compute sets,
//! rearrangements, streams, the program tree), its builder, native codelets, and the one
//! structural walker every layer uses to visit a program.

pub(crate) mod builder;
pub(crate) mod codelet;
pub(crate) mod collective;
pub(crate) mod executable;
pub(crate) mod runs;
pub(crate) mod tensor_id;
pub(crate) mod walk;
