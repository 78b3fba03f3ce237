//! Control flow as device programs: `while` becomes RepeatWhileTrue with the predicate
//! computed on the device (Repeat when XLA recorded a known trip count), `conditional`
//! becomes If or Switch, and `call` a device function (an outlined function's compiled once
//! per placement and shared by its calls, its tensors live again in each later call's
//! steps: `Lowerer::also_live`). Loop state lives in carry tensors
//! the body's results are copied back into; tensors from outside a loop that it reads stay
//! live to its end (the body runs again).

use super::{Arr, Here, Lowerer, Scope, Value};
use crate::CompileError;
use codegen::DType;
use runtime::{FunctionId, Program, TensorId};
use std::collections::HashMap;
use xla_ir::ids::CompId;
use xla_ir::{Instruction, Module, Op};

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

    /// Lowers `call`: an outlined function (a call marked as one, called from more than one
    /// place, with no effects) is compiled once per placement and shared by every call
    /// (`shared_call`); any other call is a device function of its own, run where it is
    /// used (the seed inlines stateful functions).
    pub(crate) fn call(
        &mut self,
        instr: &Instruction,
        callee: CompId,
        args: Vec<Value>,
    ) -> Result<Value, CompileError> {
        if self.is_shared_call(instr, callee) {
            return self.shared_call(callee, args);
        }
        self.begin();
        let out = self.computation(callee, args)?;
        let body = self.end();
        let f = self.b.function(body);
        self.emit(Program::Call(f));
        Ok(out)
    }

    /// True when `instr`, a call of `callee`, calls a shared function ([`Lowerer::call`]).
    pub(crate) fn is_shared_call(&self, instr: &Instruction, callee: CompId) -> bool {
        crate::outline::is_function_call(instr)
            && self.function_calls.get(&callee).copied().unwrap_or(0) > 1
            && !crate::outline::computation_has_effects(self.module, callee)
    }

    /// Copies `src` into `dst` (an argument into a shared function's input): a deferred
    /// slice's rearrangement writing `dst` instead when `src` is one (see
    /// `movement::Deferred`), else a copy.
    fn copy_argument(&mut self, src: TensorId, dst: TensorId) {
        if let Some(d) = self.deferred.get_mut(&src) {
            // The slice's own tensor is never written: it is live only where it is copied
            // (counted there by the liveness report, as a copy's source), not from the
            // slice's step to the call.
            let life = &mut self.life[src.0 as usize];
            if !d.copied {
                life.first = self.step;
            }
            life.last = self.step;
            d.copied = true;
            let d = d.clone();
            let name = format!("{} -> {}", d.name, self.b.tensor_info(dst).name);
            self.rearrange_into(dst, d.sources, d.runs, Vec::new(), &name);
            return;
        }
        self.use_tensor(src);
        self.emit(Program::Copy { src, dst });
    }

    /// A call of a shared function: the arguments copied into the function's inputs (laid
    /// out as the first call's arguments were: `keep_input_layouts`), the call, and the
    /// results copied out (the next call overwrites them). The first call lowers the body
    /// where it is; a later call takes as many steps as the body did, and every tensor of
    /// the function is live again in those steps as it was in the first call's
    /// (`Lowerer::also_live`), so the memory planner lets other tensors use the function's
    /// memory between calls and the function's own tensors share memory as they did.
    fn shared_call(&mut self, callee: CompId, args: Vec<Value>) -> Result<Value, CompileError> {
        let key = (callee, self.tile_base, self.tiles);
        let name = self.module.computation(callee).name.clone();
        if let Some(f) = self.shared_functions.get(&key).cloned() {
            return Ok(self.call_again(&f, &name, &args));
        }
        let first = self.b.tensor_count();
        let params: Vec<Value> = args
            .iter()
            .enumerate()
            .map(|(i, a)| self.fresh_like(a, &format!("{name}.arg{i}"), self.step))
            .collect();
        for (a, p) in args.iter().zip(&params) {
            for (src, dst) in a.leaves().iter().zip(p.leaves()) {
                self.use_tensor(dst.tensor);
                self.copy_argument(src.tensor, dst.tensor);
            }
        }
        let body_start = self.step;
        self.begin();
        let result = self.computation(callee, params.clone())?;
        let body = self.end();
        let function = self.b.function(body);
        let f = SharedFunction {
            function,
            params,
            result,
            tensors: first..self.b.tensor_count(),
            body_start,
            body_steps: self.step - body_start,
        };
        self.shared_functions.insert(key, f.clone());
        self.emit(Program::Call(f.function));
        Ok(self.copy_out(&f, &name, true))
    }

    /// A later call of a shared function (see [`Lowerer::shared_call`]).
    fn call_again(&mut self, f: &SharedFunction, name: &str, args: &[Value]) -> Value {
        // The arguments into the inputs: each input is live from its copy to its last read
        // in the body, shifted to this call.
        let copied_at = self.step;
        for (a, p) in args.iter().zip(&f.params) {
            for (src, dst) in a.leaves().iter().zip(p.leaves()) {
                self.copy_argument(src.tensor, dst.tensor);
            }
        }
        let start = self.step;
        let shift = |s: u64| s - f.body_start + start;
        let end = start + f.body_steps.max(1) - 1;
        let results: Vec<usize> = f
            .result
            .leaves()
            .iter()
            .map(|a| a.tensor.0 as usize)
            .collect();
        let params: Vec<usize> = f
            .params
            .iter()
            .flat_map(Value::leaves)
            .map(|a| a.tensor.0 as usize)
            .collect();
        for t in f.tensors.clone() {
            let life = self.life[t];
            if life.pinned {
                continue;
            }
            let from = if params.contains(&t) {
                copied_at
            } else {
                shift(life.first.max(f.body_start)).min(end)
            };
            let mut to = shift(life.last.max(f.body_start)).min(end);
            if results.contains(&t) {
                // Read by the copies out, one step each after the call's steps.
                to = end + results.len() as u64;
            }
            self.also_live
                .entry(t)
                .or_default()
                .push((from, to.max(from)));
        }
        self.emit(Program::Call(f.function));
        // The call runs the body's steps: keep the step count (and the liveness report)
        // in step with them.
        for k in 1..f.body_steps {
            let body_name = self.step_names[(f.body_start + k) as usize].clone();
            self.step_names
                .push(format!("{body_name} (call of {name})"));
            self.step += 1;
        }
        self.copy_out(f, name, false)
    }

    /// The function's results copied into new tensors (the next call overwrites them). A
    /// later call's results are live to these copies through `also_live`.
    fn copy_out(&mut self, f: &SharedFunction, name: &str, first_call: bool) -> Value {
        let out = self.fresh_like(&f.result, &format!("{name}.result"), self.step);
        for (src, dst) in f.result.leaves().iter().zip(out.leaves()) {
            if first_call {
                self.use_tensor(src.tensor);
            }
            self.use_tensor(dst.tensor);
            self.emit(Program::Copy {
                src: src.tensor,
                dst: dst.tensor,
            });
        }
        out
    }
}

/// A function compiled once and shared by its calls.
#[derive(Debug, Clone)]
pub(crate) struct SharedFunction {
    function: FunctionId,
    /// Its inputs, which each call copies its arguments into.
    params: Vec<Value>,
    /// Its results, which each call copies out.
    result: Value,
    /// The tensors made while lowering it (inputs, temporaries, results).
    tensors: std::ops::Range<usize>,
    /// The step its body began at, in its first call.
    body_start: u64,
    /// Steps its body took.
    body_steps: u64,
}

/// How many calls marked as outlined functions call each computation, in all of `module`.
pub(crate) fn function_calls(module: &Module) -> HashMap<CompId, usize> {
    let mut calls = HashMap::new();
    for (_, c) in module.computations() {
        for (_, instr) in c.instructions() {
            if let Op::Call { to_apply } = instr.op
                && crate::outline::is_function_call(instr)
            {
                *calls.entry(to_apply).or_insert(0) += 1;
            }
        }
    }
    calls
}
