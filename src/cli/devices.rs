//! `ipuxla devices`: the modelled IPU system as `gc-info -l` would list it, and the shard to
//! IPU order of each selection order.

use anyhow::anyhow;
use clap::{Args, ValueEnum};
use runtime::{IpuVersion, SelectionOrder, System, Target};

/// An IPU generation, as the command line names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IpuVersionArg {
    /// Mk1: 1216 tiles x 256 KiB, 1.6 GHz.
    Ipu1,
    /// Mk2: 1472 tiles x 624 KiB, 1.325 GHz.
    Ipu2,
}

/// A selection order, as the command line names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "UPPER")]
pub enum SelectionOrderArg {
    /// Chosen by ipuxla (per program; SNAKE in this listing).
    Auto,
    /// 0, 1, 2, 3, ...
    Zigzag,
    /// 0, 1, 3, 2, 4, 5, 7, 6, ...
    Snake,
    /// 0, 2, 4, ..., 5, 3, 1.
    Hoof,
}

impl SelectionOrderArg {
    /// The seed's name (`AUTO`, `ZIGZAG`, `SNAKE`, `HOOF`).
    pub fn name(self) -> &'static str {
        match self {
            SelectionOrderArg::Auto => "AUTO",
            SelectionOrderArg::Zigzag => "ZIGZAG",
            SelectionOrderArg::Snake => "SNAKE",
            SelectionOrderArg::Hoof => "HOOF",
        }
    }
}

/// Arguments of `ipuxla devices`.
#[derive(Debug, Args)]
pub struct DevicesArgs {
    /// Number of IPUs in the modelled system: 1 or a whole number of C2 cards (even).
    #[arg(long, default_value_t = 16)]
    pub num_ipus: usize,
    /// The IPU generation modelled.
    #[arg(long, value_enum, ignore_case = true, default_value_t = IpuVersionArg::Ipu2)]
    pub ipu_version: IpuVersionArg,
    /// The selection order to mark as chosen.
    #[arg(long, value_enum, ignore_case = true, default_value_t = SelectionOrderArg::Auto)]
    pub selection_order: SelectionOrderArg,
    /// Also list the devices an IpuConfig's `auto_select_ipus` configures (the seed's
    /// `/device:IPU:K`, which `run --device K` chooses).
    #[arg(long, value_name = "FILE.json")]
    pub config: Option<std::path::PathBuf>,
}

/// Runs `ipuxla devices`.
pub fn run(args: DevicesArgs) -> anyhow::Result<()> {
    let version = match args.ipu_version {
        IpuVersionArg::Ipu1 => IpuVersion::Ipu1,
        IpuVersionArg::Ipu2 => IpuVersion::Ipu2,
    };
    let order = match args.selection_order {
        SelectionOrderArg::Auto => SelectionOrder::Auto,
        SelectionOrderArg::Zigzag => SelectionOrder::Zigzag,
        SelectionOrderArg::Snake => SelectionOrder::Snake,
        SelectionOrderArg::Hoof => SelectionOrder::Hoof,
    };
    let system =
        System::new(Target::of(version), args.num_ipus).map_err(|e| anyhow!("--num-ipus: {e}"))?;
    out!("{}", runtime::selection::listing(&system, order));
    if let Some(path) = &args.config {
        let config = super::load_config(Some(path))?;
        let devices = config.auto_select_ipus.devices();
        outln!(
            "devices configured by {} (auto_select_ipus {}):",
            path.display(),
            serde_json::to_string(&config.auto_select_ipus)?
        );
        for (k, n) in devices.iter().enumerate() {
            outln!(
                "  /device:IPU:{k}  {n} IPU{}  (run --device {k})",
                if *n == 1 { "" } else { "s" }
            );
        }
    }
    Ok(())
}
