//! Collectives: steps that move data between the replicas of a replicated executable (one
//! program run by every replica, each on its own IPUs), as Poplar's collectives library
//! (GCL) does for the seed's replication factor. The executable says which replicas take
//! part together, which tensors each replica gives and receives, and how values combine;
//! the model says what that costs over the IPU-Links, the engine carries it out.

use crate::device::selection::SelectionOrder;
use crate::program::tensor_id::TensorId;
use codegen::ReduceOp;
use serde::{Deserialize, Serialize};

/// Index of a collective in [`crate::Executable::collectives`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CollectiveId(pub u32);

/// How many replicas run the executable and where they sit on the ladder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replication {
    /// Replicas (1: not replicated). Each occupies `Executable::num_ipus` IPUs.
    pub replicas: usize,
    /// The order replicas (and a replica's IPUs, its shards) take the system's IPUs in:
    /// replica `r`'s IPU `i` is `order.order(total)[r * num_ipus + i]`. Ring collectives
    /// follow replica order, so an order whose last IPU is linked to its first (HOOF)
    /// closes the ring.
    pub order: SelectionOrder,
}

impl Default for Replication {
    fn default() -> Replication {
        Replication {
            replicas: 1,
            order: SelectionOrder::Auto,
        }
    }
}

impl Replication {
    /// The order in effect: AUTO places replicas in HOOF order (every replica, the last
    /// included, next to the one after it on the ring); one replica's IPUs in their natural
    /// order (a compiler resolves AUTO for its shards before it gets here).
    pub fn effective_order(&self) -> SelectionOrder {
        match (self.order, self.replicas) {
            (SelectionOrder::Auto, 1) => SelectionOrder::Zigzag,
            (SelectionOrder::Auto, _) => SelectionOrder::Hoof,
            (o, _) => o,
        }
    }

    /// The physical IPU of every logical one, replica by replica (`num_ipus` per replica).
    pub fn placement(&self, num_ipus: usize) -> Vec<usize> {
        self.effective_order()
            .order(self.replicas.max(1) * num_ipus)
    }
}

/// A tensor viewed as `outer` rows of `parts` equal blocks: block `j` is the elements
/// `[o * parts * len + j * len, .. + len)` for every row `o` (`len = elements / (outer *
/// parts)`). Splitting a dimension `d` of a row-major array into `parts` is such a view with
/// `outer` = the product of the dimensions before `d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blocks {
    /// Rows before the split dimension.
    pub outer: usize,
}

/// What a collective does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CollectiveKind {
    /// Every output `k` is input `k` combined by `op` over the group, in group order.
    AllReduce {
        /// How values combine.
        op: ReduceOp,
    },
    /// The output holds every member's input, member `j`'s as block `j` of `blocks`.
    AllGather {
        /// How the output is split among the members.
        blocks: Blocks,
    },
    /// The input combined by `op` over the group; member `j` keeps block `j` of it.
    ReduceScatter {
        /// How values combine.
        op: ReduceOp,
        /// How the combined input is split among the members.
        blocks: Blocks,
    },
    /// Every member sends a part to every member: with `blocks`, member `i`'s input block
    /// `j` goes to member `j` and arrives there as output block `i`; without, member `i`'s
    /// input `j` arrives at member `j` as output `i`.
    AllToAll {
        /// How the (single) input and output are split; `None`: one input and one output
        /// per member.
        blocks: Option<Blocks>,
    },
    /// Each `(source, target)` replica pair: the target receives the source's input; a
    /// replica no pair sends to receives zeros.
    Permute {
        /// The pairs, as replica numbers.
        pairs: Vec<(usize, usize)>,
    },
    /// Writes `(replica / stride) % modulo` (u32) into the single output: with replicas
    /// numbered `replica × partitions + partition` (XLA's device ids), stride `partitions`
    /// gives the replica id and stride 1, modulo `partitions` the partition id.
    ReplicaIndex {
        /// Divides the replica's number.
        stride: usize,
        /// Then wraps it.
        modulo: usize,
    },
}

impl CollectiveKind {
    /// The name profiles use.
    pub fn name(&self) -> &'static str {
        match self {
            CollectiveKind::AllReduce { .. } => "all-reduce",
            CollectiveKind::AllGather { .. } => "all-gather",
            CollectiveKind::ReduceScatter { .. } => "reduce-scatter",
            CollectiveKind::AllToAll { .. } => "all-to-all",
            CollectiveKind::Permute { .. } => "collective-permute",
            CollectiveKind::ReplicaIndex { .. } => "replica-index",
        }
    }
}

/// A collective step: every replica runs it at the same point of its program.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Collective {
    /// A name for profiles.
    pub name: String,
    /// What it does.
    pub kind: CollectiveKind,
    /// The groups of replicas that take part together (each replica in exactly one); empty:
    /// every replica in one group. Unused by `Permute` and `ReplicaIndex`.
    pub groups: Vec<Vec<usize>>,
    /// The tensors each replica gives.
    pub inputs: Vec<TensorId>,
    /// The tensors each replica receives.
    pub outputs: Vec<TensorId>,
}

impl Collective {
    /// The groups for `replicas` replicas (every replica in one group when none are given).
    pub fn groups_of(&self, replicas: usize) -> Vec<Vec<usize>> {
        if self.groups.is_empty() {
            vec![(0..replicas).collect()]
        } else {
            self.groups.clone()
        }
    }
}
