//! The move mechanism (module docs of `migrate`, steps 1–4): capture the
//! pieces of a range, copy them to fresh blocks of the target tier, make
//! them durable once per window of moves ([`MoveBatch`], in
//! `batch.rs`), commit each move.

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
    pub(super) d: crate::data::DataRuns,
    /// New block of each data block, in piece order.
    phys: Vec<PhysBlock>,
    /// The copied data (its first `total` blocks; for the DRAM cache copy
    /// at commit). Returned to the migrator's buffer pool after the commit.
    buf: terrace_media::AlignedBuf,
    /// Blocks copied.
    pub(super) total: u64,
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
        let (generation, data_seq, mut pieces): (u32, u64, Vec<Piece>) = {
            let g = self.lock(ino)?;
            let i = g.as_ref().expect("live");
            if mode != Mode::DropCopy
                && self.migrator.found_damaged(ino, (i.generation, i.data_seq))
            {
                return Err(errno(libc::EIO));
            }
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
            (i.generation, i.data_seq, pieces)
        };
        // A clean copy is promoted without copying data (an eviction, or a
        // move to the copy's tier) only when it reads back intact: else the
        // move copies the data, and an eviction leaves the piece alone (the
        // PM side may be the only good data; scrub drops the damaged copy).
        if matches!(mode, Mode::Move | Mode::Evict) {
            pieces.retain_mut(|p| match p.copy {
                Some((t, b)) if t == to && !self.blocks_intact(t, b, p.blocks, Some(ino)) => {
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
            // the room: then it may take only room no dirty page was promised
            // — or, in a rescue, the recycling reserve (`rescue.rs`).
            let rescue = off_pm && mode == Mode::Move && super::rescue::rescuing();
            if off_pm
                && !rescue
                && self.pm_free_unpromised() < self.pm_reserve_blocks()
                && self.data_room_blocks() < total
            {
                not_pending();
                return Err(errno(libc::ENOSPC));
            }
            // Recycling (a move within the tier) may use the tier's reserve:
            // it frees the extent it empties.
            let runs = if t.refuses_allocation() {
                // Its device is full (`device_full.rs`).
                None
            } else if mode == Mode::Move && from == to {
                t.space.alloc_recycling(total)
            } else if rescue {
                t.space.alloc(total).or_else(|| t.space.alloc_rescue(total))
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
                    .and_then(|t| t.media.read_blocks(p.block.get(), &mut buf[at..at + len]));
                // A mismatch counts as damage only while the piece is still
                // mapped as captured: a write into preallocated blocks
                // (`ops_prealloc_write.rs`) rewrites them in place after
                // unmapping them, under the file's lock.
                let mut damaged = false;
                let read = read.and_then(|()| {
                    let data = &buf[at..at + len];
                    if self.blocks_match(p.tier, p.block, data) {
                        Ok(Some(()))
                    } else if !self.still_mapped(ino, (p.file_block, p.blocks), p.seq) {
                        Ok(None)
                    } else {
                        let r = self.verify_read(ino, p.tier, p.block, data);
                        damaged = r.is_err();
                        r.map(Some)
                    }
                });
                match read {
                    Ok(Some(())) => {}
                    Ok(None) => {
                        release(d);
                        return Ok((None, cut));
                    }
                    Err(e) => {
                        if damaged {
                            self.migrator
                                .damaged_data
                                .lock()
                                .insert(ino, (generation, data_seq));
                        }
                        release(d);
                        return Err(e);
                    }
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
                && i.extents
                    .still_maps(p.file_block, p.blocks, p.tier, p.block, p.seq)
                    .is_some();
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
