//! Namespace operations: lookup, create, mkdir, mknod, symlink, link, unlink,
//! rmdir, rename (listing a directory: `ops_readdir.rs`).
//!
//! Commit points:
//! - create/mkdir/mknod/symlink: the parent's log tail (the new slot, and for a
//!   symlink its log, are written and persisted before; until the parent commits
//!   nothing reaches them and recovery frees them as orphans).
//! - unlink/rmdir/link/rename: the journal slot clearing that publishes every
//!   involved log tail and slot state together.

use crate::commit::TxBuilder;
use crate::fs::{now_ns, Fs};
use crate::inode::Inode;
use crate::types::*;
use terrace_format::{
    Entry, InodeSlot, WriteEntry, BLOCK_SIZE, INODE_SIZE, INODE_USED, NAME_MAX, ROOT_INO,
    SYMLINK_MAX,
};

/// Trims of a directory's log one removal refused for PM room may ask for
/// before it waits instead: each that succeeds frees at least a block, so
/// this is a bound in case the pool changes under it, not a count needed.
const TRIMS_PER_REMOVAL: u32 = 32;

/// Names a file may have (ext4's `EXT4_LINK_MAX`): link fails with EMLINK
/// beyond it. Directories have no such limit on subdirectories, as on ext4
/// (its `dir_nlink` feature, on by default): their link count goes on
/// counting them (ext4 shows 1 instead, past the limit).
const LINK_MAX: u32 = 65000;

/// Checks a single path component.
pub(crate) fn check_name(name: &[u8]) -> FsResult<()> {
    if name.is_empty() {
        return Err(errno(libc::ENOENT));
    }
    if name.len() > NAME_MAX {
        return Err(errno(libc::ENAMETOOLONG));
    }
    if name.contains(&b'/') || name.contains(&0) {
        return Err(errno(libc::EINVAL));
    }
    Ok(())
}

fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

impl Fs {
    /// Looks `name` up in directory `parent`; counts a kernel reference.
    pub fn lookup(&self, parent: Ino, name: &[u8]) -> FsResult<Attr> {
        if name.len() > NAME_MAX {
            return Err(errno(libc::ENAMETOOLONG));
        }
        // "." of any inode is the inode itself: the kernel asks for it to
        // turn an NFS file handle (inode number and generation) back into
        // a file whose inode it no longer caches (export support).
        let child = if name == b"." {
            parent
        } else {
            let p = self.lock(parent)?;
            let p = p.as_ref().expect("live");
            let d = p.dir.as_ref().ok_or_else(|| errno(libc::ENOTDIR))?;
            match name {
                b".." => d.parent,
                _ => d.get(name).ok_or_else(|| errno(libc::ENOENT))?.0,
            }
        };
        let mut c = match self.lock(child) {
            // A name a read-only mount's scan found leading nowhere (the
            // inode's slot is damaged): damage, not a missing name. (A
            // read-only mount removes nothing meanwhile.)
            Err(e) if self.read_only && name != b"." && e.raw_os_error() == Some(libc::ENOENT) => {
                return Err(errno(libc::EIO))
            }
            other => other?,
        };
        let c = c.as_mut().expect("live");
        c.lookups += 1;
        Ok(c.stat())
    }

    /// Drops `n` kernel references; frees the DRAM slot of a deleted inode
    /// at 0. Returns the references left: more than 0 when the kernel
    /// looked the inode up again before this forget of an earlier
    /// incarnation reached the daemon (it still knows the inode).
    pub fn forget(&self, ino: Ino, n: u64) -> u64 {
        let Some(slot) = self.table.get(ino) else {
            return 0;
        };
        let mut g = slot.lock();
        let Some(i) = g.as_mut() else { return 0 };
        i.lookups = i.lookups.saturating_sub(n);
        let left = i.lookups;
        if i.zombie && i.lookups == 0 && i.open_count == 0 {
            // Its space went at the unlink; anything taken for it since
            // goes back with the slot (a no-op unless something committed
            // to the zombie).
            self.release_inode_space(i);
            *g = None;
            // Its number is free before it stops counting as a zombie: a
            // create that sees none left finds it (`alloc_slot`).
            self.release_slot(ino);
            self.zombies
                .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            drop(g);
        }
        left
    }

    /// Creates a regular file, device node, FIFO or socket.
    pub fn mknod(
        &self,
        parent: Ino,
        name: &[u8],
        mode: u32,
        rdev: u64,
        ctx: Ctx,
    ) -> FsResult<Attr> {
        self.refuse_if_read_only()?;
        let kind = FileType::from_mode(mode).ok_or_else(|| errno(libc::EINVAL))?;
        if kind == FileType::Directory || kind == FileType::Symlink {
            return Err(errno(libc::EINVAL));
        }
        self.create_inode(parent, name, mode, rdev, ctx, None)
    }

    /// Creates a directory.
    pub fn mkdir(&self, parent: Ino, name: &[u8], mode: u32, ctx: Ctx) -> FsResult<Attr> {
        self.refuse_if_read_only()?;
        self.create_inode(parent, name, libc::S_IFDIR | (mode & 0o7777), 0, ctx, None)
    }

    /// Creates a symbolic link to `target`.
    pub fn symlink(&self, parent: Ino, name: &[u8], target: &[u8], ctx: Ctx) -> FsResult<Attr> {
        self.refuse_if_read_only()?;
        if target.is_empty() {
            return Err(errno(libc::ENOENT));
        }
        if target.len() > SYMLINK_MAX {
            return Err(errno(libc::ENAMETOOLONG));
        }
        self.create_inode(parent, name, libc::S_IFLNK | 0o777, 0, ctx, Some(target))
    }

    /// Reads a symlink's target.
    pub fn readlink(&self, ino: Ino) -> FsResult<Vec<u8>> {
        let g = self.lock(ino)?;
        let i = g.as_ref().expect("live");
        if i.kind != FileType::Symlink {
            return Err(errno(libc::EINVAL));
        }
        if i.data_refused() {
            return Err(errno(libc::EIO));
        }
        self.read_locked(i, 0, i.attr.size as usize)
    }

    fn create_inode(
        &self,
        parent: Ino,
        name: &[u8],
        mode: u32,
        rdev: u64,
        ctx: Ctx,
        symlink: Option<&[u8]>,
    ) -> FsResult<Attr> {
        check_name(name)?;
        // Before any lock: the wait may be long (`space.rs`).
        self.wait_for_pm_room();
        let mut pg = self.lock(parent)?;
        let p = pg.as_mut().expect("live");
        let d = p.dir.as_ref().ok_or_else(|| errno(libc::ENOTDIR))?;
        if is_dot(name) || d.get(name).is_some() {
            return Err(errno(libc::EEXIST));
        }
        if p.attr.nlink == 0 {
            return Err(errno(libc::ENOENT));
        }
        crate::inode_flags::check_add_name(p)?;
        let kind = FileType::from_mode(mode).expect("valid mode");
        let is_dir = kind == FileType::Directory;
        let (ino, mut child, inherited) = self.new_inode(p, parent, mode, rdev, ctx, symlink)?;
        let now = child.btime;
        let mut pattr = p.attr;
        pattr.mtime = now;
        pattr.ctime = now;
        if is_dir {
            pattr.nlink += 1;
        }
        let entries = vec![
            Entry::DentryAdd {
                ino,
                file_type: kind.dt(),
                name: name.to_vec(),
            },
            Entry::Attr(pattr),
        ];
        if let Err(e) = self.commit_one(p, entries) {
            self.abandon_new_inode(ino, &mut child);
            return Err(e);
        }
        if let Some(d) = child.dir.as_mut() {
            d.parent = parent;
        }
        child.lookups = 1;
        let attr = child.stat();
        self.install_inode(ino, child);
        drop(pg);
        if inherited {
            self.note_ruled(ino);
        }
        Ok(attr)
    }

    /// Allocates and publishes (state word in use) the slot of a new inode
    /// of `mode` whose parent is `p` (number `parent`, locked by the caller):
    /// its owner (the directory's group under a set-group-ID directory), a
    /// symlink's target and the directory's inherited placement rule logged.
    /// Nothing names it yet: until the caller commits a name (or for good, for
    /// [`Fs::tmpfile`]) recovery frees it as an orphan. Returns the inode
    /// number, the DRAM inode (not installed) and whether it took a rule.
    pub(crate) fn new_inode(
        &self,
        p: &Inode,
        parent: Ino,
        mode: u32,
        rdev: u64,
        ctx: Ctx,
        symlink: Option<&[u8]>,
    ) -> FsResult<(Ino, Inode, bool)> {
        let kind = FileType::from_mode(mode).expect("valid mode");
        let is_dir = kind == FileType::Directory;
        self.check_metadata_room(2 + symlink.map_or(0, |_| 1))?;
        let ino = self.alloc_slot()?;
        // On the clock the file's writes will be stamped with.
        let now = self.birth_now_ns();
        // New inodes take the directory's group when it has the set-group-ID bit.
        let (gid, mode) = if p.attr.mode & libc::S_ISGID != 0 {
            (p.attr.gid, if is_dir { mode | libc::S_ISGID } else { mode })
        } else {
            (ctx.gid, mode)
        };
        // The directory's default ACL masks the mode and is passed on
        // (`acl::inherit`); without one the caller's umask applies. Not for
        // symlinks, whose mode is always 0777.
        let default_acl = match kind {
            FileType::Symlink => None,
            _ if !self.posix_acls_on() => None,
            _ => p
                .xattrs
                .get(crate::acl::ACL_DEFAULT)
                .and_then(|v| crate::acl::Acl::parse(v).ok()),
        };
        let (mode, access_acl, dir_default_acl) = match (&default_acl, kind) {
            (_, FileType::Symlink) => (mode, None, None),
            (Some(d), _) => crate::acl::inherit(d, mode),
            (None, _) => (mode & !(ctx.umask & 0o777), None, None),
        };
        let off = self.table.pm_offset(ino);
        let mut old = [0u8; 8];
        self.media
            .read(off + terrace_format::INODE_OFF_GENERATION, &mut old[..4]);
        let prev_gen = u32::from_le_bytes(old[..4].try_into().expect("4 bytes"));
        let mut slot = InodeSlot {
            log_head: 0,
            log_tail: 0,
            state: INODE_USED,
            mode,
            uid: ctx.uid,
            gid,
            generation: prev_gen.wrapping_add(1),
            rdev,
            btime_ns: now,
            parent_hint: parent,
        };
        let mut child = Inode::from_slot(ino, &slot).expect("valid mode");
        // The child's first entries, logged before the slot is published: a
        // symlink's target (its data), and the parent's placement rule, which
        // files and directories created in a ruled directory inherit.
        let mut initial: Vec<Entry> = Vec::new();
        let inherited = match (kind, p.xattrs.get(crate::service_state::RULE_XATTR)) {
            (FileType::Regular | FileType::Directory, Some(v)) => Some(v.clone()),
            _ => None,
        };
        let mut data_blocks = Vec::new();
        if let Some(target) = symlink {
            // Metadata of a create: PM's removal reserve stays free for the
            // removals (`space.rs` rule 4), as with the create's log pages.
            let block = match self.log_room(crate::space::LogUse::Foreground).take_block() {
                Some(b) => b,
                None => {
                    self.release_slot(ino);
                    return Err(errno(libc::ENOSPC));
                }
            };
            let mut page = vec![0u8; BLOCK_SIZE as usize];
            page[..target.len()].copy_from_slice(target);
            self.media.write(block.byte_offset(), &page);
            self.media.flush(block.byte_offset(), BLOCK_SIZE);
            initial.push(Entry::Write(WriteEntry {
                file_block: terrace_format::FileBlock::ZERO,
                blocks: 1,
                tier: terrace_format::TierId::PM,
                size_counter: 0,
                wflags: 0,
                block,
                size_after: target.len() as u64,
                mtime: now,
            }));
            data_blocks.push(block);
        }
        if let Some(value) = &inherited {
            initial.push(Entry::XattrSet {
                name: crate::service_state::RULE_XATTR.to_vec(),
                value: value.clone(),
            });
        }
        for (name, acl) in [
            (crate::acl::ACL_ACCESS, &access_acl),
            (crate::acl::ACL_DEFAULT, &dir_default_acl),
        ] {
            if let Some(acl) = acl {
                initial.extend(crate::inode::xattr_entries(name, &acl.encode()));
            }
        }
        if !initial.is_empty() {
            match child.log.stage(
                &*self.media,
                &self.log_room(crate::space::LogUse::Foreground),
                ino,
                crate::commit::scratch_slot(),
                &initial,
            ) {
                Ok(st) => {
                    slot.log_head = st.new_pages[0].off;
                    slot.log_tail = st.new_tail;
                    child.log.apply(st);
                    let split = child.extents.pm_clean_dirty();
                    for e in &initial {
                        child.apply(e);
                    }
                    self.note_pm_split_change(split, child.extents.pm_clean_dirty());
                }
                Err(e) => {
                    for &b in &data_blocks {
                        self.alloc.free_run(b, 1);
                    }
                    self.release_slot(ino);
                    return Err(e);
                }
            }
        }
        // The slot's content first, marked free; then the state word alone (an
        // aligned 8-byte store), so a crash never leaves an in-use slot whose
        // checksum covers half-written content.
        let state = slot.state;
        slot.state = terrace_format::INODE_FREE;
        self.media.write(off, &slot.encode());
        self.media.persist(off, INODE_SIZE as u64);
        self.media.store_u64(self.state_word(ino), state);
        self.media.flush(self.state_word(ino), 8);
        Ok((ino, child, inherited.is_some()))
    }

    /// Undoes the slot [`Fs::new_inode`] published, when the commit that
    /// was to name it failed: nothing else saw it, and fsck then finds no
    /// orphan.
    fn abandon_new_inode(&self, ino: Ino, child: &mut Inode) {
        self.media.store_u64(self.state_word(ino), 0);
        self.media.persist(self.state_word(ino), 8);
        self.release_inode_space(child);
        self.release_slot(ino);
    }

    /// Resolves `name` in `parent` without locking the child.
    fn peek_child(&self, parent: Ino, name: &[u8]) -> FsResult<(Ino, u8)> {
        let g = self.lock(parent)?;
        let p = g.as_ref().expect("live");
        let d = p.dir.as_ref().ok_or_else(|| errno(libc::ENOTDIR))?;
        d.get(name).ok_or_else(|| errno(libc::ENOENT))
    }

    /// Removes a non-directory name.
    pub fn unlink(&self, parent: Ino, name: &[u8]) -> FsResult<()> {
        self.refuse_if_read_only()?;
        check_name(name)?;
        if is_dot(name) {
            return Err(errno(if name == b"." {
                libc::EINVAL
            } else {
                libc::ENOTEMPTY
            }));
        }
        self.remove_name(parent, name, false)
    }

    /// Removes an empty directory.
    pub fn rmdir(&self, parent: Ino, name: &[u8]) -> FsResult<()> {
        self.refuse_if_read_only()?;
        if name == b"." {
            return Err(errno(libc::EINVAL));
        }
        if name == b".." {
            return Err(errno(libc::ENOTEMPTY));
        }
        check_name(name)?;
        self.remove_name(parent, name, true)
    }

    fn remove_name(&self, parent: Ino, name: &[u8], want_dir: bool) -> FsResult<()> {
        // Refused log room on PM: again after trimming the directory's log
        // (`log_trim.rs`: the pages of names removed before; each trim that
        // reports success freed a block, and a removal tries a bounded
        // number), or while waiting makes PM freer
        // (`Fs::wait_for_removal_room`).
        let mut trims = 0;
        loop {
            match self.try_remove_name(parent, name, want_dir) {
                Err(e)
                    if e.raw_os_error() == Some(libc::ENOSPC)
                        && ((trims < TRIMS_PER_REMOVAL && {
                            trims += 1;
                            self.trim_dir_log(parent).unwrap_or(false)
                        }) || self.wait_for_removal_room()) => {}
                r => return r,
            }
        }
    }

    fn try_remove_name(&self, parent: Ino, name: &[u8], want_dir: bool) -> FsResult<()> {
        loop {
            let (child, _) = self.peek_child(parent, name)?;
            let mut l = self.lock_set(&[parent, child])?;
            if l.get(parent)
                .dir
                .as_ref()
                .and_then(|d| d.get(name))
                .map(|x| x.0)
                != Some(child)
            {
                continue; // changed while unlocked; look again
            }
            crate::inode_flags::check_remove_name(l.get(parent))?;
            crate::inode_flags::check_change_names_or_xattrs(l.get(child))?;
            let now = now_ns();
            let c = l.get(child);
            let is_dir = c.kind == FileType::Directory;
            if want_dir && !is_dir {
                return Err(errno(libc::ENOTDIR));
            }
            if !want_dir && is_dir {
                return Err(errno(libc::EISDIR));
            }
            if is_dir && !c.dir.as_ref().expect("dir").is_empty() {
                return Err(errno(libc::ENOTEMPTY));
            }
            let mut tx = TxBuilder::default();
            let mut pattr = l.get(parent).attr;
            pattr.mtime = now;
            pattr.ctime = now;
            if is_dir {
                pattr.nlink -= 1;
            }
            tx.push(
                parent,
                Entry::DentryDel {
                    name: name.to_vec(),
                },
            );
            tx.push(parent, Entry::Attr(pattr));
            let c = l.get(child);
            let new_nlink = if is_dir {
                0
            } else {
                c.attr.nlink.saturating_sub(1)
            };
            let free_now = new_nlink == 0 && c.open_count == 0;
            if free_now {
                tx.extra.push((self.state_word(child), 0));
            } else {
                let mut ca = c.attr;
                ca.nlink = new_nlink;
                ca.ctime = now;
                tx.push(child, Entry::Attr(ca));
            }
            let (parts, extra) = tx.parts();
            self.commit_removal(&mut l, parts, extra)?;
            if free_now {
                self.drop_inode(&mut l, child);
            } else if new_nlink == 0 {
                l.get(child).attr.nlink = 0;
            }
            let p = l.get(parent);
            self.maybe_compact(p, crate::space::LogUse::Name);
            return Ok(());
        }
    }

    /// Frees an inode whose slot state was just cleared on media.
    pub(crate) fn drop_inode(&self, l: &mut crate::table::Locked<'_>, ino: Ino) {
        let c = l.get(ino);
        c.attr.nlink = 0;
        self.release_inode_space(c);
        if c.lookups == 0 {
            *l.slot(ino) = None;
            self.release_slot(ino);
        } else {
            self.make_zombie(l.get(ino));
        }
    }

    /// Adds a new name `newname` in `newparent` for `ino`.
    pub fn link(&self, ino: Ino, newparent: Ino, newname: &[u8]) -> FsResult<Attr> {
        self.refuse_if_read_only()?;
        self.wait_for_pm_room();
        check_name(newname)?;
        self.check_metadata_room(1)?;
        let mut l = self.lock_set(&[ino, newparent])?;
        if l.get(ino).kind == FileType::Directory {
            return Err(errno(libc::EPERM));
        }
        {
            let p = l.get(newparent);
            let d = p.dir.as_ref().ok_or_else(|| errno(libc::ENOTDIR))?;
            if is_dot(newname) || d.get(newname).is_some() {
                return Err(errno(libc::EEXIST));
            }
            if p.attr.nlink == 0 {
                return Err(errno(libc::ENOENT));
            }
            crate::inode_flags::check_add_name(p)?;
        }
        crate::inode_flags::check_change_names_or_xattrs(l.get(ino))?;
        let c = l.get(ino);
        // An unlinked file cannot be named again; an unnamed file from
        // `tmpfile` (not O_EXCL) gets its first name here (`ops_tmpfile`) —
        // unless its last close freed it already (a zombie: its slot is free
        // on PM, and the kernel, through an O_PATH reference, may still ask).
        if c.zombie || (c.attr.nlink == 0 && !c.linkable) {
            return Err(errno(libc::ENOENT));
        }
        if c.attr.nlink >= LINK_MAX {
            return Err(errno(libc::EMLINK));
        }
        let now = now_ns();
        let mut ca = c.attr;
        ca.nlink += 1;
        ca.ctime = now;
        let dt = c.kind.dt();
        let mut pa = l.get(newparent).attr;
        pa.mtime = now;
        pa.ctime = now;
        let mut tx = TxBuilder::default();
        tx.push(
            newparent,
            Entry::DentryAdd {
                ino,
                file_type: dt,
                name: newname.to_vec(),
            },
        );
        tx.push(newparent, Entry::Attr(pa));
        tx.push(ino, Entry::Attr(ca));
        let (parts, extra) = tx.parts();
        self.commit(&mut l, parts, extra)?;
        let c = l.get(ino);
        c.linkable = false;
        c.lookups += 1;
        Ok(c.stat())
    }

    /// Renames `name` in `parent` to `newname` in `newparent`.
    pub fn rename(
        &self,
        parent: Ino,
        name: &[u8],
        newparent: Ino,
        newname: &[u8],
        flags: RenameFlags,
    ) -> FsResult<()> {
        self.refuse_if_read_only()?;
        self.wait_for_pm_room();
        check_name(name)?;
        check_name(newname)?;
        if is_dot(name) || is_dot(newname) {
            return Err(errno(if flags.exchange {
                libc::EINVAL
            } else {
                libc::EBUSY
            }));
        }
        if flags.exchange && (flags.noreplace || flags.whiteout.is_some()) {
            return Err(errno(libc::EINVAL));
        }
        let _rl = self.rename_lock.lock();
        loop {
            let (src, src_dt) = self.peek_child(parent, name)?;
            let dst = match self.peek_child(newparent, newname) {
                Ok(x) => Some(x),
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => None,
                Err(e) => return Err(e),
            };
            if flags.exchange && dst.is_none() {
                return Err(errno(libc::ENOENT));
            }
            if flags.noreplace && dst.is_some() {
                return Err(errno(libc::EEXIST));
            }
            if let Some((d, _)) = dst {
                if d == src {
                    return Ok(()); // two names of one inode: POSIX says do nothing
                }
            }
            let src_is_dir = src_dt == libc::DT_DIR;
            let dst_is_dir = dst.map(|d| d.1 == libc::DT_DIR).unwrap_or(false);
            // A directory may not move below itself.
            if parent != newparent {
                if src_is_dir {
                    self.check_not_ancestor(src, newparent)?;
                }
                if flags.exchange && dst_is_dir {
                    self.check_not_ancestor(dst.expect("exists").0, parent)?;
                }
            }
            let mut set = vec![parent, newparent, src];
            if let Some((d, _)) = dst {
                set.push(d);
            }
            let mut l = self.lock_set(&set)?;
            // Re-validate under the locks (only renames change names of both; we hold
            // the rename lock, but unlink/create may have raced before we locked).
            if l.get(parent).dir.as_ref().and_then(|d| d.get(name)) != Some((src, src_dt)) {
                continue;
            }
            let cur_dst = l
                .get(newparent)
                .dir
                .as_ref()
                .ok_or_else(|| errno(libc::ENOTDIR))?
                .get(newname);
            if cur_dst != dst {
                continue;
            }
            if l.get(newparent).attr.nlink == 0 {
                return Err(errno(libc::ENOENT));
            }
            // The source leaves `parent` for `newparent`; a replaced target
            // leaves `newparent` (an exchange moves both ways).
            crate::inode_flags::check_remove_name(l.get(parent))?;
            crate::inode_flags::check_add_name(l.get(newparent))?;
            crate::inode_flags::check_change_names_or_xattrs(l.get(src))?;
            if let Some((d, _)) = dst {
                crate::inode_flags::check_remove_name(l.get(newparent))?;
                crate::inode_flags::check_change_names_or_xattrs(l.get(d))?;
                if flags.exchange {
                    crate::inode_flags::check_add_name(l.get(parent))?;
                }
            }
            if !flags.exchange {
                if let Some((d, _)) = dst {
                    if src_is_dir && !dst_is_dir {
                        return Err(errno(libc::ENOTDIR));
                    }
                    if !src_is_dir && dst_is_dir {
                        return Err(errno(libc::EISDIR));
                    }
                    if dst_is_dir && !l.get(d).dir.as_ref().expect("dir").is_empty() {
                        return Err(errno(libc::ENOTEMPTY));
                    }
                }
            }
            let now = now_ns();
            let mut tx = TxBuilder::default();
            let mut nlink_delta: std::collections::HashMap<Ino, i64> = Default::default();
            // RENAME_WHITEOUT: the whiteout's slot is published now, named by
            // nothing; the commit below gives it the source name (a crash
            // before it leaves an orphan slot that recovery frees).
            let mut whiteout = None;
            // Both forms give `newname` to the source.
            tx.push(
                newparent,
                Entry::DentryAdd {
                    ino: src,
                    file_type: src_dt,
                    name: newname.to_vec(),
                },
            );
            if flags.exchange {
                let (d, d_dt) = dst.expect("exists");
                tx.push(
                    parent,
                    Entry::DentryAdd {
                        ino: d,
                        file_type: d_dt,
                        name: name.to_vec(),
                    },
                );
                if parent != newparent {
                    let dd = d_dt == libc::DT_DIR;
                    *nlink_delta.entry(parent).or_default() += dd as i64 - src_is_dir as i64;
                    *nlink_delta.entry(newparent).or_default() += src_is_dir as i64 - dd as i64;
                }
                for i in [src, d] {
                    let mut a = l.get(i).attr;
                    a.ctime = now;
                    tx.push(i, Entry::Attr(a));
                }
            } else {
                if let Some(ctx) = flags.whiteout {
                    let mode = libc::S_IFCHR;
                    let (w, child, _) =
                        self.new_inode(l.get(parent), parent, mode, 0, ctx, None)?;
                    tx.push(
                        parent,
                        Entry::DentryAdd {
                            ino: w,
                            file_type: libc::DT_CHR,
                            name: name.to_vec(),
                        },
                    );
                    whiteout = Some((w, child));
                } else {
                    tx.push(
                        parent,
                        Entry::DentryDel {
                            name: name.to_vec(),
                        },
                    );
                }
                if src_is_dir && parent != newparent {
                    *nlink_delta.entry(parent).or_default() -= 1;
                    *nlink_delta.entry(newparent).or_default() += 1;
                }
                let mut a = l.get(src).attr;
                a.ctime = now;
                tx.push(src, Entry::Attr(a));
                if let Some((d, _)) = dst {
                    if dst_is_dir {
                        *nlink_delta.entry(newparent).or_default() -= 1;
                    }
                    let v = l.get(d);
                    let new_nlink = if dst_is_dir {
                        0
                    } else {
                        v.attr.nlink.saturating_sub(1)
                    };
                    if new_nlink == 0 && v.open_count == 0 {
                        tx.extra.push((self.state_word(d), 0));
                    } else {
                        let mut a = v.attr;
                        a.nlink = new_nlink;
                        a.ctime = now;
                        tx.push(d, Entry::Attr(a));
                    }
                }
            }
            for p in [parent, newparent] {
                let mut a = l.get(p).attr;
                a.mtime = now;
                a.ctime = now;
                a.nlink = (a.nlink as i64 + nlink_delta.get(&p).copied().unwrap_or(0)) as u32;
                tx.push(p, Entry::Attr(a));
                if parent == newparent {
                    break;
                }
            }
            let freed = tx.extra.first().map(|_| dst.expect("victim").0);
            // A new name in the same directory takes the old one's readdir
            // position (DRAM only: cookies live as long as the mount).
            let keep_cookie =
                (parent == newparent && dst.is_none() && !flags.exchange && whiteout.is_none())
                    .then(|| l.get(parent).dir.as_ref().and_then(|d| d.cookie_of(name)))
                    .flatten();
            let (parts, extra) = tx.parts();
            if let Err(e) = self.commit(&mut l, parts, extra) {
                if let Some((w, mut child)) = whiteout {
                    self.abandon_new_inode(w, &mut child);
                }
                return Err(e);
            }
            if let Some((w, child)) = whiteout {
                // The kernel was given no entry for it: no lookup to count.
                self.install_inode(w, child);
            }
            if let Some(c) = keep_cookie {
                if let Some(d) = l.get(parent).dir.as_mut() {
                    d.move_to_cookie(newname, c);
                }
            }
            if src_is_dir && parent != newparent {
                l.get(src).dir.as_mut().expect("dir").parent = newparent;
            }
            if flags.exchange && dst_is_dir && parent != newparent {
                l.get(dst.expect("exists").0)
                    .dir
                    .as_mut()
                    .expect("dir")
                    .parent = parent;
            }
            if let Some(v) = freed {
                self.drop_inode(&mut l, v);
            } else if let Some((d, _)) = dst {
                if !flags.exchange && dst_is_dir {
                    l.get(d).attr.nlink = 0;
                }
            }
            return Ok(());
        }
    }

    /// EINVAL when `dir` is `target` or one of its ancestors.
    fn check_not_ancestor(&self, dir: Ino, target: Ino) -> FsResult<()> {
        let mut cur = target;
        loop {
            if cur == dir {
                return Err(errno(libc::EINVAL));
            }
            if cur == ROOT_INO {
                return Ok(());
            }
            let g = self.lock(cur)?;
            cur = g
                .as_ref()
                .expect("live")
                .dir
                .as_ref()
                .map(|d| d.parent)
                .unwrap_or(ROOT_INO);
        }
    }
}
