//! A block tier whose device said "full": ENOSPC on a write to blocks the
//! pool had allocated, because the device (a thin-provisioned one) or the
//! file system holding its sparse image file has no room left although the
//! pool's own accounting has. One [`DeviceFull`] per block tier
//! ([`crate::tier::BlockTier::full`]); design.md §5s.
//!
//! While a tier is full (an *episode*, from the failed write to the next
//! write to it that succeeds):
//! - its free blocks are no room for new data (`Fs::room_and_dirty_blocks`,
//!   `statfs`): writes that would need it fail with ENOSPC at `write()`, as
//!   on a full ext4, instead of being accepted into the DRAM cache with no
//!   block to go to;
//! - allocations on it (write-back, migration, recycling, log migration)
//!   are refused ([`DeviceFull::refuses`]) except one try per back-off wait,
//!   [`FIRST_WAIT`] doubling to [`MAX_WAIT`]: a full device costs a try a
//!   minute, not a loop of tries (each of which copied the pages of a
//!   write-back first: 16 MiB ten times a second);
//! - an image file's host file system is asked for its free space at each
//!   refused allocation, and by the write-back thread every pass: room
//!   grown by at least [`HOST_GROWTH`] since the last failure ends the
//!   episode at once (an operator freed space, or `fstrim` punched holes);
//!   a device without such a host (a thin-provisioned one) is probed by a
//!   write of one free block when its wait is over
//!   (`Fs::recheck_full_devices`), since a pool that refuses all new data
//!   writes nothing else that could find the room.
//!
//! Invariant: the state changes only under its own lock (a leaf, §4a); the
//! flag [`DeviceFull::is_full`] mirrors `episode.is_some()` for the callers
//! on hot paths, which read it without the lock.

use crate::lock_order::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The wait after the failure that begins an episode.
pub const FIRST_WAIT: Duration = Duration::from_secs(1);
/// The longest wait between tries of a full device.
pub const MAX_WAIT: Duration = Duration::from_secs(60);
/// Growth of the host file system's free space that ends a wait early.
pub const HOST_GROWTH: u64 = 4 << 20;

/// One episode of a full device.
#[derive(Debug, Clone, Copy)]
struct Episode {
    since: Instant,
    /// When an allocation may try the device again.
    next_try: Instant,
    /// The wait before `next_try` (doubles at each try).
    wait: Duration,
    /// The host file system's free bytes at the last failure, if known.
    host_free: Option<u64>,
}

/// What [`DeviceFull::note_full`] and [`DeviceFull::note_write_ok`] tell
/// the caller to log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Nothing new.
    None,
    /// An episode began; it is the `n`-th of the mount.
    Began(u64),
    /// An episode ended after `Duration`.
    Ended(Duration),
}

/// The full-device state of one block tier (see the module docs).
#[derive(Debug, Default)]
pub struct DeviceFull {
    full: AtomicBool,
    episode: Mutex<Option<Episode>>,
    /// Episodes since mount.
    episodes: AtomicU64,
}

/// The state as `status` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FullStatus {
    /// How long the device has been full.
    pub for_how_long: Duration,
    /// How long until the next try (zero: the next allocation tries).
    pub next_try_in: Duration,
}

impl DeviceFull {
    /// Whether the device is full now (a lock-free read).
    pub fn is_full(&self) -> bool {
        self.full.load(Ordering::Relaxed)
    }

    /// Episodes since mount.
    pub fn episodes(&self) -> u64 {
        self.episodes.load(Ordering::Relaxed)
    }

    /// A write to the device failed with ENOSPC at `now`; `host_free` is its
    /// host file system's free space now, if it has one.
    pub fn note_full(&self, now: Instant, host_free: Option<u64>) -> Change {
        let mut e = self.episode.lock();
        match e.as_mut() {
            Some(ep) => {
                // A try failed: wait (the wait doubled when the try began).
                ep.next_try = now + ep.wait;
                ep.host_free = host_free;
                Change::None
            }
            None => {
                *e = Some(Episode {
                    since: now,
                    next_try: now + FIRST_WAIT,
                    wait: FIRST_WAIT,
                    host_free,
                });
                self.full.store(true, Ordering::Relaxed);
                Change::Began(1 + self.episodes.fetch_add(1, Ordering::Relaxed))
            }
        }
    }

    /// A write to the device succeeded at `now`: the episode, if any, ends.
    pub fn note_write_ok(&self, now: Instant) -> Change {
        if !self.is_full() {
            return Change::None;
        }
        let mut e = self.episode.lock();
        self.full.store(false, Ordering::Relaxed);
        match e.take() {
            Some(ep) => Change::Ended(now.saturating_duration_since(ep.since)),
            None => Change::None,
        }
    }

    /// Ends the episode at `now` when the host file system's free space
    /// (`host_free`) has grown by [`HOST_GROWTH`] since the last failure:
    /// room that new data may count on again without a write to prove it
    /// (the write-back thread asks every pass, so a pool that refuses all
    /// new data, and so writes nothing, still notices).
    pub fn end_if_host_grew(&self, now: Instant, host_free: Option<u64>) -> Change {
        if !self.is_full() {
            return Change::None;
        }
        let mut e = self.episode.lock();
        let Some(ep) = *e else {
            return Change::None;
        };
        match (ep.host_free, host_free) {
            (Some(before), Some(after)) if after >= before.saturating_add(HOST_GROWTH) => {
                *e = None;
                self.full.store(false, Ordering::Relaxed);
                Change::Ended(now.saturating_duration_since(ep.since))
            }
            _ => Change::None,
        }
    }

    /// Whether the episode's device has a host file system to ask
    /// ([`DeviceFull::end_if_host_grew`]); else only a write that succeeds
    /// ends it.
    pub fn knows_host(&self) -> bool {
        self.episode.lock().is_some_and(|ep| ep.host_free.is_some())
    }

    /// Whether an allocation on the device is refused at `now`: while full,
    /// until the next try is due or the host file system (`host_free`,
    /// asked only while full) has grown by [`HOST_GROWTH`]. The allocation
    /// let through is the try: the next one waits twice as long, unless
    /// the try's write succeeds ([`DeviceFull::note_write_ok`]).
    pub fn refuses(&self, now: Instant, host_free: impl FnOnce() -> Option<u64>) -> bool {
        if !self.is_full() {
            return false;
        }
        let mut e = self.episode.lock();
        let Some(ep) = e.as_mut() else {
            return false;
        };
        let grown = match (ep.host_free, ep.host_free.and_then(|_| host_free())) {
            (Some(before), Some(after)) => after >= before.saturating_add(HOST_GROWTH),
            _ => false,
        };
        if now < ep.next_try && !grown {
            return true;
        }
        if !grown {
            ep.wait = (ep.wait * 2).min(MAX_WAIT);
        }
        ep.next_try = now + ep.wait;
        false
    }

    /// The state for `status`, or `None` when the device is not full.
    pub fn status(&self, now: Instant) -> Option<FullStatus> {
        if !self.is_full() {
            return None;
        }
        self.episode.lock().map(|ep| FullStatus {
            for_how_long: now.saturating_duration_since(ep.since),
            next_try_in: ep.next_try.saturating_duration_since(now),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn a_full_device_is_tried_once_per_wait_and_the_wait_doubles_up_to_the_max() {
        let d = DeviceFull::default();
        let t0 = Instant::now();
        assert!(!d.refuses(t0, || None));
        assert_eq!(d.note_full(t0, None), Change::Began(1));
        assert!(d.is_full());
        let mut now = t0;
        let mut tries = Vec::new();
        // Ten minutes of allocations every 100 ms, each try failing.
        while now < t0 + s(600) {
            now += Duration::from_millis(100);
            if !d.refuses(now, || None) {
                tries.push(now.duration_since(t0));
                assert_eq!(d.note_full(now, None), Change::None);
            }
        }
        // 1, 3, 7, 15, 31, 63 s, then one a minute.
        let firsts: Vec<u64> = tries.iter().take(6).map(|t| t.as_secs()).collect();
        assert_eq!(firsts, [1, 3, 7, 15, 31, 63]);
        assert!(tries.len() <= 6 + 9, "{} tries in ten minutes", tries.len());
        for w in tries.windows(2).skip(6) {
            assert!(w[1] - w[0] >= MAX_WAIT, "{:?}", w);
        }
    }

    #[test]
    fn room_grown_on_the_host_lets_the_next_allocation_try_at_once() {
        let d = DeviceFull::default();
        let t0 = Instant::now();
        d.note_full(t0, Some(100 << 10));
        let t = t0 + Duration::from_millis(10);
        assert!(d.refuses(t, || Some(1 << 20)), "less than HOST_GROWTH");
        assert!(!d.refuses(t, || Some((100 << 10) + HOST_GROWTH)));
        // That try failed: the host's free space now is the new base.
        d.note_full(t, Some(HOST_GROWTH));
        assert!(d.refuses(t, || Some(HOST_GROWTH + (1 << 20))));
    }

    #[test]
    fn the_host_growing_ends_the_episode_without_a_write_and_a_device_without_a_host_never() {
        let d = DeviceFull::default();
        let t0 = Instant::now();
        d.note_full(t0, Some(1 << 20));
        assert!(d.knows_host());
        assert_eq!(d.end_if_host_grew(t0, Some(2 << 20)), Change::None);
        assert_eq!(
            d.end_if_host_grew(t0 + s(3), Some((1 << 20) + HOST_GROWTH)),
            Change::Ended(s(3))
        );
        assert!(!d.is_full());
        d.note_full(t0, None);
        assert!(!d.knows_host());
        assert_eq!(d.end_if_host_grew(t0, Some(1 << 40)), Change::None);
        assert!(d.is_full());
    }

    #[test]
    fn a_write_that_succeeds_ends_the_episode_and_says_how_long_it_lasted() {
        let d = DeviceFull::default();
        let t0 = Instant::now();
        assert_eq!(d.note_write_ok(t0), Change::None);
        d.note_full(t0, None);
        assert!(d.status(t0 + s(2)).is_some());
        assert_eq!(d.note_write_ok(t0 + s(5)), Change::Ended(s(5)));
        assert!(!d.is_full());
        assert!(!d.refuses(t0 + s(5), || None));
        assert_eq!(d.status(t0 + s(5)), None);
        assert_eq!(d.note_full(t0 + s(6), None), Change::Began(2));
    }
}
