//! [`BlockFile`]: a block tier on a regular file or a block device.
//!
//! # Direct or buffered
//! [`BlockFile::open`] prefers O_DIRECT, so block-tier data does not also fill
//! the page cache (Terrace keeps its own bounded DRAM cache) and `sync` costs
//! only the device flush:
//! - a regular file on **tmpfs** uses buffered I/O: there the page cache *is*
//!   the media, so O_DIRECT bypasses nothing (kernels since 6.6 accept the flag
//!   on tmpfs and ignore it; older ones refuse it with EINVAL);
//! - otherwise the file is opened with O_DIRECT and block 0 is read once as a
//!   probe. If the open or the probe fails with EINVAL (a file system without
//!   direct I/O), the file is used buffered instead.
//!
//! In buffered mode [`BlockFile::is_direct`] is false and
//! [`BlockFile::fallback_reason`] says why, for the caller to print as a
//! warning at mount. Durability is the same in both modes: `sync` is
//! `fdatasync`, which writes back dirty pages (buffered) and flushes the
//! device's volatile write cache (both modes).
//!
//! # I/O
//! Requests are plain `pread`/`pwrite` issued from the caller's thread (no I/O
//! thread pool or io_uring yet; requests of several threads run in parallel
//! since `pread`/`pwrite` need no lock). Short transfers are continued and
//! EINTR is retried. With O_DIRECT, a caller buffer that is not 4096-aligned is
//! copied through an [`AlignedBuf`] bounce buffer of the request's size (ext4
//! and loop devices reject misaligned O_DIRECT buffers with EINVAL; callers
//! that care about the copy pass `AlignedBuf`s); offsets and lengths are
//! always multiples of 4096, so they never need bouncing.
//!
//! # Errors
//! Open errors name the path. Errors of `pread`/`pwrite`/`fdatasync` are
//! returned as the OS reported them (`raw_os_error()` intact, e.g. EIO or
//! ENOSPC), so the file system can hand the errno to the application;
//! [`describe`](BlockMedia::describe) names the path. Invalid requests are
//! `InvalidInput` errors (see [`BlockMedia`]).
//!
//! # Size
//! A regular file's size comes from its metadata, a block device's from
//! seeking to its end. A trailing partial block is not used; media smaller
//! than one block is an error.
//!
//! Opening a path as media of a given size (sizing a new file, checking an
//! old one or a device) is shared with [`PmFile`](crate::PmFile)
//! (`media_file.rs`); the tests are in `block_file/tests.rs`.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::block::{
    check_block_range, is_block_aligned, AlignedBuf, BlockMedia, BlockStats, BlockStatsCounter,
    BLOCK_SIZE,
};
use crate::media_file::{invalid, media_len, on_tmpfs, open_mode, open_sized, with_path};

/// `BLKDISCARD` (`_IO(0x12, 119)`): discard a byte range of a block device.
const BLKDISCARD: libc::c_ulong = 0x1277;

/// Whether [`BlockFile::open_with`] uses O_DIRECT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirectIo {
    /// O_DIRECT unless the file is on tmpfs or the file system refuses it
    /// (then buffered, with a [`fallback_reason`](BlockFile::fallback_reason)).
    Prefer,
    /// O_DIRECT or an error (also on tmpfs, where the kernel accepts it).
    Require,
    /// Buffered I/O.
    Off,
}

/// A regular file or block device used as [`BlockMedia`]; see the module docs.
pub struct BlockFile {
    path: PathBuf,
    file: File,
    len: u64,
    direct: bool,
    block_device: bool,
    fallback_reason: Option<String>,
    stats: BlockStatsCounter,
    bounced: AtomicU64,
    /// Opened O_RDONLY ([`BlockFile::open_read_only`]).
    read_only: bool,
}

fn is_einval(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EINVAL)
}

/// Why O_DIRECT could not be used, or a real error.
enum DirectFailure {
    Refused(String),
    Error(io::Error),
}

/// Opens `path` with O_DIRECT and reads block 0 through it as a probe.
fn open_direct(path: &Path, writable: bool) -> Result<File, DirectFailure> {
    let file = match open_mode(path, true, writable) {
        Ok(f) => f,
        Err(e) if is_einval(&e) => {
            return Err(DirectFailure::Refused(
                "the file system refuses O_DIRECT (open: EINVAL)".into(),
            ))
        }
        Err(e) => return Err(DirectFailure::Error(with_path(path, "open (O_DIRECT)", e))),
    };
    let mut probe = AlignedBuf::zeroed(BLOCK_SIZE as usize);
    loop {
        match file.read_at(&mut probe, 0) {
            Ok(_) => return Ok(file),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if is_einval(&e) => {
                return Err(DirectFailure::Refused(
                    "an O_DIRECT read of block 0 failed with EINVAL".into(),
                ))
            }
            Err(e) => {
                return Err(DirectFailure::Error(with_path(
                    path,
                    "probe read (O_DIRECT)",
                    e,
                )))
            }
        }
    }
}

impl BlockFile {
    /// Opens an existing regular file or block device read-write, preferring
    /// O_DIRECT ([`DirectIo::Prefer`]).
    pub fn open(path: impl AsRef<Path>) -> io::Result<BlockFile> {
        Self::open_with(path, DirectIo::Prefer)
    }

    /// Opens an existing regular file or block device with the given direct
    /// I/O policy.
    pub fn open_with(path: impl AsRef<Path>, direct: DirectIo) -> io::Result<BlockFile> {
        Self::open_inner(path.as_ref(), direct, None, true)
    }

    /// Opens an existing regular file or block device for reading only
    /// (O_RDONLY: a read-only mount or fsck without repair; works on a
    /// read-only file system or an immutable file), preferring O_DIRECT:
    /// every write and discard fails with EROFS, so nothing can reach the
    /// media; `sync` has nothing to do.
    pub fn open_read_only(path: impl AsRef<Path>) -> io::Result<BlockFile> {
        Self::open_inner(path.as_ref(), DirectIo::Prefer, None, false)
    }

    /// [`create_with`](Self::create_with) preferring O_DIRECT.
    pub fn create(path: impl AsRef<Path>, size: u64) -> io::Result<BlockFile> {
        Self::create_with(path, size, DirectIo::Prefer)
    }

    /// Opens `path` as media of `size` bytes (a non-zero multiple of 4096).
    ///
    /// A missing or empty regular file is created sparse with `size` bytes; an
    /// existing regular file must already have exactly `size` bytes (it is never
    /// truncated). A block device must hold at least `size` bytes, of which the
    /// first `size` are used.
    pub fn create_with(
        path: impl AsRef<Path>,
        size: u64,
        direct: DirectIo,
    ) -> io::Result<BlockFile> {
        let path = path.as_ref();
        if size == 0 || size % BLOCK_SIZE != 0 {
            return Err(invalid(
                path,
                format_args!("length {size} is not a non-zero multiple of {BLOCK_SIZE}"),
            ));
        }
        // Sized (or checked) through a buffered open, then reopened as asked.
        drop(open_sized(path, size)?);
        Self::open_inner(path, direct, Some(size), true)
    }

    fn open_inner(
        path: &Path,
        mode: DirectIo,
        limit: Option<u64>,
        writable: bool,
    ) -> io::Result<BlockFile> {
        let plain = open_mode(path, false, writable).map_err(|e| with_path(path, "open", e))?;
        let (raw_len, block_device) = media_len(path, &plain)?;
        let raw_len = limit.map_or(raw_len, |l| l.min(raw_len));
        let len = raw_len - raw_len % BLOCK_SIZE;
        if len == 0 {
            return Err(invalid(
                path,
                format_args!("{raw_len} bytes is smaller than one {BLOCK_SIZE}-byte block"),
            ));
        }
        let (file, direct, fallback_reason) = match mode {
            DirectIo::Off => (plain, false, None),
            DirectIo::Prefer if !block_device && on_tmpfs(&plain) => (
                plain,
                false,
                Some(
                    "the file is on tmpfs, where O_DIRECT bypasses nothing (the page cache is \
                     the media): using buffered I/O"
                        .to_string(),
                ),
            ),
            DirectIo::Prefer | DirectIo::Require => match open_direct(path, writable) {
                Ok(f) => (f, true, None),
                Err(DirectFailure::Refused(why)) if mode == DirectIo::Prefer => (
                    plain,
                    false,
                    Some(format!("{why}: using buffered I/O plus fdatasync")),
                ),
                Err(DirectFailure::Refused(why)) => {
                    return Err(invalid(path, format_args!("O_DIRECT required, but {why}")))
                }
                Err(DirectFailure::Error(e)) => return Err(e),
            },
        };
        Ok(BlockFile {
            path: path.to_path_buf(),
            file,
            len,
            direct,
            block_device,
            fallback_reason,
            stats: BlockStatsCounter::new(),
            bounced: AtomicU64::new(0),
            read_only: !writable,
        })
    }

    /// True when I/O bypasses the page cache (O_DIRECT).
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// Why O_DIRECT is not used although it was preferred (a warning for the
    /// mount output); `None` in direct mode or when direct I/O was turned off.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback_reason.as_deref()
    }

    /// True for a block device, false for a regular file.
    pub fn is_block_device(&self) -> bool {
        self.block_device
    }

    /// Path the media was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Requests whose caller buffer was misaligned for O_DIRECT and went
    /// through a bounce buffer.
    pub fn bounced_requests(&self) -> u64 {
        self.bounced.load(Ordering::Relaxed)
    }

    fn check(&self, block: u64, len: usize) -> io::Result<u64> {
        check_block_range(self.len, block, len)
            .map(|(start, _)| start)
            .map_err(|e| invalid(&self.path, e))
    }

    /// `pread` of all of `buf` at `off`, continuing short reads, retrying EINTR.
    fn pread_all(&self, off: u64, buf: &mut [u8]) -> io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], off + done as u64) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!(
                            "{}: end of file at byte {} (media shrank?)",
                            self.path.display(),
                            off + done as u64
                        ),
                    ))
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// `pwrite` of all of `data` at `off`, continuing short writes, retrying EINTR.
    fn pwrite_all(&self, off: u64, data: &[u8]) -> io::Result<()> {
        let mut done = 0;
        while done < data.len() {
            match self.file.write_at(&data[done..], off + done as u64) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// True for media opened by [`open_read_only`](Self::open_read_only).
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// EROFS when opened read-only (before a write or discard).
    fn check_writable(&self) -> io::Result<()> {
        if self.read_only {
            return Err(io::Error::from_raw_os_error(libc::EROFS));
        }
        Ok(())
    }

    fn needs_bounce(&self, p: *const u8) -> bool {
        self.direct && !is_block_aligned(p)
    }
}

impl BlockMedia for BlockFile {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_blocks(&self, block: u64, buf: &mut [u8]) -> io::Result<()> {
        let off = self.check(block, buf.len())?;
        if buf.is_empty() {
            return Ok(());
        }
        if self.needs_bounce(buf.as_ptr()) {
            let mut bounce = AlignedBuf::zeroed(buf.len());
            self.pread_all(off, &mut bounce)?;
            buf.copy_from_slice(&bounce);
            self.bounced.fetch_add(1, Ordering::Relaxed);
        } else {
            self.pread_all(off, buf)?;
        }
        self.stats.record_read(buf.len() as u64);
        Ok(())
    }

    fn write_blocks(&self, block: u64, data: &[u8]) -> io::Result<()> {
        let off = self.check(block, data.len())?;
        self.check_writable()?;
        if data.is_empty() {
            return Ok(());
        }
        if self.needs_bounce(data.as_ptr()) {
            self.pwrite_all(off, &AlignedBuf::from_slice(data))?;
            self.bounced.fetch_add(1, Ordering::Relaxed);
        } else {
            self.pwrite_all(off, data)?;
        }
        self.stats.record_write(data.len() as u64);
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        if self.read_only {
            return Ok(());
        }
        self.file.sync_data()?;
        self.stats.record_sync();
        Ok(())
    }

    /// A regular file's file system's available bytes (`fstatvfs`); `None`
    /// for a block device, or when the call fails.
    fn host_free_bytes(&self) -> Option<u64> {
        if self.block_device {
            return None;
        }
        let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
        // Safety: `fstatvfs` writes a `statvfs` through the pointer, which
        // points at `st`, alive and large enough for the call; it is read
        // only when the call succeeded.
        let r = unsafe { libc::fstatvfs(self.file.as_raw_fd(), st.as_mut_ptr()) };
        if r != 0 {
            return None;
        }
        // Safety: the call succeeded, so it initialised `st`.
        let st = unsafe { st.assume_init() };
        Some(st.f_bavail.saturating_mul(st.f_frsize))
    }

    /// A regular file's length less what its file system has allocated
    /// (`fstat` blocks); `None` for a block device, or when the call fails.
    fn unbacked_bytes(&self) -> Option<u64> {
        use std::os::unix::fs::MetadataExt;
        if self.block_device {
            return None;
        }
        let md = self.file.metadata().ok()?;
        Some(md.len().saturating_sub(md.blocks().saturating_mul(512)))
    }

    /// A block device gets `BLKDISCARD` (the device's TRIM/UNMAP; a loop
    /// device punches a hole in its backing file); a regular file gets a
    /// hole punched (`FALLOC_FL_PUNCH_HOLE`), which gives its space back
    /// to the file system it lives on. A device or file system that cannot
    /// answers [`io::ErrorKind::Unsupported`].
    fn discard(&self, block: u64, blocks: u64) -> io::Result<()> {
        let len = blocks
            .checked_mul(BLOCK_SIZE)
            .and_then(|l| usize::try_from(l).ok())
            .ok_or_else(|| invalid(&self.path, format_args!("discard of {blocks} blocks")))?;
        let off = self.check(block, len)?;
        self.check_writable()?;
        if len == 0 {
            return Ok(());
        }
        let fd = self.file.as_raw_fd();
        let r = if self.block_device {
            let range: [u64; 2] = [off, len as u64];
            // Safety: BLKDISCARD reads a `u64[2]` (start, length) from the
            // pointer, which points at `range`, alive for the call.
            unsafe { libc::ioctl(fd, BLKDISCARD, range.as_ptr()) }
        } else {
            // Safety: plain system call on an open descriptor; no memory
            // is passed.
            unsafe {
                libc::fallocate(
                    fd,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    off as libc::off_t,
                    len as libc::off_t,
                )
            }
        };
        if r != 0 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::EOPNOTSUPP) | Some(libc::ENOTTY) => io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!(
                        "{}: {} cannot discard blocks ({e})",
                        self.path.display(),
                        if self.block_device {
                            "the device"
                        } else {
                            "its file system"
                        }
                    ),
                ),
                _ => e,
            });
        }
        self.stats.record_discard(len as u64);
        Ok(())
    }

    fn describe(&self) -> String {
        format!(
            "{} {} ({} bytes, {})",
            if self.block_device {
                "block device"
            } else {
                "file"
            },
            self.path.display(),
            self.len,
            if self.direct { "O_DIRECT" } else { "buffered" }
        ) + if self.read_only { ", read-only" } else { "" }
    }

    fn stats(&self) -> BlockStats {
        self.stats.snapshot()
    }
}

impl fmt::Debug for BlockFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockFile")
            .field("path", &self.path)
            .field("len", &self.len)
            .field("direct", &self.direct)
            .field("block_device", &self.block_device)
            .field("fallback_reason", &self.fallback_reason)
            .field("read_only", &self.read_only)
            .finish()
    }
}

#[cfg(test)]
mod tests;
