//! A minimal FUSE passthrough file system: mirrors directory SRC at MNT. It
//! exists only as the "FUSE ceiling" of the benchmarks (what any FUSE file
//! system pays for the kernel round trips), not as a product.
//!
//! Usage: `passthrough SRC MNT [--threads N]` (foreground; unmounts on
//! SIGINT/SIGTERM).
//!
//! Path based: every inode number maps to the last path it was seen at; open
//! files are kept in a handle table and read/written with pread/pwrite.

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request,
    TimeOrNow, WriteFlags,
};
use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{
    DirBuilderExt, DirEntryExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt,
};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const TTL: Duration = Duration::from_secs(1);

/// The guard of a lock, poisoned or not (a panicked request thread leaves
/// the tables as they were).
fn unpoisoned<G>(r: Result<G, std::sync::PoisonError<G>>) -> G {
    r.unwrap_or_else(|e| e.into_inner())
}

/// `map[key]`, cloned, or `missing`.
fn cloned_or<V: Clone>(map: &HashMap<u64, V>, key: u64, missing: Errno) -> Result<V, Errno> {
    map.get(&key).cloned().ok_or(missing)
}

struct Passthrough {
    root: PathBuf,
    root_ino: u64,
    paths: RwLock<HashMap<u64, PathBuf>>,
    handles: Mutex<HashMap<u64, Arc<File>>>,
    next_fh: AtomicU64,
}

fn err(e: io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

/// Replies to a request answered by a call on a known node (`Err`: the
/// node is unknown) that returns nothing.
fn reply_empty(reply: ReplyEmpty, r: Result<io::Result<()>, Errno>) {
    match r {
        Ok(Ok(())) => reply.ok(),
        Ok(Err(e)) => reply.error(err(e)),
        Err(e) => reply.error(e),
    }
}

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn time(secs: i64, nsec: i64) -> SystemTime {
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nsec as u32)
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()) + Duration::from_nanos(nsec as u64)
    }
}

fn kind(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

fn timespec(t: Option<TimeOrNow>) -> libc::timespec {
    match t {
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        Some(TimeOrNow::Now) => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        Some(TimeOrNow::SpecificTime(t)) => {
            let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
            libc::timespec {
                tv_sec: d.as_secs() as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            }
        }
    }
}

impl Passthrough {
    fn new(root: PathBuf) -> io::Result<Passthrough> {
        let m = std::fs::metadata(&root)?;
        let mut paths = HashMap::new();
        paths.insert(1, root.clone());
        Ok(Passthrough {
            root,
            root_ino: m.ino(),
            paths: RwLock::new(paths),
            handles: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
        })
    }

    /// FUSE inode number of a host inode (the root is 1; a host inode 1 is moved).
    fn fino(&self, host: u64) -> u64 {
        if host == self.root_ino {
            1
        } else if host == 1 {
            self.root_ino
        } else {
            host
        }
    }

    fn path(&self, ino: INodeNo) -> Result<PathBuf, Errno> {
        cloned_or(&*unpoisoned(self.paths.read()), ino.0, Errno::ENOENT)
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        Ok(self.path(parent)?.join(name))
    }

    fn attr(&self, m: &std::fs::Metadata) -> FileAttr {
        FileAttr {
            ino: INodeNo(self.fino(m.ino())),
            size: m.size(),
            blocks: m.blocks(),
            atime: time(m.atime(), m.atime_nsec()),
            mtime: time(m.mtime(), m.mtime_nsec()),
            ctime: time(m.ctime(), m.ctime_nsec()),
            crtime: UNIX_EPOCH,
            kind: kind(m.mode()),
            perm: (m.mode() & 0o7777) as u16,
            nlink: m.nlink() as u32,
            uid: m.uid(),
            gid: m.gid(),
            rdev: m.rdev() as u32,
            blksize: m.blksize() as u32,
            flags: 0,
        }
    }

    /// lstat + remember the path under its inode number.
    fn remember(&self, path: PathBuf) -> io::Result<FileAttr> {
        let m = std::fs::symlink_metadata(&path)?;
        let a = self.attr(&m);
        unpoisoned(self.paths.write()).insert(a.ino.0, path);
        Ok(a)
    }

    fn handle(&self, fh: FileHandle) -> Result<Arc<File>, Errno> {
        cloned_or(&*unpoisoned(self.handles.lock()), fh.0, Errno::EBADF)
    }

    fn add_handle(&self, f: File) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        unpoisoned(self.handles.lock()).insert(fh, Arc::new(f));
        fh
    }

    fn open_flags(flags: i32) -> OpenOptions {
        let mut o = OpenOptions::new();
        match flags & libc::O_ACCMODE {
            libc::O_WRONLY => o.write(true),
            libc::O_RDWR => o.read(true).write(true),
            _ => o.read(true),
        };
        // The kernel computes append offsets; O_APPEND on the host would make pwrite ignore them.
        o.custom_flags(flags & (libc::O_SYNC | libc::O_DSYNC | libc::O_NOATIME));
        o
    }
}

impl Filesystem for Passthrough {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        let _ = config.set_max_write(1 << 20);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.child(parent, name) {
            Ok(p) => match self.remember(p) {
                Ok(a) => reply.entry(&TTL, &a, Generation(0)),
                Err(e) => reply.error(err(e)),
            },
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let m = match fh.map(|fh| self.handle(fh)) {
            Some(Ok(f)) => f.metadata(),
            _ => match self.path(ino) {
                Ok(p) => std::fs::symlink_metadata(p),
                Err(e) => return reply.error(e),
            },
        };
        match m {
            Ok(m) => reply.attr(&TTL, &self.attr(&m)),
            Err(e) => reply.error(err(e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let path = match self.path(ino) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        let r = (|| -> io::Result<()> {
            if let Some(m) = mode {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(m & 0o7777))?;
            }
            if uid.is_some() || gid.is_some() {
                std::os::unix::fs::lchown(&path, uid, gid)?;
            }
            if let Some(s) = size {
                match fh.map(|fh| self.handle(fh)) {
                    Some(Ok(f)) => f.set_len(s)?,
                    _ => OpenOptions::new().write(true).open(&path)?.set_len(s)?,
                }
            }
            if atime.is_some() || mtime.is_some() {
                let ts = [timespec(atime), timespec(mtime)];
                let c = cpath(&path)?;
                // Safety: valid path and a two-element timespec array.
                if unsafe {
                    libc::utimensat(
                        libc::AT_FDCWD,
                        c.as_ptr(),
                        ts.as_ptr(),
                        libc::AT_SYMLINK_NOFOLLOW,
                    )
                } != 0
                {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        })();
        match r.and_then(|_| std::fs::symlink_metadata(&path)) {
            Ok(m) => reply.attr(&TTL, &self.attr(&m)),
            Err(e) => reply.error(err(e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.path(ino).map(std::fs::read_link) {
            Ok(Ok(t)) => reply.data(t.as_os_str().as_bytes()),
            Ok(Err(e)) => reply.error(err(e)),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let p = match self.child(parent, name) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        match std::fs::DirBuilder::new()
            .mode(mode & 0o7777)
            .create(&p)
            .and_then(|_| self.remember(p))
        {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(err(e)),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(reply, self.child(parent, name).map(std::fs::remove_file));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(reply, self.child(parent, name).map(std::fs::remove_dir));
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let (from, to) = match (self.child(parent, name), self.child(newparent, newname)) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => return reply.error(e),
        };
        let r = (|| -> io::Result<()> {
            let (a, b) = (cpath(&from)?, cpath(&to)?);
            // Safety: valid NUL-terminated paths.
            let rc = unsafe {
                libc::renameat2(
                    libc::AT_FDCWD,
                    a.as_ptr(),
                    libc::AT_FDCWD,
                    b.as_ptr(),
                    flags.bits(),
                )
            };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
            self.remember(to.clone()).map(|_| ())
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(err(e)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let p = match self.path(ino) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        match Self::open_flags(flags.0).open(p) {
            Ok(f) => reply.opened(FileHandle(self.add_handle(f)), FopenFlags::FOPEN_KEEP_CACHE),
            Err(e) => reply.error(err(e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let f = match self.handle(fh) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        let mut buf = vec![0u8; size as usize];
        let mut done = 0;
        while done < buf.len() {
            match f.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return reply.error(err(e)),
            }
        }
        reply.data(&buf[..done]);
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.handle(fh).map(|f| f.write_all_at(data, offset)) {
            Ok(Ok(())) => reply.written(data.len() as u32),
            Ok(Err(e)) => reply.error(err(e)),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        unpoisoned(self.handles.lock()).remove(&fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let r = self.handle(fh).map(|f| {
            if datasync {
                f.sync_data()
            } else {
                f.sync_all()
            }
        });
        reply_empty(reply, r);
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let p = match self.path(ino) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        let rd = match std::fs::read_dir(&p) {
            Ok(r) => r,
            Err(e) => return reply.error(err(e)),
        };
        let mut entries: Vec<(u64, FileType, std::ffi::OsString)> = vec![
            (ino.0, FileType::Directory, ".".into()),
            (ino.0, FileType::Directory, "..".into()),
        ];
        for e in rd.flatten() {
            let ft = e
                .file_type()
                .ok()
                .and_then(FileType::from_std)
                .unwrap_or(FileType::RegularFile);
            entries.push((self.fino(e.ino()), ft, e.file_name()));
        }
        for (i, (ino, ft, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(ino), i as u64 + 1, ft, name) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let c = match cpath(&self.root) {
            Ok(c) => c,
            Err(e) => return reply.error(err(e)),
        };
        // Safety: statvfs fills a zeroed struct for a valid path.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
            return reply.error(err(io::Error::last_os_error()));
        }
        reply.statfs(
            s.f_blocks,
            s.f_bfree,
            s.f_bavail,
            s.f_files,
            s.f_ffree,
            s.f_bsize as u32,
            s.f_namemax as u32,
            s.f_frsize as u32,
        );
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let p = match self.child(parent, name) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        let mut o = Self::open_flags(flags);
        o.create_new(true).mode(mode & 0o7777);
        if flags & libc::O_ACCMODE == libc::O_RDONLY {
            o.write(true); // create_new needs write access
        }
        match o.open(&p).and_then(|f| Ok((f, self.remember(p)?))) {
            Ok((f, a)) => {
                let fh = self.add_handle(f);
                reply.created(
                    &TTL,
                    &a,
                    Generation(0),
                    FileHandle(fh),
                    FopenFlags::FOPEN_KEEP_CACHE,
                )
            }
            Err(e) => reply.error(err(e)),
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mut threads = 1usize;
    let mut pos = Vec::new();
    let mut i = 1;
    while i < args.len() {
        if args[i] == "--threads" && i + 1 < args.len() {
            threads = args[i + 1].parse().unwrap_or(1).max(1);
            i += 2;
        } else {
            pos.push(args[i].clone());
            i += 1;
        }
    }
    if pos.len() != 2 {
        eprintln!("usage: passthrough SRC MNT [--threads N]");
        std::process::exit(2);
    }
    let (src, mnt) = (PathBuf::from(&pos[0]), PathBuf::from(&pos[1]));
    let fs = match Passthrough::new(src.clone()) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("passthrough: {}: {e}", src.display());
            std::process::exit(1);
        }
    };
    let mut cfg = fuser::Config::default();
    cfg.mount_options = vec![
        MountOption::FSName("passthrough".into()),
        MountOption::DefaultPermissions,
    ];
    cfg.acl = fuser::SessionACL::All;
    cfg.n_threads = Some(threads);
    cfg.clone_fd = threads > 1;
    let session = match fuser::Session::new(fs, &mnt, &cfg) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("passthrough: cannot mount {}: {e}", mnt.display());
            std::process::exit(1);
        }
    };
    let mut signals = match signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("passthrough: signals: {e}");
            std::process::exit(1);
        }
    };
    let m = mnt.clone();
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            let c = cpath(&m).expect("mount point path");
            // Safety: valid path. Busy mounts are detached lazily.
            unsafe {
                if libc::umount2(c.as_ptr(), 0) != 0 {
                    libc::umount2(c.as_ptr(), libc::MNT_DETACH);
                }
            }
        }
    });
    if let Err(e) = session.run() {
        eprintln!("passthrough: {e}");
        std::process::exit(1);
    }
}
