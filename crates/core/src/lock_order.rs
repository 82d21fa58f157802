//! The lock order of docs/design.md §4a, checked at run time in debug builds.
//!
//! Every lock of the core that §4a lists is a [`Mutex`] or [`RwLock`] of this
//! module: a `parking_lot` lock that knows its [`Rank`]. In builds with
//! `debug_assertions` (and in release builds with the `lock-order` feature)
//! each thread keeps the ranks it holds, and taking a lock that the order
//! forbids panics *before* blocking — so a test that would deadlock one day
//! fails today, with both locks named. In other release builds the wrappers
//! are plain `parking_lot` locks: no rank is stored, nothing is recorded, every
//! method is an inlined call of the inner lock.
//!
//! # The order (design.md §4a)
//!
//! 0. [`Rank::TierChange`] — a tier being attached to or removed from the
//!    mounted pool (`BlockTiers::begin_append`): taken with no other lock
//!    held.
//! 1. [`Rank::Recycle`] — `Fs::recycle_lock`: one extent-recycling round at
//!    a time (`clean.rs`).
//! 2. [`Rank::Rename`] — `Fs::rename_lock`.
//! 3. [`Rank::Writeback`] — a file's write-back lock (one at a time), or
//!    [`Rank::DrainPicker`] — a migration drain's picker, or
//!    [`Rank::Reshare`] — `Fs::reshare_lock` (never two of them).
//! 4. [`Rank::Inode`] — inode locks; several only in ascending inode number
//!    (`Fs::lock_set`).
//! 5. [`Rank::Room`] — `Fs::room_lock`, or [`Rank::ObjectFetch`] — a
//!    sequential reader's fetch from an object tier (never both).
//! 6. [`Rank::Leaf`] — everything else: while a leaf is held no other lock of
//!    this module is taken, except a PM page-allocator shard under the PM log
//!    slabs ([`Leaf::LogSlabs`] → [`Leaf::PageAllocator`], the only nesting
//!    among leaves).
//!
//! A lock may be taken while holding only locks of a smaller rank (and, for
//! inode locks, smaller inode numbers). `try_lock` cannot deadlock, so it is
//! not checked; a lock it took is recorded like any other, so what is taken
//! under it is checked. A [`Condvar`](parking_lot::Condvar) wait keeps the
//! rank recorded: the thread is blocked meanwhile and holds the lock again
//! when it returns.
//!
//! With the environment variable `TERRACE_LOCK_ORDER_WARN` set, a violation
//! is printed to stderr instead of panicking, so one run of a test suite lists
//! every violation it meets (a survey aid for the integration tests; the
//! crate's unit tests, some of which expect the panic, ignore it).
//!
//! `Default` builds a leaf named after the value's type: the common case
//! (counters, notices, buffer pools in structs that derive `Default`); every
//! other rank is named where the lock is built.

use std::ops::{Deref, DerefMut};

/// Where a lock stands in the order (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rank {
    /// A tier being attached to or removed from the mounted pool
    /// (`tier_list.rs`).
    TierChange,
    /// One extent-recycling round at a time (`Fs::recycle_lock`, `clean.rs`).
    Recycle,
    /// `Fs::rename_lock`.
    Rename,
    /// A file's write-back lock (`PageCache::writeback_lock`).
    Writeback,
    /// A migration drain's picker (`migrate/pass.rs`): held while the next
    /// file is snapshotted under its inode lock. Never with a write-back lock.
    DrainPicker,
    /// `Fs::reshare_lock` (`reshare.rs`): the commit of a move of shared
    /// blocks and the remaps of their other owners. Never with a write-back
    /// lock or a drain picker.
    Reshare,
    /// The lock of inode slot `ino` of the DRAM table.
    Inode(u64),
    /// `Fs::room_lock`.
    Room,
    /// A sequential reader's fetch from an object tier
    /// (`PageCache::object_fetch_lock`); never with the room lock.
    ObjectFetch,
    /// A leaf.
    Leaf(Leaf),
}

/// The leaves: all alike except the one nesting the order allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leaf {
    /// The PM log slabs (`log_space.rs`): may take a page-allocator shard.
    LogSlabs,
    /// A shard of the PM page allocator (`alloc.rs`).
    PageAllocator,
    /// Any other leaf, named for messages.
    Named(&'static str),
}

impl Rank {
    /// A leaf named `name` (for messages).
    pub const fn leaf(name: &'static str) -> Rank {
        Rank::Leaf(Leaf::Named(name))
    }

    #[cfg_attr(not(any(debug_assertions, feature = "lock-order")), allow(dead_code))]
    fn level(self) -> u8 {
        match self {
            Rank::TierChange => 0,
            Rank::Recycle => 1,
            Rank::Rename => 2,
            Rank::Writeback | Rank::DrainPicker | Rank::Reshare => 3,
            Rank::Inode(_) => 4,
            Rank::Room | Rank::ObjectFetch => 5,
            Rank::Leaf(_) => 6,
        }
    }
}

/// Whether `new` may be taken while `held` is held (the order as a rule;
/// compiled in every build, used by the checked ones).
#[cfg_attr(not(any(debug_assertions, feature = "lock-order")), allow(dead_code))]
pub fn allowed(held: Rank, new: Rank) -> bool {
    match (held, new) {
        (Rank::Leaf(Leaf::LogSlabs), Rank::Leaf(Leaf::PageAllocator)) => true,
        (Rank::Leaf(_), _) => false,
        (Rank::Inode(a), Rank::Inode(b)) => a < b,
        _ => held.level() < new.level(),
    }
}

#[cfg(any(debug_assertions, feature = "lock-order"))]
mod held {
    //! The ranks each thread holds, in the order taken, with where each was
    //! taken (for the message).
    use super::{allowed, Rank};
    use std::cell::RefCell;
    use std::panic::Location;

    thread_local! {
        static HELD: RefCell<Vec<(Rank, &'static Location<'static>)>> =
            const { RefCell::new(Vec::new()) };
    }

    /// Panics when taking `new` now would break the order.
    #[track_caller]
    pub(super) fn check(new: Rank) {
        let bad = HELD.with(|h| h.borrow().iter().copied().find(|&(x, _)| !allowed(x, new)));
        if let Some((held, at)) = bad {
            let msg = format!(
                "lock order violated (docs/design.md §4a): taking {new:?} at {} while \
                 holding {held:?} taken at {at}",
                Location::caller()
            );
            // The crate's own unit tests always panic (some expect it).
            if cfg!(not(test)) && std::env::var_os("TERRACE_LOCK_ORDER_WARN").is_some() {
                eprintln!("{msg}");
            } else {
                panic!("{msg}");
            }
        }
    }

    /// A recorded rank; dropping it forgets the rank.
    pub(super) struct Held(Rank);

    impl Held {
        #[track_caller]
        pub(super) fn push(rank: Rank) -> Held {
            let at = Location::caller();
            HELD.with(|h| h.borrow_mut().push((rank, at)));
            Held(rank)
        }
    }

    impl Drop for Held {
        fn drop(&mut self) {
            // Guards may be dropped in any order: forget the latest equal rank.
            let _ = HELD.try_with(|h| {
                let mut h = h.borrow_mut();
                if let Some(i) = h.iter().rposition(|&(r, _)| r == self.0) {
                    h.remove(i);
                }
            });
        }
    }

    /// The ranks this thread holds now (for tests).
    #[cfg(test)]
    pub(super) fn now() -> Vec<Rank> {
        HELD.with(|h| h.borrow().iter().map(|&(r, _)| r).collect())
    }
}

/// A `parking_lot` mutex with a [`Rank`].
pub struct Mutex<T> {
    #[cfg(any(debug_assertions, feature = "lock-order"))]
    rank: Rank,
    inner: parking_lot::Mutex<T>,
}

/// The guard of a [`Mutex`].
pub struct MutexGuard<'a, T> {
    inner: parking_lot::MutexGuard<'a, T>,
    #[cfg(any(debug_assertions, feature = "lock-order"))]
    _held: held::Held,
}

impl<T> Mutex<T> {
    /// A mutex of rank `rank` holding `value`.
    #[inline]
    pub fn new(rank: Rank, value: T) -> Mutex<T> {
        #[cfg(not(any(debug_assertions, feature = "lock-order")))]
        let _ = rank;
        Mutex {
            #[cfg(any(debug_assertions, feature = "lock-order"))]
            rank,
            inner: parking_lot::Mutex::new(value),
        }
    }

    /// Locks it; in checked builds panics first if the order forbids it.
    #[inline]
    #[track_caller]
    pub fn lock(&self) -> MutexGuard<'_, T> {
        #[cfg(any(debug_assertions, feature = "lock-order"))]
        held::check(self.rank);
        self.guard(self.inner.lock())
    }

    /// Locks it without checking the order (recorded all the same). Only
    /// for a lock nobody can hold while waiting for another: see
    /// `Fs::install_inode`.
    #[inline]
    #[track_caller]
    pub fn lock_unchecked(&self) -> MutexGuard<'_, T> {
        self.guard(self.inner.lock())
    }

    /// Locks it if it is free (not checked: it cannot deadlock).
    #[inline]
    #[track_caller]
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        let inner = self.inner.try_lock()?;
        Some(self.guard(inner))
    }

    /// The guard over `inner`, this lock's rank recorded as held.
    #[inline]
    #[track_caller]
    fn guard<'a>(&'a self, inner: parking_lot::MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        MutexGuard {
            inner,
            #[cfg(any(debug_assertions, feature = "lock-order"))]
            _held: held::Held::push(self.rank),
        }
    }

    /// The value, without locking (the mutex is borrowed mutably).
    #[inline]
    pub fn get_mut(&mut self) -> &mut T {
        self.inner.get_mut()
    }

    /// The value.
    #[inline]
    pub fn into_inner(self) -> T {
        self.inner.into_inner()
    }
}

impl<T: Default> Default for Mutex<T> {
    /// A leaf named after `T`.
    fn default() -> Self {
        Mutex::new(Rank::leaf(std::any::type_name::<T>()), T::default())
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl<'a, T> MutexGuard<'a, T> {
    /// The `parking_lot` guard, for a [`Condvar`](parking_lot::Condvar) wait.
    #[inline]
    pub fn condvar_guard(&mut self) -> &mut parking_lot::MutexGuard<'a, T> {
        &mut self.inner
    }
}

impl<T> Deref for MutexGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T> DerefMut for MutexGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}

/// A `parking_lot` reader-writer lock with a [`Rank`]. A thread holding it
/// (even for reading) may not read it again: a writer waiting in between
/// would deadlock the two reads.
pub struct RwLock<T> {
    #[cfg(any(debug_assertions, feature = "lock-order"))]
    rank: Rank,
    inner: parking_lot::RwLock<T>,
}

/// A read guard of a [`RwLock`].
pub struct RwLockReadGuard<'a, T> {
    inner: parking_lot::RwLockReadGuard<'a, T>,
    #[cfg(any(debug_assertions, feature = "lock-order"))]
    _held: held::Held,
}

/// A write guard of a [`RwLock`].
pub struct RwLockWriteGuard<'a, T> {
    inner: parking_lot::RwLockWriteGuard<'a, T>,
    #[cfg(any(debug_assertions, feature = "lock-order"))]
    _held: held::Held,
}

impl<T> RwLock<T> {
    /// A lock of rank `rank` holding `value`.
    #[inline]
    pub fn new(rank: Rank, value: T) -> RwLock<T> {
        #[cfg(not(any(debug_assertions, feature = "lock-order")))]
        let _ = rank;
        RwLock {
            #[cfg(any(debug_assertions, feature = "lock-order"))]
            rank,
            inner: parking_lot::RwLock::new(value),
        }
    }

    /// Locks it for reading; in checked builds panics first if the order
    /// forbids it.
    #[inline]
    #[track_caller]
    pub fn read(&self) -> RwLockReadGuard<'_, T> {
        #[cfg(any(debug_assertions, feature = "lock-order"))]
        held::check(self.rank);
        RwLockReadGuard {
            inner: self.inner.read(),
            #[cfg(any(debug_assertions, feature = "lock-order"))]
            _held: held::Held::push(self.rank),
        }
    }

    /// Locks it for writing; in checked builds panics first if the order
    /// forbids it.
    #[inline]
    #[track_caller]
    pub fn write(&self) -> RwLockWriteGuard<'_, T> {
        #[cfg(any(debug_assertions, feature = "lock-order"))]
        held::check(self.rank);
        RwLockWriteGuard {
            inner: self.inner.write(),
            #[cfg(any(debug_assertions, feature = "lock-order"))]
            _held: held::Held::push(self.rank),
        }
    }
}

impl<T: Default> Default for RwLock<T> {
    /// A leaf named after `T`.
    fn default() -> Self {
        RwLock::new(Rank::leaf(std::any::type_name::<T>()), T::default())
    }
}

impl<T> Deref for RwLockReadGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T> Deref for RwLockWriteGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T> DerefMut for RwLockWriteGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}

#[cfg(test)]
mod rule_tests {
    use super::*;

    #[test]
    fn the_rule_follows_design_4a() {
        let leaf = Rank::leaf("superblock");
        let slabs = Rank::Leaf(Leaf::LogSlabs);
        let shard = Rank::Leaf(Leaf::PageAllocator);
        assert!(allowed(Rank::Rename, Rank::Writeback));
        assert!(allowed(Rank::Rename, Rank::DrainPicker));
        assert!(allowed(Rank::Writeback, Rank::Inode(1)));
        assert!(allowed(Rank::DrainPicker, Rank::Inode(1)));
        assert!(allowed(Rank::Inode(1), Rank::Inode(2)));
        assert!(allowed(Rank::Inode(9), Rank::Room));
        assert!(allowed(Rank::Room, leaf));
        assert!(allowed(slabs, shard));
        assert!(!allowed(Rank::Inode(2), Rank::Inode(1)));
        assert!(!allowed(Rank::Inode(2), Rank::Inode(2)));
        assert!(!allowed(Rank::Writeback, Rank::DrainPicker));
        assert!(!allowed(Rank::DrainPicker, Rank::Writeback));
        assert!(!allowed(Rank::Room, Rank::Inode(1)));
        assert!(!allowed(leaf, leaf));
        assert!(!allowed(leaf, Rank::Room));
        assert!(!allowed(shard, slabs));
        assert!(!allowed(slabs, leaf));
    }

    /// Unchecked builds pay nothing: the wrappers are the plain locks.
    #[cfg(not(any(debug_assertions, feature = "lock-order")))]
    #[test]
    fn unchecked_wrappers_are_the_size_of_the_plain_locks() {
        use std::mem::size_of;
        assert_eq!(
            size_of::<Mutex<u64>>(),
            size_of::<parking_lot::Mutex<u64>>()
        );
        assert_eq!(
            size_of::<MutexGuard<'_, u64>>(),
            size_of::<parking_lot::MutexGuard<'_, u64>>()
        );
        assert_eq!(
            size_of::<RwLock<u64>>(),
            size_of::<parking_lot::RwLock<u64>>()
        );
        assert_eq!(
            size_of::<RwLockReadGuard<'_, u64>>(),
            size_of::<parking_lot::RwLockReadGuard<'_, u64>>()
        );
    }
}

#[cfg(all(test, any(debug_assertions, feature = "lock-order")))]
mod tests {
    use super::*;

    fn slot(ino: u64) -> Mutex<()> {
        Mutex::new(Rank::Inode(ino), ())
    }

    /// Takes a lock of rank `first` and, holding it, one of rank `then`.
    fn lock_in_order(first: Rank, then: Rank) {
        let (a, b) = (Mutex::new(first, ()), Mutex::new(then, ()));
        let _a = a.lock();
        let _b = b.lock();
    }

    #[test]
    fn the_documented_order_passes() {
        let rename = Mutex::new(Rank::Rename, ());
        let wb = Mutex::new(Rank::Writeback, ());
        let (a, b) = (slot(3), slot(7));
        let room = Mutex::new(Rank::Room, ());
        let leaf = Mutex::new(Rank::leaf("cache state"), ());
        let _r = rename.lock();
        let _w = wb.lock();
        let _a = a.lock();
        let _b = b.lock();
        let _room = room.lock();
        let _leaf = leaf.lock();
        assert_eq!(held::now().len(), 6);
    }

    #[test]
    fn log_slabs_may_take_a_page_allocator_shard() {
        lock_in_order(Rank::Leaf(Leaf::LogSlabs), Rank::Leaf(Leaf::PageAllocator));
    }

    #[test]
    fn released_locks_are_forgotten_in_any_order() {
        let (a, b) = (slot(1), slot(2));
        let ga = a.lock();
        let gb = b.lock();
        drop(ga);
        drop(gb);
        assert!(held::now().is_empty());
        // Inode 1 after inode 2 is fine once 2 is released.
        let _b = b.lock();
        drop(_b);
        let _a = a.lock();
    }

    #[test]
    fn try_lock_is_not_checked_but_recorded() {
        let room = Mutex::new(Rank::Room, ());
        let a = slot(1);
        let _room = room.lock();
        let g = a.try_lock().expect("free");
        assert_eq!(held::now(), vec![Rank::Room, Rank::Inode(1)]);
        drop(g);
    }

    #[test]
    #[should_panic(expected = "lock order violated")]
    fn inode_locks_in_descending_order_panic() {
        lock_in_order(Rank::Inode(7), Rank::Inode(3));
    }

    #[test]
    #[should_panic(expected = "lock order violated")]
    fn the_same_inode_twice_panics() {
        let a = slot(3);
        let _a = a.lock();
        let _again = a.lock();
    }

    #[test]
    #[should_panic(expected = "lock order violated")]
    fn rename_under_an_inode_lock_panics() {
        lock_in_order(Rank::Inode(3), Rank::Rename);
    }

    #[test]
    #[should_panic(expected = "lock order violated")]
    fn an_inode_lock_under_the_room_lock_panics() {
        lock_in_order(Rank::Room, Rank::Inode(3));
    }

    #[test]
    #[should_panic(expected = "lock order violated")]
    fn a_lock_under_a_leaf_panics() {
        lock_in_order(Rank::leaf("superblock"), Rank::Room);
    }

    #[test]
    #[should_panic(expected = "lock order violated")]
    fn two_leaves_panic() {
        let a: Mutex<u8> = Mutex::default();
        let b = RwLock::new(Rank::leaf("settings"), ());
        let _a = a.lock();
        let _b = b.read();
    }

    #[test]
    #[should_panic(expected = "lock order violated")]
    fn a_page_allocator_shard_may_not_take_the_log_slabs() {
        lock_in_order(Rank::Leaf(Leaf::PageAllocator), Rank::Leaf(Leaf::LogSlabs));
    }

    #[test]
    #[should_panic(expected = "lock order violated")]
    fn reading_a_rwlock_twice_panics() {
        let settings = RwLock::new(Rank::leaf("settings"), 0u8);
        let _a = settings.read();
        let _b = settings.read();
    }

    #[test]
    #[should_panic(expected = "lock order violated")]
    fn two_writeback_locks_panic() {
        lock_in_order(Rank::Writeback, Rank::Writeback);
    }
}
