//! Absurd sizes are errors before anything is allocated, on both engines: a broadcast
//! whose element count overflows, a 16 GB value, and tuple shapes nested thousands deep
//! (the parser's limit).

mod common;
use common::{fixture, ipuxla};

fn run(file: &str, engine: &str) -> String {
    let out_dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ipuxla-resource-{}-{engine}", std::process::id()));
    let out = ipuxla(&[
        "run",
        file,
        "--engine",
        engine,
        "--outdir",
        out_dir.to_str().unwrap(),
        "--overwrite",
        "-q",
    ]);
    assert!(!out.status.success(), "{file} on {engine} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn values_too_big_to_model_are_refused_by_name() {
    for name in ["overflowing_broadcast", "sixteen_gigabytes"] {
        let file = fixture(&format!("resource/{name}.hlo"));
        let ipu = run(&file, "ipu-model");
        assert!(
            ipu.contains("instruction 'b': its value")
                && ipu.contains("more than the IPU Model holds"),
            "{name}: {ipu}"
        );
        let reference = run(&file, "reference");
        assert!(
            reference.contains("more than the evaluator's limit"),
            "{name}: {reference}"
        );
    }
}

#[test]
fn deeply_nested_tuple_shapes_are_a_parse_error() {
    let mut shape = "f32[]".to_string();
    for _ in 0..3000 {
        shape = format!("({shape})");
    }
    let text = format!(
        "HloModule nest\n\nENTRY main {{\n  p = {shape} parameter(0)\n  ROOT r = {shape} copy(p)\n}}\n"
    );
    let e = xla_ir::parse_module(&text).unwrap_err().to_string();
    assert!(e.contains("nested deeper than"), "{e}");
}

/// A chain of `n` computations, each calling the next, the last negating.
fn call_chain(n: usize) -> xla_ir::Module {
    let mut text = String::from("HloModule chain\n\n");
    for i in 0..n {
        let body = if i + 1 == n {
            format!("ROOT r{i} = f32[] negate(x{i})")
        } else {
            format!("ROOT r{i} = f32[] call(x{i}), to_apply=c{}", i + 1)
        };
        text += &format!("c{i} {{\n  x{i} = f32[] parameter(0)\n  {body}\n}}\n\n");
    }
    text += "ENTRY main {\n  p = f32[] parameter(0)\n  ROOT r = f32[] call(p), to_apply=c0\n}\n";
    xla_ir::parse_module(&text).unwrap()
}

/// Calls nested deeper than the engines' recursion allows are an error, not a stack
/// overflow; up to the limit they run.
#[test]
fn calls_nested_too_deep_are_refused_and_the_limit_runs() {
    let arg = [xla_ir::Literal::Array(xla_ir::ArrayLiteral::scalar_f32(
        1.5,
    ))];
    let limit = xla_ir::eval::MAX_CALL_DEPTH;
    let deep = call_chain(5000);
    assert_eq!(deep.call_depth(), 5001);
    let e = xla_ir::eval::evaluate(&deep, &arg).unwrap_err().to_string();
    assert!(
        e.contains("calls nest 5001 computations deep") && e.contains(&format!("limit is {limit}")),
        "{e}"
    );
    let config = ipuxla::compiler::IpuConfig::default();
    let e = ipuxla::compiler::compile(&deep, &config)
        .unwrap_err()
        .to_string();
    assert!(e.contains("calls nest 5001 computations deep"), "{e}");
    let at_limit = call_chain(limit - 1);
    assert_eq!(at_limit.call_depth(), limit);
    let want = common::leaves(xla_ir::eval::evaluate(&at_limit, &arg).unwrap());
    let run = ipuxla::device::run_on_ipu_model(&at_limit, &config, &arg).unwrap();
    assert_eq!(run.outputs[0].data, want[0].data);
}

/// A chain of four 4 MiB values, each dropped after its one use.
const CHAIN: &str = "HloModule chain\n\nENTRY main {\n  p = f32[] parameter(0)\n  b = f32[1024,1024]{1,0} broadcast(p), dimensions={}\n  e1 = f32[1024,1024]{1,0} exponential(b)\n  e2 = f32[1024,1024]{1,0} exponential(e1)\n  ROOT e3 = f32[1024,1024]{1,0} negate(e2)\n}\n";

/// `--max-host-memory` bounds the values held at once, counting drops after last use.
#[test]
fn the_reference_engine_holds_at_most_max_host_memory() {
    let m = xla_ir::parse_module(CHAIN).unwrap();
    let arg = [xla_ir::Literal::Array(xla_ir::ArrayLiteral::scalar_f32(
        0.0,
    ))];
    let mib = 1u64 << 20;
    // Two 4 MiB values live at once (an operand and its user's result), never four.
    let mut feeds = xla_ir::eval::Feeds::default();
    assert!(xla_ir::eval::evaluate_within(&m, &arg, &mut feeds, 9 * mib).is_ok());
    let e = xla_ir::eval::evaluate_within(&m, &arg, &mut feeds, 6 * mib)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("instruction e1") && e.contains("over the host memory limit of 6291456 bytes"),
        "{e}"
    );
    // The command line: refused on the IPU Model, acting on the reference engine.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ipuxla-maxmem-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("chain.hlo");
    std::fs::write(&file, CHAIN).unwrap();
    let npy = dir.join("p.npy");
    ipuxla::npy::write_npy(&npy, &xla_ir::ArrayLiteral::scalar_f32(0.0)).unwrap();
    let inputs = format!("0={}", npy.display());
    let out_dir = dir.join("out");
    let base = [
        "run",
        file.to_str().unwrap(),
        "--inputs",
        &inputs,
        "--outdir",
        out_dir.to_str().unwrap(),
        "--overwrite",
        "-q",
    ];
    let out = ipuxla(&[&base[..], &["--max-host-memory", "6M"]].concat());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("--max-host-memory bounds the reference engine")
    );
    let out = ipuxla(
        &[
            &base[..],
            &["--engine", "reference", "--max-host-memory", "6M"],
        ]
        .concat(),
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("host memory limit"));
    let out = ipuxla(
        &[
            &base[..],
            &["--engine", "reference", "--max-host-memory", "9M"],
        ]
        .concat(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = ipuxla(
        &[
            &base[..],
            &["--engine", "reference", "--max-host-memory", "lots"],
        ]
        .concat(),
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a size"));
    std::fs::remove_dir_all(&dir).unwrap();
}
