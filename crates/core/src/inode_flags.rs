//! Inode flags (`chattr`, `lsattr`): which flags a file keeps, and what the
//! immutable and append-only flags forbid.
//!
//! The flags are the `flags` word of the inode's Attr entry (format 9), Linux's
//! `FS_*_FL` bits ([`terrace_format::ATTR_FLAGS_KNOWN`]). They are read and set
//! with [`Fs::inode_flags`] and [`Fs::set_inode_flags`] (the FUSE adapter maps
//! `FS_IOC_GETFLAGS`/`SETFLAGS` and `FS_IOC_FSGETXATTR`/`FSSETXATTR` to them).
//!
//! Who may change them is the kernel's check, made before the request reaches
//! the daemon (`vfs_fileattr_set`: the owner or `CAP_FOWNER`, and
//! `CAP_LINUX_IMMUTABLE` to change the immutable or append-only flag). What
//! they forbid is checked here, because the FUSE kernel module does not know
//! them (it never sets `S_IMMUTABLE` or `S_APPEND` on its inodes): every
//! operation that changes an inode or a directory calls one of the checks
//! below under the inode's lock, before it changes anything. The rules are
//! ext4's (the VFS's `may_delete`, `may_create`, `notify_change`,
//! `vfs_link`, `xattr_permission`, `vfs_fallocate`, and ext4's refusal of
//! any write to an immutable file, even through a descriptor opened before
//! the flag was set):
//!
//! | operation | immutable | append-only |
//! |---|---|---|
//! | open for writing, or with `O_TRUNC` | EPERM | EPERM unless `O_APPEND` (never with `O_TRUNC`) |
//! | write, `copy_file_range` into it, `fallocate` | EPERM | punch, zero, collapse, insert: EPERM |
//! | write-back of pages the kernel held dirty | allowed (acknowledged before) | allowed |
//! | truncate, chmod, chown, set times | EPERM | EPERM |
//! | set times to now (`touch`) | EPERM | allowed |
//! | set or remove an xattr | EPERM | EPERM |
//! | link to it, rename it, remove it | EPERM | EPERM |
//! | add a name in the directory | EPERM | allowed |
//! | remove or rename a name away from the directory | EPERM | EPERM |
//!
//! Reads never update the access time of a file with the no-atime or the
//! immutable flag. The sync flag makes every write to the file synchronous.

use crate::fs::{now_ns, Fs};
use crate::inode::Inode;
use crate::types::*;
use terrace_format::Entry;
pub use terrace_format::{
    ATTR_FLAGS_KNOWN, ATTR_FLAG_APPEND, ATTR_FLAG_DIRSYNC, ATTR_FLAG_IMMUTABLE, ATTR_FLAG_NOATIME,
    ATTR_FLAG_NODUMP, ATTR_FLAG_SYNC,
};

/// The immutable or the append-only flag is set.
fn pinned(i: &Inode) -> bool {
    i.attr.flags & (ATTR_FLAG_IMMUTABLE | ATTR_FLAG_APPEND) != 0
}

pub(crate) fn immutable(i: &Inode) -> bool {
    i.attr.flags & ATTR_FLAG_IMMUTABLE != 0
}

fn eperm() -> std::io::Error {
    errno(libc::EPERM)
}

/// An open with `flags` (open(2) flags) is allowed.
pub(crate) fn check_open(i: &Inode, flags: i32) -> FsResult<()> {
    let writes = flags & libc::O_ACCMODE != libc::O_RDONLY;
    let truncates = flags & libc::O_TRUNC != 0;
    if immutable(i) && (writes || truncates) {
        return Err(eperm());
    }
    if i.attr.flags & ATTR_FLAG_APPEND != 0
        && (truncates || (writes && flags & libc::O_APPEND == 0))
    {
        return Err(eperm());
    }
    Ok(())
}

/// The file's data may be written (write, `copy_file_range` into it).
pub(crate) fn check_write(i: &Inode) -> FsResult<()> {
    if immutable(i) {
        return Err(eperm());
    }
    Ok(())
}

/// A `fallocate` that only allocates (`plain`) or also punches, zeroes or
/// shifts is allowed.
pub(crate) fn check_fallocate(i: &Inode, plain: bool) -> FsResult<()> {
    check_write(i)?;
    if !plain && i.attr.flags & ATTR_FLAG_APPEND != 0 {
        return Err(eperm());
    }
    Ok(())
}

/// A setattr is allowed: `touch_only` when it sets nothing but the times,
/// and both (or either) to "now".
pub(crate) fn check_setattr(i: &Inode, touch_only: bool) -> FsResult<()> {
    if immutable(i) || (pinned(i) && !touch_only) {
        return Err(eperm());
    }
    Ok(())
}

/// The inode's xattrs may change, or it may get another name or lose one
/// (link, rename, unlink, rmdir of it).
pub(crate) fn check_change_names_or_xattrs(i: &Inode) -> FsResult<()> {
    if pinned(i) {
        return Err(eperm());
    }
    Ok(())
}

/// Directory `d` may get a new name.
pub(crate) fn check_add_name(d: &Inode) -> FsResult<()> {
    if immutable(d) {
        return Err(eperm());
    }
    Ok(())
}

/// Directory `d` may lose a name.
pub(crate) fn check_remove_name(d: &Inode) -> FsResult<()> {
    if pinned(d) {
        return Err(eperm());
    }
    Ok(())
}

/// Reads of `i` update its access time.
pub(crate) fn atime_updates(i: &Inode) -> bool {
    i.attr.flags & (ATTR_FLAG_NOATIME | ATTR_FLAG_IMMUTABLE) == 0
}

/// `i` is append-only: its data may only grow
/// (`Fs::check_append_only_write`).
pub(crate) fn append_only(i: &Inode) -> bool {
    i.attr.flags & ATTR_FLAG_APPEND != 0
}

/// Writes to `i` are synchronous (as with `O_SYNC`).
pub(crate) fn writes_sync(i: &Inode) -> bool {
    i.attr.flags & ATTR_FLAG_SYNC != 0
}

impl Fs {
    /// The inode's flags (`FS_*_FL` bits, as `FS_IOC_GETFLAGS` returns them).
    pub fn inode_flags(&self, ino: Ino) -> FsResult<u32> {
        Ok(self.lock(ino)?.as_ref().expect("live").attr.flags)
    }

    /// Sets the inode's flags to `flags` (`FS_IOC_SETFLAGS`); ctime moves
    /// when they change. EOPNOTSUPP for a flag this file system does not
    /// keep (compression, data journaling, …), and nothing changes. The
    /// caller's right to change them is the kernel's check (module docs).
    pub fn set_inode_flags(&self, ino: Ino, flags: u32) -> FsResult<Attr> {
        self.refuse_if_read_only()?;
        if flags & !ATTR_FLAGS_KNOWN != 0 {
            return Err(errno(libc::EOPNOTSUPP));
        }
        self.wait_for_pm_room();
        let mut g = self.lock(ino)?;
        let i = g.as_mut().expect("live");
        if i.attr.flags != flags {
            let mut a = i.attr;
            a.flags = flags;
            a.ctime = now_ns();
            self.commit_one(i, vec![Entry::Attr(a)])?;
        }
        Ok(i.stat())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use terrace_format::{AttrEntry, InodeSlot};

    fn file(flags: u32) -> Inode {
        let slot = InodeSlot {
            mode: libc::S_IFREG | 0o644,
            ..InodeSlot::default()
        };
        let mut i = Inode::from_slot(2, &slot).expect("regular");
        i.attr = AttrEntry { flags, ..i.attr };
        i
    }

    fn refused(r: FsResult<()>) -> bool {
        r.is_err_and(|e| e.raw_os_error() == Some(libc::EPERM))
    }

    #[test]
    fn an_immutable_file_opens_only_for_reading() {
        let i = file(ATTR_FLAG_IMMUTABLE);
        assert!(check_open(&i, libc::O_RDONLY).is_ok());
        for f in [
            libc::O_WRONLY,
            libc::O_RDWR,
            libc::O_RDONLY | libc::O_TRUNC,
            libc::O_WRONLY | libc::O_APPEND,
        ] {
            assert!(refused(check_open(&i, f)), "{f:#x}");
        }
        assert!(refused(check_write(&i)));
        assert!(refused(check_fallocate(&i, true)));
        assert!(refused(check_setattr(&i, true)), "not even touch");
        assert!(refused(check_change_names_or_xattrs(&i)));
        assert!(!atime_updates(&i));
    }

    #[test]
    fn an_append_only_file_opens_for_writing_only_with_o_append_and_never_shrinks() {
        let i = file(ATTR_FLAG_APPEND);
        assert!(check_open(&i, libc::O_RDONLY).is_ok());
        assert!(check_open(&i, libc::O_WRONLY | libc::O_APPEND).is_ok());
        assert!(check_open(&i, libc::O_RDWR | libc::O_APPEND).is_ok());
        assert!(refused(check_open(&i, libc::O_WRONLY)));
        assert!(refused(check_open(
            &i,
            libc::O_WRONLY | libc::O_APPEND | libc::O_TRUNC
        )));
        assert!(check_write(&i).is_ok());
        assert!(check_fallocate(&i, true).is_ok());
        assert!(refused(check_fallocate(&i, false)), "no punch or collapse");
        assert!(check_setattr(&i, true).is_ok(), "touch is allowed");
        assert!(refused(check_setattr(&i, false)));
        assert!(refused(check_change_names_or_xattrs(&i)));
        assert!(check_add_name(&i).is_ok());
        assert!(refused(check_remove_name(&i)));
    }

    #[test]
    fn files_without_those_flags_are_unrestricted() {
        for flags in [0, ATTR_FLAG_NODUMP, ATTR_FLAG_SYNC] {
            let i = file(flags);
            assert!(check_open(&i, libc::O_RDWR | libc::O_TRUNC).is_ok());
            assert!(check_fallocate(&i, false).is_ok());
            assert!(check_setattr(&i, false).is_ok());
            assert!(check_change_names_or_xattrs(&i).is_ok());
            assert!(check_add_name(&i).is_ok() && check_remove_name(&i).is_ok());
            assert!(atime_updates(&i));
        }
        assert!(writes_sync(&file(ATTR_FLAG_SYNC)));
        assert!(!atime_updates(&file(ATTR_FLAG_NOATIME)));
    }
}
