//! Element types of HLO arrays: the ones ipuxla computes with (`PRED`, `S8`..`S64`,
//! `U8`..`U64`, `F16`, `BF16`, `F32`, `F64`) and the rest of XLA's (complex, 8- and 4-bit
//! floats, 2- and 4-bit integers), which it reads, checks and prints but does not compute.

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
    /// Signed 2-bit integer (one per byte in memory).
    S2,
    /// Signed 4-bit integer (one per byte in memory).
    S4,
    /// Unsigned 2-bit integer.
    U2,
    /// Unsigned 4-bit integer.
    U4,
    /// 4-bit float: 2 exponent bits, 1 mantissa bit, finite only.
    F4e2m1fn,
    /// 8-bit float: 3 exponent bits, 4 mantissa bits, IEEE-like.
    F8e3m4,
    /// 8-bit float: 4 exponent bits, 3 mantissa bits, IEEE-like.
    F8e4m3,
    /// 8-bit float: 4 exponent bits, 3 mantissa bits, finite with one NaN per sign.
    F8e4m3fn,
    /// 8-bit float: 4 exponent bits, 3 mantissa bits, unsigned zero, one NaN.
    F8e4m3fnuz,
    /// 8-bit float: 4 exponent bits (bias 11), 3 mantissa bits, unsigned zero, one NaN.
    F8e4m3b11fnuz,
    /// 8-bit float: 5 exponent bits, 2 mantissa bits, IEEE-like.
    F8e5m2,
    /// 8-bit float: 5 exponent bits, 2 mantissa bits, unsigned zero, one NaN.
    F8e5m2fnuz,
    /// 8-bit scale: 8 exponent bits, no mantissa, no sign.
    F8e8m0fnu,
    /// Complex of two `f32`s.
    C64,
    /// Complex of two `f64`s.
    C128,
}

impl ElementType {
    /// The element types ipuxla computes with, in a stable order.
    pub const COMPUTED: [ElementType; 13] = [
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

    /// The element types ipuxla reads and prints but does not compute with.
    pub const UNCOMPUTED: [ElementType; 15] = [
        ElementType::S2,
        ElementType::S4,
        ElementType::U2,
        ElementType::U4,
        ElementType::F4e2m1fn,
        ElementType::F8e3m4,
        ElementType::F8e4m3,
        ElementType::F8e4m3fn,
        ElementType::F8e4m3fnuz,
        ElementType::F8e4m3b11fnuz,
        ElementType::F8e5m2,
        ElementType::F8e5m2fnuz,
        ElementType::F8e8m0fnu,
        ElementType::C64,
        ElementType::C128,
    ];

    /// Every element type XLA's text format has: [`Self::COMPUTED`], then
    /// [`Self::UNCOMPUTED`].
    pub const ALL: [ElementType; 28] = {
        let mut all = [ElementType::Pred; 28];
        let mut i = 0;
        while i < 28 {
            all[i] = if i < 13 {
                ElementType::COMPUTED[i]
            } else {
                ElementType::UNCOMPUTED[i - 13]
            };
            i += 1;
        }
        all
    };

    /// True for the types ipuxla computes with (the evaluator and the IPU); the others are
    /// read, verified and printed, and refused by name where a value would be computed.
    pub fn is_computed(self) -> bool {
        ElementType::COMPUTED.contains(&self)
    }

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
            ElementType::S2 => "s2",
            ElementType::S4 => "s4",
            ElementType::U2 => "u2",
            ElementType::U4 => "u4",
            ElementType::F4e2m1fn => "f4e2m1fn",
            ElementType::F8e3m4 => "f8e3m4",
            ElementType::F8e4m3 => "f8e4m3",
            ElementType::F8e4m3fn => "f8e4m3fn",
            ElementType::F8e4m3fnuz => "f8e4m3fnuz",
            ElementType::F8e4m3b11fnuz => "f8e4m3b11fnuz",
            ElementType::F8e5m2 => "f8e5m2",
            ElementType::F8e5m2fnuz => "f8e5m2fnuz",
            ElementType::F8e8m0fnu => "f8e8m0fnu",
            ElementType::C64 => "c64",
            ElementType::C128 => "c128",
        }
    }

    /// Parses the HLO spelling of an element type.
    pub fn from_name(name: &str) -> Option<ElementType> {
        ElementType::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Bytes one element occupies in memory (sub-byte types take a byte each, unpacked).
    pub fn byte_size(self) -> usize {
        match self {
            ElementType::C128 => 16,
            ElementType::C64 => 8,
            t => t.bit_width().div_ceil(8),
        }
    }

    /// Bits of one element's value (what `bitcast-convert` compares).
    pub fn bit_width(self) -> usize {
        match self {
            ElementType::S2 | ElementType::U2 => 2,
            ElementType::S4 | ElementType::U4 | ElementType::F4e2m1fn => 4,
            ElementType::Pred | ElementType::S8 | ElementType::U8 => 8,
            t if t.is_f8() => 8,
            ElementType::S16 | ElementType::U16 | ElementType::F16 | ElementType::Bf16 => 16,
            ElementType::S32 | ElementType::U32 | ElementType::F32 => 32,
            ElementType::C64 => 64,
            ElementType::C128 => 128,
            _ => 64,
        }
    }

    /// True for the 8-bit float types.
    pub fn is_f8(self) -> bool {
        matches!(
            self,
            ElementType::F8e3m4
                | ElementType::F8e4m3
                | ElementType::F8e4m3fn
                | ElementType::F8e4m3fnuz
                | ElementType::F8e4m3b11fnuz
                | ElementType::F8e5m2
                | ElementType::F8e5m2fnuz
                | ElementType::F8e8m0fnu
        )
    }

    /// True for the real floating-point types (not complex).
    pub fn is_float(self) -> bool {
        matches!(
            self,
            ElementType::F16
                | ElementType::Bf16
                | ElementType::F32
                | ElementType::F64
                | ElementType::F4e2m1fn
        ) || self.is_f8()
    }

    /// True for `c64` and `c128`.
    pub fn is_complex(self) -> bool {
        matches!(self, ElementType::C64 | ElementType::C128)
    }

    /// The type of each component of a complex type (`f32` for `c64`); `self` otherwise.
    pub fn component_type(self) -> ElementType {
        match self {
            ElementType::C64 => ElementType::F32,
            ElementType::C128 => ElementType::F64,
            t => t,
        }
    }

    /// True for the signed integer types.
    pub fn is_signed_int(self) -> bool {
        matches!(
            self,
            ElementType::S2
                | ElementType::S4
                | ElementType::S8
                | ElementType::S16
                | ElementType::S32
                | ElementType::S64
        )
    }

    /// True for the unsigned integer types.
    pub fn is_unsigned_int(self) -> bool {
        matches!(
            self,
            ElementType::U2
                | ElementType::U4
                | ElementType::U8
                | ElementType::U16
                | ElementType::U32
                | ElementType::U64
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
        assert!(ElementType::COMPUTED.iter().all(|t| t.is_computed()));
        assert!(ElementType::UNCOMPUTED.iter().all(|t| !t.is_computed()));
        let distinct: std::collections::HashSet<_> = ElementType::ALL.iter().collect();
        assert_eq!(distinct.len(), ElementType::ALL.len());
        assert!(!ElementType::C64.is_computed());
    }

    #[test]
    fn sizes() {
        assert_eq!(ElementType::Bf16.byte_size(), 2);
        assert_eq!(ElementType::U64.bit_width(), 64);
        assert!(ElementType::F16.is_float() && !ElementType::Pred.is_integer());
        assert_eq!(ElementType::S4.bit_width(), 4);
        assert_eq!(ElementType::S4.byte_size(), 1);
        assert_eq!(ElementType::C128.byte_size(), 16);
        assert!(ElementType::F8e4m3fn.is_float() && !ElementType::C64.is_float());
    }
}
