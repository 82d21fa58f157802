//! Block tiers (SSD, HDD): space managed as NVMFS extents, written non-overwrite.
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
use std::sync::Arc;
use terrace_format::{PhysBlock, TierId};
use terrace_media::{BlockMedia, Closable, PerWriterSync};

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
            let mut b = s;
            while b < s + n {
                let e = b / extent_blocks;
                let in_e = ((e + 1) * extent_blocks).min(s + n) - b;
                valid[e as usize] += in_e as u32;
                given[e as usize] = (b + in_e - e * extent_blocks) as u32;
                b += in_e;
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
            g.free_blocks -= eb - u64::from(g.given[e as usize]);
            g.given[e as usize] = eb as u32;
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
            g.free_blocks -= eb - u64::from(g.given[i]);
            g.given[i] = eb as u32;
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
        let s = s.get();
        let mut b = s;
        while b < s + n {
            let e = b / self.extent_blocks;
            let in_e = ((e + 1) * self.extent_blocks).min(s + n) - b;
            g.clock += 1;
            let now = g.clock;
            g.last_use[e as usize] = now;
            let v = &mut g.valid[e as usize];
            debug_assert!(
                *v as u64 >= in_e,
                "releasing more blocks than extent {e} holds"
            );
            *v = v.saturating_sub(in_e as u32);
            let still_valid = *v > 0;
            let i = e as usize;
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
            b += in_e;
        }
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
        let end = extents.end.min(self.extents);
        let mut cursor = extents.start.max(1);
        let mut done = 0;
        while cursor < end {
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
                return (done, Some(e));
            }
            for e in a..b {
                g.discarded[e as usize] = true;
            }
            done += (b - a) * self.extent_blocks;
            cursor = b;
            drop(g);
        }
        (done, None)
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
            let mut b = s;
            while b < end {
                let e = b / eb;
                let upto = ((e + 1) * eb).min(end);
                counted[e as usize] += upto - b;
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
                b = upto;
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

/// The media of a mounted tier: the device, its failed syncs reported to
/// every writer they may have hurt ([`PerWriterSync`]), closable when the
/// tier is removed ([`Closable`]).
type TierMedia = Closable<PerWriterSync<Arc<dyn BlockMedia>>>;

/// A mounted block tier.
pub struct BlockTier {
    /// Tier id (as in write entries).
    pub id: TierId,
    /// `ssd`, `hdd` or `s3`.
    pub kind: terrace_format::TierKind,
    /// The device.
    pub media: Arc<dyn BlockMedia>,
    /// The same media, to close it ([`BlockTier::close_media`]).
    closable: Arc<TierMedia>,
    /// Its space.
    pub space: ExtentSpace,
    /// Checksums of the data blocks on it (`sums.rs`).
    pub sums: crate::sums::BlockSums,
    /// Whether its device said it is full (`device_full.rs`).
    pub full: crate::device_full::DeviceFull,
}

/// Every run of a block tier the pool holds, given the runs its committed
/// state maps (data, clean copies, log blobs): those plus the tier header in
/// block 0. What an object tier keeps at mount and fsck
/// ([`BlockMedia::retain_only`], [`BlockMedia::unreferenced`]).
/// The runs are given to the media as plain `(first block, blocks)`.
pub fn held_runs(used: &[Run]) -> Vec<(u64, u64)> {
    let mut keep = Vec::with_capacity(used.len() + 1);
    keep.push((0, 1));
    keep.extend(used.iter().map(|&(b, n)| (b.get(), n)));
    keep
}

impl BlockTier {
    /// A mounted tier on `dev`, with its space and checksums.
    pub fn new(
        id: TierId,
        kind: terrace_format::TierKind,
        dev: Arc<dyn BlockMedia>,
        mut space: ExtentSpace,
        sums: crate::sums::BlockSums,
    ) -> BlockTier {
        // Object tiers keep the plain rule (a released block stays dead
        // until its part empties): their parts are uploaded whole and
        // their cleaning plans by part.
        if kind == terrace_format::TierKind::S3 {
            space.keep_released_blocks_dead();
        }
        // A failed sync must reach every thread whose unsynced writes it
        // may have lost (Linux tells one fsync only).
        let closable = Arc::new(Closable::new(PerWriterSync::new(dev)));
        BlockTier {
            id,
            kind,
            media: closable.clone(),
            closable,
            space,
            sums,
            full: Default::default(),
        }
    }

    /// Free blocks new data may count on: none while its device is full
    /// (`device_full.rs`).
    pub fn room_blocks(&self) -> u64 {
        if self.full.is_full() {
            0
        } else {
            self.space.free_blocks()
        }
    }

    /// Whether allocations on the tier wait now because its device is full
    /// (one try per back-off wait gets through; `device_full.rs`).
    pub fn refuses_allocation(&self) -> bool {
        self.full
            .refuses(std::time::Instant::now(), || self.media.host_free_bytes())
    }

    /// Whether data meant for a tier above it whose device is full may go
    /// here instead (migration's drains, log migration): its own device is
    /// not full, it is not an object tier, and it is not being removed.
    pub fn stands_in_for_a_full_tier(&self) -> bool {
        !self.full.is_full()
            && self.kind != terrace_format::TierKind::S3
            && !self.space.is_retiring()
    }

    /// `n` blocks for data ([`ExtentSpace::alloc`]), unless its device is
    /// full ([`BlockTier::refuses_allocation`]).
    pub fn alloc_data(&self, n: u64) -> Option<Vec<Run>> {
        if self.refuses_allocation() {
            return None;
        }
        self.space.alloc(n)
    }

    /// Closes the tier's media once the requests in flight are done (the
    /// tier was removed from the pool): its file or connections go, and
    /// later requests fail. The tier itself stays valid memory.
    pub(crate) fn close_media(&self) {
        self.closable.close();
    }

    /// Frees blocks: trims them on the media (an object tier deletes parts
    /// left without a live block), then gives them back to the space. Call
    /// only once the commit that freed them is durable (or for blocks no
    /// commit ever referenced). The trim comes first: once released, the
    /// blocks may be allocated and written again, and a later trim would
    /// drop that new data. A failed trim only leaves space taken (until the
    /// next mount's `retain_only`), so it is ignored.
    pub fn free(&self, block: PhysBlock, blocks: u64) {
        let _ = self.media.trim(block.get(), blocks);
        self.space.release(block, blocks);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_appends_sequentially_across_extents() {
        let s = ExtentSpace::new(128 * 10, 128, vec![]).unwrap();
        assert_eq!(s.alloc(100).unwrap(), vec![(PhysBlock(128), 100)]);
        assert_eq!(s.alloc(100).unwrap(), vec![(PhysBlock(228), 100)]);
        assert_eq!(s.stats().free_extents, 7);
    }

    #[test]
    fn overwritten_blocks_are_not_reused_until_their_extent_empties() {
        let s = ExtentSpace::new(128 * 4, 128, vec![]).unwrap();
        let a = s.alloc(128).unwrap();
        let b = s.alloc(10).unwrap();
        s.release(a[0].0, 5);
        assert_eq!(s.stats().dead_blocks, 5);
        assert_eq!(
            s.alloc(1).unwrap(),
            vec![(b[0].0 + 10, 1)],
            "freed blocks of a partly valid extent must not be reused"
        );
        s.release(a[0].0 + 5, 123);
        assert_eq!(
            s.stats().free_extents,
            2,
            "the emptied extent is free again"
        );
        let st = s.stats();
        assert_eq!(st.valid_blocks, 11);
        assert_eq!(st.fragmentation_pct, 100);
        assert_eq!(st.dead_blocks, 0);
    }

    #[test]
    fn rebuilt_space_rejects_overlaps_and_counts_valid_blocks() {
        assert!(ExtentSpace::new(
            128 * 4,
            128,
            vec![(PhysBlock(130), 10), (PhysBlock(135), 2)]
        )
        .is_err());
        assert!(ExtentSpace::new(128 * 4, 128, vec![(PhysBlock(0), 1)]).is_err());
        let s = ExtentSpace::new(
            128 * 4,
            128,
            vec![(PhysBlock(130), 10), (PhysBlock(300), 2)],
        )
        .unwrap();
        let st = s.stats();
        assert_eq!(
            (st.free_extents, st.valid_blocks, st.fragmentation_pct),
            (1, 12, 50)
        );
    }

    #[test]
    fn a_retiring_tier_allocates_nothing_and_shows_no_room_until_taken_back() {
        let s = ExtentSpace::new(128 * 4, 128, vec![]).unwrap();
        let held = s.alloc(10).unwrap();
        s.set_retiring(true);
        assert!(s.alloc(1).is_none());
        assert_eq!(s.free_blocks(), 0);
        assert_eq!(
            s.stats().valid_blocks,
            10,
            "blocks taken before still count"
        );
        s.release(held[0].0, 10);
        assert_eq!(s.stats().valid_blocks, 0);
        s.set_retiring(false);
        assert_eq!(s.free_blocks(), 3 * 128);
        assert!(s.alloc(1).is_some());
    }

    #[test]
    fn blocks_released_at_the_end_of_the_open_extent_are_given_again() {
        let s = ExtentSpace::new(128 * 4, 128, vec![]).unwrap();
        let kept = s.alloc(10).unwrap();
        let dropped = s.alloc(6).unwrap();
        assert_eq!(dropped, vec![(PhysBlock(138), 6)]);
        let free = s.free_blocks();
        s.release(dropped[0].0, 6);
        assert_eq!(s.free_blocks(), free + 6, "taken back");
        assert_eq!(s.alloc(2).unwrap(), vec![(PhysBlock(138), 2)]);
        // Blocks before the end stay dead until their extent empties.
        s.release(PhysBlock(130), 2);
        assert_eq!(s.free_blocks(), free + 4);
        assert_eq!(s.stats().valid_blocks, 10);
        s.release(kept[0].0, 2);
        s.release(PhysBlock(132), 6);
        s.release(PhysBlock(138), 2);
        assert_eq!(s.stats().valid_blocks, 0);
        assert_eq!(s.free_blocks(), 3 * 128, "the emptied open extent rewinds");
    }

    #[test]
    fn an_allocation_across_two_extents_given_back_leaves_no_dead_blocks() {
        // Either order of the two releases: the blocks at the end of the
        // extent the allocation filled are given again too.
        for first_part_first in [true, false] {
            let s = ExtentSpace::new(128 * 4, 128, vec![]).unwrap();
            let kept = s.alloc(100).unwrap();
            let free = s.free_blocks();
            let split = s.alloc(60).unwrap();
            // Extents 1 and 2 are adjacent: one run.
            assert_eq!(split, vec![(PhysBlock(228), 60)]);
            let split = vec![(PhysBlock(228), 28), (PhysBlock(256), 32)];
            let order: Vec<Run> = if first_part_first {
                split.clone()
            } else {
                split.iter().rev().copied().collect()
            };
            for (b, n) in order {
                s.release(b, n);
            }
            assert_eq!(s.free_blocks(), free, "order {first_part_first}");
            assert_eq!(s.stats().valid_blocks, 100);
            // Extent 2 stays open; once it is full, extent 1's end is
            // given before extent 3.
            assert_eq!(s.alloc(128).unwrap(), vec![(PhysBlock(256), 128)]);
            assert_eq!(s.alloc(30).unwrap(), vec![(PhysBlock(384), 30)]);
            assert_eq!(
                s.alloc(98 + 28).unwrap(),
                vec![(PhysBlock(414), 98), (PhysBlock(228), 28)]
            );
            s.release(kept[0].0, 100);
        }
    }

    #[test]
    fn the_unwritten_rest_of_partly_valid_extents_is_given_after_a_mount() {
        // Extent 1 was open with 10 blocks given; extent 2 holds one block
        // at 300 (block 44 of it), dead blocks before it.
        let s = ExtentSpace::new(
            128 * 5,
            128,
            vec![(PhysBlock(128), 10), (PhysBlock(300), 1)],
        )
        .unwrap();
        assert_eq!(s.stats().free_blocks, 2 * 128 + 118 + 83);
        // Free extents first, then the ends past the last live blocks.
        assert_eq!(s.alloc(2 * 128).unwrap(), vec![(PhysBlock(384), 256)]);
        assert_eq!(
            s.alloc(120).unwrap(),
            vec![(PhysBlock(138), 118), (PhysBlock(301), 2)],
        );
        assert_eq!(s.alloc(81).unwrap(), vec![(PhysBlock(303), 81)]);
        // Only extent 2's blocks before its live one stay dead.
        let st = s.stats();
        assert_eq!((st.free_blocks, st.valid_blocks), (0, 4 * 128 - 44));
        assert!(s.alloc(1).is_none());
    }

    #[test]
    fn object_tiers_keep_released_blocks_dead() {
        let mut s = ExtentSpace::new(128 * 4, 128, vec![(PhysBlock(128), 10)]).unwrap();
        s.keep_released_blocks_dead();
        assert_eq!(s.stats().free_blocks, 2 * 128, "no tail after a mount");
        let a = s.alloc(20).unwrap();
        assert_eq!(a, vec![(PhysBlock(256), 20)]);
        s.release(a[0].0, 20);
        assert_eq!(s.stats().free_blocks, 2 * 128, "the open extent rewinds");
        let b = s.alloc(100).unwrap();
        let c = s.alloc(10).unwrap();
        assert_eq!(s.stats().free_blocks, 128 + 18);
        s.release(c[0].0, 10);
        assert_eq!(s.stats().free_blocks, 128 + 18, "dead while b lives");
        s.release(b[0].0, 100);
        assert_eq!(s.stats().free_blocks, 2 * 128);
    }

    #[test]
    fn a_sealed_extent_takes_no_allocation_until_it_empties() {
        let s = ExtentSpace::new(128 * 4, 128, vec![]).unwrap();
        let a = s.alloc(128).unwrap();
        let b = s.alloc(10).unwrap();
        // Extent 1 gives back its end: a tail extent.
        s.release(PhysBlock(200), 56);
        assert_eq!(s.stats().free_blocks, 128 + 118 + 56);
        let (infos, _, _) = s.cleaning_view();
        assert_eq!(
            (infos[0].id, infos[0].valid_blocks, infos[0].total_blocks),
            (1, 72, 72),
            "its end is free, not dead: no candidate for recycling"
        );
        // Recycling seals it and the open extent 2: their ends are not
        // given, nor is what is released at their marks meanwhile.
        s.seal(&[1, 2]);
        assert_eq!(s.stats().free_blocks, 128);
        assert_eq!(s.alloc(5).unwrap(), vec![(PhysBlock(384), 5)]);
        s.release(PhysBlock(190), 10);
        assert_eq!(s.stats().free_blocks, 128 - 5);
        let c = s.alloc(123).unwrap();
        assert_eq!(c, vec![(PhysBlock(389), 123)], "extent 3 to its end");
        s.release(c[0].0, 123);
        assert_eq!(s.stats().free_blocks, 123, "extent 3 is not sealed");
        s.seal(&[3]);
        assert_eq!(s.stats().free_blocks, 0);
        s.release(PhysBlock(384), 5);
        assert_eq!(s.stats().free_blocks, 128, "an emptied extent is free");
        s.seal(&[3]);
        assert_eq!(s.stats().free_blocks, 128, "a free extent is not sealed");
        s.unseal(&[1, 2, 3]);
        s.release(b[0].0, 10);
        s.release(a[0].0, 62);
        assert_eq!(s.stats().free_blocks, 3 * 128);
        assert_eq!(s.stats().free_extents, 3);
        let d = s.alloc(128).unwrap();
        s.alloc(1).unwrap();
        s.seal(&[d[0].0.get() / 128]);
        s.release(PhysBlock(d[0].0.get() + 100), 28);
        assert_eq!(s.stats().free_blocks, 2 * 128 - 1, "dead while sealed");
        // An open extent rewound to its start has nothing to move out.
        let t = ExtentSpace::new(128 * 3, 128, vec![]).unwrap();
        let x = t.alloc(5).unwrap();
        t.release(x[0].0, 5);
        t.seal(&[1]);
        assert_eq!(t.stats().free_blocks, 2 * 128);
        assert_eq!(t.alloc(2 * 128).unwrap().len(), 1);
    }

    #[test]
    fn the_rest_of_an_extent_recycling_opened_stays_the_reserve() {
        // 17 extents: the header, 16 to use, 2 of them held back.
        let s = ExtentSpace::new(128 * 17, 128, vec![]).unwrap();
        s.alloc(14 * 128).unwrap();
        // Recycling opens a reserve extent and takes 10 blocks of it.
        s.alloc_recycling(10).unwrap();
        assert_eq!(s.stats().free_extents, 1);
        assert_eq!(s.free_blocks(), 0, "data gets none of its other 118");
        assert!(s.alloc(1).is_none());
        let runs = s.alloc_recycling(128 + 118).unwrap();
        assert_eq!(
            runs.iter().map(|r| r.1).sum::<u64>(),
            246,
            "recycling gets all"
        );
        assert_eq!(s.stats().free_blocks, 0);
    }

    #[test]
    fn full_tier_refuses_allocation_without_side_effects() {
        let s = ExtentSpace::new(128 * 2, 128, vec![]).unwrap();
        assert!(s.alloc(129).is_none());
        assert_eq!(s.alloc(128).unwrap(), vec![(PhysBlock(128), 128)]);
        assert!(s.alloc(1).is_none());
    }

    #[test]
    fn the_last_free_extents_are_left_to_recycling() {
        // 17 extents: the header, 16 to use, 2 of them held back.
        let s = ExtentSpace::new(128 * 17, 128, vec![]).unwrap();
        assert_eq!(s.recycling_reserve_extents(), 2);
        assert_eq!(s.free_blocks(), 14 * 128, "data sees 14 extents");
        assert!(s.alloc(14 * 128 + 1).is_none());
        s.alloc(14 * 128).unwrap();
        assert_eq!(s.free_blocks(), 0);
        assert!(s.alloc(1).is_none(), "the reserve is not for data");
        assert_eq!(
            s.alloc_recycling(128).unwrap().len(),
            1,
            "recycling takes it"
        );
        assert_eq!(s.stats().free_extents, 1);
        // Small tiers keep at most an eighth of their extents.
        assert_eq!(
            ExtentSpace::new(128 * 9, 128, vec![])
                .unwrap()
                .recycling_reserve_extents(),
            1
        );
    }

    /// Runs `discard_free` over every extent, returning the runs it
    /// discarded and the blocks it reported.
    fn discard_all(s: &ExtentSpace, min_blocks: u64) -> (Vec<(u64, u64)>, u64) {
        let mut runs = Vec::new();
        let (n, err) = s.discard_free(0..u64::MAX, min_blocks, &mut |b, n| {
            runs.push((b, n));
            Ok(())
        });
        assert!(err.is_none());
        (runs, n)
    }

    #[test]
    fn discard_takes_only_free_extents_and_each_once_until_it_is_used_again() {
        // 8 extents: the header, one partly valid (and open), six free.
        let s = ExtentSpace::new(128 * 8, 128, vec![]).unwrap();
        let held = s.alloc(10).unwrap();
        assert_eq!(held, vec![(PhysBlock(128), 10)]);
        let (runs, n) = discard_all(&s, 0);
        assert_eq!(runs, vec![(256, 6 * 128)], "extents 2..8 in one call");
        assert_eq!(n, 6 * 128);
        assert_eq!(discard_all(&s, 0), (vec![], 0), "nothing new to discard");
        // Filling the open extent opens extent 2; freeing it again makes it
        // discardable again, the others stay discarded.
        let more = s.alloc(128).unwrap();
        assert_eq!(
            more,
            vec![(PhysBlock(138), 128)],
            "extent 1 full, 10 blocks of 2"
        );
        assert_eq!(discard_all(&s, 0), (vec![], 0));
        s.release(PhysBlock(128), 10);
        s.release(PhysBlock(138), 118);
        assert_eq!(discard_all(&s, 0), (vec![(128, 128)], 128));
        // Long runs go to the device in pieces of DISCARD_EXTENTS extents.
        let big = ExtentSpace::new(128 * 20, 128, vec![]).unwrap();
        let (runs, n) = discard_all(&big, 0);
        assert_eq!(n, 19 * 128);
        assert!(runs.iter().all(|&(_, n)| n <= DISCARD_EXTENTS * 128));
        assert_eq!(runs.len(), 3);
    }

    #[test]
    fn discard_skips_runs_of_free_extents_shorter_than_the_minimum() {
        // Extents 1, 3 and 5 hold data: 2 and 4 are single free extents,
        // 6..10 a run of four.
        let used = vec![
            (PhysBlock(128), 1),
            (PhysBlock(384), 1),
            (PhysBlock(640), 1),
        ];
        let s = ExtentSpace::new(128 * 10, 128, used).unwrap();
        let (runs, _) = discard_all(&s, 2 * 128);
        assert_eq!(runs, vec![(768, 4 * 128)]);
        let (runs, _) = discard_all(&s, 128);
        assert_eq!(runs, vec![(256, 128), (512, 128)]);
        // A range counts whole extents and cuts runs, but the minimum
        // applies to the whole run.
        let t = ExtentSpace::new(128 * 10, 128, vec![]).unwrap();
        let mut runs = Vec::new();
        let (n, _) = t.discard_free(3..5, 9 * 128, &mut |b, n| {
            runs.push((b, n));
            Ok(())
        });
        assert_eq!((runs, n), (vec![(384, 256)], 256));
    }

    #[test]
    fn a_failed_discard_stops_and_reports_what_was_done() {
        let s = ExtentSpace::new(128 * 30, 128, vec![]).unwrap();
        let mut calls = 0;
        let (n, err) = s.discard_free(0..u64::MAX, 0, &mut |_, _| {
            calls += 1;
            if calls == 2 {
                Err(std::io::Error::from_raw_os_error(libc::EIO))
            } else {
                Ok(())
            }
        });
        assert_eq!(n, DISCARD_EXTENTS * 128);
        assert_eq!(err.unwrap().raw_os_error(), Some(libc::EIO));
        // The failed part is tried again next time.
        let (_, n) = discard_all(&s, 0);
        assert_eq!(n, (29 - DISCARD_EXTENTS) * 128);
    }

    #[test]
    fn an_allocation_waits_for_the_discard_of_the_extent_it_takes() {
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        use std::time::Duration;
        let s = Arc::new(ExtentSpace::new(128 * 3, 128, vec![]).unwrap());
        let discarding = Arc::new(AtomicBool::new(false));
        let started = Arc::new(std::sync::Barrier::new(2));
        let trimmer = {
            let (s, discarding, started) = (s.clone(), discarding.clone(), started.clone());
            std::thread::spawn(move || {
                s.discard_free(0..u64::MAX, 0, &mut |_, _| {
                    discarding.store(true, Ordering::SeqCst);
                    started.wait();
                    std::thread::sleep(Duration::from_millis(100));
                    discarding.store(false, Ordering::SeqCst);
                    Ok(())
                })
            })
        };
        started.wait();
        // The discard of extents 1 and 2 is under way: the allocation (which
        // would take extent 1) must not return before it is done.
        let got = s.alloc(1).unwrap();
        assert!(
            !discarding.load(Ordering::SeqCst),
            "an allocation returned {got:?} while its extent was being discarded"
        );
        assert_eq!(trimmer.join().unwrap().0, 2 * 128);
        assert_eq!(discard_all(&s, 0).1, 0, "extent 2 stays discarded");
    }
}
