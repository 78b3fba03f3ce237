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
