//! How a program marks code to share and values to keep. A `call` says it is an outlined
//! function with Graphcore's backend config
//! `{"callConfig":{"type":"Function",...}}` (`CallConfig::Function`, with
//! `keep_input_layouts`), which the seed's `outlined_function` and ipuxla's graph outliner
//! put on their calls. A compiler compiles such a callee once and shares it between calls;
//! a plain `call` (as JAX writes them) it may inline.

use crate::Instruction;

/// Custom-call target of a recomputation checkpoint (the seed's
/// `recomputation_checkpoint`): the identity, whose value recomputation keeps rather than
/// computing again.
pub const CHECKPOINT_TARGET: &str = "RecomputationCheckpoint";

/// The backend config of an outlined function's call (inputs keep the layout of the first
/// call's arguments).
pub const FUNCTION_CALL_CONFIG: &str =
    r#"{"callConfig":{"type":"Function","functionConfig":{"keepInputLayouts":true}}}"#;

/// Whether `instr`'s backend config marks it as an outlined function's call.
pub fn is_function_call(instr: &Instruction) -> bool {
    let Some(config) = instr.backend_config.as_deref() else {
        return false;
    };
    serde_json::from_str::<serde_json::Value>(config)
        .ok()
        .and_then(|v| {
            v.get("callConfig")?
                .get("type")?
                .as_str()
                .map(|t| t == "Function")
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Op, Shape};

    #[test]
    fn only_a_function_call_config_marks_a_function() {
        let mut call = Instruction::new(
            "c",
            Op::Call {
                to_apply: crate::CompId(0),
            },
            &[],
            Shape::Tuple(vec![]),
        );
        assert!(!is_function_call(&call));
        call.backend_config = Some(FUNCTION_CALL_CONFIG.into());
        assert!(is_function_call(&call));
        call.backend_config = Some(r#"{"callConfig":{"type":"Pipeline"}}"#.into());
        assert!(!is_function_call(&call));
        call.backend_config = Some("not json".into());
        assert!(!is_function_call(&call));
    }
}
