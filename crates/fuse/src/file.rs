//! Opens and data: how a regular file is opened (direct I/O or the kernel's
//! page cache, under [`crate::page_cache`]'s rules), writes with the privileges and
//! cached pages they affect, release, create and O_TMPFILE.
//!
//! Invariants:
//! - A change of a file's data that bypassed the kernel's page cache drops
//!   the kernel's pages of the changed range before it is acknowledged
//!   ([`FuseAdapter::data_changed`] names the range,
//!   [`FuseAdapter::reply_after`] replies once the kernel dropped it, from
//!   the invalidation thread of [`crate::invalidate`]).
//! - How an open is served is decided after the core's open succeeded, and
//!   a cached open counted at open is given back at release.
//! - A created file whose open fails gives back the lookup its creation
//!   counted (the kernel never learns of it).

use crate::adapter::FuseAdapter;
use crate::fill;
use crate::invalidate::{Stale, Step};
use crate::reply::{self, refuse};
use crate::setid;
use fuser::{FopenFlags, ReplyOpen, WriteFlags};
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use terrace_core::Attr;
use terrace_core::Ctx;

impl FuseAdapter {
    /// Whether an open with `flags` goes through the kernel's page cache
    /// under [`crate::page_cache`]'s rules: every open under the kernel's
    /// writeback cache; otherwise an open for reading (read-only or
    /// read-write) when write-only opens use direct I/O.
    pub(crate) fn cached_open(&self, flags: i32) -> bool {
        self.writeback_cache || (self.direct_io && flags & libc::O_ACCMODE != libc::O_WRONLY)
    }

    /// How the open `fh` of `ino` with `flags` is served, as
    /// [`FuseAdapter::open_flags`] says — except a writable open under the
    /// writeback cache while the pool has little room, which writes through
    /// ([`crate::write_through`]). `None` as for `open_flags`.
    pub(crate) fn open_flags_of(&self, ino: u64, fh: u64, flags: i32) -> Option<FopenFlags> {
        if self.writeback_cache
            && writable(flags)
            && self.room_bytes() < crate::write_through::WRITE_THROUGH_BELOW_BYTES
        {
            self.write_through.add(fh);
            self.cached.direct_writer_opened(ino);
            return Some(FopenFlags::FOPEN_DIRECT_IO);
        }
        self.open_flags(ino, flags)
    }

    /// Bytes of room the pool has for new data (what `df` shows available).
    pub(crate) fn room_bytes(&self) -> u64 {
        let st = self.fs.statfs();
        st.bavail * u64::from(st.bsize)
    }

    /// Whether writes of the open `fh` with `flags` bypass the kernel's
    /// page cache (direct I/O).
    fn writes_bypass_cache(&self, fh: u64, flags: i32) -> bool {
        !self.cached_open(flags) || self.write_through.contains(fh)
    }

    /// How regular files are opened (after the core's open of `ino`
    /// succeeded): through the page cache, kept while the file is
    /// unchanged, when [`FuseAdapter::cached_open`] says so; otherwise direct
    /// I/O (write-only opens, when the kernel allows mmap of direct-I/O
    /// files: atomic writes); everything through a kept page cache on
    /// kernels without direct-I/O mmap.
    /// `None` for a writable open while a fill of the file's pages runs
    /// ([`crate::fill`]): ask again once it ended (the open is not counted
    /// meanwhile).
    pub(crate) fn open_flags(&self, ino: u64, flags: i32) -> Option<FopenFlags> {
        Some(if self.cached_open(flags) {
            // O_NOATIME: the open's reads leave the access time alone.
            let atime_due = flags & libc::O_NOATIME == 0 && self.fs.atime_due_now(ino);
            let keep = self.cached.open(ino, writable(flags))?;
            if keep && atime_due {
                // A read due to update the access time (relatime: the
                // first after a change) would be served from the pages the
                // kernel keeps: the open takes the access time now, as its
                // first read would (design.md §5g0). Read-write opens too:
                // dropping the pages instead made every open of a file
                // changed since (a database's) read it all again.
                if self.fs.touch_atime(ino).is_ok() {
                    self.drop_kernel_attrs(ino);
                }
                FopenFlags::FOPEN_KEEP_CACHE
            } else if keep {
                FopenFlags::FOPEN_KEEP_CACHE
            } else {
                // The file changed where the kernel did not see it: the
                // open drops the kernel's pages.
                FopenFlags::empty()
            }
        } else if self.direct_io {
            if writable(flags) {
                self.cached.direct_writer_opened(ino);
            }
            FopenFlags::FOPEN_DIRECT_IO
        } else {
            FopenFlags::FOPEN_KEEP_CACHE
        })
    }

    /// Whether fsync of a file can be left to the kernel (answered ENOSYS
    /// once, [`crate::reply::fsync`]): when it never has work in the core
    /// ([`terrace_core::Fs::fsync_is_noop`]) and the kernel holds no
    /// writes. Under the writeback cache the FSYNC request is what tells the
    /// application that its write-backs reached the daemon: the kernel drops
    /// a write-back to a dead connection without an error, so without the
    /// request an fsync (or an `O_DSYNC` write) after a kill -9 of the daemon
    /// would return success for data that never reached the pool.
    pub(crate) fn fsync_needs_no_request(&self) -> bool {
        self.fs.fsync_is_noop() && !self.writeback_cache
    }

    /// Whether the kernel may hold dirty pages of `ino` that have not reached
    /// the daemon: a writable cached open is live, or opens go through a
    /// page cache this adapter does not track (kernels without direct-I/O
    /// mmap).
    pub(crate) fn kernel_may_hold_dirty_pages(&self, ino: u64) -> bool {
        !self.tracks_cached_opens() || self.cached.has_writers(ino)
    }

    /// Whether `cached` follows the opens that go through the kernel's page
    /// cache: with direct I/O for write-only opens, or under the writeback
    /// cache (otherwise every open is cached and none is tracked).
    fn tracks_cached_opens(&self) -> bool {
        self.direct_io || self.writeback_cache
    }

    /// The data of `ino` from byte `offset` on (`len` bytes, 0: to the end)
    /// changed other than from the kernel's page cache: marks the file so
    /// the next cached open drops its pages, and names the range the kernel
    /// must drop before the change is acknowledged while cached opens may
    /// hold it (the caller replies through [`FuseAdapter::reply_after`]).
    pub(crate) fn data_changed(&self, ino: u64, offset: u64, len: u64) -> Option<Stale> {
        (self.tracks_cached_opens() && self.cached.changed(ino)).then_some(Stale {
            ino,
            offset,
            len,
        })
    }

    /// Replies with `r` through `reply` — once the kernel dropped the pages
    /// `r` made stale, from the invalidation thread, so the request thread
    /// is free meanwhile to serve the reads that invalidation may wait for.
    pub(crate) fn reply_after<T: Send + 'static>(
        &self,
        r: io::Result<(T, Option<Stale>)>,
        reply: impl FnOnce(io::Result<T>) + Send + 'static,
    ) {
        match r {
            Ok((v, Some(stale))) => self.invalidator.then(stale, move || reply(Ok(v))),
            Ok((v, None)) => reply(Ok(v)),
            Err(e) => reply(Err(e)),
        }
    }
}

/// Whether an open with `flags` may write.
fn writable(flags: i32) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY
}

/// open of a regular file: replies with the core's handle and how the
/// kernel serves it — for a writable open while a fill of the file's pages
/// runs, from the invalidation thread once the fill ended ([`crate::fill`]).
pub(crate) fn open(a: &FuseAdapter, ino: u64, flags: i32, reply: ReplyOpen) {
    let fh = match a.fs.open(ino, flags) {
        Ok(fh) => fh,
        Err(e) => return reply::opened(reply, Err(e)),
    };
    match a.open_flags_of(ino, fh, flags) {
        Some(how) => reply::opened(reply, Ok((fh, how))),
        None => {
            let b = a.clone();
            a.invalidator.step(Step::new(move || {
                fill::open_after_fill(b, ino, fh, flags, reply)
            }));
        }
    }
}

/// The open a request came through: its handle and its open flags.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Through {
    pub(crate) fh: u64,
    pub(crate) flags: i32,
}

/// write of `data` at `offset` by `caller` through the open `through`:
/// the number of bytes written, and the range cached opens may hold stale.
pub(crate) fn write(
    a: &FuseAdapter,
    caller: setid::Caller,
    ino: u64,
    through: Through,
    offset: u64,
    data: &[u8],
    write_flags: WriteFlags,
) -> io::Result<(u32, Option<Stale>)> {
    let Through { fh, flags } = through;
    // O_SYNC and O_DSYNC (which O_SYNC includes) make a write synchronous.
    // Under the writeback cache such writes come as write-backs (flags 0)
    // followed by FSYNC, which the predictor judges as any fsync.
    let o_sync = flags & libc::O_DSYNC != 0;
    // Privileges go first, as the VFS's `file_remove_privs` drops them
    // before a write: no reader (an `execve`) finds the new bytes with the
    // old set-user-ID bit, and a write that fails has dropped them anyway.
    // File capabilities go at any write, a privileged writer's too; only
    // set-ID bits depend on who writes, and the kernel flags those writes.
    if a.killpriv && !data.is_empty() {
        if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
            a.kill_priv(ino, &caller.unprivileged())?;
        } else {
            a.drop_file_capability(ino);
        }
    }
    let n = if write_flags.contains(WriteFlags::FUSE_WRITE_CACHE) {
        // Pages the kernel held dirty: already acknowledged. Refused for
        // room, the writer's next write() fails ([`crate::refused_writebacks`]).
        match a
            .fs
            .write_back_kernel_pages(ino, offset, data, o_sync, a.writeback_cache)
        {
            Ok(n) => n,
            Err(e) => {
                if e.raw_os_error() == Some(libc::EPERM) {
                    // A mapped page of an append-only file changed below its
                    // end: the core refused it, and the kernel keeps the
                    // page. The next cached open drops it (dropping it now
                    // would wait for this write-back's reply).
                    let _ = a.data_changed(ino, 0, 0);
                }
                if e.raw_os_error() == Some(libc::ENOSPC) && a.writeback_cache {
                    a.refused_writebacks.refused(ino, data.len() as u64);
                    if let Some(n) = a.notifier.get() {
                        // Attributes only (offset -1): no page lock is waited for.
                        let _ = n.inval_inode(fuser::INodeNo(ino), -1, 0);
                    }
                }
                return Err(e);
            }
        }
    } else {
        a.fs.write_hinted(ino, offset, data, o_sync)?
    };
    // Writes through a cached open went through the kernel's page cache,
    // which holds their bytes already (write-through), as do write-backs of
    // dirty pages (mapped, or every cached write under the writeback
    // cache); only writes of direct-I/O opens (write-only ones) change what
    // cached opens see. An O_DIRECT write through a cached open needs
    // nothing here: the kernel drops the range's pages itself, before and
    // after the write (`generic_file_direct_write`). And `flags` cannot
    // tell it from a buffered one: the kernel reads the file's flags when
    // it builds the request, so an fcntl that set O_DIRECT meanwhile comes
    // with a buffered write, whose writer holds the page locked until this
    // reply — which must then not wait for that page to be dropped (a hang:
    // xfstests generic/036).
    let bypassed_cache = a.writes_bypass_cache(fh, flags);
    let stale = if bypassed_cache && !write_flags.contains(WriteFlags::FUSE_WRITE_CACHE) {
        a.data_changed(ino, offset, n as u64)
    } else {
        None
    };
    Ok((n as u32, stale))
}

/// release of an open with `flags`; after a write-only open, the kernel's
/// pages of the file may be filled ([`crate::fill`]).
pub(crate) fn release(a: &FuseAdapter, ino: u64, fh: u64, flags: i32) -> io::Result<()> {
    if a.write_through.remove(fh) {
        let r = a.fs.release(ino);
        a.cached.direct_writer_released(ino);
        return r;
    }
    let cached = a.cached_open(flags);
    if cached {
        a.cached.release(ino, writable(flags));
    }
    let r = a.fs.release(ino);
    if !cached {
        // The fill is decided while this writer still counts: a cached open
        // handled meanwhile by the other request thread then leaves the
        // file stale, and the fill due at this release still starts. (With
        // the writer uncounted first, such an open marked the file current
        // in between, and the fill was skipped: 1 of 64 files in
        // `test_fill_after_write.py`, now and then.)
        a.fill_after_writer(ino, flags);
        if a.direct_io && writable(flags) {
            a.cached.direct_writer_released(ino);
        }
    }
    r
}

/// create: a regular file named `name` in `parent`, opened with `flags`.
pub(crate) fn create(
    a: &FuseAdapter,
    caller: Ctx,
    parent: u64,
    name: &OsStr,
    mode: u32,
    flags: i32,
) -> io::Result<(Attr, u64, FopenFlags)> {
    let mode = match mode & libc::S_IFMT {
        0 | libc::S_IFREG => libc::S_IFREG | (mode & 0o7777),
        _ => return Err(refuse(libc::EINVAL)),
    };
    let attr = a.fs.mknod(parent, name.as_bytes(), mode, 0, caller)?;
    match a.fs.open(attr.ino, flags) {
        Ok(fh) => {
            // A new file: no fill of it can be running. Its access time is
            // its birth, as on ext4: the create's open does not take it
            // (relatime finds it due, atime being equal to mtime), which
            // also left the kernel the attributes from before the touch.
            let how = a
                .open_flags_of(attr.ino, fh, flags | libc::O_NOATIME)
                .unwrap_or(FopenFlags::empty());
            Ok((attr, fh, how))
        }
        Err(e) => {
            // The kernel never learns of the entry: drop the reference mknod counted.
            a.fs.forget(attr.ino, 1);
            Err(e)
        }
    }
}

/// O_TMPFILE (FUSE_TMPFILE, through the vendored fuser's patch): an unnamed
/// file in `parent`, created and opened at once by the core.
pub(crate) fn tmpfile(
    a: &FuseAdapter,
    caller: Ctx,
    parent: u64,
    mode: u32,
    flags: i32,
) -> io::Result<(Attr, u64, FopenFlags)> {
    let (attr, fh) = a.fs.tmpfile(parent, mode, flags, caller)?;
    // A new file: no fill of it can be running.
    let how = a
        .open_flags_of(attr.ino, fh, flags)
        .unwrap_or(FopenFlags::empty());
    Ok((attr, fh, how))
}
