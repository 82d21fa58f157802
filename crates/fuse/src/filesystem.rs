//! The one `impl Filesystem for FuseAdapter` that fuser allows: each method
//! marks its request's arrival ([`FuseAdapter::arrived`]: timing, polling
//! after the reply), hands it to the core — directly, or through the file
//! of its concern when it needs translating — and answers through
//! `reply.rs`. Nothing here decides anything; methods are grouped as the
//! files are: attributes (`attr.rs`), directories and names (`dir.rs`,
//! `dirplus.rs`), file I/O (`file.rs`), extended attributes (`xattr.rs`),
//! special operations (`special.rs`).
//!
//! Invariant: every method holds its arrival guard until it has replied,
//! except a request the core says may wait on an object store (a read, a
//! write, a truncate, a copy: `Fs::*_may_wait_on_network`), handed with its
//! reply to a pool thread ([`FuseAdapter::off_request`], `object_waits.rs`),
//! whose guard ends at the hand-over.

use crate::adapter::FuseAdapter;
use crate::convert::{ctx, set_time, time_to_ns};
use crate::latency::Op;
use crate::{attr, dir, dirplus, file, reply, setid, special, xattr};
use fuser::{
    AccessFlags, CopyFileRangeFlags, Errno, FileHandle, Filesystem, INodeNo, IoctlFlags,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLseek, ReplyOpen,
    ReplyStatfs, ReplyStatx, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::SystemTime;
use terrace_core::Ctx;
use terrace_core::SetAttr;

impl Filesystem for FuseAdapter {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        self.negotiate(config);
        Ok(())
    }

    // Attributes and lookups.

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let _req = self.arrived(Op::Lookup);
        let found = self.fs.lookup(parent.0, name.as_bytes());
        if let Ok(a) = &found {
            self.listing.looked_up(a.ino);
        }
        reply::lookup(reply, found);
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        // No reply, so no polling after it: only the timer.
        let _timer = self.latency.as_deref().map(|l| l.start(Op::Forget));
        // A forget of an inode the kernel evicted can reach the daemon after
        // the kernel looked it up again (a batch of forgets is served one by
        // one while other requests go on): the page-cache state then belongs
        // to the inode the kernel holds now, and stays.
        if self.fs.forget(ino.0, nlookup) == 0 && self.cached.forget(ino.0) {
            self.forgot_while_filling(ino.0);
        }
    }

    // batch_forget: fuser's default calls `forget` for each node (its ForgetOne type
    // is not exported, so it cannot be overridden).

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let _req = self.arrived(Op::Getattr);
        // With a handle: maybe the kernel's check before a cached write of a
        // file whose write-back was refused for room (`refused_writebacks`).
        if fh.is_some()
            && self
                .refused_writebacks
                .still_refused(ino.0, || self.room_bytes())
        {
            return reply.error(Errno::ENOSPC);
        }
        reply::attr(reply, self.fs.getattr(ino.0));
    }

    fn statx(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: Option<FileHandle>,
        _flags: u32,
        _mask: u32,
        reply: ReplyStatx,
    ) {
        // Sent for a statx that asks for the birth time (`stat`, `ls
        // --time=birth`); the kernel keeps it with the other attributes.
        let _req = self.arrived(Op::Getattr);
        match self.fs.getattr(ino.0) {
            Ok(a) => reply.statx(&reply::TTL, &crate::convert::file_attr(&a)),
            Err(e) => reply.error(reply::errno_of(&e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let _req = self.arrived(Op::Setattr);
        let change = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(set_time),
            mtime: mtime.map(set_time),
            ctime: ctime.map(time_to_ns),
        };
        let caller = setid::Caller::of(req);
        if size.is_some_and(|s| self.fs.truncate_may_wait_on_network(ino.0, s)) {
            return self.off_request(move |a| {
                let r = attr::setattr(a, &caller, ino.0, change, fh.is_some());
                a.reply_after(r, move |r| reply::attr(reply, r));
            });
        }
        let r = attr::setattr(self, &caller, ino.0, change, fh.is_some());
        self.reply_after(r, move |r| reply::attr(reply, r));
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let _req = self.arrived(Op::Statfs);
        let s = self.fs.statfs();
        reply.statfs(
            s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.bsize,
        );
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        let _req = self.arrived(Op::Access);
        // Mounted with default_permissions: the kernel has already checked.
        reply.ok();
    }

    // Directories and names.

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let _req = self.arrived(Op::Readlink);
        reply::data(reply, self.fs.readlink(ino.0));
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let _req = self.arrived(Op::Mknod);
        let r = self.fs.mknod(
            parent.0,
            name.as_bytes(),
            mode,
            u64::from(rdev),
            Ctx { umask, ..ctx(req) },
        );
        reply::entry(reply, r);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let _req = self.arrived(Op::Mkdir);
        let r = self
            .fs
            .mkdir(parent.0, name.as_bytes(), mode, Ctx { umask, ..ctx(req) });
        reply::entry(reply, r);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _req = self.arrived(Op::Unlink);
        reply::empty(reply, self.fs.unlink(parent.0, name.as_bytes()));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _req = self.arrived(Op::Rmdir);
        reply::empty(reply, self.fs.rmdir(parent.0, name.as_bytes()));
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let _req = self.arrived(Op::Symlink);
        let target = target.as_os_str().as_bytes();
        let r = self
            .fs
            .symlink(parent.0, link_name.as_bytes(), target, ctx(req));
        reply::entry(reply, r);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let _req = self.arrived(Op::Rename);
        let r = dir::rename_flags(flags, ctx(req)).and_then(|f| {
            let (name, newname) = (name.as_bytes(), newname.as_bytes());
            self.fs.rename(parent.0, name, newparent.0, newname, f)
        });
        reply::empty(reply, r);
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let _req = self.arrived(Op::Link);
        reply::entry(reply, self.fs.link(ino.0, newparent.0, newname.as_bytes()));
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let _req = self.arrived(Op::Opendir);
        reply::opened(reply, dir::opendir(self, ino.0, flags.0));
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        let _req = self.arrived(Op::Readdir);
        dir::fill(&self.fs, ino.0, offset, reply);
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        let _req = self.arrived(Op::Readdirplus);
        dirplus::fill(&self.fs, &self.listing, ino.0, offset, reply);
    }

    fn releasedir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        let _req = self.arrived(Op::Releasedir);
        reply::empty(reply, self.fs.release(ino.0));
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let _req = self.arrived(Op::Fsyncdir);
        let r = self.fs.fsync(ino.0, datasync);
        reply::fsync(reply, r, self.fs.fsync_is_noop());
    }

    // File I/O.

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let _req = self.arrived(Op::Open);
        file::open(self, ino.0, flags.0, reply);
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let _req = self.arrived(Op::Read);
        let size = size as usize;
        // An open with O_NOATIME leaves the access time alone, as on ext4.
        let noatime = flags.0 & libc::O_NOATIME != 0;
        let read = move |fs: &terrace_core::Fs| match noatime {
            true => fs.read_noatime(ino.0, offset, size),
            false => fs.read(ino.0, offset, size),
        };
        if self.fs.read_may_wait_on_network(ino.0, offset, size) {
            return self.off_request(move |a| reply::data(reply, read(&a.fs)));
        }
        reply::data(reply, read(&self.fs));
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let _req = self.arrived(Op::Write);
        let caller = setid::Caller::of(req);
        let through = file::Through {
            fh: fh.0,
            flags: flags.0,
        };
        if self.fs.write_may_wait_on_network(ino.0, offset, data.len()) {
            // The request's buffer is the session's: the data is copied.
            let data = data.to_vec();
            return self.off_request(move |a| {
                let r = file::write(a, caller, ino.0, through, offset, &data, write_flags);
                a.reply_after(r, move |r| reply::written(reply, r));
            });
        }
        let r = file::write(self, caller, ino.0, through, offset, data, write_flags);
        self.reply_after(r, move |r| reply::written(reply, r));
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        let _req = self.arrived(Op::Flush);
        // Every write is committed (or in the DRAM cache, whose write-back
        // does not depend on close) when it returns, and locks are the
        // kernel's: close has nothing to push. ENOSYS tells the kernel so
        // once; it then completes every later close() without a FLUSH request
        // (one round trip less per close), after writing back any dirty mmap
        // pages as it always does.
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let _req = self.arrived(Op::Release);
        reply::empty(reply, file::release(self, ino.0, fh.0, flags.0));
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let _req = self.arrived(Op::Fsync);
        if self.fs.fsync_may_wait_on_network(ino.0) {
            // Its write-back may upload (seconds, or the retry budget while
            // the store is down): off the request threads. A pool with an
            // object tier never leaves fsync to the kernel.
            return self
                .off_request(move |a| reply::fsync(reply, a.fs.fsync(ino.0, datasync), false));
        }
        let r = self.fs.fsync(ino.0, datasync);
        // Before the ENOSYS that makes the kernel stop sending fsyncs, the
        // core stops caching writes for good (a tier may be attached later).
        let noop = r.is_ok() && self.fsync_needs_no_request();
        let r = if noop {
            self.fs.leave_fsync_to_kernel()
        } else {
            r
        };
        reply::fsync(reply, r, noop);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let _req = self.arrived(Op::Create);
        let caller = Ctx { umask, ..ctx(req) };
        reply::created(
            reply,
            file::create(self, caller, parent.0, name, mode, flags),
        );
    }

    fn tmpfile(
        &self,
        req: &Request,
        parent: INodeNo,
        _name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let _req = self.arrived(Op::Tmpfile);
        let caller = Ctx { umask, ..ctx(req) };
        reply::created(reply, file::tmpfile(self, caller, parent.0, mode, flags));
    }

    // Extended attributes.

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let _req = self.arrived(Op::Setxattr);
        let r = xattr::set(
            self,
            &setid::Caller::of(req),
            ino.0,
            name.as_bytes(),
            value,
            flags,
        );
        reply::empty(reply, r);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let _req = self.arrived(Op::Getxattr);
        let r = xattr::name_allowed(self, name.as_bytes())
            .and_then(|()| self.fs.getxattr(ino.0, name.as_bytes()));
        xattr::send(reply, size, r);
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let _req = self.arrived(Op::Listxattr);
        let caller = setid::Caller::of(req);
        let r = self
            .fs
            .listxattr(ino.0)
            .map(|names| xattr::name_list(xattr::listed(self, &caller, names)));
        xattr::send(reply, size, r);
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _req = self.arrived(Op::Removexattr);
        let r = xattr::name_allowed(self, name.as_bytes())
            .and_then(|()| self.fs.removexattr(ino.0, name.as_bytes()));
        reply::empty(reply, r);
    }

    // Special operations.

    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        let _req = self.arrived(Op::Ioctl);
        let caller = setid::Caller::of(req);
        match crate::ioctl::ioctl(self, &caller, ino.0, cmd, in_data, out_size) {
            Ok(out) => reply.ioctl(0, &out),
            Err(e) => reply.error(reply::errno_of(&e)),
        }
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let _req = self.arrived(Op::Fallocate);
        let caller = setid::Caller::of(req);
        if self.fs.fallocate_may_wait_on_network(ino.0, offset, length) {
            return self.off_request(move |a| {
                let r = special::fallocate(a, &caller, ino.0, offset, length, mode);
                a.reply_after(r, move |r| reply::empty(reply, r));
            });
        }
        let r = special::fallocate(self, &caller, ino.0, offset, length, mode);
        self.reply_after(r, move |r| reply::empty(reply, r));
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        let _req = self.arrived(Op::Lseek);
        special::lseek(self, ino.0, offset, whence, move |r| {
            reply::offset(reply, r)
        });
    }

    fn copy_file_range(
        &self,
        req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        let _req = self.arrived(Op::CopyFileRange);
        let (from, to) = ((ino_in.0, offset_in), (ino_out.0, offset_out));
        let caller = setid::Caller::of(req);
        let (i, o) = (ino_in.0, ino_out.0);
        if self
            .fs
            .copy_may_wait_on_network(i, offset_in, o, offset_out, len)
        {
            return self.off_request(move |a| {
                let r = special::copy_file_range(a, &caller, from, to, len, flags);
                a.reply_after(r, move |r| reply::written(reply, r));
            });
        }
        let r = special::copy_file_range(self, &caller, from, to, len, flags);
        self.reply_after(r, move |r| reply::written(reply, r));
    }
}
