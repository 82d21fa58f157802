//! [`BlockTiers`]: the mounted block tiers, a list of fixed slots that are
//! set once and never freed.
//!
//! A tier may be appended while the pool is mounted (`terrace tier add
//! MOUNTPOINT`, [`crate::Fs::attach_tier`]) and any one removed
//! (`terrace tier remove MOUNTPOINT [TIER]`, [`crate::Fs::detach_tier`]).
//! Readers take no lock: they see the tiers published and not removed, in
//! tier-id order, and a reference to a tier stays valid for the life of the
//! [`crate::Fs`] — a removed tier is only marked removed, its slot is never
//! reused, and a tier attached later (the same id again, or another) takes
//! the next slot. After [`SLOTS`] tiers set since mount the list is full
//! and a further attach is refused until the pool is remounted.
//!
//! Invariants:
//! - Slots `0..len` are set and never change again, except that a slot's
//!   `removed` mark goes from false to true once (never back).
//! - The tiers of slots `0..len` that are not removed have strictly
//!   ascending ids (the visible list). Any visible tier may be removed
//!   (the others keep their ids), and a new tier's id is above every
//!   visible one.
//! - A slot is set before `len` counts it, and a slot is marked removed
//!   before a later slot is set (both with release ordering); readers load
//!   `len` with acquire before they look at slots, so every slot they visit
//!   is set, and a reader that sees a tier attached after a removal also
//!   sees that removal.
//! - Changes are serialised by the tier-change lock
//!   ([`BlockTiers::begin_append`], rank `TierChange`, the first of
//!   docs/design.md §4a), held across the whole attach or detach
//!   (superblock commit included); a reader racing a change sees the list
//!   with or without the tier, never a half-made one.

use crate::lock_order::{Mutex, Rank};
use crate::tier::BlockTier;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;
use terrace_format::{TierId, MAX_TIERS};

/// Slots of the list: tiers mounted, attached and removed since mount, at
/// most (a removed tier keeps its slot).
pub const SLOTS: usize = 4 * MAX_TIERS;

/// Why no tier can be published once the slots are used up.
pub fn slots_used_up() -> String {
    format!(
        "the mounted pool has had {SLOTS} tiers since it was mounted (tiers removed since \
         count too): remount the pool to add more tiers"
    )
}

/// One slot: a tier set once, and whether it was removed since.
#[derive(Default)]
pub struct Slot {
    tier: OnceLock<BlockTier>,
    removed: AtomicBool,
}

impl Slot {
    /// The slot's tier, unless it was removed.
    fn visible(&self) -> Option<&BlockTier> {
        let t = self.tier.get()?;
        (!self.removed.load(Ordering::Acquire)).then_some(t)
    }
}

type SlotGet = for<'a> fn(&'a Slot) -> Option<&'a BlockTier>;

/// An iterator over the visible tiers.
pub type Iter<'a> = std::iter::FilterMap<std::slice::Iter<'a, Slot>, SlotGet>;

/// The mounted block tiers (the PM tier is not one of them).
pub struct BlockTiers {
    slots: [Slot; SLOTS],
    len: AtomicUsize,
    append: Mutex<()>,
}

impl std::fmt::Debug for BlockTiers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.iter().map(|t| (t.id, t.kind)))
            .finish()
    }
}

impl Default for BlockTiers {
    fn default() -> BlockTiers {
        BlockTiers {
            slots: std::array::from_fn(|_| Slot::default()),
            len: AtomicUsize::new(0),
            append: Mutex::new(Rank::TierChange, ()),
        }
    }
}

impl BlockTiers {
    /// The tiers found at mount, sorted by id.
    pub fn from_sorted(tiers: Vec<BlockTier>) -> Result<BlockTiers, String> {
        let list = BlockTiers::default();
        for t in tiers {
            list.push(t)?;
        }
        Ok(list)
    }

    /// Appends a tier whose id is above every visible one. Fails when the
    /// slots are used up or the id is out of order (nothing is changed then).
    pub fn push(&self, tier: BlockTier) -> Result<(), String> {
        self.begin_append().push(tier)
    }

    /// Takes the tier-change lock: the caller checks and commits the change
    /// of the superblock, then publishes it with [`Appending::push`] or
    /// [`Appending::remove`].
    pub fn begin_append(&self) -> Appending<'_> {
        Appending {
            list: self,
            _one: self.append.lock(),
        }
    }

    fn push_locked(&self, tier: BlockTier) -> Result<(), String> {
        let n = self.len.load(Ordering::Acquire);
        if n >= SLOTS {
            return Err(slots_used_up());
        }
        if let Some(last) = self.last() {
            if tier.id <= last.id {
                return Err(format!(
                    "tier {} cannot follow tier {}: ids ascend",
                    tier.id, last.id
                ));
            }
        }
        if self.slots[n].tier.set(tier).is_err() {
            return Err("tier slot already taken".into());
        }
        self.len.store(n + 1, Ordering::Release);
        Ok(())
    }

    /// Whether another tier can be published before a remount.
    pub fn has_free_slot(&self) -> bool {
        self.len.load(Ordering::Acquire) < SLOTS
    }

    /// The visible tiers, in tier-id order.
    pub fn iter(&self) -> Iter<'_> {
        let n = self.len.load(Ordering::Acquire);
        self.slots[..n].iter().filter_map(Slot::visible as SlotGet)
    }

    /// How many tiers are visible.
    pub fn len(&self) -> usize {
        self.iter().count()
    }

    /// Whether the pool has no block tier (PM only).
    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    /// The fastest block tier.
    pub fn first(&self) -> Option<&BlockTier> {
        self.iter().next()
    }

    /// The slowest block tier.
    pub fn last(&self) -> Option<&BlockTier> {
        self.iter().next_back()
    }
}

/// The tier-change lock, held: the tier list cannot change meanwhile.
pub struct Appending<'a> {
    list: &'a BlockTiers,
    _one: crate::lock_order::MutexGuard<'a, ()>,
}

impl<'a> Appending<'a> {
    /// Publishes `tier` (see [`BlockTiers::push`]).
    pub fn push(self, tier: BlockTier) -> Result<(), String> {
        self.list.push_locked(tier)
    }

    /// Takes the visible tier `id` out of the list: readers no longer see
    /// it, the others keep their places (and ids), and a reference already
    /// taken stays valid (the slot keeps it). Returns it, or `None` when no
    /// visible tier has that id.
    pub fn remove(&self, id: TierId) -> Option<&'a BlockTier> {
        let n = self.list.len.load(Ordering::Acquire);
        let slot = self.list.slots[..n]
            .iter()
            .find(|s| s.visible().is_some_and(|t| t.id == id))?;
        slot.removed.store(true, Ordering::Release);
        slot.tier.get()
    }

    /// Takes the last visible tier out of the list ([`Appending::remove`]).
    pub fn remove_last(&self) -> Option<&'a BlockTier> {
        let id = self.list.last()?.id;
        self.remove(id)
    }
}

impl<'a> IntoIterator for &'a BlockTiers {
    type Item = &'a BlockTier;
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tier::ExtentSpace;
    use std::sync::Arc;
    use terrace_format::TierKind;

    fn tier(id: u8) -> BlockTier {
        BlockTier::new(
            TierId(id),
            TierKind::Ssd,
            Arc::new(terrace_media::MemBlock::new(1 << 20)),
            ExtentSpace::new(256, 128, Vec::new()).unwrap(),
            crate::sums::BlockSums::new(256),
        )
    }

    fn ids(list: &BlockTiers) -> Vec<u8> {
        list.iter().map(|t| t.id.get()).collect()
    }

    #[test]
    fn a_removed_tier_is_unseen_but_stays_valid_and_its_id_can_come_back() {
        let list = BlockTiers::from_sorted(vec![tier(1), tier(2)]).unwrap();
        let held = list.last().unwrap();
        let gone = list.begin_append().remove_last().unwrap();
        assert!(std::ptr::eq(held, gone));
        assert_eq!(ids(&list), [1]);
        assert_eq!((list.len(), list.last().map(|t| t.id.get())), (1, Some(1)));
        // The reference taken before the removal still reads its tier.
        assert_eq!(held.id.get(), 2);
        assert_eq!(held.space.extent_blocks(), 128);
        list.push(tier(2)).unwrap();
        assert_eq!(ids(&list), [1, 2]);
        assert!(!std::ptr::eq(list.last().unwrap(), held), "a new slot");
        assert!(list.push(tier(2)).is_err(), "ids ascend");
        list.begin_append().remove_last();
        list.begin_append().remove_last();
        assert!(list.is_empty());
        assert!(list.begin_append().remove_last().is_none());
    }

    #[test]
    fn a_middle_tier_goes_and_the_others_keep_their_ids_and_order() {
        let list = BlockTiers::from_sorted(vec![tier(1), tier(2), tier(3)]).unwrap();
        let held = list.iter().nth(1).unwrap();
        let gone = list.begin_append().remove(TierId(2)).unwrap();
        assert!(std::ptr::eq(held, gone));
        assert_eq!(ids(&list), [1, 3]);
        assert_eq!(held.id.get(), 2, "a reference taken before stays valid");
        assert!(list.begin_append().remove(TierId(2)).is_none(), "gone once");
        assert!(list.push(tier(3)).is_err(), "ids ascend past the last");
        list.push(tier(4)).unwrap();
        assert_eq!(ids(&list), [1, 3, 4]);
        assert_eq!(list.first().map(|t| t.id.get()), Some(1));
        list.begin_append().remove(TierId(1)).unwrap();
        assert_eq!(ids(&list), [3, 4]);
        assert_eq!(list.first().map(|t| t.id.get()), Some(3));
    }

    #[test]
    fn the_slots_run_out_with_a_message_naming_the_remount() {
        let list = BlockTiers::default();
        for _ in 0..SLOTS {
            list.push(tier(1)).unwrap();
            list.begin_append().remove_last().unwrap();
        }
        assert!(!list.has_free_slot());
        let e = list.push(tier(1)).unwrap_err();
        assert!(e.contains("remount the pool to add more tiers"), "{e}");
        assert!(list.is_empty());
    }
}
