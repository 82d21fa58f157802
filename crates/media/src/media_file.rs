//! Opening a regular file or block device as media, shared by [`PmFile`]
//! (mapped) and [`BlockFile`] (read and written): its size, whether it is on
//! tmpfs, creating it with an exact size, and errors that name the path.
//!
//! Invariants: a regular file is never truncated or grown once it has a
//! length (only a missing or empty one is sized); a block device is never
//! resized, only checked to be large enough; every error names the path.
//!
//! [`PmFile`]: crate::PmFile
//! [`BlockFile`]: crate::BlockFile

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// `statfs.f_type` of tmpfs.
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// `e` with the path and what was being done prefixed to its message (the
/// kind and, for OS errors, nothing else is kept).
pub(crate) fn with_path(path: &Path, what: &str, e: impl Into<io::Error>) -> io::Error {
    let e = e.into();
    io::Error::new(e.kind(), format!("{}: {what}: {e}", path.display()))
}

/// An error of `kind` whose message is `msg` after the path.
pub(crate) fn path_error(path: &Path, kind: io::ErrorKind, msg: impl fmt::Display) -> io::Error {
    io::Error::new(kind, format!("{}: {msg}", path.display()))
}

/// An `InvalidInput` error naming the path.
pub(crate) fn invalid(path: &Path, msg: impl fmt::Display) -> io::Error {
    path_error(path, io::ErrorKind::InvalidInput, msg)
}

/// Opens `path` for reading, and for writing when `writable`; with
/// O_DIRECT when `direct`. Errors are the OS's, without the path.
pub(crate) fn open_mode(path: &Path, direct: bool, writable: bool) -> io::Result<File> {
    let mut o = OpenOptions::new();
    o.read(true).write(writable);
    if direct {
        o.custom_flags(libc::O_DIRECT);
    }
    o.open(path)
}

/// Size of a regular file or block device, and whether it is a block device.
pub(crate) fn media_len(path: &Path, file: &File) -> io::Result<(u64, bool)> {
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

/// Whether `file` is on tmpfs (where the page cache is the media). Do not
/// ask for a block device: /dev is devtmpfs, whose `f_type` is tmpfs's.
pub(crate) fn on_tmpfs(file: &File) -> bool {
    #[allow(clippy::useless_conversion)]
    rustix::fs::fstatfs(file).is_ok_and(|st| i64::from(st.f_type) == TMPFS_MAGIC)
}

/// Opens `path` read-write (buffered) as media of `size` bytes: a missing
/// or empty regular file is created sparse with `size` bytes; an existing
/// regular file must already have exactly `size` bytes; a block device must
/// hold at least `size` bytes. Returns the file and whether it is a block
/// device. `size` is the caller's to check (a multiple of its unit).
pub(crate) fn open_sized(path: &Path, size: u64) -> io::Result<(File, bool)> {
    let file = match open_mode(path, false, true) {
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
        return Err(path_error(
            path,
            io::ErrorKind::AlreadyExists,
            format_args!(
                "exists with length {len}, not the {size} requested (remove it or open it as is)"
            ),
        ));
    }
    Ok((file, is_blk))
}
