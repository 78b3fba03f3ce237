//! How the host computes what the IPU Model's tiles hold, as fast as it can: tile memory,
//! the engine, compute sets and copies run over host threads, and the shortcuts that skip
//! host work the device would do (each one module in `shortcuts/`). Every cycle and byte of
//! a profile comes from `model/`; nothing here computes a cost.

pub(crate) mod buckets;
pub(crate) mod collective;
pub(crate) mod compute;
pub(crate) mod copy;
pub(crate) mod engine;
pub(crate) mod host_times;
pub(crate) mod memory;
pub(crate) mod parallel;
pub(crate) mod prefetch;
pub(crate) mod rendezvous;
pub(crate) mod replicated;
pub(crate) mod shortcuts;
