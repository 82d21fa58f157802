//! [`BlockTiers`]: the mounted block tiers, a list that only grows.
//!
//! A tier may be appended while the pool is mounted (`terrace tier add
//! MOUNTPOINT`, [`crate::Fs::attach_tier`]); nothing else changes the list
//! until unmount. Readers therefore take no lock: they see the tiers
//! published so far, in tier-id order, and a reference to a tier stays valid
//! for the life of the [`crate::Fs`].
//!
//! Invariants:
//! - Slots `0..len` are set, in ascending tier id, and never change again.
//! - A slot is set before `len` counts it (release store), and readers load
//!   `len` with acquire, so every slot they visit is set.
//! - Appends are serialised by the append lock ([`BlockTiers::begin_append`],
//!   rank `TierChange`, the first of docs/design.md §4a), held across the
//!   whole attach (superblock commit included); a reader racing an append
//!   sees the list with or without the new tier, never a half-made one.

use crate::lock_order::{Mutex, Rank};
use crate::tier::BlockTier;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use terrace_format::MAX_TIERS;

type SlotGet = for<'a> fn(&'a OnceLock<BlockTier>) -> Option<&'a BlockTier>;

/// An iterator over the published tiers.
pub type Iter<'a> = std::iter::FilterMap<std::slice::Iter<'a, OnceLock<BlockTier>>, SlotGet>;

/// The mounted block tiers (the PM tier is not one of them).
pub struct BlockTiers {
    slots: [OnceLock<BlockTier>; MAX_TIERS],
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
            slots: std::array::from_fn(|_| OnceLock::new()),
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

    /// Appends a tier whose id is above every listed one. Fails when the
    /// list is full or the id is out of order (nothing is changed then).
    pub fn push(&self, tier: BlockTier) -> Result<(), String> {
        self.begin_append().push(tier)
    }

    /// Takes the append lock: the caller checks and commits the new tier,
    /// then publishes it with [`Appending::push`].
    pub fn begin_append(&self) -> Appending<'_> {
        Appending {
            list: self,
            _one: self.append.lock(),
        }
    }

    fn push_locked(&self, tier: BlockTier) -> Result<(), String> {
        let n = self.len.load(Ordering::Acquire);
        if n >= MAX_TIERS {
            return Err(format!("a pool has at most {MAX_TIERS} tiers"));
        }
        if let Some(last) = self.last() {
            if tier.id <= last.id {
                return Err(format!(
                    "tier {} cannot follow tier {}: ids ascend",
                    tier.id, last.id
                ));
            }
        }
        if self.slots[n].set(tier).is_err() {
            return Err("tier slot already taken".into());
        }
        self.len.store(n + 1, Ordering::Release);
        Ok(())
    }

    /// The tiers published so far, in tier-id order.
    pub fn iter(&self) -> Iter<'_> {
        let n = self.len.load(Ordering::Acquire);
        self.slots[..n].iter().filter_map(OnceLock::get as SlotGet)
    }

    /// How many tiers are published.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Whether the pool has no block tier (PM only).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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

/// The append lock, held: the tier list cannot change meanwhile.
pub struct Appending<'a> {
    list: &'a BlockTiers,
    _one: crate::lock_order::MutexGuard<'a, ()>,
}

impl Appending<'_> {
    /// Publishes `tier` (see [`BlockTiers::push`]).
    pub fn push(self, tier: BlockTier) -> Result<(), String> {
        self.list.push_locked(tier)
    }
}

impl<'a> IntoIterator for &'a BlockTiers {
    type Item = &'a BlockTier;
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}
