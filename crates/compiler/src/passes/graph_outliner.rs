//! The outlining pass (`graph-outliner`): with `optimizations.enable_graph_outlining` (on by
//! default, as in the seed), repeated regions of the same ops on the same shapes become
//! one function called once per region (`crate::outline`). Its notes name each function,
//! how many calls share it and what each call copies in and out: the code saved and the
//! cycles added.

use super::{Pass, PassContext};
use crate::CompileError;
use xla_ir::Module;

/// The pass.
pub struct GraphOutliner;

impl Pass for GraphOutliner {
    fn name(&self) -> &'static str {
        "graph-outliner"
    }

    fn run(&self, module: &mut Module, cx: &mut PassContext) -> Result<(), CompileError> {
        if !cx.config.optimizations.enable_graph_outlining {
            cx.notes
                .push("optimizations.enable_graph_outlining is off: nothing outlined".into());
            return Ok(());
        }
        let made = crate::outline::outline_module(module).map_err(|reason| CompileError::Pass {
            pass: self.name().into(),
            reason,
        })?;
        if made.is_empty() {
            cx.notes.push("no repeated region found".into());
        }
        cx.notes.extend(made.iter().map(ToString::to_string));
        Ok(())
    }
}
