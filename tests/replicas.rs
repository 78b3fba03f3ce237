//! Replicated programs (`fixtures/conformance-spmd`, XLA's SPMD output with every
//! replica's inputs and outputs): collectives parse, print back and verify, and the
//! reference evaluator and the IPU Model run N replicas in lockstep and match XLA; bad
//! groups and diverging replicas are errors, never a hang.

mod common;
use common::{check_output, ipuxla};

use std::path::{Path, PathBuf};
use xla_ir::Literal;
use xla_ir::eval::evaluate_replicated;
use xla_ir::literal::ArrayLiteral;

fn spmd_cases() -> Vec<PathBuf> {
    let cases = common::case_dirs("fixtures/conformance-spmd");
    assert_eq!(cases.len(), 12);
    cases
}

fn leaves(l: Literal) -> Vec<ArrayLiteral> {
    common::leaves(l)
}

#[test]
fn every_spmd_case_matches_xla_on_the_evaluator_in_lockstep() {
    for case in spmd_cases() {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let c = ipuxla::corpus::Case::read(&case, "module.opt.hlo").unwrap();
        let n = c.info["replicas"].as_u64().unwrap() as usize;
        let args = per_replica_inputs(&c, n);
        let results =
            evaluate_replicated(&c.module, &args).unwrap_or_else(|e| panic!("{name}: {e}"));
        let per_replica: Vec<Vec<ArrayLiteral>> = results.into_iter().map(leaves).collect();
        for k in 0..per_replica[0].len() {
            let (want, spec) = c.expected_output(k).unwrap().expect("stored");
            let got: Vec<ArrayLiteral> = per_replica.iter().map(|l| l[k].clone()).collect();
            let got = ArrayLiteral::stack(&got).unwrap();
            check_output(&format!("{name} output {k}"), &got, &want, &spec);
        }
        // The printer writes collectives back in a form that parses to the same module.
        let text = c.module.to_string();
        assert_eq!(
            xla_ir::parse_module(&text).unwrap().to_string(),
            text,
            "{name}: print and parse back"
        );
    }
}

fn per_replica_inputs(c: &ipuxla::corpus::Case, n: usize) -> Vec<Vec<Literal>> {
    let stacked = c.stored_inputs().unwrap().unwrap();
    (0..n)
        .map(|r| {
            stacked
                .iter()
                .map(|l| match l {
                    Literal::Array(a) => Literal::Array(a.index_leading(r)),
                    other => other.clone(),
                })
                .collect()
        })
        .collect()
}

#[test]
fn every_spmd_case_matches_xla_on_the_ipu_model() {
    let config = compiler::IpuConfig::default();
    let options = compiler::PassOptions::default();
    for case in spmd_cases() {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let c = ipuxla::corpus::Case::read(&case, "module.opt.hlo").unwrap();
        let n = c.info["replicas"].as_u64().unwrap() as usize;
        let run = ipuxla::replicas::run_replicated_on_ipu_model(
            &c.module,
            &config,
            &options,
            &per_replica_inputs(&c, n),
        )
        .unwrap_or_else(|e| panic!("{name}: {e:#}"));
        for k in 0..run.outputs[0].len() {
            let (want, spec) = c.expected_output(k).unwrap().expect("stored");
            let got: Vec<ArrayLiteral> = run.outputs.iter().map(|l| l[k].clone()).collect();
            let got = ArrayLiteral::stack(&got).unwrap();
            check_output(&format!("{name} output {k}"), &got, &want, &spec);
        }
        // Every replica runs the same steps; the collectives cross the IPU-Links.
        let p = &run.profiles[0];
        assert!(p.totals.bytes_over_links > 0, "{name}");
        assert!(
            p.steps
                .iter()
                .any(|s| s.kind == runtime::StepKind::Collective),
            "{name}"
        );
        // The estimate (replica 0, nobody waits) is the run of a replica that never waited.
        let exe = compiler::compile(&c.module, &config).unwrap();
        let system = runtime::System::new(exe.target.clone(), exe.num_ipus).unwrap();
        let estimate = runtime::estimate_replaying(&exe, &system, &p.decisions).unwrap();
        if !p
            .steps
            .iter()
            .any(|s| s.name.contains("waiting for the other replicas"))
        {
            assert_eq!(&estimate, p, "{name}: estimate and run");
        }
    }
}

#[test]
fn replicas_compute_the_same_bytes_on_any_number_of_host_threads() {
    let case =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/conformance-spmd/spmd_dp_mlp_train");
    let c = ipuxla::corpus::Case::read(&case, "module.opt.hlo").unwrap();
    let inputs = per_replica_inputs(&c, 4);
    let run = |threads| {
        let options = runtime::EngineOptions {
            threads,
            ..Default::default()
        };
        ipuxla::replicas::run_replicated_with(
            &c.module,
            &compiler::IpuConfig::default(),
            &compiler::PassOptions::default(),
            &inputs,
            options,
            None,
            None,
        )
        .unwrap()
    };
    let (one, four) = (run(1), run(4));
    assert_eq!(one.outputs, four.outputs);
    assert_eq!(one.profiles, four.profiles);
}

#[test]
fn selection_order_places_replicas_and_snake_pays_for_its_open_ring() {
    // A gradient of 1 MiB on 8 replicas goes round the ring (small values go directly,
    // whatever the order).
    let text = RING
        .replace("num_partitions=4", "num_partitions=8")
        .replace("f32[2]", "f32[262144]")
        .replace("GROUPS", "{{0,1,2,3,4,5,6,7}}");
    let module = xla_ir::parse_module(&text).unwrap();
    let cycles = |order: &str| {
        let config = compiler::IpuConfig {
            selection_order: order.into(),
            ..Default::default()
        };
        let exe = compiler::compile(&module, &config).unwrap();
        let system = runtime::System::new(exe.target.clone(), exe.num_ipus).unwrap();
        let p = runtime::estimate(&exe, &system).unwrap();
        let ring: Vec<runtime::StepProfile> = p
            .steps
            .into_iter()
            .filter(|s| s.kind == runtime::StepKind::Collective)
            .collect();
        (
            ring.iter().map(|s| s.cycles).sum::<u64>(),
            ring[0].name.clone(),
        )
    };
    let (hoof, hoof_name) = cycles("HOOF");
    let (snake, snake_name) = cycles("snake");
    assert_eq!(cycles("AUTO").0, hoof, "AUTO places replicas as HOOF");
    assert!(snake > hoof, "SNAKE {snake} vs HOOF {hoof}");
    assert!(snake_name.contains("IPU 6 -> 0 (3 hops)"), "{snake_name}");
    assert!(hoof_name.contains("(1 hops)"), "{hoof_name}");
    let bad = compiler::IpuConfig {
        selection_order: "spiral".into(),
        ..Default::default()
    };
    let e = compiler::compile(&module, &bad).unwrap_err().to_string();
    assert!(e.contains("selection_order is 'spiral'"), "{e}");
}

const RING: &str = "HloModule ring, num_partitions=4

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[2]{0} parameter(0)
  ROOT r = f32[2]{0} all-reduce(x), channel_id=1, replica_groups=GROUPS, use_global_device_ids=true, to_apply=add
}
";

#[test]
fn replica_groups_in_iota_form_and_bad_groups() {
    let iota = RING.replace("GROUPS", "[2,2]<=[2,2]T(1,0)");
    let m = xla_ir::parse_module(&iota).unwrap();
    assert!(m.to_string().contains("replica_groups=[2,2]<=[2,2]T(1,0)"));
    let args: Vec<Vec<Literal>> = (0..4)
        .map(|r| vec![Literal::Array(ArrayLiteral::vector_f32(&[r as f32, 1.0]))])
        .collect();
    let out: Vec<Vec<ArrayLiteral>> = evaluate_replicated(&m, &args)
        .unwrap()
        .into_iter()
        .map(leaves)
        .collect();
    // Groups {0,2} and {1,3}.
    let sums: Vec<f32> = out
        .iter()
        .map(|l| match &l[0].data {
            xla_ir::literal::ArrayData::F32(v) => v[0],
            _ => panic!("f32"),
        })
        .collect();
    assert_eq!(sums, vec![2.0, 4.0, 2.0, 4.0]);
    for (groups, needle) in [
        ("{{0,1},{1,2}}", "replica 1 is in more than one place"),
        ("{{0,7}}", "replica 7 does not exist (4 replicas)"),
        ("{{0,1,2},{3}}", "groups of different sizes"),
    ] {
        let e = match xla_ir::parse_module(&RING.replace("GROUPS", groups)) {
            Err(e) => e.to_string(),
            Ok(m) => xla_ir::verify(&m).unwrap_err().to_string(),
        };
        assert!(e.contains(needle), "{groups}: {e}");
    }
}

#[test]
fn replicas_that_take_different_paths_are_an_error_not_a_hang() {
    // Replica r runs the loop r times, one all-reduce per trip: replica 0 never arrives.
    let text = "HloModule diverge, num_partitions=2

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

cond {
  s = (u32[], f32[]) parameter(0)
  i = u32[] get-tuple-element(s), index=0
  me = u32[] partition-id()
  ROOT lt = pred[] compare(i, me), direction=LT
}

body {
  s = (u32[], f32[]) parameter(0)
  i = u32[] get-tuple-element(s), index=0
  x = f32[] get-tuple-element(s), index=1
  y = f32[] all-reduce(x), replica_groups={{0,1}}, to_apply=add
  one = u32[] constant(1)
  j = u32[] add(i, one)
  ROOT t = (u32[], f32[]) tuple(j, y)
}

ENTRY main {
  x = f32[] parameter(0)
  zero = u32[] constant(0)
  init = (u32[], f32[]) tuple(zero, x)
  w = (u32[], f32[]) while(init), condition=cond, body=body
  ROOT r = f32[] get-tuple-element(w), index=1
}
";
    let m = xla_ir::parse_module(text).unwrap();
    let args = vec![vec![Literal::Array(ArrayLiteral::scalar_f32(1.0))]; 2];
    let e = evaluate_replicated(&m, &args).unwrap_err().to_string();
    assert!(
        e.contains("replica 0 finished its program without reaching this collective"),
        "{e}"
    );
    // The same on the IPU Model: replica 1 waits for replica 0, whose program has ended.
    let e = ipuxla::replicas::run_replicated_on_ipu_model(
        &m,
        &compiler::IpuConfig::default(),
        &compiler::PassOptions::default(),
        &args,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("for replica 0, whose program ended without reaching it"),
        "{e}"
    );
}

#[test]
fn the_command_line_runs_replicas_on_both_engines() {
    let case = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/conformance-spmd/spmd_psum_axis_index");
    let hlo = case.join("module.opt.hlo");
    let inputs = format!("0={}", case.join("inputs/0.npy").display());
    let outdir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ipuxla-replicas-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&outdir);
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run",
            hlo.to_str().unwrap(),
            "--inputs",
            &inputs,
            "--outdir",
            outdir.to_str().unwrap(),
            "--overwrite",
        ];
        args.extend_from_slice(extra);
        ipuxla(&args)
    };
    let out = run(&["--engine", "reference", "--replicas", "4"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("output_0.npy  float32 (4, 1, 3)"),
        "{stdout}"
    );
    let trace = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ipuxla-trace-{}.json", std::process::id()));
    let out = run(&["--replicas", "4", "--trace", trace.to_str().unwrap()]);
    let events: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let processes: Vec<&str> = events["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        processes,
        ["replica 0", "replica 1", "replica 2", "replica 3"]
    );
    let _ = std::fs::remove_file(&trace);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("on 4 replicas on the ipu-model engine")
            && stdout.contains("replication: 4 replicas of 1 IPU each in AUTO order (as HOOF)"),
        "{stdout}"
    );
    for (extra, needle) in [
        (
            &["--engine", "reference", "--replicas", "2"][..],
            "--replicas 2: ",
        ),
        (&["--replicas", "2"][..], "is written for 4 devices"),
    ] {
        let out = run(extra);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(needle),
            "{extra:?}: {err}"
        );
    }
    // The estimate is replica 0's run: its collectives over the IPU-Links.
    let out = ipuxla(&["run", hlo.to_str().unwrap(), "--estimate-only"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("over IPU-Links"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn replicas_run_steps_per_execution_as_a_device_loop() {
    // XLA's data-parallel training step with its weights aliased to its new weights: three
    // steps in one execution on 4 replicas equal three single-step runs fed back.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text =
        std::fs::read_to_string(root.join("fixtures/replicas/dp_mlp_train_steps.hlo")).unwrap();
    let module = xla_ir::parse_module(&text).unwrap();
    let case = root.join("fixtures/conformance-spmd/spmd_dp_mlp_train");
    let c = ipuxla::corpus::Case::read(&case, "module.opt.hlo").unwrap();
    let first = per_replica_inputs(&c, 4);
    let scale = |l: &Literal, k: f32| match l {
        Literal::Array(a) => {
            let xla_ir::literal::ArrayData::F32(v) = &a.data else {
                panic!("f32")
            };
            let mut b = a.clone();
            b.data = xla_ir::literal::ArrayData::F32(v.iter().map(|x| x * k).collect());
            b
        }
        _ => panic!("array"),
    };
    let factors = [1.0f32, 0.5, -1.0];
    let config = compiler::IpuConfig::default();
    let options = compiler::PassOptions::default();
    // Three single steps, the new weights fed back.
    let mut weights: Vec<Vec<Literal>> = first.iter().map(|r| r[..4].to_vec()).collect();
    let mut losses: Vec<Vec<ArrayLiteral>> = vec![Vec::new(); 4];
    for k in factors {
        let inputs: Vec<Vec<Literal>> = (0..4)
            .map(|r| {
                let mut v = weights[r].clone();
                v.push(Literal::Array(scale(&first[r][4], k)));
                v.push(Literal::Array(scale(&first[r][5], k)));
                v
            })
            .collect();
        let run =
            ipuxla::replicas::run_replicated_on_ipu_model(&module, &config, &options, &inputs)
                .unwrap();
        for r in 0..4 {
            losses[r].push(run.outputs[r][0].clone());
            weights[r] = run.outputs[r][1..]
                .iter()
                .cloned()
                .map(Literal::Array)
                .collect();
        }
    }
    // One execution of three iterations: x and y fed per iteration.
    let looped: Vec<Vec<Literal>> = (0..4)
        .map(|r| {
            let mut v = first[r][..4].to_vec();
            for k in [4, 5] {
                let steps: Vec<ArrayLiteral> =
                    factors.iter().map(|&f| scale(&first[r][k], f)).collect();
                v.push(Literal::Array(ArrayLiteral::stack(&steps).unwrap()));
            }
            v
        })
        .collect();
    let lp = ipuxla::device_loop::device_loop_for(&module, 3, &looped[0]).unwrap();
    let run = ipuxla::replicas::run_replicated_with(
        &module,
        &config,
        &options,
        &looped,
        runtime::EngineOptions::default(),
        Some((lp, ipuxla::device_loop::OutfeedMode::All)),
        None,
    )
    .unwrap();
    let spec = serde_json::json!({"rtol": 1e-5, "atol": 1e-6});
    for r in 0..4 {
        let want = ArrayLiteral::stack(&losses[r]).unwrap();
        check_output(
            &format!("replica {r} losses"),
            &run.outputs[r][0],
            &want,
            &spec,
        );
        for (k, w) in weights[r].iter().enumerate() {
            let Literal::Array(w) = w else {
                panic!("array")
            };
            check_output(
                &format!("replica {r} weight {k}"),
                &run.outputs[r][k + 1],
                w,
                &spec,
            );
        }
    }
    assert_eq!(run.device_loop.unwrap().iterations, 3);
}

#[test]
fn replicas_of_two_ipus_each_send_each_ipus_share() {
    // auto_select_ipus = replicas x IPUs per replica (the seed's rule): 4 replicas of 2.
    let case =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/conformance-spmd/spmd_dp_mlp_train");
    let c = ipuxla::corpus::Case::read(&case, "module.opt.hlo").unwrap();
    let config = compiler::IpuConfig {
        auto_select_ipus: compiler::config::AutoSelectIpus::Count(8),
        ..Default::default()
    };
    let run = ipuxla::replicas::run_replicated_on_ipu_model(
        &c.module,
        &config,
        &compiler::PassOptions::default(),
        &per_replica_inputs(&c, 4),
    )
    .unwrap();
    for k in 0..run.outputs[0].len() {
        let (want, spec) = c.expected_output(k).unwrap().expect("stored");
        let got: Vec<ArrayLiteral> = run.outputs.iter().map(|l| l[k].clone()).collect();
        check_output(
            &format!("output {k}"),
            &ArrayLiteral::stack(&got).unwrap(),
            &want,
            &spec,
        );
    }
    assert_eq!(run.profiles[0].num_ipus, 2);
    assert!(
        run.profiles[0].tiles.iter().any(|t| t.ipu == 1),
        "both IPUs hold data"
    );
    let odd = compiler::IpuConfig {
        auto_select_ipus: compiler::config::AutoSelectIpus::Count(6),
        ..Default::default()
    };
    let e = compiler::compile(&c.module, &odd).unwrap_err().to_string();
    assert!(e.contains("ask for a multiple of 4"), "{e}");
}

#[test]
fn replica_and_partition_ids_split_the_device_number_on_both_engines() {
    // Devices are numbered replica x num_partitions + partition.
    let text = "HloModule ids, replica_count=2, num_partitions=2

ENTRY main {
  x = f32[] parameter(0)
  r = u32[] replica-id()
  p = u32[] partition-id()
  ROOT t = (u32[], u32[]) tuple(r, p)
}
";
    let m = xla_ir::parse_module(text).unwrap();
    let args = vec![vec![Literal::Array(ArrayLiteral::scalar_f32(0.0))]; 4];
    let ids = |outs: Vec<Vec<ArrayLiteral>>| -> Vec<(u32, u32)> {
        outs.iter()
            .map(|l| {
                let v = |a: &ArrayLiteral| match &a.data {
                    xla_ir::literal::ArrayData::U32(v) => v[0],
                    _ => panic!("u32"),
                };
                (v(&l[0]), v(&l[1]))
            })
            .collect()
    };
    let want = vec![(0, 0), (0, 1), (1, 0), (1, 1)];
    let reference: Vec<Vec<ArrayLiteral>> = evaluate_replicated(&m, &args)
        .unwrap()
        .into_iter()
        .map(leaves)
        .collect();
    assert_eq!(ids(reference), want);
    let run = ipuxla::replicas::run_replicated_on_ipu_model(
        &m,
        &compiler::IpuConfig::default(),
        &compiler::PassOptions::default(),
        &args,
    )
    .unwrap();
    assert_eq!(ids(run.outputs), want);
}
