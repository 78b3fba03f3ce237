//! Which physical IPU each shard runs on (`SelectionOrder` in the seed), and the multi-IPU
//! device ids `gc-info -l` lists.

use crate::device::system::System;
use serde::{Deserialize, Serialize};
use std::fmt::Write;

/// The order in which shards are mapped to the IPUs of a multi-IPU device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SelectionOrder {
    /// Chosen by ipuxla per program: the compiler places replicas, and shards whose first
    /// and last IPUs exchange values, in HOOF order, other shards in SNAKE order; `order`
    /// (and the `ipuxla devices` listing) reads it as SNAKE.
    Auto,
    /// The natural order 0, 1, 2, ...
    Zigzag,
    /// Consecutive shards directly linked: 0, 1, 3, 2, 4, 5, 7, 6, ...
    Snake,
    /// Consecutive shards directly linked and the last next to the first:
    /// 0, 2, 4, ..., 14, 15, 13, ..., 3, 1.
    Hoof,
}

impl SelectionOrder {
    /// Every order, as the seed lists them.
    pub const ALL: [SelectionOrder; 4] = [
        SelectionOrder::Auto,
        SelectionOrder::Zigzag,
        SelectionOrder::Snake,
        SelectionOrder::Hoof,
    ];

    /// The seed's name (`AUTO`, `ZIGZAG`, `SNAKE`, `HOOF`).
    pub fn name(self) -> &'static str {
        match self {
            SelectionOrder::Auto => "AUTO",
            SelectionOrder::Zigzag => "ZIGZAG",
            SelectionOrder::Snake => "SNAKE",
            SelectionOrder::Hoof => "HOOF",
        }
    }

    /// Parses a name, case-insensitively.
    pub fn from_name(name: &str) -> Option<SelectionOrder> {
        SelectionOrder::ALL
            .into_iter()
            .find(|o| o.name().eq_ignore_ascii_case(name))
    }

    /// The IPU of each shard, for `num_ipus` IPUs.
    pub fn order(self, num_ipus: usize) -> Vec<usize> {
        match self {
            SelectionOrder::Zigzag => (0..num_ipus).collect(),
            SelectionOrder::Auto | SelectionOrder::Snake => (0..num_ipus)
                .map(|i| {
                    let card = i / 2;
                    // Odd cards are walked right to left.
                    if card % 2 == 1 && card * 2 + 1 < num_ipus {
                        i ^ 1
                    } else {
                        i
                    }
                })
                .collect(),
            SelectionOrder::Hoof => {
                let mut order: Vec<usize> = (0..num_ipus).step_by(2).collect();
                let mut odds: Vec<usize> = (1..num_ipus).step_by(2).collect();
                odds.reverse();
                order.extend(odds);
                order
            }
        }
    }
}

/// A device as `gc-info -l` lists it: one IPU, or a group of 2, 4, 8, ... IPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceId {
    /// The device id.
    pub id: usize,
    /// Its IPUs, in DNC order.
    pub ipus: Vec<usize>,
}

/// Every device of the system: single IPUs first (ids 0..N), then groups of 2, 4, 8, ...
/// IPUs made of consecutive cards, as `gc-info -l` numbers them (0–30 for 16 IPUs).
pub fn device_ids(num_ipus: usize) -> Vec<DeviceId> {
    let mut devices: Vec<DeviceId> = (0..num_ipus)
        .map(|i| DeviceId {
            id: i,
            ipus: vec![i],
        })
        .collect();
    let mut size = 2;
    while size <= num_ipus {
        for start in (0..num_ipus).step_by(size) {
            if start + size <= num_ipus {
                devices.push(DeviceId {
                    id: devices.len(),
                    ipus: (start..start + size).collect(),
                });
            }
        }
        size *= 2;
    }
    devices
}

/// The listing `ipuxla devices` prints: devices as `gc-info -l` shows them, then the shard
/// to IPU order of every selection order (the chosen one marked).
pub fn listing(system: &System, chosen: SelectionOrder) -> String {
    let t = &system.target;
    let n = system.num_ipus();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Graphcore device listing (IPU Model: {n} x {}, {} tiles x {} KiB, {:.3} GHz):\n",
        t.version,
        t.tiles_per_ipu,
        t.bytes_per_tile / 1024,
        t.clock_hz / 1e9
    );
    let width = device_ids(n).len().saturating_sub(1).to_string().len();
    for device in device_ids(n) {
        if let [ipu] = device.ipus[..] {
            let _ = writeln!(
                out,
                "-+- Id: [{:>width$}], type:      [IPU Model], card: [{}], ladder position: [{}]",
                device.id,
                ipu / 2,
                ipu % 2
            );
        } else {
            let _ = writeln!(out, "-+- Id: [{:>width$}], type: [Multi IPU]", device.id);
            for (dnc, ipu) in device.ipus.iter().enumerate() {
                let _ = writeln!(out, "|--- IPU Id: [{ipu:>width$}], DNC Id: [{dnc}]");
            }
        }
    }
    let _ = writeln!(out, "\nShard to IPU selection orders:");
    for order in SelectionOrder::ALL {
        let ipus: Vec<String> = order.order(n).iter().map(usize::to_string).collect();
        let mark = if order == chosen { "*" } else { " " };
        let note = if order == SelectionOrder::Auto {
            " (as SNAKE)"
        } else {
            ""
        };
        let _ = writeln!(out, "{mark} {:<6} {}{note}", order.name(), ipus.join(", "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seeds_orders_for_16_ipus() {
        let text = |o: SelectionOrder| {
            o.order(16)
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        assert_eq!(
            text(SelectionOrder::Zigzag),
            "0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15"
        );
        assert_eq!(
            text(SelectionOrder::Snake),
            "0, 1, 3, 2, 4, 5, 7, 6, 8, 9, 11, 10, 12, 13, 15, 14"
        );
        assert_eq!(
            text(SelectionOrder::Hoof),
            "0, 2, 4, 6, 8, 10, 12, 14, 15, 13, 11, 9, 7, 5, 3, 1"
        );
    }

    #[test]
    fn consecutive_shards_are_neighbours_in_snake_and_hoof() {
        let system = System::new(crate::device::target::Target::ipu2(), 16).unwrap();
        for order in [SelectionOrder::Snake, SelectionOrder::Hoof] {
            let o = order.order(16);
            for w in o.windows(2) {
                assert_eq!(system.hops(w[0], w[1]).unwrap(), 1, "{order:?} {w:?}");
            }
        }
        let hoof = SelectionOrder::Hoof.order(16);
        assert_eq!(system.hops(hoof[0], hoof[15]).unwrap(), 1);
    }

    #[test]
    fn device_ids_for_16_ipus() {
        let ids = device_ids(16);
        assert_eq!(ids.len(), 31);
        assert_eq!(ids[16].ipus, vec![0, 1]);
        assert_eq!(ids[24].ipus, vec![0, 1, 2, 3]);
        assert_eq!(ids[30].ipus, (0..16).collect::<Vec<_>>());
    }
}
