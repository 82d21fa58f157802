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

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::block::{
    check_block_range, is_block_aligned, AlignedBuf, BlockMedia, BlockStats, BlockStatsCounter,
    BLOCK_SIZE,
};

/// `statfs.f_type` of tmpfs.
const TMPFS_MAGIC: i64 = 0x0102_1994;

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
}

fn with_path(path: &Path, what: &str, e: impl Into<io::Error>) -> io::Error {
    let e = e.into();
    io::Error::new(e.kind(), format!("{}: {what}: {e}", path.display()))
}

fn invalid(path: &Path, msg: impl fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{}: {msg}", path.display()),
    )
}

fn open_rw(path: &Path, direct: bool) -> io::Result<File> {
    open_mode(path, direct, true)
}

/// Opens for reading, and for writing when `writable`.
fn open_mode(path: &Path, direct: bool, writable: bool) -> io::Result<File> {
    let mut o = OpenOptions::new();
    o.read(true).write(writable);
    if direct {
        o.custom_flags(libc::O_DIRECT);
    }
    o.open(path)
}

/// Size of a regular file or block device, and whether it is a block device.
fn media_len(path: &Path, file: &File) -> io::Result<(u64, bool)> {
    let meta = file.metadata().map_err(|e| with_path(path, "stat", e))?;
    let ft = meta.file_type();
    if ft.is_block_device() {
        let len = rustix::fs::seek(file, rustix::fs::SeekFrom::End(0))
            .map_err(|e| with_path(path, "seek to end of block device", e))?;
        Ok((len, true))
    } else if ft.is_file() {
        Ok((meta.len(), false))
    } else {
        Err(invalid(path, "not a regular file or block device"))
    }
}

fn on_tmpfs(file: &File) -> bool {
    #[allow(clippy::useless_conversion)]
    rustix::fs::fstatfs(file).is_ok_and(|st| i64::from(st.f_type) == TMPFS_MAGIC)
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
    /// (a read-only mount), preferring O_DIRECT: every write fails (EBADF),
    /// so nothing can reach the media.
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
        let file = match open_rw(path, false) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(|e| with_path(path, "create", e))?,
            Err(e) => return Err(with_path(path, "open", e)),
        };
        let (len, is_blk) = media_len(path, &file)?;
        if is_blk {
            if len < size {
                return Err(invalid(
                    path,
                    format_args!("block device has {len} bytes, fewer than the {size} requested"),
                ));
            }
        } else if len == 0 {
            file.set_len(size)
                .map_err(|e| with_path(path, "set length", e))?;
        } else if len != size {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "{}: exists with length {len}, not the {size} requested (remove it or open it as is)",
                    path.display()
                ),
            ));
        }
        drop(file);
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
        self.file.sync_data()?;
        self.stats.record_sync();
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
        )
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
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    const B: usize = BLOCK_SIZE as usize;

    /// A buffer of `len` bytes whose start is 1 byte past a 4096 boundary.
    struct Misaligned(AlignedBuf, usize);
    impl Misaligned {
        fn new(len: usize) -> Misaligned {
            Misaligned(AlignedBuf::zeroed(len + 1), len)
        }
        fn get(&mut self) -> &mut [u8] {
            &mut self.0[1..=self.1]
        }
    }

    fn pattern(block: u64, n: usize) -> Vec<u8> {
        (0..n * B)
            .map(|i| (block as usize * 31 + i / B * 7 + i % 251) as u8)
            .collect()
    }

    /// Round trips through misaligned and aligned buffers, checks stats and
    /// reopens the media buffered to see the data reached it.
    fn exercise(f: &BlockFile) {
        let blocks = f.blocks();
        assert!(blocks >= 16);
        let before = f.stats();
        // Misaligned single- and multi-block writes.
        let mut w = Misaligned::new(3 * B);
        w.get().copy_from_slice(&pattern(2, 3));
        f.write_blocks(2, w.get()).unwrap();
        let mut w1 = Misaligned::new(B);
        w1.get().copy_from_slice(&pattern(blocks - 1, 1));
        f.write_blocks(blocks - 1, w1.get()).unwrap();
        // Aligned write.
        f.write_blocks(8, &AlignedBuf::from_slice(&pattern(8, 4)))
            .unwrap();
        // Misaligned and aligned reads.
        let mut r = Misaligned::new(3 * B);
        f.read_blocks(2, r.get()).unwrap();
        assert_eq!(r.get(), &pattern(2, 3)[..]);
        let mut a = AlignedBuf::zeroed(4 * B);
        f.read_blocks(8, &mut a).unwrap();
        assert_eq!(&a[..], &pattern(8, 4)[..]);
        let mut v = Misaligned::new(B);
        f.read_blocks(blocks - 1, v.get()).unwrap();
        assert_eq!(v.get(), &pattern(blocks - 1, 1)[..]);
        f.sync().unwrap();
        let s = f.stats();
        assert_eq!(s.write_requests - before.write_requests, 3);
        assert_eq!(s.write_bytes - before.write_bytes, 8 * 4096);
        assert_eq!(s.read_requests - before.read_requests, 3);
        assert_eq!(s.read_bytes - before.read_bytes, 8 * 4096);
        assert!(s.max_write_bytes >= 4 * 4096);
        assert_eq!(s.syncs - before.syncs, 1);
        // Out of range and misaligned lengths are errors.
        let e = f.read_blocks(blocks, v.get()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let e = f.write_blocks(0, &v.get()[..512]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        // The data is on the media: read it back buffered.
        let g = BlockFile::open_with(f.path(), DirectIo::Off).unwrap();
        assert!(!g.is_direct() && g.fallback_reason().is_none());
        let mut all = vec![0u8; 12 * B];
        g.read_blocks(0, &mut all).unwrap();
        assert_eq!(&all[2 * B..5 * B], &pattern(2, 3)[..]);
        assert_eq!(&all[8 * B..], &pattern(8, 4)[..]);
    }

    fn tempdir_in(dir: &str) -> Option<tempfile::TempDir> {
        tempfile::Builder::new()
            .prefix("terrace-block-")
            .tempdir_in(dir)
            .ok()
    }

    #[test]
    fn direct_io_accepts_unaligned_caller_buffers() {
        let dir = tempdir_in("/tmp").expect("tempdir in /tmp");
        let path = dir.path().join("tier");
        let f = BlockFile::create(&path, 1 << 20).unwrap();
        eprintln!("{} / {:?}", f.describe(), f.fallback_reason());
        assert_eq!(f.len(), 1 << 20);
        assert!(!f.is_block_device());
        let tmpfs = on_tmpfs(&File::open(&path).unwrap());
        assert_eq!(f.is_direct(), !tmpfs, "{:?}", f.fallback_reason());
        exercise(&f);
        if f.is_direct() {
            // Two misaligned writes and two misaligned reads in `exercise`.
            assert_eq!(f.bounced_requests(), 4);
        }
        // A regular file: compare with std's view of it.
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[2 * B..5 * B], &pattern(2, 3)[..]);
        // Required direct I/O works wherever preferred direct I/O does.
        if !tmpfs {
            assert!(BlockFile::open_with(&path, DirectIo::Require)
                .unwrap()
                .is_direct());
        }
    }

    #[test]
    fn a_read_only_open_reads_and_refuses_every_write() {
        for parent in ["/tmp", "/dev/shm"] {
            let Some(dir) = tempdir_in(parent) else {
                continue;
            };
            let path = dir.path().join("tier");
            let f = BlockFile::create(&path, 64 << 10).unwrap();
            let data = AlignedBuf::from_slice(&pattern(0, 2));
            f.write_blocks(3, &data).unwrap();
            f.sync().unwrap();
            drop(f);
            let before = std::fs::read(&path).unwrap();
            let r = BlockFile::open_read_only(&path).unwrap();
            let mut back = AlignedBuf::zeroed(2 * B);
            r.read_blocks(3, &mut back).unwrap();
            assert_eq!(&back[..], &pattern(0, 2)[..]);
            let e = r.write_blocks(0, &data).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EBADF), "{e}");
            assert_eq!(std::fs::read(&path).unwrap(), before, "{parent}");
            // No write permission is needed.
            let mut perm = std::fs::metadata(&path).unwrap().permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o444);
            std::fs::set_permissions(&path, perm).unwrap();
            BlockFile::open_read_only(&path).unwrap();
        }
    }

    #[test]
    fn tmpfs_falls_back_to_buffered_io() {
        let Some(dir) = tempdir_in("/dev/shm") else {
            eprintln!("skipped: no /dev/shm");
            return;
        };
        let path = dir.path().join("tier");
        let f = BlockFile::create(&path, 256 << 10).unwrap();
        if !on_tmpfs(&File::open(&path).unwrap()) {
            eprintln!("skipped: /dev/shm is not tmpfs");
            return;
        }
        assert!(!f.is_direct());
        let why = f.fallback_reason().expect("fallback reason");
        assert!(why.contains("tmpfs"), "{why}");
        assert!(f.describe().contains("buffered"));
        exercise(&f);
        assert_eq!(f.bounced_requests(), 0);
    }

    #[test]
    fn open_errors_name_the_path_and_odd_sizes_round_down() {
        let dir = tempdir_in("/tmp").unwrap();
        let missing = dir.path().join("missing");
        let e = BlockFile::open(&missing).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("missing"), "{e}");
        let e = BlockFile::open(dir.path()).unwrap_err();
        assert!(
            e.to_string().contains(&*dir.path().to_string_lossy()),
            "{e}"
        );
        let small = dir.path().join("small");
        std::fs::write(&small, [0u8; 4095]).unwrap();
        let e = BlockFile::open(&small).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("smaller than one"), "{e}");
        let odd = dir.path().join("odd");
        std::fs::write(&odd, vec![0u8; 3 * B + 100]).unwrap();
        assert_eq!(BlockFile::open(&odd).unwrap().len(), 3 * BLOCK_SIZE);
        // create: refuses a different size, accepts the same one, creates sparse.
        let e = BlockFile::create(&odd, 4 * BLOCK_SIZE).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        let e = BlockFile::create(dir.path().join("x"), 100).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let fresh = dir.path().join("fresh");
        assert_eq!(
            BlockFile::create(&fresh, 8 * BLOCK_SIZE).unwrap().blocks(),
            8
        );
        assert_eq!(
            BlockFile::create(&fresh, 8 * BLOCK_SIZE).unwrap().blocks(),
            8
        );
    }

    #[test]
    fn concurrent_requests_on_disjoint_blocks() {
        let dir = tempdir_in("/tmp").unwrap();
        let f = BlockFile::create(dir.path().join("tier"), 64 * BLOCK_SIZE).unwrap();
        std::thread::scope(|s| {
            for t in 0..2u64 {
                let f = &f;
                s.spawn(move || {
                    for i in 0..32u64 {
                        let blk = i * 2 + t;
                        f.write_blocks(blk, &pattern(blk, 1)).unwrap();
                    }
                });
            }
        });
        let mut all = vec![0u8; 64 * B];
        f.read_blocks(0, &mut all).unwrap();
        for blk in 0..64u64 {
            let b = blk as usize;
            assert_eq!(&all[b * B..(b + 1) * B], &pattern(blk, 1)[..]);
        }
        assert_eq!(f.stats().write_requests, 64);
    }

    /// A loop device attached to a file; detached on drop (also on panic).
    struct LoopDev(PathBuf);

    impl LoopDev {
        fn attach(file: &Path) -> Option<LoopDev> {
            let out = Command::new("losetup")
                .args(["-f", "--show"])
                .arg(file)
                .output()
                .ok()?;
            if !out.status.success() {
                eprintln!(
                    "skipped: losetup failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                return None;
            }
            let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
            Some(LoopDev(PathBuf::from(dev)))
        }
    }

    impl Drop for LoopDev {
        fn drop(&mut self) {
            let ok = Command::new("losetup")
                .arg("-d")
                .arg(&self.0)
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                eprintln!("warning: losetup -d {} failed", self.0.display());
            }
        }
    }

    #[test]
    fn loop_device_direct_io_bounces_unaligned_buffers() {
        let dir = tempdir_in("/tmp").unwrap();
        let backing = dir.path().join("backing");
        File::create(&backing).unwrap().set_len(64 << 20).unwrap();
        let Some(dev) = LoopDev::attach(&backing) else {
            return;
        };
        let f = BlockFile::open(&dev.0).unwrap();
        eprintln!("{} / {:?}", f.describe(), f.fallback_reason());
        assert!(f.is_block_device());
        assert!(f.is_direct(), "{:?}", f.fallback_reason());
        assert_eq!(f.len(), 64 << 20);
        // The kernel itself rejects a misaligned O_DIRECT buffer here.
        let raw = open_rw(&dev.0, true).unwrap();
        let mut m = Misaligned::new(B);
        let e = raw.read_at(m.get(), 0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
        drop(raw);
        exercise(&f);
        assert_eq!(f.bounced_requests(), 4);
        // After sync the data is in the backing file.
        drop(f);
        let bytes = std::fs::read(&backing).unwrap();
        assert_eq!(&bytes[8 * B..12 * B], &pattern(8, 4)[..]);
        // Creating on a device: must be large enough; uses the first `size` bytes.
        let e = BlockFile::create(&dev.0, 128 << 20).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(BlockFile::create(&dev.0, 1 << 20).unwrap().len(), 1 << 20);
    }

    /// A ramfs mounted on a directory; unmounted on drop (also on panic).
    struct RamfsMount(PathBuf);

    impl RamfsMount {
        fn mount(dir: &Path) -> Option<RamfsMount> {
            let ok = Command::new("mount")
                .args(["-t", "ramfs", "terrace-test"])
                .arg(dir)
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                eprintln!("skipped: cannot mount ramfs (not root?)");
                return None;
            }
            Some(RamfsMount(dir.to_path_buf()))
        }
    }

    impl Drop for RamfsMount {
        fn drop(&mut self) {
            let ok = Command::new("umount")
                .arg(&self.0)
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                eprintln!("warning: umount {} failed", self.0.display());
            }
        }
    }

    #[test]
    fn refused_o_direct_falls_back_to_buffered_io() {
        // ramfs refuses O_DIRECT at open with EINVAL (tmpfs accepts it since 6.6).
        let dir = tempdir_in("/tmp").unwrap();
        let Some(mnt) = RamfsMount::mount(dir.path()) else {
            return;
        };
        let path = mnt.0.join("tier");
        let f = BlockFile::create(&path, 256 << 10).unwrap();
        if f.is_direct() {
            eprintln!("skipped: this kernel's ramfs accepts O_DIRECT");
            return;
        }
        let why = f.fallback_reason().expect("fallback reason");
        assert!(why.contains("refuses O_DIRECT"), "{why}");
        exercise(&f);
        assert_eq!(f.bounced_requests(), 0);
        let e = BlockFile::open_with(&path, DirectIo::Require).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("O_DIRECT required"), "{e}");
        drop(f);
    }

    /// Rough latency of 4 KiB random reads and write+sync, for the notes:
    /// `cargo test -p terrace-media --release -- --ignored --nocapture measure`.
    #[test]
    #[ignore]
    fn measure_block_file_latency() {
        use std::time::Instant;
        let tmp = tempdir_in("/tmp").unwrap();
        let shm = tempdir_in("/dev/shm").unwrap();
        let backing = tmp.path().join("backing");
        File::create(&backing).unwrap().set_len(64 << 20).unwrap();
        let dev = LoopDev::attach(&backing);
        let mut targets: Vec<(String, BlockFile)> = Vec::new();
        let tfile = tmp.path().join("tier");
        for (name, mode) in [
            ("/tmp direct", DirectIo::Prefer),
            ("/tmp buffered", DirectIo::Off),
        ] {
            let f = BlockFile::create_with(&tfile, 64 << 20, mode).unwrap();
            targets.push((name.into(), f));
        }
        targets.push((
            "/dev/shm".into(),
            BlockFile::create(shm.path().join("tier"), 64 << 20).unwrap(),
        ));
        if let Some(d) = &dev {
            targets.push(("loop direct".into(), BlockFile::open(&d.0).unwrap()));
        }
        for (name, f) in &targets {
            let n = f.blocks();
            let fill = AlignedBuf::from_slice(&vec![0x5a; 1 << 20]);
            for i in 0..n / 256 {
                f.write_blocks(i * 256, &fill).unwrap();
            }
            f.sync().unwrap();
            let mut a = AlignedBuf::zeroed(B);
            let mut m = Misaligned::new(B);
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            let mut next = || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % n
            };
            let iters = 2000;
            let t = Instant::now();
            for _ in 0..iters {
                f.read_blocks(next(), &mut a).unwrap();
            }
            let aligned = t.elapsed() / iters;
            let t = Instant::now();
            for _ in 0..iters {
                f.read_blocks(next(), m.get()).unwrap();
            }
            let misaligned = t.elapsed() / iters;
            let t = Instant::now();
            for _ in 0..200 {
                f.write_blocks(next(), &a).unwrap();
                f.sync().unwrap();
            }
            let wsync = t.elapsed() / 200;
            eprintln!(
                "{name:14} 4K read {aligned:?} (misaligned buffer {misaligned:?}), 4K write+fdatasync {wsync:?}"
            );
        }
    }
}
