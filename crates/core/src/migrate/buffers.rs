//! The migrator's pool of block-aligned I/O buffers, shared by moves,
//! write-back and reads of block tiers: buffers are reused so that their
//! pages are not faulted in again for each copy.

use super::*;

/// A buffer of the pool that returns to it when dropped, whichever way its
/// user returns ([`Migrator::take_pooled`]).
pub(crate) struct PooledBuf<'a> {
    pool: &'a Migrator,
    buf: Option<terrace_media::AlignedBuf>,
}

impl<'a> PooledBuf<'a> {
    /// Guards `buf`, to be returned to `pool`.
    pub(crate) fn new(pool: &'a Migrator, buf: terrace_media::AlignedBuf) -> PooledBuf<'a> {
        PooledBuf {
            pool,
            buf: Some(buf),
        }
    }

    /// The buffer itself, no longer returned by this guard (its new owner
    /// returns it, or guards it again).
    pub(crate) fn into_inner(mut self) -> terrace_media::AlignedBuf {
        self.buf.take().expect("a guarded buffer")
    }
}

impl std::ops::Deref for PooledBuf<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.buf.as_deref().expect("a guarded buffer")
    }
}

impl std::ops::DerefMut for PooledBuf<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.buf.as_deref_mut().expect("a guarded buffer")
    }
}

impl Drop for PooledBuf<'_> {
    fn drop(&mut self) {
        if let Some(b) = self.buf.take() {
            self.pool.give_buf(b);
        }
    }
}

/// Bytes of copy buffers the migrator keeps for reuse.
pub(super) const BUF_POOL_BYTES: usize = 128 << 20;

/// Copies up to this size use a heap buffer of their own size instead of a
/// pooled huge-page buffer ([`Migrator::take_buf`]).
pub(super) const SMALL_BUF_BYTES: usize = 512 << 10;

impl Migrator {
    /// A block-aligned buffer of at least `len` bytes (contents unspecified):
    /// a pooled one when one is large enough, else a new one rounded up to
    /// 2 MiB, so that every copy and write-back buffer is backed by huge
    /// pages where the kernel allows it (large device requests, see
    /// [`terrace_media::AlignedBuf`]).
    pub(crate) fn take_buf(&self, len: usize) -> terrace_media::AlignedBuf {
        if len <= SMALL_BUF_BYTES {
            // A small file's blocks: a heap buffer of their size. A pooled
            // buffer is 2 MiB on huge pages, and moves keep theirs until the
            // sync window commits, so each 4 KiB file took (faulted and
            // zeroed) a fresh 2 MiB mapping: small-file migration and
            // write-back ran at about 5 MiB/s (issue 15's bursts).
            return terrace_media::AlignedBuf::zeroed(len.max(1).next_multiple_of(BS as usize));
        }
        let mut pool = self.bufs.lock();
        if let Some(k) = pool.iter().position(|b| b.len() >= len) {
            return pool.swap_remove(k);
        }
        drop(pool);
        let huge = terrace_media::HUGE_BUF_BYTES;
        terrace_media::AlignedBuf::zeroed(len.div_ceil(huge).max(1) * huge)
    }

    /// [`Migrator::take_buf`] behind a guard that returns it to the pool.
    pub(crate) fn take_pooled(&self, len: usize) -> PooledBuf<'_> {
        PooledBuf::new(self, self.take_buf(len))
    }

    /// Returns a buffer to the pool (dropped when the pool is full).
    pub(crate) fn give_buf(&self, b: terrace_media::AlignedBuf) {
        if b.len() <= SMALL_BUF_BYTES {
            return;
        }
        let mut pool = self.bufs.lock();
        if pool.iter().map(|b| b.len()).sum::<usize>() + b.len() <= BUF_POOL_BYTES {
            pool.push(b);
        }
    }
}
