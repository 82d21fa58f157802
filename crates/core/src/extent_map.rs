//! A file's extent map: which tier and blocks hold each run of file blocks
//! ([`Extent`]), with the clean copy NVMFS may keep of it, and the physical
//! runs a change releases ([`Released`]). Part of an inode's DRAM state
//! (`inode.rs`), changed only by replaying committed entries.
//!
//! Invariants: extents never overlap; the map's counters equal what a scan
//! would give (see [`ExtentMap`]).

use std::collections::BTreeMap;
use terrace_format::{FileBlock, PhysBlock, TierId, MAX_TIERS};

/// Where a run of file blocks lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// Number of blocks.
    pub blocks: u64,
    /// Tier id.
    pub tier: TierId,
    /// First block on the tier.
    pub block: PhysBlock,
    /// Write-size predictor counter of the write entry this came from.
    pub counter: u8,
    /// When this data was written (ns; migration keeps it).
    pub mtime: i64,
    /// The inode's data sequence number when this mapping was made (DRAM
    /// only): a changed mapping always has a new one, even if it reuses the
    /// same blocks, so migration can tell that its copy is stale.
    pub seq: u64,
    /// A second, clean copy of the same data: `(tier, first block)` (NVMFS;
    /// see `terrace_format::CopyEntry`). Reads use the primary location.
    pub copy: Option<(TierId, PhysBlock)>,
    /// Writes this location has seen (DRAM only, saturating): one more than
    /// the extent that held the write's first block before, the same for a
    /// migration. Rebuilt by log replay at mount (each replayed write entry
    /// counts), so it counts the writes still in the log. NVMFS's
    /// frequency-aware flush order reads it.
    pub writes: u8,
    /// The blocks may be mapped by other entries too (a `copy_file_range`
    /// clone; `terrace_format::WRITE_FLAG_SHARED`, see `shared.rs`). Kept by
    /// log compaction; a move to fresh blocks clears it.
    pub shared: bool,
}

impl Extent {
    /// The part of this extent from block `off` on, `n` blocks long.
    pub fn part(&self, off: u64, n: u64) -> Extent {
        Extent {
            blocks: n,
            block: self.block + off,
            copy: self.copy.map(|(t, b)| (t, b + off)),
            ..*self
        }
    }

    /// The physical runs this extent holds: its blocks and its copy's.
    pub fn runs(&self) -> Vec<Released> {
        let mut v = vec![(self.tier, self.block, self.blocks)];
        if let Some((t, b)) = self.copy {
            v.push((t, b, self.blocks));
        }
        v
    }

    /// The runs of this extent on block tiers (its data's and its copy's),
    /// as `(tier, first block, blocks, is the copy)`: what carries block
    /// checksums (`sums.rs`).
    pub fn block_tier_runs(&self) -> impl Iterator<Item = (TierId, PhysBlock, u64, bool)> {
        let data = (!self.tier.is_pm()).then_some((self.tier, self.block, self.blocks, false));
        let copy = self
            .copy
            .filter(|&(t, _)| !t.is_pm())
            .map(|(t, b)| (t, b, self.blocks, true));
        data.into_iter().chain(copy)
    }
}

/// A physical run that a change of the extent map released.
pub type Released = (TierId, PhysBlock, u64);

/// File block → extent map. Keys are first file blocks; extents never overlap.
///
/// Invariant: the counters (`blocks`, `copies`, `tier_blocks`,
/// `pm_clean_blocks`, `sums_bytes`) always equal what a scan of `map` would give; every
/// change of `map` goes through [`ExtentMap::put`] and [`ExtentMap::take`].
/// They make the hot paths (stat, log-compaction checks, NVMFS's dirty/clean
/// accounting) O(1) in the number of extents.
#[derive(Debug, Clone, Default)]
pub struct ExtentMap {
    map: Runs,
    blocks: u64,
    copies: u64,
    /// Blocks whose data (not clean copies) is on each tier, by tier id
    /// (ids are below `MAX_TIERS`; `[0]` is PM).
    tier_blocks: [u64; MAX_TIERS],
    pm_clean_blocks: u64,
    /// Log bytes of the Sums entries the block-tier runs carry, counted per
    /// run as [`crate::sums::sums_log_bytes`] does.
    sums_bytes: u64,
}

impl ExtentMap {
    fn count(&mut self, e: &Extent, add: bool) {
        let f = |v: &mut u64, n: u64| {
            if add {
                *v += n
            } else {
                *v -= n
            }
        };
        f(&mut self.blocks, e.blocks);
        f(&mut self.copies, u64::from(e.copy.is_some()));
        if let Some(n) = self.tier_blocks.get_mut(e.tier.index()) {
            f(n, e.blocks);
        }
        if e.tier.is_pm() && e.copy.is_some() {
            f(&mut self.pm_clean_blocks, e.blocks);
        }
        for (_, _, n, _) in e.block_tier_runs() {
            f(&mut self.sums_bytes, crate::sums::sums_log_bytes(n));
        }
    }

    /// Inserts (or replaces) the extent starting at `s`.
    fn put(&mut self, s: FileBlock, e: Extent) {
        self.count(&e, true);
        if let Some(old) = self.map.insert(s, e) {
            self.count(&old, false);
        }
    }

    /// Removes the extent starting at `s`.
    fn take(&mut self, s: FileBlock) -> Option<Extent> {
        let e = self.map.remove(&s)?;
        self.count(&e, false);
        Some(e)
    }

    /// Splits the extent covering `b` (if any) so that one starts at `b`.
    fn split_at(&mut self, b: FileBlock) {
        if let Some((&s, &e)) = self.map.range(..b).next_back() {
            if s + e.blocks > b {
                self.put(s, e.part(0, b - s));
                self.put(b, e.part(b - s, s + e.blocks - b));
            }
        }
    }

    /// Removes `[start, start + n)` from the map; returns the physical runs
    /// released (primary blocks and copies).
    pub fn unmap(&mut self, start: FileBlock, n: u64) -> Vec<Released> {
        let end = start.saturating_add(n);
        self.split_at(start);
        if end != FileBlock::MAX {
            self.split_at(end);
        }
        let inside: Vec<FileBlock> = self.map.range(start..end).map(|(&s, _)| s).collect();
        let mut out = Vec::new();
        for s in inside {
            let e = self.take(s).expect("key exists");
            out.extend(e.runs());
        }
        out
    }

    /// Applies a copy entry to `[start, start + n)` (every block mapped);
    /// returns the runs it releases.
    pub fn apply_copy(&mut self, c: &terrace_format::CopyEntry, seq: u64) -> Vec<Released> {
        use terrace_format::CopyOp;
        let start = c.file_block;
        let end = start + c.blocks as u64;
        self.split_at(start);
        self.split_at(end);
        let inside: Vec<FileBlock> = self.map.range(start..end).map(|(&s, _)| s).collect();
        let mut out = Vec::new();
        for s in inside {
            let mut e = self.take(s).expect("key exists");
            let at = c.block + (s - start);
            match c.op {
                CopyOp::Add => {
                    if let Some((t, b)) = e.copy {
                        out.push((t, b, e.blocks));
                    }
                    e.copy = Some((c.tier, at));
                }
                CopyOp::Promote => {
                    out.push((e.tier, e.block, e.blocks));
                    e.tier = c.tier;
                    e.block = at;
                    e.copy = None;
                    // The copy was this file's alone.
                    e.shared = false;
                }
                CopyOp::Drop => {
                    if let Some((t, b)) = e.copy.take() {
                        out.push((t, b, e.blocks));
                    }
                }
            }
            e.seq = seq;
            self.put(s, e);
        }
        out
    }

    /// Applies a shift entry (COLLAPSE_RANGE / INSERT_RANGE): a collapse
    /// unmaps `[start, start + n)` and moves every extent after it down by
    /// `n`; an insert splits the extent covering `start` and moves every
    /// extent from `start` on up by `n`. Moved extents get `seq` (migration
    /// then sees their mapping changed). Returns the runs a collapse releases.
    pub fn shift(
        &mut self,
        start: FileBlock,
        n: u64,
        op: terrace_format::ShiftOp,
        seq: u64,
    ) -> Vec<Released> {
        use terrace_format::ShiftOp;
        let (out, from) = match op {
            ShiftOp::Collapse => (self.unmap(start, n), start.saturating_add(n)),
            ShiftOp::Insert => {
                self.split_at(start);
                (Vec::new(), start)
            }
        };
        let keys: Vec<FileBlock> = self.map.range(from..).map(|(&s, _)| s).collect();
        let moved: Vec<(FileBlock, Extent)> = keys
            .into_iter()
            .map(|s| (s, self.take(s).expect("key exists")))
            .collect();
        for (s, mut e) in moved {
            e.seq = seq;
            let to = match op {
                ShiftOp::Collapse => s - n,
                ShiftOp::Insert => s.saturating_add(n),
            };
            self.put(to, e);
        }
        out
    }

    /// Maps `[start, start + ext.blocks)` to `ext`, returning the runs it displaced.
    pub fn map(&mut self, start: FileBlock, ext: Extent) -> Vec<Released> {
        let out = self.unmap(start, ext.blocks);
        self.put(start, ext);
        out
    }

    /// The extent covering file block `b`, with `b`'s index inside it.
    pub fn find(&self, b: FileBlock) -> Option<(FileBlock, Extent)> {
        let (&s, &e) = self.map.range(..=b).next_back()?;
        (s + e.blocks > b).then_some((s, e))
    }

    /// The extent that still maps file blocks `[fb, fb + blocks)` to
    /// `[block, block + blocks)` of `tier` with sequence number `seq` (what
    /// a move or a remap captured, checked again under the inode lock
    /// before it commits: a rewrite since has a newer sequence number).
    pub fn still_maps(
        &self,
        fb: FileBlock,
        blocks: u64,
        tier: TierId,
        block: PhysBlock,
        seq: u64,
    ) -> Option<Extent> {
        let (s, e) = self.find(fb)?;
        (e.seq == seq
            && e.tier == tier
            && e.block + (fb - s) == block
            && s + e.blocks >= fb + blocks)
            .then_some(e)
    }

    /// First block of the first extent starting after block `b`.
    pub fn next_start_after(&self, b: FileBlock) -> Option<FileBlock> {
        self.map.range(b + 1..).next().map(|(&s, _)| s)
    }

    /// The mapped parts of `[start, start + n)`: `(first file block, extent)`
    /// clipped to the range.
    pub fn overlaps(&self, start: FileBlock, n: u64) -> Vec<(FileBlock, Extent)> {
        let end = start.saturating_add(n);
        let mut out = Vec::new();
        if let Some((s, e)) = self.find(start) {
            let until = (s + e.blocks).min(end);
            out.push((start, e.part(start - s, until - start)));
        }
        for (&s, &e) in self.map.range(start.saturating_add(1)..end) {
            let until = (s + e.blocks).min(end);
            out.push((s, e.part(0, until - s)));
        }
        out
    }

    /// Iterates over `(first file block, extent)`.
    pub fn iter(&self) -> impl Iterator<Item = (FileBlock, Extent)> + '_ {
        self.map.iter().map(|(&s, &e)| (s, e))
    }

    /// Number of mapped blocks.
    pub fn mapped_blocks(&self) -> u64 {
        self.blocks
    }

    /// Number of extents that have a clean copy.
    pub fn with_copies(&self) -> u64 {
        self.copies
    }

    /// Log bytes the checksums of the block-tier runs (data and clean
    /// copies) take in a compacted log, estimated per run as
    /// [`crate::sums::sums_log_bytes`] does. O(1): kept by `put` and `take`.
    pub fn sums_log_bytes(&self) -> u64 {
        self.sums_bytes
    }

    /// Blocks on PM: `(with a clean copy, without)`.
    pub fn pm_clean_dirty(&self) -> (u64, u64) {
        (
            self.pm_clean_blocks,
            self.tier_blocks[0] - self.pm_clean_blocks,
        )
    }

    /// The block tiers (ids other than 0) holding some of the file's data,
    /// clean copies left out: bit `t` for tier `t`.
    pub fn block_tier_mask(&self) -> u8 {
        (1..MAX_TIERS)
            .filter(|&t| self.tier_blocks[t] > 0)
            .fold(0, |m, t| m | 1 << t)
    }

    /// Number of extents.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when nothing is mapped.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// The extents of a map by first file block: a `BTreeMap`, except for a
/// map of one extent (most files: written once, or small), which is kept
/// inline. A `BTreeMap` allocates a whole node (room for 11 extents, about
/// 700 bytes) for its first entry, and every inode of the pool stays in
/// DRAM while it is mounted (design.md §8).
#[derive(Debug, Clone, Default)]
enum Runs {
    #[default]
    Empty,
    One(FileBlock, Extent),
    Many(BTreeMap<FileBlock, Extent>),
}

/// Iterator over a [`Runs`] range.
enum RunsIter<'a> {
    One(std::option::IntoIter<(&'a FileBlock, &'a Extent)>),
    Many(std::collections::btree_map::Range<'a, FileBlock, Extent>),
}

impl<'a> Iterator for RunsIter<'a> {
    type Item = (&'a FileBlock, &'a Extent);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            RunsIter::One(i) => i.next(),
            RunsIter::Many(i) => i.next(),
        }
    }
}

impl DoubleEndedIterator for RunsIter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        match self {
            RunsIter::One(i) => i.next_back(),
            RunsIter::Many(i) => i.next_back(),
        }
    }
}

impl Runs {
    fn insert(&mut self, k: FileBlock, v: Extent) -> Option<Extent> {
        match self {
            Runs::Empty => {
                *self = Runs::One(k, v);
                None
            }
            Runs::One(k0, v0) if *k0 == k => Some(std::mem::replace(v0, v)),
            Runs::One(k0, v0) => {
                let mut m = BTreeMap::new();
                m.insert(*k0, *v0);
                m.insert(k, v);
                *self = Runs::Many(m);
                None
            }
            Runs::Many(m) => m.insert(k, v),
        }
    }

    fn remove(&mut self, k: &FileBlock) -> Option<Extent> {
        match self {
            Runs::One(k0, v0) if k0 == k => {
                let v = *v0;
                *self = Runs::Empty;
                Some(v)
            }
            Runs::Many(m) => {
                let v = m.remove(k);
                // Back to one inline extent: the node is freed.
                if m.len() == 1 {
                    let (k1, v1) = m.pop_first().expect("one entry");
                    *self = Runs::One(k1, v1);
                }
                v
            }
            _ => None,
        }
    }

    fn range<R: std::ops::RangeBounds<FileBlock>>(&self, r: R) -> RunsIter<'_> {
        match self {
            Runs::Empty => RunsIter::One(None.into_iter()),
            Runs::One(k, v) => RunsIter::One(r.contains(k).then_some((k, v)).into_iter()),
            Runs::Many(m) => RunsIter::Many(m.range(r)),
        }
    }

    fn iter(&self) -> RunsIter<'_> {
        self.range(..)
    }

    fn len(&self) -> usize {
        match self {
            Runs::Empty => 0,
            Runs::One(..) => 1,
            Runs::Many(m) => m.len(),
        }
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(blocks: u64, block: u64) -> Extent {
        Extent {
            blocks,
            tier: TierId::PM,
            block: PhysBlock(block),
            counter: 0,
            mtime: 0,
            seq: 0,
            copy: None,
            writes: 1,
            shared: false,
        }
    }

    #[test]
    fn inline_runs_answer_every_query_as_a_btreemap_does() {
        use rand::{Rng, SeedableRng};
        use std::ops::Bound::*;
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed_0fe0);
        for _ in 0..200 {
            let (mut runs, mut model) = (Runs::default(), BTreeMap::new());
            for step in 0..60 {
                let k = FileBlock(rng.gen_range(0..8));
                if rng.gen_bool(0.55) {
                    let v = ext(rng.gen_range(1..4), rng.gen_range(0..100));
                    assert_eq!(runs.insert(k, v), model.insert(k, v), "insert {k:?}");
                } else {
                    assert_eq!(runs.remove(&k), model.remove(&k), "remove {k:?}");
                }
                assert_eq!(runs.len(), model.len());
                assert_eq!(runs.is_empty(), model.is_empty());
                // One extent is kept inline, never in a node.
                assert_eq!(
                    matches!(runs, Runs::One(..)),
                    model.len() == 1,
                    "step {step}"
                );
                let (a, b) = (
                    FileBlock(rng.gen_range(0..9)),
                    FileBlock(rng.gen_range(0..9)),
                );
                let (lo, hi) = (a.min(b), a.max(b));
                let got: Vec<_> = runs.range(lo..hi).collect();
                assert_eq!(got, model.range(lo..hi).collect::<Vec<_>>());
                let got: Vec<_> = runs.range(..=a).rev().collect();
                assert_eq!(got, model.range(..=a).rev().collect::<Vec<_>>());
                let got: Vec<_> = runs.range((Excluded(lo), Unbounded)).collect();
                assert_eq!(
                    got,
                    model.range((Excluded(lo), Unbounded)).collect::<Vec<_>>()
                );
                assert_eq!(
                    runs.iter().collect::<Vec<_>>(),
                    model.iter().collect::<Vec<_>>()
                );
            }
        }
    }

    #[test]
    fn extent_map_counters_match_a_scan_after_random_changes() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut m = ExtentMap::default();
        for step in 0..5000 {
            let start = FileBlock(rng.gen_range(0..200u64));
            let n = rng.gen_range(1..20u64);
            match rng.gen_range(0..4) {
                0 => {
                    m.unmap(start, n);
                }
                1 if m.find(start).is_some() => {
                    // A copy entry over the mapped part of the extent at `start`.
                    let (s, e) = m.find(start).unwrap();
                    let len = (s + e.blocks - start).min(n);
                    let op = match rng.gen_range(0..3) {
                        0 => terrace_format::CopyOp::Add,
                        1 => terrace_format::CopyOp::Promote,
                        _ => terrace_format::CopyOp::Drop,
                    };
                    let c = terrace_format::CopyEntry {
                        file_block: start,
                        blocks: len as u32,
                        tier: TierId(rng.gen_range(0..2)),
                        op,
                        block: PhysBlock(rng.gen_range(0..1000)),
                    };
                    m.apply_copy(&c, step);
                }
                _ => {
                    let e = Extent {
                        tier: TierId(rng.gen_range(0..4)),
                        ..ext(n, rng.gen_range(0..1000))
                    };
                    m.map(start, e);
                }
            }
            let scan_blocks: u64 = m.iter().map(|(_, e)| e.blocks).sum();
            let scan_copies = m.iter().filter(|(_, e)| e.copy.is_some()).count() as u64;
            let pm = |clean: bool| -> u64 {
                m.iter()
                    .filter(|(_, e)| e.tier.is_pm() && e.copy.is_some() == clean)
                    .map(|(_, e)| e.blocks)
                    .sum()
            };
            assert_eq!(m.mapped_blocks(), scan_blocks, "step {step}");
            assert_eq!(m.with_copies(), scan_copies, "step {step}");
            assert_eq!(m.pm_clean_dirty(), (pm(true), pm(false)), "step {step}");
            let mask = m
                .iter()
                .filter(|(_, e)| !e.tier.is_pm())
                .fold(0u8, |k, (_, e)| k | 1 << e.tier.get());
            assert_eq!(m.block_tier_mask(), mask, "step {step}");
            let sums: u64 = m
                .iter()
                .flat_map(|(_, e)| e.block_tier_runs())
                .map(|(_, _, n, _)| crate::sums::sums_log_bytes(n))
                .sum();
            assert_eq!(m.sums_log_bytes(), sums, "step {step}");
        }
    }

    #[test]
    fn overwrite_in_the_middle_splits_and_releases_exactly_the_overlap() {
        let mut m = ExtentMap::default();
        assert!(m.map(FileBlock(0), ext(10, 100)).is_empty());
        let rel = m.map(FileBlock(3), ext(2, 500));
        assert_eq!(rel, vec![(TierId::PM, PhysBlock(103), 2)]);
        assert_eq!(m.find(FileBlock(2)), Some((FileBlock(0), ext(3, 100))));
        assert_eq!(m.find(FileBlock(4)), Some((FileBlock(3), ext(2, 500))));
        assert_eq!(m.find(FileBlock(5)), Some((FileBlock(5), ext(5, 105))));
        assert_eq!(m.mapped_blocks(), 10);
    }

    #[test]
    fn collapse_and_insert_move_later_extents_and_keep_their_blocks() {
        use terrace_format::ShiftOp;
        let mut m = ExtentMap::default();
        m.map(FileBlock(0), ext(4, 100));
        m.map(FileBlock(6), ext(4, 200));
        // Insert 3 blocks at block 2: the first extent splits.
        assert!(m.shift(FileBlock(2), 3, ShiftOp::Insert, 9).is_empty());
        assert_eq!(
            m.find(FileBlock(1)).map(|(s, e)| (s, e.block)),
            Some((FileBlock(0), PhysBlock(100)))
        );
        assert!(m.find(FileBlock(2)).is_none() && m.find(FileBlock(4)).is_none());
        assert_eq!(
            m.find(FileBlock(5)).map(|(s, e)| (s, e.block, e.seq)),
            Some((FileBlock(5), PhysBlock(102), 9))
        );
        assert_eq!(
            m.find(FileBlock(9)).map(|(s, e)| (s, e.block)),
            Some((FileBlock(9), PhysBlock(200)))
        );
        assert_eq!(m.mapped_blocks(), 8);
        // Collapse it again, plus one block of the second extent's start.
        let rel = m.shift(FileBlock(2), 3, ShiftOp::Collapse, 10);
        assert!(rel.is_empty());
        let rel = m.shift(FileBlock(6), 1, ShiftOp::Collapse, 11);
        assert_eq!(rel, vec![(TierId::PM, PhysBlock(200), 1)]);
        assert_eq!(
            m.find(FileBlock(3)).map(|(s, e)| (s, e.block)),
            Some((FileBlock(2), PhysBlock(102)))
        );
        assert_eq!(
            m.find(FileBlock(6)).map(|(s, e)| (s, e.block, e.blocks)),
            Some((FileBlock(6), PhysBlock(201), 3))
        );
        assert_eq!(m.mapped_blocks(), 7);
    }

    #[test]
    fn unmap_across_several_extents_releases_each_part() {
        let mut m = ExtentMap::default();
        m.map(FileBlock(0), ext(4, 100));
        m.map(FileBlock(4), ext(4, 200));
        m.map(FileBlock(10), ext(4, 300));
        let mut rel = m.unmap(FileBlock(2), 10);
        rel.sort();
        assert_eq!(
            rel,
            vec![
                (TierId::PM, PhysBlock(102), 2),
                (TierId::PM, PhysBlock(200), 4),
                (TierId::PM, PhysBlock(300), 2)
            ]
        );
        assert_eq!(m.mapped_blocks(), 4);
        assert_eq!(m.find(FileBlock(12)), Some((FileBlock(12), ext(2, 302))));
    }
}
