//! The mounted file system: inode table, locking, transactions, open and unmount.
//!
//! # Locking
//! Each inode has its own mutex. An operation on several inodes locks them in
//! ascending inode-number order ([`Fs::lock_set`]), after a first unlocked lookup
//! pass, and re-validates what it looked up once it holds the locks. Renames also
//! hold `rename_lock`, so directory parents (the only thing a loop check reads)
//! change one rename at a time. The order of every lock in the core is written
//! once, in docs/design.md section 4a.
//!
//! # Transactions
//! An operation builds log entries per inode, then [`Fs::commit`] stages them
//! beyond each tail, publishes all new tails (and any slot-state words) at once —
//! the commit point — and finally applies the same entries to the DRAM inodes, so
//! DRAM always equals a replay of the committed logs.

use crate::alloc::PageAllocator;
use crate::inode::{Inode, Released};
use crate::journal::Journal;
use crate::recovery::{scan, OpenError, Problem, Scan};
use crate::types::{errno, FsResult, Ino};
use parking_lot::{Mutex, MutexGuard};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use terrace_format::{
    inode_offset, Entry, Superblock, BLOCK_SIZE, INODE_OFF_LOG_HEAD, INODE_OFF_LOG_TAIL,
    INODE_OFF_STATE,
};
use terrace_media::PmMedia;

/// How long an inode allocation waits for deleted inodes the kernel still
/// references before it fails with ENOSPC (see [`Fs::alloc_slot`]).
const ZOMBIE_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// A locked inode slot of the DRAM table.
pub type Slot<'a> = MutexGuard<'a, Option<Box<Inode>>>;

/// Counters shown by `terrace status`.
#[derive(Default)]
pub struct Counters {
    /// write() calls.
    pub writes: AtomicU64,
    /// Bytes written by applications.
    pub bytes_written: AtomicU64,
    /// read() calls.
    pub reads: AtomicU64,
    /// Bytes read by applications.
    pub bytes_read: AtomicU64,
    /// fsync/fdatasync calls.
    pub fsyncs: AtomicU64,
    /// Log commits.
    pub commits: AtomicU64,
    /// Commits that went through the journal.
    pub journaled_commits: AtomicU64,
    /// Logs compacted.
    pub compactions: AtomicU64,
    /// Writes the placement policy sent to PM.
    pub placed_pm: AtomicU64,
    /// Writes the placement policy sent to a block tier.
    pub placed_block: AtomicU64,
    /// Writes that went to another tier than the policy chose (it was full).
    pub placement_overflows: AtomicU64,
    /// Where writes went, per class of write.
    pub placement: crate::placement_stats::PlacementStats,
    /// Blocks read from block tiers whose checksum matched.
    pub checksummed_reads: AtomicU64,
    /// Blocks read from block tiers whose checksum did not match (EIO).
    pub checksum_errors: AtomicU64,
    /// Writes or syncs of data to a block tier that failed with ENOSPC from
    /// the device itself (the file system holding a sparse image is full),
    /// not from Terrace's own allocator.
    pub device_full_errors: AtomicU64,
    /// Reads, writes or syncs of a block tier's device that failed with
    /// another error (EIO …).
    pub device_errors: AtomicU64,
}

/// What mount found about the previous session.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct MountReport {
    /// The pool was cleanly unmounted last time.
    pub was_clean: bool,
    /// Journal transactions rolled back.
    pub rolled_back: usize,
    /// Orphan inodes freed.
    pub orphans_freed: usize,
    /// Link-count mismatches found (not fatal; `fsck --repair` fixes them).
    pub link_count_warnings: usize,
}

/// A mounted Terrace pool.
pub struct Fs {
    pub(crate) media: Arc<dyn PmMedia>,
    pub(crate) sb: Mutex<Superblock>,
    pub(crate) table: Vec<Mutex<Option<Box<Inode>>>>,
    pub(crate) free_slots: Mutex<Vec<Ino>>,
    pub(crate) alloc: PageAllocator,
    /// Small log pages (slabs inside pool blocks): see `log_space`.
    pub(crate) log_space: crate::log_space::LogSpace,
    pub(crate) journal: Journal,
    pub(crate) rename_lock: Mutex<()>,
    pub(crate) next_fh: AtomicU64,
    /// Statistics.
    pub counters: Counters,
    pub(crate) report: MountReport,
    pub(crate) unmounted: std::sync::atomic::AtomicBool,
    /// Mounted read-only ([`Fs::mount_read_only`]): nothing is written to
    /// any tier, not even the superblock.
    pub(crate) read_only: bool,
    pub(crate) atime: parking_lot::RwLock<AtimeMode>,
    /// The running or last scrub (`scrub.rs`).
    pub(crate) scrub_state: parking_lot::Mutex<Option<crate::scrub::ScrubReport>>,
    /// Mounted block tiers, in tier-id order.
    pub(crate) tiers: Vec<crate::tier::BlockTier>,
    /// Tunable options (one registry for CLI, config file and `terrace set`).
    pub(crate) settings: parking_lot::RwLock<terrace_policy::Settings>,
    /// The placement policy named by `settings.placement_policy`.
    pub(crate) placement:
        parking_lot::RwLock<Box<dyn terrace_policy::PlacementPolicy + Send + Sync>>,
    /// The DRAM page cache in front of the block tiers.
    pub(crate) cache: crate::cache::PageCache,
    /// Blocks allocated by write-backs whose pages are still counted dirty
    /// (between their allocation and their commit): see [`Fs::data_room_blocks`].
    pub(crate) wb_inflight_blocks: std::sync::atomic::AtomicU64,
    /// Serialises "is there room" checks with the claims that follow them
    /// (cached writes), so two writers cannot both take the last blocks.
    pub(crate) room_lock: parking_lot::Mutex<()>,
    /// Readers of block-tier data without their inode lock, and the frees
    /// waiting for them (`read_pins`).
    pub(crate) read_pins: crate::read_pins::ReadPins,
    /// File data stored to and loaded from PM (for `terrace status`).
    pub(crate) pm_io: terrace_media::BlockStatsCounter,
    /// Counters of the PM room rules (`space.rs`).
    pub(crate) space_stats: crate::space::SpaceStats,
    /// Cold lists, migration state and thread.
    pub(crate) migrator: crate::migrate::Migrator,
    /// Extent recycling counters.
    pub(crate) cleaner_stats: crate::clean::CleanerStats,
    /// Inodes with a placement rule (see `rules`).
    pub(crate) ruled: Mutex<std::collections::BTreeSet<Ino>>,
    /// Log migration state (`log_migrate`).
    pub(crate) log_migration: crate::log_migrate::LogMigration,
}

/// When reads update the access time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AtimeMode {
    /// Never (`noatime`, read-only mounts): reads write nothing.
    Never,
    /// As Linux `relatime`: once after each change, or once a day.
    #[default]
    Relative,
    /// As Linux `strictatime`: on every read.
    Strict,
}

/// Current time in ns since the epoch.
pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

impl Fs {
    /// Opens (mounts) a pool: runs recovery and marks the pool in use.
    pub fn mount(media: Arc<dyn PmMedia>) -> Result<Fs, OpenError> {
        Fs::mount_with_tiers(media, Vec::new())
    }

    /// Opens (mounts) a pool with its block tiers: `(tier id, device)` for each
    /// block tier of the superblock. A tier that holds data must be given.
    pub fn mount_with_tiers(
        media: Arc<dyn PmMedia>,
        devices: Vec<(u8, Arc<dyn terrace_media::BlockMedia>)>,
    ) -> Result<Fs, OpenError> {
        Fs::open_pool(media, devices, false)
    }

    /// Opens a pool read-only: nothing is written to any tier — no recovery,
    /// no superblock update at mount or unmount — and [`Fs::is_read_only`]
    /// tells the callers that would write (migration, settings, write-back)
    /// to stay away. A pool that needs recovery (not cleanly unmounted, or
    /// with open journal transactions) is refused: recovery writes.
    pub fn mount_read_only(
        media: Arc<dyn PmMedia>,
        devices: Vec<(u8, Arc<dyn terrace_media::BlockMedia>)>,
    ) -> Result<Fs, OpenError> {
        Fs::open_pool(media, devices, true)
    }

    fn open_pool(
        media: Arc<dyn PmMedia>,
        devices: Vec<(u8, Arc<dyn terrace_media::BlockMedia>)>,
        read_only: bool,
    ) -> Result<Fs, OpenError> {
        // Refuse before writing anything when a tier that holds data is missing.
        let sc = scan(&*media, &devices, false, &mut |_, _| {})?;
        for (tier, runs) in &sc.block_used {
            if !runs.is_empty() && !devices.iter().any(|(id, _)| id == tier) {
                return Err(OpenError::MissingTier(*tier));
            }
        }
        let mut sc = sc;
        if read_only {
            if !sc.sb.clean || sc.rolled_back > 0 {
                return Err(OpenError::Corrupt(
                    "the pool was not cleanly unmounted and needs recovery, which writes: \
                     mount it read-write once (recovery runs at mount) before mounting it read-only"
                        .into(),
                ));
            }
        } else {
            crate::recovery::finish_recovery(&*media, &mut sc);
        }
        let mut tiers = Vec::new();
        for (id, dev) in devices {
            let Some(rec) = sc
                .sb
                .tiers
                .iter()
                .find(|t| t.id == id && t.kind != terrace_format::TierKind::Pm)
            else {
                return Err(OpenError::Corrupt(format!(
                    "the pool has no block tier {id}"
                )));
            };
            let blocks = rec.size.min(dev.len()) / BLOCK_SIZE;
            let used = sc.block_used.get(&id).cloned().unwrap_or_default();
            let space = crate::tier::ExtentSpace::new(
                blocks,
                (rec.extent_size as u64 / BLOCK_SIZE).max(1),
                used,
            )
            .map_err(|e| OpenError::Corrupt(format!("tier {id}: {e}")))?;
            let sums = sc
                .sums
                .remove(&id)
                .unwrap_or_else(|| crate::sums::BlockSums::new(blocks));
            tiers.push(crate::tier::BlockTier {
                id,
                kind: rec.kind,
                // A failed sync must reach every thread whose unsynced
                // writes it may have lost (Linux tells one fsync only).
                media: Arc::new(terrace_media::PerWriterSync::new(dev)),
                space,
                sums,
            });
        }
        tiers.sort_by_key(|t| t.id);
        let mut fs = Fs::from_scan(media, sc, read_only)?;
        fs.tiers = tiers;
        Ok(fs)
    }

    fn from_scan(media: Arc<dyn PmMedia>, sc: Scan, read_only: bool) -> Result<Fs, OpenError> {
        let Scan {
            mut sb,
            inodes,
            problems,
            orphans,
            rolled_back,
            alloc,
            log_space,
            ..
        } = sc;
        let fatal: Vec<&Problem> = problems.iter().filter(|p| p.blocks_mount()).collect();
        if let Some(first) = fatal.first() {
            let more = if fatal.len() > 1 {
                format!(" (and {} more problems)", fatal.len() - 1)
            } else {
                String::new()
            };
            return Err(OpenError::Corrupt(format!("{first}{more}")));
        }
        let alloc =
            alloc.ok_or_else(|| OpenError::Corrupt("block ownership is inconsistent".into()))?;
        let report = MountReport {
            was_clean: sb.clean,
            rolled_back,
            orphans_freed: orphans.len(),
            link_count_warnings: problems.len(),
        };
        let n = sb.inode_count as usize;
        let mut table: Vec<Mutex<Option<Box<Inode>>>> = Vec::with_capacity(n);
        table.resize_with(n, || Mutex::new(None));
        for (ino, inode) in inodes {
            *table[ino as usize].get_mut() = Some(Box::new(inode));
        }
        let mut free: Vec<Ino> = (2..n as u64)
            .rev()
            .filter(|&i| table[i as usize].get_mut().is_none())
            .collect();
        free.shrink_to_fit();
        if !read_only {
            sb.clean = false;
            sb.generation += 1;
            sb.mount_count += 1;
            // A read-write mount may write entries of the current version (e.g.
            // copy entries): older builds must refuse the pool from now on.
            sb.version = terrace_format::FORMAT_VERSION;
            sb.last_mount_unix = (now_ns() / 1_000_000_000) as u64;
            crate::mkfs::write_superblock(&*media, &sb);
        }
        let fs = Fs {
            media,
            sb: Mutex::new(sb),
            table,
            free_slots: Mutex::new(free),
            alloc,
            log_space,
            journal: Journal::default(),
            rename_lock: Mutex::new(()),
            next_fh: AtomicU64::new(1),
            counters: Counters::default(),
            report,
            unmounted: std::sync::atomic::AtomicBool::new(false),
            read_only,
            // Reads of a read-only mount set no access time: it would be written.
            atime: parking_lot::RwLock::new(if read_only {
                AtimeMode::Never
            } else {
                AtimeMode::default()
            }),
            scrub_state: parking_lot::Mutex::new(None),
            tiers: Vec::new(),
            settings: parking_lot::RwLock::new(terrace_policy::Settings::default()),
            placement: parking_lot::RwLock::new(
                terrace_policy::Settings::default()
                    .placement()
                    .expect("the default policy exists"),
            ),
            cache: crate::cache::PageCache::new(
                terrace_policy::Settings::default().dram_cache_bytes,
            ),
            wb_inflight_blocks: std::sync::atomic::AtomicU64::new(0),
            room_lock: parking_lot::Mutex::new(()),
            read_pins: Default::default(),
            pm_io: terrace_media::BlockStatsCounter::new(),
            space_stats: Default::default(),
            migrator: crate::migrate::Migrator::new(
                2 * std::thread::available_parallelism().map_or(1, |n| n.get()),
            ),
            cleaner_stats: Default::default(),
            ruled: Mutex::new(Default::default()),
            log_migration: Default::default(),
        };
        for slot in &fs.table {
            if let Some(i) = slot.lock().as_mut() {
                fs.relist(i);
                if i.xattrs.contains_key(crate::rules::RULE_XATTR) {
                    fs.ruled.lock().insert(i.ino);
                }
            }
        }
        Ok(fs)
    }

    /// Changes one setting (`terrace set`): applied to a copy of the
    /// current settings, the copy validated as a whole, then swapped in; a
    /// bad key or value changes nothing.
    pub fn set_setting(&self, key: &str, value: &str) -> Result<(), String> {
        // `policy` is short for the migration policy (`terrace set MNT policy nvmfs`).
        let key = if key == "policy" {
            "migration_policy"
        } else {
            key
        };
        let mut next = self.settings.read().clone();
        let before = next.get(key);
        next.set(key, value)?;
        let after = next.get(key);
        self.apply_settings(next)?;
        if before != after {
            self.notice(format!(
                "setting {key} changed from {} to {}",
                before.unwrap_or_default(),
                after.unwrap_or_default()
            ));
        }
        Ok(())
    }

    /// Replaces every setting at once (a mount's `-o` options and config
    /// file, validated as a whole before the pool was opened): nothing
    /// changes unless `next` passes [`terrace_policy::Settings::validate`].
    pub fn apply_settings(&self, next: terrace_policy::Settings) -> Result<(), String> {
        next.validate()?;
        let policy = next.placement()?;
        *self.placement.write() = policy;
        let bound = next.dram_cache_bytes;
        *self.settings.write() = next;
        if bound != self.cache.bound() {
            self.cache.set_bound(bound);
        }
        Ok(())
    }

    /// True for a read-only mount ([`Fs::mount_read_only`]).
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The current settings.
    pub fn settings(&self) -> terrace_policy::Settings {
        self.settings.read().clone()
    }

    /// Sets when reads update the access time.
    pub fn set_atime_mode(&self, mode: AtimeMode) {
        if self.read_only {
            return; // always `Never`
        }
        *self.atime.write() = mode;
    }

    /// What mount found.
    pub fn mount_report(&self) -> &MountReport {
        &self.report
    }

    /// The superblock as of mount.
    pub fn superblock(&self) -> Superblock {
        self.sb.lock().clone()
    }

    /// Persists everything and marks the pool cleanly unmounted. Idempotent.
    ///
    /// Cached data is written back first, while migration still runs (it
    /// may have to free PM for the commits: [`Fs::persist_cached`]). When
    /// that fails, nothing is marked and the error is returned: the pool is
    /// still mounted as far as the core is concerned, its cached data kept,
    /// and a later call tries again. Only a pool with nothing cached left is
    /// marked clean.
    pub fn unmount(&self) -> std::io::Result<()> {
        if self.unmounted.load(Ordering::SeqCst) {
            return Ok(());
        }
        if self.read_only {
            // Nothing was written and nothing is: the pool stays as clean
            // as it was.
            self.stop_migration();
            self.stop_writeback();
            self.unmounted.store(true, Ordering::SeqCst);
            return Ok(());
        }
        self.persist_cached()?;
        self.stop_migration();
        self.stop_writeback();
        self.persist_lazy_atimes();
        // Anything cached since (a last request in flight) goes too.
        self.flush_all()?;
        self.unmounted.store(true, Ordering::SeqCst);
        self.media.fence();
        self.media.sync_all()?;
        let mut sb = self.sb.lock();
        sb.clean = true;
        sb.generation += 1;
        crate::mkfs::write_superblock(&*self.media, &sb);
        self.media.sync_all()
    }

    /// Stops the migration and write-back threads and persists nothing: the
    /// state a crash leaves (for tests that drop the `Fs` and mount again).
    pub fn stop_background_for_crash_test(&self) {
        self.stop_migration();
        self.stop_writeback();
    }

    /// Writes back every dirty cached page (what an unmount must persist).
    /// A write-back that finds no room retries while migration frees PM —
    /// up to a minute without progress — so a pool that filled PM in a burst
    /// still persists everything it acknowledged.
    pub fn persist_cached(&self) -> std::io::Result<()> {
        let mut last_left = u64::MAX;
        let mut progress_at = std::time::Instant::now();
        let device_full = self.counters.device_full_errors.load(Ordering::Relaxed);
        loop {
            match self.flush_all() {
                Ok(()) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                    let left = self.cache.dirty_blocks();
                    // A full device is not helped by migration (it moves
                    // data *to* the block tiers): give up soon.
                    let limit =
                        if self.counters.device_full_errors.load(Ordering::Relaxed) > device_full {
                            std::time::Duration::from_secs(2)
                        } else {
                            std::time::Duration::from_secs(60)
                        };
                    if left < last_left {
                        last_left = left;
                        progress_at = std::time::Instant::now();
                    } else if progress_at.elapsed() > limit {
                        return Err(e);
                    }
                    if self.migration_thread_running() {
                        self.kick_migration();
                    } else if self.migration_pass() == 0 {
                        return Err(e);
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Locks one inode; ENOENT when the slot holds no live inode.
    pub(crate) fn lock(&self, ino: Ino) -> FsResult<Slot<'_>> {
        let slot = self
            .table
            .get(ino as usize)
            .ok_or_else(|| errno(libc::ENOENT))?
            .lock();
        match slot.as_ref() {
            Some(i) if !i.zombie || i.open_count > 0 || i.lookups > 0 => Ok(slot),
            _ => Err(errno(libc::ENOENT)),
        }
    }

    /// Locks several inodes in ascending order (duplicates ignored).
    pub(crate) fn lock_set(&self, inos: &[Ino]) -> FsResult<Locked<'_>> {
        let mut v: Vec<Ino> = inos.to_vec();
        v.sort_unstable();
        v.dedup();
        let mut guards = Vec::with_capacity(v.len());
        for ino in v {
            guards.push((ino, self.lock(ino)?));
        }
        Ok(Locked { guards })
    }

    /// Takes a free inode slot number. When none is free but deleted inodes
    /// still wait for the kernel to drop its references (its `forget` comes
    /// asynchronously, possibly on another FUSE thread after the application
    /// already saw the unlink finish), waits up to [`ZOMBIE_WAIT`] for one of
    /// them before failing with ENOSPC.
    pub(crate) fn alloc_slot(&self) -> FsResult<Ino> {
        let deadline = std::time::Instant::now() + ZOMBIE_WAIT;
        loop {
            if let Some(ino) = self.free_slots.lock().pop() {
                return Ok(ino);
            }
            if std::time::Instant::now() >= deadline || !self.has_zombies() {
                return Err(errno(libc::ENOSPC));
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Whether some deleted inode still waits for its last kernel reference.
    fn has_zombies(&self) -> bool {
        self.table.iter().any(|slot| {
            slot.try_lock()
                .is_some_and(|g| g.as_ref().is_some_and(|i| i.zombie))
        })
    }

    /// Returns a slot number to the free list (the DRAM slot must be empty).
    pub(crate) fn release_slot(&self, ino: Ino) {
        self.free_slots.lock().push(ino);
    }

    /// Returns physical runs to their tier's allocator. Block-tier runs wait
    /// while a reader holds a read pin (`read_pins`): it may be reading them.
    pub(crate) fn free_runs(&self, runs: Vec<Released>) {
        let mut block = Vec::new();
        for (tier, b, n) in runs {
            if n == 0 {
                continue;
            }
            if tier == 0 {
                self.alloc.free_run(b, n);
            } else {
                block.push((tier, b, n));
            }
        }
        let now = self.read_pins.defer_or_free(block);
        self.free_block_runs(now);
    }

    /// Returns block-tier runs to their allocators now (their DRAM cache
    /// pages dropped first).
    pub(crate) fn free_block_runs(&self, runs: Vec<Released>) {
        for (tier, block, n) in runs {
            if let Some(t) = self.tiers.iter().find(|t| t.id == tier) {
                self.cache.invalidate(tier, block, n);
                t.space.release(block, n);
            }
        }
    }

    /// Frees an inode's log pages and data (after its slot was freed on media).
    pub(crate) fn release_inode_space(&self, inode: &mut Inode) {
        self.discard_dirty(inode);
        self.unlist(inode);
        let pages = std::mem::take(&mut inode.log.pages);
        self.log_space.free_all(&self.alloc, pages);
        let mut all = inode.extents.unmap(0, u64::MAX);
        if let Some(t) = inode.log.on_tier.take() {
            all.push((t.tier, t.block, t.blocks));
        }
        self.free_runs(all);
        inode.log = Default::default();
    }

    /// Stages `entries` for a commit to `inode` and returns them with the
    /// slot words whose publication commits them. A log on PM gets them
    /// beyond its tail (the tail word; the head word too when the log was
    /// empty and `journal_head` is set). A log on a block tier is *recalled*
    /// in the same commit: a fresh PM chain holds the inode's whole state
    /// (the entries compaction writes) followed by `entries`, and the words
    /// publish its head, its tail and the slot state "log on PM" together
    /// (design.md §5d, log migration). The blob is freed after the commit.
    pub(crate) fn stage_commit(
        &self,
        inode: &Inode,
        entries: &[Entry],
        background: bool,
        journal_head: bool,
    ) -> FsResult<StagedCommit> {
        let base = inode_offset(inode.ino);
        let room = self.log_room(background);
        // Data on block tiers commits with its checksums (sums.rs).
        let sums = self.sums_entries_for(entries);
        let with_sums;
        let entries = if sums.is_empty() {
            entries
        } else {
            with_sums = [entries, &sums[..]].concat();
            &with_sums[..]
        };
        if let Some(t) = inode.log.on_tier {
            let (st, words) =
                stage_recall(&*self.media, &room, inode, entries, &self.sums_tables())?;
            return Ok(StagedCommit {
                st,
                words,
                recalled: Some(t),
            });
        }
        let st = inode
            .log
            .stage(&*self.media, &room, inode.ino, base, entries)?;
        let mut words = Vec::with_capacity(2);
        if inode.log.head == 0 && journal_head {
            // The head was stored ahead; journal it too so a rollback is exact.
            words.push((base + INODE_OFF_LOG_HEAD, inode.log.head_after(&st)));
        }
        words.push((
            base + INODE_OFF_LOG_TAIL,
            terrace_format::encode_tail(st.new_tail),
        ));
        Ok(StagedCommit {
            st,
            words,
            recalled: None,
        })
    }

    /// Applies a committed [`StagedCommit`] to the inode's DRAM log; returns
    /// the blob a recall released (to free with the other released runs).
    fn apply_staged(inode: &mut Inode, sc: StagedCommit) -> Option<Released> {
        if sc.recalled.is_some() {
            // The recalled state holds the DRAM attributes, lazy atime too.
            inode.log = crate::log::Log::default();
            inode.lazy_atime = false;
        }
        inode.log.apply(sc.st);
        sc.recalled.map(|t| (t.tier, t.block, t.blocks))
    }

    /// Brings a log that migration moved to a block tier back to PM (one
    /// commit with no new entry); nothing when the log is on PM.
    pub(crate) fn recall_log(&self, inode: &mut Inode, background: bool) -> FsResult<()> {
        if inode.log.on_tier.is_none() {
            return Ok(());
        }
        self.commit_one_in(inode, Vec::new(), background)
    }

    /// Commits entries to several logs atomically, plus extra `(address, value)`
    /// words, then applies the entries to DRAM. The inodes must be locked in `l`.
    pub(crate) fn commit(
        &self,
        l: &mut Locked<'_>,
        parts: Vec<(Ino, Vec<Entry>)>,
        extra: Vec<(u64, u64)>,
    ) -> FsResult<()> {
        let mut staged: Vec<StagedCommit> = Vec::with_capacity(parts.len());
        let journal_head = parts.len() + extra.len() > 1;
        for (ino, entries) in &parts {
            let inode = l.get(*ino);
            match self.stage_commit(inode, entries, false, journal_head) {
                Ok(s) => staged.push(s),
                Err(e) => {
                    for s in staged {
                        self.log_space.free_all(&self.alloc, s.st.new_pages);
                    }
                    return Err(e);
                }
            }
        }
        let mut words: Vec<(u64, u64)> = staged.iter().flat_map(|s| s.words.clone()).collect();
        words.extend(extra);
        self.journal.commit(&*self.media, &words);
        self.counters.commits.fetch_add(1, Ordering::Relaxed);
        if words.len() > 1 {
            self.counters
                .journaled_commits
                .fetch_add(1, Ordering::Relaxed);
        }
        let mut released = Vec::new();
        for ((ino, entries), s) in parts.into_iter().zip(staged) {
            let inode = l.get(ino);
            released.extend(Fs::apply_staged(inode, s));
            for e in &entries {
                released.extend(inode.apply(e));
            }
            self.relist(inode);
        }
        self.free_runs(released);
        Ok(())
    }

    /// Commits entries to one locked inode's log.
    pub(crate) fn commit_one(&self, inode: &mut Inode, entries: Vec<Entry>) -> FsResult<()> {
        self.commit_one_in(inode, entries, false)
    }

    /// Commits entries to one locked inode's log; `background` commits
    /// (write-back of cached data, migration) may take the PM blocks promised
    /// to write-back (`space.rs`), foreground ones may not.
    pub(crate) fn commit_one_in(
        &self,
        inode: &mut Inode,
        entries: Vec<Entry>,
        background: bool,
    ) -> FsResult<()> {
        let sc = self.stage_commit(inode, &entries, background, false)?;
        // Commit point of every single-inode operation: the log tail store
        // (with a recall, the journal slot that publishes head, tail and state).
        self.journal.commit(&*self.media, &sc.words);
        self.counters.commits.fetch_add(1, Ordering::Relaxed);
        let mut released: Vec<Released> = Fs::apply_staged(inode, sc).into_iter().collect();
        for e in &entries {
            released.extend(inode.apply(e));
        }
        self.relist(inode);
        self.free_runs(released);
        self.maybe_compact(inode);
        Ok(())
    }

    /// Compacts a log whose dead entries outnumber the live ones by far: writes a
    /// fresh chain with the inode's current state and swaps head and tail through
    /// the journal. Failure (no space) leaves the old log in place.
    ///
    /// "By far": the log takes at least three times the bytes its live
    /// entries need (counted at 64 bytes each) and more than one smallest
    /// page, so a small file's log that a few attribute changes and a move
    /// grew to 768 bytes goes back to one 256-byte page (a tar extract's
    /// files: 447 bytes of log per file on average without this, 2026-11-24),
    /// and a log is rewritten only after its dead part has grown well past
    /// its live part since the last time.
    pub(crate) fn maybe_compact(&self, inode: &mut Inode) {
        let bytes: u64 = inode.log.pages.iter().map(|p| p.size).sum();
        if bytes <= terrace_format::LOG_PAGE_MIN {
            return;
        }
        let need =
            inode.live_entries() * 64 + inode.xattr_value_bytes() + terrace_format::LOG_PAGE_HEADER;
        if bytes < 3 * need {
            return;
        }
        // Checksums of block-tier data are live too (counted only now: it
        // takes a walk over the extents).
        if bytes < 3 * (need + inode.sums_log_bytes()) {
            return;
        }
        let entries = crate::sums::with_sums(inode.snapshot_entries(), &self.sums_tables());
        let fresh = crate::log::Log::default();
        // Stage into a new chain without touching the slot's head word.
        let st = match fresh.stage(
            &*self.media,
            &self.log_room(false),
            inode.ino,
            scratch_slot(),
            &entries,
        ) {
            Ok(s) => s,
            Err(_) => return,
        };
        let head = st.new_pages[0].off;
        let base = inode_offset(inode.ino);
        self.journal.commit(
            &*self.media,
            &[
                (base + INODE_OFF_LOG_HEAD, head),
                (
                    base + INODE_OFF_LOG_TAIL,
                    terrace_format::encode_tail(st.new_tail),
                ),
            ],
        );
        let old = std::mem::take(&mut inode.log.pages);
        self.log_space.free_all(&self.alloc, old);
        inode.log = crate::log::Log {
            on_tier: None,
            head,
            tail: st.new_tail,
            pages: st.new_pages,
            entries: st.added,
        };
        self.counters.compactions.fetch_add(1, Ordering::Relaxed);
    }

    /// The media (for tests and the status command).
    pub fn media(&self) -> &Arc<dyn PmMedia> {
        &self.media
    }

    /// Slot-state word address of an inode.
    pub(crate) fn state_word(ino: Ino) -> u64 {
        inode_offset(ino) + INODE_OFF_STATE
    }

    /// Checks that the allocator's free space and the blocks live inodes use
    /// partition the pool exactly (no leak, no double ownership). For tests.
    pub fn check_allocator(&self) -> Result<(), String> {
        let mut runs: Vec<(u64, u64, &'static str)> = self
            .alloc
            .free_runs()
            .into_iter()
            .map(|(s, n)| (s, n, "free"))
            .collect();
        let mut small = Vec::new();
        for slot in &self.table {
            let g = slot.lock();
            if let Some(i) = g.as_ref() {
                for p in &i.log.pages {
                    if p.size >= BLOCK_SIZE {
                        runs.push((p.off / BLOCK_SIZE, 1, "log"));
                    } else {
                        small.push(*p);
                    }
                }
                for (_, e) in i.extents.iter() {
                    for (tier, block, blocks) in e.runs() {
                        if tier == 0 {
                            runs.push((block, blocks, "data"));
                        }
                    }
                }
            }
        }
        let slabs = crate::log_space::bitmaps_of(small);
        if slabs != self.log_space.bitmaps() {
            return Err("the small-log-page slabs differ from the live logs' pages".into());
        }
        runs.extend(slabs.keys().map(|&b| (b, 1, "log slab")));
        runs.sort_unstable();
        let sb = self.sb.lock();
        let mut expect = sb.pool_start;
        for (s, n, what) in runs {
            if s != expect {
                return Err(format!(
                    "block {expect}: expected next run, found {what} run at {s}+{n}"
                ));
            }
            expect = s + n;
        }
        if expect != sb.pool_start + sb.pool_blocks {
            return Err(format!(
                "pool ends at {}, runs end at {expect}",
                sb.pool_start + sb.pool_blocks
            ));
        }
        drop(sb);
        // Block tiers: the valid counts must equal what live extents reference.
        for t in &self.tiers {
            let mut referenced = 0;
            for slot in &self.table {
                if let Some(i) = slot.lock().as_ref() {
                    referenced += i
                        .extents
                        .iter()
                        .flat_map(|(_, e)| e.runs())
                        .filter(|r| r.0 == t.id)
                        .map(|r| r.2)
                        .sum::<u64>();
                    referenced += i
                        .log
                        .on_tier
                        .filter(|l| l.tier == t.id)
                        .map_or(0, |l| l.blocks);
                }
            }
            let valid = t.space.stats().valid_blocks;
            if valid != referenced {
                return Err(format!(
                    "tier {}: {valid} valid blocks counted, {referenced} referenced",
                    t.id
                ));
            }
        }
        Ok(())
    }
}

/// Stages, for an inode whose log is on a block tier, a fresh PM chain with
/// the inode's whole state (the entries compaction writes) followed by
/// `entries`, and returns it with the slot words that publish it — head,
/// tail and state 1 — to be stored in one journal transaction (log recall,
/// design.md §5g). The slot's head word names the blob until then, so the
/// chain is staged without storing a head there.
pub(crate) fn stage_recall(
    media: &dyn PmMedia,
    room: &crate::log_space::LogRoom<'_>,
    inode: &Inode,
    entries: &[Entry],
    sums: &crate::sums::SumsTables<'_>,
) -> FsResult<(crate::log::Staged, Vec<(u64, u64)>)> {
    let mut all = crate::sums::with_sums(inode.snapshot_entries(), sums);
    all.extend_from_slice(entries);
    let st = crate::log::Log::default().stage(media, room, inode.ino, scratch_slot(), &all)?;
    let base = inode_offset(inode.ino);
    let words = vec![
        (base + INODE_OFF_LOG_HEAD, st.new_pages[0].off),
        (
            base + INODE_OFF_LOG_TAIL,
            terrace_format::encode_tail(st.new_tail),
        ),
        (base + INODE_OFF_STATE, terrace_format::INODE_USED),
    ];
    Ok((st, words))
}

/// A scratch address for staging a chain whose head must not be stored in a slot:
/// slot 0 is never used, so its head word may be scribbled on.
pub(crate) fn scratch_slot() -> u64 {
    inode_offset(0)
}

/// Entries staged for one inode's commit (see [`Fs::stage_commit`]).
pub(crate) struct StagedCommit {
    /// The staged entries and pages.
    pub(crate) st: crate::log::Staged,
    /// Slot words to publish, `(address, value)`.
    pub(crate) words: Vec<(u64, u64)>,
    /// The log was on a block tier: this blob is freed after the commit.
    pub(crate) recalled: Option<crate::log::TierLog>,
}

/// Several locked inodes.
pub(crate) struct Locked<'a> {
    guards: Vec<(Ino, Slot<'a>)>,
}

impl Locked<'_> {
    /// The locked inode `ino` (must be in the set).
    pub(crate) fn get(&mut self, ino: Ino) -> &mut Inode {
        let g = self
            .guards
            .iter_mut()
            .find(|(i, _)| *i == ino)
            .expect("inode locked");
        g.1.as_mut().expect("live inode")
    }

    /// The DRAM slot of `ino` (to drop a freed inode).
    pub(crate) fn slot(&mut self, ino: Ino) -> &mut Option<Box<Inode>> {
        let g = self
            .guards
            .iter_mut()
            .find(|(i, _)| *i == ino)
            .expect("inode locked");
        &mut g.1
    }
}

/// Log entries per inode, in the order the inodes were first named.
pub(crate) type Parts = Vec<(Ino, Vec<Entry>)>;

/// Map of inode → entries, in insertion order (helper for building transactions).
#[derive(Default)]
pub(crate) struct TxBuilder {
    order: Vec<Ino>,
    map: HashMap<Ino, Vec<Entry>>,
    /// Extra words to publish with the tails.
    pub extra: Vec<(u64, u64)>,
}

impl TxBuilder {
    /// Appends an entry to `ino`'s part.
    pub fn push(&mut self, ino: Ino, e: Entry) {
        if !self.map.contains_key(&ino) {
            self.order.push(ino);
        }
        self.map.entry(ino).or_default().push(e);
    }
    /// The parts in order.
    pub fn parts(mut self) -> (Parts, Vec<(u64, u64)>) {
        let parts = self
            .order
            .iter()
            .map(|i| (*i, self.map.remove(i).unwrap_or_default()))
            .collect();
        (parts, self.extra)
    }
}
