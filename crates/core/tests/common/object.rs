//! Pools with an object tier: PM, an SSD as tier 1 and an object tier (S3,
//! design §5n) as tier 2, on an in-memory (or crash-simulating) store;
//! the tier created, opened again over what its store holds, mounted and
//! checked by fsck.

use super::{fsck_clean_with, mkfs_tiers, Fsck, TIERED_UUID};
use std::sync::Arc;
use terrace_core::fsck::FsckReport;
use terrace_core::Fs;
use terrace_format::{TierKind, DEFAULT_EXTENT_SIZE};
use terrace_media::object::{Bucket, FaultStore};
use terrace_media::{BlockMedia, MemBlock, MemMedia, ObjectMedia, PmMedia};

/// One segment per extent, as `terrace mkfs` makes them: 512 KiB parts.
pub const SEGMENT_BLOCKS: u64 = DEFAULT_EXTENT_SIZE as u64 / 4096;

/// Formats `pm` as a pool with `inodes` slots, an SSD of `ssd_bytes` (tier
/// 1) and an object tier of `s3_bytes` (tier 2).
pub fn mkfs_object(pm: &dyn PmMedia, ssd_bytes: u64, s3_bytes: u64, inodes: u64) {
    mkfs_tiers(
        pm,
        &[(TierKind::Ssd, ssd_bytes), (TierKind::S3, s3_bytes)],
        inodes,
    );
}

/// A bucket `memory://tier`, prefix `pool`, over the store `of` uses (a
/// fault wrapper, if `of` was made through one).
pub fn same_store(of: &Bucket) -> Bucket {
    Bucket::with_store(of.store(), "memory://tier", "pool").unwrap()
}

/// A fresh in-memory store: a bucket over it as it is, the fault wrapper
/// around it, and a bucket through that wrapper (for the tier to use).
pub fn faulty_memory_store() -> (Bucket, Arc<FaultStore>, Bucket) {
    let plain = Bucket::in_memory("tier", "pool").unwrap();
    let fault = Arc::new(FaultStore::new(plain.store()));
    let faulty = Bucket::with_store(fault.clone(), "memory://tier", "pool").unwrap();
    (plain, fault, faulty)
}

/// A new object tier of `bytes` in `bucket` for the pool [`mkfs_object`]
/// formats.
pub fn create_object_tier(bucket: Bucket, bytes: u64) -> Arc<ObjectMedia> {
    let tier = ObjectMedia::create_in(bucket, TIERED_UUID, bytes, SEGMENT_BLOCKS);
    Arc::new(tier.unwrap_or_else(|e| panic!("create the object tier: {e}")))
}

/// The object tier in `bucket`, opened as a mount would.
pub fn open_object_tier(bucket: Bucket) -> Arc<ObjectMedia> {
    let tier = ObjectMedia::open_in(bucket, TIERED_UUID);
    Arc::new(tier.unwrap_or_else(|e| panic!("open the object tier: {e}")))
}

/// The block tiers of such a pool: `ssd` as tier 1, `s3` as tier 2.
pub fn object_tiers(
    ssd: Arc<dyn BlockMedia>,
    s3: Arc<dyn BlockMedia>,
) -> Vec<(u8, Arc<dyn BlockMedia>)> {
    vec![(1, ssd), (2, s3)]
}

/// Mounts the pool on `pm` with its SSD and object tier.
pub fn mount_object(pm: Arc<dyn PmMedia>, ssd: Arc<dyn BlockMedia>, s3: Arc<dyn BlockMedia>) -> Fs {
    Fs::mount_with_tiers(pm, object_tiers(ssd, s3)).unwrap_or_else(|e| panic!("mount: {e}"))
}

/// The pool on `pm` with its SSD and object tier passes fsck (metadata);
/// returns the report (orphan parts counted in it).
pub fn fsck_object_clean(
    pm: &dyn PmMedia,
    ssd: Arc<dyn BlockMedia>,
    s3: Arc<dyn BlockMedia>,
    ctx: &str,
) -> FsckReport {
    fsck_clean_with(pm, &object_tiers(ssd, s3), Fsck::Metadata, ctx)
}

/// A pool on memory media with an object tier: PM, its SSD and the tier.
pub struct ObjectPool {
    pub pm: Arc<MemMedia>,
    pub ssd: Arc<MemBlock>,
    pub s3: Arc<ObjectMedia>,
    /// A bucket over the store the tier uses: what it is opened again from.
    pub store: Bucket,
}

impl ObjectPool {
    /// Formats `pm_bytes` of PM with an SSD of `ssd_bytes` and an object
    /// tier of `s3_bytes` created in `bucket` (256 inodes).
    pub fn format(pm_bytes: u64, ssd_bytes: u64, s3_bytes: u64, bucket: Bucket) -> ObjectPool {
        let pm = Arc::new(MemMedia::new(pm_bytes));
        mkfs_object(&*pm, ssd_bytes, s3_bytes, 256);
        let store = same_store(&bucket);
        ObjectPool {
            pm,
            ssd: Arc::new(MemBlock::new(ssd_bytes)),
            s3: create_object_tier(bucket, s3_bytes),
            store,
        }
    }

    /// Mounts the pool with its current object tier.
    pub fn mount(&self) -> Fs {
        mount_object(self.pm.clone(), self.ssd.clone(), self.s3.clone())
    }

    /// Opens the object tier again from what its store holds (as a
    /// remount would).
    pub fn reopen(&mut self) {
        self.s3 = open_object_tier(same_store(&self.store));
    }
}
