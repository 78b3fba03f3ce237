//! No `IpuConfig` key is accepted and ignored: for every key `ipuxla config` lists, a probe
//! (a setting, on a module where it should matter) either changes what a run produces
//! (outputs bit for bit, cycles, peak tile memory) or what the compiler makes of the module
//! (the scheduled module, the executable), or is refused with an error.

mod common;
use common::fixture;

use ipuxla::compiler::IpuConfig;
use ipuxla::compiler::config_docs::OPTIONS;
use xla_ir::literal::{ArrayData, ArrayLiteral};
use xla_ir::{ArrayShape, ElementType, Literal};

fn module(path: &str) -> xla_ir::Module {
    xla_ir::parse_module(&std::fs::read_to_string(fixture(path)).unwrap()).unwrap()
}

/// Deterministic arguments for every parameter (`common::arguments`) but for
/// `exceptions.hlo`, whose inputs raise every exception (and overflow).
fn arguments(path: &str, m: &xla_ir::Module) -> Vec<Literal> {
    if path.ends_with("exceptions.hlo") {
        let x = [1.0f32, -1.0, 3.0, 4.0, 5.0, 6.0, 7.0, 3e38];
        let y = [1.0f32, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0];
        return [x, y]
            .into_iter()
            .map(|v| {
                Literal::Array(ArrayLiteral {
                    shape: ArrayShape::new(ElementType::F32, &[8]),
                    data: ArrayData::F32(v.to_vec()),
                })
            })
            .collect();
    }
    common::arguments(m)
}

/// What a run produces (its outputs' bytes, cycles, clock and peak tile bytes, or its
/// error) and what the compiler makes of the module (the scheduled module and the
/// executable, or its error).
type Observed = (
    Result<(Vec<Vec<u8>>, u64, u64, u64), String>,
    Result<(String, String), String>,
);

fn observe(path: &str, json: &str) -> Observed {
    let config = match IpuConfig::from_json(json) {
        Ok(c) => c,
        Err(e) => return (Err(e.to_string()), Err(e.to_string())),
    };
    let m = module(path);
    let args = arguments(path, &m);
    let run = ipuxla::device::run_on_ipu_model(&m, &config, &args)
        .map_err(|e| format!("{e:#}"))
        .map(|run| {
            let bytes = run
                .outputs
                .iter()
                .map(|o: &ArrayLiteral| ipuxla::compiler::device_data::to_device(&o.data))
                .collect();
            let peak = run.profile.peak_tile().map_or(0, |t| t.bytes_used);
            (
                bytes,
                run.profile.total_cycles,
                run.profile.clock_hz as u64,
                peak,
            )
        });
    let options = ipuxla::compiler::PassOptions::default();
    let compiled = ipuxla::compiler::optimise(&m, &config, &options)
        .and_then(|(scheduled, _)| {
            let exe = ipuxla::compiler::compile(&m, &config)?;
            Ok((scheduled.to_string(), format!("{exe:?}")))
        })
        .map_err(|e| e.to_string());
    (run, compiled)
}

/// (key, module, base config, probe config): the probe differs from the base in the key.
const PROBES: &[(&str, &str, &str, &str)] = &[
    (
        "ipu_model.version",
        "egraph/algebra.hlo",
        "{}",
        r#"{"ipu_model": {"version": "ipu1"}}"#,
    ),
    (
        "ipu_model.tiles_per_ipu",
        "egraph/algebra.hlo",
        "{}",
        r#"{"ipu_model": {"tiles_per_ipu": 4}}"#,
    ),
    (
        "ipu_model.compile_ipu_code",
        "egraph/algebra.hlo",
        "{}",
        r#"{"ipu_model": {"compile_ipu_code": false}}"#,
    ),
    (
        "ipu_model.streaming_memory",
        "planner/big_dot.hlo",
        r#"{"ipu_model": {"tiles_per_ipu": 4}}"#,
        r#"{"ipu_model": {"tiles_per_ipu": 4, "streaming_memory": false}}"#,
    ),
    (
        "auto_select_ipus",
        "egraph/algebra.hlo",
        "{}",
        r#"{"auto_select_ipus": 2}"#,
    ),
    (
        "matmuls.poplar_options",
        "planner/f16_dot.hlo",
        "{}",
        r#"{"matmuls": {"poplar_options": {"partialsType": "half"}}}"#,
    ),
    (
        "convolutions.poplar_options",
        "planner/conv.hlo",
        // On 1 472 tiles the fastest split already cuts the patches finest.
        r#"{"ipu_model": {"tiles_per_ipu": 16}}"#,
        r#"{"ipu_model": {"tiles_per_ipu": 16}, "convolutions": {"poplar_options": {"availableMemoryProportion": "0.01"}}}"#,
    ),
    (
        "floating_point_behaviour.inv",
        "floating_point/exceptions.hlo",
        "{}",
        r#"{"floating_point_behaviour": {"inv": true}}"#,
    ),
    (
        "floating_point_behaviour.div0",
        "floating_point/exceptions.hlo",
        "{}",
        r#"{"floating_point_behaviour": {"div0": true}}"#,
    ),
    (
        "floating_point_behaviour.oflo",
        "floating_point/exceptions.hlo",
        "{}",
        r#"{"floating_point_behaviour": {"oflo": true}}"#,
    ),
    (
        "floating_point_behaviour.nanoo",
        "floating_point/exceptions.hlo",
        "{}",
        r#"{"floating_point_behaviour": {"nanoo": true}}"#,
    ),
    (
        "floating_point_behaviour.set_all",
        "floating_point/exceptions.hlo",
        "{}",
        r#"{"floating_point_behaviour": {"set_all": true}}"#,
    ),
    (
        "floating_point_behaviour.esr",
        "floating_point/f16_accumulate.hlo",
        "{}",
        r#"{"floating_point_behaviour": {"esr": true}}"#,
    ),
    (
        "floating_point_behaviour.esr_seed",
        "floating_point/f16_accumulate.hlo",
        r#"{"floating_point_behaviour": {"esr": true}}"#,
        r#"{"floating_point_behaviour": {"esr": true, "esr_seed": 2}}"#,
    ),
    (
        "scheduling.algorithm",
        "conformance/softmax_ops/module.hlo",
        "{}",
        r#"{"scheduling": {"algorithm": "POST_ORDER"}}"#,
    ),
    (
        "scheduling.maximum_scheduler_lookahead_depth",
        "conformance/bench_cnn_train_b32/module.hlo",
        r#"{"scheduling": {"algorithm": "LOOK_AHEAD"}}"#,
        r#"{"scheduling": {"algorithm": "LOOK_AHEAD", "maximum_scheduler_lookahead_depth": 0}}"#,
    ),
    (
        "scheduling.maximum_scheduler_search_space_size",
        "conformance/softmax_ops/module.hlo",
        r#"{"scheduling": {"algorithm": "LOOK_AHEAD"}}"#,
        r#"{"scheduling": {"algorithm": "LOOK_AHEAD", "maximum_scheduler_search_space_size": 1}}"#,
    ),
    (
        "optimizations.prefetch_data_streams",
        "egraph/algebra.hlo",
        "{}",
        r#"{"optimizations": {"prefetch_data_streams": false}}"#,
    ),
    (
        "optimizations.combine_matmuls",
        "egraph/combine_matmuls.hlo",
        "{}",
        r#"{"optimizations": {"combine_matmuls": true}}"#,
    ),
    (
        "allow_recompute",
        "recompute/early_and_late.hlo",
        "{}",
        r#"{"allow_recompute": true}"#,
    ),
    (
        "optimizations.enable_graph_outlining",
        "outlining/two_blocks.hlo",
        "{}",
        r#"{"optimizations": {"enable_graph_outlining": false}}"#,
    ),
    (
        "optimizations.enable_fast_math",
        "egraph/fast_math.hlo",
        "{}",
        r#"{"optimizations": {"enable_fast_math": true}}"#,
    ),
    (
        "optimizations.egraph.enabled",
        "egraph/algebra.hlo",
        "{}",
        r#"{"optimizations": {"egraph": {"enabled": false}}}"#,
    ),
    (
        "optimizations.egraph.node_limit",
        "egraph/algebra.hlo",
        "{}",
        r#"{"optimizations": {"egraph": {"node_limit": 1}}}"#,
    ),
    (
        "optimizations.egraph.iteration_limit",
        "egraph/slice_chain.hlo",
        "{}",
        r#"{"optimizations": {"egraph": {"iteration_limit": 1}}}"#,
    ),
    (
        "optimizations.egraph.time_limit_seconds",
        "egraph/algebra.hlo",
        "{}",
        r#"{"optimizations": {"egraph": {"time_limit_seconds": 1e-9}}}"#,
    ),
    (
        "selection_order",
        "egraph/algebra.hlo",
        "{}",
        r#"{"selection_order": "ZIGZAG"}"#,
    ),
    (
        "pipelining.pipeline_schedule",
        "pipeline/two_stages.hlo",
        r#"{"auto_select_ipus": 2, "device_loop": {"iterations_per_loop": 3}}"#,
        r#"{"auto_select_ipus": 2, "device_loop": {"iterations_per_loop": 3}, "pipelining": {"pipeline_schedule": "Sequential"}}"#,
    ),
    // A mode says how a training pipeline recomputes, so without allow_recompute it is
    // refused; with it, tests/training_pipeline.rs shows each mode's memory and cycles.
    (
        "pipelining.recomputation_mode",
        "pipeline/two_stages.hlo",
        r#"{"auto_select_ipus": 2, "device_loop": {"iterations_per_loop": 3}}"#,
        r#"{"auto_select_ipus": 2, "device_loop": {"iterations_per_loop": 3}, "pipelining": {"recomputation_mode": "RecomputeThenBackpropagate"}}"#,
    ),
    (
        "pipelining.device_mapping",
        "pipeline/two_stages.hlo",
        r#"{"auto_select_ipus": 4, "device_loop": {"iterations_per_loop": 3}}"#,
        r#"{"auto_select_ipus": 4, "device_loop": {"iterations_per_loop": 3}, "pipelining": {"device_mapping": [0, 2]}}"#,
    ),
    (
        "device_loop.iterations_per_loop",
        "egraph/algebra.hlo",
        "{}",
        r#"{"device_loop": {"iterations_per_loop": 2}}"#,
    ),
    (
        "device_loop.outfeed_mode",
        "egraph/algebra.hlo",
        r#"{"device_loop": {"iterations_per_loop": 2}}"#,
        r#"{"device_loop": {"iterations_per_loop": 2, "outfeed_mode": "LAST"}}"#,
    ),
];

/// Keys that change where the host keeps things, not what a run produces: each has its own
/// probe below.
const HOST_KEYS: &[&str] = &["executable_cache_path"];

/// `executable_cache_path`: a run stores its executable there and the next run reads it
/// (tests/executable_files.rs checks the runs agree and damaged entries are replaced).
#[test]
fn the_executable_cache_path_acts() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ipuxla-keys-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = IpuConfig {
        executable_cache_path: dir.to_string_lossy().into_owned(),
        ..IpuConfig::default()
    };
    let m = module("egraph/algebra.hlo");
    let args = arguments("egraph/algebra.hlo", &m);
    let first = ipuxla::device::run_on_ipu_model(&m, &config, &args).unwrap();
    assert_eq!(first.read_from, None);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    let second = ipuxla::device::run_on_ipu_model(&m, &config, &args).unwrap();
    assert!(second.read_from.is_some_and(|p| p.starts_with(&dir)));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_key_has_a_probe() {
    let probed: Vec<&str> = PROBES
        .iter()
        .map(|p| p.0)
        .chain(HOST_KEYS.iter().copied())
        .collect();
    for o in OPTIONS {
        assert!(probed.contains(&o.key), "no probe for {}", o.key);
    }
}

#[test]
fn every_key_acts_or_is_refused() {
    let mut ignored = Vec::new();
    for &(key, path, base, probe) in PROBES {
        let before = observe(path, base);
        assert!(
            before.0.is_ok(),
            "{key}: the base run fails: {:?}",
            before.0
        );
        let after = observe(path, probe);
        if after == before {
            ignored.push(key);
        }
    }
    assert!(ignored.is_empty(), "accepted and ignored: {ignored:?}");
}
