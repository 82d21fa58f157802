//! Block media: the slow tiers (SSD, HDD), addressed in 4096-byte blocks.
//!
//! [`BlockMedia`] is the trait the file system core uses for block tiers, as
//! [`PmMedia`](crate::PmMedia) is for the PM tier. Unlike PM, block I/O can
//! fail, so every operation returns an [`io::Result`].
//!
//! Implementations:
//! - [`BlockFile`](crate::BlockFile): a regular file or block device, with
//!   O_DIRECT where the file system allows it (buffered I/O plus fdatasync
//!   otherwise).
//! - [`MemBlock`]: plain memory, every write immediately "durable" (unit tests).
//! - [`CrashBlock`](crate::CrashBlock): a live and a durable image; builds
//!   crash images that lose writes not yet synced.
//! - [`FaultBlock`](crate::FaultBlock): wraps another block media and fails
//!   reads, writes or syncs with EIO after a countdown.
//!
//! Also here: [`AlignedBuf`], a heap buffer aligned to [`BLOCK_SIZE`] for
//! O_DIRECT, and [`BlockStats`], the request counters every implementation
//! keeps (so tests and `terrace status` can check request sizes).

use std::fmt;
use std::io;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::object::{NetworkParams, ObjectStats, PartInfo, SweepReport};

/// Size of a block: the unit of addressing, alignment and (at best) crash
/// atomicity on block media.
pub const BLOCK_SIZE: u64 = 4096;

const BLOCK: usize = BLOCK_SIZE as usize;

/// What test media ([`MemBlock`], [`CrashBlock`](crate::CrashBlock)) hold
/// in blocks after a [`discard`](BlockMedia::discard): data read from a
/// discarded block by mistake is garbage a checksum or a test notices.
pub const DISCARDED_BYTE: u8 = 0xD1;

/// A block device of [`len`](BlockMedia::len) bytes (a multiple of
/// [`BLOCK_SIZE`]), addressed in 4096-byte blocks.
///
/// Contract:
/// - `read_blocks`/`write_blocks` access the blocks `[block, block + n)` where
///   `n = buf.len() / 4096`. A buffer whose length is not a multiple of 4096,
///   or a range that does not lie inside the media, is an
///   [`io::ErrorKind::InvalidInput`] error with a message naming the request —
///   never a panic, never partial I/O. A zero-length request does nothing and
///   succeeds.
/// - Buffers may have any memory alignment; implementations that need aligned
///   memory (O_DIRECT) copy through an [`AlignedBuf`] themselves. Callers that
///   care about the copy pass `AlignedBuf`s.
/// - `write_blocks` is visible to later reads at once but durable only after a
///   later `sync` returns `Ok`. Until then a crash may keep any subset of the
///   blocks written since the last sync (each block whole at best: 4096-byte
///   blocks are the most a device promises not to tear).
/// - `sync` makes everything written before it was called durable.
/// - A failed operation (`Err` other than `InvalidInput`) leaves the blocks it
///   addressed in an unknown state, and a failed `sync` promises nothing about
///   the writes before it.
/// - Concurrent calls are allowed; callers serialise overlapping writes.
/// - [`stats`](BlockMedia::stats) counts each successful `read_blocks` /
///   `write_blocks` call of non-zero length as one request.
pub trait BlockMedia: Send + Sync {
    /// Size in bytes (a multiple of [`BLOCK_SIZE`]).
    fn len(&self) -> u64;
    /// True when the media holds no block.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Number of blocks.
    fn blocks(&self) -> u64 {
        self.len() / BLOCK_SIZE
    }
    /// Reads `buf.len() / 4096` blocks starting at `block` into `buf`.
    fn read_blocks(&self, block: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Writes `data` to the blocks starting at `block` (durable after `sync`).
    fn write_blocks(&self, block: u64, data: &[u8]) -> io::Result<()>;
    /// Makes everything written before the call durable.
    fn sync(&self) -> io::Result<()>;
    /// Sets aside everything written so far under a new *ticket* for
    /// [`sync_sealed`](Self::sync_sealed), for media whose sync is an
    /// upload of what was written (an object tier): a caller that seals,
    /// then syncs the sealed writes on another thread while it writes (and
    /// seals, and syncs) more, makes exactly its own writes durable in that
    /// upload. The default seals nothing and returns 0.
    fn seal(&self) -> u64 {
        0
    }
    /// Makes at least the writes sealed under `ticket` durable (uploads of
    /// several tickets may run at once; each ticket is answered once). The
    /// default syncs everything.
    fn sync_sealed(&self, ticket: u64) -> io::Result<()> {
        let _ = ticket;
        self.sync()
    }
    /// A hint: a reader will soon read the blocks `[block, block + blocks)`
    /// (all of them live). Media whose reads cost a round trip (an object
    /// tier) may start fetching them in the background, so that the
    /// `read_blocks` that comes for them finds them on their way; no error
    /// is reported. The default does nothing.
    fn read_ahead(&self, block: u64, blocks: u64) {
        let _ = (block, blocks);
    }
    /// The blocks `[block, block + blocks)` hold no live data any more; media
    /// may reclaim them. Until they are written again, reads of them return
    /// unspecified contents. Call only once the commit that freed them is
    /// durable. The default does nothing.
    fn trim(&self, block: u64, blocks: u64) -> io::Result<()> {
        let _ = (block, blocks);
        Ok(())
    }
    /// Tells the device that `[block, block + blocks)` holds nothing it
    /// must keep (`fstrim`, design.md §5q): a block device gets a discard
    /// (`BLKDISCARD`, the SSD's TRIM), a regular file a hole punched
    /// (its space goes back to the file system under it). Until the blocks
    /// are written again, reads of them return unspecified contents (zeros
    /// on Linux). Call only for blocks no durable state references and no
    /// writer holds. Unlike [`trim`](Self::trim), which the pool calls on
    /// every free and media may ignore, this is a request a user made:
    /// media that cannot do it answer [`io::ErrorKind::Unsupported`] (the
    /// default).
    fn discard(&self, block: u64, blocks: u64) -> io::Result<()> {
        let _ = (block, blocks);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this media cannot discard blocks",
        ))
    }
    /// For media that keep stored data beside the block space (an object
    /// tier's parts): `used` is every block run `(first, blocks)` the
    /// pool's committed state references; every other block is treated as
    /// trimmed and what then stores no used block is deleted
    /// ([`ObjectMedia::retain`](crate::ObjectMedia::retain)). Call once at
    /// mount, after recovery and before any new write. `Ok(None)`: the media
    /// has nothing of the kind (the default).
    fn retain_only(&self, used: &[(u64, u64)]) -> io::Result<Option<SweepReport>> {
        let _ = used;
        Ok(None)
    }
    /// What [`retain_only`](Self::retain_only) would delete, deleting
    /// nothing (fsck). `None` for media without stored data of their own.
    fn unreferenced(&self, used: &[(u64, u64)]) -> Option<SweepReport> {
        let _ = used;
        None
    }
    /// Deletes stored data no block reads any more (an object tier's dead
    /// parts), uploading nothing: unlike `sync`, it leaves every pending
    /// write to its writer's own sync. The default does nothing.
    fn delete_dead(&self) -> io::Result<()> {
        Ok(())
    }
    /// Space counters of an object tier; `None` for other media.
    fn object_tier_stats(&self) -> Option<ObjectStats> {
        None
    }
    /// An object tier's parts with their live counts (what its cleaning
    /// chooses from); `None` for other media.
    fn object_parts(&self) -> Option<Vec<PartInfo>> {
        None
    }

    /// Retries and time-outs of a networked media's requests, from the next
    /// request on (the `s3_*` settings). The default does nothing.
    fn set_network(&self, net: &NetworkParams) -> io::Result<()> {
        let _ = net;
        Ok(())
    }

    /// Bytes the file system holding this media's image file can still give
    /// it (`fstatvfs`: blocks available to unprivileged users), for media
    /// kept in a regular file, whose unwritten blocks take room there only
    /// when first written; `None` for devices and media without such a host.
    fn host_free_bytes(&self) -> Option<u64> {
        None
    }

    /// Bytes of this media's image file that its file system has not
    /// allocated yet (a sparse image), whose first writes need room there;
    /// `None` for devices and media without such a host. Forwarded by
    /// wrappers like [`BlockMedia::host_free_bytes`].
    fn unbacked_bytes(&self) -> Option<u64> {
        None
    }

    /// One-line description for status output and mount messages.
    fn describe(&self) -> String;
    /// Request counters since the media was opened.
    fn stats(&self) -> BlockStats;
}

/// The optional [`BlockMedia`] methods of a wrapper, forwarded to the media
/// it wraps: `forward_block_extras!(|self| self.inner)`. Every wrapper must
/// forward them, or trims and sweeps stop at the wrapper; and
/// [`BlockMedia::host_free_bytes`] and [`BlockMedia::unbacked_bytes`] too,
/// which are left out here so that a test wrapper may answer them itself.
#[macro_export]
macro_rules! forward_block_extras {
    (|$s:ident| $inner:expr) => {
        fn read_ahead(&$s, block: u64, blocks: u64) {
            $inner.read_ahead(block, blocks)
        }
        fn trim(&$s, block: u64, blocks: u64) -> std::io::Result<()> {
            $inner.trim(block, blocks)
        }
        fn discard(&$s, block: u64, blocks: u64) -> std::io::Result<()> {
            $inner.discard(block, blocks)
        }
        fn retain_only(
            &$s,
            used: &[(u64, u64)],
        ) -> std::io::Result<Option<$crate::SweepReport>> {
            $inner.retain_only(used)
        }
        fn unreferenced(&$s, used: &[(u64, u64)]) -> Option<$crate::SweepReport> {
            $inner.unreferenced(used)
        }
        fn delete_dead(&$s) -> std::io::Result<()> {
            $inner.delete_dead()
        }
        fn object_tier_stats(&$s) -> Option<$crate::ObjectStats> {
            $inner.object_tier_stats()
        }
        fn object_parts(&$s) -> Option<Vec<$crate::PartInfo>> {
            $inner.object_parts()
        }
        fn set_network(&$s, net: &$crate::NetworkParams) -> std::io::Result<()> {
            $inner.set_network(net)
        }
    };
}

/// `BlockMedia` for a pointer to media: every method forwards to the media.
macro_rules! forward_block_media {
    ($($ptr:ident),*) => {$(
        impl<B: BlockMedia + ?Sized> BlockMedia for $ptr<B> {
            fn len(&self) -> u64 {
                (**self).len()
            }
            fn read_blocks(&self, block: u64, buf: &mut [u8]) -> io::Result<()> {
                (**self).read_blocks(block, buf)
            }
            fn write_blocks(&self, block: u64, data: &[u8]) -> io::Result<()> {
                (**self).write_blocks(block, data)
            }
            fn sync(&self) -> io::Result<()> {
                (**self).sync()
            }
            fn seal(&self) -> u64 {
                (**self).seal()
            }
            fn sync_sealed(&self, ticket: u64) -> io::Result<()> {
                (**self).sync_sealed(ticket)
            }
            forward_block_extras!(|self| (**self));
            fn host_free_bytes(&self) -> Option<u64> {
                (**self).host_free_bytes()
            }
            fn unbacked_bytes(&self) -> Option<u64> {
                (**self).unbacked_bytes()
            }
            fn describe(&self) -> String {
                (**self).describe()
            }
            fn stats(&self) -> BlockStats {
                (**self).stats()
            }
        }
    )*};
}

forward_block_media!(Arc, Box);

/// Checks a request of `buf_len` bytes at `block` against media of `media_len`
/// bytes; returns the byte range `[start, end)` it covers.
///
/// Errors ([`io::ErrorKind::InvalidInput`]): `buf_len` not a multiple of
/// [`BLOCK_SIZE`], or blocks outside the media. For use by every
/// [`BlockMedia`] implementation, so they all reject the same requests with the
/// same messages.
pub fn check_block_range(media_len: u64, block: u64, buf_len: usize) -> io::Result<(u64, u64)> {
    let len = buf_len as u64;
    if len % BLOCK_SIZE != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("block I/O of {len} bytes at block {block}: length is not a multiple of {BLOCK_SIZE}"),
        ));
    }
    let n = len / BLOCK_SIZE;
    let total = media_len / BLOCK_SIZE;
    match block.checked_add(n) {
        Some(end) if end <= total => Ok((block * BLOCK_SIZE, end * BLOCK_SIZE)),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("block I/O of blocks [{block}, +{n}) outside media of {total} blocks"),
        )),
    }
}

/// Request counters of a block media (no histogram: sums plus the largest
/// request). Only successful, non-empty requests are counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockStats {
    /// `read_blocks` calls.
    pub read_requests: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Largest single `read_blocks`, in bytes.
    pub max_read_bytes: u64,
    /// `write_blocks` calls.
    pub write_requests: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Largest single `write_blocks`, in bytes.
    pub max_write_bytes: u64,
    /// `sync` calls.
    pub syncs: u64,
    /// Bytes discarded ([`BlockMedia::discard`]).
    pub discard_bytes: u64,
}

impl BlockStats {
    /// Average read request size in bytes (0 without reads).
    pub fn avg_read_bytes(&self) -> u64 {
        self.read_bytes.checked_div(self.read_requests).unwrap_or(0)
    }

    /// Average write request size in bytes (0 without writes).
    pub fn avg_write_bytes(&self) -> u64 {
        self.write_bytes
            .checked_div(self.write_requests)
            .unwrap_or(0)
    }
}

/// Lock-free counters behind [`BlockStats`], for [`BlockMedia`]
/// implementations.
#[derive(Debug, Default)]
pub struct BlockStatsCounter {
    read_requests: AtomicU64,
    read_bytes: AtomicU64,
    max_read_bytes: AtomicU64,
    write_requests: AtomicU64,
    write_bytes: AtomicU64,
    max_write_bytes: AtomicU64,
    syncs: AtomicU64,
    discard_bytes: AtomicU64,
}

impl BlockStatsCounter {
    /// All zero.
    pub fn new() -> BlockStatsCounter {
        BlockStatsCounter::default()
    }

    /// Counts one read request of `bytes` (nothing when `bytes` is 0).
    pub fn record_read(&self, bytes: u64) {
        if bytes > 0 {
            self.read_requests.fetch_add(1, Ordering::Relaxed);
            self.read_bytes.fetch_add(bytes, Ordering::Relaxed);
            self.max_read_bytes.fetch_max(bytes, Ordering::Relaxed);
        }
    }

    /// Counts one write request of `bytes` (nothing when `bytes` is 0).
    pub fn record_write(&self, bytes: u64) {
        if bytes > 0 {
            self.write_requests.fetch_add(1, Ordering::Relaxed);
            self.write_bytes.fetch_add(bytes, Ordering::Relaxed);
            self.max_write_bytes.fetch_max(bytes, Ordering::Relaxed);
        }
    }

    /// Counts one sync.
    pub fn record_sync(&self) {
        self.syncs.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts `bytes` discarded.
    pub fn record_discard(&self, bytes: u64) {
        self.discard_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// The current counts (each counter read on its own; not a consistent
    /// snapshot while requests are running).
    pub fn snapshot(&self) -> BlockStats {
        BlockStats {
            read_requests: self.read_requests.load(Ordering::Relaxed),
            read_bytes: self.read_bytes.load(Ordering::Relaxed),
            max_read_bytes: self.max_read_bytes.load(Ordering::Relaxed),
            write_requests: self.write_requests.load(Ordering::Relaxed),
            write_bytes: self.write_bytes.load(Ordering::Relaxed),
            max_write_bytes: self.max_write_bytes.load(Ordering::Relaxed),
            syncs: self.syncs.load(Ordering::Relaxed),
            discard_bytes: self.discard_bytes.load(Ordering::Relaxed),
        }
    }
}

/// Buffers of at least this many bytes are mapped on their own, aligned to
/// 2 MiB and backed by transparent huge pages where the kernel allows it
/// ([`AlignedBuf::zeroed`]).
pub const HUGE_BUF_BYTES: usize = 2 << 20;

/// A zero-initialised buffer whose start is aligned to [`BLOCK_SIZE`], as
/// O_DIRECT needs. Dereferences to `[u8]` of the requested length.
///
/// # Why large buffers use huge pages
/// An O_DIRECT request is built from the physical pages of the caller's
/// buffer, and a block device takes at most `max_segments` of them in one
/// request (128 on a loop device, whose segments may be up to 64 KiB). With
/// 4 KiB pages that caps a request at 512 KiB whatever the write's length;
/// with a 2 MiB page each segment is a full 64 KiB and requests reach the
/// device's `max_sectors_kb` (1280 KiB on a loop device). Measured on this
/// project's VM (loop device over a preallocated disk file, 410 MiB in 16 MiB
/// O_DIRECT writes, one `fdatasync`): 511 KiB requests and 287–306 MiB/s
/// with 4 KiB pages, 1256 KiB requests and 516–616 MiB/s with huge pages
/// (docs/design.md §5a). Large buffers are therefore their own anonymous
/// mapping, aligned to 2 MiB and advised `MADV_HUGEPAGE`; where transparent
/// huge pages are off they are ordinary pages and nothing else changes.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    /// Bytes of the buffer's own mapping (0: allocated from the heap).
    mapped: usize,
}

// Safety: `AlignedBuf` owns its allocation exclusively (like `Box<[u8]>`);
// nothing in it is tied to a thread.
unsafe impl Send for AlignedBuf {}
// Safety: shared references only give `&[u8]`; mutation needs `&mut self`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    fn layout(len: usize) -> std::alloc::Layout {
        // At least one byte: zero-sized allocations are not allowed.
        std::alloc::Layout::from_size_align(len.max(1), BLOCK)
            .expect("AlignedBuf length overflows the address space")
    }

    /// `len` zero bytes, aligned to 4096 (to 2 MiB from [`HUGE_BUF_BYTES`]).
    pub fn zeroed(len: usize) -> AlignedBuf {
        if len >= HUGE_BUF_BYTES {
            if let Some(b) = Self::mapped_huge(len) {
                return b;
            }
        }
        let layout = Self::layout(len);
        // Safety: `layout` has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedBuf {
            ptr,
            len,
            mapped: 0,
        }
    }

    /// A private anonymous mapping of `len` bytes rounded up to 2 MiB, starting
    /// on a 2 MiB boundary, advised to use huge pages. Fresh anonymous memory
    /// reads as zeros. `None` when the kernel refuses the mapping (the caller
    /// then uses the heap).
    fn mapped_huge(len: usize) -> Option<AlignedBuf> {
        const HUGE: usize = 2 << 20;
        let size = len.checked_next_multiple_of(HUGE)?;
        let span = size.checked_add(HUGE)?;
        // Safety: a new private anonymous mapping; no existing memory is
        // touched and the result is checked before use.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                span,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return None;
        }
        let base = raw as usize;
        let start = base.next_multiple_of(HUGE);
        let head = start - base;
        let tail = span - head - size;
        // Safety: both ranges lie inside the mapping just made and outside
        // [start, start + size), which is all that is kept.
        unsafe {
            if head > 0 {
                libc::munmap(raw, head);
            }
            if tail > 0 {
                libc::munmap((start + size) as *mut libc::c_void, tail);
            }
            // Advice only: where transparent huge pages are off it fails and
            // the buffer keeps ordinary pages.
            libc::madvise(start as *mut libc::c_void, size, libc::MADV_HUGEPAGE);
        }
        Some(AlignedBuf {
            ptr: NonNull::new(start as *mut u8)?,
            len,
            mapped: size,
        })
    }

    /// An aligned copy of `data`.
    pub fn from_slice(data: &[u8]) -> AlignedBuf {
        let mut b = AlignedBuf::zeroed(data.len());
        b.copy_from_slice(data);
        b
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.mapped > 0 {
            // Safety: `ptr` and `mapped` are exactly the range kept by
            // `mapped_huge`, unmapped exactly once, here.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.mapped) };
            return;
        }
        // Safety: `ptr` came from `alloc_zeroed` with this same layout and is
        // freed exactly once, here.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // Safety: `ptr` points to `len` (or more) initialised bytes owned by
        // `self` and alive as long as the borrow of `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // Safety: as in `deref`; `&mut self` makes the borrow exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Clone for AlignedBuf {
    fn clone(&self) -> AlignedBuf {
        AlignedBuf::from_slice(self)
    }
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

/// True when `p` is aligned to [`BLOCK_SIZE`].
pub(crate) fn is_block_aligned(p: *const u8) -> bool {
    (p as usize) % BLOCK == 0
}

/// Plain in-memory block media for unit tests: every write is immediately
/// "durable" (there is no crash to survive); `sync` only counts.
#[derive(Debug)]
pub struct MemBlock {
    buf: RwLock<Vec<u8>>,
    stats: BlockStatsCounter,
}

impl MemBlock {
    /// Zero-filled media of `len` bytes. Panics unless `len` is a multiple of
    /// [`BLOCK_SIZE`] that fits in memory.
    pub fn new(len: u64) -> MemBlock {
        let len = usize::try_from(len).expect("MemBlock length exceeds the address space");
        MemBlock::from_image(vec![0; len])
    }

    /// Media holding `image`. Panics unless its length is a multiple of
    /// [`BLOCK_SIZE`].
    pub fn from_image(image: Vec<u8>) -> MemBlock {
        assert!(
            image.len() % BLOCK == 0,
            "MemBlock length {} is not a multiple of {BLOCK_SIZE}",
            image.len()
        );
        MemBlock {
            buf: RwLock::new(image),
            stats: BlockStatsCounter::new(),
        }
    }

    /// A copy of the current contents.
    pub fn image(&self) -> Vec<u8> {
        self.buf.read().clone()
    }
}

impl BlockMedia for MemBlock {
    fn len(&self) -> u64 {
        self.buf.read().len() as u64
    }

    fn read_blocks(&self, block: u64, buf: &mut [u8]) -> io::Result<()> {
        let b = self.buf.read();
        let (s, e) = check_block_range(b.len() as u64, block, buf.len())?;
        buf.copy_from_slice(&b[s as usize..e as usize]);
        self.stats.record_read(buf.len() as u64);
        Ok(())
    }

    fn write_blocks(&self, block: u64, data: &[u8]) -> io::Result<()> {
        let mut b = self.buf.write();
        let (s, e) = check_block_range(b.len() as u64, block, data.len())?;
        b[s as usize..e as usize].copy_from_slice(data);
        self.stats.record_write(data.len() as u64);
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        self.stats.record_sync();
        Ok(())
    }

    /// Overwrites the blocks with [`DISCARDED_BYTE`]: a test that reads
    /// discarded blocks as data sees garbage, not plausible zeros.
    fn discard(&self, block: u64, blocks: u64) -> io::Result<()> {
        let mut b = self.buf.write();
        let len = usize::try_from(blocks.saturating_mul(BLOCK_SIZE))
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "discard range too long"))?;
        let (s, e) = check_block_range(b.len() as u64, block, len)?;
        b[s as usize..e as usize].fill(DISCARDED_BYTE);
        self.stats.record_discard(len as u64);
        Ok(())
    }

    fn describe(&self) -> String {
        format!("memory block media ({} bytes)", self.len())
    }

    fn stats(&self) -> BlockStats {
        self.stats.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_buf_is_aligned_zeroed_and_sized() {
        for len in [0, 1, 4096, 3 * 4096 + 7] {
            let mut b = AlignedBuf::zeroed(len);
            assert_eq!(b.len(), len);
            assert!(is_block_aligned(b.as_ptr()));
            assert!(b.iter().all(|&x| x == 0));
            b.fill(7);
            let c = b.clone();
            assert_eq!(&c[..], &b[..]);
            assert!(is_block_aligned(c.as_ptr()));
        }
        assert_eq!(&AlignedBuf::from_slice(b"abc")[..], b"abc");
    }

    #[test]
    fn large_aligned_bufs_start_on_a_huge_page_boundary_and_are_zeroed() {
        for len in [HUGE_BUF_BYTES, HUGE_BUF_BYTES + 4096 + 7, 16 << 20] {
            let mut b = AlignedBuf::zeroed(len);
            assert_eq!(b.len(), len);
            assert_eq!(b.as_ptr() as usize % (2 << 20), 0);
            assert!(b.iter().all(|&x| x == 0));
            b.fill(9);
            let c = b.clone();
            assert_eq!(&c[..], &b[..]);
            assert_eq!(c.as_ptr() as usize % (2 << 20), 0);
        }
    }

    /// Kilobytes of transparent huge pages backing the mapping that starts at
    /// `start`, from /proc/self/smaps.
    fn anon_huge_kib(start: usize) -> Option<u64> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let head = format!("{start:x}-");
        let block = smaps.split_once(&format!("\n{head}"))?.1;
        block
            .lines()
            .find_map(|l| l.strip_prefix("AnonHugePages:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    }

    #[test]
    fn large_aligned_bufs_get_huge_pages_when_the_kernel_offers_them() {
        let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        if !(mode.contains("[always]") || mode.contains("[madvise]")) {
            eprintln!("transparent huge pages are off here ({mode:?}): nothing to check");
            return;
        }
        let mut b = AlignedBuf::zeroed(8 << 20);
        b.fill(1);
        let kib = anon_huge_kib(b.as_ptr() as usize).expect("the buffer's mapping is in smaps");
        assert!(
            kib >= 2048,
            "8 MiB buffer backed by {kib} KiB of huge pages"
        );
    }

    #[test]
    fn out_of_range_io_is_an_error_not_a_panic() {
        let m = MemBlock::new(4 * BLOCK_SIZE);
        let mut buf = vec![0u8; 2 * BLOCK];
        for (block, len) in [(3, 2 * BLOCK), (4, BLOCK), (u64::MAX, BLOCK)] {
            let e = m.read_blocks(block, &mut buf[..len]).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
            assert!(e.to_string().contains("outside media of 4 blocks"), "{e}");
            let e = m.write_blocks(block, &buf[..len]).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        }
        let e = m.write_blocks(0, &buf[..100]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("not a multiple of 4096"), "{e}");
        // Nothing was counted or written; empty requests are fine.
        m.read_blocks(4, &mut []).unwrap();
        assert_eq!(m.stats(), BlockStats::default());
        assert!(m.image().iter().all(|&b| b == 0));
    }

    #[test]
    fn stats_count_requests_and_bytes() {
        let m = MemBlock::new(64 * BLOCK_SIZE);
        m.write_blocks(0, &[1; 4 * BLOCK]).unwrap();
        m.write_blocks(10, &[2; BLOCK]).unwrap();
        let mut b = vec![0; 8 * BLOCK];
        m.read_blocks(0, &mut b).unwrap();
        m.sync().unwrap();
        let _ = m.read_blocks(63, &mut b); // out of range: not counted
        let s = m.stats();
        assert_eq!(
            s,
            BlockStats {
                read_requests: 1,
                read_bytes: 8 * 4096,
                max_read_bytes: 8 * 4096,
                write_requests: 2,
                write_bytes: 5 * 4096,
                max_write_bytes: 4 * 4096,
                syncs: 1,
                discard_bytes: 0,
            }
        );
        assert_eq!(s.avg_write_bytes(), 5 * 4096 / 2);
        assert_eq!(BlockStats::default().avg_read_bytes(), 0);
        assert_eq!(&b[..4 * BLOCK], &[1; 4 * BLOCK][..]);
        assert_eq!(&b[4 * BLOCK..], &[0; 4 * BLOCK][..]);
    }

    #[test]
    fn arc_and_box_forward_to_the_media() {
        let m: Box<dyn BlockMedia> = Box::new(MemBlock::new(2 * BLOCK_SIZE));
        m.write_blocks(1, &[9; BLOCK]).unwrap();
        let a = Arc::new(m);
        let mut b = [0u8; BLOCK];
        a.read_blocks(1, &mut b).unwrap();
        assert_eq!(b, [9; BLOCK]);
        assert_eq!(a.blocks(), 2);
        assert_eq!(a.stats().write_requests, 1);
    }
}
