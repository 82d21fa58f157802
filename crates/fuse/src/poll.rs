//! Adaptive polling of the FUSE device after a reply.
//!
//! A FUSE thread that has answered a request normally goes back to a blocking
//! `read()` of `/dev/fuse` and sleeps. When the application sends its next
//! request a few microseconds later (a `write()` followed by its `fsync()`),
//! the kernel must wake the sleeping thread; on a virtual machine that wake-up
//! is an inter-processor interrupt and costs as much as the rest of the round
//! trip (measured here: one-job 4 KiB write+fsync went from about 21k to 33k
//! IOPS with polling; docs/benchmarks.md).
//!
//! [`RequestPoller`] lets the thread that just replied poll the device without
//! sleeping for up to `window` before it returns to `read()`, so a request that
//! arrives in that time is picked up at once. It is adaptive, so an idle or
//! slowly used mount burns no CPU: a thread polls only when the gap between the
//! previous reply and this request was shorter than the window (requests are
//! arriving back to back). A request stream slower than the window therefore
//! never polls, and a poll that times out costs at most one window.
//!
//! Invariants: polling never delays a reply (it runs after the reply is
//! sent); it stops as soon as the device is readable, reports an error or
//! hang-up (unmounted), or the window has passed; `window == 0` disables it.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Requests are counted in epochs of this many; polling is allowed in the
/// next epoch only when fewer than 1 in [`OVERLAP_LIMIT`] of this epoch's
/// requests arrived while another was being handled. With several request
/// streams at once the CPUs are busy anyway, and a polling thread would take
/// a CPU from an application or another FUSE thread (measured: two fio jobs
/// lost a quarter of their IOPS to polling).
const EPOCH_REQUESTS: u64 = 1024;
/// See [`EPOCH_REQUESTS`].
const OVERLAP_LIMIT: u64 = 20;

/// Shared by all FUSE threads of one session.
pub struct RequestPoller {
    /// A duplicate of the session's `/dev/fuse` descriptor (set once the
    /// session exists). Any clone of the connection sees the same queue.
    device: OnceLock<OwnedFd>,
    /// How long a thread polls after a reply; zero disables polling.
    window: Duration,
    /// Time base for `last_reply_ns`.
    epoch: Instant,
    /// When the last reply was sent, in nanoseconds since `epoch`.
    last_reply_ns: AtomicU64,
    /// Requests being handled now.
    in_flight: AtomicU64,
    /// Requests and overlapping requests (arrived while another was being
    /// handled) in this epoch, packed as `requests << 32 | overlaps`.
    epoch_counts: AtomicU64,
    /// The last full epoch had few overlaps: polling is allowed.
    serial: std::sync::atomic::AtomicBool,
}

/// Taken when a request arrives; polls (if the request stream is dense) when
/// dropped, which is after the handler has replied.
pub struct PollGuard<'a> {
    poller: &'a RequestPoller,
    dense: bool,
}

impl RequestPoller {
    /// A poller with the given window (zero = never poll).
    pub fn new(window: Duration) -> RequestPoller {
        RequestPoller {
            device: OnceLock::new(),
            window,
            epoch: Instant::now(),
            last_reply_ns: AtomicU64::new(u64::MAX),
            in_flight: AtomicU64::new(0),
            epoch_counts: AtomicU64::new(0),
            serial: std::sync::atomic::AtomicBool::new(true),
        }
    }

    /// Gives the poller the session's device (a duplicate it owns).
    pub fn set_device(&self, fd: OwnedFd) {
        let _ = self.device.set(fd);
    }

    /// The polling window.
    pub fn window(&self) -> Duration {
        self.window
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Marks the arrival of a request. Keep the guard alive until the reply
    /// has been sent.
    pub fn arrived(&self) -> PollGuard<'_> {
        let now = self.now_ns();
        let overlapped = self.in_flight.fetch_add(1, Ordering::Relaxed) > 0;
        self.count(overlapped);
        let last = self.last_reply_ns.load(Ordering::Relaxed);
        let dense = !self.window.is_zero()
            && last != u64::MAX
            && now.saturating_sub(last) < self.window.as_nanos() as u64
            && self.serial.load(Ordering::Relaxed);
        PollGuard {
            poller: self,
            dense,
        }
    }

    /// Counts one request in the epoch; at the end of an epoch decides
    /// whether the next one may poll.
    fn count(&self, overlapped: bool) {
        let add = (1u64 << 32) | u64::from(overlapped);
        let c = self.epoch_counts.fetch_add(add, Ordering::Relaxed) + add;
        let (requests, overlaps) = (c >> 32, c & 0xffff_ffff);
        if requests >= EPOCH_REQUESTS
            && self
                .epoch_counts
                .compare_exchange(c, 0, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.serial
                .store(overlaps * OVERLAP_LIMIT < requests, Ordering::Relaxed);
        }
    }

    /// True when a request is waiting (or the device reports an error or
    /// hang-up, which also means the thread should go back to `read()`).
    fn device_ready(fd: &OwnedFd) -> bool {
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // Safety: `p` is one valid, initialised pollfd that lives across the
        // call, and the count passed is 1; a zero timeout never blocks.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n != 0
    }

    /// Polls until a request waits or the window passes. Returns whether a
    /// request was found.
    fn poll_window(&self) -> bool {
        let Some(fd) = self.device.get() else {
            return false;
        };
        let start = Instant::now();
        loop {
            if Self::device_ready(fd) {
                return true;
            }
            if start.elapsed() >= self.window {
                return false;
            }
            std::hint::spin_loop();
        }
    }
}

impl Drop for PollGuard<'_> {
    fn drop(&mut self) {
        let p = self.poller;
        p.last_reply_ns.store(p.now_ns(), Ordering::Relaxed);
        let others = p.in_flight.fetch_sub(1, Ordering::Relaxed) - 1;
        if self.dense && others == 0 {
            p.poll_window();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::FromRawFd;

    fn pipe() -> (OwnedFd, std::fs::File) {
        let mut fds = [0i32; 2];
        // Safety: `fds` has room for the two descriptors pipe(2) returns.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // Safety: both descriptors were just created and are owned by nobody else.
        unsafe {
            (
                OwnedFd::from_raw_fd(fds[0]),
                std::fs::File::from_raw_fd(fds[1]),
            )
        }
    }

    #[test]
    fn a_zero_window_never_polls() {
        let p = RequestPoller::new(Duration::ZERO);
        drop(p.arrived());
        assert!(!p.arrived().dense);
    }

    #[test]
    fn the_first_request_and_requests_after_a_long_gap_do_not_poll() {
        let p = RequestPoller::new(Duration::from_micros(200));
        assert!(!p.arrived().dense, "no reply yet");
        drop(p.arrived());
        std::thread::sleep(Duration::from_millis(5));
        assert!(!p.arrived().dense, "gap longer than the window");
    }

    #[test]
    fn back_to_back_requests_poll_and_polling_stops_when_the_window_passes() {
        let (r, _w) = pipe();
        let p = RequestPoller::new(Duration::from_millis(20));
        p.set_device(r);
        drop(p.arrived());
        let g = p.arrived();
        assert!(g.dense, "the previous reply was just now");
        let t = Instant::now();
        drop(g); // nothing to read: polls the whole window
        assert!(t.elapsed() >= Duration::from_millis(20));
    }

    #[test]
    fn polling_ends_as_soon_as_a_request_waits() {
        let (r, mut w) = pipe();
        let p = RequestPoller::new(Duration::from_secs(5));
        p.set_device(r);
        w.write_all(b"x").unwrap();
        assert!(p.poll_window());
        drop(p.arrived());
        let t = Instant::now();
        drop(p.arrived());
        assert!(t.elapsed() < Duration::from_secs(1));
    }
}
