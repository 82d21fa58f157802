//! Values translated between fuser's types and the core's: times, file
//! types, attributes and the caller of a request. Pure functions, no state.
//!
//! Invariants: times round-trip exactly through [`ns_to_time`] and
//! [`time_to_ns`] (nanoseconds, before and after the epoch); a node id is
//! always the core's inode number.

use fuser::{FileAttr, INodeNo, Request, TimeOrNow};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use terrace_core::{Attr, Ctx, FileType, SetTime};

/// Nanoseconds since the epoch → `SystemTime` (negative values are before it).
pub fn ns_to_time(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

/// `SystemTime` → nanoseconds since the epoch (saturating).
pub fn time_to_ns(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_nanos())
            .map(|v| -v)
            .unwrap_or(i64::MIN),
    }
}

/// A setattr time: now, or a given time.
pub(crate) fn set_time(t: TimeOrNow) -> SetTime {
    match t {
        TimeOrNow::Now => SetTime::Now,
        TimeOrNow::SpecificTime(t) => SetTime::At(time_to_ns(t)),
    }
}

pub(crate) fn kind_of(k: FileType) -> fuser::FileType {
    match k {
        FileType::Regular => fuser::FileType::RegularFile,
        FileType::Directory => fuser::FileType::Directory,
        FileType::Symlink => fuser::FileType::Symlink,
        FileType::Fifo => fuser::FileType::NamedPipe,
        FileType::Socket => fuser::FileType::Socket,
        FileType::CharDevice => fuser::FileType::CharDevice,
        FileType::BlockDevice => fuser::FileType::BlockDevice,
    }
}

/// Core attributes → FUSE attributes.
pub fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks,
        atime: ns_to_time(a.atime),
        mtime: ns_to_time(a.mtime),
        ctime: ns_to_time(a.ctime),
        crtime: ns_to_time(a.btime),
        kind: kind_of(a.kind),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev as u32,
        blksize: 4096,
        flags: 0,
    }
}

/// The attributes of a negative lookup reply (only its node id, 0, counts).
pub(crate) fn negative_attr() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: fuser::FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

/// The caller of a request, as the core checks and records it.
pub(crate) fn ctx(req: &Request) -> Ctx {
    Ctx {
        uid: req.uid(),
        gid: req.gid(),
        umask: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_conversion_round_trips() {
        for ns in [0i64, 1, 1_700_000_000_123_456_789, -1, -1_000_000_007] {
            assert_eq!(time_to_ns(ns_to_time(ns)), ns);
        }
    }
}
