//! The summary `ipuxla run` prints after a run on the IPU Model, or after an estimate.

use crate::device::{DeviceEstimate, DeviceRun};
use runtime::{DataDependent, Profile};
use std::fmt::Write;

/// Cycles, time, memory, exchange and program size, one fact per line.
pub fn summary(run: &DeviceRun) -> String {
    let mut s = profile_lines(&run.profile, run.compute_sets, run.vertices, "run");
    if let Some(lp) = &run.device_loop {
        let _ = writeln!(
            s,
            "device loop: {} iterations, {} cycles per iteration (the execution's cycles over its iterations); {} B of parameters streamed in once and resident, {} B fed and {} B streamed out per iteration",
            lp.iterations,
            run.profile.total_cycles / lp.iterations.max(1),
            lp.resident_bytes,
            lp.fed_bytes_per_iteration,
            lp.out_bytes_per_iteration
        );
    }
    if let Some(report) = &run.pipeline {
        s.push_str(&pipeline_lines(report));
    }
    let compile = match &run.read_from {
        Some(path) => format!("read the executable {}", path.display()),
        None => "compile".to_string(),
    };
    let _ = writeln!(
        s,
        "host: {compile} {:.1} ms, load (checks, JIT) {:.1} ms, simulate {:.1} ms",
        run.compile_seconds * 1e3,
        run.load_seconds * 1e3,
        run.run_seconds * 1e3
    );
    s
}

/// A pipeline's phases: per phase its steps and cycles, and each stage's IPU's share.
pub fn pipeline_lines(r: &crate::device::PipelineReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "pipeline: {} stages on IPUs {:?}; bubble {:.1}% (the stages' IPUs' idle time in the pipeline's steps){}",
        r.stage_ipus.len(),
        r.stage_ipus,
        100.0 * r.bubble_fraction,
        if r.runs > 1 {
            format!("; {} runs, each:", r.runs)
        } else {
            String::new()
        }
    );
    for p in &r.phases {
        let stages: Vec<String> = p
            .busy_cycles
            .iter()
            .enumerate()
            .map(|(k, &b)| {
                format!(
                    "stage {k} {:.0}%{}",
                    100.0 * b as f64 / p.cycles.max(1) as f64,
                    if p.steps > 0 {
                        format!(" ({}/{} steps)", p.working_steps[k], p.steps)
                    } else {
                        String::new()
                    }
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "  {}: {} cycles{}; busy: {}",
            p.name,
            p.cycles,
            if p.steps > 0 {
                format!(" in {} steps", p.steps)
            } else {
                String::new()
            },
            stages.join(", ")
        );
    }
    s
}

/// [`summary`] for a replicated run: the slowest replica's facts, then the replication's.
pub fn replicated_summary(run: &crate::replicas::ReplicatedRun) -> String {
    let slowest = run.slowest();
    let mut s = summary(&run.replica(slowest));
    let p = &run.profiles[slowest];
    let replica_bytes: u64 = p.tiles.iter().map(|t| t.bytes_used).sum();
    let collective_cycles: u64 = p
        .steps
        .iter()
        .filter(|s| s.kind == runtime::StepKind::Collective)
        .map(|s| s.cycles)
        .sum();
    let _ = writeln!(
        s,
        "replication: {} replicas of {} IPU{} each in {} order{}; the facts above are replica {slowest}'s (the slowest); collectives {collective_cycles} cycles, {} B over IPU-Links per replica; memory {} B per replica, {} B on all {} IPUs",
        run.profiles.len(),
        p.num_ipus,
        if p.num_ipus == 1 { "" } else { "s" },
        run.selection_order.name(),
        if run.selection_order == runtime::SelectionOrder::Auto {
            " (as HOOF)"
        } else {
            ""
        },
        p.totals.bytes_over_links,
        replica_bytes,
        replica_bytes * run.profiles.len() as u64,
        run.profiles.len() * p.num_ipus
    );
    s
}

/// [`summary`] for an estimate: the same facts, what the estimate could not know, and its
/// host times.
pub fn estimate_summary(e: &DeviceEstimate) -> String {
    let mut s = profile_lines(&e.profile, e.compute_sets, e.vertices, "estimated");
    for d in &e.profile.data_dependent {
        let _ = match d {
            DataDependent::Loop {
                predicate,
                cycles_per_iteration,
                ..
            } => writeln!(
                s,
                "data-dependent: the loop on {predicate} is counted once (trip count unknown; {cycles_per_iteration} cycles per iteration)"
            ),
            DataDependent::Branch {
                predicate,
                taken,
                branches,
                ..
            } => writeln!(
                s,
                "data-dependent: the branch on {predicate} counts its costliest branch ({taken} of {branches})"
            ),
        };
    }
    let compile = match &e.read_from {
        Some(path) => format!("read the executable {}", path.display()),
        None => "compile".to_string(),
    };
    let _ = writeln!(
        s,
        "host: {compile} {:.1} ms, estimate (checks, costs) {:.1} ms; nothing run",
        e.compile_seconds * 1e3,
        e.estimate_seconds * 1e3
    );
    s
}

/// The lines every summary shares; `steps` says whether the steps were run or estimated.
fn profile_lines(p: &Profile, compute_sets: usize, vertices: usize, steps: &str) -> String {
    let mut s = String::new();
    let peak = p.peak_tile();
    let total: u64 = p.tiles.iter().map(|t| t.bytes_used).sum();
    let _ = writeln!(
        s,
        "simulated: {} cycles = {:.3} us on {} x {} at {:.2} GHz",
        p.total_cycles,
        p.seconds * 1e6,
        p.num_ipus,
        p.target,
        p.clock_hz / 1e9
    );
    let _ = write!(
        s,
        "  compute {} / exchange {} / sync {} cycles",
        p.totals.compute_cycles, p.totals.exchange_cycles, p.totals.sync_cycles
    );
    match p.out_of_core {
        Some(_) => {
            let _ = writeln!(s, " / paging {} cycles", p.totals.paging_cycles);
        }
        None => s.push('\n'),
    }
    if let Some(o) = p.out_of_core {
        let _ = writeln!(
            s,
            "out of core: {} virtual tiles per IPU run on {}, paged through Streaming Memory ({} B paged)",
            o.virtual_tiles_per_ipu, o.physical_tiles_per_ipu, p.totals.bytes_paged
        );
    }
    if let Some(t) = peak {
        let tile = match p.out_of_core {
            Some(o) => format!(
                "{} (virtual; runs on tile {})",
                t.tile,
                t.tile % o.physical_tiles_per_ipu.max(1)
            ),
            None => t.tile.to_string(),
        };
        let _ = writeln!(
            s,
            "memory: peak tile {} B (IPU {} tile {}, {:.1}% of {} B); total {} B on {} tiles",
            t.bytes_used,
            t.ipu,
            tile,
            100.0 * t.bytes_used as f64 / (t.bytes_used + t.bytes_free).max(1) as f64,
            t.bytes_used + t.bytes_free,
            total,
            p.tiles.len()
        );
        if t.always_live_bytes > 0 {
            let _ = writeln!(
                s,
                "  of which always live {} B ({} B code, {} B vertex state, {} B control code, {} B constants and weights); the rest variables and activations",
                t.always_live_bytes,
                t.code_bytes,
                t.vertex_state_bytes,
                t.control_code_bytes,
                t.always_live_bytes - t.all_code_bytes()
            );
        }
        if let Some(c) = p
            .peak_tile_contents
            .as_ref()
            .filter(|c| (c.ipu, c.tile) == (t.ipu, t.tile))
        {
            let _ = writeln!(
                s,
                "  {}",
                peak_contents(c, t.bytes_used - t.all_code_bytes())
            );
        }
    }
    if p.num_ipus > 1 {
        for ipu in 0..p.num_ipus {
            let tiles: Vec<_> = p.tiles.iter().filter(|t| t.ipu == ipu).collect();
            let peak = tiles.iter().map(|t| t.bytes_used).max().unwrap_or(0);
            let sum: u64 = tiles.iter().map(|t| t.bytes_used).sum();
            let activity = match p.ipus.get(ipu) {
                Some(a) => format!(
                    "; busy {} cycles ({:.0}%), {} B over IPU-Links",
                    a.busy_cycles,
                    100.0 * a.busy_cycles as f64 / p.total_cycles.max(1) as f64,
                    a.bytes_over_links
                ),
                None => String::new(),
            };
            let _ = writeln!(
                s,
                "  IPU {ipu}: peak tile {peak} B, total {sum} B on {} tiles{activity}",
                tiles.len()
            );
        }
        if !p.ipus.is_empty() {
            let _ = writeln!(
                s,
                "  idle: {:.1}% of the IPUs' time (waiting in syncs or for other IPUs)",
                100.0 * p.idle_fraction()
            );
        }
    }
    let _ = writeln!(
        s,
        "exchange: {} B between tiles, {} B over IPU-Links, {} B streamed to/from the host",
        p.totals.bytes_exchanged, p.totals.bytes_over_links, p.totals.bytes_streamed
    );
    let _ = writeln!(
        s,
        "program: {compute_sets} compute sets, {vertices} vertices, {} steps {steps}",
        p.steps.len()
    );
    s
}

/// What the busiest tile holds at its peak, in one line: the step, the four largest
/// tensors live there, how many more, and the bytes of its tensors' extent (`extent`)
/// that none of them holds then (gaps the memory plan left).
fn peak_contents(c: &runtime::TileAtPeak, extent: u64) -> String {
    const SHOWN: usize = 4;
    let named: Vec<String> = (c.tensors.iter().take(SHOWN))
        .map(|t| format!("{} {} B", t.name, t.bytes))
        .collect();
    let rest = &c.tensors[c.tensors.len().min(SHOWN)..];
    let more = rest.len() + c.others;
    let more_bytes: u64 = rest.iter().map(|t| t.bytes).sum::<u64>() + c.others_bytes;
    let tail = if more > 0 {
        format!(" and {more} more ({more_bytes} B)")
    } else {
        String::new()
    };
    let live: u64 = c.tensors.iter().map(|t| t.bytes).sum::<u64>() + c.others_bytes;
    let gaps = match extent.saturating_sub(live) {
        0 => String::new(),
        unused => format!("; {unused} B between them unused"),
    };
    format!("at its peak ({}): {}{tail}{gaps}", c.step, named.join(", "))
}
