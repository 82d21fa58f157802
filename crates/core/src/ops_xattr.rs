//! Extended attributes: get, set, list and remove, each set or removal one
//! log commit of the inode (values up to 64 KiB: several entries appended in
//! one commit, format 5).

use crate::fs::{now_ns, Fs};
use crate::inode::Inode;
use crate::types::*;
use terrace_format::{Entry, XATTR_NAME_MAX, XATTR_VALUE_MAX};

/// `setxattr` flag: fail if the attribute exists.
pub const XATTR_CREATE: i32 = 1;
/// Bytes of names one listxattr can return (the VFS's `XATTR_LIST_MAX`),
/// each with its NUL.
pub const XATTR_LIST_MAX: usize = 65536;
/// `setxattr` flag: fail if the attribute does not exist.
pub const XATTR_REPLACE: i32 = 2;

impl Fs {
    fn check_xattr_name(i: &Inode, name: &[u8]) -> FsResult<()> {
        if name.is_empty() || name.len() > XATTR_NAME_MAX {
            return Err(errno(libc::ERANGE));
        }
        if name.starts_with(crate::placement_view::VIRTUAL_PREFIX)
            && name != crate::service_state::RULE_XATTR
        {
            // Terrace's own names are read-only views (but for the rule).
            return Err(errno(libc::EPERM));
        }
        // A namespace's prefix alone names nothing: EINVAL, as the VFS
        // answers for a native file system (it passes it on to FUSE).
        if [&b"user."[..], b"trusted.", b"security.", b"system."].contains(&name) {
            return Err(errno(libc::EINVAL));
        }
        if name.starts_with(b"user.") {
            if !matches!(i.kind, FileType::Regular | FileType::Directory) {
                return Err(errno(libc::EPERM));
            }
            Ok(())
        } else if name.starts_with(b"trusted.") || name.starts_with(b"security.") {
            Ok(())
        } else if crate::acl::is_acl_name(name) {
            // POSIX ACLs (`acl.rs`); not on symlinks, as on ext4.
            if i.kind == FileType::Symlink {
                return Err(errno(libc::EOPNOTSUPP));
            }
            Ok(())
        } else {
            Err(errno(libc::EOPNOTSUPP))
        }
    }

    /// Sets an extended attribute (`flags`: [`XATTR_CREATE`], [`XATTR_REPLACE`]).
    /// An access ACL sets the mode's permission bits in the same commit
    /// (`acl.rs`).
    pub fn setxattr(&self, ino: Ino, name: &[u8], value: &[u8], flags: i32) -> FsResult<()> {
        self.setxattr_as(ino, name, value, flags, true)
    }

    /// [`Fs::setxattr`] by a caller who may keep the set-group-ID bit
    /// (`may_keep_sgid`: in the file's group, or `CAP_FSETID`) or not: an
    /// access ACL that changes the mode of a file clears the bit for the
    /// latter, as the VFS's `posix_acl_update_mode` does.
    pub fn setxattr_as(
        &self,
        ino: Ino,
        name: &[u8],
        value: &[u8],
        flags: i32,
        may_keep_sgid: bool,
    ) -> FsResult<()> {
        self.refuse_if_read_only()?;
        self.wait_for_pm_room();
        let mut g = self.lock(ino)?;
        let i = g.as_mut().expect("live");
        crate::inode_flags::check_change_names_or_xattrs(i)?;
        Self::check_xattr_name(i, name)?;
        if value.len() > XATTR_VALUE_MAX {
            return Err(errno(libc::E2BIG));
        }
        let rule = name == crate::service_state::RULE_XATTR;
        if rule {
            self.check_rule(i, value)?;
        }
        let exists = i.xattrs.contains_key(name);
        // The names must fit in one listxattr answer (64 KiB, the VFS's
        // most), or `getfattr -d`, `cp -a` and `rsync -X` fail on the file
        // for good (E2BIG): a new name past that is refused with ENOSPC,
        // as ext4 refuses xattrs past its room.
        if !exists {
            let listed: usize = i.xattrs.keys().map(|n| n.len() + 1).sum();
            if listed + name.len() + 1 > XATTR_LIST_MAX {
                return Err(errno(libc::ENOSPC));
            }
        }
        self.check_metadata_room(value.len() as u64 / terrace_format::BLOCK_SIZE + 2)?;
        if flags & XATTR_CREATE != 0 && exists {
            return Err(errno(libc::EEXIST));
        }
        if flags & XATTR_REPLACE != 0 && !exists {
            return Err(errno(libc::ENODATA));
        }
        let mut a = i.attr;
        a.ctime = now_ns();
        let mut entries = if crate::acl::is_acl_name(name) {
            let acl = crate::acl::Acl::parse(value)?;
            crate::acl::check_target(name, a.mode)?;
            let (bits, equiv) = crate::acl::equiv_mode(&acl);
            if name == crate::acl::ACL_ACCESS {
                a.mode = (a.mode & !0o777) | bits;
                if !may_keep_sgid {
                    a.mode &= !libc::S_ISGID;
                }
            }
            if name == crate::acl::ACL_ACCESS && equiv {
                // The mode bits say it all: nothing to store.
                match exists {
                    true => vec![Entry::XattrDel {
                        name: name.to_vec(),
                    }],
                    false => Vec::new(),
                }
            } else {
                crate::inode::xattr_entries(name, &acl.encode())
            }
        } else {
            crate::inode::xattr_entries(name, value)
        };
        entries.push(Entry::Attr(a));
        self.commit_one(i, entries)?;
        if rule {
            self.note_ruled(ino);
            self.kick_migration();
        }
        Ok(())
    }

    /// Reads an extended attribute.
    pub fn getxattr(&self, ino: Ino, name: &[u8]) -> FsResult<Vec<u8>> {
        let g = self.lock(ino)?;
        let i = g.as_ref().expect("live");
        if let Some(v) = self.virtual_xattr(i, name) {
            return Ok(v);
        }
        if name == crate::service_state::DAMAGED_XATTR {
            return i
                .xattrs
                .get(name)
                .cloned()
                .ok_or_else(|| errno(libc::ENODATA));
        }
        Self::check_xattr_name(i, name).map_err(|e| {
            if e.raw_os_error() == Some(libc::EPERM) {
                errno(libc::ENODATA)
            } else {
                e
            }
        })?;
        i.xattrs
            .get(name)
            .cloned()
            .ok_or_else(|| errno(libc::ENODATA))
    }

    /// Names of all extended attributes.
    pub fn listxattr(&self, ino: Ino) -> FsResult<Vec<Vec<u8>>> {
        let g = self.lock(ino)?;
        Ok(g.as_ref().expect("live").xattrs.keys().cloned().collect())
    }

    /// Removes an extended attribute.
    pub fn removexattr(&self, ino: Ino, name: &[u8]) -> FsResult<()> {
        self.refuse_if_read_only()?;
        let mut g = self.lock(ino)?;
        let i = g.as_mut().expect("live");
        crate::inode_flags::check_change_names_or_xattrs(i)?;
        // Fsck's damage mark may be removed (the owner accepts what is
        // left), never set.
        if name != crate::service_state::DAMAGED_XATTR {
            Self::check_xattr_name(i, name)?;
        }
        if !i.xattrs.contains_key(name) {
            return Err(errno(libc::ENODATA));
        }
        let mut a = i.attr;
        a.ctime = now_ns();
        self.commit_one_removal(
            i,
            vec![
                Entry::XattrDel {
                    name: name.to_vec(),
                },
                Entry::Attr(a),
            ],
        )
    }
}
