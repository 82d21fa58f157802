//! FUSE adapter of Terrace: the only crate that talks to the kernel through
//! `fuser`. [`FuseAdapter`] is a thin translation of every FUSE request into a
//! call on [`terrace_core::Fs`]; [`mount`] mounts it and runs the session on its
//! own threads; [`unmount`] detaches a mount point.
//!
//! Choices (see the design notes):
//! - `default_permissions` is always on: the kernel checks permissions, so
//!   `access` just says yes.
//! - No writeback cache by default: every `write()` reaches the core when
//!   it is made (the placement predictor sees the real writes, and a
//!   returned write is in the pool). Files opened
//!   write-only get `FOPEN_DIRECT_IO` when the kernel offers
//!   `FUSE_DIRECT_IO_ALLOW_MMAP`, so a write() of up to 1 MiB is one request
//!   and one atomic commit (through the page cache the kernel splits writes
//!   at partial pages); opens for reading — read-only and read-write — go
//!   through the kernel's page cache (write-through for writes), kept while
//!   the file is unchanged ([`page_cache`]): reads of hot data are memory
//!   copies, and a shared mapping and write() of one descriptor share one
//!   copy of each page. Kernels without that flag get `FOPEN_KEEP_CACHE` for
//!   every open.
//! - Opt-in kernel writeback cache (`-o writeback_cache`,
//!   `FUSE_WRITEBACK_CACHE`): every open without `O_DIRECT` — write-only
//!   included — goes through the page cache and its writes reach the core
//!   as write-backs (at fsync, close, `O_SYNC`/`O_DSYNC` writes, or the
//!   kernel's flusher); the kernel owns the size and times of cached files
//!   and sends them back as setattr. A killed daemon loses what the kernel
//!   had not written back, and a `write()` is no longer one atomic commit.
//! - Locks (`getlk`/`setlk`) are not implemented: fuser does not ask for
//!   `FUSE_POSIX_LOCKS`/`FUSE_FLOCK_LOCKS`, so the kernel keeps POSIX locks and
//!   flocks locally, which is correct for a single-host file system.
//! - `FUSE_HANDLE_KILLPRIV_V2` when the kernel offers it: the adapter clears
//!   set-user/group-ID bits on unprivileged writes, truncates and on chown,
//!   and `security.capability` on every write, truncate and chown, so the
//!   kernel no longer asks for
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
//!
//! # Layout
//! One file per job; the request path reads top to bottom:
//! - [`FuseAdapter`] (`adapter.rs`): the adapter's state and what INIT
//!   negotiates with the kernel;
//! - `filesystem.rs`: fuser's `Filesystem` trait, one short delegation per
//!   request (it must be a single `impl` block);
//! - the requests by concern: `attr.rs` (attributes, set-ID and capability
//!   clearing), `dir.rs` and `dirplus.rs` (directories and names),
//!   `file.rs` (opens and data), `xattr.rs`, `special.rs` (fallocate,
//!   copy_file_range), `ioctl.rs` (inode flags: `chattr`/`lsattr`);
//! - `reply.rs` (core results → replies, errno mapping) and `convert.rs`
//!   (times, file types, attributes);
//! - mounting: [`MountOptions`] (`options.rs`) and [`mount`]/[`unmount`]
//!   (`session.rs`);
//! - helpers with their own state or rules: [`page_cache`], [`poll`],
//!   [`listing_attrs`] (whether a listing carries attributes),
//!   [`setid`], [`latency`], and `invalidate.rs` (the thread that drops
//!   stale kernel pages before a reply, so no request thread waits on the
//!   kernel's page locks).

mod adapter;
mod attr;
mod convert;
mod dir;
mod dirplus;
mod file;
mod filesystem;
mod fill;
mod invalidate;
mod ioctl;
pub mod latency;
pub mod listing_attrs;
mod object_waits;
mod options;
pub mod page_cache;
pub mod poll;
mod refused_writebacks;
mod reply;
mod session;
pub mod setid;
mod special;
mod write_through;
mod xattr;

pub use adapter::FuseAdapter;
pub use convert::{file_attr, ns_to_time, time_to_ns};
pub use options::{AtimeOption, FillOption, MountOptions, DEFAULT_POLL_US};
pub use session::{mount, unmount, Mounted};
pub use special::fallocate_mode;
