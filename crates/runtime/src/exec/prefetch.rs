//! Asking the host's caches for bytes a moment before they are read. Each tile's memory
//! lies apart from the others, so a step that does a little work on each of 1 472 tiles
//! starts every tile's work with misses the hardware prefetchers cannot foresee (a
//! different place in a large allocation each time); naming a later tile's bytes while
//! this tile's work runs overlaps them with it. A hint only: nothing is read, nothing can
//! fault, no result changes.

/// Lines fetched at most per range: past the first half kilobyte a sequential read is the
/// hardware prefetchers' to follow (2, 4, 8 and 16 measured alike on the bench cases; too
/// many at once fill the core's line fill buffers and stall).
const MAX_LINES: usize = 8;

/// A cache line.
const LINE: usize = 64;

/// Asks for the first lines of `bytes[range]` (clipped to `bytes`).
#[inline]
pub(crate) fn lines(bytes: &[u8], range: std::ops::Range<usize>) {
    let end = (range.end)
        .min(bytes.len())
        .min(range.start.saturating_add(MAX_LINES * LINE));
    let mut at = range.start;
    while at < end {
        hint(bytes[at..].as_ptr());
        at += LINE;
    }
}

/// Asks for the lines of `value` (a boxed part of a vertex, say, which lies apart from the
/// vertex), at most [`MAX_LINES`].
#[inline]
pub(crate) fn object<T>(value: &T) {
    let (at, size): (*const u8, usize) = ((value as *const T).cast(), std::mem::size_of::<T>());
    // Every line from its first byte's to its last's (a value need not start a line).
    for offset in (0..size.min(MAX_LINES * LINE)).step_by(LINE) {
        hint(at.wrapping_add(offset));
    }
    hint(at.wrapping_add(size.saturating_sub(1)));
}

/// The prefetch instruction for the byte at `_at` (none on other architectures).
#[inline]
fn hint(_at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` is a hint: it neither reads memory nor faults, whatever the
    // address (SSE is part of the x86_64 baseline); `_at` points into a slice anyway.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(_at as *const i8)
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_change_no_byte_and_accept_any_range() {
        let bytes: Vec<u8> = (0..=255).collect();
        lines(&bytes, 0..256);
        lines(&bytes, 200..10_000);
        lines(&bytes, 300..400);
        object(&bytes[7]);
        assert_eq!(bytes, (0..=255).collect::<Vec<u8>>());
    }
}
