//! A model's graph (Keras's functional API): the input, layer applications and merges, each
//! a node whose output is a [`Tensor`]. A layer applied twice ([`Model::reuse`]) shares its
//! weights; `Sequential` models are the chain of [`Model::add`].

use super::{Model, ModelError, NamedLayer, Weight};
use crate::layers::Layer;

/// A value of a model's graph: the input or a node's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tensor(pub(super) usize);

/// What a node computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NodeOp {
    /// The model's input.
    Input,
    /// Layer `.0` of the model applied to the node's one input.
    Layer(usize),
    /// The sum of two inputs of the same shape.
    Add,
    /// The inputs joined along a dimension (counting the batch as 0).
    Concatenate(i64),
}

/// One node: its op, its inputs and its output's dimensions (batch 1).
#[derive(Debug, Clone)]
pub(super) struct Node {
    pub op: NodeOp,
    pub inputs: Vec<Tensor>,
    pub dims: Vec<i64>,
}

impl Model {
    /// The model's input.
    pub fn input(&self) -> Tensor {
        Tensor(0)
    }

    /// The model's output (the last node added, unless [`Model::set_output`] chose one).
    pub fn output(&self) -> Tensor {
        self.output
    }

    /// Makes `t` the model's output.
    pub fn set_output(&mut self, t: Tensor) -> Result<(), ModelError> {
        self.check_tensor(t)?;
        self.output = t;
        self.changed();
        Ok(())
    }

    fn check_tensor(&self, t: Tensor) -> Result<(), ModelError> {
        if t.0 >= self.nodes.len() {
            return Err(ModelError::Usage(format!(
                "tensor {} is not a value of model {}",
                t.0, self.name
            )));
        }
        Ok(())
    }

    /// Applies `layer` (a new layer, named after its kind) to `x`: its output.
    pub fn apply(&mut self, layer: impl Layer + 'static, x: Tensor) -> Result<Tensor, ModelError> {
        self.check_tensor(x)?;
        let kind = layer.kind();
        let same = self
            .layers
            .iter()
            .filter(|l| l.layer.kind() == kind)
            .count();
        let name = if same == 0 {
            kind.to_string()
        } else {
            format!("{kind}_{same}")
        };
        let (specs, dims) = layer.build(&name, &self.nodes[x.0].dims)?;
        let start = self.weights.len();
        for s in specs {
            let value = s.init.sample(&s.dims, &mut self.rng);
            self.weights.push(Weight {
                name: format!("{name}/{}", s.name),
                value,
                trainable: s.trainable,
            });
        }
        let end = self.weights.len();
        self.layers.push(NamedLayer {
            name,
            layer: Box::new(layer),
            weights: start..end,
        });
        Ok(self.push(NodeOp::Layer(self.layers.len() - 1), vec![x], dims))
    }

    /// Applies the layer that produced `applied` again, to `x`, with the same weights; `x`
    /// must be shaped so the layer's weights fit it.
    pub fn reuse(&mut self, applied: Tensor, x: Tensor) -> Result<Tensor, ModelError> {
        self.check_tensor(applied)?;
        self.check_tensor(x)?;
        let NodeOp::Layer(l) = self.nodes[applied.0].op else {
            return Err(ModelError::Usage(
                "only a layer's output names a layer to reuse".into(),
            ));
        };
        let layer = &self.layers[l];
        let (specs, dims) = layer.layer.build(&layer.name, &self.nodes[x.0].dims)?;
        for (s, w) in specs.iter().zip(&self.weights[layer.weights.clone()]) {
            if s.dims[..] != w.value.shape.dims[..] {
                return Err(ModelError::Usage(format!(
                    "layer {} applied again to {:?}: it would need {} of {:?}, its weight is {}",
                    layer.name, self.nodes[x.0].dims, s.name, s.dims, w.value.shape
                )));
            }
        }
        Ok(self.push(NodeOp::Layer(l), vec![x], dims))
    }

    /// `a + b` (Keras's `Add`), of the same shape.
    pub fn add_tensors(&mut self, a: Tensor, b: Tensor) -> Result<Tensor, ModelError> {
        self.check_tensor(a)?;
        self.check_tensor(b)?;
        let (da, db) = (&self.nodes[a.0].dims, &self.nodes[b.0].dims);
        if da != db {
            return Err(ModelError::Usage(format!(
                "add: the tensors are {da:?} and {db:?}; they must have the same shape"
            )));
        }
        let dims = da.clone();
        Ok(self.push(NodeOp::Add, vec![a, b], dims))
    }

    /// `xs` joined along `axis` (Keras's `Concatenate`; -1 is the last dimension, the batch
    /// is dimension 0 and cannot be joined along).
    pub fn concatenate(&mut self, xs: &[Tensor], axis: i64) -> Result<Tensor, ModelError> {
        for &x in xs {
            self.check_tensor(x)?;
        }
        let Some(first) = xs.first() else {
            return Err(ModelError::Usage(
                "concatenate needs at least one tensor".into(),
            ));
        };
        let rank = self.nodes[first.0].dims.len() as i64;
        let axis = if axis < 0 { axis + rank } else { axis };
        if axis < 1 || axis >= rank {
            return Err(ModelError::Usage(format!(
                "concatenate: axis {axis} is not a dimension of {:?} other than the batch",
                self.nodes[first.0].dims
            )));
        }
        let mut dims = self.nodes[first.0].dims.clone();
        dims[axis as usize] = 0;
        for &x in xs {
            let d = &self.nodes[x.0].dims;
            let fits = d.len() as i64 == rank
                && d.iter()
                    .zip(&self.nodes[first.0].dims)
                    .enumerate()
                    .all(|(k, (a, b))| k as i64 == axis || a == b);
            if !fits {
                return Err(ModelError::Usage(format!(
                    "concatenate along {axis}: {d:?} does not match {:?}",
                    self.nodes[first.0].dims
                )));
            }
            dims[axis as usize] += d[axis as usize];
        }
        Ok(self.push(NodeOp::Concatenate(axis), xs.to_vec(), dims))
    }

    fn push(&mut self, op: NodeOp, inputs: Vec<Tensor>, dims: Vec<i64>) -> Tensor {
        self.nodes.push(Node { op, inputs, dims });
        self.output = Tensor(self.nodes.len() - 1);
        self.changed();
        self.output
    }

    /// Applies `layer` to the model's output and makes the result the output (`Sequential`).
    pub fn add(&mut self, layer: impl Layer + 'static) -> Result<&mut Model, ModelError> {
        let x = self.output;
        self.apply(layer, x)?;
        Ok(self)
    }

    /// Each node's name: its layer's, `add`, `concatenate`.
    pub(super) fn node_name(&self, k: usize) -> String {
        match self.nodes[k].op {
            NodeOp::Input => "input".into(),
            NodeOp::Layer(l) => self.layers[l].name.clone(),
            NodeOp::Add => format!("add (node {k})"),
            NodeOp::Concatenate(_) => format!("concatenate (node {k})"),
        }
    }
}
