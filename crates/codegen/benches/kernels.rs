//! Kernel throughput on this machine: element-wise kernels in GB/s (bytes read and written),
//! reductions in GB/s, and matrix-product partials in FLOP/s (divan's items/s).
//!
//! Run with `cargo bench -p ipuxla-codegen`.

use codegen::{
    BinaryOp, DType, ElementwiseKernel, Expr, KernelCache, KernelSpec, MatMulKernel, ReduceKernel,
    ReduceOp, UnaryOp,
};
use divan::Bencher;
use divan::counter::{BytesCount, ItemsCount};

fn main() {
    divan::main();
}

const N: usize = 1 << 20;

fn kernel(name: &str) -> ElementwiseKernel {
    let x = || Expr::input(0);
    let y = || Expr::input(1);
    let expr = match name {
        "add" => Expr::binary(BinaryOp::Add, x(), y()),
        "relu" => Expr::binary(BinaryOp::Max, x(), Expr::f32(0.0)),
        "exp" => Expr::unary(UnaryOp::Exp, x()),
        "gelu_tanh" => Expr::binary(
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
        ),
        "add_f16" => Expr::binary(BinaryOp::Add, x(), y()),
        _ => unreachable!("bench names are listed below"),
    };
    let t = if name == "add_f16" {
        DType::F16
    } else {
        DType::F32
    };
    let inputs = if matches!(name, "add" | "add_f16") {
        vec![t, t]
    } else {
        vec![t]
    };
    ElementwiseKernel {
        inputs,
        outputs: vec![(t, expr)],
        repeats: Vec::new(),
    }
}

#[divan::bench(args = ["add", "relu", "exp", "gelu_tanh", "add_f16"])]
fn elementwise(bencher: Bencher, name: &str) {
    let k = kernel(name);
    let mut cache = KernelCache::new().unwrap();
    let id = cache.compile(&KernelSpec::Elementwise(k.clone())).unwrap();
    let inputs: Vec<Vec<u8>> = k.inputs.iter().map(|t| vec![0x3c; N * t.size()]).collect();
    let mut output = vec![0u8; N * k.outputs[0].0.size()];
    let bytes = inputs.iter().map(Vec::len).sum::<usize>() + output.len();
    let table = cache.table();
    bencher.counter(BytesCount::new(bytes)).bench_local(|| {
        let ins: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
        table
            .get(id)
            .run_elementwise(&ins, &mut [&mut output], N)
            .unwrap();
    });
}

#[divan::bench(args = [DType::F32, DType::S32])]
fn reduce_sum(bencher: Bencher, input: DType) {
    let mut cache = KernelCache::new().unwrap();
    let id = cache
        .compile(&KernelSpec::Reduce(ReduceKernel::new(ReduceOp::Sum, input)))
        .unwrap();
    let data = vec![1u8; N * input.size()];
    let mut out = vec![0u8; 64 * 4];
    let table = cache.table();
    bencher
        .counter(BytesCount::new(data.len()))
        .bench_local(|| {
            table
                .get(id)
                .run_reduce(&data, &mut out, N / 64, 64)
                .unwrap();
        });
}

/// Times C = A·B of `size`³ f32 with the kernel `compile` makes, counting FLOPs as items.
fn bench_matmul(
    bencher: Bencher,
    size: usize,
    compile: fn(&mut KernelCache, &MatMulKernel) -> codegen::KernelId,
) {
    let mut cache = KernelCache::new().unwrap();
    let id = compile(
        &mut cache,
        &MatMulKernel {
            m: size,
            k: size,
            n: size,
            input: DType::F32,
            partials: codegen::DType::F32,
        },
    );
    let a = vec![0u8; size * size * 4];
    let b = a.clone();
    let mut c = a.clone();
    let table = cache.table();
    bencher
        .counter(ItemsCount::new(2 * size * size * size))
        .bench_local(|| {
            table.get(id).run_matmul(&a, &b, &mut c).unwrap();
        });
}

/// The `gemm` codelet, which `KernelCache::compile` uses.
#[divan::bench(args = [32, 64, 128, 256])]
fn matmul_partials_f32(bencher: Bencher, size: usize) {
    bench_matmul(bencher, size, |cache, k| {
        cache.compile(&KernelSpec::MatMul(k.clone())).unwrap()
    });
}

/// The JIT's register-blocked kernel, for comparison with the gemm codelet above.
#[divan::bench(args = [32, 64, 128, 256])]
fn matmul_partials_f32_jit(bencher: Bencher, size: usize) {
    bench_matmul(bencher, size, |cache, k| {
        cache.compile_jit_matmul(k).unwrap()
    });
}
