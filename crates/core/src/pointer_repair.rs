//! Correcting a damaged log page pointer (`fsck --repair`).
//!
//! Since format version 12 a state-1 slot's head word and every log page's
//! `next` word carry a 16-bit check of the PM offset they hold
//! (`terrace_format::encode_page_pointer`). A word whose check fails was
//! damaged, most often by a flipped bit or two. Repair takes the word
//! nearest to the stored one — fewest differing bits, at most
//! [`MAX_FLIPPED_BITS`] — whose check holds and with which the log walks
//! from its head to its tail (page owners and entry checksums included).
//! Only a unique nearest word is taken. The check is what tells the true
//! offset from a later page of the same log, which also walks to the tail:
//! such a word differs from the stored one in about half of its 16 check
//! bits. When no word qualifies, repair does what it does with any
//! unreadable log: a damaged head frees the slot, a damaged `next`
//! truncates the log after the last entry before it.

use crate::log::walk;
use crate::recovery::Overlay;
use std::ops::Range;
use terrace_format::{encode_page_pointer, InodeSlot, INODE_OFF_LOG_HEAD, INODE_SIZE, INODE_USED};
use terrace_format::{LOG_PAGE_MIN, LOG_PAGE_OFF_NEXT};
use terrace_media::PmMedia;

/// The most bits in which a corrected word may differ from the stored one.
pub const MAX_FLIPPED_BITS: u32 = 2;

/// Bits of a pointer word that hold the PM offset (the check is above them).
const OFFSET_BITS: u32 = 48;

/// True when the in-use slot bytes `raw` fail to decode only because of
/// their head word: with the head cleared they decode as a state-1 slot
/// with a log.
pub(crate) fn only_the_head_fails(raw: &[u8]) -> bool {
    let Some(raw) = raw.get(..INODE_SIZE) else {
        return false;
    };
    let mut copy = raw.to_vec();
    let head = INODE_OFF_LOG_HEAD as usize;
    copy[head..head + 8].fill(0);
    matches!(InodeSlot::decode(&copy), Ok(s) if s.state == INODE_USED && s.log_tail != 0)
}

/// The word to store at `at` — the head word of the slot at PM offset
/// `slot` (inode `ino`), or the `next` word of one of its log pages — so
/// that the log walks to its tail: the unique nearest such word within
/// [`MAX_FLIPPED_BITS`] of the stored one. `pool` is the byte range log
/// pages lie in. None when there is none, or more than one.
pub fn corrected_pointer(
    media: &dyn PmMedia,
    ino: u64,
    slot: u64,
    at: u64,
    pool: Range<u64>,
) -> Option<u64> {
    debug_assert!(at == slot + INODE_OFF_LOG_HEAD || at % LOG_PAGE_MIN == LOG_PAGE_OFF_NEXT);
    let stored = media.load_u64(at);
    let offset = stored & ((1 << OFFSET_BITS) - 1);
    // (distance, word) of the nearest word found, and whether another word
    // lies at that distance.
    let mut best: Option<(u32, u64)> = None;
    let mut tied = false;
    for candidate in within_two_bits(offset) {
        if candidate % LOG_PAGE_MIN != 0 || !pool.contains(&candidate) {
            continue;
        }
        let word = encode_page_pointer(candidate);
        let distance = (word ^ stored).count_ones();
        if distance > MAX_FLIPPED_BITS || best.is_some_and(|(d, _)| distance > d) {
            continue;
        }
        if !walks_to_its_tail(media, ino, slot, at, word, pool.clone()) {
            continue;
        }
        match best {
            Some((d, _)) if d == distance => tied = true,
            _ => {
                best = Some((distance, word));
                tied = false;
            }
        }
    }
    best.filter(|_| !tied).map(|(_, word)| word)
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
/// state-1 slot and its log walks from head to tail.
fn walks_to_its_tail(
    media: &dyn PmMedia,
    ino: u64,
    slot: u64,
    at: u64,
    word: u64,
    pool: Range<u64>,
) -> bool {
    let view = Overlay {
        inner: media,
        words: [(at, word)].into_iter().collect(),
    };
    let mut raw = [0u8; INODE_SIZE];
    view.read(slot, &mut raw);
    match InodeSlot::decode(&raw) {
        Ok(s) if s.state == INODE_USED && s.log_tail != 0 => {
            walk(&view, ino, s.log_head, s.log_tail, pool).is_ok()
        }
        _ => false,
    }
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
