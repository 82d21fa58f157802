//! Extended attributes: the size-probe protocol of getxattr/listxattr, the
//! NUL-separated name list, and the POSIX ACL names (`system.posix_acl_*`):
//! refused unless the kernel agreed to `FUSE_POSIX_ACL` (`-o noacl`), the
//! SELinux label unless `-o selinux_labels` ([`name_allowed`]), and
//! an access ACL set by a caller outside the file's group without
//! `CAP_FSETID` clears the set-group-ID bit (the VFS's
//! `posix_acl_update_mode`, which the kernel leaves to the file system).
//!
//! Invariant: a value or list larger than the caller's buffer is ERANGE,
//! never truncated; `size == 0` asks for the length only.

use crate::adapter::FuseAdapter;
use crate::reply::{errno_of, refuse};
use crate::setid::Caller;
use fuser::{Errno, ReplyXattr};
use std::io;
use terrace_core::acl::{is_acl_name, ACL_ACCESS};

/// The SELinux label's name: stored only with `-o selinux_labels`.
pub(crate) const SELINUX_LABEL: &[u8] = b"security.selinux";

/// EOPNOTSUPP for a name the mount does not support: an ACL name when it
/// has no POSIX ACLs, the SELinux label unless `-o selinux_labels`. For
/// the label, that is what a file system without SELinux labels answers:
/// coreutils `ls -l` asks each file for it, and stops asking on a device
/// that answers EOPNOTSUPP once, where every ENODATA cost a round trip per
/// file (design.md §5g0). A host with SELinux enabled labels a FUSE mount
/// itself and does not ask.
pub(crate) fn name_allowed(a: &FuseAdapter, name: &[u8]) -> io::Result<()> {
    if !a.posix_acl && is_acl_name(name) {
        return Err(refuse(libc::EOPNOTSUPP));
    }
    if !a.selinux_labels && name == SELINUX_LABEL {
        return Err(refuse(libc::EOPNOTSUPP));
    }
    Ok(())
}

/// listxattr's names as the mount shows them: without the SELinux label
/// unless `-o selinux_labels` (a label stored before stays, unseen), and
/// without `trusted.*` names for callers lacking CAP_SYS_ADMIN.
pub(crate) fn listed(a: &FuseAdapter, caller: &Caller, mut names: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    if !a.selinux_labels {
        names.retain(|n| n != SELINUX_LABEL);
    }
    // `trusted.*` names are listed to callers with CAP_SYS_ADMIN only, as
    // ext4 and tmpfs list them: the kernel passes the daemon's list on as
    // it is. (/proc is read only when there is such a name.)
    if names.iter().any(|n| n.starts_with(b"trusted.")) && !caller.has_sys_admin() {
        names.retain(|n| !n.starts_with(b"trusted."));
    }
    names
}

/// setxattr by `caller`.
pub(crate) fn set(
    a: &FuseAdapter,
    caller: &Caller,
    ino: u64,
    name: &[u8],
    value: &[u8],
    flags: i32,
) -> io::Result<()> {
    name_allowed(a, name)?;
    let may_keep_sgid = if name == ACL_ACCESS {
        let gid = a.fs.getattr(ino)?.gid;
        caller.in_group(gid) || caller.has_fsetid()
    } else {
        true
    };
    a.fs.setxattr_as(ino, name, value, flags, may_keep_sgid)
}

/// Replies to getxattr/listxattr with `r` (the value, or the name list):
/// `size == 0` asks for the length only.
pub(crate) fn send(reply: ReplyXattr, size: u32, r: io::Result<Vec<u8>>) {
    let data = match r {
        Ok(d) => d,
        Err(e) => return reply.error(errno_of(&e)),
    };
    if size == 0 {
        match u32::try_from(data.len()) {
            Ok(n) => reply.size(n),
            Err(_) => reply.error(Errno::from_i32(libc::E2BIG)),
        }
    } else if data.len() > size as usize {
        reply.error(Errno::from_i32(libc::ERANGE));
    } else {
        reply.data(&data);
    }
}

/// listxattr's answer: every name followed by a NUL.
pub(crate) fn name_list(names: Vec<Vec<u8>>) -> Vec<u8> {
    let mut buf = Vec::new();
    for n in names {
        buf.extend_from_slice(&n);
        buf.push(0);
    }
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_listed_nul_terminated() {
        assert_eq!(name_list(vec![]), b"");
        assert_eq!(
            name_list(vec![b"user.a".to_vec(), b"trusted.b".to_vec()]),
            b"user.a\0trusted.b\0"
        );
    }
}
