//! The conformance corpus's case directories (`case.json`, `module.hlo`, `inputs/K.npy`,
//! `outputs/K.npy`) and its tolerance rule, shared by `ipuxla bench` and the tests.

use crate::npy::read_npy;
use anyhow::{Context, anyhow};
use std::path::{Path, PathBuf};
use xla_ir::literal::{ArrayData, ArrayLiteral};
use xla_ir::{Literal, Module};

/// One case directory, read.
pub struct Case {
    /// The directory.
    pub dir: PathBuf,
    /// `case.json`.
    pub info: serde_json::Value,
    /// The module (`module.hlo`, as XLA handed it to its backend).
    pub module: Module,
}

impl Case {
    /// Reads `dir/case.json` and `dir/FILE` (`module.hlo` or `module.opt.hlo`).
    pub fn read(dir: &Path, file: &str) -> anyhow::Result<Case> {
        let json = dir.join("case.json");
        let info: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(&json).with_context(|| format!("{}", json.display()))?,
        )
        .with_context(|| format!("{}: not valid JSON", json.display()))?;
        let path = dir.join(file);
        let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
        let module = xla_ir::parse_module(&text).map_err(|e| anyhow!("{}: {e}", path.display()))?;
        Ok(Case {
            dir: dir.to_path_buf(),
            info,
            module,
        })
    }

    /// The case's name (`case.json`'s `name`, else the directory's).
    pub fn name(&self) -> String {
        self.info["name"].as_str().map_or_else(
            || {
                self.dir
                    .file_name()
                    .map_or("case".into(), |n| n.to_string_lossy().into_owned())
            },
            str::to_string,
        )
    }

    /// The stored inputs, one per parameter, or `None` when the case has none stored
    /// (the fixtures keep only the bench cases' modules).
    pub fn stored_inputs(&self) -> anyhow::Result<Option<Vec<Literal>>> {
        let params = self.info["params"].as_array().cloned().unwrap_or_default();
        let mut out = Vec::with_capacity(params.len());
        for p in &params {
            let Some(file) = p["file"].as_str() else {
                return Ok(None);
            };
            let path = self.dir.join(file);
            if !path.is_file() {
                return Ok(None);
            }
            out.push(Literal::Array(read_npy(&path)?));
        }
        Ok(Some(out))
    }

    /// The stored expected output `k` with its tolerance entry, or `None` when not stored.
    pub fn expected_output(
        &self,
        k: usize,
    ) -> anyhow::Result<Option<(ArrayLiteral, serde_json::Value)>> {
        let spec = &self.info["outputs"][k];
        let Some(file) = spec["file"].as_str() else {
            return Ok(None);
        };
        let path = self.dir.join(file);
        if !path.is_file() {
            return Ok(None);
        }
        Ok(Some((read_npy(&path)?, spec.clone())))
    }
}

/// The values as f64, for the floating-point types.
pub fn as_f64(data: &ArrayData) -> Option<Vec<f64>> {
    Some(match data {
        ArrayData::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
        ArrayData::Bf16(v) => v.iter().map(|x| x.to_f64()).collect(),
        ArrayData::F32(v) => v.iter().map(|&x| x as f64).collect(),
        ArrayData::F64(v) => v.clone(),
        _ => return None,
    })
}

/// The corpus rule: `|got - want| <= atol + rtol * |want|` per element (`rtol` and `atol`
/// from the output's `case.json` entry); NaN matches NaN, an infinity only itself; other
/// types match exactly. The error names the first element that differs.
pub fn compare_output(
    got: &ArrayLiteral,
    want: &ArrayLiteral,
    spec: &serde_json::Value,
) -> Result<(), String> {
    let Some(i) = differing_elements(got, want, spec)?.into_iter().next() else {
        return Ok(());
    };
    let (rtol, atol) = tolerances(spec);
    Err(match as_f64(&want.data) {
        Some(_) => format!(
            "element {i} is {}, expected {} (rtol {rtol}, atol {atol})",
            got.data.element_text(i),
            want.data.element_text(i)
        ),
        None => format!(
            "integer or bool values differ: element {i} is {}, expected {}",
            got.data.element_text(i),
            want.data.element_text(i)
        ),
    })
}

/// The elements of `got` that break the corpus rule of [`compare_output`] against `want`,
/// in order; an error when the element types or dimensions differ.
pub fn differing_elements(
    got: &ArrayLiteral,
    want: &ArrayLiteral,
    spec: &serde_json::Value,
) -> Result<Vec<usize>, String> {
    if got.shape.element_type != want.shape.element_type {
        return Err(format!(
            "element type {:?}, expected {:?}",
            got.shape.element_type, want.shape.element_type
        ));
    }
    if got.shape.dims != want.shape.dims {
        return Err(format!(
            "dimensions {:?}, expected {:?}",
            got.shape.dims, want.shape.dims
        ));
    }
    Ok(match (as_f64(&got.data), as_f64(&want.data)) {
        (Some(g), Some(w)) => {
            let (rtol, atol) = tolerances(spec);
            let close = |a: f64, b: f64| {
                if b.is_nan() {
                    a.is_nan()
                } else if b.is_infinite() {
                    a == b
                } else {
                    (a - b).abs() <= atol + rtol * b.abs()
                }
            };
            (0..g.len()).filter(|&i| !close(g[i], w[i])).collect()
        }
        _ if got.data == want.data => Vec::new(),
        _ => (0..got.data.len())
            .filter(|&i| got.data.take(&[i]) != want.data.take(&[i]))
            .collect(),
    })
}

/// `rtol` and `atol` of an output's spec (0 when absent).
fn tolerances(spec: &serde_json::Value) -> (f64, f64) {
    (
        spec["rtol"].as_f64().unwrap_or(0.0),
        spec["atol"].as_f64().unwrap_or(0.0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use xla_ir::ElementType;
    use xla_ir::shape::ArrayShape;

    fn f32s(v: Vec<f32>) -> ArrayLiteral {
        ArrayLiteral {
            shape: ArrayShape::new(ElementType::F32, &[v.len() as i64]),
            data: ArrayData::F32(v),
        }
    }

    #[test]
    fn tolerance_is_absolute_plus_relative() {
        let spec = serde_json::json!({"rtol": 0.1, "atol": 0.5});
        let want = f32s(vec![10.0, f32::NAN]);
        assert!(compare_output(&f32s(vec![11.4, f32::NAN]), &want, &spec).is_ok());
        let err = compare_output(&f32s(vec![11.6, f32::NAN]), &want, &spec).unwrap_err();
        assert!(err.starts_with("element 0 is 11.6"), "{err}");
        assert!(compare_output(&f32s(vec![10.0, 1.0]), &want, &spec).is_err());
    }
}
