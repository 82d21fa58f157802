//! [`MountOptions`]: how to mount, parsed from `-o` options the way mount(8)
//! and fstab pass them, and turned into fuser's session configuration.
//!
//! Invariants: unknown options are errors that name the known ones; options
//! with no meaning here (`diratime`, `lazytime` …) are accepted and ignored,
//! so fstab lines written for other file systems work; `default_permissions`
//! is always on, so the kernel checks permissions.

use fuser::{MountOption, SessionACL};

/// Default polling window after a reply (µs): longer than the gap between an
/// application's back-to-back requests (a write and its fsync: a few µs), short
/// enough that a poll that finds nothing wastes little.
pub const DEFAULT_POLL_US: u64 = 50;

/// When reads update a file's access time (mount options).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AtimeOption {
    /// `relatime` (default): when the access time is not after the last
    /// change, or is a day old.
    #[default]
    Relative,
    /// `strictatime`: on every read.
    Strict,
    /// `noatime`: never.
    Never,
}

/// When the kernel's pages are filled with what a write-only descriptor
/// wrote, once it is closed (`fill_after_write=`; `crate::fill`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FillOption {
    /// `auto` (default): while fills are used by later readers at least
    /// half of the time.
    #[default]
    Auto,
    /// `always`: every file that qualifies.
    Always,
    /// `never`.
    Never,
}

/// How to mount. `Default` is a private, read-write mount with two threads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountOptions {
    /// Source shown in /proc/mounts (the pool path).
    pub fsname: String,
    /// Let other users access the mount (`allow_other`).
    pub allow_other: bool,
    /// Let root access the mount too (`allow_root`).
    pub allow_root: bool,
    /// Read-only mount.
    pub read_only: bool,
    /// Honour set-user-ID bits (`suid`; [`MountOptions::for_user`] turns it
    /// on for root, as mount(8) does).
    pub suid: bool,
    /// Honour device nodes (`dev`; on for root like `suid`).
    pub dev: bool,
    /// Allow executing programs (default on).
    pub exec: bool,
    /// When reads update access times: `relatime` (default), `strictatime`,
    /// `noatime`.
    pub atime: AtimeOption,
    /// Synchronous updates (`sync`).
    pub sync: bool,
    /// Synchronous directory updates (`dirsync`).
    pub dirsync: bool,
    /// Threads serving requests.
    pub threads: usize,
    /// How long (µs) a thread polls the device after a reply while requests
    /// arrive back to back ([`crate::poll`]); 0 = never.
    pub poll_us: u64,
    /// Ask the kernel for its writeback cache (`writeback_cache`; default
    /// off): writes of every open without `O_DIRECT` land in the kernel's
    /// page cache and reach the daemon at fsync, close or the kernel's own
    /// write-back (design.md §5g0 and §7 say what that changes).
    pub writeback_cache: bool,
    /// Fill the kernel's pages of a file after its write-only descriptor is
    /// closed (`fill_after_write=auto|always|never`, default auto).
    pub fill_after_write: FillOption,
    /// POSIX ACLs (`acl`, the default as on ext4; `noacl` turns them off:
    /// ACL xattrs are then refused and the kernel applies the umask).
    pub acl: bool,
    /// `selinux_labels`: store `security.selinux` like any attribute (as
    /// ext4 does). Off by default: the attribute is then not supported
    /// (EOPNOTSUPP, left out of listings), so `ls -l`, which asks every
    /// file for it, stops asking after one (design.md §5g0).
    pub selinux_labels: bool,
    /// `norecovery` (or ext4's `noload`): mount without recovering the pool.
    /// Only with `ro` ([`MountOptions::check`]), where it changes nothing: a
    /// read-only mount never recovers on media (it writes nothing; a pool
    /// that needs recovery is served as recovery would leave it, recovered
    /// in memory only).
    pub norecovery: bool,
}

impl Default for MountOptions {
    fn default() -> MountOptions {
        MountOptions {
            fsname: "terrace".into(),
            allow_other: false,
            allow_root: false,
            read_only: false,
            suid: false,
            dev: false,
            exec: true,
            atime: AtimeOption::Relative,
            sync: false,
            dirsync: false,
            threads: 2,
            poll_us: DEFAULT_POLL_US,
            writeback_cache: false,
            fill_after_write: FillOption::Auto,
            norecovery: false,
            acl: true,
            selinux_labels: false,
        }
    }
}

impl MountOptions {
    /// The defaults for a mount made by `uid`: root gets `suid,dev` like any
    /// mount(8) of a local file system; anyone else `nosuid,nodev`, like
    /// fusermount3 imposes on unprivileged FUSE mounts.
    pub fn for_user(uid: u32) -> MountOptions {
        MountOptions {
            suid: uid == 0,
            dev: uid == 0,
            ..MountOptions::default()
        }
    }

    /// Applies one `-o` option (`allow_other`, `ro`, `noatime`, …). Errors name
    /// options this file system does not know.
    pub fn apply(&mut self, opt: &str) -> Result<(), String> {
        match opt {
            "" => {}
            "allow_other" => self.allow_other = true,
            "allow_root" => self.allow_root = true,
            "default_permissions" => {} // always on
            "ro" => self.read_only = true,
            "rw" => self.read_only = false,
            "suid" => self.suid = true,
            "nosuid" => self.suid = false,
            "dev" => self.dev = true,
            "nodev" => self.dev = false,
            "exec" => self.exec = true,
            "noexec" => self.exec = false,
            "atime" | "relatime" => self.atime = AtimeOption::Relative,
            "strictatime" => self.atime = AtimeOption::Strict,
            "noatime" => self.atime = AtimeOption::Never,
            // Directories get no access time from reads in Terrace (as with
            // `nodiratime`); `diratime` is accepted for mount(8) and fstab.
            "nodiratime" | "diratime" => {}
            // Access times set by reads are written with the file's next
            // commit already where that matters (logs on a block tier).
            "lazytime" | "nolazytime" => {}
            "sync" => self.sync = true,
            "async" => self.sync = false,
            "dirsync" => self.dirsync = true,
            "norecovery" | "noload" => self.norecovery = true,
            "acl" => self.acl = true,
            "noacl" => self.acl = false,
            "selinux_labels" => self.selinux_labels = true,
            "noselinux_labels" => self.selinux_labels = false,
            "writeback_cache" => self.writeback_cache = true,
            "no_writeback_cache" => self.writeback_cache = false,
            "fill_after_write=auto" => self.fill_after_write = FillOption::Auto,
            "fill_after_write=always" => self.fill_after_write = FillOption::Always,
            "fill_after_write=never" => self.fill_after_write = FillOption::Never,
            _ => {
                if let Some(n) = opt.strip_prefix("threads=") {
                    match n.parse::<usize>() {
                        Ok(n) if (1..=64).contains(&n) => self.threads = n,
                        _ => {
                            return Err(format!(
                                "mount option {opt:?}: threads must be a number from 1 to 64"
                            ))
                        }
                    }
                } else if let Some(n) = opt.strip_prefix("poll_us=") {
                    match n.parse::<u64>() {
                        Ok(n) if n <= 10_000 => self.poll_us = n,
                        _ => {
                            return Err(format!(
                                "mount option {opt:?}: poll_us must be a number of microseconds from 0 to 10000"
                            ))
                        }
                    }
                } else if opt.starts_with("fill_after_write=") {
                    return Err(format!(
                        "mount option {opt:?}: fill_after_write must be auto, always or never"
                    ));
                } else {
                    return Err(format!(
                        "unknown mount option {opt:?} (known: allow_other, allow_root, default_permissions, ro, rw, \
                         suid, nosuid, dev, nodev, exec, noexec, atime, relatime, strictatime, noatime, nodiratime, lazytime, sync, async, dirsync, threads=N, \
                         poll_us=N, writeback_cache, no_writeback_cache, fill_after_write=auto|always|never, norecovery, acl, noacl, selinux_labels, noselinux_labels)"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Rules between options, checked once all are applied: `norecovery`
    /// needs `ro` (as on ext4 and XFS).
    pub fn check(&self) -> Result<(), String> {
        if self.norecovery && !self.read_only {
            return Err(
                "mount option \"norecovery\" needs \"ro\": a read-write mount always recovers the pool"
                    .into(),
            );
        }
        Ok(())
    }

    pub(crate) fn to_config(&self) -> fuser::Config {
        let mut o = vec![
            MountOption::DefaultPermissions,
            MountOption::FSName(self.fsname.clone()),
            // Passed to the kernel as an option: fuser's direct mount(2) drops Subtype.
            MountOption::CUSTOM("subtype=terrace".into()),
            if self.read_only {
                MountOption::RO
            } else {
                MountOption::RW
            },
            if self.exec {
                MountOption::Exec
            } else {
                MountOption::NoExec
            },
        ];
        if self.suid {
            o.push(MountOption::Suid);
        }
        if self.dev {
            o.push(MountOption::Dev);
        }
        // The daemon keeps access times itself (the kernel leaves them to a
        // FUSE file system); the kernel is told only about noatime.
        if self.atime == AtimeOption::Never {
            o.push(MountOption::NoAtime);
        }
        if self.sync {
            o.push(MountOption::Sync);
        }
        if self.dirsync {
            o.push(MountOption::DirSync);
        }
        let mut c = fuser::Config::default();
        c.mount_options = o;
        c.acl = if self.allow_other {
            SessionACL::All
        } else if self.allow_root {
            SessionACL::RootAndOwner
        } else {
            SessionACL::Owner
        };
        c.n_threads = Some(self.threads.max(1));
        c.clone_fd = self.threads > 1;
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_options_parse() {
        let mut o = MountOptions::default();
        for s in ["allow_other", "ro", "noatime", "threads=4"] {
            o.apply(s).unwrap();
        }
        assert!(o.allow_other && o.read_only && o.atime == AtimeOption::Never && o.threads == 4);
        for (opt, want) in [
            ("strictatime", AtimeOption::Strict),
            ("relatime", AtimeOption::Relative),
            ("nodiratime", AtimeOption::Relative),
        ] {
            o.apply(opt).unwrap();
            assert_eq!(o.atime, want, "{opt}");
        }
        o.apply("noatime").unwrap();
        assert!(o.apply("bogus").is_err());
        o.apply("rw").unwrap();
        o.apply("norecovery").unwrap();
        assert!(o.check().unwrap_err().contains("needs \"ro\""));
        o.apply("ro").unwrap();
        o.check().unwrap();
        assert!(o.apply("threads=0").is_err());
        assert_eq!(o.poll_us, DEFAULT_POLL_US);
        o.apply("poll_us=0").unwrap();
        assert_eq!(o.poll_us, 0);
        assert!(o.apply("poll_us=fast").is_err());
        assert!(o.apply("poll_us=20000").is_err());
        assert!(
            !o.writeback_cache,
            "the kernel's writeback cache is off by default"
        );
        o.apply("writeback_cache").unwrap();
        assert!(o.writeback_cache);
        o.apply("no_writeback_cache").unwrap();
        assert!(!o.writeback_cache);
        assert_eq!(o.fill_after_write, FillOption::Auto);
        o.apply("fill_after_write=never").unwrap();
        assert_eq!(o.fill_after_write, FillOption::Never);
        o.apply("fill_after_write=always").unwrap();
        assert_eq!(o.fill_after_write, FillOption::Always);
        let e = o.apply("fill_after_write=sometimes").unwrap_err();
        assert!(e.contains("auto, always or never"), "{e}");
        let root = MountOptions::for_user(0);
        assert!(root.suid && root.dev);
        let user = MountOptions::for_user(1000);
        assert!(!user.suid && !user.dev);
        let c = root.to_config();
        assert!(c.mount_options.contains(&MountOption::Suid));
        assert!(c.mount_options.contains(&MountOption::Dev));
        let c = o.to_config();
        assert!(c.mount_options.contains(&MountOption::DefaultPermissions));
        assert_eq!(c.acl, SessionACL::All);
    }
}
