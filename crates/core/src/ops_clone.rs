//! `copy_file_range`: the block-aligned part of a copy shares the source's
//! blocks (a clone: no data is read or written, the pool's free space does
//! not change); the rest is copied through reads and writes.
//!
//! A clone is one commit to the destination's log: a Punch of the
//! destination range, then Write entries flagged `WRITE_FLAG_SHARED` that
//! map it to the source's blocks, then the new attributes. Before the
//! commit, under the source's inode lock (so the blocks are live), every
//! block gains a reference (`shared.rs`); a failed commit takes them back.
//! After a crash the references are rebuilt from the logs, so the commit
//! point is the destination's tail store, as for a write: the copy is all
//! there or not at all.
//!
//! Data blocks are never written in place, so a later write to either file
//! goes to fresh blocks and drops one reference to the shared ones ("split
//! on the first write" needs no code of its own).

use crate::fs::{now_ns, Fs};
use crate::ops_file::MAX_FILE_SIZE;
use crate::types::*;
use terrace_format::{Entry, FileBlock, WriteEntry, BLOCK_SIZE, WRITE_FLAG_SHARED};

const BS: u64 = BLOCK_SIZE;

/// Most bytes one call copies (the FUSE reply counts in 32 bits; callers
/// loop on short counts, as for write).
pub const COPY_MAX_BYTES: u64 = 1 << 30;

/// Most source extents one clone maps (one commit); a copy of a more
/// fragmented range returns short.
pub const CLONE_MAX_EXTENTS: usize = 4096;

/// Bytes of one read-and-write step of a copy that cannot share blocks.
const COPY_CHUNK: u64 = 1 << 20;

/// How often a clone retries when the kernel keeps dirtying cached pages of
/// the two files between their write-back and the locks.
const CLEAN_LOCK_TRIES: usize = 8;

impl Fs {
    /// Per tier (0 = PM): blocks mapped by more than one extent, and the
    /// blocks that sharing saves (the extra mappings). Empty when nothing is
    /// shared.
    pub fn shared_block_stats(&self) -> std::collections::BTreeMap<u8, (u64, u64)> {
        self.shared
            .stats()
            .into_iter()
            .map(|(t, s)| (t.get(), s))
            .collect()
    }

    /// The other files that may share blocks with `ino` (its clone family,
    /// `clone_families.rs`), in no order.
    pub fn clone_family_of(&self, ino: Ino) -> Vec<Ino> {
        self.clone_families.others(ino)
    }

    /// Copies up to `len` bytes from `src` at `src_off` to `dst` at
    /// `dst_off` and returns how many it copied: fewer at the source's end
    /// (0 from there on) and past [`COPY_MAX_BYTES`] or
    /// [`CLONE_MAX_EXTENTS`]. Whole blocks are shared when both offsets are
    /// block-aligned; the destination's size grows to cover the copy.
    ///
    /// Errors as `copy_file_range(2)`: EISDIR or EINVAL for what is not a
    /// regular file, EINVAL for overlapping ranges of one file, EFBIG past
    /// the largest file size.
    pub fn copy_range(
        &self,
        src: Ino,
        src_off: u64,
        dst: Ino,
        dst_off: u64,
        len: u64,
    ) -> FsResult<u64> {
        self.refuse_if_read_only()?;
        let len = len.min(COPY_MAX_BYTES);
        if src == dst
            && src_off < dst_off.saturating_add(len)
            && dst_off < src_off.saturating_add(len)
        {
            return Err(errno(libc::EINVAL));
        }
        if len == 0 {
            return Ok(0);
        }
        // A source whose data fsck marked as maybe incomplete is read by
        // nothing, a copy included (it would copy its holes as zeros).
        if self.lock(src)?.as_ref().expect("live").data_refused() {
            return Err(errno(libc::EIO));
        }
        if src_off % BS == 0 && dst_off % BS == 0 {
            if let Some(done) = self.clone_blocks(src, src_off, dst, dst_off, len)? {
                return Ok(done);
            }
        }
        self.copy_bytes(src, src_off, dst, dst_off, len)
    }

    /// The clone of [`Fs::copy_range`]: shares whole blocks, then copies a
    /// partial last block unless it can share it too. `None` when there is
    /// nothing to share (copy it all).
    fn clone_blocks(
        &self,
        src: Ino,
        src_off: u64,
        dst: Ino,
        dst_off: u64,
        len: u64,
    ) -> FsResult<Option<u64>> {
        let mut tries = 0;
        let mut l = loop {
            self.flush_inode(src)?;
            self.flush_inode(dst)?;
            let mut l = self.lock_set(&[src, dst])?;
            if l.get(src).dirty.is_empty() && l.get(dst).dirty.is_empty() {
                break l;
            }
            tries += 1;
            if tries == CLEAN_LOCK_TRIES {
                return Ok(None);
            }
        };
        for ino in [src, dst] {
            l.get(ino).kind.require_regular(libc::EINVAL)?;
        }
        crate::inode_flags::check_write(l.get(dst))?;
        // An append-only file only grows (`Fs::check_append_only_write`).
        if crate::inode_flags::append_only(l.get(dst)) && dst_off < l.get(dst).attr.size {
            return Err(errno(libc::EPERM));
        }
        let src_size = l.get(src).attr.size;
        if src_off >= src_size {
            return Ok(Some(0));
        }
        // What would pass the largest file size is not copied (EFBIG only
        // when nothing fits), as `copy_file_range` on ext4.
        if dst_off >= MAX_FILE_SIZE {
            return Err(errno(libc::EFBIG));
        }
        let n = len.min(src_size - src_off).min(MAX_FILE_SIZE - dst_off);
        let dst_end = dst_off + n;
        // A partial last block is shared when it is the source's last block
        // and ends the destination too: its bytes past the size are zeros in
        // both (ops_file.rs invariant).
        let dst_size = l.get(dst).attr.size;
        let tail_shared = n % BS != 0 && src_off + n == src_size && dst_end >= dst_size;
        let mut blocks = n / BS + u64::from(tail_shared);
        if blocks == 0 {
            return Ok(None);
        }
        let (sfb, dfb) = (
            FileBlock::containing(src_off),
            FileBlock::containing(dst_off),
        );
        let mut parts = l.get(src).extents.overlaps(sfb, blocks);
        let mut copied = n;
        if parts.len() > CLONE_MAX_EXTENTS {
            parts.truncate(CLONE_MAX_EXTENTS);
            let (fb, e) = parts[CLONE_MAX_EXTENTS - 1];
            blocks = fb + e.blocks - sfb;
            copied = blocks * BS;
        }
        let shared_bytes = if copied == n && tail_shared {
            n
        } else {
            (copied / BS) * BS
        };
        let now = now_ns();
        let d = l.get(dst);
        let mut a = d.attr;
        a.size = a.size.max(dst_off + shared_bytes);
        a.mtime = now;
        a.ctime = now;
        let mut entries = vec![Entry::Punch {
            file_block: dfb,
            blocks,
        }];
        let mut runs = Vec::with_capacity(parts.len());
        for (fb, e) in parts {
            let mut off = 0;
            while off < e.blocks {
                let k = (e.blocks - off).min(u64::from(u32::MAX));
                entries.push(Entry::Write(WriteEntry {
                    file_block: dfb + (fb - sfb) + off,
                    blocks: k as u32,
                    tier: e.tier,
                    size_counter: e.counter,
                    wflags: WRITE_FLAG_SHARED,
                    block: e.block + off,
                    size_after: a.size,
                    mtime: now,
                }));
                off += k;
            }
            runs.push((e.tier, e.block, e.blocks));
        }
        entries.push(Entry::Attr(a));
        self.shared.add(&runs);
        if let Err(e) = self.commit_one(l.get(dst), entries) {
            // The source still maps every block: nothing is freed here.
            let _still_mapped = self.shared.release(runs);
            return Err(e);
        }
        // Before the locks go: a move of the source from now on looks for
        // its other owners in a family that has the destination.
        self.clone_families.join(src, dst);
        drop(l);
        let rest = copied - shared_bytes;
        if rest == 0 || copied < n {
            return Ok(Some(shared_bytes));
        }
        let more = self.copy_bytes(
            src,
            src_off + shared_bytes,
            dst,
            dst_off + shared_bytes,
            rest,
        )?;
        Ok(Some(shared_bytes + more))
    }

    /// Copies by reading and writing, [`COPY_CHUNK`] at a time, up to the
    /// source's size when it starts (as the VFS clamps a copy: a copy within
    /// one file that grows it does not copy what it wrote).
    fn copy_bytes(
        &self,
        src: Ino,
        src_off: u64,
        dst: Ino,
        dst_off: u64,
        len: u64,
    ) -> FsResult<u64> {
        let size = self.getattr(src)?.size;
        let len = len.min(size.saturating_sub(src_off));
        let mut done = 0;
        while done < len {
            let want = (len - done).min(COPY_CHUNK) as usize;
            let data = self.read(src, src_off + done, want)?;
            if data.is_empty() {
                break;
            }
            let n = match self.write(dst, dst_off + done, &data) {
                Ok(n) => n as u64,
                // What was copied stays copied, as a short write.
                Err(_) if done > 0 => break,
                Err(e) => return Err(e),
            };
            done += n;
            if n < data.len() as u64 {
                break;
            }
        }
        Ok(done)
    }
}
