//! XLA semantics the corpus does not pin down, one small module each. Results are compared
//! as printed literals.

use xla_ir::eval::evaluate;
use xla_ir::literal::{ArrayData, ArrayLiteral};
use xla_ir::{ArrayShape, ElementType, Literal, parse_module};

fn f32s(dims: &[i64], values: &[f32]) -> Literal {
    ArrayLiteral::new(
        ArrayShape::new(ElementType::F32, dims),
        ArrayData::F32(values.to_vec()),
    )
    .unwrap()
    .into()
}

fn s32s(dims: &[i64], values: &[i32]) -> Literal {
    ArrayLiteral::new(
        ArrayShape::new(ElementType::S32, dims),
        ArrayData::S32(values.to_vec()),
    )
    .unwrap()
    .into()
}

fn run(body: &str, args: &[Literal]) -> String {
    let text = format!("HloModule t\n\n{body}\n");
    let module = parse_module(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    evaluate(&module, args)
        .unwrap_or_else(|e| panic!("{e}"))
        .to_string()
}

#[test]
fn starts_are_clamped_in_dynamic_slices_and_gathers() {
    let x = f32s(&[5], &[0.0, 1.0, 2.0, 3.0, 4.0]);
    let ds = "ENTRY e {\n  x = f32[5]{0} parameter(0)\n  i = s32[] constant(4)\n  ROOT d = f32[3]{0} dynamic-slice(x, i), dynamic_slice_sizes={3}\n}";
    assert_eq!(run(ds, std::slice::from_ref(&x)), "{2, 3, 4}");
    let dus = "ENTRY e {\n  x = f32[5]{0} parameter(0)\n  u = f32[2]{0} constant({9, 9})\n  i = s32[] constant(-3)\n  ROOT d = f32[5]{0} dynamic-update-slice(x, u, i)\n}";
    assert_eq!(run(dus, std::slice::from_ref(&x)), "{9, 9, 2, 3, 4}");
    let gather = "ENTRY e {\n  x = f32[5]{0} parameter(0)\n  i = s32[2,1]{1,0} constant({ {-2}, {4} })\n  ROOT g = f32[2,2]{1,0} gather(x, i), offset_dims={1}, collapsed_slice_dims={}, start_index_map={0}, index_vector_dim=1, slice_sizes={2}\n}";
    assert_eq!(run(gather, &[x]), "{ { 0, 1 }, { 3, 4 } }");
}

#[test]
fn scatter_skips_windows_out_of_bounds() {
    let body = "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n\nENTRY e {\n  x = f32[4]{0} parameter(0)\n  i = s32[3,1]{1,0} constant({ {1}, {7}, {1} })\n  u = f32[3]{0} constant({10, 20, 30})\n  ROOT s = f32[4]{0} scatter(x, i, u), update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n}";
    assert_eq!(
        run(body, &[f32s(&[4], &[1.0, 1.0, 1.0, 1.0])]),
        "{1, 41, 1, 1}"
    );
}

#[test]
fn bitcast_follows_layouts() {
    // A column-major 2x3 array holds its columns contiguously in memory.
    let body = "ENTRY e {\n  x = f32[2,3]{1,0} parameter(0)\n  c = f32[2,3]{0,1} copy(x)\n  ROOT b = f32[6]{0} bitcast(c)\n}";
    assert_eq!(
        run(body, &[f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])]),
        "{1, 4, 2, 5, 3, 6}"
    );
}

#[test]
fn sort_is_stable_with_any_comparator() {
    let body = "desc {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  i = s32[] parameter(2)\n  j = s32[] parameter(3)\n  ROOT gt = pred[] compare(a, b), direction=GT\n}\n\nENTRY e {\n  k = f32[5]{0} parameter(0)\n  v = s32[5]{0} iota(), iota_dimension=0\n  ROOT s = (f32[5]{0}, s32[5]{0}) sort(k, v), dimensions={0}, is_stable=true, to_apply=desc\n}";
    assert_eq!(
        run(body, &[f32s(&[5], &[1.0, 3.0, 1.0, 3.0, 2.0])]),
        "({3, 3, 2, 1, 1}, {1, 3, 4, 0, 2})"
    );
}

#[test]
fn an_out_of_range_branch_index_runs_the_last_branch() {
    let body = "b0 {\n  x = f32[] parameter(0)\n  ROOT n = f32[] negate(x)\n}\n\nb1 {\n  x = f32[] parameter(0)\n  ROOT a = f32[] add(x, x)\n}\n\nENTRY e {\n  i = s32[] parameter(0)\n  x = f32[] constant(3)\n  ROOT c = f32[] conditional(i, x, x), branch_computations={b0, b1}\n}";
    assert_eq!(run(body, &[s32s(&[], &[7])]), "6");
    assert_eq!(run(body, &[s32s(&[], &[-1])]), "6");
    assert_eq!(run(body, &[s32s(&[], &[0])]), "-3");
}

#[test]
fn reduce_window_skips_padding_and_select_and_scatter_routes_gradients() {
    let body = "max {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT m = f32[] maximum(a, b)\n}\n\nENTRY e {\n  x = f32[4]{0} parameter(0)\n  lo = f32[] constant(-inf)\n  ROOT r = f32[3]{0} reduce-window(x, lo), window={size=2 stride=2 pad=1_1}, to_apply=max\n}";
    assert_eq!(run(body, &[f32s(&[4], &[1.0, 5.0, 2.0, 0.0])]), "{1, 5, 0}");
    let sas = "ge {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT c = pred[] compare(a, b), direction=GE\n}\n\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n\nENTRY e {\n  x = f32[4]{0} parameter(0)\n  g = f32[2]{0} constant({10, 20})\n  z = f32[] constant(0)\n  ROOT s = f32[4]{0} select-and-scatter(x, g, z), window={size=2 stride=2}, select=ge, scatter=add\n}";
    assert_eq!(
        run(sas, &[f32s(&[4], &[1.0, 5.0, 2.0, 2.0])]),
        "{0, 10, 20, 0}"
    );
}

#[test]
fn select_and_scatter_ties_and_swapped_comparisons_agree_across_types() {
    // f32 takes the direct loop, s32 the scalar computations: same routing. The swapped
    // `le(b, a)` is `ge(a, b)`: the first of equal values is kept.
    for (ty, x) in [
        ("f32", f32s(&[6], &[3.0, 3.0, 1.0, 7.0, 7.0, 2.0])),
        ("s32", s32s(&[6], &[3, 3, 1, 7, 7, 2])),
    ] {
        let sas = format!(
            "sel {{\n  a = {ty}[] parameter(0)\n  b = {ty}[] parameter(1)\n  ROOT c = pred[] compare(b, a), direction=LE\n}}\n\nadd {{\n  a = {ty}[] parameter(0)\n  b = {ty}[] parameter(1)\n  ROOT s = {ty}[] add(a, b)\n}}\n\nENTRY e {{\n  x = {ty}[6]{{0}} parameter(0)\n  g = {ty}[3]{{0}} constant({{10, 20, 30}})\n  z = {ty}[] constant(1)\n  ROOT s = {ty}[6]{{0}} select-and-scatter(x, g, z), window={{size=3 stride=2 pad=0_1}}, select=sel, scatter=add\n}}"
        );
        // windows {0,1,2} -> 0, {2,3,4} -> 3, {4,5,pad} -> 4
        assert_eq!(run(&sas, &[x]), "{11, 1, 1, 21, 31, 1}", "{ty}");
    }
}

#[test]
fn batch_grouped_convolution_reads_one_batch_group_per_feature_block() {
    // Input batch 4 in 2 groups; 4 output features in 2 blocks of 2; 1x1 kernel of ones.
    let body = "ENTRY e {\n  x = f32[4,1,1]{2,1,0} parameter(0)\n  k = f32[1,1,4]{2,1,0} constant({ { {1, 1, 1, 1} } })\n  ROOT c = f32[2,1,4]{2,1,0} convolution(x, k), window={size=1}, dim_labels=b0f_0io->b0f, batch_group_count=2\n}";
    // Feature block 0 reads batches 0..2, block 1 reads batches 2..4.
    assert_eq!(
        run(body, &[f32s(&[4, 1, 1], &[1.0, 2.0, 3.0, 4.0])]),
        "{ { { 1, 1, 3, 3 } }, { { 2, 2, 4, 4 } } }"
    );
}

#[test]
fn conversions_saturate_and_topk_orders_nan_first() {
    let body = "ENTRY e {\n  x = f32[4]{0} parameter(0)\n  ROOT c = s8[4]{0} convert(x)\n}";
    assert_eq!(
        run(body, &[f32s(&[4], &[300.0, -300.0, f32::NAN, -1.7])]),
        "{127, -128, 0, -1}"
    );
    let topk = "ENTRY e {\n  x = f32[4]{0} parameter(0)\n  ROOT t = (f32[2]{0}, s32[2]{0}) topk(x), k=2, largest=true\n}";
    assert_eq!(
        run(topk, &[f32s(&[4], &[1.0, f32::NAN, 7.0, 7.0])]),
        "({nan, 7}, {1, 2})"
    );
}

#[test]
fn reduce_precision_rounds_to_bfloat16() {
    let body = "ENTRY e {\n  x = f32[2]{0} parameter(0)\n  ROOT r = f32[2]{0} reduce-precision(x), exponent_bits=8, mantissa_bits=7\n}";
    assert_eq!(
        run(body, &[f32s(&[2], &[1.0 + 1.0 / 256.0, 3.0e38])]),
        "{1, 3.00405527e+38}"
    );
}

#[test]
fn map_applies_a_computation_per_element() {
    let body = "sq {\n  a = f32[] parameter(0)\n  ROOT m = f32[] multiply(a, a)\n}\n\nENTRY e {\n  x = f32[3]{0} parameter(0)\n  ROOT r = f32[3]{0} map(x), dimensions={0}, to_apply=sq\n}";
    assert_eq!(run(body, &[f32s(&[3], &[1.0, -2.0, 3.0])]), "{1, 4, 9}");
}

#[test]
fn wrong_arguments_are_named() {
    let module = parse_module("HloModule t\n\nENTRY e {\n  x = f32[3]{0} parameter(0)\n  ROOT n = f32[3]{0} negate(x)\n}\n").unwrap();
    let err = evaluate(&module, &[f32s(&[2], &[1.0, 2.0])]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "argument 0 (x) must be f32[3]{0}, found f32[2]{0}"
    );
    let err = evaluate(&module, &[]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the entry computation takes 1 arguments, 0 were given"
    );
}

#[test]
fn values_too_large_for_the_host_are_refused_up_front() {
    let module = parse_module("HloModule t\n\nENTRY e {\n  x = f32[] constant(1)\n  ROOT b = f32[1000000,1000000]{1,0} broadcast(x), dimensions={}\n}\n").unwrap();
    let err = evaluate(&module, &[]).unwrap_err();
    assert!(
        err.to_string().contains(
            "instruction b: the value f32[1000000,1000000]{1,0} needs 4000000000000 bytes"
        ),
        "{err}"
    );
}

/// A scatter whose combiner is a single binary op (or takes the update) runs a typed loop;
/// any other combiner, the general one. Both must combine the same elements in the same
/// order: windows with inserted dimensions, the index vector in the middle of the
/// indices, windows that do not fit (skipped) and repeated positions.
#[test]
fn scatters_with_plain_and_general_combiners_agree() {
    let module = |combiner: &str, ty: &str| {
        format!(
            "c {{\n  a = {ty}[] parameter(0)\n  b = {ty}[] parameter(1)\n{combiner}\n}}\n\n\
             ENTRY e {{\n  x = {ty}[4,5,3]{{2,1,0}} parameter(0)\n  i = s32[3,2,2]{{2,1,0}} parameter(1)\n  \
             u = {ty}[3,2,2,3]{{3,2,1,0}} parameter(2)\n  \
             ROOT s = {ty}[4,5,3]{{2,1,0}} scatter(x, i, u), update_window_dims={{2,3}}, inserted_window_dims={{0}}, \
             scatter_dims_to_operand_dims={{0,1}}, index_vector_dim=1, to_apply=c\n}}"
        )
    };
    // Index vectors (dims 0 and 1) at [b, :, k]: in range, repeated, out of range (-1, 4,
    // and a window past the end of dimension 1).
    let idx = s32s(&[3, 2, 2], &[0, 3, 1, 1, 3, 3, 1, 4, -1, 0, 2, 0]);
    let plain = |op: &str, ty: &str| format!("  ROOT r = {ty}[] {op}(a, b)");
    let general =
        |op: &str, ty: &str| format!("  t = {ty}[] {op}(a, b)\n  ROOT r = {ty}[] copy(t)");
    for op in ["add", "maximum", "multiply", "subtract"] {
        let x: Vec<f32> = (0..60).map(|v| (v % 7) as f32 * 0.37 - 1.0).collect();
        let u: Vec<f32> = (0..36).map(|v| (v % 5) as f32 * 1.3 - 2.1).collect();
        let args = [f32s(&[4, 5, 3], &x), idx.clone(), f32s(&[3, 2, 2, 3], &u)];
        let fast = run(&module(&plain(op, "f32"), "f32"), &args);
        assert_eq!(
            fast,
            run(&module(&general(op, "f32"), "f32"), &args),
            "{op}"
        );
        assert_ne!(
            fast,
            run(
                "ENTRY e {\n  ROOT x = f32[4,5,3]{2,1,0} parameter(0)\n}",
                &args[..1]
            ),
            "{op} changes x"
        );
        let xi: Vec<i32> = (0..60).collect();
        let ui: Vec<i32> = (0..36).map(|v| v * 100).collect();
        let args = [s32s(&[4, 5, 3], &xi), idx.clone(), s32s(&[3, 2, 2, 3], &ui)];
        let fast = run(&module(&plain(op, "s32"), "s32"), &args);
        assert_eq!(
            fast,
            run(&module(&general(op, "s32"), "s32"), &args),
            "{op} s32"
        );
    }
    // Taking the update: the last write to a position wins in both.
    let x = vec![0.0f32; 60];
    let u: Vec<f32> = (0..36).map(|v| v as f32).collect();
    let args = [f32s(&[4, 5, 3], &x), idx, f32s(&[3, 2, 2, 3], &u)];
    let second = module("", "f32").replace(
        "  b = f32[] parameter(1)\n",
        "  ROOT b = f32[] parameter(1)",
    );
    let copied = module("  ROOT r = f32[] copy(b)", "f32");
    assert_eq!(run(&second, &args), run(&copied, &args));
}

/// An argmax reducer (value and index pairs: the larger value, the smaller index on ties,
/// NaN winning) folds in lockstep over all groups when it is element-wise; the same
/// reducer behind a `call` folds one scalar at a time. Both must agree, for a reduce and
/// for a reduce-window, on values with ties and NaNs.
#[test]
fn lockstep_and_scalar_folds_of_an_argmax_agree() {
    let reducer = "argmax {\n  a = f32[] parameter(0)\n  i = s32[] parameter(1)\n  b = f32[] parameter(2)\n  j = s32[] parameter(3)\n  \
        gt = pred[] compare(a, b), direction=GT\n  nan = pred[] compare(a, a), direction=NE\n  eq = pred[] compare(a, b), direction=EQ\n  \
        lt = pred[] compare(i, j), direction=LT\n  tie = pred[] and(eq, lt)\n  g = pred[] or(gt, nan)\n  keep = pred[] or(g, tie)\n  \
        v = f32[] select(keep, a, b)\n  k = s32[] select(keep, i, j)\n  ROOT t = (f32[], s32[]) tuple(v, k)\n}\n\n\
        called {\n  a = f32[] parameter(0)\n  i = s32[] parameter(1)\n  b = f32[] parameter(2)\n  j = s32[] parameter(3)\n  \
        ROOT c = (f32[], s32[]) call(a, i, b, j), to_apply=argmax\n}";
    let entry = |reduce: &str, with: &str| {
        format!(
            "{reducer}\n\nENTRY e {{\n  x = f32[6,8]{{1,0}} parameter(0)\n  ix = s32[6,8]{{1,0}} iota(), iota_dimension=1\n  \
             lo = f32[] constant(-inf)\n  z = s32[] constant(0)\n  {}\n}}",
            reduce.replace("WITH", with)
        )
    };
    let reduce = "ROOT r = (f32[6], s32[6]) reduce(x, ix, lo, z), dimensions={1}, to_apply=WITH";
    let window = "ROOT r = (f32[3,4], s32[3,4]) reduce-window(x, ix, lo, z), window={size=2x2 stride=2x2}, to_apply=WITH";
    let values: Vec<f32> = (0..48)
        .map(|v| match v % 11 {
            3 => f32::NAN,
            5 | 6 => 2.0,
            _ => (v % 7) as f32 - 3.0,
        })
        .collect();
    let args = [f32s(&[6, 8], &values)];
    for op in [reduce, window] {
        let lockstep = run(&entry(op, "argmax"), &args);
        assert_eq!(lockstep, run(&entry(op, "called"), &args), "{op}");
        assert!(
            lockstep.contains("nan") || lockstep.contains("NaN"),
            "{lockstep}"
        );
    }
    // A reducer whose result depends on the order it sees the elements in (and holds a
    // constant, which becomes a vector in lockstep).
    let decay = "decay {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  h = f32[] constant(0.5)\n  \
        m = f32[] multiply(a, h)\n  ROOT s = f32[] add(m, b)\n}\n\n\
        called {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT c = f32[] call(a, b), to_apply=decay\n}";
    let entry = |reduce: &str, with: &str| {
        format!(
            "{decay}\n\nENTRY e {{\n  x = f32[6,8]{{1,0}} parameter(0)\n  z = f32[] constant(1)\n  {}\n}}",
            reduce.replace("WITH", with)
        )
    };
    let reduce = "ROOT r = f32[6] reduce(x, z), dimensions={1}, to_apply=WITH";
    let window =
        "ROOT r = f32[3,4] reduce-window(x, z), window={size=2x2 stride=2x2}, to_apply=WITH";
    let ramp: Vec<f32> = (0..48).map(|v| v as f32 * 0.25).collect();
    let args = [f32s(&[6, 8], &ramp)];
    for op in [reduce, window] {
        let lockstep = run(&entry(op, "decay"), &args);
        assert_eq!(lockstep, run(&entry(op, "called"), &args), "{op}");
    }
}
