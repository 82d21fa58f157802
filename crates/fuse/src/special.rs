//! fallocate and copy_file_range: changes of a file's data that do not come
//! as a write, so the adapter itself clears privileges (as the VFS's
//! `file_modified` would) and drops the kernel's cached pages of the range;
//! and lseek's SEEK_DATA/SEEK_HOLE, which find a file's holes.
//!
//! Invariants: fallocate(2) modes are accepted and refused exactly as ext4
//! does ([`fallocate_mode`]); privileges are cleared before the change, the
//! kernel's pages after it and before the reply.

use crate::adapter::FuseAdapter;
use crate::invalidate::Stale;
use crate::reply::refuse;
use crate::setid;
use fuser::CopyFileRangeFlags;
use std::io;
use terrace_core::ops_seek::SeekTo;
use terrace_core::FallocateMode;

/// fallocate of `[offset, offset + length)` of `ino` with mode bits `mode`;
/// the range cached opens may hold stale.
pub(crate) fn fallocate(
    a: &FuseAdapter,
    caller: &setid::Caller,
    ino: u64,
    offset: u64,
    length: u64,
    mode: i32,
) -> io::Result<((), Option<Stale>)> {
    let m = fallocate_mode(mode).map_err(refuse)?;
    // The kernel sends no kill flag with fallocate: like the VFS
    // (file_modified), drop set-ID bits first, then change the file.
    if a.killpriv {
        a.kill_priv(ino, caller)?;
    }
    a.fs.fallocate(ino, offset, length, m)?;
    // Collapse and insert move everything after the range.
    Ok(((), a.data_changed(ino, offset, 0)))
}

/// copy_file_range of `len` bytes from `(ino, offset)` to `(ino, offset)`
/// by `caller`: the number of bytes copied, and the range cached opens may
/// hold stale. Whole blocks are shared with the source (core `ops_clone`).
pub(crate) fn copy_file_range(
    a: &FuseAdapter,
    caller: &setid::Caller,
    (ino_in, offset_in): (u64, u64),
    (ino_out, offset_out): (u64, u64),
    len: u64,
    flags: CopyFileRangeFlags,
) -> io::Result<(u32, Option<Stale>)> {
    if !flags.is_empty() {
        return Err(refuse(libc::EINVAL));
    }
    // Like a write by the caller: set-ID bits go first (file_modified).
    if a.killpriv {
        a.kill_priv(ino_out, caller)?;
    }
    let n =
        a.fs.copy_range(ino_in, offset_in, ino_out, offset_out, len)?;
    Ok((n as u32, a.data_changed(ino_out, offset_out, n)))
}

/// lseek of `ino` from `offset` with `whence`, answered through `reply`:
/// SEEK_DATA and SEEK_HOLE by the core (`ops_seek`); the kernel answers
/// every other `whence` itself and never sends it, so it is refused EINVAL.
/// A negative offset is ENXIO, as on ext4.
///
/// The kernel asks without writing its dirty pages back first (ext4 looks
/// into its page cache instead), so a store through a shared mapping not
/// yet written back would read as a hole, and `cp` would skip it. When the
/// kernel may hold dirty pages of the file, its pages from the offset on
/// are dropped first — which writes the dirty ones back (`launder_folio`)
/// — on the invalidation thread, and the answer is made after that.
pub(crate) fn lseek(
    a: &FuseAdapter,
    ino: u64,
    offset: i64,
    whence: i32,
    reply: impl FnOnce(io::Result<u64>) + Send + 'static,
) {
    let to = match whence {
        libc::SEEK_DATA => SeekTo::Data,
        libc::SEEK_HOLE => SeekTo::Hole,
        _ => return reply(Err(refuse(libc::EINVAL))),
    };
    let Ok(off) = u64::try_from(offset) else {
        return reply(Err(refuse(libc::ENXIO)));
    };
    if !a.kernel_may_hold_dirty_pages(ino) {
        return seek_now(a, ino, off, to, reply);
    }
    let page = 4096;
    let stale = Stale {
        ino,
        offset: off - off % page,
        len: 0,
    };
    let b = a.clone();
    a.invalidator
        .then(stale, move || seek_now(&b, ino, off, to, reply));
}

/// Answers an lseek from the core: here, or off the request threads (and
/// off the invalidation thread) when the file's lock may be held by a wait
/// on an object store.
fn seek_now(
    a: &FuseAdapter,
    ino: u64,
    off: u64,
    to: SeekTo,
    reply: impl FnOnce(io::Result<u64>) + Send + 'static,
) {
    if a.fs.seek_may_wait_on_network(ino) {
        return a.off_request(move |a| reply(a.fs.seek_data_or_hole(ino, off, to)));
    }
    reply(a.fs.seek_data_or_hole(ino, off, to));
}

/// The [`FallocateMode`] of fallocate(2) mode bits, or the errno ext4 (and
/// the VFS before it) gives a combination it refuses: COLLAPSE_RANGE and
/// INSERT_RANGE with any other flag are EINVAL, every other unsupported
/// combination (PUNCH_HOLE without KEEP_SIZE, PUNCH_HOLE with ZERO_RANGE,
/// unknown bits) EOPNOTSUPP.
pub fn fallocate_mode(mode: i32) -> Result<FallocateMode, i32> {
    use libc::{
        FALLOC_FL_COLLAPSE_RANGE as COLLAPSE, FALLOC_FL_INSERT_RANGE as INSERT,
        FALLOC_FL_KEEP_SIZE as KEEP, FALLOC_FL_PUNCH_HOLE as PUNCH, FALLOC_FL_ZERO_RANGE as ZERO,
    };
    Ok(match mode {
        0 => FallocateMode::Allocate,
        KEEP => FallocateMode::AllocateKeepSize,
        x if x == PUNCH | KEEP => FallocateMode::PunchHole,
        ZERO => FallocateMode::ZeroRange,
        x if x == ZERO | KEEP => FallocateMode::ZeroRangeKeepSize,
        COLLAPSE => FallocateMode::CollapseRange,
        INSERT => FallocateMode::InsertRange,
        x if x & (COLLAPSE | INSERT) != 0 => return Err(libc::EINVAL),
        _ => return Err(libc::EOPNOTSUPP),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallocate_modes_map_as_ext4_accepts_and_refuses_them() {
        use FallocateMode::*;
        let ok = [
            (0, Allocate),
            (1, AllocateKeepSize),
            (3, PunchHole),
            (0x10, ZeroRange),
            (0x11, ZeroRangeKeepSize),
            (0x08, CollapseRange),
            (0x20, InsertRange),
        ];
        for (bits, m) in ok {
            assert_eq!(fallocate_mode(bits), Ok(m), "mode {bits:#x}");
        }
        for bits in [0x02, 0x12, 0x13, 0x04, 0x40, 0x80, 0x100] {
            assert_eq!(
                fallocate_mode(bits),
                Err(libc::EOPNOTSUPP),
                "mode {bits:#x}"
            );
        }
        for bits in [0x09, 0x21, 0x28, 0x18, 0x0a] {
            assert_eq!(fallocate_mode(bits), Err(libc::EINVAL), "mode {bits:#x}");
        }
    }
}
