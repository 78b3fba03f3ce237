//! A run's profile as a Chrome / Perfetto trace (the JSON "Trace Event Format"): one process
//! per replica (its IPUs' steps), one track per kind of work (compute, exchange, sync,
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

/// The trace of `runs` (a name for each process, and its profile).
pub fn chrome_trace(runs: &[(String, &Profile)]) -> Value {
    let mut events = Vec::new();
    for (pid, (name, p)) in runs.iter().enumerate() {
        events.push(
            json!({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                           "args": {"name": name}}),
        );
        for (tid, t) in TRACKS.iter().enumerate() {
            events.push(
                json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                               "args": {"name": t}}),
            );
        }
        let us = |cycles: u64| cycles as f64 / p.clock_hz * 1e6;
        let mut at = 0u64;
        for (i, s) in p.steps.iter().enumerate() {
            for (t, cycles) in parts(s) {
                events.push(json!({
                    "name": s.name,
                    "cat": format!("{:?}", s.kind),
                    "ph": "X",
                    "pid": pid,
                    "tid": track(t),
                    "ts": us(at),
                    "dur": us(cycles),
                    "args": {
                        "step": i,
                        "cycles": cycles,
                        "step cycles": s.cycles,
                        "bytes moved": s.bytes_moved,
                        "bytes over IPU-Links": s.bytes_over_links,
                    },
                }));
                at += cycles;
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
        }
    }

    #[test]
    fn steps_become_slices_on_their_tracks_back_to_back() {
        let p = Profile {
            target: "ipu2".into(),
            num_ipus: 1,
            clock_hz: 1e9,
            total_cycles: 0,
            seconds: 0.0,
            totals: Default::default(),
            steps: vec![
                step(StepKind::Execute, 100, 0, 10, 0),
                step(StepKind::Copy, 0, 50, 10, 8),
                step(StepKind::StreamCopy, 0, 30, 10, 0),
            ],
            tiles: Vec::new(),
            out_of_core: None,
            decisions: Vec::new(),
            data_dependent: Vec::new(),
            ipus: Vec::new(),
        };
        let t = chrome_trace(&[("replica 0".into(), &p)]);
        let slices: Vec<&Value> = t["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X")
            .collect();
        let got: Vec<(String, u64, f64, f64)> = slices
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap().to_string(),
                    e["tid"].as_u64().unwrap(),
                    e["ts"].as_f64().unwrap(),
                    e["dur"].as_f64().unwrap(),
                )
            })
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
}
