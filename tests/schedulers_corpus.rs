//! The schedulers on every corpus module (both forms): every order is valid; CHOOSE_BEST's
//! peak is never above the best of XLA's three schedulers; on every computation of at most
//! 24 instructions it is within 5% of the exact optimum. The comparison table is printed
//! with `--nocapture`.

use compiler::schedule::{
    Algorithm, Graph, Limits, OPTIMAL_MAX, peak_liveness_bytes, schedule_graph, schedule_module,
};
use ipuxla::compiler;
use std::collections::HashMap;
use std::path::Path;

fn modules() -> Vec<(String, xla_ir::Module)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/conformance");
    let mut out = Vec::new();
    let mut dirs: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    for d in dirs {
        for f in ["module.hlo", "module.opt.hlo"] {
            let text = std::fs::read_to_string(d.join(f)).unwrap();
            let name = format!("{}/{f}", d.file_name().unwrap().to_string_lossy());
            out.push((name, xla_ir::parse_module(&text).unwrap()));
        }
    }
    out
}

/// The order of `g`'s nodes that `order` (instruction ids) gives.
fn indices(g: &Graph, order: &[xla_ir::ids::InstrId]) -> Vec<usize> {
    let at: HashMap<_, usize> = g.ids.iter().enumerate().map(|(i, &id)| (id, i)).collect();
    order.iter().map(|id| at[id]).collect()
}

#[test]
fn choose_best_beats_xla_and_stays_near_the_optimum_on_the_corpus() {
    let limits = Limits::default();
    let mut report = vec![format!(
        "{:<48} {:>12} {:>12} {:>12} {:>12}",
        "module", "choose-best", "xla-list", "xla-dfs", "xla-post"
    )];
    let mut failures = Vec::new();
    for (name, m) in modules() {
        let mut peaks = HashMap::new();
        for a in Algorithm::ALL {
            let sched = schedule_module(&m, a, limits);
            // Every computation's order is valid, judged on the graph the scheduler saw.
            let mut callee_peaks = HashMap::new();
            for &c in &sched.computations {
                let g = Graph::of(m.computation(c), &callee_peaks);
                let order = indices(&g, &sched.orders[&c]);
                assert!(g.is_valid_order(&order), "{name}: {} invalid", a.name());
                if a == Algorithm::ChooseBest && g.len() <= OPTIMAL_MAX {
                    let cb = peak_liveness_bytes(&g, &order);
                    let opt =
                        peak_liveness_bytes(&g, &schedule_graph(&g, Algorithm::Optimal, limits));
                    assert!(opt <= cb, "{name}: optimal {opt} above choose-best {cb}");
                    if cb as f64 > 1.05 * opt as f64 {
                        failures.push(format!(
                            "{name} {}: choose-best {cb} > 1.05 x optimal {opt}",
                            m.computation(c).name
                        ));
                    }
                }
                callee_peaks.insert(c, sched.peaks[&c]);
            }
            peaks.insert(a, sched.peak_liveness_bytes);
        }
        let best = peaks[&Algorithm::ChooseBest];
        let xla = [
            Algorithm::XlaList,
            Algorithm::XlaDfs,
            Algorithm::XlaPostOrder,
        ]
        .map(|a| peaks[&a]);
        report.push(format!(
            "{name:<48} {best:>12} {:>12} {:>12} {:>12}",
            xla[0], xla[1], xla[2]
        ));
        if best > *xla.iter().min().unwrap() {
            failures.push(format!("{name}: choose-best {best} above XLA's {xla:?}"));
        }
    }
    eprintln!("{}", report.join("\n"));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
