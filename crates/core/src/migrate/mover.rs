//! The move mechanism (module docs of `migrate`, steps 1–4): capture the
//! pieces of a range, copy them to fresh blocks of the target tier, make
//! them durable once per window of moves ([`MoveBatch`]), commit each move.

use super::*;

/// One piece of a group still on the source tier.
#[derive(Clone, Copy)]
pub(super) struct Piece {
    file_block: FileBlock,
    blocks: u64,
    tier: TierId,
    block: PhysBlock,
    counter: u8,
    mtime: i64,
    seq: u64,
    copy: Option<(TierId, PhysBlock)>,
}

impl Piece {
    /// Whether `mode` copies this piece's data to `to`; the others only
    /// need an entry (a clean copy already on `to` is promoted, a copy is
    /// dropped).
    fn needs_data(&self, mode: Mode, to: TierId) -> bool {
        match mode {
            Mode::Move => self.copy.map(|c| c.0) != Some(to),
            Mode::Copy => true,
            Mode::Evict | Mode::DropCopy => false,
        }
    }
}

/// A move whose data is written to the target but not yet committed
/// ([`Fs::prepare_move`] → sync → [`Fs::commit_move`]).
pub(super) struct Prepared {
    ino: Ino,
    /// The inode's generation when the pieces were captured: a slot freed
    /// and reused by another file before the commit has a newer one.
    generation: u32,
    from: TierId,
    to: TierId,
    mode: Mode,
    pieces: Vec<Piece>,
    d: crate::data::DataRuns,
    /// New block of each data block, in piece order.
    phys: Vec<PhysBlock>,
    /// The copied data (its first `total` blocks; for the DRAM cache copy
    /// at commit). Returned to the migrator's buffer pool after the commit.
    buf: terrace_media::AlignedBuf,
    /// Blocks copied.
    total: u64,
}

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
        }
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
            self.started.get_or_insert_with(Instant::now);
            let limit = self.object_window(to).map(|w| w.next_move_limit());
            let (prepared, cut) = self.fs.prepare_move(ino, from, to, &rest, mode, limit)?;
            let Some(p) = prepared else {
                return Ok(());
            };
            if p.total == 0 {
                // Promotions and drops commit at once; they still free room.
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
    /// releases their blocks when they did not), and counts the window's
    /// time and bytes per target tier.
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
    pub(super) fn commit_all(&mut self) -> FsResult<()> {
        let r = self.flush();
        r.and(self.finish_uploads(0))
    }

    /// Bytes moved by the moves committed so far.
    pub(crate) fn moved(&self) -> u64 {
        self.moved
    }
}

impl Drop for MoveBatch<'_> {
    /// A batch dropped without `finish` (a panic unwinding) still waits for
    /// its upload, and releases the blocks of what it never committed.
    fn drop(&mut self) {
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
    /// Moves the pieces of `groups` (of file `ino`) that are still on tier
    /// `from` to tier `to`, one group at a time. Returns the bytes moved.
    pub fn migrate_groups(
        &self,
        ino: Ino,
        from: TierId,
        to: TierId,
        groups: &[Group],
    ) -> FsResult<u64> {
        let mut moved = 0;
        for g in groups {
            if self.migrator.worker.stopping() {
                break;
            }
            moved += self.migrate_range(ino, from, to, FileBlock(g.file_block), g.blocks)?;
        }
        Ok(moved)
    }

    /// Moves the data of file blocks `[start, start + n)` that is on tier
    /// `from` to tier `to` (see the module doc for the steps).
    pub(crate) fn migrate_range(
        &self,
        ino: Ino,
        from: TierId,
        to: TierId,
        start: FileBlock,
        n: u64,
    ) -> FsResult<u64> {
        self.move_range(ino, from, to, start, n, Mode::Move)
    }

    /// The mechanism behind every data movement (module doc, steps 1–4), in
    /// one of four [`Mode`]s. Returns the bytes it moved, copied, evicted or
    /// dropped.
    pub(crate) fn move_range(
        &self,
        ino: Ino,
        from: TierId,
        to: TierId,
        start: FileBlock,
        n: u64,
        mode: Mode,
    ) -> FsResult<u64> {
        self.move_ranges(ino, from, to, &[(start, n)], mode)
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

    /// Steps 1 and 2 of the mechanism: captures the pieces of `ranges` and
    /// writes their data to fresh blocks of `to` — not yet made durable on a
    /// block tier (the caller syncs the tier before [`Fs::commit_move`]).
    /// `None` when nothing in the ranges qualifies. With a `limit`, at most
    /// that many blocks are copied: the move is cut at a file block, which
    /// is returned (the caller moves the ranges from there on next).
    pub(super) fn prepare_move(
        &self,
        ino: Ino,
        from: TierId,
        to: TierId,
        ranges: &[(FileBlock, u64)],
        mode: Mode,
        limit: Option<u64>,
    ) -> FsResult<(Option<Prepared>, Option<FileBlock>)> {
        // Nothing lands on a tier being removed (`tier_detach.rs`): not its
        // blocks (its allocations fail), and not a promotion of a clean copy
        // there to primary data, which would hold the removal up.
        if mode != Mode::DropCopy && self.retiring(to) {
            return Err(errno(libc::ENOSPC));
        }
        // 1. Capture.
        let (generation, mut pieces): (u32, Vec<Piece>) = {
            let g = self.lock(ino)?;
            let i = g.as_ref().expect("live");
            let pieces = ranges
                .iter()
                .flat_map(|&(start, n)| i.extents.overlaps(start, n))
                .filter(|(_, e)| match mode {
                    Mode::Move => e.tier == from,
                    Mode::Copy => e.tier == from && e.copy.is_none(),
                    Mode::Evict => e.tier == from && e.copy.map(|c| c.0) == Some(to),
                    Mode::DropCopy => e.copy.map(|c| c.0) == Some(from),
                })
                .map(|(fb, e)| Piece {
                    file_block: fb,
                    blocks: e.blocks,
                    tier: e.tier,
                    block: e.block,
                    counter: e.counter,
                    mtime: e.mtime,
                    seq: e.seq,
                    copy: e.copy,
                })
                .collect();
            (i.generation, pieces)
        };
        // A clean copy is promoted without copying data (an eviction, or a
        // move to the copy's tier) only when it reads back intact: else the
        // move copies the data, and an eviction leaves the piece alone (the
        // PM side may be the only good data; scrub drops the damaged copy).
        if matches!(mode, Mode::Move | Mode::Evict) {
            pieces.retain_mut(|p| match p.copy {
                Some((t, b)) if t == to && !self.blocks_intact(t, b, p.blocks, true) => {
                    p.copy = None;
                    mode == Mode::Move
                }
                _ => true,
            });
        }
        // Pieces whose data must be copied; the others only need an entry
        // (a clean copy already on `to` is promoted, a copy is dropped).
        let needs_data = |p: &Piece| p.needs_data(mode, to);
        let cut = limit.and_then(|l| cut_pieces(&mut pieces, l, needs_data));
        let total: u64 = pieces
            .iter()
            .filter(|p| needs_data(p))
            .map(|p| p.blocks)
            .sum();
        if pieces.is_empty() {
            return Ok((None, cut));
        }
        // 2. Room on the target first: a full target costs no buffer and no
        // copy (a pass over a full pool stays cheap). The target blocks count
        // as pending from just before their allocation until committed or
        // released (`MoveBatch::flush`; the error paths below), so a write
        // refused for room meanwhile knows to wait for them.
        let copying = total;
        self.migrator
            .move_blocks_pending
            .fetch_add(copying, Ordering::Relaxed);
        let not_pending = || {
            self.migrator
                .move_blocks_pending
                .fetch_sub(copying, Ordering::Relaxed);
        };
        let d = if total == 0 {
            crate::data::DataRuns {
                tier: to,
                runs: Vec::new(),
            }
        } else if to.is_pm() {
            // Data coming up (reverse migration, recycling that spills to
            // PM) leaves PM's metadata reserve and the blocks promised to
            // write-back alone: an unlink on a full pool needs them for its
            // log entry (found by `space_pressure.rs`: urgent recycling
            // spilled victims into the reserve until an unlink failed).
            if self.pm_free_unpromised() < total + self.pm_reserve_blocks() {
                not_pending();
                return Err(errno(libc::ENOSPC));
            }
            match self.alloc.alloc(total) {
                Some(runs) => crate::data::DataRuns {
                    tier: TierId::PM,
                    runs,
                },
                None => {
                    not_pending();
                    return Err(errno(libc::ENOSPC));
                }
            }
        } else {
            let t = match self.tier(to) {
                Ok(t) => t,
                Err(e) => {
                    not_pending();
                    return Err(e);
                }
            };
            // A copy keeps its source: it may take only room that no dirty
            // cached page was promised (a move gives its source back at the
            // commit; a write-back short of room waits for it).
            let off_pm = mode == Mode::Move && from.is_pm();
            let _room = (mode == Mode::Copy || off_pm).then(|| self.room_lock.lock());
            if mode == Mode::Copy && self.data_room_blocks() < total {
                not_pending();
                return Err(errno(libc::ENOSPC));
            }
            // A move off PM gives its PM blocks back at the commit, but while
            // PM is under its metadata reserve they refill the reserve, not
            // the room: then it may take only room no dirty page was promised.
            if off_pm
                && self.pm_free_unpromised() < self.pm_reserve_blocks()
                && self.data_room_blocks() < total
            {
                not_pending();
                return Err(errno(libc::ENOSPC));
            }
            // Recycling (a move within the tier) may use the tier's reserve:
            // it frees the extent it empties.
            let runs = if mode == Mode::Move && from == to {
                t.space.alloc_recycling(total)
            } else {
                t.space.alloc(total)
            };
            match runs {
                Some(runs) => crate::data::DataRuns { tier: to, runs },
                None => {
                    not_pending();
                    return Err(errno(libc::ENOSPC));
                }
            }
        };
        let release = |d| {
            self.release_data(d);
            not_pending();
        };
        // 3. Copy. Blocks read here may be freed and reused by a concurrent
        // write; the commit then drops the piece, so stale bytes never commit.
        // A block-aligned buffer (O_DIRECT takes it without a bounce copy),
        // reused across moves so its pages are not faulted in each time.
        let mut buf = self.migrator.take_pooled((total * BS) as usize);
        let mut at = 0usize;
        for p in pieces.iter().filter(|p| needs_data(p)) {
            let len = (p.blocks * BS) as usize;
            if p.tier.is_pm() {
                self.media
                    .read(p.block.byte_offset(), &mut buf[at..at + len]);
                self.pm_io.record_read(len as u64);
            } else {
                let read = self
                    .tier(p.tier)
                    .and_then(|t| t.media.read_blocks(p.block.get(), &mut buf[at..at + len]))
                    .and_then(|()| self.verify_read(p.tier, p.block, &buf[at..at + len]));
                if let Err(e) = read {
                    release(d);
                    return Err(e);
                }
            }
            at += len;
        }
        if total > 0 {
            if let Err(e) = self.write_data_unsynced(&d, &buf[..(total * BS) as usize]) {
                release(d);
                return Err(e);
            }
        }
        let mut phys = Vec::with_capacity(total as usize);
        for &(b, k) in &d.runs {
            phys.extend((0..k).map(|j| b + j));
        }
        Ok((
            Some(Prepared {
                ino,
                generation,
                from,
                to,
                mode,
                pieces,
                d,
                phys,
                buf: buf.into_inner(),
                total,
            }),
            cut,
        ))
    }

    /// Steps 3 and 4: commits the prepared pieces whose mapping is unchanged
    /// (their new data must be durable by now) and frees what is not used.
    /// Returns the bytes moved, copied, evicted or dropped.
    pub(super) fn commit_move(&self, p: Prepared) -> FsResult<u64> {
        let Prepared {
            ino,
            generation,
            from,
            to,
            mode,
            pieces,
            d,
            phys,
            buf,
            total,
        } = p;
        // The buffer goes back to the pool whichever way this returns.
        let buf = PooledBuf::new(&self.migrator, buf);
        let needs_data = |p: &Piece| p.needs_data(mode, to);
        // 3. Commit the pieces whose mapping is unchanged. A move of blocks
        // other files share commits, and remaps those files, alone
        // (`reshare.rs`).
        let _reshare = (matches!(mode, Mode::Move | Mode::Evict)
            && pieces.iter().any(|p| {
                !self
                    .shared
                    .shared_parts(p.tier, p.block, p.blocks)
                    .is_empty()
            }))
        .then(|| self.reshare_lock.lock());
        let mut g = match self.lock(ino) {
            Ok(g) => g,
            Err(_) => {
                self.release_data(d);
                return Ok(0);
            }
        };
        let i = g.as_mut().expect("live");
        if i.generation != generation {
            // The file was deleted and its slot reused by another file since
            // the capture: its mappings (even ones with the same blocks and
            // sequence numbers — both restart per file) are not ours.
            drop(g);
            self.release_data(d);
            return Ok(0);
        }
        let mut entries: Vec<Entry> = Vec::new();
        let mut unused: Vec<crate::extent_map::Released> = Vec::new();
        let mut kept = 0u64;
        // Moved blocks other files map too: they follow (`reshare.rs`).
        let mut shared_moves = Vec::new();
        let mut kept_data: Vec<(usize, u64)> = Vec::new(); // (index in phys, blocks)
        let mut k = 0usize;
        // Checked again under the inode's lock: a removal that marked the
        // tier retiring since the capture finds no promotion committed
        // after the mark (it looks at each inode under its lock).
        let to_retiring = mode != Mode::DropCopy && self.retiring(to);
        for p in &pieces {
            let data = needs_data(p);
            // Unchanged: same mapping *and* same sequence number (a rewrite
            // that reused the same blocks has a newer one).
            let still = (data || !to_retiring)
                && i.extents.find(p.file_block).is_some_and(|(s, e)| {
                    e.seq == p.seq
                        && e.tier == p.tier
                        && e.block + (p.file_block - s) == p.block
                        && s + e.blocks >= p.file_block + p.blocks
                });
            if !still {
                if data {
                    for b in &phys[k..k + p.blocks as usize] {
                        unused.push((d.tier, *b, 1));
                    }
                    k += p.blocks as usize;
                }
                continue;
            }
            kept += p.blocks;
            if !data {
                let (ctier, cblock) = p.copy.expect("filtered on its copy");
                if mode != Mode::DropCopy {
                    shared_moves.extend(
                        self.shared_moves(p.tier, p.block, p.blocks, ctier, |j| cblock + j),
                    );
                }
                entries.push(Entry::Copy(CopyEntry {
                    file_block: p.file_block,
                    blocks: p.blocks as u32,
                    tier: ctier,
                    op: if mode == Mode::DropCopy {
                        CopyOp::Drop
                    } else {
                        CopyOp::Promote
                    },
                    block: cblock,
                }));
                continue;
            }
            kept_data.push((k, p.blocks));
            if mode == Mode::Move {
                let first = k;
                shared_moves.extend(self.shared_moves(p.tier, p.block, p.blocks, d.tier, |j| {
                    phys[first + j as usize]
                }));
            }
            for off in 0..p.blocks {
                let fb = p.file_block + off;
                let b = phys[k + off as usize];
                // Extend the previous entry when file and new blocks both
                // continue it: a group becomes one entry (its newest mtime).
                match (mode, entries.last_mut()) {
                    (Mode::Move, Some(Entry::Write(w)))
                        if w.file_block + w.blocks as u64 == fb
                            && w.block + w.blocks as u64 == b
                            && w.blocks < u32::MAX =>
                    {
                        w.blocks += 1;
                        w.mtime = w.mtime.max(p.mtime);
                        w.size_counter = w.size_counter.max(p.counter);
                        continue;
                    }
                    (Mode::Copy, Some(Entry::Copy(c)))
                        if c.file_block + c.blocks as u64 == fb
                            && c.block + c.blocks as u64 == b
                            && c.blocks < u32::MAX =>
                    {
                        c.blocks += 1;
                        continue;
                    }
                    _ => {}
                }
                entries.push(if mode == Mode::Copy {
                    Entry::Copy(CopyEntry {
                        file_block: fb,
                        blocks: 1,
                        tier: d.tier,
                        op: CopyOp::Add,
                        block: b,
                    })
                } else {
                    Entry::Write(WriteEntry {
                        file_block: fb,
                        blocks: 1,
                        tier: d.tier,
                        size_counter: p.counter,
                        wflags: WRITE_FLAG_MOVED,
                        block: b,
                        size_after: i.attr.size,
                        mtime: p.mtime,
                    })
                });
            }
            k += p.blocks as usize;
        }
        if entries.is_empty() {
            drop(g);
            self.free_runs(unused);
            return Ok(0);
        }
        let n_entries = entries.len() as u64;
        // Moves down free a PM block for each one they log: they may use
        // the blocks promised to write-back. Moves up take PM like any write.
        self.pin_old_blocks(&shared_moves);
        if let Err(e) = self.commit_one_in(i, entries, !to.is_pm()) {
            drop(g);
            self.unpin_old_blocks(&shared_moves);
            self.release_data(d);
            return Err(e);
        }
        self.pin_new_blocks(&shared_moves);
        // Keep a DRAM copy of data moved down while the cache is under half
        // full — under the inode lock, so the blocks cannot be freed first.
        if !to.is_pm() && mode == Mode::Move {
            let c = self.cache.stats();
            if mig::keep_cache_copy(c.dirty_bytes + c.clean_bytes, c.bound_bytes) {
                for &(first, blocks) in &kept_data {
                    let src = &buf[first * BS as usize..(first + blocks as usize) * BS as usize];
                    let pages: Vec<Arc<[u8]>> = src.chunks(BS as usize).map(Arc::from).collect();
                    let mut j = 0usize;
                    while j < pages.len() {
                        let mut run = 1usize;
                        while j + run < pages.len()
                            && phys[first + j + run] == phys[first + j] + run as u64
                        {
                            run += 1;
                        }
                        self.cache
                            .put_clean(to, phys[first + j], pages[j..j + run].to_vec());
                        j += run;
                    }
                }
            }
        }
        drop(g);
        // 4. The old blocks were freed by the commit; free what was not used.
        self.free_runs(unused);
        self.reshare(ino, shared_moves);
        let bytes = kept * BS;
        let m = &self.migrator;
        match mode {
            Mode::Move if from == to => {} // extent recycling: the cleaner counts
            Mode::Move if to.is_pm() => {
                m.bytes_up.fetch_add(bytes, Ordering::Relaxed);
            }
            Mode::Move => {
                m.bytes_down.fetch_add(bytes, Ordering::Relaxed);
            }
            Mode::Copy => {
                m.bytes_copied.fetch_add(bytes, Ordering::Relaxed);
            }
            Mode::Evict => {
                m.bytes_evicted.fetch_add(bytes, Ordering::Relaxed);
            }
            Mode::DropCopy => {}
        }
        m.groups.fetch_add(1, Ordering::Relaxed);
        m.entries_moved.fetch_add(n_entries, Ordering::Relaxed);
        if total > 0 {
            m.data_bytes.fetch_add(total * BS, Ordering::Relaxed);
        }
        Ok(bytes)
    }
}

/// Keeps the pieces (in file order) up to `limit` blocks of data to copy,
/// cutting the piece that crosses it; returns the file block where the kept
/// pieces end when anything was cut off (pieces without data past that
/// point go too: the rest is captured again from there).
fn cut_pieces(
    pieces: &mut Vec<Piece>,
    limit: u64,
    needs_data: impl Fn(&Piece) -> bool,
) -> Option<FileBlock> {
    let mut left = limit;
    for k in 0..pieces.len() {
        if !needs_data(&pieces[k]) {
            continue;
        }
        if pieces[k].blocks >= left {
            let at = pieces[k].file_block + left;
            let more = pieces[k].blocks > left || k + 1 < pieces.len();
            pieces[k].blocks = left;
            pieces.truncate(if left == 0 { k } else { k + 1 });
            return more.then_some(at);
        }
        left -= pieces[k].blocks;
    }
    None
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
