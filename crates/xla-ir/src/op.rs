//! The opcode of an instruction, each variant carrying the attributes that define it.

use crate::attributes::{
    CompareType, ComparisonDirection, ConvDims, DotDims, FusionKind, GatherDims, PadDim, Precision,
    ScatterDims, SliceDim, Window,
};
use crate::collective::CollectiveAttrs;
use crate::ids::CompId;
use crate::{ElementType, Literal, Shape};

/// The algorithm of `rng-bit-generator`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RngAlgorithm {
    /// `rng_default`: the backend's choice (Philox on XLA's CPU backend, and here).
    Default,
    /// `rng_philox`: Philox 4x32-10.
    Philox,
    /// `rng_three_fry`: ThreeFry 2x32-20.
    ThreeFry,
}

impl RngAlgorithm {
    /// The attribute's text.
    pub fn name(self) -> &'static str {
        match self {
            RngAlgorithm::Default => "rng_default",
            RngAlgorithm::Philox => "rng_philox",
            RngAlgorithm::ThreeFry => "rng_three_fry",
        }
    }
}

/// Element-wise operations of one operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// `abs`
    Abs,
    /// `negate`
    Negate,
    /// `sign`
    Sign,
    /// `exponential`
    Exp,
    /// `exponential-minus-one`
    Expm1,
    /// `log`
    Log,
    /// `log-plus-one`
    Log1p,
    /// `sqrt`
    Sqrt,
    /// `rsqrt`
    Rsqrt,
    /// `cbrt`
    Cbrt,
    /// `tanh`
    Tanh,
    /// `logistic`
    Logistic,
    /// `sine`
    Sine,
    /// `cosine`
    Cosine,
    /// `tan`
    Tan,
    /// `erf`
    Erf,
    /// `floor`
    Floor,
    /// `ceil`
    Ceil,
    /// `round-nearest-afz` (halves away from zero)
    RoundNearestAfz,
    /// `round-nearest-even`
    RoundNearestEven,
    /// `not` (logical on pred, bitwise on integers)
    Not,
    /// `is-finite` (float in, pred out)
    IsFinite,
    /// `popcnt`
    Popcnt,
    /// `count-leading-zeros`
    Clz,
    /// `copy`
    Copy,
}

impl UnaryOp {
    /// Every unary op.
    pub const ALL: [UnaryOp; 25] = [
        UnaryOp::Abs,
        UnaryOp::Negate,
        UnaryOp::Sign,
        UnaryOp::Exp,
        UnaryOp::Expm1,
        UnaryOp::Log,
        UnaryOp::Log1p,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Cbrt,
        UnaryOp::Tanh,
        UnaryOp::Logistic,
        UnaryOp::Sine,
        UnaryOp::Cosine,
        UnaryOp::Tan,
        UnaryOp::Erf,
        UnaryOp::Floor,
        UnaryOp::Ceil,
        UnaryOp::RoundNearestAfz,
        UnaryOp::RoundNearestEven,
        UnaryOp::Not,
        UnaryOp::IsFinite,
        UnaryOp::Popcnt,
        UnaryOp::Clz,
        UnaryOp::Copy,
    ];

    /// The HLO opcode.
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Abs => "abs",
            UnaryOp::Negate => "negate",
            UnaryOp::Sign => "sign",
            UnaryOp::Exp => "exponential",
            UnaryOp::Expm1 => "exponential-minus-one",
            UnaryOp::Log => "log",
            UnaryOp::Log1p => "log-plus-one",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Cbrt => "cbrt",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Logistic => "logistic",
            UnaryOp::Sine => "sine",
            UnaryOp::Cosine => "cosine",
            UnaryOp::Tan => "tan",
            UnaryOp::Erf => "erf",
            UnaryOp::Floor => "floor",
            UnaryOp::Ceil => "ceil",
            UnaryOp::RoundNearestAfz => "round-nearest-afz",
            UnaryOp::RoundNearestEven => "round-nearest-even",
            UnaryOp::Not => "not",
            UnaryOp::IsFinite => "is-finite",
            UnaryOp::Popcnt => "popcnt",
            UnaryOp::Clz => "count-leading-zeros",
            UnaryOp::Copy => "copy",
        }
    }

    /// Which element types the operand may have.
    pub fn accepts(self, t: ElementType) -> bool {
        match self {
            UnaryOp::Copy => true,
            UnaryOp::Abs | UnaryOp::Negate | UnaryOp::Sign => t != ElementType::Pred,
            UnaryOp::Not => !t.is_float() && !t.is_complex(),
            UnaryOp::Popcnt | UnaryOp::Clz => t.is_integer(),
            UnaryOp::Floor
            | UnaryOp::Ceil
            | UnaryOp::RoundNearestAfz
            | UnaryOp::RoundNearestEven
            | UnaryOp::IsFinite => t.is_float(),
            _ => t.is_float() || t.is_complex(),
        }
    }
}

/// Element-wise operations of two operands of the same shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `add`
    Add,
    /// `subtract`
    Subtract,
    /// `multiply`
    Multiply,
    /// `divide`
    Divide,
    /// `remainder`
    Remainder,
    /// `power`
    Power,
    /// `atan2`
    Atan2,
    /// `maximum`
    Maximum,
    /// `minimum`
    Minimum,
    /// `and`
    And,
    /// `or`
    Or,
    /// `xor`
    Xor,
    /// `shift-left`
    ShiftLeft,
    /// `shift-right-arithmetic`
    ShiftRightArithmetic,
    /// `shift-right-logical`
    ShiftRightLogical,
}

impl BinaryOp {
    /// Every binary op.
    pub const ALL: [BinaryOp; 15] = [
        BinaryOp::Add,
        BinaryOp::Subtract,
        BinaryOp::Multiply,
        BinaryOp::Divide,
        BinaryOp::Remainder,
        BinaryOp::Power,
        BinaryOp::Atan2,
        BinaryOp::Maximum,
        BinaryOp::Minimum,
        BinaryOp::And,
        BinaryOp::Or,
        BinaryOp::Xor,
        BinaryOp::ShiftLeft,
        BinaryOp::ShiftRightArithmetic,
        BinaryOp::ShiftRightLogical,
    ];

    /// The HLO opcode.
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Subtract => "subtract",
            BinaryOp::Multiply => "multiply",
            BinaryOp::Divide => "divide",
            BinaryOp::Remainder => "remainder",
            BinaryOp::Power => "power",
            BinaryOp::Atan2 => "atan2",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Minimum => "minimum",
            BinaryOp::And => "and",
            BinaryOp::Or => "or",
            BinaryOp::Xor => "xor",
            BinaryOp::ShiftLeft => "shift-left",
            BinaryOp::ShiftRightArithmetic => "shift-right-arithmetic",
            BinaryOp::ShiftRightLogical => "shift-right-logical",
        }
    }

    /// Which element types the operands may have.
    pub fn accepts(self, t: ElementType) -> bool {
        match self {
            BinaryOp::Atan2 => t.is_float(),
            BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => !t.is_float() && !t.is_complex(),
            BinaryOp::ShiftLeft | BinaryOp::ShiftRightArithmetic | BinaryOp::ShiftRightLogical => {
                t.is_integer()
            }
            BinaryOp::Maximum | BinaryOp::Minimum => true,
            _ => t != ElementType::Pred,
        }
    }
}

/// The opcode of an instruction and the attributes that belong to it.
#[derive(Debug, Clone, PartialEq, Hash)]
pub enum Op {
    /// `parameter(N)`: the N-th argument of the computation.
    Parameter {
        /// The parameter number.
        number: u64,
    },
    /// `constant(literal)`.
    Constant {
        /// The value.
        literal: Literal,
    },
    /// An element-wise op of one operand.
    Unary(UnaryOp),
    /// An element-wise op of two operands.
    Binary(BinaryOp),
    /// `compare(a, b), direction=.., type=..`.
    Compare {
        /// The comparison.
        direction: ComparisonDirection,
        /// The ordering, when given explicitly.
        compare_type: Option<CompareType>,
    },
    /// `select(pred, on_true, on_false)`.
    Select,
    /// `clamp(min, x, max)`.
    Clamp,
    /// `convert(x)`: element type conversion.
    Convert,
    /// `bitcast-convert(x)`: reinterpret bits as another element type.
    BitcastConvert,
    /// `bitcast(x)`: a reshape that keeps the bytes (layout-level).
    Bitcast,
    /// `reduce-precision(x), exponent_bits=E, mantissa_bits=M`.
    ReducePrecision {
        /// Exponent bits kept.
        exponent_bits: i64,
        /// Mantissa bits kept.
        mantissa_bits: i64,
    },
    /// `broadcast(x), dimensions={..}`: operand dimension i maps to `dimensions[i]`.
    Broadcast {
        /// Output dimension of each operand dimension.
        dimensions: Vec<i64>,
    },
    /// `reshape(x)`.
    Reshape,
    /// `transpose(x), dimensions={..}`: output dimension i is operand dimension `dimensions[i]`.
    Transpose {
        /// The permutation.
        dimensions: Vec<i64>,
    },
    /// `slice(x), slice={[a:b:s], ...}`.
    Slice {
        /// One entry per dimension.
        slices: Vec<SliceDim>,
    },
    /// `concatenate(xs...), dimensions={d}`.
    Concatenate {
        /// The dimension joined along.
        dimension: i64,
    },
    /// `pad(x, value), padding=..`.
    Pad {
        /// One entry per dimension.
        padding: Vec<PadDim>,
    },
    /// `reverse(x), dimensions={..}`.
    Reverse {
        /// The reversed dimensions.
        dimensions: Vec<i64>,
    },
    /// `iota(), iota_dimension=d`.
    Iota {
        /// The dimension that counts.
        dimension: i64,
    },
    /// `dynamic-slice(x, starts...), dynamic_slice_sizes={..}`.
    DynamicSlice {
        /// Size of the slice in each dimension.
        sizes: Vec<i64>,
    },
    /// `dynamic-update-slice(x, update, starts...)`.
    DynamicUpdateSlice,
    /// `gather(operand, indices), ...`.
    Gather {
        /// Dimension numbers.
        dims: GatherDims,
        /// Size of each slice.
        slice_sizes: Vec<i64>,
        /// Promise that indices are sorted.
        indices_are_sorted: bool,
    },
    /// `scatter(operands..., indices, updates...), ..., to_apply=c`.
    Scatter {
        /// Dimension numbers.
        dims: ScatterDims,
        /// Combines the old and the new value.
        to_apply: CompId,
        /// Promise that indices are sorted.
        indices_are_sorted: bool,
        /// Promise that indices do not repeat.
        unique_indices: bool,
    },
    /// `sort(xs...), dimensions={d}, is_stable=.., to_apply=comparator`.
    Sort {
        /// The sorted dimension.
        dimension: i64,
        /// Whether equal elements keep their order.
        is_stable: bool,
        /// The less-than comparator.
        comparator: CompId,
    },
    /// `reduce(xs..., inits...), dimensions={..}, to_apply=c`.
    Reduce {
        /// The reduced dimensions.
        dimensions: Vec<i64>,
        /// The combining computation.
        to_apply: CompId,
    },
    /// `reduce-window(xs..., inits...), window={..}, to_apply=c`.
    ReduceWindow {
        /// The window.
        window: Window,
        /// The combining computation.
        to_apply: CompId,
    },
    /// `select-and-scatter(operand, source, init), window={..}, select=s, scatter=c`.
    SelectAndScatter {
        /// The window.
        window: Window,
        /// Picks an element of each window.
        select: CompId,
        /// Combines scattered values.
        scatter: CompId,
    },
    /// `convolution(input, kernel), window={..}, dim_labels=..`.
    Convolution {
        /// The window (one entry per spatial dimension).
        window: Window,
        /// Dimension numbers.
        dims: ConvDims,
        /// Feature groups.
        feature_group_count: i64,
        /// Batch groups.
        batch_group_count: i64,
        /// Per-operand precision.
        precision: Vec<Precision>,
    },
    /// `dot(lhs, rhs), lhs_contracting_dims=.., ...`.
    Dot {
        /// Dimension numbers.
        dims: DotDims,
        /// Per-operand precision.
        precision: Vec<Precision>,
    },
    /// `tuple(xs...)`.
    Tuple,
    /// `get-tuple-element(t), index=i`.
    GetTupleElement {
        /// The element index.
        index: i64,
    },
    /// `while(init), condition=c, body=b`.
    While {
        /// Returns `pred[]`: keep looping.
        condition: CompId,
        /// Computes the next state.
        body: CompId,
    },
    /// `conditional(pred_or_index, args...), branch_computations={..}`
    /// (or `true_computation=`/`false_computation=`).
    Conditional {
        /// The branches; for a `pred` selector, `[true, false]`.
        branches: Vec<CompId>,
    },
    /// `call(args...), to_apply=c`.
    Call {
        /// The called computation.
        to_apply: CompId,
    },
    /// `fusion(args...), kind=.., calls=c`.
    Fusion {
        /// The fusion kind.
        kind: FusionKind,
        /// The fused computation.
        calls: CompId,
    },
    /// `map(xs...), dimensions={..}, to_apply=c`.
    Map {
        /// The mapped dimensions (all of them).
        dimensions: Vec<i64>,
        /// The scalar computation applied to each element.
        to_apply: CompId,
    },
    /// `topk(x), k=K, largest=..`: (values, indices) along the last dimension.
    TopK {
        /// How many elements.
        k: i64,
        /// Largest (true) or smallest.
        largest: bool,
    },
    /// `custom-call(args...), custom_call_target="..."`.
    CustomCall {
        /// The target name (`TopK` is understood; others are opaque).
        target: String,
        /// Computations the call refers to.
        called_computations: Vec<CompId>,
        /// Other attributes, kept verbatim (name, value text).
        attributes: Vec<(String, String)>,
    },
    /// `after-all(tokens...)`: joins ordering tokens.
    AfterAll,
    /// `all-reduce(xs...), replica_groups=.., to_apply=c`: each replica gets the reduction
    /// of its group's values, element by element (a tuple for several operands).
    AllReduce {
        /// Groups, channel, device ids.
        attrs: CollectiveAttrs,
        /// The scalar reduction.
        to_apply: CompId,
    },
    /// `all-gather(x), dimensions={d}`: the group's values concatenated along `d`.
    AllGather {
        /// Groups, channel, device ids.
        attrs: CollectiveAttrs,
        /// The concatenated dimension.
        dimension: i64,
    },
    /// `reduce-scatter(x), dimensions={d}, to_apply=c`: the group's reduction, split along
    /// `d`; each replica keeps its block.
    ReduceScatter {
        /// Groups, channel, device ids.
        attrs: CollectiveAttrs,
        /// The split dimension.
        dimension: i64,
        /// The scalar reduction.
        to_apply: CompId,
    },
    /// `all-to-all(xs...)`: replica i's operand j goes to the group's replica j, arriving
    /// as element i (the tuple form); with `dimensions={d}`, one array split and
    /// concatenated along `d`.
    AllToAll {
        /// Groups, channel, device ids.
        attrs: CollectiveAttrs,
        /// The array form's split dimension (`None`: the tuple form).
        dimension: Option<i64>,
    },
    /// `collective-permute(x), source_target_pairs={{s,t},..}`: each target receives its
    /// source's value; a replica no pair sends to receives zeros.
    CollectivePermute {
        /// `channel_id=N`.
        channel_id: Option<i64>,
        /// `(source, target)` replica pairs.
        pairs: Vec<(i64, i64)>,
    },
    /// `rng-bit-generator(state), algorithm=..`: `(new state, random bits)` from a `u64`
    /// state vector, with XLA's algorithms.
    RngBitGenerator {
        /// The generator.
        algorithm: RngAlgorithm,
    },
    /// `replica-id()`: this replica's number (`u32[]`).
    ReplicaId,
    /// `partition-id()`: this partition's number (`u32[]`).
    PartitionId,
    /// `infeed(token), infeed_config="..."`: the next value of a host feed, returned as
    /// `(value, token)`.
    Infeed {
        /// `infeed_config`: names the feed (empty: the feeds are told apart by order).
        config: String,
    },
    /// `outfeed(value, token), outfeed_shape=.., outfeed_config="..."`: sends a value to a
    /// host feed; returns a token.
    Outfeed {
        /// `outfeed_config`: names the feed (empty: told apart by order).
        config: String,
        /// `outfeed_shape`: the shape sent (the value's, when XLA writes it).
        shape: Option<Shape>,
    },
    /// `opt-barrier(x)`: a value the optimiser must not look through.
    OptimizationBarrier,
    /// `constant({...})`: a constant whose data the dump left out (XLA prints large
    /// constants so unless asked not to). It reads and prints; computing with it is an
    /// error that says to re-dump the module with large constants.
    ElidedConstant,
    /// An op of XLA's that ipuxla reads, checks and prints but does not model: its declared
    /// shape is trusted, its attributes are kept verbatim, and compiling or evaluating it is
    /// `Unsupported` by name (the README's support table lists them).
    Foreign {
        /// The opcode as written (`batch-norm-training`, `async-start`, `add-start`).
        opcode: String,
        /// The computations it calls, with the attribute naming them (`calls`, `to_apply`,
        /// `called_computations` for a `{..}` list), in attribute order.
        called: Vec<(String, Vec<CompId>)>,
        /// Every other attribute, `name` and value text as written, in order.
        attributes: Vec<(String, String)>,
    },
}

impl Op {
    /// The opcode as HLO text spells it.
    pub fn name(&self) -> &str {
        match self {
            Op::Parameter { .. } => "parameter",
            Op::Constant { .. } => "constant",
            Op::Unary(u) => u.name(),
            Op::Binary(b) => b.name(),
            Op::Compare { .. } => "compare",
            Op::Select => "select",
            Op::Clamp => "clamp",
            Op::Convert => "convert",
            Op::BitcastConvert => "bitcast-convert",
            Op::Bitcast => "bitcast",
            Op::ReducePrecision { .. } => "reduce-precision",
            Op::Broadcast { .. } => "broadcast",
            Op::Reshape => "reshape",
            Op::Transpose { .. } => "transpose",
            Op::Slice { .. } => "slice",
            Op::Concatenate { .. } => "concatenate",
            Op::Pad { .. } => "pad",
            Op::Reverse { .. } => "reverse",
            Op::Iota { .. } => "iota",
            Op::DynamicSlice { .. } => "dynamic-slice",
            Op::DynamicUpdateSlice => "dynamic-update-slice",
            Op::Gather { .. } => "gather",
            Op::Scatter { .. } => "scatter",
            Op::Sort { .. } => "sort",
            Op::Reduce { .. } => "reduce",
            Op::ReduceWindow { .. } => "reduce-window",
            Op::SelectAndScatter { .. } => "select-and-scatter",
            Op::Convolution { .. } => "convolution",
            Op::Dot { .. } => "dot",
            Op::Tuple => "tuple",
            Op::GetTupleElement { .. } => "get-tuple-element",
            Op::While { .. } => "while",
            Op::Conditional { .. } => "conditional",
            Op::Call { .. } => "call",
            Op::Fusion { .. } => "fusion",
            Op::Map { .. } => "map",
            Op::TopK { .. } => "topk",
            Op::CustomCall { .. } => "custom-call",
            Op::AfterAll => "after-all",
            Op::AllReduce { .. } => "all-reduce",
            Op::AllGather { .. } => "all-gather",
            Op::ReduceScatter { .. } => "reduce-scatter",
            Op::AllToAll { .. } => "all-to-all",
            Op::CollectivePermute { .. } => "collective-permute",
            Op::ReplicaId => "replica-id",
            Op::RngBitGenerator { .. } => "rng-bit-generator",
            Op::PartitionId => "partition-id",
            Op::Infeed { .. } => "infeed",
            Op::Outfeed { .. } => "outfeed",
            Op::OptimizationBarrier => "opt-barrier",
            Op::ElidedConstant => "constant",
            Op::Foreign { opcode, .. } => opcode,
        }
    }

    /// The value of a verbatim attribute of a foreign op or custom call.
    pub fn attribute(&self, name: &str) -> Option<&str> {
        match self {
            Op::Foreign { attributes, .. } | Op::CustomCall { attributes, .. } => attributes
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str()),
            _ => None,
        }
    }

    /// Every computation this op calls, in attribute order.
    pub fn called_computations(&self) -> Vec<CompId> {
        match self {
            Op::Scatter { to_apply, .. }
            | Op::Reduce { to_apply, .. }
            | Op::ReduceWindow { to_apply, .. }
            | Op::Call { to_apply }
            | Op::AllReduce { to_apply, .. }
            | Op::ReduceScatter { to_apply, .. }
            | Op::Map { to_apply, .. } => vec![*to_apply],
            Op::Sort { comparator, .. } => vec![*comparator],
            Op::SelectAndScatter {
                select, scatter, ..
            } => vec![*select, *scatter],
            Op::While { condition, body } => vec![*condition, *body],
            Op::Conditional { branches } => branches.clone(),
            Op::Fusion { calls, .. } => vec![*calls],
            Op::CustomCall {
                called_computations,
                ..
            } => called_computations.clone(),
            Op::Foreign { called, .. } => called.iter().flat_map(|(_, c)| c.clone()).collect(),
            _ => vec![],
        }
    }

    /// Rewrites every called computation id through `f` (used when computations are renumbered).
    pub fn map_called_computations(&mut self, mut f: impl FnMut(CompId) -> CompId) {
        match self {
            Op::Scatter { to_apply, .. }
            | Op::Reduce { to_apply, .. }
            | Op::ReduceWindow { to_apply, .. }
            | Op::Call { to_apply }
            | Op::AllReduce { to_apply, .. }
            | Op::ReduceScatter { to_apply, .. }
            | Op::Map { to_apply, .. } => *to_apply = f(*to_apply),
            Op::Sort { comparator, .. } => *comparator = f(*comparator),
            Op::SelectAndScatter {
                select, scatter, ..
            } => {
                *select = f(*select);
                *scatter = f(*scatter);
            }
            Op::While { condition, body } => {
                *condition = f(*condition);
                *body = f(*body);
            }
            Op::Conditional { branches } => branches.iter_mut().for_each(|b| *b = f(*b)),
            Op::Fusion { calls, .. } => *calls = f(*calls),
            Op::CustomCall {
                called_computations,
                ..
            } => called_computations.iter_mut().for_each(|c| *c = f(*c)),
            Op::Foreign { called, .. } => called
                .iter_mut()
                .flat_map(|(_, c)| c.iter_mut())
                .for_each(|c| *c = f(*c)),
            _ => {}
        }
    }
}
