//! How near a run comes to the IPU's roofline: the FLOPs of a module's dots and
//! convolutions, the cycles they would take with every tile's AMP unit busy, and the least
//! the run's exchange could take with its bytes spread evenly over all tiles.
//!
//! The rates are over the cycles on the device: the run's cycles less its host streams
//! (parameters and results crossing PCIe), as XLA's and Poplar's benchmarks time programs
//! whose data is already on the device. The streams' share is reported beside them.

use runtime::{Profile, StepKind, Target};
use xla_ir::{ElementType, Module, Op};

/// FLOPs of a module's dots and convolutions (2 per multiply-accumulate), split by the AMP
/// rate they run at. Every instruction of every computation counts once, as
/// `../shared/tools/flops.py` counts them: a loop body's dot is one dot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flops {
    /// Of products whose left operand is f16: the AMP's f16 rate.
    pub f16: u64,
    /// Of every other product: the f32 rate.
    pub f32: u64,
}

impl Flops {
    /// All of them.
    pub fn total(&self) -> u64 {
        self.f16 + self.f32
    }

    /// Cycles the products take at the AMP peak of `tiles` tiles of `target`
    /// (`f16_macs_per_cycle` / `f32_macs_per_cycle` multiply-accumulates per tile per
    /// cycle, as the cost model charges them).
    pub fn peak_cycles(&self, target: &Target, tiles: u64) -> f64 {
        let per_cycle = |macs: u64| (2 * macs * tiles.max(1)) as f64;
        self.f16 as f64 / per_cycle(target.f16_macs_per_cycle)
            + self.f32 as f64 / per_cycle(target.f32_macs_per_cycle)
    }
}

/// Counts the FLOPs of every dot and convolution in `module`: a dot's output elements
/// times its contracted elements, a convolution's output elements times its kernel's
/// elements per output feature (input features of a group × window), twice each.
pub fn module_flops(module: &Module) -> Flops {
    let mut flops = Flops::default();
    for (_, computation) in module.computations() {
        for &id in computation.order() {
            let instr = computation.instr(id);
            let operand = |k: usize| {
                instr
                    .operands
                    .get(k)
                    .and_then(|&o| computation.instr(o).shape.as_array())
            };
            let (Some(out), Some(lhs), Some(rhs)) =
                (instr.shape.as_array(), operand(0), operand(1))
            else {
                continue;
            };
            let size = |dims: &[i64], of: &[i64]| -> u64 {
                of.iter()
                    .map(|&d| dims.get(d as usize).copied().unwrap_or(1).max(0) as u64)
                    .product()
            };
            let per_output = match &instr.op {
                Op::Dot { dims, .. } => size(&lhs.dims, &dims.lhs_contracting),
                Op::Convolution { dims, .. } => {
                    let kernel: u64 = rhs.dims.iter().map(|&d| d.max(0) as u64).product();
                    kernel / size(&rhs.dims, &[dims.kernel_output_feature]).max(1)
                }
                _ => continue,
            };
            let f = 2 * out.element_count() * per_output;
            if lhs.element_type == ElementType::F16 {
                flops.f16 += f;
            } else {
                flops.f32 += f;
            }
        }
    }
    flops
}

/// A run's figures against the roofline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Roofline {
    /// The module's FLOPs.
    pub flops: Flops,
    /// The run's cycles less those of its host streams.
    pub device_cycles: u64,
    /// The host streams' cycles over the run's.
    pub stream_share: f64,
    /// FLOPs over the simulated time on the device, in TFLOP/s.
    pub tflops_per_s: f64,
    /// The cycles of the products at the AMP peak over the device cycles (1.0 = the run is
    /// as fast as its products alone at peak).
    pub peak_fraction: f64,
    /// Cycles of exchange phases between tiles and over IPU-Links (copies; not host
    /// streams or collectives).
    pub exchange_cycles: u64,
    /// `exchange_cycles` over the device cycles.
    pub exchange_share: f64,
    /// The least `exchange_cycles` could be: the bytes exchanged spread evenly over every
    /// tile's receive bandwidth (`exchange_bytes_per_cycle`).
    pub exchange_lower_bound: u64,
}

impl Roofline {
    /// `profile`'s run of `module` on `target`.
    pub fn of(module: &Module, profile: &Profile, target: &Target) -> Roofline {
        let flops = module_flops(module);
        let tiles = (profile.num_ipus.max(1) * target.physical_tiles_per_ipu) as u64;
        let cycles_of = |kind: StepKind| -> u64 {
            let steps = profile.steps.iter().filter(|s| s.kind == kind);
            steps.map(|s| s.exchange_cycles).sum()
        };
        let streams: u64 = profile
            .steps
            .iter()
            .filter(|s| s.kind == StepKind::StreamCopy)
            .map(|s| s.cycles)
            .sum();
        let device_cycles = profile.total_cycles.saturating_sub(streams);
        let cycles = device_cycles.max(1) as f64;
        let exchange_cycles = cycles_of(StepKind::Copy);
        let receive_per_cycle = tiles * target.exchange_bytes_per_cycle.max(1);
        Roofline {
            flops,
            device_cycles,
            stream_share: streams as f64 / profile.total_cycles.max(1) as f64,
            tflops_per_s: flops.total() as f64 / (cycles / profile.clock_hz) / 1e12,
            peak_fraction: flops.peak_cycles(target, tiles) / cycles,
            exchange_cycles,
            exchange_share: exchange_cycles as f64 / cycles,
            exchange_lower_bound: profile.totals.bytes_exchanged.div_ceil(receive_per_cycle),
        }
    }

    /// `exchange_cycles` over its lower bound (None when nothing was exchanged).
    pub fn exchange_over_bound(&self) -> Option<f64> {
        (self.exchange_lower_bound > 0)
            .then(|| self.exchange_cycles as f64 / self.exchange_lower_bound as f64)
    }

    /// The figures as JSON fields.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "flops": self.flops.total(),
            "flops_f16": self.flops.f16,
            "device_cycles": self.device_cycles,
            "stream_share": self.stream_share,
            "tflops_per_s": self.tflops_per_s,
            "amp_peak_fraction": self.peak_fraction,
            "exchange_cycles": self.exchange_cycles,
            "exchange_share": self.exchange_share,
            "exchange_lower_bound_cycles": self.exchange_lower_bound,
            "exchange_over_bound": self.exchange_over_bound(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flops_of(text: &str) -> Flops {
        module_flops(&xla_ir::parse_module(text).expect("a valid module"))
    }

    #[test]
    fn a_dot_counts_twice_its_outputs_times_its_contracted_elements() {
        let f = flops_of(
            "HloModule m\nENTRY e {\n  a = f16[4,8,16]{2,1,0} parameter(0)\n  b = f16[4,16,32]{2,1,0} parameter(1)\n  ROOT d = f16[4,8,32]{2,1,0} dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}\n}\n",
        );
        assert_eq!(
            f,
            Flops {
                f16: 2 * 4 * 8 * 32 * 16,
                f32: 0
            }
        );
    }

    #[test]
    fn a_grouped_convolution_counts_its_kernel_per_output_feature() {
        // 3x3 window, 2 input features per group (4 features in 2 groups), 6 outputs.
        let f = flops_of(
            "HloModule m\nENTRY e {\n  x = f32[1,5,5,4]{3,2,1,0} parameter(0)\n  k = f32[3,3,2,6]{3,2,1,0} parameter(1)\n  ROOT c = f32[1,5,5,6]{3,2,1,0} convolution(x, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=2\n}\n",
        );
        assert_eq!(
            f,
            Flops {
                f16: 0,
                f32: 2 * 25 * 6 * 18
            }
        );
    }

    #[test]
    fn peak_cycles_use_each_products_amp_rate() {
        let target = Target::ipu2();
        let f = Flops {
            f16: 2 * 64 * 1472,
            f32: 2 * 16 * 1472,
        };
        assert_eq!(f.peak_cycles(&target, 1472), 2.0);
    }
}
