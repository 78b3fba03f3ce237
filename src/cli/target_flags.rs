//! The flags that choose the IpuConfig a module compiles for, which `run` and `compile`
//! share, and the options `ipuxla convert` wrote into a module's header.

use anyhow::{anyhow, bail};
use clap::{Args, ValueEnum};
use std::path::{Path, PathBuf};
use xla_ir::Module;

/// A partials type for matrix products and convolutions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PartialType {
    /// f32 partial sums.
    Float,
    /// f16 partial sums.
    Half,
}

/// An IPU generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IpuVersionArg {
    /// Mk1 (GC2): 1216 tiles, 256 KiB each.
    Ipu1,
    /// Mk2 (GC200): 1472 tiles, 624 KiB each.
    Ipu2,
}

/// `--config` and the flags that override it.
#[derive(Debug, Args)]
pub struct TargetFlags {
    /// An IpuConfig as JSON (`{"ipu_model": {"tiles_per_ipu": 4}, ...}`); the flags below
    /// override it.
    #[arg(long, value_name = "FILE.json")]
    pub config: Option<PathBuf>,
    /// IPUs to use (`auto_select_ipus`; default 1): the shards of a module with
    /// `sharding={maximal device=K}` each on its IPU; a module without shardings spread
    /// over all of them; with --replicas, replicas x IPUs per replica.
    #[arg(long)]
    pub num_ipus: Option<usize>,
    /// The order the program's IPUs take the ladder's (`selection_order`; default AUTO:
    /// HOOF for replicas and for shards whose first and last IPUs exchange values, else
    /// SNAKE).
    #[arg(long, value_enum, ignore_case = true)]
    pub selection_order: Option<super::devices::SelectionOrderArg>,
    /// Recompute instead of keeping (`allow_recompute`): cheap forward values the backward
    /// pass reads late are computed again; with --optimizer, every pipeline stage but the
    /// last stashes its inputs and recomputes its forward pass for its backward pass.
    #[arg(long)]
    pub allow_recompute: bool,
    /// availableMemoryProportion for matrix products, 0.0 to 1.0 (default 0.6).
    #[arg(long, value_name = "F")]
    pub matmul_amp: Option<f64>,
    /// availableMemoryProportion for convolutions, 0.0 to 1.0 (default 0.6): bounds a
    /// convolution part's patch matrix per tile (it splits further while over it).
    #[arg(long, value_name = "F")]
    pub conv_amp: Option<f64>,
    /// Partials type for matrix products (default float): half stores f16 products'
    /// partials in f16 (less memory and exchange, f16 rounding); refused for f32 operands.
    #[arg(long, value_enum, ignore_case = true)]
    pub matmul_partial_type: Option<PartialType>,
    /// Partials type for convolutions (default float): half sums f16 convolutions over
    /// kernel positions in f16 (refused for f32 operands and grouped convolutions).
    #[arg(long, value_enum, ignore_case = true)]
    pub conv_partial_type: Option<PartialType>,
    /// The simulated IPU (`ipu_model.version`; default ipu2).
    #[arg(long, value_enum, ignore_case = true)]
    pub ipu_version: Option<IpuVersionArg>,
    /// Tiles per simulated IPU (`ipu_model.tiles_per_ipu`; default: the version's count).
    #[arg(long)]
    pub tiles_per_ipu: Option<usize>,
    /// Fail with the out-of-memory report when the module does not fit tile memory, instead
    /// of running it out of core through Streaming Memory (`ipu_model.streaming_memory`
    /// false; an ipu1 has no Streaming Memory and always fails).
    #[arg(long)]
    pub no_streaming_memory: bool,
    /// The device of a multi-device `auto_select_ipus` list (`[1, 2]`: device 0 of one
    /// IPU, device 1 of two) that runs the module: the seed's `/device:IPU:K`. Needed when
    /// the config lists several devices; with one it may only be 0.
    #[arg(long, value_name = "K", conflicts_with = "num_ipus")]
    pub device: Option<usize>,
    #[command(flatten)]
    pub passes: super::PassFlags,
}

impl TargetFlags {
    /// The IpuConfig of `--config` (or the defaults) with the flags applied (not yet
    /// checked: a command adds its own keys first).
    pub fn config(&self) -> anyhow::Result<compiler::IpuConfig> {
        self.config_over(compiler::IpuConfig::default())
    }

    /// The IpuConfig of `--config` (or `base` without one) with the flags applied.
    pub fn config_over(&self, base: compiler::IpuConfig) -> anyhow::Result<compiler::IpuConfig> {
        let mut c = match &self.config {
            Some(_) => super::load_config(self.config.as_deref())?,
            None => base,
        };
        self.passes.apply(&mut c);
        if let Some(n) = self.num_ipus {
            c.auto_select_ipus = compiler::config::AutoSelectIpus::Count(n);
        }
        if let Some(k) = self.device {
            c = c.for_device(k)?;
        }
        if let Some(o) = self.selection_order {
            c.selection_order = o.name().into();
        }
        if self.allow_recompute {
            c.allow_recompute = true;
        }
        for (flag, amp, planner) in [
            ("--matmul-amp", self.matmul_amp, &mut c.matmuls),
            ("--conv-amp", self.conv_amp, &mut c.convolutions),
        ] {
            if let Some(a) = amp {
                if !(0.0..=1.0).contains(&a) {
                    bail!("{flag} is {a}; availableMemoryProportion must be between 0.0 and 1.0");
                }
                planner
                    .poplar_options
                    .insert("availableMemoryProportion".into(), a.to_string());
            }
        }
        for (pt, planner) in [
            (self.matmul_partial_type, &mut c.matmuls),
            (self.conv_partial_type, &mut c.convolutions),
        ] {
            if let Some(pt) = pt {
                let v = match pt {
                    PartialType::Float => "float",
                    PartialType::Half => "half",
                };
                planner
                    .poplar_options
                    .insert("partialsType".into(), v.into());
            }
        }
        if let Some(v) = self.ipu_version {
            c.ipu_model.version = match v {
                IpuVersionArg::Ipu1 => "ipu1",
                IpuVersionArg::Ipu2 => "ipu2",
            }
            .into();
        }
        if let Some(t) = self.tiles_per_ipu {
            if t == 0 {
                bail!("--tiles-per-ipu must be at least 1");
            }
            c.ipu_model.tiles_per_ipu = t;
        }
        if self.no_streaming_memory {
            c.ipu_model.streaming_memory = false;
        }
        Ok(c)
    }

    /// The flags given besides `--config`, by name: each chooses how the module compiles
    /// for the IPU, so none acts on a run that compiles nothing.
    pub fn given_for_compiling(&self) -> Vec<&'static str> {
        let mut given = super::given(&[
            ("--num-ipus", self.num_ipus.is_some()),
            ("--selection-order", self.selection_order.is_some()),
            ("--allow-recompute", self.allow_recompute),
            ("--matmul-amp", self.matmul_amp.is_some()),
            ("--conv-amp", self.conv_amp.is_some()),
            ("--matmul-partial-type", self.matmul_partial_type.is_some()),
            ("--conv-partial-type", self.conv_partial_type.is_some()),
            ("--ipu-version", self.ipu_version.is_some()),
            ("--tiles-per-ipu", self.tiles_per_ipu.is_some()),
            ("--no-streaming-memory", self.no_streaming_memory),
            ("--device", self.device.is_some()),
        ]);
        given.extend(self.passes.given());
        given
    }

    /// Applies the options `ipuxla convert` wrote into `module`'s header (read from `file`)
    /// where neither the flags nor the config chose: the IPU count, the stage-to-IPU
    /// mapping, the planner options and the device loop.
    pub fn apply_module_options(
        &self,
        file: &Path,
        module: &Module,
        config: &mut compiler::IpuConfig,
    ) -> anyhow::Result<()> {
        let module_options = module.frontend_attributes();
        // The IPU count `ipuxla convert --num-ipus` wrote into the module, unless the flags or
        // the config choose one.
        if self.num_ipus.is_none()
            && config.auto_select_ipus == compiler::config::AutoSelectIpus::default()
            && let Some(n) = module_options.get("ipuxla.num_ipus")
        {
            let n: usize = n.parse().map_err(|_| {
                anyhow!("{}: ipuxla.num_ipus=\"{n}\" is not a count", file.display())
            })?;
            config.auto_select_ipus = compiler::config::AutoSelectIpus::Count(n);
        }
        // Likewise the stage-to-IPU mapping `ipuxla convert --pipeline-cfg` wrote.
        if config.pipelining.device_mapping.is_empty()
            && let Some(m) = module_options.get("ipuxla.device_mapping")
        {
            config.pipelining.device_mapping = m
                .split(',')
                .map(|d| d.trim().parse::<usize>())
                .collect::<Result<_, _>>()
                .map_err(|_| {
                    anyhow!(
                        "{}: ipuxla.device_mapping=\"{m}\" is not a list of IPUs",
                        file.display()
                    )
                })?;
        }
        // Likewise the planner options `ipuxla convert` wrote.
        for (prefix, planner) in [
            ("ipuxla.matmul", &mut config.matmuls),
            ("ipuxla.conv", &mut config.convolutions),
        ] {
            for (suffix, option) in [
                ("_amp", "availableMemoryProportion"),
                ("_partial_type", "partialsType"),
            ] {
                if let Some(v) = module_options.get(&format!("{prefix}{suffix}"))
                    && !planner.poplar_options.contains_key(option)
                {
                    planner.poplar_options.insert(option.into(), v.clone());
                }
            }
        }
        // Likewise the device loop `ipuxla convert --batch-per-step` wrote.
        if config.device_loop.iterations_per_loop.is_none()
            && let Some(n) = module_options.get("ipuxla.batch_per_step")
        {
            let n: u64 = n.parse().map_err(|_| {
                anyhow!(
                    "{}: ipuxla.batch_per_step=\"{n}\" is not a count",
                    file.display()
                )
            })?;
            config.device_loop.iterations_per_loop = Some(n);
        }
        Ok(())
    }
}
