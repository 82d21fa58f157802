//! Free-space allocator of the PM page pool.
//!
//! Free space is a set of free extents (start block, length) split into several
//! shards, each covering a contiguous part of the pool and guarded by its own lock,
//! so threads that allocate at the same time rarely contend (NOVA keeps one free
//! list per CPU for the same reason).
//!
//! Nothing here is persistent: the allocator is rebuilt at every mount from the
//! blocks that live logs and live write entries reference (see `recovery`). A block
//! is handed out at most once until it is freed; freeing a block that is already
//! free is a bug and panics in debug builds.

use crate::lock_order::{Leaf, Mutex, Rank};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use terrace_format::PhysBlock;

/// A run of blocks: `(first block, number of blocks)`.
pub type Run = (PhysBlock, u64);

struct Shard {
    start: PhysBlock,
    end: PhysBlock,
    free: Mutex<BTreeMap<PhysBlock, u64>>,
}

/// The page-pool allocator.
pub struct PageAllocator {
    shards: Vec<Shard>,
    free_blocks: AtomicU64,
    total_blocks: u64,
    next_shard: AtomicUsize,
}

/// Error of [`PageAllocator::from_used`]: two owners claim the same block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    /// First block claimed twice.
    pub block: PhysBlock,
}

impl PageAllocator {
    /// An allocator over `[start, start + blocks)` with everything free.
    pub fn new(start: PhysBlock, blocks: u64, shards: usize) -> PageAllocator {
        let n = shards.clamp(1, 64).min(blocks.max(1) as usize);
        let per = blocks.div_ceil(n as u64).max(1);
        let mut v = Vec::new();
        let mut s = start;
        while s < start + blocks {
            let e = (s + per).min(start + blocks);
            let mut m = BTreeMap::new();
            m.insert(s, e - s);
            v.push(Shard {
                start: s,
                end: e,
                free: Mutex::new(Rank::Leaf(Leaf::PageAllocator), m),
            });
            s = e;
        }
        PageAllocator {
            shards: v,
            free_blocks: AtomicU64::new(blocks),
            total_blocks: blocks,
            next_shard: AtomicUsize::new(0),
        }
    }

    /// An allocator whose free space is the complement of `used` (runs in any
    /// order). Fails when two runs overlap or a run leaves the pool.
    pub fn from_used(
        start: PhysBlock,
        blocks: u64,
        shards: usize,
        mut used: Vec<Run>,
    ) -> Result<PageAllocator, Overlap> {
        let a = PageAllocator::new(start, blocks, shards);
        used.sort_unstable();
        let mut prev_end = start;
        for &(s, n) in &used {
            if n == 0 {
                continue;
            }
            if s < prev_end || s + n > start + blocks {
                return Err(Overlap {
                    block: s.max(prev_end.min(s)),
                });
            }
            prev_end = s + n;
        }
        for &(s, n) in &used {
            if n > 0 {
                a.take(s, n);
            }
        }
        Ok(a)
    }

    /// Removes a known-free range from the free sets (used while rebuilding).
    fn take(&self, mut s: PhysBlock, n: u64) {
        let end = s + n;
        while s < end {
            let shard = self.shard_of(s);
            let e = end.min(shard.end);
            let mut free = shard.free.lock();
            let (&fs, &fl) = free.range(..=s).next_back().expect("range is free");
            assert!(fs + fl >= e, "range is free");
            free.remove(&fs);
            if fs < s {
                free.insert(fs, s - fs);
            }
            if fs + fl > e {
                free.insert(e, fs + fl - e);
            }
            self.free_blocks.fetch_sub(e - s, Ordering::Relaxed);
            s = e;
        }
    }

    fn shard_of(&self, block: PhysBlock) -> &Shard {
        let i = self.shards.partition_point(|sh| sh.end <= block);
        &self.shards[i]
    }

    /// Total blocks managed.
    pub fn total(&self) -> u64 {
        self.total_blocks
    }

    /// Blocks free now.
    pub fn free(&self) -> u64 {
        self.free_blocks.load(Ordering::Relaxed)
    }

    /// Allocates `n` blocks as few runs as it can (first fit, one shard first,
    /// then the others). All or nothing: `None` when fewer than `n` are free.
    pub fn alloc(&self, n: u64) -> Option<Vec<Run>> {
        self.alloc_keeping(n, 0)
    }

    /// One block, if one is free.
    pub fn alloc_one(&self) -> Option<PhysBlock> {
        self.alloc(1).map(|r| r[0].0)
    }

    /// One block, if more than `keep_free` blocks are free (and so at least
    /// `keep_free` stay free after it, whatever other callers take meanwhile).
    pub fn alloc_one_keeping(&self, keep_free: u64) -> Option<PhysBlock> {
        self.alloc_keeping(1, keep_free).map(|r| r[0].0)
    }

    /// [`PageAllocator::alloc`] that leaves at least `keep_free` blocks free:
    /// `None` when fewer than `n + keep_free` are. The count is checked and
    /// taken in one atomic step, so concurrent callers cannot take a
    /// reserve between a look and an allocation.
    pub fn alloc_keeping(&self, n: u64, keep_free: u64) -> Option<Vec<Run>> {
        if n == 0 {
            return Some(Vec::new());
        }
        // Reserve the count first so concurrent callers cannot overcommit.
        let mut cur = self.free_blocks.load(Ordering::Relaxed);
        loop {
            if cur < n.saturating_add(keep_free) {
                return None;
            }
            match self.free_blocks.compare_exchange_weak(
                cur,
                cur - n,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(x) => cur = x,
            }
        }
        let first = self.next_shard.fetch_add(1, Ordering::Relaxed) % self.shards.len();
        let mut runs = Vec::new();
        let mut need = n;
        // Pass 1: a single run that fits, in any shard.
        for k in 0..self.shards.len() {
            let sh = &self.shards[(first + k) % self.shards.len()];
            let mut free = sh.free.lock();
            if let Some((&s, &l)) = free.iter().find(|(_, &l)| l >= need) {
                free.remove(&s);
                if l > need {
                    free.insert(s + need, l - need);
                }
                runs.push((s, need));
                return Some(runs);
            }
        }
        // Pass 2: gather pieces, largest first.
        for k in 0..self.shards.len() {
            let sh = &self.shards[(first + k) % self.shards.len()];
            let mut free = sh.free.lock();
            while need > 0 {
                let Some((&s, &l)) = free.iter().max_by_key(|(_, &l)| l) else {
                    break;
                };
                free.remove(&s);
                let take = l.min(need);
                if l > take {
                    free.insert(s + take, l - take);
                }
                runs.push((s, take));
                need -= take;
            }
            if need == 0 {
                break;
            }
        }
        debug_assert_eq!(need, 0, "free count and free sets disagree");
        Some(runs)
    }

    /// Whether the next allocation starts in the shard that holds `block`
    /// (for tests that need a block to be handed out again).
    pub fn next_shard_holds(&self, block: PhysBlock) -> bool {
        let next = self.next_shard.load(Ordering::Relaxed) % self.shards.len();
        let sh = &self.shards[next];
        (sh.start..sh.end).contains(&block)
    }

    /// Returns a run to the free sets, merging with its neighbours.
    pub fn free_run(&self, mut s: PhysBlock, n: u64) {
        let end = s + n;
        while s < end {
            let shard = self.shard_of(s);
            let e = end.min(shard.end);
            let mut free = shard.free.lock();
            let mut start = s;
            let mut len = e - s;
            if let Some((&ps, &pl)) = free.range(..s).next_back() {
                debug_assert!(ps + pl <= s, "double free of block {s}");
                if ps + pl == s {
                    free.remove(&ps);
                    start = ps;
                    len += pl;
                }
            }
            if let Some(&nl) = free.get(&e) {
                free.remove(&e);
                len += nl;
            }
            debug_assert!(free.range(s..e).next().is_none(), "double free in {s}..{e}");
            free.insert(start, len);
            self.free_blocks.fetch_add(e - s, Ordering::Relaxed);
            s = e;
        }
    }

    /// The free runs, in block order (for fsck and tests).
    pub fn free_runs(&self) -> Vec<Run> {
        let mut v = Vec::new();
        for sh in &self.shards {
            v.extend(sh.free.lock().iter().map(|(&s, &l)| (s, l)));
        }
        v
    }

    /// Blocks claimed by the shard `start` boundaries (test helper).
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// First block of the pool.
    pub fn start(&self) -> PhysBlock {
        self.shards
            .first()
            .map(|s| s.start)
            .unwrap_or(PhysBlock::ZERO)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_is_all_or_nothing_and_free_restores() {
        let a = PageAllocator::new(PhysBlock(100), 1000, 4);
        let r = a.alloc(600).unwrap();
        assert_eq!(r.iter().map(|x| x.1).sum::<u64>(), 600);
        assert!(a.alloc(401).is_none());
        assert_eq!(a.free(), 400);
        for (s, n) in r {
            a.free_run(s, n);
        }
        assert_eq!(a.free(), 1000);
        let runs = a.free_runs();
        assert_eq!(runs.iter().map(|x| x.1).sum::<u64>(), 1000);
    }

    #[test]
    fn runs_never_overlap() {
        let a = PageAllocator::new(PhysBlock(10), 300, 3);
        let mut got = Vec::new();
        for i in 0..50 {
            got.extend(a.alloc(1 + i % 7).unwrap());
        }
        got.sort();
        for w in got.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0);
        }
        assert!(got
            .iter()
            .all(|&(s, n)| s >= PhysBlock(10) && s + n <= PhysBlock(310)));
    }

    #[test]
    fn from_used_detects_double_ownership() {
        assert!(PageAllocator::from_used(
            PhysBlock(0),
            100,
            2,
            vec![(PhysBlock(5), 10), (PhysBlock(14), 2)]
        )
        .is_err());
        let a = PageAllocator::from_used(
            PhysBlock(0),
            100,
            2,
            vec![(PhysBlock(5), 10), (PhysBlock(60), 2)],
        )
        .unwrap();
        assert_eq!(a.free(), 88);
        assert_eq!(
            a.free_runs(),
            vec![
                (PhysBlock(0), 5),
                (PhysBlock(15), 35),
                (PhysBlock(50), 10),
                (PhysBlock(62), 38)
            ]
        );
    }
}
