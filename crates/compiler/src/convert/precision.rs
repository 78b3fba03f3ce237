//! `--precision-mode FP16`: f32 compute becomes f16. The entry computation's parameters and
//! results keep their types (converts at the edges); instructions the caller excludes stay
//! f32 with converts around them; so do the ops whose meaning is tied to f32 (bit casts,
//! `reduce-precision`, custom calls, feeds, foreign ops) and the entry's state updates
//! (weights and optimiser state, kept f32 as mixed-precision training keeps them). Computations called by converted
//! instructions are converted whole; one called by both kinds is an error naming it.

use std::collections::{HashMap, HashSet};
use xla_ir::literal::{ArrayData, ArrayLiteral};
use xla_ir::{
    BinaryOp, CompId, Computation, ElementType, InstrId, Instruction, Literal, Module, Op, Shape,
    UnaryOp, verify,
};

/// Why the conversion could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrecisionError {
    /// A computation is called by a converted and by a kept instruction.
    #[error(
        "computation {computation} is called both by instructions converted to f16 and by {kept}, which stays f32; exclude all of its callers or none"
    )]
    MixedCallers {
        /// The computation.
        computation: String,
        /// A caller that stays f32.
        kept: String,
    },
    /// The converted module does not verify (a bug in the conversion: the message names
    /// the instruction).
    #[error("the converted module does not verify: {0}")]
    Invalid(String),
}

/// `shape` with its f32 leaves as f16.
fn halved(shape: &Shape) -> Shape {
    match shape {
        Shape::Array(a) if a.element_type == ElementType::F32 => {
            Shape::Array(a.with_element_type(ElementType::F16))
        }
        Shape::Tuple(items) => Shape::Tuple(items.iter().map(halved).collect()),
        other => other.clone(),
    }
}

fn halved_literal(l: &Literal) -> Literal {
    match l {
        Literal::Array(a) => match &a.data {
            ArrayData::F32(v) => Literal::Array(ArrayLiteral {
                shape: a.shape.with_element_type(ElementType::F16),
                data: ArrayData::F16(v.iter().map(|&x| half::f16::from_f32(x)).collect()),
            }),
            _ => l.clone(),
        },
        Literal::Tuple(items) => Literal::Tuple(items.iter().map(halved_literal).collect()),
        Literal::Token => Literal::Token,
    }
}

/// Ops whose meaning is tied to their f32 types: they stay f32 whatever the caller asks.
fn tied_to_f32(op: &Op) -> bool {
    matches!(
        op,
        Op::BitcastConvert
            | Op::ReducePrecision { .. }
            | Op::CustomCall { .. }
            | Op::Infeed { .. }
            | Op::Outfeed { .. }
            | Op::Foreign { .. }
            | Op::ElidedConstant
    )
}

/// The module with f32 compute in f16, except the instructions `excluded` names.
pub fn to_fp16(
    module: &Module,
    excluded: &dyn Fn(&Instruction) -> bool,
) -> Result<Module, PrecisionError> {
    // Which computations are converted: the entry is; a called one as its callers are.
    let mut converted: HashMap<CompId, bool> = HashMap::new();
    let mut caller: HashMap<CompId, (bool, String)> = HashMap::new();
    let mut order = module.post_order();
    order.reverse();
    for id in order {
        let comp = module.computation(id);
        let this = if id == module.entry {
            true
        } else {
            caller.get(&id).is_none_or(|(c, _)| *c)
        };
        converted.insert(id, this);
        for (_, instr) in comp.instructions() {
            let kept = !this || excluded(instr) || tied_to_f32(&instr.op);
            for callee in instr.op.called_computations() {
                match caller.get(&callee) {
                    Some((c, name)) if *c == kept => {
                        let kept_name = if kept { &instr.name } else { name };
                        return Err(PrecisionError::MixedCallers {
                            computation: module.computation(callee).name.clone(),
                            kept: kept_name.clone(),
                        });
                    }
                    _ => {
                        caller.insert(callee, (!kept, instr.name.clone()));
                    }
                }
            }
        }
    }
    let mut out = module.clone();
    for (id, &is_converted) in &converted {
        if !is_converted {
            continue;
        }
        let comp = module.computation(*id);
        let new = convert_computation(comp, *id == module.entry, excluded);
        *out.computation_mut(*id) = new;
    }
    verify(&out).map_err(|e| PrecisionError::Invalid(e.to_string()))?;
    Ok(out)
}

/// Rebuilds one computation: every instruction f16 unless kept, with converts where a
/// value's type differs from what its user takes.
fn convert_computation(
    comp: &Computation,
    is_entry: bool,
    excluded: &dyn Fn(&Instruction) -> bool,
) -> Computation {
    let state = if is_entry {
        state_updates(comp)
    } else {
        HashSet::new()
    };
    let keep = |id: InstrId, instr: &Instruction| {
        excluded(instr)
            || tied_to_f32(&instr.op)
            || (is_entry && matches!(instr.op, Op::Parameter { .. }))
            || state.contains(&id)
    };
    let mut b = Rebuilder {
        out: Computation::new(comp.name.clone()),
        map: HashMap::new(),
        converts: HashMap::new(),
    };
    for &id in comp.order() {
        let instr = comp.instr(id);
        // Tuples and their elements pass values on as they are: no precision of their own
        // (a kept value is not rounded through f16 on its way to the results).
        if matches!(instr.op, Op::Tuple | Op::GetTupleElement { .. }) {
            let mut new = instr.clone();
            new.operands = instr.operands.iter().map(|o| b.map[o]).collect();
            new.control_predecessors = instr
                .control_predecessors
                .iter()
                .map(|p| b.map[p])
                .collect();
            let shapes: Vec<Shape> = new
                .operands
                .iter()
                .map(|o| b.out.instr(*o).shape.clone())
                .collect();
            new.shape = match instr.op {
                Op::GetTupleElement { index } => shapes[0]
                    .as_tuple()
                    .and_then(|t| t.get(index as usize))
                    .cloned()
                    .unwrap_or_else(|| halved(&instr.shape)),
                _ => Shape::Tuple(shapes),
            };
            let nid = b.out.push(new);
            b.map.insert(id, nid);
            continue;
        }
        let kept = keep(id, instr);
        let want = |shape: &Shape| if kept { shape.clone() } else { halved(shape) };
        let operands: Vec<InstrId> = instr
            .operands
            .iter()
            .map(|&o| {
                let target = want(&comp.instr(o).shape);
                b.value_as(o, &target)
            })
            .collect();
        let mut new = instr.clone();
        new.operands = operands.into_iter().collect();
        new.control_predecessors = instr
            .control_predecessors
            .iter()
            .map(|p| b.map[p])
            .collect();
        if !kept {
            new.shape = halved(&instr.shape);
            if let Op::Constant { literal } = &instr.op {
                new.op = Op::Constant {
                    literal: halved_literal(literal),
                };
            }
        }
        let nid = b.out.push(new);
        b.map.insert(id, nid);
    }
    let root = b.map[&comp.root];
    b.out.root = if is_entry {
        // The entry's results keep their declared types.
        b.value_as(comp.root, &comp.root_instr().shape.clone())
    } else {
        root
    };
    b.out
}

/// The entry's state updates, which stay f32 as mixed-precision training keeps weights and
/// optimiser state in f32: for every result that is an update of a parameter of its own
/// shape — the parameter reached from the result through additions, subtractions,
/// negations, converts and multiplications by one number (`w - lr * g / (sqrt(v) + eps)`,
/// `rho * v + (1 - rho) * g * g`) — the element-wise instructions of the result's
/// expression, up to the first op that is not element-wise (the gradient's dot or
/// reduction, which computes in f16 and is converted). In f16 such updates lose what makes
/// them: an update below half an ulp of the weight vanishes, and the squares of small
/// gradients fall below f16's normal range (6.1e-5). (A residual output `x + f(x)` of an
/// inference model counts too: its last element-wise ops stay f32; a residual stream
/// through layer norms does not.)
pub fn state_updates(comp: &Computation) -> HashSet<InstrId> {
    let root = comp.root_instr();
    let results: Vec<InstrId> = if matches!(root.op, Op::Tuple) {
        root.operands.to_vec()
    } else {
        vec![comp.root]
    };
    let mut kept = HashSet::new();
    for result in results {
        let Some(dims) = comp.instr(result).shape.as_array().map(|a| a.dims.clone()) else {
            continue;
        };
        // The element-wise expression that computes the result, and whether a parameter of
        // the result's dimensions feeds it.
        if !updates_a_parameter(comp, result, &dims) {
            continue;
        }
        let in_expression = |instr: &Instruction| {
            matches!(
                instr.op,
                Op::Unary(_)
                    | Op::Binary(_)
                    | Op::Select
                    | Op::Clamp
                    | Op::Convert
                    | Op::Broadcast { .. }
                    | Op::Constant { .. }
            )
        };
        let cone = reach(comp, result, |instr| {
            if in_expression(instr) {
                instr.operands.to_vec()
            } else {
                Vec::new()
            }
        })
        .into_iter()
        .filter(|&id| in_expression(comp.instr(id)));
        kept.extend(cone);
    }
    kept
}

/// Whether `result` is a parameter of dimensions `dims` plus or minus other values, or
/// scaled by one number: a parameter reached through `add`, `subtract`, `negate`,
/// `convert` and `multiply` by a scalar factor.
fn updates_a_parameter(comp: &Computation, result: InstrId, dims: &[i64]) -> bool {
    reach(comp, result, |instr| match instr.op {
        Op::Binary(BinaryOp::Add | BinaryOp::Subtract)
        | Op::Unary(UnaryOp::Negate)
        | Op::Convert => instr.operands.to_vec(),
        Op::Binary(BinaryOp::Multiply) => {
            let [a, b] = instr.operands[..] else {
                return Vec::new();
            };
            let mut next = Vec::new();
            if is_scalar_factor(comp, b) {
                next.push(a);
            }
            if is_scalar_factor(comp, a) {
                next.push(b);
            }
            next
        }
        _ => Vec::new(),
    })
    .into_iter()
    .any(|id| {
        let instr = comp.instr(id);
        matches!(instr.op, Op::Parameter { .. })
            && instr.shape.as_array().is_some_and(|a| a.dims[..] == *dims)
    })
}

/// The instructions reached from `start`, each once, where `step` gives the operands to
/// go on to from an instruction.
fn reach(
    comp: &Computation,
    start: InstrId,
    mut step: impl FnMut(&Instruction) -> Vec<InstrId>,
) -> Vec<InstrId> {
    let mut seen = HashSet::new();
    let mut order = Vec::new();
    let mut stack = vec![start];
    while let Some(id) = stack.pop() {
        if seen.insert(id) {
            order.push(id);
            stack.extend(step(comp.instr(id)));
        }
    }
    order
}

/// Whether `id` is one number for every element: a constant, or a broadcast scalar (a decay
/// rate such as `rho`, constant or a parameter). A data-dependent factor (a normalisation's
/// `rsqrt(var)`, a layer's scale) ends the search, so a residual stream through layer norms
/// is not an update.
fn is_scalar_factor(comp: &Computation, id: InstrId) -> bool {
    let instr = comp.instr(id);
    match instr.op {
        Op::Constant { .. } => true,
        Op::Broadcast { .. } | Op::Convert => instr.operands.first().is_some_and(|&o| {
            comp.instr(o)
                .shape
                .as_array()
                .is_some_and(|a| a.dims.is_empty())
                || is_scalar_factor(comp, o)
        }),
        _ => false,
    }
}

/// The computation being rebuilt, with the old-to-new map and converts made so far.
struct Rebuilder {
    out: Computation,
    map: HashMap<InstrId, InstrId>,
    converts: HashMap<(InstrId, String), InstrId>,
}

impl Rebuilder {
    /// The new value of old instruction `old`, converted to `target` where its element
    /// types differ (tuples element by element).
    fn value_as(&mut self, old: InstrId, target: &Shape) -> InstrId {
        let new = self.map[&old];
        self.convert(new, target)
    }

    fn convert(&mut self, value: InstrId, target: &Shape) -> InstrId {
        let have = self.out.instr(value).shape.clone();
        if have.same_ignoring_layout(target) {
            return value;
        }
        let key = (value, target.to_string());
        if let Some(&done) = self.converts.get(&key) {
            return done;
        }
        let base = self.out.instr(value).name.clone();
        let made = match (&have, target) {
            (Shape::Tuple(items), Shape::Tuple(targets)) => {
                let parts: Vec<InstrId> = items
                    .iter()
                    .zip(targets)
                    .enumerate()
                    .map(|(i, (item, t))| {
                        let gte = self.out.push(Instruction::new(
                            format!("{base}.{i}"),
                            Op::GetTupleElement { index: i as i64 },
                            &[value],
                            item.clone(),
                        ));
                        self.convert(gte, t)
                    })
                    .collect();
                self.out.push(Instruction::new(
                    format!("{base}.converted"),
                    Op::Tuple,
                    &parts,
                    target.clone(),
                ))
            }
            _ => self.out.push(Instruction::new(
                format!(
                    "{base}.to_{}",
                    target.as_array().map_or("tuple", |a| a.element_type.name())
                ),
                Op::Convert,
                &[value],
                target.clone(),
            )),
        };
        self.converts.insert(key, made);
        made
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Module {
        xla_ir::parse_module(text).unwrap()
    }

    #[test]
    fn compute_is_f16_and_the_edges_keep_their_types() {
        let m = parse(
            "HloModule m\n\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n\nENTRY e {\n  x = f32[4] parameter(0)\n  two = f32[] constant(2)\n  k = f32[4] broadcast(two), dimensions={}\n  y = f32[4] multiply(x, k)\n  zero = f32[] constant(0)\n  r = f32[] reduce(y, zero), dimensions={0}, to_apply=add\n  keep = f32[4] exponential(y)\n  ROOT t = (f32[], f32[4]) tuple(r, keep)\n}\n",
        );
        let out = to_fp16(&m, &|i: &Instruction| i.name == "keep").unwrap();
        let text = out.to_string();
        // Parameters and results as declared; compute in f16; the excluded op in f32
        // between converts; the reducer converted with its caller.
        assert_eq!(out.entry_program_shape(), m.entry_program_shape(), "{text}");
        assert!(text.contains("y = f16[4] multiply(x.to_f16, k)"), "{text}");
        assert!(
            text.contains("keep = f32[4] exponential(y.to_f32)"),
            "{text}"
        );
        assert!(text.contains("s = f16[] add(a, b)"), "{text}");
        assert!(text.contains("two = f16[] constant(2)"), "{text}");
        let before = xla_ir::eval::evaluate(
            &m,
            &[Literal::Array(ArrayLiteral::vector_f32(&[
                1.0, 2.0, 3.0, 4.0,
            ]))],
        )
        .unwrap();
        let after = xla_ir::eval::evaluate(
            &out,
            &[Literal::Array(ArrayLiteral::vector_f32(&[
                1.0, 2.0, 3.0, 4.0,
            ]))],
        )
        .unwrap();
        assert_eq!(before.shape().to_string(), after.shape().to_string());
    }

    #[test]
    fn state_updates_stay_f32_and_the_gradient_computes_in_f16() {
        let m = parse(
            "HloModule m\n\nENTRY e {\n  w = f32[4,4] parameter(0)\n  v = f32[4,4] parameter(1)\n  x = f32[4,4] parameter(2)\n  g = f32[4,4] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n  rho = f32[] constant(0.9)\n  r = f32[4,4] broadcast(rho), dimensions={}\n  kept = f32[4,4] multiply(v, r)\n  gg = f32[4,4] multiply(g, g)\n  v2 = f32[4,4] add(kept, gg)\n  lr = f32[] constant(0.001)\n  l = f32[4,4] broadcast(lr), dimensions={}\n  step = f32[4,4] multiply(g, l)\n  w2 = f32[4,4] subtract(w, step)\n  t = f32[4,4] tanh(g)\n  ROOT out = (f32[4,4], f32[4,4], f32[4,4]) tuple(w2, v2, t)\n}\n",
        );
        let state: Vec<String> = {
            let c = m.entry_computation();
            let mut names: Vec<String> = state_updates(c)
                .into_iter()
                .map(|id| c.instr(id).name.clone())
                .collect();
            names.sort();
            names
        };
        assert_eq!(
            state,
            ["gg", "kept", "l", "lr", "r", "rho", "step", "v2", "w2"],
            "the updates of w and v, not tanh(g), which no parameter of its shape feeds"
        );
        let text = to_fp16(&m, &|_: &Instruction| false).unwrap().to_string();
        assert!(
            text.contains("g = f16[4,4] dot(x.to_f16, w.to_f16)"),
            "{text}"
        );
        assert!(
            text.contains("gg = f32[4,4] multiply(g.to_f32, g.to_f32)"),
            "{text}"
        );
        assert!(text.contains("w2 = f32[4,4] subtract(w, step)"), "{text}");
        assert!(text.contains("t = f16[4,4] tanh(g)"), "{text}");
    }

    #[test]
    fn a_computation_called_by_both_kinds_is_an_error() {
        let m = parse(
            "HloModule m\n\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n\nENTRY e {\n  x = f32[4] parameter(0)\n  zero = f32[] constant(0)\n  r = f32[] reduce(x, zero), dimensions={0}, to_apply=add\n  q = f32[] reduce(x, zero), dimensions={0}, to_apply=add\n  ROOT t = (f32[], f32[]) tuple(r, q)\n}\n",
        );
        let err = to_fp16(&m, &|i: &Instruction| i.name == "q").unwrap_err();
        assert!(
            err.to_string().contains("computation add is called both"),
            "{err}"
        );
    }
}
