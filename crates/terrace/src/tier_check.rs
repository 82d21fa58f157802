//! Whether a block tier's file or device is the one the pool's superblock
//! names: used by mount (which refuses a pool whose tier fails) and fsck
//! (which reports the tier as a problem and reads nothing from it).

use crate::util;
use std::io;
use std::path::Path;
use terrace_format::{Superblock, TierHeader, TierRecord};

/// Checks tier `t` of the pool with superblock `sb`: its file or device is
/// present, its header names this pool, tier id, kind, size and extent
/// size, and it is at least as long as the tier. The error says what is
/// wrong, starting with the tier's name and path.
pub fn check_tier(t: &TierRecord, sb: &Superblock) -> Result<(), String> {
    let what = format!("tier {} ({}) {}", t.id, t.kind.name(), t.path);
    let p = Path::new(&t.path);
    let head = match util::read_head(p, terrace_format::BLOCK_SIZE as usize) {
        Ok(h) => h,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(format!("{what} is missing")),
        Err(e) => return Err(format!("{what}: {}", util::os_reason(&e))),
    };
    check_header(t, sb, &head)?;
    let len = util::media_len(p).map_err(|e| format!("{what}: {}", util::os_reason(&e)))?;
    if len < t.size {
        return Err(format!(
            "{what} is {len} bytes, shorter than the tier's {} bytes: the image was truncated; restore it (a tier shorter than its size is refused)",
            t.size
        ));
    }
    Ok(())
}

/// Checks the tier header `head` (block 0 of tier `t`) against the pool's
/// superblock `sb`: it names this pool, tier id, kind, size and extent
/// size, and was last stamped by this copy of the PM tier (a stale copy is
/// refused: `terrace_core::tier_epoch`).
pub fn check_header(t: &TierRecord, sb: &Superblock, head: &[u8]) -> Result<(), String> {
    let what = format!("tier {} ({}) {}", t.id, t.kind.name(), t.path);
    let h = match TierHeader::decode(head) {
        Ok(h) => h,
        Err(terrace_format::FormatError::BadMagic) => {
            return Err(format!(
                "{what} holds no Terrace tier header (wrong file or device?)"
            ))
        }
        Err(e) => return Err(format!("{what}: tier header is damaged ({e:?})")),
    };
    if h.pool_uuid != sb.uuid {
        return Err(format!(
            "{what} belongs to another pool ({}, this pool is {})",
            util::fmt_uuid(&h.pool_uuid),
            util::fmt_uuid(&sb.uuid)
        ));
    }
    if h.id != t.id || h.kind != t.kind {
        return Err(format!(
            "{what}: its header says tier {} ({}), the pool expects tier {} ({})",
            h.id,
            h.kind.name(),
            t.id,
            t.kind.name()
        ));
    }
    if h.size != t.size || h.extent_size != t.extent_size {
        return Err(format!(
            "{what}: its header says {} bytes in extents of {}, the pool expects {} in extents of {} (replaced by another image?)",
            h.size, h.extent_size, t.size, t.extent_size
        ));
    }
    if !sb.accepts_tier_epoch(t, h.epoch) {
        return Err(terrace_core::tier_epoch::stale_message(&what));
    }
    Ok(())
}
