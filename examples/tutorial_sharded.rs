//! The seed tutorial's sharded program (004, "Sharding a graph"): three sums on IPUs 0-2
//! and their total on IPU 3 (`ipu.scopes.ipu_shard`), run on a 4-IPU IPU Model.
//!
//! `cargo run --release --example tutorial_sharded` prints `[4, 14]`.

use ipuxla::compiler::config::AutoSelectIpus;
use ipuxla::compiler::{IpuConfig, PassOptions};
use ipuxla::device::LoadedModule;
use ipuxla::frontend::scopes::ipu_shard;
use xla_ir::builder::ModuleBuilder;
use xla_ir::literal::ArrayLiteral;
use xla_ir::{ElementType, Literal, Shape};

/// Builds and runs the graph: its result.
fn run() -> anyhow::Result<ArrayLiteral> {
    let mut g = ModuleBuilder::entry("sharded_graph", "sharded_graph");
    let f2 = Shape::array(ElementType::F32, &[2]);
    let a = g.parameter(0, f2.clone(), "a")?;
    let b = g.parameter(1, f2.clone(), "b")?;
    let c = g.parameter(2, f2, "c")?;
    let o1 = ipu_shard(&mut g, 0, |g| g.add(a, b))?;
    let o2 = ipu_shard(&mut g, 1, |g| g.add(a, c))?;
    let o3 = ipu_shard(&mut g, 2, |g| g.add(b, c))?;
    let out = ipu_shard(&mut g, 3, |g| {
        let s = g.add(o1, o2)?;
        g.add(s, o3)
    })?;
    let module = g.finish_module(out)?;

    let config = IpuConfig {
        auto_select_ipus: AutoSelectIpus::Count(4),
        ..IpuConfig::default()
    };
    let (mut loaded, _) = LoadedModule::load(&module, &config, &PassOptions::default())?;
    let feed = |v: [f32; 2]| Literal::Array(ArrayLiteral::vector_f32(&v));
    let (result, profile) = loaded.run(&[feed([1.0, 1.0]), feed([0.0, 1.0]), feed([1.0, 5.0])])?;
    let result = result.into_iter().next().expect("one result");
    for ipu in &profile.ipus {
        eprintln!(
            "IPU {}: busy {} cycles, {} bytes over IPU-Links",
            ipu.ipu, ipu.busy_cycles, ipu.bytes_over_links
        );
    }
    Ok(result)
}

fn main() -> anyhow::Result<()> {
    println!("{}", run()?);
    Ok(())
}

#[test]
fn prints_the_tutorials_result() {
    assert_eq!(run().unwrap().to_string(), "{4, 14}");
}
