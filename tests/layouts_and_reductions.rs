//! Three lowering choices that change cycles and never values: a parameter read only in
//! whole-block slices (a stack of layers' weights) is allocated block by block, so each slice
//! is an on-tile copy; a reduction's constant init value is folded into the vertices that
//! finish it (no step of its own), the sign of a zero sum as XLA gives it; and a product's K
//! parts are summed by its one element-wise reader's kernel.

mod common;

use ipuxla::compiler::IpuConfig;
use xla_ir::literal::{ArrayData, ArrayLiteral};
use xla_ir::{ArrayShape, ElementType, Literal};

fn on_tiles(tiles: usize) -> IpuConfig {
    let mut c = IpuConfig::default();
    c.ipu_model.tiles_per_ipu = tiles;
    c
}

fn f32s(dims: &[i64], value: impl Fn(usize) -> f32) -> Literal {
    let n: i64 = dims.iter().product();
    Literal::Array(ArrayLiteral {
        shape: ArrayShape::new(ElementType::F32, dims),
        data: ArrayData::F32((0..n as usize).map(value).collect()),
    })
}

fn bits(a: &ArrayLiteral) -> Vec<u32> {
    match &a.data {
        ArrayData::F32(v) => v.iter().map(|x| x.to_bits()).collect(),
        other => panic!("{other:?}"),
    }
}

/// Runs `text` on the IPU Model with `args`, checks every output against the reference
/// evaluator bit for bit, and returns the run.
fn run_exactly(text: &str, args: &[Literal], tiles: usize) -> ipuxla::device::DeviceRun {
    let m = xla_ir::parse_module(text).unwrap();
    let want = common::leaves(xla_ir::eval::evaluate(&m, args).unwrap());
    let run = ipuxla::device::run_on_ipu_model(&m, &on_tiles(tiles), args).unwrap();
    assert_eq!(run.outputs.len(), want.len());
    for (k, (g, w)) in run.outputs.iter().zip(&want).enumerate() {
        assert_eq!(bits(g), bits(w), "{tiles} tiles, output {k}");
    }
    run
}

/// A stack of three [64,96] layers, each slice scaled by a vector; with `also` the stack is
/// read whole as well (so it keeps the linear layout).
fn stack_module(also: bool) -> String {
    let mut text = String::from(
        "HloModule stack\nENTRY e {\n  w = f32[3,64,96]{2,1,0} parameter(0)\n  \
         v = f32[96]{0} parameter(1)\n  b = f32[64,96]{1,0} broadcast(v), dimensions={1}\n",
    );
    for k in 0..3 {
        text += &format!(
            "  s{k} = f32[1,64,96]{{2,1,0}} slice(w), slice={{[{k}:{}], [0:64], [0:96]}}\n  \
             r{k} = f32[64,96]{{1,0}} reshape(s{k})\n  \
             m{k} = f32[64,96]{{1,0}} multiply(r{k}, b)\n",
            k + 1
        );
    }
    if also {
        text += "  n = f32[3,64,96]{2,1,0} negate(w)\n  \
                 ROOT t = (f32[64,96]{1,0}, f32[64,96]{1,0}, f32[64,96]{1,0}, f32[3,64,96]{2,1,0}) \
                 tuple(m0, m1, m2, n)\n}\n";
    } else {
        text += "  ROOT t = (f32[64,96]{1,0}, f32[64,96]{1,0}, f32[64,96]{1,0}) \
                 tuple(m0, m1, m2)\n}\n";
    }
    text
}

/// The bytes the slices of the stack moved between tiles.
fn slice_bytes(run: &ipuxla::device::DeviceRun) -> u64 {
    let slices: Vec<_> = (run.profile.steps.iter())
        .filter(|s| s.name.starts_with("s") && s.name[1..].parse::<u32>().is_ok())
        .collect();
    assert_eq!(slices.len(), 3, "one step per slice");
    slices.iter().map(|s| s.bytes_moved).sum()
}

#[test]
fn slices_of_a_stack_read_only_in_layers_are_copied_on_their_tiles() {
    let args = [
        f32s(&[3, 64, 96], |i| (i % 251) as f32 * 0.25 - 7.0),
        f32s(&[96], |i| i as f32 * 0.5 - 3.0),
    ];
    for tiles in [1472, 4] {
        let blocked = run_exactly(&stack_module(false), &args, tiles);
        assert_eq!(slice_bytes(&blocked), 0, "{tiles} tiles");
        // Read whole as well, the stack stays linear and its layers move between tiles.
        let linear = run_exactly(&stack_module(true), &args, tiles);
        assert!(slice_bytes(&linear) > 0, "{tiles} tiles");
    }
}

/// Sums over rows of `cols` with init `init`: rows of -0, of mixed signs and of +0 and -0.
fn sum_module(rows: usize, cols: usize, init: &str) -> String {
    format!(
        "HloModule sums\nadd {{\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  \
         ROOT s = f32[] add(a, b)\n}}\nENTRY e {{\n  x = f32[{rows},{cols}]{{1,0}} parameter(0)\n  \
         z = f32[] constant({init})\n  \
         ROOT r = f32[{rows}]{{0}} reduce(x, z), dimensions={{1}}, to_apply=add\n}}\n"
    )
}

#[test]
fn a_folded_init_gives_zero_sums_the_sign_xla_gives_them() {
    // Row r: all -0 when r % 3 == 0, +0 and -0 alternating when r % 3 == 1, else values.
    let value = |cols: usize| {
        move |i: usize| match (i / cols) % 3 {
            0 => -0.0,
            1 if i.is_multiple_of(2) => 0.0,
            1 => -0.0,
            _ => (i % 7) as f32 - 3.0,
        }
    };
    // Rows wholly on a tile (the partials finish it) and rows spread over several tiles (a
    // second stage finishes it), each with an init of -0, +0 and 1.5.
    for (rows, cols) in [(6, 4), (2, 60000)] {
        for init in ["-0", "0", "1.5"] {
            let args = [f32s(&[rows as i64, cols as i64], value(cols))];
            for tiles in [1472, 4] {
                let run = run_exactly(&sum_module(rows, cols, init), &args, tiles);
                let steps: Vec<&str> = (run.profile.steps.iter())
                    .filter(|s| s.kind == ipuxla::runtime::StepKind::Execute)
                    .map(|s| s.name.as_str())
                    .collect();
                assert!(
                    !steps.contains(&"r"),
                    "{rows}x{cols} init {init}, {tiles} tiles: the init has a step: {steps:?}"
                );
                // A tile holding one 82-element stretch of a long row cuts it for its idle
                // workers and combines the pieces on the tile before the rows' partials meet.
                if cols == 60000 && tiles == 1472 {
                    assert!(steps.contains(&"r.pieces"), "{steps:?}");
                }
            }
        }
    }
}

/// `d` (a product split over K) is read only by a bias add, `e` by two element-wise ops
/// (the products differ in shape, so they are not outlined as one function).
const PRODUCTS: &str = r#"HloModule deferred_sums
ENTRY main {
  x = f32[128,1024] parameter(0)
  w = f32[1024,64] parameter(1)
  v = f32[1024,32] parameter(2)
  b = f32[64] parameter(3)
  d = f32[128,64] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bb = f32[128,64] broadcast(b), dimensions={1}
  y = f32[128,64] add(d, bb)
  e = f32[128,32] dot(x, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = f32[128,32] abs(e)
  u = f32[128,32] multiply(e, t)
  ROOT r = (f32[128,64], f32[128,32]) tuple(y, u)
}
"#;

/// A product whose one reader is element-wise sums its K parts in that reader's kernel: no
/// compute set of its own, one superstep fewer; a product read twice keeps its sum. The
/// values are the evaluator's bit for bit (small integers: every sum is exact).
#[test]
fn a_products_k_parts_are_summed_by_its_one_element_wise_reader() {
    let small = |salt: usize| move |i: usize| ((i * 7 + salt) % 5) as f32 - 2.0;
    let args = [
        f32s(&[128, 1024], small(0)),
        f32s(&[1024, 64], small(1)),
        f32s(&[1024, 32], small(2)),
        f32s(&[64], small(3)),
    ];
    let run = run_exactly(PRODUCTS, &args, 1472);
    let steps: Vec<&str> = run.profile.steps.iter().map(|s| s.name.as_str()).collect();
    assert!(
        steps.contains(&"e.sum"),
        "the product read twice is summed on its own (split over K): {steps:?}"
    );
    assert!(!steps.contains(&"d.sum"), "{steps:?}");
    assert!(steps.contains(&"y"), "{steps:?}");
    // `bench`'s host time by family marks the reader that sums the parts (`y`), not the
    // sum on its own (`e.sum`, named for what it is) nor the other element-wise steps.
    let m = xla_ir::parse_module(PRODUCTS).unwrap();
    let options = ipuxla::compiler::PassOptions::default();
    let (mut loaded, _) =
        ipuxla::device::LoadedModule::load(&m, &on_tiles(1472), &options).unwrap();
    loaded.run(&args).unwrap();
    let families =
        ipuxla::bench::HostStepFamily::of(&loaded.host_times(), loaded.engine().executable(), 1);
    let summing: Vec<&str> = (families.iter())
        .filter(|f| f.k_part_sums)
        .map(|f| f.family.as_str())
        .collect();
    assert_eq!(summing, ["y"], "{families:?}");
}

/// Each row of `x` less its maximum, squared: the broadcast of the row maxima is read only
/// by the subtraction (fused into the square), or also returned (`also`).
fn rows_module(also: bool) -> String {
    let root = match also {
        false => "ROOT z = f32[64,512] multiply(y, y)".to_string(),
        true => "z = f32[64,512] multiply(y, y)\n  ROOT r = (f32[64,512], f32[64,512]) tuple(z, b)"
            .to_string(),
    };
    format!(
        "HloModule rows\nmax {{\n  a = f32[] parameter(0)\n  c = f32[] parameter(1)\n  \
         ROOT m = f32[] maximum(a, c)\n}}\nENTRY main {{\n  x = f32[64,512] parameter(0)\n  \
         lowest = f32[] constant(-inf)\n  m = f32[64] reduce(x, lowest), dimensions={{1}}, \
         to_apply=max\n  b = f32[64,512] broadcast(m), dimensions={{0}}\n  \
         y = f32[64,512] subtract(x, b)\n  {root}\n}}\n"
    )
}

/// A broadcast of row maxima read only by an element-wise kernel is read in place: the
/// kernel reads each row's maximum once (a step named after the broadcast moves the rows,
/// not the broadcast), with the evaluator's values bit for bit; returned as well, it is
/// made whole.
#[test]
fn a_broadcast_read_by_one_kernel_is_read_in_place_as_rows() {
    let args = [f32s(&[64, 512], |i| ((i * 13) % 9) as f32 - 4.0)];
    let moved = |also| {
        let run = run_exactly(&rows_module(also), &args, 4);
        let step = run.profile.steps.iter().find(|s| s.name == "b");
        step.unwrap_or_else(|| panic!("a step named b: {:?}", run.profile.steps))
            .bytes_moved
    };
    let (in_place, made) = (moved(false), moved(true));
    assert!(in_place * 64 <= made, "{in_place} bytes against {made}");
}

/// `bench`'s host steps say what a run moves on the host: a stream its tensor's bytes, a
/// transpose its window gathered from the tiles and the bytes it writes, a compute set the
/// bytes its vertices read and write.
#[test]
fn host_steps_count_the_bytes_a_run_copies() {
    let text = "HloModule t\nENTRY e {\n  x = f32[64,128] parameter(0)\n  \
                t = f32[128,64] transpose(x), dimensions={1,0}\n  \
                ROOT n = f32[128,64] negate(t)\n}\n";
    let m = xla_ir::parse_module(text).unwrap();
    let options = ipuxla::compiler::PassOptions::default();
    let (mut loaded, _) =
        ipuxla::device::LoadedModule::load(&m, &on_tiles(1472), &options).unwrap();
    loaded.run(&[f32s(&[64, 128], |i| i as f32)]).unwrap();
    // The last run's times (`host_times`), as `bench` adds them up run by run.
    let families =
        ipuxla::bench::HostStepFamily::of(&loaded.host_times(), loaded.engine().executable(), 1);
    let bytes = |kind: &str, step: &str| {
        let f = (families.iter())
            .find(|f| format!("{:?}", f.kind).eq_ignore_ascii_case(kind) && f.family == step);
        f.unwrap_or_else(|| panic!("no {kind} step {step}: {families:?}"))
            .bytes
    };
    let tensor = (64 * 128 * 4) as f64;
    assert_eq!(bytes("stream", "stream in"), tensor, "{families:?}");
    assert_eq!(bytes("stream", "stream out"), tensor, "{families:?}");
    assert_eq!(bytes("exchange", "t"), 2.0 * tensor, "{families:?}");
    // The negation reads the tensor and writes it: each byte of both once.
    assert_eq!(bytes("compute", "n"), 2.0 * tensor, "{families:?}");
}
