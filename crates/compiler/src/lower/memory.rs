//! Tile memory planning: each tensor lives from the step that creates it to its last read;
//! on every tile, tensors are placed first-fit at the lowest offset not used by a tensor
//! live at the same time, so memory is reused between tensors never live together.
//! Constants are pinned (written at load, never overwritten).

use super::Lowerer;
use crate::CompileError;
use std::collections::HashMap;

/// Offsets are multiples of 8 bytes (the 64-bit data path).
const ALIGN: u64 = 8;

/// A block in use on one tile: `[begin, end)` bytes, live until step `last`.
#[derive(Clone, Copy)]
struct Block {
    begin: u64,
    end: u64,
    last: u64,
}

/// Assigns every tensor interval an offset in its tile's memory.
pub(crate) fn allocate(l: &mut Lowerer) -> Result<(), CompileError> {
    let n = l.b.tensor_count();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| (l.life[i].first, i));
    let mut live: HashMap<(usize, usize), Vec<Block>> = HashMap::new();
    for i in order {
        let life = l.life[i];
        let last = if life.pinned { u64::MAX } else { life.last };
        let t = l.b.tensor_mut(runtime::TensorId(i as u32));
        let size = t.dtype.size() as u64;
        for iv in &mut t.mapping {
            let bytes = (iv.len as u64 * size).div_ceil(ALIGN) * ALIGN;
            let blocks = live.entry((iv.ipu, iv.tile)).or_default();
            blocks.retain(|b| b.last >= life.first);
            blocks.sort_by_key(|b| b.begin);
            let mut at = 0;
            for b in blocks.iter() {
                if b.begin >= at + bytes {
                    break;
                }
                at = at.max(b.end);
            }
            iv.offset = at;
            blocks.push(Block {
                begin: at,
                end: at + bytes,
                last,
            });
        }
    }
    Ok(())
}
