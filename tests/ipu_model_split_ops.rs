//! Ops lowered as codelets split over tiles: each part's operand slice reaches its tile in
//! one rearrangement for all parts (one exchange, as Poplar copies a tensor to many
//! tiles), and the parts together compute what the reference evaluator computes.

use ipuxla::compiler::IpuConfig;
use xla_ir::literal::{ArrayData, ArrayLiteral};
use xla_ir::{ArrayShape, ElementType, Literal};

/// A convolution split over its batch (each part reads its images) followed by a max
/// pool split over its batch as well.
const CONV_POOL: &str = r#"HloModule conv_pool

max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}

ENTRY main {
  x = f32[16,8,8,3]{3,2,1,0} parameter(0)
  k = f32[3,3,3,4]{3,2,1,0} parameter(1)
  conv = f32[16,8,8,4]{3,2,1,0} convolution(x, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  init = f32[] constant(-inf)
  ROOT pool = f32[16,4,4,4]{3,2,1,0} reduce-window(conv, init), window={size=1x2x2x1 stride=1x2x2x1}, to_apply=max
}
"#;

fn values(dims: &[i64], seed: u32) -> Literal {
    let n: i64 = dims.iter().product();
    let data = (0..n as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) ^ seed) as f32 / u32::MAX as f32 - 0.5)
        .collect();
    Literal::Array(ArrayLiteral {
        shape: ArrayShape::new(ElementType::F32, dims),
        data: ArrayData::F32(data),
    })
}

#[test]
fn split_operands_reach_every_part_in_one_rearrangement_and_the_parts_match_the_evaluator() {
    let module = xla_ir::parse_module(CONV_POOL).unwrap();
    let inputs = vec![values(&[16, 8, 8, 3], 1), values(&[3, 3, 3, 4], 2)];
    let run = ipuxla::device::run_on_ipu_model(&module, &IpuConfig::default(), &inputs).unwrap();
    let steps = |name: &str| run.profile.steps.iter().filter(|s| s.name == name).count();
    for op in ["conv", "pool"] {
        assert_eq!(
            steps(&format!("{op}.in0")),
            1,
            "{op}: one copy of its split input"
        );
        let per_part = run
            .profile
            .steps
            .iter()
            .filter(|s| s.name.starts_with(&format!("{op}.in0.p")))
            .count();
        assert_eq!(per_part, 0, "{op}: no copy per part");
    }
    let Literal::Array(want) = xla_ir::eval::evaluate(&module, &inputs).unwrap() else {
        panic!("one array result");
    };
    let (ArrayData::F32(got), ArrayData::F32(want)) = (&run.outputs[0].data, &want.data) else {
        panic!("f32 results");
    };
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-5 * w.abs().max(1.0),
            "element {i}: {g} vs {w}"
        );
    }
}
