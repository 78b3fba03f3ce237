//! A computation as the schedulers see it: nodes in program order, dependencies (operands
//! and control predecessors), and the buffers each node defines and uses, with aliasing:
//! `tuple`, `get-tuple-element` and `bitcast` define nothing (they name their operands'
//! buffers), in-place ops (`dynamic-update-slice`, `scatter`, `while`) reuse operand 0's.

use std::collections::HashMap;
use xla_ir::ids::{CompId, InstrId};
use xla_ir::{Computation, Instruction, Op, Shape};

/// A buffer: bytes, the node that defines it, the nodes that read it.
#[derive(Debug, Clone)]
pub struct Buffer {
    /// Bytes.
    pub size: u64,
    /// The defining node.
    pub definer: usize,
    /// Nodes reading it (through any alias), in node order, without duplicates.
    pub users: Vec<usize>,
    /// Part of the computation's result: live to the end.
    pub root_live: bool,
}

impl Buffer {
    /// The last step that needs this buffer when each node `v` runs at step `step(v)`: its
    /// last reader's or, unread, its definer's; `None` for a buffer in the computation's
    /// result, live to the end. The one rule of where a buffer dies, for the estimator
    /// and for recomputation's trials.
    pub fn dies_at(&self, step: impl Fn(usize) -> usize) -> Option<usize> {
        let last_read = self.users.iter().map(|&u| step(u)).max();
        (!self.root_live).then(|| last_read.unwrap_or(0).max(step(self.definer)))
    }
}

/// A graph's scheduling-relevant content (see [`Graph::structure`]); buffer users and
/// definitions follow from `preds`, `uses` and the buffers' definers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Structure {
    preds: Vec<Vec<usize>>,
    buffers: Vec<(u64, usize, bool)>,
    uses: Vec<Vec<usize>>,
    callee: Vec<u64>,
    parameter: Vec<bool>,
    root: usize,
}

/// The scheduling view of one computation.
#[derive(Debug, Clone)]
pub struct Graph {
    /// The instruction of each node (program order).
    pub ids: Vec<InstrId>,
    /// Nodes that must come first: operands and control predecessors.
    pub preds: Vec<Vec<usize>>,
    /// The reverse of `preds`.
    pub succs: Vec<Vec<usize>>,
    /// The root node.
    pub root: usize,
    /// All buffers.
    pub buffers: Vec<Buffer>,
    /// Buffers each node defines.
    pub defines: Vec<Vec<usize>>,
    /// Buffers each node reads.
    pub uses: Vec<Vec<usize>>,
    /// Peak bytes of the computations a node calls (its transient cost).
    pub callee: Vec<u64>,
    /// Parameters (SHORTEST_PATH makes them live as late as possible).
    pub parameter: Vec<bool>,
    /// Bytes each node defines (what [`Graph::defined_bytes`] returns: the searches ask for
    /// it at every step).
    defined: Vec<u64>,
    /// Bytes each node defines that nothing reads and the result does not hold: they die
    /// as soon as the node runs.
    pub(super) unread: Vec<u64>,
    /// Each buffer's bytes freed when its last reader runs: its size, or 0 for a buffer
    /// the result holds.
    pub(super) dies: Vec<u64>,
}

fn leaf_sizes(shape: &Shape) -> Vec<u64> {
    match shape {
        Shape::Array(a) => vec![a.byte_size()],
        Shape::Tuple(items) => items.iter().flat_map(leaf_sizes).collect(),
        Shape::Token => vec![],
    }
}

fn leaf_count(shape: &Shape) -> usize {
    match shape {
        Shape::Array(_) => 1,
        Shape::Tuple(items) => items.iter().map(leaf_count).sum(),
        Shape::Token => 0,
    }
}

/// The buffers of `instr`'s value when it names its operands' buffers instead of defining
/// its own (`tuple`, `get-tuple-element`, `bitcast`; `dynamic-update-slice`, `scatter` and
/// `while` update operand 0's in place), from the value of each operand (`operand(k)`);
/// `None` when it defines its own.
pub fn aliased_value<'v>(
    comp: &Computation,
    instr: &Instruction,
    operand: impl Fn(usize) -> &'v [usize],
) -> Option<Vec<usize>> {
    let n = instr.operands.len();
    Some(match &instr.op {
        Op::Tuple => (0..n).flat_map(|k| operand(k).iter().copied()).collect(),
        Op::GetTupleElement { index: k } => {
            let tuple = &comp.instr(instr.operands[0]).shape;
            match tuple.as_tuple() {
                Some(items) => {
                    let skip: usize = items[..*k as usize].iter().map(leaf_count).sum();
                    let take = items.get(*k as usize).map_or(0, leaf_count);
                    operand(0).iter().skip(skip).take(take).copied().collect()
                }
                None => operand(0).to_vec(),
            }
        }
        Op::Bitcast => operand(0).to_vec(),
        Op::DynamicUpdateSlice | Op::Scatter { .. } | Op::While { .. }
            if n > 0 && operand(0).len() == leaf_count(&instr.shape) =>
        {
            operand(0).to_vec()
        }
        _ => return None,
    })
}

impl Graph {
    /// The graph of `comp`; `callee_peaks` holds the peaks of computations already
    /// scheduled (callees first).
    pub fn of(comp: &Computation, callee_peaks: &HashMap<CompId, u64>) -> Graph {
        Graph::with_values(comp, callee_peaks).0
    }

    /// [`Graph::of`], and the buffers each node's value consists of, leaf by leaf.
    pub fn with_values(
        comp: &Computation,
        callee_peaks: &HashMap<CompId, u64>,
    ) -> (Graph, Vec<Vec<usize>>) {
        let ids: Vec<InstrId> = comp.order().to_vec();
        // Each instruction's node, by arena index (ids are dense: a vector, not a map).
        let arena = ids.iter().map(|id| id.index() + 1).max().unwrap_or(0);
        let mut node = vec![usize::MAX; arena];
        for (i, id) in ids.iter().enumerate() {
            node[id.index()] = i;
        }
        let index = |id: &InstrId| node[id.index()];
        let n = ids.len();
        let mut preds = vec![Vec::new(); n];
        let mut buffers: Vec<Buffer> = Vec::new();
        let mut defines = vec![Vec::new(); n];
        let mut uses: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut callee = vec![0u64; n];
        // The buffers each node's value consists of, leaf by leaf.
        let mut value: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, &id) in ids.iter().enumerate() {
            let instr = comp.instr(id);
            let ops: Vec<usize> = instr.operands.iter().map(index).collect();
            for p in ops
                .iter()
                .copied()
                .chain(instr.control_predecessors.iter().map(index))
            {
                if !preds[i].contains(&p) {
                    preds[i].push(p);
                }
            }
            for &o in &ops {
                for &b in &value[o] {
                    if !uses[i].contains(&b) {
                        uses[i].push(b);
                    }
                }
            }
            callee[i] = instr
                .op
                .called_computations()
                .iter()
                .filter_map(|c| callee_peaks.get(c))
                .copied()
                .max()
                .unwrap_or(0);
            let aliased = aliased_value(comp, instr, |k| &value[ops[k]]);
            value[i] = aliased.unwrap_or_else(|| {
                leaf_sizes(&instr.shape)
                    .into_iter()
                    .map(|size| {
                        buffers.push(Buffer {
                            size,
                            definer: i,
                            users: Vec::new(),
                            root_live: false,
                        });
                        defines[i].push(buffers.len() - 1);
                        buffers.len() - 1
                    })
                    .collect()
            });
        }
        let root = index(&comp.root);
        for &b in &value[root] {
            buffers[b].root_live = true;
        }
        let mut g = Graph::finish(ids, preds, root, buffers, defines, uses, callee);
        g.parameter = g
            .ids
            .iter()
            .map(|&id| matches!(comp.instr(id).op, Op::Parameter { .. }))
            .collect();
        (g, value)
    }

    /// A graph from raw parts (for tests and synthetic DAGs): node `i` depends on
    /// `preds[i]` (all earlier nodes) and defines one buffer of `sizes[i]` bytes.
    pub fn from_parts(preds: Vec<Vec<usize>>, sizes: &[u64], root: usize) -> Graph {
        let n = preds.len();
        let buffers: Vec<Buffer> = (0..n)
            .map(|i| Buffer {
                size: sizes[i],
                definer: i,
                users: Vec::new(),
                root_live: i == root,
            })
            .collect();
        let defines = (0..n).map(|i| vec![i]).collect();
        let uses = preds.clone();
        Graph::finish(
            (0..n as u32).map(InstrId).collect(),
            preds,
            root,
            buffers,
            defines,
            uses,
            vec![0; n],
        )
    }

    fn finish(
        ids: Vec<InstrId>,
        preds: Vec<Vec<usize>>,
        root: usize,
        mut buffers: Vec<Buffer>,
        defines: Vec<Vec<usize>>,
        uses: Vec<Vec<usize>>,
        callee: Vec<u64>,
    ) -> Graph {
        let n = ids.len();
        let mut succs = vec![Vec::new(); n];
        for (i, ps) in preds.iter().enumerate() {
            for &p in ps {
                succs[p].push(i);
            }
        }
        for (i, us) in uses.iter().enumerate() {
            for &b in us {
                // Nodes come in order: a repeated use is the last one pushed.
                if buffers[b].definer != i && buffers[b].users.last() != Some(&i) {
                    buffers[b].users.push(i);
                }
            }
        }
        let size_of = |bs: &[usize], keep: &dyn Fn(&Buffer) -> bool| -> u64 {
            bs.iter()
                .map(|&b| &buffers[b])
                .filter(|b| keep(b))
                .map(|b| b.size)
                .sum()
        };
        let defined = defines.iter().map(|d| size_of(d, &|_| true)).collect();
        let unread = defines
            .iter()
            .map(|d| size_of(d, &|b| b.users.is_empty() && !b.root_live))
            .collect();
        let dies = buffers
            .iter()
            .map(|b| if b.root_live { 0 } else { b.size })
            .collect();
        Graph {
            ids,
            preds,
            succs,
            root,
            buffers,
            defines,
            uses,
            callee,
            parameter: vec![false; n],
            defined,
            unread,
            dies,
        }
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True for an empty computation.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Bytes a node defines.
    pub fn defined_bytes(&self, v: usize) -> u64 {
        self.defined[v]
    }

    /// Everything a scheduler sees, without the instruction ids: computations with equal
    /// structures get the same schedule (as node indices).
    pub fn structure(&self) -> Structure {
        Structure {
            preds: self.preds.clone(),
            buffers: self
                .buffers
                .iter()
                .map(|b| (b.size, b.definer, b.root_live))
                .collect(),
            uses: self.uses.clone(),
            callee: self.callee.clone(),
            parameter: self.parameter.clone(),
            root: self.root,
        }
    }

    /// True when `order` lists every node once, each after its predecessors.
    pub fn is_valid_order(&self, order: &[usize]) -> bool {
        let mut pos = vec![usize::MAX; self.len()];
        for (k, &v) in order.iter().enumerate() {
            if v >= self.len() || pos[v] != usize::MAX {
                return false;
            }
            pos[v] = k;
        }
        order.len() == self.len()
            && (0..self.len()).all(|v| self.preds[v].iter().all(|&p| pos[p] < pos[v]))
    }
}
