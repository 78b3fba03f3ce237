//! Bad input never panics or hangs: mutated corpus files, every truncation of a file,
//! malformed constructs, and a 50 MB constant all end in a module or a clear error.

use proptest::prelude::*;
use std::path::Path;
use xla_ir::{parse_module, verify};

const MUTATED_FILES: &[&str] = &[
    "seed_vector_add/module.opt.hlo",
    "cond_switch/module.hlo",
    "gather_embedding/module.hlo",
    "pooling/module.hlo",
    "conv2d_dilated_grouped/module.hlo",
    "scatter_add/module.hlo",
    "sort_ops/module.opt.hlo",
    "argmax_argmin/module.hlo",
    "dynamic_slice_update/module.hlo",
    "while_loop_dynamic/module.opt.hlo",
    "pad_ops/module.hlo",
    "slice_concat_reverse/module.hlo",
    "bitcast_convert/module.opt.hlo",
    "convert_types/module.hlo",
    "int32_bitwise_shifts/module.hlo",
    "batched_dot_general/module.hlo",
    "reduce_axes/module.hlo",
    "iota_ops/module.opt.hlo",
    "cnn_train_step/module.hlo",
    "cond_switch/module.opt.hlo",
    "x64_int64/module.hlo",
    "f16_matmul_f32acc/module.hlo",
];

fn read_fixture(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/conformance")
        .join(rel);
    std::fs::read_to_string(path).unwrap()
}

/// Splits text into tokens: runs of name characters, single punctuation, and whitespace.
fn tokens(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let word = |c: char| c.is_alphanumeric() || matches!(c, '_' | '.' | '-' | '%');
    for c in text.chars() {
        match out.last_mut() {
            Some(last) if word(c) && last.chars().all(word) => last.push(c),
            Some(last) if c.is_whitespace() && last.chars().all(char::is_whitespace) => {
                last.push(c)
            }
            _ => out.push(c.to_string()),
        }
    }
    out
}

/// Whatever the input, parsing ends in Ok or Err; a module that parses and verifies
/// prints text that parses back to the same text.
fn check_no_panic(text: &str) {
    if let Ok(module) = parse_module(text)
        && verify(&module).is_ok()
    {
        let printed = module.to_string();
        let again = parse_module(&printed)
            .unwrap_or_else(|e| panic!("reprint fails to parse: {e}\n{printed}"));
        assert_eq!(again.to_string(), printed);
        evaluate_on_zeros(&module);
    }
}

/// Evaluates a verified module on zero arguments: any result or error is fine, a panic is
/// not. Loops are skipped (a mutation can make them infinite) and so are large shapes.
fn evaluate_on_zeros(module: &xla_ir::Module) {
    let small = module.computations().all(|(_, c)| {
        c.instructions().all(|(_, i)| {
            !matches!(i.op, xla_ir::Op::While { .. }) && i.shape.byte_size() < (1 << 22)
        })
    });
    let args: Option<Vec<xla_ir::Literal>> = module
        .entry_computation()
        .parameter_shapes()
        .iter()
        .map(|s| {
            let a = s.as_array()?;
            let data =
                xla_ir::literal::ArrayData::zeros(a.element_type, a.element_count() as usize);
            Some(
                xla_ir::literal::ArrayLiteral::new(a.clone(), data)
                    .ok()?
                    .into(),
            )
        })
        .collect();
    if let (true, Some(args)) = (small, args) {
        let _ = xla_ir::eval::evaluate(module, &args);
    }
}

#[derive(Debug, Clone)]
enum Mutation {
    Delete(usize),
    Duplicate(usize),
    Swap(usize, usize),
    /// Replaces the i-th number with another (reaches shape inference with odd dimensions).
    Renumber(usize, i64),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::Delete),
        any::<usize>().prop_map(Mutation::Duplicate),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::Swap(a, b)),
        (any::<usize>(), -3i64..70).prop_map(|(i, v)| Mutation::Renumber(i, v)),
    ]
}

proptest! {
    #[test]
    fn mutated_corpus_files_parse_or_fail_cleanly(
        file in 0..MUTATED_FILES.len(),
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let mut toks = tokens(&read_fixture(MUTATED_FILES[file]));
        for m in mutations {
            let n = toks.len();
            match m {
                Mutation::Delete(i) => { toks.remove(i % n); }
                Mutation::Duplicate(i) => { let t = toks[i % n].clone(); toks.insert(i % n, t); }
                Mutation::Swap(i, j) => toks.swap(i % n, j % n),
                Mutation::Renumber(i, v) => {
                    let numbers: Vec<usize> = (0..n).filter(|&k| toks[k].parse::<i64>().is_ok()).collect();
                    if !numbers.is_empty() {
                        toks[numbers[i % numbers.len()]] = v.to_string();
                    }
                }
            }
        }
        check_no_panic(&toks.concat());
    }
}

#[test]
fn every_truncation_is_an_error_not_a_panic() {
    let text = read_fixture("seed_vector_add/module.opt.hlo");
    for (end, _) in text.char_indices() {
        let prefix = &text[..end];
        // A prefix that stops right after a complete computation is a valid module.
        if let Err(e) = parse_module(prefix) {
            assert!(e.line >= 1 && e.column >= 1);
        }
        check_no_panic(prefix);
    }
}

fn expect_error(text: &str, needle: &str) {
    let err = parse_module(text)
        .err()
        .unwrap_or_else(|| panic!("expected a parse error containing {needle:?} for:\n{text}"));
    assert!(err.to_string().contains(needle), "{err} lacks {needle:?}");
}

#[test]
fn malformed_constructs_are_named() {
    let m = |body: &str| format!("HloModule m\n\nENTRY e {{\n{body}\n}}\n");
    expect_error(
        &m("  a = f32[2]{0} parameter(0)\n  ROOT b = f32[2]{0} slice(a), slice={[0:2]"),
        "unbalanced '{'",
    );
    expect_error(
        &m("  ROOT a = f32[2]{0} constant({1, 2, 3})"),
        "constant has 3 elements in dimension 0",
    );
    expect_error(
        &m("  ROOT a = u8[] constant(300)"),
        "'300' is out of range for literal's primitive type U8",
    );
    // XLA reads constants whose data a dump elided; computing with one says what to do.
    let elided = parse_module(&m("  ROOT a = f32[2]{0} constant({...})")).unwrap();
    let err = xla_ir::eval::evaluate(&elided, &[]).unwrap_err();
    assert!(err.to_string().contains("elided"), "{err}");
    expect_error(
        &m("  ROOT a = f32[2]{0,1} parameter(0)"),
        "layout {0,1} has 2 entries but the shape has 1",
    );
    expect_error(
        &m("  ROOT a = f32[<=4]{0} parameter(0)"),
        "dynamic dimensions",
    );
    expect_error(
        &m("  ROOT a = q32[2]{0} parameter(0)"),
        "not an element type",
    );
    expect_error(
        &m("  a = f32[] parameter(0)\n  ROOT b = f32[] add(a, a), sharding={bogus}"),
        "expected a sharding",
    );
    expect_error(
        &m("  a = f32[] parameter(0)\n  ROOT b = f32[] compare(a, a), direction=XX"),
        "unknown comparison direction 'XX'",
    );
    expect_error(
        &m("  a = f32[] parameter(0)\n  ROOT b = f32[] negate(a), metadata={op_name=\"x}"),
        "unterminated string",
    );
    expect_error(
        &m("  a = f32[] parameter(0)\n  ROOT a.1 = f32[] negate(a)\n  ROOT a.2 = f32[] negate(a)"),
        "more than one ROOT",
    );
    expect_error(
        "HloModule m\n\nENTRY e {\n  ROOT a = f32[] parameter(0)\n}\nENTRY f {\n  ROOT b = f32[] parameter(0)\n}\n",
        "more than one ENTRY",
    );
    expect_error(
        "HloModule m, entry_computation_layout={(f32[3]{0})->f32[3]{0}}\n\nENTRY e {\n  ROOT a = f32[2]{0} parameter(0)\n}\n",
        "entry_computation_layout does not match",
    );
    expect_error(
        "HloModule m\n\nENTRY e (p: f32[3]) -> f32[3] {\n  ROOT a = f32[2]{0} parameter(0)\n}\n",
        "signature of e says parameter 0 is f32[3]",
    );
    expect_error(
        "HloModule m\n\nENTRY e {\n  ROOT a = f32[] parameter(0)\n}\ne {\n  ROOT b = f32[] parameter(0)\n}\n",
        "defined twice",
    );
    expect_error(
        "HloModule m\n\n/* never closed\nENTRY e {\n",
        "end of input",
    );
}

#[test]
fn verifier_rejects_call_cycles_and_parameter_gaps() {
    let cyclic = "HloModule m\n\nf {\n  p = f32[] parameter(0)\n  ROOT c = f32[] call(p), to_apply=g\n}\n\ng {\n  q = f32[] parameter(0)\n  ROOT d = f32[] call(q), to_apply=f\n}\n\nENTRY e {\n  x = f32[] parameter(0)\n  ROOT y = f32[] call(x), to_apply=f\n}\n";
    let err = verify(&parse_module(cyclic).unwrap()).unwrap_err();
    assert!(err.to_string().contains("cycle"), "{err}");

    let gap =
        "HloModule m\n\nENTRY e {\n  a = f32[] parameter(0)\n  ROOT b = f32[] parameter(2)\n}\n";
    let err = verify(&parse_module(gap).unwrap()).unwrap_err();
    assert!(err.to_string().contains("1 is missing"), "{err}");
}

#[test]
fn a_50_megabyte_constant_parses_in_linear_time() {
    let count = 12_000_000usize;
    let mut text = String::with_capacity(count * 5 + 200);
    text.push_str(&format!(
        "HloModule big\n\nENTRY e {{\n  ROOT c = f32[{count}]{{0}} constant({{"
    ));
    for i in 0..count {
        if i > 0 {
            text.push_str(", ");
        }
        text.push_str(if i % 2 == 0 { "1.5" } else { "-2" });
    }
    text.push_str("})\n}\n");
    assert!(text.len() > 50_000_000);
    let module = parse_module(&text).unwrap();
    verify(&module).unwrap();
    let shape = &module.entry_computation().root_instr().shape;
    assert_eq!(shape.as_array().unwrap().element_count(), count as u64);
    // One element short: a clear error, not a hang.
    let short = text.replacen(&format!("f32[{count}]"), &format!("f32[{}]", count + 1), 1);
    let err = parse_module(&short).unwrap_err();
    assert!(
        err.message
            .contains(&format!("constant has {count} elements")),
        "{err}"
    );
}

#[test]
fn absurd_sizes_are_errors_not_overflows() {
    let big = i64::MAX;
    let cases = [
        format!(
            "HloModule m\n\nENTRY e {{\n  a = f32[{big},{big}]{{1,0}} parameter(0)\n  ROOT b = f32[4]{{0}} reshape(a)\n}}\n"
        ),
        format!(
            "HloModule m\n\nENTRY e {{\n  a = f32[{big}]{{0}} parameter(0)\n  z = f32[] parameter(1)\n  ROOT b = f32[4]{{0}} pad(a, z), padding={big}_{big}_{big}\n}}\n"
        ),
        format!(
            "HloModule m\n\nENTRY e {{\n  a = f32[{big}]{{0}} parameter(0)\n  ROOT b = f32[4]{{0}} concatenate(a, a), dimensions={{0}}\n}}\n"
        ),
        format!(
            "HloModule m\n\nr {{\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}}\n\nENTRY e {{\n  a = f32[{big}]{{0}} parameter(0)\n  z = f32[] parameter(1)\n  ROOT b = f32[4]{{0}} reduce-window(a, z), window={{size={big} stride=1 pad={big}_{big} lhs_dilate={big} rhs_dilate={big}}}, to_apply=r\n}}\n"
        ),
        format!(
            "HloModule m\n\nENTRY e {{\n  ROOT a = f32[{big},{big}]{{1,0}} constant({{ {{1}} }})\n}}\n"
        ),
    ];
    for text in &cases {
        let result = parse_module(text).map(|m| verify(&m));
        assert!(!matches!(result, Ok(Ok(()))), "accepted:\n{text}");
    }
}
