//! Replicated executables: collectives carried out across replica engines, and what the
//! model charges for them over the IPU-Links.

use codegen::{DType, ReduceOp};
use runtime::{
    Collective, CollectiveKind, Direction, Executable, ExecutableBuilder, HostIo, Program,
    ReplicatedEngine, Replication, SelectionOrder, StepKind, System, Target,
};

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f32_values(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// `in` streamed in, one collective of `kind` from it into `out` (`out_elements`), `out`
/// streamed out; `replicas` replicas placed in `order`.
fn one_collective(
    target: Target,
    replicas: usize,
    order: SelectionOrder,
    kind: CollectiveKind,
    elements: usize,
    out_elements: usize,
    tiles: usize,
) -> Executable {
    let mut b = ExecutableBuilder::new(target, 1);
    b.replicate(Replication { replicas, order });
    let input = b.tensor_spread("in", DType::F32, elements, 0, tiles);
    let output = b.tensor_spread("out", DType::F32, out_elements, 0, tiles);
    let s_in = b.stream("in", Direction::HostToDevice, DType::F32, elements);
    let s_out = b.stream("out", Direction::DeviceToHost, DType::F32, out_elements);
    let c = b.collective(Collective {
        name: "c".into(),
        kind,
        groups: Vec::new(),
        inputs: vec![input],
        outputs: vec![output],
    });
    b.finish(Program::Sequence(vec![
        Program::StreamCopy {
            stream: s_in,
            tensor: input,
        },
        Program::Collective(c),
        Program::StreamCopy {
            stream: s_out,
            tensor: output,
        },
    ]))
}

fn run(exe: Executable, inputs: &[Vec<f32>]) -> (Vec<Vec<f32>>, Vec<runtime::Profile>) {
    let mut engine = ReplicatedEngine::load_with(exe, Default::default()).unwrap();
    let mut ios: Vec<HostIo> = inputs
        .iter()
        .map(|v| {
            let mut io = HostIo::new();
            io.feed("in", f32_bytes(v));
            io
        })
        .collect();
    let profiles = engine.run(&mut ios).unwrap();
    let outs = ios
        .iter_mut()
        .map(|io| f32_values(&io.take("out")[0]))
        .collect();
    (outs, profiles)
}

#[test]
fn four_replicas_all_reduce_gather_and_permute() {
    let target = Target::ipu2().with_tiles_per_ipu(4);
    let inputs: Vec<Vec<f32>> = (0..4)
        .map(|r| (0..8).map(|i| (r * 10 + i) as f32).collect())
        .collect();
    let sum = CollectiveKind::AllReduce { op: ReduceOp::Sum };
    let exe = one_collective(target.clone(), 4, SelectionOrder::Auto, sum, 8, 8, 4);
    let (outs, profiles) = run(exe, &inputs);
    let want: Vec<f32> = (0..8).map(|i| (60 + 4 * i) as f32).collect();
    assert!(outs.iter().all(|o| o == &want), "{outs:?}");
    // Every replica charges the same ring (and waits for nobody: the programs agree).
    assert!(
        profiles
            .iter()
            .all(|p| p.total_cycles == profiles[0].total_cycles)
    );
    let phases: Vec<_> = profiles[0]
        .steps
        .iter()
        .filter(|s| s.kind == StepKind::Collective)
        .collect();
    // 32 bytes go directly: one step beats the ring's six.
    assert_eq!(phases.len(), 1, "{phases:?}");
    assert!(
        phases[0]
            .name
            .contains("all-reduce (sum), direct, 12 sends of up to 32 B"),
        "{}",
        phases[0].name
    );

    let gather = CollectiveKind::AllGather {
        blocks: runtime::Blocks { outer: 1 },
    };
    let exe = one_collective(target.clone(), 4, SelectionOrder::Auto, gather, 8, 32, 4);
    let (outs, _) = run(exe, &inputs);
    assert!(outs.iter().all(|o| o == &inputs.concat()));

    let ring = CollectiveKind::Permute {
        pairs: vec![(0, 1), (1, 2), (2, 3)],
    };
    let exe = one_collective(target, 4, SelectionOrder::Auto, ring, 8, 8, 4);
    let (outs, _) = run(exe, &inputs);
    assert_eq!(outs[0], vec![0.0; 8], "nobody sends to replica 0: zeros");
    assert_eq!(outs[2], inputs[1]);
}

/// The ring bound: an all-reduce of `bytes` over `n` replicas sends `2(n-1)/n × bytes`
/// through each replica's outgoing link; on a HOOF ring the slowest links are the ladder's
/// (2 IPU-Links each).
#[test]
fn a_64_mib_all_reduce_on_16_replicas_costs_the_ring_bound() {
    let target = Target::ipu2();
    let elements = 16 << 20; // 64 MiB of f32
    let bytes = (elements * 4) as f64;
    let n = 16.0;
    let estimate = |order| {
        let kind = CollectiveKind::AllReduce { op: ReduceOp::Sum };
        let exe = one_collective(
            target.clone(),
            16,
            order,
            kind,
            elements,
            elements,
            target.tiles_per_ipu,
        );
        let system = System::new(target.clone(), 1).unwrap();
        let profile = runtime::estimate(&exe, &system).unwrap();
        let steps: Vec<runtime::StepProfile> = profile
            .steps
            .into_iter()
            .filter(|s| s.kind == StepKind::Collective)
            .collect();
        steps
    };
    let hoof = estimate(SelectionOrder::Hoof);
    let hoof_cycles: u64 = hoof.iter().map(|s| s.cycles).sum();
    let ladder = target.ipu_link_bytes_per_s() * 2.0;
    let bound = 2.0 * (n - 1.0) / n * bytes / ladder * target.clock_hz;
    let ratio = hoof_cycles as f64 / bound;
    println!(
        "HOOF all-reduce of 64 MiB on 16 replicas: {hoof_cycles} cycles, ring bound {bound:.0}, ratio {ratio:.4}"
    );
    assert!(
        (0.9..=1.1).contains(&ratio),
        "HOOF: {hoof_cycles} cycles against the ring bound {bound:.0}: {ratio:.3}"
    );
    // SNAKE has no link from its last IPU back to its first: that ring step crosses the
    // ladder hop by hop, and the profile names it.
    let snake = estimate(SelectionOrder::Snake);
    let snake_cycles: u64 = snake.iter().map(|s| s.cycles).sum();
    println!(
        "SNAKE: {snake_cycles} cycles ({:.2} x HOOF): {}",
        snake_cycles as f64 / hoof_cycles as f64,
        snake[0].name
    );
    assert!(
        snake_cycles as f64 > 2.0 * hoof_cycles as f64,
        "SNAKE {snake_cycles} vs HOOF {hoof_cycles}"
    );
    assert!(
        snake[0].name.contains("slowest link IPU 14 -> 0 (7 hops)"),
        "{}",
        snake[0].name
    );
    assert!(hoof[0].name.contains("(1 hops)"), "{}", hoof[0].name);
}
