//! A builder for Rust frontends: create parameters, constants and every opcode as a method,
//! with shapes inferred as instructions are added.
//!
//! Errors surface at the call that caused them (a shape mismatch is reported by the
//! `add` that got mismatched operands), and `finish` verifies the whole module.
//! Scopes set `sharding` (like `ipu_shard(N)`) and `frontend_attributes` (like
//! `scopes.frontend_attribute`) on everything built inside them.
//!
//! The seed tutorial's graph, `o1 = a + b; o2 = a + c; out = o1 + o2`:
//!
//! ```
//! use xla_ir::builder::ModuleBuilder;
//! use xla_ir::{ElementType, Shape};
//!
//! let mut m = ModuleBuilder::new("seed_tutorial");
//! let mut main = m.computation("main");
//! let f2 = Shape::array(ElementType::F32, &[2]);
//! let a = main.parameter(0, f2.clone(), "a")?;
//! let b = main.parameter(1, f2.clone(), "b")?;
//! let c = main.parameter(2, f2.clone(), "c")?;
//! let o1 = main.add(a, b)?;
//! let o2 = main.add(a, c)?;
//! let out = main.add(o1, o2)?;
//! let entry = main.finish(out)?;
//! let module = m.finish(entry)?;
//! assert_eq!(
//!     module.to_string(),
//!     "HloModule seed_tutorial\n\n\
//!      ENTRY main {\n  \
//!        a = f32[2]{0} parameter(0)\n  \
//!        b = f32[2]{0} parameter(1)\n  \
//!        c = f32[2]{0} parameter(2)\n  \
//!        add.1 = f32[2]{0} add(a, b)\n  \
//!        add.2 = f32[2]{0} add(a, c)\n  \
//!        ROOT add.3 = f32[2]{0} add(add.1, add.2)\n\
//!      }\n\n"
//! );
//! # Ok::<(), xla_ir::builder::BuildError>(())
//! ```

use crate::attributes::{
    CompareType, ComparisonDirection, ConvDims, DotDims, FusionKind, GatherDims, PadDim, Precision,
    ScatterDims, SliceDim, Window,
};
use crate::ids::{CompId, InstrId};
use crate::metadata::FrontendAttributes;
use crate::op::{BinaryOp, Op, UnaryOp};
use crate::shape_inference::infer_shape;
use crate::{
    ArrayShape, Computation, ElementType, Instruction, Layout, Literal, Module, Shape, Sharding,
    VerifyError,
};
use std::collections::HashSet;

/// What went wrong while building.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// Shape inference rejected an instruction.
    #[error("{opcode} in computation {computation}: {message}")]
    Shape {
        /// The computation being built.
        computation: String,
        /// The opcode being added.
        opcode: String,
        /// What was wrong.
        message: String,
    },
    /// A value from another computation (or a stale id) was used.
    #[error(
        "{opcode} in computation {computation}: operand {operand} is not a value of this computation"
    )]
    ForeignValue {
        /// The computation being built.
        computation: String,
        /// The opcode being added.
        opcode: String,
        /// The offending operand id.
        operand: InstrId,
    },
    /// A name is already taken.
    #[error("the name '{0}' is already used")]
    DuplicateName(String),
    /// The finished module did not verify.
    #[error(transparent)]
    Verify(#[from] VerifyError),
    /// [`ComputationBuilder::finish_module`] on a builder that does not own its module.
    #[error(
        "computation {0} is built inside another module builder: finish it with `finish`, then the module"
    )]
    NotOwner(String),
}

/// Builds a module: create computations with [`ModuleBuilder::computation`], then
/// [`ModuleBuilder::finish`] with the entry.
#[derive(Debug)]
pub struct ModuleBuilder {
    module: Module,
    names: HashSet<String>,
    next_suffix: u64,
}

impl ModuleBuilder {
    /// Starts a module called `name`.
    pub fn new(name: impl Into<String>) -> ModuleBuilder {
        ModuleBuilder {
            module: Module::new(name),
            names: HashSet::new(),
            next_suffix: 1,
        }
    }

    /// Starts a computation; it joins the module when [`ComputationBuilder::finish`] is called.
    pub fn computation(&mut self, name: impl Into<String>) -> ComputationBuilder<'_> {
        ComputationBuilder::new(Owner::Borrowed(self), name.into(), Scopes::default())
    }

    /// Starts module `module` with its entry computation `entry`, the builder owning the
    /// module (for frontends that keep a graph open in a struct):
    /// [`ComputationBuilder::finish_module`] ends both.
    pub fn entry(
        module: impl Into<String>,
        entry: impl Into<String>,
    ) -> ComputationBuilder<'static> {
        let owner = Owner::Owned(Box::new(ModuleBuilder::new(module)));
        ComputationBuilder::new(owner, entry.into(), Scopes::default())
    }

    /// Continues an existing module: new computations and instructions get names none of
    /// its names take.
    pub fn extend(module: Module) -> ModuleBuilder {
        let mut names = HashSet::new();
        for (_, comp) in module.computations() {
            names.insert(format!("computation {}", comp.name));
            for (_, instr) in comp.instructions() {
                names.insert(instr.name.clone());
            }
        }
        ModuleBuilder {
            module,
            names,
            next_suffix: 1,
        }
    }

    /// The module so far (to look at finished computations).
    pub fn module(&self) -> &Module {
        &self.module
    }

    /// The module so far, to change in place (what [`Self::extend`] is for).
    pub fn module_mut(&mut self) -> &mut Module {
        &mut self.module
    }

    /// The module so far, without choosing an entry or verifying (see [`Self::finish`]).
    pub fn into_module(self) -> Module {
        self.module
    }

    /// Finishes the module with `entry` as its entry computation and verifies it.
    pub fn finish(mut self, entry: CompId) -> Result<Module, BuildError> {
        self.module.entry = entry;
        crate::verify(&self.module)?;
        Ok(self.module)
    }

    fn unique_name(&mut self, base: &str) -> String {
        loop {
            let name = format!("{base}.{}", self.next_suffix);
            self.next_suffix += 1;
            if self.names.insert(name.clone()) {
                return name;
            }
        }
    }
}

/// The annotations applied to everything built inside a scope.
#[derive(Debug, Clone, Default)]
struct Scopes {
    sharding: Option<Sharding>,
    frontend_attributes: FrontendAttributes,
}

/// The module a computation is built into: a caller's, or its own ([`ModuleBuilder::entry`]).
#[derive(Debug)]
enum Owner<'m> {
    Borrowed(&'m mut ModuleBuilder),
    Owned(Box<ModuleBuilder>),
}

impl Owner<'_> {
    fn get(&self) -> &ModuleBuilder {
        match self {
            Owner::Borrowed(m) => m,
            Owner::Owned(m) => m,
        }
    }

    fn get_mut(&mut self) -> &mut ModuleBuilder {
        match self {
            Owner::Borrowed(m) => m,
            Owner::Owned(m) => m,
        }
    }
}

/// Builds one computation. Every op is a method returning the new instruction's id.
#[derive(Debug)]
pub struct ComputationBuilder<'m> {
    owner: Owner<'m>,
    comp: Computation,
    scopes: Scopes,
}

macro_rules! unary_methods {
    ($($method:ident => $op:ident),* $(,)?) => {$(
        #[doc = concat!("Element-wise `", stringify!($op), "` (HLO `", "see UnaryOp::", stringify!($op), "`).")]
        pub fn $method(&mut self, x: InstrId) -> Result<InstrId, BuildError> {
            self.add_instruction(Op::Unary(UnaryOp::$op), &[x], None)
        }
    )*};
}

macro_rules! binary_methods {
    ($($method:ident => $op:ident),* $(,)?) => {$(
        #[doc = concat!("Element-wise `", stringify!($op), "` of two values of the same shape.")]
        pub fn $method(&mut self, a: InstrId, b: InstrId) -> Result<InstrId, BuildError> {
            self.add_instruction(Op::Binary(BinaryOp::$op), &[a, b], None)
        }
    )*};
}

impl<'m> ComputationBuilder<'m> {
    fn new(owner: Owner<'m>, name: String, scopes: Scopes) -> ComputationBuilder<'m> {
        ComputationBuilder {
            owner,
            comp: Computation::new(name),
            scopes,
        }
    }

    /// The shape of a value built so far.
    pub fn shape(&self, value: InstrId) -> &Shape {
        &self.comp.instr(value).shape
    }

    /// An instruction built so far (its op, operands and shape: what autodiff reads).
    pub fn instruction(&self, value: InstrId) -> &Instruction {
        self.comp.instr(value)
    }

    /// The computation built so far.
    pub fn computation_so_far(&self) -> &Computation {
        &self.comp
    }

    /// The module the computation joins (its finished computations: reducers, bodies).
    pub fn module(&self) -> &Module {
        &self.owner.get().module
    }

    /// Whether `value` is a value of this computation.
    pub fn contains(&self, value: InstrId) -> bool {
        // The builder only appends, so the arena and the program order are the same list.
        value.index() < self.comp.len()
    }

    /// Builds another computation (a reducer, a loop body, a branch) while this one is open.
    /// It inherits the current scopes and joins the module when `build` returns its root.
    pub fn sub_computation(
        &mut self,
        name: impl Into<String>,
        build: impl FnOnce(&mut ComputationBuilder<'_>) -> Result<InstrId, BuildError>,
    ) -> Result<CompId, BuildError> {
        let owner = Owner::Borrowed(self.owner.get_mut());
        let mut sub = ComputationBuilder::new(owner, name.into(), self.scopes.clone());
        let root = build(&mut sub)?;
        sub.finish(root)
    }

    /// Runs `build` with `sharding` set on every instruction it creates (e.g.
    /// `Sharding::Maximal { device: 1 }` to place them on IPU 1).
    pub fn with_sharding<R>(
        &mut self,
        sharding: Sharding,
        build: impl FnOnce(&mut Self) -> R,
    ) -> R {
        let saved = self.scopes.sharding.replace(sharding);
        let result = build(self);
        self.scopes.sharding = saved;
        result
    }

    /// Runs `build` with the frontend attribute `key="value"` on every instruction it creates.
    pub fn with_frontend_attribute<R>(
        &mut self,
        key: impl Into<String>,
        value: impl Into<String>,
        build: impl FnOnce(&mut Self) -> R,
    ) -> R {
        let key = key.into();
        let saved = self
            .scopes
            .frontend_attributes
            .insert(key.clone(), value.into());
        let result = build(self);
        match saved {
            Some(old) => self.scopes.frontend_attributes.insert(key, old),
            None => self.scopes.frontend_attributes.remove(&key),
        };
        result
    }

    /// Adds an instruction with an inferred shape (`declared` for ops that need one).
    pub fn add_instruction(
        &mut self,
        op: Op,
        operands: &[InstrId],
        declared: Option<Shape>,
    ) -> Result<InstrId, BuildError> {
        let opcode = op.name();
        let name = self.owner.get_mut().unique_name(opcode);
        self.add_named(name, op, operands, declared)
    }

    fn add_named(
        &mut self,
        name: String,
        op: Op,
        operands: &[InstrId],
        declared: Option<Shape>,
    ) -> Result<InstrId, BuildError> {
        if let Some(&bad) = operands.iter().find(|o| !self.contains(**o)) {
            return Err(BuildError::ForeignValue {
                computation: self.comp.name.clone(),
                opcode: op.name().to_string(),
                operand: bad,
            });
        }
        let shapes: Vec<&Shape> = operands
            .iter()
            .map(|o| &self.comp.instr(*o).shape)
            .collect();
        let shape = infer_shape(&op, &shapes, declared.as_ref(), &self.owner.get().module)
            .map_err(|message| BuildError::Shape {
                computation: self.comp.name.clone(),
                opcode: op.name().to_string(),
                message,
            })?;
        let mut instr = Instruction::new(name, op, operands, shape);
        instr.sharding = self.scopes.sharding.clone();
        instr.frontend_attributes = self.scopes.frontend_attributes.clone();
        Ok(self.comp.push(instr))
    }

    /// Finishes the computation with `root` as its result and adds it to the module.
    pub fn finish(mut self, root: InstrId) -> Result<CompId, BuildError> {
        self.finish_in_place(root)
    }

    fn finish_in_place(&mut self, root: InstrId) -> Result<CompId, BuildError> {
        if !self.contains(root) {
            return Err(BuildError::ForeignValue {
                computation: self.comp.name.clone(),
                opcode: "ROOT".to_string(),
                operand: root,
            });
        }
        let owner = self.owner.get_mut();
        if !owner
            .names
            .insert(format!("computation {}", self.comp.name))
        {
            return Err(BuildError::DuplicateName(self.comp.name.clone()));
        }
        self.comp.root = root;
        let comp = std::mem::replace(&mut self.comp, Computation::new(""));
        Ok(owner.module.add_computation(comp))
    }

    /// Finishes a builder from [`ModuleBuilder::entry`]: the computation becomes the
    /// module's entry with `root` as its result, and the module is verified.
    pub fn finish_module(mut self, root: InstrId) -> Result<Module, BuildError> {
        if matches!(self.owner, Owner::Borrowed(_)) {
            return Err(BuildError::NotOwner(self.comp.name.clone()));
        }
        let entry = self.finish_in_place(root)?;
        match self.owner {
            Owner::Owned(m) => m.finish(entry),
            Owner::Borrowed(_) => unreachable!("checked above"),
        }
    }

    /// `parameter(number)` named `name`.
    pub fn parameter(
        &mut self,
        number: u64,
        shape: Shape,
        name: &str,
    ) -> Result<InstrId, BuildError> {
        if !self.owner.get_mut().names.insert(name.to_string()) {
            return Err(BuildError::DuplicateName(name.to_string()));
        }
        self.add_named(name.to_string(), Op::Parameter { number }, &[], Some(shape))
    }

    /// `constant(literal)`.
    pub fn constant(&mut self, literal: impl Into<Literal>) -> Result<InstrId, BuildError> {
        self.add_instruction(
            Op::Constant {
                literal: literal.into(),
            },
            &[],
            None,
        )
    }

    unary_methods! {
        abs => Abs, negate => Negate, sign => Sign, exp => Exp, expm1 => Expm1, log => Log,
        log1p => Log1p, sqrt => Sqrt, rsqrt => Rsqrt, cbrt => Cbrt, tanh => Tanh,
        logistic => Logistic, sine => Sine, cosine => Cosine, tan => Tan, erf => Erf,
        floor => Floor, ceil => Ceil, round_nearest_afz => RoundNearestAfz,
        round_nearest_even => RoundNearestEven, not => Not, is_finite => IsFinite,
        popcnt => Popcnt, count_leading_zeros => Clz, copy => Copy,
    }

    binary_methods! {
        add => Add, subtract => Subtract, multiply => Multiply, divide => Divide,
        remainder => Remainder, power => Power, atan2 => Atan2, maximum => Maximum,
        minimum => Minimum, and => And, or => Or, xor => Xor, shift_left => ShiftLeft,
        shift_right_arithmetic => ShiftRightArithmetic, shift_right_logical => ShiftRightLogical,
    }

    /// A scalar constant of floating type `element_type` holding `value` (an f32 constant,
    /// converted for the other float types).
    pub fn float_constant(
        &mut self,
        element_type: ElementType,
        value: f32,
    ) -> Result<InstrId, BuildError> {
        let x = self.constant(crate::literal::ArrayLiteral::scalar_f32(value))?;
        if element_type == ElementType::F32 {
            Ok(x)
        } else {
            self.convert(x, element_type)
        }
    }

    /// `compare(a, b), direction=..` (with an explicit ordering when `compare_type` is given).
    pub fn compare(
        &mut self,
        a: InstrId,
        b: InstrId,
        direction: ComparisonDirection,
        compare_type: Option<CompareType>,
    ) -> Result<InstrId, BuildError> {
        self.add_instruction(
            Op::Compare {
                direction,
                compare_type,
            },
            &[a, b],
            None,
        )
    }

    /// `select(pred, on_true, on_false)`.
    pub fn select(
        &mut self,
        pred: InstrId,
        on_true: InstrId,
        on_false: InstrId,
    ) -> Result<InstrId, BuildError> {
        self.add_instruction(Op::Select, &[pred, on_true, on_false], None)
    }

    /// `clamp(min, x, max)`.
    pub fn clamp(&mut self, min: InstrId, x: InstrId, max: InstrId) -> Result<InstrId, BuildError> {
        self.add_instruction(Op::Clamp, &[min, x, max], None)
    }

    fn array_of(&self, x: InstrId) -> Option<&ArrayShape> {
        self.shape(x).as_array()
    }

    /// `convert(x)` to another element type.
    pub fn convert(&mut self, x: InstrId, to: ElementType) -> Result<InstrId, BuildError> {
        let declared = self
            .array_of(x)
            .map(|a| Shape::Array(a.with_element_type(to)));
        self.add_instruction(Op::Convert, &[x], declared)
    }

    /// `bitcast-convert(x)` to `shape` (the same bits read as another type).
    pub fn bitcast_convert(&mut self, x: InstrId, shape: Shape) -> Result<InstrId, BuildError> {
        self.add_instruction(Op::BitcastConvert, &[x], Some(shape))
    }

    /// `bitcast(x)` to `shape`: `x`'s elements in memory order (as its layout stores them)
    /// read as `shape`'s, in its layout's order; the byte sizes must agree.
    pub fn bitcast(&mut self, x: InstrId, shape: ArrayShape) -> Result<InstrId, BuildError> {
        self.add_instruction(Op::Bitcast, &[x], Some(Shape::Array(shape)))
    }

    /// `copy(x)` stored in `layout` (minor-to-major dimension numbers of `x`'s rank): the
    /// same values in another memory order, as XLA's layout assignment inserts.
    pub fn copy_with_layout(&mut self, x: InstrId, layout: Layout) -> Result<InstrId, BuildError> {
        let rank = self.array_of(x).map_or(0, ArrayShape::rank);
        let mut dims: Vec<i64> = layout.minor_to_major.to_vec();
        dims.sort_unstable();
        if !dims.iter().copied().eq(0..rank as i64) {
            return Err(BuildError::Shape {
                computation: self.comp.name.clone(),
                opcode: "copy".to_string(),
                message: format!(
                    "layout {layout} is not an order of the {rank} dimensions of {}",
                    self.shape(x)
                ),
            });
        }
        let copy = self.add_instruction(Op::Unary(UnaryOp::Copy), &[x], None)?;
        if let Some(a) = self.comp.instr_mut(copy).shape.as_array_mut() {
            a.layout = Some(layout);
        }
        Ok(copy)
    }

    /// `reshape(x)` to `dims`.
    pub fn reshape(&mut self, x: InstrId, dims: &[i64]) -> Result<InstrId, BuildError> {
        let declared = self.array_of(x).map(|a| Shape::array(a.element_type, dims));
        self.add_instruction(Op::Reshape, &[x], declared)
    }

    /// `broadcast(x)` to `dims`, operand dimension i going to `dimensions[i]`.
    pub fn broadcast(
        &mut self,
        x: InstrId,
        dims: &[i64],
        dimensions: &[i64],
    ) -> Result<InstrId, BuildError> {
        let declared = self.array_of(x).map(|a| Shape::array(a.element_type, dims));
        self.add_instruction(
            Op::Broadcast {
                dimensions: dimensions.to_vec(),
            },
            &[x],
            declared,
        )
    }

    /// `transpose(x)` with output dimension i taken from operand dimension `permutation[i]`.
    pub fn transpose(&mut self, x: InstrId, permutation: &[i64]) -> Result<InstrId, BuildError> {
        self.add_instruction(
            Op::Transpose {
                dimensions: permutation.to_vec(),
            },
            &[x],
            None,
        )
    }

    /// `slice(x)` with one range per dimension.
    pub fn slice(&mut self, x: InstrId, slices: &[SliceDim]) -> Result<InstrId, BuildError> {
        self.add_instruction(
            Op::Slice {
                slices: slices.to_vec(),
            },
            &[x],
            None,
        )
    }

    /// `concatenate(xs...)` along `dimension`.
    pub fn concatenate(&mut self, xs: &[InstrId], dimension: i64) -> Result<InstrId, BuildError> {
        self.add_instruction(Op::Concatenate { dimension }, xs, None)
    }

    /// `pad(x, value)` with low/high/interior padding per dimension.
    pub fn pad(
        &mut self,
        x: InstrId,
        value: InstrId,
        padding: &[PadDim],
    ) -> Result<InstrId, BuildError> {
        self.add_instruction(
            Op::Pad {
                padding: padding.to_vec(),
            },
            &[x, value],
            None,
        )
    }

    /// `reverse(x)` along `dimensions`.
    pub fn reverse(&mut self, x: InstrId, dimensions: &[i64]) -> Result<InstrId, BuildError> {
        self.add_instruction(
            Op::Reverse {
                dimensions: dimensions.to_vec(),
            },
            &[x],
            None,
        )
    }

    /// `iota()` of `shape`, counting along `dimension`.
    pub fn iota(&mut self, shape: Shape, dimension: i64) -> Result<InstrId, BuildError> {
        self.add_instruction(Op::Iota { dimension }, &[], Some(shape))
    }

    /// `dynamic-slice(x, starts...)` of `sizes`.
    pub fn dynamic_slice(
        &mut self,
        x: InstrId,
        starts: &[InstrId],
        sizes: &[i64],
    ) -> Result<InstrId, BuildError> {
        let operands: Vec<InstrId> = std::iter::once(x).chain(starts.iter().copied()).collect();
        self.add_instruction(
            Op::DynamicSlice {
                sizes: sizes.to_vec(),
            },
            &operands,
            None,
        )
    }

    /// `dynamic-update-slice(x, update, starts...)`.
    pub fn dynamic_update_slice(
        &mut self,
        x: InstrId,
        update: InstrId,
        starts: &[InstrId],
    ) -> Result<InstrId, BuildError> {
        let operands: Vec<InstrId> = [x, update]
            .into_iter()
            .chain(starts.iter().copied())
            .collect();
        self.add_instruction(Op::DynamicUpdateSlice, &operands, None)
    }

    /// `gather(operand, indices)`.
    pub fn gather(
        &mut self,
        operand: InstrId,
        indices: InstrId,
        dims: GatherDims,
        slice_sizes: &[i64],
    ) -> Result<InstrId, BuildError> {
        let op = Op::Gather {
            dims,
            slice_sizes: slice_sizes.to_vec(),
            indices_are_sorted: false,
        };
        self.add_instruction(op, &[operand, indices], None)
    }

    /// `scatter(operand, indices, updates)` combining with `to_apply`.
    pub fn scatter(
        &mut self,
        operand: InstrId,
        indices: InstrId,
        updates: InstrId,
        dims: ScatterDims,
        to_apply: CompId,
    ) -> Result<InstrId, BuildError> {
        let op = Op::Scatter {
            dims,
            to_apply,
            indices_are_sorted: false,
            unique_indices: false,
        };
        self.add_instruction(op, &[operand, indices, updates], None)
    }

    /// `sort(keys...)` along `dimension` with a less-than `comparator`.
    pub fn sort(
        &mut self,
        keys: &[InstrId],
        dimension: i64,
        is_stable: bool,
        comparator: CompId,
    ) -> Result<InstrId, BuildError> {
        self.add_instruction(
            Op::Sort {
                dimension,
                is_stable,
                comparator,
            },
            keys,
            None,
        )
    }

    /// `reduce(inputs..., inits...)` over `dimensions` with `to_apply`.
    pub fn reduce(
        &mut self,
        inputs: &[InstrId],
        inits: &[InstrId],
        dimensions: &[i64],
        to_apply: CompId,
    ) -> Result<InstrId, BuildError> {
        let operands: Vec<InstrId> = inputs.iter().chain(inits).copied().collect();
        self.add_instruction(
            Op::Reduce {
                dimensions: dimensions.to_vec(),
                to_apply,
            },
            &operands,
            None,
        )
    }

    /// `reduce-window(inputs..., inits...)` with `window` and `to_apply`.
    pub fn reduce_window(
        &mut self,
        inputs: &[InstrId],
        inits: &[InstrId],
        window: Window,
        to_apply: CompId,
    ) -> Result<InstrId, BuildError> {
        let operands: Vec<InstrId> = inputs.iter().chain(inits).copied().collect();
        self.add_instruction(Op::ReduceWindow { window, to_apply }, &operands, None)
    }

    /// `select-and-scatter(operand, source, init)`.
    pub fn select_and_scatter(
        &mut self,
        operand: InstrId,
        source: InstrId,
        init: InstrId,
        window: Window,
        select: CompId,
        scatter: CompId,
    ) -> Result<InstrId, BuildError> {
        self.add_instruction(
            Op::SelectAndScatter {
                window,
                select,
                scatter,
            },
            &[operand, source, init],
            None,
        )
    }

    /// `convolution(input, kernel)`; `result_type` is XLA's preferred element type.
    #[allow(clippy::too_many_arguments)]
    pub fn convolution(
        &mut self,
        input: InstrId,
        kernel: InstrId,
        window: Window,
        dims: ConvDims,
        feature_group_count: i64,
        batch_group_count: i64,
        result_type: Option<ElementType>,
    ) -> Result<InstrId, BuildError> {
        let op = Op::Convolution {
            window,
            dims,
            feature_group_count,
            batch_group_count,
            precision: vec![Precision::Default; 2],
        };
        let declared = result_type.map(Shape::scalar);
        self.add_instruction(op, &[input, kernel], declared)
    }

    /// `dot(lhs, rhs)` with general dimension numbers; `result_type` is the preferred type.
    pub fn dot_general(
        &mut self,
        lhs: InstrId,
        rhs: InstrId,
        dims: DotDims,
        result_type: Option<ElementType>,
    ) -> Result<InstrId, BuildError> {
        let declared = result_type.map(Shape::scalar);
        self.add_instruction(
            Op::Dot {
                dims,
                precision: vec![Precision::Default; 2],
            },
            &[lhs, rhs],
            declared,
        )
    }

    /// Matrix product of `[m, k]` and `[k, n]` (or vector forms): contracts lhs's last
    /// dimension with rhs's first.
    pub fn dot(&mut self, lhs: InstrId, rhs: InstrId) -> Result<InstrId, BuildError> {
        let lhs_rank = self.array_of(lhs).map_or(0, |a| a.rank() as i64);
        let dims = DotDims {
            lhs_contracting: vec![lhs_rank - 1],
            rhs_contracting: vec![0],
            ..DotDims::default()
        };
        self.dot_general(lhs, rhs, dims, None)
    }

    /// `tuple(xs...)`.
    pub fn tuple(&mut self, xs: &[InstrId]) -> Result<InstrId, BuildError> {
        self.add_instruction(Op::Tuple, xs, None)
    }

    /// `get-tuple-element(t), index=i`.
    pub fn get_tuple_element(&mut self, t: InstrId, index: i64) -> Result<InstrId, BuildError> {
        self.add_instruction(Op::GetTupleElement { index }, &[t], None)
    }

    /// `while(init), condition=.., body=..`.
    pub fn while_loop(
        &mut self,
        init: InstrId,
        condition: CompId,
        body: CompId,
    ) -> Result<InstrId, BuildError> {
        self.add_instruction(Op::While { condition, body }, &[init], None)
    }

    /// `conditional(selector, args...)`: a pred selector picks `[true, false]` branches,
    /// an s32 selector indexes `branches` (out of range runs the last one).
    pub fn conditional(
        &mut self,
        selector: InstrId,
        args: &[InstrId],
        branches: &[CompId],
    ) -> Result<InstrId, BuildError> {
        let operands: Vec<InstrId> = std::iter::once(selector)
            .chain(args.iter().copied())
            .collect();
        self.add_instruction(
            Op::Conditional {
                branches: branches.to_vec(),
            },
            &operands,
            None,
        )
    }

    /// `call(args...), to_apply=..`.
    pub fn call(&mut self, args: &[InstrId], to_apply: CompId) -> Result<InstrId, BuildError> {
        self.add_instruction(Op::Call { to_apply }, args, None)
    }

    /// `call(args...), to_apply=..` of an outlined function: marked so the compiler builds
    /// the callee once and shares it between calls ([`crate::call_config`]).
    pub fn call_function(
        &mut self,
        args: &[InstrId],
        to_apply: CompId,
    ) -> Result<InstrId, BuildError> {
        let id = self.call(args, to_apply)?;
        self.comp.instr_mut(id).backend_config =
            Some(crate::call_config::FUNCTION_CALL_CONFIG.to_string());
        Ok(id)
    }

    /// `fusion(args...), kind=.., calls=..`.
    pub fn fusion(
        &mut self,
        args: &[InstrId],
        kind: FusionKind,
        calls: CompId,
    ) -> Result<InstrId, BuildError> {
        self.add_instruction(Op::Fusion { kind, calls }, args, None)
    }

    /// `map(xs...), to_apply=..` applying a scalar computation to every element.
    pub fn map(&mut self, xs: &[InstrId], to_apply: CompId) -> Result<InstrId, BuildError> {
        let rank = xs
            .first()
            .and_then(|x| self.array_of(*x))
            .map_or(0, |a| a.rank() as i64);
        self.add_instruction(
            Op::Map {
                dimensions: (0..rank).collect(),
                to_apply,
            },
            xs,
            None,
        )
    }

    /// `topk(x), k=.., largest=..`: (values, s32 indices) along the last dimension.
    pub fn top_k(&mut self, x: InstrId, k: i64, largest: bool) -> Result<InstrId, BuildError> {
        self.add_instruction(Op::TopK { k, largest }, &[x], None)
    }

    /// A recomputation checkpoint of `x` (the seed's `recomputation_checkpoint`): the same
    /// value, which recomputation (`allow_recompute`) keeps rather than computing again.
    pub fn recomputation_checkpoint(&mut self, x: InstrId) -> Result<InstrId, BuildError> {
        let shape = self.shape(x).clone();
        self.custom_call(crate::call_config::CHECKPOINT_TARGET, &[x], shape)
    }

    /// `custom-call(args...)` to `target`, producing `shape`.
    pub fn custom_call(
        &mut self,
        target: &str,
        args: &[InstrId],
        shape: Shape,
    ) -> Result<InstrId, BuildError> {
        let op = Op::CustomCall {
            target: target.to_string(),
            called_computations: vec![],
            attributes: vec![],
        };
        self.add_instruction(op, args, Some(shape))
    }

    /// A scalar computation `(x: T, y: T) -> T` applying `op` (for reduce, scatter, ...).
    pub fn scalar_binary_computation(
        &mut self,
        name: &str,
        op: BinaryOp,
        element_type: ElementType,
    ) -> Result<CompId, BuildError> {
        let name = name.to_string();
        self.sub_computation(name.clone(), |c| {
            let x = c.parameter(0, Shape::scalar(element_type), &format!("{name}.x"))?;
            let y = c.parameter(1, Shape::scalar(element_type), &format!("{name}.y"))?;
            c.add_instruction(Op::Binary(op), &[x, y], None)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::literal::ArrayLiteral;

    fn f32s(dims: &[i64]) -> Shape {
        Shape::array(ElementType::F32, dims)
    }

    #[test]
    fn shape_errors_surface_at_the_call() {
        let mut m = ModuleBuilder::new("m");
        let mut c = m.computation("main");
        let a = c.parameter(0, f32s(&[2]), "a").unwrap();
        let b = c.parameter(1, f32s(&[3]), "b").unwrap();
        let err = c.add(a, b).unwrap_err();
        assert!(
            err.to_string()
                .contains("add needs operands of the same shape"),
            "{err}"
        );
    }

    #[test]
    fn reduce_with_a_sub_computation_and_scopes() {
        let mut m = ModuleBuilder::new("m");
        let mut c = m.computation("main");
        let x = c.parameter(0, f32s(&[4, 8]), "x").unwrap();
        let zero = c.constant(ArrayLiteral::scalar_f32(0.0)).unwrap();
        let sum = c
            .scalar_binary_computation("sum", BinaryOp::Add, ElementType::F32)
            .unwrap();
        let r = c
            .with_sharding(Sharding::Maximal { device: 1 }, |c| {
                c.with_frontend_attribute("stage", "0", |c| c.reduce(&[x], &[zero], &[1], sum))
            })
            .unwrap();
        assert_eq!(c.shape(r), &f32s(&[4]));
        let after = c.negate(r).unwrap();
        let entry = c.finish(after).unwrap();
        let module = m.finish(entry).unwrap();
        let text = module.to_string();
        assert!(text.contains("reduce(x, constant.1), dimensions={1}, to_apply=sum, sharding={maximal device=1}, frontend_attributes={stage=\"0\"}"), "{text}");
        assert!(
            text.contains("negate(reduce.3)\n"),
            "scopes end with their closure: {text}"
        );
        // What the builder prints, the parser reads back to the same text.
        assert_eq!(crate::parse_module(&text).unwrap().to_string(), text);
    }

    #[test]
    fn while_loop_counts_to_ten() {
        let mut m = ModuleBuilder::new("m");
        let s32 = Shape::scalar(ElementType::S32);
        let mut c = m.computation("main");
        let cond = c
            .sub_computation("cond", |c| {
                let i = c.parameter(0, s32.clone(), "i")?;
                let ten = c.constant(ArrayLiteral::scalar_s32(10))?;
                c.compare(i, ten, ComparisonDirection::Lt, None)
            })
            .unwrap();
        let body = c
            .sub_computation("body", |c| {
                let i = c.parameter(0, s32.clone(), "j")?;
                let one = c.constant(ArrayLiteral::scalar_s32(1))?;
                c.add(i, one)
            })
            .unwrap();
        let zero = c.constant(ArrayLiteral::scalar_s32(0)).unwrap();
        let w = c.while_loop(zero, cond, body).unwrap();
        let entry = c.finish(w).unwrap();
        let module = m.finish(entry).unwrap();
        assert_eq!(module.computation_count(), 3);
    }

    #[test]
    fn values_of_another_computation_are_rejected() {
        let mut m = ModuleBuilder::new("m");
        let mut c = m.computation("main");
        let err = c.negate(InstrId(7)).unwrap_err();
        assert!(matches!(err, BuildError::ForeignValue { .. }));
    }
}
