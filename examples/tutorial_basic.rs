//! The seed tutorial's first program (004, "basic graph"): `o1 = a + b; o2 = a + c;
//! out = o1 + o2`, built with the frontend and run on the IPU Model.
//!
//! `cargo run --release --example tutorial_basic` prints `[3, 8]`.

use ipuxla::compiler::{IpuConfig, PassOptions};
use ipuxla::device::LoadedModule;
use xla_ir::builder::ModuleBuilder;
use xla_ir::literal::ArrayLiteral;
use xla_ir::{ElementType, Literal, Shape};

/// Builds and runs the graph: its result.
fn run() -> anyhow::Result<ArrayLiteral> {
    let mut g = ModuleBuilder::entry("basic_graph", "basic_graph");
    let f2 = Shape::array(ElementType::F32, &[2]);
    let a = g.parameter(0, f2.clone(), "a")?;
    let b = g.parameter(1, f2.clone(), "b")?;
    let c = g.parameter(2, f2, "c")?;
    let o1 = g.add(a, b)?;
    let o2 = g.add(a, c)?;
    let out = g.add(o1, o2)?;
    let module = g.finish_module(out)?;

    let (mut loaded, _) =
        LoadedModule::load(&module, &IpuConfig::default(), &PassOptions::default())?;
    let feed = |v: [f32; 2]| Literal::Array(ArrayLiteral::vector_f32(&v));
    let (result, profile) = loaded.run(&[feed([1.0, 1.0]), feed([0.0, 1.0]), feed([1.0, 5.0])])?;
    let result = result.into_iter().next().expect("one result");
    eprintln!("{} simulated cycles", profile.total_cycles);
    Ok(result)
}

fn main() -> anyhow::Result<()> {
    println!("{}", run()?);
    Ok(())
}

#[test]
fn prints_the_tutorials_result() {
    assert_eq!(run().unwrap().to_string(), "{3, 8}");
}
