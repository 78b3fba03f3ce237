//! A windowed op (a pool, a pool's gradient) prepared once to run many times on f32
//! slices. A codelet running one on each tile's part of a pool plans its windows when it
//! is built, as the convolution vertex plans its patches, instead of at every run; it runs
//! the evaluator's own walk and folds, so its results are the evaluator's bit for bit.

use super::calls::{SimpleScalarFn, simple_scalar_fn};
use super::groups::WindowPositions;
use super::reduce::{f32_select_add, fast_fold, folds_directly};
use crate::op::BinaryOp;
use crate::{ElementType, Module, Op};

/// What the op does with each window.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// reduce-window: folds the window into the initial value with `op`.
    Fold(BinaryOp),
    /// select-and-scatter: adds each source element where the selection picks, selecting
    /// with a plain (not total-order) comparison.
    SelectAdd(SimpleScalarFn),
}

/// An f32 reduce-window or select-and-scatter with its windows planned: see the module doc.
#[derive(Debug, Clone)]
pub struct WindowOp {
    kind: Kind,
    windows: WindowPositions,
    /// Elements of each parameter and of the result.
    inputs: Vec<usize>,
    output: usize,
}

impl WindowOp {
    /// The op `module`'s entry computation applies to its parameters, in order, when it is
    /// one the evaluator runs in a typed loop: an f32 reduce-window of one input whose
    /// reducer is a single binary op, or an f32 select-and-scatter selecting by a plain
    /// comparison and scattering by addition. `None` for anything else.
    pub fn of(module: &Module) -> Option<WindowOp> {
        let comp = module.computation(module.entry);
        let root = comp.root_instr();
        if root.operands[..] != comp.parameters()[..] {
            return None;
        }
        let shapes: Vec<&crate::ArrayShape> = root
            .operands
            .iter()
            .map(|&o| comp.instr(o).shape.as_array())
            .collect::<Option<_>>()?;
        let output = root.shape.as_array()?;
        if shapes
            .iter()
            .chain([&output])
            .any(|s| s.element_type != ElementType::F32)
        {
            return None;
        }
        let (kind, windows) = match &root.op {
            Op::ReduceWindow { window, to_apply } if shapes.len() == 2 => {
                let Some(SimpleScalarFn::Binary { op, swapped }) =
                    simple_scalar_fn(module, *to_apply)
                else {
                    return None;
                };
                if !folds_directly(op, swapped) {
                    return None;
                }
                let windows = WindowPositions::new(&shapes[0].dims, &output.dims, window, true);
                (Kind::Fold(op), windows)
            }
            Op::SelectAndScatter {
                window,
                select,
                scatter,
            } => {
                let select = simple_scalar_fn(module, *select)?;
                let Some(SimpleScalarFn::Binary {
                    op: BinaryOp::Add, ..
                }) = simple_scalar_fn(module, *scatter)
                else {
                    return None;
                };
                if !matches!(select, SimpleScalarFn::Compare { total: false, .. }) {
                    return None;
                }
                let windows = WindowPositions::new(&shapes[0].dims, &shapes[1].dims, window, false);
                (Kind::SelectAdd(select), windows)
            }
            _ => return None,
        };
        Some(WindowOp {
            kind,
            windows,
            inputs: shapes.iter().map(|s| s.element_count() as usize).collect(),
            output: output.element_count() as usize,
        })
    }

    /// Runs the op on `inputs` (one slice per parameter) into `out`; an error when the
    /// slices are not the sizes the op was planned for.
    pub fn run(&self, inputs: &[&[f32]], out: &mut [f32]) -> Result<(), String> {
        let lens: Vec<usize> = inputs.iter().map(|x| x.len()).collect();
        if lens != self.inputs || out.len() != self.output {
            return Err(format!(
                "operands of {lens:?} and a result of {} elements for a windowed op planned for {:?} and {}",
                out.len(),
                self.inputs,
                self.output
            ));
        }
        match self.kind {
            Kind::Fold(op) => {
                let folded = fast_fold(op, inputs[0], inputs[1][0], &self.windows, self.output)
                    .ok_or_else(|| format!("{} is not defined for f32", op.name()))?;
                out.copy_from_slice(&folded);
            }
            Kind::SelectAdd(select) => {
                out.fill(inputs[2][0]);
                let add = SimpleScalarFn::Binary {
                    op: BinaryOp::Add,
                    swapped: false,
                };
                let done = f32_select_add(
                    Some(select),
                    Some(add),
                    &self.windows,
                    (inputs[0], inputs[1], out),
                );
                assert!(
                    done,
                    "planned: a plain comparison selects, addition scatters"
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::literal::{ArrayData, Literal};

    fn module(text: &str) -> Module {
        crate::parse_module(text).expect("test module parses")
    }

    fn f32s(l: &Literal) -> Vec<f32> {
        match l {
            Literal::Array(a) => match &a.data {
                ArrayData::F32(v) => v.clone(),
                other => panic!("f32 result expected, got {}", other.element_type()),
            },
            other => panic!("array expected, got {}", other.shape()),
        }
    }

    fn arg(dims: &[i64], values: Vec<f32>) -> Literal {
        let shape = crate::ArrayShape::new(ElementType::F32, dims);
        Literal::Array(
            crate::ArrayLiteral::new(shape, ArrayData::F32(values)).expect("sizes agree"),
        )
    }

    /// Values with ties, signed zeros and a NaN, so the fold order and tie-breaking show.
    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let h = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 20;
                match h % 17 {
                    0 => -0.0,
                    1 => 0.0,
                    2 if i == 5 => f32::NAN,
                    _ => (h % 7) as f32 - 3.0 + (h % 3) as f32 * 0.1,
                }
            })
            .collect()
    }

    const REDUCE_WINDOW: &str = r#"HloModule m
%r (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %c = f32[] OP(%a, %b)
}
ENTRY %e (x: f32[2,7,9,3], i: f32[]) -> f32[2,4,17,2] {
  %x = f32[2,7,9,3] parameter(0)
  %i = f32[] parameter(1)
  ROOT %w = f32[2,4,17,2] reduce-window(%x, %i), window={size=1x3x2x2 stride=1x2x1x1 pad=0_0x1_1x0_2x0_0 lhs_dilate=1x1x2x1 rhs_dilate=1x1x2x1}, to_apply=%r
}
"#;

    /// Padded, strided, dilated windows: the planned op gives the evaluator's results bit
    /// for bit, for each reducer it takes.
    #[test]
    fn planned_reduce_windows_give_the_evaluators_bits() {
        for op in ["add", "maximum", "minimum", "multiply"] {
            let m = module(&REDUCE_WINDOW.replace("OP", op));
            let planned = WindowOp::of(&m).expect("an f32 reduce-window with a binary reducer");
            let x = values(2 * 7 * 9 * 3, 7);
            let init = [if op == "multiply" { 1.0 } else { -0.0 }];
            let want = f32s(
                &crate::eval::evaluate(
                    &m,
                    &[arg(&[2, 7, 9, 3], x.clone()), arg(&[], init.to_vec())],
                )
                .unwrap(),
            );
            let mut got = vec![0.0; want.len()];
            planned.run(&[&x, &init], &mut got).unwrap();
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{op}");
        }
    }

    #[test]
    fn planned_select_and_scatter_gives_the_evaluators_bits() {
        for (dir, order) in [
            ("GE", "%a, %b"),
            ("GT", "%a, %b"),
            ("LE", "%b, %a"),
            ("LT", "%a, %b"),
        ] {
            let text = format!(
                r#"HloModule m
%s (a: f32[], b: f32[]) -> pred[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %c = pred[] compare({order}), direction={dir}
}}
%t (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %c = f32[] add(%a, %b)
}}
ENTRY %e (x: f32[3,9,7], g: f32[3,4,4], i: f32[]) -> f32[3,9,7] {{
  %x = f32[3,9,7] parameter(0)
  %g = f32[3,4,4] parameter(1)
  %i = f32[] parameter(2)
  ROOT %w = f32[3,9,7] select-and-scatter(%x, %g, %i), window={{size=1x3x2 stride=1x2x2 pad=0_0x0_0x0_1}}, select=%s, scatter=%t
}}
"#
            );
            let m = module(&text);
            let planned = WindowOp::of(&m).expect("a pool's gradient");
            let (x, g, init) = (values(189, 3), values(48, 11), [0.5f32]);
            let args = [
                arg(&[3, 9, 7], x.clone()),
                arg(&[3, 4, 4], g.clone()),
                arg(&[], init.to_vec()),
            ];
            let want = f32s(&crate::eval::evaluate(&m, &args).unwrap());
            let mut got = vec![0.0; want.len()];
            planned.run(&[&x, &g, &init], &mut got).unwrap();
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{dir}");
        }
    }

    #[test]
    fn other_ops_and_types_are_not_planned_and_wrong_sizes_are_errors() {
        let m = module(&REDUCE_WINDOW.replace("OP", "add"));
        let planned = WindowOp::of(&m).unwrap();
        let x = vec![0.0; 10];
        let err = planned.run(&[&x, &[0.0]], &mut [0.0; 4]).unwrap_err();
        assert!(err.contains("planned for"), "{err}");
        let f16 = REDUCE_WINDOW.replace("OP", "add").replace("f32", "f16");
        assert!(WindowOp::of(&module(&f16)).is_none());
        let sub = REDUCE_WINDOW
            .replace("OP", "subtract")
            .replace("(%a, %b)", "(%b, %a)");
        assert!(
            WindowOp::of(&module(&sub)).is_none(),
            "a swapped subtraction does not commute"
        );
    }
}
