//! Element types of HLO arrays (`PRED`, `S8`..`S64`, `U8`..`U64`, `F16`, `BF16`, `F32`, `F64`).

use std::fmt;

/// The primitive type of every element of an array, as HLO text spells it in lower case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ElementType {
    /// Boolean, one byte per element.
    Pred,
    /// Signed 8-bit integer.
    S8,
    /// Signed 16-bit integer.
    S16,
    /// Signed 32-bit integer.
    S32,
    /// Signed 64-bit integer.
    S64,
    /// Unsigned 8-bit integer.
    U8,
    /// Unsigned 16-bit integer.
    U16,
    /// Unsigned 32-bit integer.
    U32,
    /// Unsigned 64-bit integer.
    U64,
    /// IEEE half precision.
    F16,
    /// bfloat16: the top 16 bits of an `f32`.
    Bf16,
    /// IEEE single precision.
    F32,
    /// IEEE double precision.
    F64,
}

impl ElementType {
    /// Every element type, in a stable order.
    pub const ALL: [ElementType; 13] = [
        ElementType::Pred,
        ElementType::S8,
        ElementType::S16,
        ElementType::S32,
        ElementType::S64,
        ElementType::U8,
        ElementType::U16,
        ElementType::U32,
        ElementType::U64,
        ElementType::F16,
        ElementType::Bf16,
        ElementType::F32,
        ElementType::F64,
    ];

    /// The lower-case spelling used in HLO text (`f32`, `pred`, `bf16`).
    pub fn name(self) -> &'static str {
        match self {
            ElementType::Pred => "pred",
            ElementType::S8 => "s8",
            ElementType::S16 => "s16",
            ElementType::S32 => "s32",
            ElementType::S64 => "s64",
            ElementType::U8 => "u8",
            ElementType::U16 => "u16",
            ElementType::U32 => "u32",
            ElementType::U64 => "u64",
            ElementType::F16 => "f16",
            ElementType::Bf16 => "bf16",
            ElementType::F32 => "f32",
            ElementType::F64 => "f64",
        }
    }

    /// Parses the HLO spelling of an element type.
    pub fn from_name(name: &str) -> Option<ElementType> {
        ElementType::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Bytes one element occupies in memory.
    pub fn byte_size(self) -> usize {
        match self {
            ElementType::Pred | ElementType::S8 | ElementType::U8 => 1,
            ElementType::S16 | ElementType::U16 | ElementType::F16 | ElementType::Bf16 => 2,
            ElementType::S32 | ElementType::U32 | ElementType::F32 => 4,
            ElementType::S64 | ElementType::U64 | ElementType::F64 => 8,
        }
    }

    /// Bits one element occupies (what `bitcast-convert` compares).
    pub fn bit_width(self) -> usize {
        self.byte_size() * 8
    }

    /// True for the floating-point types.
    pub fn is_float(self) -> bool {
        matches!(
            self,
            ElementType::F16 | ElementType::Bf16 | ElementType::F32 | ElementType::F64
        )
    }

    /// True for the signed integer types.
    pub fn is_signed_int(self) -> bool {
        matches!(
            self,
            ElementType::S8 | ElementType::S16 | ElementType::S32 | ElementType::S64
        )
    }

    /// True for the unsigned integer types.
    pub fn is_unsigned_int(self) -> bool {
        matches!(
            self,
            ElementType::U8 | ElementType::U16 | ElementType::U32 | ElementType::U64
        )
    }

    /// True for signed and unsigned integers (not `pred`).
    pub fn is_integer(self) -> bool {
        self.is_signed_int() || self.is_unsigned_int()
    }
}

impl fmt::Display for ElementType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for t in ElementType::ALL {
            assert_eq!(ElementType::from_name(t.name()), Some(t));
        }
        assert_eq!(ElementType::from_name("f8"), None);
    }

    #[test]
    fn sizes() {
        assert_eq!(ElementType::Bf16.byte_size(), 2);
        assert_eq!(ElementType::U64.bit_width(), 64);
        assert!(ElementType::F16.is_float() && !ElementType::Pred.is_integer());
    }
}
