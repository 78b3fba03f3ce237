//! The executable cache (`executable_cache_path` in the IpuConfig, `--executable-cache-dir`
//! on the command line): a module (or training pipeline) compiled once for a config is
//! written to `DIR/KEY.ipux` ([`compiler::stored`]) and later loads read it instead of
//! compiling. The key covers the module's text (or the pipeline's), the config (and so the
//! target), the pass options, the device loop and ipuxla's version. An entry that is truncated, corrupt, or written by
//! another build is never loaded: it is reported as a warning, compiled again and
//! replaced.

use anyhow::Context;
use compiler::stored::{self, Source};
use compiler::training_pipeline::TrainingPipeline;
use compiler::{Compiled, DeviceLoop, IpuConfig, PassOptions};
use std::path::{Path, PathBuf};
use xla_ir::Module;

/// An executable, and where it came from.
pub struct Obtained {
    /// The executable, its host streams and the compiler's warnings (with the cache's).
    pub compiled: Compiled,
    /// The stored file it was read from; `None`: compiled now.
    pub read_from: Option<PathBuf>,
}

/// Compiles `module` for `config` (as a device loop), through the executable cache when the
/// config names one.
pub fn compile(
    module: &Module,
    config: &IpuConfig,
    options: &PassOptions,
    device_loop: Option<&DeviceLoop>,
) -> anyhow::Result<Obtained> {
    let source = || Source::new(module, config, options, device_loop);
    // A cached executable would skip the passes, and with them the dumps asked for.
    let may_read = options.dump_to.is_none();
    through_cache(config, source, may_read, || {
        Ok(match device_loop {
            None => compiler::compile_with_options(module, config, options)?,
            Some(lp) => compiler::compile_device_loop(module, config, options, lp)?,
        })
    })
}

/// Compiles the training pipeline `pipeline` for `config`, through the executable cache
/// when the config names one.
pub fn compile_pipeline(
    pipeline: &TrainingPipeline,
    config: &IpuConfig,
) -> anyhow::Result<Obtained> {
    through_cache(
        config,
        || Source::of_pipeline(pipeline, config),
        true,
        || {
            Ok(compiler::training_pipeline::compile_training_pipeline(
                pipeline, config,
            )?)
        },
    )
}

/// `compile()`'s executable, read from the cache entry of `source()` when there is a good
/// one (and `may_read`), else compiled and stored there.
fn through_cache(
    config: &IpuConfig,
    source: impl FnOnce() -> Source,
    may_read: bool,
    compile: impl FnOnce() -> anyhow::Result<Compiled>,
) -> anyhow::Result<Obtained> {
    if config.executable_cache_path.is_empty() {
        return Ok(Obtained {
            compiled: compile()?,
            read_from: None,
        });
    }
    let dir = Path::new(&config.executable_cache_path);
    std::fs::create_dir_all(dir).with_context(|| {
        format!(
            "executable_cache_path {}: cannot create the directory",
            dir.display()
        )
    })?;
    let source = source();
    let path = dir.join(format!("{}.ipux", source.key()));
    let mut warnings = Vec::new();
    if may_read {
        match read(&path, &source) {
            Ok(Some(compiled)) => {
                return Ok(Obtained {
                    compiled,
                    read_from: Some(path),
                });
            }
            Ok(None) => {}
            Err(why) => warnings.push(format!(
                "executable cache: {}: {why}; compiling again",
                path.display()
            )),
        }
    }
    crate::progress::phase("compiling (passes, lowering)");
    let mut compiled = compile()?;
    if let Err(e) = stored::write(&path, &source, &compiled) {
        warnings.push(format!(
            "executable cache: {e}; the executable is not cached"
        ));
    }
    compiled.warnings.splice(0..0, warnings);
    Ok(Obtained {
        compiled,
        read_from: None,
    })
}

/// The executable `path` holds for `source`, `None` when there is no such file, or why it
/// cannot be used.
fn read(path: &Path, source: &Source) -> Result<Option<Compiled>, String> {
    crate::progress::phase("reading the cached executable");
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read it: {e}")),
    };
    let file = stored::parse(&bytes).map_err(|e| e.to_string())?;
    // The key is a hash: the stored source must be this one.
    if file.source().map_err(|e| e.to_string())? != *source {
        return Err("it was compiled from another module or config (a key collision)".into());
    }
    file.compiled().map(Some).map_err(|e| e.to_string())
}
