//! XLA's ops that ipuxla reads as foreign run where their meaning is known: async chains
//! as their synchronous op, `copy-start`/`copy-done` as a copy, `add-dependency` as its
//! operand, `all-reduce-start`/`-done` as the all-reduce, host transfers as feeds and batch
//! norm as its arithmetic (`xla_ir::expand`, on the reference evaluator and on the IPU
//! Model); `cholesky`, `triangular-solve`, complex arithmetic and `fft` on the evaluator;
//! each matching its formula. The rest are refused by name. Modules come from XLA's parser
//! tests (`fixtures/xla-parser/`).

mod common;
use common::{fixture, leaves};

use xla_ir::literal::{ArrayData, ArrayLiteral};
use xla_ir::{ArrayShape, ElementType, Literal, Module};

fn module(path: &str) -> Module {
    let text = std::fs::read_to_string(fixture(&format!("xla-parser/{path}"))).unwrap();
    xla_ir::parse_module(&text).unwrap()
}

fn f32s(dims: &[i64], v: &[f32]) -> Literal {
    Literal::Array(
        ArrayLiteral::new(
            ArrayShape::new(ElementType::F32, dims),
            ArrayData::F32(v.to_vec()),
        )
        .unwrap(),
    )
}

fn s32s(dims: &[i64], v: &[i32]) -> Literal {
    Literal::Array(
        ArrayLiteral::new(
            ArrayShape::new(ElementType::S32, dims),
            ArrayData::S32(v.to_vec()),
        )
        .unwrap(),
    )
}

fn values(a: &ArrayLiteral) -> Vec<f64> {
    match &a.data {
        ArrayData::F32(v) => v.iter().map(|&x| x as f64).collect(),
        ArrayData::S32(v) => v.iter().map(|&x| x as f64).collect(),
        other => panic!("unexpected {:?}", other.element_type()),
    }
}

/// The evaluator's and the IPU Model's results, each as flat values per output.
fn both(m: &Module, args: &[Literal]) -> (Vec<Vec<f64>>, Vec<Vec<f64>>) {
    let eval = leaves(xla_ir::eval::evaluate(m, args).unwrap());
    let mut config = ipuxla::compiler::IpuConfig::default();
    config.ipu_model.tiles_per_ipu = 4;
    let run = ipuxla::device::run_on_ipu_model(m, &config, args).unwrap();
    (
        eval.iter().map(values).collect(),
        run.outputs.iter().map(values).collect(),
    )
}

fn close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
            "{what}[{i}]: {g} vs {w}"
        );
    }
}

/// `x` laid out `[n, c]` by feature (`feature_index` is the last dimension here).
fn per_feature(x: &[f64], c: usize) -> Vec<Vec<f64>> {
    (0..c)
        .map(|f| x.iter().skip(f).step_by(c).copied().collect())
        .collect()
}

#[test]
fn batch_norm_training_is_its_arithmetic_on_both_engines() {
    let m = module("accept/BatchNormTraining.hlo");
    let x: Vec<f64> = (1..=8).map(f64::from).collect();
    let (scale, offset, eps) = ([2.0, 3.0], [1.0, 2.0], 0.001);
    let columns = per_feature(&x, 2);
    let mean: Vec<f64> = columns
        .iter()
        .map(|c| c.iter().sum::<f64>() / 4.0)
        .collect();
    let var: Vec<f64> = columns
        .iter()
        .zip(&mean)
        .map(|(c, m)| c.iter().map(|v| v * v).sum::<f64>() / 4.0 - m * m)
        .collect();
    let y: Vec<f64> = x
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let f = i % 2;
            (v - mean[f]) / (var[f] + eps).sqrt() * scale[f] + offset[f]
        })
        .collect();
    let (eval, ipu) = both(&m, &[]);
    for got in [&eval, &ipu] {
        close(&got[0], &y, "normalised");
        close(&got[1], &mean, "mean");
        close(&got[2], &var, "variance");
    }
}

#[test]
fn batch_norm_inference_and_grad_are_their_arithmetic() {
    let x: Vec<f32> = (0..16).map(|i| (i as f32) * 0.5 - 3.0).collect();
    let (offset, scale, mean, var) = (
        [0.5f32, -1.0],
        [2.0f32, 0.5],
        [0.25f32, -0.5],
        [1.5f32, 0.75],
    );
    let eps = 0.001f64;
    // feature_index=0 on f32[2,2,2,2]: the feature is the outermost dimension.
    let feature = |i: usize| i / 8;
    // XLA's operand order is (operand, scale, offset, mean, variance), whatever the
    // fixture's parameter names say.
    let args = [
        f32s(&[2, 2, 2, 2], &x),
        f32s(&[2], &scale),
        f32s(&[2], &offset),
        f32s(&[2], &mean),
        f32s(&[2], &var),
    ];
    let want: Vec<f64> = x
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let f = feature(i);
            (v as f64 - mean[f] as f64) / (var[f] as f64 + eps).sqrt() * scale[f] as f64
                + offset[f] as f64
        })
        .collect();
    let (eval, ipu) = both(&module("accept/BatchNormInference.hlo"), &args);
    close(&eval[0], &want, "inference (evaluator)");
    close(&ipu[0], &want, "inference (IPU Model)");

    let g: Vec<f32> = (0..16).map(|i| ((i * 7) % 5) as f32 - 2.0).collect();
    let args = [
        f32s(&[2, 2, 2, 2], &x),
        f32s(&[2], &scale),
        f32s(&[2], &mean),
        f32s(&[2], &var),
        f32s(&[2, 2, 2, 2], &g),
    ];
    let n = 8.0;
    let mut grad_offset = [0.0f64; 2];
    let mut sum_gc = [0.0f64; 2];
    for i in 0..16 {
        let f = feature(i);
        grad_offset[f] += g[i] as f64;
        sum_gc[f] += g[i] as f64 * (x[i] as f64 - mean[f] as f64);
    }
    let r = |f: usize| 1.0 / (var[f] as f64 + eps).sqrt();
    let grad_scale: Vec<f64> = (0..2).map(|f| sum_gc[f] * r(f)).collect();
    let grad_x: Vec<f64> = (0..16)
        .map(|i| {
            let f = feature(i);
            let centred = x[i] as f64 - mean[f] as f64;
            scale[f] as f64 * r(f) / n
                * (g[i] as f64 * n - grad_offset[f] - centred * sum_gc[f] / (var[f] as f64 + eps))
        })
        .collect();
    let (eval, ipu) = both(&module("accept/BatchNormGrad.hlo"), &args);
    for (got, engine) in [(&eval, "evaluator"), (&ipu, "IPU Model")] {
        close(&got[0], &grad_x, &format!("grad x ({engine})"));
        close(&got[1], &grad_scale, &format!("grad scale ({engine})"));
        close(&got[2], &grad_offset, &format!("grad offset ({engine})"));
    }
}

#[test]
fn async_chains_copies_and_dependencies_run_synchronously() {
    // async-start calls a computation: a dynamic-update-slice of a broadcast.
    let m = module("accept-unverified/NontrivialAsyncOpRoundTrip.hlo");
    let update: Vec<i32> = (0..256).collect();
    let args = [s32s(&[256], &update), s32s(&[], &[7])];
    let mut want = vec![7.0; 1024];
    for (i, u) in update.iter().enumerate() {
        want[7 + i] = *u as f64;
    }
    let (eval, ipu) = both(&m, &args);
    close(&eval[0], &want, "async-start/done (evaluator)");
    close(&ipu[0], &want, "async-start/done (IPU Model)");

    // copy-start/copy-done is a copy; add-dependency its operand.
    let m = module("accept/CopyStartAndCopyDone.hlo");
    let (eval, _) = both(
        &m,
        &[f32s(&[], &[2.5]), f32s(&[2, 3], &[1., 2., 3., 4., 5., 6.])],
    );
    assert_eq!(eval, vec![vec![2.5], vec![1., 2., 3., 4., 5., 6.]]);
    let m = module("accept/AddDependency.hlo");
    let (eval, ipu) = both(&m, &[f32s(&[], &[0.5])]);
    let want = [-0.5 + 0.5f64.exp()];
    close(&eval[0], &want, "add-dependency (evaluator)");
    close(&ipu[0], &want, "add-dependency (IPU Model)");

    // all-reduce-start/done on one replica: the all-reduce of one value is itself.
    let m = module("accept/AllReduceStartAndDone.hlo");
    let x: Vec<f32> = (0..8).map(|i| i as f32).collect();
    let (eval, ipu) = both(&m, &[f32s(&[8], &x)]);
    let want: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    assert_eq!(eval[0], want);
    assert_eq!(ipu[0], want);
}

fn parse(text: &str) -> Module {
    xla_ir::parse_module(text).unwrap()
}

/// `rows x cols` row-major product of two matrices.
fn matmul(a: &[f64], b: &[f64], rows: usize, inner: usize, cols: usize) -> Vec<f64> {
    let mut out = vec![0.0; rows * cols];
    for i in 0..rows {
        for j in 0..cols {
            out[i * cols + j] = (0..inner).map(|k| a[i * inner + k] * b[k * cols + j]).sum();
        }
    }
    out
}

fn transposed(a: &[f64], n: usize) -> Vec<f64> {
    (0..n * n).map(|i| a[(i % n) * n + i / n]).collect()
}

#[test]
fn cholesky_and_triangular_solve_run_on_the_evaluator() {
    let a = [4.0f32, 2.0, 0.4, 2.0, 5.0, 1.0, 0.4, 1.0, 3.0];
    let a64: Vec<f64> = a.iter().map(|&x| x as f64).collect();
    for (lower, text) in [(true, "true"), (false, "false")] {
        let m = parse(&format!(
            "HloModule m\nENTRY e {{\n  a = f32[3,3] parameter(0)\n  ROOT c = f32[3,3] cholesky(a), lower={text}\n}}\n"
        ));
        let l = values(&leaves(xla_ir::eval::evaluate(&m, &[f32s(&[3, 3], &a)]).unwrap())[0]);
        // a = l l^T (lower) or u^T u (upper); the other triangle is zero.
        let product = if lower {
            matmul(&l, &transposed(&l, 3), 3, 3, 3)
        } else {
            matmul(&transposed(&l, 3), &l, 3, 3, 3)
        };
        close(&product, &a64, "cholesky reproduces a");
        for i in 0..3 {
            for j in 0..3 {
                if (lower && j > i) || (!lower && i > j) {
                    assert_eq!(l[i * 3 + j], 0.0);
                }
            }
        }
    }

    // XLA's TriangularSolve test: x a = b with a lower triangular.
    let a = [
        2.0f32, 0.0, 0.0, 0.0, 1.0, 3.0, 0.0, 0.0, 0.5, -1.0, 4.0, 0.0, 1.0, 2.0, 0.5, 1.5,
    ];
    let b: Vec<f32> = (0..12).map(|i| i as f32 - 4.0).collect();
    let m = module("accept/TriangularSolve.hlo");
    let x = values(
        &leaves(xla_ir::eval::evaluate(&m, &[f32s(&[4, 4], &a), f32s(&[3, 4], &b)]).unwrap())[0],
    );
    let a64: Vec<f64> = a.iter().map(|&v| v as f64).collect();
    let b64: Vec<f64> = b.iter().map(|&v| v as f64).collect();
    close(&matmul(&x, &a64, 3, 4, 4), &b64, "x a = b");
    // Left side, transposed, upper triangle read (the lower one ignored): a^T x = b.
    let m = parse(
        "HloModule m\nENTRY e {\n  a = f32[4,4] parameter(0)\n  b = f32[4,3] parameter(1)\n  ROOT x = f32[4,3] triangular-solve(a, b), left_side=true, lower=false, transpose_a=TRANSPOSE\n}\n",
    );
    let upper = transposed(&a64, 4);
    let upper32: Vec<f32> = upper.iter().map(|&v| v as f32).collect();
    let x = values(
        &leaves(xla_ir::eval::evaluate(&m, &[f32s(&[4, 4], &upper32), f32s(&[4, 3], &b)]).unwrap())
            [0],
    );
    close(
        &matmul(&transposed(&upper, 4), &x, 4, 4, 3),
        &b64,
        "a^T x = b",
    );
}

#[test]
fn what_stays_foreign_is_refused_by_name() {
    let m = module("accept/Rng.hlo");
    let err = xla_ir::eval::evaluate(&m, &[]).unwrap_err().to_string();
    assert!(err.contains("Unsupported: rng"), "{err}");
    let m = module("accept/TriangularSolve.hlo");
    let args = [f32s(&[4, 4], &[1.0; 16]), f32s(&[3, 4], &[1.0; 12])];
    let config = ipuxla::compiler::IpuConfig::default();
    let err = format!(
        "{:#}",
        ipuxla::device::run_on_ipu_model(&m, &config, &args).unwrap_err()
    );
    assert!(err.contains("triangular-solve"), "{err}");
    // A custom call wrapped in async sugar becomes the custom call, refused by target.
    let m = module("accept/AsyncOpsWithSyntaxSugar.hlo");
    let err = xla_ir::eval::evaluate(&m, &[f32s(&[10], &[0.0; 10])])
        .unwrap_err()
        .to_string();
    assert!(err.contains("custom-call target \"foo\""), "{err}");
}

fn c64s(dims: &[i64], v: &[(f32, f32)]) -> Literal {
    let data = ArrayData::C64(v.iter().map(|&(r, i)| [r, i]).collect());
    Literal::Array(ArrayLiteral::new(ArrayShape::new(ElementType::C64, dims), data).unwrap())
}

fn complex_values(a: &ArrayLiteral) -> Vec<(f64, f64)> {
    match &a.data {
        ArrayData::C64(v) => v.iter().map(|x| (x[0] as f64, x[1] as f64)).collect(),
        other => panic!("expected c64, found {:?}", other.element_type()),
    }
}

fn close_complex(got: &[(f64, f64)], want: &[(f64, f64)], what: &str) {
    let flat = |v: &[(f64, f64)]| v.iter().flat_map(|&(r, i)| [r, i]).collect::<Vec<_>>();
    close(&flat(got), &flat(want), what);
}

#[test]
fn complex_arithmetic_and_ffts_run_on_the_evaluator() {
    let m = parse(
        "HloModule m\nENTRY e {\n  a = c64[2] parameter(0)\n  b = c64[2] parameter(1)\n  m = c64[2] multiply(a, b)\n  d = c64[2] divide(m, b)\n  r = f32[2] real(m)\n  i = f32[2] imag(m)\n  n = f32[2] abs(a)\n  c = c64[2] complex(r, i)\n  ROOT t = (c64[2], c64[2], f32[2], f32[2], f32[2], c64[2]) tuple(m, d, r, i, n, c)\n}\n",
    );
    let a = [(1.0, 2.0), (3.0, 0.0)];
    let b = [(3.0, -1.0), (0.0, 1.0)];
    let out = leaves(xla_ir::eval::evaluate(&m, &[c64s(&[2], &a), c64s(&[2], &b)]).unwrap());
    close_complex(&complex_values(&out[0]), &[(5.0, 5.0), (0.0, 3.0)], "a * b");
    close_complex(
        &complex_values(&out[1]),
        &[(1.0, 2.0), (3.0, 0.0)],
        "a * b / b",
    );
    close(&values(&out[2]), &[5.0, 0.0], "real");
    close(&values(&out[3]), &[5.0, 3.0], "imag");
    close(&values(&out[4]), &[5f64.sqrt(), 3.0], "abs");
    close_complex(
        &complex_values(&out[5]),
        &[(5.0, 5.0), (0.0, 3.0)],
        "complex(re, im)",
    );

    // Data movement carries complex values as they are.
    let m = parse(
        "HloModule m\nENTRY e {\n  a = c64[2] parameter(0)\n  b = c64[2] parameter(1)\n  k = c64[2,2] broadcast(a), dimensions={1}\n  t = c64[2,2] transpose(k), dimensions={1,0}\n  r = c64[4] reshape(t)\n  s = c64[2] slice(r), slice={[1:3]}\n  v = c64[2] reverse(s), dimensions={0}\n  c = c64[4] concatenate(v, b), dimensions={0}\n  p = pred[4] compare(c, c), direction=EQ\n  ROOT x = c64[4] select(p, c, c)\n}\n",
    );
    let out = leaves(xla_ir::eval::evaluate(&m, &[c64s(&[2], &a), c64s(&[2], &b)]).unwrap());
    // t = [[a0, a0], [a1, a1]]; r = [a0, a0, a1, a1]; s = [a0, a1]; v = [a1, a0].
    close_complex(
        &complex_values(&out[0]),
        &[(3.0, 0.0), (1.0, 2.0), (3.0, -1.0), (0.0, 1.0)],
        "moved complex values",
    );

    // The DFT of [1, 2, 3, 4] is [10, -2+2i, -2, -2-2i]; the inverse gives it back; the
    // real forms keep half the spectrum.
    let m = parse(
        "HloModule m\nENTRY e {\n  x = f32[4] parameter(0)\n  c = c64[4] convert(x)\n  f = c64[4] fft(c), fft_type=FFT, fft_length={4}\n  b = c64[4] fft(f), fft_type=IFFT, fft_length={4}\n  r = c64[3] fft(x), fft_type=RFFT, fft_length={4}\n  ir = f32[4] fft(r), fft_type=IRFFT, fft_length={4}\n  ROOT t = (c64[4], c64[4], c64[3], f32[4]) tuple(f, b, r, ir)\n}\n",
    );
    let out = leaves(xla_ir::eval::evaluate(&m, &[f32s(&[4], &[1.0, 2.0, 3.0, 4.0])]).unwrap());
    let spectrum = [(10.0, 0.0), (-2.0, 2.0), (-2.0, 0.0), (-2.0, -2.0)];
    close_complex(&complex_values(&out[0]), &spectrum, "FFT");
    close_complex(
        &complex_values(&out[1]),
        &[(1.0, 0.0), (2.0, 0.0), (3.0, 0.0), (4.0, 0.0)],
        "IFFT(FFT(x))",
    );
    close_complex(&complex_values(&out[2]), &spectrum[..3], "RFFT");
    close(&values(&out[3]), &[1.0, 2.0, 3.0, 4.0], "IRFFT(RFFT(x))");

    // XLA's 2-D inverse FFT test module: an impulse at the origin of each 8x32 plane
    // transforms to 1/(8*32) everywhere.
    let m = module("accept/Ifft2d.hlo");
    let mut x = vec![(0.0f32, 0.0f32); 5 * 8 * 32];
    for p in 0..5 {
        x[p * 256] = (1.0, 0.0);
    }
    let out = leaves(xla_ir::eval::evaluate(&m, &[c64s(&[5, 8, 32], &x)]).unwrap());
    let want = vec![(1.0 / 256.0, 0.0); 5 * 256];
    close_complex(&complex_values(&out[0]), &want, "IFFT2D of impulses");

    // Complex values never reach the IPU: refused by name.
    let config = ipuxla::compiler::IpuConfig::default();
    let err = format!(
        "{:#}",
        ipuxla::device::run_on_ipu_model(&m, &config, &[c64s(&[5, 8, 32], &x)]).unwrap_err()
    );
    assert!(err.contains("c64 values"), "{err}");
}

#[test]
fn host_transfers_are_feeds_named_by_channel() {
    // recv(channel 15) from the host is an infeed; send(channel 16) to it an outfeed.
    let m = module("accept/SendRecvWithHostTransfer.hlo");
    let mut feeds = xla_ir::eval::Feeds::default();
    feeds.feed("channel_15", [f32s(&[], &[7.5])]);
    let out = xla_ir::eval::evaluate_with_feeds(&m, &[], &mut feeds).unwrap();
    let Literal::Tuple(parts) = out else {
        panic!("recv-done returns (value, token)")
    };
    assert_eq!(values(&leaves(parts[0].clone())[0]), vec![7.5]);
    let sent = &feeds.outfeeds["channel_16"];
    assert_eq!(sent.len(), 1);
    assert_eq!(values(&leaves(sent[0].clone())[0]), vec![2.1f32 as f64]);
    // Sends between devices are no host transfer: refused by name.
    let err = xla_ir::eval::evaluate(&module("accept/SendRecv.hlo"), &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("Unsupported: recv"), "{err}");
}

#[test]
fn windows_over_scalars_run_on_both_engines() {
    // XLA writes no window for a scalar: reduce-window is init + value, select-and-scatter
    // init + source.
    let (eval, ipu) = both(&module("accept/ReduceWindowScalar.hlo"), &[]);
    assert_eq!((eval, ipu), (vec![vec![43.0]], vec![vec![43.0]]));
    let (eval, ipu) = both(&module("accept/SelectAndScatterScalar.hlo"), &[]);
    assert_eq!((eval, ipu), (vec![vec![3.0]], vec![vec![3.0]]));
}
