//! Filling the kernel's page cache after a writer: when a write-only
//! (direct-I/O) open of a file written behind the page cache is released
//! and no writable cached open of it is live, the daemon stores the file's
//! bytes into the kernel's pages (`FUSE_NOTIFY_STORE`), one piece per step
//! of the invalidation thread, so the next reader is served from memory
//! instead of sending a read request per page (RocksDB reads the tables it
//! wrote, with read-ahead off; a web cache serves files it just wrote).
//!
//! The rules that keep the pages coherent are [`crate::page_cache`]'s: a
//! fill's first step drops every page the kernel holds of the file, so that
//! from then on each page is current; a read-only open during a fill goes
//! on (it reads what the fill stores or what the daemon serves, both
//! current), a writable one waits for the fill's end (no store may land
//! over bytes a write-through write put in a page); a change that bypasses
//! the page cache stops the fill and is acknowledged after the step in
//! progress, and leaves the file stale as any such change does.
//!
//! Not filled: files under [`FILL_MIN_BYTES`] or over [`FILL_MAX_BYTES`],
//! written with `O_DIRECT` (their writer asked to keep them out of
//! memory), unlinked, or on an object tier (a fill must not wait on the
//! network); any file when the kernel's writeback cache is on (its pages
//! are already there) or write-only opens use the page cache; and — under
//! `fill_after_write=auto` — most files while fills are not paying
//! ([`FillOdds`]).
//!
//! Invariant: a step stores bytes read after it checked that the fill goes
//! on, and marks the file as being stored from before that check to after
//! the store; a forget of the file waits while it is, so no store of a
//! forgotten file's bytes lands after the kernel may have given its node id
//! to a new file. That wait is bounded: once the kernel forgot the file, a
//! store of it finds no inode and returns at once.

use crate::adapter::FuseAdapter;
use crate::invalidate::Step;
use crate::options::FillOption;
use fuser::{INodeNo, ReplyOpen};
use std::io;
use std::sync::{Condvar, Mutex};

/// Largest file filled after its writer: twice RocksDB's default table
/// size (64 MiB, which the tables a compaction writes slightly exceed);
/// larger files (a bulk copy) are left to the reads that need them.
pub(crate) const FILL_MAX_BYTES: u64 = 128 << 20;

/// Smallest file filled after its writer: the kernel's read-ahead window.
/// A reader of a smaller file gets all of it with its first request, and
/// the fill would cost the daemon as much as that request (Filebench's
/// webproxy, whose files are 16 KiB on average, ran 10% slower with them).
pub(crate) const FILL_MIN_BYTES: u64 = 128 << 10;

/// Bytes stored per step: other files' invalidations wait for at most one.
const FILL_PIECE: usize = 1 << 20;

/// Whether fills pay: the outcomes of the last [`FillOdds::WINDOW`] whole
/// fills — *used* when a cached open kept the filled pages, *wasted* when
/// the file changed or was forgotten first. A server that rewrites or
/// appends to files more often than it reads them back (Filebench's
/// fileserver: each file written once is next appended to, deleted or read,
/// about one time in three a read) pays a copy of every byte it writes for
/// few reads; a store of tables or cached objects read after they were
/// written (RocksDB, a web cache) has nearly every fill used.
///
/// Fills go on while at least half of the known outcomes were used (and
/// until [`FillOdds::LEARN`] are known); otherwise one candidate in
/// [`FillOdds::PROBE`] is still filled, so the odds follow a workload that
/// changes.
#[derive(Debug, Default, Clone, Copy)]
pub struct FillOdds {
    /// Outcomes, newest in bit 0: 1 = used.
    used: u64,
    /// Outcomes known, up to the window.
    known: u32,
    /// Candidates refused since the last probe.
    refused: u32,
}

impl FillOdds {
    /// Outcomes remembered.
    pub const WINDOW: u32 = 32;
    /// Outcomes known before the odds decide.
    pub const LEARN: u32 = 8;
    /// While fills do not pay, one candidate in this many is filled.
    pub const PROBE: u32 = 64;

    /// A whole fill was used (true) or wasted (false).
    pub fn record(&mut self, used: bool) {
        self.used = (self.used << 1) | u64::from(used);
        self.known = (self.known + 1).min(Self::WINDOW);
    }

    /// Whether to fill the candidate at hand.
    pub fn fill_next(&mut self) -> bool {
        let mask = (1u64 << self.known) - 1;
        let used = (self.used & mask).count_ones();
        if self.known < Self::LEARN || 2 * used >= self.known {
            self.refused = 0;
            return true;
        }
        self.refused += 1;
        if self.refused >= Self::PROBE {
            self.refused = 0;
            return true;
        }
        false
    }
}

/// Which file a fill step is storing, from its check to its store: the
/// forget of that file waits for the store to end.
#[derive(Debug, Default)]
pub(crate) struct FillGate {
    storing: Mutex<Option<u64>>,
    stored: Condvar,
}

impl FillGate {
    fn storing(&self) -> std::sync::MutexGuard<'_, Option<u64>> {
        self.storing.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn begin(&self, ino: u64) {
        *self.storing() = Some(ino);
    }

    fn end(&self) {
        *self.storing() = None;
        self.stored.notify_all();
    }

    /// Waits while a step stores bytes of `ino`.
    fn wait_for(&self, ino: u64) {
        let mut s = self.storing();
        while *s == Some(ino) {
            s = self.stored.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }
}

impl FuseAdapter {
    /// After the release of a write-only open of `ino` (with `flags`):
    /// starts a fill of the kernel's pages when the file qualifies.
    pub(crate) fn fill_after_writer(&self, ino: u64, flags: i32) {
        if self.fill_after_write == FillOption::Never
            || !self.direct_io
            || self.writeback_cache
            || flags & libc::O_DIRECT != 0
        {
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
            || !(FILL_MIN_BYTES..=FILL_MAX_BYTES).contains(&size)
            || self.fs.read_may_wait_on_network(ino, 0, size as usize)
        {
            return;
        }
        let always = self.fill_after_write == FillOption::Always;
        let Some(fill) = self.cached.start_fill(ino, always) else {
            return;
        };
        let a = self.clone();
        self.invalidator
            .step(Step::new(move || a.fill_first_step(ino, fill)));
    }

    /// Drops every page the kernel may hold of `ino` (a page cached before
    /// the writer's changes may be stale on kernels that do not drop pages
    /// at a direct write), so that from then on each page is current, then
    /// goes on with the first piece. A file the kernel never held pages of
    /// (written through direct I/O only) needs no drop: the drop would
    /// also cost the kernel's cached attributes, and a reader at the end
    /// of the file a request for them.
    fn fill_first_step(self, ino: u64, fill: u64) -> Option<Step> {
        let dropped = self.cached.fill_goes_on(ino, fill)
            && (!self.cached.fill_must_drop(ino)
                || self
                    .invalidator
                    .kernel()
                    .is_some_and(|k| k.inval_inode(INodeNo(ino), 0, 0).is_ok()))
            && self.cached.fill_dropped_pages(ino, fill);
        if !dropped {
            self.cached.end_fill(ino, fill, false);
            return None;
        }
        self.fill_step(ino, fill, 0)
    }

    /// Stores the piece of `ino` at `off` and returns the next step, or
    /// ends the fill.
    fn fill_step(self, ino: u64, fill: u64, off: u64) -> Option<Step> {
        self.fill_gate.begin(ino);
        let stored = if !self.cached.fill_goes_on(ino, fill) {
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
        };
        self.fill_gate.end();
        if let Ok(n) = stored {
            self.fs.note_cache_fill(n as u64, n < FILL_PIECE);
        }
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

    /// The kernel forgot `ino`, whose fill was running: waits for a store
    /// of it in progress, so nothing of it is stored after this returns.
    pub(crate) fn forgot_while_filling(&self, ino: u64) {
        self.fill_gate.wait_for(ino);
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

#[cfg(test)]
mod tests {
    use super::FillOdds;

    #[test]
    fn fills_go_on_while_at_least_half_of_them_are_used() {
        let mut o = FillOdds::default();
        for _ in 0..FillOdds::LEARN {
            assert!(o.fill_next(), "still learning");
            o.record(false);
        }
        assert!(!o.fill_next(), "every fill wasted: stop");
        for used in [true, false].into_iter().cycle().take(40) {
            o.record(used);
        }
        assert!(o.fill_next(), "half used pays");
        for used in [true, false, false].into_iter().cycle().take(40) {
            o.record(used);
        }
        assert!(
            !o.fill_next(),
            "a third used does not (Filebench's fileserver)"
        );
    }

    #[test]
    fn while_fills_do_not_pay_one_candidate_in_sixty_four_is_still_filled_and_can_turn_them_on() {
        let mut o = FillOdds::default();
        for _ in 0..FillOdds::WINDOW {
            o.record(false);
        }
        let filled = (0..FillOdds::PROBE * 4).filter(|_| o.fill_next()).count();
        assert_eq!(filled, 4);
        // The workload changed: every probe's fill is used now.
        let mut probes = 0;
        while !(o.fill_next() && o.fill_next()) {
            probes += 1;
            assert!(probes < 10_000, "the odds never turned");
            o.record(true);
        }
    }
}
