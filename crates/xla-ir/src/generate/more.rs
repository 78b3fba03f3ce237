//! The generator's second tier of ops: gathers and scatters, convolutions (strides,
//! padding, dilations, feature groups), windowed reductions, integer bit operations and
//! division, float division and transcendentals on bounded operands, 64-bit integer mixing
//! (kept exact as word pairs on the IPU), and random bits.

use super::Gen;
use crate::attributes::{ConvDims, GatherDims, ScatterDims, Window, WindowDim};
use crate::builder::BuildError;
use crate::ids::InstrId;
use crate::literal::{ArrayData, ArrayLiteral};
use crate::op::{BinaryOp, RngAlgorithm};
use crate::{ArrayShape, ElementType, Shape};

impl Gen<'_, '_> {
    /// A `u32` constant broadcast to `dims`.
    fn u32_splat(&mut self, value: u32, dims: &[i64]) -> Result<InstrId, BuildError> {
        let c = self.c.constant(ArrayLiteral {
            shape: ArrayShape::new(ElementType::U32, &[]),
            data: ArrayData::U32(vec![value]),
        })?;
        self.c.broadcast(c, dims, &[])
    }

    /// An `s32[n, 1]` constant of row indices for an array of `rows` rows (some out of
    /// range: they clamp, or are skipped by a scatter); a quarter of the time `u32[n, 1]`,
    /// where -1 is the largest u32 (out of range above).
    fn row_indices(&mut self, n: i64, rows: i64) -> Result<InstrId, BuildError> {
        let v: Vec<i32> = (0..n)
            .map(|_| self.rng.below(rows as usize + 2) as i32 - 1)
            .collect();
        let (t, data) = match self.rng.chance(0.25) {
            true => (
                ElementType::U32,
                ArrayData::U32(v.iter().map(|&i| i as u32).collect()),
            ),
            false => (ElementType::S32, ArrayData::S32(v)),
        };
        self.c.constant(ArrayLiteral {
            shape: ArrayShape::new(t, &[n, 1]),
            data,
        })
    }

    /// One row index of no batch dimension for an array of `rows` rows (sometimes out of
    /// range): `s32[1]`, or a scalar `s32[]` when `scalar`.
    fn one_index(&mut self, rows: i64, scalar: bool) -> Result<InstrId, BuildError> {
        let v = self.rng.below(rows as usize + 2) as i32 - 1;
        let dims: &[i64] = if scalar { &[] } else { &[1] };
        self.c.constant(ArrayLiteral {
            shape: ArrayShape::new(ElementType::S32, dims),
            data: ArrayData::S32(vec![v]),
        })
    }

    /// An `s32[batch, n, 1]` constant of indices into dimension 1 of an array of `rows`
    /// rows there (some out of range), for gathers and scatters batched over dimension 0.
    fn batched_indices(&mut self, batch: i64, n: i64, rows: i64) -> Result<InstrId, BuildError> {
        let v: Vec<i32> = (0..batch * n)
            .map(|_| self.rng.below(rows as usize + 2) as i32 - 1)
            .collect();
        self.c.constant(ArrayLiteral {
            shape: ArrayShape::new(ElementType::S32, &[batch, n, 1]),
            data: ArrayData::S32(v),
        })
    }

    /// Rows of `x` picked by index: `gather` with `x`'s first dimension collapsed. One row
    /// is picked half the time by an index of no batch dimension (`s32[1]`, or a scalar
    /// index with the vector dimension implicit), the result then a row itself; from rank
    /// 2, a fifth of the time rows of dimension 1 per index of dimension 0 (batching
    /// dimensions).
    pub(super) fn gather_rows(&mut self, x: InstrId, dims: &[i64]) -> Result<InstrId, BuildError> {
        let n = *self.rng.pick(&[1, 2, 3, 5]);
        let rank = dims.len() as i64;
        if rank >= 2 && self.rng.chance(0.2) {
            // Batched over dimension 0, picking rows of dimension 1 (`take_along_axis`).
            let indices = self.batched_indices(dims[0], n, dims[1])?;
            let gd = GatherDims {
                offset_dims: (2..rank).collect(),
                collapsed_slice_dims: vec![1],
                start_index_map: vec![1],
                operand_batching_dims: vec![0],
                start_indices_batching_dims: vec![0],
                index_vector_dim: 2,
            };
            let mut sizes = dims.to_vec();
            (sizes[0], sizes[1]) = (1, 1);
            return self.c.gather(x, indices, gd, &sizes);
        }
        let (indices, gd) = if n == 1 && self.rng.chance(0.5) {
            let scalar = self.rng.chance(0.5);
            let offset_dims = (0..rank - 1).collect();
            (
                self.one_index(dims[0], scalar)?,
                GatherDims {
                    offset_dims,
                    collapsed_slice_dims: vec![0],
                    start_index_map: vec![0],
                    operand_batching_dims: vec![],
                    start_indices_batching_dims: vec![],
                    index_vector_dim: 0,
                },
            )
        } else {
            (
                self.row_indices(n, dims[0])?,
                GatherDims {
                    offset_dims: (1..rank).collect(),
                    collapsed_slice_dims: vec![0],
                    start_index_map: vec![0],
                    operand_batching_dims: vec![],
                    start_indices_batching_dims: vec![],
                    index_vector_dim: 1,
                },
            )
        };
        let mut sizes = dims.to_vec();
        sizes[0] = 1;
        self.c.gather(x, indices, gd, &sizes)
    }

    /// Rows added into `x` by index: `scatter` with an add. From rank 2, a fifth of the time
    /// batched over dimension 0 (batching dimensions); else half the time each
    /// update is a row of the last dimensions placed by an index into each of the first two
    /// (the compiler then cuts the operand along both); up to 9 updates, so that adding
    /// scatters are also cut into groups of updates.
    pub(super) fn scatter_rows(
        &mut self,
        x: InstrId,
        dims: &[i64],
        t: ElementType,
    ) -> Result<InstrId, BuildError> {
        let n = *self.rng.pick(&[1, 2, 3, 9]);
        let addressed: i64 = if dims.len() >= 2 && self.rng.chance(0.5) {
            2
        } else {
            1
        };
        if dims.len() >= 2 && self.rng.chance(0.2) {
            // Batched over dimension 0, adding rows into dimension 1 (`take_along_axis`'s
            // gradient).
            let rank = dims.len() as i64;
            let indices = self.batched_indices(dims[0], n, dims[1])?;
            let mut update_dims = vec![dims[0], n];
            update_dims.extend_from_slice(&dims[2..]);
            let updates = self.same_shape(x, &update_dims)?;
            let sd = ScatterDims {
                update_window_dims: (2..rank).collect(),
                inserted_window_dims: vec![1],
                scatter_dims_to_operand_dims: vec![1],
                input_batching_dims: vec![0],
                scatter_indices_batching_dims: vec![0],
                index_vector_dim: 2,
            };
            let name = format!("sum{}", self.values.len());
            let add = self.c.scalar_binary_computation(&name, BinaryOp::Add, t)?;
            return self.c.scatter(x, indices, updates, sd, add);
        }
        if n == 1 && addressed == 1 && self.rng.chance(0.5) {
            // One row by an index of no batch dimension: the updates are the row itself.
            let scalar = self.rng.chance(0.5);
            let indices = self.one_index(dims[0], scalar)?;
            let updates = self.same_shape(x, &dims[1..])?;
            let sd = ScatterDims {
                update_window_dims: (0..dims.len() as i64 - 1).collect(),
                inserted_window_dims: vec![0],
                scatter_dims_to_operand_dims: vec![0],
                input_batching_dims: vec![],
                scatter_indices_batching_dims: vec![],
                index_vector_dim: 0,
            };
            let name = format!("sum{}", self.values.len());
            let add = self.c.scalar_binary_computation(&name, BinaryOp::Add, t)?;
            return self.c.scatter(x, indices, updates, sd, add);
        }
        let indices = if addressed == 1 {
            self.row_indices(n, dims[0])?
        } else {
            let v: Vec<i32> = (0..n)
                .flat_map(|_| [0, 1])
                .map(|d| self.rng.below(dims[d] as usize + 2) as i32 - 1)
                .collect();
            self.c.constant(ArrayLiteral {
                shape: ArrayShape::new(ElementType::S32, &[n, 2]),
                data: ArrayData::S32(v),
            })?
        };
        let mut update_dims = vec![n];
        update_dims.extend_from_slice(&dims[addressed as usize..]);
        let updates = self.same_shape(x, &update_dims)?;
        let rank = dims.len() as i64;
        let sd = ScatterDims {
            update_window_dims: (1..=rank - addressed).collect(),
            inserted_window_dims: (0..addressed).collect(),
            scatter_dims_to_operand_dims: (0..addressed).collect(),
            input_batching_dims: vec![],
            scatter_indices_batching_dims: vec![],
            index_vector_dim: 1,
        };
        let name = format!("sum{}", self.values.len());
        let add = self.c.scalar_binary_computation(&name, BinaryOp::Add, t)?;
        self.c.scatter(x, indices, updates, sd, add)
    }

    /// A 2-D convolution of a new `[batch, h, w, c]` input by a new kernel: strides,
    /// padding, input and kernel dilation, feature groups at times.
    pub(super) fn convolution(&mut self, t: ElementType) -> Result<InstrId, BuildError> {
        let batch = *self.rng.pick(&[1, 2]);
        let c_in = *self.rng.pick(&[1, 2, 3, 4]);
        let groups = if self.rng.chance(0.3) { c_in } else { 1 };
        let c_out = groups * *self.rng.pick(&[1, 2, 3]);
        let mut spatial = Vec::new();
        let mut window = Vec::new();
        for _ in 0..2 {
            let size = *self.rng.pick(&[3, 4, 5, 7]);
            let k = *self.rng.pick(&[1, 2, 3]);
            let base_dilation = *self.rng.pick(&[1, 1, 2]);
            let window_dilation = *self.rng.pick(&[1, 1, 2]);
            let pad_low = self.rng.below(3) as i64;
            let pad_high = self.rng.below(3) as i64;
            let dim = WindowDim {
                pad_low,
                pad_high,
                window_dilation,
                base_dilation,
                ..WindowDim::of_size(k)
            };
            let padded = (size - 1) * base_dilation + 1 + pad_low + pad_high;
            if padded < dim.dilated_size() {
                return self.c.float_constant(t, 0.5);
            }
            spatial.push((size, k));
            window.push(WindowDim {
                stride: *self.rng.pick(&[1, 1, 2]),
                ..dim
            });
        }
        let input = self.parameter(ArrayShape::new(
            t,
            &[batch, spatial[0].0, spatial[1].0, c_in],
        ))?;
        let kernel = self.parameter(ArrayShape::new(
            t,
            &[spatial[0].1, spatial[1].1, c_in / groups, c_out],
        ))?;
        let dims = ConvDims::nhwc_hwio();
        let y = self.c.convolution(
            input,
            kernel,
            Window { dims: window },
            dims,
            groups,
            1,
            None,
        )?;
        self.c.tanh(y)
    }

    /// A windowed maximum or sum over `x`.
    pub(super) fn reduce_window(
        &mut self,
        x: InstrId,
        dims: &[i64],
        t: ElementType,
    ) -> Result<InstrId, BuildError> {
        let window: Vec<WindowDim> = dims
            .iter()
            .map(|&d| {
                let pad_low = self.rng.below(2) as i64;
                let pad_high = self.rng.below(2) as i64;
                let size = 1 + self.rng.below((d + pad_low + pad_high).min(3) as usize) as i64;
                WindowDim {
                    stride: 1 + self.rng.below(2) as i64,
                    pad_low,
                    pad_high,
                    ..WindowDim::of_size(size)
                }
            })
            .collect();
        let (op, init) = if self.rng.chance(0.5) {
            (BinaryOp::Maximum, -100.0)
        } else {
            (BinaryOp::Add, 0.0)
        };
        let init = self.scalar(t, init)?;
        let name = format!("w{}", self.values.len());
        let f = self.c.scalar_binary_computation(&name, op, t)?;
        let r = self
            .c
            .reduce_window(&[x], &[init], Window { dims: window }, f)?;
        if op == BinaryOp::Add && t != ElementType::S32 {
            self.c.tanh(r)
        } else {
            Ok(r)
        }
    }

    /// Integer bit operations, shifts (any amount: XLA's rules past the width) and division
    /// and remainder (XLA's rules for zero and overflow).
    pub(super) fn integer_bits(&mut self, x: InstrId, dims: &[i64]) -> Result<InstrId, BuildError> {
        let y = self.same_shape(x, dims)?;
        let op = *self.rng.pick(&[
            BinaryOp::And,
            BinaryOp::Or,
            BinaryOp::Xor,
            BinaryOp::ShiftLeft,
            BinaryOp::ShiftRightLogical,
            BinaryOp::ShiftRightArithmetic,
            BinaryOp::Divide,
            BinaryOp::Remainder,
        ]);
        let z = self
            .c
            .add_instruction(crate::op::Op::Binary(op), &[x, y], None)?;
        // Keep integers small for what follows.
        let bound = self.c.constant(ArrayLiteral::scalar_s32(8))?;
        let bound = self.c.broadcast(bound, dims, &[])?;
        self.c.remainder(z, bound)
    }

    /// Float division and transcendentals on operands kept in their domains.
    pub(super) fn float_math(
        &mut self,
        x: InstrId,
        dims: &[i64],
        t: ElementType,
    ) -> Result<InstrId, BuildError> {
        let one = self.scalar(t, 1.0)?;
        let one = self.c.broadcast(one, dims, &[])?;
        let positive = {
            let a = self.c.abs(x)?;
            self.c.add(a, one)?
        };
        match self.rng.below(5) {
            0 => {
                let y = self.same_shape(x, dims)?;
                let a = self.c.abs(y)?;
                let d = self.c.add(a, one)?;
                self.c.divide(x, d)
            }
            1 => {
                let s = self.c.tanh(x)?;
                self.c.exp(s)
            }
            2 => self.c.log(positive),
            3 => self.c.sqrt(positive),
            _ => {
                let y = self.same_shape(x, dims)?;
                self.c.atan2(x, y)
            }
        }
    }

    /// `x` mixed through 64-bit integer arithmetic: two 32-bit words read as one `u64`
    /// (which keeps the module's 64-bit integers exact), multiplied, shifted, xor-ed and
    /// added, its high word brought back as `s32`.
    pub(super) fn mix_64(&mut self, x: InstrId, dims: &[i64]) -> Result<InstrId, BuildError> {
        let rank = dims.len();
        let w = self.c.convert(x, ElementType::U32)?;
        let three = self.u32_splat(0x9E37_79B9, dims)?;
        let w2 = self.c.multiply(w, three)?;
        let mut column = dims.to_vec();
        column.push(1);
        let lo = self.c.reshape(w, &column)?;
        let hi = self.c.reshape(w2, &column)?;
        let pair = self.c.concatenate(&[lo, hi], rank as i64)?;
        let u = self
            .c
            .bitcast_convert(pair, Shape::array(ElementType::U64, dims))?;
        let u64_const = |g: &mut Self, v: u64| -> Result<InstrId, BuildError> {
            let c = g.c.constant(ArrayLiteral {
                shape: ArrayShape::new(ElementType::U64, &[]),
                data: ArrayData::U64(vec![v]),
            })?;
            g.c.broadcast(c, dims, &[])
        };
        let k = u64_const(self, 0xBF58_476D_1CE4_E5B9)?;
        let m = self.c.multiply(u, k)?;
        let by = 1 + self.rng.below(63) as u64;
        let amount = u64_const(self, by)?;
        let shifted = self.c.shift_right_logical(m, amount)?;
        let mixed = self.c.xor(m, shifted)?;
        let mixed = self.c.add(mixed, u)?;
        let thirty_two = u64_const(self, 32)?;
        let high = self.c.shift_right_logical(mixed, thirty_two)?;
        let high = self.c.convert(high, ElementType::U32)?;
        let sixteen = self.u32_splat(16, dims)?;
        let small = self.c.remainder(high, sixteen)?;
        self.c.convert(small, ElementType::S32)
    }

    /// Random bits of `dims` from a constant state, as `s32` in [0, 16).
    pub(super) fn random_bits(&mut self, dims: &[i64]) -> Result<InstrId, BuildError> {
        let algorithm = *self.rng.pick(&[
            RngAlgorithm::Default,
            RngAlgorithm::Philox,
            RngAlgorithm::ThreeFry,
        ]);
        let words: Vec<u64> = (0..2).map(|_| self.rng.next_u64()).collect();
        let state_shape = ArrayShape::new(ElementType::U64, &[2]);
        let state = self.c.constant(ArrayLiteral {
            shape: state_shape.clone(),
            data: ArrayData::U64(words),
        })?;
        let shape = Shape::Tuple(vec![
            Shape::Array(state_shape),
            Shape::array(ElementType::U32, dims),
        ]);
        let r = self.c.add_instruction(
            crate::op::Op::RngBitGenerator { algorithm },
            &[state],
            Some(shape),
        )?;
        let bits = self.c.get_tuple_element(r, 1)?;
        let sixteen = self.u32_splat(16, dims)?;
        let small = self.c.remainder(bits, sixteen)?;
        self.c.convert(small, ElementType::S32)
    }
}
