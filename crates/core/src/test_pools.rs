//! Pools for the crate's own tests (unit tests that need a mounted `Fs` and
//! its crate-private parts): PM in memory and one SSD tier in memory.

use crate::{format, FormatParams, Fs};
use std::sync::Arc;
use terrace_format::{TierKind, TierRecord, DEFAULT_EXTENT_SIZE};
use terrace_media::{BlockMedia, MemBlock, MemMedia, PmMedia};

/// A pool of PM 16 MiB and an SSD tier (id 1) of 32 MiB with `inodes`
/// slots, mounted; with its media, to remount them.
pub(crate) fn tiered_pool(inodes: u64) -> (Arc<MemMedia>, Arc<MemBlock>, Fs) {
    let pm = Arc::new(MemMedia::new(16 << 20));
    let ssd = Arc::new(MemBlock::new(32 << 20));
    let tier = |id, kind, size, extent_size| TierRecord {
        id,
        kind,
        size,
        extent_size,
        path: "t".into(),
        epoch: 0,
    };
    let params = FormatParams {
        uuid: [3; 16],
        inode_count: inodes,
        tiers: vec![
            tier(0, TierKind::Pm, pm.len(), 0),
            tier(1, TierKind::Ssd, ssd.len(), DEFAULT_EXTENT_SIZE),
        ],
        root_uid: 0,
        root_gid: 0,
    };
    format(&*pm, &params).unwrap();
    let fs = mount_again(&pm, &ssd);
    (pm, ssd, fs)
}

/// Mounts a tiered pool's media (again).
pub(crate) fn mount_again(pm: &Arc<MemMedia>, ssd: &Arc<MemBlock>) -> Fs {
    Fs::mount_with_tiers(
        pm.clone() as Arc<dyn PmMedia>,
        vec![(1, ssd.clone() as Arc<dyn BlockMedia>)],
    )
    .unwrap()
}
