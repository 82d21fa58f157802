//! fallocate: allocating, punching, zeroing, collapsing and inserting
//! ranges of a file, each one commit (`ops_file.rs` has the write path and
//! the block helpers both use; design.md §5t for the modes).

use crate::data::DataRuns;
use crate::fs::{now_ns, Fs};
use crate::ops_file::MAX_FILE_SIZE;
use crate::types::*;
use terrace_format::{Entry, FileBlock, BLOCK_SIZE};

const BS: u64 = BLOCK_SIZE;

impl Fs {
    /// Allocates or deallocates a byte range.
    ///
    /// All or nothing, like [`Fs::write_hinted`].
    pub fn fallocate(&self, ino: Ino, off: u64, len: u64, mode: FallocateMode) -> FsResult<()> {
        self.refuse_if_read_only()?;
        // A zeroed or punched partial block on an object tier is fetched
        // before the inode lock is taken (as for a write).
        self.warm_partial_ends(ino, off, off.saturating_add(len));
        let blocks = len.div_ceil(BS).saturating_add(2);
        let r = self.retry_freeing_room(blocks, || self.fallocate_once(ino, off, len, mode));
        self.say_room(&r, blocks);
        r
    }

    /// One try of [`Fs::fallocate`].
    fn fallocate_once(&self, ino: Ino, off: u64, len: u64, mode: FallocateMode) -> FsResult<()> {
        self.wait_for_pm_room();
        let mut g = self.lock_clean(ino)?;
        let i = g.as_mut().expect("live");
        i.kind.require_regular(libc::ENODEV)?;
        crate::inode_flags::check_fallocate(
            i,
            matches!(
                mode,
                FallocateMode::Allocate | FallocateMode::AllocateKeepSize
            ),
        )?;
        if len == 0 {
            return Err(errno(libc::EINVAL));
        }
        let end = off.checked_add(len).ok_or_else(|| errno(libc::EFBIG))?;
        if end > MAX_FILE_SIZE {
            return Err(errno(libc::EFBIG));
        }
        let now = now_ns();
        let mut a = i.attr;
        let mut entries = Vec::new();
        let mut taken: Vec<DataRuns> = Vec::new();
        let rule = self.rule_of(i);
        let result = (|| -> FsResult<()> {
            match mode {
                FallocateMode::Allocate | FallocateMode::AllocateKeepSize => {
                    if mode == FallocateMode::Allocate && end > a.size {
                        a.size = end;
                    }
                    // Zero-filled blocks for every hole in the range.
                    let mut fb = FileBlock::containing(off);
                    let last = FileBlock::containing(end - 1);
                    while fb <= last {
                        if let Some((s, e)) = i.extents.find(fb) {
                            fb = s + e.blocks;
                            continue;
                        }
                        let hole_end = i
                            .extents
                            .next_start_after(fb)
                            .unwrap_or(FileBlock::MAX)
                            .min(last + 1);
                        let n = hole_end - fb;
                        let want = self.prealloc_tier(rule, n);
                        self.zero_fill(want, (fb, n), &a, &mut taken, &mut entries)?;
                        fb = hole_end;
                    }
                    if a.size != i.attr.size {
                        a.mtime = now;
                    }
                }
                FallocateMode::ZeroRange | FallocateMode::ZeroRangeKeepSize => {
                    if mode == FallocateMode::ZeroRange && end > a.size {
                        a.size = end;
                    }
                    // Like a hole punch followed by an allocation: fresh
                    // zero-filled blocks replace every whole block of the
                    // range (the old ones are freed after the commit), the
                    // mapped partial blocks at its ends are rewritten with
                    // their part of the range zeroed, and partial blocks in
                    // holes get zero-filled blocks. One commit.
                    let (fb0, last) = (FileBlock::containing(off), FileBlock::containing(end - 1));
                    let (head_done, tail_done) = self.zero_partial_ends(
                        i,
                        (off, end),
                        a.size,
                        now,
                        &mut entries,
                        &mut taken,
                    )?;
                    let fill_from = if head_done { fb0 + 1 } else { fb0 };
                    let fill_to = if tail_done { last } else { last + 1 };
                    a.mtime = now;
                    if fill_to > fill_from {
                        let n = fill_to - fill_from;
                        self.zero_fill(
                            self.prealloc_tier(rule, n),
                            (fill_from, n),
                            &a,
                            &mut taken,
                            &mut entries,
                        )?;
                    }
                }
                FallocateMode::CollapseRange | FallocateMode::InsertRange => {
                    // ext4's checks, in its order.
                    if off % BS != 0 || len % BS != 0 {
                        return Err(errno(libc::EINVAL));
                    }
                    let op = if mode == FallocateMode::CollapseRange {
                        if end >= a.size {
                            return Err(errno(libc::EINVAL));
                        }
                        a.size -= len;
                        terrace_format::ShiftOp::Collapse
                    } else {
                        if len > MAX_FILE_SIZE - a.size {
                            return Err(errno(libc::EFBIG));
                        }
                        if off >= a.size {
                            return Err(errno(libc::EINVAL));
                        }
                        a.size += len;
                        terrace_format::ShiftOp::Insert
                    };
                    // The extents move; their data stays where it is (so do
                    // its checksums, which name tier blocks, not file
                    // blocks). One Shift entry and the new size commit
                    // together.
                    entries.push(Entry::Shift {
                        file_block: FileBlock::containing(off),
                        blocks: len / BS,
                        op,
                    });
                    a.mtime = now;
                }
                FallocateMode::PunchHole => {
                    // As ext4 (`ext4_punch_hole`): nothing at or past the
                    // end of the file (not even the times), and a range
                    // past it ends with the block after the one holding
                    // the last byte: preallocated blocks further out stay.
                    if off >= a.size {
                        return Ok(());
                    }
                    let end = end.min((a.size / BS + 1) * BS);
                    let first_full = off.div_ceil(BS);
                    let end_full = end / BS;
                    self.zero_partial_ends(
                        i,
                        (off, end),
                        a.size,
                        a.mtime,
                        &mut entries,
                        &mut taken,
                    )?;
                    if end_full > first_full {
                        entries.push(Entry::Punch {
                            file_block: FileBlock(first_full),
                            blocks: end_full - first_full,
                        });
                    }
                    a.mtime = now;
                }
            }
            a.ctime = now;
            entries.push(Entry::Attr(a));
            // A punch or collapse frees room: it may take PM's removal
            // reserve (`space.rs` rule 4).
            if matches!(
                mode,
                FallocateMode::PunchHole | FallocateMode::CollapseRange
            ) {
                self.commit_one_removal(i, std::mem::take(&mut entries))
            } else {
                self.commit_one(i, std::mem::take(&mut entries))
            }
        })();
        if result.is_err() {
            for d in taken {
                self.release_data(d);
            }
        }
        result
    }
}
