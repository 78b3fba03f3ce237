//! The seed's scopes over a graph being built: `ipu_shard(k)` places what is built inside
//! on IPU k (`sharding={maximal device=k}`), `pipeline_stage(k)` puts it in pipeline stage k
//! (the `ipu_stage` attribute the compiler's pipelining reads), `outlined_function`
//! builds a function once and calls it (`call`), as `@ipu.outlined_function` does, and
//! `recomputation_checkpoint` marks a value recomputation keeps.

use crate::ops::Builder;
use xla_ir::builder::BuildError;
use xla_ir::{InstrId, Sharding};

/// Runs `build` with everything it creates placed on IPU `ipu` (`ipu.scopes.ipu_shard`).
pub fn ipu_shard<R>(b: &mut Builder<'_>, ipu: i64, build: impl FnOnce(&mut Builder<'_>) -> R) -> R {
    let device = ipu;
    b.with_sharding(Sharding::Maximal { device }, |b| build(b))
}

/// The attribute the compiler reads for a pipeline stage.
pub const PIPELINE_STAGE: &str = "ipu_stage";

/// Runs `build` with everything it creates in pipeline stage `stage`
/// (`keras.ipu.PipelineStage`).
pub fn pipeline_stage<R>(
    b: &mut Builder<'_>,
    stage: usize,
    build: impl FnOnce(&mut Builder<'_>) -> R,
) -> R {
    b.with_frontend_attribute(PIPELINE_STAGE, stage.to_string(), |b| build(b))
}

/// `x` as a recomputation checkpoint (the seed's `recomputation_checkpoint`): the same
/// value, which recomputation keeps rather than computing again (a `custom-call` to
/// `RecomputationCheckpoint`, which the compiler's `recomputation` pass reads).
pub fn recomputation_checkpoint(b: &mut Builder<'_>, x: InstrId) -> Result<InstrId, BuildError> {
    crate::ops::recomputation_checkpoint(b, x)
}

/// An outlined function: `body` built once as computation `name` over parameters shaped
/// like `args`, then called on `args` (`@ipu.outlined_function`); its calls are marked as
/// an outlined function's, so the compiler compiles it once and every call shares it. Call the returned
/// computation again with [`call_outlined`] to reuse it.
pub fn outlined_function(
    b: &mut Builder<'_>,
    name: &str,
    args: &[InstrId],
    body: impl FnOnce(&mut Builder<'_>, &[InstrId]) -> Result<InstrId, BuildError>,
) -> Result<(xla_ir::CompId, InstrId), BuildError> {
    let shapes: Vec<xla_ir::Shape> = args.iter().map(|&a| b.shape(a).clone()).collect();
    let comp = b.sub_computation(name, |f| {
        let params = shapes
            .iter()
            .enumerate()
            .map(|(k, s)| f.parameter(k as u64, s.clone(), &format!("{name}.arg{k}")))
            .collect::<Result<Vec<_>, _>>()?;
        body(f, &params)
    })?;
    let out = b.call_function(args, comp)?;
    Ok((comp, out))
}

/// Another call of an outlined function on `args` (of the same shapes as its first call's).
pub fn call_outlined(
    b: &mut Builder<'_>,
    function: xla_ir::CompId,
    args: &[InstrId],
) -> Result<InstrId, BuildError> {
    b.call_function(args, function)
}
