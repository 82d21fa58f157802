//! Set-user-ID and set-group-ID bits after a modification, as the Linux VFS
//! decides them (`should_remove_suid`, `setattr_should_drop_sgid`).
//!
//! Under `FUSE_HANDLE_KILLPRIV_V2` the kernel leaves this to the file system:
//! it flags unprivileged writes (`FUSE_WRITE_KILL_SUIDGID`) but says nothing
//! on `fallocate`, and for truncates and chowns it only forwards the request.
//! So the adapter learns what the VFS would know about the caller — whether it
//! holds `CAP_FSETID` and which groups it is in — from `/proc/PID/status` of
//! the requesting thread, and applies the rules below:
//! - a modification of a regular file by a caller without `CAP_FSETID` drops
//!   set-user-ID, and drops set-group-ID when the file is group-executable or
//!   the caller is not in the file's group;
//! - chown drops set-user-ID whoever calls, and set-group-ID as above (with
//!   `CAP_FSETID` keeping it);
//! - directories keep their bits (set-group-ID there means inheritance).
//!
//! When `/proc` cannot be read (the thread is gone), the caller counts as
//! privileged only if it is uid 0 and as a member only of its own fsgid.
//!
//! Capabilities count only in the daemon's own user namespace (the
//! mount's): `CapEff` shows a task's capabilities in *its* namespace, and a
//! user who made one of their own (`unshare -r`) holds them all there but
//! none over this mount's files, which the kernel checks against the
//! initial namespace (`capable()`). Counted, they let such a user keep the
//! set-user-ID bit of a file they rewrote, and run `fstrim`.

use fuser::Request;
use std::fs;
use std::sync::OnceLock;

/// Bit of `CAP_FSETID` in a capability set.
const CAP_FSETID: u32 = 4;
/// Bit of `CAP_SYS_ADMIN` in a capability set.
const CAP_SYS_ADMIN: u32 = 21;

/// The identity of the process behind one request. What /proc says of it is
/// read once, on first need (most modifications touch files without set-ID
/// bits and need nothing).
#[derive(Debug)]
pub struct Caller {
    /// File-system uid.
    pub uid: u32,
    /// File-system gid.
    pub gid: u32,
    /// The requesting thread, to read its /proc status from.
    pid: Option<u32>,
    /// The kernel said the caller lacks `CAP_FSETID` (`FUSE_WRITE_KILL_SUIDGID`).
    known_unprivileged: bool,
    status: OnceLock<ProcStatus>,
}

/// What `/proc/PID/status` says of capabilities and groups.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ProcStatus {
    /// `CapEff:` as a bit set.
    pub cap_eff: Option<u64>,
    /// `Groups:` (supplementary groups).
    pub groups: Option<Vec<u32>>,
}

/// Parses the lines of `/proc/PID/status` this module needs.
pub fn parse_proc_status(text: &str) -> ProcStatus {
    let mut st = ProcStatus::default();
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("CapEff:") {
            st.cap_eff = u64::from_str_radix(v.trim(), 16).ok();
        } else if let Some(v) = line.strip_prefix("Groups:") {
            st.groups = v
                .split_whitespace()
                .map(|g| g.parse::<u32>().ok())
                .collect::<Option<Vec<u32>>>();
        }
    }
    st
}

impl Caller {
    /// The caller of `req` (its capabilities and groups are read from /proc
    /// when first needed).
    pub fn of(req: &Request) -> Caller {
        Caller {
            uid: req.uid(),
            gid: req.gid(),
            pid: Some(req.pid()),
            known_unprivileged: false,
            status: OnceLock::new(),
        }
    }

    /// A caller known only by its ids (nothing read from /proc).
    pub fn from_ids(uid: u32, gid: u32) -> Caller {
        Caller::with_status(uid, gid, ProcStatus::default())
    }

    /// A caller with the given capability set and supplementary groups.
    pub fn with_status(uid: u32, gid: u32, st: ProcStatus) -> Caller {
        Caller {
            uid,
            gid,
            pid: None,
            known_unprivileged: false,
            status: OnceLock::from(st),
        }
    }

    /// The same caller, known (from the kernel) to lack `CAP_FSETID`.
    pub fn unprivileged(mut self) -> Caller {
        self.known_unprivileged = true;
        self
    }

    fn status(&self) -> &ProcStatus {
        self.status.get_or_init(|| match self.pid {
            Some(pid) => {
                let mut st = fs::read_to_string(format!("/proc/{pid}/status"))
                    .map(|t| parse_proc_status(&t))
                    .unwrap_or_default();
                if st.cap_eff.is_some() && !in_daemons_user_namespace(pid) {
                    st.cap_eff = Some(0);
                }
                st
            }
            None => ProcStatus::default(),
        })
    }

    /// The caller may keep set-ID bits on what it modifies (`CAP_FSETID`).
    pub fn has_fsetid(&self) -> bool {
        if self.known_unprivileged {
            return false;
        }
        match self.status().cap_eff {
            Some(caps) => caps & (1 << CAP_FSETID) != 0,
            None => self.uid == 0,
        }
    }

    /// The caller may administer the file system (`CAP_SYS_ADMIN`), as
    /// `FITRIM` asks of it on ext4.
    pub fn has_sys_admin(&self) -> bool {
        match self.status().cap_eff {
            Some(caps) => caps & (1 << CAP_SYS_ADMIN) != 0,
            None => self.uid == 0,
        }
    }

    /// The caller is in group `gid` (its fsgid or a supplementary group).
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || (self.status().groups.as_ref()).is_some_and(|g| g.contains(&gid))
    }
}

/// Whether task `pid` is in the daemon's user namespace. Not when its
/// namespace cannot be read: its capabilities then do not count.
fn in_daemons_user_namespace(pid: u32) -> bool {
    static OURS: OnceLock<Option<std::path::PathBuf>> = OnceLock::new();
    let ours = OURS.get_or_init(|| fs::read_link("/proc/self/ns/user").ok());
    match (ours, fs::read_link(format!("/proc/{pid}/ns/user"))) {
        (Some(ours), Ok(theirs)) => *ours == theirs,
        _ => false,
    }
}

/// Would the VFS drop set-group-ID of a file with `mode` and group `file_gid`
/// changed by `caller` (`setattr_should_drop_sgid`)?
fn drops_sgid(mode: u32, file_gid: u32, caller: &Caller) -> bool {
    mode & libc::S_ISGID != 0
        && (mode & libc::S_IXGRP != 0 || !(caller.in_group(file_gid) || caller.has_fsetid()))
}

/// Permission bits (`0o7777`) after `caller` modified the data or size of a
/// file with `mode` (file type bits included) and group `file_gid`.
pub fn bits_after_modification(mode: u32, file_gid: u32, caller: &Caller) -> u32 {
    let mut m = mode & 0o7777;
    if mode & libc::S_IFMT != libc::S_IFREG || m & 0o6000 == 0 || caller.has_fsetid() {
        return m;
    }
    m &= !libc::S_ISUID;
    if drops_sgid(mode, file_gid, caller) {
        m &= !libc::S_ISGID;
    }
    m
}

/// Permission bits after `caller` changed the owner or group of a file.
pub fn bits_after_chown(mode: u32, file_gid: u32, caller: &Caller) -> u32 {
    let mut m = mode & 0o7777;
    if mode & libc::S_IFMT == libc::S_IFDIR {
        return m;
    }
    m &= !libc::S_ISUID;
    if drops_sgid(mode, file_gid, caller) {
        m &= !libc::S_ISGID;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    const REG: u32 = libc::S_IFREG;

    fn user(groups: &[u32]) -> Caller {
        Caller::with_status(
            1000,
            1000,
            ProcStatus {
                cap_eff: Some(0),
                groups: Some(groups.to_vec()),
            },
        )
    }

    #[test]
    fn a_task_of_this_process_is_in_the_daemons_user_namespace() {
        assert!(in_daemons_user_namespace(std::process::id()));
        // A task that is gone is in none.
        assert!(!in_daemons_user_namespace(u32::MAX - 1));
    }

    #[test]
    fn proc_status_gives_capabilities_and_groups() {
        let st = parse_proc_status(
            "Name:\tx\nUid:\t0\t0\t0\t0\nGroups:\t4 24 27 \nCapEff:\t000001ffffffffff\n",
        );
        assert_eq!(st.cap_eff, Some(0x1ff_ffff_ffff));
        assert_eq!(st.groups, Some(vec![4, 24, 27]));
        let st = parse_proc_status("Groups:\t\nCapEff:\t0000000000000000\n");
        assert_eq!(st.groups, Some(vec![]));
        assert_eq!(st.cap_eff, Some(0));
        assert_eq!(parse_proc_status("garbage"), ProcStatus::default());
    }

    #[test]
    fn an_unprivileged_modification_drops_set_id_bits_like_xfstests_683_expects() {
        let nobody = user(&[]);
        // (mode before, mode after) from generic/683.out (file group 0).
        for (before, after) in [
            (0o6666, 0o666),
            (0o6676, 0o676),
            (0o6766, 0o766),
            (0o6777, 0o777),
            (0o2676, 0o676),
            (0o2777, 0o777),
        ] {
            assert_eq!(
                bits_after_modification(REG | before, 0, &nobody),
                after,
                "{before:o}"
            );
        }
    }

    #[test]
    fn a_member_of_the_files_group_keeps_set_group_id_without_group_execute() {
        let member = user(&[4242]);
        assert_eq!(bits_after_modification(REG | 0o6666, 4242, &member), 0o2666);
        assert_eq!(bits_after_modification(REG | 0o6676, 4242, &member), 0o676);
        let by_fsgid = Caller::from_ids(1000, 4242);
        assert_eq!(
            bits_after_modification(REG | 0o2666, 4242, &by_fsgid),
            0o2666
        );
    }

    #[test]
    fn cap_fsetid_keeps_every_bit_and_directories_keep_theirs() {
        let root = Caller::with_status(
            0,
            0,
            ProcStatus {
                cap_eff: Some(1 << CAP_FSETID),
                groups: Some(vec![]),
            },
        );
        assert_eq!(bits_after_modification(REG | 0o6777, 5, &root), 0o6777);
        let root_without_cap = Caller::with_status(
            0,
            0,
            ProcStatus {
                cap_eff: Some(0),
                groups: Some(vec![]),
            },
        );
        assert_eq!(
            bits_after_modification(REG | 0o6777, 5, &root_without_cap),
            0o777
        );
        assert_eq!(
            bits_after_modification(libc::S_IFDIR | 0o2777, 5, &user(&[])),
            0o2777
        );
        assert!(Caller::from_ids(0, 0).has_fsetid());
        assert!(!Caller::from_ids(7, 7).has_fsetid());
        assert!(!Caller::from_ids(0, 0).unprivileged().has_fsetid());
    }

    #[test]
    fn chown_drops_set_user_id_even_for_root() {
        let root = Caller::with_status(
            0,
            0,
            ProcStatus {
                cap_eff: Some(!0),
                groups: Some(vec![]),
            },
        );
        assert_eq!(bits_after_chown(REG | 0o6755, 9, &root), 0o755);
        assert_eq!(bits_after_chown(REG | 0o6745, 9, &root), 0o2745);
        assert_eq!(bits_after_chown(libc::S_IFDIR | 0o6755, 9, &root), 0o6755);
    }
}
