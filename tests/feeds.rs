//! Infeeds and outfeeds: a `while` loop that dequeues an infeed and enqueues an outfeed each
//! trip (`fixtures/feeds/accumulate.hlo`) on the evaluator and the IPU Model (a full ipu2
//! and 4 tiles), from the library and the command line; feeds that run dry, carry the
//! wrong shape or do not exist are named.

mod common;
use common::ipuxla;

use compiler::{IpuConfig, PassOptions};
use ipuxla::compiler;
use ipuxla::device::run_on_ipu_model_feeding;
use std::path::{Path, PathBuf};
use xla_ir::Literal;
use xla_ir::eval::{FeedNames, Feeds, evaluate_with_feeds};
use xla_ir::literal::{ArrayData, ArrayLiteral};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/feeds")
        .join(name)
}

fn module() -> xla_ir::Module {
    xla_ir::parse_module(&std::fs::read_to_string(fixture("accumulate.hlo")).unwrap()).unwrap()
}

fn f32s(l: &Literal) -> Vec<f32> {
    match l {
        Literal::Array(ArrayLiteral {
            data: ArrayData::F32(v),
            ..
        }) => v.clone(),
        other => panic!("not f32: {other:?}"),
    }
}

fn batches(n: usize) -> Feeds {
    let mut feeds = Feeds::default();
    let values = (0..n)
        .map(|i| {
            let v: Vec<f32> = (0..4).map(|j| (4 * i + j) as f32).collect();
            Literal::Array(ArrayLiteral::vector_f32(&v))
        })
        .collect();
    feeds.infeeds.insert("batches".into(), values);
    feeds
}

const SUMS: [[f32; 4]; 3] = [[1., 3., 5., 7.], [5., 8., 11., 14.], [13., 17., 21., 25.]];

fn check_sums(what: &str, feeds: &Feeds) {
    let sent: Vec<Vec<f32>> = feeds.outfeeds["sums"].iter().map(f32s).collect();
    assert_eq!(sent, SUMS.map(|s| s.to_vec()).to_vec(), "{what}");
    assert_eq!(feeds.dequeued["batches"], 3, "{what}");
    assert!(
        feeds.infeeds["batches"].is_empty(),
        "{what}: consumed values leave the queue"
    );
}

#[test]
fn feeds_are_named_by_config_or_number() {
    let names = FeedNames::of(&module());
    assert_eq!(names.infeeds, vec!["batches"]);
    assert_eq!(names.outfeeds, vec!["sums"]);
    let text = module().to_string();
    assert!(
        text.contains("infeed(tok), infeed_config=\"batches\"")
            && text
                .contains("outfeed(sum, tok2), outfeed_shape=f32[4]{0}, outfeed_config=\"sums\""),
        "{text}"
    );
    assert_eq!(xla_ir::parse_module(&text).unwrap(), module());
}

#[test]
fn a_loop_reading_an_infeed_and_writing_an_outfeed_runs_on_both_engines() {
    let start = Literal::Array(ArrayLiteral::vector_f32(&[1., 2., 3., 4.]));
    let mut feeds = batches(3);
    let result = evaluate_with_feeds(&module(), std::slice::from_ref(&start), &mut feeds).unwrap();
    assert_eq!(f32s(&result), SUMS[2].to_vec());
    check_sums("evaluator", &feeds);
    for tiles in [1472, 4] {
        let mut config = IpuConfig::default();
        config.ipu_model.tiles_per_ipu = tiles;
        let mut feeds = batches(4);
        let run = run_on_ipu_model_feeding(
            &module(),
            &config,
            &PassOptions::default(),
            std::slice::from_ref(&start),
            &mut feeds,
        )
        .unwrap();
        assert_eq!(run.outputs[0].data, ArrayData::F32(SUMS[2].to_vec()));
        let sent: Vec<Vec<f32>> = feeds.outfeeds["sums"].iter().map(f32s).collect();
        assert_eq!(sent, SUMS.map(|s| s.to_vec()).to_vec(), "{tiles} tiles");
        // Three of the four values were dequeued; the fourth waits for the next run.
        assert_eq!(feeds.dequeued["batches"], 3);
        assert_eq!(feeds.infeeds["batches"].len(), 1);
        let streams = run
            .profile
            .steps
            .iter()
            .filter(|s| s.name.starts_with("stream infeed.batches"))
            .count();
        assert_eq!(streams, 3, "one stream copy per trip");
    }
}

#[test]
fn an_infeed_that_runs_dry_or_carries_the_wrong_shape_is_named() {
    let start = Literal::Array(ArrayLiteral::vector_f32(&[1., 2., 3., 4.]));
    let mut two = batches(2);
    let e = evaluate_with_feeds(&module(), std::slice::from_ref(&start), &mut two)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("infeed batches ran dry: the program asks for value 3 of it, 2 given"),
        "{e}"
    );
    let mut two = batches(2);
    let e = run_on_ipu_model_feeding(
        &module(),
        &IpuConfig::default(),
        &PassOptions::default(),
        std::slice::from_ref(&start),
        &mut two,
    )
    .unwrap_err();
    assert!(
        format!("{e:#}").contains("stream infeed.batches ran dry: the program reads its value 3")
            && format!("{e:#}")
                .contains("infeed batches needs more values (`--infeed batches=FILE.npy`"),
        "{e:#}"
    );
    let mut wrong = Feeds::default();
    wrong.infeeds.insert(
        "batches".into(),
        vec![Literal::Array(ArrayLiteral::vector_f32(&[1., 2., 3.])); 3].into(),
    );
    let e = evaluate_with_feeds(&module(), std::slice::from_ref(&start), &mut wrong.clone())
        .unwrap_err()
        .to_string();
    assert!(e.contains("infeed batches was given f32[3]"), "{e}");
    let e = run_on_ipu_model_feeding(
        &module(),
        &IpuConfig::default(),
        &PassOptions::default(),
        std::slice::from_ref(&start),
        &mut wrong,
    )
    .unwrap_err();
    assert!(
        format!("{e:#}")
            .contains("infeed batches: value 0 is f32[3]{0} but the feed carries f32[4]"),
        "{e:#}"
    );
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ipuxla-feeds-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn the_command_line_feeds_infeeds_from_npy_and_writes_each_outfeed() {
    let hlo = fixture("accumulate.hlo");
    let inputs = format!("0={}", fixture("start.npy").display());
    let infeed = format!("batches={}", fixture("batches.npy").display());
    for engine in ["ipu-model", "reference"] {
        for (mode, shape) in [("all", "(3, 4)"), ("last", "(4,)")] {
            let outdir = scratch(&format!("{engine}-{mode}"));
            let out = ipuxla(&[
                "run",
                hlo.to_str().unwrap(),
                "--engine",
                engine,
                "--inputs",
                &inputs,
                "--infeed",
                &infeed,
                "--outfeed-mode",
                mode,
                "--outdir",
                outdir.to_str().unwrap(),
            ]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{engine} {mode}: {stderr}");
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                stdout.contains(&format!("outfeed_sums.npy  float32 {shape}")),
                "{stdout}"
            );
            assert!(outdir.join("outfeed_sums.npy").is_file());
        }
    }
    let outdir = scratch("bad");
    for (infeed, needle) in [
        (
            format!("nope={}", fixture("batches.npy").display()),
            "--infeed: the module has no infeed nope; its infeeds are batches".to_string(),
        ),
        (
            format!("{infeed};{infeed}"),
            "--infeed: infeed batches is given twice".to_string(),
        ),
    ] {
        let out = ipuxla(&[
            "run",
            hlo.to_str().unwrap(),
            "--inputs",
            &inputs,
            "--infeed",
            &infeed,
            "--outdir",
            outdir.to_str().unwrap(),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(&needle),
            "{stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(!outdir.exists(), "nothing is written");
    }
}

/// Feeds inside called computations and conditional branches, with tokens through tuples:
/// both engines dequeue and enqueue the same values for either branch.
#[test]
fn feeds_in_calls_and_conditional_branches_agree_on_both_engines() {
    let text = std::fs::read_to_string(fixture("call_conditional.hlo")).unwrap();
    let module = xla_ir::parse_module(&text).unwrap();
    for branch in [true, false] {
        let args = [Literal::Array(ArrayLiteral::scalar_pred(branch))];
        let values = || {
            let mut feeds = Feeds::default();
            feeds.feed(
                "x",
                [[0., 1., 2., 3.], [4., 5., 6., 7.]]
                    .map(|v| Literal::Array(ArrayLiteral::vector_f32(&v))),
            );
            feeds
        };
        let mut on_host = values();
        let want = evaluate_with_feeds(&module, &args, &mut on_host).unwrap();
        let mut on_ipu = values();
        let run = run_on_ipu_model_feeding(
            &module,
            &IpuConfig::default(),
            &PassOptions::default(),
            &args,
            &mut on_ipu,
        )
        .unwrap();
        assert_eq!(f32s(&want), f32s(&Literal::Array(run.outputs[0].clone())));
        let sent = |f: &mut Feeds| f.dequeue("y").iter().map(f32s).collect::<Vec<_>>();
        let host_sent = sent(&mut on_host);
        assert_eq!(host_sent, sent(&mut on_ipu), "branch {branch}");
        assert_eq!(
            host_sent.len(),
            usize::from(branch),
            "only the true branch outfeeds"
        );
        assert_eq!(on_host.dequeued["x"], 2);
        assert_eq!(on_ipu.dequeued["x"], 2);
    }
}
