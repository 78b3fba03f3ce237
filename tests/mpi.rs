//! Replicas across processes (`--features mpi`, OpenMPI's `mpirun`): every SPMD case run by
//! two processes writes the bytes one process writes; processes whose replicas disagree,
//! or that cannot share the replicas equally, stop with an error instead of hanging.
#![cfg(feature = "mpi")]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `ipuxla run` on `case` with `--replicas n`, under `mpirun -np procs` (or alone).
fn run(hlo: &Path, inputs: &str, n: usize, procs: Option<usize>, out: &Path) -> Output {
    let exe = env!("CARGO_BIN_EXE_ipuxla");
    let n = n.to_string();
    let mut args: Vec<String> = Vec::new();
    let mut cmd = match procs {
        Some(p) => {
            args.extend(
                [
                    "--allow-run-as-root",
                    "--oversubscribe",
                    "-np",
                    &p.to_string(),
                    exe,
                ]
                .map(String::from),
            );
            Command::new("mpirun")
        }
        None => Command::new(exe),
    };
    args.extend(
        [
            "run",
            hlo.to_str().unwrap(),
            "--replicas",
            &n,
            "--inputs",
            inputs,
            "--outdir",
            out.to_str().unwrap(),
            "--overwrite",
        ]
        .map(String::from),
    );
    cmd.args(&args)
        .output()
        .expect("mpirun (apt-get install openmpi-bin) runs")
}

fn inputs_of(case: &Path) -> String {
    let mut files: Vec<PathBuf> = std::fs::read_dir(case.join("inputs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| {
            format!(
                "{}={}",
                f.file_stem().unwrap().to_string_lossy(),
                f.display()
            )
        })
        .collect::<Vec<_>>()
        .join(";")
}

fn tmp(name: &str) -> PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ipuxla-mpi-{}-{name}", std::process::id()))
}

#[test]
fn two_processes_write_the_bytes_one_process_writes() {
    for case in common::case_dirs("fixtures/conformance-spmd") {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let info: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(case.join("case.json")).unwrap())
                .unwrap();
        let n = info["replicas"].as_u64().unwrap() as usize;
        let hlo = case.join("module.opt.hlo");
        let inputs = inputs_of(&case);
        let (one, two) = (tmp(&format!("{name}-1")), tmp(&format!("{name}-2")));
        for (procs, out) in [(None, &one), (Some(2), &two)] {
            let o = run(&hlo, &inputs, n, procs, out);
            assert!(
                o.status.success(),
                "{name} ({procs:?} processes): {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        let stdout =
            String::from_utf8_lossy(&run(&hlo, &inputs, n, Some(2), &two).stdout).into_owned();
        assert!(
            stdout.contains(&format!("on {n} replicas (2 processes)")),
            "{name}: {stdout}"
        );
        let mut files: Vec<PathBuf> = std::fs::read_dir(&one)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert!(!files.is_empty());
        for f in files {
            let file = f.file_name().unwrap();
            assert_eq!(
                std::fs::read(&f).unwrap(),
                std::fs::read(two.join(file)).unwrap(),
                "{name}: {} differs between one and two processes",
                file.to_string_lossy()
            );
        }
        let _ = std::fs::remove_dir_all(&one);
        let _ = std::fs::remove_dir_all(&two);
    }
}

#[test]
fn processes_that_disagree_or_cannot_share_stop_with_an_error() {
    let case = root().join("fixtures/conformance-spmd/spmd_psum_axis_index");
    let hlo = case.join("module.opt.hlo");
    let inputs = inputs_of(&case);
    let out = tmp("share");
    let o = run(&hlo, &inputs, 4, Some(3), &out);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("3 processes cannot share 4 replicas equally"),
        "{err}"
    );
    // Replica r runs its loop r times, one all-reduce each: the processes' replicas
    // disagree, and both processes stop naming where each was.
    let hlo = root().join("fixtures/replicas/diverge.hlo");
    let one = tmp("one.npy");
    let scalar = xla_ir::literal::ArrayLiteral::scalar_f32(1.0);
    ipuxla::npy::write_npy(&one, &scalar).unwrap();
    let o = run(
        &hlo,
        &format!("0={}", one.display()),
        2,
        Some(2),
        &tmp("diverge"),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("the replicas' programs disagree"),
        "{err}"
    );
}
