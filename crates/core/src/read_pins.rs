//! Reads of block-tier data without the inode lock (issue 16 point 3).
//!
//! A `read()` captures, under the file's inode lock, where each of its
//! blocks lives, then reads the block-tier blocks with the lock dropped, so
//! readers of one file (a database) no longer queue behind each other's
//! device I/O. What makes that safe is that the blocks it reads cannot be
//! freed — and so reused and rewritten — while it reads them:
//!
//! - a reader takes a pin ([`ReadPins::enter`]) *before* it drops the inode
//!   lock, i.e. while the file's extent map still references the blocks;
//! - [`Fs::free_runs`](crate::fs::Fs::free_runs) hands block-tier runs to
//!   [`ReadPins::defer_or_free`], which keeps them aside while any pin is
//!   held; the last reader out frees them (allocator and DRAM cache pages);
//! - every free happens after the blocks left their extent map (under the
//!   same inode lock as a capture), so a reader either pinned before the
//!   blocks left the map — and the free waits for it — or captured after,
//!   and never saw them.
//!
//! The read is thus linearised at its capture: it returns the file's
//! content as of that moment, as a read under the lock would have.
//!
//! Bounded delay: while frees are deferred, no new pin is given
//! ([`ReadPins::enter`] returns `None` and the reader reads under its lock,
//! as before), so the pins held drain within one device read each and the
//! deferred runs are freed then. A writer refused for room waits for them
//! ([`ReadPins::wait_deferred`], from `retry_freeing_room`).
//!
//! A write into preallocated blocks (`ops_prealloc_write.rs`) rewrites
//! blocks in place, which nothing else does: it holds an exclusion
//! ([`ReadPins::exclude`]) while it writes, which gives no new pin and
//! first waits for the pins held to go, so no unlocked reader can be
//! reading the blocks it overwrites (readers then read under their own
//! inode lock, and the writer holds the lock of the file it writes).
//!
//! PM blocks are never read this way: PM reads are memory copies, done
//! under the lock, and PM frees are never deferred.
//!
//! Lock order: the pin state is a leaf (design.md §4a); runs are freed after
//! it is released.

use crate::lock_order::{Mutex, Rank};
use parking_lot::Condvar;
use std::time::Duration;

use crate::extent_map::Released;

/// Pins of unlocked readers and the block-tier runs freed while they read.
pub struct ReadPins {
    state: Mutex<PinState>,
    drained: Condvar,
}

impl Default for ReadPins {
    fn default() -> ReadPins {
        ReadPins {
            state: Mutex::new(Rank::leaf("read pins"), PinState::default()),
            drained: Condvar::new(),
        }
    }
}

#[derive(Default)]
struct PinState {
    /// Readers reading block-tier blocks without their inode lock.
    readers: usize,
    /// Runs freed while readers were in; freed by the last one out.
    deferred: Vec<Released>,
    /// Exclusions held ([`ReadPins::exclude`]): no pin is given meanwhile.
    excluded: usize,
}

/// While it lives, no reader reads block-tier blocks without its inode
/// lock ([`ReadPins::exclude`]).
pub struct ReadExclusion<'a> {
    pins: &'a ReadPins,
}

impl Drop for ReadExclusion<'_> {
    fn drop(&mut self) {
        self.pins.state.lock().excluded -= 1;
    }
}

/// A reader's pin: while it lives, no block-tier block is freed.
pub struct ReadPin<'a> {
    pins: &'a ReadPins,
    free: &'a dyn Fn(Vec<Released>),
}

impl ReadPins {
    /// A pin for a reader about to drop its inode lock, or `None` while
    /// frees are deferred (the reader then reads under its lock). `free`
    /// frees runs for real; the last pin out calls it.
    pub fn enter<'a>(&'a self, free: &'a dyn Fn(Vec<Released>)) -> Option<ReadPin<'a>> {
        let mut s = self.state.lock();
        if !s.deferred.is_empty() || s.excluded > 0 {
            return None;
        }
        s.readers += 1;
        Some(ReadPin { pins: self, free })
    }

    /// Keeps `runs` aside while any pin is held; otherwise gives them back
    /// to be freed now.
    pub fn defer_or_free(&self, runs: Vec<Released>) -> Vec<Released> {
        if runs.is_empty() {
            return runs;
        }
        let mut s = self.state.lock();
        if s.readers == 0 {
            return runs;
        }
        s.deferred.extend(runs);
        Vec::new()
    }

    /// Waits (at most `limit`) until no free is deferred; whether any was.
    pub fn wait_deferred(&self, limit: Duration) -> bool {
        let mut s = self.state.lock();
        if s.deferred.is_empty() {
            return false;
        }
        let _ = self
            .drained
            .wait_while_for(s.condvar_guard(), |s| !s.deferred.is_empty(), limit);
        true
    }

    /// Stops giving pins, then waits until every pin held has gone: while
    /// the returned exclusion lives, no reader reads block-tier data
    /// without its inode lock. The caller may hold one inode lock (pinned
    /// readers hold none); the wait lasts one device read per reader in.
    pub fn exclude(&self) -> ReadExclusion<'_> {
        let mut s = self.state.lock();
        s.excluded += 1;
        self.drained
            .wait_while(s.condvar_guard(), |s| s.readers > 0);
        ReadExclusion { pins: self }
    }

    /// Blocks whose free is deferred now.
    pub fn deferred_blocks(&self) -> u64 {
        self.state.lock().deferred.iter().map(|r| r.2).sum()
    }
}

impl Drop for ReadPin<'_> {
    fn drop(&mut self) {
        let runs = {
            let mut s = self.pins.state.lock();
            s.readers -= 1;
            if s.readers > 0 {
                return;
            }
            if s.excluded > 0 {
                self.pins.drained.notify_all();
            }
            std::mem::take(&mut s.deferred)
        };
        if !runs.is_empty() {
            (self.free)(runs);
            self.pins.drained.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use terrace_format::{PhysBlock, TierId};

    #[test]
    fn runs_freed_while_a_reader_is_in_wait_for_the_last_reader_out() {
        let pins = ReadPins::default();
        let freed = RefCell::new(Vec::new());
        let free = |r: Vec<Released>| freed.borrow_mut().extend(r);
        assert_eq!(
            pins.defer_or_free(vec![(TierId(1), PhysBlock(10), 2)]),
            vec![(TierId(1), PhysBlock(10), 2)]
        );
        let a = pins.enter(&free).unwrap();
        let b = pins.enter(&free).unwrap();
        assert!(pins
            .defer_or_free(vec![(TierId(1), PhysBlock(20), 3)])
            .is_empty());
        assert_eq!(pins.deferred_blocks(), 3);
        assert!(pins.enter(&free).is_none(), "no new pin while frees wait");
        drop(a);
        assert!(freed.borrow().is_empty(), "one reader still in");
        drop(b);
        assert_eq!(*freed.borrow(), vec![(TierId(1), PhysBlock(20), 3)]);
        assert_eq!(pins.deferred_blocks(), 0);
        assert!(pins.enter(&free).is_some());
    }

    #[test]
    fn an_exclusion_waits_for_the_pins_held_and_gives_none_while_it_lives() {
        let pins = ReadPins::default();
        let free = |_: Vec<Released>| {};
        let reader_out = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let pin = pins.enter(&free).unwrap();
            let excluder = s.spawn(|| {
                let x = pins.exclude();
                assert!(
                    reader_out.load(std::sync::atomic::Ordering::SeqCst),
                    "the exclusion began while a reader was in"
                );
                assert!(pins.enter(&free).is_none(), "no pin under an exclusion");
                drop(x);
                assert!(pins.enter(&free).is_some(), "pins again after it");
            });
            std::thread::sleep(Duration::from_millis(100));
            reader_out.store(true, std::sync::atomic::Ordering::SeqCst);
            drop(pin);
            excluder.join().unwrap();
        });
    }
}
