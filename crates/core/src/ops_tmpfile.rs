//! Unnamed files (`open(dir, O_TMPFILE)`): a regular file created open and
//! in no directory, with link count 0, like a file unlinked while open.
//!
//! Lifetime (docs/design.md, "Unnamed files (O_TMPFILE)"):
//! - created: its slot is published (state word in use, as for any create)
//!   but no directory names it, so it is an orphan from the start;
//! - closed without a name: [`Fs::release`] frees it as it frees a file
//!   unlinked while open (commit point: its state word cleared by a journal
//!   commit);
//! - named by [`Fs::link`] (not after `O_EXCL`): one journal transaction adds
//!   the directory entry and logs the file's link count 1, so a crash leaves
//!   either that name or an orphan;
//! - after a crash: recovery frees every in-use slot no directory reaches
//!   (`recovery.rs`), so an unnamed file is reclaimed at the next mount and
//!   never leaks; a named one is an ordinary file.

use crate::fs::Fs;
use crate::types::*;
use std::sync::atomic::Ordering;

impl Fs {
    /// Creates an unnamed regular file of `mode` (permission bits, `S_IFREG`
    /// optional) in directory `parent` and opens it: returns its attributes
    /// (link count 0) and a handle number, counting one kernel reference and
    /// one open handle, as create + open do. Ownership and the set-group-ID
    /// rule are create's, and the file takes the directory's placement rule.
    /// Unless `flags` (open(2) flags) has `O_EXCL`, [`Fs::link`] may give it
    /// a name; otherwise it is freed by its last [`Fs::release`].
    pub fn tmpfile(&self, parent: Ino, mode: u32, flags: i32, ctx: Ctx) -> FsResult<(Attr, u64)> {
        self.refuse_if_read_only()?;
        let mode = match mode & libc::S_IFMT {
            0 | libc::S_IFREG => libc::S_IFREG | (mode & 0o7777),
            _ => return Err(errno(libc::EINVAL)),
        };
        // Before any lock: the wait may be long (`space.rs`).
        self.wait_for_pm_room();
        let mut pg = self.lock(parent)?;
        let p = pg.as_mut().expect("live");
        if p.dir.is_none() {
            return Err(errno(libc::ENOTDIR));
        }
        if p.attr.nlink == 0 {
            return Err(errno(libc::ENOENT));
        }
        crate::inode_flags::check_add_name(p)?;
        let (ino, mut child, inherited) = self.new_inode(p, parent, mode, 0, ctx, None)?;
        // Nothing to commit: no name, and the parent does not change. The
        // link count 0 is DRAM's; on media the file is an orphan whatever
        // its log says, until `link` commits a name with its count.
        child.attr.nlink = 0;
        child.linkable = flags & libc::O_EXCL == 0;
        child.lookups = 1;
        child.open_count = 1;
        let attr = child.stat();
        self.install_inode(ino, child);
        drop(pg);
        if inherited {
            self.note_ruled(ino);
        }
        Ok((attr, self.next_fh.fetch_add(1, Ordering::Relaxed)))
    }
}
