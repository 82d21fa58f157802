//! FUSE adapter of Terrace: the only crate that talks to the kernel through
//! `fuser`. [`FuseAdapter`] is a thin translation of every FUSE request into a
//! call on [`terrace_core::Fs`]; [`mount`] mounts it and runs the session on its
//! own threads; [`unmount`] detaches a mount point.
//!
//! Choices (see the design notes):
//! - `default_permissions` is always on: the kernel checks permissions, so
//!   `access` just says yes.
//! - No writeback cache: every `write()` reaches the core when it is made
//!   (the placement predictor must see the real writes). Files opened
//!   write-only get `FOPEN_DIRECT_IO` when the kernel offers
//!   `FUSE_DIRECT_IO_ALLOW_MMAP`, so a write() of up to 1 MiB is one request
//!   and one atomic commit (through the page cache the kernel splits writes
//!   at partial pages); opens for reading — read-only and read-write — go
//!   through the kernel's page cache (write-through for writes), kept while
//!   the file is unchanged ([`page_cache`]): reads of hot data are memory
//!   copies, and a shared mapping and write() of one descriptor share one
//!   copy of each page. Kernels without that flag get `FOPEN_KEEP_CACHE` for
//!   every open.
//! - Locks (`getlk`/`setlk`) are not implemented: fuser does not ask for
//!   `FUSE_POSIX_LOCKS`/`FUSE_FLOCK_LOCKS`, so the kernel keeps POSIX locks and
//!   flocks locally, which is correct for a single-host file system.
//! - `FUSE_HANDLE_KILLPRIV_V2` when the kernel offers it: the adapter clears
//!   set-user/group-ID bits and `security.capability` on unprivileged writes,
//!   truncates and on chown, so the kernel no longer asks for
//!   `security.capability` before every write (a whole extra round trip).
//! - On a pool where fsync never has work to do (PM only, on DAX or tmpfs:
//!   every write is durable when it returns), the first fsync is answered
//!   ENOSYS, which the kernel treats as success and remembers: later fsyncs
//!   and fdatasyncs complete in the kernel without a round trip.
//! - `flush` (sent on every close) has nothing to do: it is answered ENOSYS
//!   once, and the kernel stops sending it.
//! - After replying, a thread polls the device for a short window when
//!   requests are arriving back to back ([`poll`]; mount option `poll_us`).
//! - Given a [`latency::RequestLatency`] at [`mount`], every request is timed
//!   per operation (the daemon exports the histograms); without one, no
//!   request reads the clock for it.

mod dirplus;
pub mod latency;
pub mod page_cache;
pub mod poll;
pub mod setid;

use fuser::{
    AccessFlags, CopyFileRangeFlags, Errno, FileAttr, FileHandle, Filesystem, FopenFlags,
    Generation, INodeNo, InitFlags, KernelConfig, LockOwner, MountOption, OpenFlags,
    RenameFlags as FuseRenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, SessionACL, TimeOrNow,
    WriteFlags,
};
use latency::{Op, RequestLatency};
use std::ffi::{CString, OsStr};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use terrace_core::{Attr, Ctx, FallocateMode, FileType, Fs, RenameFlags, SetAttr, SetTime};

/// How long the kernel may cache attributes and names: a day. The mount is
/// the only way to the pool (one daemon per pool), so every change reaches the
/// core through the kernel, which updates or invalidates what it caches
/// (writes and reads invalidate the times they change, link/unlink/rename
/// the names, setattr/setxattr the attributes); what the daemon changes on
/// its own (set-ID bits after an unprivileged write) it invalidates itself.
/// Migration moves data between tiers without changing any attribute.
const TTL: Duration = Duration::from_secs(86_400);
/// Largest write request asked of the kernel (it caps requests at 1 MiB here anyway).
const MAX_WRITE: u32 = 1 << 20;
/// Directory entries fetched from the core per batch while filling a reply.
const READDIR_BATCH: usize = 128;

/// The FUSE file system: every request becomes one call on the core.
pub struct FuseAdapter {
    fs: Arc<Fs>,
    /// The kernel agreed to `FUSE_HANDLE_KILLPRIV_V2`: this adapter clears
    /// set-user/group-ID bits and file capabilities on unprivileged writes,
    /// truncates and chowns (the kernel then skips a getxattr per write).
    killpriv: bool,
    /// Sends invalidations to the kernel (set once the session exists).
    notifier: Arc<std::sync::OnceLock<fuser::Notifier>>,
    /// Files opened write-only get `FOPEN_DIRECT_IO` (the kernel allows mmap
    /// of them); other opens go through the kernel's page cache.
    direct_io: bool,
    /// Page-cache state of files opened for reading only.
    cached: page_cache::CachedOpens,
    /// The kernel agreed to `FUSE_NO_OPENDIR_SUPPORT`: opendir is answered
    /// ENOSYS once and never sent again (nor releasedir).
    no_opendir: bool,
    /// Polls the device after replies while requests come back to back.
    poller: Arc<poll::RequestPoller>,
    /// Where request durations go, when someone reads them.
    latency: Option<Arc<RequestLatency>>,
}

/// What a handler holds from its request's arrival until it has replied:
/// the request's timer, then the poller's guard (fields drop in this order,
/// so the duration is recorded before any polling starts).
struct Arrival<'a> {
    _timer: Option<latency::Timer<'a>>,
    _poll: poll::PollGuard<'a>,
}

impl FuseAdapter {
    /// Wraps a mounted core file system.
    pub fn new(fs: Arc<Fs>) -> FuseAdapter {
        FuseAdapter::with_poll_window(fs, Duration::ZERO)
    }

    /// Wraps a mounted core file system; threads poll the device for up to
    /// `window` after a reply while requests arrive back to back.
    pub fn with_poll_window(fs: Arc<Fs>, window: Duration) -> FuseAdapter {
        FuseAdapter {
            fs,
            killpriv: false,
            notifier: Arc::default(),
            direct_io: false,
            cached: page_cache::CachedOpens::default(),
            no_opendir: false,
            poller: Arc::new(poll::RequestPoller::new(window)),
            latency: None,
        }
    }

    /// Times every request into `latency` from now on.
    pub fn with_latency(mut self, latency: Arc<RequestLatency>) -> FuseAdapter {
        self.latency = Some(latency);
        self
    }

    /// Marks the arrival of a request of `op`; keep the guard until the
    /// reply has been sent.
    fn arrived(&self, op: Op) -> Arrival<'_> {
        Arrival {
            _timer: self.latency.as_deref().map(|l| l.start(op)),
            _poll: self.poller.arrived(),
        }
    }

    /// The core file system.
    pub fn fs(&self) -> &Arc<Fs> {
        &self.fs
    }

    /// Whether an open with `flags` goes through the kernel's page cache
    /// under [`page_cache`]'s rules: an open for reading (read-only or
    /// read-write) when write-only opens use direct I/O.
    fn cached_open(&self, flags: i32) -> bool {
        self.direct_io && flags & libc::O_ACCMODE != libc::O_WRONLY
    }

    /// How regular files are opened (after the core's open of `ino`
    /// succeeded): direct I/O for write-only opens when the kernel allows
    /// mmap of direct-I/O files (atomic writes); opens for reading
    /// (read-only and read-write) through the page cache, kept while the
    /// file is unchanged; everything through a kept page cache on kernels
    /// without direct-I/O mmap.
    fn open_flags(&self, ino: u64, flags: i32) -> FopenFlags {
        if !self.direct_io {
            FopenFlags::FOPEN_KEEP_CACHE
        } else if self.cached_open(flags) {
            // A read due to update the access time (relatime: the first
            // after a change) must reach the daemon: such an open drops the
            // kernel's pages, later reads of it are served from the cache.
            let atime_due = self.fs.atime_due_now(ino);
            if self.cached.open(ino) && !atime_due {
                FopenFlags::FOPEN_KEEP_CACHE
            } else {
                FopenFlags::empty()
            }
        } else {
            FopenFlags::FOPEN_DIRECT_IO
        }
    }

    /// The data of `ino` from byte `offset` on (`len` bytes, 0: to the end)
    /// changed other than from the kernel's page cache: drops the kernel's
    /// pages of that range while cached opens may hold them (before the
    /// change is acknowledged), and marks the file so the next cached
    /// open drops the rest.
    fn data_changed(&self, ino: u64, offset: u64, len: u64) {
        if self.direct_io && self.cached.changed(ino) {
            if let Some(n) = self.notifier.get() {
                let off = i64::try_from(offset).unwrap_or(i64::MAX);
                let len = i64::try_from(len).unwrap_or(0);
                let _ = n.inval_inode(INodeNo(ino), off, len);
            }
        }
    }
}

/// Name of the xattr holding file capabilities.
const SECURITY_CAPABILITY: &[u8] = b"security.capability";

impl FuseAdapter {
    /// Answers a create or tmpfile with the new file `attr`, opened as `fh`.
    fn created(&self, reply: ReplyCreate, attr: &Attr, fh: u64, flags: i32) {
        reply.created(
            &TTL,
            &file_attr(attr),
            Generation(u64::from(attr.generation)),
            FileHandle(fh),
            self.open_flags(attr.ino, flags),
        );
    }

    /// Clears set-ID bits (as [`setid::bits_after_modification`] decides) and
    /// file capabilities after `caller` modified the data or size of `ino`.
    fn kill_priv(&self, ino: u64, caller: &setid::Caller) {
        let Ok(a) = self.fs.getattr(ino) else { return };
        let keep = setid::bits_after_modification(a.mode, a.gid, caller);
        if keep != a.mode & 0o7777 {
            self.set_mode_and_tell_the_kernel(ino, keep);
        }
        if self.fs.getxattr(ino, SECURITY_CAPABILITY).is_ok() {
            let _ = self.fs.removexattr(ino, SECURITY_CAPABILITY);
        }
    }

    /// Sets the permission bits of `ino` on the daemon's own initiative and
    /// drops the kernel's cached attributes (which still hold the old mode).
    fn set_mode_and_tell_the_kernel(&self, ino: u64, mode: u32) {
        let change = SetAttr {
            mode: Some(mode),
            ..SetAttr::default()
        };
        if self.fs.setattr(ino, change).is_ok() {
            // Offset -1 drops the attributes only: the page cache stays and no
            // inode lock is taken.
            if let Some(n) = self.notifier.get() {
                let _ = n.inval_inode(INodeNo(ino), -1, 0);
            }
        }
    }
}

/// errno of a core error (EIO when it carries none).
fn errno_of(e: &io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

/// Nanoseconds since the epoch → `SystemTime` (negative values are before it).
pub fn ns_to_time(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

/// `SystemTime` → nanoseconds since the epoch (saturating).
pub fn time_to_ns(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_nanos())
            .map(|v| -v)
            .unwrap_or(i64::MIN),
    }
}

fn kind_of(k: FileType) -> fuser::FileType {
    match k {
        FileType::Regular => fuser::FileType::RegularFile,
        FileType::Directory => fuser::FileType::Directory,
        FileType::Symlink => fuser::FileType::Symlink,
        FileType::Fifo => fuser::FileType::NamedPipe,
        FileType::Socket => fuser::FileType::Socket,
        FileType::CharDevice => fuser::FileType::CharDevice,
        FileType::BlockDevice => fuser::FileType::BlockDevice,
    }
}

/// Core attributes → FUSE attributes.
pub fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks,
        atime: ns_to_time(a.atime),
        mtime: ns_to_time(a.mtime),
        ctime: ns_to_time(a.ctime),
        crtime: ns_to_time(a.btime),
        kind: kind_of(a.kind),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev as u32,
        blksize: 4096,
        flags: 0,
    }
}

/// The attributes of a negative lookup reply (only its node id, 0, counts).
fn negative_attr() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: fuser::FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

fn ctx(req: &Request) -> Ctx {
    Ctx {
        uid: req.uid(),
        gid: req.gid(),
    }
}

fn set_time(t: TimeOrNow) -> SetTime {
    match t {
        TimeOrNow::Now => SetTime::Now,
        TimeOrNow::SpecificTime(t) => SetTime::At(time_to_ns(t)),
    }
}

fn reply_entry(reply: ReplyEntry, r: io::Result<Attr>) {
    match r {
        Ok(a) => reply.entry(&TTL, &file_attr(&a), Generation(u64::from(a.generation))),
        Err(e) => reply.error(errno_of(&e)),
    }
}

fn reply_empty(reply: ReplyEmpty, r: io::Result<()>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno_of(&e)),
    }
}

/// Replies to fsync/fsyncdir. When fsync can never have work to do on this
/// pool ([`Fs::fsync_is_noop`]), a successful one is answered ENOSYS: the
/// kernel takes that as success and from then on completes every
/// fsync/fdatasync (resp. fsyncdir) of the mount itself, without a request —
/// after writing back any dirty mmap pages, which it always does first.
fn reply_fsync(reply: ReplyEmpty, r: io::Result<()>, noop: bool) {
    match r {
        Ok(()) if noop => reply.error(Errno::ENOSYS),
        r => reply_empty(reply, r),
    }
}

/// Replies to getxattr/listxattr: `size == 0` asks for the length only.
fn reply_xattr(reply: ReplyXattr, size: u32, data: &[u8]) {
    if size == 0 {
        match u32::try_from(data.len()) {
            Ok(n) => reply.size(n),
            Err(_) => reply.error(Errno::from_i32(libc::E2BIG)),
        }
    } else if data.len() > size as usize {
        reply.error(Errno::from_i32(libc::ERANGE));
    } else {
        reply.data(data);
    }
}

impl Filesystem for FuseAdapter {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        let _ = config.set_max_write(MAX_WRITE);
        // The core locks per inode, so lookups and readdirs in one directory may run in parallel.
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        // File handles (open_by_handle_at, an NFS re-export): node ids are
        // inode numbers and generations are the slots', both stable across
        // mounts; the kernel finds an uncached inode by looking up "." in it
        // (and a directory's parent by ".."), which the core answers.
        let _ = config.add_capabilities(InitFlags::FUSE_EXPORT_SUPPORT);
        // Without this the kernel asks for "security.capability" before every
        // write (one more round trip per write); with it, we kill privileges.
        self.killpriv = config
            .add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2)
            .is_ok();
        // Direct I/O makes one write() (up to max_write) one FUSE request, so the
        // core commits it atomically; through the page cache the kernel splits a
        // write at a partial, not-uptodate page. Shared mmap then needs
        // FUSE_DIRECT_IO_ALLOW_MMAP (Linux 6.6+); without it we keep the page cache.
        self.direct_io = config
            .add_capabilities(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP)
            .is_ok();
        // A symlink's target never changes: the kernel may keep it.
        let _ = config.add_capabilities(InitFlags::FUSE_CACHE_SYMLINKS);
        // opendir/releasedir have nothing to do (readdir needs no handle and
        // the kernel's reference keeps an open directory alive): the first
        // opendir is answered ENOSYS and the kernel sends no more of them.
        self.no_opendir = config
            .add_capabilities(InitFlags::FUSE_NO_OPENDIR_SUPPORT)
            .is_ok();
        // Entries with their attributes, when the caller will want them
        // (the first batch, and while it stats what it lists): no LOOKUP
        // per entry for `ls -l` or `find -ls` of a directory ([`dirplus`]).
        let _ = config
            .add_capabilities(InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let _req = self.arrived(Op::Lookup);
        match self.fs.lookup(parent.0, name.as_bytes()) {
            // A negative entry (node id 0): the kernel remembers for TTL that
            // the name is absent, so `stat` of a missing file (git status,
            // include and import searches) costs no round trip the second
            // time. Every create or rename to the name passes through the
            // kernel, which replaces the negative entry then.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                reply.entry(&TTL, &negative_attr(), Generation(0))
            }
            r => reply_entry(reply, r),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        // No reply, so no polling after it: only the timer.
        let _timer = self.latency.as_deref().map(|l| l.start(Op::Forget));
        self.cached.forget(ino.0);
        self.fs.forget(ino.0, nlookup);
    }

    // batch_forget: fuser's default calls `forget` for each node (its ForgetOne type
    // is not exported, so it cannot be overridden).

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let _req = self.arrived(Op::Getattr);
        match self.fs.getattr(ino.0) {
            Ok(a) => reply.attr(&TTL, &file_attr(&a)),
            Err(e) => reply.error(errno_of(&e)),
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
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let _req = self.arrived(Op::Setattr);
        let mut mode = mode;
        let chown = uid.is_some() || gid.is_some();
        // Truncate by an unprivileged caller and any chown drop set-ID bits and
        // file capabilities (the kernel leaves it to us under KILLPRIV_V2).
        if self.killpriv && mode.is_none() && (chown || size.is_some()) {
            if let Ok(a) = self.fs.getattr(ino.0) {
                let caller = setid::Caller::of(req);
                let keep = if chown {
                    setid::bits_after_chown(a.mode, a.gid, &caller)
                } else {
                    setid::bits_after_modification(a.mode, a.gid, &caller)
                };
                if keep != a.mode & 0o7777 {
                    mode = Some(keep);
                }
                if self.fs.getxattr(ino.0, SECURITY_CAPABILITY).is_ok() {
                    let _ = self.fs.removexattr(ino.0, SECURITY_CAPABILITY);
                }
            }
        }
        let s = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(set_time),
            mtime: mtime.map(set_time),
            ctime: ctime.map(time_to_ns),
        };
        match self.fs.setattr(ino.0, s) {
            Ok(a) => {
                if size.is_some() {
                    // The kernel cuts its own pages at a truncate made
                    // through it; the file is still marked changed, so the
                    // next cached open starts from a clean page cache.
                    self.cached.changed(ino.0);
                }
                reply.attr(&TTL, &file_attr(&a))
            }
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let _req = self.arrived(Op::Readlink);
        match self.fs.readlink(ino.0) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let _req = self.arrived(Op::Mknod);
        reply_entry(
            reply,
            self.fs
                .mknod(parent.0, name.as_bytes(), mode, u64::from(rdev), ctx(req)),
        );
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let _req = self.arrived(Op::Mkdir);
        reply_entry(
            reply,
            self.fs.mkdir(parent.0, name.as_bytes(), mode, ctx(req)),
        );
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _req = self.arrived(Op::Unlink);
        reply_empty(reply, self.fs.unlink(parent.0, name.as_bytes()));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _req = self.arrived(Op::Rmdir);
        reply_empty(reply, self.fs.rmdir(parent.0, name.as_bytes()));
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
        reply_entry(
            reply,
            self.fs.symlink(
                parent.0,
                link_name.as_bytes(),
                target.as_os_str().as_bytes(),
                ctx(req),
            ),
        );
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: FuseRenameFlags,
        reply: ReplyEmpty,
    ) {
        let _req = self.arrived(Op::Rename);
        let bits = flags.bits();
        let known = libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE;
        if bits & !known != 0 {
            reply.error(Errno::from_i32(libc::EINVAL));
            return;
        }
        let f = RenameFlags {
            noreplace: bits & libc::RENAME_NOREPLACE != 0,
            exchange: bits & libc::RENAME_EXCHANGE != 0,
        };
        if f.noreplace && f.exchange {
            reply.error(Errno::from_i32(libc::EINVAL));
            return;
        }
        reply_empty(
            reply,
            self.fs.rename(
                parent.0,
                name.as_bytes(),
                newparent.0,
                newname.as_bytes(),
                f,
            ),
        );
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
        reply_entry(reply, self.fs.link(ino.0, newparent.0, newname.as_bytes()));
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let _req = self.arrived(Op::Open);
        match self.fs.open(ino.0, flags.0) {
            Ok(fh) => reply.opened(FileHandle(fh), self.open_flags(ino.0, flags.0)),
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let _req = self.arrived(Op::Read);
        match self.fs.read(ino.0, offset, size as usize) {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let _req = self.arrived(Op::Write);
        // O_SYNC and O_DSYNC (which O_SYNC includes) make a write synchronous.
        let o_sync = flags.0 & libc::O_DSYNC != 0;
        match self.fs.write_hinted(ino.0, offset, data, o_sync) {
            Ok(n) => {
                if self.killpriv && write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
                    self.kill_priv(ino.0, &setid::Caller::of(req).unprivileged());
                }
                // Writes through a cached (read-write) open went through
                // the kernel's page cache, which holds their bytes already
                // (write-through), as do write-backs of mapped pages; only
                // writes that bypassed it change what cached opens see.
                let bypassed_cache = !self.cached_open(flags.0) || flags.0 & libc::O_DIRECT != 0;
                if bypassed_cache && !write_flags.contains(WriteFlags::FUSE_WRITE_CACHE) {
                    self.data_changed(ino.0, offset, n as u64);
                }
                reply.written(n as u32)
            }
            Err(e) => reply.error(errno_of(&e)),
        }
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
        _fh: FileHandle,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let _req = self.arrived(Op::Release);
        if self.cached_open(flags.0) {
            self.cached.release(ino.0);
        }
        reply_empty(reply, self.fs.release(ino.0));
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
        reply_fsync(
            reply,
            self.fs.fsync(ino.0, datasync),
            self.fs.fsync_is_noop(),
        );
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let _req = self.arrived(Op::Opendir);
        if self.no_opendir {
            reply.error(Errno::ENOSYS);
            return;
        }
        match self
            .fs
            .open(ino.0, flags.0 & !(libc::O_ACCMODE | libc::O_TRUNC))
        {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let _req = self.arrived(Op::Readdir);
        let mut off = offset;
        let mut added = false;
        loop {
            let batch = match self.fs.readdir(ino.0, off, READDIR_BATCH) {
                Ok(b) => b,
                Err(e) => {
                    if added {
                        // Send what we have; the next call repeats the error.
                        break;
                    }
                    reply.error(errno_of(&e));
                    return;
                }
            };
            if batch.is_empty() {
                break;
            }
            for e in batch {
                if e.next_offset <= off {
                    // A cookie that does not advance would loop forever.
                    reply.ok();
                    return;
                }
                if reply.add(
                    INodeNo(e.ino),
                    e.next_offset,
                    kind_of(e.kind),
                    OsStr::from_bytes(&e.name),
                ) {
                    reply.ok();
                    return;
                }
                added = true;
                off = e.next_offset;
            }
        }
        reply.ok();
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        reply: fuser::ReplyDirectoryPlus,
    ) {
        let _req = self.arrived(Op::Readdirplus);
        dirplus::fill(&self.fs, ino.0, offset, reply);
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
        reply_empty(reply, self.fs.release(ino.0));
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
        reply_fsync(
            reply,
            self.fs.fsync(ino.0, datasync),
            self.fs.fsync_is_noop(),
        );
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let _req = self.arrived(Op::Statfs);
        let s = self.fs.statfs();
        reply.statfs(
            s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.bsize,
        );
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let _req = self.arrived(Op::Setxattr);
        reply_empty(
            reply,
            self.fs.setxattr(ino.0, name.as_bytes(), value, flags),
        );
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let _req = self.arrived(Op::Getxattr);
        match self.fs.getxattr(ino.0, name.as_bytes()) {
            Ok(v) => reply_xattr(reply, size, &v),
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let _req = self.arrived(Op::Listxattr);
        match self.fs.listxattr(ino.0) {
            Ok(names) => {
                let mut buf = Vec::new();
                for n in names {
                    buf.extend_from_slice(&n);
                    buf.push(0);
                }
                reply_xattr(reply, size, &buf);
            }
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _req = self.arrived(Op::Removexattr);
        reply_empty(reply, self.fs.removexattr(ino.0, name.as_bytes()));
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        let _req = self.arrived(Op::Access);
        // Mounted with default_permissions: the kernel has already checked.
        reply.ok();
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let _req = self.arrived(Op::Create);
        let mode = match mode & libc::S_IFMT {
            0 | libc::S_IFREG => libc::S_IFREG | (mode & 0o7777),
            _ => {
                reply.error(Errno::from_i32(libc::EINVAL));
                return;
            }
        };
        let attr = match self.fs.mknod(parent.0, name.as_bytes(), mode, 0, ctx(req)) {
            Ok(a) => a,
            Err(e) => {
                reply.error(errno_of(&e));
                return;
            }
        };
        match self.fs.open(attr.ino, flags) {
            Ok(fh) => self.created(reply, &attr, fh, flags),
            Err(e) => {
                // The kernel never learns of the entry: drop the reference mknod counted.
                self.fs.forget(attr.ino, 1);
                reply.error(errno_of(&e));
            }
        }
    }

    /// O_TMPFILE (FUSE_TMPFILE, through the vendored fuser's patch): an
    /// unnamed file, created and opened at once by the core.
    fn tmpfile(
        &self,
        req: &Request,
        parent: INodeNo,
        _name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let _req = self.arrived(Op::Tmpfile);
        match self.fs.tmpfile(parent.0, mode, flags, ctx(req)) {
            Ok((attr, fh)) => self.created(reply, &attr, fh, flags),
            Err(e) => reply.error(errno_of(&e)),
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
        let m = match fallocate_mode(mode) {
            Ok(m) => m,
            Err(e) => {
                reply.error(Errno::from_i32(e));
                return;
            }
        };
        // The kernel sends no kill flag with fallocate: like the VFS
        // (file_modified), drop set-ID bits first, then change the file.
        if self.killpriv {
            self.kill_priv(ino.0, &setid::Caller::of(req));
        }
        let r = self.fs.fallocate(ino.0, offset, length, m);
        if r.is_ok() {
            // Collapse and insert move everything after the range.
            self.data_changed(ino.0, offset, 0);
        }
        reply_empty(reply, r);
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
        if !flags.is_empty() {
            reply.error(Errno::EINVAL);
            return;
        }
        // Like a write by the caller: set-ID bits go first (file_modified).
        if self.killpriv {
            self.kill_priv(ino_out.0, &setid::Caller::of(req));
        }
        // Whole blocks are shared with the source (core `ops_clone`).
        match self
            .fs
            .copy_range(ino_in.0, offset_in, ino_out.0, offset_out, len)
        {
            Ok(n) => {
                self.data_changed(ino_out.0, offset_out, n);
                reply.written(n as u32)
            }
            Err(e) => reply.error(errno_of(&e)),
        }
    }
}

/// The [`FallocateMode`] of fallocate(2) mode bits, or the errno ext4 (and
/// the VFS before it) gives a combination it refuses: COLLAPSE_RANGE and
/// INSERT_RANGE with any other flag are EINVAL, every other unsupported
/// combination (PUNCH_HOLE without KEEP_SIZE, PUNCH_HOLE with ZERO_RANGE,
/// unknown bits) EOPNOTSUPP.
pub fn fallocate_mode(mode: i32) -> Result<FallocateMode, i32> {
    use libc::{
        FALLOC_FL_COLLAPSE_RANGE as COLLAPSE, FALLOC_FL_INSERT_RANGE as INSERT,
        FALLOC_FL_KEEP_SIZE as KEEP, FALLOC_FL_PUNCH_HOLE as PUNCH, FALLOC_FL_ZERO_RANGE as ZERO,
    };
    Ok(match mode {
        0 => FallocateMode::Allocate,
        KEEP => FallocateMode::AllocateKeepSize,
        x if x == PUNCH | KEEP => FallocateMode::PunchHole,
        ZERO => FallocateMode::ZeroRange,
        x if x == ZERO | KEEP => FallocateMode::ZeroRangeKeepSize,
        COLLAPSE => FallocateMode::CollapseRange,
        INSERT => FallocateMode::InsertRange,
        x if x & (COLLAPSE | INSERT) != 0 => return Err(libc::EINVAL),
        _ => return Err(libc::EOPNOTSUPP),
    })
}

/// Default polling window after a reply (µs): longer than the gap between an
/// application's back-to-back requests (a write and its fsync: a few µs), short
/// enough that a poll that finds nothing wastes little.
pub const DEFAULT_POLL_US: u64 = 50;

/// When reads update a file's access time (mount options).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AtimeOption {
    /// `relatime` (default): when the access time is not after the last
    /// change, or is a day old.
    #[default]
    Relative,
    /// `strictatime`: on every read.
    Strict,
    /// `noatime`: never.
    Never,
}

/// How to mount. `Default` is a private, read-write mount with two threads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountOptions {
    /// Source shown in /proc/mounts (the pool path).
    pub fsname: String,
    /// Let other users access the mount (`allow_other`).
    pub allow_other: bool,
    /// Let root access the mount too (`allow_root`).
    pub allow_root: bool,
    /// Read-only mount.
    pub read_only: bool,
    /// Honour set-user-ID bits (`suid`; [`MountOptions::for_user`] turns it
    /// on for root, as mount(8) does).
    pub suid: bool,
    /// Honour device nodes (`dev`; on for root like `suid`).
    pub dev: bool,
    /// Allow executing programs (default on).
    pub exec: bool,
    /// When reads update access times: `relatime` (default), `strictatime`,
    /// `noatime`.
    pub atime: AtimeOption,
    /// Synchronous updates (`sync`).
    pub sync: bool,
    /// Synchronous directory updates (`dirsync`).
    pub dirsync: bool,
    /// Threads serving requests.
    pub threads: usize,
    /// How long (µs) a thread polls the device after a reply while requests
    /// arrive back to back ([`poll`]); 0 = never.
    pub poll_us: u64,
}

impl Default for MountOptions {
    fn default() -> MountOptions {
        MountOptions {
            fsname: "terrace".into(),
            allow_other: false,
            allow_root: false,
            read_only: false,
            suid: false,
            dev: false,
            exec: true,
            atime: AtimeOption::Relative,
            sync: false,
            dirsync: false,
            threads: 2,
            poll_us: DEFAULT_POLL_US,
        }
    }
}

impl MountOptions {
    /// The defaults for a mount made by `uid`: root gets `suid,dev` like any
    /// mount(8) of a local file system; anyone else `nosuid,nodev`, like
    /// fusermount3 imposes on unprivileged FUSE mounts.
    pub fn for_user(uid: u32) -> MountOptions {
        MountOptions {
            suid: uid == 0,
            dev: uid == 0,
            ..MountOptions::default()
        }
    }

    /// Applies one `-o` option (`allow_other`, `ro`, `noatime`, …). Errors name
    /// options this file system does not know.
    pub fn apply(&mut self, opt: &str) -> Result<(), String> {
        match opt {
            "" => {}
            "allow_other" => self.allow_other = true,
            "allow_root" => self.allow_root = true,
            "default_permissions" => {} // always on
            "ro" => self.read_only = true,
            "rw" => self.read_only = false,
            "suid" => self.suid = true,
            "nosuid" => self.suid = false,
            "dev" => self.dev = true,
            "nodev" => self.dev = false,
            "exec" => self.exec = true,
            "noexec" => self.exec = false,
            "atime" | "relatime" => self.atime = AtimeOption::Relative,
            "strictatime" => self.atime = AtimeOption::Strict,
            "noatime" => self.atime = AtimeOption::Never,
            // Directories get no access time from reads in Terrace (as with
            // `nodiratime`); `diratime` is accepted for mount(8) and fstab.
            "nodiratime" | "diratime" => {}
            // Access times set by reads are written with the file's next
            // commit already where that matters (logs on a block tier).
            "lazytime" | "nolazytime" => {}
            "sync" => self.sync = true,
            "async" => self.sync = false,
            "dirsync" => self.dirsync = true,
            _ => {
                if let Some(n) = opt.strip_prefix("threads=") {
                    match n.parse::<usize>() {
                        Ok(n) if (1..=64).contains(&n) => self.threads = n,
                        _ => {
                            return Err(format!(
                                "mount option {opt:?}: threads must be a number from 1 to 64"
                            ))
                        }
                    }
                } else if let Some(n) = opt.strip_prefix("poll_us=") {
                    match n.parse::<u64>() {
                        Ok(n) if n <= 10_000 => self.poll_us = n,
                        _ => {
                            return Err(format!(
                                "mount option {opt:?}: poll_us must be a number of microseconds from 0 to 10000"
                            ))
                        }
                    }
                } else {
                    return Err(format!(
                        "unknown mount option {opt:?} (known: allow_other, allow_root, default_permissions, ro, rw, \
                         suid, nosuid, dev, nodev, exec, noexec, atime, relatime, strictatime, noatime, nodiratime, lazytime, sync, async, dirsync, threads=N, \
                         poll_us=N)"
                    ));
                }
            }
        }
        Ok(())
    }

    fn to_config(&self) -> fuser::Config {
        let mut o = vec![
            MountOption::DefaultPermissions,
            MountOption::FSName(self.fsname.clone()),
            // Passed to the kernel as an option: fuser's direct mount(2) drops Subtype.
            MountOption::CUSTOM("subtype=terrace".into()),
            if self.read_only {
                MountOption::RO
            } else {
                MountOption::RW
            },
            if self.exec {
                MountOption::Exec
            } else {
                MountOption::NoExec
            },
        ];
        if self.suid {
            o.push(MountOption::Suid);
        }
        if self.dev {
            o.push(MountOption::Dev);
        }
        // The daemon keeps access times itself (the kernel leaves them to a
        // FUSE file system); the kernel is told only about noatime.
        if self.atime == AtimeOption::Never {
            o.push(MountOption::NoAtime);
        }
        if self.sync {
            o.push(MountOption::Sync);
        }
        if self.dirsync {
            o.push(MountOption::DirSync);
        }
        let mut c = fuser::Config::default();
        c.mount_options = o;
        c.acl = if self.allow_other {
            SessionACL::All
        } else if self.allow_root {
            SessionACL::RootAndOwner
        } else {
            SessionACL::Owner
        };
        c.n_threads = Some(self.threads.max(1));
        c.clone_fd = self.threads > 1;
        c
    }
}

/// A running FUSE session. Dropping it does not unmount: call [`unmount`] (or
/// [`Mounted::unmount`]) and wait for the session's end callback.
pub struct Mounted {
    mountpoint: PathBuf,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Mounted {
    /// The mount point.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Unmounts (`lazy`: detach now, finish when the last user goes). The
    /// session then ends and the end callback runs.
    pub fn unmount(&self, lazy: bool) -> io::Result<()> {
        unmount(&self.mountpoint, lazy)
    }

    /// True once the session threads have finished.
    pub fn finished(&self) -> bool {
        self.thread
            .as_ref()
            .map(|t| t.is_finished())
            .unwrap_or(true)
    }

    /// Waits for the session threads.
    pub fn join(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Mounts `fs` on `mountpoint` and serves it on background threads. When the
/// session ends (unmounted by anyone, or the connection aborted), `on_end` runs
/// with the session's result. The caller then calls [`Fs::unmount`]. With
/// `latency`, every request's duration is recorded there.
pub fn mount(
    fs: Arc<Fs>,
    mountpoint: &Path,
    opts: &MountOptions,
    latency: Option<Arc<RequestLatency>>,
    on_end: impl FnOnce(io::Result<()>) + Send + 'static,
) -> io::Result<Mounted> {
    let config = opts.to_config();
    let mut adapter = FuseAdapter::with_poll_window(fs, Duration::from_micros(opts.poll_us));
    if let Some(l) = latency {
        adapter = adapter.with_latency(l);
    }
    let notifier = adapter.notifier.clone();
    let poller = adapter.poller.clone();
    let session = fuser::Session::new(adapter, mountpoint, &config)?;
    let _ = notifier.set(session.notifier());
    if !poller.window().is_zero() {
        use std::os::fd::AsFd;
        poller.set_device(session.as_fd().try_clone_to_owned()?);
    }
    let thread = std::thread::Builder::new()
        .name("fuse-session".into())
        .spawn(move || {
            let r = session.run();
            on_end(r);
        })?;
    Ok(Mounted {
        mountpoint: mountpoint.to_path_buf(),
        thread: Some(thread),
    })
}

/// Unmounts a FUSE mount point: `umount2(2)` (with `MNT_DETACH` when `lazy`),
/// falling back to `fusermount3 -u`/`fusermount -u` when not privileged.
pub fn unmount(mountpoint: &Path, lazy: bool) -> io::Result<()> {
    let c = CString::new(mountpoint.as_os_str().as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "mount point contains a NUL byte",
        )
    })?;
    let flags = if lazy { libc::MNT_DETACH } else { 0 };
    // Safety: `c` is a valid NUL-terminated path for the duration of the call.
    let r = unsafe { libc::umount2(c.as_ptr(), flags) };
    if r == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::EPERM) {
        return Err(err);
    }
    for prog in ["fusermount3", "fusermount"] {
        let mut cmd = std::process::Command::new(prog);
        cmd.arg(if lazy { "-uz" } else { "-u" }).arg(mountpoint);
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        // Its message goes into the error (printed once, by the caller), not
        // straight to our stderr.
        if let Ok(out) = cmd.output() {
            if out.status.success() {
                return Ok(());
            }
            let said = String::from_utf8_lossy(&out.stderr);
            let said = said.lines().map(str::trim).find(|l| !l.is_empty());
            return Err(io::Error::other(match said {
                Some(l) => l.to_string(),
                None => format!("{prog} -u {} failed", mountpoint.display()),
            }));
        }
    }
    Err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallocate_modes_map_as_ext4_accepts_and_refuses_them() {
        use FallocateMode::*;
        let ok = [
            (0, Allocate),
            (1, AllocateKeepSize),
            (3, PunchHole),
            (0x10, ZeroRange),
            (0x11, ZeroRangeKeepSize),
            (0x08, CollapseRange),
            (0x20, InsertRange),
        ];
        for (bits, m) in ok {
            assert_eq!(fallocate_mode(bits), Ok(m), "mode {bits:#x}");
        }
        for bits in [0x02, 0x12, 0x13, 0x04, 0x40, 0x80, 0x100] {
            assert_eq!(
                fallocate_mode(bits),
                Err(libc::EOPNOTSUPP),
                "mode {bits:#x}"
            );
        }
        for bits in [0x09, 0x21, 0x28, 0x18, 0x0a] {
            assert_eq!(fallocate_mode(bits), Err(libc::EINVAL), "mode {bits:#x}");
        }
    }

    #[test]
    fn time_conversion_round_trips() {
        for ns in [0i64, 1, 1_700_000_000_123_456_789, -1, -1_000_000_007] {
            assert_eq!(time_to_ns(ns_to_time(ns)), ns);
        }
    }

    #[test]
    fn mount_options_parse() {
        let mut o = MountOptions::default();
        for s in ["allow_other", "ro", "noatime", "threads=4"] {
            o.apply(s).unwrap();
        }
        assert!(o.allow_other && o.read_only && o.atime == AtimeOption::Never && o.threads == 4);
        for (opt, want) in [
            ("strictatime", AtimeOption::Strict),
            ("relatime", AtimeOption::Relative),
            ("nodiratime", AtimeOption::Relative),
        ] {
            o.apply(opt).unwrap();
            assert_eq!(o.atime, want, "{opt}");
        }
        o.apply("noatime").unwrap();
        assert!(o.apply("bogus").is_err());
        assert!(o.apply("threads=0").is_err());
        assert_eq!(o.poll_us, DEFAULT_POLL_US);
        o.apply("poll_us=0").unwrap();
        assert_eq!(o.poll_us, 0);
        assert!(o.apply("poll_us=fast").is_err());
        assert!(o.apply("poll_us=20000").is_err());
        let root = MountOptions::for_user(0);
        assert!(root.suid && root.dev);
        let user = MountOptions::for_user(1000);
        assert!(!user.suid && !user.dev);
        let c = root.to_config();
        assert!(c.mount_options.contains(&MountOption::Suid));
        assert!(c.mount_options.contains(&MountOption::Dev));
        let c = o.to_config();
        assert!(c.mount_options.contains(&MountOption::DefaultPermissions));
        assert_eq!(c.acl, SessionACL::All);
    }
}
