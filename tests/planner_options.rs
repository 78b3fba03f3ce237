//! The planner options act: `partialsType half` stores f16 matrix products' partials in
//! f16 (less memory and exchange, f16 rounding, within f16 tolerance) and is refused for
//! f32 operands and for convolutions; a convolution's `availableMemoryProportion` bounds
//! its temporaries per tile, so a smaller one splits it further.

mod common;
use common::{arguments, fixture};

use ipuxla::compiler::IpuConfig;
use xla_ir::literal::{ArrayData, ArrayLiteral};

fn module(path: &str) -> xla_ir::Module {
    xla_ir::parse_module(&std::fs::read_to_string(fixture(path)).unwrap()).unwrap()
}

fn with(options: &str, tiles: usize) -> IpuConfig {
    let mut c = IpuConfig::from_json(options).unwrap();
    c.ipu_model.tiles_per_ipu = tiles;
    c
}

fn values(a: &ArrayLiteral) -> Vec<f64> {
    match &a.data {
        ArrayData::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
        ArrayData::F32(v) => v.iter().map(|&x| x as f64).collect(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn half_partials_store_f16_partials_with_less_memory_and_f16_rounding() {
    let m = module("planner/f16_dot.hlo");
    let args = arguments(&m);
    let want = values(&common::leaves(xla_ir::eval::evaluate(&m, &args).unwrap())[0]);
    let half = r#"{"matmuls": {"poplar_options": {"partialsType": "half"}}}"#;
    for tiles in [1472, 4] {
        let float = ipuxla::device::run_on_ipu_model(&m, &with("{}", tiles), &args).unwrap();
        let halved = ipuxla::device::run_on_ipu_model(&m, &with(half, tiles), &args).unwrap();
        assert!(
            halved.profile.total_cycles < float.profile.total_cycles,
            "{tiles} tiles: {} vs {} cycles",
            halved.profile.total_cycles,
            float.profile.total_cycles
        );
        let (f, h) = (values(&float.outputs[0]), values(&halved.outputs[0]));
        assert_ne!(f, h, "{tiles} tiles: f16 partials round differently");
        for (i, ((&g, &w), &fl)) in h.iter().zip(&want).zip(&f).enumerate() {
            assert!(
                (g - w).abs() <= 0.05,
                "{tiles} tiles, element {i}: {g} vs {w}"
            );
            assert!(
                (fl - w).abs() <= 0.05,
                "{tiles} tiles, element {i}: {fl} vs {w}"
            );
        }
    }
    let float = ipuxla::device::run_on_ipu_model(&m, &with("{}", 1472), &args).unwrap();
    let halved = ipuxla::device::run_on_ipu_model(&m, &with(half, 1472), &args).unwrap();
    assert!(
        halved.profile.peak_tile().unwrap().bytes_used
            < float.profile.peak_tile().unwrap().bytes_used
    );
}

#[test]
fn half_partials_are_refused_where_they_would_not_act() {
    let text = "HloModule f32_dot\n\nENTRY main {\n  a = f32[4,8]{1,0} parameter(0)\n  b = f32[8,4]{1,0} parameter(1)\n  ROOT d = f32[4,4]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
    let m = xla_ir::parse_module(text).unwrap();
    let half = with(
        r#"{"matmuls": {"poplar_options": {"partialsType": "half"}}}"#,
        4,
    );
    let e = ipuxla::compiler::compile(&m, &half)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("partialsType half applies to f16 operands") && e.contains("'d'"),
        "{e}"
    );
    let conv = module("planner/conv.hlo");
    let half = with(
        r#"{"convolutions": {"poplar_options": {"partialsType": "half"}}}"#,
        4,
    );
    let e = ipuxla::compiler::compile(&conv, &half)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("convolutions.poplar_options.partialsType half applies to f16 convolutions"),
        "{e}"
    );
}

/// `partialsType: half` on an f16 convolution: the running sum over kernel positions is
/// kept in f16 (results change, within f16 rounding of the float-partials ones), and f16
/// convolutions run at the target's f16 AMP rate (fewer cycles than the same in f32).
#[test]
fn half_partials_on_an_f16_convolution_change_its_rounding() {
    let f32_text = std::fs::read_to_string(fixture("planner/conv.hlo")).unwrap();
    let f16_text = f32_text.replace("f32[", "f16[");
    let (m32, m16) = (
        xla_ir::parse_module(&f32_text).unwrap(),
        xla_ir::parse_module(&f16_text).unwrap(),
    );
    let args = arguments(&m16);
    let float = ipuxla::device::run_on_ipu_model(&m16, &with("{}", 1472), &args).unwrap();
    let half = with(
        r#"{"convolutions": {"poplar_options": {"partialsType": "half"}}}"#,
        1472,
    );
    let halved = ipuxla::device::run_on_ipu_model(&m16, &half, &args).unwrap();
    let values = |o: &ArrayLiteral| -> Vec<f32> {
        match &o.data {
            ArrayData::F16(v) => v.iter().map(|x| x.to_f32()).collect(),
            other => panic!("f16 results, not {other:?}"),
        }
    };
    let (a, b) = (values(&float.outputs[0]), values(&halved.outputs[0]));
    let changed = a.iter().zip(&b).filter(|(x, y)| x != y).count();
    assert!(changed > 0, "half partials changed nothing");
    for (x, y) in a.iter().zip(&b) {
        assert!(
            (x - y).abs() <= 0.01 * x.abs().max(1.0),
            "{y} with half partials vs {x}"
        );
    }
    let f32_run =
        ipuxla::device::run_on_ipu_model(&m32, &with("{}", 1472), &arguments(&m32)).unwrap();
    assert!(
        float.profile.total_cycles < f32_run.profile.total_cycles,
        "f16 {} cycles vs f32 {}",
        float.profile.total_cycles,
        f32_run.profile.total_cycles
    );
}

/// `availableMemoryProportion` bounds a convolution part's patch matrix (its output
/// positions x window x input features): on 16 tiles the fastest split cuts the batch 2
/// ways, the output features 2 and the input features 4 (the result is smaller than either
/// operand, so the parts' partial sums are added after); a tight proportion gives up the
/// output-feature cut for 8 input-feature parts, whose patch matrices are half as wide, so
/// each input slice goes to one part instead of two. The values change only by the order
/// of the sums.
#[test]
fn a_smaller_convolution_memory_proportion_splits_the_convolution_further() {
    let m = module("planner/conv.hlo");
    let args = arguments(&m);
    let roomy = ipuxla::device::run_on_ipu_model(&m, &with("{}", 16), &args).unwrap();
    let tight = with(
        r#"{"convolutions": {"poplar_options": {"availableMemoryProportion": "0.01"}}}"#,
        16,
    );
    let tight = ipuxla::device::run_on_ipu_model(&m, &tight, &args).unwrap();
    let input_bytes = |run: &ipuxla::device::DeviceRun| {
        (run.profile.steps.iter())
            .find(|s| s.name == "y.in0")
            .map(|s| s.bytes_moved)
            .expect("the input is copied to the parts")
    };
    // Input: 32 x 4 x 4 x 128 f32, 262 144 B: each slice goes to 2 tiles, or to one (less
    // what already lies on the part's tile).
    assert!(
        input_bytes(&tight) * 3 < input_bytes(&roomy) * 2,
        "input copies: {} B tight vs {} B roomy",
        input_bytes(&tight),
        input_bytes(&roomy)
    );
    let (ArrayData::F32(a), ArrayData::F32(b)) = (&tight.outputs[0].data, &roomy.outputs[0].data)
    else {
        panic!("f32 results");
    };
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= 1e-5 * y.abs().max(1.0), "{x} vs {y}");
    }
}
