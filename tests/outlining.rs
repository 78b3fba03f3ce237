//! Outlining: repeated layers share one body of code, so a deep stack holds about one
//! layer's code per tile, and outlining changes no result.

use ipuxla::compiler::IpuConfig;
use ipuxla::compiler::passes::PassOptions;
use ipuxla::encoder::{EncoderSizes, encoder_stack};
use ipuxla::runtime::Profile;
use ipuxla::xla_ir::Literal;
use ipuxla::xla_ir::literal::ArrayData;

fn config(outlining: bool) -> IpuConfig {
    let mut c = IpuConfig::default();
    c.optimizations.enable_graph_outlining = outlining;
    c
}

/// The most code (kernels, vertex state, control code) any tile holds.
fn code_per_tile(p: &Profile) -> u64 {
    p.tiles
        .iter()
        .map(|t| t.all_code_bytes())
        .max()
        .unwrap_or(0)
}

fn estimate(layers: usize, outlining: bool) -> Profile {
    let module = encoder_stack(layers, EncoderSizes::default()).unwrap();
    ipuxla::device::estimate_on_ipu_model(&module, &config(outlining), &PassOptions::default())
        .unwrap()
        .profile
}

#[test]
fn twelve_outlined_layers_hold_about_one_layers_code() {
    let one = code_per_tile(&estimate(1, true));
    let twelve = code_per_tile(&estimate(12, true));
    let twelve_inlined = code_per_tile(&estimate(12, false));
    assert!(one > 0);
    assert!(
        twelve as f64 <= 1.5 * one as f64,
        "12 outlined layers: {twelve} B of code per tile, 1 layer: {one} B"
    );
    // Without outlining every layer has its own vertices and steps.
    assert!(
        twelve_inlined as f64 > 4.0 * one as f64,
        "12 layers without outlining: {twelve_inlined} B, 1 layer: {one} B"
    );
}

#[test]
fn outlining_changes_no_result() {
    let sizes = EncoderSizes {
        seq: 16,
        d: 32,
        heads: 2,
        ffn: 64,
        ..EncoderSizes::default()
    };
    let module = encoder_stack(3, sizes).unwrap();
    let inputs = ipuxla::bench::generated_inputs(&module);
    let run = |outlining: bool| {
        let mut r = ipuxla::device::run_on_ipu_model(&module, &config(outlining), &inputs).unwrap();
        r.outputs.remove(0)
    };
    let (outlined, inlined) = (run(true), run(false));
    assert_eq!(outlined, inlined, "the same arithmetic in the same order");
    let reference = ipuxla::xla_ir::eval::evaluate(&module, &inputs).unwrap();
    let f32s = |d: &ArrayData| match d {
        ArrayData::F32(v) => v.clone(),
        other => panic!("expected f32, got {:?}", other.element_type()),
    };
    let Literal::Array(want) = reference else {
        panic!("one array result")
    };
    for (g, w) in f32s(&outlined.data).iter().zip(f32s(&want.data)) {
        assert!((g - w).abs() <= 1e-4 + 1e-4 * w.abs(), "{g} vs {w}");
    }
}

/// The corpus's 12-layer encoder slices each layer's weights out of stacked parameters and
/// passes them to the outlined layer: a slice is a view (as Poplar's is), so none is made
/// on its own; each is copied straight from its stack into the layer's argument at its call.
#[test]
fn slices_passed_to_an_outlined_layer_are_copied_straight_into_its_arguments() {
    let path = format!(
        "{}/fixtures/conformance/bench_encoder_stack12_fwd/module.hlo",
        env!("CARGO_MANIFEST_DIR")
    );
    let module = ipuxla::xla_ir::parse_module(&std::fs::read_to_string(path).unwrap()).unwrap();
    let slices = |outlining: bool| -> Vec<String> {
        let p = ipuxla::device::estimate_on_ipu_model(
            &module,
            &config(outlining),
            &PassOptions::default(),
        )
        .unwrap()
        .profile;
        let slices = p.steps.iter().filter(|s| s.name.starts_with("slice"));
        slices.map(|s| s.name.clone()).collect()
    };
    let outlined = slices(true);
    assert_eq!(outlined.len(), 12 * 12, "{outlined:?}");
    for name in &outlined {
        assert!(
            name.contains(" -> outlined"),
            "{name}: a slice made on its own"
        );
    }
    // Inlined, the layers' vertices read the slices: each is made.
    let inlined = slices(false);
    assert_eq!(inlined.len(), 12 * 12);
    assert!(inlined.iter().all(|name| !name.contains(" -> ")));
}

/// `fixtures/outlining/NAME`, parsed.
fn fixture(name: &str) -> ipuxla::xla_ir::Module {
    let path = format!("{}/fixtures/outlining/{name}", env!("CARGO_MANIFEST_DIR"));
    ipuxla::xla_ir::parse_module(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// What the differential fuzzer found outlined wrongly (seeds 50890 and 51337 at 24
/// instructions): one region reads a value at two operand positions where the other reads
/// two different values, and keyed by the first region's value the two inputs merged into
/// one parameter. Outlined, the module computes what it did before.
#[test]
fn a_region_reading_one_value_where_another_reads_two_keeps_both_inputs() {
    let module = fixture("one_value_two_inputs.hlo");
    let options = PassOptions {
        stop_after: Some("graph-outliner".into()),
        ..PassOptions::default()
    };
    let (outlined, report) =
        ipuxla::compiler::optimise(&module, &IpuConfig::default(), &options).unwrap();
    let notes = &report.passes.last().unwrap().notes;
    assert!(notes[0].starts_with("outlined.0: 2 calls"), "{notes:?}");
    let callee = outlined.find_computation("outlined.0").unwrap();
    // p0 x p1 and p0 x p2: two parameters, not one.
    assert_eq!(
        outlined.computation(callee).parameters().len(),
        2,
        "{outlined}"
    );
    let inputs = ipuxla::xla_ir::generate::inputs(&module, 1);
    let eval = |m: &ipuxla::xla_ir::Module| ipuxla::xla_ir::eval::evaluate(m, &inputs).unwrap();
    assert_eq!(eval(&outlined), eval(&module));
}

/// Identical regions nothing reads (dead code: the e-graph, switched off here, would have
/// removed it) stay inline: the outliner panicked making a call that stands for no value.
#[test]
fn regions_nothing_reads_stay_inline_and_the_module_runs() {
    let module = fixture("regions_nothing_reads.hlo");
    let mut config = IpuConfig::default();
    config.optimizations.egraph.enabled = false;
    config.ipu_model.tiles_per_ipu = 4;
    let inputs = ipuxla::xla_ir::generate::inputs(&module, 1);
    let run = ipuxla::device::run_on_ipu_model(&module, &config, &inputs).unwrap();
    let want = ipuxla::xla_ir::eval::evaluate(&module, &inputs).unwrap();
    assert_eq!(ipuxla::device_loop::leaves(want), run.outputs);
}
