//! Filling the kernel's page cache after a writer: when a write-only
//! (direct-I/O) open of a file written behind the page cache is released
//! and no cached open of it is live, the daemon stores the file's bytes
//! into the kernel's pages (`FUSE_NOTIFY_STORE`), one piece per step of the
//! invalidation thread, so the next reader is served from memory instead
//! of sending a read request per page (RocksDB reads the tables it wrote,
//! with read-ahead off; a web cache serves files it just wrote).
//!
//! The rules that keep the pages coherent are [`crate::page_cache`]'s: a
//! fill starts only when no cached open is live, a cached open waits for
//! its end, a change that bypasses the page cache stops it and is
//! acknowledged after its last store, and only a fill that stored every
//! byte with no change meanwhile leaves pages a later open keeps.
//!
//! Not filled: files over [`FILL_MAX_BYTES`], written with `O_DIRECT`
//! (their writer asked to keep them out of memory), unlinked, empty, on an
//! object tier (a fill must not wait on the network), or any file when
//! the kernel's writeback cache is on (its pages are already there) or
//! write-only opens use the page cache.
//!
//! Invariant: a step stores bytes read after it checked, under the fill
//! gate, that the fill goes on; a forget of a file being filled takes the
//! gate, so no store of a forgotten file's bytes lands after the kernel
//! may have given its number to a new file.

use crate::adapter::FuseAdapter;
use crate::invalidate::Step;
use fuser::{INodeNo, ReplyOpen};
use std::io;
use std::sync::Mutex;

/// Largest file filled after its writer (a RocksDB table is 64 MiB by
/// default); larger files are left to the reads that need them.
pub(crate) const FILL_MAX_BYTES: u64 = 64 << 20;

/// Bytes stored per step: other files' invalidations wait for at most one.
const FILL_PIECE: usize = 1 << 20;

/// Held by a fill step from its check to its store, and by the forget of a
/// file being filled.
#[derive(Debug, Default)]
pub(crate) struct FillGate(Mutex<()>);

impl FillGate {
    fn hold(&self) -> std::sync::MutexGuard<'_, ()> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl FuseAdapter {
    /// After the release of a write-only open of `ino` (with `flags`):
    /// starts a fill of the kernel's pages when the file qualifies.
    pub(crate) fn fill_after_writer(&self, ino: u64, flags: i32) {
        if !self.direct_io || self.writeback_cache || flags & libc::O_DIRECT != 0 {
            return;
        }
        if self.invalidator.kernel().is_none() {
            return;
        }
        let Ok(attr) = self.fs.getattr(ino) else {
            return;
        };
        let size = attr.size;
        if attr.mode & libc::S_IFMT != libc::S_IFREG
            || attr.nlink == 0
            || size == 0
            || size > FILL_MAX_BYTES
            || self.fs.read_may_wait_on_network(ino, 0, size as usize)
        {
            return;
        }
        let Some(fill) = self.cached.start_fill(ino) else {
            return;
        };
        let a = self.clone();
        self.invalidator
            .step(Step::new(move || a.fill_step(ino, fill, 0)));
    }

    /// Stores the piece of `ino` at `off` and returns the next step, or
    /// ends the fill.
    fn fill_step(self, ino: u64, fill: u64, off: u64) -> Option<Step> {
        let stored = {
            let _gate = self.fill_gate.hold();
            if !self.cached.fill_goes_on(ino, fill) {
                Err(())
            } else {
                match self.fs.read_for_cache(ino, off, FILL_PIECE) {
                    Ok(data) if data.is_empty() => Ok(0),
                    Ok(data) => match self.invalidator.kernel() {
                        Some(k) if k.store(INodeNo(ino), off, &data).is_ok() => Ok(data.len()),
                        _ => Err(()),
                    },
                    Err(_) => Err(()),
                }
            }
        };
        match stored {
            Ok(n) if n == FILL_PIECE => {
                Some(Step::new(move || self.fill_step(ino, fill, off + n as u64)))
            }
            Ok(_) => {
                self.cached.end_fill(ino, fill, true);
                None
            }
            Err(()) => {
                self.cached.end_fill(ino, fill, false);
                None
            }
        }
    }

    /// The kernel forgot `ino`, whose fill was running: waits for its step
    /// in progress, so nothing of it is stored after this returns.
    pub(crate) fn forgot_while_filling(&self) {
        drop(self.fill_gate.hold());
    }
}

/// Replies to a cached open of `ino` (the core's handle `fh`, open
/// `flags`) that arrived during a fill, once the fill ended: a step that
/// queues itself again while the fill runs.
pub(crate) fn open_after_fill(
    a: FuseAdapter,
    ino: u64,
    fh: u64,
    flags: i32,
    reply: ReplyOpen,
) -> Option<Step> {
    match a.open_flags(ino, flags) {
        Some(how) => {
            crate::reply::opened(reply, Ok::<_, io::Error>((fh, how)));
            None
        }
        None => Some(Step::new(move || open_after_fill(a, ino, fh, flags, reply))),
    }
}
