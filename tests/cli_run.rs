//! `ipuxla run` from the outside: results, names as keys, and every kind of bad input
//! answered with a clear error naming the input, never a panic.

mod common;
use common::ipuxla;

use std::path::{Path, PathBuf};
use std::process::Output;

fn case(rel: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/conformance")
        .join(rel)
        .to_string_lossy()
        .into_owned()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ipuxla-run-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A fresh scratch directory holding `file` with `text`; returns both paths.
fn hlo_file(name: &str, file: &str, text: &str) -> (PathBuf, PathBuf) {
    let dir = scratch(name);
    std::fs::create_dir_all(&dir).unwrap();
    let hlo = dir.join(file);
    std::fs::write(&hlo, text).unwrap();
    (dir, hlo)
}

fn vector_add_inputs() -> String {
    (0..3)
        .map(|i| format!("{i}={}", case(&format!("seed_vector_add/inputs/{i}.npy"))))
        .collect::<Vec<_>>()
        .join(";")
}

fn stderr(out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!text.contains("panicked"), "{text}");
    text
}

#[test]
fn seed_vector_add_gives_3_8() {
    let outdir = scratch("seed");
    let out = ipuxla(&[
        "run",
        &case("seed_vector_add/module.hlo"),
        "--inputs",
        &vector_add_inputs(),
        "--outdir",
        outdir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("output_0.npy  float32 (2,)  [3, 8]"),
        "{stdout}"
    );
    assert!(stdout.contains("on the ipu-model engine in"), "{stdout}");
    for line in [
        "simulated: ",
        "memory: peak tile ",
        "exchange: ",
        "program: ",
    ] {
        assert!(stdout.contains(line), "{line} missing from {stdout}");
    }
    let result = ipuxla::npy::read_npy(&outdir.join("output_0.npy")).unwrap();
    assert_eq!(result.data, xla_ir::literal::ArrayData::F32(vec![3.0, 8.0]));
}

#[test]
fn parameters_can_be_named() {
    let outdir = scratch("named");
    let inputs = format!(
        "pa={};pb.1={};2={}",
        case("seed_vector_add/inputs/0.npy"),
        case("seed_vector_add/inputs/1.npy"),
        case("seed_vector_add/inputs/2.npy")
    );
    let out = ipuxla(&[
        "run",
        &case("seed_vector_add/module.hlo"),
        "--inputs",
        &inputs,
        "--outdir",
        outdir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn outdir_is_not_overwritten_without_permission() {
    let outdir = scratch("overwrite");
    let args = |extra: &[&str]| {
        let mut a = vec![
            "run".to_string(),
            case("seed_vector_add/module.hlo"),
            "--inputs".into(),
            vector_add_inputs(),
            "--outdir".into(),
            outdir.to_string_lossy().into_owned(),
        ];
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let run = |a: Vec<String>| ipuxla(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(run(args(&[])).status.success());
    let again = run(args(&[]));
    assert!(!again.status.success());
    assert!(
        stderr(&again).contains("not empty; pass --overwrite"),
        "{}",
        stderr(&again)
    );
    assert!(run(args(&["--overwrite"])).status.success());
}

fn expect_failure(inputs: &str, needle: &str) {
    let outdir = scratch("bad");
    let out = ipuxla(&[
        "run",
        &case("seed_vector_add/module.hlo"),
        "--inputs",
        inputs,
        "--outdir",
        outdir.to_str().unwrap(),
    ]);
    assert!(!out.status.success(), "expected failure for {inputs}");
    let text = stderr(&out);
    assert!(text.contains(needle), "{text:?} lacks {needle:?}");
    assert!(
        !outdir.exists(),
        "nothing is written when the inputs are wrong"
    );
}

#[test]
fn bad_inputs_are_named() {
    let f = |i: usize| case(&format!("seed_vector_add/inputs/{i}.npy"));
    expect_failure(
        &format!("0={};1={}", f(0), f(1)),
        "no value for parameter 2 (pc.1: f32[2]{0})",
    );
    expect_failure(
        &format!("0={};1={};2={};3={}", f(0), f(1), f(2), f(0)),
        "parameter 3 does not exist",
    );
    expect_failure(
        &format!("0={};0={}", f(0), f(1)),
        "parameter 0 is given twice",
    );
    expect_failure(
        &format!("zz={}", f(0)),
        "no parameter is called 'zz'; the parameters are pa.1, pb.1, pc.1",
    );
    expect_failure("0", "'0' is not KEY=FILE.npy");
    expect_failure(
        "0=/nonexistent.npy;1=x;2=y",
        "/nonexistent.npy: cannot open",
    );
    let wrong_dtype = case("int32_arith/inputs/0.npy");
    expect_failure(
        &format!("0={wrong_dtype}"),
        "parameter 0 (pa.1) is float32 (2,) but the file holds int32",
    );
    let not_npy = case("seed_vector_add/case.json");
    expect_failure(&format!("0={not_npy}"), "not a valid .npy file");
}

#[test]
fn evaluation_errors_name_the_instruction_inside_a_loop() {
    let (dir, hlo) = hlo_file(
        "loop",
        "loop.hlo",
        "HloModule loop\n\ncond {\n  s = f32[] parameter(0)\n  ROOT t = pred[] constant(true)\n}\n\nbody {\n  s = f32[] parameter(0)\n  ROOT opaque = f32[] custom-call(s), custom_call_target=\"my_kernel\"\n}\n\nENTRY main {\n  x = f32[] parameter(0)\n  ROOT w = f32[] while(x), condition=cond, body=body\n}\n",
    );
    let out = ipuxla(&[
        "run",
        hlo.to_str().unwrap(),
        "--inputs",
        &format!("0={}", case("seed_sum4/inputs/0.npy")),
        "--outdir",
        dir.join("out").to_str().unwrap(),
    ]);
    let text = stderr(&out);
    // seed_sum4's input is not a scalar: the shape check speaks first.
    assert!(!out.status.success());
    assert!(
        text.contains("parameter 0 (x) is float32 () but the file holds"),
        "{text}"
    );

    let scalar = dir.join("scalar.npy");
    ipuxla::npy::write_npy(&scalar, &xla_ir::ArrayLiteral::scalar_f32(1.0)).unwrap();
    let out = ipuxla(&[
        "run",
        hlo.to_str().unwrap(),
        "--inputs",
        &format!("0={}", scalar.display()),
        "--outdir",
        dir.join("out").to_str().unwrap(),
        "--engine",
        "reference",
    ]);
    let text = stderr(&out);
    assert!(
        text.contains(
            "in computation body, instruction opaque: Unsupported: custom-call target \"my_kernel\""
        ),
        "{text}"
    );
    assert!(text.contains("(called from main/w)"), "{text}");
}

#[test]
fn unknown_custom_calls_are_unsupported_on_the_ipu_naming_the_line() {
    let (dir, hlo) = hlo_file(
        "custom",
        "c.hlo",
        "HloModule c\n\nENTRY main {\n  x = f32[] parameter(0)\n  ROOT opaque = f32[] custom-call(x), custom_call_target=\"my_kernel\"\n}\n",
    );
    let scalar = dir.join("scalar.npy");
    ipuxla::npy::write_npy(&scalar, &xla_ir::ArrayLiteral::scalar_f32(1.0)).unwrap();
    let out = ipuxla(&[
        "run",
        hlo.to_str().unwrap(),
        "--inputs",
        &format!("0={}", scalar.display()),
        "--outdir",
        dir.join("out").to_str().unwrap(),
    ]);
    let text = stderr(&out);
    assert!(!out.status.success());
    assert!(
        text.contains("line 5:")
            && text.contains("instruction 'opaque': custom-call is not supported on the IPU yet"),
        "{text}"
    );
    assert!(!dir.join("out").exists(), "nothing is written on failure");
}

#[test]
fn f64_on_the_device_is_refused_and_nothing_is_written() {
    let outdir = scratch("x64");
    let inputs = (0..3)
        .map(|i| format!("{i}={}", case(&format!("x64_int64/inputs/{i}.npy"))))
        .collect::<Vec<_>>()
        .join(";");
    let out = ipuxla(&[
        "run",
        &case("x64_int64/module.hlo"),
        "--inputs",
        &inputs,
        "--outdir",
        outdir.to_str().unwrap(),
    ]);
    let text = stderr(&out);
    assert!(!out.status.success());
    assert!(
        text.contains("computes f64, but the IPU has no 64-bit floats"),
        "{text}"
    );
    assert!(text.contains("astype(jnp.float32)"), "{text}");
    assert!(!outdir.exists(), "nothing is written");
}

#[test]
fn bad_device_flags_are_named() {
    let outdir = scratch("flags");
    for (flags, needle) in [
        (&["--matmul-amp", "1.5"][..], "--matmul-amp is 1.5"),
        (&["--conv-amp=-0.1"][..], "--conv-amp is -0.1"),
        (&["--num-ipus", "1000"][..], "has 64"),
        (&["--num-ipus", "3"][..], "whole C2 cards"),
        (
            &["--matmul-partial-type", "double"][..],
            "invalid value 'double'",
        ),
        (&["--tiles-per-ipu", "5000"][..], "has 1472 tiles"),
    ] {
        let mut args = vec![
            "run".to_string(),
            case("seed_vector_add/module.hlo"),
            "--inputs".into(),
            vector_add_inputs(),
            "--outdir".into(),
            outdir.to_string_lossy().into_owned(),
        ];
        args.extend(flags.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = ipuxla(&args);
        let text = stderr(&out);
        assert!(!out.status.success(), "{flags:?}");
        assert!(text.contains(needle), "{flags:?}: {text}");
    }
}

/// A module of 8 MB (`exp` of 1M floats) and its input, in a fresh scratch folder; `run`
/// runs it with extra flags into `out{tag}`.
fn eight_megabyte_module(name: &str) -> (PathBuf, impl Fn(&str, &[&str]) -> Output) {
    let (dir, hlo) = hlo_file(
        name,
        "big.hlo",
        "HloModule big\n\nENTRY main {\n  x = f32[1000000] parameter(0)\n  ROOT y = f32[1000000] exponential(x)\n}\n",
    );
    let x = dir.join("x.npy");
    ipuxla::npy::write_npy(
        &x,
        &xla_ir::ArrayLiteral::new(
            xla_ir::ArrayShape::new(xla_ir::ElementType::F32, &[1_000_000]),
            xla_ir::literal::ArrayData::F32(vec![0.5; 1_000_000]),
        )
        .unwrap(),
    )
    .unwrap();
    let out_dir = dir.clone();
    let run = move |tag: &str, flags: &[&str]| {
        let mut args = vec![
            "run".to_string(),
            hlo.to_string_lossy().into_owned(),
            "--inputs".into(),
            format!("0={}", x.display()),
            "--outdir".into(),
            out_dir
                .join(format!("out{tag}"))
                .to_string_lossy()
                .into_owned(),
        ];
        args.extend(flags.iter().map(|f| f.to_string()));
        ipuxla(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    (dir, run)
}

#[test]
fn a_module_too_big_for_four_tiles_is_out_of_memory_naming_the_tile() {
    let (dir, run) = eight_megabyte_module("oom");
    // A C2 (ipu1) has no Streaming Memory: 8 MB cannot fit 4 tiles of 256 KiB.
    let out = run("ipu1", &["--ipu-version", "ipu1", "--tiles-per-ipu", "4"]);
    let text = stderr(&out);
    assert!(!out.status.success());
    assert!(
        text.contains("IPU 0 tile ")
            && text.contains("is out of memory: ")
            && text.contains("but the tile has 262144")
            && text.contains("live on the tile then: ")
            && text.contains("an ipu1 has no Streaming Memory"),
        "{text}"
    );
    assert!(!dir.join("outipu1").exists(), "nothing is written");
    // An ipu2 with Streaming Memory turned off fails the same way.
    let out = run("off", &["--tiles-per-ipu", "4", "--no-streaming-memory"]);
    let text = stderr(&out);
    assert!(!out.status.success());
    assert!(
        text.contains("is out of memory: ")
            && text.contains("but the tile has 638976")
            && text.contains("ipu_model.streaming_memory is off"),
        "{text}"
    );
    assert!(!dir.join("outoff").exists(), "nothing is written");
    // The same module fits a full IPU.
    let out = run("1472", &["--tiles-per-ipu", "1472"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn a_module_too_big_for_four_tiles_of_an_ipu2_runs_out_of_core() {
    let (dir, run) = eight_megabyte_module("out-of-core");
    let profile = dir.join("profile.json");
    let out = run(
        "4",
        &[
            "--tiles-per-ipu",
            "4",
            "--profile",
            profile.to_str().unwrap(),
        ],
    );
    let text = stderr(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("warning: the module does not fit the tile memory of 4 tiles per IPU; it runs out of core on 16 virtual tiles"), "{text}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(
            "out of core: 16 virtual tiles per IPU run on 4, paged through Streaming Memory"
        ) && stdout.contains("(virtual; runs on tile "),
        "{stdout}"
    );
    let y = ipuxla::npy::read_npy(&dir.join("out4/output_0.npy")).unwrap();
    let want = 0.5f32.exp();
    match &y.data {
        xla_ir::literal::ArrayData::F32(v) => {
            assert_eq!(v.len(), 1_000_000);
            assert!(
                v.iter().all(|&e| (e - want).abs() <= 1e-6 * want),
                "exp(0.5)"
            );
        }
        other => panic!("f32 expected, got {other:?}"),
    }
    let p: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&profile).unwrap()).unwrap();
    assert_eq!(
        p["out_of_core"],
        serde_json::json!({"virtual_tiles_per_ipu": 16, "physical_tiles_per_ipu": 4})
    );
    // Every byte of the input, the result and the computation is paged at least once.
    assert!(
        p["totals"]["bytes_paged"].as_u64().unwrap() >= 8_000_000,
        "{p}"
    );
    assert!(p["totals"]["paging_cycles"].as_u64().unwrap() > 0);
    assert!(
        p["tiles"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["bytes_used"].as_u64().unwrap() <= 638976),
        "every virtual tile fits a tile"
    );
}

#[test]
fn an_op_that_runs_on_one_tile_and_does_not_fit_it_is_out_of_memory_even_out_of_core() {
    // A sort of one row runs on one tile: 2 x 400 KB of keys and result need more than
    // 624 KiB however many tiles there are.
    let (dir, hlo) = hlo_file(
        "one-tile-oom",
        "sort.hlo",
        "HloModule s\n\ncmp {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT lt = pred[] compare(a, b), direction=LT\n}\n\nENTRY main {\n  x = f32[100000] parameter(0)\n  ROOT y = f32[100000] sort(x), dimensions={0}, to_apply=cmp\n}\n",
    );
    let x = dir.join("x.npy");
    ipuxla::npy::write_npy(
        &x,
        &xla_ir::ArrayLiteral::new(
            xla_ir::ArrayShape::new(xla_ir::ElementType::F32, &[100_000]),
            xla_ir::literal::ArrayData::F32((0..100_000).map(|i| (i % 977) as f32).collect()),
        )
        .unwrap(),
    )
    .unwrap();
    let out = ipuxla(&[
        "run",
        hlo.to_str().unwrap(),
        "--inputs",
        &format!("0={}", x.display()),
        "--outdir",
        dir.join("out").to_str().unwrap(),
        "--tiles-per-ipu",
        "4",
    ]);
    let text = stderr(&out);
    assert!(!out.status.success());
    assert!(
        text.contains("is out of memory even out of core (as virtual tile ")
            && text.contains("does not shrink this tile's share"),
        "{text}"
    );
    assert!(!dir.join("out").exists(), "nothing is written");
}

#[test]
fn the_profile_is_written_as_json() {
    let outdir = scratch("profile");
    let profile = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ipuxla-profile-{}.json", std::process::id()));
    let out = ipuxla(&[
        "run",
        &case("seed_vector_add/module.hlo"),
        "--inputs",
        &vector_add_inputs(),
        "--outdir",
        outdir.to_str().unwrap(),
        "--profile",
        profile.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&profile).unwrap()).unwrap();
    for field in [
        "target",
        "num_ipus",
        "clock_hz",
        "total_cycles",
        "seconds",
        "totals",
        "steps",
        "tiles",
    ] {
        assert!(json.get(field).is_some(), "{field} missing: {json}");
    }
    assert!(json["total_cycles"].as_u64().unwrap() > 0);
    assert!(json["tiles"][0]["bytes_used"].as_u64().unwrap() > 0);
}

/// `--estimate-only` prints the profile a run would record without reading inputs or
/// writing outputs, says which loops it could not count, writes `--profile`, and refuses
/// the options it would ignore.
#[test]
fn estimate_only_profiles_without_running() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ipuxla-estimate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let profile = dir.join("profile.json");
    let module = format!(
        "{}/fixtures/conformance/while_loop_dynamic/module.hlo",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = ipuxla(&[
        "run",
        &module,
        "--estimate-only",
        "--profile",
        profile.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("without running it"), "{stdout}");
    assert!(stdout.contains("steps estimated"), "{stdout}");
    assert!(
        stdout.contains("is counted once (trip count unknown;"),
        "{stdout}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&profile).unwrap()).unwrap();
    assert_eq!(json["data_dependent"][0]["kind"], "loop", "{json}");
    assert!(json["total_cycles"].as_u64().unwrap() > 0);
    let refused = ipuxla(&[
        "run",
        &module,
        "--estimate-only",
        "--outdir",
        dir.to_str().unwrap(),
    ]);
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("cannot be used with"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn loop_inputs(case: &str, count: usize) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/conformance-loops");
    (0..count)
        .map(|i| {
            format!(
                "{i}={}",
                dir.join(case).join(format!("inputs/{i}.npy")).display()
            )
        })
        .collect::<Vec<_>>()
        .join(";")
}

fn loop_module(case: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/conformance-loops")
        .join(case)
        .join("module.hlo")
        .to_string_lossy()
        .into_owned()
}

/// `--iterations`: carried outputs written once, the loss stacked over iterations (or the
/// last with `--outfeed-mode last`), the loop's facts in the summary; on both engines.
#[test]
fn iterations_run_the_step_on_the_device_and_stack_per_step_outputs() {
    for (engine, mode, loss) in [
        ("ipu-model", "all", "float32 (5,)"),
        ("reference", "all", "float32 (5,)"),
        ("ipu-model", "last", "float32 ()"),
        ("reference", "last", "float32 ()"),
    ] {
        let outdir = scratch(&format!("loop-{engine}-{mode}"));
        let out = ipuxla(&[
            "run",
            &loop_module("loop_mlp_adam"),
            "--batch-per-step",
            "5",
            "--outfeed-mode",
            mode,
            "--engine",
            engine,
            "--inputs",
            &loop_inputs("loop_mlp_adam", 9),
            "--outdir",
            outdir.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{engine} {mode}: {}", stderr(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains(&format!("output_7.npy  {loss}")),
            "{stdout}"
        );
        assert!(stdout.contains("output_6.npy  int32 ()  5"), "{stdout}");
        if engine == "ipu-model" {
            assert!(
                stdout.contains("device loop: 5 iterations")
                    && stdout.contains("B of parameters streamed in once and resident"),
                "{stdout}"
            );
        }
    }
}

#[test]
fn bad_iterations_are_named_and_write_nothing() {
    let outdir = scratch("loop-bad");
    let dir = outdir.to_str().unwrap().to_string();
    let module = loop_module("loop_mlp_adam");
    let inputs = loop_inputs("loop_mlp_adam", 9);
    for (args, needle) in [
        (
            vec!["--iterations", "4", "--inputs", inputs.as_str()],
            "parameter 7 (x.1) is float32 (12, 6): with --iterations 4 its file must hold float32 (12, 6) (the same every iteration) or float32 (4, 12, 6)",
        ),
        (
            vec!["--iterations", "0"],
            "invalid value '0' for '--iterations <N>'",
        ),
        (
            vec!["--outfeed-mode", "last", "--inputs", inputs.as_str()],
            "has no outfeed and no --iterations, so nothing is produced more than once",
        ),
        (
            vec!["--iterations", "5", "--estimate-only"],
            "cannot be used with",
        ),
    ] {
        let mut all = vec!["run", module.as_str(), "--outdir", dir.as_str()];
        all.extend(args.iter().copied());
        let out = ipuxla(&all);
        assert!(!out.status.success(), "{args:?}");
        let err = stderr(&out);
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!outdir.exists(), "{args:?}: nothing is written");
    }
}

/// The summary says what the busiest tile holds when its memory peaks: the step, the
/// largest tensors live there (the product's operand blocks, at a product's step), and
/// the bytes of the tile's extent none of them holds then; the profile lists them all.
#[test]
fn the_busiest_tile_says_what_it_holds_at_its_peak() {
    let dir = scratch("peak");
    std::fs::create_dir_all(&dir).unwrap();
    let profile = dir.join("profile.json");
    let out = ipuxla(&[
        "run",
        &case("seed_mlp_train_rmsprop/module.hlo"),
        "--estimate-only",
        "--profile",
        profile.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("at its peak ("))
        .unwrap_or_else(|| panic!("no peak contents in {stdout}"));
    let p: ipuxla::runtime::Profile =
        serde_json::from_str(&std::fs::read_to_string(&profile).unwrap()).unwrap();
    let at = p
        .peak_tile_contents
        .as_ref()
        .expect("the profile lists the peak tile's tensors");
    let tile = p.peak_tile().unwrap();
    assert_eq!((at.ipu, at.tile), (tile.ipu, tile.tile));
    assert!(line.contains(&format!("({})", at.step)), "{line}");
    let first = &at.tensors[0];
    assert!(
        line.contains(&format!("{} {} B", first.name, first.bytes)),
        "{line}"
    );
    // Everything live there fits in the tile's tensor extent.
    let live: u64 = at.tensors.iter().map(|t| t.bytes).sum::<u64>() + at.others_bytes;
    assert!(
        live > 0 && live <= tile.bytes_used - tile.all_code_bytes(),
        "{live} {tile:?}"
    );
}

/// Runs `module` on the vector-add inputs with `extra` flags, expecting a refusal before
/// anything runs: no output directory, no `p.json` profile beside it; returns stderr.
fn refused_before_running(module: &str, dir: &Path, extra: &[&str]) -> String {
    let (outdir, profile) = (dir.join("out"), dir.join("p.json"));
    let inputs = vector_add_inputs();
    let mut args = vec!["run", module, "--inputs", &inputs];
    args.extend(["--outdir", outdir.to_str().unwrap()]);
    args.extend(extra.iter().map(|e| match *e {
        "PROFILE" => profile.to_str().unwrap(),
        e => e,
    }));
    let out = ipuxla(&args);
    assert!(!out.status.success(), "{extra:?} was taken");
    assert!(
        !outdir.exists() && !profile.exists(),
        "{extra:?}: nothing is written"
    );
    stderr(&out)
}

/// `--profile` and `--trace` need a run on the IPU Model: on the reference engine, and for
/// a module that places nothing on the IPU, they are refused before anything runs or is
/// written.
#[test]
fn profile_without_the_ipu_model_is_refused_before_running() {
    let dir = scratch("profile-refused");
    let module = case("seed_vector_add/module.hlo");
    let text = refused_before_running(
        &module,
        &dir,
        &["--engine", "reference", "--profile", "PROFILE"],
    );
    assert!(
        text.contains("the reference engine records no profile"),
        "{text}"
    );
    let all_on_host = "HloModule all_on_host\n\nENTRY main {\n  pa.1 = f32[2]{0} parameter(0)\n  pb.1 = f32[2]{0} parameter(1)\n  pc.1 = f32[2]{0} parameter(2)\n  s = f32[2]{0} add(pa.1, pb.1), frontend_attributes={ipuxla.host=\"true\"}\n  ROOT t = f32[2]{0} add(s, pc.1), frontend_attributes={ipuxla.host=\"true\"}\n}\n";
    let (dir, hlo) = hlo_file("profile-host", "all.hlo", all_on_host);
    let text = refused_before_running(hlo.to_str().unwrap(), &dir, &["--trace", "PROFILE"]);
    assert!(
        text.contains("places no instruction on the IPU (no_ipu_placement)"),
        "{text}"
    );
}

/// Flags that would not act are refused before anything runs: the compile's flags on the
/// reference engine (it compiles nothing), pipelining flags on a module without stages or
/// without --iterations.
#[test]
fn flags_that_would_not_act_are_refused() {
    let dir = scratch("not-acting");
    let module = case("seed_vector_add/module.hlo");
    for (extra, needle) in [
        (
            &[
                "--engine",
                "reference",
                "--matmul-amp",
                "0.5",
                "--scheduler",
                "post-order",
            ][..],
            "--matmul-amp, --scheduler: the reference engine compiles nothing, so compile flags would not act",
        ),
        (
            &["--engine", "reference", "--tiles-per-ipu", "4"],
            "--tiles-per-ipu: the reference engine compiles nothing",
        ),
        (
            &["--pipeline-schedule", "sequential", "--iterations", "2"],
            "module.hlo has no stages",
        ),
    ] {
        let text = refused_before_running(&module, &dir, extra);
        assert!(text.contains(needle), "{extra:?}: {text}");
    }
    let staged = "HloModule staged\n\nENTRY main {\n  pa.1 = f32[2]{0} parameter(0)\n  pb.1 = f32[2]{0} parameter(1)\n  pc.1 = f32[2]{0} parameter(2)\n  a = f32[2]{0} add(pa.1, pb.1), frontend_attributes={ipu_stage=\"0\"}\n  ROOT b = f32[2]{0} add(a, pc.1), frontend_attributes={ipu_stage=\"1\"}\n}\n";
    let (dir, hlo) = hlo_file("staged", "staged.hlo", staged);
    let text = refused_before_running(hlo.to_str().unwrap(), &dir, &["--device-mapping", "1,0"]);
    assert!(
        text.contains("staged.hlo has stages but runs without --iterations"),
        "{text}"
    );
}
