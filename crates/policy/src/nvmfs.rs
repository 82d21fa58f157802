//! NVMFS's management of fast-tier pages (NVMFS §III-C, §III-D): a dirty and
//! a clean LRU list with an adaptive split, flushing of dirty data in large
//! sequential extents, and cost-free eviction of clean copies.
//!
//! # The two lists and their split
//!
//! PM pages holding file data are on one of two LRU lists: *dirty* (the only
//! valid copy is on PM) or *clean* (an identical, valid copy is also on a block
//! tier — a page flushed and not written since). The lists share the PM pages;
//! NVMFS moves their boundary: "we maintain two performance counters which
//! keep track of the hits on clean and dirty data ... We periodically measure
//! and reset the counters", and "if the hit ratio of clean data is 2X more
//! than that of dirty data, we increase the NVRAM pages that are allocated for
//! clean data". [`AdaptiveSplit`] is that state machine: the caller reports
//! hits ([`AdaptiveSplit::on_hit`]) and, once per window
//! ([`NvmfsParams::window_ns`]), the lists' sizes
//! ([`AdaptiveSplit::on_window_end`]); the list with more hits *per page*
//! grows its target share by [`SplitParams::step_percent`], within
//! [`SplitParams::min_percent`]..=[`SplitParams::max_percent`] (10%..90% by
//! default), and the counters reset. The paper's "2X" is an example, not a
//! rule; here any difference moves the split, by a small step, so the split
//! follows the workload without jumping. Equal hit rates, or a window without
//! hits, leave it alone. Hits per page are compared by cross-multiplication
//! (exact); a list with no pages counts as one page.
//!
//! # Flushing
//!
//! Dirty data is flushed when the dirty list reaches its high mark (80% of its
//! target) and until it is down to its low mark (50%) ([`flush_pages`]), or
//! until it stops gaining on the writes that re-dirty flushed data
//! ([`FlushRun`] keeps whether a flush is running between passes, as NVMFS's
//! background thread does). The runs flushed ([`flush_choice`]) are sorted by inode
//! and file block, and the caller copies them in units of whole extents
//! (512 KiB, "the minimum flushing unit"), so that pages adjacent in a file
//! are adjacent on the device and read back sequentially. A flushed page becomes clean (both copies valid) and goes to
//! the LRU end of the clean list.
//!
//! # Which dirty data is flushed first
//!
//! NVMFS orders its dirty list by recency (LRU). Terrace offers that order
//! ([`FlushOrder::Lru`]) and, as its default, a frequency-aware one
//! ([`FlushOrder::Frequency`]): each run of dirty blocks scores
//! `ln(writes) − age / decay`, where `writes` counts the writes the location
//! has seen and `age` is the time since the last one, and the lowest scores
//! are flushed first ([`flush_choice`]). A block rewritten often stays on PM
//! even if it was not the very last one written, which is what absorbs the
//! overwrites of a skewed workload; the age term decays old counts (a count
//! of 255, the most a run records, is outweighed after `5.5 × decay` without a
//! write), so data that stops being written is flushed in the end. A
//! simulation of 4 KiB Zipf (θ = 1.04) overwrites with PM at 10% of the data
//! gave 0.27 flushed blocks per write for LRU and 0.22 for this order, against
//! 0.31 for Ziggurat's amtime selection; docs/benchmarks.md has the measured
//! numbers.
//!
//! # Eviction
//!
//! When PM space is needed, clean pages are evicted first, coldest first:
//! their block-tier copy is valid, so eviction is only a pointer change (the
//! core's eviction mode of migration). Dirty pages must be flushed or moved
//! before they can go.
//!
//! Where Terrace differs: NVMFS keeps every file page on one list; Terrace
//! calls the page-granular functions with whatever unit the caller tracks
//! (a block of a write entry).

/// Which list a page is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PageKind {
    /// Also valid on a block tier.
    Clean,
    /// Only on PM.
    Dirty,
}

/// Bounds and step of the adaptive split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitParams {
    /// Smallest share of PM pages the dirty list may target (percent).
    pub min_percent: u8,
    /// Largest share of PM pages the dirty list may target (percent).
    pub max_percent: u8,
    /// Change of the target per window (percentage points).
    pub step_percent: u8,
    /// Share the dirty list targets at first (percent).
    pub initial_percent: u8,
}

impl Default for SplitParams {
    fn default() -> Self {
        SplitParams {
            min_percent: 10,
            max_percent: 90,
            step_percent: 5,
            // "We prefer to store more dirty data on NVRAM, expecting them to
            // absorb more update/write operations" (NVMFS §III-C).
            initial_percent: 80,
        }
    }
}

/// NVMFS's tunables ([`crate::Settings::nvmfs_params`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvmfsParams {
    /// Flushing starts when the dirty list reaches this share of its target.
    pub dirty_high_percent: u8,
    /// Flushing continues until the dirty list is down to this share.
    pub dirty_low_percent: u8,
    /// Flush unit in bytes (the block tier's extent).
    pub extent_bytes: u64,
    /// Length of a hit-counting window (ns).
    pub window_ns: u64,
    /// The split's bounds and step.
    pub split: SplitParams,
    /// Which dirty data is flushed first.
    pub order: FlushOrder,
    /// Age (ns) that outweighs a factor of e in a run's write count
    /// ([`FlushOrder::Frequency`]).
    pub decay_ns: u64,
}

impl Default for NvmfsParams {
    fn default() -> Self {
        NvmfsParams {
            dirty_high_percent: 80,
            dirty_low_percent: 50,
            extent_bytes: 512 << 10,
            window_ns: 2_000_000_000,
            split: SplitParams::default(),
            order: FlushOrder::Frequency,
            decay_ns: 30_000_000_000,
        }
    }
}

impl NvmfsParams {
    /// The flush unit in blocks (at least 1).
    pub fn extent_blocks(&self) -> u64 {
        (self.extent_bytes / crate::migration::BLOCK_BYTES).max(1)
    }
}

/// The adaptive split between the dirty and the clean list: the dirty list's
/// target share and the hit counters of the current window.
///
/// Invariant: the target stays within the bounds it was built with (after
/// any sequence of calls with the same [`SplitParams`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdaptiveSplit {
    dirty_percent: u8,
    clean_hits: u64,
    dirty_hits: u64,
    window_start_ns: u64,
}

impl AdaptiveSplit {
    /// A split at `p.initial_percent` (clamped to the bounds), its first
    /// window starting at `now_ns`.
    pub fn new(p: &SplitParams, now_ns: u64) -> Self {
        AdaptiveSplit {
            dirty_percent: p
                .initial_percent
                .clamp(p.min_percent, p.max_percent.max(p.min_percent)),
            clean_hits: 0,
            dirty_hits: 0,
            window_start_ns: now_ns,
        }
    }

    /// A read or write hit a PM page on list `kind`.
    pub fn on_hit(&mut self, kind: PageKind) {
        self.on_hits(kind, 1);
    }

    /// `n` reads or writes hit PM pages on list `kind`.
    pub fn on_hits(&mut self, kind: PageKind, n: u64) {
        match kind {
            PageKind::Clean => self.clean_hits = self.clean_hits.saturating_add(n),
            PageKind::Dirty => self.dirty_hits = self.dirty_hits.saturating_add(n),
        }
    }

    /// Hits counted in this window: `(clean, dirty)`.
    pub fn hits(&self) -> (u64, u64) {
        (self.clean_hits, self.dirty_hits)
    }

    /// The dirty list's target share of PM pages (percent).
    pub fn dirty_percent(&self) -> u8 {
        self.dirty_percent
    }

    /// The dirty list's target in pages, of `total_pages` PM pages.
    pub fn dirty_target_pages(&self, total_pages: u64) -> u64 {
        (u128::from(total_pages) * u128::from(self.dirty_percent) / 100) as u64
    }

    /// Whether the window that started at the last reset is over at `now_ns`.
    pub fn window_over(&self, now_ns: u64, window_ns: u64) -> bool {
        now_ns.saturating_sub(self.window_start_ns) >= window_ns
    }

    /// Ends the window at `now_ns`, with the lists holding `clean_pages` and
    /// `dirty_pages`: the list with more hits per page grows its share by one
    /// step (within the bounds), the counters reset, and the new dirty target
    /// (percent) is returned.
    pub fn on_window_end(
        &mut self,
        clean_pages: u64,
        dirty_pages: u64,
        now_ns: u64,
        p: &SplitParams,
    ) -> u8 {
        // clean_hits / clean_pages vs dirty_hits / dirty_pages.
        let clean = u128::from(self.clean_hits) * u128::from(dirty_pages.max(1));
        let dirty = u128::from(self.dirty_hits) * u128::from(clean_pages.max(1));
        let (lo, hi) = (p.min_percent, p.max_percent.max(p.min_percent));
        let d = self.dirty_percent;
        self.dirty_percent = if dirty > clean {
            d.saturating_add(p.step_percent).clamp(lo, hi)
        } else if clean > dirty {
            d.saturating_sub(p.step_percent).clamp(lo, hi)
        } else {
            d.clamp(lo, hi)
        };
        self.clean_hits = 0;
        self.dirty_hits = 0;
        self.window_start_ns = now_ns;
        self.dirty_percent
    }
}

/// NVMFS's background flush between two passes: whether a flush is running
/// and how many dirty pages the previous pass saw.
///
/// A running flush continues toward the low mark only while it gains. When
/// the dirty list has not shrunk since the previous pass, writes re-dirty
/// data as fast as it is flushed: the set of data being written is larger
/// than the low mark, and flushing more of it only adds block-tier writes
/// (each flushed page is written again, and flushed again, in a loop that
/// never reaches the mark). The flush then stops, and starts again only when
/// the dirty list reaches the high mark. A flush that makes progress behaves
/// exactly as [`flush_pages`] says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlushRun {
    running: bool,
    dirty_at_last_pass: u64,
}

impl FlushRun {
    /// Whether the last pass flushed.
    pub fn running(&self) -> bool {
        self.running
    }

    /// The pages to flush in this pass, with `dirty_pages` dirty now and a
    /// dirty target of `dirty_target_pages`; remembers what it saw.
    pub fn next_pass(&mut self, dirty_pages: u64, dirty_target_pages: u64, p: &NvmfsParams) -> u64 {
        let gaining = dirty_pages < self.dirty_at_last_pass;
        let pages = flush_pages(dirty_pages, dirty_target_pages, self.running && gaining, p);
        self.running = pages > 0;
        self.dirty_at_last_pass = dirty_pages;
        pages
    }
}

/// How many dirty pages to flush now: 0 below the high mark (or, while a flush
/// is `running`, at or below the low mark); otherwise down to the low mark.
/// `dirty_target_pages` is the dirty list's target
/// ([`AdaptiveSplit::dirty_target_pages`]).
pub fn flush_pages(
    dirty_pages: u64,
    dirty_target_pages: u64,
    running: bool,
    p: &NvmfsParams,
) -> u64 {
    // Compared exactly (`dirty / target` against `percent / 100`); the pages
    // to flush bring the list down to the low mark rounded down.
    let at_least = |percent: u8| {
        u128::from(dirty_pages) * 100 >= u128::from(dirty_target_pages) * u128::from(percent)
    };
    let low_percent = p.dirty_low_percent.min(p.dirty_high_percent);
    let above_low =
        u128::from(dirty_pages) * 100 > u128::from(dirty_target_pages) * u128::from(low_percent);
    let go = above_low && (running || at_least(p.dirty_high_percent));
    if go {
        let low = (u128::from(dirty_target_pages) * u128::from(low_percent) / 100) as u64;
        dirty_pages.saturating_sub(low)
    } else {
        0
    }
}

/// Consecutive blocks of one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PageRun {
    /// Inode number.
    pub ino: u64,
    /// First file block.
    pub file_block: u64,
    /// Length in blocks.
    pub blocks: u64,
}

/// The order in which dirty data is flushed (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlushOrder {
    /// Least recently written first (NVMFS's LRU).
    Lru,
    /// Lowest `ln(writes) − age / decay` first.
    Frequency,
}

impl FlushOrder {
    /// Every order, by name (the default first).
    pub const NAMES: &'static [&'static str] = &["frequency", "lru"];

    /// Its name in settings.
    pub fn name(self) -> &'static str {
        match self {
            FlushOrder::Lru => "lru",
            FlushOrder::Frequency => "frequency",
        }
    }

    /// The order called `name`.
    pub fn parse(name: &str) -> Option<FlushOrder> {
        match name.trim() {
            "lru" => Some(FlushOrder::Lru),
            "frequency" => Some(FlushOrder::Frequency),
            _ => None,
        }
    }
}

/// A run of dirty PM blocks of one file (one extent of its map).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DirtyRun {
    /// Inode number.
    pub ino: u64,
    /// First file block.
    pub file_block: u64,
    /// Length in blocks.
    pub blocks: u64,
    /// When it was last written (ns).
    pub mtime_ns: u64,
    /// Writes the location has seen (saturating; at least 1 is assumed).
    pub writes: u8,
}

/// How much a run deserves to stay on PM at `now_ns` (higher = keep longer).
pub fn keep_score(run: &DirtyRun, now_ns: u64, order: FlushOrder, decay_ns: u64) -> f64 {
    let age = now_ns.saturating_sub(run.mtime_ns) as f64;
    match order {
        FlushOrder::Lru => -age,
        FlushOrder::Frequency => f64::from(run.writes.max(1)).ln() - age / (decay_ns.max(1) as f64),
    }
}

/// The dirty data to flush now: runs with the lowest [`keep_score`] first
/// (ties: inode, then file block) until `pages` blocks are chosen — the last
/// run cut to what is still needed — returned per inode in file order.
pub fn flush_choice(
    runs: &[DirtyRun],
    pages: u64,
    now_ns: u64,
    order: FlushOrder,
    decay_ns: u64,
) -> Vec<PageRun> {
    let mut ranked: Vec<(f64, &DirtyRun)> = runs
        .iter()
        .filter(|r| r.blocks > 0)
        .map(|r| (keep_score(r, now_ns, order, decay_ns), r))
        .collect();
    ranked.sort_by(|a, b| {
        a.0.total_cmp(&b.0)
            .then(a.1.ino.cmp(&b.1.ino))
            .then(a.1.file_block.cmp(&b.1.file_block))
    });
    let mut left = pages;
    let mut out: Vec<PageRun> = Vec::new();
    for (_, r) in ranked {
        if left == 0 {
            break;
        }
        let take = r.blocks.min(left);
        left -= take;
        out.push(PageRun {
            ino: r.ino,
            file_block: r.file_block,
            blocks: take,
        });
    }
    out.sort_by_key(|r| (r.ino, r.file_block));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hits(s: &mut AdaptiveSplit, clean: u64, dirty: u64) {
        for _ in 0..clean {
            s.on_hit(PageKind::Clean);
        }
        for _ in 0..dirty {
            s.on_hit(PageKind::Dirty);
        }
    }

    #[test]
    fn list_with_more_hits_per_page_grows() {
        assert_eq!(
            AdaptiveSplit::new(&SplitParams::default(), 0).dirty_percent(),
            80
        );
        let p = SplitParams {
            initial_percent: 50,
            ..SplitParams::default()
        };
        let mut s = AdaptiveSplit::new(&p, 0);
        assert_eq!(s.dirty_percent(), 50);
        // Dirty: 30 hits on 100 pages; clean: 20 hits on 100 pages.
        hits(&mut s, 20, 30);
        assert_eq!(s.on_window_end(100, 100, 1, &p), 55);
        assert_eq!(s.hits(), (0, 0));
        // Clean has fewer hits but on far fewer pages: more per page.
        hits(&mut s, 10, 30);
        assert_eq!(s.on_window_end(10, 100, 2, &p), 50);
    }

    #[test]
    fn equal_rates_or_no_hits_leave_the_split_alone() {
        let p = SplitParams {
            initial_percent: 50,
            ..SplitParams::default()
        };
        let mut s = AdaptiveSplit::new(&p, 0);
        assert_eq!(s.on_window_end(100, 100, 1, &p), 50);
        hits(&mut s, 10, 20);
        assert_eq!(s.on_window_end(50, 100, 2, &p), 50);
    }

    #[test]
    fn split_stays_within_bounds() {
        let p = SplitParams::default();
        let mut s = AdaptiveSplit::new(&p, 0);
        for t in 0..20 {
            hits(&mut s, 0, 5);
            s.on_window_end(10, 10, t, &p);
        }
        assert_eq!(s.dirty_percent(), 90);
        for t in 0..40 {
            hits(&mut s, 5, 0);
            s.on_window_end(10, 10, t, &p);
        }
        assert_eq!(s.dirty_percent(), 10);
        assert_eq!(s.dirty_target_pages(1000), 100);
    }

    #[test]
    fn window_ends_after_window_length() {
        let p = SplitParams::default();
        let mut s = AdaptiveSplit::new(&p, 100);
        assert!(!s.window_over(109, 10));
        assert!(s.window_over(110, 10));
        s.on_window_end(0, 0, 110, &p);
        assert!(!s.window_over(119, 10));
    }

    #[test]
    fn a_flush_that_gains_runs_down_to_the_low_mark() {
        let p = NvmfsParams::default();
        let mut f = FlushRun::default();
        // Target 100 pages: high 80, low 50.
        assert_eq!(f.next_pass(79, 100, &p), 0);
        assert_eq!(f.next_pass(85, 100, &p), 35);
        assert!(f.running());
        // The pass flushed some of it (writes added a few): continue.
        assert_eq!(f.next_pass(70, 100, &p), 20);
        assert_eq!(f.next_pass(55, 100, &p), 5);
        assert_eq!(f.next_pass(50, 100, &p), 0);
        assert!(!f.running());
        // Below the high mark nothing starts again.
        assert_eq!(f.next_pass(75, 100, &p), 0);
    }

    #[test]
    fn a_flush_that_writes_re_dirty_as_fast_as_it_flushes_stops_until_the_high_mark() {
        let p = NvmfsParams::default();
        let mut f = FlushRun::default();
        assert_eq!(f.next_pass(81, 100, &p), 31);
        // Writes re-dirtied everything flushed (the working set is 75 pages,
        // above the low mark): the list did not shrink, so the flush stops.
        assert_eq!(f.next_pass(75, 100, &p), 25);
        assert_eq!(f.next_pass(75, 100, &p), 0);
        assert!(!f.running());
        assert_eq!(f.next_pass(76, 100, &p), 0);
        assert_eq!(f.next_pass(74, 100, &p), 0);
        // The high mark starts a new flush.
        assert_eq!(f.next_pass(80, 100, &p), 30);
    }

    #[test]
    fn flush_starts_at_high_mark_and_runs_to_low_mark() {
        let p = NvmfsParams::default();
        // Target 100 pages: high 80, low 50.
        assert_eq!(flush_pages(79, 100, false, &p), 0);
        assert_eq!(flush_pages(80, 100, false, &p), 30);
        assert_eq!(flush_pages(60, 100, true, &p), 10);
        assert_eq!(flush_pages(50, 100, true, &p), 0);
        assert_eq!(flush_pages(0, 0, false, &p), 0);
    }

    fn run(ino: u64, file_block: u64, blocks: u64, mtime_s: u64, writes: u8) -> DirtyRun {
        DirtyRun {
            ino,
            file_block,
            blocks,
            mtime_ns: mtime_s * 1_000_000_000,
            writes,
        }
    }

    const DECAY: u64 = 30_000_000_000;
    const NOW: u64 = 100_000_000_000;

    #[test]
    fn lru_order_flushes_the_least_recently_written_first() {
        let runs = [
            run(1, 0, 1, 90, 1),
            run(1, 5, 1, 50, 9),
            run(2, 3, 1, 70, 1),
        ];
        let got = flush_choice(&runs, 2, NOW, FlushOrder::Lru, DECAY);
        let want = vec![
            PageRun {
                ino: 1,
                file_block: 5,
                blocks: 1,
            },
            PageRun {
                ino: 2,
                file_block: 3,
                blocks: 1,
            },
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn frequency_order_keeps_an_often_rewritten_block_over_a_more_recent_one_written_once() {
        // Block 5 was written 9 times, 10 s before block 0's single write.
        let runs = [run(1, 0, 1, 90, 1), run(1, 5, 1, 80, 9)];
        let got = flush_choice(&runs, 1, NOW, FlushOrder::Frequency, DECAY);
        assert_eq!(
            got,
            vec![PageRun {
                ino: 1,
                file_block: 0,
                blocks: 1
            }]
        );
        let lru = flush_choice(&runs, 1, NOW, FlushOrder::Lru, DECAY);
        assert_eq!(
            lru,
            vec![PageRun {
                ino: 1,
                file_block: 5,
                blocks: 1
            }]
        );
    }

    #[test]
    fn frequency_counts_decay_with_age() {
        // 255 writes, the last one 200 s (6.7 decays) ago, against one write
        // just now.
        let later = 300_000_000_000;
        let old_hot = run(1, 0, 1, 100, 255);
        let new_once = run(2, 0, 1, 300, 1);
        let s = |r: &DirtyRun| keep_score(r, later, FlushOrder::Frequency, DECAY);
        assert!(s(&old_hot) < s(&new_once));
        let got = flush_choice(&[new_once, old_hot], 1, later, FlushOrder::Frequency, DECAY);
        assert_eq!(got[0].ino, 1);
    }

    #[test]
    fn flush_choice_takes_exactly_the_pages_asked_cutting_the_last_run() {
        let runs = [
            run(1, 0, 8, 10, 1),
            run(2, 100, 8, 20, 1),
            run(3, 0, 8, 30, 1),
        ];
        let got = flush_choice(&runs, 11, NOW, FlushOrder::Lru, DECAY);
        assert_eq!(
            got,
            vec![
                PageRun {
                    ino: 1,
                    file_block: 0,
                    blocks: 8
                },
                PageRun {
                    ino: 2,
                    file_block: 100,
                    blocks: 3
                },
            ]
        );
        assert!(flush_choice(&runs, 0, NOW, FlushOrder::Frequency, DECAY).is_empty());
        let all: u64 = flush_choice(&runs, 1000, NOW, FlushOrder::Frequency, DECAY)
            .iter()
            .map(|r| r.blocks)
            .sum();
        assert_eq!(all, 24);
    }

    #[test]
    fn flush_order_names_round_trip() {
        for n in FlushOrder::NAMES {
            assert_eq!(FlushOrder::parse(n).map(FlushOrder::name), Some(*n));
        }
        assert_eq!(FlushOrder::parse("mru"), None);
    }

    #[test]
    fn the_default_extent_is_512_kib_of_pages() {
        assert_eq!(NvmfsParams::default().extent_blocks(), 128);
    }
}
