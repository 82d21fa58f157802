//! Reads: `Fs::read` and the locked read other operations use
//! (`read_locked`), with access-time rules.
//!
//! A read captures under the inode lock where each block lives (PM data and
//! dirty cached pages are copied then) and reads block-tier runs after the
//! lock is dropped, under a read pin that keeps their blocks from being
//! freed meanwhile (`read_pins`, design.md §4a): readers of one file do not
//! queue behind each other's device reads, and a read returns the file as
//! of its capture.

use crate::extent_map::Released;
use crate::fs::{now_ns, Fs};
use crate::inode::Inode;
use crate::types::*;
use std::sync::atomic::Ordering;
use terrace_format::{Entry, FileBlock, PhysBlock, TierId, BLOCK_SIZE};

const BS: u64 = BLOCK_SIZE;

impl Fs {
    /// Reads up to `size` bytes at `off` (short at end of file).
    ///
    /// Where each block lives is captured under the inode lock (PM data is
    /// copied then); block-tier blocks are read after the lock is dropped,
    /// under a read pin that keeps them from being freed meanwhile
    /// (`read_pins`), so readers of one file do not queue behind each
    /// other's device reads. The result is the file as of the capture.
    pub fn read(&self, ino: Ino, off: u64, size: usize) -> FsResult<Vec<u8>> {
        self.read_touching(ino, off, size, true)
    }

    /// [`Fs::read`] through an open made with `O_NOATIME`: the access time
    /// stays as it is (backup tools read so).
    pub fn read_noatime(&self, ino: Ino, off: u64, size: usize) -> FsResult<Vec<u8>> {
        self.read_touching(ino, off, size, false)
    }

    fn read_touching(&self, ino: Ino, off: u64, size: usize, atime: bool) -> FsResult<Vec<u8>> {
        let mut g = self.lock(ino)?;
        let i = g.as_mut().expect("live");
        i.kind.require_regular(libc::EINVAL)?;
        if i.data_refused() {
            return Err(errno(libc::EIO));
        }
        let capture = self.capture_read(i, off, size)?;
        let len = capture.out.len() as u64;
        i.io_mut().access.record(off, len, false);
        if !self.tiers.is_empty() && len > 0 {
            // Reverse-migration heat: blocks of this read that live on a block tier.
            let fb = off / BS;
            let n = (off + len).div_ceil(BS) - fb;
            let (mut on_block, mut clean, mut dirty) = (0, 0, 0);
            for (_, e) in i.extents.overlaps(FileBlock(fb), n) {
                match (e.tier, e.copy) {
                    (TierId::PM, Some(_)) => clean += e.blocks,
                    (TierId::PM, None) => dirty += e.blocks,
                    _ => on_block += e.blocks,
                }
            }
            i.block_reads += on_block;
            self.note_pm_hits(clean, dirty);
        }
        if atime {
            self.note_access_time(i);
        }
        let data = self.finish_read_unlocking(g, capture)?;
        self.counters.reads.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes_read
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        Ok(data)
    }

    /// Reads up to `size` bytes at `off` of `ino` for a copy kept outside
    /// the pool (the FUSE adapter filling the kernel's page cache after a
    /// writer closed the file): the file as of the capture, like
    /// [`Fs::read`], but not a read by an application — no access time,
    /// no access trace or read heat, no read counters, no read-ahead.
    pub fn read_for_cache(&self, ino: Ino, off: u64, size: usize) -> FsResult<Vec<u8>> {
        let g = self.lock(ino)?;
        let i = g.as_ref().expect("live");
        i.kind.require_regular(libc::EINVAL)?;
        if i.data_refused() {
            return Err(errno(libc::EIO));
        }
        let mut capture = self.capture_read(i, off, size)?;
        capture.ahead.clear();
        self.finish_read_unlocking(g, capture)
    }

    /// Counts bytes read with [`Fs::read_for_cache`] that the caller stored
    /// into its cache (`stored`), and whether that store ended a fill of the
    /// whole file (`whole`): `terrace status` shows both.
    pub fn note_cache_fill(&self, stored: u64, whole: bool) {
        self.counters
            .cache_fill_bytes
            .fetch_add(stored, Ordering::Relaxed);
        if whole {
            self.counters.cache_fills.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// [`Fs::finish_read`] of a capture made under the inode lock `g`: with
    /// the lock dropped, under a read pin when block-tier runs are read (or
    /// under the lock when frees are waiting for pinned readers).
    fn finish_read_unlocking<G>(&self, g: G, capture: ReadCapture) -> FsResult<Vec<u8>> {
        let free = |runs: Vec<Released>| self.free_block_runs(runs);
        if capture.pieces.is_empty() {
            drop(g);
            self.finish_read(capture)
        } else if let Some(pin) = self.read_pins.enter(&free) {
            drop(g);
            let r = self.finish_read(capture);
            drop(pin);
            r
        } else {
            // Frees are waiting for pinned readers: read under the lock.
            let r = self.finish_read(capture);
            drop(g);
            r
        }
    }

    /// Updates the access time of `ino` if a read now must (the mount's
    /// atime rule), as the first read of an open would: for an open whose
    /// reads the kernel will serve from pages it already holds.
    pub fn touch_atime(&self, ino: Ino) -> FsResult<()> {
        let mut g = self.lock(ino)?;
        let i = g.as_mut().expect("live");
        self.note_access_time(i);
        Ok(())
    }

    /// Updates the access time of a locked inode when a read now must.
    fn note_access_time(&self, i: &mut Inode) {
        let now = now_ns();
        let a = i.attr;
        if crate::inode_flags::atime_updates(i) && self.atime_due([a.atime, a.mtime, a.ctime], now)
        {
            if i.log.on_tier.is_some() {
                // A cold file whose log is on a block tier: recalling the
                // log for an access time would bring every file read once
                // after a change back to PM. Kept in DRAM (as Linux's
                // lazytime) until the next commit, log move or unmount.
                i.attr.atime = now;
                i.lazy_atime = true;
            } else {
                let mut na = a;
                na.atime = now;
                let _ = self.commit_one(i, vec![Entry::Attr(na)]);
            }
        }
    }

    /// Reads file block `fb` of `ino` into the DRAM cache when `wanted` says
    /// (under the inode lock) that it should, fetching it with the lock
    /// dropped, as [`Fs::read`] does (under a read pin). For a change that
    /// will read the block under the inode lock (the partial block of a
    /// write or a truncate): when the block is on an object tier, the wait
    /// on the store then comes before the change takes the lock, and other
    /// requests for the file go on meanwhile. Nothing happens when frees
    /// wait for pinned readers (the change reads the block itself); errors
    /// are left to the change.
    pub(crate) fn warm_block(&self, ino: Ino, fb: u64, wanted: impl FnOnce(&Inode) -> bool) {
        let free = |runs: Vec<Released>| self.free_block_runs(runs);
        let Ok(g) = self.lock(ino) else { return };
        let Some(i) = g.as_ref() else { return };
        if !wanted(i) {
            return;
        }
        let Ok(mut capture) = self.capture_read(i, fb * BS, BS as usize) else {
            return;
        };
        // A change's one block: nothing fetched ahead for it.
        capture.ahead.clear();
        if capture.pieces.is_empty() {
            return;
        }
        if let Some(pin) = self.read_pins.enter(&free) {
            drop(g);
            let _ = self.finish_read(capture);
            drop(pin);
        };
    }

    /// Whether a read now must update the access time of a file with
    /// `[atime, mtime, ctime]` (ns): relatime — once after each change, or
    /// once a day; strictatime — on every read; noatime — never.
    fn atime_due(&self, [atime, mtime, ctime]: [i64; 3], now: i64) -> bool {
        match *self.atime.read() {
            crate::fs::AtimeMode::Never => false,
            crate::fs::AtimeMode::Strict => true,
            crate::fs::AtimeMode::Relative => {
                atime <= mtime || atime <= ctime || now - atime > 86_400_000_000_000
            }
        }
    }

    /// Whether the next read of `ino` must update its access time (see
    /// [`Fs::read`]): a reader through the kernel's page cache lets that
    /// read reach the daemon (false for a file that does not exist).
    pub fn atime_due_now(&self, ino: Ino) -> bool {
        let Ok(g) = self.lock(ino) else { return false };
        let i = g.as_ref().expect("live");
        let a = i.attr;
        crate::inode_flags::atime_updates(i)
            && self.atime_due([a.atime, a.mtime, a.ctime], now_ns())
    }

    /// Reads from a locked inode without side effects (dirty cached pages
    /// included).
    pub(crate) fn read_locked(&self, i: &Inode, off: u64, size: usize) -> FsResult<Vec<u8>> {
        let mut capture = self.capture_read(i, off, size)?;
        // Only `Fs::read` fetches ahead in the background.
        capture.ahead.clear();
        self.finish_read(capture)
    }

    /// The part of a read done under the inode lock: PM data and holes
    /// copied into the result, block-tier runs and dirty cached pages noted
    /// to be read and laid over it by [`Fs::finish_read`].
    fn capture_read(&self, i: &Inode, off: u64, size: usize) -> FsResult<ReadCapture> {
        let fsize = i.size();
        // Background read-ahead of an object tier's next windows only for a
        // file its access class calls sequential: a reader at random (or
        // one not yet classed) never has it.
        let sequential = i.access_class() == terrace_policy::AccessClass::Sequential;
        let mut c = ReadCapture {
            ino: i.ino,
            end: off,
            out: Vec::new(),
            pieces: Vec::new(),
            overlay: Vec::new(),
            // A miss on a block tier reads ahead a whole read unit, except
            // for a file read at random (its access class), which gets what
            // it asked for: reading ahead there only costs device time.
            read_ahead: i.access_class() != terrace_policy::AccessClass::Random,
            ahead: Vec::new(),
        };
        if off >= fsize {
            return Ok(c);
        }
        let end = (off + size as u64).min(fsize);
        if sequential {
            c.ahead = self.object_ahead_runs(i, end);
        }
        c.end = end;
        c.out = vec![0u8; (end - off) as usize];
        let mut pos = off;
        while pos < end {
            let fb = FileBlock::containing(pos);
            match i.extents.find(fb) {
                Some((s, e)) => {
                    let run_end = (s + e.blocks).byte_offset().min(end);
                    let at = (pos - off) as usize;
                    let len = (run_end - pos) as usize;
                    let block = e.block + (fb - s);
                    if e.tier.is_pm() {
                        let out = &mut c.out[at..at + len];
                        self.read_data(i.ino, TierId::PM, block, pos % BS, out)?;
                    } else {
                        c.pieces.push(BlockPiece {
                            tier: e.tier,
                            block,
                            left: s + e.blocks - fb,
                            off_in_block: pos % BS,
                            at,
                            len,
                        });
                    }
                    pos = run_end;
                }
                None => {
                    let next = i
                        .extents
                        .next_start_after(fb)
                        .map(FileBlock::byte_offset)
                        .unwrap_or(end);
                    pos = next.min(end).max(pos + 1);
                    // Holes read as the zeros `out` already holds.
                }
            }
        }
        for (&fb, p) in i
            .dirty
            .range(FileBlock::containing(off)..=FileBlock::containing(end - 1))
        {
            let pstart = fb.byte_offset();
            let from = off.max(pstart);
            let to = end.min(pstart + BS);
            c.overlay.push((
                (from - off) as usize,
                p.data[(from - pstart) as usize..(to - pstart) as usize].to_vec(),
            ));
        }
        Ok(c)
    }

    /// The rest of a read: block-tier runs, then the dirty cached pages over
    /// them. Needs no inode lock when a read pin keeps the runs' blocks
    /// from being freed (see [`Fs::read`]).
    fn finish_read(&self, c: ReadCapture) -> FsResult<Vec<u8>> {
        let ReadCapture {
            ino,
            mut out,
            pieces,
            overlay,
            read_ahead,
            ahead,
            end,
        } = c;
        let mut object_miss = false;
        for p in pieces {
            object_miss |= self.read_block_tier(
                ino,
                p.tier,
                (p.block, p.left),
                p.off_in_block,
                &mut out[p.at..p.at + p.len],
                read_ahead,
            )?;
        }
        if object_miss && !ahead.is_empty() {
            // A sequential reader's miss on an object tier: the windows
            // after this read are fetched meanwhile.
            self.object_read_ahead(&ahead, end);
        }
        for (at, bytes) in overlay {
            out[at..at + bytes.len()].copy_from_slice(&bytes);
        }
        Ok(out)
    }
}

/// A block-tier run of a read, captured under the inode lock.
struct BlockPiece {
    tier: TierId,
    /// Physical block of the read's first block in this run.
    block: PhysBlock,
    /// Blocks of the extent from `block` on (the read-ahead bound).
    left: u64,
    off_in_block: u64,
    /// Where the run goes in the result, and its length.
    at: usize,
    len: usize,
}

/// What [`Fs::capture_read`] saw: the result with PM data and holes filled,
/// the block-tier runs still to read, the dirty cached pages to lay over
/// them (copied), whether misses read ahead, and whether an object tier's
/// next windows are fetched in the background (a sequential file).
struct ReadCapture {
    /// The file read (named by a checksum mismatch's log line).
    ino: Ino,
    out: Vec<u8>,
    pieces: Vec<BlockPiece>,
    overlay: Vec<(usize, Vec<u8>)>,
    read_ahead: bool,
    /// Where the read ends (the file's end at most).
    end: u64,
    /// For a sequential file: the object-tier runs after the read that a
    /// miss fetches ahead ([`Fs::object_ahead_runs`]).
    ahead: Vec<crate::data::AheadRun>,
}
