//! Items grouped by slot (a tile's index in a step), stored flat: one allocation for a whole
//! step instead of one per tile, read tile after tile.

/// Items by slot, each slot's items contiguous and in the order they were given.
#[derive(Debug)]
pub(crate) struct Buckets<T> {
    items: Vec<T>,
    /// Where slot `s`'s items start; `starts[s + 1]` is where they end.
    starts: Vec<usize>,
}

impl<T> Buckets<T> {
    /// Groups `(slot, item)` pairs (slots below `slots`) by slot, keeping their order within
    /// a slot.
    pub(crate) fn new(slots: usize, pairs: Vec<(usize, T)>) -> Buckets<T> {
        let mut starts = vec![0usize; slots + 1];
        pairs.iter().for_each(|(s, _)| starts[s + 1] += 1);
        for i in 1..starts.len() {
            starts[i] += starts[i - 1];
        }
        let mut next = starts.clone();
        let mut placed: Vec<Option<T>> = (0..pairs.len()).map(|_| None).collect();
        for (s, item) in pairs {
            placed[next[s]] = Some(item);
            next[s] += 1;
        }
        let items = placed
            .into_iter()
            .map(|i| i.expect("counted: every position is filled once"))
            .collect();
        Buckets { items, starts }
    }

    /// Number of slots.
    pub(crate) fn slots(&self) -> usize {
        self.starts.len() - 1
    }

    /// Every item, slot after slot.
    pub(crate) fn all(&self) -> &[T] {
        &self.items
    }

    /// Every item, slot after slot, to change in place.
    pub(crate) fn all_mut(&mut self) -> &mut [T] {
        &mut self.items
    }

    /// Drops the items `keep` refuses, keeping the order of the others.
    pub(crate) fn retain(&mut self, keep: impl Fn(&T) -> bool) {
        let mut at = 0;
        let mut items = std::mem::take(&mut self.items).into_iter();
        for s in 0..self.starts.len() - 1 {
            let n = self.starts[s + 1] - self.starts[s];
            self.starts[s] = at;
            for item in items.by_ref().take(n) {
                if keep(&item) {
                    self.items.push(item);
                    at += 1;
                }
            }
        }
        *self
            .starts
            .last_mut()
            .expect("starts has slots + 1 entries") = at;
    }

    /// Slot `s`'s items.
    pub(crate) fn get(&self, s: usize) -> &[T] {
        &self.items[self.starts[s]..self.starts[s + 1]]
    }

    /// Replaces consecutive items of one slot by what `merge` joins them into (`None`:
    /// they stay apart), keeping the order.
    pub(crate) fn merge_neighbours(&mut self, merge: impl Fn(&T, &T) -> Option<T>) {
        let mut items = std::mem::take(&mut self.items).into_iter();
        let mut at = 0;
        for s in 0..self.starts.len() - 1 {
            let n = self.starts[s + 1] - self.starts[s];
            self.starts[s] = at;
            for item in items.by_ref().take(n) {
                let joined = match self.items.last() {
                    Some(last) if self.items.len() > at => merge(last, &item),
                    _ => None,
                };
                match joined {
                    Some(j) => *self.items.last_mut().expect("matched above") = j,
                    None => self.items.push(item),
                }
            }
            at = self.items.len();
        }
        *self
            .starts
            .last_mut()
            .expect("starts has slots + 1 entries") = at;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_group_by_slot_in_their_order() {
        let b = Buckets::new(3, vec![(2, 'a'), (0, 'b'), (2, 'c'), (0, 'd')]);
        assert_eq!(b.get(0), ['b', 'd']);
        assert_eq!(b.get(1), [] as [char; 0]);
        assert_eq!(b.get(2), ['a', 'c']);
        assert_eq!(b.all(), ['b', 'd', 'a', 'c']);
    }

    #[test]
    fn retained_items_keep_their_slots_and_order() {
        let mut b = Buckets::new(3, vec![(2, 1), (0, 2), (2, 3), (0, 4), (1, 6)]);
        b.retain(|x| x % 2 == 0);
        assert_eq!(b.get(0), [2, 4]);
        assert_eq!(b.get(1), [6]);
        assert_eq!(b.get(2), [] as [i32; 0]);
    }

    #[test]
    fn neighbours_merge_within_a_slot_only() {
        let mut b = Buckets::new(3, vec![(0, 1), (0, 2), (0, 4), (1, 5), (2, 6), (2, 7)]);
        // Joins a run of consecutive numbers into its last.
        b.merge_neighbours(|a, b| (b - a == 1).then_some(*b));
        assert_eq!(b.get(0), [2, 4]);
        assert_eq!(b.get(1), [5]);
        assert_eq!(b.get(2), [7]);
        assert_eq!(b.all(), [2, 4, 5, 7]);
    }
}
