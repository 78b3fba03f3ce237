//! `input_output_alias`: which outputs of the entry computation are new values of which
//! parameters. JAX writes it for donated arguments (`{ {0}: (0, {}, may-alias) }`: output
//! 0 may reuse parameter 0's buffer); a device loop keeps such a parameter resident and
//! feeds each iteration what the previous one wrote.

use crate::{Module, Shape};
use std::fmt;

/// Whether an aliased output may or must share its parameter's buffer (XLA's
/// `may-alias` and `must-alias`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AliasKind {
    /// `may-alias`: the buffer may be reused (donation).
    MayAlias,
    /// `must-alias`: the buffer must be reused.
    MustAlias,
}

/// One entry of `input_output_alias`: result element `output` is the new value of
/// `parameter` at `parameter_index`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OutputAlias {
    /// Shape index into the entry's result (`{0}`: the first tuple element; `{}`: the
    /// whole result).
    pub output: Vec<i64>,
    /// The entry parameter's number.
    pub parameter: i64,
    /// Shape index into that parameter (`{}` for an array parameter).
    pub parameter_index: Vec<i64>,
    /// `may-alias` or `must-alias`.
    pub kind: AliasKind,
}

/// The subshape of `shape` at `index`, if the index exists.
pub fn subshape<'s>(shape: &'s Shape, index: &[i64]) -> Option<&'s Shape> {
    index
        .iter()
        .try_fold(shape, |s, &i| s.as_tuple()?.get(usize::try_from(i).ok()?))
}

/// Checks `module.input_output_alias` against its entry: parameters and indices exist, each
/// output is aliased once, and each pair has one shape (layouts aside). The message names
/// the alias entry.
pub fn check_aliases(module: &Module) -> Result<(), String> {
    let entry = module.entry_computation();
    let result = &entry.root_instr().shape;
    let params = entry.parameter_shapes();
    for (i, a) in module.input_output_alias.iter().enumerate() {
        let here = format!("input_output_alias entry {i} ({a})");
        let out = subshape(result, &a.output).ok_or_else(|| {
            format!(
                "{here}: the result {result} has no element {{{}}}",
                join(&a.output)
            )
        })?;
        let param = usize::try_from(a.parameter)
            .ok()
            .and_then(|p| params.get(p))
            .ok_or_else(|| {
                format!(
                    "{here}: the entry computation has {} parameters",
                    params.len()
                )
            })?;
        let input = subshape(param, &a.parameter_index).ok_or_else(|| {
            format!(
                "{here}: parameter {} ({param}) has no element {{{}}}",
                a.parameter,
                join(&a.parameter_index)
            )
        })?;
        if !out.same_ignoring_layout(input) {
            return Err(format!(
                "{here}: output {{{}}} is {out} but parameter {} {{{}}} is {input}; an aliased pair must have one shape",
                join(&a.output),
                a.parameter,
                join(&a.parameter_index)
            ));
        }
        if let Some(j) = module.input_output_alias[..i]
            .iter()
            .position(|b| b.output == a.output)
        {
            return Err(format!(
                "{here}: output {{{}}} is already aliased by entry {j}",
                join(&a.output)
            ));
        }
    }
    Ok(())
}

fn join(index: &[i64]) -> String {
    index
        .iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

impl fmt::Display for OutputAlias {
    /// `{0}: (0, {}, may-alias)`, as XLA prints an entry.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            AliasKind::MayAlias => "may-alias",
            AliasKind::MustAlias => "must-alias",
        };
        write!(
            f,
            "{{{}}}: ({}, {{{}}}, {kind})",
            join(&self.output),
            self.parameter,
            join(&self.parameter_index)
        )
    }
}

/// The header attribute's value: `{ {0}: (0, {}, may-alias), ... }`.
pub fn aliases_text(aliases: &[OutputAlias]) -> String {
    let entries: Vec<String> = aliases.iter().map(|a| a.to_string()).collect();
    format!("{{ {} }}", entries.join(", "))
}

#[cfg(test)]
mod tests {
    use crate::parse_module;

    const STEP: &str = "HloModule step, input_output_alias={ {0}: (1, {}, may-alias), {1}: (0, {}, must-alias) }, entry_computation_layout={(f32[2]{0}, s32[])->(s32[], f32[2]{0}, f32[2]{0})}

ENTRY main {
  w = f32[2]{0} parameter(0)
  n = s32[] parameter(1)
  one = s32[] constant(1)
  next = s32[] add(n, one)
  twice = f32[2]{0} add(w, w)
  ROOT out = (s32[], f32[2]{0}, f32[2]{0}) tuple(next, twice, w)
}
";

    #[test]
    fn aliases_parse_print_and_parse_back() {
        let m = parse_module(STEP).expect("parses");
        assert_eq!(m.input_output_alias.len(), 2);
        assert_eq!(m.input_output_alias[0].output, vec![0]);
        assert_eq!(m.input_output_alias[0].parameter, 1);
        let text = m.to_string();
        assert!(
            text.starts_with("HloModule step, input_output_alias={ {0}: (1, {}, may-alias), {1}: (0, {}, must-alias) }, entry_computation_layout="),
            "{text}"
        );
        assert_eq!(parse_module(&text).expect("parses back"), m);
    }

    #[test]
    fn bad_aliases_are_named() {
        let cases = [
            (
                "{0}: (0, {}, may-alias)",
                "output {0} is s32[] but parameter 0 {} is f32[2]",
            ),
            (
                "{0}: (5, {}, may-alias)",
                "the entry computation has 2 parameters",
            ),
            ("{3}: (0, {}, may-alias)", "has no element {3}"),
            (
                "{1}: (0, {}, may-alias), {1}: (0, {}, may-alias)",
                "output {1} is already aliased by entry 0",
            ),
            (
                "{1}: (0, {}, maybe)",
                "expected 'may-alias' or 'must-alias'",
            ),
        ];
        for (aliases, needle) in cases {
            let text = STEP.replace(
                "{ {0}: (1, {}, may-alias), {1}: (0, {}, must-alias) }",
                &format!("{{ {aliases} }}"),
            );
            let err = parse_module(&text).expect_err(aliases).to_string();
            assert!(err.contains(needle), "{aliases}: {err}");
            assert!(
                err.contains("1:"),
                "{aliases}: the error has a position: {err}"
            );
        }
    }
}
