//! The numbers `terrace status` shows.

use crate::fs::Fs;
use serde::{Deserialize, Serialize};
use std::sync::atomic::Ordering;
use terrace_format::{TierId, BLOCK_SIZE};

/// One tier's use.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TierStatus {
    /// Tier id.
    pub id: u8,
    /// `pm`, `ssd`, `hdd` or `s3`.
    #[serde(deserialize_with = "kind_name")]
    pub kind: KindName,
    /// Path at mkfs.
    pub path: String,
    /// Capacity in bytes (data pool for PM).
    pub capacity: u64,
    /// Bytes in use.
    pub used: u64,
    /// Whether the tier is mounted (block tiers need their device).
    pub active: bool,
    /// Extent bookkeeping (block tiers).
    pub extents: Option<crate::tier::SpaceStats>,
    /// Live write entries (extents of files) whose data is on this tier.
    pub write_entries: u64,
    /// Bytes more than one extent maps (`copy_file_range` clones, design
    /// §5k), and the bytes that sharing them saves.
    #[serde(default)]
    pub shared_bytes: u64,
    /// See `shared_bytes`.
    #[serde(default)]
    pub shared_saved_bytes: u64,
    /// Bytes written to this tier / bytes applications wrote (block tiers).
    pub write_amplification: Option<f64>,
    /// Requests and bytes sent to the device since mount (for PM: data
    /// stores and loads by the file system).
    pub io: Option<IoStats>,
    /// What an object tier stores (design §5n).
    #[serde(default)]
    pub object: Option<ObjectTierStatus>,
    /// Set while the tier's device (or the file system holding its image)
    /// is full: its free space is no room for new data, and writes to it
    /// are tried again after a back-off (`device_full.rs`, design §5s).
    #[serde(default)]
    pub device_full: Option<DeviceFullStatus>,
}

/// A block tier whose device is full (`TierStatus::device_full`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceFullStatus {
    /// Seconds since its device said it was full.
    pub full_for_secs: u64,
    /// Seconds until the next try of a write to it (0: the next one tries;
    /// sooner when its file system gains room).
    pub next_try_in_secs: u64,
}

/// An object tier's parts and how much of them is live.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ObjectTierStatus {
    /// Parts (objects) in the store.
    pub parts: u64,
    /// Their bytes.
    pub stored_bytes: u64,
    /// Bytes of blocks that read from a part (the rest is superseded or
    /// trimmed: what cleaning by live fraction would win back).
    pub live_bytes: u64,
    /// `live_bytes / stored_bytes` (1 when nothing is stored).
    pub live_fraction: f64,
    /// Dead parts waiting for their delete.
    pub dead_parts: u64,
    /// Bytes written but not yet uploaded.
    pub pending_bytes: u64,
    /// While the store fails requests (until one succeeds): since when
    /// (seconds since the epoch) and the last error. Reads of its data fail
    /// with EIO meanwhile; data on the other tiers is served as usual.
    #[serde(default)]
    pub unreachable_since_unix: Option<u64>,
    /// The last failure's message, while `unreachable_since_unix` is set.
    #[serde(default)]
    pub last_error: Option<String>,
    /// Requests sent to the store since mount (GETs and PUTs are what
    /// object stores charge for) and their bytes.
    #[serde(default)]
    pub requests: ObjectRequests,
    /// Rewriting of partly dead parts since mount (`object_clean.rs`).
    #[serde(default)]
    pub cleaning: crate::object_clean::ObjectCleaningStatus,
}

/// Requests an object tier sent since mount: the media's own counters,
/// serialised as they are (`terrace_media::object::RequestStats`).
pub use terrace_media::object::RequestStats as ObjectRequests;

impl From<terrace_media::ObjectStats> for ObjectTierStatus {
    fn from(o: terrace_media::ObjectStats) -> ObjectTierStatus {
        ObjectTierStatus {
            parts: o.parts,
            stored_bytes: o.stored_bytes,
            live_bytes: o.live_bytes,
            live_fraction: if o.stored_bytes == 0 {
                1.0
            } else {
                o.live_bytes as f64 / o.stored_bytes as f64
            },
            dead_parts: o.dead_parts,
            pending_bytes: o.pending_bytes,
            unreachable_since_unix: o.failing.as_ref().map(|f| f.since_unix),
            last_error: o.failing.map(|f| f.error),
            requests: o.requests,
            cleaning: Default::default(),
        }
    }
}

/// `&'static str`, named so that serde does not take the field for one
/// borrowed from the input (which would tie `Status`'s `Deserialize` to
/// `'static` input); [`kind_name`] reads it.
type KindName = &'static str;

/// A tier kind's name read back as the `&'static str` of
/// [`terrace_format::TierKind::name`] (the control client reads the status).
fn kind_name<'de, D: serde::Deserializer<'de>>(d: D) -> Result<&'static str, D::Error> {
    let name = String::deserialize(d)?;
    terrace_format::TierKind::parse(&name)
        .map(terrace_format::TierKind::name)
        .ok_or_else(|| serde::de::Error::custom(format!("unknown tier kind {name:?}")))
}

/// Requests a block device served since mount.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct IoStats {
    /// Read requests.
    pub read_requests: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Write requests.
    pub write_requests: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Average write request in bytes.
    pub avg_write_bytes: u64,
    /// Average read request in bytes.
    pub avg_read_bytes: u64,
    /// Cache flushes (fdatasync).
    pub syncs: u64,
    /// Bytes discarded (`fstrim`, design.md §5q).
    #[serde(default)]
    pub discard_bytes: u64,
}

impl From<terrace_media::BlockStats> for IoStats {
    fn from(b: terrace_media::BlockStats) -> IoStats {
        IoStats {
            read_requests: b.read_requests,
            read_bytes: b.read_bytes,
            write_requests: b.write_requests,
            write_bytes: b.write_bytes,
            avg_write_bytes: b.avg_write_bytes(),
            avg_read_bytes: b.avg_read_bytes(),
            syncs: b.syncs,
            discard_bytes: b.discard_bytes,
        }
    }
}

/// Status of a mounted pool.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Status {
    /// Pool id.
    pub uuid: String,
    /// Media description.
    pub media: String,
    /// Tiers.
    pub tiers: Vec<TierStatus>,
    /// Live inodes.
    pub inodes_used: u64,
    /// Inode slots.
    pub inodes_total: u64,
    /// Log pages in use.
    pub log_pages: u64,
    /// PM bytes the log pages take (pages are 256 B to 4 KiB).
    pub log_bytes: u64,
    /// Data blocks in use on PM.
    pub data_blocks: u64,
    /// PM room: metadata, reserve, promises, waits (`space.rs`).
    pub space: crate::space::SpaceStatus,
    /// Bytes new data can still get, over every tier (what `df` shows as
    /// available): dirty pages of the DRAM cache hold theirs already.
    pub room_bytes: u64,
    /// Online discard (`-o discard`): its interval and what it did.
    #[serde(default)]
    pub discard: crate::trim::DiscardStatus,
    /// Was the pool cleanly unmounted before this mount.
    pub clean_last_time: bool,
    /// Mounts so far.
    pub mount_count: u64,
    /// Frozen by a read-only remount (clean on media, nothing written).
    #[serde(default)]
    pub frozen: bool,
    /// What recovery did at this mount.
    pub recovery: crate::fs::MountReport,
    /// Application writes / bytes.
    pub writes: u64,
    /// Bytes written by applications.
    pub bytes_written: u64,
    /// Application reads.
    pub reads: u64,
    /// Bytes read by applications.
    pub bytes_read: u64,
    /// Bytes the FUSE adapter stored into the kernel's page cache after
    /// writers closed files (`fill_after_write`), and the fills that stored
    /// their whole file: what readers may then get without a request (the
    /// kernel may still drop such pages on its own, as any cached page).
    #[serde(default)]
    pub cache_fill_bytes: u64,
    /// Whole fills of the kernel's page cache (see `cache_fill_bytes`).
    #[serde(default)]
    pub cache_fills: u64,
    /// fsync calls the daemon handled.
    pub fsyncs: u64,
    /// fsync never has work to do on this pool ([`crate::Fs::fsync_is_noop`]):
    /// after the first, the kernel completes fsyncs without a request, so
    /// `fsyncs` stops counting.
    pub fsync_in_kernel: bool,
    /// Log commits / journaled commits / compactions.
    pub commits: u64,
    /// Commits through the journal.
    pub journaled_commits: u64,
    /// Log compactions.
    pub compactions: u64,
    /// The placement policy in use.
    pub placement_policy: String,
    /// Writes placed on PM / on a block tier / elsewhere than chosen (full tier).
    pub placed_pm: u64,
    /// Writes placed on a block tier.
    pub placed_block: u64,
    /// Writes that overflowed their chosen tier.
    pub placement_overflows: u64,
    /// Where writes went per class (synchronous, small and large
    /// asynchronous), and why.
    #[serde(default)]
    pub placement_by_class: crate::placement_stats::PlacementByClass,
    /// Writes that found no room for a copy on a full pool and went into
    /// the preallocated blocks they cover (fallocate's promise kept).
    #[serde(default)]
    pub prealloc_in_place_writes: u64,
    /// The running scrub, or the last one since mount.
    pub scrub: Option<crate::service_state::ScrubReport>,
    /// Block-tier data blocks read and verified against their checksum.
    pub checksummed_reads: u64,
    /// Checksum mismatches of block-tier data seen since mount, counted per
    /// read that met one (a damaged block read twice counts twice; a
    /// damaged clean copy counts though no read failed); the daemon's log
    /// names tier and block.
    pub checksum_errors: u64,
    /// Writes or syncs that a block tier's device refused with ENOSPC (the
    /// file system holding its image is full).
    pub device_full_errors: u64,
    /// Reads, writes or syncs a block tier's device failed with another
    /// error (EIO …); the operation failed with it, nothing was lost.
    #[serde(default)]
    pub device_errors: u64,
    /// Passes of the background threads (write-back, migration) that
    /// panicked since mount: 0 unless Terrace has a bug (`worker.rs`; the
    /// daemon's log has the message). The threads go on after one.
    #[serde(default)]
    pub background_panics: u64,
    /// Synchronicity predictions settled so far and how many were right
    /// ("synchronous" right when an fsync followed within the threshold).
    pub sync_predictions: terrace_policy::SyncAccuracy,
    /// The DRAM page cache in front of the block tiers.
    pub cache: crate::cache::CacheStats,
    /// Migration between tiers.
    pub migration: crate::migrate::MigrationStatus,
    /// Logs moved to block tiers (`log_migrate`).
    pub log_migration: crate::log_migrate::LogMigrationStatus,
    /// Extent recycling on block tiers.
    pub cleaner: crate::clean::CleanerStatus,
    /// All settings.
    pub settings: terrace_policy::Settings,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl Fs {
    /// Gathers the status.
    pub fn status(&self) -> Status {
        let sb = self.superblock();
        let mut inodes_used = 0;
        let mut log_pages = 0;
        let mut log_bytes = 0;
        let mut data_blocks = 0;
        let mut sync_predictions = terrace_policy::SyncAccuracy::default();
        let shared = self.shared.stats();
        let mut entries_per_tier = [0u64; 256];
        for slot in &self.table {
            if let Some(i) = slot.lock().as_ref() {
                if i.zombie {
                    continue;
                }
                if let Some(h) = &i.io {
                    sync_predictions.add(h.sync.accuracy());
                }
                inodes_used += 1;
                log_pages += i.log.pages.len() as u64;
                log_bytes += i.log.pages.iter().map(|p| p.size).sum::<u64>();
                for (_, e) in i.extents.iter() {
                    entries_per_tier[e.tier.index()] += 1;
                    if e.tier.is_pm() {
                        data_blocks += e.blocks;
                    }
                }
            }
        }
        let pool_bytes = sb.pool_blocks * BLOCK_SIZE;
        let used = pool_bytes - self.alloc.free() * BLOCK_SIZE;
        let tiers = sb
            .tiers
            .iter()
            .map(|t| {
                let id = TierId(t.id);
                let mounted = self.tiers.iter().find(|b| b.id == id);
                let extents = mounted.map(|b| b.space.stats());
                TierStatus {
                    id: t.id,
                    kind: t.kind.name(),
                    path: t.path.clone(),
                    capacity: if t.id == 0 { pool_bytes } else { t.size },
                    used: match (t.id, extents) {
                        (0, _) => used,
                        (_, Some(e)) => e.valid_blocks * BLOCK_SIZE,
                        _ => 0,
                    },
                    active: t.id == 0 || mounted.is_some(),
                    extents,
                    write_entries: entries_per_tier[t.id as usize],
                    shared_bytes: shared.get(&id).map_or(0, |s| s.0 * BLOCK_SIZE),
                    shared_saved_bytes: shared.get(&id).map_or(0, |s| s.1 * BLOCK_SIZE),
                    write_amplification: mounted.map(|b| {
                        let app = self.counters.bytes_written.load(Ordering::Relaxed);
                        if app == 0 {
                            0.0
                        } else {
                            b.media.stats().write_bytes as f64 / app as f64
                        }
                    }),
                    io: if t.id == 0 {
                        Some(self.pm_io.snapshot().into())
                    } else {
                        mounted.map(|b| b.media.stats().into())
                    },
                    object: mounted.and_then(|b| b.media.object_tier_stats()).map(|o| {
                        ObjectTierStatus {
                            cleaning: self.object_cleaning_status(id),
                            ..o.into()
                        }
                    }),
                    device_full: mounted
                        .and_then(|b| b.full.status(std::time::Instant::now()))
                        .map(|f| DeviceFullStatus {
                            full_for_secs: f.for_how_long.as_secs(),
                            next_try_in_secs: f.next_try_in.as_secs_f64().ceil() as u64,
                        }),
                }
            })
            .collect();
        let c = &self.counters;
        // In a statement of its own: a guard taken inside the literal below
        // would live until the literal is built, and `migration_status` and
        // `settings` read the settings lock again: a second read waits behind
        // a queued writer, so `terrace status` beside `terrace set` could
        // deadlock (parking_lot's RwLock is fair).
        let placement_policy = self.settings.read().placement_policy.clone();
        Status {
            uuid: hex(&sb.uuid),
            media: self.media.describe(),
            tiers,
            inodes_used,
            inodes_total: self.table.len() as u64 - 1,
            log_pages,
            log_bytes,
            data_blocks,
            space: self.space_status(),
            room_bytes: self.statfs().bavail * terrace_format::BLOCK_SIZE,
            discard: self.discard_status(),
            clean_last_time: self.report.was_clean,
            mount_count: sb.mount_count,
            frozen: self.is_frozen(),
            recovery: self.report.clone(),
            writes: c.writes.load(Ordering::Relaxed),
            bytes_written: c.bytes_written.load(Ordering::Relaxed),
            reads: c.reads.load(Ordering::Relaxed),
            bytes_read: c.bytes_read.load(Ordering::Relaxed),
            cache_fill_bytes: c.cache_fill_bytes.load(Ordering::Relaxed),
            cache_fills: c.cache_fills.load(Ordering::Relaxed),
            fsyncs: c.fsyncs.load(Ordering::Relaxed),
            fsync_in_kernel: self.fsync_is_noop(),
            commits: c.commits.load(Ordering::Relaxed),
            journaled_commits: c.journaled_commits.load(Ordering::Relaxed),
            compactions: c.compactions.load(Ordering::Relaxed),
            placement_policy,
            placed_pm: c.placed_pm.load(Ordering::Relaxed),
            placed_block: c.placed_block.load(Ordering::Relaxed),
            placement_overflows: c.placement_overflows.load(Ordering::Relaxed),
            placement_by_class: c.placement.snapshot(),
            prealloc_in_place_writes: c.prealloc_in_place_writes.load(Ordering::Relaxed),
            scrub: self.scrub_status(),
            checksummed_reads: c.checksummed_reads.load(Ordering::Relaxed),
            checksum_errors: c.checksum_errors.load(Ordering::Relaxed),
            device_full_errors: c.device_full_errors.load(Ordering::Relaxed),
            device_errors: c.device_errors.load(Ordering::Relaxed),
            background_panics: self.cache.worker.panics() + self.migrator.worker.panics(),
            sync_predictions,
            cache: self.cache.stats(),
            migration: self.migration_status(),
            log_migration: self.log_migration_status(),
            cleaner: self.cleaner_status(),
            settings: self.settings(),
        }
    }
}
