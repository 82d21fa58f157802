//! `fsck` on a block tier whose header (block 0) is damaged or blank: every
//! field of the header is in the pool's superblock record of the tier, so
//! `--repair` writes it again — but only when the device at the tier's path
//! holds the pool's tier, judged from the pool's own records of what lies
//! there (`terrace_core::tier_identity`, with the pool's other tiers, whose
//! logs map data on this one). A check without `--repair` says which of
//! the two it is, and goes on checking with the device when it is the tier.
//!
//! Never written: a block 0 that holds a file system, a swap area or a
//! partition table (someone's data, whatever else matches); a header whose
//! magic is intact but names another pool; a tier whose data could not be
//! compared although the pool records some there (or may: logs on a tier
//! not given). With nothing recorded there, the header is written only
//! when block 0 is blank or still names this pool and tier. A block
//! device is written only when no one has it open exclusively (mounted).

use crate::util;
use std::io;
use std::path::Path;
use std::sync::Arc;
use terrace_format::{Superblock, TierHeader, TierId, TierRecord, BLOCK_SIZE, TIER_MAGIC};
use terrace_media::{BlockFile, BlockMedia, PmMedia};

/// Log blobs, and separately data blocks, compared at most.
const COMPARED: u64 = 64;
/// Bytes read from the start of the device to recognise what it holds
/// (btrfs's magic lies past 64 KiB).
const HEAD_BYTES: usize = 68 << 10;

/// What fsck does with a tier whose header is damaged or blank.
pub enum Judged {
    /// The device is the pool's tier: check (and repair) the pool with it.
    /// `problem` when the header is still damaged (no `--repair`),
    /// `repaired` when it was written again.
    Usable {
        /// The opened device.
        dev: Arc<dyn BlockMedia>,
        /// What the report lists as a problem.
        problem: Option<String>,
        /// What the report lists as a repair.
        repaired: Option<String>,
    },
    /// Not used: the problem line.
    Refused(String),
}

/// Judges tier `t` of the pool on `pm` (superblock `sb`), whose header
/// `tier_check::header_is_damaged`, with the pool's block tiers that
/// passed their checks (`others`), and with `repair` writes its header
/// again when the device is the tier.
pub fn judge(
    t: &TierRecord,
    sb: &Superblock,
    pm: &dyn PmMedia,
    repair: bool,
    others: &[(u8, Arc<dyn BlockMedia>)],
) -> Judged {
    let what = format!("tier {} ({}) {}", t.id, t.kind.name(), t.path);
    let path = Path::new(&t.path);
    let refuse = |why: String| {
        Judged::Refused(format!(
            "{what}: its header is damaged or blank, and is not written again: {why}"
        ))
    };
    let head = match util::read_head(path, HEAD_BYTES) {
        Ok(h) => h,
        Err(e) => return refuse(util::os_reason(&e)),
    };
    if let Some(held) = foreign_content(&head, sb) {
        return refuse(format!(
            "the device holds {held}; put the tier's own device or image back at {}",
            t.path
        ));
    }
    match util::media_len(path) {
        Ok(len) if len >= t.size => {}
        Ok(len) => {
            return refuse(format!(
            "it is {len} bytes, shorter than the tier's {} bytes (truncated): restore the image",
            t.size
        ))
        }
        Err(e) => return refuse(util::os_reason(&e)),
    }
    let opened = if repair {
        BlockFile::open(path)
    } else {
        BlockFile::open_read_only(path)
    };
    let dev: Arc<dyn BlockMedia> = match opened {
        Ok(f) => Arc::new(f),
        Err(e) => {
            return refuse(match crate::tier_check::read_only_refusal(path, &e) {
                Some(line) if repair => format!("{} {line}", t.path),
                _ => util::os_reason(&e),
            })
        }
    };
    let ev = match terrace_core::tier_identity::tier_evidence(
        pm,
        (TierId(t.id), dev.clone()),
        others,
        COMPARED,
    ) {
        Ok(ev) => ev,
        Err(e) => return refuse(e.to_string()),
    };
    let blank = head[..BLOCK_SIZE as usize].iter().all(|&b| b == 0);
    let names_tier = head[..8] == TIER_MAGIC
        && head[8..24] == sb.uuid
        && head[24] == t.id
        && head[25] == t.kind as u8;
    let (is_tier, why) = if ev.checked() > 0 {
        (ev.convincing(), ev.describe())
    } else if ev.recorded || ev.unknown {
        (
            false,
            if ev.unknown {
                "logs on a tier that was not given may map data there; check with every tier present"
            } else {
                "the pool records data there, but none of it could be compared"
            }
            .to_string(),
        )
    } else if names_tier {
        (
            true,
            "the pool records nothing there, and the damaged header still names this pool and tier"
                .into(),
        )
    } else if blank {
        (
            true,
            "the pool records nothing there, and block 0 is blank".into(),
        )
    } else {
        (
            false,
            "the pool records nothing there to compare, and block 0 holds something else".into(),
        )
    };
    if !is_tier {
        return refuse(format!(
            "the device may not be the tier ({why}): put the tier's own device or image back at {}",
            t.path
        ));
    }
    if !repair {
        return Judged::Usable {
            dev,
            problem: Some(format!(
                "{what}: its header is damaged, but the device holds the pool's tier ({why}): `terrace fsck --repair` writes the header again from the pool's record"
            )),
            repaired: None,
        };
    }
    if let Err(e) = not_in_use(path) {
        return refuse(format!(
            "it is in use ({}): unmount it first",
            util::os_reason(&e)
        ));
    }
    let header = TierHeader {
        pool_uuid: sb.uuid,
        id: t.id,
        kind: t.kind,
        size: t.size,
        extent_size: t.extent_size,
        epoch: t.epoch,
    };
    if let Err(e) = dev
        .write_blocks(0, &header.encode())
        .and_then(|()| dev.sync())
    {
        return refuse(format!("writing it failed: {}", util::os_reason(&e)));
    }
    Judged::Usable {
        dev,
        problem: None,
        repaired: Some(format!(
            "{what}: header was damaged; written again from the pool's record ({why})"
        )),
    }
}

/// What the start of a device holds that is someone's data, never a
/// damaged tier header to overwrite: a file system, a swap area, a
/// partition table or boot sector, or a tier header of another pool.
fn foreign_content(head: &[u8], sb: &Superblock) -> Option<String> {
    if head.len() < BLOCK_SIZE as usize {
        return Some("less than one block".into());
    }
    match util::detect_content(head) {
        Some("a block tier of a Terrace pool") if head[8..24] != sb.uuid => {
            return Some(format!(
                "a damaged tier header of another pool ({})",
                util::fmt_uuid(head[8..24].try_into().expect("16 bytes"))
            ))
        }
        Some("a block tier of a Terrace pool") | None => {}
        Some(other) => return Some(other.to_string()),
    }
    (head[510..512] == [0x55, 0xAA]).then(|| "a partition table or boot sector".to_string())
}

/// Fails when `path` is a block device that something holds exclusively (a
/// mounted file system, another pool's daemon): O_EXCL on a block device
/// asks the kernel exactly that. A regular file has no such claim; its
/// pool's lock (held by fsck) covers it.
fn not_in_use(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    if !std::fs::metadata(path)?.file_type().is_block_device() {
        return Ok(());
    }
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_EXCL)
        .open(path)
        .map(drop)
}
