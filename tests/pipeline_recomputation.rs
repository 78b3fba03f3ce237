//! Recomputation in training pipelines (`allow_recompute` with the seed's
//! `RecomputationMode`s): without it every stage stashes the forward values its backward
//! pass reads; with it every stage but the last stashes its inputs and recomputes. The
//! 4-stage MLP loss module (`fixtures/training-pipeline`) trains to the same weights bit
//! for bit in every mode, with a lower peak tile and more cycles when recomputing, and
//! the seed's support matrix refuses the pairs it does not support.

mod common;
use common::fixture;

use ipuxla::compiler::IpuConfig;
use ipuxla::compiler::config::{AutoSelectIpus, PipelineSchedule, RecomputationMode};
use ipuxla::frontend::npy::read_npy;
use ipuxla::pipeline::loss::pipeline_from_loss;
use ipuxla::pipeline::run_training_pipeline_on_ipu_model;
use xla_ir::Literal;

/// What a run gives: the outputs' bytes, the cycles and the peak tile bytes.
type Outcome = (Vec<Vec<u8>>, u64, u64);

fn train(
    schedule: PipelineSchedule,
    allow_recompute: bool,
    mode: RecomputationMode,
) -> Result<Outcome, String> {
    train_text(
        &std::fs::read_to_string(fixture("training-pipeline/mlp_loss_4stages.hlo")).unwrap(),
        schedule,
        allow_recompute,
        mode,
    )
}

fn train_text(
    text: &str,
    schedule: PipelineSchedule,
    allow_recompute: bool,
    mode: RecomputationMode,
) -> Result<Outcome, String> {
    let module = xla_ir::parse_module(text).unwrap();
    let read = |n: &str| {
        Literal::Array(
            read_npy(std::path::Path::new(&fixture(&format!(
                "training-pipeline/{n}.npy"
            ))))
            .unwrap(),
        )
    };
    let trained = [true, true, true, true, false, false];
    let mut lp = pipeline_from_loss(&module, &trained, 0.05, 8, 2).unwrap();
    lp.pipeline.schedule = schedule;
    lp.pipeline.recomputation_mode = mode;
    let config = IpuConfig {
        auto_select_ipus: AutoSelectIpus::Count(4),
        allow_recompute,
        ..IpuConfig::default()
    };
    let weights: Vec<Literal> = ["w0", "w1", "w2", "w3"].iter().map(|n| read(n)).collect();
    let batches = [read("x"), read("y")];
    let run = run_training_pipeline_on_ipu_model(&lp.pipeline, &config, &weights, &batches)
        .map_err(|e| format!("{e:#}"))?;
    let bytes = run
        .outputs
        .iter()
        .map(|o| ipuxla::compiler::device_data::to_device(&o.data))
        .collect();
    let peak = run.profile.peak_tile().map_or(0, |t| t.bytes_used);
    Ok((bytes, run.profile.total_cycles, peak))
}

#[test]
fn recomputing_stages_trains_the_same_weights_in_less_memory_for_more_cycles() {
    use RecomputationMode::*;
    let kept = train(PipelineSchedule::Grouped, false, Auto).unwrap();
    let then = train(PipelineSchedule::Grouped, true, RecomputeThenBackpropagate).unwrap();
    let interleaved = train(
        PipelineSchedule::Grouped,
        true,
        RecomputeAndBackpropagateInterleaved,
    )
    .unwrap();
    let auto = train(PipelineSchedule::Grouped, true, Auto).unwrap();
    println!(
        "Grouped: stashing activations {} cycles, peak {} B; RecomputeThenBackpropagate {} cycles, peak {} B; RecomputeAndBackpropagateInterleaved {} cycles, peak {} B",
        kept.1, kept.2, then.1, then.2, interleaved.1, interleaved.2
    );
    assert!(
        then.0 == kept.0 && interleaved.0 == kept.0,
        "the same weights and losses"
    );
    assert!(then.2 < kept.2, "peak {} vs {}", then.2, kept.2);
    assert!(
        interleaved.2 < then.2,
        "peak {} vs {}",
        interleaved.2,
        then.2
    );
    assert!(
        then.1 > kept.1 && interleaved.1 > kept.1,
        "recomputing costs cycles"
    );
    assert_eq!(auto, then, "Auto is RecomputeThenBackpropagate for Grouped");
    // Sequential: Auto is the interleaved mode.
    let sequential = train(
        PipelineSchedule::Sequential,
        true,
        RecomputeAndBackpropagateInterleaved,
    )
    .unwrap();
    assert_eq!(
        train(PipelineSchedule::Sequential, true, Auto).unwrap(),
        sequential
    );
    assert_eq!(sequential.0, kept.0);
}

#[test]
fn the_seeds_support_matrix_and_a_mode_without_recomputation_are_refused() {
    use RecomputationMode::*;
    let err = train(
        PipelineSchedule::Sequential,
        true,
        RecomputeThenBackpropagate,
    )
    .unwrap_err();
    assert!(
        err.contains("RecomputeThenBackpropagate is not supported with the Sequential schedule"),
        "{err}"
    );
    let err = train(
        PipelineSchedule::Interleaved,
        true,
        RecomputeAndBackpropagateInterleaved,
    )
    .unwrap_err();
    assert!(
        err.contains("not supported with the Interleaved schedule"),
        "{err}"
    );
    let err = train(PipelineSchedule::Grouped, false, RecomputeThenBackpropagate).unwrap_err();
    assert!(err.contains("needs allow_recompute"), "{err}");
    // Interleaved schedule with its default mode works and matches.
    let kept = train(PipelineSchedule::Grouped, false, Auto).unwrap();
    let interleaved = train(PipelineSchedule::Interleaved, true, Auto).unwrap();
    assert_eq!(interleaved.0, kept.0);
}

/// A recomputation checkpoint on stage 1's matrix product: with the interleaved mode the
/// stage stashes it beside its inputs and recomputes only what follows it (fewer cycles,
/// a little more memory); with RecomputeThenBackpropagate it has no effect, as the seed
/// says. The weights are the same bit for bit.
#[test]
fn a_checkpoint_in_a_stage_is_stashed_instead_of_recomputed() {
    use RecomputationMode::*;
    let plain = std::fs::read_to_string(fixture("training-pipeline/mlp_loss_4stages.hlo")).unwrap();
    let old = "h1 = f32[4,32] maximum(z1, zeros)";
    assert!(plain.contains(old));
    let checkpointed = plain.replace(
        old,
        "z1c = f32[4,32] custom-call(z1), custom_call_target=\"RecomputationCheckpoint\", frontend_attributes={ipu_stage=\"1\"}\n  h1 = f32[4,32] maximum(z1c, zeros)",
    );
    let run = |text: &str, mode| train_text(text, PipelineSchedule::Grouped, true, mode).unwrap();
    let kept = train(PipelineSchedule::Grouped, false, Auto).unwrap();
    let without = run(&plain, RecomputeAndBackpropagateInterleaved);
    let with = run(&checkpointed, RecomputeAndBackpropagateInterleaved);
    println!(
        "interleaved recomputation: {} cycles, peak {} B; with the checkpoint {} cycles, peak {} B",
        without.1, without.2, with.1, with.2
    );
    assert_eq!(with.0, kept.0, "the same weights and losses");
    assert!(
        with.1 < without.1,
        "the product is not recomputed: {} vs {}",
        with.1,
        without.1
    );
    assert_eq!(
        run(&checkpointed, RecomputeThenBackpropagate).1,
        run(&plain, RecomputeThenBackpropagate).1,
        "no effect with RecomputeThenBackpropagate"
    );
}
