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
    let module = encoder_stages(8, sizes, stages).unwrap();
    let args = inputs(&module, 16);
    let lp = ipuxla::device_loop::device_loop_for(&module, 16, &args).unwrap();
    let config = compiler::IpuConfig {
        auto_select_ipus: compiler::config::AutoSelectIpus::Count(ipus),
        ..Default::default()
    };
    ipuxla::device::run_device_loop_on_ipu_model(
        &module,
        &config,
        &compiler::PassOptions::default(),
        &args,
        lp,
        OutfeedMode::All,
        &mut Feeds::default(),
    )
    .unwrap()
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
}
