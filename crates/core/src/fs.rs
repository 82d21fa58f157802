//! The mounted file system: the [`Fs`] object and how it is opened (mount,
//! with recovery and block tiers), its settings, plus the release of an
//! inode's space and the allocator's self-check.
//!
//! This is the middle layer (docs/design.md §1, "Layers"): it imports
//! components only — allocators, tiers, inodes, the page cache, the
//! services' state (`service_state.rs`, `migrate/state.rs`) — and never a
//! service. The rest of `impl Fs` lives above it, one job per file: the
//! inode table and its locks in `table.rs`, transactions (stage, commit,
//! compaction) in `commit.rs`, operations in `ops_*.rs`, services in
//! `migrate/`, `writeback.rs`, `clean.rs`, `scrub.rs`, and unmount in
//! `unmount.rs`.
//!
//! # Locking
//! Each inode has its own mutex (`table.rs`). The order of every lock in the
//! core is written once, in docs/design.md section 4a, and checked in debug
//! builds.

use crate::alloc::PageAllocator;
use crate::extent_map::Released;
use crate::inode::Inode;
use crate::journal::Journal;
use crate::lock_order::{Mutex, Rank, RwLock};
use crate::recovery::{scan, OpenError, Problem, Scan};
use crate::types::Ino;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use terrace_format::{FileBlock, PhysBlock, Superblock, TierId, BLOCK_SIZE, INODE_OFF_STATE};
use terrace_media::PmMedia;

pub use crate::counters::Counters;

/// What mount found about the previous session.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct MountReport {
    /// The pool was cleanly unmounted last time.
    pub was_clean: bool,
    /// Journal transactions rolled back.
    pub rolled_back: usize,
    /// Orphan inodes freed.
    pub orphans_freed: usize,
    /// The data they mapped, in bytes.
    #[serde(default)]
    pub orphan_bytes: u64,
    /// Inode logs replayed to rebuild the DRAM state, and their entries
    /// (every mount replays them all, clean or not).
    #[serde(default)]
    pub replayed: crate::recovery::Replayed,
    /// Link-count mismatches found (not fatal; `fsck --repair` fixes them).
    pub link_count_warnings: usize,
    /// Stored parts of object tiers that held no block the pool references
    /// (uploads whose commit never happened, trims lost in a crash), deleted
    /// at mount ([`BlockMedia::retain_only`](terrace_media::BlockMedia::retain_only)).
    #[serde(default)]
    pub object_orphans: u64,
    /// Their bytes.
    #[serde(default)]
    pub object_orphan_bytes: u64,
    /// Why an object tier's sweep failed at mount, if one did (its orphans
    /// stay until the next mount; nothing else is affected).
    #[serde(default)]
    pub object_sweep_errors: Vec<String>,
    /// The damage a read-only mount serves around (each problem with the
    /// path it concerns): inodes whose logs could not be read whole, whose
    /// data it refuses with EIO, and names that lead nowhere (EIO). Empty
    /// for a read-write mount, which refuses a damaged pool.
    #[serde(default)]
    pub damaged: Vec<String>,
    /// A read-only mount of a pool that was not cleanly unmounted: it
    /// serves the state recovery would leave, recovered in DRAM only (the
    /// pool still needs recovery on media: the next read-write mount runs
    /// it).
    #[serde(default)]
    pub recovered_in_memory: bool,
}

/// A mounted Terrace pool.
pub struct Fs {
    pub(crate) media: Arc<dyn PmMedia>,
    pub(crate) sb: Mutex<Superblock>,
    pub(crate) table: crate::slot_table::SlotTable,
    pub(crate) free_slots: Mutex<Vec<Ino>>,
    /// Deleted inodes whose slot waits for the kernel's last reference
    /// (zombies: `Inode::zombie`). Raised by `Fs::make_zombie`, lowered
    /// after its slot number is back in `free_slots`: a create that sees 0
    /// finds every slot they held free (`alloc_slot`).
    pub(crate) zombies: AtomicU64,
    /// Groups the inode table had when a create last found it at its
    /// `inode_max_percent` cap and said so (`table.rs`; `u64::MAX`: never):
    /// one notice per size the table stops at.
    pub(crate) inode_cap_noticed_at: AtomicU64,
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
    /// Frozen by a read-only remount (`freeze.rs`): clean on media, nothing
    /// written until thawed.
    pub(crate) frozen: std::sync::atomic::AtomicBool,
    /// POSIX ACLs apply (`-o acl`, the default): a directory's default ACL
    /// passes to new inodes and chmod rewrites the access ACL. Off
    /// (`-o noacl`), stored ACLs are kept but ignored, as on ext4.
    pub(crate) posix_acls: std::sync::atomic::AtomicBool,
    /// The kernel stamps writes with its own clock (the FUSE writeback
    /// cache): new inodes are born on that clock ([`Fs::birth_now_ns`]).
    pub(crate) kernel_stamps_writes: std::sync::atomic::AtomicBool,
    /// The access-time mode to restore when thawed.
    pub(crate) atime_before_freeze: Mutex<Option<AtimeMode>>,
    pub(crate) atime: RwLock<AtimeMode>,
    /// The running or last scrub (`scrub.rs`).
    pub(crate) scrub_state: Mutex<Option<crate::service_state::ScrubReport>>,
    /// Mounted block tiers, in tier-id order.
    pub(crate) tiers: crate::tier_list::BlockTiers,
    /// Tunable options (one registry for CLI, config file and `terrace set`).
    pub(crate) settings: RwLock<terrace_policy::Settings>,
    /// The placement policy named by `settings.placement_policy`.
    pub(crate) placement: RwLock<Box<dyn terrace_policy::PlacementPolicy + Send + Sync>>,
    /// The DRAM page cache in front of the block tiers.
    pub(crate) cache: crate::cache::PageCache,
    /// Blocks allocated by write-backs whose pages are still counted dirty
    /// (between their allocation and their commit): see [`Fs::data_room_blocks`].
    pub(crate) wb_inflight_blocks: std::sync::atomic::AtomicU64,
    /// Serialises "is there room" checks with the claims that follow them
    /// (cached writes), so two writers cannot both take the last blocks.
    pub(crate) room_lock: Mutex<()>,
    /// The kernel completes this mount's fsyncs itself (the adapter answered
    /// one ENOSYS, [`Fs::leave_fsync_to_kernel`]): the DRAM cache takes no
    /// writes from then on, even once a block tier is attached. Set under
    /// `room_lock`; never cleared before unmount.
    pub(crate) fsync_by_kernel: std::sync::atomic::AtomicBool,
    /// Readers of block-tier data without their inode lock, and the frees
    /// waiting for them (`read_pins`).
    pub(crate) read_pins: crate::read_pins::ReadPins,
    /// Extra references of blocks several extents map (`copy_file_range`
    /// clones): see `shared`.
    pub(crate) shared: crate::shared::SharedBlocks,
    /// Extra references of blocks several small log blobs were packed into
    /// (log migration, format version 11): a block frees with its last blob.
    pub(crate) packed_logs: crate::shared::SharedBlocks,
    /// File data stored to and loaded from PM (for `terrace status`).
    pub(crate) pm_io: terrace_media::BlockStatsCounter,
    /// Counters of the PM room rules (`space.rs`).
    pub(crate) space_stats: crate::service_state::SpaceStats,
    /// Cold lists, migration state and thread.
    pub(crate) migrator: crate::migrate::state::Migrator,
    /// Extent recycling counters.
    pub(crate) cleaner_stats: crate::service_state::CleanerStats,
    /// One extent-recycling round at a time (`clean.rs`): rounds racing on
    /// one victim would each copy its valid blocks, and every copy but one
    /// would be dropped at its commit as dead blocks, eating the free
    /// extents recycling needs.
    pub(crate) recycle_lock: Mutex<()>,
    /// One commit of a move of shared blocks, with the remaps of their
    /// other owners, at a time (`reshare.rs`).
    pub(crate) reshare_lock: Mutex<()>,
    /// Files that may share blocks (`clone_families.rs`).
    pub(crate) clone_families: crate::clone_families::CloneFamilies,
    /// Object-tier cleaning state and counters.
    pub(crate) object_cleaning: crate::service_state::ObjectCleaning,
    /// Online discard (`-o discard`; `trim.rs`).
    pub(crate) online_discard: crate::service_state::OnlineDiscard,
    /// Inodes with a placement rule (see `rules`).
    pub(crate) ruled: Mutex<crate::service_state::Ruled>,
    /// Log migration state (`log_migrate`).
    pub(crate) log_migration: crate::service_state::LogMigration,
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

/// The wall clock as of the kernel's last tick (`CLOCK_REALTIME_COARSE`,
/// what the kernel stamps files with): not later than [`now_ns`], nor than
/// any time the kernel stamps afterwards.
pub fn coarse_now_ns() -> i64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// Notices that may wait for the daemon's logger (drained once a second):
/// a flood — a damaged file read in a loop — neither fills memory nor the
/// log; the rest are counted and said to be dropped.
pub const MAX_PENDING_NOTICES: usize = 256;

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
    /// with open journal transactions) is served as recovery would leave
    /// it, recovered in DRAM only ([`MountReport::recovered_in_memory`]);
    /// damage confined to some inodes is served around
    /// ([`MountReport::damaged`]).
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
        // Before anything is written: a tier another copy of this PM tier
        // used since is refused (`tier_epoch.rs`).
        crate::tier_epoch::check_devices(&sc.sb, &devices).map_err(OpenError::StaleTier)?;
        for (tier, runs) in &sc.block_used {
            if !runs.is_empty() && !devices.iter().any(|&(id, _)| id == tier.get()) {
                return Err(OpenError::MissingTier(tier.get()));
            }
        }
        // A pool that will be refused is refused now, before recovery or
        // the sweep of an object tier writes anything: a scan that found a
        // problem blocking mount leaves files out of what it counts as
        // used (an unreadable log, a directory whose slot reads free), and
        // the sweep deleted the object-tier parts of exactly the files
        // `fsck --repair` keeps.
        refusal(&sc, read_only)?;
        let mut sc = sc;
        // A read-only mount serves around damage confined to some inodes
        // (`Problem::blocks_read_only_mount`): their data is refused.
        // (The names are mapped only for a damaged pool: a walk of every
        // directory.)
        let mut damaged: Vec<String> = if sc.problems.iter().any(Problem::blocks_mount) {
            let names = sc.names();
            sc.problems
                .iter()
                .filter(|p| p.blocks_mount())
                .map(|p| sc.describe(p, &names))
                .collect()
        } else {
            Vec::new()
        };
        for ino in sc.problems.iter().filter_map(Problem::quarantined) {
            if let Some(i) = sc.inodes.get_mut(&ino) {
                i.damaged = true;
            }
        }
        // What only a lost name led to is shown in /lost+found, in memory.
        if read_only && !damaged.is_empty() {
            let lost = crate::read_only_lost::show_lost_files(&*media, &devices, &mut sc)?;
            if lost > 0 {
                damaged.push(format!(
                    "{lost} {} that no directory names any more: shown in /lost+found as #INODE, \
                     in memory only (`terrace fsck --repair` keeps them there)",
                    if lost == 1 { "file" } else { "files" }
                ));
            }
        }
        // A read-only mount of a pool that needs recovery serves the state
        // recovery would leave: the scan's view already has the open
        // transactions rolled back and leaves orphans out; nothing of it is
        // written (a read-write mount recovers the pool on media).
        let recovered_in_memory = read_only && (!sc.sb.clean || sc.rolled_back > 0);
        if !read_only {
            crate::recovery::finish_recovery(&*media, &mut sc);
        }
        let mut tiers = Vec::new();
        let mut swept = Vec::new();
        for (id, dev) in devices {
            let id = TierId(id);
            let Some(rec) = sc
                .sb
                .tiers
                .iter()
                .find(|t| t.id == id.get() && t.kind != terrace_format::TierKind::Pm)
            else {
                return Err(OpenError::Corrupt(format!(
                    "the pool has no block tier {id}"
                )));
            };
            let blocks = rec.size.min(dev.len()) / BLOCK_SIZE;
            let used = sc.block_used.get(&id).cloned().unwrap_or_default();
            if !read_only {
                // Before any new write can reach the tier: drop what the
                // committed state does not reference (an object tier's
                // orphan parts; other media keep nothing of the kind).
                swept.push((id, dev.retain_only(&crate::tier::held_runs(&used))));
            }
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
            tiers.push(crate::tier::BlockTier::new(id, rec.kind, dev, space, sums));
        }
        tiers.sort_by_key(|t| t.id);
        let mut fs = Fs::from_scan(media, sc, read_only)?;
        fs.report.damaged = damaged;
        fs.report.recovered_in_memory = recovered_in_memory;
        fs.tiers = crate::tier_list::BlockTiers::from_sorted(tiers).map_err(OpenError::Corrupt)?;
        for (id, r) in swept {
            match r {
                Ok(Some(r)) => {
                    fs.report.object_orphans += r.parts;
                    fs.report.object_orphan_bytes += r.bytes;
                }
                Ok(None) => {}
                Err(e) => fs
                    .report
                    .object_sweep_errors
                    .push(format!("tier {id}: {e}")),
            }
        }
        fs.rebuild_clone_families();
        fs.reset_pm_split();
        if !read_only {
            // Before any new write reaches a tier (nothing runs yet). A
            // header that cannot be written leaves the epoch pending, which
            // every header accepts: the pool mounts, as it would with a
            // failing tier, and the next stamping finishes the job.
            fs.stamp_tiers_or_say_why();
            fs.note_full_hosts();
        }
        Ok(fs)
    }

    fn from_scan(media: Arc<dyn PmMedia>, sc: Scan, read_only: bool) -> Result<Fs, OpenError> {
        // (`refusal` was checked by `open_pool`, before anything was
        // written.)
        let Scan {
            mut sb,
            inode_map,
            inodes,
            problems,
            orphans,
            orphan_bytes,
            replayed,
            rolled_back,
            alloc,
            log_space,
            shared,
            packed_logs,
            ..
        } = sc;
        let alloc =
            alloc.ok_or_else(|| OpenError::Corrupt("block ownership is inconsistent".into()))?;
        let report = MountReport {
            was_clean: sb.clean,
            rolled_back,
            orphans_freed: orphans.len(),
            orphan_bytes,
            replayed,
            link_count_warnings: problems
                .iter()
                .filter(|p| matches!(p, Problem::LinkCount { .. }))
                .count(),
            ..MountReport::default()
        };
        let table = crate::slot_table::SlotTable::new(&inode_map);
        for (ino, inode) in inodes {
            *table.slot(ino).lock_unchecked() = Some(Box::new(inode));
        }
        let mut free: Vec<Ino> = (2..table.len() as u64)
            .rev()
            .filter(|&i| table.slot(i).lock_unchecked().is_none())
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
            sb: Mutex::new(Rank::leaf("superblock"), sb),
            table,
            free_slots: Mutex::new(Rank::leaf("free slots"), free),
            zombies: AtomicU64::new(0),
            inode_cap_noticed_at: AtomicU64::new(u64::MAX),
            alloc,
            log_space,
            journal: Journal::default(),
            rename_lock: Mutex::new(Rank::Rename, ()),
            next_fh: AtomicU64::new(1),
            counters: Counters::default(),
            report,
            unmounted: std::sync::atomic::AtomicBool::new(false),
            read_only,
            frozen: std::sync::atomic::AtomicBool::new(false),
            posix_acls: std::sync::atomic::AtomicBool::new(true),
            kernel_stamps_writes: std::sync::atomic::AtomicBool::new(false),
            atime_before_freeze: Mutex::new(Rank::leaf("atime before freeze"), None),
            // Reads of a read-only mount set no access time: it would be written.
            atime: RwLock::new(
                Rank::leaf("atime mode"),
                if read_only {
                    AtimeMode::Never
                } else {
                    AtimeMode::default()
                },
            ),
            scrub_state: Mutex::new(Rank::leaf("scrub state"), None),
            tiers: Default::default(),
            settings: RwLock::new(Rank::leaf("settings"), terrace_policy::Settings::default()),
            placement: RwLock::new(
                Rank::leaf("placement policy"),
                terrace_policy::Settings::default()
                    .placement()
                    .expect("the default policy exists"),
            ),
            cache: crate::cache::PageCache::new(
                terrace_policy::Settings::default().dram_cache_bytes,
            ),
            wb_inflight_blocks: std::sync::atomic::AtomicU64::new(0),
            room_lock: Mutex::new(Rank::Room, ()),
            fsync_by_kernel: std::sync::atomic::AtomicBool::new(false),
            read_pins: Default::default(),
            shared: crate::shared::SharedBlocks::new(shared),
            packed_logs: crate::shared::SharedBlocks::new(packed_logs),
            pm_io: terrace_media::BlockStatsCounter::new(),
            space_stats: Default::default(),
            migrator: crate::migrate::state::Migrator::new(
                2 * std::thread::available_parallelism().map_or(1, |n| n.get()),
            ),
            cleaner_stats: Default::default(),
            recycle_lock: Mutex::new(Rank::Recycle, ()),
            reshare_lock: Mutex::new(Rank::Reshare, ()),
            clone_families: Default::default(),
            object_cleaning: Default::default(),
            online_discard: Default::default(),
            ruled: Mutex::new(Rank::leaf("ruled inodes"), Default::default()),
            log_migration: Default::default(),
        };
        for slot in &fs.table {
            if let Some(i) = slot.lock().as_mut() {
                fs.relist(i);
                if i.xattrs.contains_key(crate::service_state::RULE_XATTR) {
                    fs.ruled.lock().inos.insert(i.ino);
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
        let net = object_network(&next);
        for t in &self.tiers {
            t.media
                .set_network(&net)
                .map_err(|e| format!("tier {}: {e}", t.id))?;
        }
        *self.placement.write() = policy;
        let bound = next.dram_cache_bytes;
        *self.settings.write() = next;
        if bound != self.cache.bound() {
            self.cache.set_bound(bound);
        }
        Ok(())
    }

    /// EROFS on a read-only mount: every operation that would change the
    /// pool starts with it. The kernel refuses such calls on a read-only
    /// mount itself, but a `mount -o remount,rw` by root, or a caller of
    /// this library, would otherwise change DRAM state that never reaches
    /// media (a read-only mount writes nothing): a write answered as done
    /// and then lost.
    pub(crate) fn refuse_if_read_only(&self) -> crate::types::FsResult<()> {
        if self.read_only {
            return Err(crate::types::errno(libc::EROFS));
        }
        Ok(())
    }

    /// True for a read-only mount ([`Fs::mount_read_only`]).
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Whether the pool is frozen by a read-only remount.
    pub fn is_frozen(&self) -> bool {
        self.frozen.load(Ordering::SeqCst)
    }

    /// Queues a message for the daemon's log.
    pub(crate) fn notice(&self, msg: String) {
        let mut pending = self.migrator.notices.lock();
        if pending.len() < MAX_PENDING_NOTICES {
            pending.push(msg);
        } else {
            self.migrator
                .notices_dropped
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Messages for the daemon's log (each returned once); when more came
    /// than [`MAX_PENDING_NOTICES`] between two calls, a last one says how
    /// many were dropped.
    pub fn take_notices(&self) -> Vec<String> {
        let mut taken = std::mem::take(&mut *self.migrator.notices.lock());
        let dropped = self
            .migrator
            .notices_dropped
            .swap(0, std::sync::atomic::Ordering::Relaxed);
        if dropped > 0 {
            taken.push(format!(
                "{dropped} more notices came too fast to be logged and were dropped \
                 (`terrace status` counts errors and damage)"
            ));
        }
        taken
    }

    /// The current settings.
    pub fn settings(&self) -> terrace_policy::Settings {
        self.settings.read().clone()
    }

    /// Turns POSIX ACLs on or off for this mount (`-o acl`/`noacl`, or the
    /// kernel refusing `FUSE_POSIX_ACL`): off, new inodes take the caller's
    /// umask even under a directory with a default ACL, and chmod leaves a
    /// stored access ACL alone (design.md §5r).
    pub fn set_posix_acls(&self, on: bool) {
        self.posix_acls.store(on, Ordering::Relaxed);
    }

    /// Whether the kernel stamps the times of writes itself, with its
    /// coarse clock (the FUSE adapter under `-o writeback_cache`): new
    /// inodes are then born on that clock ([`Fs::birth_now_ns`]).
    pub fn set_kernel_stamps_writes(&self, on: bool) {
        self.kernel_stamps_writes.store(on, Ordering::Relaxed);
    }

    /// The birth time of an inode created now, which its first atime, mtime
    /// and ctime copy. Every time must keep the order of the events it
    /// stamps (xfstests generic/423: a file is not born after its first
    /// write, nor before the changes that preceded its creation):
    /// - when the kernel stamps writes ([`Fs::set_kernel_stamps_writes`]),
    ///   the kernel's coarse clock, which those stamps come from: up to a
    ///   tick behind the fine one, so a birth on the fine clock could come
    ///   after the file's first write;
    /// - otherwise the fine clock, which the daemon stamps writes and every
    ///   other change with: a birth on the coarse clock could come before
    ///   the write of another file made just before the create.
    pub(crate) fn birth_now_ns(&self) -> i64 {
        if self.kernel_stamps_writes.load(Ordering::Relaxed) {
            coarse_now_ns()
        } else {
            now_ns()
        }
    }

    /// Whether POSIX ACLs apply ([`Fs::set_posix_acls`]).
    pub(crate) fn posix_acls_on(&self) -> bool {
        self.posix_acls.load(Ordering::Relaxed)
    }

    /// Sets when reads update the access time.
    pub fn set_atime_mode(&self, mode: AtimeMode) {
        if self.read_only {
            return; // always `Never`
        }
        if self.is_frozen() {
            // `Never` until thawed, then this.
            *self.atime_before_freeze.lock() = Some(mode);
            return;
        }
        *self.atime.write() = mode;
    }

    /// What mount found.
    pub fn mount_report(&self) -> &MountReport {
        &self.report
    }

    /// The page cache.
    pub fn cache(&self) -> &crate::cache::PageCache {
        &self.cache
    }

    /// The superblock as of mount.
    pub fn superblock(&self) -> Superblock {
        self.sb.lock().clone()
    }

    /// Returns physical runs to their tier's allocator — the parts no other
    /// extent maps (`shared`). Block-tier runs wait while a reader holds a
    /// read pin (`read_pins`): it may be reading them.
    pub(crate) fn free_runs(&self, runs: Vec<Released>) {
        let mut block = Vec::new();
        // A run is data (possibly cloned) or a log blob (possibly packed
        // with others), never both: each map passes what it does not hold.
        let runs = self.packed_logs.release(self.shared.release(runs));
        for (tier, b, n) in runs {
            if n == 0 {
                continue;
            }
            if tier.is_pm() {
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
                t.free(block, n);
            }
        }
    }

    /// Frees an inode's log pages and data (after its slot was freed on media).
    pub(crate) fn release_inode_space(&self, inode: &mut Inode) {
        self.discard_dirty(inode);
        self.unlist(inode);
        let pages = std::mem::take(&mut inode.log.pages);
        self.log_space.free_all(&self.alloc, pages);
        let split = inode.extents.pm_clean_dirty();
        let mut all = inode.extents.unmap(FileBlock::ZERO, u64::MAX);
        self.note_pm_split_change(split, (0, 0));
        if let Some(t) = inode.log.on_tier.take() {
            all.push((t.tier, t.block, t.blocks));
        }
        self.free_runs(all);
        inode.log = Default::default();
        self.clone_families.forget(inode.ino);
    }
    /// The media (for tests and the status command).
    pub fn media(&self) -> &Arc<dyn PmMedia> {
        &self.media
    }

    /// Slot-state word address of an inode.
    pub(crate) fn state_word(&self, ino: Ino) -> u64 {
        self.table.pm_offset(ino) + INODE_OFF_STATE
    }

    /// Checks that the allocator's free space and the blocks live inodes use
    /// partition the pool exactly (no leak, no double ownership). For tests.
    pub fn check_allocator(&self) -> Result<(), String> {
        {
            let m = &self.migrator;
            let kept = (
                m.pm_clean_blocks.load(std::sync::atomic::Ordering::Relaxed),
                m.pm_dirty_blocks.load(std::sync::atomic::Ordering::Relaxed),
            );
            let scanned = self.scan_pm_clean_dirty();
            if kept != scanned {
                return Err(format!(
                    "PM clean/dirty totals {kept:?} differ from a scan of the inodes {scanned:?}"
                ));
            }
        }
        let mut runs: Vec<(PhysBlock, u64, &'static str)> = self
            .alloc
            .free_runs()
            .into_iter()
            .map(|(s, n)| (s, n, "free"))
            .collect();
        let maps = self.sb.lock().inode_map_blocks.clone();
        runs.extend(
            maps.into_iter()
                .chain(self.table.group_blocks())
                .map(|b| (PhysBlock(b), 1, "inode table")),
        );
        let mut small = Vec::new();
        // Data and log blobs by tier (0 = PM), with what holds them.
        let mut held: BTreeMap<TierId, Vec<crate::shared::Found>> = BTreeMap::new();
        for slot in &self.table {
            let g = slot.lock();
            if let Some(i) = g.as_ref() {
                for p in &i.log.pages {
                    if p.size >= BLOCK_SIZE {
                        runs.push((PhysBlock(p.off / BLOCK_SIZE), 1, "log"));
                    } else {
                        small.push(*p);
                    }
                }
                for (_, e) in i.extents.iter() {
                    for (tier, block, blocks, h) in crate::shared::held_runs(&e) {
                        held.entry(tier)
                            .or_default()
                            .push((block, blocks, i.ino, h));
                    }
                }
                if let Some(l) = i.log.on_tier {
                    held.entry(l.tier).or_default().push((
                        l.block,
                        l.blocks,
                        i.ino,
                        crate::shared::log_holder(&l),
                    ));
                }
            }
        }
        let mut referenced: BTreeMap<TierId, Vec<crate::alloc::Run>> = BTreeMap::new();
        for (tier, found) in held {
            let r = crate::shared::resolve(found);
            if let Some(c) = r.conflicts.first() {
                return Err(format!(
                    "tier {tier}: block {} held by inodes {} and {}",
                    c.block, c.first, c.second
                ));
            }
            if r.refs != self.shared.of_tier(tier) {
                return Err(format!(
                    "tier {tier}: shared-block counts {:?} differ from the mappings' {:?}",
                    self.shared.of_tier(tier),
                    r.refs
                ));
            }
            if r.log_refs != self.packed_logs.of_tier(tier) {
                return Err(format!(
                    "tier {tier}: packed-log block counts {:?} differ from the blobs' {:?}",
                    self.packed_logs.of_tier(tier),
                    r.log_refs
                ));
            }
            if tier.is_pm() {
                runs.extend(r.used.into_iter().map(|(s, n)| (s, n, "data")));
            } else {
                referenced.insert(tier, r.used);
            }
        }
        let slabs = crate::log_space::bitmaps_of(small);
        if slabs != self.log_space.bitmaps() {
            return Err("the small-log-page slabs differ from the live logs' pages".into());
        }
        runs.extend(slabs.keys().map(|&b| (PhysBlock(b), 1, "log slab")));
        runs.sort_unstable();
        let sb = self.sb.lock();
        let mut expect = PhysBlock(sb.pool_start);
        for (s, n, what) in runs {
            if s != expect {
                return Err(format!(
                    "block {expect}: expected next run, found {what} run at {s}+{n}"
                ));
            }
            expect = s + n;
        }
        if expect != PhysBlock(sb.pool_start + sb.pool_blocks) {
            return Err(format!(
                "pool ends at {}, runs end at {expect}",
                sb.pool_start + sb.pool_blocks
            ));
        }
        drop(sb);
        // Block tiers: each extent's valid count is what live extents
        // reference in it, and none of them lies where it could be given
        // again.
        for t in &self.tiers {
            let used = referenced.remove(&t.id).unwrap_or_default();
            t.space
                .check_referenced(&used)
                .map_err(|e| format!("tier {}: {e}", t.id))?;
        }
        Ok(())
    }
}

/// The retries and time-outs of object-tier requests the `s3_*` settings
/// ask for (docs/design.md §5n "Network faults").
pub fn object_network(s: &terrace_policy::Settings) -> terrace_media::NetworkParams {
    use std::time::Duration;
    terrace_media::NetworkParams {
        retries: s.s3_retries as usize,
        retry_timeout: Duration::from_nanos(s.s3_timeout_ns),
        request_timeout: Duration::from_nanos(s.s3_request_timeout_ns),
        backoff: Duration::from_nanos(s.s3_backoff_ns),
    }
}

/// Why a pool whose scan found `problems` (and whose block ownership is
/// `consistent` or not) may not mount, if it may not.
fn refusal(sc: &Scan, read_only: bool) -> Result<(), OpenError> {
    let fatal: Vec<&Problem> = sc
        .problems
        .iter()
        .filter(|p| {
            if read_only {
                p.blocks_read_only_mount()
            } else {
                p.blocks_mount()
            }
        })
        .collect();
    if let Some(first) = fatal.first() {
        let more = if fatal.len() > 1 {
            format!(" (and {} more problems)", fatal.len() - 1)
        } else {
            String::new()
        };

        // (After a crash too: a read-only mount recovers in memory only.)
        let rescue = if !read_only && !sc.problems.iter().any(Problem::blocks_read_only_mount) {
            "; a read-only mount (-o ro) serves the rest of the pool to copy off first \
             (the damaged files' data returns EIO)"
        } else {
            ""
        };
        let first = sc.describe(first, &sc.names());
        return Err(OpenError::Corrupt(format!("{first}{more}{rescue}")));
    }
    if sc.alloc.is_none() {
        return Err(OpenError::Corrupt("block ownership is inconsistent".into()));
    }
    Ok(())
}
