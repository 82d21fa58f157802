//! Which requests may wait on an object store (design.md §5n "Network
//! faults"): the FUSE layer serves them off its request threads, so that a
//! store that does not answer holds up no request for data on other tiers.
//!
//! Each predicate is cheap and never waits: it looks at the inode under
//! `try_lock`, and a busy inode lock answers "may wait" — its holder may be
//! waiting on the store, and a request thread that queued behind it would
//! wait as long. A pool without an object tier answers false at once, so
//! nothing changes there. "May wait" is an over-approximation: a block
//! mapped to an object tier may be in the DRAM cache (not looked at); a
//! false answer is exact for the file as it is now.
//!
//! What waits on the store, and so what the predicates look for:
//! - a read of a range mapped to an object tier (ranged GETs);
//! - a write whose first or last block is partial (read-modify-write of the
//!   old block) and mapped to an object tier, inside the file;
//! - a truncate to a size inside a block mapped to an object tier (the
//!   kept part of that block is read and rewritten, `Fs::setattr`);
//! - `copy_file_range` whose source range maps to an object tier, or whose
//!   destination range has such a partial end block (it copies through
//!   reads and writes, `ops_clone.rs`);
//! - an fsync of a file with pages in the DRAM cache: their write-back may
//!   upload (a file pinned to an object tier, or a spill into one).
//!
//! A write and a truncate also fetch such a block into the DRAM cache
//! before they take the inode lock ([`Fs::warm_partial_ends`],
//! [`Fs::warm_cut_block`]), so the wait on the store holds no lock and
//! `stat` or a listing with attributes of the file goes on meanwhile.

use crate::fs::Fs;
use crate::inode::Inode;
use crate::ops_clone::COPY_MAX_BYTES;
use crate::types::Ino;
use terrace_format::{TierKind, BLOCK_SIZE};

const BS: u64 = BLOCK_SIZE;

/// What a look at an inode that does not wait found.
enum Peek<T> {
    /// Its lock is held: whoever holds it may be waiting on the store.
    Busy,
    /// No live inode (the request will fail without waiting).
    Gone,
    Found(T),
}

impl Fs {
    /// Whether a read of `size` bytes at `off` of `ino` may wait on an
    /// object store: part of the range maps to an object tier (its blocks
    /// may be in the DRAM cache; this does not look), or the inode lock is
    /// busy. The FUSE layer serves such reads off its request threads. False
    /// at once for pools without an object tier.
    pub fn read_may_wait_on_network(&self, ino: Ino, off: u64, size: usize) -> bool {
        if !self.has_object_tier() || size == 0 {
            return false;
        }
        let end = off.saturating_add(size as u64);
        self.may_wait(ino, |i| self.maps_to_object_tier(i, off, end))
    }

    /// Whether `lseek(SEEK_DATA/SEEK_HOLE)` of `ino` may wait on an object
    /// store: it reads no data, so only when the inode lock is busy (its
    /// holder may be waiting on the store). False at once for pools without
    /// an object tier.
    pub fn seek_may_wait_on_network(&self, ino: Ino) -> bool {
        self.has_object_tier() && self.may_wait(ino, |_| false)
    }

    /// Whether `fallocate` of `len` bytes at `off` of `ino` may wait on an
    /// object store: as for a write of that range (zeroing or punching a
    /// partial block rewrites its other bytes, read first). Plain
    /// allocation reads nothing, but is answered the same: handing it off
    /// costs a thread switch only.
    pub fn fallocate_may_wait_on_network(&self, ino: Ino, off: u64, len: u64) -> bool {
        self.write_may_wait_on_network(ino, off, usize::try_from(len).unwrap_or(usize::MAX))
    }

    /// Whether a write of `len` bytes at `off` of `ino` may wait on an
    /// object store: its first or last block is partial, inside the file and
    /// mapped to an object tier (the write reads it to merge its bytes in),
    /// or the inode lock is busy. False at once for pools without an object
    /// tier.
    pub fn write_may_wait_on_network(&self, ino: Ino, off: u64, len: usize) -> bool {
        if !self.has_object_tier() || len == 0 {
            return false;
        }
        let end = off.saturating_add(len as u64);
        self.may_wait(ino, |i| self.partial_end_on_object_tier(i, off, end))
    }

    /// Whether a truncate of `ino` to `size` may wait on an object store:
    /// it shortens the file to a size inside a block mapped to an object
    /// tier (the kept part of the block is read and rewritten), or the inode
    /// lock is busy. False at once for pools without an object tier.
    pub fn truncate_may_wait_on_network(&self, ino: Ino, size: u64) -> bool {
        if !self.has_object_tier() {
            return false;
        }
        self.may_wait(ino, |i| self.cut_on_object_tier(i, size))
    }

    /// Whether an fsync of `ino` may wait on an object store: the file has
    /// pages in the DRAM cache, whose write-back may go to an object tier
    /// (a rule pinning the file there, or a spill) and then uploads before
    /// the fsync returns; or the inode lock is busy. False at once for pools
    /// without an object tier.
    pub fn fsync_may_wait_on_network(&self, ino: Ino) -> bool {
        if !self.has_object_tier() {
            return false;
        }
        self.may_wait(ino, |i| !i.dirty.is_empty())
    }

    /// Whether `copy_file_range` of `len` bytes from `src` at `src_off` to
    /// `dst` at `dst_off` may wait on an object store: the source range (up
    /// to the source's size) maps to an object tier, or a partial end block
    /// of the destination range does (as for a write), or either inode lock
    /// is busy. False at once for pools without an object tier.
    pub fn copy_may_wait_on_network(
        &self,
        src: Ino,
        src_off: u64,
        dst: Ino,
        dst_off: u64,
        len: u64,
    ) -> bool {
        if !self.has_object_tier() || len == 0 {
            return false;
        }
        let len = len.min(COPY_MAX_BYTES);
        let copied = match self.peek(src, |i| {
            let n = i.size().saturating_sub(src_off).min(len);
            (n, self.maps_to_object_tier(i, src_off, src_off + n))
        }) {
            Peek::Busy | Peek::Found((_, true)) => return true,
            Peek::Gone => return false,
            Peek::Found((n, false)) => n,
        };
        if copied == 0 {
            return false;
        }
        let end = dst_off.saturating_add(copied);
        self.may_wait(dst, |i| self.partial_end_on_object_tier(i, dst_off, end))
    }

    /// Brings the partial end blocks of a change of bytes `[off, end)` of
    /// `ino` that are on an object tier into the DRAM cache before the
    /// change takes the inode lock ([`Fs::warm_block`]): a write or a
    /// truncate then waits on the store without holding the lock, so that
    /// `stat`, listings with attributes and other requests for the file are
    /// not held up by it. A no-op on pools without an object tier.
    pub(crate) fn warm_partial_ends(&self, ino: Ino, off: u64, end: u64) {
        if !self.has_object_tier() {
            return;
        }
        let head = (off % BS != 0).then_some(off / BS);
        let tail = (end % BS != 0 && Some(end / BS) != head).then_some(end / BS);
        for fb in [head, tail].into_iter().flatten() {
            self.warm_block(ino, fb, |i| self.block_on_object_tier(i, fb));
        }
    }

    /// [`Fs::warm_partial_ends`] for a truncate of `ino` to `size`: the
    /// block it cuts inside, when it is on an object tier.
    pub(crate) fn warm_cut_block(&self, ino: Ino, size: u64) {
        if self.has_object_tier() {
            self.warm_block(ino, size / BS, |i| self.cut_on_object_tier(i, size));
        }
    }

    /// Runs `f` while holding the inode lock of `ino` (ENOENT when there
    /// is no such inode): for tests of what the predicates above answer
    /// while another request holds the lock.
    #[doc(hidden)]
    pub fn with_inode_locked<T>(
        &self,
        ino: Ino,
        f: impl FnOnce() -> T,
    ) -> crate::types::FsResult<T> {
        let _g = self.lock(ino)?;
        Ok(f())
    }

    /// Whether the pool has an object tier.
    pub(crate) fn has_object_tier(&self) -> bool {
        self.tiers.iter().any(|t| t.kind == TierKind::S3)
    }

    /// Whether `tier` is an object tier.
    pub(crate) fn is_object_tier(&self, tier: terrace_format::TierId) -> bool {
        self.tiers
            .iter()
            .any(|t| t.id == tier && t.kind == TierKind::S3)
    }

    /// Looks at the live inode `ino` with `f` if its lock is free.
    fn peek<T>(&self, ino: Ino, f: impl FnOnce(&Inode) -> T) -> Peek<T> {
        let Some(slot) = self.table.get(ino) else {
            return Peek::Gone;
        };
        let Some(g) = slot.try_lock() else {
            return Peek::Busy;
        };
        match g.as_ref() {
            Some(i) if !i.zombie || i.open_count > 0 || i.lookups > 0 => Peek::Found(f(i)),
            _ => Peek::Gone,
        }
    }

    /// `f` of the inode, true when its lock is busy, false when it is gone.
    fn may_wait(&self, ino: Ino, f: impl FnOnce(&Inode) -> bool) -> bool {
        match self.peek(ino, f) {
            Peek::Busy => true,
            Peek::Gone => false,
            Peek::Found(w) => w,
        }
    }

    /// Whether part of bytes `[off, end)` of `i` maps to an object tier.
    fn maps_to_object_tier(&self, i: &Inode, off: u64, end: u64) -> bool {
        if end <= off {
            return false;
        }
        let first = off / BS;
        let n = end.div_ceil(BS) - first;
        i.extents
            .overlaps(terrace_format::FileBlock(first), n)
            .iter()
            .any(|(_, e)| self.is_object_tier(e.tier))
    }

    /// Whether file block `fb` of `i` is inside the file and maps to an
    /// object tier (reading it may wait on the store).
    fn block_on_object_tier(&self, i: &Inode, fb: u64) -> bool {
        fb * BS < i.size() && self.maps_to_object_tier(i, fb * BS, fb * BS + 1)
    }

    /// Whether a truncate of `i` to `size` cuts inside a block on an object
    /// tier (and so reads it).
    fn cut_on_object_tier(&self, i: &Inode, size: u64) -> bool {
        size < i.size() && size % BS != 0 && self.block_on_object_tier(i, size / BS)
    }

    /// Whether a change of bytes `[off, end)` of `i` must read a partial end
    /// block that maps to an object tier.
    fn partial_end_on_object_tier(&self, i: &Inode, off: u64, end: u64) -> bool {
        (off % BS != 0 && self.block_on_object_tier(i, off / BS))
            || (end % BS != 0 && self.block_on_object_tier(i, end / BS))
    }
}
