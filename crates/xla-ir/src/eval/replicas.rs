//! Replicas in lockstep: one evaluator per replica, each on its own thread, meeting at
//! every collective. The k-th collective a replica reaches is round k: each replica leaves
//! its value there, waits until every replica has, and computes its own result from all of
//! them and its replica group. A replica that fails stops the others at their next
//! collective instead of leaving them waiting.

use super::array::{
    concat, copy_element, count, for_each_index, from_nums, linear, scalar_at, strides,
};
use super::calls::SimpleScalarFn;
use super::element::Num;
use super::{EvalError, Evaluator, OpError, OpResult, array};
use crate::ElementType;
use crate::collective::ReplicaGroups;
use crate::ids::CompId;
use crate::literal::{ArrayData, ArrayLiteral};
use crate::op::BinaryOp;
use crate::{ArrayShape, Literal};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long a replica waits at a collective for the others before giving up.
const WAIT_LIMIT: Duration = Duration::from_secs(120);

/// Where replicas leave their values at collectives.
pub(crate) struct Rendezvous {
    replicas: usize,
    rounds: Mutex<HashMap<u64, Round>>,
    arrived: Condvar,
    failed: AtomicBool,
    /// By replica: it has finished its program (so it reaches no more collectives).
    finished: Vec<AtomicBool>,
}

struct Round {
    values: Vec<Option<Literal>>,
    taken: usize,
}

impl Rendezvous {
    pub(crate) fn new(replicas: usize) -> Rendezvous {
        Rendezvous {
            replicas,
            rounds: Mutex::new(HashMap::new()),
            arrived: Condvar::new(),
            failed: AtomicBool::new(false),
            finished: (0..replicas).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// Marks replica `r` finished: replicas waiting for it at a collective stop.
    pub(crate) fn finish(&self, r: usize) {
        self.finished[r].store(true, Ordering::SeqCst);
        self.arrived.notify_all();
    }

    /// Marks the run failed: replicas waiting at a collective stop.
    pub(crate) fn fail(&self) {
        self.failed.store(true, Ordering::SeqCst);
        self.arrived.notify_all();
    }

    /// Leaves `value` as replica `me`'s part of round `round` and returns every replica's.
    fn exchange(&self, round: u64, me: usize, value: Literal) -> Result<Vec<Literal>, String> {
        let poisoned = |_| "a replica panicked at a collective".to_string();
        let mut rounds = self.rounds.lock().map_err(poisoned)?;
        let entry = rounds.entry(round).or_insert_with(|| Round {
            values: vec![None; self.replicas],
            taken: 0,
        });
        entry.values[me] = Some(value);
        self.arrived.notify_all();
        let start = Instant::now();
        loop {
            let r = rounds
                .get(&round)
                .expect("a round lives until every replica took it");
            if r.values.iter().all(Option::is_some) {
                break;
            }
            if self.failed.load(Ordering::SeqCst) {
                return Err("another replica failed before reaching this collective".into());
            }
            if let Some(gone) = (0..self.replicas)
                .find(|&x| r.values[x].is_none() && self.finished[x].load(Ordering::SeqCst))
            {
                return Err(format!(
                    "replica {gone} finished its program without reaching this collective (collective {} of replica {me}): the replicas took different paths",
                    round + 1
                ));
            }
            if start.elapsed() > WAIT_LIMIT {
                return Err(format!(
                    "the other replicas did not reach this collective within {} s (their programs took different paths)",
                    WAIT_LIMIT.as_secs()
                ));
            }
            rounds = self
                .arrived
                .wait_timeout(rounds, Duration::from_millis(50))
                .map_err(|_| "a replica panicked at a collective".to_string())?
                .0;
        }
        let r = rounds.get_mut(&round).expect("checked above");
        let all: Vec<Literal> = r
            .values
            .iter()
            .map(|v| v.clone().expect("every replica left a value"))
            .collect();
        r.taken += 1;
        if r.taken == self.replicas {
            rounds.remove(&round);
        }
        Ok(all)
    }
}

/// One replica's place among the others.
pub(crate) struct ReplicaContext<'r> {
    pub id: usize,
    pub rendezvous: &'r Rendezvous,
    pub round: std::cell::Cell<u64>,
}

impl Evaluator<'_> {
    fn replicas(&self) -> usize {
        self.replica.as_ref().map_or(1, |r| r.rendezvous.replicas)
    }

    fn replica_id(&self) -> usize {
        self.replica.as_ref().map_or(0, |r| r.id)
    }

    /// `replica-id()` (`replica`) or `partition-id()`: with the devices numbered
    /// `replica x num_partitions + partition`, this device's replica or partition.
    pub(super) fn device_id(&self, replica: bool) -> OpResult {
        let partitions = self.module.num_partitions.unwrap_or(1).max(1) as usize;
        let d = self.replica_id();
        let id = if replica {
            d / partitions
        } else {
            d % partitions
        };
        Ok(Literal::Array(ArrayLiteral {
            shape: ArrayShape::new(crate::ElementType::U32, &[]),
            data: ArrayData::U32(vec![id as u32]),
        }))
    }

    /// Every replica's `value` at this collective (a lone evaluator is replica 0 of 1).
    fn meet(&self, value: Literal) -> Result<Vec<Literal>, OpError> {
        match &self.replica {
            None => Ok(vec![value]),
            Some(r) => {
                let round = r.round.get();
                r.round.set(round + 1);
                Ok(r.rendezvous.exchange(round, r.id, value)?)
            }
        }
    }

    /// This replica's group (replica ids) and its position there.
    fn my_group(&self, groups: &ReplicaGroups) -> Result<(Vec<i64>, usize), OpError> {
        let n = self.replicas() as i64;
        groups.check(n).map_err(|e| {
            OpError::Message(format!("{e}; run with as many replicas as the groups name"))
        })?;
        groups.group_of(n, self.replica_id() as i64).ok_or_else(|| {
            OpError::Message(format!(
                "replica {} is in no group of replica_groups {groups}",
                self.replica_id()
            ))
        })
    }

    /// Element by element, `to_apply` folded over `values` in order. A reducer that is one
    /// binary op with an identity (add, multiply, max, min, and, or) folds as a `reduce`
    /// over the stacked values from that identity, so a sum across replicas rounds exactly
    /// as a `reduce` of the same values does (floats accumulate in f64, see `reduce.rs`).
    fn fold_replicas(
        &self,
        to_apply: CompId,
        values: &[&ArrayLiteral],
    ) -> Result<ArrayLiteral, OpError> {
        let first = values[0];
        if let Some(SimpleScalarFn::Binary { op, .. }) = self.simple_scalar_fn(to_apply)
            && let Some(init) = identity(op, first.shape.element_type)
        {
            let owned: Vec<ArrayLiteral> = values.iter().map(|v| (*v).clone()).collect();
            let stacked = ArrayLiteral::stack(&owned)?;
            let reduced = self.reduce(&[&stacked, &init], &[0], to_apply)?;
            let mut out = array(&reduced)?.clone();
            out.shape = first.shape.clone();
            return Ok(out);
        }
        let mut data = first.data.clone();
        for v in &values[1..] {
            for i in 0..first.data.len() {
                let acc = Literal::Array(scalar_at(&data, i));
                let x = Literal::Array(scalar_at(&v.data, i));
                let r = self.computation(to_apply, &[acc, x])?;
                copy_element(&mut data, i, &array(&r)?.data, 0);
            }
        }
        Ok(ArrayLiteral {
            shape: first.shape.clone(),
            data,
        })
    }

    /// `all-reduce`: each operand reduced over the group, in group order.
    pub(super) fn all_reduce(
        &self,
        operands: &[&Literal],
        groups: &ReplicaGroups,
        to_apply: CompId,
    ) -> OpResult {
        let (group, _) = self.my_group(groups)?;
        let all = self.meet(Literal::Tuple(
            operands.iter().map(|l| (*l).clone()).collect(),
        ))?;
        let mut results = Vec::with_capacity(operands.len());
        for k in 0..operands.len() {
            let values = group_arrays(&all, &group, k)?;
            results.push(Literal::Array(self.fold_replicas(to_apply, &values)?));
        }
        Ok(single_or_tuple(results))
    }

    /// `all-gather`: the group's values concatenated along `dimension`.
    pub(super) fn all_gather(
        &self,
        operand: &Literal,
        groups: &ReplicaGroups,
        dimension: i64,
    ) -> OpResult {
        let (group, _) = self.my_group(groups)?;
        let all = self.meet(operand.clone())?;
        let parts = group_arrays(&all, &group, usize::MAX)?;
        Ok(Literal::Array(concatenate(&parts, dimension as usize)))
    }

    /// `reduce-scatter`: the group's reduction, this replica's block along `dimension`.
    pub(super) fn reduce_scatter(
        &self,
        operand: &Literal,
        groups: &ReplicaGroups,
        dimension: i64,
        to_apply: CompId,
    ) -> OpResult {
        let (group, at) = self.my_group(groups)?;
        let all = self.meet(operand.clone())?;
        let values = group_arrays(&all, &group, usize::MAX)?;
        let reduced = self.fold_replicas(to_apply, &values)?;
        Ok(Literal::Array(block(
            &reduced,
            dimension as usize,
            group.len(),
            at,
        )))
    }

    /// `all-to-all`: the tuple form sends operand j to group member j; the array form
    /// splits along `dimension` and concatenates what arrives along it.
    pub(super) fn all_to_all(
        &self,
        operands: &[&Literal],
        groups: &ReplicaGroups,
        dimension: Option<i64>,
    ) -> OpResult {
        let (group, at) = self.my_group(groups)?;
        let all = self.meet(Literal::Tuple(
            operands.iter().map(|l| (*l).clone()).collect(),
        ))?;
        match dimension {
            None => Ok(Literal::Tuple(
                group
                    .iter()
                    .map(|&r| member_operand(&all, r, at).map(|a| Literal::Array(a.clone())))
                    .collect::<Result<Vec<_>, _>>()?,
            )),
            Some(d) => {
                let d = d as usize;
                let blocks: Vec<ArrayLiteral> = group
                    .iter()
                    .map(|&r| member_operand(&all, r, 0).map(|a| block(a, d, group.len(), at)))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Literal::Array(concatenate(
                    &blocks.iter().collect::<Vec<_>>(),
                    d,
                )))
            }
        }
    }

    /// `collective-permute`: the value of the replica that sends to this one, else zeros.
    pub(super) fn collective_permute(&self, operand: &Literal, pairs: &[(i64, i64)]) -> OpResult {
        let all = self.meet(operand.clone())?;
        let me = self.replica_id() as i64;
        match pairs.iter().find(|&&(_, t)| t == me) {
            Some(&(s, _)) => Ok(Literal::Array(member_operand(&all, s, usize::MAX)?.clone())),
            None => {
                let a = array(operand)?;
                Ok(Literal::Array(ArrayLiteral {
                    shape: a.shape.clone(),
                    data: ArrayData::zeros(a.shape.element_type, a.data.len()),
                }))
            }
        }
    }
}

/// The identity of `op` on `t` as a scalar, where it has one (integer max and min have
/// none here: they fold element by element).
fn identity(op: BinaryOp, t: ElementType) -> Option<ArrayLiteral> {
    let pred = t == ElementType::Pred;
    let value = match op {
        BinaryOp::Add | BinaryOp::Or | BinaryOp::Xor if !pred => Num::Int(0),
        BinaryOp::Or | BinaryOp::Xor => Num::Bool(false),
        BinaryOp::And if pred => Num::Bool(true),
        BinaryOp::Multiply if !pred => Num::Int(1),
        BinaryOp::Maximum if t.is_float() => Num::Float(f64::NEG_INFINITY),
        BinaryOp::Minimum if t.is_float() => Num::Float(f64::INFINITY),
        _ => return None,
    };
    Some(ArrayLiteral {
        shape: ArrayShape::new(t, &[]),
        data: from_nums(t, 1, |_| value),
    })
}

/// Replica `r`'s value at a collective: operand `k` of the tuple it left, or the array
/// itself (`k == usize::MAX`).
fn member_operand(all: &[Literal], r: i64, k: usize) -> Result<&ArrayLiteral, OpError> {
    let value = usize::try_from(r)
        .ok()
        .and_then(|r| all.get(r))
        .ok_or_else(|| OpError::Message(format!("replica {r} does not run ({} do)", all.len())))?;
    match (value, k) {
        (Literal::Array(a), usize::MAX) => Ok(a),
        (Literal::Tuple(items), k) => array(
            items
                .get(k)
                .ok_or_else(|| OpError::Message(format!("replica {r} left no operand {k}")))?,
        ),
        (other, _) => Err(OpError::Message(format!(
            "replica {r} left {} at this collective",
            other.shape()
        ))),
    }
}

/// The group members' values at a collective, in group order (see [`member_operand`]).
fn group_arrays<'a>(
    all: &'a [Literal],
    group: &[i64],
    k: usize,
) -> Result<Vec<&'a ArrayLiteral>, OpError> {
    group.iter().map(|&r| member_operand(all, r, k)).collect()
}

fn single_or_tuple(mut items: Vec<Literal>) -> Literal {
    if items.len() == 1 {
        items.pop().expect("one item")
    } else {
        Literal::Tuple(items)
    }
}

/// `parts` (one shape but along `d`) concatenated along dimension `d`.
fn concatenate(parts: &[&ArrayLiteral], d: usize) -> ArrayLiteral {
    let first = &parts[0].shape;
    let mut dims = first.dims.to_vec();
    dims[d] = parts.iter().map(|p| p.shape.dims[d]).sum();
    let outer = count(&dims[..d]);
    let mut pieces: Vec<ArrayData> = Vec::new();
    for o in 0..outer {
        for p in parts {
            let inner = count(&p.shape.dims[d..]);
            let indices: Vec<usize> = (o * inner..(o + 1) * inner).collect();
            pieces.push(p.data.take(&indices));
        }
    }
    ArrayLiteral {
        shape: ArrayShape::new(first.element_type, &dims),
        data: concat(&pieces.iter().collect::<Vec<_>>()),
    }
}

/// Block `k` of `n` equal blocks of `a` along dimension `d`.
fn block(a: &ArrayLiteral, d: usize, n: usize, k: usize) -> ArrayLiteral {
    let mut dims = a.shape.dims.to_vec();
    let size = dims[d] / n as i64;
    dims[d] = size;
    let src = strides(&a.shape.dims);
    let mut indices = Vec::with_capacity(count(&dims));
    for_each_index(&dims, |index| {
        let mut at = index.to_vec();
        at[d] += k as i64 * size;
        indices.push(linear(&at, &src));
    });
    ArrayLiteral {
        shape: ArrayShape::new(a.shape.element_type, &dims),
        data: a.data.take(&indices),
    }
}

/// Runs `run` for every replica on its own thread, stopping the others when one fails;
/// returns each replica's result in replica order.
pub(crate) fn in_lockstep<T: Send>(
    replicas: usize,
    run: impl Fn(ReplicaContext<'_>) -> Result<T, EvalError> + Sync,
) -> Vec<Result<T, EvalError>> {
    let rendezvous = Rendezvous::new(replicas);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..replicas)
            .map(|id| {
                let (rendezvous, run) = (&rendezvous, &run);
                s.spawn(move || {
                    let result = run(ReplicaContext {
                        id,
                        rendezvous,
                        round: std::cell::Cell::new(0),
                    });
                    if result.is_err() {
                        rendezvous.fail();
                    }
                    rendezvous.finish(id);
                    result
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a replica's evaluator does not panic"))
            .collect()
    })
}
