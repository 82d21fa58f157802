//! `lseek(SEEK_DATA)` and `lseek(SEEK_HOLE)`: where a file's data and holes
//! are, so `cp`, `tar -S`, `rsync`, backup tools and VM image tools skip the
//! holes of a sparse file instead of reading them as zeros.
//!
//! A block is data when the extent map maps it (on any tier: PM, a block
//! tier, an object tier, shared by a clone) or when the DRAM cache holds a
//! dirty page of it not yet in the log. Everything else below the file size
//! is a hole. The answer is in whole blocks, as ext4's: a block written in
//! part is data for all of it, and a punch of part of a block leaves it
//! data. Preallocated blocks (fallocate) are data: Terrace writes zeros to
//! them, where ext4 keeps them as unwritten extents and reports them as
//! holes; POSIX allows either (a hole may always be reported as data).
//!
//! Invariants: the answer is computed under the inode lock, from the same
//! state a read at that moment would use, so a read of any range reported
//! as a hole returns zeros; both modes answer ENXIO at or past the end of
//! the file, and a file always ends in a hole (its end).

use crate::fs::Fs;
use crate::inode::Inode;
use crate::types::*;
use terrace_format::FileBlock;

/// Which of the two `lseek` modes a [`Fs::seek_data_or_hole`] call asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeekTo {
    /// The first byte at or after the offset that belongs to data.
    Data,
    /// The first byte at or after the offset that belongs to a hole (the
    /// end of the file counts as one).
    Hole,
}

impl Fs {
    /// The offset `lseek(fd, off, SEEK_DATA or SEEK_HOLE)` returns for
    /// `ino`: ENXIO when `off` is at or past the end of the file, or when
    /// no data follows `off` (SEEK_DATA); EINVAL for a file that is not
    /// regular (EISDIR for a directory).
    pub fn seek_data_or_hole(&self, ino: Ino, off: u64, to: SeekTo) -> FsResult<u64> {
        let g = self.lock(ino)?;
        let i = g.as_ref().expect("live");
        i.kind.require_regular(libc::EINVAL)?;
        seek_in(i, off, to)
    }
}

/// [`Fs::seek_data_or_hole`] on the DRAM state of a locked inode.
fn seek_in(i: &Inode, off: u64, to: SeekTo) -> FsResult<u64> {
    let size = i.size();
    if off >= size {
        return Err(errno(libc::ENXIO));
    }
    let first = FileBlock::containing(off);
    match to {
        SeekTo::Data => {
            let b = next_data_block(i, first).ok_or_else(|| errno(libc::ENXIO))?;
            let at = b.byte_offset().max(off);
            if at >= size {
                return Err(errno(libc::ENXIO));
            }
            Ok(at)
        }
        SeekTo::Hole => Ok(next_hole_block(i, first).byte_offset().max(off).min(size)),
    }
}

/// The first block at or after `b` that holds data, if any.
fn next_data_block(i: &Inode, b: FileBlock) -> Option<FileBlock> {
    let mapped = if i.extents.find(b).is_some() {
        Some(b)
    } else {
        i.extents.next_start_after(b)
    };
    let cached = i.dirty.range(b..).next().map(|(&p, _)| p);
    match (mapped, cached) {
        (Some(m), Some(c)) => Some(m.min(c)),
        (m, c) => m.or(c),
    }
}

/// The first block at or after `b` that holds no data (past the last
/// data block there always is one).
fn next_hole_block(i: &Inode, mut b: FileBlock) -> FileBlock {
    loop {
        if let Some((s, e)) = i.extents.find(b) {
            b = s + e.blocks;
        } else if i.dirty.contains_key(&b) {
            // Runs of dirty pages: skip to the first page missing from the run.
            let mut next = b + 1;
            for (&p, _) in i.dirty.range(next..) {
                if p != next {
                    break;
                }
                next = p + 1;
            }
            b = next;
        } else {
            return b;
        }
    }
}
