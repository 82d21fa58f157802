//! Core results → FUSE replies: one function per reply type, and the errno
//! of a core error. Every request answers through here (or through the
//! directory fillers), so the errno mapping and what the kernel may cache
//! are decided in one place.
//!
//! Invariants: a core error without an OS errno is EIO; every reply that
//! carries attributes or names lets the kernel keep them for [`TTL`].

use crate::convert::{file_attr, negative_attr};
use fuser::{
    Errno, FileHandle, FopenFlags, Generation, ReplyAttr, ReplyCreate, ReplyData, ReplyEmpty,
    ReplyEntry, ReplyLseek, ReplyOpen, ReplyWrite,
};
use std::io;
use std::time::Duration;
use terrace_core::Attr;

/// How long the kernel may cache attributes and names: a day. The mount is
/// the only way to the pool (one daemon per pool), so every change reaches the
/// core through the kernel, which updates or invalidates what it caches
/// (writes and reads invalidate the times they change, link/unlink/rename
/// the names, setattr/setxattr the attributes); what the daemon changes on
/// its own (set-ID bits after an unprivileged write) it invalidates itself.
/// Migration moves data between tiers without changing any attribute.
pub(crate) const TTL: Duration = Duration::from_secs(86_400);

/// errno of a core error (EIO when it carries none).
pub(crate) fn errno_of(e: &io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

/// The error a request refuses with by itself (before reaching the core).
pub(crate) fn refuse(errno: i32) -> io::Error {
    io::Error::from_raw_os_error(errno)
}

/// Replies to a lookup. A missing name gets a negative entry (node id 0):
/// the kernel remembers for TTL that the name is absent, so `stat` of a
/// missing file (git status, include and import searches) costs no round
/// trip the second time. Every create or rename to the name passes through
/// the kernel, which replaces the negative entry then.
pub(crate) fn lookup(reply: ReplyEntry, r: io::Result<Attr>) {
    match r {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
            reply.entry(&TTL, &negative_attr(), Generation(0))
        }
        r => entry(reply, r),
    }
}

pub(crate) fn entry(reply: ReplyEntry, r: io::Result<Attr>) {
    match r {
        Ok(a) => reply.entry(&TTL, &file_attr(&a), Generation(u64::from(a.generation))),
        Err(e) => reply.error(errno_of(&e)),
    }
}

pub(crate) fn attr(reply: ReplyAttr, r: io::Result<Attr>) {
    match r {
        Ok(a) => reply.attr(&TTL, &file_attr(&a)),
        Err(e) => reply.error(errno_of(&e)),
    }
}

/// Replies to an lseek (SEEK_DATA/SEEK_HOLE) with the offset found.
pub(crate) fn offset(reply: ReplyLseek, r: io::Result<u64>) {
    match r {
        // The core never answers past MAX_FILE_SIZE (< 2^63).
        Ok(off) => reply.offset(i64::try_from(off).unwrap_or(i64::MAX)),
        Err(e) => reply.error(errno_of(&e)),
    }
}

pub(crate) fn empty(reply: ReplyEmpty, r: io::Result<()>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno_of(&e)),
    }
}

/// Replies to fsync/fsyncdir. When fsync can never have work to do on this
/// pool ([`terrace_core::Fs::fsync_is_noop`]), a successful one is answered
/// ENOSYS: the kernel takes that as success and from then on completes every
/// fsync/fdatasync (resp. fsyncdir) of the mount itself, without a request —
/// after writing back any dirty mmap pages, which it always does first.
pub(crate) fn fsync(reply: ReplyEmpty, r: io::Result<()>, noop: bool) {
    match r {
        Ok(()) if noop => reply.error(Errno::ENOSYS),
        r => empty(reply, r),
    }
}

pub(crate) fn data(reply: ReplyData, r: io::Result<Vec<u8>>) {
    match r {
        Ok(d) => reply.data(&d),
        Err(e) => reply.error(errno_of(&e)),
    }
}

/// Replies to a write or copy with the number of bytes written.
pub(crate) fn written(reply: ReplyWrite, r: io::Result<u32>) {
    match r {
        Ok(n) => reply.written(n),
        Err(e) => reply.error(errno_of(&e)),
    }
}

/// Replies to an open or opendir with the core's handle and how the kernel
/// is to serve the open.
pub(crate) fn opened(reply: ReplyOpen, r: io::Result<(u64, FopenFlags)>) {
    match r {
        Ok((fh, flags)) => reply.opened(FileHandle(fh), flags),
        Err(e) => reply.error(errno_of(&e)),
    }
}

/// Replies to a create or tmpfile with the new file, opened as the handle.
pub(crate) fn created(reply: ReplyCreate, r: io::Result<(Attr, u64, FopenFlags)>) {
    match r {
        Ok((attr, fh, flags)) => reply.created(
            &TTL,
            &file_attr(&attr),
            Generation(u64::from(attr.generation)),
            FileHandle(fh),
            flags,
        ),
        Err(e) => reply.error(errno_of(&e)),
    }
}
