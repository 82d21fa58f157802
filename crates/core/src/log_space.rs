//! Space for log pages: whole pool blocks for 4 KiB pages, and slabs for the
//! small pages (256 B to 2 KiB) that let many small files share one block.
//!
//! A file that is written once and left alone (a mail message, a source file
//! of a tar extract) needs a handful of entries: a write, an attribute change
//! or two, one move when migration takes its data down. A whole 4 KiB page per
//! file capped the number of files at PM size / 4 KiB; a first page of 256
//! bytes, doubling as the log grows (section 3.5 of docs/design.md), brings the
//! PM cost of such a file to its 128-byte slot plus 256–768 bytes.
//!
//! Invariants:
//! - every small page lies inside one *slab block*, aligned to its size; a slab
//!   block is taken from the page allocator when its first small page is
//!   handed out and returned when its last one is freed, so the page
//!   allocator sees a slab block as one used block;
//! - the slab bitmaps are DRAM only and rebuilt at mount from the live logs'
//!   pages (like the page allocator), so a crash cannot leak a small page.
//!
//! Lock order: the slab mutex is a leaf (it may take a page-allocator shard
//! lock inside, never the reverse).

use crate::alloc::PageAllocator;
use crate::lock_order::{Leaf, Mutex, Rank};
use std::collections::{BTreeMap, BTreeSet};
use terrace_format::{PhysBlock, BLOCK_SIZE, LOG_PAGE_MAX, LOG_PAGE_MIN};

/// 256-byte units in a block.
const UNITS: u32 = (BLOCK_SIZE / LOG_PAGE_MIN) as u32;
/// Small size classes: 256, 512, 1024, 2048 bytes.
const SMALL_CLASSES: usize = 4;

/// One log page: PM byte offset and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogPage {
    /// PM byte offset of the page.
    pub off: u64,
    /// Page size in bytes (256..=4096, a power of two).
    pub size: u64,
}

impl LogPage {
    /// A whole-block page at `off`.
    pub fn block(off: u64) -> LogPage {
        LogPage {
            off,
            size: LOG_PAGE_MAX,
        }
    }

    /// Byte offset just past the page.
    pub fn end(&self) -> u64 {
        self.off + self.size
    }

    fn units(&self) -> (u64, u16) {
        let block = self.off / BLOCK_SIZE;
        let first = ((self.off % BLOCK_SIZE) / LOG_PAGE_MIN) as u32;
        let n = (self.size / LOG_PAGE_MIN) as u32;
        let mask = (((1u32 << n) - 1) << first) as u16;
        (block, mask)
    }
}

fn class_index(size: u64) -> usize {
    (size / LOG_PAGE_MIN).trailing_zeros() as usize
}

/// The aligned position of a free run of `n` units in `used`, if any.
fn fit(used: u16, n: u32) -> Option<u32> {
    let want = ((1u32 << n) - 1) as u16;
    (0..UNITS / n)
        .map(|k| k * n)
        .find(|&first| used & (want << first) == 0)
}

#[derive(Default)]
struct Slabs {
    /// Slab block → used 256-byte units.
    used: BTreeMap<u64, u16>,
    /// Per small class: slab blocks with an aligned free run of that class.
    fits: [BTreeSet<u64>; SMALL_CLASSES],
    /// Whole-block log pages handed out.
    whole: u64,
}

impl Slabs {
    fn set(&mut self, block: u64, used: u16) {
        for (c, set) in self.fits.iter_mut().enumerate() {
            if fit(used, 1 << c).is_some() && used != 0 {
                set.insert(block);
            } else {
                set.remove(&block);
            }
        }
        if used == 0 {
            self.used.remove(&block);
        } else {
            self.used.insert(block, used);
        }
    }
}

/// Owner of small-log-page space (see the module docs).
pub struct LogSpace {
    slabs: Mutex<Slabs>,
}

impl Default for LogSpace {
    /// No slab.
    fn default() -> Self {
        LogSpace {
            slabs: Mutex::new(Rank::Leaf(Leaf::LogSlabs), Slabs::default()),
        }
    }
}

/// Where a log's new pages come from: the slabs, the page allocator, and
/// how many free blocks the caller must leave to others.
#[derive(Clone, Copy)]
pub struct LogRoom<'a> {
    /// Small-page slabs.
    pub space: &'a LogSpace,
    /// The PM page allocator.
    pub alloc: &'a PageAllocator,
    /// Free blocks this caller may not take (0: any).
    pub keep_free: u64,
}

impl LogRoom<'_> {
    /// A page of `size` bytes (see [`LogSpace::alloc`]).
    pub fn take(&self, size: u64) -> Option<LogPage> {
        self.space.alloc(self.alloc, size, self.keep_free)
    }

    /// A whole block outside any log, taken by the same rule as a log page
    /// (what is kept free for others): a symlink's target, which its
    /// create commits with the link's first log entry.
    pub fn take_block(&self) -> Option<PhysBlock> {
        self.alloc.alloc_one_keeping(self.keep_free)
    }

    /// Returns pages.
    pub fn give_back(&self, pages: impl IntoIterator<Item = LogPage>) {
        self.space.free_all(self.alloc, pages)
    }
}

/// Error of [`LogSpace::from_pages`]: two small pages overlap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageOverlap {
    /// The page that overlaps one listed before it.
    pub page: LogPage,
}

impl LogSpace {
    /// Rebuilds the slabs from the live small pages (any order). Returns the
    /// space and the slab blocks, each once, for the page allocator to mark
    /// used.
    /// Whole-block pages are only counted.
    pub fn from_pages(
        pages: impl IntoIterator<Item = LogPage>,
    ) -> Result<(LogSpace, Vec<u64>), PageOverlap> {
        let mut s = Slabs::default();
        let mut used: BTreeMap<u64, u16> = BTreeMap::new();
        for p in pages {
            if p.size >= LOG_PAGE_MAX {
                s.whole += 1;
                continue;
            }
            let (block, mask) = p.units();
            let u = used.entry(block).or_default();
            if *u & mask != 0 {
                return Err(PageOverlap { page: p });
            }
            *u |= mask;
        }
        let blocks: Vec<u64> = used.keys().copied().collect();
        for (b, u) in used {
            s.set(b, u);
        }
        Ok((
            LogSpace {
                slabs: Mutex::new(Rank::Leaf(Leaf::LogSlabs), s),
            },
            blocks,
        ))
    }

    /// Takes a page of `size` bytes: a whole block from `alloc` for 4 KiB,
    /// else a free aligned place in a slab block (a new slab block when none
    /// has one). A new block is taken only while more than `keep_free`
    /// blocks are free (blocks promised to others: see `Fs::log_promise`).
    /// `None` when there is no room.
    pub fn alloc(&self, alloc: &PageAllocator, size: u64, keep_free: u64) -> Option<LogPage> {
        let new_block = || alloc.alloc_one_keeping(keep_free).map(PhysBlock::get);
        if size >= LOG_PAGE_MAX {
            let b = new_block()?;
            self.slabs.lock().whole += 1;
            return Some(LogPage::block(b * BLOCK_SIZE));
        }
        let c = class_index(size);
        let n = 1u32 << c;
        let mut s = self.slabs.lock();
        let block = match s.fits[c].iter().next().copied() {
            Some(b) => b,
            None => new_block()?,
        };
        let used = s.used.get(&block).copied().unwrap_or(0);
        let first = fit(used, n).expect("the slab block has room for the class");
        let page = LogPage {
            off: block * BLOCK_SIZE + u64::from(first) * LOG_PAGE_MIN,
            size,
        };
        s.set(block, used | page.units().1);
        Some(page)
    }

    /// Returns a page; a slab block whose last page this was goes back to
    /// `alloc`.
    pub fn free(&self, alloc: &PageAllocator, page: LogPage) {
        if page.size >= LOG_PAGE_MAX {
            self.slabs.lock().whole -= 1;
            alloc.free_run(PhysBlock(page.off / BLOCK_SIZE), 1);
            return;
        }
        let (block, mask) = page.units();
        let mut s = self.slabs.lock();
        let used = s.used.get(&block).copied().unwrap_or(0);
        debug_assert_eq!(used & mask, mask, "freeing a small log page twice");
        let left = used & !mask;
        s.set(block, left);
        if left == 0 {
            alloc.free_run(PhysBlock(block), 1);
        }
    }

    /// Returns every page of a list.
    pub fn free_all(&self, alloc: &PageAllocator, pages: impl IntoIterator<Item = LogPage>) {
        for p in pages {
            self.free(alloc, p);
        }
    }

    /// For each `k` in `0..=pages.len()`, the pool blocks that freeing the
    /// first `k` of `pages` (live pages of one log, in its order) would
    /// give back now: each whole-block page, and each slab block whose
    /// every used unit is among them. A log trim chooses its cut by it.
    pub fn blocks_freed_by_prefixes(&self, pages: &[LogPage]) -> Vec<u64> {
        let s = self.slabs.lock();
        let mut dropped: BTreeMap<u64, u16> = BTreeMap::new();
        let mut freed = 0;
        let mut out = Vec::with_capacity(pages.len() + 1);
        out.push(0);
        for p in pages {
            if p.size >= LOG_PAGE_MAX {
                freed += 1;
            } else {
                let (block, mask) = p.units();
                let acc = dropped.entry(block).or_insert(0);
                let before = *acc;
                *acc |= mask;
                let used = s.used.get(&block).copied().unwrap_or(0);
                if *acc == used && before != used {
                    freed += 1;
                }
            }
            out.push(freed);
        }
        out
    }

    /// Pool blocks that hold log pages: slab blocks and whole-block pages.
    pub fn blocks(&self) -> u64 {
        let s = self.slabs.lock();
        s.used.len() as u64 + s.whole
    }

    /// The slabs' bitmaps (slab block → used 256-byte units), for checks.
    pub fn bitmaps(&self) -> BTreeMap<u64, u16> {
        self.slabs.lock().used.clone()
    }
}

/// The used-unit bitmaps a list of small pages implies (for checks).
pub fn bitmaps_of(pages: impl IntoIterator<Item = LogPage>) -> BTreeMap<u64, u16> {
    let mut m: BTreeMap<u64, u16> = BTreeMap::new();
    for p in pages {
        if p.size < LOG_PAGE_MAX {
            let (b, mask) = p.units();
            *m.entry(b).or_default() |= mask;
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_freed_by_prefixes_counts_a_slab_block_only_once_all_its_pages_go() {
        let a = PageAllocator::new(PhysBlock(0), 8, 1);
        let ls = LogSpace::default();
        // One log: a small page, a whole page, another small page in the
        // same slab block; a second log's small page shares that block too.
        let mine = [
            ls.alloc(&a, 256, 0).unwrap(),
            ls.alloc(&a, 4096, 0).unwrap(),
            ls.alloc(&a, 512, 0).unwrap(),
        ];
        let other = ls.alloc(&a, 256, 0).unwrap();
        assert_eq!(mine[0].off / BLOCK_SIZE, other.off / BLOCK_SIZE);
        assert_eq!(ls.blocks_freed_by_prefixes(&mine), vec![0, 0, 1, 1]);
        ls.free(&a, other);
        assert_eq!(ls.blocks_freed_by_prefixes(&mine), vec![0, 0, 1, 2]);
        let free = a.free();
        ls.free_all(&a, mine);
        assert_eq!(
            a.free(),
            free + 2,
            "the prediction matches what freeing gives"
        );
    }

    #[test]
    fn small_pages_share_a_block_and_return_it_when_all_are_freed() {
        let a = PageAllocator::new(PhysBlock(10), 4, 1);
        let ls = LogSpace::default();
        let p: Vec<LogPage> = (0..16).map(|_| ls.alloc(&a, 256, 0).unwrap()).collect();
        assert_eq!(a.free(), 3, "sixteen 256-byte pages take one block");
        let mut offs: Vec<u64> = p.iter().map(|p| p.off).collect();
        offs.dedup();
        assert_eq!(offs.len(), 16);
        assert!(p
            .iter()
            .all(|p| p.off / BLOCK_SIZE == p.end().div_ceil(BLOCK_SIZE) - 1));
        ls.free_all(&a, p);
        assert_eq!(a.free(), 4);
        assert!(ls.bitmaps().is_empty());
        assert_eq!(ls.blocks(), 0);
    }

    #[test]
    fn pages_are_aligned_to_their_size_and_never_overlap() {
        let a = PageAllocator::new(PhysBlock(0), 64, 1);
        let ls = LogSpace::default();
        let mut live: Vec<LogPage> = Vec::new();
        let mut x = 12345u64;
        for _ in 0..2000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            if live.len() > 40 && x % 3 == 0 {
                let i = (x >> 20) as usize % live.len();
                ls.free(&a, live.swap_remove(i));
            } else {
                let size = LOG_PAGE_MIN << ((x >> 33) % 5);
                if let Some(p) = ls.alloc(&a, size, 0) {
                    assert_eq!(p.off % size, 0);
                    live.push(p);
                }
            }
            let mut sorted = live.clone();
            sorted.sort();
            for w in sorted.windows(2) {
                assert!(w[0].end() <= w[1].off, "{:?} overlaps {:?}", w[0], w[1]);
            }
            let small: Vec<LogPage> = live.iter().copied().filter(|p| p.size < 4096).collect();
            assert_eq!(ls.bitmaps(), bitmaps_of(small));
        }
        let (rebuilt, blocks) = LogSpace::from_pages(live.iter().copied()).unwrap();
        assert_eq!(rebuilt.bitmaps(), ls.bitmaps());
        assert_eq!(blocks.len(), ls.bitmaps().len());
        assert_eq!(rebuilt.blocks(), ls.blocks());
        assert_eq!(ls.blocks(), 64 - a.free());
    }

    #[test]
    fn overlapping_small_pages_are_refused_at_rebuild() {
        let a = LogPage {
            off: 4096,
            size: 512,
        };
        let b = LogPage {
            off: 4096 + 256,
            size: 256,
        };
        assert_eq!(
            LogSpace::from_pages([a, b]).err(),
            Some(PageOverlap { page: b })
        );
    }
}
