//! Compiled executables on disk: `ipuxla compile -o FILE.ipux` and `ipuxla run FILE.ipux`
//! (pre-compilation), and the executable cache (`executable_cache_path`,
//! `--executable-cache-dir`). A stored executable runs exactly as the freshly compiled one
//! (outputs bit for bit, cycles, memory); a damaged or foreign one is never loaded: it is
//! reported and compiled again.

mod common;
use common::{fixture, ipuxla};

use ipuxla::compiler::{IpuConfig, PassOptions};
use ipuxla::device::LoadedModule;
use std::path::{Path, PathBuf};
use std::process::Output;

fn scratch(name: &str) -> PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ipuxla-exe-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn stderr(out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!text.contains("panicked"), "{text}");
    text
}

fn case_inputs(case: &str, n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "{i}={}",
                fixture(&format!("conformance/{case}/inputs/{i}.npy"))
            )
        })
        .collect::<Vec<_>>()
        .join(";")
}

/// Runs `file` on the case's inputs into `outdir`, returning the output.
fn run(file: &Path, case: &str, inputs: usize, outdir: &Path, extra: &[&str]) -> Output {
    let inputs = case_inputs(case, inputs);
    let mut args = vec![
        "run",
        file.to_str().unwrap(),
        "--inputs",
        &inputs,
        "--outdir",
        outdir.to_str().unwrap(),
        "--overwrite",
    ];
    args.extend_from_slice(extra);
    ipuxla(&args)
}

/// The lines of a run's summary that describe the simulated run (not the host's times).
fn simulated(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            !l.starts_with("host:")
                && !l.starts_with("ran ")
                && !l.starts_with("trained ")
                && !l.contains(".npy")
        })
        .map(str::to_string)
        .collect()
}

fn same_files(a: &Path, b: &Path) {
    let names = common::file_names(a);
    assert_eq!(names, common::file_names(b));
    for n in names {
        assert_eq!(
            std::fs::read(a.join(&n)).unwrap(),
            std::fs::read(b.join(&n)).unwrap(),
            "{n} differs"
        );
    }
}

/// Convolutions (codelets sharing patch matrices) and sorts (evaluating codelets): the
/// stored executable gives the same bytes, cycles and memory as compiling.
#[test]
fn a_compiled_file_runs_as_the_module_does() {
    for (case, inputs) in [("conv2d_basic", 2), ("sort_ops", 2)] {
        let dir = scratch(case);
        let hlo = fixture(&format!("conformance/{case}/module.hlo"));
        let exe = dir.join("module.ipux");
        let out = ipuxla(&[
            "compile",
            &hlo,
            "-o",
            exe.to_str().unwrap(),
            "--tiles-per-ipu",
            "16",
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("compiled ") && stdout.contains("module.ipux"),
            "{stdout}"
        );

        let fresh = run(
            Path::new(&hlo),
            case,
            inputs,
            &dir.join("fresh"),
            &["--tiles-per-ipu", "16"],
        );
        assert!(fresh.status.success(), "{}", stderr(&fresh));
        let stored = run(&exe, case, inputs, &dir.join("stored"), &[]);
        assert!(stored.status.success(), "{}", stderr(&stored));
        let stdout = String::from_utf8_lossy(&stored.stdout);
        assert!(stdout.contains("host: read the executable"), "{stdout}");
        same_files(&dir.join("fresh"), &dir.join("stored"));
        assert_eq!(simulated(&fresh), simulated(&stored), "{case}");
        // The flags that chose the config may be given again.
        let again = run(
            &exe,
            case,
            inputs,
            &dir.join("stored"),
            &["--tiles-per-ipu", "16"],
        );
        assert!(again.status.success(), "{}", stderr(&again));
    }
}

#[test]
fn a_compiled_file_refuses_another_config_and_the_flags_that_compile() {
    let dir = scratch("refuse");
    let hlo = fixture("conformance/seed_vector_add/module.hlo");
    let exe = dir.join("add.ipux");
    let out = ipuxla(&["compile", &hlo, "-o", exe.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let outdir = dir.join("out");
    for (flags, needle) in [
        (
            &["--tiles-per-ipu", "4"][..],
            "compiled for another configuration: ipu_model.tiles_per_ipu is 4 here but 0 in the file",
        ),
        (&["--stop-after", "dce"][..], "act when compiling"),
        (
            &["--iterations", "2"][..],
            "--iterations (a device loop) is not available",
        ),
        (
            &["--executable-cache-dir", dir.to_str().unwrap()][..],
            "compiled already",
        ),
    ] {
        let out = run(&exe, "seed_vector_add", 3, &outdir, flags);
        assert!(!out.status.success(), "{flags:?} was accepted");
        let err = stderr(&out);
        assert!(err.contains(needle), "{flags:?}: {err}");
        assert!(err.contains("add.ipux"), "{flags:?}: {err}");
    }
    // Which parameters a device loop feeds depends on the inputs: compile refuses it.
    let looped = dir.join("loop.json");
    std::fs::write(&looped, r#"{"device_loop": {"iterations_per_loop": 2}}"#).unwrap();
    let out = ipuxla(&[
        "compile",
        &hlo,
        "-o",
        dir.join("loop.ipux").to_str().unwrap(),
        "--config",
        looped.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("a device loop of 2 iterations"), "{err}");
    assert!(!dir.join("loop.ipux").exists());
}

/// A file whose executable is damaged, cut short or from another build says so and runs by
/// compiling the module it holds; one whose source is damaged too is refused.
#[test]
fn a_damaged_compiled_file_is_compiled_again_with_a_warning() {
    let dir = scratch("damaged");
    let hlo = fixture("conformance/seed_vector_add/module.hlo");
    let exe = dir.join("add.ipux");
    let out = ipuxla(&["compile", &hlo, "-o", exe.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let good = std::fs::read(&exe).unwrap();
    let fresh = run(
        Path::new(&hlo),
        "seed_vector_add",
        3,
        &dir.join("fresh"),
        &[],
    );
    assert!(fresh.status.success(), "{}", stderr(&fresh));

    let mut flipped = good.clone();
    let last = flipped.len() - 3;
    flipped[last] ^= 0x10;
    let build = ipuxla::compiler::stored::MAGIC.len() + 8;
    let mut foreign = good.clone();
    foreign[build] = b'I';
    for (name, bytes, needle) in [
        (
            "flipped",
            flipped,
            "checksum of its executable does not match",
        ),
        ("cut", good[..good.len() - 7].to_vec(), "truncated"),
        ("foreign", foreign, "written by another build of ipuxla"),
    ] {
        let file = dir.join(format!("{name}.ipux"));
        std::fs::write(&file, bytes).unwrap();
        let out = run(&file, "seed_vector_add", 3, &dir.join(name), &[]);
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains(needle) && err.contains("compiling the module it holds again"),
            "{name}: {err}"
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("host: compile"));
        same_files(&dir.join("fresh"), &dir.join(name));
    }

    let source_cut = dir.join("source-cut.ipux");
    std::fs::write(&source_cut, &good[..40]).unwrap();
    let out = run(
        &source_cut,
        "seed_vector_add",
        3,
        &dir.join("source-cut"),
        &[],
    );
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("source-cut.ipux: a stored executable that cannot be read: truncated"),
        "{err}"
    );
}

fn load(
    module: &xla_ir::Module,
    config: &IpuConfig,
) -> (LoadedModule, ipuxla::device::LoadTimings) {
    LoadedModule::load(module, config, &PassOptions::default()).unwrap()
}

/// The cache: the first load compiles and stores, the next reads (and runs identically); a
/// damaged entry is reported in the warnings, compiled again and replaced.
#[test]
fn the_executable_cache_stores_reads_and_replaces_damaged_entries() {
    let dir = scratch("cache");
    let text = std::fs::read_to_string(fixture("conformance/conv2d_basic/module.hlo")).unwrap();
    let module = xla_ir::parse_module(&text).unwrap();
    let args = common::arguments(&module);
    let mut config = IpuConfig::default();
    config.ipu_model.tiles_per_ipu = 16;
    config.executable_cache_path = dir.join("cache").to_string_lossy().into_owned();

    let (mut first, t) = load(&module, &config);
    assert_eq!(t.read_from, None, "nothing cached yet");
    assert!(first.warnings.is_empty(), "{:?}", first.warnings);
    let entries = common::file_names(&dir.join("cache"));
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert!(entries[0].ends_with(".ipux"), "{entries:?}");
    let entry = dir.join("cache").join(&entries[0]);
    let (want, want_profile) = first.run(&args).unwrap();

    let (mut second, t) = load(&module, &config);
    assert_eq!(t.read_from.as_deref(), Some(entry.as_path()));
    let (got, profile) = second.run(&args).unwrap();
    assert_eq!(got, want);
    assert_eq!(profile.total_cycles, want_profile.total_cycles);
    assert_eq!(
        profile.peak_tile().map(|t| t.bytes_used),
        want_profile.peak_tile().map(|t| t.bytes_used)
    );

    // Another config is another entry.
    let mut other = config.clone();
    other.ipu_model.tiles_per_ipu = 8;
    let (_, t) = load(&module, &other);
    assert_eq!(t.read_from, None);
    assert_eq!(common::file_names(&dir.join("cache")).len(), 2);

    let good = std::fs::read(&entry).unwrap();
    for (name, bytes, needle) in [
        (
            "flipped",
            {
                let mut b = good.clone();
                let at = b.len() / 2;
                b[at] ^= 1;
                b
            },
            "corrupt",
        ),
        ("cut", good[..good.len() / 3].to_vec(), "truncated"),
    ] {
        std::fs::write(&entry, bytes).unwrap();
        let (mut rebuilt, t) = load(&module, &config);
        assert_eq!(t.read_from, None, "{name}: a damaged entry is never loaded");
        let warning = rebuilt.warnings.join("\n");
        assert!(
            warning.contains(needle) && warning.contains("compiling again"),
            "{name}: {warning}"
        );
        assert!(warning.contains(&entries[0]), "{name}: {warning}");
        assert_eq!(rebuilt.run(&args).unwrap().0, want);
        // Replaced: the next load reads it.
        let (_, t) = load(&module, &config);
        assert_eq!(t.read_from.as_deref(), Some(entry.as_path()), "{name}");
    }
}

#[test]
fn run_keeps_its_executables_in_the_cache_directory() {
    let dir = scratch("cli-cache");
    let hlo = fixture("conformance/sort_ops/module.hlo");
    let cache = dir.join("cache");
    let flags = ["--executable-cache-dir", cache.to_str().unwrap()];
    let first = run(Path::new(&hlo), "sort_ops", 2, &dir.join("a"), &flags);
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(String::from_utf8_lossy(&first.stdout).contains("host: compile"));
    let second = run(Path::new(&hlo), "sort_ops", 2, &dir.join("b"), &flags);
    assert!(second.status.success(), "{}", stderr(&second));
    let stdout = String::from_utf8_lossy(&second.stdout);
    assert!(stdout.contains("host: read the executable"), "{stdout}");
    assert!(stdout.contains(cache.to_str().unwrap()), "{stdout}");
    same_files(&dir.join("a"), &dir.join("b"));
    assert_eq!(simulated(&first), simulated(&second));
    // Estimating compiles the same executable: it reads it too.
    let estimate = ipuxla(&["run", &hlo, "--estimate-only", flags[0], flags[1]]);
    assert!(estimate.status.success(), "{}", stderr(&estimate));
    let stdout = String::from_utf8_lossy(&estimate.stdout);
    assert!(stdout.contains("host: read the executable"), "{stdout}");

    // The reference engine compiles nothing: the flag would be ignored, so it is refused.
    let out = run(
        Path::new(&hlo),
        "sort_ops",
        2,
        &dir.join("c"),
        &["--engine", "reference", flags[0], flags[1]],
    );
    assert!(!out.status.success());
    assert!(stderr(&out).contains("the reference engine compiles nothing"));
}

/// Training pipelines (`--optimizer`) are cached too: the second run reads the pipeline's
/// executable and trains to the same bytes.
#[test]
fn a_training_pipeline_is_cached() {
    let dir = scratch("pipeline");
    let cache = dir.join("cache");
    let inputs = ["w0", "w1", "w2", "w3", "x", "y"]
        .iter()
        .map(|n| format!("{n}={}", fixture(&format!("training-pipeline/{n}.npy"))))
        .collect::<Vec<_>>()
        .join(";");
    let hlo = fixture("training-pipeline/mlp_loss_4stages.hlo");
    let train = |out: &str| {
        ipuxla(&[
            "run",
            &hlo,
            "--inputs",
            &inputs,
            "--outdir",
            dir.join(out).to_str().unwrap(),
            "--iterations",
            "16",
            "--optimizer",
            "sgd:0.05",
            "--num-ipus",
            "4",
            "--executable-cache-dir",
            cache.to_str().unwrap(),
        ])
    };
    let first = train("a");
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(String::from_utf8_lossy(&first.stdout).contains("host: compile"));
    let second = train("b");
    assert!(second.status.success(), "{}", stderr(&second));
    let stdout = String::from_utf8_lossy(&second.stdout);
    assert!(stdout.contains("host: read the executable"), "{stdout}");
    same_files(&dir.join("a"), &dir.join("b"));
    assert_eq!(simulated(&first), simulated(&second));
}
