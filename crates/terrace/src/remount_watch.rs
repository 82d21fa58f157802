//! Read-only remounts reach the daemon through the mount table: FUSE sends
//! nothing when `mount -o remount,ro MNT` (or `,rw`) changes a mount, so a
//! thread watches `/proc/self/mountinfo` (the kernel wakes `poll` with
//! POLLPRI on every change of the mount table; a one-second timeout covers
//! anything missed) and freezes or thaws the pool (core `freeze.rs`).

use std::io::{Read, Seek};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;
use terrace_core::Fs;

/// Undoes mountinfo's octal escapes (`\040` space, `\011` tab, `\012`
/// newline, `\134` backslash).
fn unescape(field: &str) -> String {
    let b = field.as_bytes();
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

/// Whether the (last) mount on `mnt` in `mountinfo` is read-only — by its
/// per-mount options or its super options; `None` when nothing is mounted
/// there.
pub fn mount_is_read_only(mountinfo: &str, mnt: &Path) -> Option<bool> {
    let want = mnt.to_string_lossy();
    let mut found = None;
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        if fields.len() < 6 || unescape(fields[4]) != want {
            continue;
        }
        let ro = |opts: &str| opts.split(',').any(|o| o == "ro");
        let super_opts = line
            .split_once(" - ")
            .and_then(|(_, rest)| rest.split(' ').nth(2))
            .unwrap_or("");
        found = Some(ro(fields[5]) || ro(super_opts));
    }
    found
}

/// Starts the watcher of the mount on `mnt`; it ends with the file system
/// (it holds a weak reference) or when the mount is gone.
pub fn spawn(fs: &Arc<Fs>, mnt: PathBuf, log: fn(String)) {
    let weak: Weak<Fs> = Arc::downgrade(fs);
    let _ = std::thread::Builder::new()
        .name("terrace-remount".into())
        .spawn(move || watch(weak, &mnt, log));
}

fn watch(weak: Weak<Fs>, mnt: &Path, log: fn(String)) {
    let Ok(mut f) = std::fs::File::open("/proc/self/mountinfo") else {
        log(
            "cannot watch /proc/self/mountinfo: a read-only remount will not freeze the pool"
                .into(),
        );
        return;
    };
    let mut seen_mounted = false;
    let mut text = String::new();
    loop {
        text.clear();
        if f.rewind().is_err() || f.read_to_string(&mut text).is_err() {
            return;
        }
        let Some(fs) = weak.upgrade() else { return };
        match mount_is_read_only(&text, mnt) {
            None if seen_mounted => return, // unmounted
            None => {}
            Some(ro) => {
                seen_mounted = true;
                if ro && !fs.is_frozen() && !fs.is_read_only() {
                    match fs.freeze() {
                        Ok(()) => log(format!(
                            "{} remounted read-only: cached data written back, pool marked clean; nothing is written until it is remounted read-write",
                            mnt.display()
                        )),
                        Err(e) => log(format!(
                            "{} remounted read-only, but the pool could not be made clean: {e}",
                            mnt.display()
                        )),
                    }
                } else if !ro && fs.is_frozen() {
                    match fs.thaw() {
                        Ok(()) => log(format!("{} remounted read-write", mnt.display())),
                        Err(e) => log(format!(
                            "{} remounted read-write; marking the pool in use failed: {e}",
                            mnt.display()
                        )),
                    }
                }
            }
        }
        drop(fs);
        let mut p = libc::pollfd {
            fd: f.as_raw_fd(),
            events: libc::POLLPRI,
            revents: 0,
        };
        // Safety: `p` is one valid pollfd for the duration of the call, and
        // the descriptor stays open (owned by `f`) until after it.
        unsafe { libc::poll(&mut p, 1, Duration::from_secs(1).as_millis() as i32) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
97 22 0:52 / /mnt/a\\040b rw,nosuid,nodev,relatime shared:60 - fuse.terrace /dev/shm/p.pm rw,user_id=0,group_id=0
98 22 0:53 / /mnt/c ro,nosuid,relatime shared:61 - fuse.terrace /dev/shm/q.pm ro,user_id=0
99 22 0:54 / /mnt/d rw,relatime shared:62 - fuse.terrace /dev/shm/r.pm ro,user_id=0
";

    #[test]
    fn read_only_is_read_from_the_mount_or_its_super_options() {
        assert_eq!(mount_is_read_only(INFO, Path::new("/mnt/a b")), Some(false));
        assert_eq!(mount_is_read_only(INFO, Path::new("/mnt/c")), Some(true));
        assert_eq!(mount_is_read_only(INFO, Path::new("/mnt/d")), Some(true));
        assert_eq!(mount_is_read_only(INFO, Path::new("/mnt/e")), None);
    }

    #[test]
    fn escapes_are_undone() {
        assert_eq!(unescape("/a\\040b\\134c\\011"), "/a b\\c\t");
        assert_eq!(unescape("/plain\\"), "/plain\\");
    }
}
