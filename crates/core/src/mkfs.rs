//! Formatting a PM tier as an empty pool (`terrace mkfs`).

use std::time::{SystemTime, UNIX_EPOCH};
use terrace_format::{
    inode_offset, pool_start_block, InodeSlot, Superblock, TierRecord, BLOCK_SIZE, FORMAT_VERSION,
    INODE_SIZE, INODE_USED, JOURNAL_BLOCK, ROOT_INO, SUPERBLOCK_A_BLOCK, SUPERBLOCK_B_BLOCK,
};
use terrace_media::PmMedia;

/// What `mkfs` needs to know.
#[derive(Debug, Clone)]
pub struct FormatParams {
    /// Pool identity (random at mkfs).
    pub uuid: [u8; 16],
    /// Number of inode slots (slot 0 unused); 0 = one per 16 KiB of PM, at least 64.
    pub inode_count: u64,
    /// Tier records, the PM tier first. Its size must equal the media length.
    pub tiers: Vec<TierRecord>,
    /// Owner of the root directory.
    pub root_uid: u32,
    /// Group of the root directory.
    pub root_gid: u32,
}

/// Smallest PM tier `mkfs` accepts.
pub const MIN_PM_SIZE: u64 = 1 << 20;

/// Default inode count for a PM tier of `pm_size` bytes (no block tier).
pub fn default_inode_count(pm_size: u64) -> u64 {
    default_pool_inode_count(pm_size, 0)
}

/// Default inode count of a pool with `pm_size` bytes of PM and
/// `block_bytes` bytes of block tiers: one slot per 16 KiB of PM plus one per
/// 64 KiB of block tiers, at least 64 — and at most one per 2 KiB of PM, so
/// that the inode table (128 bytes a slot, on PM) takes at most 1/16 of PM.
pub fn default_pool_inode_count(pm_size: u64, block_bytes: u64) -> u64 {
    let n = pm_size / (16 << 10) + block_bytes / (64 << 10);
    n.min(pm_size / (2 << 10)).max(64)
}

/// Writes an empty pool: superblocks, cleared journal and inode table, root directory.
pub fn format(media: &dyn PmMedia, p: &FormatParams) -> Result<Superblock, String> {
    let pm_size = media.len();
    if pm_size % BLOCK_SIZE != 0 {
        return Err(format!(
            "PM tier size {pm_size} is not a multiple of {BLOCK_SIZE} bytes"
        ));
    }
    if pm_size < MIN_PM_SIZE {
        return Err(format!(
            "PM tier of {pm_size} bytes is too small (at least {MIN_PM_SIZE} bytes)"
        ));
    }
    let inode_count = if p.inode_count == 0 {
        default_inode_count(pm_size)
    } else {
        p.inode_count.max(2)
    };
    let pool_start = pool_start_block(inode_count);
    let total = pm_size / BLOCK_SIZE;
    if pool_start + 16 > total {
        return Err(format!(
            "{inode_count} inodes leave no room for data in a PM tier of {pm_size} bytes"
        ));
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    // Clear the old superblocks first, so an interrupted mkfs is never mistaken for a pool.
    let zero = vec![0u8; BLOCK_SIZE as usize];
    for b in [SUPERBLOCK_A_BLOCK, SUPERBLOCK_B_BLOCK, JOURNAL_BLOCK] {
        media.write(b * BLOCK_SIZE, &zero);
        media.flush(b * BLOCK_SIZE, BLOCK_SIZE);
    }
    media.fence();
    let table = inode_offset(0);
    let table_len = inode_count * INODE_SIZE as u64;
    let chunk = vec![0u8; 1 << 20];
    let mut off = 0;
    while off < table_len {
        let n = (table_len - off).min(chunk.len() as u64);
        media.write(table + off, &chunk[..n as usize]);
        media.flush(table + off, n);
        off += n;
    }
    let root = InodeSlot {
        log_head: 0,
        log_tail: 0,
        state: INODE_USED,
        mode: libc::S_IFDIR | 0o755,
        uid: p.root_uid,
        gid: p.root_gid,
        generation: 1,
        rdev: 0,
        btime_ns: now.as_nanos() as i64,
        parent_hint: ROOT_INO,
    };
    media.write(inode_offset(ROOT_INO), &root.encode());
    media.flush(inode_offset(ROOT_INO), INODE_SIZE as u64);
    media.fence();
    let mut tiers = p.tiers.clone();
    tiers[0].size = pm_size;
    let sb = Superblock {
        version: FORMAT_VERSION,
        uuid: p.uuid,
        generation: 1,
        pm_size,
        inode_count,
        pool_start,
        pool_blocks: total - pool_start,
        clean: true,
        created_unix: now.as_secs(),
        mount_count: 0,
        last_mount_unix: 0,
        tiers,
        inode_map_blocks: Vec::new(),
        next_tier_epoch: 0,
    };
    write_superblock(media, &sb);
    media
        .sync_all()
        .map_err(|e| format!("cannot persist the new pool: {e}"))?;
    Ok(sb)
}

/// Writes both superblock copies, A then B, each persisted before the next.
pub fn write_superblock(media: &dyn PmMedia, sb: &Superblock) {
    let b = sb.encode();
    for blk in [SUPERBLOCK_A_BLOCK, SUPERBLOCK_B_BLOCK] {
        media.write(blk * BLOCK_SIZE, &b);
        media.persist(blk * BLOCK_SIZE, BLOCK_SIZE);
    }
}
