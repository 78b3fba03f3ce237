//! Pipelining (`frontend_attributes={ipu_stage="K"}` under `--iterations`): an 8-layer
//! encoder as 4 stages on 4 IPUs, run for 16 micro-batches, gives the unpipelined
//! module's outputs in less than half its simulated time per micro-batch.

mod common;

use ipuxla::device_loop::OutfeedMode;
use ipuxla::encoder::{EncoderSizes, encoder_stages};
use xla_ir::Literal;
use xla_ir::eval::Feeds;
use xla_ir::literal::{ArrayData, ArrayLiteral};

/// The module's parameters, the first (`x`) with 16 micro-batches.
fn inputs(module: &xla_ir::Module, micro_batches: i64) -> Vec<Literal> {
    let entry = module.entry_computation();
    entry
        .parameters()
        .iter()
        .enumerate()
        .map(|(k, &p)| {
            let shape = entry.instr(p).shape.as_array().unwrap().clone();
            let mut dims = shape.dims.to_vec();
            if k == 0 {
                dims.insert(0, micro_batches);
            }
            let n: i64 = dims.iter().product();
            let scale = if k == 0 { 1.0 } else { 0.05 };
            let data = (0..n)
                .map(|i| scale * ((i * 7 + k as i64 * 13) as f32 * 0.37).sin())
                .collect();
            Literal::Array(ArrayLiteral {
                shape: xla_ir::ArrayShape::new(shape.element_type, &dims),
                data: ArrayData::F32(data),
            })
        })
        .collect()
}

fn run(stages: usize, ipus: usize) -> ipuxla::device::DeviceRun {
    let sizes = EncoderSizes {
        seq: 64,
        ..EncoderSizes::default()
    };
    let config = compiler::IpuConfig {
        auto_select_ipus: compiler::config::AutoSelectIpus::Count(ipus),
        ..Default::default()
    };
    run_with(8, sizes, stages, 16, &config).unwrap()
}

fn run_with(
    layers: usize,
    sizes: EncoderSizes,
    stages: usize,
    micro_batches: i64,
    config: &compiler::IpuConfig,
) -> anyhow::Result<ipuxla::device::DeviceRun> {
    let module = encoder_stages(layers, sizes, stages).unwrap();
    let args = inputs(&module, micro_batches);
    let lp = ipuxla::device_loop::device_loop_for(&module, micro_batches as u64, &args).unwrap();
    ipuxla::device::run_device_loop_on_ipu_model(
        &module,
        config,
        &compiler::PassOptions::default(),
        &args,
        lp,
        OutfeedMode::All,
        &mut Feeds::default(),
    )
}

#[test]
fn an_8_layer_encoder_in_4_stages_pipelines_16_micro_batches() {
    let one = run(1, 1);
    let four = run(4, 4);
    let spec = serde_json::json!({"rtol": 1e-4, "atol": 1e-5});
    common::check_output(
        "pipelined outputs",
        &four.outputs[0],
        &one.outputs[0],
        &spec,
    );
    let ratio = four.profile.total_cycles as f64 / one.profile.total_cycles as f64;
    println!(
        "per micro-batch: 1 IPU {} cycles, 4-stage pipeline {} cycles, ratio {ratio:.3}",
        one.profile.total_cycles / 16,
        four.profile.total_cycles / 16
    );
    assert!(ratio <= 0.5, "pipelined/unpipelined = {ratio:.3}");
    assert!(four.profile.totals.bytes_over_links > 0);
    // The profile's phases: 3 steps of ramp-up and of ramp-down around 13 steady steps, in
    // which every stage works; the bubble is the IPUs' waiting.
    let report = four.pipeline.as_ref().expect("a pipeline report");
    let steps: Vec<(&str, u64)> = report
        .phases
        .iter()
        .map(|p| (p.name.as_str(), p.steps))
        .collect();
    assert_eq!(
        steps,
        [("ramp-up", 3), ("steady state", 13), ("ramp-down", 3)]
    );
    assert_eq!(report.phases[1].working_steps, vec![13; 4]);
    println!("bubble {:.3}", report.bubble_fraction);
    assert!(report.bubble_fraction > 0.0 && report.bubble_fraction < 0.5);
    assert!(one.pipeline.is_none());
}

#[test]
fn schedules_and_device_mappings_keep_the_outputs() {
    let sizes = EncoderSizes {
        seq: 16,
        d: 64,
        heads: 2,
        ffn: 128,
        ..EncoderSizes::default()
    };
    let config = |schedule: &str, mapping: Vec<usize>| compiler::IpuConfig {
        auto_select_ipus: compiler::config::AutoSelectIpus::Count(4),
        pipelining: compiler::config::PipeliningConfig {
            pipeline_schedule: schedule.into(),
            device_mapping: mapping,
            ..Default::default()
        },
        ..Default::default()
    };
    let grouped = run_with(4, sizes, 4, 8, &config("Grouped", vec![])).unwrap();
    let sequential = run_with(4, sizes, 4, 8, &config("sequential", vec![])).unwrap();
    let mapped = run_with(4, sizes, 4, 8, &config("Grouped", vec![3, 2, 1, 0])).unwrap();
    assert_eq!(sequential.outputs, grouped.outputs);
    assert_eq!(mapped.outputs, grouped.outputs);
    // Stages 1 and 2 share IPU 1 (the seed's device_mapping for stages sharing weights):
    // they run one after the other in each step.
    let shared = run_with(4, sizes, 4, 8, &config("Grouped", vec![0, 1, 1, 2])).unwrap();
    assert_eq!(shared.outputs, grouped.outputs);
    assert!(shared.profile.total_cycles > grouped.profile.total_cycles);
    // One stage at a time: no overlap.
    assert!(
        sequential.profile.total_cycles > 2 * grouped.profile.total_cycles,
        "sequential {} vs grouped {}",
        sequential.profile.total_cycles,
        grouped.profile.total_cycles
    );
    for (cfg, needle) in [
        (
            config("Interleaved", vec![]),
            "Interleaved alternates forward and backward stages",
        ),
        (
            config("Grouped", vec![0, 1]),
            "names 2 IPUs but the entry computation has 4 stages",
        ),
    ] {
        let e = format!("{:#}", run_with(4, sizes, 4, 8, &cfg).unwrap_err());
        assert!(e.contains(needle), "{e}");
    }
}

#[test]
fn the_command_line_pipelines_a_two_stage_module() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pipeline");
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ipuxla-pipeline-{}", std::process::id()));
    let inputs = format!(
        "0={};1={}",
        dir.join("x.npy").display(),
        dir.join("w.npy").display()
    );
    let run = |extra: &[&str]| {
        let hlo = dir.join("two_stages.hlo");
        let mut args = vec![
            "run",
            hlo.to_str().unwrap(),
            "--iterations",
            "3",
            "--inputs",
            &inputs,
            "--outdir",
            out.to_str().unwrap(),
            "--overwrite",
        ];
        args.extend_from_slice(extra);
        common::ipuxla(&args)
    };
    for extra in [
        &["--num-ipus", "2"][..],
        &["--num-ipus", "2", "--pipeline-schedule", "sequential"],
        &["--num-ipus", "2", "--device-mapping", "1,0"],
    ] {
        let o = run(extra);
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success()
                && stdout
                    .contains("[[1, 16, 81, 256], [25, 144, 441, 1024], [81, 400, 1089, 2304]]"),
            "{extra:?}: {stdout}{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    // `w` lives with stage 0 and stage 1 reads it too: copied to IPU 1 once, not every step.
    let profile_path = out.join("profile.json");
    let o = run(&[
        "--num-ipus",
        "2",
        "--profile",
        profile_path.to_str().unwrap(),
    ]);
    assert!(o.status.success());
    let profile: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&profile_path).unwrap()).unwrap();
    let weight_copies = profile["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| {
            let name = s["name"].as_str().unwrap();
            name.starts_with("copy param1") && !name.contains("beside")
        })
        .count();
    assert_eq!(weight_copies, 1, "{profile}");
    let o = run(&[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("stage 1 runs on IPU 1 but the program has 1 IPU"),
        "{err}"
    );
}

/// An element-wise instruction of stage 1 that reads stage 0's value and is fused into its
/// user: it must read the value from stage 1's buffer (filled a step earlier), not from
/// stage 0's tensor, which by then holds the next micro-batch's (each output was the next
/// micro-batch's before the fix).
#[test]
fn a_fused_read_across_a_stage_boundary_gets_its_own_micro_batch() {
    let text =
        std::fs::read_to_string(common::fixture("pipeline/fused_across_stages.hlo")).unwrap();
    let module = xla_ir::parse_module(&text).unwrap();
    let x: Vec<f32> = (0..32).map(|i| i as f32).collect();
    let inputs = [Literal::Array(ArrayLiteral {
        shape: xla_ir::ArrayShape::new(xla_ir::ElementType::F32, &[8, 4]),
        data: ArrayData::F32(x.clone()),
    })];
    let mut config = ipuxla::compiler::IpuConfig::default();
    config.ipu_model.tiles_per_ipu = 4;
    config.auto_select_ipus = ipuxla::compiler::config::AutoSelectIpus::Count(2);
    config.device_loop.iterations_per_loop = Some(8);
    let run = ipuxla::device::run_on_ipu_model(&module, &config, &inputs).unwrap();
    let ArrayData::F32(got) = &run.outputs[0].data else {
        panic!("f32 results")
    };
    let want: Vec<f32> = x.iter().map(|v| -(v * v)).collect();
    assert_eq!(got, &want);
}
