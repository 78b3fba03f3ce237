//! `infeed` and `outfeed` as host streams inside the device program, as Poplar implements
//! the seed's `IPUInfeedQueue` and `IPUOutfeedQueue` (data streams): each execution of an
//! infeed copies the feed's next value from the host into a new tensor; each execution of
//! an outfeed copies its value to the host. A feed is one stream per leaf of its value,
//! named `infeed.NAME` (`infeed.NAME.L` for leaf L of a tuple), shared by every op of the
//! same feed. Feeds are named by their config; [`name_feeds`] gives the unnamed ones their
//! number before the passes run, so every later form of the module agrees.

use super::{Here, HostBuffer, Lowerer, Scope, Value};
use crate::CompileError;
use runtime::{Direction, Program};
use xla_ir::eval::FeedNames;
use xla_ir::{Module, Op, Shape};

/// A host feed of a compiled module: its name and one stream per leaf of its value.
#[derive(Debug, Clone)]
pub struct Feed {
    /// The feed's name (`infeed_config`/`outfeed_config`, or its number).
    pub name: String,
    /// One stream per leaf of the value, in order.
    pub leaves: Vec<HostBuffer>,
    /// The value's shape (an array, or a tuple of arrays).
    pub shape: Shape,
}

/// Writes every infeed's and outfeed's feed name into its config (`FeedNames`: the config,
/// or the op's number among the unnamed ones), so the name survives the passes.
pub fn name_feeds(module: &mut Module) {
    let names = FeedNames::of(module);
    let ids: Vec<_> = module.computations().map(|(id, _)| id).collect();
    for id in ids {
        let name = module.computation(id).name.clone();
        let order = module.computation(id).order().to_vec();
        for i in order {
            let Some(feed) = names.name(&name, i).map(str::to_string) else {
                continue;
            };
            match &mut module.computation_mut(id).instr_mut(i).op {
                Op::Infeed { config } | Op::Outfeed { config, .. } => *config = feed,
                _ => {}
            }
        }
    }
}

fn feed_name(op: &Op) -> &str {
    match op {
        Op::Infeed { config } | Op::Outfeed { config, .. } => config,
        _ => "",
    }
}

impl Lowerer<'_> {
    /// The streams of feed `name` (made on first use), checked against `shape`.
    fn feed_streams(
        &mut self,
        here: Here,
        direction: Direction,
        shape: &Shape,
    ) -> Result<Vec<runtime::StreamId>, CompileError> {
        let name = feed_name(&here.instr.op).to_string();
        let (kind, list) = match direction {
            Direction::HostToDevice => ("infeed", &self.infeeds),
            Direction::DeviceToHost => ("outfeed", &self.outfeeds),
        };
        if let Some((feed, streams)) = list.iter().find(|(f, _)| f.name == name) {
            if !feed.shape.same_ignoring_layout(shape) {
                return Err(here.unsupported(format!(
                    "{kind} {name} carries {} elsewhere but {shape} here; one feed carries one shape",
                    feed.shape
                )));
            }
            return Ok(streams.clone());
        }
        let leaves = shape.leaf_arrays();
        let mut buffers = Vec::new();
        let mut streams = Vec::new();
        for (l, a) in leaves.iter().enumerate() {
            let stream = if leaves.len() == 1 && !shape.is_tuple() {
                format!("{kind}.{name}")
            } else {
                format!("{kind}.{name}.{l}")
            };
            let dtype = self.dtype(a);
            streams.push(
                self.b
                    .stream(&stream, direction, dtype, a.element_count() as usize),
            );
            buffers.push(HostBuffer {
                stream,
                shape: (*a).clone(),
                per_iteration: false,
            });
        }
        let feed = Feed {
            name,
            leaves: buffers,
            shape: shape.clone(),
        };
        match direction {
            Direction::HostToDevice => self.infeeds.push((feed, streams.clone())),
            Direction::DeviceToHost => self.outfeeds.push((feed, streams.clone())),
        }
        Ok(streams)
    }

    /// `infeed(token)`: the feed's next value streamed into new tensors; `(value, token)`.
    pub(crate) fn infeed(&mut self, here: Here) -> Result<Value, CompileError> {
        let shape = match here.instr.shape.as_tuple() {
            Some([value, Shape::Token]) => value.clone(),
            _ => return Err(here.unsupported("an infeed returns (value, token)")),
        };
        let streams = self.feed_streams(here, Direction::HostToDevice, &shape)?;
        let mut arrays = Vec::new();
        for (l, (a, s)) in shape.leaf_arrays().into_iter().zip(streams).enumerate() {
            let arr = self.linear_arr(&format!("{}.{l}", here.instr.name), a);
            self.emit(Program::StreamCopy {
                stream: s,
                tensor: arr.tensor,
            });
            arrays.push(Value::Array(arr));
        }
        let value = match shape {
            Shape::Tuple(_) => Value::Tuple(arrays),
            _ => arrays.pop().expect("an array value has one leaf"),
        };
        Ok(Value::Tuple(vec![value, Value::Token]))
    }

    /// `outfeed(value, token)`: every leaf of the value streamed to the host; a token.
    pub(crate) fn outfeed(&mut self, scope: &mut Scope, here: Here) -> Result<Value, CompileError> {
        let value = self.value(scope, here.instr.operands[0])?;
        let shape = here.module_shape_of_operand(0);
        let streams = self.feed_streams(here, Direction::DeviceToHost, &shape)?;
        for (leaf, s) in value.leaves().iter().zip(streams) {
            self.use_tensor(leaf.tensor);
            self.emit(Program::StreamCopy {
                stream: s,
                tensor: leaf.tensor,
            });
        }
        Ok(Value::Token)
    }
}

impl Here<'_> {
    /// The declared shape of operand `k`.
    fn module_shape_of_operand(&self, k: usize) -> Shape {
        self.comp.instr(self.instr.operands[k]).shape.clone()
    }
}
