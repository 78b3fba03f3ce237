//! The pass pipeline on small modules: the module after each pass, as `--dump-to` writes
//! it, pinned as insta snapshots; and the dump files' names.

use ipuxla::compiler::{self, IpuConfig, PassOptions};
use std::path::Path;

mod common;

fn module(path: &str) -> xla_ir::Module {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    xla_ir::parse_module(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The module after each pass, by running the pipeline to each `--stop-after`.
fn after_each_pass(m: &xla_ir::Module, config: &IpuConfig) -> Vec<(String, String)> {
    compiler::passes::pass_names()
        .into_iter()
        .map(|name| {
            let options = PassOptions {
                stop_after: Some(name.into()),
                ..PassOptions::default()
            };
            let (out, _) = compiler::optimise(m, config, &options).unwrap();
            (name.to_string(), out.to_string())
        })
        .collect()
}

#[test]
fn int64_conversion_and_scheduling_of_an_int64_module() {
    let m = module("fixtures/passes/int64_index.hlo");
    for (pass, text) in after_each_pass(&m, &IpuConfig::default()) {
        insta::assert_snapshot!(format!("int64_index__after_{pass}"), text);
    }
}

#[test]
fn bitcasts_become_transposes_and_reshapes() {
    let m = module("fixtures/passes/bitcasts.hlo");
    let (_, text) = after_each_pass(&m, &IpuConfig::default())
        .into_iter()
        .find(|(pass, _)| pass == "bitcast-decomposer")
        .expect("the decomposer is in the pipeline");
    insta::assert_snapshot!("bitcasts__after_bitcast-decomposer", text);
    // And the whole compile gives the evaluator's values (bitcasts between widths did
    // not compile before the decomposer: the int64 conversion narrowed their operands).
    let inputs = xla_ir::generate::inputs(&m, 3);
    let want = common::leaves(xla_ir::eval::evaluate(&m, &inputs).unwrap());
    let run = ipuxla::device::run_on_ipu_model(&m, &IpuConfig::default(), &inputs).unwrap();
    for (got, want) in run.outputs.iter().zip(&want) {
        assert_eq!((&got.shape.dims, &got.data), (&want.shape.dims, &want.data));
    }
}

/// A slice and an update of a large array starting along three dimensions become one op
/// per dimension, the most slicing first (PopLibs' order: dimension 0 keeps 3 of 500,
/// then 2 of 8, then 20 of 200); a slice partial along one dimension, and one of a small
/// array, stay single ops. The whole compile gives the evaluator's values.
#[test]
fn dynamic_slices_along_several_dimensions_take_one_at_a_time() {
    let m = module("fixtures/passes/dynamic_slices.hlo");
    let (_, text) = after_each_pass(&m, &IpuConfig::default())
        .into_iter()
        .find(|(pass, _)| pass == "dynamic-slice-splitter")
        .expect("the splitter is in the pipeline");
    insta::assert_snapshot!("dynamic_slices__after_dynamic-slice-splitter", text);
    let inputs = xla_ir::generate::inputs(&m, 5);
    let want = common::leaves(xla_ir::eval::evaluate(&m, &inputs).unwrap());
    let run = ipuxla::device::run_on_ipu_model(&m, &IpuConfig::default(), &inputs).unwrap();
    for (got, want) in run.outputs.iter().zip(&want) {
        assert_eq!((&got.shape.dims, &got.data), (&want.shape.dims, &want.data));
    }
}

#[test]
fn repeated_blocks_become_one_function_called_twice() {
    let m = module("fixtures/outlining/two_blocks.hlo");
    let after = after_each_pass(&m, &IpuConfig::default());
    let (_, text) = after
        .iter()
        .find(|(pass, _)| pass == "graph-outliner")
        .expect("the outliner is in the pipeline");
    insta::assert_snapshot!("two_blocks__after_graph-outliner", text);
    let mut off = IpuConfig::default();
    off.optimizations.enable_graph_outlining = false;
    let options = PassOptions {
        stop_after: Some("graph-outliner".into()),
        ..PassOptions::default()
    };
    let (unchanged, report) = compiler::optimise(&m, &off, &options).unwrap();
    assert!(!unchanged.to_string().contains("call("), "{unchanged}");
    let notes = &report.passes.last().unwrap().notes;
    assert!(
        notes[0].contains("enable_graph_outlining is off"),
        "{notes:?}"
    );
}

#[test]
fn a_value_read_early_and_late_is_recomputed_before_the_late_read() {
    let m = module("fixtures/recompute/early_and_late.hlo");
    let config = IpuConfig {
        allow_recompute: true,
        ..IpuConfig::default()
    };
    let (out, report) = compiler::optimise(&m, &config, &PassOptions::default()).unwrap();
    insta::assert_snapshot!("early_and_late__after_recomputation", out.to_string());
    let notes = &report.passes.last().unwrap().notes;
    insta::assert_snapshot!("early_and_late__recomputation_report", notes.join("\n"));
}

#[test]
fn exact_64_bit_integers_become_word_pairs() {
    let m = module("fixtures/passes/int64_words.hlo");
    for (pass, text) in after_each_pass(&m, &IpuConfig::default()) {
        insta::assert_snapshot!(format!("int64_words__after_{pass}"), text);
    }
}

#[test]
fn the_scheduler_reorders_for_memory() {
    let m = module("fixtures/schedules/two_branches.hlo");
    let mut config = IpuConfig::default();
    // The e-graph would merge the two identical broadcasts; this test is about order.
    config.optimizations.egraph.enabled = false;
    for algorithm in ["POST_ORDER", "CHOOSE_BEST"] {
        config.scheduling.algorithm = algorithm.into();
        let (out, _) = compiler::optimise(&m, &config, &PassOptions::default()).unwrap();
        insta::assert_snapshot!(format!("two_branches__{algorithm}"), out.to_string());
    }
}

#[test]
fn dumps_are_named_as_xla_names_them() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ipuxla-dumps-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let m = module("fixtures/conformance/bench_mlp_train_b256/module.hlo");
    let options = PassOptions {
        dump_to: Some(dir.clone()),
        ..PassOptions::default()
    };
    let (_, report) = compiler::optimise(&m, &IpuConfig::default(), &options).unwrap();
    let names = common::file_names(&dir);
    assert_eq!(
        names,
        [
            "module_0000.jit_mlp_train_rmsprop.0000.before_optimizations.txt",
            "module_0000.jit_mlp_train_rmsprop.0001.after_bitcast-decomposer.txt",
            "module_0000.jit_mlp_train_rmsprop.0002.after_rng-bit-generator-expander.txt",
            "module_0000.jit_mlp_train_rmsprop.0003.after_int64-conversion.txt",
            "module_0000.jit_mlp_train_rmsprop.0004.after_egraph-optimiser.report.txt",
            "module_0000.jit_mlp_train_rmsprop.0004.after_egraph-optimiser.txt",
            "module_0000.jit_mlp_train_rmsprop.0005.after_dynamic-slice-splitter.txt",
            "module_0000.jit_mlp_train_rmsprop.0006.after_graph-outliner.report.txt",
            "module_0000.jit_mlp_train_rmsprop.0006.after_graph-outliner.txt",
            "module_0000.jit_mlp_train_rmsprop.0007.after_ipu-scheduler.txt",
            "module_0000.jit_mlp_train_rmsprop.0008.after_recomputation.report.txt",
            "module_0000.jit_mlp_train_rmsprop.0008.after_recomputation.txt",
        ]
    );
    assert_eq!(report.dumps.len(), 12);
    // Each module dump parses back; the last is the scheduled module.
    let modules: Vec<_> = report
        .dumps
        .iter()
        .filter(|d| !d.to_string_lossy().ends_with(".report.txt"))
        .collect();
    let last = std::fs::read_to_string(modules.last().unwrap()).unwrap();
    assert!(xla_ir::parse_module(&last).unwrap().is_scheduled);
    let before = std::fs::read_to_string(&report.dumps[0]).unwrap();
    assert!(!xla_ir::parse_module(&before).unwrap().is_scheduled);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn stop_after_an_unknown_pass_names_the_passes() {
    let m = module("fixtures/schedules/two_branches.hlo");
    let options = PassOptions {
        stop_after: Some("algsimp".into()),
        ..PassOptions::default()
    };
    let err = compiler::optimise(&m, &IpuConfig::default(), &options).unwrap_err();
    assert_eq!(
        err.to_string(),
        "--stop-after 'algsimp': there is no such pass; the passes are bitcast-decomposer, rng-bit-generator-expander, int64-conversion, egraph-optimiser, dynamic-slice-splitter, graph-outliner, ipu-scheduler, recomputation"
    );
}
