//! Training pipelines built with the library API (`ipuxla::pipeline`): a 4-stage MLP,
//! gradients accumulated over 8 micro-batches, gives after one pipeline run the weights of
//! one unpipelined step on the accumulated batch, under all three schedules; Interleaved
//! needs less memory than Grouped and Grouped fewer cycles than Interleaved.

mod common;

use ipuxla::pipeline::mlp::mlp_stages;
use ipuxla::pipeline::{
    Optimizer, PipelineSchedule, TrainingPipeline, evaluate_training_pipeline,
    run_training_pipeline_on_ipu_model,
};
use xla_ir::Literal;
use xla_ir::literal::{ArrayData, ArrayLiteral};

const WIDTHS: [i64; 5] = [16, 32, 32, 32, 8];
const BATCH: i64 = 4;
const ACCUMULATION: i64 = 8;

fn array(dims: &[i64], seed: i64, scale: f32) -> Literal {
    let n: i64 = dims.iter().product();
    let data = (0..n)
        .map(|i| scale * ((i * 7 + seed * 13) as f32 * 0.37).sin())
        .collect();
    Literal::Array(ArrayLiteral {
        shape: xla_ir::ArrayShape::new(xla_ir::ElementType::F32, dims),
        data: ArrayData::F32(data),
    })
}

fn weights() -> Vec<Literal> {
    WIDTHS
        .windows(2)
        .enumerate()
        .map(|(s, w)| array(&[w[0], w[1]], s as i64, 0.3))
        .collect()
}

/// `x` and `y` as `micro_batches` micro-batches of `rows` rows.
fn data(micro_batches: i64, rows: i64) -> Vec<Literal> {
    let reshape = |l: Literal, dims: &[i64]| match l {
        Literal::Array(a) => Literal::Array(ArrayLiteral {
            shape: xla_ir::ArrayShape::new(a.shape.element_type, dims),
            data: a.data,
        }),
        other => other,
    };
    let x = array(&[ACCUMULATION * BATCH, WIDTHS[0]], 11, 1.0);
    let y = array(&[ACCUMULATION * BATCH, WIDTHS[4]], 12, 1.0);
    vec![
        reshape(x, &[micro_batches, rows, WIDTHS[0]]),
        reshape(y, &[micro_batches, rows, WIDTHS[4]]),
    ]
}

fn pipeline(schedule: PipelineSchedule, rows: i64, accumulation: u64) -> TrainingPipeline {
    let mut p = TrainingPipeline::new(
        mlp_stages(&WIDTHS, rows).unwrap(),
        Optimizer::Sgd {
            learning_rate: 0.01,
        },
        accumulation,
    );
    p.schedule = schedule;
    p
}

fn four_ipus() -> compiler::IpuConfig {
    compiler::IpuConfig {
        auto_select_ipus: compiler::config::AutoSelectIpus::Count(4),
        ..Default::default()
    }
}

fn peak_tile_bytes(p: &runtime::Profile) -> u64 {
    p.tiles.iter().map(|t| t.bytes_used).max().unwrap_or(0)
}

#[test]
fn a_4_stage_mlp_pipeline_trains_as_one_step_on_the_accumulated_batch() {
    // One unpipelined step: the whole accumulated batch as one micro-batch.
    let whole = pipeline(PipelineSchedule::Sequential, ACCUMULATION * BATCH, 1);
    let expected =
        evaluate_training_pipeline(&whole, &weights(), &data(1, ACCUMULATION * BATCH)).unwrap();
    let spec = serde_json::json!({"rtol": 1e-4, "atol": 1e-5});
    let mut profiles = Vec::new();
    let mut bubbles = Vec::new();
    for schedule in [
        PipelineSchedule::Grouped,
        PipelineSchedule::Interleaved,
        PipelineSchedule::Sequential,
    ] {
        let p = pipeline(schedule, BATCH, ACCUMULATION as u64);
        let micro = data(ACCUMULATION, BATCH);
        let reference = evaluate_training_pipeline(&p, &weights(), &micro).unwrap();
        let run = run_training_pipeline_on_ipu_model(&p, &four_ipus(), &weights(), &micro).unwrap();
        // Outputs: the loss of each micro-batch, then the four trained weights.
        assert_eq!(run.outputs.len(), 5);
        assert_eq!(run.outputs[0].shape.dims.as_slice(), &[ACCUMULATION]);
        common::check_output(
            &format!("{schedule:?} losses"),
            &run.outputs[0],
            &reference[0],
            &spec,
        );
        for k in 0..4 {
            let what = format!("{schedule:?} weight {k}");
            common::check_output(&what, &run.outputs[1 + k], &reference[1 + k], &spec);
            common::check_output(&what, &run.outputs[1 + k], &expected[1 + k], &spec);
        }
        assert!(run.profile.totals.bytes_over_links > 0);
        // The profile's pipeline phases: their cycles are the run's, less streaming the
        // weights in and out.
        let report = run.pipeline.as_ref().expect("a pipeline report");
        let names: Vec<&str> = report.phases.iter().map(|p| p.name.as_str()).collect();
        let phase_cycles: u64 = report.phases.iter().map(|p| p.cycles).sum();
        assert!(phase_cycles <= run.profile.total_cycles);
        assert!(
            phase_cycles * 10 > run.profile.total_cycles * 8,
            "{phase_cycles}"
        );
        assert!(report.bubble_fraction > 0.0 && report.bubble_fraction < 1.0);
        match schedule {
            PipelineSchedule::Sequential => assert_eq!(
                names,
                [
                    "accumulators zeroed",
                    "one stage at a time",
                    "weight update"
                ]
            ),
            _ => assert_eq!(
                names,
                [
                    "accumulators zeroed",
                    "ramp-up",
                    "steady state",
                    "ramp-down",
                    "weight update"
                ]
            ),
        }
        bubbles.push(report.bubble_fraction);
        profiles.push((schedule, run.profile));
    }
    let (grouped, interleaved, sequential) = (&profiles[0].1, &profiles[1].1, &profiles[2].1);
    println!(
        "cycles grouped {} interleaved {} sequential {}; peak tile bytes grouped {} interleaved {} sequential {}",
        grouped.total_cycles,
        interleaved.total_cycles,
        sequential.total_cycles,
        peak_tile_bytes(grouped),
        peak_tile_bytes(interleaved),
        peak_tile_bytes(sequential)
    );
    // The seed: Interleaved stashes fewer activations (less memory), Grouped keeps the
    // IPUs busier (fewer cycles).
    assert!(peak_tile_bytes(interleaved) < peak_tile_bytes(grouped));
    assert!(grouped.total_cycles < interleaved.total_cycles);
    assert!(grouped.total_cycles < sequential.total_cycles);
    println!(
        "bubble grouped {:.3} interleaved {:.3} sequential {:.3}",
        bubbles[0], bubbles[1], bubbles[2]
    );
    // One stage at a time leaves three of four IPUs waiting.
    assert!(bubbles[0] < bubbles[2] && bubbles[2] > 0.7, "{bubbles:?}");
}

fn error_of(p: &TrainingPipeline, config: &compiler::IpuConfig) -> String {
    let micro = data(ACCUMULATION, BATCH);
    format!(
        "{:#}",
        run_training_pipeline_on_ipu_model(p, config, &weights(), &micro).unwrap_err()
    )
}

#[test]
fn bad_pipelines_are_refused_naming_the_stage() {
    let mut p = pipeline(PipelineSchedule::Grouped, BATCH, 2);
    let e = error_of(&p, &four_ipus());
    assert!(
        e.contains("gradient_accumulation_count 2 is less than the 4 stages"),
        "{e}"
    );
    p.gradient_accumulation_count = 8;
    p.device_mapping = vec![0, 1, 2, 5];
    let e = error_of(&p, &four_ipus());
    assert!(
        e.contains("stage 3 runs on IPU 5 but the system has 4 IPUs"),
        "{e}"
    );
    p.device_mapping.clear();
    // Stage 2 built for other widths: its inputs are not stage 1's outputs.
    p.stages[2] = mlp_stages(&[16, 32, 24, 32, 8], BATCH).unwrap().remove(2);
    let e = error_of(&p, &four_ipus());
    assert!(
        e.contains("stage 2's forward computation: its inputs"),
        "{e}"
    );
    let mut p = pipeline(PipelineSchedule::Grouped, BATCH, 8);
    // Stage 1 claims gradients for both inputs (the labels too): stage 0's backward pass
    // does not take them.
    p.stages[1].gradients = 2;
    let e = error_of(&p, &four_ipus());
    assert!(
        e.contains("stage 0's backward computation: it takes"),
        "{e}"
    );
}

#[test]
fn repeat_count_runs_the_pipeline_again_on_the_next_micro_batches() {
    let mut p = pipeline(PipelineSchedule::Grouped, BATCH, 4);
    p.repeat_count = 2;
    let micro = data(ACCUMULATION, BATCH);
    let reference = evaluate_training_pipeline(&p, &weights(), &micro).unwrap();
    let run = run_training_pipeline_on_ipu_model(&p, &four_ipus(), &weights(), &micro).unwrap();
    let spec = serde_json::json!({"rtol": 1e-4, "atol": 1e-5});
    for (k, (got, want)) in run.outputs.iter().zip(&reference).enumerate() {
        common::check_output(&format!("output {k}"), got, want, &spec);
    }
    // Two updates: not the weights of one run over all eight micro-batches.
    let once = pipeline(PipelineSchedule::Grouped, BATCH, 8);
    let single = evaluate_training_pipeline(&once, &weights(), &micro).unwrap();
    assert_ne!(single[1], reference[1]);
}

#[test]
fn stages_may_share_an_ipu() {
    // The seed's example mapping: the first and last stages on IPU 0, the middle two on 1.
    let mut p = pipeline(PipelineSchedule::Grouped, BATCH, 8);
    p.device_mapping = vec![0, 1, 1, 0];
    let micro = data(ACCUMULATION, BATCH);
    let reference = evaluate_training_pipeline(&p, &weights(), &micro).unwrap();
    let two = compiler::IpuConfig {
        auto_select_ipus: compiler::config::AutoSelectIpus::Count(2),
        ..Default::default()
    };
    let run = run_training_pipeline_on_ipu_model(&p, &two, &weights(), &micro).unwrap();
    let spec = serde_json::json!({"rtol": 1e-4, "atol": 1e-5});
    for (k, (got, want)) in run.outputs.iter().zip(&reference).enumerate() {
        common::check_output(&format!("output {k}"), got, want, &spec);
    }
    let report = run.pipeline.unwrap();
    assert_eq!(report.stage_ipus, vec![0, 1, 1, 0]);
}
