//! Tier epochs: which copy of the PM tier last used each block tier
//! (design.md §3, "Stale PM tiers").
//!
//! The PM tier is a file — on /dev/shm, on a DAX file system — that can be
//! copied, backed up and restored apart from the block tiers. Two copies
//! share the block tiers' blocks: once one is mounted and writes, the other
//! maps blocks that now hold other data (its reads fail their checksums,
//! EIO) and its writes overwrite data the first copy maps. So each block
//! tier's header and the tier's record in the superblock hold the same
//! random 64-bit *epoch*, and every read-write mount, thaw and clean unmount
//! writes a new one to both. A copy of the PM tier taken at any moment holds
//! an epoch the tiers lose at the next of those events of the copy that goes
//! on, so it is refused when mounted ([`Superblock::accepts_tier_epoch`],
//! checked here at open and by the CLI before anything is opened, and by
//! fsck).
//!
//! This file holds the values and the check; `tier_stamp.rs` the stamping
//! (`Fs::advance_tier_epochs`), in these steps, a crash anywhere leaving
//! every header accepted:
//! 1. the superblock stores the new epoch as `next_tier_epoch` (one a crash
//!    left pending is reused, so a header holds one of at most two values);
//! 2. each stamped tier's header is rewritten with it and synced;
//! 3. the superblock stores it in those tiers' records and clears
//!    `next_tier_epoch`.
//!
//! Stamped: the block tiers mounted with a header of this pool. Not
//! stamped: object tiers (their header object is written once, at mkfs;
//! their epoch stays 0, which agrees with anything), tiers mounted without
//! their device (their record keeps the epoch their header has, so they are
//! accepted when they come back), and in-memory test devices with no header.
//!
//! Cost: two superblock writes and one 4 KiB write and sync per block tier,
//! at mount, thaw and unmount.

use std::sync::Arc;
use terrace_format::{Superblock, TierHeader, TierKind, BLOCK_SIZE};
use terrace_media::BlockMedia;

/// A new epoch: 64 random bits, never 0 (0 means "never stamped").
pub fn new_epoch() -> u64 {
    let mut b = [0u8; 8];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| {
        use std::io::Read;
        f.read_exact(&mut b)
    });
    let v = if read.is_ok() {
        u64::from_le_bytes(b)
    } else {
        // No /dev/urandom: time and process id still differ between two
        // mounts of two copies.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        t.rotate_left(17) ^ u64::from(std::process::id()).wrapping_mul(0x9e37_79b9_7f4a_7c15)
    };
    v.max(1)
}

/// The tier header in block 0 of `dev`, if it holds one — also one that a
/// stamping's write tore, taken with whichever of `epochs` its check was
/// computed for ([`TierHeader::decode_torn`]; the next stamping rewrites it
/// whole).
pub(crate) fn read_header(dev: &dyn BlockMedia, epochs: &[u64]) -> Option<TierHeader> {
    let mut b = vec![0u8; BLOCK_SIZE as usize];
    dev.read_blocks(0, &mut b).ok()?;
    TierHeader::decode_torn(&b, epochs).ok()
}

/// The epochs a header of tier `id` may hold after a stamping cut short:
/// its record's and the pending one.
pub fn known_epochs(sb: &Superblock, id: u8) -> Vec<u64> {
    let rec = sb.tiers.iter().find(|t| t.id == id).map_or(0, |t| t.epoch);
    vec![rec, sb.next_tier_epoch]
}

/// Whether the pool stamps tier `id` of kind `kind` mounted on `dev`, and
/// its header if so: not an object tier, and a header of this pool.
pub(crate) fn stamped_header(
    sb: &Superblock,
    id: u8,
    kind: TierKind,
    dev: &dyn BlockMedia,
) -> Option<TierHeader> {
    if kind == TierKind::S3 {
        return None;
    }
    read_header(dev, &known_epochs(sb, id)).filter(|h| h.pool_uuid == sb.uuid && h.id == id)
}

/// Refuses devices whose headers were stamped by another copy of the PM
/// tier: the message names the tier and what to do.
pub(crate) fn check_devices(
    sb: &Superblock,
    devices: &[(u8, Arc<dyn BlockMedia>)],
) -> Result<(), String> {
    for (id, dev) in devices {
        let Some(rec) = sb.tiers.iter().find(|t| t.id == *id) else {
            continue; // open_pool names a device the pool has no record of
        };
        if let Some(h) = stamped_header(sb, *id, rec.kind, &**dev) {
            if !sb.accepts_tier_epoch(rec, h.epoch) {
                return Err(stale_message(&format!(
                    "tier {id} ({}) {}",
                    rec.kind.name(),
                    rec.path
                )));
            }
        }
    }
    Ok(())
}

/// Why a tier whose header another copy of the PM tier stamped is refused
/// (`what`: "tier 2 (hdd) /path").
pub fn stale_message(what: &str) -> String {
    format!(
        "{what} was last used by another copy of this pool's PM tier: the two are not \
         of the same moment (this PM tier restored from a backup, or a copy of it mounted \
         since; or the tier's image restored from an older backup), and using them \
         together would read and overwrite data this PM tier does not know; mount the \
         PM tier and block tiers that were last used together, or restore all of them \
         from the same backup"
    )
}
