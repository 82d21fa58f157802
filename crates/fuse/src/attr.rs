//! Attribute changes, and the set-ID bits and file capabilities the adapter
//! clears itself under `FUSE_HANDLE_KILLPRIV_V2` ([`setid`] decides which
//! bits go).
//!
//! Invariants:
//! - Privileges are cleared only when the kernel agreed to KILLPRIV_V2
//!   (otherwise the kernel clears them itself), and before the change that
//!   calls for it is acknowledged.
//! - A mode the daemon changes on its own initiative is followed by an
//!   invalidation of the kernel's cached attributes; a truncate marks the
//!   file changed for the page cache ([`crate::page_cache`]).

use crate::adapter::FuseAdapter;
use crate::invalidate::Stale;
use crate::setid;
use fuser::INodeNo;
use std::io;
use terrace_core::{Attr, SetAttr, SetTime};

/// setattr of `ino` by `caller`. Truncate by an unprivileged caller and
/// any chown drop set-ID bits and file capabilities (the kernel leaves it to
/// us under KILLPRIV_V2), unless the change sets the mode itself. With the
/// new attributes, the range to drop before replying: past the new size
/// while a fill of the file's pages runs ([`crate::fill`]), so that the
/// truncate is acknowledged after the fill's last store. `with_handle`: the
/// request named an open of the file (`FATTR_FH`).
pub(crate) fn setattr(
    a: &FuseAdapter,
    caller: &setid::Caller,
    ino: u64,
    mut change: SetAttr,
    with_handle: bool,
) -> io::Result<(Attr, Option<Stale>)> {
    if a.writeback_cache && kernel_clock_for_now(&change, with_handle) {
        // Under the writeback cache the kernel trusts its own times and sends
        // its clock as an explicit mtime, with a ctime: where the caller
        // asked for "now" (`utime(NULL)`, `touch`: the atime still says
        // "now"), and when it writes back the times of its cached writes
        // (mtime and ctime alone, with the open's handle, at `close` and
        // `fsync`). An append-only file allows times set to now only, so for
        // one such a request means now: else `utime(NULL)` failed (xfstests
        // generic/079) and so did `close` after an append. Elsewhere the
        // explicit time stands (an atime of now beside a chosen mtime is a
        // valid `utimensat`).
        let append_only =
            a.fs.inode_flags(ino)
                .is_ok_and(|f| f & terrace_core::inode_flags::ATTR_FLAG_APPEND != 0);
        if append_only {
            change.mtime = Some(SetTime::Now);
        }
    }
    let chown = change.uid.is_some() || change.gid.is_some();
    if a.killpriv && change.mode.is_none() && (chown || change.size.is_some()) {
        if let Ok(cur) = a.fs.getattr(ino) {
            let keep = if chown {
                setid::bits_after_chown(cur.mode, cur.gid, caller)
            } else {
                setid::bits_after_modification(cur.mode, cur.gid, caller)
            };
            if keep != cur.mode & 0o7777 {
                change.mode = Some(keep);
            }
            a.drop_file_capability(ino);
        }
    }
    let truncate = change.size;
    let attr = a.fs.setattr(ino, change)?;
    let stale = match truncate {
        // The kernel cuts its own pages at a truncate made through it; the
        // file is still marked changed, so the next cached open starts from
        // a clean page cache.
        Some(size) if a.cached.truncated(ino) => Some(Stale {
            ino,
            offset: size,
            len: 0,
        }),
        _ => None,
    };
    Ok((attr, stale))
}

/// A setattr of times only with an explicit mtime and a ctime, and either
/// an atime of "now" (`utime(NULL)`) or, with an open's handle, no atime
/// (the kernel writing back the times of its cached writes): what the
/// kernel sends under the writeback cache for times that mean "now" (see
/// [`setattr`]). (`futimens` of an mtime alone also looks so; on an
/// append-only file it then sets now instead of failing.)
fn kernel_clock_for_now(c: &SetAttr, with_handle: bool) -> bool {
    c.size.is_none()
        && c.mode.is_none()
        && c.uid.is_none()
        && c.gid.is_none()
        && c.ctime.is_some()
        && matches!(c.mtime, Some(SetTime::At(_)))
        && match c.atime {
            Some(SetTime::Now) => true,
            None => with_handle,
            Some(SetTime::At(_)) => false,
        }
}

impl FuseAdapter {
    /// Clears set-ID bits (as [`setid::bits_after_modification`] decides) and
    /// file capabilities after `caller` modified the data or size of `ino`.
    /// Called before the modification, as the VFS's `file_remove_privs`:
    /// the file never holds new data with its old privileges, and a
    /// modification that then fails (ENOSPC) has dropped them all the same.
    /// Its error (EPERM: set-ID bits of an append-only file, as ext4 says)
    /// fails the modification.
    pub(crate) fn kill_priv(&self, ino: u64, caller: &setid::Caller) -> io::Result<()> {
        let Ok(a) = self.fs.getattr(ino) else {
            return Ok(());
        };
        let keep = setid::bits_after_modification(a.mode, a.gid, caller);
        self.drop_privileges(ino, keep)
    }

    /// Removes the file capability of `ino`, if it has one (set-ID bits
    /// stay).
    pub(crate) fn drop_file_capability(&self, ino: u64) {
        let _ = self.drop_privileges(ino, 0o7777);
    }

    /// [`terrace_core::Fs::drop_privileges`], then drops the kernel's cached
    /// attributes (which still hold the old mode) when anything changed.
    fn drop_privileges(&self, ino: u64, keep: u32) -> io::Result<()> {
        if self.fs.drop_privileges(ino, keep)? {
            self.drop_kernel_attrs(ino);
        }
        Ok(())
    }

    /// Makes the kernel forget its cached attributes of `ino`, which the
    /// daemon changed on its own: offset -1 drops the attributes only, so
    /// the page cache stays and no inode or page lock is taken.
    pub(crate) fn drop_kernel_attrs(&self, ino: u64) {
        if let Some(n) = self.notifier.get() {
            let _ = n.inval_inode(INodeNo(ino), -1, 0);
        }
    }
}
