//! Steps per execution: the entry computation run N times inside one device execution (the
//! seed's `iterations_per_loop`, Keras `steps_per_execution`, the SavedModel CLI's
//! `--batch_per_step`), as a `Repeat` around it.
//!
//! - A parameter that `input_output_alias` names is **carried**: streamed in once before the
//!   loop and resident in tile memory; each iteration's aliased result is copied back into
//!   it, and it is streamed out once after the last iteration.
//! - A **fed** parameter comes through its host stream once per iteration (an infeed).
//! - Any other parameter is **constant**: streamed in once.
//! - A result that aliases no parameter is streamed out every iteration (an outfeed: the
//!   host keeps every value, or the last).

use super::{Arr, HostBuffer, Lowerer, Value};
use crate::CompileError;
use codegen::DType;
use runtime::Program;
use xla_ir::{Module, Shape};

/// A device loop: how many times the entry computation runs in one execution, and which
/// parameters are fed one value per iteration.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceLoop {
    /// Iterations per execution (at least 1).
    pub iterations: u64,
    /// Per entry parameter: whether it is fed one value per iteration (an infeed) rather
    /// than being carried (aliased) or constant.
    pub fed: Vec<bool>,
    /// Whether carried parameters stay on the device from one execution to the next: they
    /// are streamed in only when the host asks (the stream [`UPLOAD_STREAM`] carries a
    /// pred: true on the first execution, or to reset them), otherwise each execution
    /// continues from what the previous one left. Their final values are streamed out
    /// every execution.
    pub resident: bool,
}

/// The host-to-device stream that tells a resident device loop whether to stream its
/// carried parameters in (a `pred` scalar) this execution.
pub const UPLOAD_STREAM: &str = "upload_carried";

/// What a parameter is in a device loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParameterRole {
    /// Aliased by result leaf `output`: resident, updated every iteration.
    Carried {
        /// The result leaf (depth-first) holding the parameter's next value.
        output: usize,
    },
    /// One value per iteration through its host stream.
    Fed,
    /// The same value every iteration.
    Constant,
}

/// The leaf number (depth-first, as `Value::leaves` orders them) of the array at `index`
/// in `shape`, if there is one.
fn leaf_number(shape: &Shape, index: &[i64]) -> Option<usize> {
    let mut s = shape;
    let mut before = 0;
    for &i in index {
        let items = s.as_tuple()?;
        let i = usize::try_from(i).ok()?;
        let item = items.get(i)?;
        before += items[..i]
            .iter()
            .map(|x| x.leaf_arrays().len())
            .sum::<usize>();
        s = item;
    }
    s.as_array().map(|_| before)
}

impl DeviceLoop {
    /// Each entry parameter's role, checked against `module` (its `input_output_alias`).
    pub fn roles(&self, module: &Module) -> Result<Vec<ParameterRole>, CompileError> {
        let fail = |reason: String| CompileError::DeviceLoop {
            iterations: self.iterations,
            reason,
        };
        if self.iterations == 0 {
            return Err(fail("a device loop runs at least one iteration".into()));
        }
        let entry = module.entry_computation();
        let params = entry.parameter_shapes();
        if self.fed.len() != params.len() {
            return Err(fail(format!(
                "{} parameters are marked fed or not, the entry computation has {}",
                self.fed.len(),
                params.len()
            )));
        }
        let result = &entry.root_instr().shape;
        let mut roles: Vec<ParameterRole> = self
            .fed
            .iter()
            .map(|&f| {
                if f {
                    ParameterRole::Fed
                } else {
                    ParameterRole::Constant
                }
            })
            .collect();
        for (k, p) in params.iter().enumerate() {
            if p.as_array().is_none() {
                return Err(fail(format!(
                    "parameter {k} is {p}; a device loop takes array parameters only"
                )));
            }
        }
        for a in &module.input_output_alias {
            let k = a.parameter as usize;
            let output = match (a.parameter_index.is_empty(), leaf_number(result, &a.output)) {
                (true, Some(leaf)) => leaf,
                _ => {
                    return Err(fail(format!(
                        "input_output_alias {a}: a device loop carries whole array parameters into array outputs"
                    )));
                }
            };
            roles[k] = match roles[k] {
                ParameterRole::Fed => {
                    return Err(fail(format!(
                        "parameter {k} ({}) is aliased by output {{{}}}, so it is carried from one iteration to the next; it cannot also be fed one value per iteration",
                        entry.instr(entry.parameters()[k]).name,
                        a.output
                            .iter()
                            .map(|i| i.to_string())
                            .collect::<Vec<_>>()
                            .join(",")
                    )));
                }
                ParameterRole::Carried { .. } => {
                    return Err(fail(format!(
                        "parameter {k} is aliased by two outputs; one must hold its next value"
                    )));
                }
                ParameterRole::Constant => ParameterRole::Carried { output },
            };
        }
        Ok(roles)
    }
}

impl Lowerer<'_> {
    /// The entry computation run `lp.iterations` times in one `Repeat`: carried and constant
    /// parameters streamed in before it, fed ones inside it, stacked results streamed out
    /// inside it, carried results written back into their parameters and streamed out after
    /// it. Returns the input buffers (parameter order) and the output buffers (result
    /// order).
    pub(crate) fn entry_loop(
        &mut self,
        lp: &DeviceLoop,
    ) -> Result<(Vec<HostBuffer>, Vec<HostBuffer>), CompileError> {
        let module = self.module;
        let roles = lp.roles(module)?;
        let entry = module.entry_computation();
        let shapes = entry.parameter_shapes();
        // Streams are named in the order they are made (`in0`, `in1`, ...); the buffers are
        // put back in parameter order at the end.
        let mut made: Vec<HostBuffer> = Vec::new();
        let mut ranges: Vec<std::ops::Range<usize>> = vec![0..0; shapes.len()];
        let mut args: Vec<Option<Value>> = vec![None; shapes.len()];
        let mut stream_in = |l: &mut Self, k: usize, made: &mut Vec<HostBuffer>| {
            let first = made.len();
            args[k] = Some(l.stream_in(&format!("param{k}"), &shapes[k], made));
            ranges[k] = first..made.len();
        };
        // Resident: carried parameters are streamed in under an If the host decides, and
        // hold their values (zeros at load) from one execution to the next.
        let upload = lp.resident.then(|| {
            let pred = xla_ir::ArrayShape::new(xla_ir::ElementType::Pred, &[]);
            let flag = self.linear_arr(UPLOAD_STREAM, &pred);
            let s = self.b.stream(
                UPLOAD_STREAM,
                runtime::Direction::HostToDevice,
                DType::Pred,
                1,
            );
            self.emit(Program::StreamCopy {
                stream: s,
                tensor: flag.tensor,
            });
            self.begin();
            flag
        });
        for (k, role) in roles.iter().enumerate() {
            if matches!(role, ParameterRole::Carried { .. }) {
                stream_in(self, k, &mut made);
            }
        }
        if let Some(flag) = upload {
            let then = self.end();
            self.use_tensor(flag.tensor);
            self.emit(Program::If {
                predicate: flag.tensor,
                then: Box::new(then),
                otherwise: Box::new(Program::Sequence(Vec::new())),
            });
        }
        for (k, role) in roles.iter().enumerate() {
            if *role == ParameterRole::Constant {
                stream_in(self, k, &mut made);
            }
        }
        let start = self.step;
        self.begin();
        for (k, role) in roles.iter().enumerate() {
            if *role == ParameterRole::Fed {
                stream_in(self, k, &mut made);
            }
        }
        for (range, role) in ranges.iter().zip(&roles) {
            for b in &mut made[range.clone()] {
                b.per_iteration = *role == ParameterRole::Fed;
            }
        }
        let inputs: Vec<HostBuffer> = ranges
            .iter()
            .flat_map(|r| made[r.clone()].iter().cloned())
            .collect();
        let params: Vec<Value> = args
            .into_iter()
            .map(|a| a.expect("every parameter is streamed in"))
            .collect();
        if lp.resident {
            for (role, p) in roles.iter().zip(&params) {
                if let (ParameterRole::Carried { .. }, Value::Array(a)) = (role, p) {
                    // Written at load (zeros) and kept: never shares memory.
                    let bytes = self.b.tensor_info(a.tensor).elements * self.dtype(&a.shape).size();
                    self.b.tensor_mut(a.tensor).init = Some(vec![0; bytes]);
                    let life = &mut self.life[a.tensor.0 as usize];
                    life.pinned = true;
                    life.first = 0;
                }
            }
        }
        let result = self.computation(module.entry, params.clone())?;
        let leaves = result.leaves();
        let carried: Vec<(usize, Arr)> = roles
            .iter()
            .zip(&params)
            .filter_map(|(role, p)| match (role, p) {
                (ParameterRole::Carried { output }, Value::Array(a)) => Some((*output, a.clone())),
                _ => None,
            })
            .collect();
        let mut outputs: Vec<Option<HostBuffer>> = vec![None; leaves.len()];
        for (j, leaf) in leaves.iter().enumerate() {
            if !carried.iter().any(|(o, _)| *o == j) {
                let mut b = self.stream_out(&format!("out{j}"), leaf);
                b.per_iteration = true;
                outputs[j] = Some(b);
            }
        }
        let next = Value::Tuple(
            carried
                .iter()
                .map(|(o, _)| Value::Array(leaves[*o].clone()))
                .collect(),
        );
        let state = Value::Tuple(
            carried
                .iter()
                .map(|(_, a)| Value::Array(a.clone()))
                .collect(),
        );
        self.write_back(&next, &state);
        let body = self.end();
        for (_, a) in &carried {
            self.use_tensor(a.tensor);
        }
        self.emit(Program::Repeat {
            count: lp.iterations,
            body: Box::new(body),
        });
        self.extend_lives(start);
        for (o, a) in &carried {
            outputs[*o] = Some(self.stream_out(&format!("out{o}"), a));
        }
        Ok((
            inputs,
            outputs
                .into_iter()
                .map(|b| b.expect("every result leaf is streamed out"))
                .collect(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xla_ir::ElementType;

    #[test]
    fn leaf_numbers_count_the_arrays_before_an_index() {
        let a = Shape::array(ElementType::F32, &[2]);
        let s = Shape::Tuple(vec![
            a.clone(),
            Shape::Tuple(vec![a.clone(), a.clone()]),
            a.clone(),
        ]);
        assert_eq!(leaf_number(&s, &[0]), Some(0));
        assert_eq!(leaf_number(&s, &[1, 1]), Some(2));
        assert_eq!(leaf_number(&s, &[2]), Some(3));
        assert_eq!(leaf_number(&s, &[1]), None);
        assert_eq!(leaf_number(&s, &[3]), None);
        assert_eq!(leaf_number(&a, &[]), Some(0));
    }
}
