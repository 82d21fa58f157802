//! A block tier's space (SSD, HDD, object tiers): NVMFS extents, written
//! non-overwrite. [`crate::tier::BlockTier`] holds one per mounted tier.
//!
//! A tier is cut into extents of `extent_blocks` blocks (512 KiB by default);
//! extent 0 holds the tier header and is never allocated. New data is appended
//! to the *open* extent, block after block, so consecutive writes become
//! sequential requests; when it is full another extent is opened. A block is
//! never written again while its extent holds live data *below* it:
//! overwriting file data writes fresh blocks elsewhere and only decrements
//! the old extent's valid count. An extent returns to the free set when its
//! valid count reaches zero; extents that stay partly valid are what the
//! cleaner (extent recycling) compacts.
//!
//! # The given mark (SSD and HDD tiers)
//!
//! Each extent has a *given mark*: the blocks from its start that were
//! handed out since it was last free. Blocks past the mark were never given
//! (or were given back), so no committed entry references them. Invariants,
//! under the space lock:
//!
//! - a free extent's mark is 0; the open extent's mark is where the next
//!   allocation starts in it;
//! - a run released that ends exactly at its extent's mark lowers the mark
//!   to the run's start (an allocation dropped before its commit, a failed
//!   write-back, a log blob split across extents: its blocks are given
//!   again, not left dead until the extent is recycled);
//! - an extent neither free nor open whose mark is short of its end is a
//!   *tail extent*; its blocks past the mark count as free, and
//!   allocations take tail extents once no extent is free (a tail may be
//!   a few blocks: taken first, it would cut sequential writes up);
//! - at mount each partly valid extent's mark is the end of its last live
//!   run, so the unwritten rest of the extent that was open, and any tail
//!   released before, are given again;
//! - extent recycling seals its victims (mark to the end,
//!   [`ExtentSpace::seal`]) before it moves their blocks, so its copies
//!   never land in an extent it is emptying.
//!
//! Object tiers keep the plain rule (every extent's mark is its end once it
//! was opened: a released block stays dead until its part empties), since
//! their parts are uploaded whole.
//!
//! Like the PM allocator, this state is not stored: at mount the valid counts
//! and marks are rebuilt from the live write entries that point at the tier
//! (the reverse map "which inode owns this block" is the same derivation,
//! kept by `fsck`). Because a block is only reused once no committed entry
//! references it, and data is synced before the entry that references it
//! commits, a crash can never expose stale or unsynced data.
//!
//! A tier being removed from the mounted pool is *retiring*
//! ([`ExtentSpace::set_retiring`], `tier_detach.rs`): from the moment the
//! flag is set, under the same lock every allocation takes, no allocation
//! succeeds and the tier reports no free blocks, so every path that places
//! data (writes, write-back, migration, log migration, cleaning) goes
//! elsewhere. Blocks allocated before it stay counted as valid until their
//! commit or release, which is how a removal sees them.

use crate::alloc::Run;
use crate::lock_order::{Mutex, Rank};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use terrace_format::PhysBlock;

/// Space bookkeeping of one block tier.
#[derive(Debug)]
pub struct ExtentSpace {
    extent_blocks: u64,
    extents: u64,
    /// Extents' worth of free blocks held back for extent recycling
    /// ([`ExtentSpace::alloc`] leaves them, [`ExtentSpace::alloc_recycling`]
    /// may take them; free extents or the rest of the open one): a tier
    /// whose free space is all dead blocks of partly valid extents can
    /// always move one extent's valid blocks out, which frees that extent.
    reserve: u64,
    inner: Mutex<SpaceInner>,
    /// The tier is being removed: nothing may be allocated on it. Changed
    /// only under `inner`'s lock, which `alloc` holds while it checks it.
    retiring: AtomicBool,
    /// Blocks released at an extent's given mark are given again (SSD and
    /// HDD tiers; not object tiers, [`ExtentSpace::keep_released_blocks_dead`]).
    reuse_released_tail: bool,
}

#[derive(Debug)]
struct SpaceInner {
    free: BTreeSet<u64>,
    valid: Vec<u32>,
    /// Per extent, its given mark (module docs): blocks from its start
    /// handed out since it was last free.
    given: Vec<u32>,
    /// The open extent: allocations continue at its given mark.
    open: Option<u64>,
    /// Tail extents (module docs): neither free nor open, given mark short
    /// of the end. Allocations take them, lowest first, once no extent is
    /// free.
    tails: BTreeSet<u64>,
    /// Extents recycling is emptying ([`ExtentSpace::seal`]): their marks
    /// stay at their ends until they empty or are unsealed.
    sealed: BTreeSet<u64>,
    /// Blocks free extents, the open extent and tail extents hold past
    /// their marks.
    free_blocks: u64,
    /// Per extent, when it was last allocated from or released into
    /// (a logical clock: the cleaner only needs the order).
    last_use: Vec<u64>,
    clock: u64,
    /// Extents returned to the free set since mount.
    freed: u64,
    /// Per extent: free and discarded since it was last allocated from
    /// (`discard_free`), so a second `fstrim` skips it. Not stored: after a
    /// mount every free extent counts as not discarded.
    discarded: Vec<bool>,
}

impl SpaceInner {
    /// Extent `e` gives up its blocks past its given mark: the mark goes to
    /// the extent's end (`eb` blocks) and those blocks stop counting as free.
    fn give_up_rest(&mut self, e: u64, eb: u64) {
        let i = e as usize;
        self.free_blocks -= eb - u64::from(self.given[i]);
        self.given[i] = eb as u32;
    }
}

/// The pieces of the run of `n` blocks from `start` that fall in each
/// extent of `eb` blocks: `(extent, first block, blocks)`, in order.
fn extent_pieces(start: u64, n: u64, eb: u64) -> impl Iterator<Item = (u64, u64, u64)> {
    let end = start + n;
    let mut b = start;
    std::iter::from_fn(move || {
        (b < end).then(|| {
            let e = b / eb;
            let in_e = ((e + 1) * eb).min(end) - b;
            let piece = (e, b, in_e);
            b += in_e;
            piece
        })
    })
}

/// Numbers `terrace status` shows for a tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SpaceStats {
    /// Extents in the tier (extent 0 excluded).
    pub extents: u64,
    /// Extents with no valid block.
    pub free_extents: u64,
    /// Blocks holding live data.
    pub valid_blocks: u64,
    /// Blocks that can still be allocated (free extents, the rest of the
    /// open one, the ends of tail extents).
    pub free_blocks: u64,
    /// Ideal extent use / actual extent use, in percent (100 = no fragmentation).
    pub fragmentation_pct: u64,
    /// Blocks neither valid nor free: released inside extents that still
    /// hold valid blocks after them (or sealed for recycling). Extent
    /// recycling gets them back.
    #[serde(default)]
    pub dead_blocks: u64,
}

impl ExtentSpace {
    /// A tier of `blocks` blocks in extents of `extent_blocks`, with the runs in
    /// `used` (from live write entries) valid. Fails when a run leaves the tier
    /// or overlaps another.
    pub fn new(blocks: u64, extent_blocks: u64, mut used: Vec<Run>) -> Result<ExtentSpace, String> {
        let extent_blocks = extent_blocks.max(1);
        let extents = blocks / extent_blocks;
        let mut valid = vec![0u32; extents as usize];
        used.sort_unstable();
        let mut given = vec![0u32; extents as usize];
        let mut prev_end = extent_blocks;
        for &(s, n) in &used {
            let s = s.get();
            if s < prev_end {
                return Err(format!(
                    "block {s} is owned twice or lies in the tier header"
                ));
            }
            if s + n > extents * extent_blocks {
                return Err(format!("blocks {s}+{n} lie beyond the end of the tier"));
            }
            prev_end = s + n;
            for (e, b, in_e) in extent_pieces(s, n, extent_blocks) {
                valid[e as usize] += in_e as u32;
                given[e as usize] = (b + in_e - e * extent_blocks) as u32;
            }
        }
        let free: BTreeSet<u64> = (1..extents).filter(|&e| valid[e as usize] == 0).collect();
        let tails: BTreeSet<u64> = (1..extents)
            .filter(|&e| valid[e as usize] > 0 && u64::from(given[e as usize]) < extent_blocks)
            .collect();
        let free_blocks = free.len() as u64 * extent_blocks
            + tails
                .iter()
                .map(|&e| extent_blocks - u64::from(given[e as usize]))
                .sum::<u64>();
        Ok(ExtentSpace {
            extent_blocks,
            extents,
            reserve: RECYCLING_RESERVE_EXTENTS.min(extents / 8),
            inner: Mutex::new(
                Rank::leaf("tier space"),
                SpaceInner {
                    free,
                    valid,
                    given,
                    open: None,
                    tails,
                    sealed: BTreeSet::new(),
                    free_blocks,
                    last_use: vec![0; extents as usize],
                    clock: 0,
                    freed: 0,
                    discarded: vec![false; extents as usize],
                },
            ),
            retiring: AtomicBool::new(false),
            reuse_released_tail: true,
        })
    }

    /// Marks the tier retiring (no allocation succeeds from now on, and it
    /// reports no free blocks) or, `false`, takes the mark back. Set under
    /// the lock [`ExtentSpace::alloc`] holds: an allocation either finished
    /// before (its blocks are counted valid) or fails.
    pub fn set_retiring(&self, on: bool) {
        let _g = self.inner.lock();
        self.retiring.store(on, Ordering::SeqCst);
    }

    /// Whether the tier is retiring ([`ExtentSpace::set_retiring`]).
    pub fn is_retiring(&self) -> bool {
        self.retiring.load(Ordering::SeqCst)
    }

    /// The plain rule of object tiers: a released block stays dead until
    /// its extent empties, and what a partly valid extent did not give
    /// before the mount is not given after it. Called before any
    /// allocation.
    pub fn keep_released_blocks_dead(&mut self) {
        self.reuse_released_tail = false;
        let eb = self.extent_blocks;
        let g = self.inner.get_mut();
        for e in std::mem::take(&mut g.tails) {
            g.give_up_rest(e, eb);
        }
    }

    /// Seals `extents` (extent recycling's victims): their given marks go to
    /// their ends and stay there, so nothing more is allocated in them
    /// until they empty and return to the free set, or are unsealed
    /// ([`ExtentSpace::unseal`]). An open one is closed. Their blocks past
    /// the mark stop counting as free until then.
    pub fn seal(&self, extents: &[u64]) {
        let mut g = self.inner.lock();
        let eb = self.extent_blocks;
        for &e in extents.iter().filter(|&&e| e > 0 && e < self.extents) {
            let i = e as usize;
            // An empty extent (free, or the open one rewound) has nothing
            // to move out; sealed, it would never empty to be freed.
            if g.valid[i] == 0 {
                continue;
            }
            g.tails.remove(&e);
            g.sealed.insert(e);
            g.give_up_rest(e, eb);
            if g.open == Some(e) {
                g.open = None;
            }
        }
    }

    /// Ends [`ExtentSpace::seal`] for the extents of `extents` that did not
    /// empty: runs released at their marks from now on are given again.
    /// Their marks stay where they are.
    pub fn unseal(&self, extents: &[u64]) {
        let mut g = self.inner.lock();
        for e in extents {
            g.sealed.remove(e);
        }
    }

    /// Allocates `n` blocks, appending to the open extent (all or nothing),
    /// leaving the recycling reserve. Nothing on a retiring tier.
    pub fn alloc(&self, n: u64) -> Option<Vec<Run>> {
        self.alloc_above(n, self.reserve)
    }

    /// [`ExtentSpace::alloc`] for extent recycling, which may take the
    /// reserve: what it moves out of an extent frees that extent.
    pub fn alloc_recycling(&self, n: u64) -> Option<Vec<Run>> {
        self.alloc_above(n, 0)
    }

    /// [`ExtentSpace::alloc`] for a rescue of PM room for removals
    /// (`migrate/rescue.rs`), which may take up to half of the recycling
    /// reserve (none of a reserve of one extent).
    pub fn alloc_rescue(&self, n: u64) -> Option<Vec<Run>> {
        self.alloc_above(n, self.reserve.div_ceil(2))
    }

    /// Blocks an allocation leaving `keep` extents' worth of free blocks
    /// may take. Counted in blocks wherever they are, not in free extents:
    /// once recycling opened a reserve extent, the rest of it is still the
    /// reserve (counting free extents only gave it to data, and writers
    /// racing recycling on a full tier used the reserve up: xfstests
    /// generic/269).
    fn usable(&self, g: &SpaceInner, keep: u64) -> u64 {
        g.free_blocks.saturating_sub(keep * self.extent_blocks)
    }

    fn alloc_above(&self, n: u64, keep: u64) -> Option<Vec<Run>> {
        let mut g = self.inner.lock();
        if self.usable(&g, keep) < n || self.retiring.load(Ordering::SeqCst) {
            return None;
        }
        let mut runs: Vec<Run> = Vec::new();
        let mut need = n;
        while need > 0 {
            let e = match g.open {
                Some(e) if u64::from(g.given[e as usize]) < self.extent_blocks => e,
                _ => {
                    // Whole free extents first: a tail may be a few blocks,
                    // which would cut this and later writes into small
                    // requests.
                    let e = match g.free.pop_first() {
                        Some(e) => e,
                        None => g
                            .tails
                            .pop_first()
                            .expect("free count says an extent has room"),
                    };
                    g.open = Some(e);
                    g.discarded[e as usize] = false;
                    e
                }
            };
            let off = u64::from(g.given[e as usize]);
            let take = (self.extent_blocks - off).min(need);
            let start = PhysBlock(e * self.extent_blocks + off);
            match runs.last_mut() {
                Some(last) if last.0 + last.1 == start => last.1 += take,
                _ => runs.push((start, take)),
            }
            g.valid[e as usize] += take as u32;
            g.clock += 1;
            let now = g.clock;
            g.last_use[e as usize] = now;
            g.given[e as usize] = (off + take) as u32;
            g.free_blocks -= take;
            need -= take;
        }
        Some(runs)
    }

    /// Marks a run no longer referenced; whole extents that become empty are freed.
    pub fn release(&self, s: PhysBlock, n: u64) {
        let mut g = self.inner.lock();
        for (e, b, in_e) in extent_pieces(s.get(), n, self.extent_blocks) {
            let i = e as usize;
            g.clock += 1;
            let now = g.clock;
            g.last_use[i] = now;
            let v = &mut g.valid[i];
            debug_assert!(
                *v as u64 >= in_e,
                "releasing more blocks than extent {e} holds"
            );
            *v = v.saturating_sub(in_e as u32);
            let still_valid = *v > 0;
            let at_mark = b + in_e == e * self.extent_blocks + u64::from(g.given[i]);
            if !still_valid {
                // Every block up to the mark is free again (past it they
                // were counted already).
                g.free_blocks += u64::from(g.given[i]);
                g.given[i] = 0;
                g.sealed.remove(&e);
                if g.open != Some(e) {
                    // The open extent is rewound rather than freed.
                    g.tails.remove(&e);
                    g.free.insert(e);
                    g.freed += 1;
                }
            } else if at_mark && self.reuse_released_tail && !g.sealed.contains(&e) {
                // The last blocks the extent gave (an allocation dropped
                // before its commit, say): given again, not left dead
                // until the extent is recycled.
                g.given[i] -= in_e as u32;
                g.free_blocks += in_e;
                if g.open != Some(e) {
                    g.tails.insert(e);
                }
            }
        }
    }

    /// A count that moves with every allocation from and release into the
    /// tier (cheap): unchanged means nothing was taken or given back.
    pub fn changes(&self) -> u64 {
        self.inner.lock().clock
    }

    /// Blocks that can still be allocated for data, the recycling reserve
    /// left out (cheap: no walk over the extents); none while the tier is
    /// retiring.
    pub fn free_blocks(&self) -> u64 {
        let g = self.inner.lock();
        if self.retiring.load(Ordering::SeqCst) {
            return 0;
        }
        self.usable(&g, self.reserve)
    }

    /// Free extents held back for extent recycling.
    pub fn recycling_reserve_extents(&self) -> u64 {
        self.reserve
    }

    /// Blocks the tier can hold (extent 0, the tier's own header, excluded).
    pub fn capacity_blocks(&self) -> u64 {
        self.extents.saturating_sub(1) * self.extent_blocks
    }

    /// Current numbers.
    pub fn stats(&self) -> SpaceStats {
        let g = self.inner.lock();
        let valid_blocks: u64 = g.valid.iter().map(|&v| v as u64).sum();
        let used_extents = g.valid.iter().skip(1).filter(|&&v| v > 0).count() as u64;
        let ideal = valid_blocks.div_ceil(self.extent_blocks);
        SpaceStats {
            extents: self.extents.saturating_sub(1),
            free_extents: g.free.len() as u64,
            valid_blocks,
            free_blocks: g.free_blocks,
            fragmentation_pct: (ideal * 100).checked_div(used_extents).unwrap_or(100),
            dead_blocks: (self.capacity_blocks())
                .saturating_sub(valid_blocks)
                .saturating_sub(g.free_blocks),
        }
    }

    /// Blocks per extent.
    pub fn extent_blocks(&self) -> u64 {
        self.extent_blocks
    }

    /// Where in its extent the next allocation starts (0: at an extent's
    /// first block, as when the open extent is full or none is open).
    pub fn open_offset(&self) -> u64 {
        let g = self.inner.lock();
        match g.open {
            Some(e) if u64::from(g.given[e as usize]) < self.extent_blocks => {
                u64::from(g.given[e as usize])
            }
            _ if !g.free.is_empty() => 0,
            _ => g
                .tails
                .first()
                .map_or(0, |&e| u64::from(g.given[e as usize])),
        }
    }

    /// What the cleaner needs: every extent holding valid blocks except the
    /// open one, the number of free extents, and the number of extents. An
    /// extent's size is its given mark: a tail extent's blocks past it are
    /// free already, not dead.
    pub fn cleaning_view(&self) -> (Vec<terrace_policy::cleaner::ExtentInfo>, u64, u64) {
        let g = self.inner.lock();
        let infos = (1..self.extents)
            .filter(|&e| g.valid[e as usize] > 0 && Some(e) != g.open)
            .map(|e| terrace_policy::cleaner::ExtentInfo {
                id: e,
                valid_blocks: g.valid[e as usize] as u64,
                total_blocks: u64::from(g.given[e as usize]),
                last_use_ns: g.last_use[e as usize],
            })
            .collect();
        (infos, g.free.len() as u64, self.extents.saturating_sub(1))
    }

    /// Extents returned to the free set since mount.
    pub fn extents_freed(&self) -> u64 {
        self.inner.lock().freed
    }

    /// Discards the free extents among `extents` (extent numbers) that
    /// were not discarded since they were last freed, where they lie in a
    /// run of consecutive free extents of at least `min_blocks` blocks
    /// (`fstrim --minimum`). `discard(first block, blocks)` gets at most
    /// [`DISCARD_EXTENTS`] extents at a time and is called *under the
    /// space lock*: no allocation can take an extent while its blocks are
    /// being discarded, so the discard can never drop data written after
    /// it. The lock is let go between calls, so allocations wait for one
    /// call at most. Every free extent is safe to discard: a block tier's
    /// blocks return to the free set only once the commit that freed them
    /// is durable ([`BlockTier::free`]).
    ///
    /// Returns the blocks discarded, and the error that stopped it early
    /// (extents discarded before it stay counted and marked).
    pub fn discard_free(
        &self,
        extents: std::ops::Range<u64>,
        min_blocks: u64,
        discard: &mut dyn FnMut(u64, u64) -> std::io::Result<()>,
    ) -> (u64, Option<std::io::Error>) {
        let (done, err, _) = self.discard_free_until(extents, min_blocks, &|| false, discard);
        (done, err)
    }

    /// [`ExtentSpace::discard_free`] that stops early, between two device
    /// calls, once `stop` says so (a background pass's time slice). The
    /// third value says whether it stopped with free extents left to look
    /// at; a later call finds them again (the discarded marks skip what
    /// this one did).
    pub fn discard_free_until(
        &self,
        extents: std::ops::Range<u64>,
        min_blocks: u64,
        stop: &dyn Fn() -> bool,
        discard: &mut dyn FnMut(u64, u64) -> std::io::Result<()>,
    ) -> (u64, Option<std::io::Error>, bool) {
        let end = extents.end.min(self.extents);
        let mut cursor = extents.start.max(1);
        let mut done = 0;
        while cursor < end {
            if done > 0 && stop() {
                return (done, None, true);
            }
            let mut g = self.inner.lock();
            if self.retiring.load(Ordering::SeqCst) {
                break;
            }
            // The next free extent at or after the cursor, and its run of
            // consecutive free extents (the whole run counts for the
            // minimum, also where it reaches outside `extents`).
            let Some(&first) = g.free.range(cursor..end).next() else {
                break;
            };
            let mut run_start = first;
            while run_start > 1 && g.free.contains(&(run_start - 1)) {
                run_start -= 1;
            }
            let mut run_end = first + 1;
            while g.free.contains(&run_end) {
                run_end += 1;
            }
            if (run_end - run_start) * self.extent_blocks < min_blocks {
                cursor = run_end;
                continue;
            }
            // The first extents of the run from `first` not discarded yet.
            let stop = run_end.min(end);
            let Some(a) = (first..stop).find(|&e| !g.discarded[e as usize]) else {
                cursor = stop;
                continue;
            };
            let b = (a..stop)
                .take(DISCARD_EXTENTS as usize)
                .take_while(|&e| !g.discarded[e as usize])
                .last()
                .map_or(a + 1, |e| e + 1);
            if let Err(e) = discard(a * self.extent_blocks, (b - a) * self.extent_blocks) {
                return (done, Some(e), false);
            }
            for e in a..b {
                g.discarded[e as usize] = true;
            }
            done += (b - a) * self.extent_blocks;
            cursor = b;
            drop(g);
        }
        (done, None, false)
    }

    /// Checks the space against `used`, every run live entries reference on
    /// the tier: each extent's valid count is the blocks referenced in it,
    /// and no referenced block lies in a free extent or past its extent's
    /// given mark (where it would be allocated again).
    pub fn check_referenced(&self, used: &[Run]) -> Result<(), String> {
        let g = self.inner.lock();
        let eb = self.extent_blocks;
        let mut counted = vec![0u64; self.extents as usize];
        for &(s, n) in used {
            let (s, end) = (s.get(), s.get() + n);
            if s < eb || end > self.extents * eb {
                return Err(format!("referenced blocks {s}+{n} lie outside the extents"));
            }
            for (e, b, in_e) in extent_pieces(s, n, eb) {
                let upto = b + in_e;
                counted[e as usize] += in_e;
                if g.free.contains(&e) {
                    return Err(format!("referenced block {b} lies in free extent {e}"));
                }
                let mark = e * eb + u64::from(g.given[e as usize]);
                if upto > mark {
                    return Err(format!(
                        "referenced block {} lies past extent {e}'s given mark {mark}",
                        upto - 1
                    ));
                }
            }
        }
        for (e, &n) in counted.iter().enumerate() {
            if u64::from(g.valid[e]) != n {
                return Err(format!(
                    "extent {e}: {} valid blocks counted, {n} referenced",
                    g.valid[e]
                ));
            }
        }
        Ok(())
    }

    /// Number of extents, the header's extent 0 included.
    pub fn extent_count(&self) -> u64 {
        self.extents
    }
}

/// Free extents a block tier keeps for extent recycling (at most an eighth
/// of its extents): 1 MiB with 512 KiB extents.
pub const RECYCLING_RESERVE_EXTENTS: u64 = 2;

/// Extents one [`ExtentSpace::discard_free`] call hands to the device at
/// most (4 MiB with 512 KiB extents): what an allocation may wait for.
pub const DISCARD_EXTENTS: u64 = 8;

#[cfg(test)]
#[path = "extent_space_tests.rs"]
mod tests;
