//! Writes into the DRAM page cache (`cache.rs`): reserving room for a
//! write's pages before its inode lock ([`Fs::cache_reserve`], writing other
//! files back when only dirty pages are left), copying the write into dirty
//! pages of the locked inode with the log bytes its write-back commit will
//! need promised on PM ([`Fs::write_cached`], design.md §5f), and dropping
//! the pages of a file being freed ([`Fs::discard_dirty`]). Write-back is
//! `writeback.rs`.
//!
//! A cached write is all in or not at all: every check that can fail
//! (room on the block tiers, the log promise) comes before the first page is
//! inserted, under the inode lock and the room lock (lock order: design.md
//! §4a). While the pool's last block tier is being removed the cache takes
//! no new pages ([`Fs::cache_takes_writes`]): writes go through to PM.

use crate::fs::Fs;
use crate::inode::{DirtyPage, Inode};
use crate::types::FsResult;
use std::time::Duration;
use terrace_format::{FileBlock, BLOCK_SIZE};

const BS: u64 = BLOCK_SIZE;

impl Fs {
    /// Reserves room for `bytes` of dirty pages, writing back and evicting
    /// until it fits. `false` when the data can never fit (larger than the
    /// bound), or found no room for ten seconds: the caller writes it
    /// through instead.
    pub(crate) fn cache_reserve(&self, bytes: u64) -> FsResult<bool> {
        let mut tries = 0u32;
        loop {
            let bound = self.cache.bound();
            if bytes > bound / 2 {
                self.cache.note_bypassed_write();
                return Ok(false);
            }
            // When only dirty pages (and other writers' reservations) are
            // left: write back the file dirty longest, ours included.
            let victim = match self.cache.try_reserve(bytes, bound) {
                Ok(()) => return Ok(true),
                Err(victim) => victim,
            };
            match victim {
                Some(v) => {
                    // A write-back that fails (a device error, the tier of
                    // that file's rule full) leaves that file dirty for its
                    // own fsync to report; this write goes through instead
                    // of into the cache, so it neither overfills the cache
                    // nor fails with another file's error. (It failed with
                    // it before 2026-12-07: one file whose write-back kept
                    // failing failed every cached write of the pool.)
                    if self.flush_inode_part(v, self.writeback_part()).is_err() {
                        self.cache.note_bypassed_write();
                        return Ok(false);
                    }
                }
                None => {
                    tries += 1;
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            if tries > 50_000 {
                // Ten seconds without room: other writers hold it all. The
                // write goes through instead (a blocking write(2) never
                // fails with EAGAIN on ext4; before 2026-12-07 this did).
                self.cache.note_bypassed_write();
                return Ok(false);
            }
        }
    }

    /// Copies `data` at `off` into dirty pages of the locked inode `i` (the
    /// caller reserved `reserved` bytes, enough for every page of the range).
    /// `Ok(false)`, nothing cached, when no block tier takes new data any
    /// more (the last one is being removed, [`Fs::cache_takes_writes`]):
    /// the caller writes the data through instead. Decided under the room
    /// lock, so once a removal has marked its tier retiring under that lock
    /// no page is added (`tier_detach.rs` then writes back what is cached).
    pub(crate) fn write_cached(
        &self,
        i: &mut Inode,
        off: u64,
        data: &[u8],
        counter: u8,
        now: i64,
        reserved: u64,
    ) -> FsResult<bool> {
        // A file whose log migration moved to a block tier gets it back on
        // PM first, so the promise below is for an ordinary PM log and the
        // write-back commit never has to recall (ENOSPC here, not later).
        self.recall_log(i, false)?;
        let end = off + data.len() as u64;
        let fb0 = off / BS;
        let fb1 = (end - 1) / BS;
        let seq = self.cache.next_seq();
        let mut added = 0u64;
        let mut fresh: Vec<(FileBlock, DirtyPage)> = Vec::with_capacity((fb1 - fb0 + 1) as usize);
        for fb in fb0..=fb1 {
            let pstart = fb * BS;
            let from = off.max(pstart);
            let to = end.min(pstart + BS);
            let mut page: Vec<u8> = if from == pstart && to == pstart + BS {
                Vec::with_capacity(BS as usize)
            } else {
                let mut old = self.read_locked(i, pstart, BS as usize)?;
                old.resize(BS as usize, 0);
                old
            };
            let src = &data[(from - off) as usize..(to - off) as usize];
            if page.is_empty() {
                page.extend_from_slice(src);
            } else {
                page[(from - pstart) as usize..(to - pstart) as usize].copy_from_slice(src);
            }
            fresh.push((
                FileBlock(fb),
                DirtyPage {
                    data: page.into(),
                    seq,
                    first_seq: seq,
                    end,
                    mtime: now,
                    counter,
                },
            ));
        }
        // Each page not already dirty will need a block at write-back: claim
        // the room now (ENOSPC here, not a lost write later).
        let new_pages = fresh
            .iter()
            .filter(|(fb, _)| !i.dirty.contains_key(fb))
            .count() as u64;
        // A page a write-back has taken needs a block of its own too: that
        // write-back's block will hold the older content (`Inode::wb_in_flight`).
        let rewritten_in_flight = fresh
            .iter()
            .filter(|(fb, _)| {
                i.wb_in_flight
                    .get(fb)
                    .is_some_and(|&seq| i.dirty.get(fb).is_some_and(|q| q.seq == seq))
            })
            .count() as u64;
        if i.dirty.is_empty() {
            i.dirty_runs = 0;
        }
        let runs = if new_pages > 0 {
            i.dirty_runs + 1
        } else {
            i.dirty_runs
        };
        let promise =
            crate::space::writeback_log_bytes(&i.log, runs, i.dirty.len() as u64 + new_pages);
        let _room = self.room_lock.lock();
        if !self.cache_takes_writes() {
            return Ok(false);
        }
        self.check_room(new_pages + rewritten_in_flight)?;
        self.check_log_promise(i.ino, promise)?;
        self.cache.set_log_promise(i.ino, promise);
        i.dirty_runs = runs;
        // Nothing fails from here on: the write is all in, or not at all.
        let visible = i.size();
        for (fb, mut p) in fresh {
            match i.dirty.get(&fb) {
                Some(old) => {
                    // The page absorbs this write: it now carries every
                    // cached write to it since the oldest.
                    p.first_seq = old.first_seq;
                    p.end = p.end.max(old.end);
                    i.dirty.insert(fb, p);
                }
                None => {
                    i.dirty.insert(fb, p);
                    added += 1;
                }
            }
        }
        i.cached_size = visible.max(end);
        i.cached_mtime = now;
        i.dirty_extra += rewritten_in_flight;
        self.cache
            .commit_reservation(i.ino, reserved, added + rewritten_in_flight);
        Ok(true)
    }

    /// Whether the DRAM cache takes writes: a block tier that is not being
    /// removed is mounted, for the write-back to put them on (with none,
    /// writes go through to PM, as on a PM-only pool).
    /// Nor once the kernel completes the mount's fsyncs itself
    /// ([`Fs::leave_fsync_to_kernel`]): a cached page would then never be
    /// written back by an fsync.
    pub(crate) fn cache_takes_writes(&self) -> bool {
        !self.fsync_left_to_kernel() && self.tiers.iter().any(|t| !t.space.is_retiring())
    }

    /// Discards the dirty pages of an inode being freed.
    pub(crate) fn discard_dirty(&self, i: &mut Inode) {
        if i.dirty.is_empty() {
            return;
        }
        let n = i.dirty.len() as u64 + i.dirty_extra;
        i.dirty.clear();
        i.dirty_extra = 0;
        i.wb_in_flight.clear();
        self.cache.drop_dirty(i.ino, n, true);
    }
}
