//! Programs built by hand and run on the IPU Model: results, cycle accounting against the
//! cost model by hand calculation, multi-IPU copies, loops over host streams, memory
//! limits, determinism across thread counts, and load-time errors.

use codegen::{
    BinaryOp, DType, ElementwiseKernel, Expr, KernelSpec, ReduceKernel, ReduceOp, UnaryOp,
};
use runtime::{
    Direction, Engine, ExecutableBuilder, HostIo, Program, Region, Runs, RuntimeError, StepKind,
    Target, TensorId, Vertex,
};

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f32_values(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn add_kernel() -> KernelSpec {
    KernelSpec::Elementwise(ElementwiseKernel {
        inputs: vec![DType::F32, DType::F32],
        outputs: vec![(
            DType::F32,
            Expr::binary(BinaryOp::Add, Expr::input(0), Expr::input(1)),
        )],
        repeats: Vec::new(),
    })
}

/// Streams `inputs` in (each stream into its tensor), runs `cs`, streams `output` out.
fn in_execute_out(
    inputs: &[(runtime::StreamId, TensorId)],
    cs: runtime::ComputeSetId,
    (out, tensor): (runtime::StreamId, TensorId),
) -> Program {
    let mut steps: Vec<Program> = inputs
        .iter()
        .map(|&(stream, tensor)| Program::StreamCopy { stream, tensor })
        .collect();
    steps.push(Program::Execute(cs));
    steps.push(Program::StreamCopy {
        stream: out,
        tensor,
    });
    Program::Sequence(steps)
}

/// Streams a and b in, adds them on `tiles` tiles, streams the sum out.
fn vector_add(target: Target, tiles: usize, threads: usize) -> (Vec<f32>, runtime::Profile) {
    let n = 10_000;
    let mut b = ExecutableBuilder::new(target, 1);
    let (x, y, z) = (
        b.tensor_spread("a", DType::F32, n, 0, tiles),
        b.tensor_spread("b", DType::F32, n, 0, tiles),
        b.tensor_spread("sum", DType::F32, n, 0, tiles),
    );
    let (sa, sb, out) = (
        b.stream("a", Direction::HostToDevice, DType::F32, n),
        b.stream("b", Direction::HostToDevice, DType::F32, n),
        b.stream("sum", Direction::DeviceToHost, DType::F32, n),
    );
    let vertices = b.elementwise_vertices(&add_kernel(), &[x, y], &[z]);
    let cs = b.compute_set("add", vertices);
    let exe = b.finish(in_execute_out(&[(sa, x), (sb, y)], cs, (out, z)));
    let mut engine = Engine::load_with_threads(exe, threads).unwrap();
    let mut io = HostIo::new();
    io.feed(
        "a",
        f32_bytes(&(0..n).map(|i| i as f32).collect::<Vec<_>>()),
    );
    io.feed(
        "b",
        f32_bytes(&(0..n).map(|i| 0.5 * i as f32).collect::<Vec<_>>()),
    );
    let profile = engine.run(&mut io).unwrap();
    let out = io.take("sum");
    assert_eq!(out.len(), 1);
    (f32_values(&out[0]), profile)
}

#[test]
fn vector_add_over_every_tile_of_an_ipu2_and_over_4_tiles() {
    for (target, tiles) in [
        (Target::ipu2(), 1472),
        (Target::ipu2().with_tiles_per_ipu(4), 4),
    ] {
        let (sum, profile) = vector_add(target, tiles, 0);
        assert!(
            sum.iter().enumerate().all(|(i, &s)| s == 1.5 * i as f32),
            "wrong sums on {tiles} tiles"
        );
        assert_eq!(profile.tiles.len(), tiles, "every tile holds data");
        let execute = profile
            .steps
            .iter()
            .find(|s| s.kind == StepKind::Execute)
            .unwrap();
        // Hand calculation: the busiest tile holds ceil(10000 / tiles) elements in one vertex:
        // 12 + ceil(n/2) × (load + load + add + store) instructions, on one of 6 workers.
        let n = 10_000usize.div_ceil(tiles) as u64;
        assert_eq!(
            execute.compute_cycles,
            (12 + n.div_ceil(2) * 4) * 6,
            "{tiles} tiles"
        );
        assert_eq!(execute.sync_cycles, 90);
        assert_eq!(profile.totals.bytes_streamed, 3 * 40_000);
    }
}

/// 40 elements added on one tile by one multi-vertex (grain 4: five workers of 8) and by
/// the five worker vertices of the same shares: the same sums, the same cycles (each
/// share costs what its vertex does: 12 + 4 × 4 instructions, six cycles each), and the
/// multi-vertex's one vertex state. A reduction cannot be a multi-vertex.
#[test]
fn a_multi_vertex_costs_what_its_workers_shares_cost_as_vertices() {
    let run = |multi: bool| {
        let mut b = ExecutableBuilder::new(Target::ipu2().with_tiles_per_ipu(4), 1);
        let (x, y, z) = (
            b.tensor("x", DType::F32, &[(0, 0, 40)]),
            b.tensor("y", DType::F32, &[(0, 0, 40)]),
            b.tensor("z", DType::F32, &[(0, 0, 40)]),
        );
        let vertex = |start, len, grain| {
            let region = |tensor| Region { tensor, start, len };
            Vertex {
                kernel: add_kernel().into(),
                ipu: 0,
                tile: 0,
                inputs: smallvec::smallvec![region(x), region(y)],
                outputs: smallvec::smallvec![region(z)],
                run_length: 0,
                grain,
            }
        };
        let vertices = if multi {
            vec![vertex(0, 40, 4)]
        } else {
            (0..5).map(|k| vertex(8 * k, 8, 0)).collect()
        };
        let cs = b.compute_set("add", vertices);
        let (sx, sy) = (
            b.stream("x", Direction::HostToDevice, DType::F32, 40),
            b.stream("y", Direction::HostToDevice, DType::F32, 40),
        );
        let out = b.stream("z", Direction::DeviceToHost, DType::F32, 40);
        let exe = b.finish(in_execute_out(&[(sx, x), (sy, y)], cs, (out, z)));
        let mut engine = Engine::load(exe).unwrap();
        let mut io = HostIo::new();
        io.feed(
            "x",
            f32_bytes(&(0..40).map(|i| i as f32).collect::<Vec<_>>()),
        );
        io.feed("y", f32_bytes(&[0.25; 40]));
        let profile = engine.run(&mut io).unwrap();
        let execute = profile
            .steps
            .iter()
            .find(|s| s.kind == StepKind::Execute)
            .unwrap()
            .compute_cycles;
        (f32_values(&io.take("z")[0]), execute, profile)
    };
    let (multi, shares) = (run(true), run(false));
    assert_eq!(
        multi.0,
        (0..40).map(|i| i as f32 + 0.25).collect::<Vec<_>>()
    );
    assert_eq!(multi.0, shares.0);
    assert_eq!(multi.1, (12 + 4 * 4) * 6);
    assert_eq!(multi.1, shares.1);
    let state = |p: &runtime::Profile| p.tiles[0].vertex_state_bytes;
    assert!(
        state(&multi.2) < state(&shares.2),
        "{} vs {}",
        state(&multi.2),
        state(&shares.2)
    );

    let reduce = load_error(|b| {
        let x = b.tensor("x", DType::F32, &[(0, 0, 8)]);
        let y = b.tensor("y", DType::F32, &[(0, 0, 1)]);
        let v = Vertex {
            kernel: KernelSpec::Reduce(ReduceKernel::new(ReduceOp::Sum, DType::F32)).into(),
            ipu: 0,
            tile: 0,
            inputs: smallvec::smallvec![Region {
                tensor: x,
                start: 0,
                len: 8,
            }],
            outputs: smallvec::smallvec![Region {
                tensor: y,
                start: 0,
                len: 1,
            }],
            run_length: 8,
            grain: 4,
        };
        let cs = b.compute_set("sum", vec![v]);
        Program::Execute(cs)
    });
    assert!(
        reduce.contains("a multi-vertex (grain 4) runs an element-wise kernel only"),
        "{reduce}"
    );
}

/// Streams values into `src`, copies it to `dst`, streams `dst` back; checks the values
/// arrive unchanged and returns the run's profile.
fn copy_through(
    target: Target,
    num_ipus: usize,
    src: &[(usize, usize, usize)],
    dst: &[(usize, usize, usize)],
) -> runtime::Profile {
    let mut b = ExecutableBuilder::new(target, num_ipus);
    let (s, d) = (
        b.tensor("src", DType::F32, src),
        b.tensor("dst", DType::F32, dst),
    );
    let n = b.tensor_info(s).elements;
    let input = b.stream("in", Direction::HostToDevice, DType::F32, n);
    let output = b.stream("out", Direction::DeviceToHost, DType::F32, n);
    let exe = b.finish(Program::Sequence(vec![
        Program::StreamCopy {
            stream: input,
            tensor: s,
        },
        Program::Copy { src: s, dst: d },
        Program::StreamCopy {
            stream: output,
            tensor: d,
        },
    ]));
    let mut engine = Engine::load(exe).unwrap();
    let mut io = HostIo::new();
    let values: Vec<f32> = (0..n).map(|i| i as f32 * 0.25).collect();
    io.feed("in", f32_bytes(&values));
    let profile = engine.run(&mut io).unwrap();
    assert_eq!(f32_values(&io.take("out")[0]), values);
    profile
}

fn copy_step(profile: runtime::Profile) -> runtime::StepProfile {
    profile
        .steps
        .into_iter()
        .find(|s| s.kind == StepKind::Copy)
        .unwrap()
}

#[test]
fn reversing_a_tensor_across_tiles_costs_what_the_model_says() {
    // 4 tiles × 100 f32; block k moves from tile k to tile 3 - k.
    let profile = copy_through(
        Target::ipu2().with_tiles_per_ipu(4),
        1,
        &[(0, 0, 100), (0, 1, 100), (0, 2, 100), (0, 3, 100)],
        &[(0, 3, 100), (0, 2, 100), (0, 1, 100), (0, 0, 100)],
    );
    assert_eq!(profile.tiles.len(), 4);
    let copy = copy_step(profile);
    // By hand: every tile sends 400 B and receives 400 B; 4 B/cycle → 100 cycles, plus the
    // 90-cycle internal sync; 1,600 bytes cross tiles.
    assert_eq!(copy.bytes_moved, 1600);
    assert_eq!(copy.exchange_cycles, 100);
    assert_eq!(copy.sync_cycles, 90);
    assert_eq!(copy.cycles, 190);
}

fn inter_ipu_copy(from: usize, to: usize) -> runtime::StepProfile {
    copy_step(copy_through(
        Target::ipu2().with_tiles_per_ipu(4),
        16,
        &[(from, 0, 1024)],
        &[(to, 1, 1024)],
    ))
}

#[test]
fn copies_between_ipus_pay_per_ipu_link_hop() {
    let t = Target::ipu2();
    let latency = (15e-9 * t.clock_hz).ceil() as u64;
    let link = t.ipu_link_bytes_per_s();
    let hop = |links: f64| latency + (4096.0 / (link * links) * t.clock_hz).ceil() as u64;
    // IPU 0 → 1: one hop over the card's 4 links.
    let near = inter_ipu_copy(0, 1);
    assert_eq!(near.exchange_cycles, hop(4.0));
    // IPU 1 → 2: across the card (4 links), then down... up the ladder (2 links): two hops.
    let far = inter_ipu_copy(1, 2);
    assert_eq!(far.exchange_cycles, hop(4.0) + hop(2.0));
    assert!(far.exchange_cycles > near.exchange_cycles);
    assert_eq!((near.bytes_over_links, far.bytes_over_links), (4096, 4096));
    // A 16-IPU sync crosses the ladder: 8 hops there and back at 15 ns.
    assert_eq!(far.sync_cycles, t.global_sync_cycles(8));
}

#[test]
fn repeat_ten_times_from_an_infeed_to_an_outfeed() {
    let target = Target::ipu2().with_tiles_per_ipu(4);
    let mut b = ExecutableBuilder::new(target, 1);
    let x = b.tensor_spread("x", DType::F32, 64, 0, 4);
    let y = b.tensor_spread("y", DType::F32, 64, 0, 4);
    let infeed = b.stream("infeed", Direction::HostToDevice, DType::F32, 64);
    let outfeed = b.stream("outfeed", Direction::DeviceToHost, DType::F32, 64);
    let square = KernelSpec::Elementwise(ElementwiseKernel {
        inputs: vec![DType::F32],
        outputs: vec![(
            DType::F32,
            Expr::binary(
                BinaryOp::Mul,
                Expr::input(0),
                Expr::unary(UnaryOp::Abs, Expr::input(0)),
            ),
        )],
        repeats: Vec::new(),
    });
    let vertices = b.elementwise_vertices(&square, &[x], &[y]);
    let cs = b.compute_set("square", vertices);
    let exe = b.finish(Program::Repeat {
        count: 10,
        body: Box::new(Program::Sequence(vec![
            Program::StreamCopy {
                stream: infeed,
                tensor: x,
            },
            Program::Execute(cs),
            Program::StreamCopy {
                stream: outfeed,
                tensor: y,
            },
        ])),
    });
    let mut engine = Engine::load(exe).unwrap();
    // The progress hook hears of each iteration of the outermost loop.
    let heard = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = heard.clone();
    engine.set_progress(Some(std::sync::Arc::new(move |done, of| {
        log.lock().unwrap().push((done, of));
    })));
    let mut io = HostIo::new();
    for step in 0..10 {
        io.feed(
            "infeed",
            f32_bytes(&(0..64).map(|i| (i + step) as f32).collect::<Vec<_>>()),
        );
    }
    let profile = engine.run(&mut io).unwrap();
    let outs = io.take("outfeed");
    assert_eq!(outs.len(), 10);
    for (step, out) in outs.iter().enumerate() {
        let want: Vec<f32> = (0..64).map(|i| ((i + step) * (i + step)) as f32).collect();
        assert_eq!(f32_values(out), want, "iteration {step}");
    }
    assert_eq!(profile.steps.len(), 30);
    assert_eq!(
        *heard.lock().unwrap(),
        (1..=10).map(|i| (i, 10)).collect::<Vec<_>>()
    );
    // An eleventh read would find the infeed empty: a clear error, not a hang or a panic.
    let err = engine.run(&mut io).unwrap_err();
    assert!(
        err.to_string()
            .contains("stream infeed ran dry: the program reads its value 11"),
        "{err}"
    );
}

#[test]
fn a_tensor_too_big_for_its_tile_is_out_of_memory_naming_the_tile() {
    let target = Target::ipu2().with_tiles_per_ipu(4);
    let mut b = ExecutableBuilder::new(target, 1);
    b.tensor("small", DType::F32, &[(0, 2, 16)]);
    // 624 KiB holds 159,744 f32; ask for more on tile 2.
    b.tensor("huge", DType::F32, &[(0, 2, 200_000)]);
    let exe = b.finish(Program::Sequence(vec![]));
    let err = Engine::load(exe).err().expect("out of memory");
    match &err {
        RuntimeError::OutOfMemory {
            ipu,
            tile,
            needed,
            available,
            largest,
            ..
        } => {
            assert_eq!((*ipu, *tile, *available), (0, 2, 624 * 1024));
            assert_eq!(*needed, 64 + 800_000);
            assert_eq!(largest[0], ("huge".to_string(), 800_000));
        }
        other => panic!("expected OutOfMemory, got {other}"),
    }
    assert!(
        err.to_string().contains(
            "IPU 0 tile 2 is out of memory: its tensors need 800064 bytes but the tile has 638976"
        ),
        "{err}"
    );
}

#[test]
fn outputs_are_bitwise_identical_with_1_and_8_threads() {
    let (one, p1) = vector_add(Target::ipu2(), 1472, 1);
    let (eight, p8) = vector_add(Target::ipu2(), 1472, 8);
    assert_eq!(f32_bytes(&one), f32_bytes(&eight));
    assert_eq!(p1, p8, "profiles are deterministic too");
}

fn load_error(build: impl FnOnce(&mut ExecutableBuilder) -> Program) -> String {
    let mut b = ExecutableBuilder::new(Target::ipu2().with_tiles_per_ipu(4), 1);
    let program = build(&mut b);
    match Engine::load(b.finish(program)) {
        Ok(_) => panic!("expected a load error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_executables_are_refused_at_load_time() {
    let out_of_range = load_error(|b| {
        b.tensor("t", DType::F32, &[(0, 9, 4)]);
        Program::Sequence(vec![])
    });
    assert!(
        out_of_range.contains("tensor t is mapped to IPU 0 tile 9, outside 1 IPUs of 4 tiles"),
        "{out_of_range}"
    );

    let foreign = load_error(|b| {
        let x = b.tensor("x", DType::F32, &[(0, 0, 8)]);
        let y = b.tensor("y", DType::F32, &[(0, 1, 8)]);
        let v = Vertex {
            kernel: add_kernel().into(),
            ipu: 0,
            tile: 1,
            inputs: smallvec::smallvec![
                Region {
                    tensor: x,
                    start: 0,
                    len: 8,
                },
                Region {
                    tensor: y,
                    start: 0,
                    len: 8,
                },
            ],
            outputs: smallvec::smallvec![Region {
                tensor: y,
                start: 0,
                len: 8,
            }],
            run_length: 0,
            grain: 0,
        };
        let cs = b.compute_set("bad", vec![v]);
        Program::Execute(cs)
    });
    assert!(foreign.contains("vertex 0 (IPU 0 tile 1): region 0 (elements 0..8 of tensor x) is not in this tile's memory"), "{foreign}");

    let overlapping = load_error(|b| {
        let x = b.tensor("x", DType::F32, &[(0, 0, 8)]);
        let region = |start, len| Region {
            tensor: x,
            start,
            len,
        };
        let v = |start| Vertex {
            kernel: add_kernel().into(),
            ipu: 0,
            tile: 0,
            inputs: smallvec::smallvec![region(start, 4), region(start, 4)],
            outputs: smallvec::smallvec![region(start, 4)],
            run_length: 0,
            grain: 0,
        };
        let cs = b.compute_set("racy", vec![v(0), v(2)]);
        Program::Sequence(vec![Program::Execute(cs)])
    });
    assert!(
        overlapping.contains(
            "compute set racy: vertices 0 and 1 write overlapping memory on IPU 0 tile 0"
        ),
        "{overlapping}"
    );

    let wrong_stream = load_error(|b| {
        let x = b.tensor("x", DType::F32, &[(0, 0, 8)]);
        let s = b.stream("s", Direction::HostToDevice, DType::F32, 7);
        Program::StreamCopy {
            stream: s,
            tensor: x,
        }
    });
    assert!(
        wrong_stream.contains("stream s carries 7 x F32 but tensor x holds 8 x F32"),
        "{wrong_stream}"
    );

    let uninitialised = load_error(|b| {
        let x = b.tensor("x", DType::F32, &[(0, 0, 8)]);
        let y = b.tensor("y", DType::F32, &[(0, 1, 8)]);
        Program::Copy { src: x, dst: y }
    });
    assert!(
        uninitialised.contains("the program reads tensor x (copy to y) but nothing has written it"),
        "{uninitialised}"
    );
}

#[test]
fn if_and_repeat_while_true_follow_device_values() {
    let target = Target::ipu2().with_tiles_per_ipu(4);
    let mut b = ExecutableBuilder::new(target, 1);
    let counter = b.tensor("counter", DType::F32, &[(0, 0, 1)]);
    let flag = b.tensor("flag", DType::Pred, &[(0, 0, 1)]);
    let init = b.stream("init", Direction::HostToDevice, DType::F32, 1);
    let out = b.stream("out", Direction::DeviceToHost, DType::F32, 1);
    let bump = KernelSpec::Elementwise(ElementwiseKernel {
        inputs: vec![DType::F32],
        outputs: vec![(
            DType::F32,
            Expr::binary(BinaryOp::Add, Expr::input(0), Expr::f32(1.0)),
        )],
        repeats: Vec::new(),
    });
    let below = KernelSpec::Elementwise(ElementwiseKernel {
        inputs: vec![DType::F32],
        outputs: vec![(
            DType::Pred,
            Expr::compare(codegen::CmpOp::Lt, Expr::input(0), Expr::f32(5.0)),
        )],
        repeats: Vec::new(),
    });
    let one = |t| Region {
        tensor: t,
        start: 0,
        len: 1,
    };
    let bump_cs = b.compute_set(
        "bump",
        vec![Vertex {
            kernel: bump.into(),
            ipu: 0,
            tile: 0,
            inputs: smallvec::smallvec![one(counter)],
            outputs: smallvec::smallvec![one(counter)],
            run_length: 0,
            grain: 0,
        }],
    );
    let test_cs = b.compute_set(
        "test",
        vec![Vertex {
            kernel: below.into(),
            ipu: 0,
            tile: 0,
            inputs: smallvec::smallvec![one(counter)],
            outputs: smallvec::smallvec![one(flag)],
            run_length: 0,
            grain: 0,
        }],
    );
    let exe = b.finish(Program::Sequence(vec![
        Program::StreamCopy {
            stream: init,
            tensor: counter,
        },
        Program::RepeatWhileTrue {
            condition: Box::new(Program::Execute(test_cs)),
            predicate: flag,
            body: Box::new(Program::Execute(bump_cs)),
        },
        Program::If {
            predicate: flag,
            then: Box::new(Program::Sequence(vec![])),
            otherwise: Box::new(Program::Execute(bump_cs)),
        },
        Program::StreamCopy {
            stream: out,
            tensor: counter,
        },
    ]));
    let mut engine = Engine::load(exe).unwrap();
    let mut io = HostIo::new();
    io.feed("init", f32_bytes(&[1.0]));
    engine.run(&mut io).unwrap();
    // Counts 1 → 5 in the loop, then the If (flag false) bumps once more.
    assert_eq!(f32_values(&io.take("out")[0]), vec![6.0]);
}

#[test]
fn profiles_serialise_to_json() {
    let (_, profile) = vector_add(Target::ipu2().with_tiles_per_ipu(4), 4, 0);
    let json = serde_json::to_string(&profile).unwrap();
    assert!(
        json.contains("\"kind\":\"Execute\"") && json.contains("\"total_cycles\""),
        "{json}"
    );
    let back: runtime::Profile = serde_json::from_str(&json).unwrap();
    assert_eq!(
        (&back.steps, &back.totals, &back.tiles, back.total_cycles),
        (
            &profile.steps,
            &profile.totals,
            &profile.tiles,
            profile.total_cycles
        )
    );
    assert!((back.seconds - profile.seconds).abs() <= profile.seconds * 1e-15);
}

#[test]
fn a_matrix_product_vertex_runs_at_the_amp_rate() {
    let (m, k, n) = (16, 32, 8);
    let target = Target::ipu2().with_tiles_per_ipu(4);
    let mut b = ExecutableBuilder::new(target.clone(), 1);
    let a = b.tensor("a", DType::F32, &[(0, 1, m * k)]);
    let w = b.tensor("w", DType::F32, &[(0, 1, k * n)]);
    let c = b.tensor("c", DType::F32, &[(0, 1, m * n)]);
    let (sa, sw, sc) = (
        b.stream("a", Direction::HostToDevice, DType::F32, m * k),
        b.stream("w", Direction::HostToDevice, DType::F32, k * n),
        b.stream("c", Direction::DeviceToHost, DType::F32, m * n),
    );
    let kernel = KernelSpec::MatMul(codegen::MatMulKernel {
        m,
        k,
        n,
        input: DType::F32,
        partials: codegen::DType::F32,
    });
    let whole = |t, len| Region {
        tensor: t,
        start: 0,
        len,
    };
    let cs = b.compute_set(
        "matmul",
        vec![Vertex {
            kernel: kernel.into(),
            ipu: 0,
            tile: 1,
            inputs: smallvec::smallvec![whole(a, m * k), whole(w, k * n)],
            outputs: smallvec::smallvec![whole(c, m * n)],
            run_length: 0,
            grain: 0,
        }],
    );
    let exe = b.finish(in_execute_out(&[(sa, a), (sw, w)], cs, (sc, c)));
    let mut engine = Engine::load(exe).unwrap();
    let mut io = HostIo::new();
    let av: Vec<f32> = (0..m * k).map(|i| (i % 5) as f32).collect();
    let wv: Vec<f32> = (0..k * n).map(|i| (i % 3) as f32 - 1.0).collect();
    io.feed("a", f32_bytes(&av));
    io.feed("w", f32_bytes(&wv));
    let profile = engine.run(&mut io).unwrap();
    let out = f32_values(&io.take("c")[0]);
    for i in 0..m {
        for j in 0..n {
            let want: f32 = (0..k).map(|p| av[i * k + p] * wv[p * n + j]).sum();
            assert_eq!(out[i * n + j], want, "C[{i},{j}]");
        }
    }
    // By hand: 72 cycles of supervisor overhead + 16·32·8 MACs at 16 f32 MACs per cycle.
    let execute = profile
        .steps
        .iter()
        .find(|s| s.kind == StepKind::Execute)
        .unwrap();
    assert_eq!(execute.compute_cycles, 72 + 16 * 32 * 8 / 16);
}

#[test]
fn executables_round_trip_through_json() {
    let mut b = ExecutableBuilder::new(Target::ipu2().with_tiles_per_ipu(4), 2);
    let x = b.tensor_spread("x", DType::F32, 12, 0, 4);
    b.set_shape(x, &[3, 4]);
    let y = b.tensor("y", DType::F32, &[(1, 2, 12)]);
    let s = b.stream("in", Direction::HostToDevice, DType::F32, 12);
    let f = b.function(Program::Copy { src: x, dst: y });
    let exe = b.finish(Program::Sequence(vec![
        Program::StreamCopy {
            stream: s,
            tensor: x,
        },
        Program::Call(f),
        Program::Switch {
            index: x,
            cases: vec![],
            default: Box::new(Program::Sync),
        },
    ]));
    let json = serde_json::to_string(&exe).unwrap();
    let back: runtime::Executable = serde_json::from_str(&json).unwrap();
    assert_eq!(back, exe);
    // The Switch index is not a one-element s32 tensor: refused at load.
    let err = Engine::load(back).err().unwrap().to_string();
    assert!(
        err.contains("a Switch index must be a one-element S32 tensor, x is 12 x F32"),
        "{err}"
    );
}

/// Reverses its one f32 input into its output: a native codelet.
struct ReverseCodelet;

impl runtime::Codelet for ReverseCodelet {
    fn name(&self) -> &str {
        "reverse"
    }

    fn run(&self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<(), String> {
        let mut v = f32_values(inputs[0]);
        v.reverse();
        outputs[0].copy_from_slice(&f32_bytes(&v));
        Ok(())
    }

    fn cost(&self, _: &Target) -> runtime::cost::VertexCost {
        runtime::cost::VertexCost::Worker(100)
    }
}

#[test]
fn rearrangements_gather_runs_across_tiles_and_fill_the_rest() {
    use runtime::{Rearrange, Run, RunSource};
    let mut b = ExecutableBuilder::new(Target::ipu2(), 1);
    // src: 8 elements, 4 on tile 0 and 4 on tile 1; dst: 6 elements on tile 2.
    let src = b.tensor("src", DType::F32, &[(0, 0, 4), (0, 1, 4)]);
    let dst = b.tensor("dst", DType::F32, &[(0, 2, 6)]);
    b.tensor_mut(src).init = Some(f32_bytes(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]));
    let r = b.rearrange(Rearrange {
        name: "gather".into(),
        dst,
        sources: vec![src],
        fill: f32_bytes(&[-1.0]),
        runs: Runs::from(vec![
            // elements 3..6 of src (crossing the tile boundary) to dst 0..3
            Run {
                source: RunSource::contiguous(0, 3),
                dst_start: 0,
                len: 3,
            },
            Run {
                source: RunSource::Fill,
                dst_start: 3,
                len: 2,
            },
            Run {
                source: RunSource::contiguous(0, 0),
                dst_start: 5,
                len: 1,
            },
        ]),
    });
    let out = b.stream("out", Direction::DeviceToHost, DType::F32, 6);
    let exe = b.finish(Program::Sequence(vec![
        Program::Rearrange(r),
        Program::StreamCopy {
            stream: out,
            tensor: dst,
        },
    ]));
    let mut engine = Engine::load(exe).unwrap();
    let mut io = HostIo::new();
    let profile = engine.run(&mut io).unwrap();
    assert_eq!(
        f32_values(&io.take("out")[0]),
        vec![3.0, 4.0, 5.0, -1.0, -1.0, 0.0]
    );
    let step = &profile.steps[0];
    assert_eq!(step.kind, StepKind::Copy);
    // 16 bytes cross tiles (tile 0 sends 8 of them, tile 2 receives all 16): 16 / 4 cycles.
    assert_eq!(step.bytes_moved, 16);
    assert_eq!(step.exchange_cycles, 4);
}

#[test]
fn strided_runs_transpose_broadcast_and_reverse_across_tiles() {
    use runtime::{Rearrange, Run};
    let mut b = ExecutableBuilder::new(Target::ipu2(), 1);
    // src: a 2x3 matrix, row 0 on tile 0 and row 1 on tile 1; dst: 11 elements on tile 2.
    let src = b.tensor("src", DType::F32, &[(0, 0, 3), (0, 1, 3)]);
    let dst = b.tensor("dst", DType::F32, &[(0, 2, 11)]);
    b.tensor_mut(src).init = Some(f32_bytes(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]));
    let run = |start, stride, dst_start, len| Run::reading(0, (start, stride), dst_start, len);
    let r = b.rearrange(Rearrange {
        name: "strided".into(),
        dst,
        sources: vec![src],
        fill: vec![],
        runs: Runs::from(vec![
            // the transpose, a column per run
            run(0, 3, 0, 2),
            run(1, 3, 2, 2),
            run(2, 3, 4, 2),
            // element 5 twice
            run(5, 0, 6, 2),
            // row 0 reversed
            run(2, -1, 8, 3),
        ]),
    });
    let out = b.stream("out", Direction::DeviceToHost, DType::F32, 11);
    let exe = b.finish(Program::Sequence(vec![
        Program::Rearrange(r),
        Program::StreamCopy {
            stream: out,
            tensor: dst,
        },
    ]));
    let mut engine = Engine::load(exe).unwrap();
    let mut io = HostIo::new();
    let profile = engine.run(&mut io).unwrap();
    assert_eq!(
        f32_values(&io.take("out")[0]),
        vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0, 5.0, 5.0, 2.0, 1.0, 0.0]
    );
    // 40 bytes cross to tile 2, which receives them at 4 bytes a cycle: element 5 written
    // twice is received once and copied there.
    let step = &profile.steps[0];
    assert_eq!(step.bytes_moved, 40);
    assert_eq!(step.exchange_cycles, 10);
}

/// Sends are multicast: a row every other tile needs goes out once, so its tile's exchange
/// is the bytes it holds, not what all receive (US 2019/0121777 A1); a tile that reads the
/// row into two places is sent it twice.
#[test]
fn a_row_that_several_tiles_need_is_sent_once() {
    use runtime::{Rearrange, Run, RunSource};
    let run = |dst_start| Run {
        source: RunSource::Tensor {
            k: 0,
            start: 0,
            stride: 1,
        },
        dst_start,
        len: 16,
    };
    for (copies_on_tile_3, cycles) in [(1, 16), (2, 32)] {
        let mut b = ExecutableBuilder::new(Target::ipu2(), 1);
        // 16 f32 (64 bytes) on tile 0, copied to tiles 1 and 2, and once or twice to tile 3.
        let src = b.tensor("src", DType::F32, &[(0, 0, 16)]);
        let n = 16 * (2 + copies_on_tile_3);
        let mut pieces = vec![(0, 1, 16), (0, 2, 16), (0, 3, 16 * copies_on_tile_3)];
        pieces.retain(|p| p.2 > 0);
        let dst = b.tensor("dst", DType::F32, &pieces);
        b.tensor_mut(src).init = Some(f32_bytes(&[1.0; 16]));
        let r = b.rearrange(Rearrange {
            name: "rows".into(),
            dst,
            sources: vec![src],
            fill: vec![],
            runs: (0..n / 16).map(|i| run(16 * i)).collect(),
        });
        let exe = b.finish(Program::Rearrange(r));
        let profile = Engine::load(exe).unwrap().run(&mut HostIo::new()).unwrap();
        let step = &profile.steps[0];
        assert_eq!(step.bytes_moved, 4 * n as u64, "{copies_on_tile_3}");
        // Tile 0 puts 64 bytes (or 128) on its wires; without multicast it would be
        // 64 bytes for every row copied.
        assert_eq!(step.exchange_cycles, cycles, "{copies_on_tile_3}");
    }
}

/// Why loading refuses a program of one rearrangement `name` of `runs` from an f32 `src`
/// of `src_len` elements on tile 0 to an f32 `dst` of `dst_len` elements on `dst_tile`.
fn rearrangement_refused(
    name: &str,
    src_len: usize,
    (dst_tile, dst_len): (usize, usize),
    runs: impl Into<Runs>,
) -> String {
    let mut b = ExecutableBuilder::new(Target::ipu2(), 1);
    let src = b.tensor("src", DType::F32, &[(0, 0, src_len)]);
    let dst = b.tensor("dst", DType::F32, &[(0, dst_tile, dst_len)]);
    b.tensor_mut(src).init = Some(vec![0; 4 * src_len]);
    let r = b.rearrange(runtime::Rearrange {
        name: name.into(),
        dst,
        sources: vec![src],
        fill: vec![],
        runs: runs.into(),
    });
    let e = Engine::load(b.finish(Program::Rearrange(r))).err().unwrap();
    e.to_string()
}

#[test]
fn a_strided_run_reading_below_its_source_is_rejected() {
    use runtime::{Run, RunSource};
    let run = Run {
        source: RunSource::Tensor {
            k: 0,
            start: 1,
            stride: -1,
        },
        dst_start: 0,
        len: 3,
    };
    let e = rearrangement_refused("bad", 4, (1, 3), vec![run]);
    assert!(e.contains("reads elements -1..2 of src which has 4"), "{e}");
}

/// A block of runs is checked at its ends: a last run past the destination or the source,
/// or a count that would wrap around, is refused however the block was stored.
#[test]
fn a_block_whose_last_run_leaves_its_tensors_is_rejected() {
    use runtime::{Run, RunBlock, RunSource};
    let block = |count, dst_step, src_step| {
        Runs::from_blocks(vec![RunBlock {
            first: Run {
                source: RunSource::contiguous(0, 0),
                dst_start: 0,
                len: 2,
            },
            count,
            dst_step,
            src_step,
        }])
    };
    // Four runs of 2 into 6 elements: the last writes 6..8.
    let e = rearrangement_refused("past", 8, (1, 6), block(4, 2, 2));
    assert!(e.contains("writes elements 6..8 of dst which has 6"), "{e}");
    // Three runs reading every 4th pair of 8 source elements: the last reads 8..10.
    let e = rearrangement_refused("beyond", 8, (1, 6), block(3, 2, 4));
    assert!(e.contains("reads elements 8..10 of src which has 8"), "{e}");
    // A count whose steps wrap the address space back into range.
    let e = rearrangement_refused("wraps", 8, (1, 6), block(1 << 62, 4, 0));
    assert!(e.contains("writes elements"), "{e}");
    let e = rearrangement_refused("overflows", 8, (1, 6), block(usize::MAX, 2, 2));
    assert!(e.contains("writes elements"), "{e}");
    // A block of many empty runs (never written so) would only make work.
    let mut empty = block(usize::MAX, 0, 0);
    let b = empty.blocks()[0];
    empty = Runs::from_blocks(vec![
        RunBlock {
            first: Run { len: 0, ..b.first },
            ..b
        },
        RunBlock::single(Run::reading(0, (0, 1), 0, 6)),
    ]);
    let e = rearrangement_refused("empty", 8, (1, 6), empty);
    assert!(
        e.contains("a block of 18446744073709551615 empty runs"),
        "{e}"
    );
}

/// Runs whose lengths add up to the destination but overlap leave other elements unwritten.
#[test]
fn a_rearrangement_writing_an_element_twice_is_rejected() {
    use runtime::{Run, RunSource};
    let run = |dst_start, len| Run {
        source: RunSource::contiguous(0, dst_start),
        dst_start,
        len,
    };
    // 170..200, 0..100 and 70..140: 200 elements written, 70..100 twice, 140..170 never.
    let runs = vec![run(170, 30), run(0, 100), run(70, 70)];
    let e = rearrangement_refused("twice", 200, (1, 200), runs);
    assert!(
        e.contains(
            "rearrangement twice: element 70 of dst is written by two runs (and so another by none)"
        ),
        "{e}"
    );
}

#[test]
fn a_rearrangement_reading_past_its_source_is_rejected() {
    use runtime::{Run, RunSource};
    let run = Run {
        source: RunSource::contiguous(0, 2),
        dst_start: 0,
        len: 4,
    };
    let e = rearrangement_refused("bad", 4, (0, 4), vec![run]);
    assert!(e.contains("reads elements 2..6 of src which has 4"), "{e}");
}

#[test]
fn codelet_vertices_run_on_their_tile_and_cost_what_they_say() {
    let mut b = ExecutableBuilder::new(Target::ipu2(), 1);
    let x = b.tensor("x", DType::F32, &[(0, 5, 4)]);
    let y = b.tensor("y", DType::F32, &[(0, 5, 4)]);
    b.tensor_mut(x).init = Some(f32_bytes(&[1.0, 2.0, 3.0, 4.0]));
    let c = b.codelet(runtime::CodeletRef::new(ReverseCodelet));
    let whole = |t| Region {
        tensor: t,
        start: 0,
        len: 4,
    };
    let cs = b.compute_set_with_codelets(
        "reverse",
        vec![],
        vec![runtime::CodeletVertex {
            codelet: c,
            ipu: 0,
            tile: 5,
            inputs: vec![whole(x)],
            outputs: vec![whole(y)],
        }],
    );
    let out = b.stream("out", Direction::DeviceToHost, DType::F32, 4);
    let exe = b.finish(Program::Sequence(vec![
        Program::Execute(cs),
        Program::StreamCopy {
            stream: out,
            tensor: y,
        },
    ]));
    let mut engine = Engine::load(exe.clone()).unwrap();
    let mut io = HostIo::new();
    let profile = engine.run(&mut io).unwrap();
    assert_eq!(f32_values(&io.take("out")[0]), vec![4.0, 3.0, 2.0, 1.0]);
    // one worker of 100 instructions: 6 x 100 cycles.
    assert_eq!(profile.steps[0].compute_cycles, 600);
    // Codelets are code: an executable read back from JSON has none and says so.
    let json = serde_json::to_string(&exe).unwrap();
    let back: runtime::Executable = serde_json::from_str(&json).unwrap();
    let e = Engine::load(back).err().unwrap();
    assert!(
        e.to_string()
            .contains("codelets do not survive serialisation"),
        "{e}"
    );
}

/// A step streaming f32 tensor `tensor` of `elements` out as `name`.
fn stream_out(b: &mut ExecutableBuilder, name: &str, tensor: TensorId, elements: usize) -> Program {
    stream_out_as(b, name, tensor, DType::F32, elements)
}

fn stream_out_as(
    b: &mut ExecutableBuilder,
    name: &str,
    tensor: TensorId,
    dtype: DType,
    elements: usize,
) -> Program {
    let stream = b.stream(name, Direction::DeviceToHost, dtype, elements);
    Program::StreamCopy { stream, tensor }
}

/// What an engine that keeps some tensors off the tiles (`host_only`) must show against one
/// made to write them (`written`, which also streams the first of `tensors` out as
/// `streamed`): the same result streamed as `out`, every tensor of `tensors` read back with
/// its values from both, and the same cost for the first `steps` steps, step `moving`
/// moving bytes.
fn check_against_written(
    host_only: &mut Engine,
    written: &mut Engine,
    (out, want): (&str, &[f32]),
    streamed: &str,
    tensors: &[(TensorId, &[f32])],
    (steps, moving): (usize, usize),
) {
    let [(mut io_host, p_host), (mut io_written, p_written)] = run_each([host_only, written]);
    assert_eq!(f32_values(&io_host.take(out)[0]), want);
    assert_eq!(f32_values(&io_written.take(out)[0]), want);
    assert_eq!(f32_values(&io_written.take(streamed)[0]), tensors[0].1);
    for &(t, values) in tensors {
        assert_eq!(f32_values(&host_only.read_tensor(t)), values);
        assert_eq!(f32_values(&written.read_tensor(t)), values);
    }
    assert_eq!(p_host.steps[..steps], p_written.steps[..steps]);
    assert!(p_host.steps[moving].bytes_moved > 0);
}

/// Runs each engine once (a host-only layout and a written one, say): its streamed
/// results and profile.
fn run_each<const N: usize>(engines: [&mut Engine; N]) -> [(HostIo, runtime::Profile); N] {
    engines.map(|e| {
        let mut io = HostIo::new();
        let profile = e.run(&mut io).unwrap();
        (io, profile)
    })
}

/// Values as f16 bytes (exact for the small halves and integers the tests use).
fn f16_bytes(v: &[f32]) -> Vec<u8> {
    let mut bytes = vec![0u8; v.len() * 2];
    codegen::halves::narrow_into(v, &mut bytes);
    bytes
}

/// Adds to `b`: `w` and `w3` (k×n, on tiles 2 and 3, of `dtype`), the row blocks of the
/// transpose of `x` (k×m with m = 6, k = 4, n = 3) on tiles 2 and 3 as rearrangement
/// `blocks`, and one matrix-product vertex per tile writing `c` (m×n, f32 partials) =
/// blocks · w. Returns the rearrangement, the compute set, `blocks` and `c`.
fn transposed_blocks_times_w(
    b: &mut ExecutableBuilder,
    x: TensorId,
    dtype: DType,
) -> (
    runtime::RearrangeId,
    runtime::ComputeSetId,
    TensorId,
    TensorId,
) {
    use runtime::{Rearrange, Run, RunSource};
    let (m, k, n) = (6, 4, 3);
    let w = b.tensor("w", dtype, &[(0, 2, k * n)]);
    let w3 = b.tensor("w3", dtype, &[(0, 3, k * n)]);
    let blocks = b.tensor("blocks", dtype, &[(0, 2, m * k / 2), (0, 3, m * k / 2)]);
    let c = b.tensor("c", DType::F32, &[(0, 2, m * n / 2), (0, 3, m * n / 2)]);
    let wv = w_values();
    for t in [w, w3] {
        b.tensor_mut(t).init = Some(match dtype {
            DType::F16 => f16_bytes(&wv),
            _ => f32_bytes(&wv),
        });
    }
    // Row i of the blocks is column i of x: a run of stride m.
    let runs: Vec<Run> = (0..m)
        .map(|i| Run {
            source: RunSource::Tensor {
                k: 0,
                start: i,
                stride: m as isize,
            },
            dst_start: i * k,
            len: k,
        })
        .collect();
    let r = b.rearrange(Rearrange {
        name: "blocks".into(),
        dst: blocks,
        sources: vec![x],
        fill: vec![],
        runs: runs.into(),
    });
    let kernel = KernelSpec::MatMul(codegen::MatMulKernel {
        m: m / 2,
        k,
        n,
        input: dtype,
        partials: codegen::DType::F32,
    });
    let region = |tensor, start, len| Region { tensor, start, len };
    let vertices = (0..2)
        .map(|h| Vertex {
            kernel: kernel.clone().into(),
            ipu: 0,
            tile: 2 + h,
            inputs: smallvec::smallvec![
                region(blocks, h * m * k / 2, m * k / 2),
                region([w, w3][h], 0, k * n),
            ],
            outputs: smallvec::smallvec![region(c, h * m * n / 2, m * n / 2)],
            run_length: 0,
            grain: 0,
        })
        .collect();
    let cs = b.compute_set("product", vertices);
    (r, cs, blocks, c)
}

/// The values of `w` in [`transposed_blocks_times_w`].
fn w_values() -> Vec<f32> {
    (0..12).map(|i| (i % 5) as f32 - 2.0).collect()
}

/// What [`transposed_blocks_times_w`] writes to `c` from each `x`: xᵀ · w.
fn transposed_times_w(xs: &[&[f32]]) -> Vec<Vec<f32>> {
    let (m, k, n) = (6, 4, 3);
    let wv = w_values();
    xs.iter()
        .map(|xv| {
            (0..m * n)
                .map(|e| {
                    let (row, col) = (e / n, e % n);
                    (0..k).map(|q| xv[q * m + row] * wv[q * n + col]).sum()
                })
                .collect()
        })
        .collect()
}

/// Builds: `x` (k×m on tiles 0 and 1, of `dtype`) → rearrangement to its transpose's row
/// blocks on tiles 2 and 3 → one matrix-product vertex per tile (C rows = xᵀ rows · w, f32
/// partials) → C streamed out; optionally also streams the blocks out (a second reader, so
/// they must be written).
fn transposed_product(dtype: DType, stream_blocks: bool) -> (Engine, TensorId, Vec<f32>, Vec<f32>) {
    let (m, k, n) = (6, 4, 3);
    let mut b = ExecutableBuilder::new(Target::ipu2().with_tiles_per_ipu(4), 1);
    let x = b.tensor("x", dtype, &[(0, 0, k * m / 2), (0, 1, k * m / 2)]);
    let xv: Vec<f32> = (0..k * m).map(|i| i as f32 * 0.5 - 3.0).collect();
    b.tensor_mut(x).init = Some(match dtype {
        DType::F16 => f16_bytes(&xv),
        _ => f32_bytes(&xv),
    });
    let (r, cs, blocks, c) = transposed_blocks_times_w(&mut b, x, dtype);
    let sc = b.stream("c", Direction::DeviceToHost, DType::F32, m * n);
    let mut program = vec![
        Program::Rearrange(r),
        Program::Execute(cs),
        Program::StreamCopy {
            stream: sc,
            tensor: c,
        },
    ];
    if stream_blocks {
        program.push(stream_out_as(&mut b, "blocks", blocks, dtype, m * k));
    }
    let exe = b.finish(Program::Sequence(program));
    let transpose: Vec<f32> = (0..m * k).map(|e| xv[(e % k) * m + e / k]).collect();
    let want = transposed_times_w(&[&xv]).remove(0);
    (Engine::load(exe).unwrap(), blocks, transpose, want)
}

/// Builds: `x` (8 f32s on tiles 0 and 1) → a rearrangement copying 4 of its elements with
/// `stride` to each of tiles 2 and 3, from element 0 and 1 (`copies`, as a convolution's
/// input is copied to each part's tile) → a reversing codelet vertex per tile writing `y` → `y`
/// streamed out; optionally `copies` streamed out too (a second reader: they are written).
fn copied_to_codelets(stride: isize, stream_copies: bool) -> (Engine, TensorId, Vec<f32>) {
    copied_to_codelets_from([0, 1], stride, stream_copies)
}

/// [`copied_to_codelets`] with tile 2's and tile 3's copies starting at elements `starts`.
fn copied_to_codelets_from(
    starts: [usize; 2],
    stride: isize,
    stream_copies: bool,
) -> (Engine, TensorId, Vec<f32>) {
    use runtime::{Rearrange, Run, RunSource};
    let mut b = ExecutableBuilder::new(Target::ipu2().with_tiles_per_ipu(4), 1);
    let x = b.tensor("x", DType::F32, &[(0, 0, 4), (0, 1, 4)]);
    let copies = b.tensor("copies", DType::F32, &[(0, 2, 4), (0, 3, 4)]);
    let y = b.tensor("y", DType::F32, &[(0, 2, 4), (0, 3, 4)]);
    let xv: Vec<f32> = (0..8).map(|i| i as f32 * 1.5 - 4.0).collect();
    b.tensor_mut(x).init = Some(f32_bytes(&xv));
    let run = |part: usize| Run {
        source: RunSource::Tensor {
            k: 0,
            start: starts[part],
            stride,
        },
        dst_start: part * 4,
        len: 4,
    };
    let r = b.rearrange(Rearrange {
        name: "copies".into(),
        dst: copies,
        sources: vec![x],
        fill: vec![],
        runs: vec![run(0), run(1)].into(),
    });
    let c = b.codelet(runtime::CodeletRef::new(ReverseCodelet));
    let quarter = |tensor, tile: usize| Region {
        tensor,
        start: (tile - 2) * 4,
        len: 4,
    };
    let vertices = (2..4)
        .map(|tile| runtime::CodeletVertex {
            codelet: c,
            ipu: 0,
            tile,
            inputs: vec![quarter(copies, tile)],
            outputs: vec![quarter(y, tile)],
        })
        .collect();
    let cs = b.compute_set_with_codelets("reverse", vec![], vertices);
    let mut program = vec![
        Program::Rearrange(r),
        Program::Execute(cs),
        stream_out(&mut b, "y", y, 8),
    ];
    if stream_copies {
        program.push(stream_out(&mut b, "copies", copies, 8));
    }
    let exe = b.finish(Program::Sequence(program));
    let copied = (0..8)
        .map(|e| xv[(starts[e / 4] as isize + (e % 4) as isize * stride) as usize])
        .collect();
    (Engine::load(exe).unwrap(), copies, copied)
}

/// What the codelets of [`copied_to_codelets_from`] write: each tile's copy reversed.
fn reversed_copies(copied: &[f32]) -> Vec<f32> {
    copied
        .chunks(4)
        .flat_map(|c| c.iter().rev())
        .copied()
        .collect()
}

/// Both codelets read their copies (`starts`, `stride`) from the kept window, `what` (in
/// place or through a shared piece), with the results and costs of the copies written.
fn codelets_read_the_window_as_if_written(starts: [usize; 2], stride: isize, what: &str) {
    let (mut kept, copies, copied) = copied_to_codelets_from(starts, stride, false);
    let (mut written, _, _) = copied_to_codelets_from(starts, stride, true);
    assert_eq!(kept.windowed_codelet_inputs(), 2, "both read {what}");
    assert_eq!(
        written.windowed_codelet_inputs(),
        0,
        "streamed copies are written"
    );
    check_against_written(
        &mut kept,
        &mut written,
        ("y", &reversed_copies(&copied)),
        "copies",
        &[(copies, &copied)],
        (2, 0),
    );
}

#[test]
fn codelet_inputs_only_codelets_read_are_read_from_the_window_with_the_same_results_and_cost() {
    codelets_read_the_window_as_if_written([0, 1], 1, "the window");
}

#[test]
fn strided_copies_are_written_for_codelets_which_read_bytes() {
    // Every other element: a view with a column step, which a codelet cannot read.
    let (mut engine, copies, copied) = copied_to_codelets(2, false);
    assert_eq!(engine.windowed_codelet_inputs(), 0);
    let mut io = HostIo::new();
    engine.run(&mut io).unwrap();
    assert_eq!(f32_values(&io.take("y")[0]), reversed_copies(&copied));
    assert_eq!(f32_values(&engine.read_tensor(copies)), copied);
}

#[test]
fn a_piece_every_codelet_copies_alike_is_gathered_once_with_the_same_results_and_cost() {
    // Both tiles copy elements 7, 6, 5, 4 (a reversed kernel sent to every part of a
    // convolution): no contiguous piece of the window, but one both can read.
    codelets_read_the_window_as_if_written([7, 7], -1, "the shared piece");
    // Pieces read by one tile each would only move the copies elsewhere: they are written.
    let (alone, _, _) = copied_to_codelets_from([7, 5], -1, false);
    assert_eq!(alone.windowed_codelet_inputs(), 0);
}

#[test]
fn operand_blocks_only_products_read_are_read_in_place_with_the_same_results_and_cost() {
    let (mut kept, blocks, transpose, want) = transposed_product(DType::F32, false);
    let (mut written, _, _, _) = transposed_product(DType::F32, true);
    // The blocks read back as if written, and the copy is charged the same either way.
    check_against_written(
        &mut kept,
        &mut written,
        ("c", &want),
        "blocks",
        &[(blocks, &transpose)],
        (2, 0),
    );
}

#[test]
fn f16_operand_blocks_are_widened_once_and_read_in_place_with_the_same_results_and_cost() {
    let (mut kept, blocks, transpose, want) = transposed_product(DType::F16, false);
    let (mut written, _, _, _) = transposed_product(DType::F16, true);
    assert!(kept.viewed_products() > 0, "the blocks are read in place");
    assert_eq!(written.viewed_products(), 0, "streamed blocks are written");
    let [(mut io_kept, p_kept), (mut io_written, p_written)] = run_each([&mut kept, &mut written]);
    assert_eq!(f32_values(&io_kept.take("c")[0]), want);
    assert_eq!(f32_values(&io_written.take("c")[0]), want);
    // The kept window reads back as the f16 bytes the rearrangement would have written.
    let halves = f16_bytes(&transpose);
    assert_eq!(io_written.take("blocks")[0], halves);
    assert_eq!(kept.read_tensor(blocks), halves);
    assert_eq!(written.read_tensor(blocks), halves);
    assert_eq!(p_kept.steps[..2], p_written.steps[..2]);
}

/// Builds the encoder's weight path in small: `p` (two k×m matrices stacked, on tiles 0
/// and 1) streamed in → slice 0 copied to `x` (as a called function's argument) → `x`'s
/// transpose's row blocks on tiles 2 and 3 (only the products read them) → a
/// matrix-product vertex per tile → `c` streamed out; then the same from slice 1. With
/// `stream_x`, `x` is streamed out after each product too (a second reader, so the copies
/// must be written). With `restream`, `p` is streamed in again between the first copy and
/// the blocks it feeds. Returns the engine and `x`.
fn sliced_product(stream_x: bool, restream: bool) -> (Engine, TensorId) {
    use runtime::{Rearrange, Run, RunSource};
    let (m, k, n) = (6, 4, 3);
    let mut b = ExecutableBuilder::new(Target::ipu2().with_tiles_per_ipu(4), 1);
    let p = b.tensor("p", DType::F32, &[(0, 0, k * m + 5), (0, 1, k * m - 5)]);
    let x = b.tensor("x", DType::F32, &[(0, 1, k * m / 2), (0, 0, k * m / 2)]);
    let slices = [0, 1].map(|l| {
        b.rearrange(Rearrange {
            name: format!("slice {l} -> x"),
            dst: x,
            sources: vec![p],
            fill: vec![],
            runs: vec![Run {
                source: RunSource::contiguous(0, l * k * m),
                dst_start: 0,
                len: k * m,
            }]
            .into(),
        })
    });
    let (r, cs, _, c) = transposed_blocks_times_w(&mut b, x, DType::F32);
    let sp = b.stream("p", Direction::HostToDevice, DType::F32, 2 * k * m);
    let stream_p = Program::StreamCopy {
        stream: sp,
        tensor: p,
    };
    let mut program = vec![stream_p.clone()];
    for (l, slice) in slices.into_iter().enumerate() {
        program.push(Program::Rearrange(slice));
        if restream && l == 0 {
            program.push(stream_p.clone());
        }
        program.extend([Program::Rearrange(r), Program::Execute(cs)]);
        program.push(stream_out(&mut b, "c", c, m * n));
        if stream_x {
            program.push(stream_out(&mut b, "x", x, k * m));
        }
    }
    let exe = b.finish(Program::Sequence(program));
    (Engine::load(exe).unwrap(), x)
}

/// The copies into `x` are deferred (only the blocks' window reads `x`), the window
/// gathered through them from `p`; `p` streamed in again while a copy is pending keeps the
/// copy's bytes. The products, `x` read back, and every cost match the engine that writes
/// the copies (it streams `x` out), over two runs.
fn sliced_products_match_written_copies(restream: bool) {
    let (mut deferred, x) = sliced_product(false, restream);
    let (mut written, _) = sliced_product(true, restream);
    assert_eq!(deferred.deferred_copies(), 2);
    assert_eq!(written.deferred_copies(), 0);
    assert!(deferred.host_only_tensors().contains(&x));
    assert!(
        deferred.viewed_products() > 0,
        "the blocks are read in place"
    );
    let (m, k) = (6, 4);
    for run in 0..2 {
        let feeds: Vec<Vec<f32>> = (0..2)
            .map(|f| {
                (0..2 * k * m)
                    .map(|i| (i + 7 * f + 3 * run) as f32 * 0.5 - 9.0)
                    .collect()
            })
            .collect();
        let slice = |f: usize, l: usize| &feeds[f][l * k * m..(l + 1) * k * m];
        let second = if restream { 1 } else { 0 };
        let want = transposed_times_w(&[slice(0, 0), slice(second, 1)]);
        let mut profiles = Vec::new();
        for (engine, streams_x) in [(&mut deferred, false), (&mut written, true)] {
            let mut io = HostIo::new();
            for feed in &feeds[..1 + usize::from(restream)] {
                io.feed("p", f32_bytes(feed));
            }
            profiles.push(engine.run(&mut io).unwrap());
            let outs: Vec<Vec<f32>> = io.take("c").iter().map(|b| f32_values(b)).collect();
            assert_eq!(outs, want, "run {run}");
            if streams_x {
                let xs: Vec<Vec<f32>> = io.take("x").iter().map(|b| f32_values(b)).collect();
                assert_eq!(xs, [slice(0, 0), slice(second, 1)]);
            }
            assert_eq!(f32_values(&engine.read_tensor(x)), slice(second, 1));
        }
        let costs = |p: &runtime::Profile| -> Vec<_> {
            let steps = p.steps.iter().filter(|s| s.name != "stream x");
            steps
                .map(|s| (s.name.clone(), s.cycles, s.bytes_moved))
                .collect()
        };
        assert_eq!(costs(&profiles[0]), costs(&profiles[1]));
    }
}

#[test]
fn copies_only_kept_windows_read_are_deferred_with_the_same_results_and_cost() {
    sliced_products_match_written_copies(false);
}

#[test]
fn a_source_streamed_again_while_its_copy_is_pending_keeps_the_copys_bytes() {
    sliced_products_match_written_copies(true);
}

/// Builds: `x` (m×k) and `w` (k×n) → x copied to tiles 2 and 3, w's two column halves to
/// tiles 2 and 3 → one matrix-product vertex per tile (both operands read in place, so the
/// host runs them as one batch) writing the partials `c` → `c` rearranged into `out`
/// (m×n on tile 0) → out streamed; optionally `c` streamed too (a second reader, so it
/// must be written to the tiles).
fn batched_product(stream_partials: bool) -> (Engine, TensorId, Vec<f32>, Vec<f32>) {
    use runtime::{Rearrange, Run, RunSource};
    let (m, k, n) = (3, 4, 6);
    let h = n / 2;
    let mut b = ExecutableBuilder::new(Target::ipu2().with_tiles_per_ipu(4), 1);
    let x = b.tensor("x", DType::F32, &[(0, 0, m * k)]);
    let w = b.tensor("w", DType::F32, &[(0, 1, k * n)]);
    let a = b.tensor("a", DType::F32, &[(0, 2, m * k), (0, 3, m * k)]);
    let bb = b.tensor("b", DType::F32, &[(0, 2, k * h), (0, 3, k * h)]);
    let c = b.tensor("c", DType::F32, &[(0, 2, m * h), (0, 3, m * h)]);
    let out = b.tensor("out", DType::F32, &[(0, 0, m * n)]);
    let xv: Vec<f32> = (0..m * k).map(|i| i as f32 * 0.25 - 1.0).collect();
    let wv: Vec<f32> = (0..k * n).map(|i| (i % 7) as f32 - 3.0).collect();
    b.tensor_mut(x).init = Some(f32_bytes(&xv));
    b.tensor_mut(w).init = Some(f32_bytes(&wv));
    let run = |start, dst_start, len| Run {
        source: RunSource::contiguous(0, start),
        dst_start,
        len,
    };
    let ra = b.rearrange(Rearrange {
        name: "a".into(),
        dst: a,
        sources: vec![x],
        fill: vec![],
        runs: Runs::from(vec![run(0, 0, m * k), run(0, m * k, m * k)]),
    });
    let rb = b.rearrange(Rearrange {
        name: "b".into(),
        dst: bb,
        sources: vec![w],
        fill: vec![],
        runs: (0..2)
            .flat_map(|j| (0..k).map(move |r| (j, r)))
            .map(|(j, r)| run(r * n + j * h, (j * k + r) * h, h))
            .collect(),
    });
    let kernel = KernelSpec::MatMul(codegen::MatMulKernel {
        m,
        k,
        n: h,
        input: DType::F32,
        partials: codegen::DType::F32,
    });
    let region = |tensor, start, len| Region { tensor, start, len };
    let vertices = (0..2)
        .map(|j| Vertex {
            kernel: kernel.clone().into(),
            ipu: 0,
            tile: 2 + j,
            inputs: smallvec::smallvec![region(a, j * m * k, m * k), region(bb, j * k * h, k * h)],
            outputs: smallvec::smallvec![region(c, j * m * h, m * h)],
            run_length: 0,
            grain: 0,
        })
        .collect();
    let cs = b.compute_set("product", vertices);
    // Partials [half][row][col] into out [row][half * h + col].
    let rc = b.rearrange(Rearrange {
        name: "result".into(),
        dst: out,
        sources: vec![c],
        fill: vec![],
        runs: (0..2)
            .flat_map(|j| (0..m).map(move |r| (j, r)))
            .map(|(j, r)| run((j * m + r) * h, r * n + j * h, h))
            .collect(),
    });
    let so = b.stream("out", Direction::DeviceToHost, DType::F32, m * n);
    let mut program = vec![
        Program::Rearrange(ra),
        Program::Rearrange(rb),
        Program::Execute(cs),
        Program::Rearrange(rc),
        Program::StreamCopy {
            stream: so,
            tensor: out,
        },
    ];
    if stream_partials {
        program.push(stream_out(&mut b, "c", c, m * n));
    }
    let exe = b.finish(Program::Sequence(program));
    let want: Vec<f32> = (0..m * n)
        .map(|e| {
            (0..k)
                .map(|p| xv[(e / n) * k + p] * wv[p * n + e % n])
                .sum()
        })
        .collect();
    let partials = (0..m * n)
        .map(|e| {
            let (j, r, col) = (e / (m * h), e / h % m, e % h);
            want[r * n + j * h + col]
        })
        .collect();
    (Engine::load(exe).unwrap(), c, partials, want)
}

#[test]
fn batched_partials_read_from_the_host_scratch_match_partials_written_to_the_tiles() {
    let (mut kept, c, partials, want) = batched_product(false);
    let (mut written, _, _, _) = batched_product(true);
    // The partials read back as if written, and every step costs the same either way.
    check_against_written(
        &mut kept,
        &mut written,
        ("out", &want),
        "c",
        &[(c, &partials)],
        (5, 3),
    );
}

/// A product split over K (2 parts) and N (2 parts) on tiles 0..3: each K part's partials
/// (one block per N part) go to a K-part tensor in result order on tiles 0 and 1, which an
/// element-wise add sums into `out`. With `stream_part`, the first K-part tensor is also
/// streamed out (so it must be written). With `twice`, all of it is a function called twice,
/// `x` doubled in place between the calls (so `out` is streamed twice, the second time
/// twice the product). Returns the engine, the K-part tensors, the K parts' values and the
/// product (the first call's).
fn k_split_product(
    stream_part: bool,
    twice: bool,
    copy_between: bool,
) -> (Engine, [TensorId; 2], [Vec<f32>; 2], Vec<f32>) {
    use runtime::{Rearrange, Run, RunSource};
    let (m, k, n) = (3, 4, 6);
    let (kh, h) = (k / 2, n / 2);
    let mut b = ExecutableBuilder::new(Target::ipu2().with_tiles_per_ipu(4), 1);
    let x = b.tensor("x", DType::F32, &[(0, 0, m * k)]);
    let w = b.tensor("w", DType::F32, &[(0, 1, k * n)]);
    // Vertex (kp, np) on tile 2 * kp + np: lhs block m x kh, rhs block kh x h.
    let blocks = |len| -> Vec<(usize, usize, usize)> { (0..4).map(|t| (0, t, len)).collect() };
    let a = b.tensor("a", DType::F32, &blocks(m * kh));
    let bb = b.tensor("b", DType::F32, &blocks(kh * h));
    let c = b.tensor("c", DType::F32, &blocks(m * h));
    let parts = [0, 1].map(|kp| {
        b.tensor(
            &format!("k{kp}"),
            DType::F32,
            &[(0, 0, m * n / 2), (0, 1, m * n / 2)],
        )
    });
    let out = b.tensor("out", DType::F32, &[(0, 0, m * n / 2), (0, 1, m * n / 2)]);
    let x_copy = b.tensor("x copy", DType::F32, &[(0, 0, m * k)]);
    let xv: Vec<f32> = (0..m * k).map(|i| i as f32 * 0.25 - 1.0).collect();
    let wv: Vec<f32> = (0..k * n).map(|i| (i % 7) as f32 - 3.0).collect();
    b.tensor_mut(x).init = Some(f32_bytes(&xv));
    b.tensor_mut(w).init = Some(f32_bytes(&wv));
    let run = |start, dst_start, len| Run {
        source: RunSource::contiguous(0, start),
        dst_start,
        len,
    };
    let tiles = || (0..2).flat_map(|kp| (0..2).map(move |np| (kp, np)));
    let ra = b.rearrange(Rearrange {
        name: "lhs_blocks".into(),
        dst: a,
        sources: vec![x],
        fill: vec![],
        runs: tiles()
            .flat_map(|(kp, np)| (0..m).map(move |r| (kp, np, r)))
            .map(|(kp, np, r)| run(r * k + kp * kh, ((2 * kp + np) * m + r) * kh, kh))
            .collect(),
    });
    let rb = b.rearrange(Rearrange {
        name: "rhs_blocks".into(),
        dst: bb,
        sources: vec![w],
        fill: vec![],
        runs: tiles()
            .flat_map(|(kp, np)| (0..kh).map(move |r| (kp, np, r)))
            .map(|(kp, np, r)| run((kp * kh + r) * n + np * h, ((2 * kp + np) * kh + r) * h, h))
            .collect(),
    });
    let kernel = KernelSpec::MatMul(codegen::MatMulKernel {
        m,
        k: kh,
        n: h,
        input: DType::F32,
        partials: codegen::DType::F32,
    });
    let region = |tensor, start, len| Region { tensor, start, len };
    let vertices = tiles()
        .map(|(kp, np)| {
            let t = 2 * kp + np;
            Vertex {
                kernel: kernel.clone().into(),
                ipu: 0,
                tile: t,
                inputs: smallvec::smallvec![
                    region(a, t * m * kh, m * kh),
                    region(bb, t * kh * h, kh * h),
                ],
                outputs: smallvec::smallvec![region(c, t * m * h, m * h)],
                run_length: 0,
                grain: 0,
            }
        })
        .collect();
    let product = b.compute_set("product", vertices);
    let results = [0, 1].map(|kp| {
        b.rearrange(Rearrange {
            name: format!("result{kp}"),
            dst: parts[kp],
            sources: vec![c],
            fill: vec![],
            runs: (0..2)
                .flat_map(|np| (0..m).map(move |r| (np, r)))
                .map(|(np, r)| run(((2 * kp + np) * m + r) * h, r * n + np * h, h))
                .collect(),
        })
    });
    let sum = b.compute_set(
        "sum",
        (0..2)
            .map(|t| Vertex {
                kernel: add_kernel().into(),
                ipu: 0,
                tile: t,
                inputs: parts
                    .map(|p| region(p, t * m * n / 2, m * n / 2))
                    .into_iter()
                    .collect(),
                outputs: smallvec::smallvec![region(out, t * m * n / 2, m * n / 2)],
                run_length: 0,
                grain: 0,
            })
            .collect(),
    );
    let so = b.stream("out", Direction::DeviceToHost, DType::F32, m * n);
    let mut program = vec![
        Program::Rearrange(ra),
        Program::Rearrange(rb),
        Program::Execute(product),
        Program::Rearrange(results[0]),
        Program::Rearrange(results[1]),
        Program::Execute(sum),
        Program::StreamCopy {
            stream: so,
            tensor: out,
        },
    ];
    if copy_between {
        // An on-tile copy between the K parts' rearrangements and their sum.
        let copy = Program::Copy {
            src: x,
            dst: x_copy,
        };
        program.insert(5, copy);
    }
    if stream_part {
        program.push(stream_out(&mut b, "k0", parts[0], m * n));
    }
    if twice {
        let f = b.function(Program::Sequence(program));
        let v = b.elementwise_vertices(&add_kernel(), &[x, x], &[x]);
        let double = b.compute_set("double x", v);
        program = vec![Program::Call(f), Program::Execute(double), Program::Call(f)];
    }
    let exe = b.finish(Program::Sequence(program));
    let part = |kp: usize| -> Vec<f32> {
        (0..m * n)
            .map(|e| {
                (kp * kh..(kp + 1) * kh)
                    .map(|p| xv[(e / n) * k + p] * wv[p * n + e % n])
                    .sum()
            })
            .collect()
    };
    let values = [part(0), part(1)];
    let want = values[0]
        .iter()
        .zip(&values[1])
        .map(|(p, q)| p + q)
        .collect();
    (Engine::load(exe).unwrap(), parts, values, want)
}

/// The K-split product (with an on-tile copy between its parts' rearrangements and their
/// sum, or not) summed from the host scratch against the same with a K part written (it
/// is streamed): the K parts read back as if written, every step before the stream costs
/// the same either way, and the parts are summed from the scratch unless written.
fn scratch_sums_match_written_ones(copy_between: bool) {
    let (mut scratch, parts, values, want) = k_split_product(false, false, copy_between);
    let (mut written, _, _, _) = k_split_product(true, false, copy_between);
    check_against_written(
        &mut scratch,
        &mut written,
        ("out", &want),
        "k0",
        &[(parts[0], &values[0]), (parts[1], &values[1])],
        (7 + usize::from(copy_between), 3),
    );
    let host_only = |e: &Engine| parts.map(|p| e.host_only_tensors().contains(&p));
    assert_eq!(host_only(&scratch), [true, true]);
    assert_eq!(host_only(&written), [false, true]);
}

#[test]
fn k_parts_summed_from_the_host_scratch_match_k_parts_written_to_the_tiles() {
    scratch_sums_match_written_ones(false);
}

#[test]
fn k_parts_summed_from_the_scratch_in_a_function_called_twice_read_each_calls_product() {
    let (mut scratch, parts, values, want) = k_split_product(false, true, false);
    let (mut written, _, _, _) = k_split_product(true, true, false);
    let doubled = |v: &[f32]| -> Vec<f32> { v.iter().map(|x| 2.0 * x).collect() };
    let [(mut io_scratch, p_scratch), (mut io_written, p_written)] =
        run_each([&mut scratch, &mut written]);
    for io in [&mut io_scratch, &mut io_written] {
        let outs: Vec<Vec<f32>> = io.take("out").iter().map(|b| f32_values(b)).collect();
        assert_eq!(outs, [want.clone(), doubled(&want)]);
    }
    // After the run the K parts read as the second call wrote them.
    for (p, v) in parts.iter().zip(&values) {
        assert_eq!(f32_values(&scratch.read_tensor(*p)), doubled(v));
        assert_eq!(f32_values(&written.read_tensor(*p)), doubled(v));
    }
    // Every step but the written one's extra stream costs the same.
    let others = |p: &runtime::Profile| -> Vec<_> {
        let steps = p.steps.iter().filter(|s| !s.name.contains("k0"));
        steps.map(|s| (s.name.clone(), s.cycles)).collect()
    };
    assert_eq!(others(&p_scratch), others(&p_written));
    // The function's K parts are summed from the scratch, as in the main program.
    let host_only = |e: &Engine| parts.map(|p| e.host_only_tensors().contains(&p));
    assert_eq!(host_only(&scratch), [true, true]);
    assert_eq!(host_only(&written), [false, true]);
}

/// A copy between the K parts' rearrangements and their sum runs no compute set: the parts
/// are still summed from the product's scratch, and read back as written.
#[test]
fn k_parts_summed_from_the_scratch_past_a_copy_match_k_parts_written() {
    scratch_sums_match_written_ones(true);
}

/// Two branches on two IPUs: `x + x` twice on IPU 0, `y + y` once on IPU 1. Run side by side
/// (`Parallel`) or one after the other (`Sequence`).
fn two_ipu_branches(parallel: bool) -> (Vec<Vec<f32>>, runtime::Profile, runtime::Profile) {
    let n = 4096;
    let mut b = ExecutableBuilder::new(Target::ipu2().with_tiles_per_ipu(4), 2);
    let x = b.tensor_spread("x", DType::F32, n, 0, 4);
    let x2 = b.tensor_spread("x2", DType::F32, n, 0, 4);
    let x4 = b.tensor_spread("x4", DType::F32, n, 0, 4);
    let y = b.tensor_spread("y", DType::F32, n, 1, 4);
    let y2 = b.tensor_spread("y2", DType::F32, n, 1, 4);
    let sx = b.stream("x", Direction::HostToDevice, DType::F32, n);
    let sy = b.stream("y", Direction::HostToDevice, DType::F32, n);
    let ox = b.stream("x4", Direction::DeviceToHost, DType::F32, n);
    let oy = b.stream("y2", Direction::DeviceToHost, DType::F32, n);
    let v = b.elementwise_vertices(&add_kernel(), &[x, x], &[x2]);
    let a0 = b.compute_set("x2", v);
    let v = b.elementwise_vertices(&add_kernel(), &[x2, x2], &[x4]);
    let a1 = b.compute_set("x4", v);
    let v = b.elementwise_vertices(&add_kernel(), &[y, y], &[y2]);
    let b0 = b.compute_set("y2", v);
    let branches = vec![
        Program::Sequence(vec![Program::Execute(a0), Program::Execute(a1)]),
        Program::Execute(b0),
    ];
    let middle = if parallel {
        Program::Parallel(branches)
    } else {
        Program::Sequence(branches)
    };
    let exe = b.finish(Program::Sequence(vec![
        Program::StreamCopy {
            stream: sx,
            tensor: x,
        },
        Program::StreamCopy {
            stream: sy,
            tensor: y,
        },
        middle,
        Program::StreamCopy {
            stream: ox,
            tensor: x4,
        },
        Program::StreamCopy {
            stream: oy,
            tensor: y2,
        },
    ]));
    let system = runtime::System::new(exe.target.clone(), 2).unwrap();
    let estimate = runtime::estimate(&exe, &system).unwrap();
    let mut engine = Engine::load(exe).unwrap();
    let mut io = HostIo::new();
    io.feed("x", f32_bytes(&vec![1.0; n]));
    io.feed("y", f32_bytes(&vec![3.0; n]));
    let profile = engine.run(&mut io).unwrap();
    let outs = ["x4", "y2"].map(|s| f32_values(&io.take(s)[0])).to_vec();
    (outs, profile, estimate)
}

#[test]
fn parallel_branches_on_disjoint_ipus_run_their_supersteps_side_by_side() {
    let (outs, parallel, estimate) = two_ipu_branches(true);
    assert_eq!(outs[0], vec![4.0; 4096]);
    assert_eq!(outs[1], vec![6.0; 4096]);
    assert_eq!(parallel, estimate, "the estimate is the run");
    let (_, sequential, _) = two_ipu_branches(false);
    // y2's superstep runs beside x2's (the same size, so as long): it costs nothing more.
    let y2 = sequential
        .steps
        .iter()
        .find(|s| s.name == "y2")
        .unwrap()
        .cycles;
    assert_eq!(parallel.total_cycles, sequential.total_cycles - y2);
    let beside = parallel
        .steps
        .iter()
        .find(|s| s.name.starts_with("y2 (beside"))
        .unwrap();
    assert_eq!(
        (beside.cycles, beside.name.as_str()),
        (0, "y2 (beside branch 0)")
    );
}

#[test]
fn parallel_branches_may_not_share_an_ipu_or_branch_on_data() {
    let e = load_error(|b| {
        let t = b.tensor_spread("t", DType::F32, 8, 0, 2);
        let u = b.tensor_spread("u", DType::F32, 8, 0, 2);
        let s = b.stream("t", Direction::HostToDevice, DType::F32, 8);
        let v = b.elementwise_vertices(&add_kernel(), &[t, t], &[u]);
        let c1 = b.compute_set("one", v.clone());
        let c2 = b.compute_set("two", v);
        Program::Sequence(vec![
            Program::StreamCopy {
                stream: s,
                tensor: t,
            },
            Program::Parallel(vec![Program::Execute(c1), Program::Execute(c2)]),
        ])
    });
    assert!(
        e.contains("branches 0 and 1 of a Parallel both run compute sets on IPU 0"),
        "{e}"
    );
    let e = load_error(|b| {
        let p = b.tensor("p", DType::Pred, &[(0, 0, 1)]);
        let s = b.stream("p", Direction::HostToDevice, DType::Pred, 1);
        Program::Sequence(vec![
            Program::StreamCopy {
                stream: s,
                tensor: p,
            },
            Program::Parallel(vec![Program::If {
                predicate: p,
                then: Box::new(Program::Sync),
                otherwise: Box::new(Program::Sync),
            }]),
        ])
    });
    assert!(
        e.contains("branch 0 of a Parallel holds data-dependent control flow"),
        "{e}"
    );
}
