//! Every gradient rule checked against central finite differences, in f64 on the reference
//! evaluator: the directional derivative along a random direction must match `<grad, v>`.

use ipuxla_frontend::autodiff::grad;
use ipuxla_frontend::ops::{self, Builder};
use xla_ir::attributes::{
    ComparisonDirection, ConvDims, DotDims, GatherDims, PadDim, SliceDim, Window, WindowDim,
};
use xla_ir::builder::ModuleBuilder;
use xla_ir::literal::{ArrayData, ArrayLiteral};
use xla_ir::op::BinaryOp;
use xla_ir::{ArrayShape, ElementType, InstrId, Literal, Module, Shape};

const F64: ElementType = ElementType::F64;

/// A deterministic generator of values in [lo, hi).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, lo: f64, hi: f64) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        lo + (hi - lo) * ((self.0 >> 11) as f64 / (1u64 << 53) as f64)
    }
}

fn literal(dims: &[i64], values: Vec<f64>) -> Literal {
    Literal::Array(ArrayLiteral::new(ArrayShape::new(F64, dims), ArrayData::F64(values)).unwrap())
}

fn values(l: &Literal) -> Vec<f64> {
    match l {
        Literal::Array(a) => match &a.data {
            ArrayData::F64(v) => v.clone(),
            other => panic!("expected f64, got {other:?}"),
        },
        other => panic!("expected an array, got {other}"),
    }
}

/// Builds `loss = build(params)` and its gradient, then compares `<grad, v>` with
/// `(loss(x + hv) - loss(x - hv)) / 2h` for random `x` in `range` and `v`.
fn check(
    name: &str,
    params: &[(&[i64], (f64, f64))],
    build: impl Fn(&mut Builder<'_>, &[InstrId]) -> InstrId,
) {
    let mut g = ModuleBuilder::entry(name, "main");
    let ps: Vec<InstrId> = params
        .iter()
        .enumerate()
        .map(|(k, (dims, _))| {
            g.parameter(k as u64, Shape::array(F64, dims), &format!("p{k}"))
                .unwrap()
        })
        .collect();
    let loss = build(&mut g, &ps);
    let grads = grad(&mut g, loss, &ps).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut outs = vec![loss];
    outs.extend(grads);
    let root = g.tuple(&outs).unwrap();
    let module: Module = g
        .finish_module(root)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut rng = Lcg(name.len() as u64 * 7919 + 17);
    let xs: Vec<Vec<f64>> = params
        .iter()
        .map(|(dims, (lo, hi))| {
            let n: i64 = dims.iter().product();
            (0..n).map(|_| rng.next(*lo, *hi)).collect()
        })
        .collect();
    let vs: Vec<Vec<f64>> = xs
        .iter()
        .map(|x| x.iter().map(|_| rng.next(-1.0, 1.0)).collect())
        .collect();
    let run = |shift: f64| -> Vec<Literal> {
        let inputs: Vec<Literal> = params
            .iter()
            .zip(xs.iter().zip(&vs))
            .map(|((dims, _), (x, v))| {
                literal(dims, x.iter().zip(v).map(|(a, d)| a + shift * d).collect())
            })
            .collect();
        match xla_ir::eval::evaluate(&module, &inputs).unwrap() {
            Literal::Tuple(items) => items,
            other => panic!("{other}"),
        }
    };
    let at = run(0.0);
    let analytic: f64 = at[1..]
        .iter()
        .zip(&vs)
        .map(|(g, v)| values(g).iter().zip(v).map(|(a, b)| a * b).sum::<f64>())
        .sum();
    let h = 1e-5;
    let numeric = (values(&run(h)[0])[0] - values(&run(-h)[0])[0]) / (2.0 * h);
    let scale = analytic.abs().max(numeric.abs()).max(1e-3);
    assert!(
        (analytic - numeric).abs() / scale < 1e-6,
        "{name}: analytic {analytic} vs finite differences {numeric}\n{module}"
    );
}

#[test]
fn element_wise_ops() {
    check(
        "elementwise",
        &[(&[2, 3], (-1.0, 1.0)), (&[2, 3], (0.5, 2.0))],
        |b, p| {
            let (x, y) = (p[0], p[1]);
            let terms = [
                b.exp(x).unwrap(),
                b.log(y).unwrap(),
                b.tanh(x).unwrap(),
                b.logistic(x).unwrap(),
                b.sqrt(y).unwrap(),
                b.rsqrt(y).unwrap(),
                b.erf(x).unwrap(),
                b.sine(x).unwrap(),
                b.cosine(y).unwrap(),
                b.log1p(y).unwrap(),
                b.expm1(x).unwrap(),
                b.maximum(x, y).unwrap(),
                b.minimum(x, y).unwrap(),
                b.divide(x, y).unwrap(),
                b.power(y, x).unwrap(),
                b.abs(x).unwrap(),
                b.atan2(x, y).unwrap(),
            ];
            let mut acc = b.multiply(terms[0], terms[1]).unwrap();
            for (k, &t) in terms[2..].iter().enumerate() {
                let w = ops::scale(b, t, 1.0 + k as f64 / 10.0).unwrap();
                let prod = b.multiply(w, x).unwrap();
                acc = if k % 2 == 0 {
                    b.add(acc, prod).unwrap()
                } else {
                    b.subtract(acc, prod).unwrap()
                };
            }
            let neg = b.negate(acc).unwrap();
            ops::sum_all(b, neg).unwrap()
        },
    );
}

#[test]
fn select_and_clamp() {
    check(
        "select",
        &[(&[4], (-1.0, 1.0)), (&[4], (-1.0, 1.0))],
        |b, p| {
            let zero = ops::zeros_like(b, p[0]).unwrap();
            let pos = b
                .compare(p[0], zero, ComparisonDirection::Gt, None)
                .unwrap();
            let s = b.select(pos, p[0], p[1]).unwrap();
            let lo = ops::full_like(b, p[1], -0.5).unwrap();
            let hi = ops::full_like(b, p[1], 0.5).unwrap();
            let c = b.clamp(lo, p[1], hi).unwrap();
            let m = b.multiply(s, c).unwrap();
            let m = b.multiply(m, p[0]).unwrap();
            ops::sum_all(b, m).unwrap()
        },
    );
}

#[test]
fn dot_products() {
    check(
        "dot_batched",
        &[(&[2, 3, 4], (-1.0, 1.0)), (&[2, 4, 5], (-1.0, 1.0))],
        |b, p| {
            let dims = DotDims {
                lhs_batch: vec![0],
                rhs_batch: vec![0],
                lhs_contracting: vec![2],
                rhs_contracting: vec![1],
            };
            let d = b.dot_general(p[0], p[1], dims, None).unwrap();
            let sq = b.multiply(d, d).unwrap();
            ops::sum_all(b, sq).unwrap()
        },
    );
    // Contracting dimensions first and two of them, batch dimension not leading.
    check(
        "dot_odd",
        &[(&[3, 2, 4, 5], (-1.0, 1.0)), (&[5, 4, 6, 2], (-1.0, 1.0))],
        |b, p| {
            let dims = DotDims {
                lhs_batch: vec![1],
                rhs_batch: vec![3],
                lhs_contracting: vec![3, 2],
                rhs_contracting: vec![0, 1],
            };
            let d = b.dot_general(p[0], p[1], dims, None).unwrap();
            let t = b.tanh(d).unwrap();
            ops::sum_all(b, t).unwrap()
        },
    );
}

fn window(
    size: i64,
    stride: i64,
    pad: (i64, i64),
    rhs_dilation: i64,
    lhs_dilation: i64,
) -> WindowDim {
    WindowDim {
        size,
        stride,
        pad_low: pad.0,
        pad_high: pad.1,
        window_dilation: rhs_dilation,
        base_dilation: lhs_dilation,
        window_reversal: false,
    }
}

#[test]
fn convolutions() {
    for (name, w) in [
        (
            "conv_same",
            [window(3, 1, (1, 1), 1, 1), window(3, 1, (1, 1), 1, 1)],
        ),
        (
            "conv_strided",
            [window(3, 2, (1, 0), 1, 1), window(2, 2, (0, 1), 1, 1)],
        ),
        (
            "conv_dilated",
            [window(2, 1, (0, 1), 2, 1), window(3, 1, (2, 0), 1, 2)],
        ),
    ] {
        let (kh, kw) = (w[0].size, w[1].size);
        let k: &[i64] = &[kh, kw, 2, 3];
        check(
            name,
            &[(&[2, 5, 6, 2], (-1.0, 1.0)), (k, (-1.0, 1.0))],
            |b, p| {
                let c = b
                    .convolution(
                        p[0],
                        p[1],
                        Window { dims: w.to_vec() },
                        ConvDims::nhwc_hwio(),
                        1,
                        1,
                        None,
                    )
                    .unwrap();
                let s = b.sine(c).unwrap();
                ops::sum_all(b, s).unwrap()
            },
        );
    }
}

#[test]
fn pooling_and_reductions() {
    check("max_pool", &[(&[2, 6, 5, 3], (-1.0, 1.0))], |b, p| {
        let w = Window {
            dims: vec![
                window(1, 1, (0, 0), 1, 1),
                window(2, 2, (0, 0), 1, 1),
                window(3, 2, (1, 1), 1, 1),
                window(1, 1, (0, 0), 1, 1),
            ],
        };
        let low = ops::scalar(b, F64, f64::NEG_INFINITY).unwrap();
        let max = ops::reducer(b, BinaryOp::Maximum, F64).unwrap();
        let r = b.reduce_window(&[p[0]], &[low], w, max).unwrap();
        let e = b.exp(r).unwrap();
        ops::sum_all(b, e).unwrap()
    });
    check("sum_pool", &[(&[2, 7, 5, 3], (-1.0, 1.0))], |b, p| {
        let w = Window {
            dims: vec![
                window(1, 1, (0, 0), 1, 1),
                window(3, 2, (1, 0), 1, 1),
                window(2, 1, (0, 1), 2, 1),
                window(1, 1, (0, 0), 1, 1),
            ],
        };
        let zero = ops::scalar(b, F64, 0.0).unwrap();
        let add = ops::reducer(b, BinaryOp::Add, F64).unwrap();
        let r = b.reduce_window(&[p[0]], &[zero], w, add).unwrap();
        let e = b.exp(r).unwrap();
        ops::sum_all(b, e).unwrap()
    });
    check("reduce_max_mean", &[(&[3, 4, 5], (-1.0, 1.0))], |b, p| {
        let m = ops::max(b, p[0], &[1]).unwrap();
        let mean = ops::mean(b, p[0], &[1, 2]).unwrap();
        let mb = b.broadcast(mean, &[5, 3], &[1]).unwrap();
        let mt = b.transpose(m, &[1, 0]).unwrap();
        let prod = b.multiply(mt, mb).unwrap();
        let e = b.exp(prod).unwrap();
        ops::sum_all(b, e).unwrap()
    });
}

#[test]
fn data_movement() {
    check(
        "movement",
        &[(&[4, 6], (-1.0, 1.0)), (&[4, 2], (-1.0, 1.0))],
        |b, p| {
            let s = b
                .slice(
                    p[0],
                    &[
                        SliceDim {
                            start: 1,
                            limit: 4,
                            stride: 2,
                        },
                        SliceDim {
                            start: 0,
                            limit: 5,
                            stride: 2,
                        },
                    ],
                )
                .unwrap();
            let r = b.reshape(s, &[6]).unwrap();
            let rev = b.reverse(r, &[0]).unwrap();
            let c = b.concatenate(&[p[0], p[1]], 1).unwrap();
            let zero = ops::scalar(b, F64, 0.0).unwrap();
            let padded = b
                .pad(
                    c,
                    zero,
                    &[
                        PadDim {
                            low: -1,
                            high: 2,
                            interior: 1,
                        },
                        PadDim {
                            low: 1,
                            high: -2,
                            interior: 0,
                        },
                    ],
                )
                .unwrap();
            let sq = b.multiply(padded, padded).unwrap();
            let rs = ops::sum_all(b, rev).unwrap();
            let e = b.exp(rs).unwrap();
            let ps = ops::sum_all(b, sq).unwrap();
            b.add(e, ps).unwrap()
        },
    );
}

#[test]
fn embedding_gather_and_dynamic_slices() {
    check("gather", &[(&[5, 3], (-1.0, 1.0))], |b, p| {
        let ids = b
            .constant(
                ArrayLiteral::new(
                    ArrayShape::new(ElementType::S32, &[4]),
                    ArrayData::S32(vec![1, 4, 1, 0]),
                )
                .unwrap(),
            )
            .unwrap();
        let dims = GatherDims {
            offset_dims: vec![1],
            collapsed_slice_dims: vec![0],
            start_index_map: vec![0],
            operand_batching_dims: vec![],
            start_indices_batching_dims: vec![],
            index_vector_dim: 1,
        };
        let rows = b.gather(p[0], ids, dims, &[1, 3]).unwrap();
        let start = b.constant(ArrayLiteral::scalar_s32(2)).unwrap();
        let zero = b.constant(ArrayLiteral::scalar_s32(0)).unwrap();
        let part = b.dynamic_slice(p[0], &[start, zero], &[2, 3]).unwrap();
        let ex = b.exp(part).unwrap();
        let put = b.dynamic_update_slice(rows, ex, &[zero, zero]).unwrap();
        let sq = b.multiply(put, put).unwrap();
        let t = b.tanh(sq).unwrap();
        ops::sum_all(b, t).unwrap()
    });
}

#[test]
fn stop_gradient_blocks_the_path() {
    let mut g = ModuleBuilder::entry("stop", "main");
    let x = g.parameter(0, Shape::array(F64, &[2]), "x").unwrap();
    let s = ops::stop_gradient(&mut g, x).unwrap();
    let y = g.multiply(x, s).unwrap();
    let loss = ops::sum_all(&mut g, y).unwrap();
    let dx = grad(&mut g, loss, &[x]).unwrap();
    let module = g.finish_module(dx[0]).unwrap();
    let out = xla_ir::eval::evaluate(&module, &[literal(&[2], vec![3.0, -2.0])]).unwrap();
    // d(x * stop(x)) = stop(x), not 2x.
    assert_eq!(values(&out), vec![3.0, -2.0]);
}

#[test]
fn unsupported_ops_are_named() {
    let mut g = ModuleBuilder::entry("bad", "main");
    let x = g.parameter(0, Shape::array(F64, &[4]), "x").unwrap();
    let less = ops::reducer(&mut g, BinaryOp::Add, F64).unwrap();
    let _ = less;
    let f = g.floor(x).unwrap();
    let r = g.remainder(f, x).unwrap();
    let cmp = g
        .sub_computation("lt", |c| {
            let a = c.parameter(0, Shape::scalar(F64), "a")?;
            let b = c.parameter(1, Shape::scalar(F64), "b")?;
            c.compare(a, b, ComparisonDirection::Lt, None)
        })
        .unwrap();
    let sorted = g.sort(&[r], 0, true, cmp).unwrap();
    let loss = ops::sum_all(&mut g, sorted).unwrap();
    let err = grad(&mut g, loss, &[x]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot differentiate sort 'sort.5': no gradient rule for this op"
    );
    let not_scalar = grad(&mut g, x, &[x]).unwrap_err();
    assert!(
        not_scalar.to_string().contains("'x' is f64[4]"),
        "{not_scalar}"
    );
}

#[test]
fn outlined_functions_called_twice() {
    use ipuxla_frontend::scopes::{call_outlined, outlined_function};
    check(
        "outlined",
        &[
            (&[3, 4], (-1.0, 1.0)),
            (&[4, 4], (-1.0, 1.0)),
            (&[4, 4], (-1.0, 1.0)),
        ],
        |b, p| {
            let (f, h) = outlined_function(b, "f", &[p[0], p[1]], |f, a| {
                let d = f.dot(a[0], a[1])?;
                f.tanh(d)
            })
            .unwrap();
            let y = call_outlined(b, f, &[h, p[2]]).unwrap();
            let sq = b.multiply(y, y).unwrap();
            ops::sum_all(b, sq).unwrap()
        },
    );
}

#[test]
fn conditionals_pass_the_gradient_to_the_taken_branch() {
    for (name, shift) in [("cond_true", 2.0), ("cond_false", -2.0)] {
        check(
            name,
            &[(&[3], (-1.0, 1.0)), (&[2, 2], (-1.0, 1.0))],
            |b, p| {
                let s = ops::sum_all(b, p[0]).unwrap();
                let k = ops::scalar(b, F64, shift).unwrap();
                let s = b.add(s, k).unwrap();
                let zero = ops::scalar(b, F64, 0.0).unwrap();
                let pred = b.compare(s, zero, ComparisonDirection::Gt, None).unwrap();
                let on_true = b
                    .sub_computation(format!("{name}_t"), |c| {
                        let x = c.parameter(0, Shape::array(F64, &[3]), "tx")?;
                        let e = c.exp(x)?;
                        ops::sum_all(c, e)
                    })
                    .unwrap();
                let on_false = b
                    .sub_computation(format!("{name}_f"), |c| {
                        let x = c.parameter(0, Shape::array(F64, &[2, 2]), "fx")?;
                        let t = c.tanh(x)?;
                        let sq = c.multiply(t, x)?;
                        ops::sum_all(c, sq)
                    })
                    .unwrap();
                let r = b
                    .conditional(pred, &[p[0], p[1]], &[on_true, on_false])
                    .unwrap();
                b.multiply(r, r).unwrap()
            },
        );
    }
}

/// A `fori_loop` (a while loop over `(i, x, w)` for 4 trips): gradients reach the initial
/// `x` and the loop-invariant `w` through every trip.
#[test]
fn while_loops_with_a_counter() {
    check(
        "fori_loop",
        &[(&[2, 3], (-1.0, 1.0)), (&[3, 3], (-0.5, 0.5))],
        |b, p| {
            let s32 = Shape::scalar(ElementType::S32);
            let state = Shape::Tuple(vec![
                s32.clone(),
                Shape::array(F64, &[2, 3]),
                Shape::array(F64, &[3, 3]),
            ]);
            let cond = b
                .sub_computation("cond", |c| {
                    let s = c.parameter(0, state.clone(), "cs")?;
                    let i = c.get_tuple_element(s, 0)?;
                    let four = c.constant(ArrayLiteral::scalar_s32(4))?;
                    c.compare(i, four, ComparisonDirection::Lt, None)
                })
                .unwrap();
            let body = b
                .sub_computation("body", |c| {
                    let s = c.parameter(0, state.clone(), "bs")?;
                    let i = c.get_tuple_element(s, 0)?;
                    let x = c.get_tuple_element(s, 1)?;
                    let w = c.get_tuple_element(s, 2)?;
                    let one = c.constant(ArrayLiteral::scalar_s32(1))?;
                    let i1 = c.add(i, one)?;
                    let d = c.dot(x, w)?;
                    let t = c.tanh(d)?;
                    let x1 = c.add(t, x)?;
                    c.tuple(&[i1, x1, w])
                })
                .unwrap();
            let zero = b.constant(ArrayLiteral::scalar_s32(0)).unwrap();
            let init = b.tuple(&[zero, p[0], p[1]]).unwrap();
            let w = b.while_loop(init, cond, body).unwrap();
            let x = b.get_tuple_element(w, 1).unwrap();
            let sq = b.multiply(x, x).unwrap();
            ops::sum_all(b, sq).unwrap()
        },
    );
}
