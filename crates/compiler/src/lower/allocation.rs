//! Where a parameter is allocated when its readers want a layout: a parameter read only
//! through slices of whole blocks (a stack of per-layer weights, say) is laid out block by
//! block, each block as a linearly mapped tensor of the block's size is, so every slice
//! lands on the tiles that already hold its elements and copies them on-tile.
//!
//! This is the slice path of Graphcore's `AllocationFinder` (ANCHORS.md §1.9: allocation
//! targets are found by walking forward from parameters through their users, slices
//! included, and the parameter is created with its target's layout); without it a block of
//! a linearly mapped stack sits on a twelfth of the tiles and every slice is an exchange.

use xla_ir::attributes::SliceDim;
use xla_ir::{Computation, InstrId, Op, Shape};

use super::mapping::{self, Piece};

/// The element count `m` of the blocks `param` is read in, when every reader of `param` in
/// `comp` slices one whole block of it: a `slice` with unit strides whose elements are one
/// contiguous range of `param`'s (dimensions after some dimension taken whole, those
/// before it one index wide), every range `m` elements long and starting at a multiple of
/// `m`, and `m` less than `param`'s element count. `None` when any reader does otherwise
/// (or `param` is the root, or has no reader).
pub(crate) fn slice_block(comp: &Computation, param: InstrId) -> Option<usize> {
    let Shape::Array(shape) = &comp.instr(param).shape else {
        return None;
    };
    if comp.root == param {
        return None;
    }
    let dims: Vec<usize> = shape.dims.iter().map(|&d| d as usize).collect();
    let total: usize = dims.iter().product();
    let mut block = None;
    for (_, instr) in comp.instructions() {
        if !instr.operands.contains(&param) {
            continue;
        }
        let Op::Slice { slices } = &instr.op else {
            return None;
        };
        let (offset, len) = contiguous_range(&dims, slices)?;
        if len == 0 || len >= total || offset % len != 0 || *block.get_or_insert(len) != len {
            return None;
        }
    }
    block
}

/// The first element and element count of a slice of an array of `dims` when its elements
/// are one contiguous range of the array's (row-major, as the lowering stores arrays).
fn contiguous_range(dims: &[usize], slices: &[SliceDim]) -> Option<(usize, usize)> {
    if slices.len() != dims.len() || slices.iter().any(|s| s.stride != 1) {
        return None;
    }
    let extents: Vec<usize> = slices
        .iter()
        .map(|s| (s.limit - s.start).max(0) as usize)
        .collect();
    // The outermost dimension not taken whole: all before it must be one index wide.
    let partial = (0..dims.len()).rfind(|&k| extents[k] != dims[k]);
    if let Some(j) = partial
        && extents[..j].iter().any(|&e| e != 1)
    {
        return None;
    }
    let starts: Vec<usize> = slices.iter().map(|s| s.start as usize).collect();
    Some((
        super::movement::flat(dims, &starts),
        extents.iter().product(),
    ))
}

/// `n` elements laid out in blocks of `block`, each as `one_block` (a mapping of `block`
/// elements) lays out one; neighbours on one tile joined.
pub(crate) fn blocked(one_block: &[Piece], n: usize, block: usize) -> Vec<Piece> {
    let pieces = (0..n.div_ceil(block)).flat_map(|b| {
        one_block.iter().filter_map(move |p| {
            let start = b * block + p.start;
            let end = (start + p.len).min(n);
            (end > start).then(|| Piece {
                tile: p.tile,
                start,
                len: end - start,
            })
        })
    });
    mapping::merged(pieces.collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use xla_ir::parse_module;

    fn block_of(text: &str) -> Option<usize> {
        let m = parse_module(text).expect("parses");
        let entry = m.entry_computation();
        slice_block(entry, entry.parameters()[0])
    }

    #[test]
    fn a_stack_read_a_layer_at_a_time_is_allocated_in_layers() {
        let text = "HloModule m\nENTRY e {\n  w = f32[3,4,5]{2,1,0} parameter(0)\n  \
                    a = f32[1,4,5]{2,1,0} slice(w), slice={[0:1], [0:4], [0:5]}\n  \
                    b = f32[1,4,5]{2,1,0} slice(w), slice={[2:3], [0:4], [0:5]}\n  \
                    ROOT t = (f32[1,4,5]{2,1,0}, f32[1,4,5]{2,1,0}) tuple(a, b)\n}\n";
        assert_eq!(block_of(text), Some(20));
    }

    #[test]
    fn slices_of_other_shapes_or_other_readers_keep_the_linear_layout() {
        // Not contiguous: a column of a matrix.
        let column = "HloModule m\nENTRY e {\n  w = f32[4,5]{1,0} parameter(0)\n  \
                      ROOT a = f32[4,1]{1,0} slice(w), slice={[0:4], [1:2]}\n}\n";
        assert_eq!(block_of(column), None);
        // Contiguous but not at a multiple of its length.
        let shifted = "HloModule m\nENTRY e {\n  w = f32[4,5]{1,0} parameter(0)\n  \
                       ROOT a = f32[2,5]{1,0} slice(w), slice={[1:3], [0:5]}\n}\n";
        assert_eq!(block_of(shifted), None);
        // Two block lengths.
        let mixed = "HloModule m\nENTRY e {\n  w = f32[4,5]{1,0} parameter(0)\n  \
                     a = f32[1,5]{1,0} slice(w), slice={[0:1], [0:5]}\n  \
                     b = f32[2,5]{1,0} slice(w), slice={[2:4], [0:5]}\n  \
                     ROOT t = (f32[1,5]{1,0}, f32[2,5]{1,0}) tuple(a, b)\n}\n";
        assert_eq!(block_of(mixed), None);
        // Another reader.
        let other = "HloModule m\nENTRY e {\n  w = f32[4,5]{1,0} parameter(0)\n  \
                     a = f32[1,5]{1,0} slice(w), slice={[0:1], [0:5]}\n  \
                     n = f32[4,5]{1,0} negate(w)\n  \
                     ROOT t = (f32[1,5]{1,0}, f32[4,5]{1,0}) tuple(a, n)\n}\n";
        assert_eq!(block_of(other), None);
    }

    #[test]
    fn blocks_repeat_the_one_block_layout() {
        let one = [
            Piece {
                tile: 7,
                start: 0,
                len: 3,
            },
            Piece {
                tile: 8,
                start: 3,
                len: 2,
            },
        ];
        let tiles: Vec<(usize, usize, usize)> = blocked(&one, 12, 5)
            .iter()
            .map(|p| (p.tile, p.start, p.len))
            .collect();
        assert_eq!(
            tiles,
            [(7, 0, 3), (8, 3, 2), (7, 5, 3), (8, 8, 2), (7, 10, 2)]
        );
    }
}
