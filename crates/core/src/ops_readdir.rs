//! Listing a directory: `readdir`, and `readdirplus`, which gives each
//! entry's attributes and counts the kernel's lookups of them.

use crate::dir_index::FIRST_COOKIE;
use crate::fs::Fs;
use crate::types::*;

impl Fs {
    /// Lists directory entries after cookie `offset` (0 = from the start,
    /// "." and ".." included), at most `max` of them.
    pub fn readdir(&self, ino: Ino, offset: u64, max: usize) -> FsResult<Vec<DirEntry>> {
        let g = self.lock(ino)?;
        let i = g.as_ref().expect("live");
        let d = i.dir.as_ref().ok_or_else(|| errno(libc::ENOTDIR))?;
        let mut out = Vec::new();
        if offset < 1 {
            out.push(DirEntry {
                ino,
                next_offset: 1,
                kind: FileType::Directory,
                name: b".".to_vec(),
            });
        }
        if offset < 2 {
            out.push(DirEntry {
                ino: d.parent,
                next_offset: 2,
                kind: FileType::Directory,
                name: b"..".to_vec(),
            });
        }
        for (c, name, child, dt) in d.after(offset.max(FIRST_COOKIE - 1)) {
            if out.len() >= max {
                break;
            }
            out.push(DirEntry {
                ino: child,
                next_offset: c,
                kind: FileType::from_dt(dt).unwrap_or(FileType::Regular),
                name: name.to_vec(),
            });
        }
        out.truncate(max.max(1));
        Ok(out)
    }

    /// [`Fs::readdir`] with each entry's attributes (`FUSE_READDIRPLUS`):
    /// the kernel makes a dentry and inode of every entry it is given
    /// attributes for, so each such entry counts as one lookup here, as
    /// [`Fs::lookup`] counts it (the kernel forgets it later); "." and ".."
    /// get no attributes (the kernel ignores them) and count nothing. An
    /// entry unlinked after the directory was read gets no attributes
    /// either. Entries the caller does not pass on must be given back with
    /// [`Fs::forget`]`(ino, 1)`.
    pub fn readdirplus(
        &self,
        ino: Ino,
        offset: u64,
        max: usize,
    ) -> FsResult<Vec<(DirEntry, Option<Attr>)>> {
        // The directory's lock is released before each child's is taken
        // (inode locks nest only in ascending order, §4a).
        let entries = self.readdir(ino, offset, max)?;
        Ok(entries
            .into_iter()
            .map(|e| {
                let attr = if e.name == b"." || e.name == b".." {
                    None
                } else {
                    self.lock(e.ino).ok().and_then(|mut g| {
                        let c = g.as_mut().filter(|c| !c.zombie)?;
                        c.lookups += 1;
                        Some(c.stat())
                    })
                };
                (e, attr)
            })
            .collect())
    }
}
