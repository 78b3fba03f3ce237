//! The bench cases made with the HLO builder rather than taken from XLA: a 2048³ f16
//! matrix product (the AMP's best case) and one BERT-base encoder layer forward in f16 (a
//! real model's mix), written as case directories `ipuxla bench` and
//! `tools/side_by_side.py` read like the corpus's (`fixtures/builder/`; regenerate with
//! `ipuxla bench --write-builder-cases fixtures/builder`).

use crate::encoder::{EncoderSizes, encoder_stack};
use anyhow::Context;
use std::path::{Path, PathBuf};
use xla_ir::builder::{BuildError, ModuleBuilder};
use xla_ir::{ElementType, Module, Shape};

/// A builder-made bench case.
#[derive(Debug, Clone)]
pub struct BuilderCase {
    /// The case's name and directory name.
    pub name: String,
    /// What it is, for `case.json`.
    pub description: String,
    /// The module.
    pub module: Module,
}

/// Every builder-made bench case.
pub fn builder_cases() -> Result<Vec<BuilderCase>, BuildError> {
    let mut bert = encoder_stack(1, EncoderSizes::bert_base_f16())?;
    bert.name = "bert_base_layer_f16".into();
    Ok(vec![
        BuilderCase {
            name: "bench_matmul2048_f16".into(),
            description: "bench (builder): [2048,2048] x [2048,2048] f16 matrix product".into(),
            module: matmul(2048, ElementType::F16)?,
        },
        BuilderCase {
            name: "bench_bert_base_layer_f16".into(),
            description: "bench (builder): one BERT-base encoder layer forward in f16 \
                          (sequence 384, hidden 768, 12 heads, FFN 3072, batch 8; post-LN, \
                          tanh GELU)"
                .into(),
            module: bert,
        },
    ])
}

/// `a [n, n] × b [n, n]` in `t`.
pub fn matmul(n: i64, t: ElementType) -> Result<Module, BuildError> {
    let mut m = ModuleBuilder::new(format!("matmul{n}"));
    let mut c = m.computation("main");
    let a = c.parameter(0, Shape::array(t, &[n, n]), "a")?;
    let b = c.parameter(1, Shape::array(t, &[n, n]), "b")?;
    let d = c.dot(a, b)?;
    let entry = c.finish(d)?;
    m.finish(entry)
}

/// Writes `case` as `dir/NAME/` with `module.hlo` and a `case.json` naming its parameters
/// (shapes and types, no stored inputs: bench generates them, and so does
/// `tools/side_by_side.py` for XLA). Returns the case directory.
pub fn write_case(dir: &Path, case: &BuilderCase) -> anyhow::Result<PathBuf> {
    let at = dir.join(&case.name);
    std::fs::create_dir_all(&at).with_context(|| format!("{}", at.display()))?;
    let entry = case.module.entry_computation();
    let mut params = Vec::new();
    for (k, &p) in entry.parameters().iter().enumerate() {
        let Some(shape) = entry.instr(p).shape.as_array() else {
            anyhow::bail!("{}: parameter {k} is not an array", case.name);
        };
        params.push(serde_json::json!({
            "index": k,
            "file": format!("inputs/{k}.npy"),
            "shape": shape.dims.to_vec(),
            "dtype": frontend::npy::numpy_name(shape.element_type),
            "hlo_type": shape.element_type.name(),
        }));
    }
    let info = serde_json::json!({
        "name": case.name,
        "description": case.description,
        "bench": true,
        "builder": true,
        "params": params,
    });
    let write = |file: &str, text: String| {
        let path = at.join(file);
        std::fs::write(&path, text).with_context(|| format!("{}", path.display()))
    };
    write("module.hlo", case.module.to_string())?;
    write("case.json", serde_json::to_string_pretty(&info)? + "\n")?;
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bert_layer_has_bert_bases_dots_and_shapes() {
        let cases = builder_cases().unwrap();
        let bert = &cases[1].module;
        let entry = bert.entry_computation();
        assert_eq!(entry.parameters().len(), 1 + 12);
        let root = entry.root_instr().shape.as_array().unwrap();
        assert_eq!(
            (root.element_type, &root.dims[..]),
            (ElementType::F16, &[8 * 384, 768][..])
        );
        // QKV, two attention products, output projection, two feed-forward products.
        let dots: Vec<Vec<i64>> = entry
            .order()
            .iter()
            .map(|&i| entry.instr(i))
            .filter(|i| matches!(i.op, xla_ir::Op::Dot { .. }))
            .map(|i| i.shape.as_array().unwrap().dims.to_vec())
            .collect();
        assert_eq!(
            dots,
            [
                vec![3072, 2304],
                vec![8, 12, 384, 384],
                vec![8, 12, 384, 64],
                vec![3072, 768],
                vec![3072, 3072],
                vec![3072, 768]
            ]
        );
    }
}
