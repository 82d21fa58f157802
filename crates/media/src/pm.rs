//! [`PmFile`]: persistent memory reached through a shared mapping of a file or
//! block device.
//!
//! Invariants:
//! - The mapping covers the whole media (`len()` bytes, a non-zero multiple of
//!   4096) for the life of the `PmFile`; it is unmapped on drop.
//! - `MAP_SHARED_VALIDATE | MAP_SYNC` is tried first; when it succeeds the media
//!   is DAX ([`PmKind::Dax`]) and cache-line flush + fence make stores durable.
//!   Otherwise the mapping is plain `MAP_SHARED`:
//!   - on tmpfs ([`PmKind::Tmpfs`]) the page cache *is* the media, so flush +
//!     fence is all there is (the emulation of PM used in development);
//!   - on any other file system or a block device ([`PmKind::File`]) the
//!     page cache is volatile, so [`PmMedia::fence`] also `msync(MS_SYNC)`s the
//!     page-aligned span of everything flushed since the previous fence, and
//!     [`PmMedia::sync_all`] `msync`s the whole mapping.
//! - An `msync` failure inside `fence` cannot be returned (the trait's `fence`
//!   is infallible); it is kept, and every later `sync_all` and
//!   [`PmMedia::fence_error`] reports it (not only the next: the caller of
//!   that one may not be the writer whose stores were lost).
//! - User-caused errors (missing file, bad length, unmappable path) are
//!   `io::Error`s naming the path, never panics. Out-of-range or misaligned
//!   access is a caller bug and panics, as the [`PmMedia`] contract says.
//! - [`PmFile::open_read_only`] (a check without repair, a read-only mount)
//!   opens the file O_RDONLY, so it works on a read-only file system, an
//!   immutable file or a snapshot, and maps it `MAP_PRIVATE`: a store that
//!   reaches it anyway lands in a private copy-on-write page of this
//!   process and never reaches the file (no SIGSEGV, no write). Flushes
//!   and fences issue no `msync`; `sync_all` fails with EROFS once a store
//!   has been made, since it can never become durable. Should the kernel
//!   refuse the private writable mapping (ENOMEM under strict overcommit),
//!   the file is mapped shared and read-only, and a store panics instead.

use std::fmt;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use rustix::mm::{MapFlags, MsyncFlags, ProtFlags};

use crate::media_file::{media_len, on_tmpfs, open_mode, open_sized, path_error, with_path};
use crate::{persist, PmMedia};

/// Mapping granularity: lengths must be a multiple of this.
pub const PAGE: u64 = 4096;

/// How stores on a [`PmFile`] become durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PmKind {
    /// DAX mapping (`MAP_SYNC` accepted): flush + fence is durable.
    Dax,
    /// A file on tmpfs: memory is the media; flush + fence is all there is.
    Tmpfs,
    /// Page-cache mapping of an ordinary file or block device: needs `msync`.
    File,
}

impl fmt::Display for PmKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PmKind::Dax => "dax",
            PmKind::Tmpfs => "tmpfs",
            PmKind::File => "file",
        })
    }
}

/// A file or block device mapped as persistent memory.
pub struct PmFile {
    path: PathBuf,
    // Open for the life of the mapping.
    file: File,
    base: NonNull<u8>,
    len: u64,
    kind: PmKind,
    /// `PmKind::File` only: byte span `[min, max)` flushed since the last fence.
    unsynced: Mutex<Option<(u64, u64)>>,
    /// First `msync` failure seen by `fence`, reported by every later
    /// `sync_all` and `fence_error` (kind and text: `io::Error` is no `Clone`).
    sync_error: Mutex<Option<(io::ErrorKind, Option<i32>, String)>>,
    /// How the file is opened and mapped.
    access: Access,
    /// Read-only media: set by the first store (kept in private pages).
    stored: AtomicBool,
}

/// How a [`PmFile`] is opened and mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    /// Read-write, `MAP_SHARED`: stores reach the file.
    Shared,
    /// O_RDONLY, `MAP_PRIVATE` readable and writable: stores stay in
    /// private copy-on-write pages.
    Private,
    /// O_RDONLY, `MAP_SHARED` readable only: a store is a bug and panics.
    ReadOnly,
}

// Safety: `base` points to a mapping (MAP_SHARED, or MAP_PRIVATE when opened
// read-only) owned by this value and valid until drop; nothing in it is tied to a thread. Concurrent access is through
// raw copies and atomics, and the `PmMedia` contract makes callers serialise
// overlapping ranges, so no two threads race on the same bytes.
unsafe impl Send for PmFile {}
// Safety: see `Send`; all interior mutability besides the mapping is behind
// mutexes.
unsafe impl Sync for PmFile {}

/// EROFS, what read-only media answers when asked to write.
fn erofs() -> io::Error {
    io::Error::from_raw_os_error(libc::EROFS)
}

fn check_len(path: &Path, len: u64) -> io::Result<()> {
    if len == 0 || len % PAGE != 0 {
        return Err(path_error(
            path,
            io::ErrorKind::InvalidInput,
            format_args!("length {len} is not a non-zero multiple of {PAGE}"),
        ));
    }
    if usize::try_from(len).is_err() {
        return Err(path_error(
            path,
            io::ErrorKind::InvalidInput,
            format_args!("length {len} does not fit in the address space"),
        ));
    }
    Ok(())
}

impl PmFile {
    /// Maps an existing file or block device over its whole length, which must
    /// be a non-zero multiple of 4096.
    pub fn open(path: impl AsRef<Path>) -> io::Result<PmFile> {
        let path = path.as_ref();
        let file = open_mode(path, false, true).map_err(|e| with_path(path, "open", e))?;
        let (len, is_blk) = media_len(path, &file)?;
        Self::map(path, file, len, is_blk)
    }

    /// Maps an existing file or block device over its whole length for
    /// reading only: opened O_RDONLY (no write permission, writable file
    /// system or mutable file needed), mapped privately, so that no store
    /// can reach the file (see the module docs). For `fsck` without repair
    /// and read-only mounts.
    pub fn open_read_only(path: impl AsRef<Path>) -> io::Result<PmFile> {
        let path = path.as_ref();
        let file = open_mode(path, false, false).map_err(|e| with_path(path, "open", e))?;
        let (len, is_blk) = media_len(path, &file)?;
        check_len(path, len)?;
        let ulen = len as usize;
        let kind = if is_blk {
            PmKind::File
        } else if Self::is_dax(&file, ulen) {
            PmKind::Dax
        } else if on_tmpfs(&file) {
            PmKind::Tmpfs
        } else {
            PmKind::File
        };
        // Safety: a fresh mapping at an address of the kernel's choosing
        // aliases no Rust object; `file` is open for reading and `len` long.
        // A private mapping may be writable on a read-only descriptor: its
        // stores go to anonymous copies, never to the file.
        let private = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                ulen,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::NORESERVE,
                &file,
                0,
            )
        };
        let (addr, access) = match private {
            Ok(addr) => (addr, Access::Private),
            Err(rustix::io::Errno::NOMEM) => {
                // Safety: as above, shared and readable only, so no store
                // can reach the file (one would fault; `write` panics first).
                let addr = unsafe {
                    rustix::mm::mmap(
                        std::ptr::null_mut(),
                        ulen,
                        ProtFlags::READ,
                        MapFlags::SHARED,
                        &file,
                        0,
                    )
                }
                .map_err(|e| with_path(path, "mmap (read-only)", e))?;
                (addr, Access::ReadOnly)
            }
            Err(e) => return Err(with_path(path, "mmap (private)", e)),
        };
        Self::wrap(path, file, addr, len, kind, access)
    }

    /// Whether `file` accepts a `MAP_SYNC` mapping (DAX); the probe mapping
    /// (readable only) is removed at once.
    fn is_dax(file: &File, ulen: usize) -> bool {
        // Safety: a fresh read-only mapping at an address of the kernel's
        // choosing, aliasing no Rust object, unmapped below before anything
        // reads it.
        let probe = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                ulen,
                ProtFlags::READ,
                MapFlags::SHARED_VALIDATE | MapFlags::SYNC,
                file,
                0,
            )
        };
        match probe {
            Ok(addr) => {
                // Safety: `addr` is the mapping of `ulen` bytes made above,
                // of which nothing holds a reference.
                let _ = unsafe { rustix::mm::munmap(addr, ulen) };
                true
            }
            Err(_) => false,
        }
    }

    /// True for media opened by [`open_read_only`](Self::open_read_only).
    pub fn is_read_only(&self) -> bool {
        self.access != Access::Shared
    }

    /// Maps `path` with length `size` (a non-zero multiple of 4096).
    ///
    /// A missing or empty regular file is created sparse with `size` bytes; an
    /// existing regular file must already have exactly `size` bytes (it is never
    /// truncated). A block device must hold at least `size` bytes, of which the
    /// first `size` are mapped.
    pub fn create(path: impl AsRef<Path>, size: u64) -> io::Result<PmFile> {
        let path = path.as_ref();
        check_len(path, size)?;
        let (file, is_blk) = open_sized(path, size)?;
        Self::map(path, file, size, is_blk)
    }

    fn map(path: &Path, file: File, len: u64, is_blk: bool) -> io::Result<PmFile> {
        check_len(path, len)?;
        let ulen = len as usize;
        let prot = ProtFlags::READ | ProtFlags::WRITE;
        // Safety: a fresh mapping at an address of the kernel's choosing aliases
        // no Rust object; `file` is open read-write and at least `len` long.
        let dax = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                ulen,
                prot,
                MapFlags::SHARED_VALIDATE | MapFlags::SYNC,
                &file,
                0,
            )
        };
        let (addr, kind) = match dax {
            Ok(addr) => (addr, PmKind::Dax),
            Err(e) if e == rustix::io::Errno::OPNOTSUPP || e == rustix::io::Errno::INVAL => {
                // Safety: as above, without MAP_SYNC.
                let addr = unsafe {
                    rustix::mm::mmap(std::ptr::null_mut(), ulen, prot, MapFlags::SHARED, &file, 0)
                }
                .map_err(|e| with_path(path, "mmap", e))?;
                let kind = if is_blk {
                    // /dev is devtmpfs, whose f_type is tmpfs's: never ask statfs here.
                    PmKind::File
                } else if on_tmpfs(&file) {
                    PmKind::Tmpfs
                } else {
                    PmKind::File
                };
                (addr, kind)
            }
            Err(e) => return Err(with_path(path, "mmap (MAP_SYNC)", e)),
        };
        Self::wrap(path, file, addr, len, kind, Access::Shared)
    }

    fn wrap(
        path: &Path,
        file: File,
        addr: *mut std::ffi::c_void,
        len: u64,
        kind: PmKind,
        access: Access,
    ) -> io::Result<PmFile> {
        let base = NonNull::new(addr.cast::<u8>())
            .ok_or_else(|| path_error(path, io::ErrorKind::Other, "mmap returned null"))?;
        Ok(PmFile {
            path: path.to_path_buf(),
            file,
            base,
            len,
            kind,
            unsynced: Mutex::new(None),
            sync_error: Mutex::new(None),
            access,
            stored: AtomicBool::new(false),
        })
    }

    /// Before a store: read-only media remembers it (for `sync_all`), or
    /// panics when its mapping cannot take it.
    fn note_store(&self, off: u64, len: usize) {
        match self.access {
            Access::Shared => {}
            Access::Private => self.stored.store(true, Ordering::Relaxed),
            Access::ReadOnly => panic!(
                "{}: store of {len} bytes at {off} to PM media opened read-only",
                self.path.display()
            ),
        }
    }

    /// Whether flushes must be msynced: a shared page-cache mapping.
    fn needs_msync(&self) -> bool {
        self.kind == PmKind::File && self.access == Access::Shared
    }

    /// How durability is reached on this media.
    pub fn kind(&self) -> PmKind {
        self.kind
    }

    /// Path the media was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes of a regular file's length its file system has not allocated
    /// yet (a sparse PM file, as mkfs creates it); 0 for a device.
    ///
    /// Stores into such a page make the file system allocate it then, and a
    /// file system that has no room left answers that fault with SIGBUS,
    /// which kills the process: see [`PmFile::back_fully`].
    pub fn unbacked_bytes(&self) -> io::Result<u64> {
        use std::os::unix::fs::MetadataExt;
        let md = self.file.metadata()?;
        if !md.file_type().is_file() {
            return Ok(0);
        }
        Ok(self.len.saturating_sub(md.blocks().saturating_mul(512)))
    }

    /// Makes the file system allocate every page of a regular file now
    /// (`fallocate`, size unchanged), so no later store into the mapping can
    /// meet a full file system. On tmpfs this takes the memory now. ENOSPC
    /// when the file system cannot back the whole file; EOPNOTSUPP when it
    /// cannot preallocate. A device: nothing to do.
    pub fn back_fully(&self) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        if self.unbacked_bytes()? == 0 {
            return Ok(());
        }
        if self.is_read_only() {
            return Err(with_path(
                &self.path,
                "opened read-only: cannot allocate it",
                erofs(),
            ));
        }
        // Safety: plain system call on a descriptor this value owns; no
        // memory is passed.
        let r = unsafe { libc::fallocate(self.file.as_raw_fd(), 0, 0, self.len as libc::off_t) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Panics unless `[off, off + len)` lies inside the media; returns `off`
    /// as a `usize`.
    fn check(&self, off: u64, len: u64) -> usize {
        match off.checked_add(len) {
            Some(end) if end <= self.len => off as usize,
            _ => panic!(
                "{}: access [{off}, +{len}) outside media of {} bytes",
                self.path.display(),
                self.len
            ),
        }
    }

    fn msync(&self, start: u64, end: u64) -> io::Result<()> {
        let start = start / PAGE * PAGE;
        let end = end.div_ceil(PAGE).saturating_mul(PAGE).min(self.len);
        if end <= start {
            return Ok(());
        }
        // Safety: `[start, end)` is page-aligned and inside our live mapping.
        unsafe {
            rustix::mm::msync(
                self.base.as_ptr().add(start as usize).cast(),
                (end - start) as usize,
                MsyncFlags::SYNC,
            )
        }
        .map_err(|e| with_path(&self.path, "msync", e))
    }
}

impl Drop for PmFile {
    fn drop(&mut self) {
        // Safety: we own the mapping of exactly `len` bytes at `base`; no
        // borrow of it can outlive `self`.
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.len as usize) };
    }
}

impl fmt::Debug for PmFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PmFile")
            .field("path", &self.path)
            .field("len", &self.len)
            .field("kind", &self.kind)
            .field("access", &self.access)
            .finish()
    }
}

impl PmMedia for PmFile {
    fn len(&self) -> u64 {
        self.len
    }

    fn read(&self, off: u64, buf: &mut [u8]) {
        let o = self.check(off, buf.len() as u64);
        // Safety: the source range is inside the mapping (checked) and `buf` is
        // a distinct Rust allocation, so they cannot overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(self.base.as_ptr().add(o), buf.as_mut_ptr(), buf.len())
        };
    }

    fn write(&self, off: u64, data: &[u8]) {
        let o = self.check(off, data.len() as u64);
        self.note_store(off, data.len());
        // Safety: the destination is inside the mapping (checked) and
        // writable (`note_store` panics for a read-only one), `data` is a
        // distinct allocation; callers serialise overlapping ranges.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.base.as_ptr().add(o), data.len())
        };
    }

    fn store_u64(&self, off: u64, value: u64) {
        assert!(off % 8 == 0, "store_u64 at unaligned offset {off}");
        let o = self.check(off, 8);
        self.note_store(off, 8);
        // Safety: the word is inside the mapping (checked) and writable
        // (`note_store` panics for a read-only one), 8-aligned (the map
        // is page-aligned and `off` is 8-aligned), and only accessed atomically
        // or under the caller's serialisation for as long as this call lasts.
        let word = unsafe { AtomicU64::from_ptr(self.base.as_ptr().add(o).cast::<u64>()) };
        word.store(value.to_le(), Ordering::Release);
    }

    fn flush(&self, off: u64, len: u64) {
        let o = self.check(off, len);
        if len == 0 || self.is_read_only() {
            return;
        }
        persist::flush_range(self.base.as_ptr().wrapping_add(o), len as usize);
        if self.needs_msync() {
            let mut u = self.unsynced.lock();
            let end = off + len;
            *u = Some(match *u {
                Some((lo, hi)) => (lo.min(off), hi.max(end)),
                None => (off, end),
            });
        }
    }

    fn fence(&self) {
        persist::fence();
        if self.needs_msync() {
            // Held across msync so that a concurrent fence cannot return before
            // the lines it is responsible for are on disk.
            let mut u = self.unsynced.lock();
            if let Some((lo, hi)) = u.take() {
                if let Err(e) = self.msync(lo, hi) {
                    self.sync_error.lock().get_or_insert((
                        e.kind(),
                        e.raw_os_error(),
                        e.to_string(),
                    ));
                }
            }
        }
    }

    fn sync_all(&self) -> io::Result<()> {
        if self.is_read_only() {
            if self.stored.load(Ordering::Relaxed) {
                return Err(with_path(
                    &self.path,
                    "opened read-only: stores to it were kept in memory and cannot be persisted",
                    erofs(),
                ));
            }
            return Ok(());
        }
        self.fence_error()?;
        if self.needs_msync() {
            let mut u = self.unsynced.lock();
            self.msync(0, self.len)?;
            *u = None;
        }
        Ok(())
    }

    fn fence_error(&self) -> io::Result<()> {
        match &*self.sync_error.lock() {
            None => Ok(()),
            // The errno the application gets, where msync gave one.
            Some((_, Some(raw), _)) => Err(io::Error::from_raw_os_error(*raw)),
            Some((kind, None, text)) => Err(io::Error::new(
                *kind,
                format!(
                    "an earlier flush of the PM tier failed, so stores since may be lost: {text}"
                ),
            )),
        }
    }

    fn fence_is_durable(&self) -> bool {
        !self.needs_msync()
    }

    fn describe(&self) -> String {
        format!(
            "{} ({}, {}){}",
            self.path.display(),
            self.kind,
            persist::flush_instruction(),
            if self.is_read_only() {
                ", read-only"
            } else {
                ""
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip_in(dir: &Path) -> PmKind {
        let d = tempfile::tempdir_in(dir).unwrap();
        let p = d.path().join("pm");
        let kind;
        {
            let pm = PmFile::create(&p, 64 * 1024).unwrap();
            kind = pm.kind();
            pm.back_fully().unwrap();
            assert_eq!(pm.len(), 64 * 1024);
            pm.write(100, b"hello, pm");
            pm.store_u64(4096, 0x0102_0304_0506_0708);
            pm.persist(100, 9);
            pm.persist(4096, 8);
            let mut b = [0u8; 9];
            pm.read(100, &mut b);
            assert_eq!(&b, b"hello, pm");
            pm.sync_all().unwrap();
            assert!(pm.describe().contains(&kind.to_string()));
        }
        let pm = PmFile::open(&p).unwrap();
        assert_eq!(pm.len(), 64 * 1024);
        let mut b = [0u8; 9];
        pm.read(100, &mut b);
        assert_eq!(&b, b"hello, pm");
        assert_eq!(pm.load_u64(4096), 0x0102_0304_0506_0708);
        // Re-creating with the same size opens it as is.
        drop(pm);
        let pm = PmFile::create(&p, 64 * 1024).unwrap();
        assert_eq!(pm.load_u64(4096), 0x0102_0304_0506_0708);
        kind
    }

    #[test]
    fn pm_file_round_trips_and_reopens() {
        assert_eq!(round_trip_in(Path::new("/dev/shm")), PmKind::Tmpfs);
        // /tmp is ext4 here (PmKind::File), but may be tmpfs elsewhere.
        assert_ne!(round_trip_in(Path::new("/tmp")), PmKind::Dax);
    }

    #[test]
    fn a_sparse_pm_file_is_backed_fully_on_request() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("sparse");
        let pm = PmFile::create(&p, 1 << 20).unwrap();
        assert!(
            pm.unbacked_bytes().unwrap() > 0,
            "mkfs-style files start sparse"
        );
        pm.back_fully().unwrap();
        assert_eq!(pm.unbacked_bytes().unwrap(), 0);
        assert_eq!(
            std::fs::metadata(&p).unwrap().len(),
            1 << 20,
            "size unchanged"
        );
        pm.back_fully().unwrap();
    }

    #[test]
    fn mmap_on_tmpfs_reports_tmpfs_kind() {
        let d = tempfile::tempdir_in("/dev/shm").unwrap();
        let pm = PmFile::create(d.path().join("x"), 8192).unwrap();
        assert_eq!(pm.kind(), PmKind::Tmpfs);
        assert!(pm.describe().contains("(tmpfs, "));
        // Memory is the media: a fence is all fsync could add.
        assert!(pm.fence_is_durable());
    }

    #[test]
    fn pm_file_rejects_unaligned_length() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("odd");
        let e = PmFile::create(&p, 5000).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("odd"), "{e}");
        assert!(!p.exists(), "a rejected create must not leave a file");

        std::fs::write(&p, vec![0u8; 5000]).unwrap();
        let e = PmFile::open(&p).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("5000"), "{e}");

        std::fs::write(&p, b"").unwrap();
        assert_eq!(
            PmFile::open(&p).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }

    #[test]
    fn pm_file_errors_name_the_path() {
        let e = PmFile::open("/nonexistent/terrace-pm").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("/nonexistent/terrace-pm"), "{e}");

        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("sized");
        drop(PmFile::create(&p, 8192).unwrap());
        let e = PmFile::create(&p, 16384).unwrap_err();
        assert!(e.to_string().contains("8192"), "{e}");
        assert_eq!(PmFile::open(&p).unwrap().len(), 8192);

        let e = PmFile::open(d.path()).unwrap_err();
        assert!(e.to_string().contains(&*d.path().to_string_lossy()), "{e}");
    }

    #[test]
    fn file_kind_fence_msyncs_flushed_range() {
        let d = tempfile::tempdir_in("/var/tmp").unwrap();
        let pm = PmFile::create(d.path().join("f"), 3 * PAGE).unwrap();
        // An ordinary file needs the msync fsync does (and its error).
        if pm.kind() == PmKind::File {
            assert!(!pm.fence_is_durable());
        }
        pm.write(PAGE - 4, &[7u8; 8]);
        pm.flush(PAGE - 4, 8);
        pm.fence();
        assert!(pm.unsynced.lock().is_none());
        pm.sync_all().unwrap();
        let mut b = [0u8; 8];
        pm.read(PAGE - 4, &mut b);
        assert_eq!(b, [7u8; 8]);
        // The bytes reached the file itself.
        let on_disk = std::fs::read(d.path().join("f")).unwrap();
        assert_eq!(
            &on_disk[(PAGE - 4) as usize..(PAGE + 4) as usize],
            &[7u8; 8]
        );
    }

    /// A pool-like file with a recognisable pattern, and its bytes.
    fn patterned(dir: &Path, len: u64) -> (PathBuf, Vec<u8>) {
        let p = dir.join("ro");
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&p, &bytes).unwrap();
        (p, bytes)
    }

    #[test]
    fn read_only_stores_never_reach_the_file() {
        for parent in ["/dev/shm", "/var/tmp"] {
            let d = tempfile::tempdir_in(parent).unwrap();
            let (p, bytes) = patterned(d.path(), 4 * PAGE);
            let pm = PmFile::open_read_only(&p).unwrap();
            assert!(pm.is_read_only());
            assert_eq!(pm.len(), 4 * PAGE);
            assert!(pm.describe().ends_with(", read-only"), "{}", pm.describe());
            assert!(pm.fence_is_durable(), "nothing to msync");
            let mut b = vec![0u8; PAGE as usize];
            pm.read(PAGE, &mut b);
            assert_eq!(&b[..], &bytes[PAGE as usize..2 * PAGE as usize]);
            // Nothing stored yet: a sync has nothing to do.
            pm.sync_all().unwrap();
            // Stores land in private pages: this process sees them…
            pm.write(100, b"not on disk");
            pm.store_u64(2 * PAGE, 0xdead_beef);
            pm.persist(100, 11);
            pm.persist(2 * PAGE, 8);
            assert_eq!(pm.load_u64(2 * PAGE), 0xdead_beef);
            let mut w = [0u8; 11];
            pm.read(100, &mut w);
            assert_eq!(&w, b"not on disk");
            // …the file never does, and a sync says so.
            let e = pm.sync_all().unwrap_err();
            assert_eq!(e.kind(), erofs().kind(), "{e}");
            assert!(e.to_string().contains(&*p.to_string_lossy()), "{e}");
            assert_eq!(std::fs::read(&p).unwrap(), bytes, "{parent}");
            let other = PmFile::open_read_only(&p).unwrap();
            assert_ne!(other.load_u64(2 * PAGE), 0xdead_beef);
            drop(pm);
            drop(other);
            assert_eq!(std::fs::read(&p).unwrap(), bytes, "{parent}");
        }
    }

    #[test]
    fn read_only_open_needs_no_write_permission() {
        let d = tempfile::tempdir_in("/dev/shm").unwrap();
        let (p, bytes) = patterned(d.path(), 2 * PAGE);
        let mut perm = std::fs::metadata(&p).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o444);
        std::fs::set_permissions(&p, perm).unwrap();
        let pm = PmFile::open_read_only(&p).unwrap();
        assert_eq!(pm.kind(), PmKind::Tmpfs);
        let e = pm.back_fully();
        // The file is fully written, so there is nothing to allocate.
        assert!(e.is_ok(), "{e:?}");
        let mut b = vec![0u8; 2 * PAGE as usize];
        pm.read(0, &mut b);
        assert_eq!(b, bytes);
        // A read-only open is refused nothing a writable one would be.
        assert_eq!(
            PmFile::open_read_only(d.path().join("missing"))
                .unwrap_err()
                .kind(),
            io::ErrorKind::NotFound
        );
        std::fs::write(d.path().join("odd"), vec![0u8; 5000]).unwrap();
        let e = PmFile::open_read_only(d.path().join("odd")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    }

    #[test]
    fn read_only_sparse_file_is_not_allocated() {
        let d = tempfile::tempdir_in("/dev/shm").unwrap();
        let p = d.path().join("sparse");
        drop(PmFile::create(&p, 1 << 20).unwrap());
        let pm = PmFile::open_read_only(&p).unwrap();
        let before = pm.unbacked_bytes().unwrap();
        assert!(before > 0);
        let e = pm.back_fully().unwrap_err();
        assert_eq!(e.kind(), erofs().kind(), "{e}");
        assert_eq!(pm.unbacked_bytes().unwrap(), before);
    }

    #[test]
    #[should_panic(expected = "outside media")]
    fn out_of_range_read_panics() {
        let d = tempfile::tempdir_in("/dev/shm").unwrap();
        let pm = PmFile::create(d.path().join("x"), PAGE).unwrap();
        let mut b = [0u8; 2];
        pm.read(PAGE - 1, &mut b);
    }

    #[test]
    #[should_panic(expected = "unaligned")]
    fn store_u64_rejects_unaligned_offset() {
        let d = tempfile::tempdir_in("/dev/shm").unwrap();
        let pm = PmFile::create(d.path().join("x"), PAGE).unwrap();
        pm.store_u64(4, 1);
    }
}
