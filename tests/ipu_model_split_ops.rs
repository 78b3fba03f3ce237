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

/// s32 values of `dims`: `seed` times each element's position, wrapping, shifted right.
fn ints(dims: &[i64], seed: i32) -> Literal {
    let n: i64 = dims.iter().product();
    Literal::Array(ArrayLiteral {
        shape: ArrayShape::new(ElementType::S32, dims),
        data: ArrayData::S32((0..n as i32).map(|v| v.wrapping_mul(seed) >> 3).collect()),
    })
}

/// The f32 elements of a result and of the evaluator's.
fn f32_results<'a>(got: &'a ArrayLiteral, want: &'a Literal, what: &str) -> (&'a [f32], &'a [f32]) {
    let Literal::Array(want) = want else {
        panic!("{what}: an array result");
    };
    let (ArrayData::F32(got), ArrayData::F32(want)) = (&got.data, &want.data) else {
        panic!("{what}: f32 results");
    };
    (got, want)
}

/// Every element of `got` within 1e-5 (relative, absolute below 1) of the evaluator's `want`.
fn assert_close(got: &ArrayLiteral, want: &Literal, what: &str) {
    let (got, want) = f32_results(got, want, what);
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-5 * w.abs().max(1.0),
            "{what}, element {i}: {g} vs {w}"
        );
    }
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
    let want = xla_ir::eval::evaluate(&module, &inputs).unwrap();
    assert_close(&run.outputs[0], &want, "pool");
}

/// Window ops split along their windowed dimensions too: a strided, padded convolution
/// cut into bands of output rows (each reading the input rows its windows cover, padded
/// where they leave the input), a max pool and its gradient (select-and-scatter) cut where
/// their windows do not overlap (an odd number of columns: the last is in no window), and
/// a reduce-window whose windows leave gaps.
const WINDOWED: &str = r#"HloModule windowed

max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}

ge {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=GE
}

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[2,33,29,3]{3,2,1,0} parameter(0)
  k = f32[3,3,3,8]{3,2,1,0} parameter(1)
  conv = f32[2,17,16,8]{3,2,1,0} convolution(x, k), window={size=3x3 stride=2x2 pad=1_1x2_2}, dim_labels=b01f_01io->b01f
  ninf = f32[] constant(-inf)
  pool = f32[2,8,8,8]{3,2,1,0} reduce-window(conv, ninf), window={size=1x2x2x1 stride=1x2x2x1}, to_apply=max
  zero = f32[] constant(0)
  grad = f32[2,17,16,8]{3,2,1,0} select-and-scatter(conv, pool, zero), window={size=1x2x2x1 stride=1x2x2x1}, select=ge, scatter=add
  gaps = f32[2,17,5,8]{3,2,1,0} reduce-window(conv, ninf), window={size=1x1x2x1 stride=1x1x3x1}, to_apply=max
  ROOT out = (f32[2,17,16,8]{3,2,1,0}, f32[2,8,8,8]{3,2,1,0}, f32[2,17,16,8]{3,2,1,0}, f32[2,17,5,8]{3,2,1,0}) tuple(conv, pool, grad, gaps)
}
"#;

#[test]
fn window_ops_split_along_their_windows_match_the_evaluator() {
    let module = xla_ir::parse_module(WINDOWED).unwrap();
    let inputs = vec![values(&[2, 33, 29, 3], 3), values(&[3, 3, 3, 8], 4)];
    let run = ipuxla::device::run_on_ipu_model(&module, &IpuConfig::default(), &inputs).unwrap();
    for op in ["conv", "pool", "grad", "gaps"] {
        let step = (run.profile.steps.iter())
            .find(|s| s.name == op)
            .unwrap_or_else(|| panic!("{op} computes"));
        assert!(
            step.tiles > 2,
            "{op}: split beyond its batch of 2 ({} tiles)",
            step.tiles
        );
    }
    let Literal::Tuple(want) = xla_ir::eval::evaluate(&module, &inputs).unwrap() else {
        panic!("a tuple result");
    };
    assert_eq!(run.outputs.len(), want.len());
    for (k, (got, want)) in run.outputs.iter().zip(&want).enumerate() {
        assert_close(got, want, &format!("output {k}"));
    }
}

/// Convolutions of random windows (sizes, strides, padding, window dilation; inputs large
/// enough that bands of output rows are offered) split over tiles match the evaluator.
#[test]
fn random_windowed_convolutions_split_in_bands_match_the_evaluator() {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut below = |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    for case in 0..24 {
        // Per spatial dimension: (input, window size, stride, dilation, pad low, pad high).
        let spatial: Vec<[u64; 6]> = (0..2)
            .map(|_| {
                let (size, stride, dilation) = (1 + below(3), 1 + below(2), 1 + below(2));
                let span = (size - 1) * dilation + 1;
                [
                    4 * span + below(9),
                    size,
                    stride,
                    dilation,
                    below(span),
                    below(span),
                ]
            })
            .collect();
        let out = |[n, size, stride, dilation, low, high]: [u64; 6]| {
            (n + low + high - ((size - 1) * dilation + 1)) / stride + 1
        };
        let both = |f: &dyn Fn([u64; 6]) -> String| format!("{}x{}", f(spatial[0]), f(spatial[1]));
        let (batch, c_in, c_out) = (1 + below(2), 1 + below(3), 1 + below(5));
        let (x, k) = (
            [batch, spatial[0][0], spatial[1][0], c_in],
            [spatial[0][1], spatial[1][1], c_in, c_out],
        );
        let list = |d: &[u64]| d.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        let text = format!(
            "HloModule band\n\nENTRY main {{\n  x = f32[{}]{{3,2,1,0}} parameter(0)\n  k = f32[{}]{{3,2,1,0}} parameter(1)\n  ROOT y = f32[{batch},{},{},{c_out}]{{3,2,1,0}} convolution(x, k), window={{size={} stride={} pad={} rhs_dilate={}}}, dim_labels=b01f_01io->b01f\n}}\n",
            list(&x),
            list(&k),
            out(spatial[0]),
            out(spatial[1]),
            both(&|d| d[1].to_string()),
            both(&|d| d[2].to_string()),
            both(&|d| format!("{}_{}", d[4], d[5])),
            both(&|d| d[3].to_string()),
        );
        let module =
            xla_ir::parse_module(&text).unwrap_or_else(|e| panic!("case {case}: {e}\n{text}"));
        let as_dims = |d: &[u64]| d.iter().map(|&v| v as i64).collect::<Vec<_>>();
        let inputs = vec![values(&as_dims(&x), case), values(&as_dims(&k), case + 100)];
        let run = ipuxla::device::run_on_ipu_model(&module, &IpuConfig::default(), &inputs)
            .unwrap_or_else(|e| panic!("case {case}: {e:#}\n{text}"));
        let step = (run.profile.steps.iter())
            .find(|s| s.name == "y")
            .expect("y computes");
        assert!(
            step.tiles as u64 > batch * c_out,
            "case {case}: bands of rows too ({} tiles)\n{text}",
            step.tiles
        );
        let want = xla_ir::eval::evaluate(&module, &inputs).unwrap();
        assert_close(&run.outputs[0], &want, &format!("case {case}\n{text}"));
    }
}

/// A weight gradient (the batch is the convolution's input features, the result smaller
/// than either operand) splits the sum over the batch too: the parts' partial results are
/// stacked and summed (`w.0.sum`), and match the evaluator.
#[test]
fn a_weight_gradient_splits_its_sum_and_adds_the_partial_results() {
    let text = "HloModule weight_gradient\n\nENTRY main {\n  x = f32[16,12,12,3]{3,2,1,0} parameter(0)\n  g = f32[16,10,10,4]{3,2,1,0} parameter(1)\n  ROOT w = f32[3,3,3,4]{3,2,1,0} convolution(x, g), window={size=10x10}, dim_labels=f01b_i01o->01bf\n}\n";
    let module = xla_ir::parse_module(text).unwrap();
    let inputs = vec![values(&[16, 12, 12, 3], 7), values(&[16, 10, 10, 4], 8)];
    let run = ipuxla::device::run_on_ipu_model(&module, &IpuConfig::default(), &inputs).unwrap();
    assert!(
        run.profile.steps.iter().any(|s| s.name == "w.0.sum"),
        "the partial results are summed"
    );
    let want = xla_ir::eval::evaluate(&module, &inputs).unwrap();
    assert_close(&run.outputs[0], &want, "w");
}

/// A scatter of 3 000 windows of 6 elements into f32[24,10,6] (indices address the first
/// two dimensions, some out of range, many repeated), as `combiner` combines them.
fn scatter_module(ty: &str, combiner: &str) -> String {
    format!(
        "HloModule scatter\n\nc {{\n  a = {ty}[] parameter(0)\n  b = {ty}[] parameter(1)\n{combiner}\n}}\n\n\
         ENTRY main {{\n  x = {ty}[24,10,6]{{2,1,0}} parameter(0)\n  i = s32[3000,2]{{1,0}} parameter(1)\n  \
         u = {ty}[3000,6]{{1,0}} parameter(2)\n  ROOT s = {ty}[24,10,6]{{2,1,0}} scatter(x, i, u), \
         update_window_dims={{1}}, inserted_window_dims={{0,1}}, scatter_dims_to_operand_dims={{0,1}}, \
         index_vector_dim=1, to_apply=c\n}}\n"
    )
}

fn scatter_indices() -> Literal {
    let data = (0..6000u32)
        .map(|i| {
            let h = i.wrapping_mul(2_654_435_761) >> 16;
            if i % 2 == 0 {
                (h % 28) as i32 - 2
            } else {
                (h % 12) as i32 - 1
            }
        })
        .collect();
    Literal::Array(ArrayLiteral {
        shape: ArrayShape::new(ElementType::S32, &[3000, 2]),
        data: ArrayData::S32(data),
    })
}

/// Added updates are cut into groups applied on separate tiles (the identity under the
/// later groups) and the partial results summed; the sum matches the evaluator's, exactly
/// for integers. Assigned ones are only cut by slice, so the last write wins as in order.
#[test]
fn scatters_split_by_slice_and_by_group_match_the_evaluator() {
    let config = IpuConfig::default();
    let sum = "  ROOT r = TY[] add(a, b)";
    let module = xla_ir::parse_module(&scatter_module("f32", &sum.replace("TY", "f32"))).unwrap();
    let inputs = vec![
        values(&[24, 10, 6], 3),
        scatter_indices(),
        values(&[3000, 6], 4),
    ];
    let run = ipuxla::device::run_on_ipu_model(&module, &config, &inputs).unwrap();
    let has = |run: &ipuxla::device::DeviceRun, name: &str| {
        run.profile.steps.iter().any(|s| s.name == name)
    };
    assert!(
        has(&run, "s.sum") && has(&run, "s.identity"),
        "groups of updates, summed"
    );
    let want = xla_ir::eval::evaluate(&module, &inputs).unwrap();
    assert_close(&run.outputs[0], &want, "f32 add");

    let s32 = xla_ir::parse_module(&scatter_module("s32", &sum.replace("TY", "s32"))).unwrap();
    let inputs = vec![
        ints(&[24, 10, 6], 77_777),
        scatter_indices(),
        ints(&[3000, 6], 1_234_567),
    ];
    let run = ipuxla::device::run_on_ipu_model(&s32, &config, &inputs).unwrap();
    assert!(has(&run, "s.sum"), "integer additions are grouped too");
    let Literal::Array(want) = xla_ir::eval::evaluate(&s32, &inputs).unwrap() else {
        panic!("an array result")
    };
    assert_eq!(run.outputs[0].data, want.data, "s32 add, exactly");

    let assign = xla_ir::parse_module(&scatter_module("f32", "  ROOT r = f32[] copy(b)")).unwrap();
    let inputs = vec![
        values(&[24, 10, 6], 5),
        scatter_indices(),
        values(&[3000, 6], 6),
    ];
    let run = ipuxla::device::run_on_ipu_model(&assign, &config, &inputs).unwrap();
    assert!(!has(&run, "s.sum"), "assignments are not grouped");
    assert!(has(&run, "s.chunk0"), "split over tiles");
    let Literal::Array(want) = xla_ir::eval::evaluate(&assign, &inputs).unwrap() else {
        panic!("an array result")
    };
    assert_eq!(run.outputs[0].data, want.data, "f32 assignment, exactly");
}

/// Indices `n` of `[n, width]`: component `c` of row `i` spread over `0..range[c]`, and
/// every seventh row out of range on both sides (gathers clamp).
fn gather_indices(n: usize, ranges: &[i32]) -> Literal {
    let width = ranges.len();
    let data = (0..n * width)
        .map(|k| {
            let (i, c) = (k / width, k % width);
            let h = ((k as u32).wrapping_mul(2_654_435_761) >> 8) as i32;
            match i % 7 {
                3 => -5,
                5 => ranges[c] + 4,
                _ => h.rem_euclid(ranges[c]),
            }
        })
        .collect();
    Literal::Array(ArrayLiteral {
        shape: ArrayShape::new(ElementType::S32, &[n as i64, width as i64]),
        data: ArrayData::S32(data),
    })
}

/// A gather copies elements: its results must be the evaluator's bit for bit.
fn assert_same_bits(got: &ArrayLiteral, want: &Literal, what: &str) {
    let (got, want) = f32_results(got, want, what);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(got), bits(want), "{what}");
}

/// An embedding table of 3 MB does not fit a tile (624 KiB): the lookup's parts each hold
/// a block of the table's columns, as PopLibs' embedding plan splits the unsliced
/// dimension, instead of every part receiving the whole table (which ran out of memory).
#[test]
fn a_gather_from_a_table_larger_than_a_tile_cuts_the_table_into_column_blocks() {
    let module = xla_ir::parse_module(
        "HloModule embedding\n\nENTRY main {\n  table = f32[3000,256]{1,0} parameter(0)\n  \
         ids = s32[96,1]{1,0} parameter(1)\n  ROOT rows = f32[96,256]{1,0} gather(table, ids), \
         offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, \
         slice_sizes={1,256}\n}\n",
    )
    .unwrap();
    let inputs = vec![values(&[3000, 256], 7), gather_indices(96, &[3000])];
    let run = ipuxla::device::run_on_ipu_model(&module, &IpuConfig::default(), &inputs).unwrap();
    let tile_bytes = 624 * 1024;
    let peak = run.profile.peak_tile().unwrap().bytes_used;
    assert!(
        peak < tile_bytes / 2,
        "no tile holds much of the table: {peak} B"
    );
    let want = xla_ir::eval::evaluate(&module, &inputs).unwrap();
    assert_same_bits(&run.outputs[0], &want, "rows");
}

/// Only slice dimensions taken whole are cut: here the table's last dimension, while the
/// middle one is sliced two of three wide from a clamped start.
#[test]
fn a_gather_cut_by_columns_keeps_the_other_slice_dimensions_and_clamping() {
    let module = xla_ir::parse_module(
        "HloModule gather3\n\nENTRY main {\n  table = f32[400,3,200]{2,1,0} parameter(0)\n  \
         ids = s32[50,2]{1,0} parameter(1)\n  ROOT g = f32[50,2,200]{2,1,0} gather(table, ids), \
         offset_dims={1,2}, collapsed_slice_dims={0}, start_index_map={0,1}, index_vector_dim=1, \
         slice_sizes={1,2,200}\n}\n",
    )
    .unwrap();
    let inputs = vec![values(&[400, 3, 200], 8), gather_indices(50, &[400, 3])];
    let config = IpuConfig::default();
    let run = ipuxla::device::run_on_ipu_model(&module, &config, &inputs).unwrap();
    let want = xla_ir::eval::evaluate(&module, &inputs).unwrap();
    assert_same_bits(&run.outputs[0], &want, "g");
}

/// An embedding's gradient: 700 rows of 64 added into a 3000x64 table. The table's
/// columns are cut into blocks (each part receiving only its block of every row), besides
/// its rows into slices and the rows of updates into groups; the sums match the
/// evaluator's, exactly for integers.
#[test]
fn an_embedding_gradient_cut_into_column_blocks_matches_the_evaluator() {
    let module = |ty: &str| {
        let text = "HloModule embedding_grad\n\nadd {\n  a = TY[] parameter(0)\n  \
            b = TY[] parameter(1)\n  ROOT r = TY[] add(a, b)\n}\n\nENTRY main {\n  \
            table = TY[3000,64]{1,0} parameter(0)\n  ids = s32[700,1]{1,0} parameter(1)\n  \
            grads = TY[700,64]{1,0} parameter(2)\n  ROOT t = TY[3000,64]{1,0} scatter(table, \
            ids, grads), update_window_dims={1}, inserted_window_dims={0}, \
            scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n}\n";
        xla_ir::parse_module(&text.replace("TY", ty)).unwrap()
    };
    let config = IpuConfig::default();
    let ids = gather_indices(700, &[3000]);
    let f32s = module("f32");
    let inputs = vec![values(&[3000, 64], 9), ids.clone(), values(&[700, 64], 10)];
    let run = ipuxla::device::run_on_ipu_model(&f32s, &config, &inputs).unwrap();
    let want = xla_ir::eval::evaluate(&f32s, &inputs).unwrap();
    assert_close(&run.outputs[0], &want, "f32 gradient");

    let s32s = module("s32");
    let inputs = vec![ints(&[3000, 64], 54_321), ids, ints(&[700, 64], 98_765)];
    let run = ipuxla::device::run_on_ipu_model(&s32s, &config, &inputs).unwrap();
    let Literal::Array(want) = xla_ir::eval::evaluate(&s32s, &inputs).unwrap() else {
        panic!("an array result")
    };
    assert_eq!(run.outputs[0].data, want.data, "s32 gradient, exactly");
}

/// A dynamic slice of rows from a table larger than a tile, and a dynamic update of a row
/// of a 4 MB cache (a KV cache, a scan's stacked results): parts each hold a block of the
/// columns, which every slice takes whole, instead of one tile holding all (which ran out
/// of memory). Starts out of range clamp as XLA clamps them.
#[test]
fn dynamic_slices_and_updates_of_arrays_larger_than_a_tile_cut_their_columns() {
    let config = IpuConfig::default();
    let scalar = |v: i32| {
        Literal::Array(ArrayLiteral {
            shape: ArrayShape::new(ElementType::S32, &[]),
            data: ArrayData::S32(vec![v]),
        })
    };
    let slice = xla_ir::parse_module(
        "HloModule ds\n\nENTRY main {\n  table = f32[3000,256]{1,0} parameter(0)\n  \
         i = s32[] parameter(1)\n  z = s32[] constant(0)\n  ROOT rows = f32[4,256]{1,0} \
         dynamic-slice(table, i, z), dynamic_slice_sizes={4,256}\n}\n",
    )
    .unwrap();
    for start in [17, 2999, -3] {
        let inputs = vec![values(&[3000, 256], 11), scalar(start)];
        let run = ipuxla::device::run_on_ipu_model(&slice, &config, &inputs).unwrap();
        let want = xla_ir::eval::evaluate(&slice, &inputs).unwrap();
        assert_same_bits(&run.outputs[0], &want, &format!("rows from {start}"));
    }
    let update = xla_ir::parse_module(
        "HloModule dus\n\nENTRY main {\n  cache = f32[2048,512]{1,0} parameter(0)\n  \
         i = s32[] parameter(1)\n  z = s32[] constant(0)\n  row = f32[1,512]{1,0} parameter(2)\n  \
         ROOT c = f32[2048,512]{1,0} dynamic-update-slice(cache, row, i, z)\n}\n",
    )
    .unwrap();
    for start in [1000, 5000] {
        let inputs = vec![
            values(&[2048, 512], 12),
            scalar(start),
            values(&[1, 512], 13),
        ];
        let run = ipuxla::device::run_on_ipu_model(&update, &config, &inputs).unwrap();
        let want = xla_ir::eval::evaluate(&update, &inputs).unwrap();
        assert_same_bits(&run.outputs[0], &want, &format!("cache row {start}"));
    }
}

/// A dynamic slice and a dynamic update that start at run time along two dimensions of an
/// array larger than a tile (a `[3,8,20]` block of a `[500,8,200]` f32 array): the
/// `dynamic-slice-splitter` pass takes one dimension at a time, as PopLibs does, so each op
/// splits over the others (the update ran out of memory on eight tiles of 400 KB; the slice
/// held 400 KB a tile). Starts in range, past the end and negative clamp as XLA's; s32 and
/// u32 starts; on the full IPU and on 4 tiles (out of core).
#[test]
fn slices_and_updates_starting_along_several_dimensions_take_one_at_a_time() {
    let module = |ty: &str| {
        xla_ir::parse_module(&format!(
            "HloModule two\n\nENTRY main {{\n  t = f32[500,8,200]{{2,1,0}} parameter(0)\n  \
             a = {ty}[] parameter(1)\n  c = {ty}[] parameter(2)\n  u = f32[3,8,20]{{2,1,0}} parameter(3)\n  \
             z = {ty}[] constant(0)\n  \
             s = f32[3,8,20]{{2,1,0}} dynamic-slice(t, a, z, c), dynamic_slice_sizes={{3,8,20}}\n  \
             d = f32[500,8,200]{{2,1,0}} dynamic-update-slice(t, u, a, z, c)\n  \
             ROOT r = (f32[3,8,20]{{2,1,0}}, f32[500,8,200]{{2,1,0}}) tuple(s, d)\n}}\n"
        ))
        .unwrap()
    };
    let start = |ty: ElementType, v: i64| {
        let data = match ty {
            ElementType::U32 => ArrayData::U32(vec![v as u32]),
            _ => ArrayData::S32(vec![v as i32]),
        };
        Literal::Array(ArrayLiteral {
            shape: ArrayShape::new(ty, &[]),
            data,
        })
    };
    let mut four = IpuConfig::default();
    four.ipu_model.tiles_per_ipu = 4;
    let cases = [
        (ElementType::S32, 17, 150, IpuConfig::default()),
        (ElementType::S32, 499, -5, IpuConfig::default()),
        (ElementType::U32, 3, 199, IpuConfig::default()),
        (ElementType::S32, 250, 90, four),
    ];
    for (ty, a, c, config) in cases {
        let m = module(if ty == ElementType::U32 { "u32" } else { "s32" });
        let (optimised, report) =
            ipuxla::compiler::optimise(&m, &config, &Default::default()).unwrap();
        let notes: Vec<&String> = report.passes.iter().flat_map(|p| &p.notes).collect();
        assert!(
            notes
                .iter()
                .any(|n| n.contains("2 dynamic slice(s) or update(s) split")),
            "{notes:?}\n{optimised}"
        );
        let inputs = vec![
            values(&[500, 8, 200], 21),
            start(ty, a),
            start(ty, c),
            values(&[3, 8, 20], 22),
        ];
        let run = ipuxla::device::run_on_ipu_model(&m, &config, &inputs).unwrap();
        let Literal::Tuple(want) = xla_ir::eval::evaluate(&m, &inputs).unwrap() else {
            panic!("a tuple result");
        };
        let what = format!(
            "{ty:?} starts {a}, {c} on {} tiles",
            config.ipu_model.tiles_per_ipu
        );
        assert_same_bits(&run.outputs[0], &want[0], &format!("slice, {what}"));
        assert_same_bits(&run.outputs[1], &want[1], &format!("update, {what}"));
        if config.ipu_model.tiles_per_ipu == 0 {
            let peak = run.profile.peak_tile().unwrap().bytes_used;
            assert!(peak < 64 * 1024, "{what}: peak tile {peak} B");
        }
    }
}

/// A row added into a table larger than a tile by one index of no batch dimension (a scalar
/// `s32[]`, the vector dimension implicit, as `x.at[i].add(row)` writes it): the scatter
/// splits over slices of the table like one with a batch of indices (it ran on one tile,
/// out of memory, and an `s32[1]` index panicked the planner).
#[test]
fn a_scatter_of_one_index_into_a_table_larger_than_a_tile_is_split() {
    let config = IpuConfig::default();
    let module = xla_ir::parse_module(
        "HloModule s\n\nadd {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  \
         ROOT s = f32[] add(x, y)\n}\n\nENTRY main {\n  table = f32[3000,256]{1,0} parameter(0)\n  \
         i = s32[] parameter(1)\n  row = f32[256]{0} parameter(2)\n  \
         ROOT s = f32[3000,256]{1,0} scatter(table, i, row), update_window_dims={0}, \
         inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=0, \
         to_apply=add\n}\n",
    )
    .unwrap();
    for at in [0, 1777, 2999, 3000] {
        let inputs = vec![
            values(&[3000, 256], 21),
            Literal::Array(ArrayLiteral {
                shape: ArrayShape::new(ElementType::S32, &[]),
                data: ArrayData::S32(vec![at]),
            }),
            values(&[256], 22),
        ];
        let run = ipuxla::device::run_on_ipu_model(&module, &config, &inputs).unwrap();
        let want = xla_ir::eval::evaluate(&module, &inputs).unwrap();
        assert_same_bits(&run.outputs[0], &want, &format!("row added at {at}"));
    }
}

/// A gather and a scatter with batching dimensions (as `jnp.take_along_axis` and its
/// gradient write them) on an operand larger than a tile: parts take blocks of the batch
/// from the operand and the indices (and updates) alike, so every index still reads or
/// writes its own batch (both ran on one tile, out of memory).
#[test]
fn gathers_and_scatters_with_batching_dimensions_split_by_batch() {
    let config = IpuConfig::default();
    let module = xla_ir::parse_module(
        "HloModule batched\n\nadd {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  \
         ROOT s = f32[] add(x, y)\n}\n\nENTRY main {\n  t = f32[8,500,64]{2,1,0} parameter(0)\n  \
         i = s32[8,3,1]{2,1,0} parameter(1)\n  u = f32[8,3,64]{2,1,0} parameter(2)\n  \
         g = f32[8,3,64]{2,1,0} gather(t, i), offset_dims={2}, collapsed_slice_dims={1}, \
         start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, \
         index_vector_dim=2, slice_sizes={1,1,64}\n  \
         s = f32[8,500,64]{2,1,0} scatter(t, i, u), update_window_dims={2}, \
         inserted_window_dims={1}, scatter_dims_to_operand_dims={1}, input_batching_dims={0}, \
         scatter_indices_batching_dims={0}, index_vector_dim=2, to_apply=add\n  \
         ROOT r = (f32[8,3,64]{2,1,0}, f32[8,500,64]{2,1,0}) tuple(g, s)\n}\n",
    )
    .unwrap();
    let rows: Vec<i32> = (0..24)
        .map(|k| [3, 499, -2, 250, 500, 7][k % 6] + k as i32)
        .collect();
    let inputs = vec![
        values(&[8, 500, 64], 31),
        Literal::Array(ArrayLiteral {
            shape: ArrayShape::new(ElementType::S32, &[8, 3, 1]),
            data: ArrayData::S32(rows),
        }),
        values(&[8, 3, 64], 32),
    ];
    let run = ipuxla::device::run_on_ipu_model(&module, &config, &inputs).unwrap();
    let Literal::Tuple(want) = xla_ir::eval::evaluate(&module, &inputs).unwrap() else {
        panic!("a tuple result");
    };
    assert_same_bits(&run.outputs[0], &want[0], "the batched gather");
    assert_same_bits(&run.outputs[1], &want[1], "the batched scatter");
}
