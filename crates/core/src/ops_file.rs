//! Data and attribute operations: open, write, fsync, setattr (truncate),
//! statfs (fallocate: `ops_fallocate.rs`; reads: `ops_read.rs`; extended
//! attributes: `ops_xattr.rs`).
//!
//! Writes are copy-on-write: new data goes to freshly allocated blocks, partial
//! first and last blocks are merged with the old content, and one log commit
//! (one tail store — the commit point) publishes all the write entries of the
//! call together with the new size and mtime. The old blocks are freed after the
//! commit. So every write() is atomic, and durable when it returns. (On a
//! pool with no room for a copy, a write over preallocated zeros goes into
//! their blocks instead, atomically too: `ops_prealloc_write.rs`.)
//!
//! Invariant: bytes of a mapped block past the file size read as zero (truncate
//! and hole punching zero the partial block they cut).

use crate::data::DataRuns;
use crate::fs::{now_ns, Fs};
use crate::inode::Inode;
use crate::placement_stats::{Landing, WriteClass};
use crate::types::*;
use std::sync::atomic::Ordering;
use terrace_format::{Entry, FileBlock, TierId, WriteEntry, BLOCK_SIZE};

/// The time a write stamps on its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stamp {
    /// The daemon's clock.
    Now,
    /// The file's mtime as it is: the kernel keeps the times and sends its
    /// own ([`Fs::write_back_kernel_pages`]).
    Kept,
}

impl Stamp {
    /// The time the write's entries carry (its mtime and ctime) for file
    /// `i`, `now` being the daemon's clock.
    pub(crate) fn time(self, i: &Inode, now: i64) -> i64 {
        match self {
            Stamp::Now => now,
            Stamp::Kept if i.dirty.is_empty() => i.attr.mtime,
            Stamp::Kept => i.attr.mtime.max(i.cached_mtime),
        }
    }
}

/// Largest file size: ext4's with 4 KiB blocks (its `s_maxbytes`, 2^32 - 1
/// blocks: 16 TiB less 4 KiB). A write or copy that would pass it does
/// what fits; EFBIG only when nothing does.
pub const MAX_FILE_SIZE: u64 = (1 << 44) - BLOCK_SIZE;
const BS: u64 = BLOCK_SIZE;

/// One write entry per run of `d`, covering file blocks from `first` on.
fn write_entries(
    d: &DataRuns,
    first: FileBlock,
    counter: u8,
    size_after: u64,
    mtime: i64,
) -> Vec<Entry> {
    let mut fb = first;
    d.runs
        .iter()
        .map(|&(b, n)| {
            let e = Entry::Write(WriteEntry {
                file_block: fb,
                blocks: n as u32,
                tier: d.tier,
                size_counter: counter,
                wflags: 0,
                block: b,
                size_after,
                mtime,
            });
            fb += n;
            e
        })
        .collect()
}

pub use crate::ops_xattr::{XATTR_CREATE, XATTR_REPLACE};

impl Fs {
    /// Attributes of an inode.
    pub fn getattr(&self, ino: Ino) -> FsResult<Attr> {
        Ok(self.lock(ino)?.as_ref().expect("live").stat())
    }

    /// Opens an inode; returns a handle number. `flags` are open(2) flags.
    pub fn open(&self, ino: Ino, flags: i32) -> FsResult<u64> {
        let mut g = self.lock(ino)?;
        let i = g.as_mut().expect("live");
        let acc = flags & libc::O_ACCMODE;
        if i.kind == FileType::Directory && (acc != libc::O_RDONLY || flags & libc::O_TRUNC != 0) {
            return Err(errno(libc::EISDIR));
        }
        crate::inode_flags::check_open(i, flags)?;
        if acc != libc::O_RDONLY || flags & libc::O_TRUNC != 0 {
            self.refuse_if_read_only()?;
        }
        if i.damaged && i.kind != FileType::Directory {
            // A read-only mount's quarantined inode: its data may be
            // incomplete (`Inode::damaged`).
            return Err(errno(libc::EIO));
        }
        i.open_count += 1;
        Ok(self.next_fh.fetch_add(1, Ordering::Relaxed))
    }

    /// Closes a handle; frees an unlinked inode on its last close.
    pub fn release(&self, ino: Ino) -> FsResult<()> {
        let Some(slot) = self.table.get(ino) else {
            return Err(errno(libc::EBADF));
        };
        let mut g = slot.lock();
        let Some(i) = g.as_mut() else {
            return Err(errno(libc::EBADF));
        };
        i.open_count = i.open_count.saturating_sub(1);
        if i.open_count == 0 && i.attr.nlink == 0 && !i.zombie {
            // Commit point of freeing an unlinked-while-open inode: its state word.
            self.journal
                .commit(&*self.media, &[(self.state_word(ino), 0)]);
            self.release_inode_space(i);
            if i.lookups == 0 {
                *g = None;
                drop(g);
                self.release_slot(ino);
            } else {
                self.make_zombie(i);
            }
        }
        Ok(())
    }

    /// Writes `data` at `off`; returns the bytes written (all of them).
    pub fn write(&self, ino: Ino, off: u64, data: &[u8]) -> FsResult<usize> {
        self.write_hinted(ino, off, data, false)
    }

    /// [`Fs::write`] on a file opened with `O_SYNC`/`O_DSYNC` when `o_sync`
    /// (the synchronicity predictor treats such writes as synchronous).
    ///
    /// Placement: the predictors and the placement policy choose PM or a block
    /// tier. Block-tier writes go to the DRAM cache (written back later, or
    /// before returning when the write is synchronous); so do writes that do
    /// not fit in PM any more. PM writes are copy-on-write and committed here.
    ///
    /// All or nothing: ENOSPC (after waiting for moves in flight and dropping
    /// PM copies of clean data, see [`Fs::retry_freeing_room`]) leaves the
    /// file as it was.
    pub fn write_hinted(&self, ino: Ino, off: u64, data: &[u8], o_sync: bool) -> FsResult<usize> {
        self.refuse_if_read_only()?;
        self.write_from(ino, off, data, o_sync, true, Stamp::Now)
    }

    /// [`Fs::write_hinted`] of pages the kernel cached and writes back now
    /// (dirty pages of a shared mapping, or every cached write under the
    /// writeback cache): their `write()`s or stores were acknowledged
    /// before, so an immutable flag set since does not refuse them
    /// (`inode_flags.rs`); dropping them would lose acknowledged data.
    ///
    /// `kernel_times`: the kernel keeps the file's mtime and ctime itself
    /// (the writeback cache) and sends them when it changes them; the
    /// write-back then leaves the file's times as they are instead of
    /// stamping its own clock, which the kernel would never learn of. It
    /// does not send them when its write fell in the tick the file was
    /// created in, and the times read after a remount differed from those
    /// read before (xfstests generic/003 under `-o writeback_cache`).
    pub fn write_back_kernel_pages(
        &self,
        ino: Ino,
        off: u64,
        data: &[u8],
        o_sync: bool,
        kernel_times: bool,
    ) -> FsResult<usize> {
        self.refuse_if_read_only()?;
        let stamp = if kernel_times {
            Stamp::Kept
        } else {
            Stamp::Now
        };
        self.write_from(ino, off, data, o_sync, false, stamp)
    }

    /// [`Fs::write_hinted`]; `new_change`: the write comes from the
    /// application now (the inode flags may refuse it).
    fn write_from(
        &self,
        ino: Ino,
        off: u64,
        data: &[u8],
        o_sync: bool,
        new_change: bool,
        stamp: Stamp,
    ) -> FsResult<usize> {
        // A write that would pass the largest file size writes what fits
        // (POSIX); EFBIG only when nothing does.
        let fits = MAX_FILE_SIZE.saturating_sub(off);
        if fits == 0 && !data.is_empty() {
            return Err(errno(libc::EFBIG));
        }
        let data = &data[..data.len().min(usize::try_from(fits).unwrap_or(usize::MAX))];
        // Partial blocks on an object tier are fetched before the inode
        // lock is taken (design.md §5n "Network faults").
        self.warm_partial_ends(ino, off, off.saturating_add(data.len() as u64));
        let blocks = (data.len() as u64).div_ceil(BS) + 1;
        let r = self.retry_freeing_room(blocks, || {
            self.write_once(ino, off, data, o_sync, new_change, stamp)
        });
        // No room for a copy: a write over preallocated zeros goes into
        // their blocks (fallocate's promise, `ops_prealloc_write.rs`).
        let r = match r {
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => self
                .write_into_preallocated(ino, off, data, new_change, stamp)
                .and_then(|done| done.ok_or(e)),
            r => r,
        };
        self.say_room(&r, blocks);
        let n = r?;
        // A synchronous write is durable when it returns: on PM that needs
        // an msync (a file-backed PM tier), its fences did that, and their
        // failure is reported here, not left to a later fsync.
        if !self.media.fence_is_durable() && (o_sync || self.inode_writes_sync(ino)) {
            self.media.fence_error()?;
        }
        Ok(n)
    }

    /// An append-only file (`chattr +a`) only grows: EPERM for a write that
    /// would change a byte below its size. The kernel cannot enforce this
    /// for a FUSE file (it never marks FUSE inodes append-only): a
    /// descriptor whose O_APPEND an `fcntl` cleared, or a shared writable
    /// mapping, reached the file with writes below its end and overwrote
    /// it. Bytes below the size that a write leaves as they are pass: the
    /// kernel writes back whole pages, so an append through its page cache
    /// (a mapping, the writeback cache) starts with the old bytes of the
    /// last page.
    pub(crate) fn check_append_only_write(&self, i: &Inode, off: u64, data: &[u8]) -> FsResult<()> {
        if !crate::inode_flags::append_only(i) || off >= i.size() {
            return Ok(());
        }
        let below = (i.size() - off).min(data.len() as u64) as usize;
        if self.read_locked(i, off, below)? != data[..below] {
            return Err(errno(libc::EPERM));
        }
        Ok(())
    }

    /// Whether `ino` has `chattr +S` (every write synchronous).
    fn inode_writes_sync(&self, ino: Ino) -> bool {
        self.lock(ino)
            .ok()
            .and_then(|g| g.as_deref().map(crate::inode_flags::writes_sync))
            .unwrap_or(false)
    }

    /// One try of [`Fs::write_from`].
    fn write_once(
        &self,
        ino: Ino,
        off: u64,
        data: &[u8],
        o_sync: bool,
        new_change: bool,
        stamp: Stamp,
    ) -> FsResult<usize> {
        self.wait_for_pm_room();
        let mut g = self.lock(ino)?;
        let i = g.as_mut().expect("live");
        i.kind.require_regular(libc::EINVAL)?;
        if new_change {
            crate::inode_flags::check_write(i)?;
        }
        // `chattr +S`: every write as if the file were opened O_SYNC.
        let o_sync = o_sync || crate::inode_flags::writes_sync(i);
        if data.is_empty() {
            return Ok(0);
        }
        let end = off
            .checked_add(data.len() as u64)
            .ok_or_else(|| errno(libc::EFBIG))?;
        if end > MAX_FILE_SIZE {
            return Err(errno(libc::EFBIG));
        }
        self.check_append_only_write(i, off, data)?;
        let now = now_ns();
        // The time the write's entries carry (its mtime and ctime).
        let mtime = stamp.time(i, now);
        let fb0 = FileBlock::containing(off);
        let fb1 = FileBlock::containing(end - 1);
        let nblocks = fb1 - fb0 + 1;
        // Ziggurat's predictors, then the placement policy.
        let (sync_params, size_params, sync_window_ns, bulk_pm_percent, mig_params) = {
            let st = self.settings.read();
            (
                st.sync_params(),
                st.size_params(),
                st.placement_sync_window_ns,
                st.placement_bulk_pm_percent,
                st.migration_params(),
            )
        };
        // The entry this write overwrites: a cached write (its pages carry its
        // counter; taken as covering this write's range) or a committed one.
        let prev = [fb0, fb0 + nblocks / 2].iter().find_map(|&b| {
            i.dirty
                .get(&b)
                .map(|p| (fb0, nblocks, p.counter))
                .or_else(|| i.extents.find(b).map(|(s, e)| (s, e.blocks, e.counter)))
        });
        let prev = prev.map(|(s, n, c)| (s.get(), n, c));
        let counter =
            terrace_policy::size_predictor::next_counter((fb0.get(), nblocks), prev, &size_params);
        let fresh_large = prev.is_none()
            && terrace_policy::size_predictor::is_large_fresh(data.len() as u64, &size_params);
        if !self.tiers.is_empty() {
            // NVMFS's split counts writes over PM data as hits on its list.
            let (mut clean, mut dirty) = (0, 0);
            for (_, e) in i.extents.overlaps(fb0, nblocks) {
                match (e.tier, e.copy) {
                    (TierId::PM, Some(_)) => clean += e.blocks,
                    (TierId::PM, None) => dirty += e.blocks,
                    _ => {}
                }
            }
            self.note_pm_write_hits(clean, dirty);
        }
        let io = i.io_mut();
        let synchronous =
            io.sync
                .on_write(data.len() as u64, now.max(0) as u64, o_sync, &sync_params);
        io.access.record(off, data.len() as u64, true);
        let now_u = now.max(0) as u64;
        let placement_stats = &self.counters.placement;
        if synchronous || o_sync {
            placement_stats.note_sync_write(now_u);
        }
        let pm_free = self.pm_data_free_bytes();
        let marks = self.pm_marks(&mig_params, bulk_pm_percent);
        let obs = terrace_policy::WriteObservation {
            synchronous,
            large: terrace_policy::size_predictor::is_large(counter, &size_params),
            fresh_large,
            pm_over_threshold: marks.over_threshold,
            pm_saturated: marks.forced,
            sync_writers_active: placement_stats.sync_writers_active(now_u, sync_window_ns),
            pm_over_bulk_limit: marks.over_bulk_limit,
            write_bytes: nblocks * BS,
            pm_free_bytes: pm_free,
            pm_below_forced_bytes: marks.below_forced_bytes,
            pm_capacity_bytes: self.alloc.total() * BS,
            first_block_tier: self.tiers.first().map(|t| t.id),
            rule: self
                .rule_of(i)
                .map(|tier| terrace_policy::TierRule::Pin { tier }),
            access: i.access_class(),
        };
        let class = WriteClass::of(obs.synchronous, obs.large || fresh_large, data.len() as u64);
        // `by_choice`: the policy sends the write to a block tier for its own
        // reasons, not only because PM has no room for it (that is an
        // overflow in `status`, whoever decided it). A write pinned to PM
        // that lands elsewhere (PM full, or past its forced mark) is an
        // overflow too: the rule asked for PM.
        let pinned_to_pm =
            matches!(obs.rule, Some(terrace_policy::TierRule::Pin { tier }) if tier.is_pm());
        let (want, by_choice) = {
            let policy = self.placement.read();
            let want = policy.place(&obs).tier();
            let roomy = terrace_policy::WriteObservation {
                pm_free_bytes: u64::MAX,
                ..obs
            };
            (
                want,
                !want.is_pm()
                    && !pinned_to_pm
                    && (obs.pm_has_room() || !policy.place(&roomy).tier().is_pm()),
            )
        };
        // PM use past the forced mark is the policy's to handle (load-aware
        // routing sends asynchronous writes down); here only a PM without
        // room for this write sends it to a block tier anyway.
        if obs.pm_saturated || pm_free < nblocks * BS {
            self.kick_migration();
        }
        let pm_full = pm_free < nblocks * BS;
        // A large asynchronous write to a file whose earlier writes wait in
        // the cache joins them there, even where the policy would take PM:
        // going to PM would first write the file's dirty pages back in this
        // request (`lock_clean`, per-file order), so a stream the policy
        // sends to PM and to the cache by turns (PM-first, migration freeing
        // PM behind it) paid a whole write-back per turn. The write-back
        // thread drains the cache; once the file has no dirty pages, the
        // policy decides again. Small writes, synchronous ones and those of
        // files pinned to PM still go where the policy says.
        let joins_cached = want.is_pm()
            && class == WriteClass::AsyncLarge
            && !(synchronous || o_sync || pinned_to_pm)
            && !i.dirty.is_empty();
        let by_choice = by_choice || (joins_cached && !pm_full);
        let to_cache = self.cache_takes_writes() && (!want.is_pm() || pm_full || joins_cached);
        if to_cache {
            drop(g);
            let bytes = nblocks * BS;
            let cached = self.cache_reserve(bytes)? && {
                let r = (|| {
                    let mut g = self.lock(ino)?;
                    let i = g.as_mut().expect("live");
                    self.write_cached(i, off, data, counter, mtime, bytes)
                })();
                if !matches!(r, Ok(true)) {
                    self.cache.unreserve(bytes);
                }
                r?
            };
            if cached {
                (if by_choice {
                    &self.counters.placed_block
                } else {
                    &self.counters.placement_overflows
                })
                .fetch_add(1, Ordering::Relaxed);
                self.counters.placement.note(
                    class,
                    if by_choice {
                        Landing::BlockChosen
                    } else {
                        Landing::BlockOverflow
                    },
                    data.len() as u64,
                );
                if synchronous || o_sync {
                    self.flush_inode(ino)?;
                }
                self.counters.writes.fetch_add(1, Ordering::Relaxed);
                self.counters
                    .bytes_written
                    .fetch_add(data.len() as u64, Ordering::Relaxed);
                return Ok(data.len());
            }
            // Larger than the cache can take, or no block tier left to write
            // it back to (the last one is being removed): write it through,
            // below.
            g = self.lock_clean(ino)?;
        } else if !g.as_ref().expect("live").dirty.is_empty() {
            // Cached writes of this file go to the log first (per-file order).
            drop(g);
            g = self.lock_clean(ino)?;
        }
        let i = g.as_mut().expect("live");
        let want = match (to_cache, want) {
            (true, TierId::PM) => self.tiers.first().map_or(TierId::PM, |t| t.id),
            _ => want,
        };
        let head = (off % BS) as usize;
        let mut buf = vec![0u8; (nblocks * BS) as usize];
        if head != 0 {
            let old = self.read_locked(i, fb0.byte_offset(), BS as usize)?;
            buf[..old.len()].copy_from_slice(&old);
        }
        if end % BS != 0 && (fb1 != fb0 || head == 0) {
            let old = self.read_locked(i, fb1.byte_offset(), BS as usize)?;
            let at = ((fb1 - fb0) * BS) as usize;
            buf[at..at + old.len()].copy_from_slice(&old);
        }
        buf[head..head + data.len()].copy_from_slice(data);
        // One tier when it has room; near a full pool the blocks may come
        // from several (the write still commits at once).
        let pieces = self.alloc_new_pieces(want, nblocks)?;
        let placed = if pieces[0].tier.is_pm() {
            &self.counters.placed_pm
        } else {
            &self.counters.placed_block
        };
        placed.fetch_add(1, Ordering::Relaxed);
        let landing = match (pieces[0].tier, by_choice) {
            (TierId::PM, _) => Landing::Pm,
            (_, false) => Landing::BlockOverflow,
            (_, true) => Landing::BlockChosen,
        };
        self.counters
            .placement
            .note(class, landing, data.len() as u64);
        let release = |pieces: Vec<DataRuns>| {
            for d in pieces {
                self.release_data(d);
            }
        };
        if let Err(e) = self.store_pieces(&pieces, &buf) {
            release(pieces);
            return Err(e);
        }
        let size_after = i.attr.size.max(end);
        let mut entries = Vec::new();
        let mut fb = fb0;
        for d in &pieces {
            entries.extend(write_entries(d, fb, counter, size_after, mtime));
            fb += d.runs.iter().map(|r| r.1).sum::<u64>();
        }
        if let Err(e) = self.commit_one(i, entries) {
            release(pieces);
            return Err(e);
        }
        self.counters.writes.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes_written
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        Ok(data.len())
    }

    /// True when `fsync` has nothing to do on this pool, ever: there is no
    /// block tier (so no DRAM cache holds dirty data; every write and every
    /// metadata operation is durable on PM when it returns, design.md §7)
    /// and the PM media needs no msync ([`PmMedia::fence_is_durable`]: DAX or
    /// tmpfs). It turns false when a tier is attached to the mounted pool;
    /// the kernel's flag does not, hence [`Fs::leave_fsync_to_kernel`]. The
    /// FUSE adapter then tells
    /// the kernel that fsync needs no request, which saves one round trip
    /// per `fsync`/`fdatasync`.
    ///
    /// [`PmMedia::fence_is_durable`]: terrace_media::PmMedia::fence_is_durable
    pub fn fsync_is_noop(&self) -> bool {
        self.tiers.is_empty() && self.media.fence_is_durable()
    }

    /// Called by the adapter before it answers an fsync ENOSYS (because
    /// [`Fs::fsync_is_noop`] held): the kernel completes every later fsync of
    /// the mount itself, without a request, until unmount — also after
    /// `terrace tier add` attached a block tier, when fsync would otherwise
    /// have cached pages to write back. So from here on the DRAM cache takes
    /// no writes ([`Fs::cache_takes_writes`]): every write is durable when
    /// it returns, as the kernel now assumes. Pages cached before the flag
    /// was set (a tier attached while this fsync ran) are written back here,
    /// before the reply. Remounting gives the cache back.
    pub fn leave_fsync_to_kernel(&self) -> FsResult<()> {
        {
            let _room = self.room_lock.lock();
            self.fsync_by_kernel
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
        if self.tiers.is_empty() {
            return Ok(());
        }
        self.flush_all()
    }

    /// Whether the kernel completes this mount's fsyncs itself
    /// ([`Fs::leave_fsync_to_kernel`]).
    pub fn fsync_left_to_kernel(&self) -> bool {
        self.fsync_by_kernel
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Makes an inode's data and metadata durable: writes back its cached
    /// pages (merged into large requests) and commits them; data on PM is
    /// durable when the write returns, so for it this only matters on media
    /// that need an msync.
    pub fn fsync(&self, ino: Ino, _datasync: bool) -> FsResult<()> {
        {
            let sync_params = self.settings.read().sync_params();
            let mut g = self.lock(ino)?;
            g.as_mut()
                .expect("live")
                .io_mut()
                .sync
                .on_fsync(now_ns().max(0) as u64, &sync_params);
        }
        self.flush_inode(ino)?;
        self.counters.fsyncs.fetch_add(1, Ordering::Relaxed);
        self.media.sync_all()
    }

    /// Copy-on-write of file block `fb` with bytes `[from, to)` of it zeroed.
    /// Returns the entry and the new block, or `None` when `fb` is a hole.
    pub(crate) fn zeroed_block(
        &self,
        i: &Inode,
        fb: FileBlock,
        from: usize,
        to: usize,
        size_after: u64,
        mtime: i64,
    ) -> FsResult<Option<(Entry, DataRuns)>> {
        if i.extents.find(fb).is_none() {
            return Ok(None);
        }
        let mut blk = self.read_locked(i, fb.byte_offset(), BS as usize)?;
        blk.resize(BS as usize, 0);
        blk[from..to].fill(0);
        let d = self.alloc_replacement_block()?;
        if let Err(e) = self.store_data(&d, &blk) {
            self.release_data(d);
            return Err(e);
        }
        let e = write_entries(&d, fb, 0, size_after, mtime).remove(0);
        Ok(Some((e, d)))
    }

    /// Rewrites the mapped partial blocks at the ends of the byte range
    /// `[off, end)` with their part of the range zeroed ([`Fs::zeroed_block`];
    /// one block when both ends fall in it), adding their entries and blocks
    /// to `entries` and `taken`. Returns whether the head block and the tail
    /// block were rewritten (a partial end in a hole needs nothing).
    pub(crate) fn zero_partial_ends(
        &self,
        i: &Inode,
        (off, end): (u64, u64),
        size_after: u64,
        mtime: i64,
        entries: &mut Vec<Entry>,
        taken: &mut Vec<DataRuns>,
    ) -> FsResult<(bool, bool)> {
        let (head, last) = (FileBlock::containing(off), FileBlock::containing(end - 1));
        let head_partial = off % BS != 0;
        let mut done = (false, false);
        if head_partial {
            let to = if head == last && end % BS != 0 {
                (end % BS) as usize
            } else {
                BS as usize
            };
            if let Some((e, b)) =
                self.zeroed_block(i, head, (off % BS) as usize, to, size_after, mtime)?
            {
                entries.push(e);
                taken.push(b);
                done.0 = true;
            }
        }
        // A partial last block other than the head block.
        if end % BS != 0 && !(head_partial && head == last) {
            if let Some((e, b)) =
                self.zeroed_block(i, last, 0, (end % BS) as usize, size_after, mtime)?
            {
                entries.push(e);
                taken.push(b);
                done.1 = true;
            }
        }
        Ok(done)
    }

    /// Where `n` preallocated (zero-filled) blocks of a file with placement
    /// rule `rule` go. Writes land in them only on a full pool
    /// (`ops_prealloc_write.rs`; otherwise a write takes new blocks), so
    /// on PM they would mostly take room: a range of
    /// at least a bulk write (`BULK_WRITE_BYTES`) goes to the first block
    /// tier, a smaller one to PM (as a small write would), and a pinned
    /// file's to its pinned tier.
    pub(crate) fn prealloc_tier(&self, rule: Option<TierId>, n: u64) -> TierId {
        match (rule, self.tiers.first()) {
            (Some(t), _) => t,
            (None, Some(t)) if n * BS >= terrace_policy::placement::BULK_WRITE_BYTES => t.id,
            _ => TierId::PM,
        }
    }

    /// Allocates `n` zero-filled blocks for file blocks `[fb, fb + n)` on
    /// tier `want` (near a full pool pieces may come from several tiers) and
    /// adds their write entries (size and mtime from `a`) to `entries`. Every
    /// piece taken is recorded in `taken`, to be released on error.
    pub(crate) fn zero_fill(
        &self,
        want: TierId,
        (mut fb, n): (FileBlock, u64),
        a: &terrace_format::AttrEntry,
        taken: &mut Vec<DataRuns>,
        entries: &mut Vec<Entry>,
    ) -> FsResult<()> {
        let zero = vec![0u8; (256 * BS) as usize];
        let mut need = n;
        while need > 0 {
            let chunk = need.min(256);
            let first = taken.len();
            taken.extend(self.alloc_new_pieces(want, chunk)?);
            for d in &taken[first..] {
                let k = d.runs.iter().map(|r| r.1).sum::<u64>();
                self.store_data(d, &zero[..(k * BS) as usize])?;
                // Zeros on a block tier carry no Sums entries: a fallocate
                // of the whole pool would otherwise need 4 bytes of PM log
                // per block in one commit.
                entries.extend(write_entries(d, fb, 0, a.size, a.mtime).into_iter().map(
                    |mut e| {
                        if let Entry::Write(w) = &mut e {
                            if !w.tier.is_pm() {
                                w.wflags |= terrace_format::WRITE_FLAG_ZEROED;
                            }
                        }
                        e
                    },
                ));
                fb += k;
            }
            need -= chunk;
        }
        Ok(())
    }

    /// Changes attributes (chmod, chown, truncate, utimes).
    pub fn setattr(&self, ino: Ino, s: SetAttr) -> FsResult<Attr> {
        self.refuse_if_read_only()?;
        if let Some(size) = s.size {
            // The block a cut inside it keeps part of, fetched before the
            // inode lock when it is on an object tier (design.md §5n).
            self.warm_cut_block(ino, size);
        }
        self.wait_for_pm_room();
        let mut g = if s.size.is_some() || s.mtime.is_some() {
            self.lock_clean(ino)?
        } else {
            self.lock(ino)?
        };
        let i = g.as_mut().expect("live");
        if i.zombie {
            return Ok(Fs::setattr_of_a_zombie(i, &s));
        }
        let touch_only = s.size.is_none()
            && s.mode.is_none()
            && s.uid.is_none()
            && s.gid.is_none()
            && !matches!(s.atime, Some(SetTime::At(_)))
            && !matches!(s.mtime, Some(SetTime::At(_)));
        crate::inode_flags::check_setattr(i, touch_only)?;
        let now = now_ns();
        let mut a = i.attr;
        let mut entries = Vec::new();
        let mut new_blocks = Vec::new();
        if let Some(size) = s.size {
            i.kind.require_regular(libc::EINVAL)?;
            if size > MAX_FILE_SIZE {
                return Err(errno(libc::EFBIG));
            }
            if size < a.size {
                let keep = size.div_ceil(BS);
                entries.push(Entry::Punch {
                    file_block: FileBlock(keep),
                    blocks: u64::MAX - keep,
                });
                if size % BS != 0 {
                    if let Some((e, b)) = self.zeroed_block(
                        i,
                        FileBlock::containing(size),
                        (size % BS) as usize,
                        BS as usize,
                        size,
                        now,
                    )? {
                        entries.push(e);
                        new_blocks.push(b);
                    }
                }
            }
            // At the same size, blocks preallocated past it (fallocate
            // KEEP_SIZE) go, as ext4's truncate frees them.
            let keep = size.div_ceil(BS);
            if size == a.size
                && (i.extents.find(FileBlock(keep)).is_some()
                    || i.extents.next_start_after(FileBlock(keep)).is_some())
            {
                entries.push(Entry::Punch {
                    file_block: FileBlock(keep),
                    blocks: u64::MAX - keep,
                });
            }
            // A truncate sets mtime (and ctime) even to the size the file
            // has, as ext4 does for `truncate(2)` and `ftruncate(2)` alike
            // (an explicit mtime given with it is set after).
            a.mtime = now;
            a.size = size;
        }
        set_mode_owner_and_times(&mut a, &s, now);
        if s.mode.is_some() {
            // chmod rewrites the access ACL in the same commit (`acl.rs`).
            if let Some(acl) = i
                .xattrs
                .get(crate::acl::ACL_ACCESS)
                .filter(|_| self.posix_acls_on())
                .and_then(|v| crate::acl::Acl::parse(v).ok())
            {
                let new = crate::acl::chmod(&acl, a.mode);
                entries.extend(crate::inode::xattr_entries(
                    crate::acl::ACL_ACCESS,
                    &new.encode(),
                ));
            }
        }
        // A truncate that shrinks may take PM's removal reserve (`space.rs`
        // rule 4): it frees room.
        let shrinks = a.size < i.attr.size;
        entries.push(Entry::Attr(a));
        let committed = if shrinks {
            self.commit_one_removal(i, entries)
        } else {
            self.commit_one(i, entries)
        };
        if let Err(e) = committed {
            for d in new_blocks {
                self.release_data(d);
            }
            return Err(e);
        }
        Ok(i.stat())
    }

    /// `setattr` of an inode unlinked while the kernel still holds it (a
    /// zombie: its slot is free on media, its space released): what can
    /// change changes in DRAM only, for `stat` through the kernel's
    /// reference; nothing is written, as nothing can find the inode after a
    /// crash. Under `-o writeback_cache` the kernel sends the times of every
    /// inode it evicts after an unlink; each such SETATTR used to commit to
    /// the zombie's log — a fresh page, recalled from a block tier if the
    /// log was there, that the forget then dropped with the slot: one small
    /// PM page leaked per deleted file until the next mount, and a pool
    /// whose PM was full could not be emptied (xfstests generic/416).
    fn setattr_of_a_zombie(i: &mut Inode, s: &SetAttr) -> Attr {
        set_mode_owner_and_times(&mut i.attr, s, now_ns());
        i.stat()
    }

    /// File system statistics.
    pub fn statfs(&self) -> StatFs {
        // A copy: the superblock is a leaf lock (design.md §4a).
        let sb = self.sb.lock().clone();
        let free_slots = self.free_slots.lock().len() as u64;
        let growth = self.inode_growth_room();
        // Every tier counts: `df` shows the pool, not its PM tier. Free space
        // on a tiered pool is what new data can still get (dirty cached pages
        // hold theirs already).
        let (blocks, bfree, bavail) = if self.tiers.is_empty() {
            // The metadata reserve is free but not available to data.
            let free = self.alloc.free();
            (
                sb.pool_blocks,
                free,
                free.saturating_sub(self.pm_reserve_blocks()),
            )
        } else {
            let cap: u64 = self.tiers.iter().map(|t| t.space.capacity_blocks()).sum();
            let room = self.data_room_blocks();
            (sb.pool_blocks + cap, room, room)
        };
        StatFs {
            blocks,
            bfree,
            bavail,
            // The table may still grow (`Fs::grow_inode_table`).
            files: (self.table.len() as u64 - 1).saturating_add(growth),
            ffree: free_slots.saturating_add(growth),
            bsize: BS as u32,
            namelen: terrace_format::NAME_MAX as u32,
        }
    }
}

/// What `setattr` changes besides the size: permission bits, owner, group,
/// the times it names (`now` for "set to now"), and ctime (the caller's, or
/// `now`).
fn set_mode_owner_and_times(a: &mut terrace_format::AttrEntry, s: &SetAttr, now: i64) {
    if let Some(m) = s.mode {
        a.mode = (a.mode & libc::S_IFMT) | (m & 0o7777);
    }
    a.uid = s.uid.unwrap_or(a.uid);
    a.gid = s.gid.unwrap_or(a.gid);
    match s.atime {
        Some(SetTime::Now) => a.atime = now,
        Some(SetTime::At(t)) => a.atime = t,
        None => {}
    }
    match s.mtime {
        Some(SetTime::Now) => a.mtime = now,
        Some(SetTime::At(t)) => a.mtime = t,
        None => {}
    }
    a.ctime = s.ctime.unwrap_or(now);
}
