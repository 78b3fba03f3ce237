//! `ipuxla run LOSS.hlo --optimizer sgd:LR`: a loss module in pipeline stages trained as a
//! training pipeline from the command line, the same on both engines, and equal to plain
//! SGD steps on the accumulated batches; bad training flags are refused with the rule.

mod common;

use common::{fixture, ipuxla};
use ipuxla::frontend::npy::read_npy;
use xla_ir::literal::{ArrayData, ArrayLiteral};

fn inputs() -> String {
    ["w0", "w1", "w2", "w3", "x", "y"]
        .iter()
        .map(|n| format!("{n}={}", fixture(&format!("training-pipeline/{n}.npy"))))
        .collect::<Vec<_>>()
        .join(";")
}

fn train(engine: &str, out: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let hlo = fixture("training-pipeline/mlp_loss_4stages.hlo");
    let inputs = inputs();
    let mut args = vec![
        "run",
        &hlo,
        "--inputs",
        &inputs,
        "--outdir",
        out.to_str().unwrap(),
        "--overwrite",
        "--iterations",
        "16",
        "--optimizer",
        "sgd:0.05",
        "--engine",
        engine,
    ];
    args.extend(extra);
    ipuxla(&args)
}

fn f32s(a: &ArrayLiteral) -> &[f32] {
    match &a.data {
        ArrayData::F32(v) => v,
        _ => panic!("f32"),
    }
}

#[test]
fn a_loss_module_trains_as_a_pipeline_from_the_command_line() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ipuxla-cli-train-{}", std::process::id()));
    let (ipu, reference) = (dir.join("ipu"), dir.join("reference"));
    let out = train(
        "ipu-model",
        &ipu,
        &["--gradient-accumulation", "8", "--num-ipus", "4"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("as a 4-stage pipeline (2 updates of 8 micro-batches)"),
        "{text}"
    );
    assert!(
        text.contains("pipeline: 4 stages on IPUs [0, 1, 2, 3]"),
        "{text}"
    );
    let out = train("reference", &reference, &["--gradient-accumulation", "8"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Two plain SGD steps, each on the 32 rows of 8 micro-batches, on the evaluator.
    let module = xla_ir::parse_module(
        &std::fs::read_to_string(fixture("training-pipeline/mlp_loss_4stages.hlo")).unwrap(),
    )
    .unwrap();
    let read = |n: &str| {
        read_npy(std::path::Path::new(&fixture(&format!(
            "training-pipeline/{n}.npy"
        ))))
        .unwrap()
    };
    let mut w: Vec<Vec<f32>> = ["w0", "w1", "w2", "w3"]
        .iter()
        .map(|n| f32s(&read(n)).to_vec())
        .collect();
    let (x, y) = (read("x"), read("y"));
    for update in 0..2 {
        let mut sums: Vec<Vec<f64>> = w.iter().map(|v| vec![0.0; v.len()]).collect();
        for m in 0..8 {
            let i = update * 8 + m;
            let args: Vec<xla_ir::Literal> = (0..4)
                .map(|k| {
                    let shape = module.entry_computation().parameter_shapes()[k]
                        .as_array()
                        .unwrap()
                        .clone();
                    xla_ir::Literal::Array(ArrayLiteral {
                        shape,
                        data: ArrayData::F32(w[k].clone()),
                    })
                })
                .chain([x.index_leading(i), y.index_leading(i)].map(xla_ir::Literal::Array))
                .collect();
            let g = gradient(&module, &args);
            for (s, gk) in sums.iter_mut().zip(&g) {
                for (a, b) in s.iter_mut().zip(gk) {
                    *a += *b as f64;
                }
            }
        }
        for (wk, s) in w.iter_mut().zip(&sums) {
            for (a, b) in wk.iter_mut().zip(s) {
                *a -= (0.05 * b / 8.0) as f32;
            }
        }
    }
    for (k, want) in w.iter().enumerate() {
        for d in [&ipu, &reference] {
            let got = read_npy(&d.join(format!("output_{}.npy", k + 1))).unwrap();
            for (i, (a, b)) in f32s(&got).iter().zip(want).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-5 + 1e-4 * b.abs(),
                    "{}: w{k}[{i}] {a} vs {b}",
                    d.display()
                );
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// The gradient of the loss module with respect to its 4 weights, by the frontend.
fn gradient(module: &xla_ir::Module, args: &[xla_ir::Literal]) -> Vec<Vec<f32>> {
    use xla_ir::builder::ModuleBuilder;
    let mut b = ModuleBuilder::extend(module.clone());
    let entry = module.entry;
    let mut c = b.computation("grads");
    let params: Vec<_> = module
        .entry_computation()
        .parameter_shapes()
        .iter()
        .enumerate()
        .map(|(k, s)| {
            c.parameter(k as u64, s.clone(), &format!("g.p{k}"))
                .unwrap()
        })
        .collect();
    let loss = c.call(&params, entry).unwrap();
    let g = ipuxla::frontend::autodiff::grad(&mut c, loss, &params[..4]).unwrap();
    let root = c.tuple(&g).unwrap();
    let id = c.finish(root).unwrap();
    let mut m = b.into_module();
    m.entry = id;
    match xla_ir::eval::evaluate(&m, args).unwrap() {
        xla_ir::Literal::Tuple(items) => items
            .iter()
            .map(|l| match l {
                xla_ir::Literal::Array(a) => f32s(a).to_vec(),
                _ => panic!(),
            })
            .collect(),
        other => panic!("{other}"),
    }
}

#[test]
fn bad_training_flags_are_refused_with_the_rule() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ipuxla-cli-train-bad-{}", std::process::id()));
    let err = |extra: &[&str]| {
        let out = train("reference", &dir, extra);
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(
        err(&["--gradient-accumulation", "5"])
            .contains("--iterations 16 is not a multiple of --gradient-accumulation 5")
    );
    let hlo = fixture("training-pipeline/mlp_loss_4stages.hlo");
    let inputs = inputs();
    let out = ipuxla(&[
        "run",
        &hlo,
        "--inputs",
        &inputs,
        "--outdir",
        dir.to_str().unwrap(),
        "--overwrite",
        "--iterations",
        "16",
        "--optimizer",
        "adam:0.1",
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("the optimisers are sgd:LR"));
    // Grouped needs a micro-batch per stage in every accumulation.
    let e = err(&["--gradient-accumulation", "2"]);
    assert!(
        e.contains("gradient_accumulation_count 2 is less than the 4 stages"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
