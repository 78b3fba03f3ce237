//! The profile a run would record, without running: the executable is validated and every
//! step costed as an engine's load would, then the program is walked with a host that does
//! nothing. Loops with a known trip count are counted in full; where the course of the
//! program depends on data (a `RepeatWhileTrue`, an `If` or `Switch`), the profile says how
//! it was counted ([`DataDependent`]) unless the decisions of a run are replayed.
//!
//! [`DataDependent`]: crate::DataDependent

use crate::device::system::System;
use crate::error::RuntimeError;
use crate::model::profile::Profile;
use crate::model::steps::StepCosts;
use crate::model::timeline::{self, Host};
use crate::model::validate::validate;
use crate::program::executable::{Executable, Program, TensorId};

/// The [`Profile`] a run of `exe` on `system` would record (every step, cycles, bytes,
/// memory per tile), computed without executing a vertex. Data-dependent loops count one
/// iteration and data-dependent branches their costliest branch; `Profile::data_dependent`
/// lists each.
pub fn estimate(exe: &Executable, system: &System) -> Result<Profile, RuntimeError> {
    estimate_replaying(exe, system, &[])
}

/// [`estimate`], taking the values of the program's loop predicates and branch indices
/// from `decisions` in order (a run's `Profile::decisions`) while they last: with a run's
/// decisions, the estimate is that run's profile.
pub fn estimate_replaying(
    exe: &Executable,
    system: &System,
    decisions: &[i64],
) -> Result<Profile, RuntimeError> {
    if system.target != exe.target || system.num_ipus() != exe.num_ipus {
        return Err(RuntimeError::InvalidSystem(format!(
            "the executable is laid out for {} x {} of {} tiles, the system is {} x {} of {} tiles",
            exe.num_ipus,
            exe.target.version,
            exe.target.tiles_per_ipu,
            system.num_ipus(),
            system.target.version,
            system.target.tiles_per_ipu
        )));
    }
    validate(exe)?;
    // The executable's own placement of its IPUs on the ladder (its selection order).
    let system = &crate::model::collective::replica_system(exe)?;
    let costs = StepCosts::of(exe, system)?;
    timeline::run(exe, &costs, &mut Replay(decisions.iter()))
}

/// The profiles of `parts` of `exe`'s programs (each a program of its tree: a pipeline's
/// ramp-up, say), estimated as [`estimate`] does, each on its own: how a run's cycles,
/// bytes and per-IPU activity split between them. The steps are costed once for all parts.
pub fn estimate_parts(
    exe: &Executable,
    system: &System,
    parts: &[&Program],
) -> Result<Vec<Profile>, RuntimeError> {
    validate(exe)?;
    if system.target != exe.target || system.num_ipus() != exe.num_ipus {
        return Err(RuntimeError::InvalidSystem(
            "the executable is laid out for another system".into(),
        ));
    }
    let system = &crate::model::collective::replica_system(exe)?;
    let costs = StepCosts::of(exe, system)?;
    parts
        .iter()
        .map(|p| timeline::run_program(exe, &costs, p, &mut Replay([].iter())))
        .collect()
}

/// A host that runs nothing and knows the decisions it was given.
struct Replay<'d>(std::slice::Iter<'d, i64>);

impl Host for Replay<'_> {
    fn execute(&mut self, _: usize) -> Result<(), RuntimeError> {
        Ok(())
    }

    fn rearrange(&mut self, _: usize) -> Result<(), RuntimeError> {
        Ok(())
    }

    fn copy(&mut self, _: TensorId, _: TensorId) -> Result<(), RuntimeError> {
        Ok(())
    }

    fn stream(&mut self, _: usize, _: TensorId) -> Result<(), RuntimeError> {
        Ok(())
    }

    fn collective(&mut self, _: usize, arrival: u64) -> Result<u64, RuntimeError> {
        Ok(arrival)
    }

    fn decide(&mut self, _: TensorId) -> Result<Option<i64>, RuntimeError> {
        Ok(self.0.next().copied())
    }
}
