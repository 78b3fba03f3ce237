//! Random well-typed HLO modules, for differential testing: a seed gives one module (and
//! [`inputs`] one set of arguments), so a failure is reproduced from its seed alone, and
//! any fuzzer that can produce a `u64` (proptest, cargo-fuzz) can drive it.
//!
//! The programs use f32 and s32 arrays of rank 0 to 4 (sizes include 1 and primes) through
//! element-wise unary and binary ops, compare and select, converts, broadcasts, reshapes,
//! transposes, slices (strided), concatenations, pads (interior too), reverses, reductions
//! (sum, max), matrix products (with batch dimensions), dynamic slices and updates (indices
//! constant, out of range, or read from the data), iotas, sorts, bounded `while` loops and
//! conditionals on the data; and ([`more`]) gathers, scatters, convolutions, windowed
//! reductions, integer bit operations and division, float division and transcendentals on
//! bounded operands, 64-bit integer mixing and random bits; functions called twice
//! (outlined or plain calls); layouts other than row-major, with bitcasts that read memory
//! order (`layouts`); and, in modules for several devices, collectives among them
//! (`collectives`). Values stay small (inputs in [-2, 2] and [-8, 8]) so that
//! reference and device agree up to rounding.

mod collectives;
mod layouts;
pub use layouts::random_layout;
mod more;

use crate::attributes::{ComparisonDirection, DotDims, PadDim, SliceDim};
use crate::builder::{BuildError, ComputationBuilder, ModuleBuilder};
use crate::ids::InstrId;
use crate::literal::{ArrayData, ArrayLiteral};
use crate::op::BinaryOp;
use crate::{ArrayShape, ElementType, Literal, Module, Shape};

/// A small deterministic generator (SplitMix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// One of `items`.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    /// `0..n` in a random order (Fisher-Yates), as dimension numbers.
    pub fn permutation(&mut self, n: usize) -> Vec<i64> {
        let mut order: Vec<i64> = (0..n as i64).collect();
        for i in (1..n).rev() {
            let j = self.below(i + 1);
            order.swap(i, j);
        }
        order
    }
}

/// How big generated modules get.
#[derive(Debug, Clone)]
pub struct Options {
    /// Instructions added after the parameters (about).
    pub instructions: usize,
    /// Parameters at most.
    pub parameters: usize,
    /// Elements per array at most.
    pub max_elements: i64,
    /// Whether f16 arrays appear too.
    pub f16: bool,
    /// Devices the module runs on (its `num_partitions`): above 1, collectives appear too,
    /// and each device takes its own arguments ([`device_inputs`]).
    pub replicas: usize,
    /// Whether values take other layouts than row-major: copies into other layouts,
    /// bitcasts that read memory order, and random layouts on some values and parameters.
    pub layouts: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            instructions: 12,
            parameters: 4,
            max_elements: 4096,
            f16: false,
            replicas: 1,
            layouts: true,
        }
    }
}

const SIZES: [i64; 8] = [1, 2, 3, 4, 5, 7, 8, 16];

/// Generation state: the computation being built and the values made so far.
struct Gen<'a, 'b> {
    rng: &'a mut Rng,
    c: &'a mut ComputationBuilder<'b>,
    values: Vec<(InstrId, ArrayShape)>,
    /// Values an instruction reads (the rest become results).
    used: std::collections::HashSet<InstrId>,
    parameters: usize,
    options: &'a Options,
}

impl Gen<'_, '_> {
    fn shape_of(&self, x: InstrId) -> ArrayShape {
        self.c
            .shape(x)
            .as_array()
            .expect("generated values are arrays")
            .clone()
    }

    fn push(&mut self, x: InstrId) -> InstrId {
        let s = self.shape_of(x);
        self.values.push((x, s));
        x
    }

    fn random_dims(&mut self) -> Vec<i64> {
        loop {
            let rank = *self.rng.pick(&[0usize, 1, 1, 2, 2, 2, 3, 3, 4]);
            let dims: Vec<i64> = (0..rank).map(|_| *self.rng.pick(&SIZES)).collect();
            if dims.iter().product::<i64>() <= self.options.max_elements {
                return dims;
            }
        }
    }

    fn parameter(&mut self, shape: ArrayShape) -> Result<InstrId, BuildError> {
        let k = self.parameters;
        self.parameters += 1;
        let p = self
            .c
            .parameter(k as u64, Shape::Array(shape), &format!("p{k}"))?;
        // A parameter is an input, never a result of its own.
        self.used.insert(p);
        Ok(self.push(p))
    }

    /// A value of `element_type`: one made before, or a new parameter when allowed.
    fn operand(&mut self, element_type: ElementType) -> Result<InstrId, BuildError> {
        let fitting: Vec<InstrId> = self
            .values
            .iter()
            .filter(|(_, s)| s.element_type == element_type)
            .map(|(x, _)| *x)
            .collect();
        if fitting.is_empty()
            || (self.parameters < self.options.parameters && self.rng.chance(0.15))
        {
            let dims = self.random_dims();
            return self.parameter(ArrayShape::new(element_type, &dims));
        }
        // Recent values more often: chains get long.
        let i = fitting.len() - 1 - self.rng.below(fitting.len().min(4));
        self.used.insert(fitting[i]);
        Ok(fitting[i])
    }

    /// `x` as an array of `dims` (broadcast into it when it is a scalar, else a new
    /// parameter of that shape).
    fn same_shape(&mut self, x: InstrId, dims: &[i64]) -> Result<InstrId, BuildError> {
        let s = self.shape_of(x);
        let matching: Vec<InstrId> = self
            .values
            .iter()
            .filter(|(v, t)| *v != x && t.element_type == s.element_type && t.dims[..] == *dims)
            .map(|(v, _)| *v)
            .collect();
        if !matching.is_empty() && self.rng.chance(0.6) {
            let v = *self.rng.pick(&matching);
            self.used.insert(v);
            return Ok(v);
        }
        if self.parameters < self.options.parameters {
            return self.parameter(ArrayShape::new(s.element_type, dims));
        }
        let scalar = self.scalar(s.element_type, 0.5)?;
        self.c.broadcast(scalar, dims, &[])
    }

    /// Dimensions for `elements`: another factorisation of the count (sometimes with a
    /// leading 1).
    fn factorisation(&mut self, elements: i64) -> Vec<i64> {
        let mut left = elements;
        let mut out = Vec::new();
        while left > 1 && out.len() < 3 {
            let f = *self.rng.pick(&[2, 3, 4, 5, 7, 8, left]);
            if left % f == 0 {
                out.push(f);
                left /= f;
            }
        }
        if left > 1 {
            out.push(left);
        }
        if self.rng.chance(0.3) {
            out.insert(0, 1);
        }
        out
    }

    fn scalar(&mut self, t: ElementType, v: f32) -> Result<InstrId, BuildError> {
        match t {
            ElementType::S32 => self
                .c
                .constant(ArrayLiteral::scalar_s32(v.round() as i32 + 1)),
            _ => self.c.float_constant(t, v),
        }
    }

    /// A floating type: f32, or f16 when the options allow it.
    fn float(&mut self) -> ElementType {
        if self.options.f16 && self.rng.chance(0.3) {
            ElementType::F16
        } else {
            ElementType::F32
        }
    }

    fn step(&mut self) -> Result<InstrId, BuildError> {
        let t = if self.rng.chance(0.75) {
            self.float()
        } else {
            ElementType::S32
        };
        let float = t != ElementType::S32;
        let x = self.operand(t)?;
        let s = self.shape_of(x);
        let dims = s.dims.to_vec();
        let rank = dims.len();
        let elements: i64 = dims.iter().product();
        if self.options.layouts && self.rng.chance(0.08) {
            let made = self.relayout(x, &dims)?;
            return Ok(self.push(made));
        }
        // Collectives only with several devices (the other kinds draw as they always did).
        let kinds = if self.options.replicas > 1 { 30 } else { 29 };
        let made = match self.rng.below(kinds) {
            0 => {
                let floats = [
                    "negate", "abs", "tanh", "floor", "ceil", "logistic", "sine", "cosine",
                ];
                let ints = ["negate", "abs"];
                match *self.rng.pick(if float { &floats[..] } else { &ints[..] }) {
                    "negate" => self.c.negate(x)?,
                    "abs" => self.c.abs(x)?,
                    "tanh" => self.c.tanh(x)?,
                    "floor" => self.c.floor(x)?,
                    "ceil" => self.c.ceil(x)?,
                    "logistic" => self.c.logistic(x)?,
                    "sine" => self.c.sine(x)?,
                    _ => self.c.cosine(x)?,
                }
            }
            1 | 2 => {
                let y = self.same_shape(x, &dims)?;
                let op = *self.rng.pick(&[
                    BinaryOp::Add,
                    BinaryOp::Subtract,
                    BinaryOp::Multiply,
                    BinaryOp::Maximum,
                    BinaryOp::Minimum,
                ]);
                let z = self
                    .c
                    .add_instruction(crate::op::Op::Binary(op), &[x, y], None)?;
                if op == BinaryOp::Multiply && float {
                    // Keep magnitudes bounded through long chains.
                    self.c.tanh(z)?
                } else if op == BinaryOp::Multiply {
                    let eight = self.scalar(t, 7.0)?;
                    let eight = self.c.broadcast(eight, &dims, &[])?;
                    let neg = self.c.negate(eight)?;
                    self.c.clamp(neg, z, eight)?
                } else {
                    z
                }
            }
            3 => {
                let y = self.same_shape(x, &dims)?;
                let dir = *self.rng.pick(&[
                    ComparisonDirection::Gt,
                    ComparisonDirection::Lt,
                    ComparisonDirection::Ge,
                    ComparisonDirection::Eq,
                ]);
                let p = self.c.compare(x, y, dir, None)?;
                self.c.select(p, x, y)?
            }
            4 => {
                let to = match t {
                    ElementType::S32 => self.float(),
                    ElementType::F16 => *self.rng.pick(&[ElementType::F32, ElementType::S32]),
                    _ if self.options.f16 && self.rng.chance(0.5) => ElementType::F16,
                    _ => ElementType::S32,
                };
                self.c.convert(x, to)?
            }
            5 if elements * 4 <= self.options.max_elements && rank < 4 => {
                // Broadcast into one more dimension, somewhere.
                let at = self.rng.below(rank + 1);
                let mut out = dims.clone();
                out.insert(at, *self.rng.pick(&[1, 2, 3, 4]));
                let map: Vec<i64> = (0..rank as i64)
                    .map(|d| if d < at as i64 { d } else { d + 1 })
                    .collect();
                self.c.broadcast(x, &out, &map)?
            }
            6 if rank >= 2 => {
                let perm = self.rng.permutation(rank);
                self.c.transpose(x, &perm)?
            }
            7 => {
                let out = self.factorisation(elements);
                self.c.reshape(x, &out)?
            }
            8 if rank >= 1 => {
                let slices: Vec<SliceDim> = dims
                    .iter()
                    .map(|&d| {
                        let start = self.rng.below(d as usize) as i64;
                        let limit = start + 1 + self.rng.below((d - start) as usize) as i64;
                        let stride = 1 + self.rng.below(3) as i64;
                        SliceDim {
                            start,
                            limit,
                            stride,
                        }
                    })
                    .collect();
                self.c.slice(x, &slices)?
            }
            9 if rank >= 1 && elements * 2 <= self.options.max_elements => {
                let d = self.rng.below(rank);
                let y = self.same_shape(x, &dims)?;
                self.c.concatenate(&[x, y], d as i64)?
            }
            10 if rank >= 1 && elements * 8 <= self.options.max_elements => {
                let padding: Vec<PadDim> = (0..rank)
                    .map(|_| PadDim {
                        low: self.rng.below(3) as i64,
                        high: self.rng.below(3) as i64,
                        interior: self.rng.below(2) as i64,
                    })
                    .collect();
                let v = self.scalar(t, -1.0)?;
                self.c.pad(x, v, &padding)?
            }
            11 if rank >= 1 => {
                let d: Vec<i64> = (0..rank as i64).filter(|_| self.rng.chance(0.5)).collect();
                self.c.reverse(x, &d)?
            }
            12 if rank >= 1 => {
                let d: Vec<i64> = (0..rank as i64).filter(|_| self.rng.chance(0.5)).collect();
                let (op, init) = if self.rng.chance(0.5) {
                    (BinaryOp::Add, 0.0)
                } else {
                    (BinaryOp::Maximum, -100.0)
                };
                let init = self.scalar(t, init)?;
                let name = format!("r{}", self.values.len());
                let f = self.c.scalar_binary_computation(&name, op, t)?;
                let r = self.c.reduce(&[x], &[init], &d, f)?;
                if float && op == BinaryOp::Add {
                    self.c.tanh(r)?
                } else {
                    r
                }
            }
            13 if rank >= 1 && float => self.dot(x, &dims)?,
            14 if rank >= 1 => {
                let sizes: Vec<i64> = dims
                    .iter()
                    .map(|&d| 1 + self.rng.below(d as usize) as i64)
                    .collect();
                let starts = self.indices(&dims)?;
                self.c.dynamic_slice(x, &starts, &sizes)?
            }
            15 if rank >= 1 => {
                let sizes: Vec<i64> = dims
                    .iter()
                    .map(|&d| 1 + self.rng.below(d as usize) as i64)
                    .collect();
                let update = self.same_shape(x, &sizes)?;
                let starts = self.indices(&dims)?;
                self.c.dynamic_update_slice(x, update, &starts)?
            }
            16 if rank >= 1 => {
                let d = self.rng.below(rank) as i64;
                let iota = self.c.iota(Shape::array(ElementType::S32, &dims), d)?;
                if t == ElementType::S32 {
                    self.c.add(x, iota)?
                } else {
                    let f = self.c.convert(iota, t)?;
                    let f = self.c.multiply(x, f)?;
                    self.c.tanh(f)?
                }
            }
            17 if rank >= 1 => {
                let d = self.rng.below(rank) as i64;
                let name = format!("less{}", self.values.len());
                let less = self.c.sub_computation(name.clone(), |c| {
                    let a = c.parameter(0, Shape::scalar(t), &format!("{name}.a"))?;
                    let b = c.parameter(1, Shape::scalar(t), &format!("{name}.b"))?;
                    c.compare(a, b, ComparisonDirection::Lt, None)
                })?;
                self.c.sort(&[x], d, true, less)?
            }
            18 => self.bounded_loop(x, t)?,
            20 if rank >= 1 && elements * 5 <= self.options.max_elements => {
                self.gather_rows(x, &dims)?
            }
            21 if rank >= 1 => self.scatter_rows(x, &dims, t)?,
            22 if float => self.convolution(t)?,
            23 if rank >= 1 => self.reduce_window(x, &dims, t)?,
            24 if !float => self.integer_bits(x, &dims)?,
            25 if float => self.float_math(x, &dims, t)?,
            26 if rank < 4 && elements * 2 <= self.options.max_elements => self.mix_64(x, &dims)?,
            27 if elements >= 1 => self.random_bits(&dims)?,
            28 => self.called_twice(x, t)?,
            29 => self.collective(x, &dims, t)?,
            19 => {
                // A branch on the data: the sign of x's first element.
                let first = self.first_element(x)?;
                let zero = if t == ElementType::S32 {
                    self.c.constant(ArrayLiteral::scalar_s32(0))?
                } else {
                    self.c.float_constant(t, 0.0)?
                };
                let p = self.c.compare(first, zero, ComparisonDirection::Gt, None)?;
                let shape = Shape::Array(s.clone());
                let n = self.values.len();
                let negate = self.c.sub_computation(format!("negated{n}"), |c| {
                    let v = c.parameter(0, shape.clone(), &format!("negated{n}.x"))?;
                    c.negate(v)
                })?;
                let absolute = self.c.sub_computation(format!("absolute{n}"), |c| {
                    let v = c.parameter(0, shape.clone(), &format!("absolute{n}.x"))?;
                    c.abs(v)
                })?;
                self.c.conditional(p, &[x, x], &[negate, absolute])?
            }
            _ => self.c.negate(x)?,
        };
        Ok(self.push(made))
    }

    /// Start indices for a dynamic slice of an array of `dims`: constants (out of range at
    /// times: they clamp) or, when an s32 value exists, one read from it.
    fn indices(&mut self, dims: &[i64]) -> Result<Vec<InstrId>, BuildError> {
        let ints: Vec<InstrId> = self
            .values
            .iter()
            .filter(|(_, s)| s.element_type == ElementType::S32 && s.element_count() > 0)
            .map(|(x, _)| *x)
            .collect();
        dims.iter()
            .map(|&d| {
                if !ints.is_empty() && self.rng.chance(0.3) {
                    let v = *self.rng.pick(&ints);
                    self.used.insert(v);
                    self.first_element(v)
                } else {
                    let i = self.rng.below(d as usize + 4) as i32 - 2;
                    self.c.constant(ArrayLiteral::scalar_s32(i))
                }
            })
            .collect()
    }

    /// The first element of `x` as a scalar.
    fn first_element(&mut self, x: InstrId) -> Result<InstrId, BuildError> {
        let s = self.shape_of(x);
        if s.dims.is_empty() {
            return Ok(x);
        }
        let ones: Vec<SliceDim> = s
            .dims
            .iter()
            .map(|_| SliceDim {
                start: 0,
                limit: 1,
                stride: 1,
            })
            .collect();
        let one = self.c.slice(x, &ones)?;
        self.c.reshape(one, &[])
    }

    /// A `while` loop of 1 to 4 trips carrying `(counter, x)`, `x` squashed each trip.
    fn bounded_loop(&mut self, x: InstrId, t: ElementType) -> Result<InstrId, BuildError> {
        let s = Shape::Array(self.shape_of(x));
        let counter = Shape::scalar(ElementType::S32);
        let state = Shape::Tuple(vec![counter.clone(), s.clone()]);
        let trips = 1 + self.rng.below(4) as i32;
        let n = self.values.len();
        let condition = self.c.sub_computation(format!("more{n}"), |c| {
            let st = c.parameter(0, state.clone(), &format!("more{n}.state"))?;
            let i = c.get_tuple_element(st, 0)?;
            let limit = c.constant(ArrayLiteral::scalar_s32(trips))?;
            c.compare(i, limit, ComparisonDirection::Lt, None)
        })?;
        let body = self.c.sub_computation(format!("trip{n}"), |c| {
            let st = c.parameter(0, state.clone(), &format!("trip{n}.state"))?;
            let i = c.get_tuple_element(st, 0)?;
            let v = c.get_tuple_element(st, 1)?;
            let one = c.constant(ArrayLiteral::scalar_s32(1))?;
            let next = c.add(i, one)?;
            let dims = s.as_array().map(|a| a.dims.to_vec()).unwrap_or_default();
            let v = if t == ElementType::S32 {
                let three = c.constant(ArrayLiteral::scalar_s32(3))?;
                let three = c.broadcast(three, &dims, &[])?;
                let w = c.add(v, three)?;
                let seven = c.constant(ArrayLiteral::scalar_s32(7))?;
                let seven = c.broadcast(seven, &dims, &[])?;
                c.minimum(w, seven)?
            } else {
                let half = c.float_constant(t, 0.5)?;
                let half = c.broadcast(half, &dims, &[])?;
                let w = c.multiply(v, half)?;
                let w = c.add(w, half)?;
                c.tanh(w)?
            };
            c.tuple(&[next, v])
        })?;
        let zero = self.c.constant(ArrayLiteral::scalar_s32(0))?;
        let init = self.c.tuple(&[zero, x])?;
        let out = self.c.while_loop(init, condition, body)?;
        self.c.get_tuple_element(out, 1)
    }

    /// One function of `x`'s shape called on `x` and on a second value of that shape, the
    /// results added: half the time an outlined function (the compiler builds it once and
    /// copies each call's argument in), else a plain `call`.
    fn called_twice(&mut self, x: InstrId, t: ElementType) -> Result<InstrId, BuildError> {
        let s = self.shape_of(x);
        let dims = s.dims.to_vec();
        let shape = Shape::Array(s);
        let n = self.values.len();
        let f = self.c.sub_computation(format!("function{n}"), |c| {
            let v = c.parameter(0, shape.clone(), &format!("function{n}.x"))?;
            if t == ElementType::S32 {
                let three = c.constant(ArrayLiteral::scalar_s32(3))?;
                let three = c.broadcast(three, &dims, &[])?;
                let w = c.add(v, three)?;
                let seven = c.constant(ArrayLiteral::scalar_s32(7))?;
                let seven = c.broadcast(seven, &dims, &[])?;
                c.minimum(w, seven)
            } else {
                let w = c.multiply(v, v)?;
                let w = c.add(w, v)?;
                c.tanh(w)
            }
        })?;
        let y = self.same_shape(x, &dims)?;
        let outlined = self.rng.chance(0.5);
        let mut results = Vec::with_capacity(2);
        for argument in [x, y] {
            results.push(match outlined {
                true => self.c.call_function(&[argument], f)?,
                false => self.c.call(&[argument], f)?,
            });
        }
        self.c.add(results[0], results[1])
    }

    /// `x · y` contracting `x`'s last dimension with a new or made value's, the leading
    /// dimensions of `x` (rank 3 and up) as batch dimensions.
    fn dot(&mut self, x: InstrId, dims: &[i64]) -> Result<InstrId, BuildError> {
        let rank = dims.len();
        let k = dims[rank - 1];
        let batch: Vec<i64> = if rank >= 3 {
            dims[..1].to_vec()
        } else {
            Vec::new()
        };
        let n = *self.rng.pick(&[1, 2, 3, 5, 8, 16]);
        let mut rhs_dims = batch.clone();
        rhs_dims.extend([k, n]);
        let y = self.same_shape(x, &rhs_dims)?;
        let b = batch.len() as i64;
        let dims_numbers = DotDims {
            lhs_batch: (0..b).collect(),
            rhs_batch: (0..b).collect(),
            lhs_contracting: vec![rank as i64 - 1],
            rhs_contracting: vec![b],
        };
        let d = self.c.dot_general(x, y, dims_numbers, None)?;
        self.c.tanh(d)
    }
}

/// The module of `seed`.
pub fn module(seed: u64, options: &Options) -> Result<Module, BuildError> {
    let mut rng = Rng::new(seed);
    let mut mb = ModuleBuilder::new(format!("generated_{seed}"));
    let mut c = mb.computation("main");
    let mut g = Gen {
        rng: &mut rng,
        c: &mut c,
        values: Vec::new(),
        used: Default::default(),
        parameters: 0,
        options,
    };
    let first = g.random_dims();
    let t = if g.rng.chance(0.8) {
        g.float()
    } else {
        ElementType::S32
    };
    g.parameter(ArrayShape::new(t, &first))?;
    for _ in 0..options.instructions {
        g.step()?;
    }
    // Every value nothing reads is a result (the last six), so little is dead code.
    let mut results: Vec<InstrId> = g
        .values
        .iter()
        .map(|(x, _)| *x)
        .filter(|x| !g.used.contains(x))
        .collect();
    if results.len() > 6 {
        results.drain(..results.len() - 6);
    }
    if results.is_empty() {
        results.push(g.values[g.values.len() - 1].0);
    }
    let root = c.tuple(&results)?;
    let entry = c.finish(root)?;
    let mut module = mb.finish(entry)?;
    if options.layouts {
        layouts::scatter_layouts(&mut module, &mut rng);
    }
    if options.replicas > 1 {
        module.num_partitions = Some(options.replicas as i64);
    }
    Ok(module)
}

/// Each of the module's `devices` arguments for `module`: [`inputs`] of a seed of its own.
pub fn device_inputs(module: &Module, seed: u64, devices: usize) -> Vec<Vec<Literal>> {
    (0..devices as u64)
        .map(|d| inputs(module, seed ^ d.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
        .collect()
}

/// Arguments for `module`'s parameters from `seed`: floats in [-2, 2] (quarters), integers
/// in [-8, 8].
pub fn inputs(module: &Module, seed: u64) -> Vec<Literal> {
    let mut rng = Rng::new(seed ^ 0x5eed);
    module
        .entry_computation()
        .parameter_shapes()
        .iter()
        .map(|s| {
            let a = s.as_array().expect("generated parameters are arrays");
            let n = a.element_count() as usize;
            let data = match a.element_type {
                ElementType::S32 => {
                    ArrayData::S32((0..n).map(|_| rng.below(17) as i32 - 8).collect())
                }
                ElementType::F16 => ArrayData::F16(
                    (0..n)
                        .map(|_| half::f16::from_f32((rng.below(17) as f32 - 8.0) / 4.0))
                        .collect(),
                ),
                _ => ArrayData::F32((0..n).map(|_| (rng.below(17) as f32 - 8.0) / 4.0).collect()),
            };
            Literal::Array(ArrayLiteral {
                shape: a.clone(),
                data,
            })
        })
        .collect()
}
