//! ipuxla's Rust frontend: build models as plain HLO with the seed's scopes, differentiate
//! them ([`autodiff`]), and train them with layers, losses and optimisers.
//!
//! Everything here writes into an [`xla_ir::builder::ComputationBuilder`], so what it
//! builds is a module that `ipuxla dump` prints and `ipuxla run` runs.

pub mod autodiff;
pub mod device;
pub mod init;
pub mod layers;
pub mod losses;
pub mod model;
pub mod nn;
pub mod npy;
pub mod ops;
pub mod optimizers;
pub mod scopes;
pub mod split;
