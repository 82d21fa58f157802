//! Extent recycling on block tiers (NVMFS §III-E, "segment cleaning").
//!
//! Block tiers are written non-overwrite, so overwritten data leaves extents
//! partly valid. When a tier runs short of free extents and its extent use
//! (ideal extents / used extents) falls below the threshold, the cleaner picks
//! the least-recently-used fragmented extents (`terrace_policy::cleaner`),
//! finds the owners of their valid blocks (the reverse map, derived from the
//! inodes' extent maps — every write entry names its tier and block), and
//! moves those blocks into a fresh extent of the same tier (or to PM when the
//! tier has no free extent left) with the migration mechanism
//! ([`Fs::migrate_range`](crate::migrate)): copy, make durable, commit the new
//! location per file — each file's move is its own commit point — and free
//! the old blocks. An extent becomes free only when its last valid block has
//! moved (its valid count reaches zero), i.e. after every owner committed.
//! A crash in between leaves some files moved and others not; nothing is lost
//! or owned twice, and the next pass finishes the job.

use crate::fs::Fs;
use crate::types::Ino;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use terrace_policy::cleaner;

/// What `terrace status` shows about extent recycling.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct CleanerStatus {
    /// Cleaning rounds run.
    pub rounds: u64,
    /// Extents returned to the free set by cleaning.
    pub extents_recycled: u64,
    /// Valid blocks moved to do so.
    pub moved_blocks: u64,
    /// Blocks those extents held.
    pub recycled_blocks: u64,
    /// 1 − moved / recycled (NVMFS's cleaning efficiency); `None` before any.
    pub efficiency: Option<f64>,
}

impl Fs {
    /// One cleaning round on every block tier that needs it. Returns the
    /// number of extents recycled.
    pub fn clean_pass(&self) -> u64 {
        if self.is_frozen() {
            return 0;
        }
        let params = self.settings.read().cleaner_params();
        let mut recycled = 0;
        for t in &self.tiers {
            let (infos, free, total) = t.space.cleaning_view();
            if !cleaner::should_clean(&infos, free, total, &params) {
                continue;
            }
            let plan = cleaner::pick_victims(&infos, &params);
            if plan.victims.is_empty() {
                continue;
            }
            recycled += self.recycle(t.id, &plan.victims);
        }
        recycled
    }

    /// Moves every valid block out of extents `victims` of tier `tier`.
    /// Returns how many of them ended up free.
    pub fn recycle(&self, tier: u8, victims: &[u64]) -> u64 {
        let Ok(t) = self.tier(tier) else { return 0 };
        let eb = t.space.extent_blocks();
        let set: BTreeSet<u64> = victims.iter().copied().collect();
        // The reverse map for the victims: (inode, file block, blocks, copy?)
        // — a victim block is either an extent's data or its clean copy.
        let mut work: Vec<(Ino, u64, u64, bool)> = Vec::new();
        // And the inodes whose log blob (log migration) lies in a victim.
        let mut logs: Vec<Ino> = Vec::new();
        for slot in &self.table {
            let g = slot.lock();
            let Some(i) = g.as_ref() else { continue };
            if let Some(l) = i.log.on_tier {
                if l.tier == tier && set.contains(&(l.block / eb)) {
                    logs.push(i.ino);
                }
            }
            for (fb, e) in i.extents.iter() {
                let mut places = Vec::new();
                if e.tier == tier {
                    places.push((e.block, false));
                }
                if let Some((ct, cb)) = e.copy {
                    if ct == tier {
                        places.push((cb, true));
                    }
                }
                for (first, is_copy) in places {
                    let mut off = 0;
                    while off < e.blocks {
                        let b = first + off;
                        let ext = b / eb;
                        let n = ((ext + 1) * eb - b).min(e.blocks - off);
                        if set.contains(&ext) {
                            match work.last_mut() {
                                Some(w)
                                    if w.0 == i.ino && w.3 == is_copy && w.1 + w.2 == fb + off =>
                                {
                                    w.2 += n
                                }
                                _ => work.push((i.ino, fb + off, n, is_copy)),
                            }
                        }
                        off += n;
                    }
                }
            }
        }
        let s = &self.cleaner_stats;
        s.rounds.fetch_add(1, Ordering::Relaxed);
        // Only the victims lose blocks here (their data moves elsewhere), so
        // the extents freed meanwhile are the victims recycled — even those a
        // later move of the same round already filled again.
        let freed_before = t.space.extents_freed();
        let mut moved = 0u64;
        for (ino, fb, n, is_copy) in work {
            if is_copy {
                // A clean copy is not needed: forget it rather than move it.
                let _ = self.move_range(ino, tier, 0, fb, n, crate::migrate::Mode::DropCopy);
                continue;
            }
            let r = match self.migrate_range(ino, tier, tier, fb, n) {
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                    self.migrate_range(ino, tier, 0, fb, n)
                }
                r => r,
            };
            match r {
                Ok(bytes) => moved += bytes / terrace_format::BLOCK_SIZE,
                Err(_) => break,
            }
        }
        // The blobs move too — those still there: moving a file's data
        // above committed to it, which brought its log back to PM.
        logs.retain(|&ino| self.log_place(ino).is_ok_and(|p| p.is_some()));
        if !logs.is_empty() {
            let _ = self.move_logs(&logs, tier);
        }
        let freed = t.space.extents_freed() - freed_before;
        s.moved_blocks.fetch_add(moved, Ordering::Relaxed);
        s.extents_recycled.fetch_add(freed, Ordering::Relaxed);
        s.recycled_blocks.fetch_add(freed * eb, Ordering::Relaxed);
        freed
    }

    /// Cleaner counters for `terrace status`.
    pub fn cleaner_status(&self) -> CleanerStatus {
        let s = &self.cleaner_stats;
        let moved = s.moved_blocks.load(Ordering::Relaxed);
        let recycled = s.recycled_blocks.load(Ordering::Relaxed);
        CleanerStatus {
            rounds: s.rounds.load(Ordering::Relaxed),
            extents_recycled: s.extents_recycled.load(Ordering::Relaxed),
            moved_blocks: moved,
            recycled_blocks: recycled,
            efficiency: cleaner::cleaning_efficiency(moved, recycled),
        }
    }
}
