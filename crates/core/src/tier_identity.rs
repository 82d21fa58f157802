//! Whether a block device whose tier header (block 0, `format/src/tier.rs`)
//! is damaged or blank holds this pool's tier, judged from the pool's own
//! records on PM: the log blobs that log migration moved to the tier and
//! the checksums of the file data there.
//!
//! Every field of a tier header is also in the superblock's tier record
//! (pool uuid, id, kind, size, extent size, epoch), so a damaged header can
//! be written again from the record (`terrace fsck --repair`). What the
//! record cannot say is whether the device now at the tier's path is the
//! tier: a renamed disk or a replaced image holds something else, and
//! writing a header there would hand that device to the pool. This module
//! gives the evidence; the caller decides ([`TierEvidence::convincing`]).
//!
//! Invariants: reads only (the scan runs without repair); a place counts as
//! *matched* only when it proves the device's content was written by this
//! pool — a log blob that decodes with its checksum and names its inode and
//! generation, or a data block whose recorded checksum holds and is not
//! the checksum of a zero block (a blank device would match those).

use crate::recovery::{scan, OpenError, Problem, TierDevices};
use crate::recovery_blobs::{read_log_blob, BlobBlocks};
use std::sync::Arc;
use terrace_format::{decode_tier_log_head, InodeSlot, TierId, BLOCK_SIZE, INODE_SIZE};
use terrace_format::{PhysBlock, INODE_USED_TIER_LOG};
use terrace_media::{BlockMedia, PmMedia};

/// What the pool's records say of a device's content.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TierEvidence {
    /// Places whose content is the pool's: log blobs that decode, data
    /// blocks (other than zeros) whose checksums hold.
    pub matched: u64,
    /// Places whose content is not: blobs that fail to decode or cannot
    /// be read, data blocks whose checksums fail.
    pub contradicted: u64,
    /// The pool records something on the tier (data or log blobs), whether
    /// or not it could be compared.
    pub recorded: bool,
    /// Some logs were on tiers not given, so what the pool records on this
    /// tier is not all known.
    pub unknown: bool,
}

impl TierEvidence {
    /// Places checked.
    pub fn checked(&self) -> u64 {
        self.matched + self.contradicted
    }

    /// The device is the pool's tier beyond reasonable doubt: at least one
    /// place matched, and no fewer than those that did not (a tier with
    /// some damaged blocks still matches mostly; another device matches
    /// nothing, a checksum or blob decoding by chance being 2^-32 rare).
    pub fn convincing(&self) -> bool {
        self.matched > 0 && self.matched >= self.contradicted
    }

    /// "N of M checked places match" for reports.
    pub fn describe(&self) -> String {
        format!(
            "{} of {} places the pool recorded there match",
            self.matched,
            self.checked()
        )
    }
}

/// Checks up to `limit` log blobs and up to `limit` data blocks that the
/// pool on `media` recorded on block tier `tier`, reading them from `dev`.
/// `others` are the pool's other block tiers that could be opened: logs
/// there map data on this tier too (log migration puts every blob on the
/// first block tier).
pub fn tier_evidence(
    media: &dyn PmMedia,
    (tier, dev): (TierId, Arc<dyn BlockMedia>),
    others: &TierDevices,
    limit: u64,
) -> Result<TierEvidence, OpenError> {
    let mut devices: Vec<(u8, Arc<dyn BlockMedia>)> = vec![(tier.get(), dev.clone())];
    devices.extend(others.iter().filter(|(id, _)| *id != tier.get()).cloned());
    let sc = scan(media, &devices, false, &mut |_, _| {})?;
    let mut ev = TierEvidence {
        recorded: sc
            .block_used
            .get(&tier)
            .is_some_and(|runs| !runs.is_empty()),
        unknown: sc
            .problems
            .iter()
            .any(|p| matches!(p, Problem::LogOnMissingTier { .. })),
        ..Default::default()
    };
    let mut inos: Vec<_> = sc.inodes.keys().copied().collect();
    inos.sort_unstable();
    // Log blobs: each names its inode and generation and carries a check.
    let mut blobs = BlobBlocks::default();
    let mut raw = vec![0u8; INODE_SIZE];
    let mut blobs_checked = 0;
    for &ino in &inos {
        if blobs_checked == limit {
            break;
        }
        media.read(sc.slot_offset(ino), &mut raw);
        let Ok(slot) = InodeSlot::decode(&raw) else {
            continue;
        };
        let (on, block, offset) = decode_tier_log_head(slot.log_head);
        if slot.state != INODE_USED_TIER_LOG || on != tier {
            continue;
        }
        ev.recorded = true;
        blobs_checked += 1;
        match read_log_blob(
            &devices,
            &mut blobs,
            ino,
            slot.generation,
            (on, block, offset, slot.log_tail),
        ) {
            Ok(Some(_)) => ev.matched += 1,
            Ok(None) => {}
            Err(_) => ev.contradicted += 1,
        }
    }
    // Data blocks: the first block of each run, until `limit`.
    let Some(sums) = sc.sums.get(&tier) else {
        return Ok(ev);
    };
    let zero = crate::sums::zero_block_crc();
    let mut buf = vec![0u8; BLOCK_SIZE as usize];
    let mut blocks_checked = 0;
    'files: for ino in inos {
        for (_, e) in sc.inodes[&ino].extents.iter() {
            for (t, first, _, _) in e.block_tier_runs() {
                if blocks_checked == limit {
                    break 'files;
                }
                let recorded = sums.get(first);
                if t != tier || recorded.is_none() || recorded == Some(zero) {
                    continue;
                }
                blocks_checked += 1;
                let read = first < PhysBlock(dev.blocks())
                    && dev.read_blocks(first.get(), &mut buf).is_ok();
                match read && sums.check(first, &buf) == Some(true) {
                    true => ev.matched += 1,
                    false => ev.contradicted += 1,
                }
            }
        }
    }
    Ok(ev)
}
