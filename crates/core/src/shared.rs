//! Blocks mapped more than once: the reference counts of `copy_file_range`
//! clones (issue 21).
//!
//! A clone maps the destination's file blocks to the source's physical
//! blocks (Write entries with `WRITE_FLAG_SHARED`) instead of copying them.
//! Shared data blocks are never written in place, so sharing needs no copy
//! later: a write to either file goes to fresh blocks and only drops one
//! reference to the old ones. (The one write in place, into preallocated
//! blocks on a full pool, `ops_prealloc_write.rs`, asks this map and
//! leaves any block mapped more than once alone.) What has to change is freeing: a block is returned to
//! its allocator only when the last mapping of it goes.
//!
//! [`SharedBlocks`] holds, per tier, the *extra* references of every block
//! mapped more than once (a block mapped once is not in it). It lives in
//! DRAM only: recovery rebuilds it from the logs ([`resolve`]), which are
//! the truth. Every free of file data passes through
//! [`Fs::free_runs`](crate::fs::Fs::free_runs), which asks
//! [`SharedBlocks::release`] which parts of the runs are really free.
//!
//! Invariants:
//! - the extra count of a block equals the number of extent-map entries
//!   (over all live inodes) that map it, minus one;
//! - a block is in an allocator's free space only when no entry maps it;
//! - of the entries that map one block, at most one lacks the shared flag,
//!   and no log page, log blob or clean copy overlaps a mapped block (what
//!   [`resolve`] checks at mount: anything else is double ownership).
//!
//! Migration and the cleaner move one file's mapping at a time; the other
//! files that map the moved blocks are then pointed at the moved copy
//! (`reshare.rs`, design.md §5k), so the blocks stay shared.
//!
//! Lock order: the map's mutex is a leaf.

use crate::extent_map::Released;
use crate::lock_order::{Mutex, Rank};
use crate::types::Ino;
use std::collections::BTreeMap;
use terrace_format::{PhysBlock, TierId};

/// Extra references of blocks on one tier: disjoint runs
/// `start → (blocks, extra)`, `extra ≥ 1`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RefRuns {
    runs: BTreeMap<PhysBlock, (u64, u32)>,
}

impl RefRuns {
    /// Splits the run covering `b` (if any) so that one starts at `b`.
    fn split_at(&mut self, b: PhysBlock) {
        if let Some((&s, &(n, c))) = self.runs.range(..b).next_back() {
            if s + n > b {
                self.runs.insert(s, (b - s, c));
                self.runs.insert(b, (s + n - b, c));
            }
        }
    }

    /// Joins runs around `[start, end]` that touch and have equal counts,
    /// so the map stays as small as the sharing it describes.
    fn join_around(&mut self, start: PhysBlock, end: PhysBlock) {
        let keys: Vec<PhysBlock> = self
            .runs
            .range(..=end)
            .rev()
            .take_while(|(&s, &(n, _))| s + n >= start)
            .map(|(&s, _)| s)
            .collect();
        // `keys` is descending: try to join each run into the one before it.
        for &s in &keys {
            let Some(&(n, c)) = self.runs.get(&s) else {
                continue;
            };
            if let Some((&ps, &(pn, pc))) = self.runs.range(..s).next_back() {
                if ps + pn == s && pc == c {
                    self.runs.remove(&s);
                    self.runs.insert(ps, (pn + n, c));
                }
            }
        }
        // The run starting at `end` (if any) may now join the one before it.
        if let Some(&(n, c)) = self.runs.get(&end) {
            if let Some((&ps, &(pn, pc))) = self.runs.range(..end).next_back() {
                if ps + pn == end && pc == c {
                    self.runs.remove(&end);
                    self.runs.insert(ps, (pn + n, c));
                }
            }
        }
    }

    /// One more reference to every block of `[start, start + n)`.
    pub fn add(&mut self, start: PhysBlock, n: u64) {
        if n == 0 {
            return;
        }
        let end = start + n;
        self.split_at(start);
        self.split_at(end);
        let mut at = start;
        let inside: Vec<(PhysBlock, (u64, u32))> =
            self.runs.range(start..end).map(|(&s, &v)| (s, v)).collect();
        for (s, (len, c)) in inside {
            if s > at {
                self.runs.insert(at, (s - at, 1));
            }
            self.runs.insert(s, (len, c + 1));
            at = s + len;
        }
        if at < end {
            self.runs.insert(at, (end - at, 1));
        }
        self.join_around(start, end);
    }

    /// One reference less to every block of `[start, start + n)`; returns
    /// the parts that had no other reference (now free), in order.
    pub fn release(&mut self, start: PhysBlock, n: u64) -> Vec<crate::alloc::Run> {
        if n == 0 {
            return Vec::new();
        }
        let end = start + n;
        // Nothing shared overlaps: all of it is free (the common case).
        if !self
            .runs
            .range(..end)
            .next_back()
            .is_some_and(|(&s, &(len, _))| s + len > start)
        {
            return vec![(start, n)];
        }
        self.split_at(start);
        self.split_at(end);
        let mut free = Vec::new();
        let mut at = start;
        let inside: Vec<(PhysBlock, (u64, u32))> =
            self.runs.range(start..end).map(|(&s, &v)| (s, v)).collect();
        for (s, (len, c)) in inside {
            if s > at {
                free.push((at, s - at));
            }
            if c > 1 {
                self.runs.insert(s, (len, c - 1));
            } else {
                self.runs.remove(&s);
            }
            at = s + len;
        }
        if at < end {
            free.push((at, end - at));
        }
        self.join_around(start, end);
        free
    }

    /// The runs that overlap `[start, start + n)`, in order, as
    /// `(first block, end)`.
    fn runs_over(
        &self,
        start: PhysBlock,
        n: u64,
    ) -> impl Iterator<Item = (PhysBlock, PhysBlock)> + '_ {
        let end = start + n;
        let before = self
            .runs
            .range(..=start)
            .next_back()
            .filter(|(&s, &(len, _))| s + len > start);
        before
            .into_iter()
            .chain(self.runs.range(start + 1..end))
            .map(|(&s, &(len, _))| (s, s + len))
    }

    /// The parts of `[start, start + n)` with more than one reference, in
    /// order, as `(first block, blocks)`.
    pub fn overlapping(&self, start: PhysBlock, n: u64) -> Vec<crate::alloc::Run> {
        let end = start + n;
        self.runs_over(start, n)
            .map(|(s, e)| (s.max(start), e.min(end)))
            .filter(|(s, e)| s < e)
            .map(|(s, e)| (s, e - s))
            .collect()
    }

    /// The first blocks of the runs that overlap `[start, start + n)`.
    pub fn run_starts_overlapping(&self, start: PhysBlock, n: u64) -> Vec<PhysBlock> {
        self.runs_over(start, n).map(|(s, _)| s).collect()
    }

    /// Blocks with more than one reference.
    pub fn shared_blocks(&self) -> u64 {
        self.runs.values().map(|&(n, _)| n).sum()
    }

    /// Blocks that sharing saves: the sum of the extra references.
    pub fn saved_blocks(&self) -> u64 {
        self.runs.values().map(|&(n, c)| n * u64::from(c)).sum()
    }

    /// True when no block is shared.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// The runs, as `(start, blocks, extra)`.
    pub fn iter(&self) -> impl Iterator<Item = (PhysBlock, u64, u32)> + '_ {
        self.runs.iter().map(|(&s, &(n, c))| (s, n, c))
    }
}

/// The extra references of every tier's blocks (tier 0 is PM).
pub struct SharedBlocks {
    tiers: Mutex<BTreeMap<TierId, RefRuns>>,
}

impl Default for SharedBlocks {
    fn default() -> SharedBlocks {
        SharedBlocks::new(BTreeMap::new())
    }
}

impl SharedBlocks {
    /// The counts recovery found.
    pub fn new(tiers: BTreeMap<TierId, RefRuns>) -> SharedBlocks {
        SharedBlocks {
            tiers: Mutex::new(Rank::leaf("shared blocks"), tiers),
        }
    }

    /// One more reference to each block of the runs (a clone about to map
    /// them; the caller holds the source's inode lock, so they are live).
    pub fn add(&self, runs: &[Released]) {
        let mut t = self.tiers.lock();
        for &(tier, b, n) in runs {
            t.entry(tier).or_default().add(b, n);
        }
    }

    /// One reference less to each block of the runs; returns the parts no
    /// mapping holds any more (to free).
    pub fn release(&self, runs: Vec<Released>) -> Vec<Released> {
        let mut t = self.tiers.lock();
        if t.is_empty() {
            return runs;
        }
        let mut out = Vec::with_capacity(runs.len());
        for (tier, b, n) in runs {
            match t.get_mut(&tier) {
                Some(r) => {
                    out.extend(r.release(b, n).into_iter().map(|(s, k)| (tier, s, k)));
                    if r.is_empty() {
                        t.remove(&tier);
                    }
                }
                None => out.push((tier, b, n)),
            }
        }
        out
    }

    /// The parts of `[start, start + n)` of `tier` more than one extent
    /// maps, as `(first block, blocks)`.
    pub fn shared_parts(&self, tier: TierId, start: PhysBlock, n: u64) -> Vec<crate::alloc::Run> {
        match self.tiers.lock().get(&tier) {
            Some(r) => r.overlapping(start, n),
            None => Vec::new(),
        }
    }

    /// Per tier: (blocks mapped more than once, blocks saved).
    pub fn stats(&self) -> BTreeMap<TierId, (u64, u64)> {
        self.tiers
            .lock()
            .iter()
            .map(|(&id, r)| (id, (r.shared_blocks(), r.saved_blocks())))
            .collect()
    }

    /// A copy of every tier's counts.
    pub fn all_tiers(&self) -> BTreeMap<TierId, RefRuns> {
        self.tiers.lock().clone()
    }

    /// A copy of one tier's counts (for checks).
    pub fn of_tier(&self, tier: TierId) -> RefRuns {
        self.tiers.lock().get(&tier).cloned().unwrap_or_default()
    }
}

/// What a run of blocks found at mount is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Holder {
    /// File data mapped by an entry without the shared flag.
    Data,
    /// File data mapped by an entry with the shared flag.
    SharedData,
    /// A log page, a log blob longer than a block, or a clean copy: never
    /// shared.
    Exclusive,
    /// A log blob that fits in one block: the blobs packed into one block
    /// (format version 11) all hold it, and nothing else may.
    PackedLog,
}

/// How a log blob on a block tier holds its blocks.
pub fn log_holder(t: &crate::log::TierLog) -> Holder {
    if t.shares_its_block() {
        Holder::PackedLog
    } else {
        Holder::Exclusive
    }
}

/// The runs extent `e` holds, `(tier, first block, blocks, holder)`: its
/// data (shared or not, by its flag) and its clean copy (never shared).
pub fn held_runs(
    e: &crate::extent_map::Extent,
) -> impl Iterator<Item = (TierId, PhysBlock, u64, Holder)> {
    let data = if e.shared {
        Holder::SharedData
    } else {
        Holder::Data
    };
    let copy = e.copy.map(|(t, b)| (t, b, e.blocks, Holder::Exclusive));
    std::iter::once((e.tier, e.block, e.blocks, data)).chain(copy)
}

/// One run found at mount: `(first block, blocks, inode, holder)`.
pub type Found = (PhysBlock, u64, Ino, Holder);

/// Blocks mapped twice against the rules: the first block, and two inodes
/// that hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conflict {
    /// First block of the overlap.
    pub block: PhysBlock,
    /// An inode that holds it.
    pub first: Ino,
    /// Another inode that holds it.
    pub second: Ino,
}

/// What [`resolve`] makes of the runs of one tier.
#[derive(Debug, Default)]
pub struct Resolved {
    /// The blocks in use (union of every run), sorted and disjoint.
    pub used: Vec<crate::alloc::Run>,
    /// Extra references of blocks mapped more than once.
    pub refs: RefRuns,
    /// Extra references of blocks that several packed log blobs share.
    pub log_refs: RefRuns,
    /// Overlaps the rules do not allow (see the module invariants).
    pub conflicts: Vec<Conflict>,
}

/// Sweeps the runs of one tier: the union in use, the extra references of
/// data blocks mapped by several entries, and the overlaps that are double
/// ownership (an exclusive holder overlapping anything, or two entries
/// without the shared flag).
pub fn resolve(mut found: Vec<Found>) -> Resolved {
    let mut out = Resolved::default();
    // Boundaries where the set of holders changes.
    let mut events: Vec<(PhysBlock, bool, usize)> = Vec::with_capacity(found.len() * 2);
    found.retain(|f| f.1 > 0);
    for (i, f) in found.iter().enumerate() {
        events.push((f.0, true, i));
        events.push((f.0 + f.1, false, i));
    }
    // Ends before starts at one position: touching runs do not overlap.
    events.sort_unstable_by_key(|&(at, start, i)| (at, start, i));
    let mut active: Vec<usize> = Vec::new();
    let mut at = PhysBlock::ZERO;
    let mut reported: Option<(usize, usize)> = None;
    let mut k = 0;
    while k < events.len() {
        let pos = events[k].0;
        // The segment [at, pos) had the holders in `active`.
        if pos > at && !active.is_empty() {
            let n = pos - at;
            match out.used.last_mut() {
                Some((s, len)) if *s + *len == at => *len += n,
                _ => out.used.push((at, n)),
            }
            if active.len() > 1 {
                let exclusive = active
                    .iter()
                    .filter(|&&i| found[i].3 == Holder::Exclusive)
                    .count();
                let plain: Vec<usize> = active
                    .iter()
                    .copied()
                    .filter(|&i| found[i].3 == Holder::Data)
                    .collect();
                let packed = active
                    .iter()
                    .filter(|&&i| found[i].3 == Holder::PackedLog)
                    .count();
                // Packed log blobs share a block only with each other.
                let mixed = packed > 0 && packed < active.len();
                if exclusive > 0 || plain.len() > 1 || mixed {
                    // One report per pair of holders, at the first overlap.
                    let (a, b) = (active[0], active[1]);
                    let (a, b) = if exclusive == 0 && plain.len() > 1 {
                        (plain[0], plain[1])
                    } else {
                        (a, b)
                    };
                    if reported != Some((a, b)) {
                        out.conflicts.push(Conflict {
                            block: at,
                            first: found[a].2.min(found[b].2),
                            second: found[a].2.max(found[b].2),
                        });
                        reported = Some((a, b));
                    }
                } else if packed > 0 {
                    out.log_refs.add_count(at, n, (active.len() - 1) as u32);
                } else {
                    out.refs.add_count(at, n, (active.len() - 1) as u32);
                }
            }
        }
        at = pos;
        while k < events.len() && events[k].0 == pos {
            let (_, start, i) = events[k];
            if start {
                active.push(i);
            } else if let Some(p) = active.iter().position(|&x| x == i) {
                active.swap_remove(p);
            }
            k += 1;
        }
        active.sort_unstable();
    }
    out
}

impl RefRuns {
    /// Adds a run with `extra` references past the last run (recovery
    /// builds the map in block order).
    fn add_count(&mut self, start: PhysBlock, n: u64, extra: u32) {
        let last = self.runs.iter().next_back().map(|(&s, &v)| (s, v));
        match last {
            Some((s, (len, c))) if s + len == start && c == extra => {
                self.runs.insert(s, (len + n, c));
            }
            _ => {
                self.runs.insert(start, (n, extra));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Per-block model of the reference counts.
    fn model_of(r: &RefRuns) -> BTreeMap<u64, u32> {
        let mut m = BTreeMap::new();
        for (s, n, c) in r.iter() {
            for b in s.get()..s.get() + n {
                m.insert(b, c);
            }
        }
        m
    }

    #[test]
    fn a_block_is_free_only_when_its_last_reference_goes() {
        let mut r = RefRuns::default();
        // Two clones of blocks 10..20: three mappings, two extra references.
        r.add(PhysBlock(10), 10);
        r.add(PhysBlock(10), 10);
        assert_eq!(r.release(PhysBlock(10), 10), vec![]);
        assert_eq!(r.release(PhysBlock(12), 4), vec![]);
        // 12..16 had its last extra reference dropped above.
        assert_eq!(r.release(PhysBlock(10), 10), vec![(PhysBlock(12), 4)]);
        assert!(r.is_empty());
        assert_eq!(r.release(PhysBlock(10), 10), vec![(PhysBlock(10), 10)]);
    }

    #[test]
    fn touching_runs_with_equal_counts_are_joined() {
        let mut r = RefRuns::default();
        r.add(PhysBlock(0), 4);
        r.add(PhysBlock(4), 4);
        r.add(PhysBlock(8), 4);
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![(PhysBlock(0), 12, 1)]);
        r.add(PhysBlock(2), 2);
        assert_eq!(
            r.iter().collect::<Vec<_>>(),
            vec![
                (PhysBlock(0), 2, 1),
                (PhysBlock(2), 2, 2),
                (PhysBlock(4), 8, 1)
            ]
        );
        assert_eq!(r.release(PhysBlock(2), 2), vec![]);
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![(PhysBlock(0), 12, 1)]);
        assert_eq!(r.shared_blocks(), 12);
    }

    #[test]
    fn resolve_counts_shared_mappings_and_reports_double_ownership() {
        let r = resolve(vec![
            (PhysBlock(0), 8, 2, Holder::Data),
            (PhysBlock(4), 8, 3, Holder::SharedData),
            (PhysBlock(6), 2, 4, Holder::SharedData),
            (PhysBlock(20), 4, 5, Holder::Exclusive),
        ]);
        assert_eq!(r.used, vec![(PhysBlock(0), 12), (PhysBlock(20), 4)]);
        assert_eq!(
            r.refs.iter().collect::<Vec<_>>(),
            vec![(PhysBlock(4), 2, 1), (PhysBlock(6), 2, 2)]
        );
        assert!(r.conflicts.is_empty());
        // Two plain mappings of one block, or a log page under shared data.
        let r = resolve(vec![
            (PhysBlock(0), 4, 2, Holder::Data),
            (PhysBlock(3), 4, 3, Holder::Data),
        ]);
        assert_eq!(
            r.conflicts,
            vec![Conflict {
                block: PhysBlock(3),
                first: 2,
                second: 3
            }]
        );
        let r = resolve(vec![
            (PhysBlock(0), 4, 7, Holder::SharedData),
            (PhysBlock(2), 1, 9, Holder::Exclusive),
        ]);
        assert_eq!(r.conflicts.len(), 1);
        assert_eq!(r.conflicts[0].block, PhysBlock(2));
    }

    proptest! {
        #[test]
        fn ref_runs_match_a_per_block_model(
            ops in prop::collection::vec((any::<bool>(), 0u64..64, 1u64..16), 1..60)
        ) {
            let mut r = RefRuns::default();
            // Model: references per block (1 = mapped once, not in the map).
            let mut refs: BTreeMap<u64, u32> = BTreeMap::new();
            for (add, s, n) in ops {
                // Only runs whose every block is mapped can be added to or
                // released (as in the file system).
                let mapped = (s..s + n).all(|b| refs.contains_key(&b));
                if add {
                    if mapped {
                        r.add(PhysBlock(s), n);
                        for b in s..s + n {
                            *refs.get_mut(&b).unwrap() += 1;
                        }
                    } else if (s..s + n).all(|b| !refs.contains_key(&b)) {
                        // A fresh mapping of free blocks: one reference each.
                        for b in s..s + n {
                            refs.insert(b, 1);
                        }
                    }
                } else if mapped {
                    let freed: Vec<(u64, u64)> =
                        r.release(PhysBlock(s), n).into_iter().map(|(b, n)| (b.get(), n)).collect();
                    let mut expect = Vec::new();
                    for b in s..s + n {
                        let c = refs.get_mut(&b).unwrap();
                        *c -= 1;
                        if *c == 0 {
                            refs.remove(&b);
                            match expect.last_mut() {
                                Some((es, en)) if *es + *en == b => *en += 1,
                                _ => expect.push((b, 1)),
                            }
                        }
                    }
                    prop_assert_eq!(freed, expect);
                }
                let want: BTreeMap<u64, u32> =
                    refs.iter().filter(|(_, &c)| c > 1).map(|(&b, &c)| (b, c - 1)).collect();
                prop_assert_eq!(model_of(&r), want);
                // Joined: no two touching runs with equal counts.
                let v: Vec<_> = r.iter().collect();
                for w in v.windows(2) {
                    prop_assert!(!(w[0].0 + w[0].1 == w[1].0 && w[0].2 == w[1].2));
                }
            }
        }

        #[test]
        fn resolve_matches_a_per_block_count(
            runs in prop::collection::vec((0u64..48, 1u64..12, 0u8..3), 0..12)
        ) {
            let found: Vec<Found> = runs
                .iter()
                .enumerate()
                .map(|(i, &(s, n, h))| {
                    let holder = match h { 0 => Holder::Data, 1 => Holder::SharedData, _ => Holder::Exclusive };
                    (PhysBlock(s), n, i as Ino + 2, holder)
                })
                .collect();
            let r = resolve(found.clone());
            let mut per: BTreeMap<u64, Vec<Holder>> = BTreeMap::new();
            for &(s, n, _, h) in &found {
                for b in s.get()..s.get() + n {
                    per.entry(b).or_default().push(h);
                }
            }
            let used: u64 = r.used.iter().map(|u| u.1).sum();
            prop_assert_eq!(used, per.len() as u64);
            let bad = per.values().any(|hs| {
                hs.len() > 1
                    && (hs.contains(&Holder::Exclusive)
                        || hs.iter().filter(|&&h| h == Holder::Data).count() > 1)
            });
            prop_assert_eq!(bad, !r.conflicts.is_empty());
            if !bad {
                let want: BTreeMap<u64, u32> = per
                    .iter()
                    .filter(|(_, hs)| hs.len() > 1)
                    .map(|(&b, hs)| (b, hs.len() as u32 - 1))
                    .collect();
                prop_assert_eq!(model_of(&r.refs), want);
            }
        }
    }

    #[test]
    fn packed_log_blobs_share_a_block_only_with_each_other() {
        let r = resolve(vec![
            (PhysBlock(10), 1, 2, Holder::PackedLog),
            (PhysBlock(10), 1, 3, Holder::PackedLog),
            (PhysBlock(10), 1, 4, Holder::PackedLog),
            (PhysBlock(11), 1, 5, Holder::PackedLog),
            (PhysBlock(12), 2, 6, Holder::SharedData),
            (PhysBlock(12), 2, 7, Holder::SharedData),
        ]);
        assert!(r.conflicts.is_empty(), "{:?}", r.conflicts);
        assert_eq!(r.used, vec![(PhysBlock(10), 4)]);
        assert_eq!(
            r.log_refs.iter().collect::<Vec<_>>(),
            vec![(PhysBlock(10), 1, 2)]
        );
        assert_eq!(
            r.refs.iter().collect::<Vec<_>>(),
            vec![(PhysBlock(12), 2, 1)]
        );
        // A packed blob in a block of data, shared or not, or in a long blob.
        for other in [Holder::Data, Holder::SharedData, Holder::Exclusive] {
            let r = resolve(vec![
                (PhysBlock(10), 1, 2, Holder::PackedLog),
                (PhysBlock(9), 4, 3, other),
            ]);
            assert_eq!(
                r.conflicts,
                vec![Conflict {
                    block: PhysBlock(10),
                    first: 2,
                    second: 3
                }],
                "{other:?}"
            );
        }
    }
}
