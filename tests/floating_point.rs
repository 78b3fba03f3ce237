//! The IPU's floating-point control (`floating_point_behaviour`) on the IPU Model: each
//! exception flag stops the run at the first element that raises it, naming the compute
//! set, IPU, tile and element; `nanoo` makes overflow NaN; `esr` rounds f16 results
//! stochastically, seeded and reproducible, with a smaller mean error than round to
//! nearest on a long f16 accumulation. Off (the default), results are IEEE's.

mod common;
use common::{fixture, leaves};

use ipuxla::compiler::{IpuConfig, config::FloatingPointBehaviour};
use xla_ir::literal::{ArrayData, ArrayLiteral};
use xla_ir::{ArrayShape, ElementType, Literal};

fn module(name: &str) -> xla_ir::Module {
    let text = std::fs::read_to_string(fixture(&format!("floating_point/{name}"))).unwrap();
    xla_ir::parse_module(&text).unwrap()
}

fn f32s(v: &[f32]) -> Literal {
    Literal::Array(ArrayLiteral {
        shape: ArrayShape::new(ElementType::F32, &[v.len() as i64]),
        data: ArrayData::F32(v.to_vec()),
    })
}

fn config(fp: FloatingPointBehaviour) -> IpuConfig {
    let mut c = IpuConfig::default();
    c.ipu_model.tiles_per_ipu = 4;
    c.floating_point_behaviour = fp;
    c
}

/// Runs `exceptions.hlo` (quotient x/y, root sqrt(x), square x*x) on `x`, `y`.
fn run(fp: FloatingPointBehaviour, x: &[f32], y: &[f32]) -> anyhow::Result<Vec<ArrayLiteral>> {
    let run = ipuxla::device::run_on_ipu_model(
        &module("exceptions.hlo"),
        &config(fp),
        &[f32s(x), f32s(y)],
    )?;
    Ok(run.outputs)
}

const X: [f32; 8] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
const Y: [f32; 8] = [1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0];

fn error(fp: FloatingPointBehaviour, x: &[f32], y: &[f32]) -> String {
    format!(
        "{:#}",
        run(fp, x, y).expect_err("an exception stops the run")
    )
}

#[test]
fn div0_names_the_instruction_tile_and_element() {
    let fp = FloatingPointBehaviour {
        div0: true,
        ..Default::default()
    };
    let e = error(fp, &X, &Y);
    assert!(
        e.contains("division by zero computing element 5 of 'quotient'")
            && e.contains("tile ")
            && e.contains("floating_point_behaviour.div0"),
        "{e}"
    );
    // Off, the quotient is IEEE's infinity.
    let out = run(FloatingPointBehaviour::default(), &X, &Y).unwrap();
    let ArrayData::F32(q) = &out[0].data else {
        panic!()
    };
    assert_eq!(q[5], f32::INFINITY);
}

#[test]
fn inv_and_oflo_name_what_raised_them_and_set_all_enables_them() {
    let mut x = X;
    x[2] = -1.0;
    let inv = FloatingPointBehaviour {
        inv: true,
        ..Default::default()
    };
    let e = error(inv, &x, &[1.0; 8]);
    assert!(
        e.contains("invalid operation computing element 2 of 'root'"),
        "{e}"
    );
    let mut big = X;
    big[7] = 3e38;
    let oflo = FloatingPointBehaviour {
        oflo: true,
        ..Default::default()
    };
    let e = error(oflo, &big, &[1.0; 8]);
    assert!(
        e.contains("overflow computing element 7 of 'square'"),
        "{e}"
    );
    let all = FloatingPointBehaviour {
        set_all: true,
        ..Default::default()
    };
    assert!(error(all, &X, &Y).contains("division by zero"));
    // Nothing raised: the same outputs as with the flags off.
    assert_eq!(
        run(all, &X, &[1.0; 8]).unwrap(),
        run(FloatingPointBehaviour::default(), &X, &[1.0; 8]).unwrap()
    );
}

#[test]
fn nanoo_makes_overflow_nan() {
    let mut big = X;
    big[7] = 3e38;
    let fp = FloatingPointBehaviour {
        nanoo: true,
        ..Default::default()
    };
    let out = run(fp, &big, &[1.0; 8]).unwrap();
    let ArrayData::F32(square) = &out[2].data else {
        panic!()
    };
    assert!(square[7].is_nan() && square[6] == 49.0, "{square:?}");
    let ieee = run(FloatingPointBehaviour::default(), &big, &[1.0; 8]).unwrap();
    let ArrayData::F32(square) = &ieee[2].data else {
        panic!()
    };
    assert_eq!(square[7], f32::INFINITY);
}

/// 2000 additions of f16 0.0001 to 1.0 in 64 lanes. Round to nearest never leaves 1.0 (the
/// step is under half an ulp); stochastic rounding tracks the exact sum.
fn accumulate(fp: FloatingPointBehaviour) -> Vec<f64> {
    let run =
        ipuxla::device::run_on_ipu_model(&module("f16_accumulate.hlo"), &config(fp), &[]).unwrap();
    let ArrayData::F16(v) = &leaves_of(run.outputs)[0].data else {
        panic!()
    };
    v.iter().map(|h| h.to_f64()).collect()
}

fn leaves_of(outputs: Vec<ArrayLiteral>) -> Vec<ArrayLiteral> {
    leaves(Literal::Tuple(
        outputs.into_iter().map(Literal::Array).collect(),
    ))
}

#[test]
fn esr_rounds_stochastically_seeded_and_reproducibly() {
    let step = half::f16::from_f64(0.0001).to_f64();
    let exact = 1.0 + 2000.0 * step;
    let mean_error = |v: &[f64]| v.iter().map(|x| (x - exact).abs()).sum::<f64>() / v.len() as f64;
    let nearest = accumulate(FloatingPointBehaviour::default());
    assert!(nearest.iter().all(|&x| x == 1.0), "{nearest:?}");
    let esr = |seed| {
        accumulate(FloatingPointBehaviour {
            esr: true,
            esr_seed: seed,
            ..Default::default()
        })
    };
    let (a, again, other) = (esr(1), esr(1), esr(2));
    assert_eq!(a, again, "the same seed rounds the same way");
    assert_ne!(a, other, "another seed rounds differently");
    assert!(
        mean_error(&a) < mean_error(&nearest) / 4.0,
        "stochastic {} vs nearest {}",
        mean_error(&a),
        mean_error(&nearest)
    );
}

/// The reference engine computes with IEEE defaults, so it refuses the flags rather than
/// ignore them.
#[test]
fn the_reference_engine_refuses_the_flags() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ipuxla-fp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("fp.json");
    std::fs::write(&config, r#"{"floating_point_behaviour": {"nanoo": true}}"#).unwrap();
    let out = common::ipuxla(&[
        "run",
        &fixture("floating_point/f16_accumulate.hlo"),
        "--engine",
        "reference",
        "--config",
        config.to_str().unwrap(),
        "--outdir",
        dir.join("out").to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("floating_point_behaviour acts on the IPU Model"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An f16 element-wise chain (the corpus's `f16_elementwise_chain`: products, sums, `tanh`,
/// `exp`, `sqrt`, a comparison and a select, 25 ops) fuses into a few compute sets with every
/// f16 op's value rounded to f16, as the IPU's f16 arithmetic rounds it: the results are
/// the evaluator's bit for bit (each op rounded as it is stored there). Under a
/// floating-point mode each f16 op is its own compute set again (exceptions and stochastic
/// rounding are checked where results are stored), with the same results.
#[test]
fn f16_chains_fuse_with_every_op_rounded_and_stay_apart_under_a_floating_point_mode() {
    let text =
        std::fs::read_to_string(fixture("conformance/f16_elementwise_chain/module.hlo")).unwrap();
    let module = xla_ir::parse_module(&text).unwrap();
    let inputs = common::arguments(&module);
    let want = leaves(xla_ir::eval::evaluate(&module, &inputs).unwrap());
    let oflo = FloatingPointBehaviour {
        oflo: true,
        ..Default::default()
    };
    let mut sets = Vec::new();
    for fp in [FloatingPointBehaviour::default(), oflo] {
        let options = ipuxla::compiler::passes::PassOptions::default();
        let estimate =
            ipuxla::device::estimate_on_ipu_model(&module, &config(fp), &options).unwrap();
        sets.push(estimate.compute_sets);
        let run = ipuxla::device::run_on_ipu_model(&module, &config(fp), &inputs).unwrap();
        assert_eq!(leaves_of(run.outputs), want, "{fp:?}");
    }
    assert!(
        sets[0] <= 4 && sets[1] >= 15,
        "compute sets fused and not: {sets:?}"
    );
}
