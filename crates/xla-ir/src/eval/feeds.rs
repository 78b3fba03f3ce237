//! The host side of `infeed` and `outfeed`: queues of values the evaluator dequeues and
//! enqueues as the program runs.
//!
//! A feed is named by its op's `infeed_config` / `outfeed_config`; an op without one is
//! feed `K`, its position among the module's unnamed infeeds (or outfeeds) in program order
//! (computations callees first, as the printer orders them, instructions in order).

use crate::ids::InstrId;
use crate::{Literal, Module, Op};
use std::collections::{HashMap, VecDeque};

/// Values waiting in each infeed and values each outfeed has sent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Feeds {
    /// By feed name: the values not yet dequeued, first first.
    pub infeeds: HashMap<String, VecDeque<Literal>>,
    /// By feed name: every value enqueued, in order.
    pub outfeeds: HashMap<String, Vec<Literal>>,
    /// By feed name: how many values the program has dequeued.
    pub dequeued: HashMap<String, usize>,
}

/// The feed each `infeed` and `outfeed` instruction of a module uses.
#[derive(Debug, Clone, Default)]
pub struct FeedNames {
    /// By computation name and instruction.
    names: HashMap<(String, InstrId), String>,
    /// Infeed names in order of first appearance.
    pub infeeds: Vec<String>,
    /// Outfeed names in order of first appearance.
    pub outfeeds: Vec<String>,
}

impl FeedNames {
    /// The feeds of `module`.
    pub fn of(module: &Module) -> FeedNames {
        let mut out = FeedNames::default();
        let (mut unnamed_in, mut unnamed_out) = (0, 0);
        for comp_id in module.post_order() {
            let comp = module.computation(comp_id);
            for &id in comp.order() {
                let (config, counter, list) = match &comp.instr(id).op {
                    Op::Infeed { config } => (config, &mut unnamed_in, &mut out.infeeds),
                    Op::Outfeed { config, .. } => (config, &mut unnamed_out, &mut out.outfeeds),
                    _ => continue,
                };
                let name = if config.is_empty() {
                    *counter += 1;
                    (*counter - 1).to_string()
                } else {
                    config.clone()
                };
                if !list.contains(&name) {
                    list.push(name.clone());
                }
                out.names.insert((comp.name.clone(), id), name);
            }
        }
        out
    }

    /// The feed of instruction `id` in the computation named `comp` (an infeed or outfeed).
    pub fn name(&self, comp: &str, id: InstrId) -> Option<&str> {
        self.names.get(&(comp.to_string(), id)).map(String::as_str)
    }
}

impl Feeds {
    /// Queues `values` on infeed `name` (the seed's `IPUInfeedQueue` over a dataset): each
    /// execution of the feed's infeed takes the next.
    pub fn feed(&mut self, name: &str, values: impl IntoIterator<Item = Literal>) {
        self.infeeds
            .entry(name.to_string())
            .or_default()
            .extend(values);
    }

    /// Everything outfeed `name` has enqueued so far, oldest first, and forgets it (the
    /// seed's `IPUOutfeedQueue.dequeue()`).
    pub fn dequeue(&mut self, name: &str) -> Vec<Literal> {
        self.outfeeds.remove(name).unwrap_or_default()
    }

    /// Dequeues infeed `name`'s next value for the program.
    pub(crate) fn next_value(&mut self, name: &str) -> Result<Literal, String> {
        let taken = self.dequeued.entry(name.to_string()).or_default();
        let value = self
            .infeeds
            .get_mut(name)
            .and_then(VecDeque::pop_front)
            .ok_or_else(|| {
                format!(
                    "infeed {name} ran dry: the program asks for value {} of it, {} given",
                    *taken + 1,
                    *taken
                )
            })?;
        *taken += 1;
        Ok(value)
    }

    /// Enqueues `value` on outfeed `name` for the host.
    pub(crate) fn send(&mut self, name: &str, value: Literal) {
        self.outfeeds
            .entry(name.to_string())
            .or_default()
            .push(value);
    }
}
