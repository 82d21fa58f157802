//! [`FuseAdapter`]: what the adapter keeps besides the core file system —
//! the features the kernel agreed to at INIT, the page-cache state of cached
//! opens, the kernel notifier, the poller and the latency sink — and the
//! guard every request holds from its arrival until it has replied.
//!
//! Invariants:
//! - The negotiated flags (`killpriv`, `direct_io`, `no_opendir`,
//!   `writeback_cache`) are set once, by INIT ([`FuseAdapter::negotiate`]), before the kernel sends any
//!   other request, and only read afterwards.
//! - The notifier is set once, right after the session exists; until then
//!   (and in tests without a kernel) invalidations are skipped.
//! - An [`Arrival`] records the request's duration before the poller may
//!   start polling (field drop order).
//! - A clone shares every piece of state (all behind `Arc`s but the
//!   negotiated flags, which are only read after INIT): it is how a request
//!   handed to a pool thread ([`FuseAdapter::off_request`]) finishes with
//!   the adapter it arrived at.

use crate::options::FillOption;
use crate::{fill, invalidate, latency, listing_attrs, object_waits, page_cache, poll};
use fuser::{InitFlags, KernelConfig};
use latency::{Op, RequestLatency};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use terrace_core::Fs;

/// Largest write request asked of the kernel (it caps requests at 1 MiB here anyway).
const MAX_WRITE: u32 = 1 << 20;

/// The FUSE file system: every request becomes one call on the core.
#[derive(Clone)]
pub struct FuseAdapter {
    pub(crate) fs: Arc<Fs>,
    /// The kernel agreed to `FUSE_HANDLE_KILLPRIV_V2`: this adapter clears
    /// set-user/group-ID bits and file capabilities on unprivileged writes,
    /// truncates and chowns (the kernel then skips a getxattr per write).
    pub(crate) killpriv: bool,
    /// Sends invalidations to the kernel (set once the session exists).
    pub(crate) notifier: Arc<OnceLock<fuser::Notifier>>,
    /// Drops stale cached pages before replies, off the request threads.
    pub(crate) invalidator: Arc<invalidate::Invalidator>,
    /// Files opened write-only get `FOPEN_DIRECT_IO` (the kernel allows mmap
    /// of them); other opens go through the kernel's page cache.
    pub(crate) direct_io: bool,
    /// Page-cache state of files opened through the kernel's page cache.
    pub(crate) cached: Arc<page_cache::CachedOpens>,
    /// Orders a fill's stores with the forget of the file ([`crate::fill`]).
    pub(crate) fill_gate: Arc<fill::FillGate>,
    /// When to fill the kernel's pages after a writer ([`crate::fill`]).
    pub(crate) fill_after_write: FillOption,
    /// Before INIT: the mount asked for the kernel's writeback cache; after:
    /// the kernel agreed (`FUSE_WRITEBACK_CACHE`), so every open goes through
    /// the page cache and its writes reach the daemon at write-back.
    pub(crate) writeback_cache: bool,
    /// Before INIT: POSIX ACLs are wanted (`-o acl`, the default); after:
    /// the kernel agreed (`FUSE_POSIX_ACL` with `FUSE_DONT_MASK`), so it
    /// checks permissions against ACLs and sends new inodes' modes unmasked
    /// with the umask, which the core applies (design.md §5r).
    pub(crate) posix_acl: bool,
    /// `security.selinux` is stored (`-o selinux_labels`); otherwise it is
    /// not supported ([`crate::xattr::name_allowed`]).
    pub(crate) selinux_labels: bool,
    /// The kernel agreed to `FUSE_NO_OPENDIR_SUPPORT`: opendir is answered
    /// ENOSYS once and never sent again (nor releasedir).
    pub(crate) no_opendir: bool,
    /// Polls the device after replies while requests come back to back.
    pub(crate) poller: Arc<poll::RequestPoller>,
    /// Where request durations go, when someone reads them.
    pub(crate) latency: Option<Arc<RequestLatency>>,
    /// Whether listings carry attributes (a guess from what walks look up).
    pub(crate) listing: Arc<listing_attrs::ListingAttrs>,
    /// Serves requests that may wait on an object store off the request
    /// threads.
    pub(crate) object_waits: Arc<object_waits::ObjectWaits>,
    /// Files whose write-back the pool refused for room (writeback cache).
    pub(crate) refused_writebacks: Arc<crate::refused_writebacks::RefusedWritebacks>,
    /// Writable opens made while the pool was short of room (writeback cache).
    pub(crate) write_through: Arc<crate::write_through::WriteThroughOpens>,
}

/// What a handler holds from its request's arrival until it has replied:
/// the request's timer, then the poller's guard (fields drop in this order,
/// so the duration is recorded before any polling starts).
pub(crate) struct Arrival<'a> {
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
        let notifier: Arc<OnceLock<fuser::Notifier>> = Arc::default();
        FuseAdapter {
            fs,
            killpriv: false,
            invalidator: Arc::new(invalidate::Invalidator::new(notifier.clone())),
            notifier,
            direct_io: false,
            cached: Arc::default(),
            fill_gate: Arc::default(),
            fill_after_write: FillOption::Auto,
            writeback_cache: false,
            posix_acl: false,
            selinux_labels: false,
            no_opendir: false,
            poller: Arc::new(poll::RequestPoller::new(window)),
            latency: None,
            listing: Arc::default(),
            object_waits: Arc::default(),
            refused_writebacks: Arc::default(),
            write_through: Arc::default(),
        }
    }

    /// Asks the kernel for POSIX ACLs at INIT (`-o acl`, the default).
    pub fn with_posix_acl(mut self, want: bool) -> FuseAdapter {
        self.posix_acl = want;
        self
    }

    /// Stores `security.selinux` like any attribute (`-o selinux_labels`).
    pub fn with_selinux_labels(mut self, on: bool) -> FuseAdapter {
        self.selinux_labels = on;
        self
    }

    /// Asks the kernel for its writeback cache at INIT (`-o writeback_cache`).
    pub fn with_writeback_cache(mut self, want: bool) -> FuseAdapter {
        self.writeback_cache = want;
        self
    }

    /// When to fill the kernel's pages of a file after its write-only
    /// descriptor is closed (`-o fill_after_write=`).
    pub fn with_fill_after_write(mut self, when: FillOption) -> FuseAdapter {
        self.fill_after_write = when;
        self
    }

    /// Times every request into `latency` from now on.
    pub fn with_latency(mut self, latency: Arc<RequestLatency>) -> FuseAdapter {
        self.latency = Some(latency);
        self
    }

    /// The core file system.
    pub fn fs(&self) -> &Arc<Fs> {
        &self.fs
    }

    /// Marks the arrival of a request of `op`; keep the guard until the
    /// reply has been sent.
    pub(crate) fn arrived(&self, op: Op) -> Arrival<'_> {
        Arrival {
            _timer: self.latency.as_deref().map(|l| l.start(op)),
            _poll: self.poller.arrived(),
        }
    }

    /// Runs `request` (a request and its reply) with this adapter on a pool
    /// thread (`object_waits.rs`): for requests that may wait on an object
    /// store. The caller's arrival guard ends at the hand-over.
    pub(crate) fn off_request(&self, request: impl FnOnce(&FuseAdapter) + Send + 'static) {
        let a = self.clone();
        self.object_waits.run(move || request(&a));
    }

    /// INIT: asks the kernel for the features the adapter uses and
    /// remembers which it agreed to.
    pub(crate) fn negotiate(&mut self, config: &mut KernelConfig) {
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
        // Opt-in (`-o writeback_cache`): writes land in the kernel's pages
        // and reach the daemon at fsync, close or the kernel's write-back;
        // the kernel then owns the size and times of cached files
        // (page_cache.rs, design.md §5g0).
        self.writeback_cache = self.writeback_cache
            && config
                .add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE)
                .is_ok();
        // The kernel then stamps cached writes with its own coarse clock;
        // new inodes are born on it (`Fs::birth_now_ns`).
        self.fs.set_kernel_stamps_writes(self.writeback_cache);
        // POSIX ACLs (`-o acl`, the default; design.md §5r): the kernel
        // reads and caches them and checks permissions against them; with
        // DONT_MASK it leaves the umask of a new inode to the core, which
        // must not apply it under a default ACL.
        self.posix_acl = self.posix_acl
            && config
                .add_capabilities(InitFlags::FUSE_POSIX_ACL | InitFlags::FUSE_DONT_MASK)
                .is_ok();
        self.fs.set_posix_acls(self.posix_acl);
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
        // per entry for `ls -l` or `find -ls` of a directory (`dirplus.rs`).
        let _ = config
            .add_capabilities(InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO);
    }
}
