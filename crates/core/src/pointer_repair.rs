//! Correcting a damaged word that links a PM log (`fsck --repair`).
//!
//! A state-1 slot's tail word (since format version 3), its head word and
//! every log page's `next` word (since version 12) carry a 16-bit check of
//! the PM offset they hold (`terrace_format::encode_page_pointer`). A word
//! whose check fails was damaged, most often by a flipped bit or two.
//! Repair takes the word nearest to the stored one — fewest differing bits, at most
//! [`MAX_FLIPPED_BITS`] — whose check holds and with which the log walks
//! from its head to its tail (page owners and entry checksums included).
//! Only a unique nearest word is taken. The check is what tells the true
//! offset from a later page of the same log (or a tail from an earlier
//! entry's end), which also walks: such a word differs from the stored one
//! in about half of its 16 check bits. When no word qualifies, repair does
//! what it does with any unreadable log: a damaged head or tail frees the
//! slot, a damaged `next` truncates the log after the last entry before it.
//!
//! A state-2 slot (its log is one blob on a block tier) has a tail word
//! that holds the blob's length with the same check; a length is taken when
//! the blob reads back whole with it (magic, owner, generation, length and
//! checksum). Its head word has no check: the blob it names checks itself.

use crate::log::walk;
use crate::recovery::{LogWord, Overlay, TierDevices};
use crate::recovery_blobs::{blob_fits_its_place, read_log_blob, BlobBlocks};
use std::ops::Range;
use terrace_format::{decode_tier_log_head, encode_page_pointer, InodeSlot, INODE_OFF_LOG_HEAD};
use terrace_format::{INODE_OFF_LOG_TAIL, INODE_OFF_STATE, INODE_SIZE, INODE_USED};
use terrace_format::{INODE_USED_TIER_LOG, LOG_PAGE_MIN, PAGE_POINTER_OFFSET_MASK};
use terrace_media::PmMedia;

/// The most bits in which a corrected word may differ from the stored one.
pub const MAX_FLIPPED_BITS: u32 = 2;

/// Bits of a pointer word that hold the PM offset (the check is above them).
const OFFSET_BITS: u32 = PAGE_POINTER_OFFSET_MASK.count_ones();

/// The word to store as `word` of the log of inode `ino`, whose slot is at
/// PM offset `slot`, so that the log reads whole: walks from its head to
/// its tail, or (state 2) its blob on `tiers` decodes. The unique nearest
/// such word within [`MAX_FLIPPED_BITS`] of the stored one. `pool` is the
/// byte range log pages lie in. Returns the word's PM offset and the word,
/// or None when there is no such word, or more than one.
pub fn corrected_word(
    media: &dyn PmMedia,
    tiers: &TierDevices,
    ino: u64,
    slot: u64,
    word: LogWord,
    pool: Range<u64>,
) -> Option<(u64, u64)> {
    let (at, is_page) = match word {
        LogWord::Head => (slot + INODE_OFF_LOG_HEAD, true),
        LogWord::Tail => (slot + INODE_OFF_LOG_TAIL, false),
        LogWord::Next(at) => (at, true),
    };
    // A state-2 tail is a length, not a PM offset.
    let blob_length = media.load_u64(slot + INODE_OFF_STATE) == INODE_USED_TIER_LOG;
    let stored = media.load_u64(at);
    let offset = stored & PAGE_POINTER_OFFSET_MASK;
    let mut blobs = BlobBlocks::default();
    // (distance, word) of the nearest word found, and whether another word
    // lies at that distance.
    let mut best: Option<(u32, u64)> = None;
    let mut tied = false;
    for candidate in within_two_bits(offset) {
        // A tail may be 0: an inode without a log (its slot says it all).
        let empty_tail = !is_page && candidate == 0;
        let placed = if blob_length {
            candidate != 0
        } else {
            (!is_page || candidate % LOG_PAGE_MIN == 0) && (pool.contains(&candidate) || empty_tail)
        };
        if !placed {
            continue;
        }
        // Tails, heads and `next` words carry the same check.
        let fixed = encode_page_pointer(candidate);
        let distance = (fixed ^ stored).count_ones();
        if distance > MAX_FLIPPED_BITS || best.is_some_and(|(d, _)| distance > d) {
            continue;
        }
        let reads_whole = if blob_length {
            blob_reads_whole(media, tiers, &mut blobs, ino, slot, at, fixed)
        } else {
            walks_to_its_tail(media, ino, slot, at, fixed, pool.clone())
        };
        if !reads_whole {
            continue;
        }
        match best {
            Some((d, _)) if d == distance => tied = true,
            _ => {
                best = Some((distance, fixed));
                tied = false;
            }
        }
    }
    best.filter(|_| !tied).map(|(_, fixed)| (at, fixed))
}

/// `offset`, and every value that differs from it in one or two of the
/// offset bits.
fn within_two_bits(offset: u64) -> impl Iterator<Item = u64> {
    let one = (0..OFFSET_BITS).map(move |i| offset ^ 1 << i);
    let two = (0..OFFSET_BITS)
        .flat_map(move |i| (i + 1..OFFSET_BITS).map(move |j| offset ^ 1 << i ^ 1 << j));
    std::iter::once(offset).chain(one).chain(two)
}

/// True when, with `word` stored at `at`, the slot at `slot` decodes as a
/// state-1 slot and its log walks from head to tail (at once when empty).
fn walks_to_its_tail(
    media: &dyn PmMedia,
    ino: u64,
    slot: u64,
    at: u64,
    word: u64,
    pool: Range<u64>,
) -> bool {
    let view = with_word(media, at, word);
    match slot_in(&view, slot) {
        // An empty log (tail 0) walks at once.
        Some(s) if s.state == INODE_USED => walk(&view, ino, s.log_head, s.log_tail, pool).is_ok(),
        _ => false,
    }
}

/// `media` as it would read with `word` stored at `at`.
fn with_word(media: &dyn PmMedia, at: u64, word: u64) -> Overlay<'_> {
    Overlay {
        inner: media,
        words: [(at, word)].into_iter().collect(),
    }
}

/// The slot at PM offset `slot` of `view`, when it decodes.
fn slot_in(view: &Overlay<'_>, slot: u64) -> Option<InodeSlot> {
    let mut raw = [0u8; INODE_SIZE];
    view.read(slot, &mut raw);
    InodeSlot::decode(&raw).ok()
}

/// True when, with `word` stored at `at`, the slot at `slot` decodes as a
/// state-2 slot whose log blob reads back whole from `tiers`.
fn blob_reads_whole(
    media: &dyn PmMedia,
    tiers: &TierDevices,
    blobs: &mut BlobBlocks,
    ino: u64,
    slot: u64,
    at: u64,
    word: u64,
) -> bool {
    let Some(s) = slot_in(&with_word(media, at, word), slot) else {
        return false;
    };
    let (tier, block, offset) = decode_tier_log_head(s.log_head);
    s.state == INODE_USED_TIER_LOG
        && blob_fits_its_place(offset, s.log_tail)
        && matches!(
            read_log_blob(
                tiers,
                blobs,
                ino,
                s.generation,
                (tier, block, offset, s.log_tail)
            ),
            Ok(Some(_))
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_are_the_offset_and_every_one_or_two_bit_change_of_it() {
        let all: Vec<u64> = within_two_bits(4096).collect();
        assert_eq!(all.len(), 1 + 48 + 48 * 47 / 2);
        assert_eq!(all[0], 4096);
        assert!(all.iter().all(|c| (c ^ 4096).count_ones() <= 2));
        let mut unique = all.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), all.len());
    }
}
