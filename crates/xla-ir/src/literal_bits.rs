//! Literals compared and hashed by their bits, which is what makes two constants one:
//! `-0.0` is not `0.0`, and a NaN is the NaN with the same bits (`==` on floats says
//! otherwise for both). The e-graph hash-conses constants this way.

use crate::literal::{ArrayData, Literal};
use std::hash::{Hash, Hasher};

impl ArrayData {
    /// Every element's bit pattern, in order (a complex element gives two: real, then
    /// imaginary).
    pub fn bit_patterns(&self) -> Vec<u64> {
        fn each<T: Copy>(v: &[T], bits: impl Fn(T) -> u64) -> Vec<u64> {
            v.iter().map(|&x| bits(x)).collect()
        }
        match self {
            ArrayData::Pred(v) => each(v, u64::from),
            ArrayData::S8(v) => each(v, |x| x as u8 as u64),
            ArrayData::S16(v) => each(v, |x| x as u16 as u64),
            ArrayData::S32(v) => each(v, |x| x as u32 as u64),
            ArrayData::S64(v) => each(v, |x| x as u64),
            ArrayData::U8(v) => each(v, u64::from),
            ArrayData::U16(v) => each(v, u64::from),
            ArrayData::U32(v) => each(v, u64::from),
            ArrayData::U64(v) => each(v, |x| x),
            ArrayData::F16(v) => each(v, |x| x.to_bits().into()),
            ArrayData::Bf16(v) => each(v, |x| x.to_bits().into()),
            ArrayData::F32(v) => each(v, |x| x.to_bits().into()),
            ArrayData::F64(v) => each(v, f64::to_bits),
            ArrayData::C64(v) => v
                .iter()
                .flat_map(|c| c.map(|x| u64::from(x.to_bits())))
                .collect(),
            ArrayData::C128(v) => v.iter().flat_map(|c| c.map(f64::to_bits)).collect(),
            ArrayData::Narrow { bits, .. } => each(bits, u64::from),
        }
    }
}

impl Literal {
    /// True when `self` and `other` have the same shape and the same bits everywhere.
    pub fn same_bits(&self, other: &Literal) -> bool {
        match (self, other) {
            (Literal::Array(a), Literal::Array(b)) => {
                a.shape == b.shape
                    && a.data.element_type() == b.data.element_type()
                    && a.data.bit_patterns() == b.data.bit_patterns()
            }
            (Literal::Tuple(a), Literal::Tuple(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same_bits(y))
            }
            (Literal::Token, Literal::Token) => true,
            _ => false,
        }
    }

    /// Feeds the shape and every bit pattern to `state`: literals with the
    /// [same bits](Literal::same_bits) hash alike.
    pub fn hash_bits<H: Hasher>(&self, state: &mut H) {
        match self {
            Literal::Array(a) => {
                a.shape.hash(state);
                a.data.bit_patterns().hash(state);
            }
            Literal::Tuple(items) => {
                items.len().hash(state);
                for item in items {
                    item.hash_bits(state);
                }
            }
            Literal::Token => 0u8.hash(state),
        }
    }
}

/// Hashes the shape only, so that literals equal by `==` (where `0.0 == -0.0`) always hash
/// alike; [`Literal::hash_bits`] is the finer hash for [`Literal::same_bits`].
impl Hash for Literal {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.shape().hash(state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ElementType;
    use crate::shape::ArrayShape;
    use std::hash::DefaultHasher;

    fn f32s(v: Vec<f32>) -> Literal {
        let shape = ArrayShape::new(ElementType::F32, &[v.len() as i64]);
        Literal::Array(crate::ArrayLiteral::new(shape, ArrayData::F32(v)).unwrap())
    }

    fn bits_hash(l: &Literal) -> u64 {
        let mut h = DefaultHasher::new();
        l.hash_bits(&mut h);
        h.finish()
    }

    #[test]
    fn signed_zeros_differ_and_a_nan_is_itself() {
        let (zero, minus_zero) = (f32s(vec![0.0]), f32s(vec![-0.0]));
        assert_eq!(zero, minus_zero);
        assert!(!zero.same_bits(&minus_zero));
        let nan = f32s(vec![f32::NAN]);
        assert_ne!(nan, nan.clone());
        assert!(nan.same_bits(&nan.clone()));
        assert_eq!(bits_hash(&nan), bits_hash(&nan.clone()));
        assert!(!nan.same_bits(&f32s(vec![-f32::NAN])));
        assert!(!f32s(vec![1.0, 2.0]).same_bits(&f32s(vec![1.0, 3.0])));
        assert!(!f32s(vec![1.0]).same_bits(&f32s(vec![1.0, 1.0])));
    }
}
