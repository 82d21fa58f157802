//! Values exchanged with the file system's callers (the FUSE adapter, tests).

use serde::Serialize;

/// Inode number (= inode slot index; 1 is the root).
pub type Ino = u64;

/// Result of every file system operation: `Err` carries an errno
/// (`std::io::Error::from_raw_os_error`).
pub type FsResult<T> = std::io::Result<T>;

/// Builds the error for an errno value.
pub fn errno(e: i32) -> std::io::Error {
    std::io::Error::from_raw_os_error(e)
}

/// An error in words without the "(os error N)" suffix, for status lines.
pub fn describe(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// Type of an inode, from the `S_IFMT` bits of its mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum FileType {
    /// Regular file.
    Regular,
    /// Directory.
    Directory,
    /// Symbolic link.
    Symlink,
    /// Named pipe.
    Fifo,
    /// Unix socket.
    Socket,
    /// Character device.
    CharDevice,
    /// Block device.
    BlockDevice,
}

impl FileType {
    /// `Ok` for a regular file; EISDIR for a directory, `other` for anything
    /// else (the errno of an operation that only files take: read, write,
    /// truncate, fallocate, copy_file_range).
    pub fn require_regular(self, other: i32) -> FsResult<()> {
        match self {
            FileType::Regular => Ok(()),
            FileType::Directory => Err(errno(libc::EISDIR)),
            _ => Err(errno(other)),
        }
    }

    /// Type of a `st_mode` value, `None` when the type bits are invalid.
    pub fn from_mode(mode: u32) -> Option<FileType> {
        match mode & libc::S_IFMT {
            libc::S_IFREG => Some(FileType::Regular),
            libc::S_IFDIR => Some(FileType::Directory),
            libc::S_IFLNK => Some(FileType::Symlink),
            libc::S_IFIFO => Some(FileType::Fifo),
            libc::S_IFSOCK => Some(FileType::Socket),
            libc::S_IFCHR => Some(FileType::CharDevice),
            libc::S_IFBLK => Some(FileType::BlockDevice),
            _ => None,
        }
    }
    /// The `DT_*` value stored in directory entries.
    pub fn dt(self) -> u8 {
        match self {
            FileType::Regular => libc::DT_REG,
            FileType::Directory => libc::DT_DIR,
            FileType::Symlink => libc::DT_LNK,
            FileType::Fifo => libc::DT_FIFO,
            FileType::Socket => libc::DT_SOCK,
            FileType::CharDevice => libc::DT_CHR,
            FileType::BlockDevice => libc::DT_BLK,
        }
    }
    /// Inverse of [`FileType::dt`].
    pub fn from_dt(dt: u8) -> Option<FileType> {
        Some(match dt {
            libc::DT_REG => FileType::Regular,
            libc::DT_DIR => FileType::Directory,
            libc::DT_LNK => FileType::Symlink,
            libc::DT_FIFO => FileType::Fifo,
            libc::DT_SOCK => FileType::Socket,
            libc::DT_CHR => FileType::CharDevice,
            libc::DT_BLK => FileType::BlockDevice,
            _ => return None,
        })
    }
}

/// Attributes of an inode (what `stat` reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Attr {
    /// Inode number.
    pub ino: Ino,
    /// Slot generation.
    pub generation: u32,
    /// Type.
    pub kind: FileType,
    /// `st_mode` (type and permission bits).
    pub mode: u32,
    /// Link count.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number of a device node.
    pub rdev: u64,
    /// Size in bytes.
    pub size: u64,
    /// 512-byte sectors allocated.
    pub blocks: u64,
    /// Access time, ns since the epoch.
    pub atime: i64,
    /// Modification time, ns.
    pub mtime: i64,
    /// Change time, ns.
    pub ctime: i64,
    /// Creation time, ns.
    pub btime: i64,
}

/// Time to set in `setattr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetTime {
    /// The current time.
    Now,
    /// A given time, ns since the epoch.
    At(i64),
}

/// Changes requested by `setattr`; `None` fields are left alone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// New permission bits (type bits ignored).
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size (truncate or extend).
    pub size: Option<u64>,
    /// New atime.
    pub atime: Option<SetTime>,
    /// New mtime.
    pub mtime: Option<SetTime>,
    /// New ctime (only honoured when given; otherwise ctime becomes now).
    pub ctime: Option<i64>,
}

/// Who is asking: used for the owner of new inodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ctx {
    /// Caller's effective uid.
    pub uid: u32,
    /// Caller's effective gid.
    pub gid: u32,
    /// The caller's umask: a new inode's mode loses these bits unless its
    /// directory has a default ACL, which masks it instead (`acl.rs`). 0 for
    /// callers that pass a final mode.
    pub umask: u32,
}

/// Flags of `rename`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RenameFlags {
    /// `RENAME_NOREPLACE`: fail with EEXIST when the target exists.
    pub noreplace: bool,
    /// `RENAME_EXCHANGE`: swap source and target atomically.
    pub exchange: bool,
    /// `RENAME_WHITEOUT` (overlayfs): in the same commit, the source name
    /// is given to a new *whiteout* — a character device 0:0, mode 0 —
    /// owned by this caller (the directory's group under a set-group-ID
    /// directory, as for mknod).
    pub whiteout: Option<Ctx>,
}

/// One directory entry returned by `readdir`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// Inode of the entry.
    pub ino: Ino,
    /// Offset cookie to pass to the next `readdir` to continue after this entry.
    pub next_offset: u64,
    /// Type.
    pub kind: FileType,
    /// Name.
    pub name: Vec<u8>,
}

/// File system statistics (`statfs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StatFs {
    /// Total data blocks of all tiers.
    pub blocks: u64,
    /// Free blocks.
    pub bfree: u64,
    /// Free blocks available to unprivileged users.
    pub bavail: u64,
    /// Total inodes.
    pub files: u64,
    /// Free inodes.
    pub ffree: u64,
    /// Block size.
    pub bsize: u32,
    /// Longest name.
    pub namelen: u32,
}

/// `fallocate` modes supported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FallocateMode {
    /// Mode 0: allocate, extend the size when past EOF.
    Allocate,
    /// `FALLOC_FL_KEEP_SIZE`: allocate without changing the size.
    AllocateKeepSize,
    /// `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`: deallocate, reads give zeros.
    PunchHole,
    /// `FALLOC_FL_ZERO_RANGE`: the range reads as zeros and stays allocated;
    /// the size grows when the range ends past EOF.
    ZeroRange,
    /// `FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE`: as [`FallocateMode::ZeroRange`]
    /// without changing the size.
    ZeroRangeKeepSize,
    /// `FALLOC_FL_COLLAPSE_RANGE`: remove the (block-aligned) range, shift
    /// later data down; the size shrinks by the length.
    CollapseRange,
    /// `FALLOC_FL_INSERT_RANGE`: shift data from the (block-aligned) offset
    /// up by the length, leaving a hole; the size grows by the length.
    InsertRange,
}
