//! Shapes: arrays (element type, dimensions, optional layout), tuples and tokens.
//!
//! Layouts only describe how an array is placed in memory; they never change a value,
//! so shape comparisons in the verifier ignore them ([`Shape::same_ignoring_layout`]).

use crate::ElementType;
use smallvec::SmallVec;
use std::fmt;

/// Dimension sizes of an array, outermost first.
pub type Dims = SmallVec<[i64; 6]>;

/// One tile of a tiled layout: its sizes, with [`Tile::COMBINE`] for XLA's `*`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Tile(pub SmallVec<[i64; 4]>);

impl Tile {
    /// XLA's `*` tile dimension ("combine with the next dimension").
    pub const COMBINE: i64 = -1;
}

/// A memory layout: `{1,0}`, optionally with tiling and other suffixes (`{1,0:T(8,128)}`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Layout {
    /// Dimension numbers from the fastest-varying to the slowest.
    pub minor_to_major: SmallVec<[i64; 6]>,
    /// Tiles from `T(..)(..)`, outermost first.
    pub tiles: Vec<Tile>,
    /// Other suffix items kept verbatim so nothing is lost (`E(4)`, `S(1)`, ...).
    pub suffix_items: Vec<String>,
}

impl Layout {
    /// The default (row-major) layout for an array of `rank` dimensions: `{rank-1, ..., 0}`.
    pub fn row_major(rank: usize) -> Layout {
        Layout {
            minor_to_major: (0..rank as i64).rev().collect(),
            ..Layout::default()
        }
    }
}

/// An array shape: element type, dimensions and an optional layout.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ArrayShape {
    /// The element type.
    pub element_type: ElementType,
    /// The dimension sizes, outermost first; empty for a scalar.
    pub dims: Dims,
    /// The layout, when the text or the builder gave one.
    pub layout: Option<Layout>,
}

impl ArrayShape {
    /// An array shape with the default row-major layout.
    pub fn new(element_type: ElementType, dims: &[i64]) -> ArrayShape {
        ArrayShape {
            element_type,
            dims: dims.iter().copied().collect(),
            layout: Some(Layout::row_major(dims.len())),
        }
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// Number of elements (1 for a scalar), saturating at `u64::MAX` for absurd shapes.
    pub fn element_count(&self) -> u64 {
        self.dims
            .iter()
            .fold(1u64, |n, &d| n.saturating_mul(d.max(0) as u64))
    }

    /// Bytes the array's elements occupy (saturating).
    pub fn byte_size(&self) -> u64 {
        self.element_count()
            .saturating_mul(self.element_type.byte_size() as u64)
    }

    /// True when element type and dimensions agree (layouts may differ).
    pub fn same_ignoring_layout(&self, other: &ArrayShape) -> bool {
        self.element_type == other.element_type && self.dims == other.dims
    }

    /// The same shape with another element type, keeping dimensions and layout.
    pub fn with_element_type(&self, element_type: ElementType) -> ArrayShape {
        ArrayShape {
            element_type,
            ..self.clone()
        }
    }
}

/// The shape of any HLO value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Shape {
    /// An array (a scalar is an array of rank 0).
    Array(ArrayShape),
    /// A tuple of shapes.
    Tuple(Vec<Shape>),
    /// An ordering token.
    Token,
}

impl Shape {
    /// An array shape with the default row-major layout.
    pub fn array(element_type: ElementType, dims: &[i64]) -> Shape {
        Shape::Array(ArrayShape::new(element_type, dims))
    }

    /// A scalar of the given type.
    pub fn scalar(element_type: ElementType) -> Shape {
        Shape::array(element_type, &[])
    }

    /// The array shape, if this is an array.
    pub fn as_array(&self) -> Option<&ArrayShape> {
        match self {
            Shape::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The array shape to change, if this is an array.
    pub fn as_array_mut(&mut self) -> Option<&mut ArrayShape> {
        match self {
            Shape::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The tuple elements, if this is a tuple.
    pub fn as_tuple(&self) -> Option<&[Shape]> {
        match self {
            Shape::Tuple(t) => Some(t),
            _ => None,
        }
    }

    /// True for tuple shapes.
    pub fn is_tuple(&self) -> bool {
        matches!(self, Shape::Tuple(_))
    }

    /// True when the shapes agree in everything but layouts.
    pub fn same_ignoring_layout(&self, other: &Shape) -> bool {
        match (self, other) {
            (Shape::Array(a), Shape::Array(b)) => a.same_ignoring_layout(b),
            (Shape::Tuple(a), Shape::Tuple(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same_ignoring_layout(y))
            }
            (Shape::Token, Shape::Token) => true,
            _ => false,
        }
    }

    /// The leaf array shapes in depth-first order (a tuple flattened).
    pub fn leaf_arrays(&self) -> Vec<&ArrayShape> {
        let mut out = Vec::new();
        fn walk<'a>(s: &'a Shape, out: &mut Vec<&'a ArrayShape>) {
            match s {
                Shape::Array(a) => out.push(a),
                Shape::Tuple(t) => t.iter().for_each(|e| walk(e, out)),
                Shape::Token => {}
            }
        }
        walk(self, &mut out);
        out
    }

    /// Total bytes of all leaf arrays.
    pub fn byte_size(&self) -> u64 {
        self.leaf_arrays()
            .iter()
            .fold(0u64, |n, a| n.saturating_add(a.byte_size()))
    }
}

impl From<ArrayShape> for Shape {
    fn from(a: ArrayShape) -> Shape {
        Shape::Array(a)
    }
}

/// Writes `items` separated by `, `, with XLA's `/*index=N*/` marker before every fifth item.
pub(crate) fn write_indexed_list<T>(
    f: &mut impl fmt::Write,
    items: &[T],
    mut write_item: impl FnMut(&mut dyn fmt::Write, &T) -> fmt::Result,
) -> fmt::Result {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
            if i % 5 == 0 {
                write!(f, "/*index={i}*/")?;
            }
        }
        write_item(f, item)?;
    }
    Ok(())
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        write_comma_separated(f, &self.minor_to_major)?;
        if !self.tiles.is_empty() || !self.suffix_items.is_empty() {
            f.write_str(":")?;
            if !self.tiles.is_empty() {
                f.write_str("T")?;
                for tile in &self.tiles {
                    f.write_str("(")?;
                    for (i, d) in tile.0.iter().enumerate() {
                        if i > 0 {
                            f.write_str(",")?;
                        }
                        if *d == Tile::COMBINE {
                            f.write_str("*")?;
                        } else {
                            write!(f, "{d}")?;
                        }
                    }
                    f.write_str(")")?;
                }
            }
            for item in &self.suffix_items {
                f.write_str(item)?;
            }
        }
        f.write_str("}")
    }
}

/// Writes integers separated by `,` with no spaces (as XLA prints dimension lists).
pub(crate) fn write_comma_separated(f: &mut impl fmt::Write, values: &[i64]) -> fmt::Result {
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            f.write_str(",")?;
        }
        write!(f, "{v}")?;
    }
    Ok(())
}

impl fmt::Display for ArrayShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[", self.element_type)?;
        write_comma_separated(f, &self.dims)?;
        f.write_str("]")?;
        // XLA prints no layout for scalars.
        if let Some(layout) = &self.layout
            && !self.dims.is_empty()
        {
            write!(f, "{layout}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shape::Array(a) => write!(f, "{a}"),
            Shape::Token => f.write_str("token[]"),
            Shape::Tuple(elems) => {
                f.write_str("(")?;
                write_indexed_list(f, elems, |f, s| write!(f, "{s}"))?;
                f.write_str(")")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_like_xla() {
        assert_eq!(
            Shape::array(ElementType::F32, &[4, 8]).to_string(),
            "f32[4,8]{1,0}"
        );
        assert_eq!(Shape::scalar(ElementType::S32).to_string(), "s32[]");
        let t = Shape::Tuple((0..6).map(|_| Shape::scalar(ElementType::F32)).collect());
        assert_eq!(
            t.to_string(),
            "(f32[], f32[], f32[], f32[], f32[], /*index=5*/f32[])"
        );
        let tiled = ArrayShape {
            layout: Some(Layout {
                minor_to_major: [1, 0].into_iter().collect(),
                tiles: vec![
                    Tile([8, 128].into_iter().collect()),
                    Tile([2, 1].into_iter().collect()),
                ],
                suffix_items: vec![],
            }),
            ..ArrayShape::new(ElementType::F32, &[16, 256])
        };
        assert_eq!(tiled.to_string(), "f32[16,256]{1,0:T(8,128)(2,1)}");
    }

    #[test]
    fn layout_is_ignored_in_comparisons() {
        let a = ArrayShape::new(ElementType::F32, &[16, 10]);
        let mut b = a.clone();
        b.layout = Some(Layout {
            minor_to_major: [0, 1].into_iter().collect(),
            ..Layout::default()
        });
        assert!(a.same_ignoring_layout(&b));
        assert_ne!(a, b);
    }
}
