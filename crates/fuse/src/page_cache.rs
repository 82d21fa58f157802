//! Which opens go through the kernel's page cache, and when the kernel
//! must drop pages of a file (issue 16).
//!
//! By default, files opened write-only use direct I/O (`FOPEN_DIRECT_IO`): every
//! `write()` of up to 1 MiB is one request and one atomic commit in the core,
//! and the synchronicity and size predictors see the application's own
//! writes (logs, appenders, copies). Files opened for reading — read-only or
//! read-write — use the kernel's page cache (`FOPEN_KEEP_CACHE` while it is
//! still valid), so a re-read of hot data is a memory copy, not a round trip
//! to the daemon. Their writes are write-through (no writeback cache): each
//! reaches the daemon before `write()` returns, and the kernel keeps the
//! bytes in its pages. One page cache per file also makes a shared mapping
//! and `write()` of one descriptor agree: with direct I/O the kernel's
//! invalidation after each direct write could write back a mapped page
//! re-dirtied with stale bytes over the write (xfstests generic/346).
//!
//! Under the kernel's writeback cache (`-o writeback_cache`) every open goes
//! through the page cache, write-only ones too, and writes are not
//! write-through: the kernel keeps them dirty and sends them later as
//! `FUSE_WRITE_CACHE` write-backs. The rules below are the same: pages go
//! stale only through a change that bypassed them (`O_DIRECT` writes —
//! the kernel writes dirty pages of their range back first —, fallocate,
//! copy_file_range, truncate), and an invalidation or an open without
//! `FOPEN_KEEP_CACHE` makes the kernel write dirty pages back before it
//! drops them (`launder_folio`), so it never loses a cached write.
//!
//! The daemon is the pool's only writer and every change of a file's data
//! reaches it through this mount; migration, write-back, scrub and log moves
//! never change a file's bytes. So the kernel's pages of a file can only
//! become stale through a change made here that bypassed them:
//! - a write through a direct-I/O (write-only) open or with `O_DIRECT`,
//!   fallocate, or a size change: the file is marked *stale*, and when cached
//!   opens of it are live, the changed range is invalidated in the kernel
//!   before the change is acknowledged (a reader that had the old bytes
//!   cached sees the new ones as soon as the writer's call returns; the
//!   kernel cuts its pages itself at a truncate);
//! - the next cached open of a stale file is answered without
//!   `FOPEN_KEEP_CACHE`, which makes the kernel drop all of the file's pages
//!   at that open — unless the kernel holds no page of it (*paged* is false:
//!   no cached open and no fill since the kernel learned of the inode), when
//!   there is nothing to drop.
//!
//! Writes through a cached open, and writes the kernel sends from its page
//! cache (`FUSE_WRITE_CACHE`: dirty pages of a shared mapping), carry bytes
//! the cache already holds: they mark nothing and invalidate nothing
//! (invalidating pages from inside such a write request would wait on the
//! page locks the kernel holds for it).
//!
//! Filling the kernel's pages after a writer (`crate::fill`): when a
//! write-only open of a file written through direct I/O is released and no
//! writable cached open is live, the daemon stores the file's bytes into
//! the kernel's page cache (`FUSE_NOTIFY_STORE`), so the next reader finds
//! them there — as ext4's reader finds what its writer left in the page
//! cache. The fill first drops every page the kernel holds of the file;
//! from then on, if nothing changed, every page is current and the file is
//! fresh (read-only opens during the fill keep what it stores). A writable
//! cached open waits for the fill's end (its reply is queued behind it); a
//! change that bypasses the page cache stops the fill and is acknowledged
//! only after the fill's step in progress, so no store of older bytes
//! lands after the change's call returned.
//!
//! A write-only open's release reaches the daemon after `close()` returned,
//! so a reader's open may come first: while direct-I/O writers of a file
//! are open, a cached open leaves it stale, and the fill at the last
//! writer's release is still due.
//!
//! Invariant: a file whose entry is stale and paged has no page in the
//! kernel that a cached open may keep; a file without an entry, or not
//! paged, has no page in the kernel at all. Entries are dropped when the kernel
//! forgets the inode (its pages go with it).

use crate::fill::FillOdds;
use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Live cached opens (their reads and writes fill the page cache).
    opens: u32,
    /// Those of them that may write (read-write).
    writers: u32,
    /// Live direct-I/O opens that may write (write-only): their writes
    /// change the file behind the page cache, and their release may fill it.
    direct_writers: u32,
    /// The data changed since the pages were cached.
    stale: bool,
    /// A fill of the kernel's pages is queued or running.
    filling: bool,
    /// Changes that bypassed the page cache, counted so that a fill knows
    /// whether one happened while it ran.
    changes: u64,
    /// A whole fill left pages no open has used yet (its outcome is due:
    /// [`crate::fill::FillOdds`]).
    filled: bool,
    /// A cached open was live while the running fill stored (it used it).
    read_in_fill: bool,
    /// The kernel may hold pages of the file: it had a cached open or a
    /// fill since the kernel learned of it (a file written through direct
    /// I/O only has none).
    paged: bool,
}

/// A file the kernel may hold any page of: stale until an open drops them.
impl Default for Entry {
    fn default() -> Entry {
        Entry {
            opens: 0,
            writers: 0,
            direct_writers: 0,
            stale: true,
            filling: false,
            changes: 0,
            filled: false,
            read_in_fill: false,
            paged: false,
        }
    }
}

/// The page-cache state of every file opened through the page cache or
/// changed behind it.
#[derive(Debug, Default)]
pub struct CachedOpens {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    files: HashMap<u64, Entry>,
    /// Whether fills have been paying.
    odds: FillOdds,
}

impl State {
    /// The file's entry, made (stale) if it has none.
    fn entry(&mut self, ino: u64) -> &mut Entry {
        self.files.entry(ino).or_default()
    }

    /// A change of `ino` behind the page cache (a write, fallocate, copy or
    /// truncate): the file is stale, a running fill stops, and filled pages
    /// no open used count as a wasted fill. The file's entry.
    fn change(&mut self, ino: u64) -> &mut Entry {
        let e = self.files.entry(ino).or_default();
        if std::mem::take(&mut e.filled) {
            self.odds.record(false);
        }
        e.stale = true;
        e.changes += 1;
        e
    }
}

impl CachedOpens {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic elsewhere cannot leave an entry half-updated.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A cached open of `ino`, `writable` or read-only: whether the kernel
    /// may keep the pages it holds (`FOPEN_KEEP_CACHE`) — false after a
    /// change while the kernel may hold pages of the file, and the kernel
    /// then drops them at this open. `None` for a writable open while a fill of the file runs: the
    /// open is not counted, and is asked again once the fill ended.
    pub fn open(&self, ino: u64, writable: bool) -> Option<bool> {
        let mut state = self.state();
        let e = state.entry(ino);
        if e.filling && writable {
            return None;
        }
        // A file the kernel holds no page of (written through direct I/O
        // only since the kernel learned of it) has nothing to drop: keeping
        // spares the kernel an invalidation at this open, which could land
        // after a fill started by the writer's release stored pages.
        let keep = !e.stale || !e.paged;
        e.opens += 1;
        e.writers += u32::from(writable);
        e.read_in_fill |= e.filling;
        e.paged = true;
        // The pages are current from this open on. While a direct writer is
        // open (its release may not have reached the daemon yet, though the
        // writer closed before this open) the file stays marked stale: the
        // fill at that release is still due, and drops what this open kept.
        e.stale = e.direct_writers > 0;
        if std::mem::take(&mut e.filled) {
            state.odds.record(true);
        }
        Some(keep)
    }

    /// The release of a cached open of `ino` (`writable` as at its open).
    pub fn release(&self, ino: u64, writable: bool) {
        if let Some(e) = self.state().files.get_mut(&ino) {
            e.opens = e.opens.saturating_sub(1);
            if writable {
                e.writers = e.writers.saturating_sub(1);
            }
        }
    }

    /// Whether a writable cached open of `ino` is live: the kernel may then
    /// hold dirty pages of it the daemon has not seen (stores through a
    /// shared mapping, which keeps its open alive until it is unmapped;
    /// writes under the writeback cache).
    pub fn has_writers(&self, ino: u64) -> bool {
        self.state().files.get(&ino).is_some_and(|e| e.writers > 0)
    }

    /// A direct-I/O open of `ino` that may write (write-only: not a cached
    /// open).
    pub fn direct_writer_opened(&self, ino: u64) {
        self.state().entry(ino).direct_writers += 1;
    }

    /// The release of a direct-I/O open of `ino` that may write.
    pub fn direct_writer_released(&self, ino: u64) {
        if let Some(e) = self.state().files.get_mut(&ino) {
            e.direct_writers = e.direct_writers.saturating_sub(1);
        }
    }

    /// The data of `ino` changed (not from the kernel's own page cache):
    /// true when cached opens are live or a fill runs, so the caller must
    /// invalidate the changed range in the kernel before it replies (after
    /// the fill's last store: the invalidation thread runs both in order).
    pub fn changed(&self, ino: u64) -> bool {
        let mut state = self.state();
        let e = state.change(ino);
        e.opens > 0 || e.filling
    }

    /// `ino` was truncated through the kernel, which cuts its own pages:
    /// true when a fill runs, so the caller must reply only after the
    /// fill's last store (a store past the new size would grow the
    /// kernel's size again).
    pub fn truncated(&self, ino: u64) -> bool {
        self.state().change(ino).filling
    }

    /// Starts a fill of `ino`'s pages if it needs one and nothing can race
    /// it: the file changed behind the page cache since its pages were last
    /// whole, no writable cached open is live (read-only ones may be) and
    /// no fill runs — and, unless `always`, while fills pay ([`FillOdds`]).
    /// The number to give the fill's other calls.
    pub fn start_fill(&self, ino: u64, always: bool) -> Option<u64> {
        let mut state = self.state();
        let e = state.files.get(&ino)?;
        if !e.stale || e.writers > 0 || e.filling || !(always || state.odds.fill_next()) {
            return None;
        }
        let e = state.entry(ino);
        e.filling = true;
        e.read_in_fill = e.opens > 0;
        Some(e.changes)
    }

    /// Whether the kernel may hold pages of `ino` that a fill starting now
    /// must drop first (its own stores will make pages from then on).
    pub fn fill_must_drop(&self, ino: u64) -> bool {
        let mut state = self.state();
        let e = state.entry(ino);
        std::mem::replace(&mut e.paged, true)
    }

    /// The first step of fill `fill` of `ino` dropped every page the kernel
    /// held of the file: if nothing changed since the fill started, every
    /// page the kernel holds from now on is current (stored by the fill or
    /// read by a reader), so opens may keep them. False when the fill is to
    /// stop.
    pub fn fill_dropped_pages(&self, ino: u64, fill: u64) -> bool {
        match self.state().files.get_mut(&ino) {
            Some(e) if e.filling && e.changes == fill => {
                e.stale = false;
                true
            }
            _ => false,
        }
    }

    /// Whether the fill `fill` of `ino` may store more: no change and no
    /// forget since it started.
    pub fn fill_goes_on(&self, ino: u64, fill: u64) -> bool {
        self.state()
            .files
            .get(&ino)
            .is_some_and(|e| e.filling && e.changes == fill)
    }

    /// The fill `fill` of `ino` ended, having stored the whole file
    /// (`whole`) or not. Whether the pages are current was settled by
    /// [`CachedOpens::fill_dropped_pages`] and the changes since; a whole
    /// fill's outcome is due ([`FillOdds`]): now if a reader was open
    /// meanwhile, else at the file's next open, change or forget. Writable
    /// opens may go on.
    pub fn end_fill(&self, ino: u64, fill: u64, whole: bool) {
        let mut state = self.state();
        let Some(e) = state.files.get_mut(&ino) else {
            return;
        };
        e.filling = false;
        if whole && e.changes == fill {
            if std::mem::take(&mut e.read_in_fill) {
                state.odds.record(true);
            } else {
                e.filled = true;
            }
        }
    }

    /// The kernel forgot `ino`: it holds no page of it any more. True when
    /// a fill of it was running (it stops at its next step). The kernel
    /// never evicts an inode with open files, so a forget that finds opens
    /// live is of an earlier incarnation and changes nothing.
    pub fn forget(&self, ino: u64) -> bool {
        let mut state = self.state();
        match state.files.get(&ino) {
            None => return false,
            Some(e) if e.opens > 0 || e.direct_writers > 0 => return false,
            Some(_) => {}
        }
        let Some(e) = state.files.remove(&ino) else {
            return false;
        };
        if e.filled {
            state.odds.record(false);
        }
        e.filling
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ino` written behind the page cache, then a fill of it started and
    /// past its drop of the kernel's pages: the fill's number.
    fn fill_under_way(c: &CachedOpens, ino: u64) -> u64 {
        c.changed(ino);
        let fill = c.start_fill(ino, true).expect("a fill starts");
        c.fill_must_drop(ino);
        assert!(c.fill_dropped_pages(ino, fill));
        fill
    }

    #[test]
    fn pages_are_kept_only_while_the_data_is_unchanged() {
        let c = CachedOpens::default();
        assert_eq!(
            c.open(7, false),
            Some(true),
            "the kernel holds no page yet: nothing to drop"
        );
        c.release(7, false);
        assert_eq!(
            c.open(7, true),
            Some(true),
            "unchanged since: the pages are kept"
        );
        c.release(7, true);
        assert!(!c.changed(7), "no open is live: nothing to invalidate now");
        assert_eq!(
            c.open(7, false),
            Some(false),
            "changed: the next open drops the pages"
        );
    }

    #[test]
    fn a_change_while_a_reader_is_open_asks_for_invalidation() {
        let c = CachedOpens::default();
        c.open(3, false);
        assert!(c.changed(3));
        c.release(3, false);
        assert_eq!(
            c.open(3, false),
            Some(false),
            "the change also drops the pages at the next open"
        );
    }

    #[test]
    fn files_never_opened_for_reading_need_nothing_and_forget_resets() {
        let c = CachedOpens::default();
        assert!(!c.changed(9));
        c.open(9, false);
        c.release(9, false);
        c.changed(9);
        c.forget(9);
        assert_eq!(
            c.open(9, false),
            Some(true),
            "after forget the kernel has no page to drop"
        );
    }

    #[test]
    fn a_late_forget_of_a_file_with_live_opens_keeps_its_state() {
        let c = CachedOpens::default();
        c.open(5, false);
        assert!(!c.forget(5));
        assert!(c.changed(5), "a change must still reach the open reader");
        c.release(5, false);
        assert_eq!(
            c.open(5, false),
            Some(false),
            "the changed file's pages are dropped at the next open"
        );
    }

    #[test]
    fn a_fill_with_no_change_meanwhile_leaves_pages_the_next_open_keeps() {
        let c = CachedOpens::default();
        assert_eq!(
            c.start_fill(4, false),
            None,
            "never written behind the cache"
        );
        c.open(4, false);
        c.release(4, false);
        assert!(
            !c.changed(4),
            "a direct write with no reader invalidates nothing"
        );
        let fill = c.start_fill(4, false).expect("written behind the cache");
        assert_eq!(c.start_fill(4, false), None, "one fill at a time");
        assert_eq!(
            c.open(4, false),
            Some(false),
            "before the drop: stale pages may be there"
        );
        c.release(4, false);
        assert!(c.fill_dropped_pages(4, fill));
        assert!(c.fill_goes_on(4, fill));
        assert_eq!(
            c.open(4, false),
            Some(true),
            "a reader during the fill keeps what it stores"
        );
        c.release(4, false);
        c.end_fill(4, fill, true);
        assert_eq!(c.start_fill(4, false), None, "current: nothing to fill");
        assert_eq!(c.open(4, false), Some(true));
    }

    #[test]
    fn a_writable_open_during_a_fill_waits_and_is_not_counted_until_it_ends() {
        let c = CachedOpens::default();
        let fill = fill_under_way(&c, 5);
        assert_eq!(c.open(5, true), None);
        assert!(
            !c.changed(6) && c.open(6, true).is_some(),
            "other files are not held"
        );
        c.end_fill(5, fill, true);
        assert_eq!(c.open(5, true), Some(true));
        c.changed(5);
        assert_eq!(
            c.start_fill(5, false),
            None,
            "no fill while a writable open is live"
        );
        c.release(5, true);
        assert!(
            c.start_fill(5, false).is_some(),
            "read-only opens do not hold fills back"
        );
    }

    #[test]
    fn a_reader_that_opens_before_the_writers_release_arrives_leaves_the_fill_due() {
        let c = CachedOpens::default();
        // A write-only (direct-I/O) open writes and closes; its release is
        // sent by the kernel after close returned, and a reader's open may
        // reach the daemon first.
        c.direct_writer_opened(9);
        c.changed(9);
        assert_eq!(
            c.open(9, false),
            Some(true),
            "written through direct I/O only: no page to drop"
        );
        c.release(9, false);
        c.direct_writer_released(9);
        let fill = c
            .start_fill(9, false)
            .expect("the fill after the writer is still due");
        assert!(c.fill_must_drop(9), "the reader may have read pages");
        assert!(c.fill_dropped_pages(9, fill));
        c.end_fill(9, fill, true);
        assert_eq!(c.open(9, false), Some(true), "filled pages are kept");
        c.release(9, false);
        // With no direct writer open, a reader's open makes the file current.
        c.changed(9);
        assert_eq!(c.open(9, false), Some(false));
        c.release(9, false);
        assert_eq!(c.start_fill(9, true), None, "current: nothing to fill");
    }

    #[test]
    fn a_change_during_a_fill_stops_it_waits_for_it_and_leaves_the_file_stale() {
        let c = CachedOpens::default();
        let fill = fill_under_way(&c, 8);
        assert!(
            c.changed(8),
            "the change must be answered after the fill's step"
        );
        assert!(!c.fill_goes_on(8, fill));
        c.end_fill(8, fill, true);
        assert_eq!(
            c.open(8, false),
            Some(false),
            "pages stored before the change are dropped"
        );
        c.release(8, false);

        c.changed(8);
        let fill = c.start_fill(8, false).unwrap();
        assert!(c.truncated(8), "a truncate during a fill waits for it too");
        assert!(
            !c.fill_dropped_pages(8, fill),
            "the fill stops before its drop"
        );
        c.end_fill(8, fill, false);
        assert_eq!(c.open(8, false), Some(false));
        c.release(8, false);
        assert!(
            !c.truncated(8),
            "without a fill the kernel's own cut is enough"
        );
    }

    #[test]
    fn a_forgotten_file_stops_its_fill_and_starts_over() {
        let c = CachedOpens::default();
        let fill = fill_under_way(&c, 2);
        assert!(c.forget(2), "the fill was running");
        assert!(!c.fill_goes_on(2, fill));
        c.end_fill(2, fill, true);
        assert_eq!(
            c.open(2, false),
            Some(true),
            "a forgotten file starts over: the kernel holds no page of it"
        );
    }

    #[test]
    fn fills_count_as_used_by_a_reader_during_or_after_them_and_wasted_by_a_change_or_forget() {
        let c = CachedOpens::default();
        let fill_and = |ino: u64, then: &dyn Fn(&CachedOpens)| {
            let fill = fill_under_way(&c, ino);
            c.end_fill(ino, fill, true);
            then(&c);
        };
        for ino in 10..20 {
            fill_and(ino, &|c| {
                c.changed(ino);
            });
        }
        assert!(!c.state().odds.fill_next(), "ten wasted fills");
        for ino in 20..40 {
            fill_and(ino, &|c| {
                c.open(ino, false);
            });
        }
        assert!(c.state().odds.fill_next(), "twenty used ones");
    }

    #[test]
    fn only_a_file_the_kernel_may_hold_pages_of_is_dropped_before_a_fill() {
        let c = CachedOpens::default();
        c.changed(30);
        assert!(!c.fill_must_drop(30), "written through direct I/O only");
        assert!(c.fill_must_drop(30), "after a fill's stores");
        c.open(31, false);
        c.release(31, false);
        c.changed(31);
        assert!(c.fill_must_drop(31), "after a cached open");
        c.forget(31);
        c.changed(31);
        assert!(!c.fill_must_drop(31), "the kernel forgot it, pages and all");
    }
}
