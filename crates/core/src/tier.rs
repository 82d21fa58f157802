//! Block tiers (SSD, HDD, object stores) as the mounted pool holds them: the
//! device (its failed syncs reported to every writer they may have hurt,
//! closable when the tier is removed), its extent space
//! ([`ExtentSpace`], `extent_space.rs`: the non-overwrite allocation and its
//! invariants), its checksums and whether its device said it is full.

use crate::alloc::Run;
use std::sync::Arc;
use terrace_format::{PhysBlock, TierId};
use terrace_media::{BlockMedia, Closable, PerWriterSync};

pub use crate::extent_space::{
    ExtentSpace, SpaceStats, DISCARD_EXTENTS, RECYCLING_RESERVE_EXTENTS,
};

/// The media of a mounted tier: the device, its failed syncs reported to
/// every writer they may have hurt ([`PerWriterSync`]), closable when the
/// tier is removed ([`Closable`]).
type TierMedia = Closable<PerWriterSync<Arc<dyn BlockMedia>>>;

/// A mounted block tier.
pub struct BlockTier {
    /// Tier id (as in write entries).
    pub id: TierId,
    /// `ssd`, `hdd` or `s3`.
    pub kind: terrace_format::TierKind,
    /// The device.
    pub media: Arc<dyn BlockMedia>,
    /// The same media, to close it ([`BlockTier::close_media`]).
    closable: Arc<TierMedia>,
    /// Its space.
    pub space: ExtentSpace,
    /// Checksums of the data blocks on it (`sums.rs`).
    pub sums: crate::sums::BlockSums,
    /// Whether its device said it is full (`device_full.rs`).
    pub full: crate::device_full::DeviceFull,
}

/// Every run of a block tier the pool holds, given the runs its committed
/// state maps (data, clean copies, log blobs): those plus the tier header in
/// block 0. What an object tier keeps at mount and fsck
/// ([`BlockMedia::retain_only`], [`BlockMedia::unreferenced`]).
/// The runs are given to the media as plain `(first block, blocks)`.
pub fn held_runs(used: &[Run]) -> Vec<(u64, u64)> {
    let mut keep = Vec::with_capacity(used.len() + 1);
    keep.push((0, 1));
    keep.extend(used.iter().map(|&(b, n)| (b.get(), n)));
    keep
}

impl BlockTier {
    /// A mounted tier on `dev`, with its space and checksums.
    pub fn new(
        id: TierId,
        kind: terrace_format::TierKind,
        dev: Arc<dyn BlockMedia>,
        mut space: ExtentSpace,
        sums: crate::sums::BlockSums,
    ) -> BlockTier {
        // Object tiers keep the plain rule (a released block stays dead
        // until its part empties): their parts are uploaded whole and
        // their cleaning plans by part.
        if kind == terrace_format::TierKind::S3 {
            space.keep_released_blocks_dead();
        }
        // A failed sync must reach every thread whose unsynced writes it
        // may have lost (Linux tells one fsync only).
        let closable = Arc::new(Closable::new(PerWriterSync::new(dev)));
        BlockTier {
            id,
            kind,
            media: closable.clone(),
            closable,
            space,
            sums,
            full: Default::default(),
        }
    }

    /// Free blocks new data may count on: none while its device is full
    /// (`device_full.rs`).
    pub fn room_blocks(&self) -> u64 {
        if self.full.is_full() {
            0
        } else {
            self.space.free_blocks()
        }
    }

    /// Whether allocations on the tier wait now because its device is full
    /// (one try per back-off wait gets through; `device_full.rs`).
    pub fn refuses_allocation(&self) -> bool {
        self.full
            .refuses(std::time::Instant::now(), || self.media.host_free_bytes())
    }

    /// Whether data meant for a tier above it whose device is full may go
    /// here instead (migration's drains, log migration): its own device is
    /// not full, it is not an object tier, and it is not being removed.
    pub fn stands_in_for_a_full_tier(&self) -> bool {
        !self.full.is_full()
            && self.kind != terrace_format::TierKind::S3
            && !self.space.is_retiring()
    }

    /// `n` blocks for data ([`ExtentSpace::alloc`]), unless its device is
    /// full ([`BlockTier::refuses_allocation`]).
    pub fn alloc_data(&self, n: u64) -> Option<Vec<Run>> {
        if self.refuses_allocation() {
            return None;
        }
        self.space.alloc(n)
    }

    /// Closes the tier's media once the requests in flight are done (the
    /// tier was removed from the pool): its file or connections go, and
    /// later requests fail. The tier itself stays valid memory.
    pub(crate) fn close_media(&self) {
        self.closable.close();
    }

    /// Frees blocks: trims them on the media (an object tier deletes parts
    /// left without a live block), then gives them back to the space. Call
    /// only once the commit that freed them is durable (or for blocks no
    /// commit ever referenced). The trim comes first: once released, the
    /// blocks may be allocated and written again, and a later trim would
    /// drop that new data. A failed trim only leaves space taken (until the
    /// next mount's `retain_only`), so it is ignored.
    pub fn free(&self, block: PhysBlock, blocks: u64) {
        let _ = self.media.trim(block.get(), blocks);
        self.space.release(block, blocks);
    }
}
