//! Every kernel op, JIT-compiled, against the plain-Rust reference on thousands of values:
//! through the f32x4 path (long buffers) and the scalar path (7 elements), bit for bit.
//! (The reference computes transcendentals with the same approximations; their accuracy
//! against `std` is measured in `math`'s tests.)

use codegen::reference::{self, Scalar, load, store};
use codegen::{
    BinaryOp, CmpOp, DType, ElementwiseKernel, Expr, KernelCache, KernelSpec, ReduceKernel,
    ReduceOp, UnaryOp,
};

const N: usize = 4099;

fn f32_values() -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        1.5,
        -2.5,
        2.5,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MIN_POSITIVE,
        1e-40,
        -1e-40,
        f32::MAX,
        f32::MIN,
        3e9,
        -3e9,
        100.0,
        -100.0,
        7.0,
        0.49999997,
    ];
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    while v.len() < N {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        v.push(if s.is_multiple_of(3) {
            f32::from_bits(s as u32)
        } else {
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 40.0
        });
    }
    v
}

fn i32_values() -> Vec<i32> {
    let mut v = vec![
        0,
        1,
        -1,
        2,
        -2,
        7,
        31,
        32,
        33,
        -32,
        i32::MIN,
        i32::MAX,
        i32::MIN + 1,
        100,
        -100,
        3,
        5,
    ];
    let mut s = 0x1234_5678u64;
    while v.len() < N {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        v.push(if s.is_multiple_of(2) {
            s as i32
        } else {
            (s % 70) as i32 - 35
        });
    }
    v
}

/// N elements of `t` as bytes; `salt` rotates the values so two inputs differ.
fn buffer(t: DType, salt: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; N * t.size()];
    let (f, i) = (f32_values(), i32_values());
    for k in 0..N {
        let j = (k * 7 + salt * 13) % N;
        let v = match t {
            DType::F32 | DType::F16 => Scalar::F32(f[j]),
            DType::S32 => Scalar::S32(i[j]),
            DType::U32 => Scalar::U32(i[j] as u32),
            DType::Pred => Scalar::Pred(i[j] % 2 == 0),
        };
        store(t, &mut bytes, k, v);
    }
    bytes
}

fn same(a: Scalar, b: Scalar) -> bool {
    match (a, b) {
        (Scalar::F32(x), Scalar::F32(y)) => {
            (x.is_nan() && y.is_nan()) || x.to_bits() == y.to_bits()
        }
        (x, y) => x == y,
    }
}

/// Runs `kernel` through the JIT and the reference on n = N and n = 7, comparing outputs.
fn check(cache: &mut KernelCache, kernel: ElementwiseKernel) {
    let spec = KernelSpec::Elementwise(kernel.clone());
    let id = cache
        .compile(&spec)
        .unwrap_or_else(|e| panic!("{e}: {kernel:?}"));
    let inputs: Vec<Vec<u8>> = kernel
        .inputs
        .iter()
        .enumerate()
        .map(|(k, t)| buffer(*t, k))
        .collect();
    // 7 and 100: a tile's share, whose repeated inputs the straight call expands on the
    // stack (100: several repeats of a short period in one call).
    for n in [N, 7, 100] {
        let ins: Vec<&[u8]> = inputs.iter().map(|b| &b[..]).collect();
        let mut jit_out: Vec<Vec<u8>> = kernel
            .outputs
            .iter()
            .map(|(t, _)| vec![0u8; n * t.size()])
            .collect();
        let mut ref_out = jit_out.clone();
        {
            let mut outs: Vec<&mut [u8]> = jit_out.iter_mut().map(|b| &mut b[..]).collect();
            cache
                .table()
                .get(id)
                .run_elementwise(&ins, &mut outs, n)
                .unwrap();
        }
        {
            let mut outs: Vec<&mut [u8]> = ref_out.iter_mut().map(|b| &mut b[..]).collect();
            reference::run_elementwise(&kernel, &ins, &mut outs, n);
        }
        // The code called straight gives the same bytes; every kernel without f16 has it
        // (those in stages at transcendental ops, and those reading an input repeated, run
        // a chunk at a time inside the call).
        let table = cache.table();
        let not_plain = (kernel.inputs.iter())
            .chain(kernel.outputs.iter().map(|(t, _)| t))
            .any(|t| *t == DType::F16);
        match table.get(id).plain_elementwise() {
            Some(plain) => {
                let mut plain_out: Vec<Vec<u8>> =
                    jit_out.iter().map(|b| vec![0; b.len()]).collect();
                let in_ptrs: Vec<*const u8> = ins.iter().map(|b| b.as_ptr()).collect();
                let out_ptrs: Vec<*mut u8> = plain_out.iter_mut().map(|b| b.as_mut_ptr()).collect();
                // SAFETY: one pointer per operand, each buffer holding n elements of its
                // type; the outputs are fresh buffers.
                unsafe { plain.call(&in_ptrs, &out_ptrs, n) };
                assert_eq!(plain_out, jit_out, "{kernel:?}, n = {n}");
            }
            None => assert!(not_plain, "{kernel:?} has no plain code"),
        }
        for (o, (t, _)) in kernel.outputs.iter().enumerate() {
            for i in 0..n {
                let got = load(*t, &jit_out[o], i);
                let want = load(*t, &ref_out[o], i);
                assert!(
                    same(got, want),
                    "{kernel:?}\nn = {n}, element {i}: inputs {:?}: JIT {got:?}, expected {want:?}",
                    kernel
                        .inputs
                        .iter()
                        .enumerate()
                        .map(|(k, t)| load(*t, &inputs[k], i))
                        .collect::<Vec<_>>()
                );
            }
        }
    }
}

const UNARY: [UnaryOp; 25] = [
    UnaryOp::Abs,
    UnaryOp::Neg,
    UnaryOp::Sign,
    UnaryOp::Floor,
    UnaryOp::Ceil,
    UnaryOp::RoundAfz,
    UnaryOp::RoundEven,
    UnaryOp::Exp,
    UnaryOp::Expm1,
    UnaryOp::Log,
    UnaryOp::Log1p,
    UnaryOp::Tanh,
    UnaryOp::Logistic,
    UnaryOp::Sqrt,
    UnaryOp::Rsqrt,
    UnaryOp::Cbrt,
    UnaryOp::Sin,
    UnaryOp::Cos,
    UnaryOp::Tan,
    UnaryOp::Erf,
    UnaryOp::Not,
    UnaryOp::IsFinite,
    UnaryOp::Popcnt,
    UnaryOp::Clz,
    UnaryOp::RoundF16,
];

const BINARY: [BinaryOp; 15] = [
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Div,
    BinaryOp::Rem,
    BinaryOp::Pow,
    BinaryOp::Atan2,
    BinaryOp::Max,
    BinaryOp::Min,
    BinaryOp::And,
    BinaryOp::Or,
    BinaryOp::Xor,
    BinaryOp::Shl,
    BinaryOp::ShrArithmetic,
    BinaryOp::ShrLogical,
];

const TYPES: [DType; 5] = [DType::F32, DType::F16, DType::S32, DType::U32, DType::Pred];

#[test]
fn every_unary_op_on_every_type() {
    let mut cache = KernelCache::new().unwrap();
    let mut checked = 0;
    for t in TYPES {
        for op in UNARY {
            let expr = Expr::unary(op, Expr::input(0));
            let Ok(out) = codegen::jit::result_type(&expr, &[t]) else {
                continue;
            };
            let out = if t == DType::F16 && out == DType::F32 {
                DType::F16
            } else {
                out
            };
            check(
                &mut cache,
                ElementwiseKernel {
                    inputs: vec![t],
                    outputs: vec![(out, expr)],
                    repeats: Vec::new(),
                },
            );
            checked += 1;
        }
    }
    assert!(checked >= 50, "only {checked} unary cases were valid");
}

#[test]
fn every_binary_and_compare_op_on_every_type() {
    let mut cache = KernelCache::new().unwrap();
    for t in TYPES {
        for op in BINARY {
            let expr = Expr::binary(op, Expr::input(0), Expr::input(1));
            let Ok(out) = codegen::jit::result_type(&expr, &[t, t]) else {
                continue;
            };
            let out = if t == DType::F16 { DType::F16 } else { out };
            check(
                &mut cache,
                ElementwiseKernel {
                    inputs: vec![t, t],
                    outputs: vec![(out, expr)],
                    repeats: Vec::new(),
                },
            );
        }
        for op in [
            CmpOp::Eq,
            CmpOp::Ne,
            CmpOp::Lt,
            CmpOp::Le,
            CmpOp::Gt,
            CmpOp::Ge,
        ] {
            let expr = Expr::compare(op, Expr::input(0), Expr::input(1));
            check(
                &mut cache,
                ElementwiseKernel {
                    inputs: vec![t, t],
                    outputs: vec![(DType::Pred, expr)],
                    repeats: Vec::new(),
                },
            );
        }
    }
}

#[test]
fn conversions_between_every_pair_of_types() {
    let mut cache = KernelCache::new().unwrap();
    for from in TYPES {
        for to in TYPES {
            let expr = Expr::Convert(to, Box::new(Expr::input(0)));
            check(
                &mut cache,
                ElementwiseKernel {
                    inputs: vec![from],
                    outputs: vec![(to, expr)],
                    repeats: Vec::new(),
                },
            );
        }
    }
}

#[test]
fn select_clamp_and_fused_expressions() {
    let mut cache = KernelCache::new().unwrap();
    let x = || Expr::input(0);
    let y = || Expr::input(1);
    // A GELU-like fused expression: vectorised end to end.
    let gelu = Expr::binary(
        BinaryOp::Mul,
        Expr::binary(BinaryOp::Mul, Expr::f32(0.5), x()),
        Expr::binary(
            BinaryOp::Add,
            Expr::f32(1.0),
            Expr::unary(
                UnaryOp::Tanh,
                Expr::binary(BinaryOp::Mul, Expr::f32(0.797_884_6), x()),
            ),
        ),
    );
    let relu_select = Expr::Select(
        Box::new(Expr::compare(CmpOp::Gt, x(), y())),
        Box::new(x()),
        Box::new(Expr::f32(0.0)),
    );
    let clamp = Expr::Clamp(
        Box::new(Expr::f32(-1.0)),
        Box::new(x()),
        Box::new(Expr::f32(1.0)),
    );
    let two_outputs = ElementwiseKernel {
        inputs: vec![DType::F32, DType::F32],
        outputs: vec![
            (DType::F32, gelu),
            (DType::F32, relu_select),
            (DType::F32, clamp),
        ],
        repeats: Vec::new(),
    };
    check(&mut cache, two_outputs);
    let int_clamp = Expr::Clamp(
        Box::new(Expr::S32(-5)),
        Box::new(x()),
        Box::new(Expr::S32(5)),
    );
    check(
        &mut cache,
        ElementwiseKernel {
            inputs: vec![DType::S32],
            outputs: vec![(DType::S32, int_clamp)],
            repeats: Vec::new(),
        },
    );
    let mixed = Expr::Select(
        Box::new(Expr::input(2)),
        Box::new(Expr::Convert(DType::F32, Box::new(Expr::input(1)))),
        Box::new(Expr::input(0)),
    );
    check(
        &mut cache,
        ElementwiseKernel {
            inputs: vec![DType::F16, DType::S32, DType::Pred],
            outputs: vec![(DType::F16, mixed)],
            repeats: Vec::new(),
        },
    );
    // A fused f16 GELU: every f16 op's value rounded (`RoundF16`), so it runs in stages
    // rounded with F16C; a second output reads an f32 input beside the rounded values and
    // writes f32, a third compares a rounded value.
    let r = |e: Expr| Expr::unary(UnaryOp::RoundF16, e);
    let cube = r(Expr::binary(
        BinaryOp::Mul,
        r(Expr::binary(BinaryOp::Mul, x(), x())),
        x(),
    ));
    let inner = r(Expr::binary(
        BinaryOp::Mul,
        Expr::f32(0.797_9),
        r(Expr::binary(
            BinaryOp::Add,
            x(),
            r(Expr::binary(BinaryOp::Mul, Expr::f32(0.044_7), cube)),
        )),
    ));
    let f16_gelu = Expr::binary(
        BinaryOp::Mul,
        r(Expr::binary(BinaryOp::Mul, Expr::f32(0.5), x())),
        r(Expr::binary(
            BinaryOp::Add,
            Expr::f32(1.0),
            r(Expr::unary(UnaryOp::Tanh, inner)),
        )),
    );
    let scaled = Expr::binary(
        BinaryOp::Mul,
        r(Expr::unary(UnaryOp::Exp, x())),
        Expr::input(1),
    );
    let positive = Expr::compare(
        CmpOp::Gt,
        r(Expr::binary(BinaryOp::Sub, x(), y())),
        Expr::f32(0.0),
    );
    check(
        &mut cache,
        ElementwiseKernel {
            inputs: vec![DType::F16, DType::F32],
            outputs: vec![
                (DType::F16, f16_gelu),
                (DType::F32, scaled),
                (DType::Pred, positive),
            ],
            repeats: Vec::new(),
        },
    );
    // Inputs read repeated (a broadcast read in place): each element of the repeated input
    // serves `R` consecutive elements, for every storage type, through chunks (N > 2048)
    // and with f16 values rounded in stages.
    let minus_row = |t| ElementwiseKernel {
        inputs: vec![t, t],
        outputs: vec![(t, Expr::binary(BinaryOp::Sub, x(), y()))],
        repeats: vec![1, 7],
    };
    for t in [DType::F32, DType::F16, DType::S32, DType::U32] {
        check(&mut cache, minus_row(t));
    }
    // Three inputs read repeated: more than a small call expands on the stack.
    check(
        &mut cache,
        ElementwiseKernel {
            inputs: vec![DType::F32; 4],
            outputs: vec![(
                DType::F32,
                Expr::binary(
                    BinaryOp::Add,
                    Expr::binary(BinaryOp::Mul, x(), y()),
                    Expr::binary(BinaryOp::Sub, Expr::input(2), Expr::input(3)),
                ),
            )],
            repeats: vec![2, 3, 1, 5],
        },
    );
    check(
        &mut cache,
        ElementwiseKernel {
            inputs: vec![DType::Pred, DType::F32, DType::F32],
            outputs: vec![(
                DType::F32,
                Expr::Select(Box::new(x()), Box::new(y()), Box::new(Expr::input(2))),
            )],
            repeats: vec![384, 1, 3],
        },
    );
    check(
        &mut cache,
        ElementwiseKernel {
            inputs: vec![DType::F16, DType::F16],
            outputs: vec![(
                DType::F16,
                Expr::unary(UnaryOp::Exp, r(Expr::binary(BinaryOp::Sub, x(), y()))),
            )],
            repeats: vec![1, 384],
        },
    );
    // f32 with a transcendental op and a repeated input: stages and expansion in one call.
    check(
        &mut cache,
        ElementwiseKernel {
            inputs: vec![DType::F32, DType::F32],
            outputs: vec![(
                DType::F32,
                Expr::unary(UnaryOp::Exp, Expr::binary(BinaryOp::Sub, x(), y())),
            )],
            repeats: vec![1, 384],
        },
    );
}

#[test]
fn reductions_match_the_reference_order_exactly() {
    let mut cache = KernelCache::new().unwrap();
    let ops = [
        ReduceOp::Sum,
        ReduceOp::Product,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::And,
        ReduceOp::Or,
    ];
    // The inits: none, and bits that are +0, -0, 3.5 or 1 in the partial types.
    let inits = [
        None,
        Some(0),
        Some(0x8000_0000),
        Some(3.5f32.to_bits()),
        Some(1),
    ];
    for (t, op, init) in TYPES
        .iter()
        .flat_map(|&t| ops.map(|op| (t, op)))
        .flat_map(|(t, op)| inits.map(|init| (t, op, init)))
    {
        {
            let kernel = ReduceKernel { op, input: t, init };
            let Ok(id) = cache.compile(&KernelSpec::Reduce(kernel.clone())) else {
                assert!(matches!(
                    (op, t),
                    (ReduceOp::And | ReduceOp::Or, DType::F32 | DType::F16)
                        | (ReduceOp::Sum | ReduceOp::Product, DType::Pred)
                ));
                continue;
            };
            let input = buffer(t, 3);
            for (run_length, runs) in [(N / 3, 3), (5, 100), (0, 4), (1, 9)] {
                let pt = kernel.partial_type();
                let mut got = vec![0u8; runs * pt.size()];
                let mut want = got.clone();
                cache
                    .table()
                    .get(id)
                    .run_reduce(&input, &mut got, run_length, runs)
                    .unwrap();
                reference::run_reduce(&kernel, &input, &mut want, run_length, runs);
                // The code called straight writes the same bytes; every input type but f16
                // (widened first) has it.
                match cache.table().get(id).plain_reduce() {
                    Some(plain) => {
                        let mut straight = vec![0u8; got.len()];
                        // SAFETY: `input` holds N ≥ run_length × runs elements of `t`;
                        // `straight` holds `runs` partials and is its own buffer.
                        unsafe {
                            plain.call(input.as_ptr(), straight.as_mut_ptr(), run_length, runs)
                        };
                        assert_eq!(straight, got, "{kernel:?} run_length {run_length}");
                    }
                    None => assert_eq!(t, DType::F16, "{kernel:?} has no straight code"),
                }
                for r in 0..runs {
                    let (g, w) = (load(pt, &got, r), load(pt, &want, r));
                    assert!(
                        same(g, w),
                        "{kernel:?} run_length {run_length} run {r}: JIT {g:?}, reference {w:?}"
                    );
                }
            }
        }
    }
}

/// An f32 sum starts from -0, the identity of addition, so a run of -0 sums to -0 (as XLA's
/// reduction from an init of -0 does) and other runs are unchanged by the start; an init of
/// +0 combined last makes that -0 a +0, as XLA's reduction from +0 gives.
#[test]
fn sums_of_negative_zeros_keep_their_sign_until_an_init_is_combined() {
    let mut cache = KernelCache::new().unwrap();
    let zeros: Vec<u8> = [-0.0f32; 9].iter().flat_map(|v| v.to_le_bytes()).collect();
    for (input, init, want) in [
        (&zeros, None, -0.0f32),
        (&zeros, Some(0x8000_0000), -0.0),
        (&zeros, Some(0), 0.0),
    ] {
        let kernel = ReduceKernel {
            op: ReduceOp::Sum,
            input: DType::F32,
            init,
        };
        let id = cache.compile(&KernelSpec::Reduce(kernel.clone())).unwrap();
        let (mut got, mut reference_got) = (vec![0u8; 12], vec![0u8; 12]);
        cache
            .table()
            .get(id)
            .run_reduce(input, &mut got, 3, 3)
            .unwrap();
        reference::run_reduce(&kernel, input, &mut reference_got, 3, 3);
        for out in [&got, &reference_got] {
            for r in 0..3 {
                let v = f32::from_le_bytes(out[r * 4..r * 4 + 4].try_into().unwrap());
                assert_eq!(v.to_bits(), want.to_bits(), "{init:?}: run {r} is {v}");
            }
        }
    }
}

#[test]
fn kernels_are_cached_and_bad_calls_are_errors() {
    let mut cache = KernelCache::new().unwrap();
    let spec = KernelSpec::Elementwise(ElementwiseKernel {
        inputs: vec![DType::F32],
        outputs: vec![(DType::F32, Expr::unary(UnaryOp::Exp, Expr::input(0)))],
        repeats: Vec::new(),
    });
    let a = cache.compile(&spec).unwrap();
    let b = cache.compile(&spec).unwrap();
    assert_eq!(a, b);
    assert_eq!(cache.table().len(), 1);
    let short = vec![0u8; 8];
    let mut out = vec![0u8; 16];
    let err = cache
        .table()
        .get(a)
        .run_elementwise(&[&short], &mut [&mut out], 4)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("input 0 holds 8 bytes but the kernel needs 16"),
        "{err}"
    );
    let ill_typed = KernelSpec::Elementwise(ElementwiseKernel {
        inputs: vec![DType::S32],
        outputs: vec![(DType::F32, Expr::unary(UnaryOp::Exp, Expr::input(0)))],
        repeats: Vec::new(),
    });
    assert!(
        cache
            .compile(&ill_typed)
            .unwrap_err()
            .to_string()
            .contains("Exp does not apply to S32")
    );
    let sum_of_preds = KernelSpec::Reduce(ReduceKernel::new(ReduceOp::Sum, DType::Pred));
    assert!(cache.compile(&sum_of_preds).is_err());
}

#[test]
fn matrix_product_partials_match_an_f64_reference() {
    let mut cache = KernelCache::new().unwrap();
    for (m, k, n) in [
        (1, 1, 1),
        (7, 13, 5),
        (64, 64, 64),
        (33, 100, 17),
        (4, 0, 3),
    ] {
        for input in [DType::F32, DType::F16] {
            let mm = codegen::MatMulKernel {
                m,
                k,
                n,
                input,
                partials: codegen::DType::F32,
            };
            let native = cache.compile(&KernelSpec::MatMul(mm.clone())).unwrap();
            let jit = cache.compile_jit_matmul(&mm).unwrap();
            for id in [native, jit] {
                let a_vals: Vec<f32> = (0..m * k)
                    .map(|i| ((i * 37 % 19) as f32 - 9.0) * 0.125)
                    .collect();
                let b_vals: Vec<f32> = (0..k * n)
                    .map(|i| ((i * 11 % 23) as f32 - 11.0) * 0.25)
                    .collect();
                let bytes = |v: &[f32]| -> Vec<u8> {
                    let mut out = vec![0u8; v.len() * input.size()];
                    for (i, x) in v.iter().enumerate() {
                        store(input, &mut out, i, Scalar::F32(*x));
                    }
                    out
                };
                let mut c = vec![0u8; m * n * 4];
                cache
                    .table()
                    .get(id)
                    .run_matmul(&bytes(&a_vals), &bytes(&b_vals), &mut c)
                    .unwrap();
                for i in 0..m {
                    for j in 0..n {
                        let exact: f64 = (0..k)
                            .map(|p| a_vals[i * k + p] as f64 * b_vals[p * n + j] as f64)
                            .sum();
                        let scale: f64 = (0..k)
                            .map(|p| (a_vals[i * k + p] as f64 * b_vals[p * n + j] as f64).abs())
                            .sum();
                        let Scalar::F32(got) = load(DType::F32, &c, i * n + j) else {
                            unreachable!()
                        };
                        assert!(
                            (got as f64 - exact).abs() <= 1e-6 * scale + 1e-30,
                            "{m}x{k}x{n} {input:?} C[{i},{j}] = {got}, expected {exact}"
                        );
                    }
                }
            }
        }
    }
    let ints = KernelSpec::MatMul(codegen::MatMulKernel {
        m: 2,
        k: 2,
        n: 2,
        input: DType::S32,
        partials: codegen::DType::F32,
    });
    assert!(cache.compile(&ints).is_err());
}

/// A sum of products starts at +0 as XLA's does, so it is never -0 even when every product
/// is (0 × -1, or a padding position's zero times a negative weight): both product kernels
/// (narrow and `gemm`) and every width.
#[test]
fn sums_of_negative_zero_products_are_positive_zero() {
    for (m, k, n) in [(1, 1, 1), (2, 2, 3), (3, 9, 2), (16, 40, 24)] {
        let a = vec![-0.0f32; m * k];
        let b = vec![1.0f32; k * n];
        let mut c = vec![f32::NAN; m * n];
        codegen::gemm_f32(m, k, n, &a, &b, &mut c);
        assert!(
            c.iter().all(|x| x.to_bits() == 0),
            "{m}x{k}x{n}: {:?}",
            &c[..c.len().min(4)]
        );
    }
}
