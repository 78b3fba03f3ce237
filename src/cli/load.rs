//! Reading an HLO file into a verified module, with errors as `FILE:LINE:COL: message`.

use anyhow::{Context, anyhow};
use std::path::Path;
use xla_ir::Module;

/// Reads, parses and verifies the HLO text module at `path`.
pub fn load_module(path: &Path) -> anyhow::Result<Module> {
    let bytes =
        std::fs::read(path).with_context(|| format!("{}: cannot read file", path.display()))?;
    let module =
        xla_ir::parse_module_bytes(&bytes).map_err(|e| anyhow!("{}:{e}", path.display()))?;
    xla_ir::verify(&module).map_err(|e| match e.location {
        Some(loc) => anyhow!("{}:{}:{}: {e}", path.display(), loc.line, loc.column),
        None => anyhow!("{}: {e}", path.display()),
    })?;
    Ok(module)
}

/// The IpuConfig in `path` (JSON), or the defaults.
pub fn load_config(path: Option<&Path>) -> anyhow::Result<compiler::IpuConfig> {
    match path {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("{}: cannot read the config", path.display()))?;
            compiler::IpuConfig::from_json(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
        }
        None => Ok(compiler::IpuConfig::default()),
    }
}

/// A file `ipuxla compile` wrote, as `run` reads it (beside the module it holds).
pub struct StoredExecutable {
    /// The config it was compiled for.
    pub config: compiler::IpuConfig,
    /// The pass it stopped after, if any.
    pub stop_after: Option<String>,
    /// The executable, or why this build cannot load it (then the module is compiled again).
    pub compiled: Result<compiler::Compiled, compiler::stored::StoreError>,
    /// Host seconds reading and decoding the file.
    pub read_seconds: f64,
}

/// The module and stored executable in `path`, when the file is one (it starts with
/// ipuxla's header); `None` for any other file. A stored executable whose source cannot be
/// read is an error.
pub fn load_stored(path: &Path) -> anyhow::Result<Option<(Module, StoredExecutable)>> {
    use compiler::stored;
    use std::io::Read;
    let mut magic = [0u8; stored::MAGIC.len()];
    let is_stored = std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok_and(|()| &magic == stored::MAGIC);
    if !is_stored {
        return Ok(None);
    }
    let start = std::time::Instant::now();
    let bytes =
        std::fs::read(path).with_context(|| format!("{}: cannot read file", path.display()))?;
    let damaged = |e: stored::StoreError| {
        anyhow!(
            "{}: a stored executable that cannot be read: {e} (compile the module again with `ipuxla compile`)",
            path.display()
        )
    };
    let file = stored::parse(&bytes).map_err(damaged)?;
    let source = file.source().map_err(damaged)?;
    let module = source.module().map_err(damaged)?;
    let config = source.config().map_err(damaged)?;
    let compiled = file.compiled();
    Ok(Some((
        module,
        StoredExecutable {
            config,
            stop_after: source.stop_after.clone(),
            compiled,
            read_seconds: start.elapsed().as_secs_f64(),
        },
    )))
}
