//! Keras's `model.summary()` and the seed's `print_pipeline_stage_assignment_summary()`:
//! each node (layer application or merge) with its output shape, its weights' element
//! count and, when assigned, its pipeline stage.

use super::{Model, NodeOp};
use std::fmt::Write;

impl Model {
    /// A table of the model's nodes: name, output shape (batch `None`), weights and stage;
    /// then the total and trainable weight counts.
    pub fn summary(&self) -> String {
        let mut rows: Vec<[String; 4]> = vec![[
            "Layer".into(),
            "Output shape".into(),
            "Weights".into(),
            "Stage".into(),
        ]];
        for (k, node) in self.nodes.iter().enumerate().skip(1) {
            let dims: Vec<String> = node.dims[1..].iter().map(i64::to_string).collect();
            let weights = match node.op {
                NodeOp::Layer(l) => self.weights[self.layers[l].weights.clone()]
                    .iter()
                    .map(|w| w.value.shape.element_count())
                    .sum::<u64>(),
                _ => 0,
            };
            let shared = match node.op {
                NodeOp::Layer(l) => self.nodes[..k].iter().any(|n| n.op == NodeOp::Layer(l)),
                _ => false,
            };
            rows.push([
                self.node_name(k),
                format!("(None, {})", dims.join(", ")),
                if shared {
                    "shared".into()
                } else {
                    weights.to_string()
                },
                self.stages
                    .as_ref()
                    .map_or("-".into(), |s| s[k - 1].to_string()),
            ]);
        }
        let widths: Vec<usize> = (0..4)
            .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
            .collect();
        let mut out = format!("Model: {}\n", self.name);
        for (i, row) in rows.iter().enumerate() {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                let _ = write!(line, "{cell:<w$}  ", w = widths[c]);
            }
            let line = line.trim_end();
            let _ = writeln!(out, "{line}");
            if i == 0 {
                let _ = writeln!(out, "{}", "-".repeat(line.len()));
            }
        }
        let count = |trainable: bool| -> u64 {
            self.weights
                .iter()
                .filter(|w| !trainable || w.trainable)
                .map(|w| w.value.shape.element_count())
                .sum()
        };
        let _ = writeln!(out, "Total weights: {}", count(false));
        let _ = writeln!(out, "Trainable weights: {}", count(true));
        out
    }
}
