//! Replicated programs (`fixtures/conformance-spmd`, XLA's SPMD output with every
//! replica's inputs and outputs): collectives parse, print back and verify, and the
//! reference evaluator runs N replicas in lockstep and matches XLA; bad groups and
//! diverging replicas are errors, never a hang.

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
        let stacked = c.stored_inputs().unwrap().unwrap();
        let args: Vec<Vec<Literal>> = (0..n)
            .map(|r| {
                stacked
                    .iter()
                    .map(|l| match l {
                        Literal::Array(a) => Literal::Array(a.index_leading(r)),
                        other => other.clone(),
                    })
                    .collect()
            })
            .collect();
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
}

#[test]
fn the_command_line_runs_replicas_on_the_reference_engine_and_refuses_the_ipu_model_for_now() {
    let case = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/conformance-spmd/spmd_psum_axis_index");
    let hlo = case.join("module.opt.hlo");
    let inputs = format!("0={}", case.join("inputs/0.npy").display());
    let outdir = std::env::temp_dir().join(format!("ipuxla-replicas-{}", std::process::id()));
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
    for (extra, needle) in [
        (
            &["--replicas", "4"][..],
            "replication on the IPU Model is not built yet",
        ),
        (
            &["--engine", "reference", "--replicas", "2"][..],
            "--replicas 2: ",
        ),
    ] {
        let out = run(extra);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(needle),
            "{extra:?}: {err}"
        );
    }
    // The IPU lowering names the collective it cannot run yet.
    let out = ipuxla(&["run", hlo.to_str().unwrap(), "--estimate-only"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("replication on the IPU Model is not built yet"),
        "{err}"
    );
}
