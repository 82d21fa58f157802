//! Directory requests that need translating: rename flags, opendir, and
//! filling a `READDIR` reply (`READDIRPLUS`: `dirplus.rs`). Creating and
//! removing names are plain core calls (`filesystem.rs`).
//!
//! Invariants: a reply is filled in cookie order and ends at the first
//! cookie that does not advance (a loop guard); an error after some entries
//! were added sends those entries, and the next call repeats the error.

use crate::adapter::FuseAdapter;
use crate::convert::kind_of;
use crate::reply::{errno_of, refuse};
use fuser::{FopenFlags, INodeNo, RenameFlags as FuseRenameFlags, ReplyDirectory};
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use terrace_core::{Ctx, Fs, RenameFlags};

/// Directory entries fetched from the core per batch while filling a reply.
const READDIR_BATCH: usize = 128;

/// The core's rename flags of renameat2(2) flag bits (a whiteout is owned
/// by `caller`): EINVAL for unknown bits and for EXCHANGE with NOREPLACE or
/// WHITEOUT. (Since Linux 5.8 the kernel lets any caller make whiteouts.)
pub(crate) fn rename_flags(flags: FuseRenameFlags, caller: Ctx) -> io::Result<RenameFlags> {
    let bits = flags.bits();
    let known = libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE | libc::RENAME_WHITEOUT;
    if bits & !known != 0 {
        return Err(refuse(libc::EINVAL));
    }
    let f = RenameFlags {
        noreplace: bits & libc::RENAME_NOREPLACE != 0,
        exchange: bits & libc::RENAME_EXCHANGE != 0,
        whiteout: (bits & libc::RENAME_WHITEOUT != 0).then_some(caller),
    };
    if f.exchange && (f.noreplace || f.whiteout.is_some()) {
        return Err(refuse(libc::EINVAL));
    }
    Ok(f)
}

/// opendir: ENOSYS once the kernel agreed to `FUSE_NO_OPENDIR_SUPPORT` (it
/// then sends no more opendirs); otherwise the core's open of the directory
/// without access mode or O_TRUNC.
pub(crate) fn opendir(a: &FuseAdapter, ino: u64, flags: i32) -> io::Result<(u64, FopenFlags)> {
    if a.no_opendir {
        return Err(refuse(libc::ENOSYS));
    }
    let fh = a.fs.open(ino, flags & !(libc::O_ACCMODE | libc::O_TRUNC))?;
    Ok((fh, FopenFlags::empty()))
}

/// Fills `reply` with the entries of directory `ino` after cookie `offset`.
pub(crate) fn fill(fs: &Fs, ino: u64, offset: u64, mut reply: ReplyDirectory) {
    let mut off = offset;
    let mut added = false;
    loop {
        let batch = match fs.readdir(ino, off, READDIR_BATCH) {
            Ok(b) => b,
            Err(e) => {
                if added {
                    // Send what we have; the next call repeats the error.
                    break;
                }
                reply.error(errno_of(&e));
                return;
            }
        };
        if batch.is_empty() {
            break;
        }
        for e in batch {
            if e.next_offset <= off {
                // A cookie that does not advance would loop forever.
                reply.ok();
                return;
            }
            if reply.add(
                INodeNo(e.ino),
                e.next_offset,
                kind_of(e.kind),
                OsStr::from_bytes(&e.name),
            ) {
                reply.ok();
                return;
            }
            added = true;
            off = e.next_offset;
        }
    }
    reply.ok();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rename_flags_refuse_unknown_bits_and_noreplace_with_exchange() {
        let caller = Ctx {
            uid: 7,
            gid: 8,
            umask: 0,
        };
        let of = |bits: u32| rename_flags(FuseRenameFlags::from_bits_retain(bits), caller);
        let f = of(0).unwrap();
        assert!(!f.noreplace && !f.exchange && f.whiteout.is_none());
        assert!(of(libc::RENAME_NOREPLACE).unwrap().noreplace);
        assert!(of(libc::RENAME_EXCHANGE).unwrap().exchange);
        assert_eq!(of(libc::RENAME_WHITEOUT).unwrap().whiteout, Some(caller));
        let both = of(libc::RENAME_WHITEOUT | libc::RENAME_NOREPLACE).unwrap();
        assert!(both.noreplace && both.whiteout.is_some());
        for bits in [
            libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE,
            libc::RENAME_EXCHANGE | libc::RENAME_WHITEOUT,
            1 << 3,
        ] {
            let e = of(bits).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{bits:#x}");
        }
    }
}
