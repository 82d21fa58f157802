//! Writes into preallocated space on a pool with no room for a copy
//! (design.md §5i, "Writes into preallocated space"; xfstests generic/274).
//!
//! Data is copy-on-write: a write takes new blocks and frees the old ones
//! after its commit, so on a full pool even a write over blocks that
//! `fallocate` reserved would fail with ENOSPC — but POSIX promises that
//! writes into a successfully preallocated range do not fail for lack of
//! space, and databases (WAL files, InnoDB and RocksDB preallocate theirs)
//! rely on it. When [`Fs::write`] found no room, a write whose every block
//! is mapped, holds zeros, is mapped once (not shared with a clone: the
//! reference counts of `shared.rs` say so) and has no clean copy, and lies on PM or on a device tier (not an object tier), goes into
//! those blocks instead:
//!
//! 1. under the file's lock (its dirty cached pages written back first), a
//!    commit unmaps the range *without freeing its blocks* (a Punch entry):
//!    the range reads as zeros — which it held — and the blocks belong to
//!    this write alone. It takes foreground log room, as step 3 does, so
//!    a pool out of that room too refuses the write here, unchanged;
//! 2. with unlocked block-tier readers kept out ([`ReadPins::exclude`]:
//!    one may have captured the blocks before step 1), the new data (the
//!    blocks' zeros around it) is written into the same blocks and made
//!    durable (their checksums recorded; cached copies dropped);
//! 3. a second commit maps the range to them again, with the new size,
//!    times and checksums — the write's commit point.
//!
//! A crash before step 3 finds the range a hole: it reads as zeros, as
//! before the write, and the blocks are free at mount (space is rebuilt
//! from the extent maps), so the write is undone whole; the range loses
//! its preallocation, not its content. A failure in step 2 or 3 frees the
//! blocks the same way and returns the error. Unlocked readers that
//! captured the range before step 1 — the migration mover, scrub — find
//! its mapping changed when they check it under the lock, and drop what
//! they read.
//!
//! Nothing else changes: with room left, writes over preallocated space
//! are copy-on-write as any other.
//!
//! [`ReadPins::exclude`]: crate::read_pins::ReadPins::exclude

use crate::data::DataRuns;
use crate::fs::{now_ns, Fs};
use crate::ops_file::{Stamp, MAX_FILE_SIZE};
use crate::space::LogUse;
use crate::types::*;
use std::sync::atomic::Ordering;
use terrace_format::{Entry, FileBlock, PhysBlock, TierId, WriteEntry, BLOCK_SIZE};

const BS: u64 = BLOCK_SIZE;

/// A run of the write's file blocks and the blocks holding them.
#[derive(Debug, Clone, Copy)]
struct Held {
    file_block: FileBlock,
    tier: TierId,
    block: PhysBlock,
    blocks: u64,
}

impl Fs {
    /// Writes `data` at `off` of `ino` into the preallocated (zero-filled)
    /// blocks it covers, as the module doc says; `Ok(None)` when the write
    /// does not qualify (the caller's ENOSPC stands).
    pub(crate) fn write_into_preallocated(
        &self,
        ino: Ino,
        off: u64,
        data: &[u8],
        new_change: bool,
        stamp: Stamp,
    ) -> FsResult<Option<usize>> {
        let Some(end) = off.checked_add(data.len() as u64) else {
            return Ok(None);
        };
        if data.is_empty() || end > MAX_FILE_SIZE {
            return Ok(None);
        }
        let (fb0, fb1) = (FileBlock::containing(off), FileBlock::containing(end - 1));
        let Ok(mut g) = self.lock(ino) else {
            return Ok(None);
        };
        let i = g.as_mut().expect("live");
        i.kind.require_regular(libc::EINVAL)?;
        if new_change {
            crate::inode_flags::check_write(i)?;
        }
        self.check_append_only_write(i, off, data)?;
        let Some(mut held) = self.preallocated_runs(i, fb0, fb1) else {
            return Ok(None);
        };
        if !i.dirty.is_empty() {
            // The file's cached writes commit first (per-file order, as a
            // write through PM does); the range is looked at again after.
            drop(g);
            let Ok(clean) = self.lock_clean(ino) else {
                return Ok(None);
            };
            g = clean;
            let i = g.as_ref().expect("live");
            match self.preallocated_runs(i, fb0, fb1) {
                Some(again) if i.dirty.is_empty() => held = again,
                _ => return Ok(None),
            }
        }
        let i = g.as_mut().expect("live");
        let nblocks = fb1 - fb0 + 1;
        let mut buf = vec![0u8; (nblocks * BS) as usize];
        // They hold zeros (what the range reads as once unmapped).
        for h in &held {
            let at = ((h.file_block - fb0) * BS) as usize;
            let part = &mut buf[at..at + (h.blocks * BS) as usize];
            if self.read_data(ino, h.tier, h.block, 0, part).is_err()
                || part.iter().any(|&b| b != 0)
            {
                return Ok(None);
            }
        }
        let head = (off % BS) as usize;
        buf[head..head + data.len()].copy_from_slice(data);
        let counter = i.extents.find(fb0).map_or(0, |(_, e)| e.counter);
        let on_block_tier = held.iter().any(|h| !h.tier.is_pm());
        let _readers_out = on_block_tier.then(|| self.read_pins.exclude());
        // 1. The range leaves the map; its blocks stay this write's.
        let unmapped = self.commit_one_keeping(
            i,
            vec![Entry::Punch {
                file_block: fb0,
                blocks: nblocks,
            }],
            LogUse::Foreground,
        )?;
        let now = now_ns();
        let mtime = stamp.time(i, now);
        let size_after = i.attr.size.max(end);
        let r = (|| -> FsResult<()> {
            // 2. The data into the same blocks, durable.
            for h in &held {
                let at = ((h.file_block - fb0) * BS) as usize;
                let d = DataRuns {
                    tier: h.tier,
                    runs: vec![(h.block, h.blocks)],
                };
                self.write_data_unsynced(&d, &buf[at..at + (h.blocks * BS) as usize])?;
                if !h.tier.is_pm() {
                    self.cache.invalidate(h.tier, h.block, h.blocks);
                }
            }
            let mut synced: Vec<TierId> = Vec::new();
            for h in held.iter().filter(|h| !h.tier.is_pm()) {
                if !synced.contains(&h.tier) {
                    self.sync_tier(h.tier)?;
                    synced.push(h.tier);
                }
            }
            // 3. Mapped again: the commit point.
            let entries = held
                .iter()
                .map(|h| {
                    Entry::Write(WriteEntry {
                        file_block: h.file_block,
                        blocks: h.blocks as u32,
                        tier: h.tier,
                        size_counter: counter,
                        wflags: 0,
                        block: h.block,
                        size_after,
                        mtime,
                    })
                })
                .collect();
            self.commit_one(i, entries)
        })();
        if let Err(e) = r {
            self.free_runs(unmapped);
            return Err(e);
        }
        debug_assert_eq!(
            unmapped.iter().map(|r| r.2).sum::<u64>(),
            nblocks,
            "the punch unmapped exactly the blocks written in place"
        );
        i.io_mut().access.record(off, data.len() as u64, true);
        let c = &self.counters;
        c.prealloc_in_place_writes.fetch_add(1, Ordering::Relaxed);
        c.writes.fetch_add(1, Ordering::Relaxed);
        c.bytes_written
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        Ok(Some(data.len()))
    }

    /// The runs holding file blocks `[fb0, fb1]` of `i` when every one is
    /// mapped, by an extent that is not shared, has no clean copy and lies
    /// on PM or a device tier that takes writes, and none has a dirty
    /// cached page; `None` otherwise.
    fn preallocated_runs(
        &self,
        i: &crate::inode::Inode,
        fb0: FileBlock,
        fb1: FileBlock,
    ) -> Option<Vec<Held>> {
        if i.dirty.range(fb0..=fb1).next().is_some() {
            return None;
        }
        let mut held = Vec::new();
        let mut fb = fb0;
        while fb <= fb1 {
            let (s, e) = i.extents.find(fb)?;
            let writable = e.tier.is_pm()
                || self.tier(e.tier).is_ok_and(|t| {
                    t.kind != terrace_format::TierKind::S3
                        && !t.refuses_allocation()
                        && !t.space.is_retiring()
                });
            let k = (s + e.blocks - fb).min(fb1 + 1 - fb);
            let block = e.block + (fb - s);
            // Of the entries mapping a cloned block only one may lack the
            // shared flag: the reference counts tell, not the flag.
            let cloned = e.shared || !self.shared.shared_parts(e.tier, block, k).is_empty();
            if cloned || e.copy.is_some() || !writable {
                return None;
            }
            held.push(Held {
                file_block: fb,
                tier: e.tier,
                block,
                blocks: k,
            });
            fb += k;
        }
        Some(held)
    }
}
