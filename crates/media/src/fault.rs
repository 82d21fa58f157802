//! [`FaultMedia`]: wraps another media and poisons ranges of it.
//!
//! Persistent-memory stores cannot fail, so faults show up as *poisoned
//! reads*: media errors that corrupt what a load returns. Every byte of a read
//! that falls in a poisoned range comes back as [`POISON_BYTE`] (other bytes
//! come from the inner media), and each such read is counted. Writes, flushes
//! and fences pass through unchanged and do not clear poison: the range stays
//! bad until [`FaultMedia::clear_poison`]. This lets the core's checksums be
//! tested against corrupted media.
//!
//! It can also make fences fail ([`FaultMedia::fail_fences`]), as an
//! `msync` of a page-cache mapping fails when the disk under a file-backed
//! PM tier returns EIO: such media is not durable by fence alone, and after
//! a failed fence every [`PmMedia::fence_error`] and `sync_all` fails.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::PmMedia;

/// The byte a poisoned read returns.
pub const POISON_BYTE: u8 = 0xE5;

/// A media whose reads of poisoned ranges return [`POISON_BYTE`].
#[derive(Debug)]
pub struct FaultMedia<M: PmMedia> {
    inner: M,
    /// Poisoned `[start, end)` ranges.
    poisoned: Mutex<Vec<(u64, u64)>>,
    poisoned_reads: AtomicU64,
    /// Fences fail from now on ([`FaultMedia::fail_fences`]).
    fences_fail: AtomicBool,
    /// A fence failed: every later `fence_error` and `sync_all` fails.
    fence_failed: AtomicBool,
}

impl<M: PmMedia> FaultMedia<M> {
    /// Wraps `inner` with nothing poisoned.
    pub fn new(inner: M) -> FaultMedia<M> {
        FaultMedia {
            inner,
            poisoned: Mutex::new(Vec::new()),
            poisoned_reads: AtomicU64::new(0),
            fences_fail: AtomicBool::new(false),
            fence_failed: AtomicBool::new(false),
        }
    }

    /// Makes every later fence fail with EIO (the media also stops being
    /// durable by fence alone, as a file-backed PM tier is not).
    pub fn fail_fences(&self) {
        self.fences_fail.store(true, Ordering::SeqCst);
    }

    fn fence_failure() -> std::io::Error {
        std::io::Error::from_raw_os_error(libc::EIO)
    }

    /// Makes reads of `[off, off + len)` return [`POISON_BYTE`].
    pub fn poison(&self, off: u64, len: u64) {
        assert!(
            off.checked_add(len).is_some_and(|e| e <= self.inner.len()),
            "poison [{off}, +{len}) outside media"
        );
        if len > 0 {
            self.poisoned.lock().push((off, off + len));
        }
    }

    /// Removes all poison.
    pub fn clear_poison(&self) {
        self.poisoned.lock().clear();
    }

    /// Number of reads that returned at least one poisoned byte.
    pub fn poisoned_reads(&self) -> u64 {
        self.poisoned_reads.load(Ordering::Relaxed)
    }

    /// The wrapped media.
    pub fn inner(&self) -> &M {
        &self.inner
    }

    /// Unwraps.
    pub fn into_inner(self) -> M {
        self.inner
    }
}

impl<M: PmMedia> PmMedia for FaultMedia<M> {
    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn read(&self, off: u64, buf: &mut [u8]) {
        self.inner.read(off, buf);
        let end = off + buf.len() as u64;
        let mut hit = false;
        for &(ps, pe) in self.poisoned.lock().iter() {
            let (s, e) = (ps.max(off), pe.min(end));
            if s < e {
                buf[(s - off) as usize..(e - off) as usize].fill(POISON_BYTE);
                hit = true;
            }
        }
        if hit {
            self.poisoned_reads.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn write(&self, off: u64, data: &[u8]) {
        self.inner.write(off, data);
    }

    fn store_u64(&self, off: u64, value: u64) {
        self.inner.store_u64(off, value);
    }

    fn flush(&self, off: u64, len: u64) {
        self.inner.flush(off, len);
    }

    fn fence(&self) {
        self.inner.fence();
        if self.fences_fail.load(Ordering::SeqCst) {
            self.fence_failed.store(true, Ordering::SeqCst);
        }
    }

    fn sync_all(&self) -> std::io::Result<()> {
        self.fence_error()?;
        self.inner.sync_all()
    }

    fn fence_error(&self) -> std::io::Result<()> {
        if self.fence_failed.load(Ordering::SeqCst) {
            return Err(Self::fence_failure());
        }
        self.inner.fence_error()
    }

    fn fence_is_durable(&self) -> bool {
        !self.fences_fail.load(Ordering::SeqCst) && self.inner.fence_is_durable()
    }

    fn describe(&self) -> String {
        format!("{} (fault-injecting)", self.inner.describe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemMedia;

    #[test]
    fn poisoned_reads_return_pattern_and_are_counted() {
        let m = FaultMedia::new(MemMedia::from_image(vec![1; 256]));
        m.poison(100, 10);
        let mut b = [0u8; 20];
        m.read(95, &mut b);
        assert_eq!(&b[..5], &[1; 5]);
        assert_eq!(&b[5..15], &[POISON_BYTE; 10]);
        assert_eq!(&b[15..], &[1; 5]);
        assert_eq!(m.poisoned_reads(), 1);
        m.read(0, &mut b); // clean
        assert_eq!(m.poisoned_reads(), 1);
        assert_eq!(m.load_u64(100), u64::from_le_bytes([POISON_BYTE; 8]));
        assert_eq!(m.poisoned_reads(), 2);
    }

    #[test]
    fn writes_pass_through_and_poison_persists_until_cleared() {
        let m = FaultMedia::new(MemMedia::new(64));
        m.poison(0, 8);
        m.store_u64(0, 42);
        assert_eq!(m.load_u64(0), u64::from_le_bytes([POISON_BYTE; 8]));
        assert_eq!(m.inner().load_u64(0), 42);
        m.clear_poison();
        assert_eq!(m.load_u64(0), 42);
    }
}
