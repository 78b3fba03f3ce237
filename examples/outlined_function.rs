//! The seed's outlined-function example (002, 13.2.1): a function `matmul -> layer_norm ->
//! gelu` outlined once and called twice with different weights, in a loop of 10 iterations
//! fed 128x128 ones, each iteration's result streamed out.
//!
//! `cargo run --release --example outlined_function` prints the last result's corner and
//! the loop's simulated cycles (`-- --dump`: the module first, its `func` called twice).

use ipuxla::compiler::{DeviceLoop, IpuConfig, PassOptions};
use ipuxla::device::LoadedModule;
use ipuxla::frontend::init::{Init, Rng};
use ipuxla::frontend::nn;
use ipuxla::frontend::ops;
use ipuxla::frontend::scopes::{call_outlined, outlined_function};
use ipuxla::runtime::EngineOptions;
use xla_ir::builder::ModuleBuilder;
use xla_ir::literal::{ArrayData, ArrayLiteral};
use xla_ir::{ArrayShape, ElementType, Literal, Shape};

const ITERATIONS: u64 = 10;

fn main() -> anyhow::Result<()> {
    let square = Shape::array(ElementType::F32, &[128, 128]);
    let mut g = ModuleBuilder::entry("outlined", "body");
    let w1 = g.parameter(0, square.clone(), "w1")?;
    let w2 = g.parameter(1, square.clone(), "w2")?;
    let x = g.parameter(2, square, "x")?;
    let (func, h) = outlined_function(&mut g, "func", &[x, w1], |f, p| {
        let y = f.dot(p[0], p[1])?;
        let gamma = ops::full(f, ElementType::F32, &[128], 1.0)?;
        let beta = ops::full(f, ElementType::F32, &[128], 0.0)?;
        let y = nn::layer_norm(f, y, gamma, beta, 1e-6)?;
        nn::gelu(f, y)
    })?;
    let out = call_outlined(&mut g, func, &[h, w2])?;
    let module = g.finish_module(out)?;
    if std::env::args().any(|a| a == "--dump") {
        println!("{module}");
    }

    let mut rng = Rng::new(0);
    let glorot = Init::GlorotUniform {
        fan_in: 128,
        fan_out: 128,
    };
    let ones = ArrayLiteral {
        shape: ArrayShape::new(ElementType::F32, &[ITERATIONS as i64, 128, 128]),
        data: ArrayData::F32(vec![1.0; (ITERATIONS * 128 * 128) as usize]),
    };
    let inputs = [
        Literal::Array(glorot.sample(&[128, 128], &mut rng)),
        Literal::Array(glorot.sample(&[128, 128], &mut rng)),
        Literal::Array(ones),
    ];
    let lp = DeviceLoop {
        iterations: ITERATIONS,
        fed: vec![false, false, true],
        resident: false,
    };
    let (mut loaded, _) = LoadedModule::load_device_loop(
        &module,
        &IpuConfig::default(),
        &PassOptions::default(),
        EngineOptions::default(),
        lp,
    )?;
    let (outputs, profile) = loaded.run(&inputs)?;
    let all = &outputs[0];
    let last = all.index_leading(ITERATIONS as usize - 1);
    let corner: Vec<f32> = match &last.data {
        ArrayData::F32(v) => v[..4].to_vec(),
        _ => unreachable!("the function returns f32"),
    };
    println!(
        "{} results of {}; the last starts {corner:?}",
        ITERATIONS, last.shape
    );
    println!(
        "{} simulated cycles for {ITERATIONS} iterations",
        profile.total_cycles
    );
    Ok(())
}

#[test]
fn runs_the_loop() {
    main().unwrap();
}
