//! A run's profile as a Chrome / Perfetto trace (the JSON "Trace Event Format"): one process
//! per replica, or per replica and IPU for a program on several IPUs (shards, pipeline
//! stages: each step on the IPUs it involves), one track per kind of work (compute, exchange, sync,
//! IPU-Links, host streams), one complete slice per step and part of a step, timestamps in
//! simulated microseconds, the step's cycles and bytes as arguments. Open it in
//! `ui.perfetto.dev` or `chrome://tracing`.

use runtime::{Profile, StepKind, StepProfile};
use serde_json::{Value, json};

/// The tracks, in the order they are shown.
const TRACKS: [&str; 5] = ["compute", "exchange", "sync", "IPU-Links", "host streams"];

fn track(name: &str) -> usize {
    TRACKS
        .iter()
        .position(|t| *t == name)
        .expect("a known track")
}

/// The parts of a step, `(track, cycles)`, in the order they run.
fn parts(s: &StepProfile) -> Vec<(&'static str, u64)> {
    let moving = match s.kind {
        StepKind::StreamCopy => "host streams",
        StepKind::Collective => "IPU-Links",
        _ if s.bytes_over_links > 0 => "IPU-Links",
        _ => "exchange",
    };
    [
        ("compute", s.compute_cycles + s.paging_cycles),
        (moving, s.exchange_cycles),
        ("sync", s.sync_cycles),
    ]
    .into_iter()
    .filter(|(_, c)| *c > 0)
    .collect()
}

/// The parts of a step beside the slowest branch of a `Parallel`: its own.
fn beside_parts(s: &StepProfile) -> Vec<(&'static str, u64)> {
    let Some(b) = s.beside else {
        return Vec::new();
    };
    parts(&StepProfile {
        compute_cycles: b.compute_cycles,
        exchange_cycles: b.exchange_cycles,
        sync_cycles: b.sync_cycles,
        paging_cycles: 0,
        ..s.clone()
    })
}

/// The trace of `runs` (a name for each, and its profile): one process per run, or per
/// run and IPU when the program spans several IPUs (a step shows on the IPUs it involves;
/// a sync on all of them; a step beside a `Parallel`'s slowest branch at its own time).
pub fn chrome_trace(runs: &[(String, &Profile)]) -> Value {
    let mut events = Vec::new();
    let mut next_pid = 0;
    for (name, p) in runs {
        let ipus = if p.ipus.is_empty() { 1 } else { p.num_ipus };
        let first_pid = next_pid;
        next_pid += ipus;
        for ipu in 0..ipus {
            let pid = first_pid + ipu;
            let process = if ipus == 1 {
                name.clone()
            } else {
                format!("{name} IPU {ipu}")
            };
            events.push(
                json!({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                               "args": {"name": process}}),
            );
            events.push(json!({"name": "process_sort_index", "ph": "M", "pid": pid,
                               "tid": 0, "args": {"sort_index": pid}}));
            for (tid, t) in TRACKS.iter().enumerate() {
                events.push(
                    json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                                   "args": {"name": t}}),
                );
            }
        }
        let us = |cycles: u64| cycles as f64 / p.clock_hz * 1e6;
        let all: Vec<usize> = (0..ipus).collect();
        let mut at = 0u64;
        for (i, s) in p.steps.iter().enumerate() {
            let (mut start, list) = match s.beside {
                Some(b) => (b.start, beside_parts(s)),
                None => (at, parts(s)),
            };
            let on = if ipus == 1 || s.ipus.is_empty() {
                &all
            } else {
                &s.ipus
            };
            for (t, cycles) in list {
                for &ipu in on {
                    events.push(json!({
                        "name": s.name,
                        "cat": format!("{:?}", s.kind),
                        "ph": "X",
                        "pid": first_pid + ipu,
                        "tid": track(t),
                        "ts": us(start),
                        "dur": us(cycles),
                        "args": {
                            "step": i,
                            "cycles": cycles,
                            "step cycles": s.beside.map_or(s.cycles, |b| b.cycles),
                            "bytes moved": s.bytes_moved,
                            "bytes over IPU-Links": s.bytes_over_links,
                            "tiles": s.tiles,
                        },
                    }));
                }
                start += cycles;
            }
            if s.beside.is_none() {
                at = start;
            }
        }
    }
    json!({"traceEvents": events, "displayTimeUnit": "ns"})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(kind: StepKind, compute: u64, exchange: u64, sync: u64, links: u64) -> StepProfile {
        StepProfile {
            name: format!("{kind:?}"),
            kind,
            cycles: compute + exchange + sync,
            compute_cycles: compute,
            sync_cycles: sync,
            exchange_cycles: exchange,
            bytes_moved: links,
            bytes_over_links: links,
            paging_cycles: 0,
            bytes_paged: 0,
            ipus: Vec::new(),
            tiles: 0,
            beside: None,
        }
    }

    /// A profile of `steps` on `num_ipus` IPUs at 1 GHz.
    fn profile(
        num_ipus: usize,
        steps: Vec<StepProfile>,
        ipus: Vec<runtime::IpuActivity>,
    ) -> Profile {
        Profile {
            target: "ipu2".into(),
            num_ipus,
            tiles_per_ipu: 4,
            clock_hz: 1e9,
            total_cycles: 0,
            seconds: 0.0,
            totals: Default::default(),
            steps,
            tiles: Vec::new(),
            out_of_core: None,
            decisions: Vec::new(),
            data_dependent: Vec::new(),
            ipus,
            liveness: Vec::new(),
            largest_tensors: Vec::new(),
            peak_tile_contents: None,
        }
    }

    /// The trace's slices: `(name, pid, tid, ts, dur)`.
    fn slices(t: &Value) -> Vec<(String, u64, u64, f64, f64)> {
        t["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X")
            .map(|e| {
                (
                    e["name"].as_str().unwrap().to_string(),
                    e["pid"].as_u64().unwrap(),
                    e["tid"].as_u64().unwrap(),
                    e["ts"].as_f64().unwrap(),
                    e["dur"].as_f64().unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn steps_become_slices_on_their_tracks_back_to_back() {
        let p = profile(
            1,
            vec![
                step(StepKind::Execute, 100, 0, 10, 0),
                step(StepKind::Copy, 0, 50, 10, 8),
                step(StepKind::StreamCopy, 0, 30, 10, 0),
            ],
            Vec::new(),
        );
        let t = chrome_trace(&[("replica 0".into(), &p)]);
        let got: Vec<(String, u64, f64, f64)> = slices(&t)
            .into_iter()
            .map(|(name, _, tid, ts, dur)| (name, tid, ts, dur))
            .collect();
        // At 1 GHz a cycle is a nanosecond: 0.001 us.
        let want = [
            ("Execute", 0, 0.0, 0.1),
            ("Execute", 2, 0.1, 0.01),
            ("Copy", 3, 0.11, 0.05),
            ("Copy", 2, 0.16, 0.01),
            ("StreamCopy", 4, 0.17, 0.03),
            ("StreamCopy", 2, 0.2, 0.01),
        ];
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert_eq!((g.0.as_str(), g.1), (w.0, w.1));
            assert!(
                (g.2 - w.2).abs() < 1e-9 && (g.3 - w.3).abs() < 1e-9,
                "{g:?} vs {w:?}"
            );
        }
    }

    #[test]
    fn a_multi_ipu_program_has_a_process_per_ipu_and_parallel_branches_side_by_side() {
        let on = |mut s: StepProfile, ipus: Vec<usize>| {
            s.ipus = ipus;
            s
        };
        // A Parallel: branch 1 (IPU 1, 100 cycles) was the slowest; branch 0's step (IPU 0,
        // 40 cycles) ran beside it from cycle 0; then a copy between the IPUs and a sync.
        let mut beside = on(step(StepKind::Execute, 0, 0, 0, 0), vec![0]);
        beside.name = "a (beside branch 1)".into();
        beside.beside = Some(runtime::Beside {
            slowest_branch: 1,
            start: 0,
            cycles: 40,
            compute_cycles: 40,
            exchange_cycles: 0,
            sync_cycles: 0,
        });
        let p = profile(
            2,
            vec![
                on(step(StepKind::Execute, 100, 0, 0, 0), vec![1]),
                beside,
                on(step(StepKind::Copy, 0, 20, 0, 8), vec![0, 1]),
                step(StepKind::Sync, 0, 0, 5, 0),
            ],
            vec![
                runtime::IpuActivity {
                    ipu: 0,
                    busy_cycles: 60,
                    bytes_over_links: 8,
                },
                runtime::IpuActivity {
                    ipu: 1,
                    busy_cycles: 120,
                    bytes_over_links: 8,
                },
            ],
        );
        let t = chrome_trace(&[("run".into(), &p)]);
        let events = t["traceEvents"].as_array().unwrap();
        let names: Vec<&str> = events
            .iter()
            .filter(|e| e["name"] == "process_name")
            .map(|e| e["args"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["run IPU 0", "run IPU 1"]);
        let got: Vec<(String, u64, u64, f64)> = slices(&t)
            .into_iter()
            .map(|(name, pid, tid, ts, _)| (name, pid, tid, ts))
            .collect();
        let want: Vec<(String, u64, u64, f64)> = [
            ("Execute", 1, 0, 0.0),
            ("a (beside branch 1)", 0, 0, 0.0),
            ("Copy", 0, 3, 0.1),
            ("Copy", 1, 3, 0.1),
            ("Sync", 0, 2, 0.12),
            ("Sync", 1, 2, 0.12),
        ]
        .into_iter()
        .map(|(n, p, t, ts)| (n.to_string(), p, t, ts))
        .collect();
        assert_eq!(got.len(), want.len(), "{got:?}");
        for (g, w) in got.iter().zip(&want) {
            assert_eq!((&g.0, g.1, g.2), (&w.0, w.1, w.2));
            assert!((g.3 - w.3).abs() < 1e-9, "{g:?} vs {w:?}");
        }
    }
}
