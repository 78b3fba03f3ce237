//! Values a call takes side by side (a vertex's input slices, a kernel's pointers), on the
//! stack when they are few: filled in place rather than collected and moved out (a
//! collected `SmallVec` of sixteen slices was a quarter kilobyte copied per vertex, 8 % of
//! the MLP bench case's run).

/// `n` slots: the first `n` of `stack` when they fit, else `heap` made `n` long with
/// `empty()` in the new ones; the caller fills them.
pub fn slots<'a, T, const N: usize>(
    stack: &'a mut [T; N],
    heap: &'a mut Vec<T>,
    n: usize,
    empty: impl FnMut() -> T,
) -> &'a mut [T] {
    if n <= N {
        &mut stack[..n]
    } else {
        heap.resize_with(n, empty);
        heap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn few_slots_are_the_stack_s_and_more_the_heap_s() {
        let (mut stack, mut heap) = ([0u8; 4], Vec::new());
        assert_eq!(slots(&mut stack, &mut heap, 3, || 9), &[0, 0, 0]);
        assert!(heap.is_empty());
        assert_eq!(slots(&mut stack, &mut heap, 6, || 9), &[9; 6]);
    }
}
