//! Pools to test on: formatted on memory media (PM only, or PM with block
//! tiers), mounted, fresh or on crash-simulating media; and the files and
//! directories tests make in them.

use super::CTX;
use std::sync::Arc;
use terrace_core::{format, FormatParams, Fs};
use terrace_format::{TierKind, TierRecord, DEFAULT_EXTENT_SIZE};
use terrace_media::{BlockMedia, CrashBlock, CrashMedia, MemBlock, MemMedia, PmMedia};

/// Formats `media` as a pool with `inodes` slots.
pub fn mkfs(media: &dyn PmMedia, inodes: u64) {
    let p = FormatParams {
        uuid: [9; 16],
        inode_count: inodes,
        tiers: vec![TierRecord {
            id: 0,
            kind: TierKind::Pm,
            size: media.len(),
            extent_size: 0,
            path: "test".into(),
            epoch: 0,
        }],
        root_uid: 0,
        root_gid: 0,
    };
    format(media, &p).expect("format");
}

/// The uuid [`mkfs_tiers`] gives a pool (an object tier's keys name it).
pub const TIERED_UUID: [u8; 16] = [15; 16];

/// Formats `pm` as a pool with `inodes` slots and block tiers 1, 2, … of
/// the kinds and sizes in `blocks`, with 512 KiB extents.
pub fn mkfs_tiers(pm: &dyn PmMedia, blocks: &[(TierKind, u64)], inodes: u64) {
    let sized: Vec<(TierKind, u64, u32)> = blocks
        .iter()
        .map(|&(kind, size)| (kind, size, DEFAULT_EXTENT_SIZE))
        .collect();
    mkfs_tiers_sized(pm, &sized, inodes);
}

/// [`mkfs_tiers`] with each tier's extent (an object tier's segment) size.
pub fn mkfs_tiers_sized(pm: &dyn PmMedia, blocks: &[(TierKind, u64, u32)], inodes: u64) {
    let tier = |id: u8, kind: TierKind, size, extent_size| TierRecord {
        id,
        kind,
        size,
        extent_size,
        path: kind.name().into(),
        epoch: 0,
    };
    let mut tiers = vec![tier(0, TierKind::Pm, pm.len(), 0)];
    for (id, &(kind, size, extent_size)) in (1..).zip(blocks) {
        tiers.push(tier(id, kind, size, extent_size));
    }
    let p = FormatParams {
        uuid: TIERED_UUID,
        inode_count: inodes,
        tiers,
        root_uid: 0,
        root_gid: 0,
    };
    format(pm, &p).expect("format");
}

/// Formats `pm` as a pool with `inodes` slots and one SSD tier (id 1) of
/// `ssd_bytes`, with 512 KiB extents.
pub fn mkfs_pm_ssd(pm: &dyn PmMedia, ssd_bytes: u64, inodes: u64) {
    mkfs_tiers(pm, &[(TierKind::Ssd, ssd_bytes)], inodes);
}

/// Mounts a pool on `media`.
pub fn mount(media: Arc<dyn PmMedia>) -> Fs {
    Fs::mount(media).unwrap_or_else(|e| panic!("mount failed: {e}"))
}

/// Mounts the pool on `pm` with `ssd` as its tier 1.
pub fn mount_tiered(pm: Arc<dyn PmMedia>, ssd: Arc<dyn BlockMedia>) -> Fs {
    Fs::mount_with_tiers(pm, vec![(1, ssd)]).unwrap_or_else(|e| panic!("mount: {e}"))
}

/// Formats `pm` as a PM-only pool with `inodes` slots and mounts it.
pub fn pm_pool_on<P: PmMedia + 'static>(pm: P, inodes: u64) -> (Arc<P>, Fs) {
    let pm = Arc::new(pm);
    mkfs(&*pm, inodes);
    let fs = mount(pm.clone());
    (pm, fs)
}

/// [`pm_pool_on`] memory media of `bytes`.
pub fn pm_pool(bytes: u64, inodes: u64) -> (Arc<MemMedia>, Fs) {
    pm_pool_on(MemMedia::new(bytes), inodes)
}

/// Formats `pm` as a pool with `inodes` slots and `ssd` as its SSD tier
/// (id 1, [`mkfs_pm_ssd`]), and mounts it. Returns both media and the pool.
pub fn tiered_pool_on<P, B>(pm: P, ssd: B, inodes: u64) -> (Arc<P>, Arc<B>, Fs)
where
    P: PmMedia + 'static,
    B: BlockMedia + 'static,
{
    let (pm, ssd) = (Arc::new(pm), Arc::new(ssd));
    mkfs_pm_ssd(&*pm, ssd.len(), inodes);
    let fs = mount_tiered(pm.clone(), ssd.clone());
    (pm, ssd, fs)
}

/// [`tiered_pool_on`] memory media: `pm_bytes` of PM, an SSD of `ssd_bytes`.
pub fn tiered_pool(
    pm_bytes: u64,
    ssd_bytes: u64,
    inodes: u64,
) -> (Arc<MemMedia>, Arc<MemBlock>, Fs) {
    tiered_pool_on(MemMedia::new(pm_bytes), MemBlock::new(ssd_bytes), inodes)
}

/// [`tiered_pool`] on crash-simulating media with one clock: each PM crash
/// point of a trace has the device image of the same moment
/// (`CrashBlock::image_at_time` of `CrashTrace::time_after`).
pub fn crash_pool(
    pm_bytes: u64,
    ssd_bytes: u64,
    inodes: u64,
) -> (Arc<CrashMedia>, Arc<CrashBlock>, Fs) {
    let pm = CrashMedia::new(pm_bytes);
    let ssd = CrashBlock::timed(ssd_bytes, pm.clock());
    tiered_pool_on(pm, ssd, inodes)
}

/// Creates the regular file `name` (mode 0644) in directory `parent`;
/// returns its inode.
pub fn file(fs: &Fs, parent: u64, name: &str) -> u64 {
    fs.mknod(parent, name.as_bytes(), libc::S_IFREG | 0o644, 0, CTX)
        .unwrap_or_else(|e| panic!("create {name}: {e}"))
        .ino
}

/// Creates the regular file `name` in the root holding `data`; returns its
/// inode.
pub fn file_holding(fs: &Fs, name: &str, data: &[u8]) -> u64 {
    let ino = file(fs, 1, name);
    fs.write(ino, 0, data)
        .unwrap_or_else(|e| panic!("write {name}: {e}"));
    ino
}

/// [`file_holding`], then fsync: `data` is durable wherever it was placed.
pub fn write_file(fs: &Fs, name: &str, data: &[u8]) -> u64 {
    let ino = file_holding(fs, name, data);
    fs.fsync(ino, false)
        .unwrap_or_else(|e| panic!("fsync {name}: {e}"));
    ino
}

/// Creates the directories `d0`, `d1`, … (`n` of them) in the root; returns
/// their inodes.
pub fn mkdirs(fs: &Fs, n: u32) -> Vec<u64> {
    (0..n)
        .map(|d| {
            fs.mkdir(1, format!("d{d}").as_bytes(), 0o755, CTX)
                .unwrap()
                .ino
        })
        .collect()
}

/// Gives `fs` the nvmfs migration policy: no moves for space below 99% PM,
/// no minimum age, and a dirty list that flushes (copies to the SSD) from
/// 60% of its target down to 30%.
pub fn use_nvmfs(fs: &Fs) {
    for (k, v) in [
        ("migration_policy", "nvmfs"),
        ("migration_threshold", "99"),
        ("migration_age_ns", "0s"),
        ("nvmfs_dirty_low_percent", "30"),
        ("nvmfs_dirty_high_percent", "60"),
    ] {
        fs.set_setting(k, v).unwrap();
    }
}

/// Gives `fs` the block-first placement policy: new data goes to the
/// block tier (through the DRAM cache) rather than to PM.
pub fn block_first(fs: &Fs) {
    fs.set_setting("placement_policy", "block-first").unwrap();
}

/// The record of a block tier `id` of `size` bytes with the default extent
/// size, for `Fs::attach_tier` (its path is the kind's name).
pub fn tier_record(id: u8, kind: TierKind, size: u64) -> TierRecord {
    TierRecord {
        id,
        kind,
        size,
        extent_size: DEFAULT_EXTENT_SIZE,
        path: kind.name().into(),
        epoch: 0,
    }
}

/// Starts write-back and migration (with a 16 MiB DRAM cache) and creates
/// `n` small files (64–263 bytes) in 8 directories, one write each: a
/// burst whose logs outgrow a small PM. Returns the files with their data.
pub fn small_files_burst(fs: &Arc<Fs>, n: u32) -> Vec<(u64, Vec<u8>)> {
    fs.set_setting("dram_cache_bytes", "16M").unwrap();
    fs.start_writeback();
    fs.start_migration();
    let dirs = mkdirs(fs, 8);
    (0..n)
        .map(|i| {
            let ino = file(fs, dirs[i as usize % dirs.len()], &format!("file-{i}"));
            let data = super::pattern(u64::from(i), 64 + i as usize % 200);
            fs.write(ino, 0, &data)
                .unwrap_or_else(|e| panic!("write {i}: {e}"));
            (ino, data)
        })
        .collect()
}
