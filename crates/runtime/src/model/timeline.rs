//! The program tree walked in the order its steps run, recording each step's profile from
//! the [`StepCosts`]. What carries the steps out is a [`Host`]: an engine computes the
//! bytes and reads each branch predicate from tile memory; an estimate does nothing and
//! knows no predicate (or replays those of a recorded run). Both record their profiles here,
//! so a run's profile and its estimate cannot disagree on a cycle.

use crate::error::RuntimeError;
use crate::model::profile::{
    DataDependent, IpuActivity, OutOfCore, Profile, StepKind, StepProfile, Totals,
};
use crate::model::steps::{Reach, StepCosts};
use crate::program::executable::{Executable, Program, TensorId};

/// What carries out the steps the timeline walks.
pub(crate) trait Host {
    /// Runs compute set `cs`.
    fn execute(&mut self, cs: usize) -> Result<(), RuntimeError>;
    /// Runs rearrangement `r`.
    fn rearrange(&mut self, r: usize) -> Result<(), RuntimeError>;
    /// Copies all of `src` to `dst`.
    fn copy(&mut self, src: TensorId, dst: TensorId) -> Result<(), RuntimeError>;
    /// Moves one buffer between host stream `stream` and `tensor`.
    fn stream(&mut self, stream: usize, tensor: TensorId) -> Result<(), RuntimeError>;
    /// Runs collective `c` with the other replicas, this replica having reached it at
    /// cycle `arrival`; returns the cycle the last replica reached it (an estimate, or a
    /// replica alone: `arrival`).
    fn collective(&mut self, c: usize, arrival: u64) -> Result<u64, RuntimeError>;
    /// The value of the one-element predicate or index `t` (a pred reads 0 or 1), or `None`
    /// when it is not known (an estimate).
    fn decide(&mut self, t: TensorId) -> Result<Option<i64>, RuntimeError>;
    /// Iteration `done` of `of` of an outermost `Repeat` is over (for progress).
    fn repeated(&mut self, _done: u64, _of: u64) {}
}

/// Walks `exe`'s main program on `host`, recording the profile.
pub(crate) fn run(
    exe: &Executable,
    costs: &StepCosts,
    host: &mut impl Host,
) -> Result<Profile, RuntimeError> {
    run_program(exe, costs, &exe.program, host)
}

/// Walks `program` (one of `exe`'s, or part of one) on `host`, recording the profile.
pub(crate) fn run_program<'e>(
    exe: &'e Executable,
    costs: &'e StepCosts,
    program: &'e Program,
    host: &mut impl Host,
) -> Result<Profile, RuntimeError> {
    let ipus = if exe.num_ipus > 1 { exe.num_ipus } else { 0 };
    let mut t = Timeline {
        exe,
        costs,
        steps: Vec::new(),
        decisions: Vec::new(),
        data_dependent: Vec::new(),
        busy: vec![0; ipus],
        links: vec![0; ipus],
        origin: 0,
        repeats: 0,
    };
    t.walk(program, host)?;
    Ok(t.profile())
}

struct Timeline<'e> {
    exe: &'e Executable,
    costs: &'e StepCosts,
    steps: Vec<StepProfile>,
    decisions: Vec<i64>,
    data_dependent: Vec<DataDependent>,
    /// A multi-IPU program: each IPU's busy cycles and IPU-Link bytes so far.
    busy: Vec<u64>,
    links: Vec<u64>,
    /// Cycles before the first of `steps` (inside a `Parallel`'s branch: its start).
    origin: u64,
    /// `Repeat`s the walk is inside.
    repeats: usize,
}

impl<'e> Timeline<'e> {
    fn tensor_name(&self, t: TensorId) -> &'e str {
        &self.exe.tensors[t.0 as usize].name
    }

    /// The sync before a branch on `t`, then `t`'s value if the host knows it.
    fn branch_on(
        &mut self,
        t: TensorId,
        host: &mut impl Host,
    ) -> Result<Option<i64>, RuntimeError> {
        let name = format!("branch on {}", self.tensor_name(t));
        self.steps
            .push(StepProfile::sync(name, self.costs.sync_cycles));
        let value = host.decide(t)?;
        self.decisions.extend(value);
        Ok(value)
    }

    /// Records `step`, which `ipus` take part in.
    fn record(&mut self, mut step: StepProfile, reach: &Reach) {
        if !self.busy.is_empty() {
            for &i in &reach.ipus {
                self.busy[i] += step.cycles;
                self.links[i] += step.bytes_over_links;
            }
            step.ipus = reach.ipus.clone();
        }
        step.tiles = reach.tiles;
        self.steps.push(step);
    }

    fn cycles_since(&self, first: usize) -> u64 {
        self.steps[first..].iter().map(|s| s.cycles).sum()
    }

    fn walk(&mut self, p: &'e Program, host: &mut impl Host) -> Result<(), RuntimeError> {
        let (exe, costs) = (self.exe, self.costs);
        match p {
            Program::Sequence(ps) => {
                for s in ps {
                    self.walk(s, host)?;
                }
            }
            Program::Execute(id) => {
                let cs = id.0 as usize;
                host.execute(cs)?;
                self.record(
                    StepProfile::execute(
                        exe.compute_sets[cs].name.clone(),
                        &costs.compute_sets[cs],
                        costs.sync_cycles,
                    ),
                    &costs.compute_set_reach[cs],
                );
            }
            Program::Rearrange(id) => {
                let r = id.0 as usize;
                host.rearrange(r)?;
                self.record(
                    StepProfile::copy(exe.rearranges[r].name.clone(), &costs.rearranges[r]),
                    &costs.rearrange_reach[r],
                );
            }
            Program::Copy { src, dst } => {
                host.copy(*src, *dst)?;
                let copy = &costs.copies[&(*src, *dst)];
                self.record(
                    StepProfile::copy(copy.name.clone(), &copy.cost),
                    &copy.reach,
                );
            }
            Program::Repeat { count, body } => {
                let outermost = self.repeats == 0;
                self.repeats += 1;
                for i in 0..*count {
                    self.walk(body, host)?;
                    if outermost {
                        host.repeated(i + 1, *count);
                    }
                }
                self.repeats -= 1;
            }
            Program::RepeatWhileTrue {
                condition,
                predicate,
                body,
            } => loop {
                let first = self.steps.len();
                self.walk(condition, host)?;
                match self.branch_on(*predicate, host)? {
                    Some(0) => break,
                    Some(_) => self.walk(body, host)?,
                    None => {
                        // The trip count depends on data: one iteration is counted, then the
                        // exit.
                        self.walk(body, host)?;
                        self.data_dependent.push(DataDependent::Loop {
                            predicate: self.tensor_name(*predicate).to_string(),
                            first_step: first,
                            steps_per_iteration: self.steps.len() - first,
                            cycles_per_iteration: self.cycles_since(first),
                        });
                        self.walk(condition, host)?;
                        self.branch_on(*predicate, host)?;
                        break;
                    }
                }
            },
            Program::If {
                predicate,
                then,
                otherwise,
            } => match self.branch_on(*predicate, host)? {
                Some(v) => self.walk(if v != 0 { then } else { otherwise }, host)?,
                None => self.costliest(*predicate, &[&**otherwise, &**then], host)?,
            },
            Program::Switch {
                index,
                cases,
                default,
            } => match self.branch_on(*index, host)? {
                Some(i) => {
                    let branch = usize::try_from(i)
                        .ok()
                        .and_then(|i| cases.get(i))
                        .unwrap_or(default);
                    self.walk(branch, host)?;
                }
                None => {
                    let branches: Vec<&Program> =
                        cases.iter().chain(std::iter::once(&**default)).collect();
                    self.costliest(*index, &branches, host)?;
                }
            },
            Program::Call(f) => self.walk(&exe.functions[f.0 as usize], host)?,
            Program::StreamCopy { stream, tensor } => {
                host.stream(stream.0 as usize, *tensor)?;
                let cost = &costs.streams[&(*stream, *tensor)];
                self.record(
                    StepProfile::stream(cost.name.clone(), cost, costs.sync_cycles),
                    &cost.reach,
                );
            }
            Program::Sync => self
                .steps
                .push(StepProfile::sync("sync".into(), costs.sync_cycles)),
            Program::Parallel(branches) => {
                // Each branch's steps on its own IPUs; the slowest branch's count.
                let start = self.origin + self.cycles_since(0);
                let outer = std::mem::take(&mut self.steps);
                let origin = std::mem::replace(&mut self.origin, start);
                let mut lists = Vec::with_capacity(branches.len());
                for b in branches {
                    self.walk(b, host)?;
                    lists.push(std::mem::take(&mut self.steps));
                }
                self.steps = outer;
                self.origin = origin;
                self.steps.extend(StepProfile::side_by_side(lists, start));
            }
            Program::Collective(id) => {
                let c = id.0 as usize;
                let arrival = self.cycles_since(0);
                let latest = host.collective(c, arrival)?;
                let name = &exe.collectives[c].name;
                if latest > arrival {
                    self.steps.push(StepProfile::sync(
                        format!("{name}: waiting for the other replicas"),
                        latest - arrival,
                    ));
                }
                let all = Reach {
                    ipus: (0..self.busy.len()).collect(),
                    tiles: 0,
                };
                for phase in &costs.collectives[c].phases {
                    self.record(StepProfile::collective(phase), &all);
                }
            }
        }
        Ok(())
    }

    /// A branch on data the host does not know: every branch is walked, and the costliest
    /// (the first of equals) is kept, with a note saying so. `branches` are in the order of
    /// the values that select them (an If's `otherwise` first).
    fn costliest(
        &mut self,
        on: TensorId,
        branches: &[&'e Program],
        host: &mut impl Host,
    ) -> Result<(), RuntimeError> {
        let (first, notes) = (self.steps.len(), self.data_dependent.len());
        let before = (self.busy.clone(), self.links.clone());
        type Kept = (
            u64,
            usize,
            Vec<StepProfile>,
            Vec<DataDependent>,
            (Vec<u64>, Vec<u64>),
        );
        let mut best: Option<Kept> = None;
        for (i, b) in branches.iter().enumerate() {
            self.walk(b, host)?;
            let cycles = self.cycles_since(first);
            let steps = self.steps.split_off(first);
            let inner = self.data_dependent.split_off(notes);
            let activity = (
                std::mem::replace(&mut self.busy, before.0.clone()),
                std::mem::replace(&mut self.links, before.1.clone()),
            );
            if best.as_ref().is_none_or(|(c, ..)| cycles > *c) {
                best = Some((cycles, i, steps, inner, activity));
            }
        }
        let (_, taken, steps, inner, activity) = best.expect("a branch has at least one program");
        (self.busy, self.links) = activity;
        let count = steps.len();
        // Notes inside the kept branch point at its steps, which stay where they were.
        self.steps.extend(steps);
        self.data_dependent.push(DataDependent::Branch {
            predicate: self.tensor_name(on).to_string(),
            first_step: first,
            steps: count,
            taken,
            branches: branches.len(),
        });
        self.data_dependent.extend(inner);
        Ok(())
    }

    fn profile(self) -> Profile {
        let exe = self.exe;
        let target = &exe.target;
        let mut totals = Totals::default();
        for s in &self.steps {
            totals.compute_cycles += s.compute_cycles;
            totals.sync_cycles += s.sync_cycles;
            totals.exchange_cycles += s.exchange_cycles;
            totals.paging_cycles += s.paging_cycles;
            totals.bytes_paged += s.bytes_paged;
            match s.kind {
                StepKind::StreamCopy => totals.bytes_streamed += s.bytes_moved,
                StepKind::Copy | StepKind::Collective => {
                    totals.bytes_exchanged += s.bytes_moved - s.bytes_over_links;
                    totals.bytes_over_links += s.bytes_over_links;
                }
                StepKind::Execute | StepKind::Sync => {}
            }
        }
        let total_cycles: u64 = self.steps.iter().map(|s| s.cycles).sum();
        Profile {
            target: target.version.to_string(),
            num_ipus: exe.num_ipus,
            tiles_per_ipu: target.tiles_per_ipu,
            clock_hz: target.clock_hz,
            total_cycles,
            seconds: target.seconds(total_cycles),
            totals,
            steps: self.steps,
            tiles: self.costs.tile_memory.clone(),
            out_of_core: target.is_out_of_core().then_some(OutOfCore {
                virtual_tiles_per_ipu: target.tiles_per_ipu,
                physical_tiles_per_ipu: target.physical_tiles_per_ipu,
            }),
            decisions: self.decisions,
            data_dependent: self.data_dependent,
            // Filled by whoever writes the profile out (a copy per run would cost).
            liveness: Vec::new(),
            largest_tensors: self.costs.largest_tensors.clone(),
            peak_tile_contents: self.costs.peak_tile_contents.clone(),
            ipus: self
                .busy
                .iter()
                .zip(&self.links)
                .enumerate()
                .map(|(ipu, (&busy_cycles, &bytes_over_links))| IpuActivity {
                    ipu,
                    busy_cycles,
                    bytes_over_links,
                })
                .collect(),
        }
    }
}
