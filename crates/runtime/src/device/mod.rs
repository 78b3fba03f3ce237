//! The hardware: IPU targets with their cost parameters, systems of IPUs joined by
//! IPU-Links, and the orders in which IPUs are selected. Depends on nothing else here.

pub mod selection;
pub(crate) mod system;
pub(crate) mod target;
