//! `sharding={...}`: where a value lives across devices (IPUs). `{maximal device=N}` is
//! what `ipu_shard(N)` scopes produce; tiled forms split an array across devices.

use std::fmt;

/// How the devices of a tiled sharding are listed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TileDevices {
    /// An explicit list: `devices=[2,2]0,1,2,3`.
    List(Vec<i64>),
    /// An iota, reshaped and optionally transposed: `devices=[2,2]<=[2,2]T(1,0)`.
    Iota {
        /// The dimensions the iota is reshaped to before transposing.
        reshape: Vec<i64>,
        /// The transpose permutation (empty for none).
        transpose: Vec<i64>,
    },
}

/// A sharding annotation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Sharding {
    /// Every device holds the whole value.
    Replicated,
    /// Partitioned by hand; the compiler leaves it alone.
    Manual,
    /// Not yet decided.
    Unknown,
    /// The whole value lives on one device.
    Maximal {
        /// The device (IPU) number.
        device: i64,
    },
    /// The array is split into tiles, one per device.
    Tiled {
        /// Number of tiles along each dimension (plus any subgroup dimensions).
        tile_dims: Vec<i64>,
        /// The device holding each tile, in row-major tile order.
        devices: TileDevices,
        /// The last tile dimension replicates rather than splits.
        last_tile_dim_replicate: bool,
        /// Subgroup kinds of the trailing tile dimensions (`manual`, `replicated`, ...).
        last_tile_dims: Vec<String>,
    },
    /// One sharding per tuple element.
    Tuple(Vec<Sharding>),
}

fn write_list(f: &mut fmt::Formatter<'_>, values: &[i64]) -> fmt::Result {
    let parts: Vec<String> = values.iter().map(i64::to_string).collect();
    f.write_str(&parts.join(","))
}

impl fmt::Display for Sharding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sharding::Replicated => f.write_str("{replicated}"),
            Sharding::Manual => f.write_str("{manual}"),
            Sharding::Unknown => f.write_str("{unknown}"),
            Sharding::Maximal { device } => write!(f, "{{maximal device={device}}}"),
            Sharding::Tuple(elems) => {
                f.write_str("{")?;
                for (i, e) in elems.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{e}")?;
                }
                f.write_str("}")
            }
            Sharding::Tiled {
                tile_dims,
                devices,
                last_tile_dim_replicate,
                last_tile_dims,
            } => {
                f.write_str("{devices=[")?;
                write_list(f, tile_dims)?;
                f.write_str("]")?;
                match devices {
                    TileDevices::List(list) => write_list(f, list)?,
                    TileDevices::Iota { reshape, transpose } => {
                        f.write_str("<=[")?;
                        write_list(f, reshape)?;
                        f.write_str("]")?;
                        if !transpose.is_empty() {
                            f.write_str("T(")?;
                            write_list(f, transpose)?;
                            f.write_str(")")?;
                        }
                    }
                }
                if *last_tile_dim_replicate {
                    f.write_str(" last_tile_dim_replicate")?;
                }
                if !last_tile_dims.is_empty() {
                    write!(f, " last_tile_dims={{{}}}", last_tile_dims.join(", "))?;
                }
                f.write_str("}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_every_form() {
        assert_eq!(
            Sharding::Maximal { device: 1 }.to_string(),
            "{maximal device=1}"
        );
        let tiled = Sharding::Tiled {
            tile_dims: vec![2, 1, 2],
            devices: TileDevices::List(vec![0, 1, 2, 3]),
            last_tile_dim_replicate: true,
            last_tile_dims: vec![],
        };
        assert_eq!(
            tiled.to_string(),
            "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"
        );
        let iota = Sharding::Tiled {
            tile_dims: vec![2, 2],
            devices: TileDevices::Iota {
                reshape: vec![2, 2],
                transpose: vec![1, 0],
            },
            last_tile_dim_replicate: false,
            last_tile_dims: vec![],
        };
        assert_eq!(iota.to_string(), "{devices=[2,2]<=[2,2]T(1,0)}");
        let tuple = Sharding::Tuple(vec![Sharding::Replicated, Sharding::Maximal { device: 0 }]);
        assert_eq!(tuple.to_string(), "{{replicated}, {maximal device=0}}");
    }
}
