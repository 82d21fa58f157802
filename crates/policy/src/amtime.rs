//! A file's average modification time (amtime), weighted by length over all
//! its blocks (Ziggurat §5.1), updated incrementally on every write.
//!
//! The migration profiler keeps cold lists of files sorted by amtime; within a
//! recently modified file, the write entries whose mtime is earlier than the
//! file's amtime are the cold part that migrates.
//!
//! Rather than re-averaging the whole file, the sum of `blocks × mtime` over
//! the file's live extents and the number of live blocks are kept; a write
//! subtracts what it overwrites and adds itself ("updated differentially", in
//! the slides). The slides' example: extents `(0,2,2)`, `(2,2,4)`, `(4,2,6)`
//! (`offset, length, mtime`) give `(2·2 + 4·2 + 6·2) / 6 = 4`; appending
//! `(6,2,8)` gives `(4·6 + 8·2) / 8 = 5`.
//!
//! (The authors' code keeps an exponential moving average of the time instead;
//! this follows the paper and slides, which define the average over blocks.)

/// Running amtime of one file: `sum_ns_blocks / blocks`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Amtime {
    /// Sum over live blocks of their mtime (ns).
    pub sum_ns_blocks: u128,
    /// Live blocks counted.
    pub blocks: u64,
}

impl Amtime {
    /// An empty file.
    pub fn new() -> Self {
        Self::default()
    }

    /// The amtime of a file whose live extents are `(blocks, mtime_ns)` (e.g.
    /// rebuilt at mount from the extent map).
    pub fn from_extents(extents: impl IntoIterator<Item = (u64, u64)>) -> Self {
        let mut a = Amtime::new();
        for (blocks, mtime) in extents {
            a.add(blocks, mtime);
        }
        a
    }

    fn add(&mut self, blocks: u64, mtime_ns: u64) {
        self.sum_ns_blocks += u128::from(blocks) * u128::from(mtime_ns);
        self.blocks += blocks;
    }

    /// Removes live extents `(blocks, mtime_ns)` (truncate, hole punch). Each
    /// must have been counted before; anything else is a caller bug (checked
    /// in debug builds, saturating otherwise).
    pub fn remove(&mut self, extents: &[(u64, u64)]) {
        for &(blocks, mtime) in extents {
            let weight = u128::from(blocks) * u128::from(mtime);
            debug_assert!(weight <= self.sum_ns_blocks && blocks <= self.blocks);
            self.sum_ns_blocks = self.sum_ns_blocks.saturating_sub(weight);
            self.blocks = self.blocks.saturating_sub(blocks);
        }
    }

    /// A write of `new_blocks` blocks at `new_mtime_ns` that replaces the live
    /// extents `old_extents` (`(blocks, mtime_ns)` each: the parts of old
    /// entries it overwrites, not whole entries).
    pub fn on_write(&mut self, old_extents: &[(u64, u64)], new_blocks: u64, new_mtime_ns: u64) {
        self.remove(old_extents);
        self.add(new_blocks, new_mtime_ns);
    }

    /// The average modification time in ns (rounded down), or `None` for a
    /// file with no blocks.
    pub fn value(&self) -> Option<u64> {
        if self.blocks == 0 {
            return None;
        }
        // An average of u64 values fits in a u64.
        Some((self.sum_ns_blocks / u128::from(self.blocks)) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slides_example_amtime_4_then_5_after_write_6_2_at_8() {
        let mut a = Amtime::new();
        a.on_write(&[], 2, 2); // (0,2,2)
        a.on_write(&[], 2, 4); // (2,2,4)
        a.on_write(&[], 2, 6); // (4,2,6)
        assert_eq!(a.value(), Some(4));
        a.on_write(&[], 2, 8); // (6,2,8)
        assert_eq!(a.value(), Some(5));
        assert_eq!(a, Amtime::from_extents([(2, 2), (2, 4), (2, 6), (2, 8)]));
    }

    #[test]
    fn overwrite_replaces_old_blocks_weight() {
        // Blocks 0-3 at mtime 10; overwrite blocks 0-1 at mtime 30.
        let mut a = Amtime::from_extents([(4, 10)]);
        a.on_write(&[(2, 10)], 2, 30);
        assert_eq!(a.blocks, 4);
        assert_eq!(a.value(), Some(20));
    }

    #[test]
    fn empty_file_has_no_amtime() {
        assert_eq!(Amtime::new().value(), None);
        let mut a = Amtime::from_extents([(3, 7)]);
        a.remove(&[(3, 7)]);
        assert_eq!(a.value(), None);
    }

    #[test]
    fn large_times_and_sizes_do_not_overflow() {
        let a = Amtime::from_extents([(u64::MAX / 2, u64::MAX), (u64::MAX / 2, u64::MAX)]);
        assert_eq!(a.value(), Some(u64::MAX));
    }
}
