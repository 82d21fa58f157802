//! ioctl: the inode flags of `chattr`/`lsattr` and `xfs_io chattr`, and
//! `FITRIM` (`fstrim`), the only ioctls Terrace answers (any other gets
//! ENOTTY, as on a file system without it).
//!
//! The kernel turns `FS_IOC_GETFLAGS`/`SETFLAGS` and `FS_IOC_FSGETXATTR`/
//! `FSSETXATTR` on any file or directory into a FUSE ioctl of the same
//! command on a handle it opens read-only for it, after its own permission
//! checks (owner, `CAP_LINUX_IMMUTABLE`); the core keeps the flags and
//! enforces them (`terrace_core::inode_flags`). Changing them changes ctime,
//! so the kernel's cached attributes of the file are dropped.

use crate::adapter::FuseAdapter;
use crate::reply::refuse;
use crate::setid::Caller;
use std::io;
use terrace_core::inode_flags::{
    ATTR_FLAG_APPEND, ATTR_FLAG_IMMUTABLE, ATTR_FLAG_NOATIME, ATTR_FLAG_NODUMP, ATTR_FLAG_SYNC,
};

/// `FS_IOC_GETFLAGS` (`_IOR('f', 1, long)`); the kernel sends a 4-byte int.
const FS_IOC_GETFLAGS: u32 = 0x8008_6601;
/// `FS_IOC_SETFLAGS` (`_IOW('f', 2, long)`).
const FS_IOC_SETFLAGS: u32 = 0x4008_6602;
/// `FS_IOC_FSGETXATTR` (`_IOR('X', 31, struct fsxattr)`).
const FS_IOC_FSGETXATTR: u32 = 0x801c_581f;
/// `FS_IOC_FSSETXATTR` (`_IOW('X', 32, struct fsxattr)`).
const FS_IOC_FSSETXATTR: u32 = 0x401c_5820;
/// `FITRIM` (`_IOWR('X', 121, struct fstrim_range)`), sent on any file or
/// directory of the mount (`fstrim` opens the mount point).
const FITRIM: u32 = 0xc018_5879;
/// `sizeof(struct fstrim_range)`: start, len, minlen (u64 each).
const FSTRIM_RANGE_SIZE: usize = 24;
/// `sizeof(struct fsxattr)`: xflags, extsize, nextents, projid, cowextsize
/// (u32 each), 8 bytes of padding.
const FSXATTR_SIZE: usize = 28;
/// Offsets in `struct fsxattr` of `fsx_extsize`, `fsx_projid` and
/// `fsx_cowextsize`: settings this file system does not keep.
const FSXATTR_UNKEPT: [usize; 3] = [4, 12, 16];

/// `FS_XFLAG_*` bits and the inode flags they stand for.
const XFLAGS: [(u32, u32); 5] = [
    (0x08, ATTR_FLAG_IMMUTABLE),
    (0x10, ATTR_FLAG_APPEND),
    (0x20, ATTR_FLAG_SYNC),
    (0x40, ATTR_FLAG_NOATIME),
    (0x80, ATTR_FLAG_NODUMP),
];

/// The answer to ioctl `cmd` on `ino` with input `input`: the bytes to
/// return (at most `out_size`).
pub(crate) fn ioctl(
    a: &FuseAdapter,
    caller: &Caller,
    ino: u64,
    cmd: u32,
    input: &[u8],
    out_size: u32,
) -> io::Result<Vec<u8>> {
    let out = match cmd {
        // Only the commands the kernel checks itself come here from its
        // checked path (`vfs_fileattr_set`: owner, CAP_LINUX_IMMUTABLE).
        // Their 32-bit forms (`FS_IOC32_*`) the kernel turns into these for
        // a 32-bit caller; sent as they are by a 64-bit caller, they pass
        // no check at all, so they get ENOTTY as on ext4 — answering them
        // let any user set or clear +i and +a on anyone's file.
        FS_IOC_GETFLAGS => a.fs.inode_flags(ino)?.to_ne_bytes().to_vec(),
        FS_IOC_SETFLAGS => {
            let flags = u32_at(input, 0)?;
            set(a, ino, flags)?;
            Vec::new()
        }
        FS_IOC_FSGETXATTR => {
            let mut b = vec![0u8; FSXATTR_SIZE];
            b[..4].copy_from_slice(&to_xflags(a.fs.inode_flags(ino)?).to_ne_bytes());
            b
        }
        FS_IOC_FSSETXATTR => {
            if input.len() < FSXATTR_SIZE {
                return Err(refuse(libc::EINVAL));
            }
            // Extent size hints, project ids and copy-on-write hints are
            // not kept: only a request that leaves them at 0 is taken
            // (`fsx_nextents` is output only).
            if FSXATTR_UNKEPT
                .iter()
                .any(|&at| u32_at(input, at).is_ok_and(|v| v != 0))
            {
                return Err(refuse(libc::EOPNOTSUPP));
            }
            let old = a.fs.inode_flags(ino)?;
            let flags = from_xflags(u32_at(input, 0)?, old)?;
            set(a, ino, flags)?;
            Vec::new()
        }
        FITRIM => trim(a, caller, input)?,
        _ => return Err(refuse(libc::ENOTTY)),
    };
    if out.len() > out_size as usize {
        return Err(refuse(libc::EINVAL));
    }
    Ok(out)
}

/// `FITRIM`: discard the free extents of the block tiers in the range
/// (`terrace_core::trim`); the answer is the range with `len` set to the
/// bytes discarded. Only a caller with `CAP_SYS_ADMIN`, as on ext4.
fn trim(a: &FuseAdapter, caller: &Caller, input: &[u8]) -> io::Result<Vec<u8>> {
    if input.len() < FSTRIM_RANGE_SIZE {
        return Err(refuse(libc::EINVAL));
    }
    if !caller.has_sys_admin() {
        return Err(refuse(libc::EPERM));
    }
    let (start, len, min_len) = (u64_at(input, 0)?, u64_at(input, 8)?, u64_at(input, 16)?);
    let report = a.fs.trim(start, len, min_len)?;
    let mut out = input[..FSTRIM_RANGE_SIZE].to_vec();
    out[8..16].copy_from_slice(&report.bytes.to_ne_bytes());
    Ok(out)
}

fn u64_at(b: &[u8], at: usize) -> io::Result<u64> {
    b.get(at..at + 8)
        .map(|s| u64::from_ne_bytes(s.try_into().expect("8 bytes")))
        .ok_or_else(|| refuse(libc::EINVAL))
}

fn set(a: &FuseAdapter, ino: u64, flags: u32) -> io::Result<()> {
    a.fs.set_inode_flags(ino, flags)?;
    a.drop_kernel_attrs(ino);
    Ok(())
}

fn u32_at(b: &[u8], at: usize) -> io::Result<u32> {
    b.get(at..at + 4)
        .map(|s| u32::from_ne_bytes(s.try_into().expect("4 bytes")))
        .ok_or_else(|| refuse(libc::EINVAL))
}

/// The `FS_XFLAG_*` form of inode flags.
fn to_xflags(flags: u32) -> u32 {
    XFLAGS
        .iter()
        .filter(|(_, f)| flags & f != 0)
        .fold(0, |x, (xf, _)| x | xf)
}

/// Inode flags from `FS_XFLAG_*` bits, keeping the flags of `old` that
/// have no xflag (dirsync); EOPNOTSUPP for an xflag not kept.
fn from_xflags(xflags: u32, old: u32) -> io::Result<u32> {
    let known = XFLAGS.iter().fold(0, |x, (xf, _)| x | xf);
    if xflags & !known != 0 {
        return Err(refuse(libc::EOPNOTSUPP));
    }
    let mapped = XFLAGS.iter().fold(0, |x, (_, f)| x | f);
    Ok(XFLAGS
        .iter()
        .filter(|(xf, _)| xflags & xf != 0)
        .fold(old & !mapped, |x, (_, f)| x | f))
}

#[cfg(test)]
mod tests {
    use super::*;
    use terrace_core::inode_flags::ATTR_FLAG_DIRSYNC;

    #[test]
    fn xflags_and_inode_flags_map_both_ways_and_keep_dirsync() {
        let all = ATTR_FLAG_IMMUTABLE
            | ATTR_FLAG_APPEND
            | ATTR_FLAG_SYNC
            | ATTR_FLAG_NOATIME
            | ATTR_FLAG_NODUMP;
        assert_eq!(to_xflags(all | ATTR_FLAG_DIRSYNC), 0xf8);
        assert_eq!(from_xflags(0xf8, 0).unwrap(), all);
        assert_eq!(
            from_xflags(0x08, ATTR_FLAG_DIRSYNC | ATTR_FLAG_APPEND).unwrap(),
            ATTR_FLAG_IMMUTABLE | ATTR_FLAG_DIRSYNC
        );
        let e = from_xflags(0x1, 0).unwrap_err(); // FS_XFLAG_REALTIME
        assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP));
    }
}
