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
//!
//! The reverse map ([`Fs::owners_in`], over any block runs) and the move
//! ([`Fs::evacuate`]) serve the object tier's cleaning too
//! (`object_clean.rs`), which empties partly dead parts instead of extents.

use crate::fs::Fs;
use crate::types::Ino;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::Ordering;
use terrace_format::{FileBlock, PhysBlock, TierId, TierKind};
use terrace_policy::cleaner;

/// Extents [`Fs::recycle_for_room`] recycles at most per call.
const URGENT_VICTIMS: usize = 64;

/// A piece of a file in blocks being emptied ([`Fs::owners_in`]): `blocks`
/// file blocks from `file_block` of inode `ino` — its data, or (`copy`) its
/// clean copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Owned {
    pub(crate) ino: Ino,
    pub(crate) file_block: FileBlock,
    pub(crate) blocks: u64,
    pub(crate) copy: bool,
}

/// Runs of one tier's blocks, merged: start → end (exclusive).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct BlockRanges(BTreeMap<PhysBlock, PhysBlock>);

impl BlockRanges {
    /// The union of `runs` (`(first block, blocks)`, any order, overlaps
    /// allowed).
    pub(crate) fn new(runs: impl IntoIterator<Item = crate::alloc::Run>) -> BlockRanges {
        let mut sorted: Vec<(PhysBlock, PhysBlock)> = runs
            .into_iter()
            .filter(|&(_, n)| n > 0)
            .map(|(s, n)| (s, s.saturating_add(n)))
            .collect();
        sorted.sort_unstable();
        let mut map: BTreeMap<PhysBlock, PhysBlock> = BTreeMap::new();
        let mut last: Option<(PhysBlock, PhysBlock)> = None;
        for (s, e) in sorted {
            match last.as_mut() {
                Some((_, le)) if s <= *le => *le = (*le).max(e),
                _ => {
                    if let Some((ls, le)) = last.take() {
                        map.insert(ls, le);
                    }
                    last = Some((s, e));
                }
            }
        }
        if let Some((ls, le)) = last {
            map.insert(ls, le);
        }
        BlockRanges(map)
    }

    /// The pieces of `[start, start + blocks)` inside the runs, in order,
    /// as `(first block, blocks)`.
    pub(crate) fn overlaps(&self, start: PhysBlock, blocks: u64) -> Vec<crate::alloc::Run> {
        let end = start.saturating_add(blocks);
        let before = self
            .0
            .range(..=start)
            .next_back()
            .filter(|(_, &e)| e > start);
        let inside = self.0.range(start.saturating_add(1)..end);
        before
            .into_iter()
            .chain(inside)
            .map(|(&s, &e)| (s.max(start), e.min(end)))
            .filter(|(s, e)| s < e)
            .map(|(s, e)| (s, e - s))
            .collect()
    }
}

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
    /// Of the rounds, those run because data would otherwise have failed
    /// for room while the tiers held dead blocks ([`Fs::recycle_for_room`]).
    #[serde(default)]
    pub urgent_rounds: u64,
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
        // Object tiers clean themselves (`object_clean.rs`): recycling an
        // extent there means an upload per group, and on ENOSPC data spilled
        // up to PM for the drains to send down again.
        for t in self
            .tiers
            .iter()
            .filter(|t| t.kind != terrace_format::TierKind::S3)
        {
            let (infos, free, total) = t.space.cleaning_view();
            if !cleaner::should_clean(&infos, free, total, &params) {
                continue;
            }
            let plan = cleaner::pick_victims(&infos, &params);
            if plan.victims.is_empty() {
                continue;
            }
            recycled += self.recycle_on(t.id, &plan.victims);
        }
        recycled
    }

    /// Room for `blocks` more blocks of data when the block tiers' free
    /// space is all in partly valid extents (the dead blocks of a
    /// non-overwrite tier come back only when their whole extent empties):
    /// recycles the least valid extent of any block tier, one at a time —
    /// each one's valid blocks land in the room the previous one freed —
    /// until [`Fs::data_room_blocks`] has `blocks` or nothing more frees an
    /// extent. Unlike [`Fs::clean_pass`] it ignores the cleaner's thresholds:
    /// it runs when data that was accepted (dirty cached pages) or asked for
    /// would otherwise fail with ENOSPC while the pool holds dead blocks.
    /// Object tiers clean themselves (`object_clean.rs`) and are left alone.
    /// Whether any extent was freed, or the room is there now. Called with
    /// no lock held.
    pub(crate) fn recycle_for_room(&self, blocks: u64) -> bool {
        // Only when the dead blocks can make the room: otherwise every
        // refused write would move valid blocks around for nothing (and
        // grow the logs of the files it moves).
        let usable = |t: &&crate::tier::BlockTier| t.kind != TierKind::S3 && !t.space.is_retiring();
        // The dead blocks, and what the tiers' space looks like: a call
        // that freed nothing from one look of it would free nothing again.
        let mut dead = 0u64;
        let mut look = std::hash::DefaultHasher::new();
        for t in self.tiers.iter().filter(usable) {
            let (infos, free, _) = t.space.cleaning_view();
            let valid: u64 = infos.iter().map(|e| e.valid_blocks).sum();
            dead += infos
                .iter()
                .map(|e| e.total_blocks - e.valid_blocks)
                .sum::<u64>();
            (t.id.get(), free, valid, t.space.extents_freed()).hash(&mut look);
        }
        let room = self.data_room_blocks();
        room.hash(&mut look);
        let look = look.finish().max(1);
        if room.saturating_add(dead) < blocks {
            return false;
        }
        if self.cleaner_stats.futile_look.load(Ordering::Relaxed) == look {
            return false;
        }
        // One recycler at a time; whoever waited here finds the room the
        // one before it made (the loop looks first).
        let _one = self.recycle_lock.lock();
        let mut freed_any = false;
        // An extent that could not be emptied (blocks of a write-back or a
        // move still in flight in it) is not tried again in this call.
        let mut tried: Vec<(TierId, u64)> = Vec::new();
        for _ in 0..URGENT_VICTIMS {
            if self.data_room_blocks() >= blocks || self.is_frozen() {
                break;
            }
            let victim = self
                .tiers
                .iter()
                .filter(usable)
                .filter_map(|t| {
                    let (infos, _, _) = t.space.cleaning_view();
                    infos
                        .into_iter()
                        .filter(|e| e.valid_blocks < e.total_blocks)
                        .filter(|e| !tried.contains(&(t.id, e.id)))
                        .min_by_key(|e| e.valid_blocks)
                        .map(|e| (e.valid_blocks, t.id, e.id))
                })
                .min();
            let Some((_, tier, extent)) = victim else {
                break;
            };
            tried.push((tier, extent));
            self.cleaner_stats
                .urgent_rounds
                .fetch_add(1, Ordering::Relaxed);
            if self.recycle_locked(tier, &[extent]) > 0 {
                freed_any = true;
            }
        }
        // Nothing freed: not again until the space changes (a free, an
        // allocation, an extent emptied, room on PM). Every refused write on
        // a full pool whose moves cannot succeed used to walk the inode
        // table for each of its victims (xfstests generic/027).
        self.cleaner_stats
            .futile_look
            .store(if freed_any { 0 } else { look }, Ordering::Relaxed);
        // Room may also have come meanwhile from elsewhere (a write-back or
        // a move ended): worth another try of the refused operation too.
        freed_any || self.data_room_blocks() >= blocks
    }

    /// Moves every valid block out of extents `victims` of tier `tier` (a
    /// tier id as the caller gives it). Returns how many of them ended up
    /// free.
    pub fn recycle(&self, tier: u8, victims: &[u64]) -> u64 {
        self.recycle_on(TierId(tier), victims)
    }

    fn recycle_on(&self, tier: TierId, victims: &[u64]) -> u64 {
        let _one = self.recycle_lock.lock();
        self.recycle_locked(tier, victims)
    }

    /// [`Fs::recycle_on`] for a caller that holds `recycle_lock`.
    fn recycle_locked(&self, tier: TierId, victims: &[u64]) -> u64 {
        let Ok(t) = self.tier(tier) else { return 0 };
        let eb = t.space.extent_blocks();
        // Nothing this round moves may land in a victim's unused end.
        t.space.seal(victims);
        let ranges = BlockRanges::new(victims.iter().map(|&e| (PhysBlock(e * eb), eb)));
        let (owned, logs) = self.owners_in(tier, &ranges);
        let s = &self.cleaner_stats;
        s.rounds.fetch_add(1, Ordering::Relaxed);
        // Only the victims lose blocks here (their data moves elsewhere), so
        // the extents freed meanwhile are the victims recycled — even those a
        // later move of the same round already filled again.
        let freed_before = t.space.extents_freed();
        // One sync and commit per file (window 0); to PM when the tier is full.
        let moved = self.evacuate(tier, owned, logs, 0, true, u64::MAX);
        let freed = t.space.extents_freed() - freed_before;
        t.space.unseal(victims);
        s.moved_blocks.fetch_add(moved, Ordering::Relaxed);
        s.extents_recycled.fetch_add(freed, Ordering::Relaxed);
        s.recycled_blocks.fetch_add(freed * eb, Ordering::Relaxed);
        freed
    }

    /// The reverse map of `ranges` on tier `tier`: every piece of a file
    /// whose data or clean copy lies there (merged while contiguous in the
    /// file), and the inodes whose log blob (log migration) touches them.
    /// Derived by walking the inodes' extent maps, as the allocator is.
    pub(crate) fn owners_in(&self, tier: TierId, ranges: &BlockRanges) -> (Vec<Owned>, Vec<Ino>) {
        let mut work: Vec<Owned> = Vec::new();
        let mut logs: Vec<Ino> = Vec::new();
        for slot in &self.table {
            let g = slot.lock();
            let Some(i) = g.as_ref() else { continue };
            if let Some(l) = i.log.on_tier {
                if l.tier == tier && !ranges.overlaps(l.block, l.blocks.max(1)).is_empty() {
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
                for (first, copy) in places {
                    for (b, n) in ranges.overlaps(first, e.blocks) {
                        let file_block = fb + (b - first);
                        match work.last_mut() {
                            Some(w)
                                if w.ino == i.ino
                                    && w.copy == copy
                                    && w.file_block + w.blocks == file_block =>
                            {
                                w.blocks += n
                            }
                            _ => work.push(Owned {
                                ino: i.ino,
                                file_block,
                                blocks: n,
                                copy,
                            }),
                        }
                    }
                }
            }
        }
        (work, logs)
    }

    /// Empties blocks of tier `tier`: moves the pieces `owned` (from
    /// [`Fs::owners_in`]) into fresh blocks of the same tier with the
    /// migration mechanism — copy, one sync per `window` bytes (0: per
    /// piece), then one commit per file, then the old blocks are freed —
    /// to PM instead when the tier is full and `spill_to_pm`; drops clean
    /// copies found there; then moves the log blobs of `logs` that are
    /// still on the tier. Stops after `limit` blocks, or at the first
    /// failure (what was copied before it still commits). Returns the data
    /// blocks moved.
    pub(crate) fn evacuate(
        &self,
        tier: TierId,
        owned: Vec<Owned>,
        mut logs: Vec<Ino>,
        window: u64,
        spill_to_pm: bool,
        limit: u64,
    ) -> u64 {
        let group = self
            .settings
            .read()
            .migration_params()
            .group_blocks()
            .max(1);
        let mut batch = crate::migrate::MoveBatch::new(self, window);
        let mut added = 0u64;
        'pieces: for o in owned {
            if o.copy {
                // A clean copy is not needed: forget it rather than move it.
                let _ = self.move_range(
                    o.ino,
                    tier,
                    TierId::PM,
                    o.file_block,
                    o.blocks,
                    crate::migrate::Mode::DropCopy,
                );
                continue;
            }
            // In chunks of a migration group: one copy buffer each.
            let mut at = o.file_block;
            while at < o.file_block + o.blocks {
                if added >= limit {
                    break 'pieces;
                }
                let n = (o.file_block + o.blocks - at).min(group).min(limit - added);
                let range = [(at, n)];
                let r = match batch.add(o.ino, tier, tier, &range, crate::migrate::Mode::Move) {
                    Err(e) if spill_to_pm && e.raw_os_error() == Some(libc::ENOSPC) => {
                        batch.add(o.ino, tier, TierId::PM, &range, crate::migrate::Mode::Move)
                    }
                    r => r,
                };
                match r {
                    // Deleted since its blocks were listed: nothing of it to
                    // move (its blocks are free or about to be), the other
                    // owners still move.
                    Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue 'pieces,
                    Err(_) => break 'pieces,
                    Ok(_) => {}
                }
                added += n;
                at += n;
            }
        }
        let (moved, _) = batch.finish();
        // The blobs move too — those still there: moving a file's data
        // above committed to it, which brought its log back to PM.
        logs.retain(|&ino| self.log_place(ino).is_ok_and(|p| p.is_some()));
        if !logs.is_empty() {
            let _ = self.move_logs_for_recycling(&logs, tier);
        }
        moved / terrace_format::BLOCK_SIZE
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
            urgent_rounds: s.urgent_rounds.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::BlockRanges;
    use terrace_format::PhysBlock;

    #[test]
    fn block_ranges_merge_and_clip_overlaps() {
        let r = BlockRanges::new([
            (PhysBlock(10), 5),
            (PhysBlock(0), 2),
            (PhysBlock(14), 6),
            (PhysBlock(30), 0),
            (PhysBlock(2), 1),
        ]);
        // [0, 3), [10, 20)
        assert_eq!(
            r.overlaps(PhysBlock(0), 100),
            vec![(PhysBlock(0), 3), (PhysBlock(10), 10)]
        );
        assert_eq!(r.overlaps(PhysBlock(1), 1), vec![(PhysBlock(1), 1)]);
        assert_eq!(r.overlaps(PhysBlock(3), 7), vec![]);
        assert_eq!(r.overlaps(PhysBlock(12), 20), vec![(PhysBlock(12), 8)]);
        assert_eq!(r.overlaps(PhysBlock(19), 1), vec![(PhysBlock(19), 1)]);
        assert_eq!(r.overlaps(PhysBlock(20), 5), vec![]);
        assert!(BlockRanges::new([])
            .overlaps(PhysBlock(0), u64::MAX)
            .is_empty());
    }
}
