//! The ipuxla IR: XLA HLO modules as typed arenas.
//!
//! This crate is where every HLO program enters ipuxla. It holds the element types,
//! shapes and literals; modules, computations and instructions in typed index arenas
//! ([`InstrId`], [`CompId`]); the HLO text [`parse_module`] and canonical printer
//! (`module.to_string()`); the [`verify`] pass with shape inference; and a [`builder`]
//! for Rust frontends.
#![warn(missing_docs)]

pub mod activation;
pub mod alias;
pub mod attributes;
pub mod builder;
pub mod call_config;
pub mod collective;
pub mod computation;
pub mod element_type;
pub mod eval;
pub mod expand;
pub mod generate;
pub mod ids;
pub mod instruction;
pub mod literal;
mod literal_bits;
pub mod metadata;
pub mod module;
pub mod narrow;
pub mod op;
pub mod parser;
pub mod printer;
pub mod shape;
pub mod sharding;

pub use activation::Activation;
pub use alias::{AliasKind, OutputAlias};
pub use computation::Computation;
pub use element_type::ElementType;
pub use ids::{CompId, InstrId};
pub use instruction::{Instruction, SourceLocation};
pub use literal::{ArrayData, ArrayLiteral, Literal};
pub use module::{Module, ProgramShape};
pub use op::{BinaryOp, Op, UnaryOp};
pub use parser::{
    ParseError, parse_frontend_attributes, parse_module, parse_module_bytes, parse_shape,
};
pub use shape::{ArrayShape, Layout, Shape};
pub use sharding::Sharding;
pub mod shape_inference;
pub mod verify;
mod verify_async;

pub use shape_inference::infer_shape;
pub use verify::{VerifyError, verify};
