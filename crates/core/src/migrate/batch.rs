//! Windows of moves ([`MoveBatch`]): many moves prepared by the mechanism
//! of `mover.rs`, one device sync per window (an upload in the background
//! for an object tier), then each move's commit.
//!
//! Invariants:
//! - Every block a prepared move allocated is either committed (mapped) or
//!   released, whichever way the batch ends: by [`MoveBatch::finish`], by
//!   a failed sync, by a halt (below) or by being dropped unfinished (a
//!   panic, an early return): [`Migrator::move_blocks_pending`] then counts
//!   it down too.
//! - A batch made to *stop with the pool* ([`MoveBatch::stop_with_the_pool`],
//!   the evacuation of a tier being removed, which runs on a control
//!   thread that no unmount or freeze joins) commits nothing once the pool
//!   is being frozen or unmounted ([`Fs::pool_stopping`]: the clean mark of
//!   `Fs::persist_and_mark_clean` is near, and nothing may be written to
//!   the pool after it). It looks before each window's sync and each
//!   move's commit, releases that move and every later one, and refuses
//!   further moves with [`MoveBatch::HALTED_ERRNO`]. The background
//!   migration needs no such halt: the unmount joins its thread before the
//!   clean mark.

use super::mover::Prepared;
use super::*;

/// Counts [`Migrator::move_blocks_pending`] down by its blocks, and one
/// more window done, when dropped.
pub(super) struct PendingMoves<'a>(&'a Migrator, u64);

impl Drop for PendingMoves<'_> {
    fn drop(&mut self) {
        self.0
            .move_blocks_pending
            .fetch_sub(self.1, Ordering::Relaxed);
        self.0.move_windows_done.fetch_add(1, Ordering::Relaxed);
    }
}

/// Bytes of prepared moves after which a [`MoveBatch`] syncs and commits.
pub const MOVE_SYNC_WINDOW_BYTES: u64 = 64 << 20;

/// Moves collected so that one device sync covers many of them: each
/// [`MoveBatch::add`] copies a batch of pieces (one sequential request) and
/// keeps it uncommitted; once `window` bytes are pending, or at
/// [`MoveBatch::finish`], every target tier is synced once and then each move
/// commits. A crash before a move's commit leaves its old mapping (the new
/// blocks are free at the next mount); no committed entry ever points at
/// data that is not durable.
///
/// A window whose targets are all object tiers is *uploaded in the
/// background*: it is sealed (`BlockMedia::seal`, a ticket per tier) and
/// its upload (`sync_sealed`, seconds per window) runs on a thread of its
/// own while the next window copies. When the next window is due, its
/// upload starts first and only then does the batch wait for the window
/// before and commit its moves — after that upload returned, as always —
/// so the store has PUTs to work on while one window's last parts finish
/// and the next one's bodies are hashed: at most two windows upload at
/// once, and windows commit in order (design §5n).
pub(crate) struct MoveBatch<'a> {
    fs: &'a Fs,
    pending: Vec<Prepared>,
    pending_bytes: u64,
    window: u64,
    started: Option<Instant>,
    moved: u64,
    /// The windows being uploaded in the background, oldest first (at
    /// most [`UPLOADS_IN_FLIGHT`]).
    uploading: std::collections::VecDeque<Uploading>,
    /// Whether the batch commits nothing once the pool stops
    /// ([`MoveBatch::stop_with_the_pool`]).
    stops_with_the_pool: bool,
    /// It did stop: every move since was released, none is prepared.
    halted: bool,
}

/// Windows uploading at once: the one whose moves wait for their commit,
/// and the next one, started before that wait.
const UPLOADS_IN_FLIGHT: usize = 2;

/// A window of moves whose object-tier upload runs on its own thread.
struct Uploading {
    moves: Vec<Prepared>,
    /// Bytes copied per target tier, for the per-tier bandwidth.
    copied: std::collections::BTreeMap<TierId, u64>,
    /// The upload: each target tier's `sync`, in tier order.
    upload: std::thread::JoinHandle<Vec<(TierId, std::io::Result<()>)>>,
    started: Instant,
}

impl<'a> MoveBatch<'a> {
    /// The error of a batch halted because the pool is being frozen or
    /// unmounted ([`MoveBatch::stop_with_the_pool`]).
    pub(crate) const HALTED_ERRNO: i32 = libc::ESHUTDOWN;

    /// A batch that syncs after `window` bytes (0: after every move).
    pub(crate) fn new(fs: &'a Fs, window: u64) -> MoveBatch<'a> {
        MoveBatch {
            fs,
            pending: Vec::new(),
            pending_bytes: 0,
            window,
            started: None,
            moved: 0,
            uploading: std::collections::VecDeque::new(),
            stops_with_the_pool: false,
            halted: false,
        }
    }

    /// Makes the batch commit nothing once the pool is being frozen or
    /// unmounted (see the module docs): the moves not yet committed then
    /// are released, and `add` and `finish` fail with
    /// [`MoveBatch::HALTED_ERRNO`].
    pub(crate) fn stop_with_the_pool(mut self) -> MoveBatch<'a> {
        self.stops_with_the_pool = true;
        self
    }

    /// Whether this batch must commit nothing more (it stops with the pool
    /// and the pool is stopping); once true, stays true.
    fn halts(&mut self) -> bool {
        if self.stops_with_the_pool && !self.halted && self.fs.pool_stopping() {
            self.halted = true;
        }
        self.halted
    }

    /// Prepares a move of the pieces of `ranges` (see [`Fs::move_ranges`]);
    /// moves without data to copy commit at once. An error (target full or
    /// failing) leaves the moves prepared so far pending: `finish` still
    /// commits them.
    pub(crate) fn add(
        &mut self,
        ino: Ino,
        from: TierId,
        to: TierId,
        ranges: &[(FileBlock, u64)],
        mode: Mode,
    ) -> FsResult<()> {
        let mut rest: Vec<(FileBlock, u64)> = ranges.to_vec();
        loop {
            if self.halts() {
                return Err(errno(Self::HALTED_ERRNO));
            }
            self.started.get_or_insert_with(Instant::now);
            let limit = self.object_window(to).map(|w| w.next_move_limit());
            let (prepared, cut) = self.fs.prepare_move(ino, from, to, &rest, mode, limit)?;
            let Some(p) = prepared else {
                return Ok(());
            };
            if p.total == 0 {
                // Promotions and drops commit at once (nothing to release:
                // they allocated nothing); they still free room.
                if self.halts() {
                    return Err(errno(Self::HALTED_ERRNO));
                }
                let r = self.fs.commit_move(p);
                self.fs
                    .migrator
                    .move_windows_done
                    .fetch_add(1, Ordering::Relaxed);
                self.moved += r?;
            } else {
                self.pending_bytes += p.total * BS;
                self.pending.push(p);
                let due = match self.object_window(to) {
                    Some(w) => w.due(),
                    None => self.pending_bytes >= self.window,
                };
                if due {
                    self.flush()?;
                }
            }
            // The rest of a move cut at a segment end goes on after it.
            let Some(at) = cut else {
                return Ok(());
            };
            rest = ranges_from(&rest, at);
            if rest.is_empty() {
                return Ok(());
            }
        }
    }

    /// Where this batch's window into `to` stands, when `to` is an object
    /// tier and the window spans at least a segment (policy
    /// `ObjectWindow`: windows end on segment ends, so each segment is
    /// uploaded as one part).
    fn object_window(&self, to: TierId) -> Option<mig::ObjectWindow> {
        if to.is_pm() || !self.fs.is_object_tier(to) {
            return None;
        }
        let t = self.fs.tier(to).ok()?;
        let segment = t.space.extent_blocks();
        let window = self.window / BS;
        (window >= segment).then(|| mig::ObjectWindow {
            pending: self.pending_bytes / BS,
            window,
            segment,
            open_offset: t.space.open_offset(),
        })
    }

    /// Syncs the target tiers of the pending moves once, then commits them.
    /// A window into object tiers only is sealed and its upload started in
    /// the background; the window uploading before it then commits (see
    /// the type's docs). Any other window commits at once, after every
    /// window uploading. The first error is returned; a window whose sync
    /// failed commits none of its moves (their blocks are released).
    fn flush(&mut self) -> FsResult<()> {
        if self.pending.is_empty() {
            return self.finish_uploads(0);
        }
        let pending = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        let mut copied: std::collections::BTreeMap<TierId, u64> = Default::default();
        for p in &pending {
            *copied.entry(p.d.tier).or_default() += p.total * BS;
        }
        let started = self.started.take().unwrap_or_else(Instant::now);
        if self.halts() {
            // No sync either: the pool is being made clean for good.
            let before = self.finish_uploads(0);
            let halted = Err(errno(Self::HALTED_ERRNO));
            let now = self.commit_window(pending, copied, started, halted);
            return before.and(now);
        }
        if copied
            .keys()
            .all(|&t| !t.is_pm() && self.fs.is_object_tier(t))
        {
            // Sealed here, so the upload takes exactly this window's blocks:
            // the next window's, written while it runs, wait for their own
            // (and the windows' segment ends stay part ends).
            let sealed: Vec<(TierId, Arc<dyn terrace_media::BlockMedia>, u64)> = copied
                .keys()
                .filter_map(|&t| self.fs.tier(t).ok().map(|x| (t, Arc::clone(&x.media))))
                .map(|(t, m)| {
                    let ticket = m.seal();
                    (t, m, ticket)
                })
                .collect();
            let on_thread = sealed.clone();
            let upload = std::thread::Builder::new()
                .name("terrace-upload".into())
                .spawn(move || {
                    on_thread
                        .iter()
                        .map(|(t, m, ticket)| (*t, m.sync_sealed(*ticket)))
                        .collect()
                });
            if let Ok(upload) = upload {
                self.uploading.push_back(Uploading {
                    moves: pending,
                    copied,
                    upload,
                    started,
                });
                return self.finish_uploads(UPLOADS_IN_FLIGHT - 1);
            }
            // Without a thread (none can be made), the upload runs here,
            // after the windows before it commit.
            let before = self.finish_uploads(0);
            let synced = sealed.iter().try_for_each(|(t, m, ticket)| {
                m.sync_sealed(*ticket)
                    .map_err(|e| self.fs.device_error(*t, e))
            });
            let now = self.commit_window(pending, copied, started, synced);
            return before.and(now);
        }
        let before = self.finish_uploads(0);
        let tiers: Vec<TierId> = copied.keys().copied().filter(|t| !t.is_pm()).collect();
        let synced = tiers.into_iter().try_for_each(|t| self.fs.sync_tier(t));
        let now = self.commit_window(pending, copied, started, synced);
        before.and(now)
    }

    /// Waits for the windows uploading in the background, oldest first,
    /// and commits the moves of each (or releases their blocks when its
    /// upload failed), until at most `keep` are left; the first error.
    fn finish_uploads(&mut self, keep: usize) -> FsResult<()> {
        let mut first = Ok(());
        while self.uploading.len() > keep {
            let Some(u) = self.uploading.pop_front() else {
                break;
            };
            let synced = match u.upload.join() {
                Ok(results) => results
                    .into_iter()
                    .try_for_each(|(t, r)| r.map_err(|e| self.fs.device_error(t, e))),
                Err(_) => Err(std::io::Error::other("the upload thread panicked")),
            };
            let r = self.commit_window(u.moves, u.copied, u.started, synced);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    /// Commits the moves of a window whose target tiers `synced` (or
    /// releases their blocks when they did not, and from the first move on
    /// that finds the batch halted), and counts the window's time and
    /// bytes per target tier.
    fn commit_window(
        &mut self,
        moves: Vec<Prepared>,
        copied: std::collections::BTreeMap<TierId, u64>,
        started: Instant,
        synced: FsResult<()>,
    ) -> FsResult<()> {
        // Counted down once every move is committed or released.
        let blocks: u64 = moves.iter().map(|p| p.total).sum();
        let _done = PendingMoves(&self.fs.migrator, blocks);
        if let Err(e) = synced {
            for p in moves {
                self.fs.release_data(p.d);
            }
            return Err(e);
        }
        let mut first_err = None;
        for p in moves {
            // Looked at before each commit: the last one may come long
            // after the window's sync began.
            if self.halts() {
                self.fs.release_data(p.d);
                first_err.get_or_insert_with(|| errno(Self::HALTED_ERRNO));
                continue;
            }
            match self.fs.commit_move(p) {
                Ok(b) => self.moved += b,
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        let m = &self.fs.migrator;
        let ns = started.elapsed().as_nanos() as u64;
        m.busy_ns.fetch_add(ns, Ordering::Relaxed);
        let total: u64 = copied.values().sum();
        let mut per = m.per_tier.lock();
        for (tier, bytes) in copied {
            // The window's time, shared among its target tiers by bytes.
            let share = (u128::from(ns) * u128::from(bytes) / u128::from(total.max(1))) as u64;
            let e = per.entry(tier).or_default();
            e.0 += bytes;
            e.1 += share;
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Syncs and commits everything pending; returns the bytes moved by all
    /// of this batch's committed moves, and whether the last window failed
    /// (then none of its moves committed).
    pub(crate) fn finish(mut self) -> (u64, FsResult<()>) {
        let r = self.commit_all();
        (self.moved, r)
    }

    /// Syncs and commits every move prepared so far, the window uploading
    /// in the background included: their source blocks are free when it
    /// returns (or, on an error, their target blocks are released).
    pub(crate) fn commit_all(&mut self) -> FsResult<()> {
        let r = self.flush();
        r.and(self.finish_uploads(0))
    }

    /// Bytes moved by the moves committed so far.
    pub(crate) fn moved(&self) -> u64 {
        self.moved
    }
}

impl Drop for MoveBatch<'_> {
    /// A batch dropped without `finish` (a panic unwinding, an early
    /// return) still waits for its upload, and releases the blocks of what
    /// it never committed: the windows uploading and the moves prepared
    /// since the last window.
    fn drop(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        let blocks: u64 = pending.iter().map(|p| p.total).sum();
        if !pending.is_empty() {
            let _done = PendingMoves(&self.fs.migrator, blocks);
            for p in pending {
                self.fs.release_data(p.d);
            }
        }
        while let Some(u) = self.uploading.pop_front() {
            let _ = u.upload.join();
            let blocks: u64 = u.moves.iter().map(|p| p.total).sum();
            let _done = PendingMoves(&self.fs.migrator, blocks);
            for p in u.moves {
                self.fs.release_data(p.d);
            }
        }
    }
}

impl Fs {
    /// Whether the pool is being frozen or unmounted, or can no longer be
    /// written: `Fs::persist_and_mark_clean` stops the migration and
    /// write-back threads (their workers say `stopping` from then on,
    /// until a thaw or a failed freeze starts them again) before it marks
    /// the image clean, and the unmounted, frozen and read-only marks
    /// follow. A move committed from then on could land after the mark.
    pub(crate) fn pool_stopping(&self) -> bool {
        self.migrator.worker.stopping()
            || self.cache.worker.stopping()
            || self.unmounted.load(Ordering::SeqCst)
            || self.is_frozen()
            || self.is_read_only()
    }

    /// [`Fs::move_range`] over several disjoint ranges of file blocks
    /// (`(first block, blocks)`, in file order) at once: their pieces are
    /// copied to one contiguous run of the target — one sequential request on
    /// a block tier — and committed together, one entry per run that is
    /// contiguous both in the file and on the target.
    pub(crate) fn move_ranges(
        &self,
        ino: Ino,
        from: TierId,
        to: TierId,
        ranges: &[(FileBlock, u64)],
        mode: Mode,
    ) -> FsResult<u64> {
        let mut batch = MoveBatch::new(self, 0);
        let r = batch.add(ino, from, to, ranges, mode);
        let (moved, done) = batch.finish();
        r.and(done).map(|()| moved)
    }
}

/// The parts of `ranges` (in file order) at or after file block `at`.
fn ranges_from(ranges: &[(FileBlock, u64)], at: FileBlock) -> Vec<(FileBlock, u64)> {
    ranges
        .iter()
        .filter_map(|&(s, n)| {
            let end = s + n;
            if end <= at {
                None
            } else if s < at {
                Some((at, end - at))
            } else {
                Some((s, n))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Root, no umask.
    const ROOT: crate::Ctx = crate::Ctx {
        uid: 0,
        gid: 0,
        umask: 0,
    };

    #[test]
    fn a_batch_dropped_unfinished_releases_the_blocks_of_its_prepared_moves() {
        let fs = crate::test_pools::tiered_pool(16).2;
        let f = fs.mknod(1, b"f", libc::S_IFREG | 0o644, 0, ROOT).unwrap();
        fs.write(f.ino, 0, &[5u8; 64 * 4096]).unwrap();
        let pending = || fs.migrator.move_blocks_pending.load(Ordering::Relaxed);
        let mut batch = MoveBatch::new(&fs, MOVE_SYNC_WINDOW_BYTES);
        batch
            .add(
                f.ino,
                TierId::PM,
                TierId(1),
                &[(FileBlock(0), 64)],
                Mode::Move,
            )
            .unwrap();
        assert_eq!(pending(), 64, "the move waits in the window");
        // An early return (or a panic) drops the batch unfinished.
        drop(batch);
        assert_eq!(pending(), 0, "the dropped move still counts as pending");
        fs.check_allocator()
            .unwrap_or_else(|e| panic!("the dropped move's blocks leaked: {e}"));
        let g = fs.lock(f.ino).unwrap();
        let i = g.as_ref().unwrap();
        assert!(i.extents.iter().all(|(_, e)| e.tier == TierId::PM));
        drop(g);
        assert_eq!(fs.read(f.ino, 0, 64 * 4096).unwrap(), vec![5u8; 64 * 4096]);
    }
}
