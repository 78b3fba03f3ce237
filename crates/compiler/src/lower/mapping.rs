//! Tile mappings: which tile holds which elements. Linear mapping with a grain, as
//! `poputil::mapTensorLinearly` does, starting at a tile chosen from the element count so
//! that equally sized tensors map alike (element-wise operands then need no exchange) while
//! small tensors of different sizes spread over the tiles.

use codegen::DType;
use serde::Serialize;

/// Elements per grain of the codelet planners' splits (a run shorter than this is mostly
/// the overhead of copying it).
pub const GRAIN: usize = 16;
/// A tile gets at least this many bytes of a linearly mapped tensor before it spreads to
/// another, in grains of the type's vector width (the 64-bit data path): PopLibs'
/// `poputil::mapTensorLinearly(graph, t)` (graphcore/poplibs lib/poputil/TileMapping.cpp:
/// `minBytesPerTile = 128`, `grainSize = target.getVectorWidth(type)`).
pub const MIN_BYTES_PER_TILE: usize = 128;

/// The fewest elements of `dtype` a linear mapping puts on a tile.
pub fn min_elements_per_tile(dtype: DType) -> usize {
    MIN_BYTES_PER_TILE.div_ceil(dtype.size())
}

/// A run of a tensor's elements on one tile (tiles numbered across IPUs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Piece {
    /// Global tile index (`ipu * tiles_per_ipu + tile`).
    pub tile: usize,
    /// First element.
    pub start: usize,
    /// Elements.
    pub len: usize,
}

/// The first tile of a linear mapping of `elements`.
fn start_tile(elements: usize, tiles: usize) -> usize {
    (elements.wrapping_mul(2_654_435_761) >> 7) % tiles
}

/// Spreads `elements` of `dtype` over `tiles` tiles as `mapTensorLinearly` does: at least
/// [`MIN_BYTES_PER_TILE`] a tile, in grains of the type's vector width (8 bytes).
pub fn linear(elements: usize, tiles: usize, dtype: DType) -> Vec<Piece> {
    let size = dtype.size();
    linear_grain(
        elements,
        tiles,
        (8 / size).max(1),
        min_elements_per_tile(dtype),
    )
}

/// Linear mapping in units of `grain` elements (rows of a reduction, say).
pub fn linear_grain(
    elements: usize,
    tiles: usize,
    grain: usize,
    min_per_tile: usize,
) -> Vec<Piece> {
    let tiles = tiles.max(1);
    if elements == 0 {
        return vec![Piece {
            tile: start_tile(0, tiles),
            start: 0,
            len: 0,
        }];
    }
    let grain = grain.max(1);
    let grains = elements.div_ceil(grain);
    let min_grains = min_per_tile.div_ceil(grain).max(1);
    // As many tiles as have at least the minimum, the grains shared evenly among them.
    let used = (grains / min_grains).clamp(1, tiles);
    let first = start_tile(elements, tiles);
    let mut pieces = Vec::with_capacity(used);
    for k in 0..used {
        let (g0, g1) = (k * grains / used, (k + 1) * grains / used);
        let (start, end) = (g0 * grain, (g1 * grain).min(elements));
        if end > start {
            pieces.push(Piece {
                tile: (first + k) % tiles,
                start,
                len: end - start,
            });
        }
    }
    pieces
}

/// All elements on one tile.
pub fn single(elements: usize, tile: usize) -> Vec<Piece> {
    vec![Piece {
        tile,
        start: 0,
        len: elements,
    }]
}

/// Pieces in element order with neighbours on one tile joined (the pieces must cover
/// the tensor, each starting where the last ended).
pub fn merged(pieces: Vec<Piece>) -> Vec<Piece> {
    let mut out: Vec<Piece> = Vec::with_capacity(pieces.len());
    for p in pieces {
        match out.last_mut() {
            Some(last) if last.tile == p.tile && last.start + last.len == p.start => {
                last.len += p.len;
            }
            _ => out.push(p),
        }
    }
    out
}

/// Splits `len` elements into at most `workers` runs of at least `min` elements each, so a
/// tile's six worker contexts share the work (inline for six: reductions split 110 000
/// runs of rows in the transformer alone).
pub fn worker_split(
    len: usize,
    workers: usize,
    min: usize,
) -> smallvec::SmallVec<[(usize, usize); 6]> {
    let n = len.div_ceil(min.max(1)).clamp(1, workers.max(1));
    let mut out = smallvec::SmallVec::with_capacity(n);
    let mut at = 0;
    for k in 0..n {
        let l = len / n + usize::from(k < len % n);
        if l > 0 {
            out.push((at, l));
        }
        at += l;
    }
    out
}

/// Number of distinct tiles a mapping uses.
pub fn tile_count(pieces: &[Piece]) -> usize {
    let mut t: Vec<usize> = pieces
        .iter()
        .filter(|p| p.len > 0)
        .map(|p| p.tile)
        .collect();
    t.sort_unstable();
    t.dedup();
    t.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_covers_every_element_once_in_vector_grains_and_128_bytes_a_tile() {
        for dtype in [DType::F32, DType::F16, DType::Pred] {
            let grain = 8 / dtype.size();
            for (n, tiles) in [(1, 4), (100, 4), (1000, 4), (1_000_000, 1472), (129, 1)] {
                let m = linear(n, tiles, dtype);
                let mut at = 0;
                for p in &m {
                    assert_eq!(p.start, at);
                    assert!(p.tile < tiles);
                    at += p.len;
                }
                assert_eq!(at, n);
                for p in &m[..m.len() - 1] {
                    assert_eq!(p.len % grain, 0, "{dtype:?}");
                    assert!(p.len * dtype.size() >= MIN_BYTES_PER_TILE, "{dtype:?}");
                }
            }
        }
        assert_eq!(tile_count(&linear(1_000_000, 1472, DType::F32)), 1472);
        // 128 floats: four tiles of 32; 128 halves: two tiles of 64.
        assert_eq!(tile_count(&linear(128, 1472, DType::F32)), 4);
        assert_eq!(tile_count(&linear(128, 1472, DType::F16)), 2);
        assert_eq!(tile_count(&linear(31, 1472, DType::F32)), 1);
    }

    #[test]
    fn worker_split_balances() {
        assert_eq!(worker_split(10, 6, 32).into_vec(), vec![(0, 10)]);
        let s = worker_split(600, 6, 32);
        assert_eq!(s.len(), 6);
        assert_eq!(s.iter().map(|x| x.1).sum::<usize>(), 600);
    }
}
