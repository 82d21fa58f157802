//! Whether a block tier's file or device is the one the pool's superblock
//! names: used by mount (which refuses a pool whose tier fails) and fsck
//! (which reports the tier as a problem and reads nothing from it); and
//! what both say when a pool that would be written is read-only.

use crate::util;
use std::fs::{File, OpenOptions};
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

/// What a refusal of a damaged or blank tier header adds.
const MEND_HINT: &str = "`terrace fsck` tells whether the device still holds the pool's tier, \
     and `terrace fsck --repair` then writes its header again from the pool's record";

/// Whether the tier header `head` of tier `t` fails its own check: no
/// magic, or a checksum that fails (a torn stamping is not damage). Such a
/// header may be written again from the pool's record
/// (`tier_header_mend.rs`); one that decodes but names another pool, tier
/// or size is a different device, never rewritten.
pub fn header_is_damaged(t: &TierRecord, sb: &Superblock, head: &[u8]) -> bool {
    matches!(
        TierHeader::decode_torn(head, &terrace_core::tier_epoch::known_epochs(sb, t.id)),
        Err(terrace_format::FormatError::BadMagic | terrace_format::FormatError::BadChecksum)
    )
}

/// Checks the tier header `head` (block 0 of tier `t`) against the pool's
/// superblock `sb`: it names this pool, tier id, kind, size and extent
/// size, and was last stamped by this copy of the PM tier (a stale copy is
/// refused: `terrace_core::tier_epoch`).
pub fn check_header(t: &TierRecord, sb: &Superblock, head: &[u8]) -> Result<(), String> {
    let what = format!("tier {} ({}) {}", t.id, t.kind.name(), t.path);
    let h = match TierHeader::decode_torn(head, &terrace_core::tier_epoch::known_epochs(sb, t.id)) {
        Ok(h) => h,
        Err(terrace_format::FormatError::BadMagic) => {
            return Err(format!(
                "{what} holds no Terrace tier header (wrong file or device? {MEND_HINT})"
            ))
        }
        Err(e) => {
            return Err(format!(
                "{what}: tier header is damaged ({e:?}; {MEND_HINT})"
            ))
        }
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

/// When opening `path` (a pool's PM file or a tier) for writing failed with
/// `e` and the file can be read (a read-only file system or snapshot, an
/// immutable file, no write permission): the one line `fsck --repair` and a
/// read-write mount fail with after the file's name ("is read-only (…):
/// mount it with -o ro, or check it without --repair"). `None`
/// for any other failure, which the caller reports as it is.
pub fn read_only_refusal(path: &Path, e: &io::Error) -> Option<String> {
    // EROFS's kind is compared by value: its name is newer than the MSRV.
    let rofs = io::Error::from_raw_os_error(libc::EROFS).kind();
    if !(e.kind() == rofs || e.kind() == io::ErrorKind::PermissionDenied)
        || File::open(path).is_err()
    {
        return None;
    }
    // The open failed already, so trying it again changes nothing; it gives
    // the OS's reason, which `e` (its message prefixed) no longer carries.
    let why = match OpenOptions::new().read(true).write(true).open(path) {
        Err(e) => util::os_reason(&e),
        Ok(_) => return None,
    };
    Some(format!(
        "is read-only ({why}): mount it with -o ro, or check it without --repair"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_readable_file_that_cannot_be_written_is_read_only() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("pool");
        std::fs::write(&p, b"x").unwrap();
        let rofs = io::Error::from_raw_os_error(libc::EROFS);
        // Writable after all (the error was something else): no refusal.
        assert_eq!(read_only_refusal(&p, &rofs), None);
        let missing = d.path().join("missing");
        assert_eq!(read_only_refusal(&missing, &rofs), None);
        let other = io::Error::from_raw_os_error(libc::EIO);
        assert_eq!(read_only_refusal(&p, &other), None);
    }
}
