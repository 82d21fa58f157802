//! Small helpers shared by the subcommands: errors, sizes, paths, mount table,
//! pool locks, run-time files.

use std::fmt;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// An error the user sees: one line, and the exit code to use.
#[derive(Debug)]
pub struct CliError {
    /// The message, without the `terrace: ` prefix.
    pub msg: String,
    /// Process exit code.
    pub code: i32,
}

impl CliError {
    /// Exit code 1 with a message.
    pub fn new(msg: impl Into<String>) -> CliError {
        CliError {
            msg: msg.into(),
            code: 1,
        }
    }
    /// `<path>: <reason>`, exit code 1.
    pub fn at(path: &Path, reason: impl fmt::Display) -> CliError {
        CliError::new(format!("{}: {reason}", path.display()))
    }
    /// A mistake on the command line, found after parsing: exit code 2, as
    /// clap's own usage errors.
    pub fn usage(msg: impl Into<String>) -> CliError {
        CliError::new(msg).code(2)
    }
    /// Same error with another exit code.
    pub fn code(mut self, code: i32) -> CliError {
        self.code = code;
        self
    }
}

/// Result of a subcommand.
pub type CliResult<T = ()> = Result<T, CliError>;

/// Prints to stdout, ignoring a closed pipe (`terrace status | head`).
pub fn out(s: &str) {
    let mut o = io::stdout().lock();
    let _ = o.write_all(s.as_bytes());
    let _ = o.write_all(b"\n");
}

/// Prints a warning on stderr.
pub fn warn(s: impl fmt::Display) {
    eprintln!("terrace: warning: {s}");
}

/// Human form of an `io::Error` without Rust's "(os error N)" suffix.
pub fn os_reason(e: &io::Error) -> String {
    match e.raw_os_error() {
        // Safety: strerror returns a static NUL-terminated string for any errno.
        Some(n) => unsafe { std::ffi::CStr::from_ptr(libc::strerror(n)) }
            .to_string_lossy()
            .to_lowercase(),
        None => e.to_string(),
    }
}

/// Parses `4096`, `64K`, `512KiB`, `16M`, `1G`, `2T` (binary units): the
/// one size parser of the command line, the settings and config files.
pub use terrace_policy::settings::parse_size;

/// The note a data check's report adds for blocks it could not verify
/// (`""` when there are none): ", N without a checksum (…)".
pub fn unverified_note(blocks: u64) -> String {
    if blocks > 0 {
        format!(", {blocks} without a checksum (written before format 5)")
    } else {
        String::new()
    }
}

/// `1.5 GiB`-style rendering.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if v >= 100.0 {
        format!("{v:.0} {}", UNITS[u])
    } else if v >= 10.0 {
        format!("{v:.1} {}", UNITS[u])
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

/// Formats 16 bytes (or 32 hex digits) as a hyphenated UUID.
pub fn fmt_uuid_hex(hex: &str) -> String {
    if hex.len() != 32 {
        return hex.to_string();
    }
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// Hyphenated UUID of raw bytes.
pub fn fmt_uuid(b: &[u8; 16]) -> String {
    fmt_uuid_hex(&b.iter().map(|x| format!("{x:02x}")).collect::<String>())
}

/// Absolute form of a path: canonical when it resolves, otherwise made absolute
/// lexically (a dead FUSE mount point cannot be resolved).
pub fn abs_path(p: &Path) -> PathBuf {
    match std::fs::canonicalize(p) {
        Ok(c) => c,
        Err(_) => std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()),
    }
}

/// One line of /proc/self/mountinfo.
#[derive(Debug, Clone)]
pub struct MountEntry {
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// File system type (`fuse.terrace`, `ext4`, …).
    pub fstype: String,
    /// Mount source (for Terrace: the pool path).
    pub source: String,
    /// Who mounted it (`user_id=` of a FUSE mount's options).
    pub owner_uid: Option<u32>,
    /// Read-only, by its per-mount options or its super options.
    pub read_only: bool,
    /// The device number (`major:minor`) of the file system mounted, as
    /// `stat` reports it for its files.
    pub dev: Option<(u32, u32)>,
}

fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The `user_id=N` of a FUSE mount's super options.
fn fuse_owner(super_opts: &str) -> Option<u32> {
    super_opts
        .split(',')
        .find_map(|o| o.strip_prefix("user_id="))
        .and_then(|n| n.parse().ok())
}

/// The current mount table (empty when /proc is unavailable).
pub fn mounts() -> Vec<MountEntry> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|text| parse_mountinfo(&text))
        .unwrap_or_default()
}

/// The entries of a mount table in /proc/PID/mountinfo's format.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    let mut v = Vec::new();
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let lf: Vec<&str> = left.split(' ').collect();
        let rf: Vec<&str> = right.split(' ').collect();
        if lf.len() < 6 || rf.len() < 2 {
            continue;
        }
        let ro = |opts: &str| opts.split(',').any(|o| o == "ro");
        v.push(MountEntry {
            mount_point: PathBuf::from(unescape_mount(lf[4])),
            fstype: rf[0].to_string(),
            source: unescape_mount(rf[1]),
            owner_uid: rf.get(2).and_then(|o| fuse_owner(o)),
            read_only: ro(lf[5]) || rf.get(2).is_some_and(|o| ro(o)),
            dev: lf[2]
                .split_once(':')
                .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?))),
        });
    }
    v
}

/// The topmost mount at exactly `mnt` (an absolute path), if any.
pub fn mount_at(mnt: &Path) -> Option<MountEntry> {
    mounts().into_iter().rev().find(|m| m.mount_point == mnt)
}

/// The FUSE mount whose mount point is the nearest proper ancestor of the
/// absolute path `path` (a path inside a mount, not its mount point), if
/// any.
pub fn fuse_mount_containing(path: &Path) -> Option<MountEntry> {
    mounts()
        .into_iter()
        .filter(|m| m.mount_point != path && path.starts_with(&m.mount_point))
        .max_by_key(|m| m.mount_point.components().count())
        .filter(|m| m.fstype.starts_with("fuse"))
}

/// The Terrace mount that holds `path` (a file, or where one would be
/// created: its directory when it does not exist), found by the device
/// number of the file system it is on, so symlinks and bind mounts cannot
/// hide it. A tier must never lie there: the pool would need itself (or
/// another pool) mounted to mount.
pub fn terrace_mount_holding(path: &Path) -> Option<MountEntry> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).or_else(|_| {
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
        std::fs::metadata(dir.unwrap_or(Path::new(".")))
    });
    let dev = meta.ok()?.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    mounts()
        .into_iter()
        .find(|m| m.dev == Some((major, minor)) && m.fstype == "fuse.terrace")
}

/// Mounts of the pool at `pool` (an absolute path) by a Terrace daemon.
pub fn mounts_of_pool(pool: &Path) -> Vec<MountEntry> {
    let p = pool.to_string_lossy();
    mounts()
        .into_iter()
        .filter(|m| m.fstype.starts_with("fuse") && m.source == p)
        .collect()
}

/// Takes the pool's advisory lock (held by a mounted daemon, fsck and mkfs for
/// as long as they use the pool). `Ok(None)` when someone else holds it.
pub fn lock_pool(path: &Path) -> io::Result<Option<File>> {
    let f = File::open(path)?;
    // Safety: flock on a descriptor we own.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r == 0 {
        return Ok(Some(f));
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(None)
    } else {
        Err(e)
    }
}

/// Takes the exclusive lock of a tier file (the pool's PM file or a block
/// tier's file or device): the same `flock` as [`lock_pool`]. A mounted
/// daemon holds it on every tier for as long as it serves the pool, and
/// `mkfs` takes it on every existing target before writing, so a tier of a
/// live pool can never be formatted. `Ok(None)` when someone else holds it.
pub fn lock_tier(path: &Path) -> io::Result<Option<File>> {
    lock_pool(path)
}

/// A Terrace pool mounted now, as the mount table and its superblock say.
#[derive(Debug, Clone)]
pub struct MountedPool {
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// Its PM tier (the mount source).
    pub pool: PathBuf,
    /// Its superblock as read now (tier records, uuid).
    pub sb: terrace_format::Superblock,
}

/// Every FUSE mount whose source is a file holding a Terrace superblock.
pub fn mounted_pools() -> Vec<MountedPool> {
    let mut v = Vec::new();
    for m in mounts()
        .into_iter()
        .filter(|m| m.fstype.starts_with("fuse"))
    {
        let pool = PathBuf::from(&m.source);
        if !pool.is_absolute() {
            continue;
        }
        let Ok(head) = read_head(&pool, 2 * terrace_format::BLOCK_SIZE as usize) else {
            continue;
        };
        if head.len() < 2 * terrace_format::BLOCK_SIZE as usize {
            continue;
        }
        let (a, b) = head.split_at(terrace_format::BLOCK_SIZE as usize);
        if let Ok(sb) = terrace_format::Superblock::choose(a, b) {
            v.push(MountedPool {
                mount_point: m.mount_point,
                pool,
                sb,
            });
        }
    }
    v
}

/// Device and inode of a path, to recognise one file under two names.
fn file_id(path: &Path) -> Option<(u64, u64, u64)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let m = std::fs::metadata(path).ok()?;
    // A block device is known by the device it names, not by its node.
    if m.file_type().is_block_device() {
        return Some((u64::MAX, m.rdev(), 0));
    }
    Some((m.dev(), m.ino(), 1))
}

/// The mounted pool that `path` is a tier of, with the tier's id: the file
/// is one of the pool's tiers (same file or device, whatever the name), or
/// `head` (its first bytes) is a block-tier header or superblock naming a
/// mounted pool's uuid.
pub fn mounted_owner(path: &Path, head: &[u8]) -> Option<(MountedPool, u8)> {
    let id = file_id(path);
    let uuid = terrace_format::TierHeader::decode(head)
        .ok()
        .map(|h| (h.pool_uuid, h.id))
        .or_else(|| {
            let bs = terrace_format::BLOCK_SIZE as usize;
            (head.len() >= 2 * bs)
                .then(|| terrace_format::Superblock::choose(&head[..bs], &head[bs..2 * bs]).ok())
                .flatten()
                .map(|sb| (sb.uuid, 0))
        });
    for p in mounted_pools() {
        for t in &p.sb.tiers {
            let same_file = id.is_some() && file_id(Path::new(&t.path)) == id;
            if same_file || Path::new(&t.path) == path {
                let tier = t.id;
                return Some((p, tier));
            }
        }
        if let Some((u, tier)) = uuid {
            if u == p.sb.uuid {
                return Some((p, tier));
            }
        }
    }
    None
}

/// Why a tier file cannot be formatted because a mounted pool (or another
/// terrace process) uses it, for error messages.
pub fn tier_in_use_reason(path: &Path, head: &[u8]) -> String {
    match mounted_owner(path, head) {
        Some((p, tier)) => {
            let what = p
                .sb
                .tiers
                .iter()
                .find(|t| t.id == tier)
                .map_or_else(|| format!("tier {tier}"), |t| format!("tier {tier} ({})", t.kind.name()));
            format!(
                "is {what} of the pool mounted on {} (pool {}); unmount it first (`terrace umount {}`); --force does not override this",
                p.mount_point.display(),
                p.pool.display(),
                p.mount_point.display()
            )
        }
        None => "is in use by another terrace process (a mount, fsck or mkfs holds its lock); --force does not override this".into(),
    }
}

/// Why a pool is busy, for error messages.
pub fn busy_reason(pool: &Path) -> String {
    let ms = mounts_of_pool(pool);
    match ms.first() {
        Some(m) => format!(
            "the pool is mounted on {} (run `terrace umount {}` first)",
            m.mount_point.display(),
            m.mount_point.display()
        ),
        None => {
            "the pool is in use by another terrace process (mounted, or being checked or formatted)"
                .into()
        }
    }
}

/// Reads up to `len` bytes from the start of a file or device.
pub fn read_head(path: &Path, len: usize) -> io::Result<Vec<u8>> {
    let mut f = File::open(path)?;
    let mut buf = vec![0u8; len];
    let mut n = 0;
    while n < len {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(n);
    Ok(buf)
}

/// Length of a regular file or block device.
pub fn media_len(path: &Path) -> io::Result<u64> {
    use std::io::Seek;
    use std::os::unix::fs::FileTypeExt;
    let m = std::fs::metadata(path)?;
    if m.file_type().is_block_device() {
        File::open(path)?.seek(io::SeekFrom::End(0))
    } else {
        Ok(m.len())
    }
}

/// What a file or device already holds, judged by well-known magic numbers.
pub fn detect_content(head: &[u8]) -> Option<&'static str> {
    let at = |off: usize, magic: &[u8]| {
        head.len() >= off + magic.len() && &head[off..off + magic.len()] == magic
    };
    if at(0, &terrace_format::SUPERBLOCK_MAGIC) || at(4096, &terrace_format::SUPERBLOCK_MAGIC) {
        Some("a Terrace pool")
    } else if at(0, &terrace_format::TIER_MAGIC) {
        Some("a block tier of a Terrace pool")
    } else if at(1080, &[0x53, 0xEF]) {
        Some("an ext2/ext3/ext4 file system")
    } else if at(0, b"XFSB") {
        Some("an XFS file system")
    } else if at(65600, b"_BHRfS_M") {
        Some("a btrfs file system")
    } else if at(4086, b"SWAPSPACE2") {
        Some("a swap area")
    } else {
        None
    }
}

/// Directory for sockets, pid files and logs of running daemons.
/// `TERRACE_RUN_DIR` overrides it (tests).
pub fn runtime_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TERRACE_RUN_DIR") {
        return PathBuf::from(d);
    }
    // Safety: geteuid has no failure mode.
    let uid = unsafe { libc::geteuid() };
    if uid == 0 {
        return PathBuf::from("/run/terrace");
    }
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR") {
        return PathBuf::from(d).join("terrace");
    }
    PathBuf::from(format!("/tmp/terrace-{uid}"))
}

/// File-name-safe form of an absolute mount point, short enough for a socket path.
pub fn sanitize_mountpoint(mnt: &Path) -> String {
    let bytes = mnt.as_os_str().as_bytes();
    let trimmed = bytes.strip_prefix(b"/").unwrap_or(bytes);
    let mut s = String::new();
    for &c in trimmed {
        match c {
            b'/' => s.push('-'),
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'_' => s.push(c as char),
            _ => s.push_str(&format!("%{c:02x}")),
        }
    }
    if s.is_empty() {
        s.push('-');
    }
    if s.len() > 72 {
        // FNV-1a keeps names unique while the socket path stays under 108 bytes.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &c in bytes {
            h ^= u64::from(c);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        let cut = s.char_indices().nth(54).map(|(i, _)| i).unwrap_or(s.len());
        s = format!("{}~{h:016x}", &s[..cut]);
    }
    s
}

/// Paths of a daemon's run-time files for a mount point.
#[derive(Debug, Clone)]
pub struct RunFiles {
    /// Control socket.
    pub socket: PathBuf,
    /// Pid file.
    pub pid: PathBuf,
    /// Daemon log (stdout/stderr of a `--daemon` mount).
    pub log: PathBuf,
}

/// Run-time files for the absolute mount point `mnt`.
pub fn run_files(mnt: &Path) -> RunFiles {
    let d = runtime_dir();
    let n = sanitize_mountpoint(mnt);
    RunFiles {
        socket: d.join(format!("{n}.sock")),
        pid: d.join(format!("{n}.pid")),
        log: d.join(format!("{n}.log")),
    }
}

/// The control socket of the daemon serving the absolute mount point `mnt`:
/// in this user's runtime directory when there is one there, otherwise in
/// the runtime directory of the user who mounted it (a daemon started by
/// root listens in /run/terrace, which other users look in only here).
pub fn control_socket(mnt: &Path) -> PathBuf {
    let own = run_files(mnt).socket;
    if own.exists() || std::env::var_os("TERRACE_RUN_DIR").is_some() {
        return own;
    }
    let Some(uid) = mount_at(mnt).and_then(|m| m.owner_uid) else {
        return own;
    };
    let name = own.file_name().map(PathBuf::from).unwrap_or_default();
    let dirs = if uid == 0 {
        vec![PathBuf::from("/run/terrace")]
    } else {
        vec![
            PathBuf::from(format!("/run/user/{uid}/terrace")),
            PathBuf::from(format!("/tmp/terrace-{uid}")),
        ]
    };
    dirs.into_iter()
        .map(|d| d.join(&name))
        // A socket in a directory this user may not enter still counts: the
        // error then says so.
        .find(|s| match std::fs::metadata(s) {
            Ok(_) => true,
            Err(e) => e.kind() == io::ErrorKind::PermissionDenied,
        })
        .unwrap_or(own)
}

/// `path` if it exists, else the directory it would be created in (whose
/// file system it would be on).
fn existing_or_parent(path: &Path) -> &Path {
    if path.exists() {
        path
    } else {
        path.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
    }
}

/// Bytes free for unprivileged users on the file system holding `path` (or,
/// when it does not exist yet, its directory).
pub fn free_space(path: &Path) -> io::Result<u64> {
    let c = std::ffi::CString::new(existing_or_parent(path).as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // Safety: `c` is NUL-terminated and `st` is a writable statvfs.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

/// Whether `path` (or, when it does not exist yet, its directory) is on
/// tmpfs.
pub fn on_tmpfs(path: &Path) -> bool {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    let Ok(c) = std::ffi::CString::new(existing_or_parent(path).as_os_str().as_bytes()) else {
        return false;
    };
    // Safety: `c` is NUL-terminated and `st` is a writable statfs.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return false;
    }
    #[allow(clippy::useless_conversion)]
    let f_type = i64::from(st.f_type);
    f_type == TMPFS_MAGIC
}

/// Memory the machine can give to new pages: `MemAvailable` plus
/// `SwapFree` from /proc/meminfo (None when it cannot be read).
pub fn memory_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    };
    Some((kib("MemAvailable:")? + kib("SwapFree:").unwrap_or(0)) * 1024)
}

/// True while process `pid` exists and is not a zombie.
pub fn process_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // Safety: signal 0 only checks for existence.
    let r = unsafe { libc::kill(pid, 0) };
    if r != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rsplit_once(')')
            .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
            .unwrap_or(true),
        Err(_) => r == 0,
    }
}

/// The lock of an unmounted pool (`abs`: its absolute path, `pool`: as the
/// user named it): refused, naming the mount point and how to unmount it,
/// when the mount table lists a mount of it, and as busy when a daemon,
/// fsck or mkfs holds its lock. `why` ends the "mounted" message (what needs
/// the pool unmounted).
pub fn lock_unmounted_pool(pool: &Path, abs: &Path, why: &str) -> CliResult<std::fs::File> {
    if let Some(m) = mounts_of_pool(abs).first() {
        return Err(CliError::at(
            pool,
            format!(
                "the pool is mounted on {}; {why} (terrace umount {})",
                m.mount_point.display(),
                m.mount_point.display()
            ),
        ));
    }
    match lock_pool(abs) {
        Ok(Some(l)) => Ok(l),
        Ok(None) => Err(CliError::at(pool, busy_reason(abs))),
        Err(e) => Err(CliError::at(pool, os_reason(&e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("512KiB"), Ok(512 << 10));
        assert_eq!(parse_size("16m"), Ok(16 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("2T"), Ok(2 << 40));
        assert!(parse_size("G").is_err());
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn mountpoint_names_are_safe_and_short() {
        assert_eq!(sanitize_mountpoint(Path::new("/mnt/t")), "mnt-t");
        assert_eq!(sanitize_mountpoint(Path::new("/")), "-");
        assert_eq!(sanitize_mountpoint(Path::new("/a b")), "a%20b");
        assert_ne!(
            sanitize_mountpoint(Path::new("/a-b")),
            sanitize_mountpoint(Path::new("/a/b"))
        );
        let long = format!("/{}", "x/".repeat(100));
        let s = sanitize_mountpoint(Path::new(&long));
        assert!(s.len() < 80, "{s}");
        assert_ne!(s, sanitize_mountpoint(Path::new(&format!("{long}y"))));
    }

    #[test]
    fn detects_file_systems() {
        let mut b = vec![0u8; 70000];
        assert_eq!(detect_content(&b), None);
        b[1080] = 0x53;
        b[1081] = 0xEF;
        assert_eq!(detect_content(&b), Some("an ext2/ext3/ext4 file system"));
        let mut c = vec![0u8; 8192];
        c[4096..4104].copy_from_slice(b"TERRACE1");
        assert_eq!(detect_content(&c), Some("a Terrace pool"));
    }

    #[test]
    fn mountinfo_unescapes() {
        assert_eq!(unescape_mount("/mnt/a\\040b"), "/mnt/a b");
        assert_eq!(unescape_mount("plain"), "plain");
    }

    #[test]
    fn the_owner_of_a_fuse_mount_is_its_user_id_option() {
        assert_eq!(
            fuse_owner("rw,user_id=1000,group_id=1000,default_permissions"),
            Some(1000)
        );
        assert_eq!(fuse_owner("rw,relatime"), None);
    }
}
