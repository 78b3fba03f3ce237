//! The runtime's layers, checked from its source: dependencies run exec → model → program
//! → device only, no two files import each other (directly or round a circle), and the
//! executor neither costs a step nor builds a step's profile (the model does both).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every source file, as its path under `src/` (`model/cost.rs`).
fn files() -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&src(), &mut out);
    let mut names: Vec<String> = out
        .iter()
        .map(|p| {
            p.strip_prefix(src())
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/")
        })
        .collect();
    names.sort();
    names
}

/// The code of a file without comments (doc links name other modules without using them).
fn code(file: &str) -> String {
    let text = std::fs::read_to_string(src().join(file)).unwrap();
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `crate::...` path a file's code names, use trees expanded
/// (`use crate::a::{b::C, d}` names `a::b::C` and `a::d`).
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let tokens = tokenize(code);
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if tokens[i] == "crate" && tokens.get(i + 1).is_some_and(|t| t == "::") {
            let mut prefix = Vec::new();
            i = tree(&tokens, i + 2, &mut prefix, &mut out);
        } else {
            i += 1;
        }
    }
    out
}

fn tokenize(code: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push(chars[start..i].iter().collect());
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            tokens.push("::".into());
            i += 2;
        } else {
            if !c.is_whitespace() {
                tokens.push(c.to_string());
            }
            i += 1;
        }
    }
    tokens
}

/// Reads a path or use tree from `tokens[i]` on, after `prefix`; pushes every full path.
fn tree(
    tokens: &[String],
    mut i: usize,
    prefix: &mut Vec<String>,
    out: &mut Vec<Vec<String>>,
) -> usize {
    let depth = prefix.len();
    loop {
        match tokens.get(i).map(String::as_str) {
            Some("{") => {
                i += 1;
                loop {
                    i = tree(tokens, i, prefix, out);
                    match tokens.get(i).map(String::as_str) {
                        Some(",") => i += 1,
                        Some("}") => {
                            i += 1;
                            break;
                        }
                        _ => break,
                    }
                    if tokens.get(i).map(String::as_str) == Some("}") {
                        i += 1;
                        break;
                    }
                }
                prefix.truncate(depth);
                return i;
            }
            Some(t) if t.chars().all(|c| c.is_alphanumeric() || c == '_') => {
                prefix.push(t.to_string());
                i += 1;
                if tokens.get(i).map(String::as_str) == Some("::") {
                    i += 1;
                    continue;
                }
                out.push(prefix.clone());
                prefix.truncate(depth);
                return i;
            }
            _ => {
                if prefix.len() > depth {
                    out.push(prefix.clone());
                }
                prefix.truncate(depth);
                return i;
            }
        }
    }
}

/// The file a path's module lives in: the longest prefix that is a file (`a/b.rs` or
/// `a/b/mod.rs`); `lib.rs` for a root item.
fn file_of(path: &[String], files: &BTreeSet<String>) -> String {
    for n in (1..=path.len()).rev() {
        let p = path[..n].join("/");
        for candidate in [format!("{p}.rs"), format!("{p}/mod.rs")] {
            if files.contains(&candidate) {
                return candidate;
            }
        }
    }
    "lib.rs".into()
}

/// Which files each file depends on (itself and `lib.rs` left out).
fn dependencies() -> BTreeMap<String, BTreeSet<String>> {
    let names: BTreeSet<String> = files().into_iter().collect();
    names
        .iter()
        .map(|f| {
            let deps = crate_paths(&code(f))
                .iter()
                .map(|p| file_of(p, &names))
                .filter(|d| d != f && d != "lib.rs")
                .collect();
            (f.clone(), deps)
        })
        .collect()
}

fn layer(file: &str) -> usize {
    match file.split('/').next().unwrap() {
        "device" => 0,
        "program" => 1,
        "model" => 2,
        "exec" => 3,
        // The error type is every layer's vocabulary.
        "error.rs" => 0,
        _ => 4,
    }
}

#[test]
fn the_tokenizer_expands_use_trees() {
    let paths = crate_paths("use crate::a::{b::C, d, e::{f, g}};\nlet x = crate::h::i(1);");
    let paths: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(paths, ["a::b::C", "a::d", "a::e::f", "a::e::g", "h::i"]);
}

#[test]
fn dependencies_run_from_exec_to_model_to_program_to_device_only() {
    let deps = dependencies();
    assert!(deps.len() > 20, "found the sources: {:?}", deps.keys());
    let mut wrong = Vec::new();
    for (file, uses) in &deps {
        for d in uses {
            if layer(d) > layer(file) {
                wrong.push(format!("{file} uses {d}"));
            }
        }
    }
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
}

#[test]
fn no_file_imports_round_a_circle() {
    let deps = dependencies();
    // Depth-first search for a back edge, reporting the circle.
    fn visit(
        f: &str,
        deps: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(f.to_string(), 1);
        stack.push(f.to_string());
        for d in deps.get(f).into_iter().flatten() {
            match state.get(d.as_str()).copied().unwrap_or(0) {
                1 => {
                    let at = stack.iter().position(|s| s == d).unwrap();
                    let mut circle = stack[at..].to_vec();
                    circle.push(d.clone());
                    return Some(circle);
                }
                0 => {
                    if let Some(c) = visit(d, deps, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(f.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for f in deps.keys() {
        if state.get(f.as_str()).copied().unwrap_or(0) == 0
            && let Some(circle) = visit(f, &deps, &mut state, &mut Vec::new())
        {
            panic!("an import circle: {}", circle.join(" -> "));
        }
    }
}

#[test]
fn the_executor_neither_costs_a_step_nor_records_one() {
    // What the model's cost arithmetic and profiles are reached through.
    let costing = [
        "model/cost.rs",
        "model/exchange.rs",
        "model/paging.rs",
        "model/profile.rs",
    ];
    let names: BTreeSet<String> = files().into_iter().collect();
    for f in names.iter().filter(|f| f.starts_with("exec/")) {
        let code = code(f);
        for p in crate_paths(&code) {
            let d = file_of(&p, &names);
            let allowed = d == "model/profile.rs" && p.last().is_some_and(|x| x == "Profile");
            assert!(
                !costing.contains(&d.as_str()) || allowed,
                "{f} reaches {} ({d}): costs and step profiles are the model's",
                p.join("::")
            );
        }
        for word in [
            "StepProfile",
            "CopyCost",
            "Traffic",
            "vertex_cost",
            "tile_cycles(",
        ] {
            assert!(!code.contains(word), "{f} mentions {word}");
        }
    }
}
