//! Modules too big for tile memory run out of core: laid out on more (virtual) tiles than
//! the IPU has, whose memory lives in Streaming Memory and is paged onto the physical tiles
//! for the steps that use it ([`runtime::Target::out_of_core`]; the IPU Model charges the
//! paging). The lowering is retried on more virtual tiles until every one fits a tile, as
//! long as spreading the module wider shrinks the busiest tile's share: what does not
//! shrink (an op that runs on one tile) stays out of memory, as it does on an IPU without
//! Streaming Memory (ipu1) or with `ipu_model.streaming_memory` off.

use crate::error::TileOutOfMemory;
use crate::lower::{self, Compiled, DeviceLoop};
use crate::{CompileError, IpuConfig};
use xla_ir::Module;

/// The most virtual tiles per IPU: 2¹⁶ tiles hold ≈42 GB on an ipu2 (within its 112 GB of
/// Streaming Memory per IPU) and keep the lowering's per-tile tables bounded.
const MAX_VIRTUAL_TILES: usize = 1 << 16;

/// Lowers `module` for the config's IPU, out of core if it does not fit tile memory.
pub(crate) fn lower_fitting(
    module: &Module,
    config: &IpuConfig,
    device_loop: Option<&DeviceLoop>,
) -> Result<Compiled, CompileError> {
    let target = config.target()?;
    let mut error = match lower::lower_module(module, config, target.clone(), device_loop) {
        Err(CompileError::OutOfMemory(e)) => e,
        other => return other,
    };
    if target.streaming_memory_bytes_per_ipu == 0 {
        return Err(with_hint(
            error,
            format!(
                "an {} has no Streaming Memory to run the module out of core",
                target.version
            ),
        ));
    }
    if !config.ipu_model.streaming_memory {
        return Err(with_hint(
            error,
            "ipu_model.streaming_memory is off, so the module cannot run out of core".into(),
        ));
    }
    let limit = MAX_VIRTUAL_TILES
        .min((target.streaming_memory_bytes_per_ipu / target.bytes_per_tile) as usize);
    let mut tiles = target.tiles_per_ipu;
    loop {
        let (needed, available) = (error.needed, error.available);
        let factor = needed.div_ceil(available.max(1)).next_power_of_two().max(2);
        let next = tiles.saturating_mul(factor as usize);
        if next > limit {
            return Err(with_hint(
                error,
                format!("out of core it would need more than {limit} virtual tiles per IPU"),
            ));
        }
        match lower::lower_module(
            module,
            config,
            target.clone().out_of_core(next),
            device_loop,
        ) {
            Ok(mut compiled) => {
                compiled.warnings.push(format!(
                    "the module does not fit the tile memory of {} tiles per IPU; it runs out of \
                     core on {next} virtual tiles per IPU, paged through Streaming Memory (the \
                     cycles include the paging)",
                    target.tiles_per_ipu
                ));
                return Ok(compiled);
            }
            Err(CompileError::OutOfMemory(e)) => {
                if e.needed >= needed {
                    return Err(with_hint(
                        e,
                        "spreading the module over more tiles does not shrink this tile's share \
                         (an op that runs on one tile, or a tensor kept whole)"
                            .into(),
                    ));
                }
                error = e;
                tiles = next;
            }
            Err(other) => return Err(other),
        }
    }
}

/// The out-of-memory error with `text` saying why running out of core could not help.
fn with_hint(mut e: Box<TileOutOfMemory>, text: String) -> CompileError {
    e.hint = text;
    CompileError::OutOfMemory(e)
}
