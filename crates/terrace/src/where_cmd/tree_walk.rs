//! Walking a directory tree at any depth, for the commands that act on
//! everything below a directory (`terrace where DIR`, `terrace rule -r`,
//! `terrace migrate`).
//!
//! [`walk_below`] reads each directory through a file descriptor opened
//! relative to its parent's (`openat`, `fstatat`, `fdopendir`), as find and
//! du do, so a file whose path is longer than `PATH_MAX` (4096 bytes) is
//! reached like any other. Every entry it cannot read is returned with its
//! error, never dropped: a caller reports each and fails.
//!
//! [`reachable`] runs a path-taking system call (`getxattr`, …) on a path of
//! any length: a path too long for the kernel is opened component by
//! component (`O_PATH`), and the call gets `/proc/self/fd/N`.

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What an entry is, as far as the walking commands care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Directory,
    /// A symbolic link, device, FIFO or socket.
    Other,
}

/// An entry below the walked directory.
#[derive(Debug)]
pub(crate) struct Entry {
    /// The walked directory's path joined with the names down to the entry
    /// (it may be longer than `PATH_MAX`: see [`reachable`]).
    pub path: PathBuf,
    pub ino: u64,
    pub size: u64,
    pub kind: Kind,
}

/// An entry that could not be read or visited, with why.
pub(crate) type WalkError = (PathBuf, io::Error);

/// How a walk hands each entry to its caller: an error is returned with the
/// entry's path among the walk's errors.
pub(crate) type Visit<'a> = &'a mut dyn FnMut(&Entry) -> io::Result<()>;

/// Hands every entry below `top` to `visit`, in name order, a directory
/// before what is below it. Symbolic links are not followed (`top` itself
/// is), and nothing on another file system (a mount below) is visited or
/// entered. Returns the entries that could not be read (`top` itself when it
/// cannot be opened) and those `visit` failed, in walk order; an entry
/// deleted during the walk is not an error.
pub(crate) fn walk_below(top: &Path, visit: Visit) -> Vec<WalkError> {
    let mut errors = Vec::new();
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    let opened = open_long(top, flags).and_then(|fd| {
        let dev = fstat(fd.as_raw_fd())?.st_dev;
        Ok((Directory::from_fd(fd)?, dev))
    });
    match opened {
        Ok((dir, dev)) => walk_directory(&dir, top, dev, visit, &mut errors),
        Err(e) => errors.push((top.to_path_buf(), e)),
    }
    errors
}

fn walk_directory(
    dir: &Directory,
    path: &Path,
    dev: u64,
    visit: Visit,
    errors: &mut Vec<WalkError>,
) {
    let names = match dir.names() {
        Ok(names) => names,
        Err(e) => {
            errors.push((path.to_path_buf(), e));
            return;
        }
    };
    for name in names {
        let entry_path = path.join(OsStr::from_bytes(name.to_bytes()));
        let st = match fstatat(dir.fd(), &name) {
            Ok(st) => st,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
            Err(e) => {
                errors.push((entry_path, e));
                continue;
            }
        };
        if st.st_dev != dev {
            continue;
        }
        let kind = match st.st_mode & libc::S_IFMT {
            libc::S_IFREG => Kind::File,
            libc::S_IFDIR => Kind::Directory,
            _ => Kind::Other,
        };
        let entry = Entry {
            path: entry_path,
            ino: st.st_ino,
            size: u64::try_from(st.st_size).unwrap_or(0),
            kind,
        };
        if let Err(e) = visit(&entry) {
            errors.push((entry.path.clone(), e));
        }
        if kind != Kind::Directory {
            continue;
        }
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        match openat(dir.fd(), &name, flags).and_then(Directory::from_fd) {
            Ok(below) => walk_directory(&below, &entry.path, dev, visit, errors),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            // Said once when `visit` met the same error there.
            Err(e)
                if errors.last().is_some_and(|(p, said)| {
                    *p == entry.path && said.raw_os_error() == e.raw_os_error()
                }) => {}
            Err(e) => errors.push((entry.path, e)),
        }
    }
}

/// An open directory stream; closed when dropped.
struct Directory(std::ptr::NonNull<libc::DIR>);

impl Directory {
    /// Takes over `fd`, a directory opened for reading.
    fn from_fd(fd: OwnedFd) -> io::Result<Directory> {
        let raw = fd.as_raw_fd();
        // Safety: `raw` is an open directory descriptor; on success the
        // stream owns it (closedir closes it), so `fd` gives it up.
        let stream = unsafe { libc::fdopendir(raw) };
        match std::ptr::NonNull::new(stream) {
            Some(stream) => {
                std::mem::forget(fd);
                Ok(Directory(stream))
            }
            None => Err(io::Error::last_os_error()),
        }
    }

    fn fd(&self) -> RawFd {
        // Safety: the stream is open until drop.
        unsafe { libc::dirfd(self.0.as_ptr()) }
    }

    /// The names in the directory but `.` and `..`, sorted by their bytes.
    fn names(&self) -> io::Result<Vec<CString>> {
        let mut names = Vec::new();
        loop {
            // Safety: errno is thread-local; readdir leaves it unchanged at
            // the end of the stream and sets it on an error.
            unsafe { *libc::__errno_location() = 0 };
            // Safety: the stream is open; the entry stays valid until the
            // next readdir on it, and its name is copied out before that.
            let entry = unsafe { libc::readdir(self.0.as_ptr()) };
            if entry.is_null() {
                let e = io::Error::last_os_error();
                if e.raw_os_error().unwrap_or(0) != 0 {
                    return Err(e);
                }
                break;
            }
            // Safety: `d_name` is a NUL-terminated name inside the entry.
            let name = unsafe { CStr::from_ptr((*entry).d_name.as_ptr()) };
            if name.to_bytes() != b"." && name.to_bytes() != b".." {
                names.push(name.to_owned());
            }
        }
        names.sort();
        Ok(names)
    }
}

impl Drop for Directory {
    fn drop(&mut self) {
        // Safety: the stream is open and not used after this.
        unsafe { libc::closedir(self.0.as_ptr()) };
    }
}

fn openat(dir: RawFd, name: &CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    // Safety: `name` is NUL-terminated and lives across the call.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // Safety: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn fstatat(dir: RawFd, name: &CStr) -> io::Result<libc::stat> {
    // Safety: a zeroed `stat` is a valid value of the plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // Safety: `name` is NUL-terminated; `st` is writable.
    let r = unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    // Safety: a zeroed `stat` is a valid value of the plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // Safety: `st` is writable.
    if unsafe { libc::fstat(fd, &mut st) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// The longest path the kernel takes in one call, with its NUL.
const PATH_MAX: usize = libc::PATH_MAX as usize;

/// Opens `path` with `flags` whatever its length: a path the kernel takes
/// whole is opened at once; a longer one in pieces of whole components,
/// each piece but the last as an `O_PATH` directory relative to the one
/// before (symbolic links are followed as the kernel would).
pub(crate) fn open_long(path: &Path, flags: libc::c_int) -> io::Result<OwnedFd> {
    let invalid = || io::Error::from_raw_os_error(libc::EINVAL);
    let pieces = path_pieces(path.as_os_str().as_bytes(), PATH_MAX - 1);
    let mut at: Option<OwnedFd> = None;
    for (k, piece) in pieces.iter().enumerate() {
        let piece = CString::new(piece.as_slice()).map_err(|_| invalid())?;
        let last = k + 1 == pieces.len();
        let piece_flags = if last {
            flags
        } else {
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC
        };
        let dir = at.as_ref().map_or(libc::AT_FDCWD, |fd| fd.as_raw_fd());
        at = Some(openat(dir, &piece, piece_flags)?);
    }
    at.ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))
}

/// `path` cut between components into pieces of at most `limit` bytes,
/// each to be opened relative to the one before (the first keeps a leading
/// `/`). A single component longer than `limit` is a piece of its own (the
/// kernel refuses it). An empty path is no piece.
fn path_pieces(path: &[u8], limit: usize) -> Vec<Vec<u8>> {
    if path.len() <= limit {
        return if path.is_empty() {
            Vec::new()
        } else {
            vec![path.to_vec()]
        };
    }
    let mut pieces: Vec<Vec<u8>> = Vec::new();
    let mut piece: Vec<u8> = if path.starts_with(b"/") {
        b"/".to_vec()
    } else {
        Vec::new()
    };
    for component in path.split(|&b| b == b'/').filter(|c| !c.is_empty()) {
        let joined =
            piece.len() + usize::from(!piece.is_empty() && piece != b"/") + component.len();
        if joined > limit && !piece.is_empty() {
            pieces.push(std::mem::take(&mut piece));
        }
        if !piece.is_empty() && piece != b"/" {
            piece.push(b'/');
        }
        piece.extend_from_slice(component);
    }
    if !piece.is_empty() {
        pieces.push(piece);
    }
    pieces
}

/// Runs `op` (a path-taking system call) on `path` whatever its length: a
/// path the kernel takes whole is passed as it is; a longer one is opened
/// (`O_PATH`, following a final symbolic link as the call would) and `op`
/// gets `/proc/self/fd/N`, which names the same file.
pub(crate) fn reachable<T>(path: &Path, op: impl FnOnce(&Path) -> io::Result<T>) -> io::Result<T> {
    if path.as_os_str().len() < PATH_MAX {
        return op(path);
    }
    let fd = open_long(path, libc::O_PATH | libc::O_CLOEXEC)?;
    op(Path::new(&format!("/proc/self/fd/{}", fd.as_raw_fd())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(path: &str, limit: usize) -> Vec<String> {
        path_pieces(path.as_bytes(), limit)
            .into_iter()
            .map(|p| String::from_utf8(p).unwrap())
            .collect()
    }

    #[test]
    fn a_long_path_is_cut_between_components_within_the_limit() {
        assert_eq!(pieces("/a/b", 10), ["/a/b"]);
        assert_eq!(pieces("", 10), Vec::<String>::new());
        assert_eq!(pieces("/aaaa/bbbb/cccc/dd", 10), ["/aaaa/bbbb", "cccc/dd"]);
        assert_eq!(pieces("aaaa//bbbb/cccc/d/", 10), ["aaaa/bbbb", "cccc/d"]);
        // A component over the limit stands alone (the kernel refuses it).
        assert_eq!(pieces("/a/bbbbbbbbbbbb/c", 10), ["/a", "bbbbbbbbbbbb", "c"]);
    }

    /// A tree whose deepest file's path is longer than PATH_MAX: 25
    /// directories of 200-byte names (made with paths relative to each
    /// directory, as a path that long cannot be given whole).
    fn deep_tree(root: &Path) -> PathBuf {
        std::fs::create_dir_all(root).unwrap();
        let mut deepest = root.to_path_buf();
        let mut fd = open_long(root, libc::O_RDONLY | libc::O_DIRECTORY).unwrap();
        for k in 0..25 {
            let name = format!("{k:02}{}", "d".repeat(198));
            let c = CString::new(name.clone()).unwrap();
            // Safety: `c` is NUL-terminated.
            assert_eq!(
                unsafe { libc::mkdirat(fd.as_raw_fd(), c.as_ptr(), 0o755) },
                0
            );
            fd = openat(fd.as_raw_fd(), &c, libc::O_RDONLY | libc::O_DIRECTORY).unwrap();
            deepest.push(name);
        }
        let leaf = CString::new("leaf").unwrap();
        let flags = libc::O_CREAT | libc::O_WRONLY;
        // Safety: `leaf` is NUL-terminated.
        let file = unsafe { libc::openat(fd.as_raw_fd(), leaf.as_ptr(), flags, 0o644) };
        assert!(file >= 0);
        // Safety: `file` was just opened; the buffer holds 3 bytes.
        unsafe {
            assert_eq!(libc::write(file, b"abc".as_ptr().cast(), 3), 3);
            libc::close(file);
        }
        deepest.join("leaf")
    }

    #[test]
    fn a_walk_reaches_files_deeper_than_path_max_and_reachable_stats_them() {
        let root = std::env::temp_dir().join(format!("terrace-walk-{}", std::process::id()));
        let leaf = deep_tree(&root);
        assert!(leaf.as_os_str().len() > PATH_MAX);
        let mut seen = Vec::new();
        let errors = walk_below(&root, &mut |e| {
            seen.push((e.path.clone(), e.kind, e.size));
            Ok(())
        });
        let size = reachable(&leaf, |p| std::fs::metadata(p).map(|m| m.len()));
        let too_long = std::fs::metadata(&leaf).map_err(|e| e.raw_os_error());
        let _ = std::process::Command::new("rm")
            .arg("-rf")
            .arg(&root)
            .status();
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(seen.len(), 26);
        assert!(seen[..25].iter().all(|s| s.1 == Kind::Directory));
        assert_eq!(seen[25], (leaf, Kind::File, 3));
        assert_eq!(size.unwrap(), 3);
        assert_eq!(too_long.unwrap_err(), Some(libc::ENAMETOOLONG));
    }

    #[test]
    fn a_top_that_cannot_be_opened_is_the_error() {
        let missing = Path::new("/nonexistent/terrace-walk");
        let errors = walk_below(missing, &mut |_| Ok(()));
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].0, missing);
        assert_eq!(errors[0].1.raw_os_error(), Some(libc::ENOENT));
    }
}
