//! Sharding (`sharding={maximal device=K}`, what the seed's `ipu_shard(K)` writes): the seed
//! tutorial's four-shard program gives the tutorial's result on 4 IPUs, its values cross
//! the IPU-Links, every IPU holds its shard, and each selection order's copies cost what
//! their hop counts say.

mod common;

use std::path::Path;
use xla_ir::Literal;
use xla_ir::literal::ArrayLiteral;

fn tutorial() -> (xla_ir::Module, Vec<Literal>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/sharding");
    let text = std::fs::read_to_string(root.join("tutorial_four_shards.hlo")).unwrap();
    let module = xla_ir::parse_module(&text).unwrap();
    let inputs = ["a", "b", "c"]
        .map(|k| {
            Literal::Array(ipuxla::npy::read_npy(&root.join(format!("inputs/{k}.npy"))).unwrap())
        })
        .to_vec();
    (module, inputs)
}

fn config(order: &str, ipus: usize) -> compiler::IpuConfig {
    compiler::IpuConfig {
        selection_order: order.into(),
        auto_select_ipus: compiler::config::AutoSelectIpus::Count(ipus),
        ..Default::default()
    }
}

#[test]
fn the_tutorials_four_shards_give_its_result_across_four_ipus() {
    let (module, inputs) = tutorial();
    let run = ipuxla::device::run_on_ipu_model(&module, &config("AUTO", 4), &inputs).unwrap();
    assert_eq!(run.outputs[0], ArrayLiteral::vector_f32(&[4.0, 14.0]));
    let p = &run.profile;
    assert!(p.totals.bytes_over_links > 0);
    let mut ipus: Vec<usize> = p.tiles.iter().map(|t| t.ipu).collect();
    ipus.dedup();
    ipus.sort();
    ipus.dedup();
    assert_eq!(ipus, vec![0, 1, 2, 3], "every IPU holds its shard's values");
    // Four sums, one per IPU.
    assert_eq!(run.compute_sets, 4);
}

#[test]
fn each_selection_orders_copies_cost_their_hops() {
    let (module, inputs) = tutorial();
    // The values that cross, (name, from shard, to shard): a, b and c where their first
    // users are not, and the three sums into shard 3.
    let crossing = [
        ("param0", 0, 1),
        ("param1", 0, 2),
        ("param2", 1, 2),
        ("o1", 0, 3),
        ("o2", 1, 3),
        ("o3", 2, 3),
    ];
    let target = runtime::Target::ipu2();
    let mut totals = Vec::new();
    for (name, order) in [
        ("ZIGZAG", runtime::SelectionOrder::Zigzag),
        ("SNAKE", runtime::SelectionOrder::Snake),
        ("HOOF", runtime::SelectionOrder::Hoof),
    ] {
        let run = ipuxla::device::run_on_ipu_model(&module, &config(name, 4), &inputs).unwrap();
        let placed = runtime::System::placed(target.clone(), 4, order.order(4)).unwrap();
        for (value, from, to) in crossing {
            let step = run
                .profile
                .steps
                .iter()
                .find(|s| {
                    s.name == format!("copy {value} -> {value}.relayout") && s.bytes_over_links > 0
                })
                .unwrap_or_else(|| panic!("{name}: no copy of {value}"));
            let hops = placed.hops(from, to).unwrap();
            assert_eq!(
                step.exchange_cycles,
                placed.transfer_cycles(8, from, to).unwrap(),
                "{name}: {value} from shard {from} to {to} crosses {hops} hops"
            );
        }
        totals.push(run.profile.total_cycles);
    }
    // AUTO sees shard 0 send to shard 3 (the last): it chooses HOOF.
    let auto = ipuxla::device::run_on_ipu_model(&module, &config("AUTO", 4), &inputs).unwrap();
    assert_eq!(auto.profile.total_cycles, totals[2]);
}

#[test]
fn shards_beyond_the_ipus_and_orders_without_ipus_to_place_are_errors() {
    let (module, _) = tutorial();
    let e = compiler::compile(&module, &config("AUTO", 2))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("is sharded onto IPU") && e.contains("but the program has 2 IPUs"),
        "{e}"
    );
    let single = xla_ir::parse_module(
        "HloModule m\n\nENTRY e {\n  x = f32[2]{0} parameter(0)\n  ROOT y = f32[2]{0} add(x, x)\n}\n",
    )
    .unwrap();
    let e = compiler::compile(&single, &config("SNAKE", 1))
        .unwrap_err()
        .to_string();
    assert!(e.contains("this module runs on one IPU"), "{e}");
}
