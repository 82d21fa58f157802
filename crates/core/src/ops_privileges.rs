//! Dropping a file's privileges when its data changes: its set-ID bits
//! (those the caller may not keep) and its file capability
//! (`security.capability`), as the VFS's `file_remove_privs` does before a
//! write, a truncate, a fallocate or a copy into the file.
//!
//! As on ext4 (`notify_change`), an append-only file whose set-ID bits a
//! modification would clear refuses it with EPERM — the modification then
//! fails, before anything is written — while its file capability alone is
//! dropped (that is no mode change). An immutable file takes no change at
//! all, so nothing is dropped there (the modification itself is refused).

use crate::fs::{now_ns, Fs};
use crate::types::*;
use terrace_format::Entry;

/// The xattr that holds a file's capabilities.
pub const SECURITY_CAPABILITY: &[u8] = b"security.capability";

impl Fs {
    /// Clears the set-ID bits of regular file `ino` that `keep` (permission
    /// bits) lacks, and removes its file capability, in one commit: only
    /// ever removes privileges (bits of `keep` the file lacks are not
    /// added). Whether anything changed; EPERM, changing nothing, when
    /// set-ID bits would be cleared on an append-only file (module doc).
    pub fn drop_privileges(&self, ino: Ino, keep: u32) -> FsResult<bool> {
        let mut g = self.lock(ino)?;
        let i = g.as_mut().expect("live");
        if i.zombie || i.kind != FileType::Regular || crate::inode_flags::immutable(i) {
            return Ok(false);
        }
        let mut a = i.attr;
        let setid = libc::S_ISUID | libc::S_ISGID;
        let mode = a.mode & !(setid & !keep);
        let has_capability = i.xattrs.contains_key(SECURITY_CAPABILITY);
        if mode == a.mode && !has_capability {
            return Ok(false);
        }
        if mode != a.mode && crate::inode_flags::append_only(i) {
            return Err(errno(libc::EPERM));
        }
        a.mode = mode;
        a.ctime = now_ns();
        let mut entries = Vec::new();
        if has_capability {
            entries.push(Entry::XattrDel {
                name: SECURITY_CAPABILITY.to_vec(),
            });
        }
        entries.push(Entry::Attr(a));
        self.commit_one(i, entries)?;
        Ok(true)
    }
}
