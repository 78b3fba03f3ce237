//! A post-LN transformer encoder stack built with the HLO builder, the same layer as the
//! corpus's `bench_encoder_stack12_fwd` (4-head self-attention, GELU feed-forward, two
//! layer norms), with any number of layers: what `ipuxla bench --scaling` and the
//! benchmarks use to measure how compile time grows with module size. With a batch and f16
//! it is also the BERT-base layer of the builder's bench cases ([`crate::bench_modules`]).

use xla_ir::attributes::{DotDims, SliceDim};
use xla_ir::builder::{BuildError, ComputationBuilder, ModuleBuilder};
use xla_ir::literal::ArrayLiteral;
use xla_ir::{BinaryOp, CompId, ElementType, InstrId, Module, Shape};

/// The sizes of the stack.
#[derive(Debug, Clone, Copy)]
pub struct EncoderSizes {
    /// Tokens.
    pub seq: i64,
    /// Model width.
    pub d: i64,
    /// Attention heads (`d` divisible by it).
    pub heads: i64,
    /// Feed-forward width.
    pub ffn: i64,
    /// Sequences: the dense layers see `batch * seq` rows, attention runs per sequence.
    /// With 1 the module has no batch dimension at all (the corpus bench's form).
    pub batch: i64,
    /// The element type of every value (f32 or f16).
    pub element_type: ElementType,
}

impl Default for EncoderSizes {
    /// The corpus bench's sizes: seq 128, d 256, 4 heads, FFN 1024, one sequence, f32.
    fn default() -> EncoderSizes {
        EncoderSizes {
            seq: 128,
            d: 256,
            heads: 4,
            ffn: 1024,
            batch: 1,
            element_type: ElementType::F32,
        }
    }
}

impl EncoderSizes {
    /// BERT-base's layer: sequence 384, hidden 768, 12 heads, FFN 3072, batch 8, in f16.
    pub fn bert_base_f16() -> EncoderSizes {
        EncoderSizes {
            seq: 384,
            d: 768,
            heads: 12,
            ffn: 3072,
            batch: 8,
            element_type: ElementType::F16,
        }
    }

    /// Rows the dense layers see.
    fn rows(&self) -> i64 {
        self.batch * self.seq
    }

    /// The leading dimensions of attention's arrays: the batch, or none for one sequence.
    fn lead(&self) -> Vec<i64> {
        if self.batch == 1 {
            vec![]
        } else {
            vec![self.batch]
        }
    }

    /// `[seq, heads, dh]` to `[heads, seq, dh]` and back, after the lead dimensions.
    fn swap_heads(&self) -> Vec<i64> {
        let n = self.lead().len() as i64;
        (0..n).chain([n + 1, n, n + 2]).collect()
    }
}

/// Builder state for one stack.
struct Stack<'b, 'm> {
    c: &'b mut ComputationBuilder<'m>,
    s: EncoderSizes,
    add: CompId,
    max: CompId,
    params: u64,
}

impl Stack<'_, '_> {
    fn param(&mut self, dims: &[i64], name: &str) -> Result<InstrId, BuildError> {
        self.params += 1;
        let shape = Shape::array(self.s.element_type, dims);
        self.c.parameter(self.params - 1, shape, name)
    }

    fn scalar(&mut self, v: f32) -> Result<InstrId, BuildError> {
        self.c.constant(scalar(self.s.element_type, v))
    }

    /// `x` (of `dims`) op a scalar.
    fn with_scalar(
        &mut self,
        x: InstrId,
        dims: &[i64],
        v: f32,
        op: BinaryOp,
    ) -> Result<InstrId, BuildError> {
        let k = self.scalar(v)?;
        let k = self.c.broadcast(k, dims, &[])?;
        self.c
            .add_instruction(xla_ir::Op::Binary(op), &[x, k], None)
    }

    /// `x [rows, n] + b [n]`.
    fn bias(&mut self, x: InstrId, b: InstrId, n: i64) -> Result<InstrId, BuildError> {
        let b = self.c.broadcast(b, &[self.s.rows(), n], &[1])?;
        self.c.add(x, b)
    }

    /// Reduces the last dimension of `x` [rows..., n] with `op`, broadcast back.
    fn row_reduce(
        &mut self,
        x: InstrId,
        dims: &[i64],
        op: CompId,
        init: f32,
    ) -> Result<InstrId, BuildError> {
        let last = dims.len() as i64 - 1;
        let init = self.scalar(init)?;
        let r = self.c.reduce(&[x], &[init], &[last], op)?;
        let keep: Vec<i64> = (0..last).collect();
        self.c.broadcast(r, dims, &keep)
    }

    fn layer_norm(&mut self, x: InstrId, g: InstrId, b: InstrId) -> Result<InstrId, BuildError> {
        let dims = [self.s.rows(), self.s.d];
        let inv = 1.0 / self.s.d as f32;
        let add = self.add;
        let sum = self.row_reduce(x, &dims, add, 0.0)?;
        let mean = self.with_scalar(sum, &dims, inv, BinaryOp::Multiply)?;
        let centred = self.c.subtract(x, mean)?;
        let sq = self.c.multiply(centred, centred)?;
        let sum_sq = self.row_reduce(sq, &dims, add, 0.0)?;
        let var = self.with_scalar(sum_sq, &dims, inv, BinaryOp::Multiply)?;
        let var = self.with_scalar(var, &dims, 1e-5, BinaryOp::Add)?;
        let r = self.c.rsqrt(var)?;
        let y = self.c.multiply(centred, r)?;
        let g = self.c.broadcast(g, &dims, &[1])?;
        let y = self.c.multiply(y, g)?;
        let b = self.c.broadcast(b, &dims, &[1])?;
        self.c.add(y, b)
    }

    /// `x [rows, d]` as heads `[lead.., heads, seq, d / heads]`.
    fn heads(&mut self, x: InstrId) -> Result<InstrId, BuildError> {
        let EncoderSizes { seq, d, heads, .. } = self.s;
        let dims = [self.s.lead(), vec![seq, heads, d / heads]].concat();
        let x = self.c.reshape(x, &dims)?;
        self.c.transpose(x, &self.s.swap_heads())
    }

    fn gelu(&mut self, x: InstrId, dims: &[i64]) -> Result<InstrId, BuildError> {
        // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        let x2 = self.c.multiply(x, x)?;
        let x3 = self.c.multiply(x2, x)?;
        let t = self.with_scalar(x3, dims, 0.044715, BinaryOp::Multiply)?;
        let t = self.c.add(x, t)?;
        let t = self.with_scalar(
            t,
            dims,
            (2.0 / std::f32::consts::PI).sqrt(),
            BinaryOp::Multiply,
        )?;
        let t = self.c.tanh(t)?;
        let t = self.with_scalar(t, dims, 1.0, BinaryOp::Add)?;
        let t = self.c.multiply(x, t)?;
        self.with_scalar(t, dims, 0.5, BinaryOp::Multiply)
    }

    fn layer(&mut self, x: InstrId, i: usize) -> Result<InstrId, BuildError> {
        let EncoderSizes {
            seq, d, heads, ffn, ..
        } = self.s;
        let (rows, lead) = (self.s.rows(), self.s.lead());
        let dh = d / heads;
        let wqkv = self.param(&[d, 3 * d], &format!("wqkv{i}"))?;
        let bqkv = self.param(&[3 * d], &format!("bqkv{i}"))?;
        let wo = self.param(&[d, d], &format!("wo{i}"))?;
        let bo = self.param(&[d], &format!("bo{i}"))?;
        let (g1, b1) = (
            self.param(&[d], &format!("g1_{i}"))?,
            self.param(&[d], &format!("b1_{i}"))?,
        );
        let w1 = self.param(&[d, ffn], &format!("w1_{i}"))?;
        let c1 = self.param(&[ffn], &format!("c1_{i}"))?;
        let w2 = self.param(&[ffn, d], &format!("w2_{i}"))?;
        let c2 = self.param(&[d], &format!("c2_{i}"))?;
        let (g2, b2) = (
            self.param(&[d], &format!("g2_{i}"))?,
            self.param(&[d], &format!("b2_{i}"))?,
        );
        let qkv = self.c.dot(x, wqkv)?;
        let qkv = self.bias(qkv, bqkv, 3 * d)?;
        let mut parts = Vec::new();
        for p in 0..3 {
            let s = self.c.slice(
                qkv,
                &[
                    SliceDim {
                        start: 0,
                        limit: rows,
                        stride: 1,
                    },
                    SliceDim {
                        start: p * d,
                        limit: (p + 1) * d,
                        stride: 1,
                    },
                ],
            )?;
            parts.push(self.heads(s)?);
        }
        let n = lead.len() as i64;
        let batch = |l: i64, r: i64| DotDims {
            lhs_batch: (0..=n).collect(),
            rhs_batch: (0..=n).collect(),
            lhs_contracting: vec![n + l],
            rhs_contracting: vec![n + r],
        };
        let scores = self.c.dot_general(parts[0], parts[1], batch(2, 2), None)?;
        let sdims = [lead.clone(), vec![heads, seq, seq]].concat();
        let scores =
            self.with_scalar(scores, &sdims, 1.0 / (dh as f32).sqrt(), BinaryOp::Multiply)?;
        let max = self.max;
        let m = self.row_reduce(scores, &sdims, max, f32::NEG_INFINITY)?;
        let e = self.c.subtract(scores, m)?;
        let e = self.c.exp(e)?;
        let add = self.add;
        let z = self.row_reduce(e, &sdims, add, 0.0)?;
        let att = self.c.divide(e, z)?;
        let o = self.c.dot_general(att, parts[2], batch(2, 1), None)?;
        let o = self.c.transpose(o, &self.s.swap_heads())?;
        let o = self.c.reshape(o, &[rows, d])?;
        let o = self.c.dot(o, wo)?;
        let o = self.bias(o, bo, d)?;
        let x = self.c.add(x, o)?;
        let x = self.layer_norm(x, g1, b1)?;
        let f = self.c.dot(x, w1)?;
        let f = self.bias(f, c1, ffn)?;
        let f = self.gelu(f, &[rows, ffn])?;
        let f = self.c.dot(f, w2)?;
        let f = self.bias(f, c2, d)?;
        let x2 = self.c.add(x, f)?;
        self.layer_norm(x2, g2, b2)
    }
}

/// An encoder stack of `layers` layers: parameter 0 is the input `[seq, d]`, then twelve
/// weights per layer; the result is the last layer's output.
pub fn encoder_stack(layers: usize, sizes: EncoderSizes) -> Result<Module, BuildError> {
    encoder_stages(layers, sizes, 1)
}

/// A scalar of `t` (f32 or f16; others take the f32).
fn scalar(t: ElementType, v: f32) -> ArrayLiteral {
    match t {
        ElementType::F16 => ArrayLiteral {
            shape: xla_ir::ArrayShape::new(t, &[]),
            data: xla_ir::literal::ArrayData::F16(vec![half::f16::from_f32(v)]),
        },
        _ => ArrayLiteral::scalar_f32(v),
    }
}

/// [`encoder_stack`] as a pipeline of `stages` stages: layer `i` (its weights and ops)
/// carries `frontend_attributes={ipu_stage="i * stages / layers"}`.
pub fn encoder_stages(
    layers: usize,
    sizes: EncoderSizes,
    stages: usize,
) -> Result<Module, BuildError> {
    let mut m = ModuleBuilder::new(format!("encoder_stack{layers}"));
    let mut c = m.computation("main");
    let t = sizes.element_type;
    let add = c.scalar_binary_computation("add", BinaryOp::Add, t)?;
    let max = c.scalar_binary_computation("max", BinaryOp::Maximum, t)?;
    let mut stack = Stack {
        c: &mut c,
        s: sizes,
        add,
        max,
        params: 0,
    };
    let mut x = stack.param(&[sizes.rows(), sizes.d], "x")?;
    let mut params = stack.params;
    for i in 0..layers {
        let layer = |c: &mut ComputationBuilder<'_>| {
            let mut stack = Stack {
                c,
                s: sizes,
                add,
                max,
                params,
            };
            let y = stack.layer(x, i)?;
            Ok::<_, BuildError>((y, stack.params))
        };
        (x, params) = if stages > 1 {
            let stage = (i * stages / layers.max(1)).to_string();
            c.with_frontend_attribute("ipu_stage", stage, layer)?
        } else {
            layer(&mut c)?
        };
    }
    let entry = c.finish(x)?;
    m.finish(entry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layer_has_the_bench_layers_parameters_and_ops() {
        let m = encoder_stack(2, EncoderSizes::default()).unwrap();
        let entry = m.entry_computation();
        assert_eq!(entry.parameters().len(), 1 + 2 * 12);
        let dots = entry
            .order()
            .iter()
            .filter(|&&i| matches!(entry.instr(i).op, xla_ir::Op::Dot { .. }))
            .count();
        assert_eq!(dots, 2 * 6);
        assert_eq!(
            entry.root_instr().shape.as_array().unwrap().dims[..],
            [128, 256]
        );
    }
}
