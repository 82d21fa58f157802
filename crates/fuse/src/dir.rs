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
use terrace_core::{Fs, RenameFlags};

/// Directory entries fetched from the core per batch while filling a reply.
const READDIR_BATCH: usize = 128;

/// The core's rename flags of renameat2(2) flag bits: EINVAL for unknown
/// bits and for NOREPLACE with EXCHANGE.
pub(crate) fn rename_flags(flags: FuseRenameFlags) -> io::Result<RenameFlags> {
    let bits = flags.bits();
    let known = libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE;
    if bits & !known != 0 {
        return Err(refuse(libc::EINVAL));
    }
    let f = RenameFlags {
        noreplace: bits & libc::RENAME_NOREPLACE != 0,
        exchange: bits & libc::RENAME_EXCHANGE != 0,
    };
    if f.noreplace && f.exchange {
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
        let of = |bits: u32| rename_flags(FuseRenameFlags::from_bits_retain(bits));
        let f = of(0).unwrap();
        assert!(!f.noreplace && !f.exchange);
        assert!(of(libc::RENAME_NOREPLACE).unwrap().noreplace);
        assert!(of(libc::RENAME_EXCHANGE).unwrap().exchange);
        for bits in [
            libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE,
            libc::RENAME_WHITEOUT,
        ] {
            let e = of(bits).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{bits:#x}");
        }
    }
}
