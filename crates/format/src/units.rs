//! Typed positional numbers: tier ids, file blocks and physical blocks.
//!
//! The three are all small integers on media and were easy to swap where a
//! function takes several of them in a row (`(tier, block, n)`,
//! `(file_block, block, blocks)`). Each has its own type here, so the
//! compiler catches a swap:
//!
//! - [`TierId`]: a tier's id in the superblock's tier list (0 is PM).
//! - [`FileBlock`]: the index of a block within a file (file offset /
//!   [`crate::BLOCK_SIZE`]).
//! - [`PhysBlock`]: the address of a block on a tier's device (on PM, the
//!   block of the PM file).
//!
//! Block *counts* stay plain `u64`. They are `#[repr(transparent)]` and the
//! byte layout of every structure is unchanged: entries encode and decode
//! them with [`TierId::get`] and friends at the format boundary.
//!
//! Arithmetic: `block + n` and `block - n` (a count) give a block of the
//! same kind and `b - a` (two blocks) gives the count between them; like
//! plain integers they panic on overflow in debug builds. Bounds computed
//! from values read off the media use the checked forms
//! ([`PhysBlock::checked_add`], [`PhysBlock::checked_end`]).

use std::fmt;
use std::ops::{Add, AddAssign, Sub, SubAssign};

/// Id of a tier in the pool's tier list; [`TierId::PM`] (0) is the PM tier.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct TierId(pub u8);

impl TierId {
    /// The PM tier (id 0).
    pub const PM: TierId = TierId(0);

    /// The tier with id `id`.
    pub const fn new(id: u8) -> TierId {
        TierId(id)
    }

    /// The id as stored on media.
    pub const fn get(self) -> u8 {
        self.0
    }

    /// Whether this is the PM tier.
    pub const fn is_pm(self) -> bool {
        self.0 == 0
    }

    /// The id as an index into a per-tier array (`[_; MAX_TIERS]`).
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for TierId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl From<TierId> for u8 {
    fn from(t: TierId) -> u8 {
        t.0
    }
}

impl From<TierId> for u64 {
    fn from(t: TierId) -> u64 {
        u64::from(t.0)
    }
}

/// A block number with its arithmetic: `$name + u64`, `$name - u64`,
/// `$name - $name` (a count), checked forms, `Display` as the number.
macro_rules! block_number {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[repr(transparent)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name(pub u64);

        impl $name {
            /// Block 0.
            pub const ZERO: $name = $name(0);
            /// The largest block number (an open upper bound of ranges).
            pub const MAX: $name = $name(u64::MAX);

            /// Block number `n`.
            pub const fn new(n: u64) -> $name {
                $name(n)
            }

            /// The number as stored on media.
            pub const fn get(self) -> u64 {
                self.0
            }

            /// The block `n` blocks after this one, `None` on overflow.
            pub const fn checked_add(self, n: u64) -> Option<$name> {
                match self.0.checked_add(n) {
                    Some(v) => Some($name(v)),
                    None => None,
                }
            }

            /// The block `n` blocks before this one, `None` below 0.
            pub const fn checked_sub(self, n: u64) -> Option<$name> {
                match self.0.checked_sub(n) {
                    Some(v) => Some($name(v)),
                    None => None,
                }
            }

            /// One past the last block of the run of `n` blocks starting
            /// here, `None` on overflow (a bound read off the media).
            pub const fn checked_end(self, n: u64) -> Option<$name> {
                self.checked_add(n)
            }

            /// The block `n` blocks after this one, saturating at `MAX`.
            pub const fn saturating_add(self, n: u64) -> $name {
                $name(self.0.saturating_add(n))
            }

            /// Blocks from `base` up to this one, `None` when this one is
            /// before `base`.
            pub const fn checked_since(self, base: $name) -> Option<u64> {
                self.0.checked_sub(base.0)
            }

            /// The block holding byte `byte` (`BLOCK_SIZE` bytes a block).
            pub const fn containing(byte: u64) -> $name {
                $name(byte / crate::BLOCK_SIZE)
            }

            /// Byte offset of this block (`BLOCK_SIZE` bytes a block); like
            /// plain integer arithmetic, panics on overflow in debug builds.
            pub const fn byte_offset(self) -> u64 {
                self.0 * crate::BLOCK_SIZE
            }

            /// Byte offset of this block (`BLOCK_SIZE` bytes a block),
            /// `None` on overflow.
            pub const fn checked_byte_offset(self) -> Option<u64> {
                self.0.checked_mul(crate::BLOCK_SIZE)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }

        impl Add<u64> for $name {
            type Output = $name;
            fn add(self, n: u64) -> $name {
                $name(self.0 + n)
            }
        }

        impl AddAssign<u64> for $name {
            fn add_assign(&mut self, n: u64) {
                self.0 += n;
            }
        }

        impl Sub<u64> for $name {
            type Output = $name;
            fn sub(self, n: u64) -> $name {
                $name(self.0 - n)
            }
        }

        impl SubAssign<u64> for $name {
            fn sub_assign(&mut self, n: u64) {
                self.0 -= n;
            }
        }

        /// The number of blocks between two blocks.
        impl Sub<$name> for $name {
            type Output = u64;
            fn sub(self, base: $name) -> u64 {
                self.0 - base.0
            }
        }

        impl From<$name> for u64 {
            fn from(b: $name) -> u64 {
                b.0
            }
        }
    };
}

block_number!(
    /// The index of a block within a file: file offset / `BLOCK_SIZE`.
    FileBlock
);

block_number!(
    /// The address of a block on a tier's device (for PM, the block of the
    /// PM file; for an object tier, the block of its address space).
    PhysBlock
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_keeps_the_kind_and_counts_are_plain() {
        let b = PhysBlock::new(10);
        assert_eq!(b + 5, PhysBlock(15));
        assert_eq!(b - 4, PhysBlock(6));
        assert_eq!(PhysBlock(15) - b, 5u64);
        assert_eq!(PhysBlock::MAX.checked_add(1), None);
        assert_eq!(b.checked_end(2), Some(PhysBlock(12)));
        assert_eq!(FileBlock(3).checked_sub(4), None);
        assert_eq!(FileBlock(7).checked_since(FileBlock(3)), Some(4));
        assert_eq!(FileBlock(3).checked_since(FileBlock(7)), None);
        assert_eq!(PhysBlock(2).checked_byte_offset(), Some(8192));
        assert_eq!(PhysBlock::MAX.checked_byte_offset(), None);
    }

    #[test]
    fn display_is_the_bare_number() {
        assert_eq!(TierId(3).to_string(), "3");
        assert_eq!(FileBlock(42).to_string(), "42");
        assert_eq!(format!("{:>4}", PhysBlock(7)), "   7");
        assert!(TierId::PM.is_pm() && !TierId(1).is_pm());
        assert_eq!(TierId(2).index(), 2);
    }
}
