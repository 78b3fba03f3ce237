//! IPU targets: tile counts, memory, clock, and the cost parameters of the IPU Model.
//!
//! Every figure names its source. The sources are summarised in `shared/ANCHORS.md` §3.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The IPU generation a target models.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum IpuVersion {
    /// Mk1 GC2 (C2 card).
    Ipu1,
    /// Mk2 GC200 (IPU-M2000).
    Ipu2,
}

impl IpuVersion {
    /// The name used on the command line and in reports (`ipu1`, `ipu2`).
    pub fn name(self) -> &'static str {
        match self {
            IpuVersion::Ipu1 => "ipu1",
            IpuVersion::Ipu2 => "ipu2",
        }
    }

    /// Parses `ipu1` / `ipu2`.
    pub fn from_name(name: &str) -> Option<IpuVersion> {
        match name {
            "ipu1" => Some(IpuVersion::Ipu1),
            "ipu2" => Some(IpuVersion::Ipu2),
            _ => None,
        }
    }
}

impl fmt::Display for IpuVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One modelled IPU: its size and the parameters of the cost model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Target {
    /// The generation.
    pub version: IpuVersion,
    /// Tiles per IPU the program is laid out on (reducible for tests with
    /// [`Target::with_tiles_per_ipu`]). Out of core ([`Target::out_of_core`]) these are
    /// virtual tiles, more than the chip has.
    pub tiles_per_ipu: usize,
    /// Tiles the IPU really has: equal to `tiles_per_ipu` unless the program runs out of
    /// core, when virtual tile `v` runs on physical tile `v % physical_tiles_per_ipu`.
    pub physical_tiles_per_ipu: usize,
    /// Bytes of SRAM per tile.
    pub bytes_per_tile: u64,
    /// Tile clock in Hz.
    pub clock_hz: f64,
    /// Hardware worker threads per tile.
    pub worker_contexts: usize,
    /// Bytes a tile sends or receives per cycle in an exchange phase.
    pub exchange_bytes_per_cycle: u64,
    /// Cycles of an on-chip (internal) sync.
    pub internal_sync_cycles: u64,
    /// Latency of one IPU-Link hop in seconds (used for inter-IPU syncs and transfers).
    pub ipu_link_hop_latency_s: f64,
    /// Bits per second of one IPU-Link in one direction, before efficiency.
    pub ipu_link_bits_per_s: f64,
    /// Fraction of an IPU-Link's bandwidth that transfers achieve.
    pub ipu_link_efficiency: f64,
    /// Bytes per second between host and device (PCIe Gen4 x16, 64 GB/s; Graphcore's Mk2
    /// product page as summarised in ANCHORS.md §3).
    pub host_bytes_per_s: f64,
    /// f32 multiply-accumulates per cycle per tile on the AMP units (2 FLOP each).
    pub f32_macs_per_cycle: u64,
    /// f16 multiply-accumulates per cycle per tile on the AMP units.
    pub f16_macs_per_cycle: u64,
    /// Bytes of Streaming Memory (off-chip DDR) per IPU; 0 when the system has none.
    pub streaming_memory_bytes_per_ipu: u64,
    /// Whether tile memory holds the program's code (kernels, vertex state, control code)
    /// beside its tensors: Poplar's `IPUModel::compileIPUCode`, the seed's
    /// `ipu_model.compile_ipu_code` (default true). False reports tensors only.
    #[serde(default = "yes")]
    pub compile_ipu_code: bool,
}

fn yes() -> bool {
    true
}

impl Target {
    /// Mk1: 1216 tiles × 256 KiB at 1.6 GHz.
    ///
    /// Tiles, memory, threads, clock: Jia et al., *Dissecting the Graphcore IPU
    /// Architecture via Microbenchmarking*, arXiv:1912.03413. Exchange 4 B/cycle/tile:
    /// early IPU Model defaults (`ipu-exchange-bandwidth`). f32 16 FLOP/cycle/tile
    /// (31.1 TFLOP/s / 1216 / 1.6 GHz), f16 64 (124.5 TFLOP/s).
    pub fn ipu1() -> Target {
        Target {
            version: IpuVersion::Ipu1,
            tiles_per_ipu: 1216,
            physical_tiles_per_ipu: 1216,
            bytes_per_tile: 256 * 1024,
            clock_hz: 1.6e9,
            worker_contexts: 6,
            exchange_bytes_per_cycle: 4,
            internal_sync_cycles: INTERNAL_SYNC_CYCLES,
            ipu_link_hop_latency_s: IPU_LINK_HOP_LATENCY_S,
            ipu_link_bits_per_s: IPU_LINK_BITS_PER_S,
            ipu_link_efficiency: IPU_LINK_EFFICIENCY,
            host_bytes_per_s: HOST_BYTES_PER_S,
            f32_macs_per_cycle: 8,
            f16_macs_per_cycle: 32,
            // A C2 card has no Streaming Memory (ANCHORS.md §3).
            streaming_memory_bytes_per_ipu: 0,
            compile_ipu_code: true,
        }
    }

    /// Mk2 GC200: 1472 tiles × 624 KiB at ≈1.325 GHz.
    ///
    /// Tiles, memory, threads: IPU-M2000 datasheet and launch coverage (1,472 tiles,
    /// ≈900 MB). Clock derived from 250 TFLOP/s f16 / (1472 tiles × 128 FLOP/cycle).
    /// Exchange ≈4 B/cycle/tile ("8 TB/s any pattern"). f32 62.5 TFLOP/s → 32
    /// FLOP/cycle/tile; f16 250 TFLOP/s → 128.
    pub fn ipu2() -> Target {
        Target {
            version: IpuVersion::Ipu2,
            tiles_per_ipu: 1472,
            physical_tiles_per_ipu: 1472,
            bytes_per_tile: 624 * 1024,
            clock_hz: 1.325e9,
            worker_contexts: 6,
            exchange_bytes_per_cycle: 4,
            internal_sync_cycles: INTERNAL_SYNC_CYCLES,
            ipu_link_hop_latency_s: IPU_LINK_HOP_LATENCY_S,
            ipu_link_bits_per_s: IPU_LINK_BITS_PER_S,
            ipu_link_efficiency: IPU_LINK_EFFICIENCY,
            host_bytes_per_s: HOST_BYTES_PER_S,
            f32_macs_per_cycle: 16,
            f16_macs_per_cycle: 64,
            streaming_memory_bytes_per_ipu: STREAMING_MEMORY_BYTES_PER_IPU2,
            compile_ipu_code: true,
        }
    }

    /// The target of a version.
    pub fn of(version: IpuVersion) -> Target {
        match version {
            IpuVersion::Ipu1 => Target::ipu1(),
            IpuVersion::Ipu2 => Target::ipu2(),
        }
    }

    /// The same target with fewer (or more) tiles per IPU, as tests use (e.g. 4 or 16).
    pub fn with_tiles_per_ipu(mut self, tiles: usize) -> Target {
        self.tiles_per_ipu = tiles;
        self.physical_tiles_per_ipu = tiles;
        self
    }

    /// The same IPU running a program laid out on `virtual_tiles` tiles per IPU, out of
    /// core: each virtual tile's memory lives in Streaming Memory and is paged onto
    /// physical tile `v % physical_tiles_per_ipu` for the steps that use it.
    pub fn out_of_core(mut self, virtual_tiles: usize) -> Target {
        self.tiles_per_ipu = virtual_tiles;
        self
    }

    /// Whether the program runs on more (virtual) tiles than the IPU has.
    pub fn is_out_of_core(&self) -> bool {
        self.tiles_per_ipu > self.physical_tiles_per_ipu
    }

    /// The physical tile that runs (virtual) tile `tile`.
    pub fn physical_tile(&self, tile: usize) -> usize {
        tile % self.physical_tiles_per_ipu.max(1)
    }

    /// Cycles of an inter-IPU sync across `hops` IPU-Link hops: 15 ns per hop, there and
    /// back (PopLibs `setGlobalSyncLatency`).
    pub fn global_sync_cycles(&self, hops: usize) -> u64 {
        (self.ipu_link_hop_latency_s * self.clock_hz * hops as f64 * 2.0).ceil() as u64
    }

    /// Bytes per second one IPU-Link carries in one direction, efficiency applied.
    pub fn ipu_link_bytes_per_s(&self) -> f64 {
        self.ipu_link_bits_per_s * self.ipu_link_efficiency / 8.0
    }

    /// Seconds for `cycles` at this target's clock.
    pub fn seconds(&self, cycles: u64) -> f64 {
        cycles as f64 / self.clock_hz
    }
}

/// Internal sync: a flat 90 cycles, as PopNN's CTC loss planner estimates it
/// (`lib/popnn/CTCLossPlan.cpp`).
pub const INTERNAL_SYNC_CYCLES: u64 = 90;

/// 15 ns per IPU-Link hop (PopLibs `lib/poplibs_test/Util.cpp`, `setGlobalSyncLatency`).
pub const IPU_LINK_HOP_LATENCY_S: f64 = 15e-9;

/// 128·2³⁰ bit/s per IPU-Link per direction (PopLibs `addGlobalExchangeConstraints`).
pub const IPU_LINK_BITS_PER_S: f64 = 128.0 * (1u64 << 30) as f64;

/// Host link: PCIe Gen4 x16, 64 GB/s.
pub const HOST_BYTES_PER_S: f64 = 64e9;

/// Streaming Memory of an ipu2: up to 448 GB per IPU-M2000 of 4 IPUs (launch coverage,
/// ANCHORS.md §3), so 112 GB per IPU.
pub const STREAMING_MEMORY_BYTES_PER_IPU2: u64 = 112_000_000_000;

/// Transfers reach 85% of link bandwidth (PopLibs `addGlobalExchangeConstraints`).
pub const IPU_LINK_EFFICIENCY: f64 = 0.85;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_match_the_design() {
        let t = Target::ipu2();
        assert_eq!(
            t.tiles_per_ipu * t.bytes_per_tile as usize,
            1472 * 624 * 1024
        );
        // Peak f16: 1472 tiles × 64 MAC × 2 FLOP × 1.325 GHz ≈ 250 TFLOP/s.
        let peak = t.tiles_per_ipu as f64 * t.f16_macs_per_cycle as f64 * 2.0 * t.clock_hz;
        assert!((peak - 250e12).abs() / 250e12 < 0.01, "{peak}");
        // ≈40 cycles of global sync for one hop at 1.325 GHz.
        assert_eq!(t.global_sync_cycles(1), 40);
        assert_eq!(Target::ipu1().with_tiles_per_ipu(4).tiles_per_ipu, 4);
        let paged = Target::ipu2().with_tiles_per_ipu(4).out_of_core(64);
        assert!(paged.is_out_of_core() && !Target::ipu2().is_out_of_core());
        assert_eq!(
            (paged.physical_tile(5), paged.physical_tiles_per_ipu),
            (1, 4)
        );
    }
}
