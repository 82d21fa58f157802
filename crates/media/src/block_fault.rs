//! [`FaultBlock`]: wraps another block media and makes reads, writes or syncs
//! fail with EIO after a countdown.
//!
//! `fail_writes_after(n)` lets the next `n` writes through and fails every
//! write after them with `io::Error::from_raw_os_error(EIO)`, until
//! [`FaultBlock::heal`]; likewise `fail_reads_after` and `fail_sync_after`.
//! Each kind of operation has its own countdown. A failed operation never
//! reaches the inner media: a failed write changes nothing, a failed sync makes
//! nothing durable (what it promises about earlier writes — nothing — is what
//! a real failing device promises too; the kernel's habit of reporting a
//! writeback error only once is not modelled). Requests that are invalid
//! ([`io::ErrorKind::InvalidInput`]) are rejected before the countdown and do
//! not consume it. [`FaultBlock::injected`] counts the failures injected.
//!
//! [`FaultBlock::fail_writes_with`] picks another errno for failed writes
//! (ENOSPC: a full device, or a full file system under a sparse image), and
//! [`FaultBlock::set_host_free`] what [`BlockMedia::host_free_bytes`]
//! answers (the inner media's answer until set).
//!
//! [`FaultBlock::hold_syncs`] makes syncs wait (a slow device) until
//! [`FaultBlock::release_syncs`], so a test can keep work that waits for a
//! sync in flight while it checks what else the file system does meanwhile;
//! [`FaultBlock::hold_reads`] and [`FaultBlock::release_reads`] do the same
//! for reads.
//!
//! [`stats`](BlockMedia::stats) are the inner media's, so they count only the
//! requests that succeeded. Wrap an `Arc<CrashBlock>` to combine failures with
//! crash images.

use crate::countdown::Countdown;
use std::io;

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::block::{check_block_range, BlockMedia, BlockStats};

/// Failures injected so far, per kind of operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InjectedFaults {
    /// Failed `read_blocks` calls.
    pub reads: u64,
    /// Failed `write_blocks` calls.
    pub writes: u64,
    /// Failed `sync` calls.
    pub syncs: u64,
}

#[derive(Debug, Default)]
struct State {
    reads: Countdown,
    writes: Countdown,
    syncs: Countdown,
    injected: InjectedFaults,
    /// Holds syncs ([`FaultBlock::hold_syncs`]).
    sync_hold: Hold,
    /// Holds reads ([`FaultBlock::hold_reads`]).
    read_hold: Hold,
    /// The errno of failed writes (0: EIO).
    write_errno: i32,
    /// What `host_free_bytes` answers, once set.
    host_free: Option<Option<u64>>,
    /// What `unbacked_bytes` answers, once set.
    unbacked: Option<Option<u64>>,
}

/// Operations of one kind wait while `on` is set; `waiting` of them are
/// waiting now.
#[derive(Debug, Default)]
struct Hold {
    on: bool,
    waiting: u64,
}

fn eio() -> io::Error {
    io::Error::from_raw_os_error(libc::EIO)
}

/// Block media whose operations fail with EIO after a countdown; see the
/// module docs.
#[derive(Debug)]
pub struct FaultBlock<B: BlockMedia> {
    inner: B,
    state: Mutex<State>,
    /// Signalled when syncs or reads are released.
    released: Condvar,
}

impl<B: BlockMedia> FaultBlock<B> {
    /// Wraps `inner` with no failures armed.
    pub fn new(inner: B) -> FaultBlock<B> {
        FaultBlock {
            inner,
            state: Mutex::new(State::default()),
            released: Condvar::new(),
        }
    }

    /// The next `n` writes succeed; every later one fails with EIO until
    /// [`heal`](Self::heal). `0` fails the next write.
    pub fn fail_writes_after(&self, n: u64) {
        self.state.lock().writes = Countdown::After(n);
    }

    /// The next `n` writes succeed; every later one fails with `errno`
    /// until [`heal`](Self::heal) (which makes later failures EIO again).
    pub fn fail_writes_with(&self, errno: i32, n: u64) {
        let mut s = self.state.lock();
        s.writes = Countdown::After(n);
        s.write_errno = errno;
    }

    /// Makes [`BlockMedia::unbacked_bytes`] answer `bytes`.
    pub fn set_unbacked(&self, bytes: Option<u64>) {
        self.state.lock().unbacked = Some(bytes);
    }

    /// Makes [`BlockMedia::host_free_bytes`] answer `bytes`.
    pub fn set_host_free(&self, bytes: Option<u64>) {
        self.state.lock().host_free = Some(bytes);
    }

    /// The next `n` reads succeed; every later one fails with EIO until
    /// [`heal`](Self::heal).
    pub fn fail_reads_after(&self, n: u64) {
        self.state.lock().reads = Countdown::After(n);
    }

    /// The next `n` syncs succeed; every later one fails with EIO until
    /// [`heal`](Self::heal).
    pub fn fail_sync_after(&self, n: u64) {
        self.state.lock().syncs = Countdown::After(n);
    }

    /// Every later sync waits (does not return) until
    /// [`release_syncs`](Self::release_syncs).
    pub fn hold_syncs(&self) {
        self.state.lock().sync_hold.on = true;
    }

    /// Lets held syncs and every later one through.
    pub fn release_syncs(&self) {
        self.state.lock().sync_hold.on = false;
        self.released.notify_all();
    }

    /// Syncs waiting now because of [`hold_syncs`](Self::hold_syncs).
    pub fn syncs_waiting(&self) -> u64 {
        self.state.lock().sync_hold.waiting
    }

    /// Every later read waits (does not return) until
    /// [`release_reads`](Self::release_reads).
    pub fn hold_reads(&self) {
        self.state.lock().read_hold.on = true;
    }

    /// Lets held reads and every later one through.
    pub fn release_reads(&self) {
        self.state.lock().read_hold.on = false;
        self.released.notify_all();
    }

    /// Reads waiting now because of [`hold_reads`](Self::hold_reads).
    pub fn reads_waiting(&self) -> u64 {
        self.state.lock().read_hold.waiting
    }

    /// Disarms every countdown: operations succeed again. Counts are kept.
    pub fn heal(&self) {
        let mut s = self.state.lock();
        s.reads = Countdown::Off;
        s.writes = Countdown::Off;
        s.syncs = Countdown::Off;
        s.write_errno = 0;
    }

    /// True while some kind of operation is failing (its countdown ran out).
    pub fn is_failing(&self) -> bool {
        let s = self.state.lock();
        [s.reads, s.writes, s.syncs].contains(&Countdown::Failing)
    }

    /// Failures injected since creation.
    pub fn injected(&self) -> InjectedFaults {
        self.state.lock().injected
    }

    /// The wrapped media.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// Unwraps.
    pub fn into_inner(self) -> B {
        self.inner
    }
}

impl<B: BlockMedia> FaultBlock<B> {
    /// Waits, counted as waiting, while the hold `hold` picks is on.
    fn wait_while_held(&self, s: &mut MutexGuard<'_, State>, hold: fn(&mut State) -> &mut Hold) {
        if hold(s).on {
            hold(s).waiting += 1;
            while hold(s).on {
                self.released.wait(s);
            }
            hold(s).waiting -= 1;
        }
    }
}

impl<B: BlockMedia> BlockMedia for FaultBlock<B> {
    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn read_blocks(&self, block: u64, buf: &mut [u8]) -> io::Result<()> {
        check_block_range(self.inner.len(), block, buf.len())?;
        {
            let mut s = self.state.lock();
            self.wait_while_held(&mut s, |s| &mut s.read_hold);
            if s.reads.tick() {
                s.injected.reads += 1;
                return Err(eio());
            }
        }
        self.inner.read_blocks(block, buf)
    }

    fn write_blocks(&self, block: u64, data: &[u8]) -> io::Result<()> {
        check_block_range(self.inner.len(), block, data.len())?;
        {
            let mut s = self.state.lock();
            if s.writes.tick() {
                s.injected.writes += 1;
                return Err(match s.write_errno {
                    0 => eio(),
                    e => io::Error::from_raw_os_error(e),
                });
            }
        }
        self.inner.write_blocks(block, data)
    }

    fn sync(&self) -> io::Result<()> {
        {
            let mut s = self.state.lock();
            self.wait_while_held(&mut s, |s| &mut s.sync_hold);
            if s.syncs.tick() {
                s.injected.syncs += 1;
                return Err(eio());
            }
        }
        self.inner.sync()
    }

    crate::forward_block_extras!(|self| self.inner);

    fn host_free_bytes(&self) -> Option<u64> {
        let set = self.state.lock().host_free;
        set.unwrap_or_else(|| self.inner.host_free_bytes())
    }

    fn unbacked_bytes(&self) -> Option<u64> {
        let set = self.state.lock().unbacked;
        set.unwrap_or_else(|| self.inner.unbacked_bytes())
    }

    fn describe(&self) -> String {
        format!("{} (fault-injecting)", self.inner.describe())
    }

    fn stats(&self) -> BlockStats {
        self.inner.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BlockLoss, CrashBlock, MemBlock, BLOCK_SIZE};
    use std::sync::Arc;

    const B: usize = BLOCK_SIZE as usize;

    fn is_eio(r: io::Result<()>) -> bool {
        r.is_err_and(|e| e.raw_os_error() == Some(libc::EIO))
    }

    #[test]
    fn fault_block_fails_with_eio_after_countdown() {
        let m = FaultBlock::new(MemBlock::new(8 * BLOCK_SIZE));
        m.fail_writes_after(2);
        assert!(!m.is_failing());
        m.write_blocks(0, &[1; B]).unwrap();
        m.write_blocks(1, &[2; B]).unwrap();
        assert!(is_eio(m.write_blocks(2, &[3; B])));
        assert!(m.is_failing());
        // Keeps failing; the failed write changed nothing.
        assert!(is_eio(m.write_blocks(3, &[4; B])));
        assert_eq!(&m.inner().image()[2 * B..4 * B], &[0u8; 2 * B][..]);
        // Invalid requests are InvalidInput, not injected failures.
        let e = m.write_blocks(8, &[0; B]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        // Reads and syncs have their own countdowns.
        let mut b = [0u8; B];
        m.read_blocks(1, &mut b).unwrap();
        assert_eq!(b, [2; B]);
        m.sync().unwrap();
        m.fail_reads_after(0);
        m.fail_sync_after(1);
        assert!(is_eio(m.read_blocks(0, &mut b)));
        m.sync().unwrap();
        assert!(is_eio(m.sync()));
        assert!(is_eio(m.sync()));
        assert_eq!(
            m.injected(),
            InjectedFaults {
                reads: 1,
                writes: 2,
                syncs: 2
            }
        );
        // Healing makes everything work again and keeps the counts.
        m.heal();
        assert!(!m.is_failing());
        m.write_blocks(2, &[3; B]).unwrap();
        m.read_blocks(2, &mut b).unwrap();
        m.sync().unwrap();
        assert_eq!(b, [3; B]);
        assert_eq!(m.injected().writes, 2);
        // Stats count only what reached the media.
        let s = m.stats();
        assert_eq!((s.write_requests, s.read_requests, s.syncs), (3, 2, 3));
        assert!(m.describe().contains("fault-injecting"));
    }

    #[test]
    fn failed_sync_makes_nothing_durable() {
        let crash = Arc::new(CrashBlock::new(4 * BLOCK_SIZE));
        let m = FaultBlock::new(Arc::clone(&crash));
        m.write_blocks(0, &[5; B]).unwrap();
        m.fail_sync_after(0);
        assert!(is_eio(m.sync()));
        assert_eq!(crash.crash_image(BlockLoss::AllUnsynced), vec![0; 4 * B]);
        m.heal();
        m.sync().unwrap();
        assert_eq!(&crash.crash_image(BlockLoss::AllUnsynced)[..B], &[5; B][..]);
    }

    #[test]
    fn held_syncs_wait_until_released() {
        let m = Arc::new(FaultBlock::new(MemBlock::new(4 * BLOCK_SIZE)));
        m.hold_syncs();
        let waiter = {
            let m = Arc::clone(&m);
            std::thread::spawn(move || m.sync())
        };
        let start = std::time::Instant::now();
        while m.syncs_waiting() == 0 {
            assert!(start.elapsed().as_secs() < 10, "the sync never started");
            std::thread::yield_now();
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!waiter.is_finished(), "a held sync returned");
        m.release_syncs();
        waiter.join().unwrap().unwrap();
        assert_eq!(m.syncs_waiting(), 0);
        m.sync().unwrap();
    }
}
