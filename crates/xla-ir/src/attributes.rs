//! Attribute types that opcodes carry: windows, padding, slices, dimension numbers,
//! comparison directions, precisions. Each prints itself exactly as HLO text spells it.

use crate::shape::write_comma_separated;
use std::fmt;

/// One dimension of a `slice={[start:limit:stride], ...}` attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SliceDim {
    /// First index taken.
    pub start: i64,
    /// One past the last index taken.
    pub limit: i64,
    /// Step between taken indices (at least 1).
    pub stride: i64,
}

/// One dimension of a `padding=lo_hi_interior x ...` attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PadDim {
    /// Elements added before the first (negative removes).
    pub low: i64,
    /// Elements added after the last (negative removes).
    pub high: i64,
    /// Elements added between neighbours (never negative).
    pub interior: i64,
}

/// One dimension of a `window={...}` attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WindowDim {
    /// Window size.
    pub size: i64,
    /// Step between window positions.
    pub stride: i64,
    /// Padding before the base.
    pub pad_low: i64,
    /// Padding after the base.
    pub pad_high: i64,
    /// Dilation of the window (`rhs_dilate`).
    pub window_dilation: i64,
    /// Dilation of the base (`lhs_dilate`).
    pub base_dilation: i64,
    /// Whether the window is reversed (`rhs_reversal`).
    pub window_reversal: bool,
}

impl WindowDim {
    /// A window dimension of `size` with every other field at its default.
    pub fn of_size(size: i64) -> WindowDim {
        WindowDim {
            size,
            stride: 1,
            pad_low: 0,
            pad_high: 0,
            window_dilation: 1,
            base_dilation: 1,
            window_reversal: false,
        }
    }

    /// Size of the window once dilated (saturating for absurd sizes).
    pub fn dilated_size(&self) -> i64 {
        if self.size <= 0 {
            0
        } else {
            (self.size - 1)
                .saturating_mul(self.window_dilation)
                .saturating_add(1)
        }
    }
}

/// A `window={size=.. stride=.. pad=.. lhs_dilate=.. rhs_dilate=.. rhs_reversal=..}` attribute.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Window {
    /// One entry per windowed dimension.
    pub dims: Vec<WindowDim>,
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let join = |f: &mut fmt::Formatter<'_>, key: &str, get: &dyn Fn(&WindowDim) -> String| {
            let parts: Vec<String> = self.dims.iter().map(get).collect();
            write!(f, "{key}={}", parts.join("x"))
        };
        f.write_str("{")?;
        join(f, "size", &|d| d.size.to_string())?;
        if self.dims.iter().any(|d| d.stride != 1) {
            f.write_str(" ")?;
            join(f, "stride", &|d| d.stride.to_string())?;
        }
        if self.dims.iter().any(|d| d.pad_low != 0 || d.pad_high != 0) {
            f.write_str(" ")?;
            join(f, "pad", &|d| format!("{}_{}", d.pad_low, d.pad_high))?;
        }
        if self.dims.iter().any(|d| d.base_dilation != 1) {
            f.write_str(" ")?;
            join(f, "lhs_dilate", &|d| d.base_dilation.to_string())?;
        }
        if self.dims.iter().any(|d| d.window_dilation != 1) {
            f.write_str(" ")?;
            join(f, "rhs_dilate", &|d| d.window_dilation.to_string())?;
        }
        if self.dims.iter().any(|d| d.window_reversal) {
            f.write_str(" ")?;
            join(f, "rhs_reversal", &|d| {
                (d.window_reversal as i32).to_string()
            })?;
        }
        f.write_str("}")
    }
}

/// Dimension numbers of a `dot`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct DotDims {
    /// Batch dimensions of the left operand.
    pub lhs_batch: Vec<i64>,
    /// Batch dimensions of the right operand.
    pub rhs_batch: Vec<i64>,
    /// Contracting dimensions of the left operand.
    pub lhs_contracting: Vec<i64>,
    /// Contracting dimensions of the right operand.
    pub rhs_contracting: Vec<i64>,
}

/// Dimension numbers of a `convolution`, printed as `dim_labels=b01f_01io->b01f`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct ConvDims {
    /// Batch dimension of the input.
    pub input_batch: i64,
    /// Feature dimension of the input.
    pub input_feature: i64,
    /// Spatial dimensions of the input, in spatial order.
    pub input_spatial: Vec<i64>,
    /// Input-feature dimension of the kernel.
    pub kernel_input_feature: i64,
    /// Output-feature dimension of the kernel.
    pub kernel_output_feature: i64,
    /// Spatial dimensions of the kernel.
    pub kernel_spatial: Vec<i64>,
    /// Batch dimension of the output.
    pub output_batch: i64,
    /// Feature dimension of the output.
    pub output_feature: i64,
    /// Spatial dimensions of the output.
    pub output_spatial: Vec<i64>,
}

impl ConvDims {
    /// 2-D convolution in TensorFlow's and JAX's usual layout: NHWC input, HWIO kernel,
    /// NHWC output (`dim_labels=b01f_01io->b01f`).
    pub fn nhwc_hwio() -> ConvDims {
        ConvDims {
            input_batch: 0,
            input_feature: 3,
            input_spatial: vec![1, 2],
            kernel_input_feature: 2,
            kernel_output_feature: 3,
            kernel_spatial: vec![0, 1],
            output_batch: 0,
            output_feature: 3,
            output_spatial: vec![1, 2],
        }
    }

    /// Number of spatial dimensions.
    pub fn spatial_rank(&self) -> usize {
        self.input_spatial.len()
    }
}

/// Writes one side of `dim_labels`: the label of each dimension in dimension order.
fn write_labels(
    f: &mut fmt::Formatter<'_>,
    rank: usize,
    a: (i64, char),
    b: (i64, char),
    spatial: &[i64],
) -> fmt::Result {
    let mut labels = vec!['?'; rank];
    let mut put = |dim: i64, c: char| {
        if let Some(slot) = labels.get_mut(dim as usize) {
            *slot = c;
        }
    };
    put(a.0, a.1);
    put(b.0, b.1);
    for (i, &d) in spatial.iter().enumerate() {
        put(d, char::from_digit(i as u32, 36).unwrap_or('?'));
    }
    labels.iter().try_for_each(|c| write!(f, "{c}"))
}

impl fmt::Display for ConvDims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rank = self.spatial_rank() + 2;
        write_labels(
            f,
            rank,
            (self.input_batch, 'b'),
            (self.input_feature, 'f'),
            &self.input_spatial,
        )?;
        f.write_str("_")?;
        write_labels(
            f,
            rank,
            (self.kernel_input_feature, 'i'),
            (self.kernel_output_feature, 'o'),
            &self.kernel_spatial,
        )?;
        f.write_str("->")?;
        write_labels(
            f,
            rank,
            (self.output_batch, 'b'),
            (self.output_feature, 'f'),
            &self.output_spatial,
        )
    }
}

/// Dimension numbers of a `gather`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct GatherDims {
    /// Output dimensions that hold the slice's (uncollapsed) dimensions.
    pub offset_dims: Vec<i64>,
    /// Operand dimensions of size 1 dropped from each slice.
    pub collapsed_slice_dims: Vec<i64>,
    /// Which operand dimension each index component addresses.
    pub start_index_map: Vec<i64>,
    /// Operand dimensions that are batch dimensions shared with the indices.
    pub operand_batching_dims: Vec<i64>,
    /// Index dimensions matching `operand_batching_dims`.
    pub start_indices_batching_dims: Vec<i64>,
    /// The index dimension that holds the index vector.
    pub index_vector_dim: i64,
}

/// Dimension numbers of a `scatter`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct ScatterDims {
    /// Update dimensions that are window dimensions.
    pub update_window_dims: Vec<i64>,
    /// Operand dimensions of size 1 not present in the update window.
    pub inserted_window_dims: Vec<i64>,
    /// Which operand dimension each index component addresses.
    pub scatter_dims_to_operand_dims: Vec<i64>,
    /// Operand dimensions that are batch dimensions shared with the indices.
    pub input_batching_dims: Vec<i64>,
    /// Index dimensions matching `input_batching_dims`.
    pub scatter_indices_batching_dims: Vec<i64>,
    /// The index dimension that holds the index vector.
    pub index_vector_dim: i64,
}

/// `direction=` of a `compare`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ComparisonDirection {
    /// Equal.
    Eq,
    /// Not equal.
    Ne,
    /// Less than.
    Lt,
    /// Less or equal.
    Le,
    /// Greater than.
    Gt,
    /// Greater or equal.
    Ge,
}

impl ComparisonDirection {
    /// Every direction.
    pub const ALL: [ComparisonDirection; 6] = [
        ComparisonDirection::Eq,
        ComparisonDirection::Ne,
        ComparisonDirection::Lt,
        ComparisonDirection::Le,
        ComparisonDirection::Gt,
        ComparisonDirection::Ge,
    ];

    /// The HLO spelling (`EQ`, `NE`, ...).
    pub fn name(self) -> &'static str {
        match self {
            ComparisonDirection::Eq => "EQ",
            ComparisonDirection::Ne => "NE",
            ComparisonDirection::Lt => "LT",
            ComparisonDirection::Le => "LE",
            ComparisonDirection::Gt => "GT",
            ComparisonDirection::Ge => "GE",
        }
    }
}

/// `type=` of a `compare`: how the elements are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompareType {
    /// IEEE comparison (NaN compares unordered).
    Float,
    /// Total order on floats (`-NaN < -Inf < ... < Inf < NaN`).
    TotalOrder,
    /// Signed integers.
    Signed,
    /// Unsigned integers.
    Unsigned,
}

impl CompareType {
    /// Every comparison type.
    pub const ALL: [CompareType; 4] = [
        CompareType::Float,
        CompareType::TotalOrder,
        CompareType::Signed,
        CompareType::Unsigned,
    ];

    /// The HLO spelling (`FLOAT`, `TOTALORDER`, ...).
    pub fn name(self) -> &'static str {
        match self {
            CompareType::Float => "FLOAT",
            CompareType::TotalOrder => "TOTALORDER",
            CompareType::Signed => "SIGNED",
            CompareType::Unsigned => "UNSIGNED",
        }
    }
}

/// Per-operand precision of a `dot` or `convolution`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Precision {
    /// Fastest, least precise.
    Default,
    /// More precise than default.
    High,
    /// Full precision.
    Highest,
}

impl Precision {
    /// Every precision.
    pub const ALL: [Precision; 3] = [Precision::Default, Precision::High, Precision::Highest];

    /// The HLO spelling (`default`, `high`, `highest`).
    pub fn name(self) -> &'static str {
        match self {
            Precision::Default => "default",
            Precision::High => "high",
            Precision::Highest => "highest",
        }
    }
}

/// `kind=` of a `fusion`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FusionKind {
    /// Element-wise loop fusion.
    Loop,
    /// Reduction-rooted fusion.
    Input,
    /// Fusion into an output-producing op (e.g. a dot).
    Output,
    /// Backend-defined fusion.
    Custom,
}

impl FusionKind {
    /// Every kind.
    pub const ALL: [FusionKind; 4] = [
        FusionKind::Loop,
        FusionKind::Input,
        FusionKind::Output,
        FusionKind::Custom,
    ];

    /// The HLO spelling (`kLoop`, ...).
    pub fn name(self) -> &'static str {
        match self {
            FusionKind::Loop => "kLoop",
            FusionKind::Input => "kInput",
            FusionKind::Output => "kOutput",
            FusionKind::Custom => "kCustom",
        }
    }
}

/// Writes `{a,b,c}`.
pub(crate) fn write_dim_list(f: &mut impl fmt::Write, values: &[i64]) -> fmt::Result {
    f.write_str("{")?;
    write_comma_separated(f, values)?;
    f.write_str("}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_prints_only_non_defaults() {
        let mut d = WindowDim::of_size(3);
        let w = Window { dims: vec![d, d] };
        assert_eq!(w.to_string(), "{size=3x3}");
        d.stride = 2;
        d.pad_low = 1;
        d.pad_high = 2;
        d.window_dilation = 2;
        let w = Window {
            dims: vec![d, WindowDim::of_size(1)],
        };
        assert_eq!(
            w.to_string(),
            "{size=3x1 stride=2x1 pad=1_2x0_0 rhs_dilate=2x1}"
        );
    }

    #[test]
    fn conv_dims_print_as_labels() {
        assert_eq!(ConvDims::nhwc_hwio().to_string(), "b01f_01io->b01f");
    }
}
