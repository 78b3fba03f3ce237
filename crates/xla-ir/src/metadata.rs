//! Annotations that never change values but must survive a round trip: `metadata={...}`,
//! `frontend_attributes={...}`, and the module's debug tables (`FileNames`, `StackFrames`, ...).

use std::collections::BTreeMap;
use std::fmt;

/// Escapes a string for HLO text (inside double quotes).
pub fn escape_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out
}

/// `metadata={op_type="..." op_name="..." source_file="..." source_line=N stack_frame_id=N}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Metadata {
    /// The framework op type (`Add`, `MatMul`).
    pub op_type: Option<String>,
    /// The framework op name (`jit(f)/add`).
    pub op_name: Option<String>,
    /// Source file of the framework op.
    pub source_file: Option<String>,
    /// First source line.
    pub source_line: Option<i64>,
    /// Last source line.
    pub source_end_line: Option<i64>,
    /// First source column.
    pub source_column: Option<i64>,
    /// Last source column.
    pub source_end_column: Option<i64>,
    /// A name shared by deduplicated instructions.
    pub deduplicated_name: Option<String>,
    /// Name used by the scheduler.
    pub scheduling_name: Option<String>,
    /// Entry of the module's `StackFrames` table.
    pub stack_frame_id: Option<i64>,
    /// Any other field, kept verbatim (`key`, value text as written).
    pub other: Vec<(String, String)>,
}

impl Metadata {
    /// Metadata with only an op name.
    pub fn op_name(name: impl Into<String>) -> Metadata {
        Metadata {
            op_name: Some(name.into()),
            ..Metadata::default()
        }
    }

    /// True when no field is set.
    pub fn is_empty(&self) -> bool {
        *self == Metadata::default()
    }
}

impl fmt::Display for Metadata {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        let mut text = |key: &str, v: &Option<String>| {
            if let Some(v) = v {
                parts.push(format!("{key}=\"{}\"", escape_string(v)));
            }
        };
        text("op_type", &self.op_type);
        text("op_name", &self.op_name);
        text("source_file", &self.source_file);
        let mut number = |key: &str, v: Option<i64>| {
            if let Some(v) = v {
                parts.push(format!("{key}={v}"));
            }
        };
        number("source_line", self.source_line);
        number("source_end_line", self.source_end_line);
        number("source_column", self.source_column);
        number("source_end_column", self.source_end_column);
        if let Some(v) = &self.deduplicated_name {
            parts.push(format!("deduplicated_name=\"{}\"", escape_string(v)));
        }
        if let Some(v) = &self.scheduling_name {
            parts.push(format!("scheduling_name=\"{}\"", escape_string(v)));
        }
        if let Some(v) = self.stack_frame_id {
            parts.push(format!("stack_frame_id={v}"));
        }
        for (k, v) in &self.other {
            parts.push(format!("{k}={v}"));
        }
        write!(f, "{{{}}}", parts.join(" "))
    }
}

/// `frontend_attributes={key="value",...}`: string attributes set by frontends
/// (e.g. by `scopes.frontend_attribute`), printed sorted by key.
pub type FrontendAttributes = BTreeMap<String, String>;

/// Prints frontend attributes as HLO text.
pub fn frontend_attributes_text(attrs: &FrontendAttributes) -> String {
    let parts: Vec<String> = attrs
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape_string(v)))
        .collect();
    format!("{{{}}}", parts.join(","))
}

/// One entry of the `FileLocations` table.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct FileLocation {
    /// Entry of `FileNames`.
    pub file_name_id: i64,
    /// Entry of `FunctionNames`.
    pub function_name_id: i64,
    /// First line.
    pub line: i64,
    /// Last line.
    pub end_line: i64,
    /// First column.
    pub column: i64,
    /// Last column.
    pub end_column: i64,
}

/// One entry of the `StackFrames` table.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct StackFrame {
    /// Entry of `FileLocations`.
    pub file_location_id: i64,
    /// The calling frame (0 for none).
    pub parent_frame_id: i64,
}

/// The debug tables XLA prints between the module header and the first computation;
/// `metadata={stack_frame_id=N}` points into them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct DebugTables {
    /// `FileNames`: id and file name.
    pub file_names: Vec<(i64, String)>,
    /// `FunctionNames`: id and function name.
    pub function_names: Vec<(i64, String)>,
    /// `FileLocations`: id and location.
    pub file_locations: Vec<(i64, FileLocation)>,
    /// `StackFrames`: id and frame.
    pub stack_frames: Vec<(i64, StackFrame)>,
}

impl DebugTables {
    /// True when no table has an entry.
    pub fn is_empty(&self) -> bool {
        self.file_names.is_empty()
            && self.function_names.is_empty()
            && self.file_locations.is_empty()
            && self.stack_frames.is_empty()
    }

    /// The source location (file, function, line) a stack frame points at, if known.
    pub fn frame_location(&self, frame_id: i64) -> Option<(&str, &str, i64)> {
        let frame = &self.stack_frames.iter().find(|(id, _)| *id == frame_id)?.1;
        let loc = &self
            .file_locations
            .iter()
            .find(|(id, _)| *id == frame.file_location_id)?
            .1;
        let file = &self
            .file_names
            .iter()
            .find(|(id, _)| *id == loc.file_name_id)?
            .1;
        let function = &self
            .function_names
            .iter()
            .find(|(id, _)| *id == loc.function_name_id)?
            .1;
        Some((file, function, loc.line))
    }
}

impl fmt::Display for DebugTables {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.file_names.is_empty() {
            writeln!(f, "FileNames")?;
            for (id, name) in &self.file_names {
                writeln!(f, "{id} \"{}\"", escape_string(name))?;
            }
            writeln!(f)?;
        }
        if !self.function_names.is_empty() {
            writeln!(f, "FunctionNames")?;
            for (id, name) in &self.function_names {
                writeln!(f, "{id} \"{}\"", escape_string(name))?;
            }
            writeln!(f)?;
        }
        if !self.file_locations.is_empty() {
            writeln!(f, "FileLocations")?;
            for (id, l) in &self.file_locations {
                writeln!(
                    f,
                    "{id} {{file_name_id={} function_name_id={} line={} end_line={} column={} end_column={}}}",
                    l.file_name_id, l.function_name_id, l.line, l.end_line, l.column, l.end_column
                )?;
            }
            writeln!(f)?;
        }
        if !self.stack_frames.is_empty() {
            writeln!(f, "StackFrames")?;
            for (id, s) in &self.stack_frames {
                writeln!(
                    f,
                    "{id} {{file_location_id={} parent_frame_id={}}}",
                    s.file_location_id, s.parent_frame_id
                )?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_prints_in_xla_order() {
        let m = Metadata {
            stack_frame_id: Some(3),
            op_name: Some("jit(f)/add".into()),
            op_type: Some("Add".into()),
            ..Metadata::default()
        };
        assert_eq!(
            m.to_string(),
            "{op_type=\"Add\" op_name=\"jit(f)/add\" stack_frame_id=3}"
        );
    }

    #[test]
    fn strings_are_escaped() {
        assert_eq!(escape_string("a\"b\\c\n"), "a\\\"b\\\\c\\n");
    }
}
