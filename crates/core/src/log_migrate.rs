//! Log migration (Ziggurat §4): logs of cold files leave PM for a block tier.
//!
//! A small file costs PM its 128-byte slot and a log of a few hundred bytes
//! as long as its log stays there, so without this the number of files a
//! pool holds is bounded by PM, not by the pool. A log moves as one *blob*
//! (`terrace_format::LogBlob`): the entries that describe the inode's whole
//! state — what log compaction writes — in fresh blocks of the tier.
//!
//! Steps, for a batch of inodes:
//! 1. *Capture* under each inode's lock: the inode qualifies (no data on PM,
//!    no dirty cached page, still linked); its blob is encoded from the DRAM
//!    state, and the log's identity (head, tail, place) is noted.
//! 2. *Write*: blobs of at most 2 KiB are packed several to a block
//!    (format 11); blocks for every unit are allocated on the tier (one
//!    contiguous run each, in the open extent, so a batch is one sequential
//!    request), written, and the device is synced once. A packed block is
//!    then held by each of its blobs (`Fs::packed_logs`) and freed with the
//!    last; it is never written again.
//! 3. *Commit* under each inode's lock again, if its log is unchanged: one
//!    journal transaction publishes the slot's head (tier and block), tail
//!    (blob length) and state 2 together — the commit point. Then the PM
//!    pages (or the blob the log had before) are freed. A log that changed
//!    meanwhile keeps its place and its new blocks are released.
//!
//! A crash before a commit leaves the PM log (the new blocks are free at the
//! next mount, tier space being derived); after it, the blob, durable since
//! step 2. A later change of the inode recalls the log in its own commit
//! (`Fs::stage_commit`). The cleaner moves blobs out of extents it recycles
//! with the same steps ([`Fs::move_logs`] with a blob as the source).
//!
//! Lock order: inode lock, then the tier's space lock, the journal, the PM
//! allocator (as every commit). Device I/O happens with no lock held.

use crate::fs::Fs;
use crate::inode::Inode;
use crate::log::{Log, TierLog};
use crate::types::{errno, FsResult, Ino};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use terrace_format::{
    encode_tier_log_head, LogBlob, PhysBlock, TierId, BLOCK_SIZE, INODE_OFF_LOG_HEAD,
    INODE_OFF_LOG_TAIL, INODE_OFF_STATE, INODE_USED_TIER_LOG, LOG_BLOB_ALIGN, LOG_BLOB_PACK_MAX,
};
use terrace_policy::log_migration::{self as policy, LogMigrationNeed, LogPressure};

/// Slots a pass looks at, at most, per call (the scan resumes where it
/// stopped at the next call).
const SCAN_SLOTS: u64 = 1 << 16;
/// Least time unchanged for a log to move when PM is short of room.
const ANY_MIN_AGE_NS: u64 = 1_000_000_000;
/// Blobs written with one device sync.
const BATCH_BLOBS: usize = 1024;
/// After a scan that looked at every slot and fell short of its goal, the
/// next one waits for the first log that was too young to ripen, at least
/// this long...
const SHORT_SCAN_HOLD_MIN: Duration = Duration::from_millis(200);
/// ...and at most this long (logs whose files' cached pages or PM data
/// leave meanwhile become movable without ripening).
const SHORT_SCAN_HOLD_MAX: Duration = crate::worker::IdleBackoff::MAX;

/// What one scan of the inode table found beyond the logs it moved.
#[derive(Debug, Default)]
struct ScanEnd {
    /// Every slot was looked at and the goal was not reached.
    short: bool,
    /// The earliest time (ns since the epoch) a log left behind only for
    /// being too young becomes old enough.
    first_ripe_ns: Option<i64>,
}

/// One log captured for a move.
struct Captured {
    ino: Ino,
    generation: u32,
    /// The log as it was: a move commits only if it is still so, and no
    /// entry was applied since (`Inode::applied`).
    head: u64,
    tail: u64,
    on_tier: Option<TierLog>,
    applied: u64,
    /// The access time the blob holds.
    atime: i64,
    blob: Vec<u8>,
    bytes: u64,
    entries: u64,
}

/// Blobs written to one place: one blob alone in blocks of its own, or
/// blobs of at most [`LOG_BLOB_PACK_MAX`] bytes packed into one block.
struct BlobUnit {
    /// Each blob and the byte offset it starts at in the unit's first block.
    members: Vec<(Captured, u64)>,
    /// Blocks the unit takes.
    blocks: u64,
}

impl BlobUnit {
    /// The bytes the unit's blocks get: each blob at its offset, zeros
    /// between and after.
    fn image(&self) -> Vec<u8> {
        if let [(c, 0)] = &self.members[..] {
            return c.blob.clone();
        }
        let mut b = vec![0u8; (self.blocks * BLOCK_SIZE) as usize];
        for (c, offset) in &self.members {
            let (at, len) = (*offset as usize, c.bytes as usize);
            b[at..at + len].copy_from_slice(&c.blob[..len]);
        }
        b
    }
}

/// Groups captured blobs into units. A blob longer than
/// [`LOG_BLOB_PACK_MAX`] is a unit alone; shorter ones fill blocks in the
/// order given (files of one directory, captured together, share blocks),
/// each at the next multiple of [`LOG_BLOB_ALIGN`], a new block begun when
/// the next blob does not fit.
fn pack_blobs(batch: Vec<Captured>) -> Vec<BlobUnit> {
    let mut units = Vec::new();
    let mut open: Option<BlobUnit> = None;
    let mut fill = 0;
    for c in batch {
        if c.bytes > LOG_BLOB_PACK_MAX {
            let blocks = c.blob.len() as u64 / BLOCK_SIZE;
            units.push(BlobUnit {
                members: vec![(c, 0)],
                blocks,
            });
            continue;
        }
        let len = c.bytes.next_multiple_of(LOG_BLOB_ALIGN);
        if fill + len > BLOCK_SIZE {
            units.extend(open.take());
        }
        let unit = match open.as_mut() {
            Some(u) => u,
            None => {
                fill = 0;
                open.insert(BlobUnit {
                    members: Vec::new(),
                    blocks: 1,
                })
            }
        };
        unit.members.push((c, fill));
        fill += len;
    }
    units.extend(open);
    units
}

/// Which blocks of a block tier the blobs being written may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlobRoom {
    /// Log migration off PM: only room no dirty cached page was promised (a
    /// log may leave less PM than its blob takes on the tier — a blob takes
    /// whole blocks or, packed, 256-byte steps — so moving it is not
    /// room-neutral;
    /// xfstests generic/077 had 12 MiB of such blobs on a full pool whose
    /// cached pages then could not be written back).
    FromPm,
    /// A blob rewritten on a tier: any free block but the recycling reserve.
    Rewrite,
    /// A blob moved out of an extent being recycled: the reserve too, as
    /// the data moved with it, since what they leave frees the extent (a
    /// victim whose data moved but whose blobs found no block kept the
    /// reserve's blocks and was not freed).
    Recycling,
}

/// What one batch of log moves did.
#[derive(Debug, Default)]
struct LogsMoved {
    /// Logs that took their new place (off PM, or to a fresh blob).
    moved: u64,
    /// PM bytes of log pages freed.
    pm_bytes_freed: u64,
}

/// What `terrace status` shows about log migration. (Fields a daemon of
/// another version does not send read as 0.)
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct LogMigrationStatus {
    /// Inodes whose log is on a block tier now.
    pub logs_on_tiers: u64,
    /// Bytes of the blocks those logs take on the block tiers (a block that
    /// packed blobs share counts once).
    pub tier_log_bytes: u64,
    /// Logs moved off PM since mount.
    pub moved: u64,
    /// PM bytes of log pages freed by those moves.
    pub pm_bytes_freed: u64,
    /// Scans of the inode table for logs to move since mount.
    pub scans: u64,
}

impl Fs {
    /// Whether `i`'s log may move off PM now: no data on PM (its next move
    /// would recall the log), nothing cached, still linked, and a log on PM
    /// that is not empty; cold unless `any_age`.
    fn log_can_move(i: &Inode, now: i64, age_ns: u64, any_age: bool) -> bool {
        i.log.on_tier.is_none()
            && i.log.tail != 0
            && !i.zombie
            && i.attr.nlink > 0
            && i.dirty.is_empty()
            && !Fs::has_pm_data(i)
            && policy::log_is_old_enough(now, i.attr.mtime.max(i.attr.ctime), age_ns, any_age)
    }

    /// Whether any block of the file (primary or copy) is on PM.
    fn has_pm_data(i: &Inode) -> bool {
        let (clean, dirty) = i.extents.pm_clean_dirty();
        clean + dirty > 0
            || i.extents
                .iter()
                .any(|(_, e)| e.copy.is_some_and(|(t, _)| t.is_pm()))
    }

    fn capture(&self, i: &Inode) -> Captured {
        let blob = LogBlob {
            owner: i.ino,
            generation: i.generation,
            entries: crate::sums::with_sums(i.snapshot_entries(), &self.sums_tables()),
        };
        let entries = blob.entries.len() as u64;
        let enc = blob.encode();
        Captured {
            ino: i.ino,
            generation: i.generation,
            head: i.log.head,
            tail: i.log.tail,
            on_tier: i.log.on_tier,
            applied: i.applied,
            atime: i.attr.atime,
            bytes: LogBlob::len_of(&enc),
            blob: enc,
            entries,
        }
    }

    /// What a migration pass should do about logs now.
    pub(crate) fn log_migration_need(&self, threshold_percent: u8) -> LogMigrationNeed {
        if self.tiers.is_empty() || !self.settings.read().log_migration {
            return LogMigrationNeed::None;
        }
        let total = self.alloc.total();
        policy::log_migration_need(&LogPressure {
            pool_blocks: total,
            used_blocks: total - self.alloc.free(),
            log_blocks: self.log_space.blocks(),
            free_unpromised_blocks: self.pm_free_unpromised(),
            reserve_blocks: self.pm_reserve_blocks(),
            threshold_percent,
        })
    }

    /// Moves logs off PM to the first block tier as `need` asks, scanning
    /// the inode table from where the last call stopped. Returns the PM
    /// bytes of log pages freed.
    ///
    /// A scan that moved nothing (every file with a log on PM has data there,
    /// or changed within the age) makes the next ones wait until the pool's
    /// room changes or at most 2 s
    /// ([`IdleBackoff`](crate::worker::IdleBackoff)): PM full
    /// of data pinned there would otherwise cost a walk of the inode table
    /// every pass. A scan that moved some logs but looked at every slot
    /// without reaching its goal holds the next one until the first log it
    /// left for being too young ripens (between [`SHORT_SCAN_HOLD_MIN`]
    /// and [`SHORT_SCAN_HOLD_MAX`]), room changes or not: thousands of
    /// small files ageing past the migration age one by one cost a walk
    /// of the table per kicked pass otherwise (7 % of a CPU while their
    /// write-backs went on: each walk of 12k slots took 7-50 ms here).
    pub(crate) fn migrate_logs(&self, need: LogMigrationNeed) -> u64 {
        if need == LogMigrationNeed::None {
            return 0;
        }
        // The key is read before the back-off's lock (a leaf).
        let key = self.room_key();
        if !self.log_migration.idle.lock().due(Instant::now(), key) {
            return 0;
        }
        let (freed, end) = self.migrate_logs_now(need);
        let key = self.room_key();
        let now = Instant::now();
        let mut idle = self.log_migration.idle.lock();
        idle.turn(now, freed > 0, key);
        if end.short {
            let ripe_in = end.first_ripe_ns.map_or(SHORT_SCAN_HOLD_MAX, |at| {
                Duration::from_nanos(at.saturating_sub(crate::fs::now_ns()).max(0) as u64)
            });
            idle.hold_until(now + ripe_in.clamp(SHORT_SCAN_HOLD_MIN, SHORT_SCAN_HOLD_MAX));
        }
        freed
    }

    fn migrate_logs_now(&self, need: LogMigrationNeed) -> (u64, ScanEnd) {
        let mut end = ScanEnd::default();
        let goal_blocks = match need {
            LogMigrationNeed::None => return (0, end),
            LogMigrationNeed::Cold { blocks } | LogMigrationNeed::Any { blocks } => blocks,
        };
        // The first block tier, or the first below it that takes writes
        // while its device is full (`device_full.rs`).
        let Some(first) = self.tiers.first() else {
            return (0, end);
        };
        let to = self
            .tiers
            .iter()
            .find(|t| t.stands_in_for_a_full_tier())
            .unwrap_or(first)
            .id;
        // Even when PM is short of room, a file changed within the last
        // second is left alone: a directory that a burst of creates keeps
        // changing would otherwise move and come back (its whole state
        // rewritten each time) over and over.
        let mut age_ns = self.settings.read().migration_age_ns;
        if matches!(need, LogMigrationNeed::Any { .. }) {
            age_ns = age_ns.min(ANY_MIN_AGE_NS);
        }
        let goal = goal_blocks * BLOCK_SIZE;
        let n = self.table.len() as u64;
        if n < 2 {
            return (0, end);
        }
        self.log_migration.scans.fetch_add(1, Ordering::Relaxed);
        let now = crate::fs::now_ns();
        let cursor = &self.log_migration.cursor;
        let mut freed = 0u64;
        let mut batch: Vec<Captured> = Vec::new();
        let mut batch_bytes = 0u64;
        let slots = SCAN_SLOTS.min(n);
        let mut looked = 0;
        for _ in 0..slots {
            if freed + batch_bytes >= goal {
                break;
            }
            looked += 1;
            let ino = cursor.fetch_add(1, Ordering::Relaxed) % n;
            let Some(g) = self.table.slot(ino).try_lock() else {
                continue;
            };
            let Some(i) = g.as_ref() else { continue };
            if !Fs::log_can_move(i, now, 0, true) {
                continue;
            }
            let changed = i.attr.mtime.max(i.attr.ctime);
            if !policy::log_is_old_enough(now, changed, age_ns, false) {
                let at = changed.saturating_add(age_ns.min(i64::MAX as u64) as i64);
                end.first_ripe_ns = Some(end.first_ripe_ns.map_or(at, |r| r.min(at)));
                continue;
            }
            batch_bytes += i.log.pages.iter().map(|p| p.size).sum::<u64>();
            batch.push(self.capture(i));
            drop(g);
            if batch.len() >= BATCH_BLOBS {
                match self.write_and_commit_logs(std::mem::take(&mut batch), to, BlobRoom::FromPm) {
                    Ok(done) => freed += done.pm_bytes_freed,
                    Err(e) => {
                        self.note_log_failure(&e);
                        return (freed, end);
                    }
                }
                batch_bytes = 0;
            }
        }
        end.short = looked == slots && slots == n && freed + batch_bytes < goal;
        if !batch.is_empty() {
            match self.write_and_commit_logs(batch, to, BlobRoom::FromPm) {
                Ok(done) => freed += done.pm_bytes_freed,
                Err(e) => self.note_log_failure(&e),
            }
        }
        (freed, end)
    }

    fn note_log_failure(&self, e: &std::io::Error) {
        let msg = format!("log migration failed: {e}");
        let new = {
            let mut last = self.migrator.last_log_failure.lock();
            let new = *last != msg;
            if new {
                last.clone_from(&msg);
            }
            new
        };
        // Notices are a leaf lock of their own: taken after the one above.
        if new {
            self.notice(msg);
        }
    }

    /// Moves the logs of `inos` to block tier `to` now, whatever their age
    /// (their files must still have no data on PM and nothing cached); a log
    /// already on a tier is rewritten into fresh blocks of `to` (the cleaner
    /// empties extents that way). Returns how many moved.
    /// (`to` is a tier id as the caller gives it.)
    pub fn move_logs(&self, inos: &[Ino], to: u8) -> FsResult<u64> {
        self.move_logs_to(inos, TierId(to))
    }

    /// [`Fs::move_logs`] to tier `to`.
    pub(crate) fn move_logs_to(&self, inos: &[Ino], to: TierId) -> FsResult<u64> {
        self.rewrite_logs(inos, to, BlobRoom::Rewrite)
    }

    /// [`Fs::move_logs_to`] for extent recycling: the blobs move out of the
    /// extents being emptied into fresh blocks of their tier, which may be
    /// the tier's recycling reserve (what they leave frees those extents).
    pub(crate) fn move_logs_for_recycling(&self, inos: &[Ino], tier: TierId) -> FsResult<u64> {
        self.rewrite_logs(inos, tier, BlobRoom::Recycling)
    }

    fn rewrite_logs(&self, inos: &[Ino], to: TierId, room: BlobRoom) -> FsResult<u64> {
        self.tier(to)?;
        let now = crate::fs::now_ns();
        let mut batch = Vec::new();
        for &ino in inos {
            let Ok(g) = self.lock(ino) else { continue };
            let Some(i) = g.as_ref() else { continue };
            let movable = if i.log.on_tier.is_some() {
                !i.zombie
            } else {
                Fs::log_can_move(i, now, 0, true)
            };
            if movable {
                batch.push(self.capture(i));
            }
        }
        let done = self.write_and_commit_logs(batch, to, room)?;
        Ok(done.moved)
    }

    /// Steps 2 and 3 of the module docs for captured logs, the blobs taking
    /// their blocks as `blob_room` allows.
    fn write_and_commit_logs(
        &self,
        batch: Vec<Captured>,
        to: TierId,
        blob_room: BlobRoom,
    ) -> FsResult<LogsMoved> {
        let t = self.tier(to)?;
        let eb = t.space.extent_blocks();
        // Step 2: small blobs packed into shared blocks, one contiguous run
        // per unit.
        let mut placed: Vec<(BlobUnit, PhysBlock)> = Vec::with_capacity(batch.len());
        let mut full = false;
        let room = (blob_room == BlobRoom::FromPm).then(|| self.room_lock.lock());
        let alloc = |n| match blob_room {
            // Its device is full (`device_full.rs`).
            _ if t.refuses_allocation() => None,
            BlobRoom::Recycling => t.space.alloc_recycling(n),
            _ => t.space.alloc(n),
        };
        for u in pack_blobs(batch) {
            let n = u.blocks;
            if n > eb || full {
                continue;
            }
            if room.is_some() && self.data_room_blocks() < n {
                full = true;
                continue;
            }
            let Some(runs) = alloc(n) else {
                full = true;
                continue;
            };
            if let [(start, got)] = runs[..] {
                debug_assert_eq!(got, n);
                placed.push((u, start));
            } else {
                // Split across extents: the next allocation starts a fresh
                // extent; give these back and try once more.
                for (s, k) in runs {
                    t.free(s, k);
                }
                match alloc(n).as_deref() {
                    Some(&[(start, _)]) => placed.push((u, start)),
                    Some(more) => {
                        for &(s, k) in more {
                            t.free(s, k);
                        }
                    }
                    None => full = true,
                }
            }
        }
        drop(room);
        if placed.is_empty() {
            return if full {
                Err(errno(libc::ENOSPC))
            } else {
                Ok(LogsMoved::default())
            };
        }
        placed.sort_by_key(|p| p.1);
        let release_all = |placed: &[(BlobUnit, PhysBlock)]| {
            for (u, b) in placed {
                t.free(*b, u.blocks);
            }
        };
        // Adjacent units go out in one request.
        let mut i = 0;
        while i < placed.len() {
            let start = placed[i].1;
            let mut buf: Vec<u8> = placed[i].0.image();
            let mut j = i + 1;
            while j < placed.len() && placed[j].1 == start + buf.len() as u64 / BLOCK_SIZE {
                buf.extend_from_slice(&placed[j].0.image());
                j += 1;
            }
            if let Err(e) = t.media.write_blocks(start.get(), &buf) {
                release_all(&placed);
                return Err(self.device_error(t.id, e));
            }
            self.device_took_write(t);
            i = j;
        }
        // The blobs are durable before any slot points at them.
        if let Err(e) = t.media.sync() {
            release_all(&placed);
            return Err(e);
        }
        // A packed block is held by each of its blobs from now on: one that
        // does not commit below lets its hold go like a freed blob.
        for (u, block) in &placed {
            if u.members.len() > 1 {
                self.packed_logs
                    .add(&vec![(to, *block, 1); u.members.len() - 1]);
            }
        }
        // Step 3.
        let mut done = LogsMoved::default();
        for (u, block) in placed {
            let blocks = u.blocks;
            let give_back = || self.free_runs(vec![(to, block, blocks)]);
            for (c, offset) in u.members {
                let Ok(mut g) = self.lock(c.ino) else {
                    give_back();
                    continue;
                };
                let Some(i) = g.as_mut() else {
                    give_back();
                    continue;
                };
                let unchanged = i.generation == c.generation
                    && i.log.head == c.head
                    && i.log.tail == c.tail
                    && i.log.on_tier == c.on_tier
                    && i.applied == c.applied
                    && !i.zombie
                    && i.dirty.is_empty()
                    && (c.on_tier.is_some() || Fs::log_can_move(i, 0, 0, true));
                if !unchanged {
                    drop(g);
                    give_back();
                    continue;
                }
                let base = self.table.pm_offset(c.ino);
                // Commit point of a log move: the journal slot that publishes
                // the slot's head, tail and state together.
                self.journal.commit(
                    &*self.media,
                    &[
                        (
                            base + INODE_OFF_LOG_HEAD,
                            encode_tier_log_head(to, block, offset),
                        ),
                        (
                            base + INODE_OFF_LOG_TAIL,
                            terrace_format::encode_tail(c.bytes),
                        ),
                        (base + INODE_OFF_STATE, INODE_USED_TIER_LOG),
                    ],
                );
                let pages = std::mem::take(&mut i.log.pages);
                let pm_bytes: u64 = pages.iter().map(|p| p.size).sum();
                self.log_space.free_all(&self.alloc, pages);
                let old_blob = i.log.on_tier;
                // A read after the capture may have set a newer lazy atime.
                i.lazy_atime = i.lazy_atime && i.attr.atime != c.atime;
                i.log = Log {
                    on_tier: Some(TierLog {
                        tier: to,
                        block,
                        offset,
                        blocks,
                        bytes: c.bytes,
                    }),
                    entries: c.entries,
                    ..Log::default()
                };
                drop(g);
                let lm = &self.log_migration;
                done.moved += 1;
                match old_blob {
                    Some(o) => {
                        self.free_runs(vec![(o.tier, o.block, o.blocks)]);
                        lm.relocated.fetch_add(1, Ordering::Relaxed);
                    }
                    None => {
                        done.pm_bytes_freed += pm_bytes;
                        lm.moved.fetch_add(1, Ordering::Relaxed);
                        lm.pm_bytes_freed.fetch_add(pm_bytes, Ordering::Relaxed);
                    }
                }
            }
        }
        Ok(done)
    }

    /// Writes the access times that reads set lazily (logs on block tiers)
    /// into fresh blobs: at unmount, so a clean unmount keeps them. A tier
    /// without room keeps the old blobs (those atimes are lost, as with
    /// lazytime after a crash), and says so in the daemon's log.
    pub(crate) fn persist_lazy_atimes(&self) {
        let mut by_tier: std::collections::BTreeMap<TierId, Vec<Ino>> = Default::default();
        for slot in &self.table {
            if let Some(i) = slot.lock().as_ref() {
                if let (true, Some(l)) = (i.lazy_atime, i.log.on_tier) {
                    by_tier.entry(l.tier).or_default().push(i.ino);
                }
            }
        }
        for (tier, inos) in by_tier {
            for chunk in inos.chunks(BATCH_BLOBS) {
                if let Err(e) = self.move_logs_to(chunk, tier) {
                    self.notice(format!(
                        "access times of {} files were not written at unmount: {e}",
                        chunk.len()
                    ));
                }
            }
        }
    }

    /// Log migration numbers for `terrace status`.
    pub fn log_migration_status(&self) -> LogMigrationStatus {
        let mut st = LogMigrationStatus {
            moved: self.log_migration.moved.load(Ordering::Relaxed),
            pm_bytes_freed: self.log_migration.pm_bytes_freed.load(Ordering::Relaxed),
            scans: self.log_migration.scans.load(Ordering::Relaxed),
            ..Default::default()
        };
        // Blocks packed blobs share count once (a pool from before format 11
        // has one blob per block: each counts whole).
        let mut shared_blocks = std::collections::BTreeSet::new();
        for slot in &self.table {
            if let Some(l) = slot.lock().as_ref().and_then(|i| i.log.on_tier) {
                st.logs_on_tiers += 1;
                if l.shares_its_block() {
                    shared_blocks.insert((l.tier, l.block));
                } else {
                    st.tier_log_bytes += l.blocks * BLOCK_SIZE;
                }
            }
        }
        st.tier_log_bytes += shared_blocks.len() as u64 * BLOCK_SIZE;
        st
    }

    /// Where inode `ino`'s log is: `None` on PM, else its tier and blob
    /// (tier id, first block, blocks; plain numbers for callers outside).
    pub fn log_place(&self, ino: Ino) -> FsResult<Option<(u8, u64, u64)>> {
        let g = self.lock(ino)?;
        Ok(g.as_ref()
            .and_then(|i| i.log.on_tier)
            .map(|l| (l.tier.get(), l.block.get(), l.blocks)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn captured(ino: Ino, bytes: u64) -> Captured {
        let blocks = (bytes.div_ceil(BLOCK_SIZE)).max(1);
        let mut blob = vec![0u8; (blocks * BLOCK_SIZE) as usize];
        blob[..bytes as usize].fill(ino as u8);
        Captured {
            ino,
            generation: 1,
            head: 0,
            tail: 0,
            on_tier: None,
            applied: 0,
            atime: 0,
            blob,
            bytes,
            entries: 1,
        }
    }

    #[test]
    fn small_blobs_fill_blocks_at_aligned_offsets_and_long_ones_go_alone() {
        let batch = vec![
            captured(1, 300),  // 512 aligned
            captured(2, 2048), // the longest that packs
            captured(3, 5000), // two blocks of its own
            captured(4, 1000), // 1024: 512 + 2048 + 1024 = 3584
            captured(5, 600),  // 768 would pass 4096: next block
            captured(6, 2049), // one block of its own
        ];
        let units = pack_blobs(batch);
        let shape: Vec<(Vec<(Ino, u64)>, u64)> = units
            .iter()
            .map(|u| {
                (
                    u.members.iter().map(|(c, o)| (c.ino, *o)).collect(),
                    u.blocks,
                )
            })
            .collect();
        assert_eq!(
            shape,
            vec![
                (vec![(3, 0)], 2),
                (vec![(1, 0), (2, 512), (4, 2560)], 1),
                (vec![(6, 0)], 1),
                (vec![(5, 0)], 1),
            ]
        );
        // Each blob's bytes at its offset, zeros elsewhere.
        let image = units[1].image();
        assert_eq!(image.len(), BLOCK_SIZE as usize);
        assert!(image[..300].iter().all(|&b| b == 1));
        assert!(image[300..512].iter().all(|&b| b == 0));
        assert!(image[512..2560].iter().all(|&b| b == 2));
        assert!(image[2560..3560].iter().all(|&b| b == 4));
        assert!(image[3560..].iter().all(|&b| b == 0));
        assert_eq!(units[0].image().len(), 2 * BLOCK_SIZE as usize);
    }
}

#[cfg(test)]
mod commit_check_tests {
    use crate::test_pools::{mount_again, tiered_pool};
    use crate::types::{Ctx, SetAttr};
    use terrace_format::TierId;
    use terrace_media::MemMedia;

    #[test]
    fn a_log_move_is_not_committed_when_the_inode_changed_though_its_log_is_where_it_was() {
        let (pm, ssd, fs) = tiered_pool(64);
        let mut captured = Vec::new();
        for name in [&b"changed"[..], b"kept"] {
            let f = fs
                .mknod(1, name, libc::S_IFREG | 0o644, 0, Ctx::default())
                .unwrap()
                .ino;
            fs.write(f, 0, b"cold data").unwrap();
            fs.fsync(f, false).unwrap();
            // Logs move once the data has left PM.
            fs.migrate_file(f, 1).unwrap();
            let g = fs.lock(f).unwrap();
            captured.push(fs.capture(g.as_ref().unwrap()));
        }
        let (changed, kept) = (captured[0].ino, captured[1].ino);
        fs.setattr(
            changed,
            SetAttr {
                mode: Some(0o600),
                ..Default::default()
            },
        )
        .unwrap();
        // As if compactions had brought the log back to the captured pages
        // (first-fit reuse): the positions match, the state does not.
        {
            let g = fs.lock(changed).unwrap();
            let i = g.as_ref().unwrap();
            captured[0].head = i.log.head;
            captured[0].tail = i.log.tail;
        }
        let done = fs
            .write_and_commit_logs(captured, TierId(1), super::BlobRoom::Rewrite)
            .unwrap();
        assert_eq!(
            done.moved, 1,
            "the unchanged log moves, the stale blob does not"
        );
        fs.unmount().unwrap();
        drop(fs);
        let fs = mount_again(&std::sync::Arc::new(MemMedia::from_image(pm.image())), &ssd);
        assert_eq!(fs.getattr(changed).unwrap().mode & 0o7777, 0o600);
        assert!(
            fs.log_place(kept).unwrap().is_some(),
            "the kept file's log moved"
        );
        assert!(
            fs.log_place(changed).unwrap().is_none(),
            "the changed file's log stayed"
        );
    }
}
