//! Control flow as device programs: `while` becomes RepeatWhileTrue with the predicate
//! computed on the device (Repeat when XLA recorded a known trip count), `conditional`
//! becomes If or Switch, and `call` a device function. Loop state lives in carry tensors
//! the body's results are copied back into; tensors from outside a loop that it reads stay
//! live to its end (the body runs again).

use super::{Arr, Here, Lowerer, Scope, Value};
use crate::CompileError;
use codegen::DType;
use runtime::{Program, TensorId};
use xla_ir::ids::CompId;

/// The trip count XLA recorded in a while's backend config, if any.
fn known_trip_count(backend_config: Option<&str>) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_str(backend_config?).ok()?;
    let n = &v.get("known_trip_count")?.get("n")?;
    match n {
        serde_json::Value::String(s) => s.parse().ok(),
        serde_json::Value::Number(x) => x.as_u64(),
        _ => None,
    }
}

impl Lowerer<'_> {
    /// Copies `from`'s leaves into `into`'s, safely when some of `from` are `into` tensors
    /// (a body that swaps state): those go through temporaries first.
    pub(super) fn write_back(&mut self, from: &Value, into: &Value) {
        let (src, dst) = (from.leaves(), into.leaves());
        let carried: Vec<TensorId> = dst.iter().map(|a| a.tensor).collect();
        let mut staged: Vec<Arr> = Vec::new();
        for s in &src {
            if carried.contains(&s.tensor) {
                let pieces = self.mapping(s.tensor).to_vec();
                let t = self.arr_mapped("loop.swap", &s.shape, pieces);
                self.use_tensor(s.tensor);
                self.emit(Program::Copy {
                    src: s.tensor,
                    dst: t.tensor,
                });
                staged.push(t);
            } else {
                staged.push(s.clone());
            }
        }
        for (s, (d, orig)) in staged.iter().zip(dst.iter().zip(&src)) {
            if orig.tensor == d.tensor {
                continue;
            }
            self.use_tensor(s.tensor);
            self.use_tensor(d.tensor);
            self.emit(Program::Copy {
                src: s.tensor,
                dst: d.tensor,
            });
        }
    }

    /// Keeps tensors defined before step `start` and read since then live until now.
    pub(super) fn extend_lives(&mut self, start: u64) {
        let now = self.step;
        for l in &mut self.life {
            if l.first < start && l.last >= start {
                l.last = l.last.max(now);
            }
        }
    }

    /// Lowers `while`.
    pub(crate) fn while_loop(
        &mut self,
        here: Here,
        condition: CompId,
        body: CompId,
        state: Value,
    ) -> Result<Value, CompileError> {
        let name = &here.instr.name;
        let carry = self.fresh_like(&state, &format!("{name}.state"), self.step);
        self.write_back(&state, &carry);
        let start = self.step;
        let trips = known_trip_count(here.instr.backend_config.as_deref());
        let program = match trips {
            Some(count) => {
                self.begin();
                let out = self.computation(body, vec![carry.clone()])?;
                self.write_back(&out, &carry);
                let body = self.end();
                Program::Repeat {
                    count,
                    body: Box::new(body),
                }
            }
            None => {
                self.begin();
                let p = self.computation(condition, vec![carry.clone()])?;
                let cond = self.end();
                let Value::Array(p) = p else {
                    return Err(here.unsupported("a loop condition that is not a pred scalar"));
                };
                self.begin();
                let out = self.computation(body, vec![carry.clone()])?;
                self.write_back(&out, &carry);
                let body = self.end();
                self.use_tensor(p.tensor);
                Program::RepeatWhileTrue {
                    condition: Box::new(cond),
                    predicate: p.tensor,
                    body: Box::new(body),
                }
            }
        };
        for a in carry.leaves() {
            self.use_tensor(a.tensor);
        }
        self.emit(program);
        self.extend_lives(start);
        Ok(carry)
    }

    /// Lowers `conditional`: If on a pred, Switch on an s32 index (out of range: the last
    /// branch, as XLA does).
    pub(crate) fn conditional(
        &mut self,
        scope: &mut Scope,
        here: Here,
        branches: &[CompId],
    ) -> Result<Value, CompileError> {
        let ops: Vec<_> = here.instr.operands.to_vec();
        let selector = self.array(scope, ops[0])?;
        let mut args = Vec::new();
        for &o in &ops[1..] {
            args.push(self.value(scope, o)?);
        }
        let start = self.step;
        let mut programs = Vec::new();
        let mut result: Option<Value> = None;
        for (i, &br) in branches.iter().enumerate() {
            self.begin();
            let out = self.computation(br, vec![args[i].clone()])?;
            let into = match &result {
                Some(r) => r.clone(),
                None => {
                    let r = self.fresh_like(&out, &format!("{}.result", here.instr.name), start);
                    result = Some(r.clone());
                    r
                }
            };
            self.write_back(&out, &into);
            programs.push(self.end());
        }
        let result = result.ok_or_else(|| here.unsupported("a conditional with no branches"))?;
        self.use_tensor(selector.tensor);
        let program = if self.dtype(&selector.shape) == DType::Pred {
            let mut it = programs.into_iter();
            let then = it.next().expect("two branches");
            let otherwise = it.next().unwrap_or(Program::Sequence(vec![]));
            // XLA's pred conditional runs branch 0 when true.
            Program::If {
                predicate: selector.tensor,
                then: Box::new(then),
                otherwise: Box::new(otherwise),
            }
        } else {
            let default = programs.pop().expect("at least one branch");
            let mut cases = programs;
            cases.push(default.clone());
            Program::Switch {
                index: selector.tensor,
                cases,
                default: Box::new(default),
            }
        };
        self.emit(program);
        self.extend_lives(start);
        Ok(result)
    }

    /// Tensors shaped and mapped like `v`'s leaves, live from step `from`.
    fn fresh_like(&mut self, v: &Value, name: &str, from: u64) -> Value {
        match v {
            Value::Array(a) => {
                let pieces = self.mapping(a.tensor).to_vec();
                let c = self.arr_mapped(name, &a.shape, pieces);
                self.life[c.tensor.0 as usize].first = from;
                Value::Array(c)
            }
            Value::Tuple(items) => Value::Tuple(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, x)| self.fresh_like(x, &format!("{name}.{i}"), from))
                    .collect(),
            ),
            Value::Token => Value::Token,
        }
    }

    /// Lowers `call` as a device function run where it is used.
    pub(crate) fn call(&mut self, callee: CompId, args: Vec<Value>) -> Result<Value, CompileError> {
        self.begin();
        let out = self.computation(callee, args)?;
        let body = self.end();
        let f = self.b.function(body);
        self.emit(Program::Call(f));
        Ok(out)
    }
}
