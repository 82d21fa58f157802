//! Cold lists: the files of one tier ordered by amtime, coldest first
//! (Ziggurat §5.1), split into shards so that writers updating different
//! files rarely touch the same shard.
//!
//! Ziggurat keeps "per-cpu lists of files on each storage tier, sorted by
//! the average modification time", each drained by its own migration thread,
//! and updates the list "whenever it modifies a file". Here a file belongs to
//! the shard [`shard_index`] picks from its inode number (not from the CPU
//! that wrote it: a file then lives in exactly one shard, so an update never
//! has to search the others). The caller keeps one set of shards per tier,
//! wraps each [`Shard`] in its own lock, and on every write that changes a
//! file's amtime calls [`Shard::update`] on that file's shard only. Migration
//! thread *i* drains shard *i* ([`Shard::coldest`]); a single migrator takes
//! the coldest file over all shards with [`coldest`].
//!
//! [`ColdLists`] bundles the shards for single-threaded callers and tests.
//!
//! Invariants: a shard holds each `(amtime, ino)` at most once; the caller
//! keeps at most one entry per inode by always passing the amtime it inserted
//! last as `old`. Files without blocks (no amtime) are in no list. Ties in
//! amtime are broken by inode number, so the order is total and the same in
//! every run.

use std::collections::BTreeSet;

/// The shard (of `shards`) holding inode `ino`. `shards == 0` is taken as 1.
pub fn shard_index(ino: u64, shards: usize) -> usize {
    (ino % shards.max(1) as u64) as usize
}

/// One shard of a cold list: `(amtime_ns, ino)` in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shard {
    set: BTreeSet<(u64, u64)>,
}

impl Shard {
    /// An empty shard.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves `ino` from amtime `old` to amtime `new` (`None`: not listed,
    /// e.g. a new file, or one truncated to nothing).
    pub fn update(&mut self, ino: u64, old: Option<u64>, new: Option<u64>) {
        if old == new {
            return;
        }
        if let Some(a) = old {
            let had = self.set.remove(&(a, ino));
            debug_assert!(had, "inode {ino} was not listed at amtime {a}");
        }
        if let Some(a) = new {
            self.set.insert((a, ino));
        }
    }

    /// The coldest `(amtime_ns, ino)`, left in place.
    pub fn coldest(&self) -> Option<(u64, u64)> {
        self.set.first().copied()
    }

    /// Removes and returns the coldest `(amtime_ns, ino)`.
    pub fn pop_coldest(&mut self) -> Option<(u64, u64)> {
        self.set.pop_first()
    }

    /// Files listed.
    pub fn len(&self) -> usize {
        self.set.len()
    }

    /// Whether no file is listed.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// `(amtime_ns, ino)` from coldest to hottest.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.set.iter().copied()
    }
}

/// The coldest `(amtime_ns, ino)` over several shards (the minimum of their
/// minima).
pub fn coldest(shards: &[&Shard]) -> Option<(u64, u64)> {
    shards.iter().filter_map(|s| s.coldest()).min()
}

/// The shards of one tier's cold list, owned together (for callers without
/// concurrency; concurrent callers keep `Vec<Mutex<Shard>>` and use
/// [`shard_index`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColdLists {
    shards: Vec<Shard>,
}

impl ColdLists {
    /// `n` empty shards (at least 1), e.g. one per CPU.
    pub fn new(n: usize) -> Self {
        ColdLists {
            shards: vec![Shard::new(); n.max(1)],
        }
    }

    /// Number of shards.
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// The shard index holding `ino`.
    pub fn shard_for(&self, ino: u64) -> usize {
        shard_index(ino, self.shards.len())
    }

    /// Shard `i`.
    pub fn shard(&self, i: usize) -> &Shard {
        &self.shards[i]
    }

    /// Moves `ino` from amtime `old` to `new` in its shard (and only there).
    pub fn update(&mut self, ino: u64, old: Option<u64>, new: Option<u64>) {
        let i = self.shard_for(ino);
        self.shards[i].update(ino, old, new);
    }

    /// The coldest file over all shards.
    pub fn coldest(&self) -> Option<(u64, u64)> {
        let all: Vec<&Shard> = self.shards.iter().collect();
        coldest(&all)
    }

    /// Removes and returns the coldest file over all shards.
    pub fn pop_coldest(&mut self) -> Option<(u64, u64)> {
        let (_, ino) = self.coldest()?;
        let i = self.shard_for(ino);
        self.shards[i].pop_coldest()
    }

    /// Files listed in all shards.
    pub fn len(&self) -> usize {
        self.shards.iter().map(Shard::len).sum()
    }

    /// Whether no file is listed.
    pub fn is_empty(&self) -> bool {
        self.shards.iter().all(Shard::is_empty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Amtime;

    #[test]
    fn slides_example_write_at_8_makes_the_file_warmer() {
        const S: u64 = 1_000_000_000;
        // File 1: (0,2,2) (2,2,4) (4,2,6) (offset, length, mtime in s): amtime
        // 4 s. File 2: amtime 4.5 s.
        let mut f1 = Amtime::from_extents([(2, 2 * S), (2, 4 * S), (2, 6 * S)]);
        let f2 = Amtime::from_extents([(1, 4 * S + S / 2)]);
        let mut lists = ColdLists::new(2);
        lists.update(1, None, f1.value());
        lists.update(2, None, f2.value());
        assert_eq!(lists.coldest(), Some((4 * S, 1)));
        // write(6,2) at 8 s: amtime 5 s, now warmer than file 2.
        let old = f1.value();
        f1.on_write(&[], 2, 8 * S);
        lists.update(1, old, f1.value());
        assert_eq!(f1.value(), Some(5 * S));
        assert_eq!(lists.coldest(), Some((4 * S + S / 2, 2)));
        assert_eq!(lists.pop_coldest(), Some((4 * S + S / 2, 2)));
        assert_eq!(lists.pop_coldest(), Some((5 * S, 1)));
        assert!(lists.is_empty());
    }

    #[test]
    fn update_touches_only_the_inodes_shard() {
        let mut lists = ColdLists::new(4);
        for ino in 0..16 {
            lists.update(ino, None, Some(100 - ino));
        }
        for i in 0..4 {
            let s = lists.shard(i);
            assert_eq!(s.len(), 4);
            assert!(s.iter().all(|(_, ino)| shard_index(ino, 4) == i));
        }
        assert_eq!(lists.coldest(), Some((85, 15)));
        assert_eq!(lists.shard(1).coldest(), Some((87, 13)));
    }

    #[test]
    fn equal_amtimes_order_by_inode() {
        let mut s = Shard::new();
        s.update(9, None, Some(5));
        s.update(3, None, Some(5));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![(5, 3), (5, 9)]);
    }

    #[test]
    fn file_without_blocks_leaves_the_list() {
        let mut s = Shard::new();
        s.update(1, None, Some(5));
        s.update(1, Some(5), None);
        assert!(s.is_empty());
        s.update(1, None, None);
        assert_eq!(s.coldest(), None);
    }

    #[test]
    fn coldest_merges_shard_minima() {
        let mut a = Shard::new();
        let mut b = Shard::new();
        a.update(1, None, Some(30));
        b.update(2, None, Some(20));
        b.update(4, None, Some(40));
        assert_eq!(coldest(&[&a, &b]), Some((20, 2)));
        assert_eq!(coldest(&[&a]), Some((30, 1)));
        assert_eq!(coldest(&[]), None);
        assert_eq!(ColdLists::new(0).shards(), 1);
    }
}
